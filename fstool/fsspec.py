"""A read-only fsspec filesystem over an XFS image: protocol ``xfs``.

Installed with the package's ``fsspec.specs`` entry point, so data tools
open files inside an image directly::

    import fsspec
    with fsspec.open("xfs://etc/hostname", image="disk.img") as f:
        print(f.read())

    import pandas
    df = pandas.read_csv("xfs://data/table.csv", storage_options={"image": "disk.img"})

Paths are relative to the image's root (``etc/hostname``; a leading ``/``
is accepted); the root is ``""``.  ``info`` follows symlinks as
``LocalFileSystem.info`` does (``islink`` and ``destination`` say so; a
dangling one is not found);
``ls`` describes a symlink itself (type "other").  Needs ``fsspec`` (the
``fsspec`` extra); writing raises ``OSError(EROFS)``.
"""
from __future__ import annotations

import datetime
import os
import stat as st

from fsspec.spec import AbstractFileSystem
from fsspec.utils import stringify_path

import fstool

from .errors import ReadOnlyError


class XfsFileSystem(AbstractFileSystem):
    """The files of one XFS image (``image=``: a path to the image file or
    block device), read-only."""

    protocol = "xfs"
    root_marker = ""

    def __init__(self, image=None, **kwargs):
        if image is None:
            raise ValueError("XfsFileSystem needs the image: "
                             "fsspec.open('xfs://path/in/image', image='disk.img')")
        super().__init__(image=image, **kwargs)
        self.image = os.fspath(image)
        self._fs = fstool.open_image(self.image)

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = stringify_path(path)
        if path.startswith("xfs://"):
            path = path[len("xfs://"):]
        elif path.startswith("xfs:"):
            path = path[len("xfs:"):]
        return "/".join(p for p in path.split("/") if p and p != ".")

    @staticmethod
    def _get_kwargs_from_urls(path):
        return {}

    # -- what fsspec asks -----------------------------------------------------
    def _record(self, name: str, lst, follow: bool) -> dict:
        link = st.S_ISLNK(lst.st_mode)
        s, size = lst, lst.st_size
        if link:
            try:
                target = self._fs.stat("/" + name)
                size = target.st_size
                if follow:
                    s = target
            except OSError:                 # dangling or looping link
                if follow:                  # as LocalFileSystem.info
                    raise FileNotFoundError(name) from None
                size = 0
        kind = "directory" if st.S_ISDIR(s.st_mode) else \
            "file" if st.S_ISREG(s.st_mode) else "other"
        out = {"name": name, "size": size, "type": kind, "created": s.st_ctime,
               "islink": link, "mode": s.st_mode, "uid": s.st_uid, "gid": s.st_gid,
               "mtime": s.st_mtime, "ino": s.st_ino, "nlink": s.st_nlink}
        if link:
            out["destination"] = self._fs.readlink("/" + name).decode("utf-8",
                                                                         "surrogateescape")
        return out

    def info(self, path, **kwargs) -> dict:
        name = self._strip_protocol(path)
        try:
            lst = self._fs.lstat("/" + name)
        except (FileNotFoundError, NotADirectoryError):
            raise FileNotFoundError(path) from None
        return self._record(name, lst, follow=True)

    def ls(self, path, detail=True, **kwargs):
        name = self._strip_protocol(path)
        here = self.info(name)
        if here["type"] != "directory":
            return [here] if detail else [name]
        prefix = name + "/" if name else ""
        out = []
        for e in self._fs.scandir("/" + name):
            full = prefix + e.name
            out.append(self._record(full, e.stat(follow_symlinks=False), follow=False)
                       if detail else full)
        return out

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None,
              **kwargs):
        if mode != "rb":
            raise ReadOnlyError(f"{path}: the image is read-only (mode {mode!r})")
        return self._fs.open("/" + self._strip_protocol(path))

    def cat_file(self, path, start=None, end=None, **kwargs) -> bytes:
        name = "/" + self._strip_protocol(path)
        node = self._fs._as_inode(name, follow=True)
        if node.is_dir:
            raise IsADirectoryError(path)
        size = node.size
        start = 0 if start is None else (max(0, size + start) if start < 0 else start)
        end = size if end is None else (max(0, size + end) if end < 0 else min(end, size))
        if end <= start:
            return b""
        return node.read(start, end - start)

    def modified(self, path) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(self.info(path)["mtime"],
                                               tz=datetime.timezone.utc)

    def created(self, path) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(self.info(path)["created"],
                                               tz=datetime.timezone.utc)

    def ukey(self, path) -> str:
        i = self.info(path)
        return f"{self.image}:{i['ino']}:{i['mtime']}:{i['size']}"

    # -- read-only ------------------------------------------------------------------
    def _refuse(self, *args, **kwargs):
        raise ReadOnlyError(f"{self.image}: the image is read-only")

    rm_file = rm = mkdir = makedirs = rmdir = touch = cp_file = mv = _refuse
    pipe_file = put_file = _refuse
