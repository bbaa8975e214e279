"""Delayed allocation and inode core changes kept in memory on the mount's
write path (Volume.write, Volume.setattr, Volume._settle): a new file's
writes from its start wait in memory and go to the image with the next
change of anything else, checkpoint or sync, its blocks allocated once and
exactly (nothing held past the end and given back); a setattr that changes
only the inode core (mode, owner, times) of what is not a directory takes
no transaction.  What stat, statfs and reads show meanwhile is what the
image holds after; ENOSPC comes where it came before; fsync puts it all on
disk."""
from __future__ import annotations

import errno
import os
import random
import shutil
import stat as pystat

import pytest

from fixtures import images
from fixtures.fusemount import (FuseMounted, crash_points, crashed_runs, fstool_image,
                                repair_clean, skip_without_fuse_and_kernel)
from fstool.fs.filesystem import Filesystem
from fstool.mount.volume import DELAY_FILE, Volume

# crash points of the kill-after-each-write test of a settle: a few spread
# over the writes (a few seconds); FSTOOL_SETTLE_CRASH_ALL=1 for every write
SETTLE_CRASH_ALL = os.environ.get("FSTOOL_SETTLE_CRASH_ALL") == "1"
SETTLE_CRASH_POINTS = 4


def _counting(v: Volume) -> list:
    """Every transaction the volume begins from now on, counted."""
    begun = []
    begin = v.w.begin

    def counted(*a, **kw):
        begun.append(1)
        return begin(*a, **kw)

    v.w.begin = counted
    return begun


def _on_disk(img, ino: int):
    fs = Filesystem(str(img))
    try:
        node = fs.inode(ino)
        return node.stat(), bytes(node.read(0, node.size)), node.extents()
    finally:
        fs.close()


def _tar_like(v: Volume, name: bytes, data: bytes, chunk: int = 10240):
    """What tar does for a file: create, writes of ``chunk`` bytes, fchown,
    fchmod, utimensat, close.  The inode number."""
    fh, a = v.create(v.rootino, name, 0o100600, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    for off in range(0, len(data), chunk):
        assert v.write(fh, off, data[off:off + chunk]) == len(data[off:off + chunk])
    v.setattr(a.ino, uid=1000, gid=1000)
    v.setattr(a.ino, mode=0o644)
    v.setattr(a.ino, atime_ns=1_000_000_007, mtime_ns=2_000_000_009)
    v.release(fh)
    return a.ino


def test_a_new_files_writes_and_setattrs_take_no_transaction(tmp_path):
    """Creates, writes, three setattrs and closes of 20 files: the creates'
    group is the only transaction until a sync, which puts the data and
    the inodes in one; each file then has one extent of exactly its blocks
    (no hold past its end), the owner, mode and times set last."""
    img = fstool_image(tmp_path, "256m")
    v = Volume(img)
    v.group = 256
    begun = _counting(v)
    files = {}
    for i in range(20):
        data = os.urandom(1000 + i * 7001)
        files[_tar_like(v, b"f%d" % i, data)] = data
    assert len(begun) == 1, "the writes or setattrs began transactions of their own"
    for ino, data in files.items():
        a = v.getattr(ino)
        assert (a.size, a.uid, a.gid, a.mode & 0o7777) == (len(data), 1000, 1000, 0o644)
        assert a.mtime_ns == 2_000_000_009 and a.atime_ns == 1_000_000_007
        assert a.blocks == -(-len(data) // 4096) * 8
    v.sync()
    assert len(begun) == 2
    assert not v.fileio.held
    v.close()
    for ino, data in files.items():
        st, got, exts = _on_disk(img, ino)
        assert got == data
        assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (1000, 1000, 0o644)
        assert (st.st_mtime_ns, st.st_atime_ns) == (2_000_000_009, 1_000_000_007)
        assert len(exts) == 1 and exts[0][2] == -(-len(data) // 4096)
        assert st.st_blocks == exts[0][2] * 8
    repair_clean(img)


def test_delayed_data_reads_back_and_counts_as_used(tmp_path):
    img = fstool_image(tmp_path, "256m")
    v = Volume(img)
    free0 = v.statfs()["bfree"]
    fh, a = v.create(v.rootino, b"f", 0o100644, os.O_RDWR)
    begun = _counting(v)
    v.write(fh, 0, b"a" * 5000)
    v.write(fh, 5000, b"b" * 5000)
    v.write(fh, 100, b"c" * 10)             # inside what is kept
    assert not begun
    want = bytearray(b"a" * 5000 + b"b" * 5000)
    want[100:110] = b"c" * 10
    assert v.read(fh, 0, 1 << 20) == bytes(want)
    assert v.read(fh, 4990, 20) == bytes(want[4990:5010])
    assert v.read_map(fh, 0, 4096, 1 << 20) is None       # (read() answers)
    assert v.fast_map(a.ino) is None
    assert v.getattr(a.ino).size == 10000
    assert v.statfs()["bfree"] == free0 - 3
    # a write past the end of what is kept (a gap) puts it in the image first
    v.write(fh, 20000, b"z")
    assert begun
    assert v.read(fh, 0, 30000) == bytes(want) + bytes(10000) + b"z"
    v.release(fh)
    v.close()
    st, got, _exts = _on_disk(img, a.ino)
    assert got == bytes(want) + bytes(10000) + b"z"
    repair_clean(img)


def test_a_setattr_after_the_writes_keeps_its_times(tmp_path):
    """utimensat after the writes: the data going to the image later does
    not move mtime; a write after the utimensat does."""
    img = fstool_image(tmp_path, "256m")
    v = Volume(img)
    fh, a = v.create(v.rootino, b"f", 0o100644, os.O_RDWR)
    v.write(fh, 0, b"x" * 100)
    v.setattr(a.ino, atime_ns=5_000_000_000, mtime_ns=6_000_000_000)
    fh2, b = v.create(v.rootino, b"g", 0o100644, os.O_RDWR)
    v.write(fh2, 0, b"y" * 100)
    v.setattr(b.ino, atime_ns=5_000_000_000, mtime_ns=6_000_000_000)
    v.write(fh2, 100, b"y")
    later = v.getattr(b.ino).mtime_ns
    assert later > 6_000_000_000
    v.release(fh)
    v.release(fh2)
    v.close()
    st, got, _ = _on_disk(img, a.ino)
    assert (st.st_mtime_ns, got) == (6_000_000_000, b"x" * 100)
    st, got, _ = _on_disk(img, b.ino)
    assert (st.st_mtime_ns, got) == (later, b"y" * 101)
    repair_clean(img)


def test_fsync_puts_delayed_data_and_kept_setattrs_on_disk(tmp_path):
    """The image as a crash right after an fsync leaves it, replayed by the
    kernel's rules (fstool's recovery), holds the data and the mode."""
    img = fstool_image(tmp_path, "256m")
    v = Volume(img)
    fh, a = v.create(v.rootino, b"f", 0o100644, os.O_RDWR)
    data = os.urandom(30000)
    v.write(fh, 0, data)
    v.setattr(a.ino, mode=0o600)
    v.fsync(fh)
    crashed = tmp_path / "crashed.img"
    shutil.copyfile(img, crashed)
    v.release(fh)
    v.close()
    from fstool.ops.logops import replay
    replay(str(crashed))
    st, got, _ = _on_disk(crashed, a.ino)
    assert got == data and st.st_mode & 0o7777 == 0o600
    repair_clean(crashed)


def test_enospc_comes_at_write_time(tmp_path):
    """Files written until the filesystem is full: every write that
    returned is in the image after the close (none lost to a later
    allocation), the one that did not fit failed with ENOSPC, and statfs
    never showed more free blocks than the image had."""
    img = fstool_image(tmp_path, "64m")
    v = Volume(img)
    v.group = 256
    written = {}
    full = None
    for i in range(200):
        fh, a = v.create(v.rootino, b"f%d" % i, 0o100644, os.O_RDWR)
        data = os.urandom(DELAY_FILE)
        try:
            for off in range(0, len(data), 65536):
                v.write(fh, off, data[off:off + 65536])
                written[a.ino] = data[:off + 65536]
        except OSError as e:
            full = e
        finally:
            v.release(fh)
        if full is not None:
            break
    assert full is not None and full.errno == errno.ENOSPC
    v.close()
    for ino, data in written.items():
        _st, got, _ = _on_disk(img, ino)
        assert got == data
    repair_clean(img)


def test_a_directorys_setattrs_are_kept_in_order_with_its_creates(tmp_path):
    """A directory's chmod, chown and utimes take no transaction; what
    the log holds keeps their order with the creates around them: a
    utimes of the directory after creates in it keeps its time, a create
    after it moves the time on; a create after a kept chmod g+s inherits
    the group; the image after unmount holds the same, xfs_repair -n
    clean."""
    img = fstool_image(tmp_path, "256m")
    v = Volume(img)
    v.group = 64
    d = v.mkdir(v.rootino, b"d", 0o755)
    e = v.mkdir(v.rootino, b"e", 0o755)
    v.sync()
    begun = _counting(v)
    v.setattr(d.ino, mode=0o700)
    v.setattr(d.ino, uid=1000, gid=1000)
    assert not begun
    assert (v.getattr(d.ino).mode & 0o7777, v.getattr(d.ino).uid) == (0o700, 1000)
    # creates in e (a group), then e's times set: they stay; then the
    # same in d, and one create more: the time moves on
    for i in range(3):
        v.release(v.create(e.ino, b"a%d" % i, 0o100644, os.O_WRONLY)[0])
        v.release(v.create(d.ino, b"a%d" % i, 0o100644, os.O_WRONLY)[0])
    v.setattr(e.ino, atime_ns=1_000_000_000, mtime_ns=2_000_000_000)
    v.setattr(d.ino, atime_ns=1_000_000_000, mtime_ns=2_000_000_000)
    v.release(v.create(d.ino, b"later", 0o100644, os.O_WRONLY)[0])
    assert v.getattr(d.ino).mtime_ns > 2_000_000_000
    # a chmod g+s of d, then a create in d: the kept change comes first
    v.setattr(d.ino, mode=0o2770)
    sub = v.mkdir(d.ino, b"s", 0o755)
    assert v.getattr(sub.ino).gid == 1000
    d_times = v.getattr(d.ino).mtime_ns
    assert d_times > 2_000_000_000
    v.close()
    fs = Filesystem(str(img))
    try:
        st = fs.inode(d.ino).stat()
        assert (st.st_mode & 0o7777, st.st_uid, st.st_gid, st.st_mtime_ns) == \
            (0o2770, 1000, 1000, d_times)
        assert fs.inode(e.ino).stat().st_mtime_ns == 2_000_000_000
        s_st = fs.inode(sub.ino).stat()
        assert (s_st.st_gid, s_st.st_mode & pystat.S_ISGID) == (1000, pystat.S_ISGID)
    finally:
        fs.close()
    repair_clean(img)


@pytest.mark.parametrize("change", ["unlink", "rename over", "truncate", "chmod suid"])
def test_a_later_change_finds_the_delayed_data_in_the_image(tmp_path, change):
    img = fstool_image(tmp_path, "256m")
    v = Volume(img)
    fh, a = v.create(v.rootino, b"f", 0o100644, os.O_RDWR)
    v.write(fh, 0, b"q" * 9000)
    if change == "unlink":
        v.release(fh)
        v.unlink(v.rootino, b"f")
    elif change == "rename over":
        v.release(fh)
        _fh2, _b = v.create(v.rootino, b"g", 0o100644, os.O_RDWR)
        v.write(_fh2, 0, b"r" * 10)
        v.release(_fh2)
        v.rename(v.rootino, b"g", v.rootino, b"f")
    elif change == "truncate":
        v.setattr(a.ino, size=5000)
        assert v.read(fh, 0, 1 << 20) == b"q" * 5000
        v.release(fh)
    else:
        v.sync()
        assert v.fast_map(a.ino)[1] is True
        v.setattr(a.ino, mode=0o4755)
        assert a.ino in v._core
        assert v.fast_map(a.ino)[1] is False      # no overwrite past a kept set-user-ID
        v.release(fh)
    v.close()
    repair_clean(img)
    fs = Filesystem(str(img))
    try:
        names = {e.name for e in fs.listdir(fs.inode(fs.sb.rootino))}
        if change == "unlink":
            assert b"f" not in names
        elif change == "rename over":
            assert names >= {b"f"} and b"g" not in names
        elif change == "truncate":
            assert bytes(fs.inode(a.ino).read(0, 1 << 20)) == b"q" * 5000
        else:
            assert fs.inode(a.ino).mode & 0o7777 == 0o4755
    finally:
        fs.close()


def test_kept_files_are_allocated_together(tmp_path, monkeypatch):
    """The kept files of one AG get their blocks from one allocation, one
    after another in inode order; where an extent found holds only some of
    them (free space cut short here), the rest come from the next, and
    what was left of an extent goes back."""
    img = fstool_image(tmp_path, "256m")
    v = Volume(img)
    v.group = 256
    space = v.w.space
    calls = []
    alloc = space.alloc_blocks

    def short(target, minlen, maxlen, *a, **kw):
        calls.append((minlen, maxlen))
        return alloc(target, minlen, min(maxlen, minlen + 2), *a, **kw)

    files = {}
    for i in range(12):
        data = os.urandom(4096 * (1 + i % 3) - 100)
        files[_tar_like(v, b"f%d" % i, data)] = data
    monkeypatch.setattr(space, "alloc_blocks", short)
    v.sync()
    monkeypatch.setattr(space, "alloc_blocks", alloc)
    assert 1 < len(calls) < len(files)
    free = v.statfs()["bfree"]
    v.close()
    ends = []
    for ino in sorted(files):
        st, got, exts = _on_disk(img, ino)
        assert got == files[ino] and len(exts) == 1
        ends.append((exts[0][1], exts[0][1] + exts[0][2]))
    # one after another, with gaps only where an allocation ended
    gaps = sum(1 for (_a, b), (c, _d) in zip(ends, ends[1:]) if c != b)
    assert gaps <= len(calls) - 1
    fs = Filesystem(str(img))
    try:
        assert fs.sb.fields["sb_fdblocks"] == free     # nothing lost, nothing held
    finally:
        fs.close()
    repair_clean(img)


def test_o_sync_writes_are_not_kept(tmp_path):
    img = fstool_image(tmp_path, "256m")
    v = Volume(img)
    fh, a = v.create(v.rootino, b"f", 0o100644, os.O_RDWR | os.O_SYNC)
    begun = _counting(v)
    v.write(fh, 0, b"s" * 5000)
    assert begun and a.ino not in v._delayed
    v.release(fh)
    v.close()
    repair_clean(img)


def test_near_full_with_reservations_writes_go_to_disk_and_all_else_goes_on(tmp_path):
    """On an rmapbt+reflink image filled to what file data may take, the
    free space still counted (sb_fdblocks) is the per-AG reservations, which
    file data never gets: a new file's write there must not be kept (it
    could never be allocated, and every later change, unlink included,
    would fail trying to), but fail with ENOSPC at once; then removing the
    big file, sync and close work and the image checks clean."""
    img = fstool_image(tmp_path, "64m", "-m", "rmapbt=1,reflink=1")
    v = Volume(img)
    fh, _a = v.create(v.rootino, b"big", 0o644, os.O_WRONLY)
    off = 0
    for size in (1 << 20, 1 << 16, 4096):
        try:
            while True:
                v.write(fh, off, b"x" * size)
                off += size
        except OSError as e:
            assert e.errno == errno.ENOSPC
    v.release(fh)
    v.sync()
    assert v.free_blocks() > 0          # the reservations
    fh2, a2 = v.create(v.rootino, b"new", 0o644, os.O_WRONLY)
    with pytest.raises(OSError) as got:
        v.write(fh2, 0, b"hello" * 1000)
    assert got.value.errno == errno.ENOSPC and a2.ino not in v._delayed
    v.release(fh2)
    v.unlink(v.rootino, b"big")
    v.sync()
    v.close()
    repair_clean(img)


def test_a_failed_create_in_a_group_with_kept_data_keeps_it(tmp_path):
    """A create that fails inside a group of creates (here: the name
    exists) takes the group back and makes each create again; the kept data
    of a file of that group waits until its inode is made again (it used to
    be written first, to an inode then free: writes stopped and the close
    lost everything)."""
    img = fstool_image(tmp_path, "256m")
    v = Volume(img)
    v.group = 8
    fh, a = v.create(v.rootino, b"f1", 0o644, os.O_WRONLY)
    v.write(fh, 0, b"data of f1\n")
    v.release(fh)
    assert a.ino in v._delayed
    with pytest.raises(OSError) as got:
        v.create(v.rootino, b"f1", 0o644, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    assert got.value.errno == errno.EEXIST
    assert v.failed is None
    v.close()
    repair_clean(img)
    assert _on_disk(img, a.ino)[1] == b"data of f1\n"


def _in_image(img, data: bytes) -> bool:
    """Whether ``data`` (random bytes, a block or more) is anywhere in the
    image file: written to some block, freed or not."""
    with open(img, "rb") as f:
        return f.read().find(data) >= 0


@pytest.mark.parametrize("how", ["unlink", "o_trunc", "truncate"])
def test_a_freed_or_truncated_kept_file_writes_nothing(tmp_path, how):
    """Unlink (of a closed file) or O_TRUNC of a file whose data is kept in
    memory drops the kept data: no block is allocated or written for it
    (its bytes are nowhere in the image), nothing is held, the free count
    is what it was before the file was made; a truncate to a shorter size
    cuts the kept data and writes only what is left.  (An unlink of a file
    still open is a change made while its data is needed: that data goes to
    the image first, and is freed at the last close.)"""
    img = fstool_image(tmp_path, "256m")
    v = Volume(img)
    v.sync()
    free0 = v.statfs()["bfree"]
    fh, a = v.create(v.rootino, b"f", 0o100644, os.O_RDWR)
    head, gone = os.urandom(4096), os.urandom(20000)
    v.write(fh, 0, head + gone)
    assert a.ino in v._delayed
    written = []
    write_new = v.fileio.write_new

    def noted(files):
        written.extend(ino for ino, _data in files)
        return write_new(files)

    v.fileio.write_new = noted
    keep = b""
    if how == "unlink":
        v.release(fh)
        v.unlink(v.rootino, b"f")
    elif how == "o_trunc":
        v.release(fh)
        fh = v.open(a.ino, os.O_WRONLY | os.O_TRUNC)
        assert v.getattr(a.ino).size == 0
        keep = b"new data"
        v.write(fh, 0, keep)
        v.release(fh)
    else:
        v.setattr(a.ino, size=4096)
        keep = head
        assert v.read(fh, 0, 1 << 20) == head
        assert v.getattr(a.ino).blocks == 8
        v.release(fh)
    v.sync()
    assert a.ino not in written or keep
    assert v.statfs()["bfree"] == free0 - (1 if keep else 0)
    assert not v.fileio.held
    v.close()
    repair_clean(img)
    assert not _in_image(img, gone[:8192])
    if keep:
        assert _on_disk(img, a.ino)[1] == keep
    else:
        assert _in_image(img, head) is False


def _one_kept_file(tmp_path):
    """A volume on a new image with one file "f" in its root, written and
    closed, its data kept in memory: (image, volume, its Attr, the data)."""
    img = fstool_image(tmp_path, "256m")
    v = Volume(img)
    fh, a = v.create(v.rootino, b"f", 0o100644, os.O_RDWR)
    data = os.urandom(9000)
    v.write(fh, 0, data)
    v.release(fh)
    assert a.ino in v._delayed
    return img, v, a, data


def test_a_kept_file_with_another_name_keeps_its_data_on_unlink(tmp_path):
    img, v, a, data = _one_kept_file(tmp_path)
    v.link(a.ino, v.rootino, b"g")
    v.unlink(v.rootino, b"f")
    v.close()
    repair_clean(img)
    assert _on_disk(img, a.ino)[1] == data


def test_an_unlink_that_fails_keeps_the_kept_data(tmp_path, monkeypatch):
    """The unlink's transaction fails: the file is still there with its
    kept data, which goes to the image later."""
    img, v, a, data = _one_kept_file(tmp_path)

    def broken(*_a, **_kw):
        raise OSError(errno.EIO, "injected")

    monkeypatch.setattr(v.ns, "unlink", broken)
    with pytest.raises(OSError):
        v.unlink(v.rootino, b"f")
    monkeypatch.undo()
    assert a.ino in v._delayed and v.getattr(a.ino).size == 9000
    v.close()
    repair_clean(img)
    assert _on_disk(img, a.ino)[1] == data


def _kept_files_then_fsync(mnt, seed: int = 5):
    """Two rounds of: six new files written (kept in memory: small, from
    their start), every other one chmod'ed 0600 (kept too), then an fsync
    of the last (the settle of every kept file and a checkpoint); until a
    call fails (the mount gone).  ({name: (data, mode)} of the files an
    fsync that returned covers, the same of those written since)."""
    rng = random.Random(seed)
    synced: dict = {}
    pending: dict = {}
    try:
        for r in range(2):
            for i in range(6):
                name = f"r{r}f{i}"
                data = rng.randbytes(rng.randrange(1, 40000))
                mode = 0o600 if i % 2 else 0o644
                pending[name] = (data, mode)
                fd = os.open(mnt / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                try:
                    for off in range(0, len(data), 10240):
                        os.write(fd, data[off:off + 10240])
                    os.fchmod(fd, mode)
                    if i == 5:
                        os.fsync(fd)
                        synced.update(pending)
                        pending = {}
                finally:
                    os.close(fd)
    except OSError:
        pass                            # the mount is gone: the crash
    return synced, pending


def test_a_crash_at_each_write_of_a_settle(tmp_path, monkeypatch):
    """The kill-after-each-write harness over the settle of delayed
    allocation (the kept files' blocks allocated, their data written, the
    inodes and the kept chmods logged, then the checkpoint of an fsync):
    the mount killed right after its Nth write to the image
    (FSTOOL_FAULT_AFTER_WRITES=N, the writes counted in a first run with
    the write log); then the kernel replays the log and reads every file,
    and xfs_repair -n finds nothing.  Every file an fsync that returned
    covers is there with its data and mode; every file written after it is
    missing, empty or whole with its mode before or after the chmod: never
    some of its data, and never the bytes a freed file left in the blocks it
    was given (the free space is filled with 0xEE first).  A few N spread
    over the writes by default (a few seconds); FSTOOL_SETTLE_CRASH_ALL=1
    tries every write."""
    skip_without_fuse_and_kernel()
    base = fstool_image(tmp_path, "64m")
    with FuseMounted(base) as mnt:
        # freed blocks holding 0xEE, which the settle's allocations reuse
        fd = os.open(mnt / "old", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.write(fd, b"\xee" * (4 << 20))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.unlink(mnt / "old")
    points = crash_points(tmp_path, base, _kept_files_then_fsync, monkeypatch,
                          SETTLE_CRASH_ALL, SETTLE_CRASH_POINTS, least=4)
    for n, img, (synced, pending) in crashed_runs(tmp_path, base, _kept_files_then_fsync,
                                                  points, monkeypatch):
        with images.Mounted(img) as k:  # the log replayed
            seen = {p.name: ((k / p.name).read_bytes(), os.stat(k / p.name).st_mode & 0o7777)
                    for p in k.iterdir() if p.name != "lost+found"}
        for name, (data, mode) in synced.items():
            assert seen.get(name) == (data, mode), f"write {n}: {name} after its fsync"
        for name, (data, mode) in pending.items():
            if name in seen:
                got, got_mode = seen[name]
                assert got in (b"", data), f"write {n}: {name} holds some other bytes"
                assert got_mode in (0o644, mode), f"write {n}: {name}"
        assert set(seen) <= set(synced) | set(pending), f"write {n}: {set(seen)}"
        repair_clean(img)


def test_kept_times_of_a_directory_or_symlink_equal_to_their_ctime(tmp_path):
    """A utimes of a directory or symlink setting the mtime alone, to the
    very time of the change (a fixed clock makes it so), is kept like a
    write's times; the settle still gives it to setattr, not to the
    regular-file path of writes (which refused it: every later change
    failed and the unmount dropped the kept data)."""
    T = 1_700_000_000_000_000_000
    img = fstool_image(tmp_path, "256m")
    v = Volume(str(img), timestamp_ns=T)
    d = v.mkdir(v.rootino, b"d", 0o755).ino
    s = v.symlink(v.rootino, b"s", b"target").ino
    fh, f = v.create(v.rootino, b"data", 0o100644, os.O_RDWR)
    assert v.write(fh, 0, b"precious" * 1000) == 8000     # kept in memory
    v.release(fh)
    v.setattr(d, mtime_ns=T)
    v.setattr(s, mtime_ns=T)
    v.mkdir(v.rootino, b"e", 0o755)
    v.sync()
    v.close()
    st, data, _ext = _on_disk(img, f.ino)
    assert data == b"precious" * 1000
    for ino in (d, s):
        assert _on_disk(img, ino)[0].st_mtime_ns == T
    repair_clean(img)
