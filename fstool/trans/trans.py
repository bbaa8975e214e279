"""Transactions: every metadata change fstool makes happens inside one.

A :class:`Transaction` owns every metadata buffer it touches, old or new.
Joining a buffer keeps a copy of what it held (the undo copy), so that

* ``abort`` puts every buffer back exactly as it was and drops the ones the
  transaction created: the caches and the disk are as before;
* ``commit`` hands the buffers that changed to the journal's committed item
  list (delayed logging), where many transactions share one checkpoint.

Which bytes changed is found at checkpoint time by comparing a buffer with
the copy the image holds, in the 128-byte chunks of a buffer log item's
dirty map; callers only join buffers before changing them.

Blocks freed by a transaction are *invalidated* (:meth:`binval`): cached
buffers over them become stale (never written back) and, where older
copies may still be in the active log, the checkpoint logs a cancel record
so that recovery does not replay those copies over whatever the blocks
hold next.  Freed extents are also *busy* until the checkpoint that frees
them is on disk: the allocator never hands them out for data or as blocks
written in place before then.
"""
from __future__ import annotations

from ..errors import FsToolError
from ..io.buf import Buf
from ..io.signals import held


class Transaction:
    def __init__(self, journal):
        self.j = journal
        self.fs = journal.fs
        self.cache = journal.cache
        self.joined: dict = {}          # key -> Buf
        self.undo: dict = {}            # key -> bytes held at join (None: created here)
        self.stale: dict = {}           # key -> Buf invalidated by this transaction
        self.busy: list = []            # (agno, agbno, length) freed by this transaction
        self.precommit: list = []       # callables run first at commit (in order)
        self.onabort: list = []         # callables run after an abort restored buffers
        self.done = False

    # -- buffers ---------------------------------------------------------------
    def join(self, buf: Buf) -> Buf:
        """Take part in ``buf``: the transaction may now change it."""
        key = buf.key
        if key not in self.joined:
            self.joined[key] = buf
            self.undo[key] = bytes(buf.data)
            buf.pins += 1
        return buf

    def read_buf(self, daddr: int, length: int, bt, **where) -> Buf:
        """A metadata buffer read (and verified) through the shared cache,
        joined to the transaction."""
        buf = self.fs.get_buf(daddr, length, bt, **where)
        if buf.stale:
            raise FsToolError(f"internal: buffer at daddr {daddr} was freed in this "
                              "transaction and read again")
        return self.join(buf)

    def get_buf(self, daddr: int, length: int, bt, pieces=None) -> Buf:
        """A buffer for blocks just allocated: zeroed, not read from disk."""
        # whatever the cache held over these blocks is gone (freeing them
        # dropped it already; this catches buffers read over free space)
        cache = self.cache
        if cache._by_block:
            for old in cache.overlapping(daddr, length >> 9) if pieces is None else \
                    [b for d, n in pieces for b in cache.overlapping(d, n >> 9)]:
                self._invalidate(old)
        buf = Buf(daddr, length, bytearray(length), bt, pieces)
        buf.new = True
        buf.verified.add(bt.name)
        key = buf.key
        self.cache.insert(buf)
        self.joined[key] = buf
        self.undo[key] = None
        self.stale.pop(key, None)
        buf.pins += 1
        return buf

    def binval(self, daddr: int, nbb: int) -> None:
        """The 512-byte blocks [daddr, daddr+nbb) were freed: every cached
        buffer over them is stale."""
        for buf in self.cache.overlapping(daddr, nbb):
            self._invalidate(buf)

    def _invalidate(self, buf: Buf) -> None:
        key = buf.key
        if key not in self.joined:
            self.join(buf)
        buf.stale = True
        self.stale[key] = buf
        self.cache.discard(key)
        self.fs.forget_cluster(buf)

    def mark_busy(self, agno: int, agbno: int, length: int) -> None:
        """Blocks freed by this transaction (into the free space btrees or
        the free list): not to be reused before their checkpoint is on disk."""
        self.busy.append((agno, agbno, length))

    def is_busy(self, agno: int, agbno: int, length: int) -> bool:
        end = agbno + length
        for a, s, n in self.busy:
            if a == agno and s < end and agbno < s + n:
                return True
        return self.j.busy.overlaps(agno, agbno, length)

    # -- ending ----------------------------------------------------------------
    def commit(self) -> None:
        if self.done:
            raise FsToolError("internal: transaction committed twice")
        with held():                    # a signal waits for the commit's end
            for fn in self.precommit:
                fn(self)
            self.j._reserve(self)
            self.done = True
            self.j._commit(self)

    def abort(self) -> None:
        """Put every joined buffer back as it was; drop the new ones."""
        if self.done:
            return
        with held():
            self._abort()

    def _abort(self) -> None:
        self.done = True
        for key, buf in self.joined.items():
            buf.pins -= 1
            old = self.undo[key]
            if old is None:
                # created here: it never existed
                self.cache.discard(key)
                buf.new = False
                buf.stale = True
                continue
            buf.data[:] = old
            if buf.stale:
                buf.stale = False
                self.cache.insert(buf)
        for buf in self.stale.values():
            self.fs.forget_cluster(buf)
        self.fs.forget_all_inodes()
        for fn in self.onabort:
            fn(self)
        self.j._aborted(self)
