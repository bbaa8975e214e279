"""One exception hierarchy for fstool.

Classes also subclass the matching built-in error so that callers can catch
``FileNotFoundError`` and friends without knowing fstool.
"""
from __future__ import annotations


class FsToolError(Exception):
    """Base of every error fstool raises on purpose."""


class ImageError(FsToolError, OSError):
    """The image cannot be opened or read (missing, truncated, unreadable)."""


class UnsupportedError(FsToolError):
    """The image uses a format or feature fstool does not handle."""


class UnknownFeatureError(UnsupportedError):
    """The superblock sets incompatible feature bits fstool does not know."""


class CorruptionError(FsToolError, ValueError):
    """A metadata structure failed verification.

    ``structure`` names the on-disk structure (``"agf"``, ``"inobt block"``,
    ``"inode"``...), ``agno``/``block``/``ino`` locate it and ``field`` names the
    field that failed.
    """

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


class PathError(FsToolError):
    def __init__(self, path: str, reason: str):
        self.path = path
        super().__init__(f"{path}: {reason}")


class NotFoundError(PathError, FileNotFoundError):
    def __init__(self, path: str):
        super().__init__(path, "no such file or directory in the image")


class NotADirectoryImageError(PathError, NotADirectoryError):
    def __init__(self, path: str):
        super().__init__(path, "not a directory")


class IsADirectoryImageError(PathError, IsADirectoryError):
    def __init__(self, path: str):
        super().__init__(path, "is a directory")


class SymlinkLoopError(PathError):
    def __init__(self, path: str):
        super().__init__(path, "too many levels of symbolic links")


class InvalidArgument(FsToolError, ValueError):
    """A request that cannot be met for this image (AG out of range, ...)."""
