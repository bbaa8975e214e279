"""The directory form modules (fstool.fs.dirform) on the kernel-written
fixture: one form name per directory for every caller, the verifiers
silent on what the kernel wrote and listing every fault of a damaged
block, the lenient read agreeing with the reader on a sound directory."""
import pytest

import fstool
from fstool.fs import dir as xdir
from fstool.fs.dirform import FORMS, data, form, free, leaf, sf
from fstool.format import constants as C
from fstool.io import verify as V

DIRS = {"/dirs/d2": "shortform", "/dirs/d50": "block", "/dirs/d500": "leaf",
        "/dirs/d10000": "node"}


def _data_blocks(node, kind):
    """(fsb, buf) of every data block, verified."""
    bt = V.DIR3_BLOCK if kind == "block" else V.DIR3_DATA
    return [(fsb, data.read_block(node, fsb, bt)) for fsb in data.block_fsbs(node)]


def test_verifiers_pass_and_salvage_agrees_on_every_form(kernel_img):
    with fstool.open_image(kernel_img) as fs:
        sb = fs.sb
        for path, want in DIRS.items():
            node = fs.lookup(path)
            kind = form(node)
            assert kind == want and kind in FORMS and xdir.form(node) == kind
            truth = sorted(xdir.iter_entries(node))
            assert len(truth) == int(path.rsplit("d", 1)[1])
            if kind == "shortform":
                parent, ents, faults = sf.verify(node.fork_bytes(), node.size, sb.has_ftype,
                                                 data.HDR + 2 * data.MIN_ENTSIZE,
                                                 sb.dirblksize)
                assert faults == [] and parent == xdir.parent(node)
                assert sorted(e[:3] for e in ents) == truth
                assert sf.salvage(node.fork_bytes(), node.size, sb.has_ftype) == \
                    (parent, [e[:3] for e in ents])
                continue
            salvaged = []
            bests = {}
            for fsb, buf in _data_blocks(node, kind):
                salvaged += data.salvage(buf, kind == "block", sb.has_ftype)
                frees = [(ln, off) for off, ln, is_free in _regions(buf, kind)
                         if is_free]
                longest, sound = data.bestfree_verify(buf, frees)
                assert sound, (path, fsb)
                bests[fsb // sb.dirblkfsbs] = longest
            assert sorted(e for e in salvaged if e[0] not in (b".", b"..")) == truth
            if kind == "leaf":
                buf = data.read_block(node, leaf.leaf_fsb(sb.blocklog), V.DIR3_LEAF)
                count, stale = leaf.leaf_count_stale(buf)
                _sum, faults = leaf.tally(buf, leaf.LEAF_HDR, count, stale, node.ino, 0)
                assert faults == []
                assert free.bests_faults(leaf.leaf_bests(buf), bests, 0) == []
                assert list(leaf.hash_faults(node, buf, leaf.LEAF_HDR, count, False)) == []
            if kind == "node":
                free_fsb = C.XFS_DIR2_FREE_OFFSET >> sb.blocklog
                buf = data.read_block(node, free_fsb, V.DIR3_FREE)
                assert free.verify(buf, free_fsb, 0, sb.dirblksize, bests) == []


def test_incremental_writer_tells_forms_by_the_same_names(kernel_img, tmp_path):
    """The incremental writer (fstool.ns.dirops.Dir) names each
    directory's form as the reader's detector does."""
    import shutil
    from fstool.ns.dirops import Dir
    from fstool.ns.writer import Writer
    img = tmp_path / "copy.img"
    shutil.copyfile(kernel_img, img)
    with Writer(str(img), timestamp_ns=0) as w:
        for path, want in DIRS.items():
            node = w.fs.lookup(path)
            assert Dir(w, node.ino, 0).form() == form(node) == want


def _regions(buf, kind):
    from fstool.ns.dirdata import regions
    end = data.data_end(buf) if kind == "block" else len(buf)
    return regions(buf, data.HDR, end)


def test_shortform_verify_lists_every_fault(kernel_img):
    """Faults in one fork (the second name made the first's, a count one
    too high, a size one past the entries, whose next byte is no name):
    every one comes back, in the order found, with the entries parsed."""
    with fstool.open_image(kernel_img) as fs:
        node = fs.lookup("/dirs/d2")
        fork = bytearray(node.fork_bytes())
        size = node.size
        args = (fs.sb.has_ftype, data.HDR + 2 * data.MIN_ENTSIZE, fs.sb.dirblksize)
    parent, ents, faults = sf.verify(bytes(fork), size, *args)
    assert faults == [] and len(ents) == 2
    (n0, _i0, _f0, _x0), (n1, _i1, _f1, _x1) = ents
    assert len(n0) == len(n1) and fork[size:size + 1] == b"\0"
    fork[fork.index(n1):fork.index(n1) + len(n1)] = n0
    fork[0] += 1
    parent2, ents2, faults = sf.verify(bytes(fork), size + 1, *args)
    assert [(f[0], f[2]) for f in faults] == [
        ("DIR_NAME", "name"), ("DIR_CORRUPT", "namelen"), ("DIR_CORRUPT", "count"),
        ("DIR_CORRUPT", "di_size")]
    assert faults[2][3] == dict(expected=2, found=3)
    assert parent2 == parent and [e[0] for e in ents2] == [n0, n0]


def test_free_verify_lists_every_fault(kernel_img):
    """A free block with a wrong best and a wrong count of used bests:
    both faults, with the index of the best."""
    with fstool.open_image(kernel_img) as fs:
        sb = fs.sb
        node = fs.lookup("/dirs/d10000")
        free_fsb = C.XFS_DIR2_FREE_OFFSET >> sb.blocklog
        buf = bytearray(data.read_block(node, free_fsb, V.DIR3_FREE))
    firstdb, nvalid, nused = free.free_hdr(buf)
    bests = dict(enumerate(free.free_bests(buf, nvalid)))
    assert free.verify(buf, free_fsb, 0, sb.dirblksize, bests) == []
    stored = free.free_bests(buf, nvalid)
    stored[1] ^= 8
    free.put_free_bests(buf, stored)
    free.put_free_counts(buf, nvalid, nused + 1)
    faults = free.verify(buf, free_fsb, 0, sb.dirblksize, bests)
    assert [(f[0], f[2]) for f in faults] == [("DIR_FREE", "bests"), ("DIR_FREE", "nused")]
    assert faults[0][3] == dict(index=1, expected=bests[1], found=stored[1])
    faults = free.verify(buf, free_fsb, 1, sb.dirblksize, bests)   # the wrong place
    assert [f[2] for f in faults] == ["firstdb"]


@pytest.mark.parametrize("name", [b"a", b"x" * 255])
def test_name_max(name):
    from fstool.fs.dirform import NAME_MAX, name_ok
    assert name_ok(name) and not name_ok(name + b"y" * (NAME_MAX + 1 - len(name)))
    assert not name_ok(b"") and not name_ok(b"a/b") and not name_ok(b"a\0")
