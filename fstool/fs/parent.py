"""Paths of an inode from its parent pointers (the kernel's getparents
walk, as ``xfs_io -c 'parent -p'`` prints it): each parent pointer names a
directory and the name the file has there; the directory's own parent
pointers lead on, up to the root.

A parent pointer whose directory is not an in-use directory of that
generation (the kernel's handle lookup would refuse it) ends that branch;
the walk goes on with the others and says which pointer broke.  A chain
that comes back to a directory already on it is given up, as xfs_io gives
it up.
"""
from __future__ import annotations

from typing import NamedTuple

from .._backend import parsers
from ..errors import FsToolError
from ..format import constants as C
from . import attr as xattr


class Broken(NamedTuple):
    """A parent pointer of inode ``ino`` that leads nowhere, and why."""
    ino: int
    parent: xattr.Parent
    why: str


class PathWalker:
    """Paths of many inodes of one filesystem, each directory's paths
    worked out once (by ``parsers.PathTable``).  By default it reads the
    inodes it needs through ``fs``; given ``table``, a PathTable already
    holding them, it walks that."""

    def __init__(self, fs, table=None):
        self.fs = fs
        self.table = table if table is not None else parsers.PathTable(
            fs.sb.rootino, gen_of=self._read_gen, parents_of=self._read_parents,
            errors=FsToolError)
        self._broken: list[Broken] = []

    def _read_parents(self, ino: int) -> list:
        return list(xattr.iter_parents(self.fs.inode(ino)))

    def _read_gen(self, ino: int):
        try:
            node = self.fs.inode(ino)
        except FsToolError:
            return None
        if node.mode & C.S_IFMT != C.S_IFDIR or not node.nlink:
            return None
        return node.gen

    def paths(self, ino: int) -> list[bytes]:
        """Every path of ``ino`` (bytes, from '/'), in parent pointer order;
        the root's is '/'.  Pointers that lead nowhere go to ``broken``."""
        return self.table.paths(ino)

    @property
    def broken(self) -> list[Broken]:
        """The parent pointers found so far that lead nowhere."""
        raw = self.table.broken
        for child, p, why in raw[len(self._broken):]:
            self._broken.append(Broken(child, xattr.Parent._make(p), why))
        return self._broken


def paths(fs, ino: int) -> tuple[list[bytes], list[Broken]]:
    """(every path of ``ino``, the parent pointers that lead nowhere)."""
    w = PathWalker(fs)
    return w.paths(ino), w.broken
