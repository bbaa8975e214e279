"""What check learns of every inode, in flat arrays (no Python object per
inode)."""
from __future__ import annotations

from array import array

from ..._backend import parsers


class InodeTable:
    """The inode chunks, sorted by first inode number, are numbered 0, 1,
    ...; the inode at index i of chunk k has slot 64 * k + i.  ``itype``
    holds the file type (mode >> 12; 0 for an inode not in use, 16 for one
    in use with no valid type), ``nlinks`` the link count, ``refs`` the
    directory entries that name it: about 9 bytes per inode.  On a
    filesystem with parent pointers ``psums`` holds, per inode, the sum of
    the mixes of the entries naming it less those of its parent pointers
    (``parsers.pptr_mix``): 0 when they are the same (8 bytes more)."""

    def __init__(self, starts, pptr: bool = False):
        self.starts = array("Q", starts)
        n = 64 * len(self.starts)
        self.itype = bytearray(n)
        self.nlinks = array("I", bytes(4 * n))
        self.refs = array("I", bytes(4 * n))
        self.psums = array("Q", bytes(8 * n)) if pptr else None

    @classmethod
    def concat(cls, parts) -> "InodeTable":
        """One table of several with ascending, disjoint inode ranges."""
        parts = list(parts)
        t = cls((), pptr=any(p.psums is not None for p in parts))
        for part in parts:
            t.starts.extend(part.starts)
            t.itype.extend(part.itype)
            t.nlinks.extend(part.nlinks)
            t.refs.extend(part.refs)
            if t.psums is not None:
                t.psums.extend(part.psums if part.psums is not None
                               else array("Q", bytes(8 * len(part.itype))))
        return t

    def slot(self, ino: int) -> int:
        return parsers.find_slot(self.starts, ino)

    def ino(self, slot: int) -> int:
        return self.starts[slot >> 6] + (slot & 63)

    def in_use(self, ino: int) -> bool:
        s = self.slot(ino)
        return s >= 0 and self.itype[s] != 0
