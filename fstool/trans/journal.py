"""The journal: transactions, delayed logging and checkpoints.

One :class:`Journal` serves an image opened for writing.  Transactions
commit into the committed item list (the CIL): the buffers they changed,
the buffers they created and the buffers they freed.  Nothing is written
then.  A *checkpoint* (:meth:`Journal.push`) writes everything the CIL
holds, however many transactions it took:

1. buffers created since the last checkpoint (new btree, directory, xattr
   and bmbt blocks, fresh inode chunks) are free space in the image until
   the checkpoint commits, so they are written in place first (ordered),
   like file data, and need no log space;
2. buffers that already existed are logged: only their 128-byte chunks
   that differ from the copy the image holds, once per checkpoint however
   often they changed;
3. the device is flushed, the checkpoint's commit record is written and
   flushed: the checkpoint is now durable, and the logged buffers are
   written back in place.

A new buffer over blocks freed in the same checkpoint would overwrite what
the image still uses if written early, so it is logged whole instead; the
allocator keeps data away from such busy blocks altogether.  Freed buffers
that the active log may hold older copies of get a cancel record.

Without a log (mkfs --populate of a brand-new image, marked in progress
until it ends), a checkpoint writes every buffer in place.

Every metadata write goes through here; the write verifier
(:func:`fstool.io.verify.stamp`) gives each buffer its LSN and CRC once, as
it leaves for the log or the disk.
"""
from __future__ import annotations

import os

from ..errors import FsToolError, NoSpaceError
from ..format import constants as C
from ..io import verify as V
from ..io.device import punch_hole, writes_so_far
from ..io.signals import held
from .busy import BusyExtents
from .logwriter import (XFS_BLF_CHUNK, LogGeometry, LogWriter, buf_item_regions, find_log_head,
                        lsn as make_lsn)
from .trans import Transaction

# for crash tests only: a cap on what one transaction may log, below the
# log's own (a change then goes the way a change larger than the log goes)
_TX_LIMIT_ENV = "FSTOOL_TEST_MAX_TX_BYTES"


class Journal:
    def __init__(self, fs, *, logged: bool = True, checkpoint_bytes: int | None = None,
                 memory_bytes: int = 64 << 20, log_position=None):
        self.fs = fs
        self.dev = fs.dev
        self.cache = fs.cache
        self.sb = fs.sb
        self.busy = BusyExtents()
        self.discard = False            # punch freed blocks once their checkpoint is on disk
        # flush the superblock written back before the rest of a checkpoint
        # (a log being moved: the superblock names the log that holds it)
        self.sb_barrier = False
        self.discarded = 0              # bytes punched so far
        self.tx: Transaction | None = None
        self.dirty: dict = {}          # key -> Buf to log
        self.full: set = set()         # keys logged whole (over blocks freed here)
        self.new: dict = {}            # key -> Buf to write in place first
        self._new_bytes = 0            # their length in all
        self.spilled: set = set()      # keys of new buffers already written in place
        self.cancels = _Cancels()      # key -> Buf
        self.window: dict = {}         # key -> Buf logged by the previous checkpoint
        self.precheckpoint: list = []  # callables run before a checkpoint is formatted
        self.seq = 0
        self.checkpoints = 0
        self.last_checkpoint: dict | None = None
        self.memory_bytes = memory_bytes
        self.log = None
        self.items: list = []          # other log items for the next checkpoint (EFDs)
        if logged:
            tail = None
            if log_position is not None:
                # after log recovery: go on from the recovered head, with
                # the recovered tail until the first checkpoint moves it
                head, cycle, prev, tail = log_position
            else:
                head, cycle, prev = find_log_head(fs)
            self.log = LogWriter(fs.log_dev, LogGeometry(fs), head_block=head,
                                 head_cycle=cycle, prev_block=prev, tail_lsn=tail,
                                 sync=fs.log_sync)
            cap = self.log.capacity()
            # two checkpoints may be in the active log at once: keep each
            # well under half of it
            self.checkpoint_bytes = checkpoint_bytes or min(cap // 4, 16 << 20)
            # what one transaction may log: two checkpoints share the log
            # (crash tests may make it smaller, to reach what larger changes
            # do on a small image: FSTOOL_TEST_MAX_TX_BYTES)
            self.max_tx_bytes = cap * 2 // 5
            limit = os.environ.get(_TX_LIMIT_ENV)
            if limit:
                self.max_tx_bytes = min(self.max_tx_bytes, int(limit))
        else:
            self.checkpoint_bytes = checkpoint_bytes or (64 << 20)
            self.max_tx_bytes = None
        self._pending_bytes = 0

    # -- transactions -------------------------------------------------------------
    def transaction(self) -> "_TxContext":
        return _TxContext(self)

    def begin(self) -> Transaction:
        if self.tx is not None:
            raise FsToolError("internal: a transaction is already open")
        self.tx = Transaction(self)
        return self.tx

    def _reserve(self, tx: Transaction) -> None:
        """Before a transaction joins the CIL: make room for what it will
        log (a checkpoint of what is there first, if both would not fit one),
        or refuse a transaction larger than the log can hold."""
        size = 0
        for key, buf in tx.joined.items():
            old = tx.undo[key]
            if buf.stale or old is None or buf.new or key in self.dirty or \
                    key in self.spilled:
                continue
            if buf.data != old:
                size += buf.length
        if self.max_tx_bytes is not None and size > self.max_tx_bytes:
            raise NoSpaceError(f"the change rewrites {size >> 10} KiB of existing metadata, "
                               f"more than the log ({self.log.capacity() >> 10} KiB) can "
                               "hold in one transaction; make it in smaller steps")
        if self._pending_bytes and self._pending_bytes + size > self.checkpoint_bytes:
            self.push()

    def _commit(self, tx: Transaction) -> None:
        for key, buf in tx.joined.items():
            buf.pins -= 1
            if buf.stale:
                self._drop_stale(key, buf)
                continue
            old = tx.undo[key]
            if old is None:
                self._add_new(key, buf, tx)
                continue
            if buf.new or key in self.dirty:
                continue
            if key in self.spilled:
                # new since the last checkpoint and written early: still
                # free space in the image, so written again, not logged
                buf.new = True
                self._put_new(key, buf)
                continue
            if buf.data != old:
                buf.dirty = True
                buf.clean = old
                self.dirty[key] = buf
                self._pending_bytes += buf.length
        for agno, agbno, length in tx.busy:
            self.busy.add(agno, agbno, length)
        self.tx = None
        if self._pending_bytes >= self.checkpoint_bytes:
            self.push()
        elif self._pinned_bytes() >= self.memory_bytes:
            self._spill()

    def _aborted(self, tx: Transaction) -> None:
        self.tx = None

    def _pinned_bytes(self) -> int:
        return self._pending_bytes + self._new_bytes

    def _put_new(self, key, buf) -> None:
        old = self.new.get(key)
        if old is not None:
            self._new_bytes -= old.length
        self.new[key] = buf
        self._new_bytes += buf.length

    def _pop_new(self, key):
        buf = self.new.pop(key, None)
        if buf is not None:
            self._new_bytes -= buf.length
        return buf

    def _spill(self) -> None:
        """Too much in memory: write the new buffers in place now (they are
        free space in the image until the next checkpoint commits, so this
        needs no ordering) and let the cache drop them."""
        sb = self.sb
        lsn = self.log.head_lsn if self.log is not None else 0
        for key in sorted(self.new):
            buf = self.new[key]
            V.stamp(buf.bt, buf.data, lsn, blocksize=sb.blocksize, inodesize=sb.inodesize)
            self._write_in_place(buf, buf.data)
            buf.new = False
            self.spilled.add(key)
        self.new.clear()
        self._new_bytes = 0
        self.cache._shrink(scan=len(self.cache))

    def _drop_stale(self, key, buf) -> None:
        self.spilled.discard(key)
        was_new = self._pop_new(key) is not None
        if self.dirty.pop(key, None) is not None:
            self.full.discard(key)
            self._pending_bytes -= buf.length
            self.cancels[key] = buf
        elif key in self.window and not was_new:
            self.cancels[key] = buf
        buf.dirty = buf.new = False
        buf.clean = None

    def _add_new(self, key, buf, tx: Transaction) -> None:
        agno, agbno, nblocks = self._ag_range(buf)
        over_cancel = self.cancels.overlapping(buf)
        if over_cancel or tx.is_busy(agno, agbno, nblocks):
            # over blocks the image still uses until this checkpoint commits:
            # log it whole rather than write it early
            for k in over_cancel:
                del self.cancels[k]
            buf.new = False
            buf.dirty = True
            buf.clean = None
            self.dirty[key] = buf
            self.full.add(key)
            self._pending_bytes += buf.length
        else:
            buf.new = True
            self._put_new(key, buf)

    def _ag_range(self, buf) -> tuple[int, int, int]:
        sb = self.sb
        bb_log = sb.blocklog - C.BBSHIFT
        fsb = buf.daddr >> bb_log
        agno, agbno = divmod(fsb, sb.agblocks)
        return agno, agbno, max(1, (buf.length + sb.blocksize - 1) >> sb.blocklog)

    # -- checkpoints ------------------------------------------------------------------
    def push(self) -> None:
        """Write a checkpoint of everything committed so far (nothing of an
        open transaction)."""
        if not (self.dirty or self.new or self.cancels or self.spilled or self.items):
            return
        with held():                # a signal waits for the checkpoint's end
            self._push()

    def _push(self) -> None:
        for fn in self.precheckpoint:
            fn(self)
        tx = self.tx
        sb = self.sb
        bs, isz = sb.blocksize, sb.inodesize
        lsn = self.log.head_lsn if self.log is not None else 0

        def committed(key, buf):
            """The bytes of the buffer as committed (an open transaction may
            be changing it: then its undo copy is what was committed)."""
            if tx is not None and key in tx.undo and tx.undo[key] is not None:
                return bytearray(tx.undo[key])
            return buf.data

        # 1. new buffers: written in place now, before the log refers to them
        for key in sorted(self.new):
            buf = self.new[key]
            data = committed(key, buf)
            V.stamp(buf.bt, data, lsn, blocksize=bs, inodesize=isz)
            self._write_in_place(buf, data)
        # 2. existing buffers: what changed goes to the log
        logged = []
        items = []
        for key in sorted(self.dirty):
            buf = self.dirty[key]
            data = committed(key, buf)
            V.stamp(buf.bt, data, lsn, blocksize=bs, inodesize=isz, clean=buf.clean)
            if self.log is not None:
                whole = key in self.full
                blft = buf.bt.blft(data)
                pos = 0
                for daddr, nbytes in buf.extents():
                    piece = data[pos:pos + nbytes]
                    old = None if whole else buf.clean[pos:pos + nbytes]
                    chunks = _changed_chunks(piece, old)
                    if chunks:
                        items.append(buf_item_regions(daddr, nbytes, blft, chunks, piece))
                    pos += nbytes
            logged.append((key, buf, data))
        for key in sorted(self.cancels):
            buf = self.cancels[key]
            if self.log is not None:
                blft = buf.bt.blft(buf.data) if buf.bt is not None else 0
                for daddr, nbytes in buf.extents():
                    items.append(buf_item_regions(daddr, nbytes, blft, [], b"", cancel=True)[:1])
        items += self.items
        # 3. the commit record, then the buffers in place
        if self.log is not None and items:
            tid = ((lsn >> 32) * 0x9E3779B1 + (lsn & 0xFFFFFFFF)) & 0xFFFFFFFF or 1
            records0 = self.log.records_written
            self.log.write_checkpoint(tid, items, lsn)
            # what this checkpoint put in the log (the writes counted so far
            # include its commit record: what crash tests aim at)
            self.last_checkpoint = {"lsn": lsn, "records": self.log.records_written - records0,
                                    "buffers": len(items) - len(self.items),
                                    "other_items": len(self.items),
                                    "writes_so_far": writes_so_far()}
        elif self.log is None:
            pass
        else:
            # only new buffers: they are durable once flushed
            self.dev.fsync()
        for key, buf, data in logged:
            self._write_in_place(buf, data)
            if self.sb_barrier and buf.extents()[0][0] == 0:
                # the superblock (the lowest address: written back first)
                # durable before anything else of the checkpoint
                self.dev.fsync()
        # 4. bookkeeping: the buffers are clean and stay cached
        for buf in self.window.values():
            buf.pins -= 1
        self.window = {}
        for key, buf, data in logged:
            buf.dirty = False
            buf.clean = None
            if data is not buf.data:
                # an open transaction holds newer bytes: what it started from
                # is now what the image has
                tx.undo[key] = bytes(data)
            if self.log is not None:
                self.window[key] = buf
                buf.pins += 1
        for key, buf in self.new.items():
            buf.new = False
            if tx is not None and key in tx.undo and tx.undo[key] is not None:
                tx.undo[key] = bytes(committed(key, buf))
        self.dirty.clear()
        self.full.clear()
        self.new.clear()
        self._new_bytes = 0
        self.spilled.clear()
        self.cancels.clear()
        self.items = []
        if self.discard and self.busy:
            self._discard()
        self.busy.clear()
        self._pending_bytes = 0
        self.seq += 1
        self.checkpoints += 1
        self.cache._shrink(scan=len(self.cache))

    def _discard(self) -> None:
        """Punch the blocks this checkpoint freed out of the image file, now
        that the checkpoint is on disk (the kernel's online discard).  Not
        while an undo recorder watches the device (it could not put a
        punched range back), nor on a host that cannot punch (then never
        again this session)."""
        dev = self.dev
        if dev.is_blockdev or dev.write_hook is not None:
            return
        sb = self.sb
        bs = sb.blocksize
        for agno in self.busy.ags():
            for start, end in self.busy.merged(agno):
                try:
                    # a partition of a disk image: its offsets are not the file's
                    punch_hole(dev.fd, dev.start + (agno * sb.agblocks + start) * bs,
                               (end - start) * bs)
                except OSError:
                    self.discard = False
                    return
                self.discarded += (end - start) * bs

    def _write_in_place(self, buf, data) -> None:
        pos = 0
        for daddr, nbytes in buf.extents():
            self.dev.pwrite(daddr << C.BBSHIFT, data[pos:pos + nbytes] if buf.pieces else data)
            pos += nbytes

    def sync(self) -> None:
        """Make everything committed durable (fsync)."""
        self.push()
        self.dev.fsync()

    def close(self) -> None:
        """Checkpoint what is left and mark the log clean."""
        with held():
            self._close()

    def _close(self) -> None:
        if self.tx is not None:
            self.tx.abort()
        self.push()
        if self.checkpoints:
            self.dev.fsync()
            if self.log is not None:
                # the log was clean when the session began: it only needs
                # marking clean again if checkpoints were written since
                self.log.write_unmount()
        for buf in self.window.values():
            buf.pins -= 1
        self.window = {}

    def add_item(self, regions: list) -> None:
        """Another log item (an EFD, say) for the next checkpoint: committed
        with the transaction that commits next."""
        self.items.append(regions)

    # -- busy extents -------------------------------------------------------------
    def is_busy(self, agno: int, agbno: int, length: int) -> bool:
        tx = self.tx
        if tx is not None:
            return tx.is_busy(agno, agbno, length)
        return self.busy.overlaps(agno, agbno, length)


class _TxContext:
    def __init__(self, journal: Journal):
        self.j = journal

    def __enter__(self) -> Transaction:
        return self.j.begin()

    def __exit__(self, etype, exc, tb):
        tx = self.j.tx
        if tx is None:
            return False
        if etype is None:
            try:
                tx.commit()
            except BaseException:
                if not tx.done:
                    tx.abort()
                else:
                    self.j.tx = None
                raise
        else:
            tx.abort()
        return False


class _Cancels(dict):
    """The buffers cancelled since the last checkpoint (key -> Buf), with
    an index of the disk regions they lie in, so that a new buffer finds
    those it overlaps without a look at every one (a shrink cancels
    thousands in one checkpoint: freed inode chunks and btree blocks)."""

    _SHIFT = 13                 # regions of 4 MiB (in 512-byte units)

    def __init__(self):
        super().__init__()
        self._regions: dict = {}

    @classmethod
    def _spans(cls, buf):
        sh = cls._SHIFT
        for daddr, nbytes in buf.extents():
            last = daddr + max(1, nbytes >> C.BBSHIFT) - 1
            yield from range(daddr >> sh, (last >> sh) + 1)

    def __setitem__(self, key, buf) -> None:
        if key in self:
            del self[key]
        super().__setitem__(key, buf)
        for r in self._spans(buf):
            self._regions.setdefault(r, set()).add(key)

    def __delitem__(self, key) -> None:
        buf = self[key]
        super().__delitem__(key)
        for r in self._spans(buf):
            keys = self._regions.get(r)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._regions[r]

    def clear(self) -> None:
        super().clear()
        self._regions.clear()

    def overlapping(self, buf) -> list:
        """The keys of the cancelled buffers ``buf`` overlaps."""
        near: set = set()
        for r in self._spans(buf):
            near |= self._regions.get(r, set())
        return [k for k in near if _overlap(self[k], buf)]


def _overlap(a, b) -> bool:
    for d1, n1 in a.extents():
        for d2, n2 in b.extents():
            if d1 < d2 + (n2 >> C.BBSHIFT) and d2 < d1 + (n1 >> C.BBSHIFT):
                return True
    return False


def _changed_chunks(data, old) -> list:
    """Numbers of the 128-byte chunks of ``data`` that differ from ``old``
    (every chunk when there is no old copy)."""
    n = (len(data) + XFS_BLF_CHUNK - 1) // XFS_BLF_CHUNK
    if old is None:
        return list(range(n))
    out = []
    step = XFS_BLF_CHUNK
    for i in range(n):
        a = i * step
        if data[a:a + step] != old[a:a + step]:
            out.append(i)
    return out


__all__ = ["Journal", "Transaction", "make_lsn"]
