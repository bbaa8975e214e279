"""Metadata buffers and the one cache that reads and transactions share.

A :class:`Buf` is one metadata buffer: a range of the image (``daddr`` in
512-byte units, ``length`` in bytes, or several ``pieces`` for a directory
block that spans discontiguous extents), its contents as a mutable
``bytearray``, and its buffer type (:class:`~fstool.io.verify.BufType`),
which knows how to verify it on read and stamp it on write.

The :class:`BufferCache` holds every buffer read or created, keyed by
``(daddr, length)``.  Readers get the same ``Buf`` a transaction changes, so a
read inside a transaction sees its changes.  Buffers a transaction holds, or
that carry committed changes not yet written back, are pinned: the LRU never
evicts them.  Clean buffers stay cached after a commit.

State of a buffer on the write path (set by the transaction layer):

``pins``    transactions and checkpoint holding it (never evicted while > 0)
``dirty``   committed changes that are not yet on disk; ``clean`` then holds
            the bytes the image has (what recovery replays the log onto)
``new``     allocated since the last checkpoint: it is free space on disk, so
            it is written in place before the checkpoint instead of logged
``stale``   its blocks were freed: never written back, dropped from the cache
"""
from __future__ import annotations

from collections import OrderedDict

from ..format import constants as C


class Buf:
    __slots__ = ("daddr", "length", "data", "bt", "pieces", "verified", "pins", "dirty",
                 "new", "stale", "clean", "__weakref__")

    def __init__(self, daddr: int, length: int, data: bytearray, bt, pieces=None):
        self.daddr = daddr
        self.length = length
        self.data = data
        self.bt = bt
        self.pieces = pieces          # [(daddr, nbytes)] when discontiguous, else None
        self.verified = set()         # names of the buffer types it was verified as
        self.pins = 0
        self.dirty = False
        self.new = False
        self.stale = False
        self.clean = None

    @property
    def key(self) -> tuple:
        return (self.daddr, self.length)

    def extents(self) -> list:
        """(daddr, nbytes) of every contiguous piece, in buffer order."""
        return self.pieces or [(self.daddr, self.length)]

    def __repr__(self) -> str:
        state = "".join(c for c, on in (("D", self.dirty), ("N", self.new), ("S", self.stale))
                        if on)
        name = self.bt.name if self.bt is not None else "?"
        return f"<Buf {name} daddr={self.daddr} len={self.length} {state}>"


class BufferCache:
    """Every cached metadata buffer, bounded in bytes for the unpinned ones
    (least recently used first out).  An index by filesystem block finds the
    buffers a freed extent overlaps without scanning the cache."""

    def __init__(self, max_bytes: int = 64 << 20, block_bb: int = 8):
        self.max_bytes = max_bytes
        self.bytes = 0
        self.block_bb = block_bb                  # 512-byte units per fs block
        self._lru: OrderedDict = OrderedDict()
        self._by_block: dict = {}                 # block-aligned daddr -> set of keys
        self._inserts = 0

    def __len__(self) -> int:
        return len(self._lru)

    def get(self, key) -> Buf | None:
        buf = self._lru.get(key)
        if buf is not None:
            self._lru.move_to_end(key)
        return buf

    def _blocks(self, buf: Buf):
        bb = self.block_bb
        if not buf.pieces:                  # most buffers: one contiguous piece
            d = buf.daddr
            return range(d - d % bb, d + (buf.length >> C.BBSHIFT), bb)
        return [b for d, n in buf.pieces
                for b in range(d - d % bb, d + (n >> C.BBSHIFT), bb)]

    def insert(self, buf: Buf) -> Buf:
        key = buf.key
        old = self._lru.pop(key, None)
        if old is not None:
            self._forget(old)
        self._lru[key] = buf
        self.bytes += buf.length
        idx = self._by_block
        for b in self._blocks(buf):
            s = idx.get(b)
            if s is None:
                idx[b] = {key}
            else:
                s.add(key)
        self._inserts += 1
        # over the bound, look for something to evict now and then: while
        # a transaction holds much, most buffers are pinned
        if self.bytes > self.max_bytes and not self._inserts & 15:
            self._shrink(64)
        return buf

    def _forget(self, buf: Buf) -> None:
        self.bytes -= buf.length
        idx = self._by_block
        key = buf.key
        for b in self._blocks(buf):
            s = idx.get(b)
            if s is not None:
                s.discard(key)
                if not s:
                    del idx[b]

    def _shrink(self, scan: int = 32) -> None:
        """Evict the oldest unpinned buffers; pinned ones met on the way move
        to the back.  At most ``scan`` buffers are looked at, so that a cache
        full of pinned buffers costs little per insert."""
        lru = self._lru
        for _ in range(min(scan, len(lru))):
            if self.bytes <= self.max_bytes:
                return
            key, buf = next(iter(lru.items()))
            if buf.pins or buf.dirty or buf.new:
                lru.move_to_end(key)
                continue
            del lru[key]
            self._forget(buf)

    def discard(self, key) -> None:
        buf = self._lru.pop(key, None)
        if buf is not None:
            self._forget(buf)

    def overlapping(self, daddr: int, nbb: int) -> list:
        """Cached buffers that share a 512-byte block with [daddr, daddr+nbb)."""
        end = daddr + nbb
        bb = self.block_bb
        first = daddr - daddr % bb
        if (end - first) // bb > 4 * len(self._lru):
            keys = set(self._lru)
        else:
            keys = set()
            idx = self._by_block
            for b in range(first, end, bb):
                s = idx.get(b)
                if s:
                    keys |= s
        out = []
        for key in keys:
            buf = self._lru[key]
            for d, n in buf.extents():
                if d < end and daddr < d + (n >> C.BBSHIFT):
                    out.append(buf)
                    break
        return out

    def values(self):
        return list(self._lru.values())

    def clear(self) -> None:
        """Drop every buffer that is neither pinned nor holding changes."""
        for key, buf in list(self._lru.items()):
            if not (buf.pins or buf.dirty or buf.new):
                del self._lru[key]
                self._forget(buf)
