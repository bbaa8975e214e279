"""A device look-alike that keeps some bytes in memory.

``OverlayDevice``: ``fstool ls --replay-in-memory`` reads the image as it
would be after log replay without changing it: the replayed blocks live here
and every other sector comes from the image.
"""
from __future__ import annotations

from ..errors import ReadOnlyError

SECTOR = 512


class _Wrapped:
    """What a Device look-alike copies from the device it wraps."""

    writable = False

    def __init__(self, base):
        self.base = base
        self.path = base.path
        self.size = base.size
        self.is_blockdev = base.is_blockdev
        self.fd = base.fd
        self.start = base.start
        self.fixed_size = base.fixed_size
        self.st_dev, self.st_ino, self.st_rdev = base.st_dev, base.st_ino, base.st_rdev

    def fsync(self) -> None:
        pass

    def close(self) -> None:
        self.base.close()


class OverlayDevice(_Wrapped):
    """Wraps a :class:`~fstool.io.device.Device`; ``put(offset, data)``
    (sector aligned) makes later reads of those bytes return ``data``."""

    def __init__(self, base):
        super().__init__(base)
        self.sectors: dict[int, bytes] = {}

    def put(self, offset: int, data) -> None:
        if offset % SECTOR or len(data) % SECTOR:
            raise ValueError("overlay writes must be whole sectors")
        first = offset // SECTOR
        mv = memoryview(bytes(data))
        for i in range(len(data) // SECTOR):
            self.sectors[first + i] = bytes(mv[i * SECTOR:(i + 1) * SECTOR])

    def pread(self, offset: int, length: int) -> bytes:
        data = self.base.pread(offset, length)
        if not self.sectors or length <= 0:
            return data
        first = offset // SECTOR
        last = (offset + length - 1) // SECTOR
        if last - first + 1 > len(self.sectors):
            hits = [s for s in self.sectors if first <= s <= last]
        else:
            hits = [s for s in range(first, last + 1) if s in self.sectors]
        if not hits:
            return data
        out = bytearray(data)
        for s in hits:
            sec = self.sectors[s]
            lo = max(offset, s * SECTOR)
            hi = min(offset + length, (s + 1) * SECTOR)
            out[lo - offset:hi - offset] = sec[lo - s * SECTOR:hi - s * SECTOR]
        return bytes(out)

    def preadinto(self, view, offset: int) -> None:
        """Fill the writable buffer ``view`` from ``offset``, exactly (as
        :meth:`Device.preadinto <fstool.io.device.Device.preadinto>`)."""
        view[:] = self.pread(offset, len(view))

    def pwrite(self, offset: int, data) -> None:
        raise ReadOnlyError(f"{self.path}: the in-memory replay view is read-only")
