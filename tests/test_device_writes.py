"""Device.pwritev (a run of adjacent buffers in one write) and the
writeback hint, as log replay uses them."""
from __future__ import annotations

import os

import pytest

from fstool.errors import ImageError, ReadOnlyError
from fstool.io.device import Device, writes_so_far


@pytest.fixture
def image(tmp_path):
    p = tmp_path / "img"
    with open(p, "wb") as f:
        f.truncate(4 << 20)
    return p


def test_pwritev_writes_the_buffers_in_order_as_one_write(image):
    # more buffers than one pwritev call takes (the kernel's 1024), of
    # several kinds and sizes
    bufs = []
    for i in range(1500):
        b = bytearray(os.urandom(512 if i % 3 else 4096))
        bufs.append(memoryview(b) if i % 5 == 0 else bytes(b) if i % 7 == 0 else b)
    want = b"".join(bytes(b) for b in bufs)
    dev = Device(image, writable=True)
    try:
        w0 = writes_so_far()
        dev.pwritev(8192, bufs)
        assert writes_so_far() - w0 == 1
        assert dev.pread(8192, len(want)) == want
        assert dev.pread(0, 8192) == bytes(8192)          # nothing before it
        assert dev.pread(8192 + len(want), 512) == bytes(512)
        dev.start_writeback(8192, len(want))               # a hint: no error, no change
        dev.fsync()
        assert dev.pread(8192, len(want)) == want
    finally:
        dev.close()


def test_pwritev_refuses_past_the_end_and_read_only(image):
    dev = Device(image, writable=True)
    try:
        with pytest.raises(ImageError, match="beyond the end"):
            dev.pwritev((4 << 20) - 512, [bytes(512), bytes(512)])
        assert dev.pread((4 << 20) - 512, 512) == bytes(512)
    finally:
        dev.close()
    ro = Device(image)
    try:
        with pytest.raises(ReadOnlyError):
            ro.pwritev(0, [bytes(512)])
        ro.start_writeback(0, 512)                         # nothing to do read-only
    finally:
        ro.close()
