"""The ``os``-shaped side of the read API: directory entries as
``os.scandir`` yields them, and files as binary streams.

``Filesystem.scandir`` yields :class:`ImageDirEntry` objects (name, path,
inode number and type from the directory entry itself; ``stat()`` read once
and kept), ``Filesystem.open`` returns a buffered reader over
:class:`FileReader`.
"""
from __future__ import annotations

import io

from .._backend import parsers
from ..errors import InvalidArgument

class ImageDirEntry(parsers.DirEntryCore):
    """One entry of :meth:`Filesystem.scandir`, shaped like ``os.DirEntry``:
    ``name`` and ``path`` (str, or bytes when the directory was given as
    bytes), ``inode()``, ``is_dir()``, ``is_file()``, ``is_symlink()`` (from
    the entry's file type) and ``stat()`` (from the inode scandir decoded
    with its neighbours; built once, then kept).  Those come from
    ``parsers.DirEntryCore`` (native: scandir makes a batch of entries in
    one call, and their ``stat()`` and ``is_*()`` cost no Python frame)."""

    __slots__ = ()

    def is_junction(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"<ImageDirEntry {self.name!r}>"


class ScandirIterator:
    """What :meth:`Filesystem.scandir` returns: an iterator of
    :class:`ImageDirEntry` that is also a context manager, as
    ``os.scandir``'s is."""

    def __init__(self, entries):
        self._it = iter(entries)

    def __iter__(self):
        # a for loop runs the generator itself, without this class's __next__
        return self._it

    def __next__(self) -> ImageDirEntry:
        return next(self._it)

    def close(self) -> None:
        self._it = iter(())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class FileReader(parsers.FileReaderCore):
    """A read-only, seekable binary stream over a file in the image, what
    :meth:`Filesystem.open` returns: every ``read`` maps the range through the
    extent list and reads it with one ``pread`` per extent (a small file in
    one extent: one native call), so it needs no buffer of its own
    (``readline`` and iteration by lines read ahead in chunks and step
    back).  ``node``, ``pos``, ``name``, ``closed``, ``close``, ``read``,
    ``tell`` and the ``with`` protocol come from ``parsers.FileReaderCore``
    (native: opening, reading and closing a small file cost no Python
    frame).

    It is an ``io.RawIOBase`` (registered as one rather than derived from
    it, which would double the cost of an open), so ``io.BufferedReader``,
    ``io.TextIOWrapper`` and ``shutil.copyfileobj`` take it as they take a
    host file."""

    __slots__ = ()
    mode = "rb"

    def _check_open(self) -> None:
        if not self._open:
            raise ValueError("I/O operation on closed file.")

    # -- what a file says of itself -----------------------------------------------------
    def readable(self) -> bool:
        self._check_open()
        return True

    def seekable(self) -> bool:
        self._check_open()
        return True

    def writable(self) -> bool:
        self._check_open()
        return False

    def isatty(self) -> bool:
        self._check_open()
        return False

    def flush(self) -> None:
        self._check_open()

    def fileno(self) -> int:
        raise io.UnsupportedOperation("a file inside an image has no descriptor")

    def write(self, b):
        raise io.UnsupportedOperation("write: the image is read-only")

    writelines = write

    def truncate(self, size=None):
        raise io.UnsupportedOperation("truncate: the image is read-only")

    # -- position --------------------------------------------------------------------
    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check_open()
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self.pos + offset
        elif whence == io.SEEK_END:
            pos = self.node.size + offset
        else:
            raise InvalidArgument(f"invalid whence ({whence}, should be 0, 1 or 2)")
        if pos < 0:
            raise InvalidArgument(f"negative seek position {pos}")
        self.pos = pos
        return pos

    # -- reading -------------------------------------------------------------------
    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, b) -> int:
        self._check_open()
        n = self.node.readinto(self.pos, b)
        self.pos += n
        return n

    def readline(self, size: int | None = -1) -> bytes:
        self._check_open()
        node = self.node
        pos = self.pos
        left = node.size - pos
        if size is not None and 0 <= size < left:
            left = size
        parts = []
        got = 0
        step = 8192
        while got < left:
            chunk = node.read(pos + got, min(step, left - got))
            if not chunk:
                break
            i = chunk.find(b"\n")
            if i >= 0:
                parts.append(chunk[:i + 1])
                got += i + 1
                break
            parts.append(chunk)
            got += len(chunk)
            step = min(step * 2, 1 << 20)
        self.pos = pos + got
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def readlines(self, hint: int | None = -1) -> list:
        lines = []
        total = 0
        for line in self:
            lines.append(line)
            total += len(line)
            if hint is not None and 0 < hint <= total:
                break
        return lines

    def __iter__(self):
        self._check_open()
        return self

    def __next__(self) -> bytes:
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def __repr__(self) -> str:
        return f"<fstool.FileReader name={self.name!r} size={self.node.size}>"


io.RawIOBase.register(FileReader)
