"""The mount's overwrites without a transaction (Volume.write): a write
that changes only data (every block mapped, written, not shared, inside
the size) goes straight to the image; its mtime/ctime are logged with the
next change or checkpoint, never after a later change of the same inode,
and what stat shows meanwhile is what the image holds after."""
from __future__ import annotations

import os

import pytest

from fixtures.fusemount import fstool_image, repair_clean
from fstool.fs.filesystem import Filesystem
from fstool.mount.volume import Volume

FALLOC_FL_KEEP_SIZE = 1


@pytest.fixture(params=["fstool", "modern"])
def geometry(request):
    """fstool mkfs's image, and mkfs.xfs 6.10's default (rmapbt, reflink,
    nrext64, ...) where that xfsprogs is built."""
    return request.param


def _volume(tmp_path, geometry="fstool"):
    if geometry == "modern":
        from fixtures import modern
        if not modern.available():
            pytest.skip("xfsprogs 6.10 is not built (fixtures/modern.py)")
        img = modern.mkfs(tmp_path / "modern.img", size="512m")
    else:
        img = fstool_image(tmp_path, "256m")
    return img, Volume(img)


def _counting(v: Volume) -> list:
    """Every transaction the volume begins from now on, counted."""
    begun = []
    w = v.w
    begin = w.begin

    def counted(*a, **kw):
        begun.append(1)
        return begin(*a, **kw)

    w.begin = counted
    return begun


def _file(v: Volume, name: bytes, size: int):
    fh, a = v.create(v.rootino, name, 0o100644, os.O_RDWR)
    data = bytearray(os.urandom(size))
    v.write(fh, 0, bytes(data))
    v.sync()
    return fh, a.ino, data


def _on_disk(img, ino: int):
    fs = Filesystem(str(img))
    try:
        node = fs.inode(ino)
        return node.stat(), bytes(node.read(0, node.size))
    finally:
        fs.close()


def test_overwrites_take_no_transaction_and_their_times_are_logged(tmp_path, geometry):
    img, v = _volume(tmp_path, geometry)
    fh, ino, data = _file(v, b"f", 256 << 10)
    before = v.getattr(ino)
    begun = _counting(v)
    writes = [(4096, 4096), (5000, 100), (8191, 2), (65536, 32768), (256 * 1024 - 7, 7)]
    for off, n in writes:
        chunk = os.urandom(n)
        assert v.write(fh, off, chunk) == n
        data[off:off + n] = chunk
    assert not begun, "an overwrite of written blocks began a transaction"
    a = v.getattr(ino)
    assert a.mtime_ns == a.ctime_ns and a.mtime_ns >= before.mtime_ns
    assert a.size == before.size and a.blocks == before.blocks
    assert v.read(fh, 0, len(data)) == bytes(data)
    v.release(fh)
    v.close()
    st, got = _on_disk(img, ino)
    assert got == bytes(data)
    # the times stat showed are the ones logged
    assert (st.st_mtime_ns, st.st_ctime_ns) == (a.mtime_ns, a.ctime_ns)
    repair_clean(img)


def test_the_times_are_logged_before_a_later_change(tmp_path, geometry):
    """utimes and truncate after an overwrite keep their own times: the
    overwrite's are logged first, not after them."""
    img, v = _volume(tmp_path, geometry)
    fh, ino, data = _file(v, b"f", 64 << 10)
    v.write(fh, 0, b"x" * 10)
    v.setattr(ino, atime_ns=1_000_000_000, mtime_ns=2_000_000_000)
    fh2, ino2, _ = _file(v, b"g", 64 << 10)
    v.write(fh2, 100, b"y" * 10)
    v.setattr(ino2, size=1000)
    a2 = v.getattr(ino2)
    v.release(fh)
    v.release(fh2)
    v.close()
    st, got = _on_disk(img, ino)
    assert st.st_mtime_ns == 2_000_000_000
    assert got[:10] == b"x" * 10
    st2, got2 = _on_disk(img, ino2)
    assert st2.st_size == 1000 and got2[100:110] == b"y" * 10
    assert st2.st_mtime_ns == a2.mtime_ns
    repair_clean(img)


def test_a_sync_logs_the_times_of_overwrites(tmp_path):
    """A checkpoint (fsync, the timer) holds the overwrite's times: the
    image as a crash right after it would leave it, replayed by the kernel's
    rules (fstool's recovery), shows them."""
    img, v = _volume(tmp_path)
    fh, ino, data = _file(v, b"f", 64 << 10)
    v.write(fh, 4096, b"z" * 4096)
    want = v.getattr(ino).mtime_ns
    v.fsync(fh)
    crashed = tmp_path / "crashed.img"
    with open(img, "rb") as src, open(crashed, "wb") as dst:
        dst.write(src.read())
    v.release(fh)
    v.close()
    from fstool.ops.logops import replay
    replay(str(crashed))
    st, got = _on_disk(crashed, ino)
    assert st.st_mtime_ns == want
    assert got[4096:8192] == b"z" * 4096
    repair_clean(crashed)


@pytest.mark.parametrize("case", ["past the end", "hole", "unwritten", "reflinked"])
def test_writes_that_change_more_than_data_take_a_transaction(tmp_path, case, geometry):
    img, v = _volume(tmp_path, geometry)
    fh, ino, data = _file(v, b"f", 64 << 10)
    if case == "hole":
        v.setattr(ino, size=1 << 20)
        off = 512 << 10
    elif case == "unwritten":
        v.fallocate(fh, FALLOC_FL_KEEP_SIZE, 64 << 10, 64 << 10)
        v.setattr(ino, size=128 << 10)
        off = 96 << 10
    elif case == "reflinked":
        if not v.w.reflink:
            pytest.skip("the image has no reflink")
        fh2, _a = v.create(v.rootino, b"copy", 0o100644, os.O_RDWR)
        v.copy_file_range(fh, 0, fh2, 0, 64 << 10)
        fh = fh2
        off = 4096
    else:
        off = 60 << 10
    begun = _counting(v)
    v.write(fh, off, b"q" * 8192)
    assert begun, f"a write into {case} took no transaction"
    v.close()
    repair_clean(img)


def _advised(monkeypatch) -> list:
    """The (offset, length) of every WILLNEED the volume gives the image."""
    seen = []
    real = os.posix_fadvise

    def record(fd, off, n, advice):
        if advice == os.POSIX_FADV_WILLNEED:
            seen.append((off, n))
        return real(fd, off, n, advice)

    monkeypatch.setattr(os, "posix_fadvise", record)
    return seen


def test_a_sequential_reader_gets_the_image_read_ahead(tmp_path, monkeypatch):
    from fstool.mount.volume import READAHEAD_FIRST, READAHEAD_MAX
    img, v = _volume(tmp_path)
    fh, ino, data = _file(v, b"f", 48 << 20)
    seen = _advised(monkeypatch)
    step = 128 << 10
    for off in range(0, 40 << 20, step):
        assert v.read_map(fh, off, step, step)
    # the image bytes of the file's first 40 MiB + the window, in order
    want = v.fileio.read_map(ino, 0, (40 << 20) + READAHEAD_MAX, 1 << 30)
    covered = sum(n for _at, n in seen)
    assert seen and covered >= (40 << 20)
    assert seen[0][1] <= READAHEAD_FIRST + step
    assert all(any(at <= o < at + n for at, n in want) for o, _n in seen)
    v.release(fh)
    v.close()


def test_a_random_reader_gets_no_read_ahead(tmp_path, monkeypatch):
    import random
    img, v = _volume(tmp_path)
    fh, ino, data = _file(v, b"f", 16 << 20)
    seen = _advised(monkeypatch)
    rng = random.Random(3)
    for _ in range(500):
        off = rng.randrange(1, (16 << 20) // 4096) * 4096
        v.read(fh, off, 4096)
    assert len(seen) <= 5
    v.release(fh)
    v.close()


def test_getxattr_of_an_inode_without_an_attr_fork(tmp_path, monkeypatch):
    """ENODATA without decoding any xattr (the kernel asks for
    security.capability before every write), and the value where there is
    one."""
    import errno
    img, v = _volume(tmp_path)
    fh, ino, data = _file(v, b"f", 4096)

    def no_decoding(*a, **kw):
        raise AssertionError("xattrs decoded for an inode without an attr fork")

    with monkeypatch.context() as m:
        m.setattr(v.ns, "get_xattr", no_decoding)
        with pytest.raises(OSError) as e:
            v.getxattr(ino, b"security.capability")
        assert e.value.errno == errno.ENODATA
    v.setxattr(ino, b"user.k", b"value")
    assert v.getxattr(ino, b"user.k") == b"value"
    with pytest.raises(OSError) as e:
        v.getxattr(ino, b"security.capability")
    assert e.value.errno == errno.ENODATA
    v.release(fh)
    v.close()
    repair_clean(img)


def test_writes_into_a_btree_map_do_not_read_it_whole_each_time(tmp_path, monkeypatch):
    """Random writes into a sparse file whose map is a btree: each write
    that fills a hole changes the inode, and the next write's check for an
    overwrite must not decode every record of the map again (that made
    fio's random writes into a fresh file quadratic in its extents).  The
    data still reads back as written and the image is repair-clean."""
    from fstool.fs import inode as inode_mod
    img, v = _volume(tmp_path)
    fh, a = v.create(v.rootino, b"sparse", 0o100644, os.O_RDWR)
    ino = a.ino
    bs = v.sb.blocksize
    expect = {}
    # every other block of 600: far more records than the inode holds
    for b in range(0, 1200, 2):
        chunk = os.urandom(bs)
        v.write(fh, b * bs, chunk)
        expect[b] = chunk
    assert v.fs.inode(ino).format == 3         # XFS_DINODE_FMT_BTREE
    full = []
    load = inode_mod.Inode._load_bmbt
    monkeypatch.setattr(inode_mod.Inode, "_load_bmbt",
                        lambda self, *a: full.append(1) or load(self, *a))
    # hole fills (a transaction each) alternating with overwrites
    for k in range(100):
        for b in (1 + 4 * k, 4 * k):
            chunk = os.urandom(bs)
            v.write(fh, b * bs, chunk)
            expect[b] = chunk
    assert len(full) <= 2, f"the whole extent map was read {len(full)} times in 200 writes"
    monkeypatch.undo()
    for b, chunk in expect.items():
        assert v.read(fh, b * bs, bs) == chunk
    v.release(fh)
    v.close()
    repair_clean(img)


def test_reads_use_the_decoded_inode(tmp_path, monkeypatch):
    """A read finds its blocks in the read model's decoded inode (kept
    until the inode is next written), not by decoding the inode again per
    request; what it returns is the file's bytes, holes and unwritten
    blocks as zeros."""
    from fstool.ns import fileio as fileio_mod
    img, v = _volume(tmp_path)
    fh, ino, data = _file(v, b"f", 256 << 10)
    v.fallocate(fh, FALLOC_FL_KEEP_SIZE, 512 << 10, 64 << 10)
    v.setattr(ino, size=640 << 10)         # a hole, then unwritten blocks
    data.extend(bytes(384 << 10))
    decoded = []
    real = fileio_mod._File
    monkeypatch.setattr(fileio_mod, "_File",
                        lambda *a, **kw: decoded.append(1) or real(*a, **kw))
    for off, n in [(0, 4096), (4000, 9000), (250 << 10, 20 << 10), (300 << 10, 4096),
                   (520 << 10, 8192), (630 << 10, 64 << 10)]:
        assert v.read(fh, off, n) == bytes(data[off:off + n]), (off, n)
    assert not decoded, f"{len(decoded)} reads decoded the inode again"
    monkeypatch.undo()
    v.release(fh)
    v.close()
    repair_clean(img)


def test_a_write_into_a_hole_fills_its_aligned_run(tmp_path, geometry):
    """Random writes into a new sparse file: the first write into a 64 KiB
    run that is a hole allocates and writes the whole run (zeros around the
    data, never past the end of the file nor over a neighbouring extent),
    so the other writes into the run are overwrites with no transaction;
    what reads back is the file's bytes either way."""
    from fstool.mount.volume import HOLE_FILL_BYTES
    img, v = _volume(tmp_path, geometry)
    bs = v.sb.blocksize
    run = HOLE_FILL_BYTES // bs
    fh, a = v.create(v.rootino, b"sparse", 0o100644, os.O_RDWR)
    ino = a.ino
    size = (1 << 20) + 1000                 # the last run is cut by the end
    v.setattr(ino, size=size)
    shadow = bytearray(size)

    def write(off, data):
        assert v.write(fh, off, data) == len(data)
        shadow[off:off + len(data)] = data

    write(5 * bs + 100, b"a" * 200)         # inside the run [0, 16)
    ext = v.fileio.extents(ino)
    assert [(o, n) for o, _p, n, u in ext] == [(0, run)] and not ext[0][3]
    begun = _counting(v)
    for k in (0, 3, run - 1):
        write(k * bs, os.urandom(bs))
    assert not begun, "a write into a run already filled began a transaction"
    # the last run, cut by the end of the file (its last block partial)
    write(size - 10, b"z" * 10)
    last = (size + bs - 1) // bs
    assert (last - last % run if last % run else last - run, last - (last - last % run
            if last % run else last - run)) in [(o, n) for o, _p, n, _u in
                                                v.fileio.extents(ino)]
    # a hole between two runs already mapped: filled only up to them
    write(40 * bs, b"m" * bs)               # run [32, 48)
    v.fallocate(fh, 0x02 | FALLOC_FL_KEEP_SIZE, 36 * bs, 4 * bs)   # punch [36, 40)
    shadow[36 * bs:40 * bs] = bytes(4 * bs)
    write(37 * bs, b"p" * 10)
    maps = {o: n for o, _p, n, _u in v.fileio.extents(ino)}
    covered = sorted(b for o, n in maps.items() for b in range(o, o + n))
    assert [b for b in range(32, 48) if b in covered] == list(range(32, 48))
    assert v.getattr(ino).size == size
    assert v.read(fh, 0, size) == bytes(shadow)
    v.release(fh)
    v.close()
    st, got = _on_disk(img, ino)
    assert got == bytes(shadow) and st.st_size == size
    repair_clean(img)


def test_a_write_over_a_hole_keeps_the_bytes_of_mapped_blocks_it_ends_in(tmp_path):
    """A write starting and ending inside written blocks, over a punched
    hole between them: the bytes of those blocks around the write stay
    (the fill grows a write only over holes)."""
    img, v = _volume(tmp_path)
    bs = v.sb.blocksize
    fh, ino, data = _file(v, b"f", 256 << 10)
    v.fallocate(fh, 0x02 | FALLOC_FL_KEEP_SIZE, 5 * bs, 4 * bs)      # blocks 5-8
    data[5 * bs:9 * bs] = bytes(4 * bs)
    for off, end in ((4 * bs + 100, 9 * bs + 100), (20 * bs + 7, 24 * bs - 9)):
        if off > 9 * bs:
            v.fallocate(fh, 0x02 | FALLOC_FL_KEEP_SIZE, 21 * bs, 2 * bs)
            data[21 * bs:23 * bs] = bytes(2 * bs)
        chunk = os.urandom(end - off)
        assert v.write(fh, off, chunk) == len(chunk)
        data[off:end] = chunk
        assert v.read(fh, 0, len(data)) == bytes(data)
    v.release(fh)
    v.close()
    st, got = _on_disk(img, ino)
    assert got == bytes(data)
    repair_clean(img)


def test_writes_past_the_end_are_not_widened(tmp_path):
    """Only writes inside the file's size into a hole fill a run: an append
    maps what it writes (and the speculative preallocation holds the rest,
    given back at the last close)."""
    img, v = _volume(tmp_path)
    bs = v.sb.blocksize
    fh, a = v.create(v.rootino, b"f", 0o100644, os.O_RDWR)
    v.write(fh, 0, b"x" * 100)
    v.write(fh, 3 * bs, b"y" * bs)          # past the end: the gap stays a hole
    assert [(o, n) for o, _p, n, _u in v.fileio.extents(a.ino)] == [(0, 1), (3, 1)]
    v.release(fh)
    v.close()
    repair_clean(img)


def test_a_create_answers_without_decoding_the_new_inode(tmp_path, monkeypatch):
    """The Attr a create answers with is the one the inode decoded from the
    image gives (every field), and comes from the inode as written."""
    img, v = _volume(tmp_path)
    decoded = []
    real = Filesystem.inode

    def inode(fs, ino, *a, **kw):
        decoded.append(ino)
        return real(fs, ino, *a, **kw)

    monkeypatch.setattr(Filesystem, "inode", inode)
    made = []
    for i in range(40):
        fh, a = v.create(v.rootino, b"f%d" % i, 0o100640, os.O_WRONLY, uid=1000 + i, gid=7)
        v.release(fh)
        made.append(a)
    made.append(v.mknod(v.rootino, b"fifo", 0o10644, 0, 5, 6))
    assert not {a.ino for a in made} & set(decoded)
    v.sync()
    monkeypatch.setattr(Filesystem, "inode", real)
    v.icache.clear_attrs()
    for a in made:
        b = v.getattr(a.ino)
        assert [getattr(a, k) for k in a.__slots__] == [getattr(b, k) for k in b.__slots__]
    v.close()
    repair_clean(img)
