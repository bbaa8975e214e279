"""The native request loop's fast path (fstool_native/fuseloop.pyx: reads
and overwrites of a regular file answered from a kept copy of its map,
without calling into Python) against a model: overwrites, reads,
truncates, punches, zero ranges, preallocations, appends and reflinks
(copy_file_range, which shares whole blocks) interleaved on one file and
a second one sharing blocks with it, every read compared with the bytes
the model holds.  The kernel's page cache of the mounted files is dropped
before each read, so that every read reaches the mount.  A kept map that
outlived a change of the file (an invalidation missed) reads freed or
other blocks, or writes into shared ones, and the comparison fails.
Then the image is repair-clean and the kernel reads the same bytes.
400 steps (a few seconds); FSTOOL_FASTPATH_STEPS=N for more."""
from __future__ import annotations

import errno
import os
import random

import pytest

from fixtures import images
from fixtures.fusemount import (FuseMounted, crash_points, crashed_runs, fstool_image,
                                fuse_skip_reason, kernel_reads, repair_clean,
                                skip_without_fuse_and_kernel)
from fstool.fs.filesystem import Filesystem

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10
BS = 4096
SIZE = 512 << 10                        # the files' starting size
# steps of the interleaving: a few seconds (FSTOOL_FASTPATH_STEPS for longer runs)
STEPS = int(os.environ.get("FSTOOL_FASTPATH_STEPS", "400"))
# crash points of the kill-after-every-write test: a few spread over the
# writes (a few seconds); FSTOOL_FASTPATH_CRASH_ALL=1 for every write
CRASH_ALL = os.environ.get("FSTOOL_FASTPATH_CRASH_ALL") == "1"
CRASH_POINTS = 3


def _fallocate(fd: int, mode: int, off: int, length: int) -> None:
    import ctypes                       # lazy: only this test calls fallocate(2) with a mode
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    if libc.fallocate(fd, mode, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def _set(model: bytearray, off: int, data: bytes) -> None:
    if off > len(model):
        model.extend(bytes(off - len(model)))
    model[off:off + len(data)] = data


def _truncate(model: bytearray, size: int) -> None:
    if size < len(model):
        del model[size:]
    else:
        model.extend(bytes(size - len(model)))


def _read(fd: int, off: int, n: int) -> bytes:
    # the kernel's cached pages of the file dropped: the read reaches the mount
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    return os.pread(fd, n, off)


def _check(fd: int, model: bytearray, rng: random.Random, what: str) -> None:
    """A random range and the whole file read back as the model has them."""
    size = len(model)
    off = rng.randrange(size + 1) if size else 0
    n = rng.choice((1, 100, BS, 3 * BS + 5, 64 << 10))
    assert _read(fd, off, n) == bytes(model[off:off + n]), f"after {what}: {n} at {off}"
    assert _read(fd, 0, size + BS) == bytes(model), f"after {what}: the whole file"


def xattr_of(fd: int):
    try:
        return os.getxattr(fd, "user.k")
    except OSError as e:
        if e.errno != errno.ENODATA:
            raise
        return None


def _step(rng: random.Random, f: int, g: int, mf: bytearray, mg: bytearray, xa: dict) -> str:
    """One random change to file f (``mf`` its model, ``xa`` its xattr; g,
    ``mg``: the file it shares blocks with); returns its name."""
    size = len(mf)
    kind = rng.choices(("overwrite", "overwrite-g", "truncate", "punch", "zero", "prealloc",
                        "append", "share-into-f", "share-into-g", "fsync", "xattr"),
                       (40, 6, 6, 6, 4, 4, 4, 5, 5, 2, 3))[0]
    if kind in ("overwrite", "overwrite-g"):
        fd, m = (f, mf) if kind == "overwrite" else (g, mg)
        if not len(m):
            return kind
        off = rng.randrange(len(m))
        n = min(rng.choice((1, 512, BS, 2 * BS, 5 * BS + 3)), len(m) - off)
        if rng.random() < 0.5:
            off -= off % BS
            n = min(BS, len(m) - off)
        data = rng.randbytes(n)
        assert os.pwrite(fd, data, off) == n
        _set(m, off, data)
    elif kind == "truncate":
        new = rng.choice((rng.randrange(size + 1), rng.randrange(SIZE * 2), max(size - 1, 0)))
        os.ftruncate(f, new)
        _truncate(mf, new)
    elif kind in ("punch", "zero"):
        off = rng.randrange(max(size, 1))
        n = rng.randrange(1, 16 * BS)
        mode = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE if kind == "punch" else \
            FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE
        _fallocate(f, mode, off, n)
        end = min(off + n, size)
        if end > off:
            mf[off:end] = bytes(end - off)
    elif kind == "prealloc":
        # unwritten blocks: read as zeros; an overwrite there is no overwrite in place
        off = rng.randrange(SIZE * 2)
        n = rng.randrange(1, 16 * BS)
        _fallocate(f, FALLOC_FL_KEEP_SIZE if rng.random() < 0.5 else 0, off, n)
        # mode 0 grows the file to the range's end: zeros
        _truncate(mf, max(size, off + n) if os.fstat(f).st_size > size else size)
    elif kind == "append":
        data = rng.randbytes(rng.randrange(1, 3 * BS))
        assert os.pwrite(f, data, size) == len(data)
        _set(mf, size, data)
    elif kind in ("share-into-f", "share-into-g"):
        src, dst, ms, md = (g, f, mg, mf) if kind == "share-into-f" else (f, g, mf, mg)
        if len(ms) < BS:
            return kind
        soff = rng.randrange(len(ms) // BS) * BS
        n = min(rng.randrange(1, 8) * BS, len(ms) - soff)
        doff = rng.randrange(max(len(md), BS) // BS + 1) * BS
        done = os.copy_file_range(src, dst, n, soff, doff)
        _set(md, doff, bytes(ms[soff:soff + done]))
    elif kind == "xattr":
        # the loop answers getxattr of a file without xattrs itself
        if rng.random() < 0.3 and xa:
            os.removexattr(f, "user.k")
            xa.clear()
        else:
            xa["user.k"] = rng.randbytes(rng.randrange(1, 40))
            os.setxattr(f, "user.k", xa["user.k"])
    else:
        os.fsync(f)
    return kind


@pytest.mark.parametrize("seed", [1])
def test_fast_path_against_a_model(tmp_path, seed):
    why = fuse_skip_reason()
    if why:
        pytest.skip(f"needs FUSE: {why}")
    rng = random.Random(seed)
    img = fstool_image(tmp_path, "128m")
    m = FuseMounted(img)
    with m as mnt:
        f = os.open(mnt / "f", os.O_RDWR | os.O_CREAT, 0o644)
        g = os.open(mnt / "g", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            mf = bytearray(rng.randbytes(SIZE))
            mg = bytearray(rng.randbytes(SIZE))
            xa: dict = {}
            os.pwrite(f, mf, 0)
            os.pwrite(g, mg, 0)
            os.fsync(f)
            for i in range(STEPS):
                what = _step(rng, f, g, mf, mg, xa)
                assert os.fstat(f).st_size == len(mf), f"step {i} {what}: size"
                _check(f, mf, rng, f"step {i} {what}")
                if what in ("xattr", "overwrite"):
                    assert xattr_of(f) == xa.get("user.k"), f"step {i} {what}: xattr"
                if what in ("overwrite-g", "share-into-g", "share-into-f", "overwrite"):
                    _check(g, mg, rng, f"step {i} {what} (g)")
        finally:
            os.close(f)
            os.close(g)
    assert m.returncode == 0, m.stderr
    seen = kernel_reads(img, ["f", "g"])
    if seen is not None:
        assert seen == {"f": bytes(mf), "g": bytes(mg)}


def test_the_loops_overwrites_are_timed_and_logged(tmp_path):
    """Overwrites the loop makes itself change mtime and ctime as any write
    does: stat shows the new times at once, a utimes after them keeps its
    own, and the image holds what stat showed last (its log replayed by
    the unmount's checkpoint); xfs_repair -n clean."""
    why = fuse_skip_reason()
    if why:
        pytest.skip(f"needs FUSE: {why}")
    img = fstool_image(tmp_path, "64m")
    data = bytearray(os.urandom(256 << 10))
    m = FuseMounted(img)
    with m as mnt:
        fd = os.open(mnt / "f", os.O_RDWR | os.O_CREAT, 0o644)
        gd = os.open(mnt / "g", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, data, 0)
            os.pwrite(gd, data, 0)
            os.fsync(fd)
            os.utime(fd, ns=(1_000_000_000, 2_000_000_000))
            os.utime(gd, ns=(1_000_000_000, 2_000_000_000))
            first = os.fstat(fd)
            for off in (4096, 5000, 100_000, (256 << 10) - 3):
                os.pwrite(fd, b"abc", off)
                data[off:off + 3] = b"abc"
            os.pwrite(gd, b"xyz", 8192)
            st = os.fstat(fd)
            assert st.st_mtime_ns > first.st_mtime_ns and st.st_ctime_ns >= first.st_ctime_ns
            assert st.st_size == len(data)
            # g's overwrite, then its times set: the times set stay
            os.utime(gd, ns=(3_000_000_000, 4_000_000_000))
            assert os.fstat(gd).st_mtime_ns == 4_000_000_000
        finally:
            os.close(fd)
            os.close(gd)
    assert m.returncode == 0, m.stderr
    fs = Filesystem(str(img))
    try:
        f, g = fs.lookup("/f"), fs.lookup("/g")
        assert (f.stat().st_mtime_ns, f.stat().st_ctime_ns) == (st.st_mtime_ns, st.st_ctime_ns)
        assert bytes(f.read(0, f.size)) == bytes(data)
        assert g.stat().st_mtime_ns == 4_000_000_000
    finally:
        fs.close()
    if images.xfsprogs_available():
        repair_clean(img)


def test_kill_9_after_the_loops_overwrites(tmp_path):
    """kill -9 of the mount after overwrites the loop made itself, some
    fsync'd and some not: the kernel replays the log, xfs_repair -n finds
    nothing, the fsync'd overwrites are there (blocks written after the
    last fsync may hold either) and the file's mtime is at least the one
    stat showed at that fsync."""
    why = fuse_skip_reason()
    if why:
        pytest.skip(f"needs FUSE: {why}")
    if not images.loop_available():
        pytest.skip("needs root, xfsprogs and a kernel loop mount of XFS (the reference)")
    rng = random.Random(5)
    img = fstool_image(tmp_path, "64m")
    data = bytearray(rng.randbytes(1 << 20))
    late = set()
    m = FuseMounted(img)
    with m as mnt:
        fd = os.open(mnt / "f", os.O_RDWR | os.O_CREAT, 0o644)
        os.pwrite(fd, data, 0)
        os.fsync(fd)
        before = os.fstat(fd).st_mtime_ns
        for _ in range(300):
            b = rng.randrange(len(data) // BS)
            chunk = rng.randbytes(BS)
            os.pwrite(fd, chunk, b * BS)
            data[b * BS:(b + 1) * BS] = chunk
        os.fsync(fd)
        synced = os.fstat(fd).st_mtime_ns
        assert synced > before
        for _ in range(100):
            b = rng.randrange(len(data) // BS)
            os.pwrite(fd, rng.randbytes(BS), b * BS)
            late.add(b)
        m.kill()
        try:
            os.close(fd)
        except OSError:                 # the mount is gone (ENOTCONN)
            pass
    with images.Mounted(img) as k:      # the log replayed
        got = (k / "f").read_bytes()
        st = os.stat(k / "f")
    assert len(got) == len(data)
    for b in range(len(data) // BS):
        if b not in late:
            assert got[b * BS:(b + 1) * BS] == data[b * BS:(b + 1) * BS], f"block {b}"
    assert st.st_mtime_ns >= synced
    repair_clean(img)


def test_an_overwrite_that_fails_part_way_keeps_its_time(tmp_path, monkeypatch):
    """An overwrite the loop makes whose write to the image fails once its
    bytes are there (FSTOOL_FAULT_ERRNO=EIO on that write: the fault hook)
    answers EIO, and the file's mtime still moves on, in stat and in the
    image after unmount, as the kernel's write (which updates the times
    first) leaves it; xfs_repair -n clean.  The write's number comes from a
    first run with the write log."""
    why = fuse_skip_reason()
    if why:
        pytest.skip(f"needs FUSE: {why}")
    img = fstool_image(tmp_path, "64m")
    with FuseMounted(img) as mnt:
        fd = os.open(mnt / "f", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, bytes(64 << 10), 0)
            os.fsync(fd)
            os.utime(fd, ns=(1_000_000_000, 2_000_000_000))
        finally:
            os.close(fd)
    dry = tmp_path / "dry.img"
    dry.write_bytes(img.read_bytes())
    log = tmp_path / "writes"

    def overwrite(mnt) -> None:
        fd = os.open(mnt / "f", os.O_WRONLY)
        try:
            os.pwrite(fd, b"abc", 4096)
        finally:
            os.close(fd)

    monkeypatch.setenv("FSTOOL_WRITE_LOG", str(log))
    with FuseMounted(dry) as mnt:
        before = len(log.read_text().splitlines()) if log.exists() else 0
        overwrite(mnt)
        assert len(log.read_text().splitlines()) == before + 1   # the loop's one pwrite
    monkeypatch.delenv("FSTOOL_WRITE_LOG")
    monkeypatch.setenv("FSTOOL_FAULT_AFTER_WRITES", str(before + 1))
    monkeypatch.setenv("FSTOOL_FAULT_ERRNO", "EIO")
    m = FuseMounted(img)
    with m as mnt:
        with pytest.raises(OSError) as e:
            overwrite(mnt)
        assert e.value.errno == errno.EIO
        seen = os.stat(mnt / "f").st_mtime_ns
        assert seen > 2_000_000_000
    assert m.returncode == 0, m.stderr
    fs = Filesystem(str(img))
    try:
        f = fs.lookup("/f")
        assert f.stat().st_mtime_ns == seen
        assert bytes(f.read(4096, 3)) == b"abc"
    finally:
        fs.close()
    if images.xfsprogs_available():
        repair_clean(img)


def _overwrites_with_fsyncs(mnt, seed: int, size: int):
    """12 overwrites of random blocks of ``mnt``/f (written by the loop
    itself), an fsync after every third, until one fails (the mount gone):
    (the file's bytes as of the last fsync that returned, the blocks
    written since, the mtime stat showed at that fsync: 0 before any)."""
    rng = random.Random(seed)
    data = bytearray((mnt / "f").read_bytes()) if size else bytearray()
    synced = bytes(data)
    late: set = set()
    mtime = 0
    try:
        fd = os.open(mnt / "f", os.O_WRONLY)
    except OSError:
        return synced, late, mtime
    try:
        for step in range(12):
            b = rng.randrange(len(data) // BS)
            chunk = rng.randbytes(BS)
            late.add(b)
            os.pwrite(fd, chunk, b * BS)
            data[b * BS:(b + 1) * BS] = chunk
            if step % 3 == 2:
                os.fsync(fd)
                synced = bytes(data)
                late = set()
                mtime = os.fstat(fd).st_mtime_ns
    except OSError:
        pass                            # the mount is gone: the crash
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    return synced, late, mtime


def test_a_crash_at_each_write_of_the_loops_overwrites(tmp_path, monkeypatch):
    """The kill-after-every-write harness over overwrites the loop makes
    itself, fsync'd every third: the mount killed right after its Nth
    write to the image (FSTOOL_FAULT_AFTER_WRITES=N) for N over the writes
    of the sequence (counted in a first run with the write log), then the
    kernel replays the log, xfs_repair -n finds nothing and every block
    holds what the last fsync that returned saw (those written after it,
    either) and the mtime is at least the one stat showed at that fsync.
    A few N spread over the writes by default (a few seconds);
    FSTOOL_FASTPATH_CRASH_ALL=1 tries every write."""
    skip_without_fuse_and_kernel()
    base = fstool_image(tmp_path, "64m")
    size = 256 << 10
    with FuseMounted(base) as mnt:
        fd = os.open(mnt / "f", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, random.Random(1).randbytes(size), 0)
            os.fsync(fd)
        finally:
            os.close(fd)
    # (at least the overwrites themselves)
    points = crash_points(tmp_path, base, lambda mnt: _overwrites_with_fsyncs(mnt, 2, size),
                          monkeypatch, CRASH_ALL, CRASH_POINTS, least=12)
    runs = crashed_runs(tmp_path, base, lambda mnt: _overwrites_with_fsyncs(mnt, 2, size),
                        points, monkeypatch)
    for n, img, (synced, late, mtime) in runs:
        with images.Mounted(img) as k:  # the log replayed
            got = (k / "f").read_bytes()
            replayed = os.stat(k / "f").st_mtime_ns
        assert len(got) == size, f"write {n}"
        assert replayed >= mtime, f"write {n}: the fsync'd mtime lost"
        for b in range(size // BS):
            if b not in late:
                assert got[b * BS:(b + 1) * BS] == synced[b * BS:(b + 1) * BS], \
                    f"write {n}: block {b}"
        repair_clean(img)


def test_appends_then_changes_between_them(tmp_path):
    """A file grown by appending writes (each goes to the handler; the loop
    keeps the file's size and "no xattrs" across them without asking for
    its map again, and answers the kernel's security.capability question
    before each write itself), with a change of another kind between the
    appends each time: an xattr set (then seen, not ENODATA), a truncate,
    an overwrite inside the file, a second file's appends between; every
    byte read back as the model says, through the mount and from the
    image after unmount; xfs_repair -n clean."""
    why = fuse_skip_reason()
    if why:
        pytest.skip(f"needs FUSE: {why}")
    img = fstool_image(tmp_path, "64m")
    rng = random.Random(36)
    model = {"a": bytearray(), "b": bytearray()}

    def append(fd, name, n):
        data = rng.randbytes(n)
        off = len(model[name])
        assert os.pwrite(fd, data, off) == n
        model[name][off:off + n] = data

    with FuseMounted(img) as mnt:
        fa = os.open(mnt / "a", os.O_RDWR | os.O_CREAT, 0o644)
        fb = os.open(mnt / "b", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            for n in (1000, 9240, 4096, 10240):
                append(fa, "a", n)
            with pytest.raises(OSError) as e:
                os.getxattr(mnt / "a", "security.capability")
            assert e.value.errno == errno.ENODATA
            os.setxattr(mnt / "a", "user.k", b"v")
            append(fa, "a", 3000)
            assert os.getxattr(mnt / "a", "user.k") == b"v"
            assert os.listxattr(mnt / "a") == ["user.k"]
            os.removexattr(mnt / "a", "user.k")
            append(fa, "a", 5000)
            os.ftruncate(fa, 6000)
            del model["a"][6000:]
            append(fa, "a", 7000)
            patch = rng.randbytes(2000)
            os.pwrite(fa, patch, 100)          # inside the file: the loop's overwrite
            model["a"][100:2100] = patch
            for i in range(6):                 # two files' appends in turn
                append(fa if i % 2 else fb, "a" if i % 2 else "b", 1500 + i * 700)
            assert os.fstat(fa).st_size == len(model["a"])
            assert os.fstat(fb).st_size == len(model["b"])
        finally:
            os.close(fa)
            os.close(fb)
        for name, want in model.items():
            assert (mnt / name).read_bytes() == bytes(want)
    fs = Filesystem(str(img))
    try:
        for name, want in model.items():
            f = fs.lookup(f"/{name}")
            assert bytes(f.read(0, f.size)) == bytes(want)
    finally:
        fs.close()
    if images.xfsprogs_available():
        repair_clean(img)
