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
    worked out once.  ``parents_of(ino)`` gives an inode's parent pointers
    (by default read through ``fs``); ``gen_of(ino)``, a directory's
    generation, or None when ``ino`` is not an in-use directory."""

    def __init__(self, fs, parents_of=None, gen_of=None):
        self.fs = fs
        self.root = fs.sb.rootino
        self._parents_of = parents_of or self._read_parents
        self._gen_of = gen_of or self._read_gen
        self._dirs: dict = {self.root: [b"/"]}     # directory -> its paths
        self._prefixes: dict = {}                  # directory -> its paths ending in '/'
        self.broken: list[Broken] = []

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
        the root's is '/'.  Pointers that lead nowhere go to ``broken``.
        A pointer is a :class:`Parent` or a plain (ino, gen, name) tuple."""
        if ino == self.root:
            return [b"/"]
        parents = self._parents_of(ino)
        # the common case, at once: every pointer names a directory whose
        # paths are known, of the generation it records
        dirs, gen_of, prefixes = self._dirs, self._gen_of, self._prefixes
        out = []
        for d, gen, name in parents:
            pre = prefixes.get(d)
            if pre is None:
                known = dirs.get(d)
                if known is None:
                    break
                pre = prefixes[d] = [b if b == b"/" else b + b"/" for b in known]
            if d == ino or gen_of(d) != gen:
                break
            if len(pre) == 1:
                out.append(pre[0] + name)
            else:
                out.extend([b + name for b in pre])
        else:
            return out
        return self._paths(ino, parents, ())[0]

    def _paths(self, ino: int, parents, chain) -> tuple[list[bytes], bool]:
        """(paths, whether a cycle cut some of them short)."""
        out = []
        cut = False
        chain = chain + (ino,)
        for p in parents:
            base, c = self._dir_paths(ino, p, chain)
            cut |= c
            name = p[2]
            for b in base:
                out.append((b if b != b"/" else b"") + b"/" + name)
        return out, cut

    def _dir_paths(self, child: int, p, chain) -> tuple[list[bytes], bool]:
        p = xattr.Parent._make(p)
        d = p.ino
        if d in chain:
            return [], True                 # a cycle: given up
        gen = self._gen_of(d)
        if gen is None:
            self.broken.append(Broken(child, p, f"inode {d} is not a directory in use"))
            return [], False
        if gen != p.gen:
            self.broken.append(Broken(child, p, f"directory {d} has generation {gen}, "
                                      f"not {p.gen}"))
            return [], False
        known = self._dirs.get(d)
        if known is not None:
            return known, False
        try:
            parents = self._parents_of(d)
        except FsToolError as e:
            self.broken.append(Broken(child, p, f"directory {d}: {e}"))
            return [], False
        got, cut = self._paths(d, parents, chain)
        if not cut:                         # what a cycle cut short depends on the chain
            self._dirs[d] = got
        return got, cut


def paths(fs, ino: int) -> tuple[list[bytes], list[Broken]]:
    """(every path of ``ino``, the parent pointers that lead nowhere)."""
    w = PathWalker(fs)
    return w.paths(ino), w.broken
