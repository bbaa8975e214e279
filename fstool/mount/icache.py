"""The mount's inode cache, keyed by inode number.

Two maps:

- ``refs``: the kernel's lookup count of every inode it holds (each entry
  reply adds one, ``forget`` takes them away).  An inode the kernel still
  holds stays here, however long; one it forgot leaves.  Its size is
  bounded by what the kernel keeps in its own inode cache.  Radix-style:
  inode numbers come in chunks of 64 (an inode chunk), so the map is a dict
  from ``ino >> 6`` to a flat array of 64 counts (and how many are live):
  one hash lookup on 64 times fewer keys plus an array index, about 9
  bytes per cached inode, and a lookup cost that stays flat from 10^4 to
  10^7 cached inodes (``bench/bench_mount.py --icache``).
- ``attrs``: decoded attributes (an ``os.stat_result``) of recently used
  inodes, at most ``max_attrs``; the oldest quarter goes when full.  Any
  change to an inode drops its entry (``invalidate``).

Nothing else is kept per inode: names, extents and directory blocks live
in the read model's own bounded caches and the buffer cache.
"""
from __future__ import annotations

from array import array

SHIFT = 6                      # 64 inodes to an inode chunk
MASK = (1 << SHIFT) - 1
LIVE = 1 << SHIFT              # the slot counting a chunk's live entries
_EMPTY = bytes(8 * (LIVE + 1))


class InodeCache:
    __slots__ = ("chunks", "count", "attrs", "max_attrs")

    def __init__(self, max_attrs: int = 65536):
        self.chunks: dict[int, array] = {}
        self.count = 0
        self.attrs: dict = {}
        self.max_attrs = max_attrs

    # -- the kernel's references ---------------------------------------------------
    def ref(self, ino: int, n: int = 1) -> None:
        key = ino >> SHIFT
        c = self.chunks.get(key)
        if c is None:
            c = self.chunks[key] = array("Q", _EMPTY)
        i = ino & MASK
        if not c[i]:
            c[LIVE] += 1
            self.count += 1
        c[i] += n

    def refs_of(self, ino: int) -> int:
        c = self.chunks.get(ino >> SHIFT)
        return c[ino & MASK] if c is not None else 0

    def forget(self, ino: int, n: int) -> bool:
        """Drop ``n`` references; True when the kernel holds the inode no more."""
        key = ino >> SHIFT
        c = self.chunks.get(key)
        i = ino & MASK
        if c is not None and c[i]:
            if c[i] > n:
                c[i] -= n
                return False
            c[i] = 0
            self.count -= 1
            c[LIVE] -= 1
            if not c[LIVE]:
                del self.chunks[key]
        self.attrs.pop(ino, None)
        return True

    def held(self, ino: int) -> bool:
        c = self.chunks.get(ino >> SHIFT)
        return c is not None and c[ino & MASK] != 0

    def inodes(self):
        """Every inode the kernel holds."""
        for key, c in self.chunks.items():
            base = key << SHIFT
            for i in range(LIVE):
                if c[i]:
                    yield base + i

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
        return self.count
