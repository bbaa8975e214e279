"""Read access to an image file or block device, and a bounded buffer cache."""
from __future__ import annotations

import os
import stat
from collections import OrderedDict

from ..errors import ImageError


class Device:
    """An image file or block device read with pread(); never read whole."""

    def __init__(self, path: str):
        self.path = os.fspath(path)
        try:
            self.fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            raise ImageError(f"{self.path}: no such file") from None
        except IsADirectoryError:
            raise ImageError(f"{self.path}: is a directory, not an image") from None
        except OSError as e:
            raise ImageError(f"{self.path}: cannot open: {e.strerror}") from None
        st = os.fstat(self.fd)
        if stat.S_ISDIR(st.st_mode):
            os.close(self.fd)
            raise ImageError(f"{self.path}: is a directory, not an image")
        if stat.S_ISBLK(st.st_mode):
            self.size = os.lseek(self.fd, 0, os.SEEK_END)
        else:
            self.size = st.st_size

    def pread(self, offset: int, length: int) -> bytes:
        if offset < 0 or offset + length > self.size:
            raise ImageError(
                f"{self.path}: read of {length} bytes at offset {offset} lies beyond "
                f"the end of the image ({self.size} bytes): the image is truncated")
        try:
            data = os.pread(self.fd, length, offset)
        except OSError as e:
            raise ImageError(f"{self.path}: read error at offset {offset}: {e.strerror}") from None
        if len(data) != length:
            raise ImageError(f"{self.path}: short read at offset {offset}: image truncated")
        return data

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class BufferCache:
    """LRU cache of verified metadata buffers, bounded in bytes."""

    def __init__(self, max_bytes: int = 64 << 20):
        self.max_bytes = max_bytes
        self.bytes = 0
        self._lru: OrderedDict = OrderedDict()

    def get(self, key):
        buf = self._lru.get(key)
        if buf is not None:
            self._lru.move_to_end(key)
        return buf

    def put(self, key, buf) -> None:
        old = self._lru.pop(key, None)
        if old is not None:
            self.bytes -= len(old)
        self._lru[key] = buf
        self.bytes += len(buf)
        while self.bytes > self.max_bytes and self._lru:
            _, evicted = self._lru.popitem(last=False)
            self.bytes -= len(evicted)
