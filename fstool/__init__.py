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
import os
import warnings

from ._version import __version__
from .errors import (CorruptionError, DirtyLogWarning, FsToolError, FsToolWarning, ImageError,
                     LogDeviceNeeded, LogUnreadableWarning, NotFoundError, NotXfsError,
                     UnsupportedError)


def open_image(path, cache_bytes: int = 64 << 20, *, replay_in_memory: bool = False,
               logdev=None):
    """Open an XFS v5 image (file or block device) read-only.

    ``logdev``: the file or device holding the filesystem's external log
    (mkfs.xfs -l logdev=).  Without it, such an image is read as it is on
    disk, its log unread; what needs the log (``fs.log``,
    ``replay_in_memory``) raises :class:`LogDeviceNeeded`.

    A dirty log is never silent.  With ``replay_in_memory`` the image reads
    as it would after replaying it (in memory: the file is not changed);
    without, a :class:`DirtyLogWarning` says that what is read is the image
    before replay.  A log that cannot be read gives a
    :class:`LogUnreadableWarning`.  Both are kinds of
    :class:`FsToolWarning`, filtered with the :mod:`warnings` module."""
    from .fs.filesystem import Filesystem  # lazy: start-up (`fstool --help` reads no image)
    fs = Filesystem(path, cache_bytes=cache_bytes, logdev=logdev)
    name = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path)
    try:
        if not fs.logdev_given:
            # an external log not given: the image is read as it is on
            # disk; only what needs the log refuses (LogDeviceNeeded)
            if replay_in_memory:
                fs.require_log()
            return fs
        try:
            dirty = fs.log.dirty
        except FsToolError as e:
            warnings.warn(LogUnreadableWarning(
                f"{name}: the log cannot be read ({e}); the image is read as it is on disk",
                name, str(e)), stacklevel=2)
            return fs
        if dirty and replay_in_memory:
            from .recovery.memory import replay_in_memory as replay  # lazy: start-up
            replay(fs)
        elif dirty:
            warnings.warn(DirtyLogWarning(
                f"{name}: the log is dirty; what is read is the image BEFORE replay (replay "
                "it with 'fstool log replay', or open it with replay_in_memory=True)", name),
                stacklevel=2)
    except BaseException:
        fs.close()
        raise
    return fs


def backend() -> str:
    """Name of the active parser backend: "native" or "pure-python"."""
    from . import _backend  # lazy: start-up (loads the native parsers)
    return _backend.NAME


__all__ = ["open_image", "backend", "__version__", "FsToolError", "CorruptionError",
           "ImageError", "NotFoundError", "NotXfsError", "UnsupportedError", "FsToolWarning",
           "DirtyLogWarning", "LogUnreadableWarning", "LogDeviceNeeded"]
