"""fstool: an offline toolkit for XFS v5 filesystem images.

``open_image(path)`` is the public entry point; the Filesystem it returns
reads like ``os`` (docs/api.md)::

    import fstool
    with fstool.open_image("disk.img") as fs:
        for path, inode in fs.walk("/etc"):
            print(path, inode.size)
        print(fs.stat("/etc/hostname").st_mtime_ns)
        with fs.open("/etc/hostname") as f:
            data = f.read()
"""
from ._version import __version__
from .errors import (CorruptionError, FsToolError, ImageError, NotFoundError, NotXfsError,
                     UnsupportedError)


def open_image(path, cache_bytes: int = 64 << 20):
    """Open an XFS v5 image (file or block device) read-only."""
    from .fs.filesystem import Filesystem  # lazy: start-up (`fstool --help` reads no image)
    return Filesystem(path, cache_bytes=cache_bytes)


def backend() -> str:
    """Name of the active parser backend: "native" or "pure-python"."""
    from . import _backend  # lazy: start-up (loads the native parsers)
    return _backend.NAME


__all__ = ["open_image", "backend", "__version__", "FsToolError", "CorruptionError",
           "ImageError", "NotFoundError", "NotXfsError", "UnsupportedError"]
