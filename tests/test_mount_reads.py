"""The mount's reads: read-only mounts answered from the native loop's fast
path (Volume.fast_map gives read-only volumes a map too: before, every
read of a read-only mount went through Python), the bytes they read, and
the kernel's read-ahead of the mount raised once INIT is answered
(fstool.mount.run.set_read_ahead)."""
from __future__ import annotations

import os
import random

import pytest

from fixtures.fusemount import FuseMounted, fstool_image, fuse_skip_reason, run_native_session
from fstool.io.lock import mount_device
from fstool.mount import run
from fstool.mount.volume import Volume

BS = 4096
FALLOC_FL_KEEP_SIZE = 0x01


def _skip_without_fuse() -> None:
    why = fuse_skip_reason()
    if why:
        pytest.skip(f"needs FUSE: {why}")


def _files(rng: random.Random) -> dict:
    """Contents of the files written: empty, one byte, a block and a bit,
    several MiB, and one with holes written out of order (several records
    and holes between them)."""
    holes = bytearray(3 << 20)
    for _ in range(12):
        off = rng.randrange(len(holes) - 3 * BS)
        holes[off:off + 3 * BS] = rng.randbytes(3 * BS)
    return {"empty": b"", "one": b"x", "small": rng.randbytes(BS + 17),
            "big": rng.randbytes(5 << 20), "holes": bytes(holes)}


def _write(mnt, files: dict) -> None:
    for name, data in files.items():
        fd = os.open(mnt / name, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if name == "holes":
                os.ftruncate(fd, len(data))
                # the written runs one by one, last first: records and holes
                runs = []
                pos = 0
                while pos < len(data):
                    if data[pos:pos + BS] != bytes(BS):
                        runs.append(pos)
                    pos += BS
                for pos in reversed(runs):
                    os.pwrite(fd, data[pos:pos + BS], pos)
            else:
                os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)


def _image_with_files(tmp_path, seed: int = 7):
    img = fstool_image(tmp_path, "128m")
    files = _files(random.Random(seed))
    m = FuseMounted(img)
    with m as mnt:
        _write(mnt, files)
    assert m.returncode == 0, m.stderr
    return img, files


def test_a_read_only_volume_gives_a_map_that_reads_the_files_bytes(tmp_path):
    """Volume.fast_map of a read-only volume: the records, turned into
    image offsets with fast_geometry as the loop does, hold the file's
    bytes, and the map allows no writes (without: None, every read through
    Python)."""
    _skip_without_fuse()
    img, files = _image_with_files(tmp_path)
    v = Volume(img, readonly=True)
    try:
        blocklog, agblklog, agblocks, _agcount, start, _size = v.fast_geometry
        root = v.rootino
        fd = v.image_fd
        assert fd >= 0
        for name, data in files.items():
            ino = v.lookup(root, name.encode()).ino
            got = v.fast_map(ino)
            assert got is not None, name
            size, may_write, _fixed, no_xattrs, recs = got
            assert size == len(data) and not may_write and no_xattrs
            out = bytearray(size)
            for o, p, c, unwritten in recs:
                if unwritten:
                    continue
                agno, agbno = p >> agblklog, p & ((1 << agblklog) - 1)
                at = start + ((agno * agblocks + agbno) << blocklog)
                piece = os.pread(fd, c << blocklog, at)
                lo = o << blocklog
                out[lo:lo + len(piece)] = piece[:max(0, size - lo)]
            assert bytes(out[:size]) == data, name
    finally:
        v.close()


def test_a_read_only_mount_reads_every_files_bytes(tmp_path):
    """Through a read-only mount (the native loop's fast path, where it is
    built), every file reads back whole and in pieces at random offsets
    (holes as zeros), as written."""
    _skip_without_fuse()
    img, files = _image_with_files(tmp_path)
    rng = random.Random(3)
    m = FuseMounted(img, "--ro")
    with m as mnt:
        for name, data in files.items():
            fd = os.open(mnt / name, os.O_RDONLY)
            try:
                for _ in range(20):
                    off = rng.randrange(len(data) + 1)
                    n = rng.choice((1, 100, BS, 3 * BS + 5, 200 << 10))
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    assert os.pread(fd, n, off) == data[off:off + n], (name, off, n)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                assert os.pread(fd, len(data) + BS, 0) == data, name
            finally:
                os.close(fd)
        with pytest.raises(OSError):
            os.open(mnt / "big", os.O_WRONLY)
    assert m.returncode == 0, m.stderr


def test_the_mounts_read_ahead_is_raised(tmp_path):
    """Once mounted (INIT answered), the kernel's read-ahead of the mount's
    files is READ_AHEAD_KB (FUSE's own is 128 KiB); needs root (sysfs)."""
    _skip_without_fuse()
    if os.geteuid() != 0:
        pytest.skip("needs root (the mount's read_ahead_kb in sysfs)")
    img = fstool_image(tmp_path, "64m")
    m = FuseMounted(img)
    with m as mnt:
        dev = mount_device(os.path.realpath(mnt))
        assert dev is not None
        with open(f"/sys/class/bdi/{dev}/read_ahead_kb") as f:
            assert int(f.read()) == run.READ_AHEAD_KB
    assert m.returncode == 0, m.stderr


def test_mount_device_names_the_mount():
    """mount_device: the device number of a mount point (here /, as
    os.stat says), None where nothing is mounted."""
    st = os.stat("/")
    assert mount_device("/") == f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    assert mount_device("/no/such/mount/point") is None


def test_a_write_leaves_the_kernels_cached_pages(tmp_path):
    """The native loop in this process over a counting handler: a file's
    page read once stays in the kernel's page cache while other pages of
    the file are written (libfuse's AUTO_INVAL_DATA off: with it, each
    write made the next read ask for the attributes and, the mtime having
    moved, drop every cached page), so 20 rounds of a write elsewhere and
    a read of that page send no GETATTR and no READ to the handler."""
    asked = []
    seen = {}

    def wrap(ops):
        for name in ("getattr", "read", "read_map", "fast_map"):
            plain = getattr(ops, name)

            def counted(*a, _name=name, _plain=plain, **kw):
                asked.append(_name)
                return _plain(*a, **kw)
            setattr(ops, name, counted)

    def work(_session, mnt):
        fd = os.open(mnt / "f", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, bytes(range(256)) * 1024, 0)
            os.fsync(fd)
            page = os.pread(fd, 4096, 0)
            asked.clear()
            for i in range(20):
                os.pwrite(fd, b"w" * 4096, (i + 10) * 4096)
                assert os.pread(fd, 4096, 0) == page
            seen["asked"] = list(asked)
        finally:
            os.close(fd)

    run_native_session(tmp_path, wrap, work)
    assert "asked" in seen, "the work in the mount did not finish"
    assert not [n for n in seen["asked"] if n in ("getattr", "read", "read_map")], seen["asked"]
