"""File data through the block map (fstool.ns.fileio / fstool.ns.bmap):
a seeded fsx-style run against a shadow copy, judged afterwards by
xfs_repair -n and by the kernel (bytes, SEEK_DATA/SEEK_HOLE, st_blocks);
the same operations run by the kernel on a twin image; btree forms;
errnos; speculative preallocation."""
import errno
import json
import os
import subprocess
import sys

import pytest

from fixtures import fsx, images
from fstool.errors import FsToolError
from fstool.ns.fileio import (FALLOC_FL_COLLAPSE_RANGE, FALLOC_FL_KEEP_SIZE,
                              FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE, FileIO)
from fstool.ns.namespace import Meta, Namespace, owned_blocks
from fstool.ns.writer import Writer

TS = 1_700_000_000 * 10**9


def _mkfs(img, size="128m"):
    # a uuid of its own: the kernel refuses a second mount of a uuid, and
    # other tests mount images made with the fixtures' one
    subprocess.run([sys.executable, "-m", "fstool", "mkfs", "-q", str(img), "--size", size],
                   check=True)


def _files(w, names):
    with w.transaction():
        ns = Namespace(w, TS)
        inos = [ns.create_file(w.sb.rootino, n.encode(), Meta(ctime_ns=TS)) for n in names]
        ns.finish()
    return inos


def _repair_clean(img):
    from fixtures.fusemount import repair_clean
    repair_clean(img)


def _owned(w, ino):
    node = w.fs.inode(ino)
    return node, sum(n for _b, n in owned_blocks(node, False))


def _seek_answers(io, ino, size, bs=4096):
    """(offset, SEEK_DATA answer, SEEK_HOLE answer) at block boundaries and
    next to them; an errno stands for a failure."""
    out = []
    offs = sorted({o for k in range(0, size // bs + 2) for o in (k * bs - 1, k * bs, k * bs + 7)
                   if o >= 0} | {size - 1, size})
    for off in offs[:: max(1, len(offs) // 400)]:
        row = [off]
        for fn in (io.seek_data, io.seek_hole):
            try:
                row.append(fn(ino, off))
            except FsToolError as e:
                row.append(-e.errno)
        out.append(tuple(row))
    return out


def _kernel_seek(fd, off):
    row = [off]
    for whence in (os.SEEK_DATA, os.SEEK_HOLE):
        try:
            row.append(os.lseek(fd, off, whence))
        except OSError as e:
            row.append(-e.errno)
    return tuple(row)


def test_fsx_seeded_against_shadow_repair_and_kernel(tmp_path):
    img = tmp_path / "fsx.img"
    _mkfs(img)
    ops = fsx.make_ops(20261123, 1000, max_size=2 << 20, sparse_every=120)
    shadow = [bytearray() for _ in range(3)]
    forms = set()
    with Writer(img, timestamp_ns=TS) as w:
        inos = _files(w, ["a", "b", "c"])
        io = FileIO(w)

        def watch(i, op):
            if i % 25 == 0:
                for ino in inos:
                    node, owned = _owned(w, ino)
                    forms.add(node.format)
                    assert owned == node.nblocks, (i, op, ino)

        counts = fsx.run_fileio(io, inos, ops, shadow, check_every=100, on_op=watch)
        for ino in inos:
            io.release(ino)
        expect = {}
        for k, ino in enumerate(inos):
            fsx.check_whole(io, ino, shadow[k], "end")
            node, owned = _owned(w, ino)
            assert owned == node.nblocks
            expect[k] = (_seek_answers(io, ino, len(shadow[k])), node.nblocks)
    assert counts["write"] > 200 and counts["falloc"] > 200 and counts.get("sparse")
    assert forms == {2, 3}, "the files went through both extents and btree forms"
    if images.xfsprogs_available():
        _repair_clean(img)
    if not images.loop_available():
        pytest.skip("needs root and a kernel loop mount to compare with the kernel")
    with images.Mounted(img, readonly=True, nouuid=True) as mnt:
        # seeks first: pages a read leaves cached make unwritten extents
        # count as data for the kernel's SEEK_DATA
        for k, name in enumerate(["a", "b", "c"]):
            answers, nblocks = expect[k]
            fd = os.open(mnt / name, os.O_RDONLY)
            try:
                got = [_kernel_seek(fd, a[0]) for a in answers]
                st = os.fstat(fd)
            finally:
                os.close(fd)
            assert got == answers
            assert st.st_blocks == nblocks * 8
        for k, name in enumerate(["a", "b", "c"]):
            assert (mnt / name).read_bytes() == bytes(shadow[k])


@pytest.mark.skipif(not images.loop_available(), reason="needs root and a kernel loop mount")
def test_kernel_twin_same_contents(tmp_path):
    """The operations applied by the kernel to a twin image give the files
    fstool's image holds."""
    ops = fsx.make_ops(7, 500, max_size=1 << 20, sparse_every=100)
    ops = [op for op in ops if op[0] not in ("read", "seek")]
    ours, twin = tmp_path / "ours.img", tmp_path / "twin.img"
    _mkfs(ours)
    _mkfs(twin)
    shadow = [bytearray() for _ in range(3)]
    with Writer(ours, timestamp_ns=TS) as w:
        inos = _files(w, ["a", "b", "c"])
        io = FileIO(w)
        fsx.run_fileio(io, inos, ops, shadow, check_every=0)
        for ino in inos:
            io.release(ino)
    with images.Mounted(twin) as mnt:
        fsx.run_posix([mnt / n for n in "abc"], ops)
        kernel = [(mnt / n).read_bytes() for n in "abc"]
    with images.Mounted(ours, readonly=True, nouuid=True) as mnt:
        mine = [(mnt / n).read_bytes() for n in "abc"]
    assert kernel == [bytes(s) for s in shadow]
    assert mine == kernel
    if images.xfsprogs_available():
        _repair_clean(ours)
        _repair_clean(twin)


def test_btree_forms_grow_and_shrink(tmp_path, monkeypatch):
    """A file of single-block extents grows through the extents format into
    a bmbt of several leaves, and back to the extents format as it is cut
    (the truncate in steps of 40 records, one transaction each)."""
    from fstool.ns import fileio
    monkeypatch.setattr(fileio, "TRUNCATE_STEP", 40)
    img = tmp_path / "bt.img"
    _mkfs(img, "64m")
    bs = 4096
    with Writer(img, timestamp_ns=TS) as w:
        (ino,) = _files(w, ["f"])
        io = FileIO(w)
        shadow = bytearray()
        seen = []
        for k in range(700):
            data = fsx.payload(k, 100)
            io.write(ino, 2 * k * bs, data)
            shadow[len(shadow):] = bytes(2 * k * bs - len(shadow)) + data
            node = w.fs.inode(ino)
            state = (node.format, len(node.bmbt_root()[2]) if node.format == 3 else 0)
            if not seen or seen[-1] != state:
                seen.append(state)
        # extents, then one leaf, then several leaves under the inode root
        assert seen[0] == (2, 0) and (3, 1) in seen and seen[-1][0] == 3 and seen[-1][1] >= 3
        assert len(io.extents(ino)) == 700
        # punch every other extent away, then cut the file short
        for k in range(0, 700, 2):
            io.fallocate(ino, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 2 * k * bs, bs)
            shadow[2 * k * bs:2 * k * bs + 100] = bytes(100)
        assert len(io.extents(ino)) == 350
        assert io.read(ino, 0, len(shadow)) == bytes(shadow)
        commits = []
        orig = w.commit
        monkeypatch.setattr(w, "commit", lambda: (commits.append(1), orig())[1])
        io.truncate(ino, 30 * bs + 5)
        del shadow[30 * bs + 5:]
        assert len(commits) == -(-342 // 40)     # the first one sets the size too
        node, owned = _owned(w, ino)
        assert node.format == 2 and node.nextents == 8 and owned == node.nblocks == 8
        assert io.read(ino, 0, 1 << 20) == bytes(shadow)
        assert io.seek_data(ino, 0) == 2 * bs and io.seek_hole(ino, 2 * bs) == 3 * bs
    if images.xfsprogs_available():
        _repair_clean(img)


def test_errnos_and_unchanged_after_failure(tmp_path):
    img = tmp_path / "e.img"
    _mkfs(img, "64m")
    with Writer(img, timestamp_ns=TS) as w:
        (ino,) = _files(w, ["f"])
        io = FileIO(w)
        io.write(ino, 0, b"x" * 5000)

        def err(fn, *a):
            with pytest.raises(FsToolError) as e:
                fn(*a)
            return e.value.errno
        assert err(io.fallocate, ino, 0, -1, 10) == errno.EINVAL
        assert err(io.fallocate, ino, 0, 0, 0) == errno.EINVAL
        assert err(io.fallocate, ino, FALLOC_FL_PUNCH_HOLE, 0, 10) == errno.EOPNOTSUPP
        assert err(io.fallocate, ino, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE |
                   FALLOC_FL_KEEP_SIZE, 0, 10) == errno.EOPNOTSUPP
        assert err(io.fallocate, ino, 0x100, 0, 10) == errno.EOPNOTSUPP
        assert err(io.fallocate, ino, FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_KEEP_SIZE,
                   0, 4096) == errno.EINVAL
        assert err(io.fallocate, ino, 0, 1 << 62, 1 << 62) == errno.EFBIG
        assert err(io.write, ino, (1 << 63) - 1, b"x") == errno.EFBIG
        assert err(io.truncate, ino, -1) == errno.EINVAL
        assert err(io.seek_data, ino, 5000) == errno.ENXIO
        assert err(io.seek_hole, ino, 9999) == errno.ENXIO
        assert err(io.read, w.sb.rootino, 0, 10) == errno.EISDIR
        before = (io.extents(ino), w.fs.inode(ino).raw)
        assert err(io.fallocate, ino, 0, 0, 1 << 40) == errno.ENOSPC
        assert err(io.write, ino, 1 << 30, b"y" * (80 << 20)) == errno.ENOSPC
        assert (io.extents(ino), w.fs.inode(ino).raw) == before
        assert io.read(ino, 0, 10000) == b"x" * 5000
        # zero range without KEEP_SIZE extends the file with unwritten blocks
        io.fallocate(ino, FALLOC_FL_ZERO_RANGE, 4000, 10000)
        assert io.read(ino, 0, 20000) == b"x" * 4000 + bytes(10000)
        assert any(u for *_r, u in io.extents(ino))
    if images.xfsprogs_available():
        _repair_clean(img)


def test_small_files_written_in_turn_are_adjacent(tmp_path):
    """1,000 small files written one after another (each closed before the
    next) lie in one extent each with no free space between them."""
    import random
    img = tmp_path / "small.img"
    _mkfs(img, "128m")
    rng = random.Random(5)
    with Writer(img, timestamp_ns=TS) as w:
        io = FileIO(w)
        # created first, so that the directory's blocks (which grow as the
        # kernel's do, a block at a time) are not between the files
        inos = _files(w, [f"f{i}" for i in range(1000)])
        for ino in inos:
            size = rng.randrange(1, 40000)
            for off in range(0, size, 4096):       # written in 4 KiB pieces
                io.write(ino, off, fsx.payload(ino + off, min(4096, size - off)))
            io.release(ino)
        spans = []
        for ino in inos:
            ext = io.extents(ino)
            assert len(ext) == 1, (ino, ext)
            spans.append((ext[0][1], ext[0][1] + ext[0][2]))
        lo, hi = min(s for s, _e in spans), max(e for _s, e in spans)
    out = subprocess.run([sys.executable, "-m", "fstool", "frag", "--json", "--top", "50",
                          str(img)], capture_output=True, text=True, check=True)
    f = json.loads(out.stdout)
    # only the directory may be in more extents than it needs (as the
    # kernel's grows): no file is
    assert all(x["type"] == "dir" for x in f["worst"] if x["extents"] > x["ideal"]), f
    gaps = [(s, n) for s, n in _free_extents(img) if s < hi and s + n > lo]
    assert not gaps, f"free space between the files: {gaps[:5]}"
    if images.xfsprogs_available():
        _repair_clean(img)


def _free_extents(img):
    """(fsbno, blocks) of every free extent, from the bnobt of each AG."""
    from fstool import open_image
    from fstool.fs import btree
    out = []
    with open_image(img) as fs:
        for agno in range(fs.sb.agcount):
            agf = fs.agf(agno)
            reader = fs.ag_btree(agno, btree.BNOBT)
            for s, n in reader.ag_records(agf["agf_roots"][0], agf["agf_levels"][0]):
                out.append(((agno << fs.sb.agblklog) | s, n))
    return out


def test_interleaved_appends_stay_in_few_extents(tmp_path):
    """Two files appended 4 KiB at a time, in turn, each end up in a few
    extents: the blocks held past each one's end keep the other away."""
    img = tmp_path / "app.img"
    _mkfs(img, "128m")
    chunk = fsx.payload(1, 4096)
    with Writer(img, timestamp_ns=TS) as w:
        a, b = _files(w, ["a", "b"])
        io = FileIO(w)
        for k in range(2048):                          # 8 MiB each
            io.write(a, k * 4096, chunk)
            io.write(b, k * 4096, chunk)
        io.release(a)
        io.release(b)
        ea, eb = io.extents(a), io.extents(b)
        assert sum(n for _o, _p, n, _u in ea) == sum(n for _o, _p, n, _u in eb) == 2048
        assert len(ea) <= 8 and len(eb) <= 8, (len(ea), len(eb))
        assert io.read(a, (8 << 20) - 4096, 4096) == chunk
    if images.xfsprogs_available():
        _repair_clean(img)


def test_frag_json_counts(tmp_path):
    """fstool frag sees one extent per file written by FileIO in one go."""
    img = tmp_path / "frag.img"
    _mkfs(img, "64m")
    with Writer(img, timestamp_ns=TS) as w:
        inos = _files(w, [f"f{i}" for i in range(20)])
        io = FileIO(w)
        for ino in inos:
            io.write(ino, 0, fsx.payload(ino, 9000))
            io.release(ino)
    out = subprocess.run([sys.executable, "-m", "fstool", "frag", "--json", str(img)],
                         capture_output=True, text=True, check=True)
    f = json.loads(out.stdout)
    assert f["actual"] == f["ideal"] == 20


def test_read_map_gives_what_the_reader_reads(tmp_path):
    """read_map (where the mount's native loop splices a read from, and
    read reads from): the image bytes at its offsets and zeros for its
    holes make exactly what the read-only reader (fstool.open_image) reads,
    over data, holes, unwritten (preallocated) extents laid over stale
    bytes and the end of the file, at random offsets and sizes."""
    import fstool
    import random
    img = tmp_path / "rm.img"
    _mkfs(img, "64m")
    bs = 4096
    rng = random.Random(3)
    with Writer(img, timestamp_ns=TS) as w:
        (ino,) = _files(w, ["f"])
        io = FileIO(w)
        for k in range(60):
            io.write(ino, rng.randrange(0, 3 << 20), fsx.payload(k, rng.randrange(1, 40000)))
        for _ in range(10):
            io.fallocate(ino, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                         rng.randrange(0, 3 << 20), rng.randrange(1, 200000))
        io.fallocate(ino, FALLOC_FL_KEEP_SIZE, 4 << 20, 64 * bs)     # unwritten, past EOF
        io.fallocate(ino, 0, (3 << 20) + 7, 5 * bs)                   # unwritten, inside
        size = w.fs.inode(ino).size
        # what lies under the unwritten extents must not show through
        unwritten = [(b, n) for _o, b, n, u in io.extents(ino) if u]
        assert unwritten
        wfd = os.open(img, os.O_WRONLY)
        for b, n in unwritten:
            os.pwrite(wfd, b"\xee" * (n * bs), w.fs.fsb_to_daddr(b) * 512)
        os.close(wfd)
        fd = os.open(img, os.O_RDONLY)
        reads = []
        try:
            for _ in range(300):
                off = rng.randrange(0, size + bs)
                n = rng.choice([1, 4095, 4096, 131072, 1 << 20, rng.randrange(1, 300000)])
                segs = io.read_map(ino, off, n, 65536)
                got = b"".join(bytes(k) if at < 0 else os.pread(fd, k, at) for at, k in segs)
                assert got == io.read(ino, off, n), (off, n)
                assert all(k <= 65536 for at, k in segs if at < 0)
                reads.append((off, n, got))
        finally:
            os.close(fd)
    with fstool.open_image(img) as fs:
        node = fs.inode(ino)
        for off, n, got in reads:
            assert got == node.read(off, n), (off, n)
