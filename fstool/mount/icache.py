"""The mount's inode cache, keyed by inode number.

Two maps, both plain dicts (hash tables: a lookup costs the same with ten
thousand entries or ten million, which bench/bench_mount.py measures):

- ``refs``: the kernel's lookup count of every inode it holds (each entry
  reply adds one, ``forget`` takes them away).  An inode the kernel still
  holds stays here, however long; one it forgot leaves.  Its size is
  bounded by what the kernel keeps in its own inode cache.
- ``attrs``: decoded attributes (an ``os.stat_result``) of recently used
  inodes, at most ``max_attrs``; the oldest quarter goes when full.  Any
  change to an inode drops its entry (``invalidate``).

Nothing else is kept per inode: names, extents and directory blocks live
in the read model's own bounded caches and the buffer cache.
"""
from __future__ import annotations


class InodeCache:
    __slots__ = ("refs", "attrs", "max_attrs")

    def __init__(self, max_attrs: int = 65536):
        self.refs: dict[int, int] = {}
        self.attrs: dict = {}
        self.max_attrs = max_attrs

    # -- the kernel's references ---------------------------------------------------
    def ref(self, ino: int, n: int = 1) -> None:
        refs = self.refs
        refs[ino] = refs.get(ino, 0) + n

    def forget(self, ino: int, n: int) -> bool:
        """Drop ``n`` references; True when the kernel holds the inode no more."""
        refs = self.refs
        left = refs.get(ino, 0) - n
        if left > 0:
            refs[ino] = left
            return False
        refs.pop(ino, None)
        self.attrs.pop(ino, None)
        return True

    def held(self, ino: int) -> bool:
        return ino in self.refs

    # -- attributes ----------------------------------------------------------------
    def get(self, ino: int):
        return self.attrs.get(ino)

    def put(self, ino: int, st) -> None:
        attrs = self.attrs
        if len(attrs) >= self.max_attrs:
            # dicts keep insertion order: the oldest entries go first
            drop = self.max_attrs // 4
            for k in list(attrs)[:drop]:
                del attrs[k]
        attrs[ino] = st

    def invalidate(self, ino: int) -> None:
        self.attrs.pop(ino, None)

    def clear_attrs(self) -> None:
        self.attrs.clear()

    def __len__(self) -> int:
        return len(self.refs)
