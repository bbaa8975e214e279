"""fstool: an offline toolkit for XFS v5 filesystem images.

``open_image(path)`` is the public entry point::

    import fstool
    with fstool.open_image("disk.img") as fs:
        for entry in fs.listdir("/etc"):
            print(entry.name, entry.ino)
        data = fs.read("/etc/hostname")
"""
from ._version import __version__
from .errors import (CorruptionError, FsToolError, ImageError, NotFoundError,
                     UnsupportedError)


def open_image(path, cache_bytes: int = 64 << 20):
    """Open an XFS v5 image (file or block device) read-only."""
    from .fs.mount import Filesystem
    return Filesystem(path, cache_bytes=cache_bytes)


def backend() -> str:
    """Name of the active parser backend: "native" or "pure-python"."""
    from . import _backend
    return _backend.NAME


__all__ = ["open_image", "backend", "__version__", "FsToolError", "CorruptionError",
           "ImageError", "NotFoundError", "UnsupportedError"]
