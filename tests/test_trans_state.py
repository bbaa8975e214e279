"""State the write core keeps from one transaction to the next: per-AG
state (decoded AG headers and btree roots), the running superblock
counters and the journal's count of new bytes.  Each must be exactly what
a fresh read of the image would give, after commits, aborts and
checkpoints; xfs_repair -n judges the image at the end."""
import shutil
import subprocess
import sys

import pytest

from fstool.format.structs import AGF, AGI, SB
from fstool.ns.namespace import Meta, Namespace
from fstool.ns.writer import Writer

TS = 1_700_000_000 * 10**9


def _mkfs(img, size="128m"):
    subprocess.run([sys.executable, "-m", "fstool", "mkfs", "-q", str(img), "--size", size],
                   check=True)


def _repair_clean(img):
    if not shutil.which("xfs_repair"):
        pytest.skip("xfs_repair (xfsprogs) is not installed")
    from fixtures.fusemount import repair_clean
    repair_clean(img)


@pytest.fixture
def w(tmp_path):
    """A Writer on a fresh image; the image repair-clean once it is closed."""
    img = tmp_path / "a.img"
    _mkfs(img)
    with Writer(img, timestamp_ns=TS) as writer:
        yield writer
    _repair_clean(img)


def _headers(w, agno):
    """The AGF and AGI as their buffers hold them now."""
    ag = w.ag(agno)
    return AGF.unpack(ag.agf_buf.data), AGI.unpack(ag.agi_buf.data)


def _op(w, fn, ns=None):
    """One operation in a transaction of its own, as the mount runs them
    (with the caller's namespace, kept across operations, when given)."""
    w.begin()
    ns = ns or Namespace(w, TS)
    try:
        out = fn(ns)
        ns.finish()
        w.commit()
    except BaseException:
        if w.tx is not None:
            w.abort()
        raise
    ns.committed()
    return out


def _first_perag(w):
    """AG 0's PerAG after a first create committed (between transactions)."""
    _op(w, lambda ns: ns.create_file(w.sb.rootino, b"a", Meta(ctime_ns=TS)))
    w.begin()
    ag = w.ag(0)
    w.commit()
    return ag


def _fresh_perag(w, before):
    """In a transaction of its own: AG 0's PerAG is a new one, decoded from
    the headers as they are; its AGI."""
    w.begin()
    after = w.ag(0)
    assert after is not before
    f, i = _headers(w, 0)
    assert after.agf == f and after.agi == i
    w.commit()
    return i


def test_perag_kept_and_rebound(w):
    first = _first_perag(w)
    root = w.sb.rootino
    _op(w, lambda ns: ns.create_file(root, b"b", Meta(ctime_ns=TS)))
    w.begin()
    again = w.ag(0)
    # the same object, joined to the new transaction, its headers as
    # the buffers hold them
    assert again is first
    assert again.tx is w.tx
    f, i = _headers(w, 0)
    assert again.agi == i and again.agf == f
    w.commit()


def test_perag_dropped_after_abort(w):
    root = w.sb.rootino
    before = _first_perag(w)
    free_before = before.agi["agi_freecount"]
    # an aborted create: the header buffers go back to the bytes the
    # last commit left, but the decoded state had counted the inode
    w.begin()
    Namespace(w, TS).create_file(root, b"gone", Meta(ctime_ns=TS))
    assert w.ag(0).agi["agi_freecount"] == free_before - 1
    w.abort()
    assert _fresh_perag(w, before)["agi_freecount"] == free_before
    for k in range(20):
        _op(w, lambda ns, k=k: ns.create_file(root, b"f%d" % k, Meta(ctime_ns=TS)))


def test_perag_dropped_after_checkpoint(w):
    root = w.sb.rootino
    before = _first_perag(w)
    # the checkpoint stamps its LSN and CRC into the logged headers:
    # the decoded copy would write the old ones back
    w.sync()
    _fresh_perag(w, before)
    _op(w, lambda ns: ns.create_file(root, b"b", Meta(ctime_ns=TS)))


def test_counters_and_new_bytes_after_many_transactions(tmp_path):
    """Creates, directories across AGs, file data, removals and aborts, one
    transaction each: the superblock counters stay the sum over the AGs and
    the journal's count of new bytes the sum over its new buffers."""
    from fstool.ns.fileio import FileIO
    img = tmp_path / "a.img"
    _mkfs(img, "256m")
    with Writer(img, timestamp_ns=TS) as w:
        io = FileIO(w)
        root = w.sb.rootino
        j = w.journal
        dirs = [_op(w, lambda ns, d=d: ns.mkdir(root, b"d%d" % d, Meta(perm=0o755,
                                                                        ctime_ns=TS)))
                for d in range(6)]
        assert len({w.inodes.ino_split(d)[0] for d in dirs}) > 1     # several AGs
        n = 0
        for k in range(240):
            parent = dirs[k % len(dirs)]
            if k % 17 == 5:
                # an abort after the allocations and the directory change
                w.begin()
                Namespace(w, TS).create_file(parent, b"x%d" % k, Meta(ctime_ns=TS))
                w.abort()
                continue
            ino = _op(w, lambda ns: ns.create_file(parent, b"f%d" % k, Meta(ctime_ns=TS)))
            n += 1
            if k % 7 == 0:
                io.write(ino, 0, bytes([k % 251]) * (4096 * (1 + k % 5)))
                io.release(ino)
            if k % 11 == 0:
                _op(w, lambda ns: ns.unlink(parent, b"f%d" % k))
            if k % 50 == 0:
                w.sync()
            assert j._new_bytes == sum(b.length for b in j.new.values())
        w.begin()
        sbf = SB.unpack(w.tx.read_buf(0, w.sb.sectsize, _sb_type(), agno=0, block=0).data)
        icount = ifree = fdblocks = 0
        for agno in range(w.sb.agcount):
            f, i = _headers(w, agno)
            icount += i["agi_count"]
            ifree += i["agi_freecount"]
            fdblocks += f["agf_freeblks"] + f["agf_flcount"] + f["agf_btreeblks"]
        assert (sbf["sb_icount"], sbf["sb_ifree"], sbf["sb_fdblocks"]) == \
            (icount, ifree, fdblocks)
        w.commit()
        assert n > 200
    _repair_clean(img)
    # the kernel's own count of what the image holds (lazy counters are
    # recomputed by xfs_repair, so compare with xfs_db's sum as well)
    if shutil.which("xfs_db"):
        out = subprocess.run(["xfs_db", "-r", "-c", "sb 0", "-c", "p icount ifree fdblocks",
                              str(img)], capture_output=True, text=True).stdout
        got = dict(line.split(" = ") for line in out.strip().splitlines())
        assert int(got["icount"]) == icount and int(got["ifree"]) == ifree
        assert int(got["fdblocks"]) == fdblocks


def _sb_type():
    from fstool.io import verify as V
    return V.SB


@pytest.mark.parametrize("count", [3, 40, 400])      # shortform, block, leaf
def test_directory_kept_across_transactions(tmp_path, count):
    """One Namespace across transactions (as the mount keeps it): a
    directory read before a change, changed, or changed and aborted is
    seen as it is now, in every form."""
    img = tmp_path / "a.img"
    _mkfs(img)
    with Writer(img, timestamp_ns=TS) as w:
        root = w.sb.rootino
        ns = Namespace(w, TS)

        def op(fn):
            return _op(w, lambda _ns: fn(), ns)

        d = op(lambda: ns.mkdir(root, b"d", Meta(perm=0o755, ctime_ns=TS)))
        names = [b"name-%05d" % k for k in range(count)]
        for k, name in enumerate(names):
            assert ns.lookup_child(d, name) is None
            ino = op(lambda name=name: ns.create_file(d, name, Meta(ctime_ns=TS)))
            assert ns.lookup_child(d, name) == (ino, 1)
        # changed and aborted: the name is gone again, outside a
        # transaction and inside the next one
        w.begin()
        ns.create_file(d, b"aborted", Meta(ctime_ns=TS))
        assert ns.lookup_child(d, b"aborted") is not None
        w.abort()
        assert ns.lookup_child(d, b"aborted") is None
        op(lambda: ns.unlink(d, names[0]))
        assert ns.lookup_child(d, names[0]) is None
        w.begin()
        assert ns.lookup_child(d, b"aborted") is None
        assert ns.lookup_child(d, names[-1]) is not None
        w.commit()
        listed = sorted(n for n, _i, _f, _c in ns.readdir(d) if n not in (b".", b".."))
        assert listed == sorted(names[1:])
    _repair_clean(img)


def test_nearest_free_chunk_kept_across_transactions(w):
    """The finobt record nearest a parent, noted by one transaction for the
    next (no finobt search while the finobt is unchanged): before every
    create, each note still in force names the record a fresh search
    finds.  Frees in a chunk nearer the parent put that chunk back in the
    finobt, which must end the note (the next create goes there)."""
    from fstool.alloc.inodes import InodeAllocator
    root = w.sb.rootino
    d = _op(w, lambda ns: ns.mkdir(root, b"d", Meta(perm=0o755, ctime_ns=TS)))
    searches = []
    real = InodeAllocator._search_free_chunk

    def counted(self, ag, pagino):
        searches.append(pagino)
        return real(self, ag, pagino)

    def check_notes():
        w.begin()
        try:
            for agno in range(w.sb.agcount):
                ag = w.ag(agno)
                for pagino, (gen, rec) in ag.fino_near.items():
                    if gen == ag.fino.gen:
                        assert real(w.inodes, ag, pagino).rec == rec
        finally:
            w.commit()

    w.inodes._search_free_chunk = counted.__get__(w.inodes)
    inos = {}
    for k in range(150):
        check_notes()
        inos[k] = _op(w, lambda ns, k=k: ns.create_file(d, b"f%d" % k, Meta(ctime_ns=TS)))
    # three chunks' worth: most creates found their chunk without a search
    assert len(searches) < 20
    first_chunk = min(inos.values()) >> 6
    assert len({i >> 6 for i in inos.values()}) >= 3
    # free one inode of the first (nearest) chunk: the next create takes it
    victim = min(inos, key=inos.get)
    _op(w, lambda ns: ns.unlink(d, b"f%d" % victim))
    check_notes()
    again = _op(w, lambda ns: ns.create_file(d, b"again", Meta(ctime_ns=TS)))
    assert again == inos[victim] and again >> 6 == first_chunk
    for k in range(150, 200):
        check_notes()
        _op(w, lambda ns, k=k: ns.create_file(d, b"f%d" % k, Meta(ctime_ns=TS)))
