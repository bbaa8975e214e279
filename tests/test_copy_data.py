"""File data copied into an image by the kernel (Device.copy_from and
ns.files.copy_blocks, what populate uses for host files): shared blocks
where the image's filesystem allows, else copy_file_range, else read and
write; the same bytes every way, zeros after the data in the last block and
wherever the source has shrunk meanwhile."""
from __future__ import annotations

import errno
import os
import random
import subprocess

import pytest

from fixtures import images
from fstool.errors import ImageError
from fstool.io.device import Device
from fstool.ns import files as F

BS = 4096


def _image(path, size=1 << 20, fill=b"\xff"):
    """A writable Device over a file of ``size`` bytes of ``fill``: what a
    copy leaves unwritten shows."""
    with open(path, "wb") as f:
        f.write(fill * size)
    return Device(str(path), writable=True)


def _source(path, data):
    with open(path, "wb") as f:
        f.write(data)
    return os.open(path, os.O_RDONLY)


@pytest.mark.parametrize("way", ["copy_file_range", "read and write"])
def test_copy_from_gives_the_source_bytes(tmp_path, monkeypatch, way):
    data = random.Random(1).randbytes(300_000)
    dev = _image(tmp_path / "img")
    fd = _source(tmp_path / "src", data)
    calls = []
    real = os.copy_file_range

    def cfr(*a):
        calls.append(a)
        if way == "read and write":
            raise OSError(errno.EXDEV, "cross-device")
        return real(*a)
    monkeypatch.setattr(os, "copy_file_range", cfr)
    try:
        assert dev.copy_from(fd, 4096, 8192, 200_000) == 200_000
        # the source ends first: fewer bytes, and they are the last ones
        assert dev.copy_from(fd, 250_000, 512 << 10, 100_000) == 50_000
    finally:
        os.close(fd)
        dev.close()
    img = (tmp_path / "img").read_bytes()
    assert img[8192:8192 + 200_000] == data[4096:204_096]
    assert img[8191] == 0xFF and img[8192 + 200_000] == 0xFF
    assert img[512 << 10:(512 << 10) + 50_000] == data[250_000:]
    assert calls, "copy_file_range was not tried"
    if way == "read and write":
        assert len(calls) == 1          # a host that refuses it is not asked again


def test_copy_from_reports_source_and_image_errors(tmp_path):
    dev = _image(tmp_path / "img")
    wronly = os.open(tmp_path / "src", os.O_WRONLY | os.O_CREAT)
    try:
        # an unreadable source is the source's error (an OSError for the
        # entry), not an image error
        with pytest.raises(OSError) as ei:
            dev.copy_from(wronly, 0, 0, 4096)
        assert ei.value.errno == errno.EBADF and not isinstance(ei.value, ImageError)
        with pytest.raises(ImageError, match="beyond the end"):
            dev.copy_from(wronly, 0, (1 << 20) - 100, 4096)
    finally:
        os.close(wronly)
        dev.close()


@pytest.mark.parametrize("size,length,actual", [
    (5, BS, 5),                             # a few bytes: read, padded
    (100_005, 25 * BS, 100_005),            # whole blocks by the kernel, then the tail
    (3 << 20, 768 * BS, 70_000),            # the source shrank: zeros for the rest
    (200_000, 49 * BS, 0),                  # ... to nothing
])
def test_copy_blocks_pads_with_zeros(tmp_path, size, length, actual):
    data = random.Random(size).randbytes(actual)
    dev = _image(tmp_path / "img", size=4 << 20)
    fd = _source(tmp_path / "src", data)
    try:
        F.copy_blocks(dev, fd, 0, BS, length, size, BS)
    finally:
        os.close(fd)
        dev.close()
    img = (tmp_path / "img").read_bytes()
    assert img[:BS] == b"\xff" * BS
    assert img[BS:BS + actual] == data
    assert img[BS + actual:BS + length] == bytes(length - actual)
    assert img[BS + length:BS + length + BS] == b"\xff" * BS


def _shared(path) -> bool:
    r = subprocess.run(["filefrag", "-v", str(path)], capture_output=True, text=True)
    return "shared" in r.stdout


@pytest.mark.skipif(not images.loop_available(),
                    reason="needs root, xfsprogs and a kernel loop mount of XFS")
def test_copy_from_shares_blocks_on_a_reflink_filesystem(scratch_xfs):
    """Source and image on one XFS with reflink: whole blocks are shared
    (FICLONERANGE), an unaligned range is copied, the bytes are the same."""
    d = scratch_xfs / "copy-share"
    d.mkdir(exist_ok=True)
    data = random.Random(2).randbytes(256 << 10)
    dev = _image(d / "img", size=1 << 20, fill=b"\0")
    fd = _source(d / "src", data)
    try:
        os.fsync(fd)
        assert dev.copy_from(fd, 64 << 10, 128 << 10, 128 << 10) == 128 << 10
        assert dev._clone_ok
        assert dev.copy_from(fd, 100, 512 << 10, 5000) == 5000      # not whole blocks
        assert dev._clone_ok
    finally:
        os.close(fd)
        dev.close()
    img = (d / "img").read_bytes()
    assert img[128 << 10:256 << 10] == data[64 << 10:192 << 10]
    assert img[512 << 10:(512 << 10) + 5000] == data[100:5100]
    if subprocess.run(["which", "filefrag"], capture_output=True).returncode == 0:
        assert _shared(d / "img")


def test_small_file_data_is_gathered_into_few_writes(tmp_path):
    """Adjacent pwrite_data calls become one write; a write elsewhere, any
    read and the close make the gathered one first; the bytes are those of
    plain writes."""
    from fstool.io import device as D
    dev = _image(tmp_path / "img", size=4 << 20)
    pieces = [random.Random(k).randbytes(100 * k + 1) for k in range(1, 40)]
    want = bytearray(b"\xff" * (4 << 20))
    before = D.writes_so_far()
    pos = BS
    try:
        for p in pieces:
            pad = -len(p) % BS
            dev.pwrite_data(pos, p, pad)
            want[pos:pos + len(p) + pad] = p + bytes(pad)
            pos += len(p) + pad
        assert D.writes_so_far() == before             # nothing written yet
        # a read of the device sees the gathered bytes (written first)
        assert dev.pread(BS, len(pieces[0])) == pieces[0]
        assert D.writes_so_far() == before + 1
        # not adjacent: the gathered write is made, a new one begins
        dev.pwrite_data(pos, b"a" * 10, BS - 10)
        dev.pwrite_data(3 << 20, b"b" * 10)
        want[pos:pos + BS] = b"a" * 10 + bytes(BS - 10)
        want[3 << 20:(3 << 20) + 10] = b"b" * 10
        assert D.writes_so_far() == before + 2
        # one piece as large as a gathered write goes straight out
        big = random.Random(0).randbytes(D.GATHER_BYTES)
        dev.pwrite_data(1 << 20, big)
        want[1 << 20:(1 << 20) + len(big)] = big
        assert D.writes_so_far() == before + 4
        with pytest.raises(ImageError, match="beyond the end"):
            dev.pwrite_data((4 << 20) - 10, b"x" * 20)
        dev.pwrite_data(5 << 19, b"c" * 5)
        want[5 << 19:(5 << 19) + 5] = b"c" * 5
        assert D.writes_so_far() == before + 4
    finally:
        dev.close()
    assert D.writes_so_far() == before + 5             # the close made the last one
    assert (tmp_path / "img").read_bytes() == bytes(want)


def test_writeback_is_started_as_data_piles_up(tmp_path, monkeypatch):
    """Every WRITEBACK_BYTES of data written, writeback of the image is
    started in a thread of its own, which the close ends; the host's
    sync_file_range works here."""
    import threading
    from fstool.io import device as D
    calls = []
    real = D._sync_file_range

    def record(fd):
        calls.append((fd, threading.current_thread().name))
        return True
    monkeypatch.setattr(D, "WRITEBACK_BYTES", 1 << 20)
    monkeypatch.setattr(D, "_sync_file_range", record)
    dev = _image(tmp_path / "img", size=8 << 20)
    fd = dev.fd
    chunk = bytes(256 << 10)
    for k in range(8):
        dev.pwrite_data(k * len(chunk), chunk)
        if k == 2:
            assert not calls                    # under WRITEBACK_BYTES
    dev.pwrite(6 << 20, bytes(1 << 20))
    import time
    deadline = time.monotonic() + 10
    while not calls and time.monotonic() < deadline:
        time.sleep(0.01)
    dev.close()
    assert calls and all(c == (fd, "fstool-writeback") for c in calls)
    assert not any(t.name == "fstool-writeback" for t in threading.enumerate())
    fd = os.open(tmp_path / "img", os.O_RDWR)
    try:
        assert real(fd)
    finally:
        os.close(fd)


def test_a_write_error_met_writing_back_is_raised_by_the_next_fsync(tmp_path, monkeypatch):
    """The writeback thread waits for what it starts (fdatasync); the host
    reports a write error to one flush only, so one the thread met must be
    raised by the next flush the device is asked for, once."""
    import threading
    import time
    dev = _image(tmp_path / "img")
    real = os.fdatasync

    def flush(fd):
        if threading.current_thread().name == "fstool-writeback":
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(fd)
    monkeypatch.setattr(os, "fdatasync", flush)
    try:
        dev.pwrite(0, b"x" * BS)
        dev.kick_writeback()
        if dev._starter is None:
            pytest.skip("the host cannot start writeback (no sync_file_range)")
        for _ in range(500):
            if dev._starter.error is not None:
                break
            time.sleep(0.01)
        with pytest.raises(ImageError, match="writing back failed"):
            dev.fsync()
        dev.fsync()
    finally:
        dev.close()


def test_data_written_behind_is_the_data_written_at_once(tmp_path, monkeypatch):
    """With write-behind on, file data (pwrite_data, the copies given to
    copy_behind) is written by the device's own thread, in order: the image
    holds the bytes the same calls leave without it, the bytes are counted
    as written when given, and any other operation (a read here) waits for
    them.  A copy that fails there is raised, naming the file, by the
    device's next operation; the writes given after it are not made."""
    import threading
    srcdata = random.Random(2).randbytes(300_000)
    src = _source(tmp_path / "src", srcdata)
    made = []
    real = Device._write_all

    def noted(self, offset, data):
        made.append((offset, threading.current_thread().name))
        return real(self, offset, data)
    monkeypatch.setattr(Device, "_write_all", noted)

    def calls(dev):
        dev.pwrite_data(BS, b"a" * 100, BS - 100)
        F.copy_named(dev, src, 0, 4 * BS, 74 * BS, len(srcdata), BS, "d: f")
        dev.pwrite_data(2 * BS, b"b" * 10)
        dev.pwrite_data(100 * BS, b"c" * (3 << 20))      # one write, not gathered
    images = []
    for behind in (False, True):
        dev = _image(tmp_path / f"img{behind}", size=8 << 20)
        try:
            dev._clone_ok = False               # a copy that cannot share blocks
            assert dev.write_behind() is True
            if not behind:
                dev._behind.stop()
                dev._behind = None
            calls(dev)
            assert dev.pread(4 * BS, 100) == srcdata[:100]
            assert dev.written == BS + 10 + 74 * BS + (3 << 20)
        finally:
            dev.close()
        images.append((tmp_path / f"img{behind}").read_bytes())
    assert images[0] == images[1]
    threads = {name for _off, name in made}
    assert threads == {"MainThread", "fstool-data"}
    # a copy failing behind: raised by the next operation, later writes dropped
    dev = _image(tmp_path / "img", size=8 << 20)
    try:
        dev._clone_ok = False
        dev.write_behind()
        bad = os.open(tmp_path / "src", os.O_WRONLY)       # cannot be read from
        F.copy_named(dev, bad, 0, 4 * BS, 74 * BS, len(srcdata), BS, "d: f")
        os.close(bad)
        with pytest.raises(F.CopyFailed, match=r"^d: f: cannot copy: Bad file descriptor$"):
            # raised by whichever comes after the failure: this write
            # (then not made), else the read
            dev.pwrite_data(200 * BS, b"x" * (2 << 20))
            dev.pread(0, 10)
        # and again: nothing after the failed data may succeed
        with pytest.raises(F.CopyFailed):
            dev.pread(0, 10)
    finally:
        dev.close()
        os.close(src)
    img = (tmp_path / "img").read_bytes()
    assert img[200 * BS:200 * BS + 10] == b"\xff" * 10
