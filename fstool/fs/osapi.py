"""The ``os``-shaped side of the read API: directory entries as
``os.scandir`` yields them, and files as binary streams.

``Filesystem.scandir`` yields :class:`ImageDirEntry` objects (name, path,
inode number and type from the directory entry itself; ``stat()`` read once
and kept), ``Filesystem.open`` returns a buffered reader over
:class:`FileReader`.
"""
from __future__ import annotations

import io
import stat as st

from ..errors import InvalidArgument
from ..format import constants as C

# the directory entry's file type (ftype) as a stat file type
_FTYPE_IFMT = {C.XFS_DIR3_FT_REG_FILE: st.S_IFREG, C.XFS_DIR3_FT_DIR: st.S_IFDIR,
               C.XFS_DIR3_FT_CHRDEV: st.S_IFCHR, C.XFS_DIR3_FT_BLKDEV: st.S_IFBLK,
               C.XFS_DIR3_FT_FIFO: st.S_IFIFO, C.XFS_DIR3_FT_SOCK: st.S_IFSOCK,
               C.XFS_DIR3_FT_SYMLINK: st.S_IFLNK}


class ImageDirEntry:
    """One entry of :meth:`Filesystem.scandir`, shaped like ``os.DirEntry``:
    ``name`` and ``path`` (str, or bytes when the directory was given as
    bytes), ``inode()``, ``is_dir()``, ``is_file()``, ``is_symlink()`` (from
    the entry's file type) and ``stat()`` (from the inode scandir decoded
    with its neighbours; built once, then kept)."""

    __slots__ = ("_fs", "name", "path", "_ino", "_ifmt", "_node", "_lstat", "_stat")

    def __init__(self, fs, name, path, ino: int, ftype: int, node=None):
        self._fs = fs
        self.name = name
        self.path = path
        self._ino = ino
        self._ifmt = _FTYPE_IFMT.get(ftype)
        self._node = node               # the Inode, when scandir decoded it already
        self._lstat = None
        self._stat = None

    def inode(self) -> int:
        return self._ino

    def _type(self) -> int:
        if self._ifmt is None:          # no file type in the entry: ask the inode
            self._ifmt = st.S_IFMT(self.stat(follow_symlinks=False).st_mode)
        return self._ifmt

    def is_symlink(self) -> bool:
        return self._type() == st.S_IFLNK

    def is_junction(self) -> bool:
        return False

    def _is(self, ifmt: int, follow_symlinks: bool) -> bool:
        t = self._type()
        if t == st.S_IFLNK and follow_symlinks:
            try:
                return st.S_IFMT(self.stat().st_mode) == ifmt
            except OSError:             # dangling or looping link
                return False
        return t == ifmt

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        return self._is(st.S_IFDIR, follow_symlinks)

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        return self._is(st.S_IFREG, follow_symlinks)

    def stat(self, *, follow_symlinks: bool = True):
        """``os.stat_result`` of the entry (of its target when it is a symlink
        and ``follow_symlinks``), read on the first call and kept."""
        lst = self._lstat
        if lst is None:
            node = self._node if self._node is not None else self._fs.inode(self._ino)
            lst = self._lstat = node.stat()
        if not follow_symlinks or lst.st_mode & 0o170000 != st.S_IFLNK:
            return lst
        if self._stat is None:
            self._stat = self._fs.stat(self.path)
        return self._stat

    def __fspath__(self):
        return self.path

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


class FileReader(io.RawIOBase):
    """A read-only, seekable binary stream over a file in the image, what
    :meth:`Filesystem.open` returns: every ``read`` maps the range through the
    extent list and reads it with one ``pread`` per extent, so it needs no
    buffer of its own (``readline`` and iteration by lines read ahead in
    chunks and step back)."""

    __slots__ = ("node", "pos", "name", "_open")
    mode = "rb"

    def __init__(self, node, name=None):
        # io.RawIOBase needs no __init__ call, and the open/closed state is
        # kept here rather than in the instance dict IOBase would use: both
        # halve the cost of an open
        self.node = node
        self.pos = 0
        self.name = name if name is not None else f"inode {node.ino}"
        self._open = True

    @property
    def closed(self) -> bool:
        return not self._open

    def close(self) -> None:
        self._open = False

    def readable(self) -> bool:
        self._check_open()
        return True

    def seekable(self) -> bool:
        self._check_open()
        return True

    def _check_open(self) -> None:
        if not self._open:
            raise ValueError("I/O operation on closed file")

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

    def tell(self) -> int:
        self._check_open()
        return self.pos

    def readinto(self, b) -> int:
        self._check_open()
        n = self.node.readinto(self.pos, b)
        self.pos += n
        return n

    def read(self, size: int | None = -1) -> bytes:
        if not self._open:
            raise ValueError("I/O operation on closed file")
        data = self.node.read(self.pos, -1 if size is None or size < 0 else size)
        self.pos += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)

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

    def __repr__(self) -> str:
        return f"<fstool.FileReader name={self.name!r} size={self.node.size}>"
