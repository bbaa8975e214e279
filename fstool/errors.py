"""One exception hierarchy for fstool.

Classes also subclass the matching built-in error so that callers can catch
``FileNotFoundError`` and friends without knowing fstool, and every class
carries the errno a filesystem would return for it (``exc.errno``), so that
the FUSE mount can hand errors back to the kernel unchanged.
"""
from __future__ import annotations

import errno as _errno

# the kernel's name for "metadata corruption detected" (EUCLEAN on Linux)
EFSCORRUPTED = _errno.EUCLEAN


class FsToolError(Exception):
    """Base of every error fstool raises on purpose."""

    errno: int = _errno.EIO

    def __init__(self, *args):
        super().__init__(*args)
        # OSError subclasses set errno from their arguments: keep ours
        self.errno = type(self).errno

    def __str__(self) -> str:
        # OSError would print "[Errno n] ...": keep the message alone
        return str(self.args[0]) if self.args else ""


class ImageError(FsToolError, OSError):
    """The image cannot be opened or read (missing, truncated, unreadable)."""


class ImageNotFoundError(ImageError, FileNotFoundError):
    """The image file does not exist."""
    errno = _errno.ENOENT


class ImageTruncatedError(ImageError):
    """The image file ends before the filesystem it holds does."""


class UnsupportedError(FsToolError):
    """The image uses a format or feature fstool does not handle."""
    errno = _errno.EOPNOTSUPP


class UnknownFeatureError(UnsupportedError):
    """The superblock sets incompatible feature bits fstool does not know."""


class CorruptionError(FsToolError, ValueError):
    """A metadata structure failed verification.

    ``structure`` names the on-disk structure (``"agf"``, ``"inobt block"``,
    ``"inode"``...), ``agno``/``block``/``ino`` locate it and ``field`` names the
    field that failed.
    """
    errno = EFSCORRUPTED

    def __init__(self, structure: str, detail: str, *, agno: int | None = None,
                 block: int | None = None, ino: int | None = None,
                 field: str | None = None):
        self.structure = structure
        self.detail = detail
        self.agno = agno
        self.block = block
        self.ino = ino
        self.field = field
        where = []
        if ino is not None:
            where.append(f"inode {ino}")
        if agno is not None:
            where.append(f"AG {agno}")
        if block is not None:
            where.append(f"block {block}")
        loc = f" ({', '.join(where)})" if where else ""
        fld = f" {field}:" if field else ""
        super().__init__(f"corrupt {structure}{loc}:{fld} {detail}")


class NotXfsError(CorruptionError):
    """No XFS superblock where the image should start (wrong file, or the
    primary superblock is destroyed)."""


class PathError(FsToolError):
    """An error about one path; the message starts with it."""

    def __init__(self, path: str, reason: str):
        self.path = path
        super().__init__(f"{path}: {reason}")
        # what os functions set on their errors
        self.filename = path
        self.strerror = reason


class NotFoundError(PathError, FileNotFoundError):
    errno = _errno.ENOENT

    def __init__(self, path: str, reason: str = "no such file or directory in the image"):
        super().__init__(path, reason)


class NotADirectoryImageError(PathError, NotADirectoryError):
    errno = _errno.ENOTDIR

    def __init__(self, path: str, reason: str = "not a directory"):
        super().__init__(path, reason)


class IsADirectoryImageError(PathError, IsADirectoryError):
    errno = _errno.EISDIR

    def __init__(self, path: str, reason: str = "is a directory"):
        super().__init__(path, reason)


class SymlinkLoopError(PathError, OSError):
    errno = _errno.ELOOP

    def __init__(self, path: str, reason: str = "too many levels of symbolic links"):
        super().__init__(path, reason)


class InvalidArgument(FsToolError, ValueError):
    """A request that cannot be met for this image (AG out of range, ...)."""
    errno = _errno.EINVAL


class BadValue(InvalidArgument):
    """A value given to a command is not valid: an option outside what the
    format allows, an AG or inode number the filesystem does not have (the
    command line's fault, not the image's: exit status 2)."""


class LogDeviceNeeded(BadValue):
    """The filesystem's log is on an external device and none was given
    (``--logdev FILE``): what needs the log cannot go on (a missing
    argument: exit status 2)."""


class LogDeviceTooSmall(LogDeviceNeeded):
    """The external log device given is shorter than the log the
    superblock describes (sb_logblocks): the wrong file, or one cut short
    (the command line's fault: exit status 2; check: it cannot check)."""


# -- what writers raise: each with the errno the kernel returns ------------------

class ExistsError(FsToolError, FileExistsError):
    """The name is already taken."""
    errno = _errno.EEXIST


class NotEmptyError(FsToolError, OSError):
    """A directory that must be empty is not."""
    errno = _errno.ENOTEMPTY


class NoSpaceError(FsToolError, OSError):
    """The image has no room for what was asked (blocks or inodes)."""
    errno = _errno.ENOSPC


class NameTooLongError(FsToolError, OSError):
    """A name over 255 bytes, or a symlink target over the format's limit."""
    errno = _errno.ENAMETOOLONG


class TooManyLinksError(FsToolError, OSError):
    """A link count would pass the format's limit."""
    errno = _errno.EMLINK


class FileTooBigError(FsToolError, OSError):
    """A size or offset beyond what an XFS file can hold."""
    errno = _errno.EFBIG


class NoDataError(FsToolError, OSError):
    """No such extended attribute."""
    errno = _errno.ENODATA


class RangeError(FsToolError, OSError):
    """A name or buffer outside the range the call allows (xattr names)."""
    errno = _errno.ERANGE


class TooBigError(FsToolError, OSError):
    """An argument too large for the call (xattr values over 64 KiB)."""
    errno = _errno.E2BIG


class NoSuchOffsetError(FsToolError, OSError):
    """No data (or hole) at or after an offset: lseek's SEEK_DATA/SEEK_HOLE
    at or past the end of the file."""
    errno = _errno.ENXIO


class NotPermittedError(FsToolError, PermissionError):
    """An operation the filesystem forbids whoever asks (hard links to
    directories, removing the root...)."""
    errno = _errno.EPERM


class ReadOnlyError(FsToolError, OSError):
    """A write to an image opened read-only."""
    errno = _errno.EROFS


class ImageBusy(FsToolError, OSError):
    """The image is mounted, attached to a loop device or held by another fstool."""
    errno = _errno.EBUSY


class WriteRefused(FsToolError, OSError):
    """The image is in a state writers must not touch (dirty log, needs
    repair, corrupt); the message says what to run first."""
    errno = _errno.EUCLEAN


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM ended the command (``signum``); raised where the
    work under way can stop (fstool/io/signals.py).  A KeyboardInterrupt,
    so that everything that cleans up after Ctrl-C cleans up after it."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


# -- warnings: filterable with the warnings module -------------------------------

class FsToolWarning(UserWarning):
    """Base of the warnings fstool gives (``warnings.simplefilter("error",
    fstool.FsToolWarning)`` makes them errors, "ignore" silences them)."""


class DirtyLogWarning(FsToolWarning):
    """The image's log holds work not yet written back: what is read is the
    image before replay (``open_image(path, replay_in_memory=True)`` reads
    it as it would be after)."""

    def __init__(self, message: str, path: str = ""):
        super().__init__(message)
        self.path = path


class LogUnreadableWarning(FsToolWarning):
    """The image's log cannot be read: whether it is dirty is not known;
    what is read is the image as it is on disk."""

    def __init__(self, message: str, path: str = "", reason: str = ""):
        super().__init__(message)
        self.path = path
        self.reason = reason


def errno_of(exc: BaseException) -> int:
    """The errno to report for any exception (EIO for the unexpected)."""
    if isinstance(exc, FsToolError):
        return exc.errno
    if isinstance(exc, OSError) and exc.errno:
        return exc.errno
    return _errno.EIO
