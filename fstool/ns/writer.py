"""The write session: an image opened for writing.

(``recovering=(head block, cycle, last record block, tail LSN)`` is for log
recovery's own work after replay: the session accepts the still dirty log
and goes on writing it from the recovered head.)

A :class:`Writer` opens an image for writing (refusing images that are
mounted, locked by another fstool, carry a dirty log or need repair) and
ties the write core together: the journal (transactions, checkpoints, the
log), per-AG state, the space allocator and the inode allocator.  Every
change happens inside a transaction::

    with Writer(path) as w:
        with w.transaction():
            ino = w.inodes.alloc_inode(parent_ino, is_dir=False)
            ...

A transaction either commits whole or, on an exception, leaves the image
and every cache as they were.  Committed transactions reach the image in
checkpoints (see :mod:`fstool.trans.journal`): after a crash, the kernel's
log recovery (or ``fstool log replay``) brings the image to the last
checkpoint; ``close()`` writes the last one and marks the log clean.
"""
from __future__ import annotations

import os
import struct
import time

from ..alloc.inodes import InodeAllocator
from ..alloc.perag import PerAG
from ..alloc.space import SpaceAllocator
from ..errors import FsToolError, UnsupportedError, WriteRefused
from ..format import constants as C
from ..format.structs import SB
from ..fs.filesystem import Filesystem
from ..fs.icore import InodeEncoder
from ..fs.logstate import log_is_clean
from ..io import verify as V
from ..io.signals import held
from ..io.lock import ImageLock, refuse_if_mounted
from ..trans.journal import Journal


def _sb_counters_layout():

    off = SB.offset("sb_icount")
    if (SB.offset("sb_ifree"), SB.offset("sb_fdblocks")) != (off + 8, off + 16):
        raise FsToolError("internal: superblock counters not adjacent")
    return struct.Struct(">3Q"), off


_SB_COUNTERS, _SB_COUNTERS_OFF = _sb_counters_layout()

WRITABLE_INCOMPAT = (C.XFS_SB_FEAT_INCOMPAT_FTYPE | C.XFS_SB_FEAT_INCOMPAT_SPINODES
                     | C.XFS_SB_FEAT_INCOMPAT_META_UUID | C.XFS_SB_FEAT_INCOMPAT_BIGTIME
                     | C.XFS_SB_FEAT_INCOMPAT_NREXT64)
# parent pointers (and exchange-range, which mkfs turns on with them): only
# a writer that keeps every inode's parent pointers opens them (repair, and
# the writers whose names go through fstool.ns.namespace: populate and the
# edits; exchange-range needs nothing of a writer that exchanges no ranges)
PARENT_INCOMPAT = C.XFS_SB_FEAT_INCOMPAT_PARENT | C.XFS_SB_FEAT_INCOMPAT_EXCHRANGE


class Writer:
    """An image opened for writing; see the module docstring."""

    def __init__(self, path, *, timestamp_ns: int | None = None, cache_bytes: int = 64 << 20,
                 logged: bool = True, checkpoint_bytes: int | None = None,
                 recovering=None, rebuilds_rmapbt: bool = False,
                 clears_needsrepair: bool = False, keeps_parents: bool = False,
                 discard: bool = False, log_at: int | None = None):
        refuse_if_mounted(os.fspath(path))
        self.fs = fs = Filesystem(path, cache_bytes=cache_bytes, writable=True)
        self.dev = fs.dev
        self.path = fs.dev.path
        self._lock = ImageLock(self.dev, self.path,
                               fs.logdev_path if fs.external_log else None)
        self.journal = None
        try:
            self._lock.__enter__()
            self._check_writable(logged and recovering is None, rebuilds_rmapbt,
                                 clears_needsrepair, keeps_parents)
            if log_at is not None:
                # a log being moved (resize): the caller formatted a clean
                # log at block ``log_at``; the journal writes there, and
                # the superblock names it from the first checkpoint on
                fs.sb.logstart = log_at
            self.journal = Journal(fs, logged=logged, checkpoint_bytes=checkpoint_bytes,
                                   log_position=recovering)
            # blocks freed are punched out of the image file once freed on disk
            self.journal.discard = discard
        except BaseException:
            fs.close()
            raise
        sb = self.sb = fs.sb
        self.uuid = fs.uuid
        self.sparse = sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_SPINODES)
        self.finobt = sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_FINOBT)
        self.inobtcount = sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_INOBTCNT)
        self.bigtime = sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_BIGTIME)
        self.nrext64 = sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_NREXT64)
        self.reflink = sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK)
        self.rmapbt = sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_RMAPBT)
        # every change of a block's owner updates the rmapbt in the same
        # transaction, except while a repair rebuilds every rmapbt whole
        self.rmap_on = self.rmapbt and not rebuilds_rmapbt
        self.enc = InodeEncoder(sb.inodesize, self.uuid, bigtime=self.bigtime,
                                nrext64=self.nrext64)
        self.timestamp_ns = timestamp_ns
        self.tx = None
        self.ags: dict = {}                  # agno -> PerAG joined to the open transaction
        self._perag: dict = {}               # agno -> PerAG kept across transactions
        self._ag_counters: dict = {}         # agno -> (icount, ifree, fdblocks) committed
        self._sb_sum = None                  # [icount, ifree, fdblocks] over every AG
        self.space = SpaceAllocator(self)
        self.inodes = InodeAllocator(self)
        self.closed = False

    # -- lifetime ----------------------------------------------------------------
    def _check_writable(self, logged: bool, rebuilds_rmapbt: bool = False,
                        clears_needsrepair: bool = False, keeps_parents: bool = False) -> None:
        """Refuse what this writer cannot keep consistent.  Only a caller
        that checks the whole filesystem and clears the mark (repair) may
        open one marked as needing repair (``clears_needsrepair``), and only
        one that keeps every inode's parent pointers (``keeps_parents``) one
        with parent pointers or exchange-range."""
        sb = self.fs.sb
        if sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_NEEDSREPAIR) and not clears_needsrepair:
            raise WriteRefused(f"{self.path}: the filesystem is marked as needing repair; "
                               "run xfs_repair first")
        if sb.incompat & PARENT_INCOMPAT and not keeps_parents:
            raise UnsupportedError(f"{self.path}: the filesystem has parent pointers or "
                                   "exchange-range (mkfs -n parent=1), which this command "
                                   "does not keep yet")
        unknown = sb.incompat & ~(WRITABLE_INCOMPAT | PARENT_INCOMPAT)
        if clears_needsrepair:
            unknown &= ~C.XFS_SB_FEAT_INCOMPAT_NEEDSREPAIR
        if unknown:
            raise UnsupportedError(f"{self.path}: writing with incompat features 0x"
                                   f"{unknown:x} is not supported")
        if sb.log_incompat:
            raise UnsupportedError(f"{self.path}: log incompat features set; mount and "
                                   "unmount it with a kernel first")
        if logged:
            clean, why = log_is_clean(self.fs)
            if not clean:
                raise WriteRefused(f"{self.path}: the journal is dirty ({why}); replay it "
                                   "first (fstool log replay, or a kernel mount)")

    def close(self) -> None:
        """Write the last checkpoint, mark the log clean and release the image."""
        if self.closed:
            return
        with held():                    # a signal waits until the log is clean
            self.closed = True
            try:
                if self.tx is not None:
                    self.abort()
                if self.journal is not None:
                    self.journal.close()
            finally:
                try:
                    self._lock.__exit__(None, None, None)
                finally:
                    self.fs.close()

    def __enter__(self):
        return self

    def __exit__(self, etype, exc, tb):
        if etype is not None and self.tx is not None:
            self.abort()
        self.close()

    # -- transactions --------------------------------------------------------------
    def transaction(self):
        return _TxContext(self)

    def begin(self):
        if self.tx is not None:
            raise FsToolError("nested transactions are not supported")
        self.tx = tx = self.journal.begin()
        self.ags = {}
        self.space.begin()
        self.inodes.begin()
        tx.precommit.append(self._precommit)
        tx.onabort.append(self._aborted)
        return tx

    def _aborted(self, tx) -> None:
        """An aborted transaction put the old header bytes back: what was
        decoded or counted from its changes is dropped."""
        self._perag.clear()
        self._ag_counters.clear()
        self._sb_sum = None

    def commit(self) -> None:
        tx = self.tx
        try:
            tx.commit()
        except BaseException:
            if not tx.done:
                tx.abort()
            raise
        finally:
            self.tx = None
            self.ags = {}

    def abort(self) -> None:
        tx = self.tx
        self.tx = None
        self.ags = {}
        if tx is not None:
            tx.abort()

    def _precommit(self, tx) -> None:
        """Finish the transaction's in-core state into its buffers: inode
        records, deferred frees, the free lists, roots and counters, the AG
        headers and the superblock counters."""
        self.inodes.finish()
        self.space.apply_frees()
        for ag in list(self.ags.values()):
            self.space.fix_freelist(ag)
            ag.sync_roots()
            if ag.agf_dirty or ag.longest_stale:
                # free space changed (else agf_longest stands)
                self.space.update_longest(ag)
        changed = False
        counters = self._ag_counters
        for ag in self.ags.values():
            if ag.agf_dirty or ag.agi_dirty or ag.agfl_dirty:
                ag.pack()
                c = ag.counters()
                old = counters.get(ag.agno)
                if c != old:
                    total = self._sb_sum
                    if total is not None and old is not None:
                        for k in range(3):
                            total[k] += c[k] - old[k]
                    else:
                        self._sb_sum = None
                    counters[ag.agno] = c
                    changed = True
            ag.remember()
        if changed:
            self._update_sb_counters(tx)
        self.inodes.remember_nearest()

    def _update_sb_counters(self, tx) -> None:
        """Superblock counters as the sum over every AG, as the kernel does
        for lazy counters: exact by construction.  The sum is kept from one
        commit to the next and moved by each AG's change (recounted from
        the headers after an abort or at the first commit)."""
        total = self._sb_sum
        if total is None:
            fs = self.fs
            total = [0, 0, 0]
            for agno in range(self.sb.agcount):
                c = self._ag_counters.get(agno)
                if c is None:
                    agf, agi = fs.agf(agno), fs.agi(agno)
                    c = self._ag_counters[agno] = (
                        agi["agi_count"], agi["agi_freecount"],
                        agf["agf_freeblks"] + agf["agf_flcount"] + agf["agf_btreeblks"])
                for k in range(3):
                    total[k] += c[k]
            self._sb_sum = total
        buf = tx.read_buf(0, self.sb.sectsize, V.SB, agno=0, block=0)
        if list(_SB_COUNTERS.unpack_from(buf.data, _SB_COUNTERS_OFF)) != total:
            _SB_COUNTERS.pack_into(buf.data, _SB_COUNTERS_OFF, *total)

    def ag(self, agno: int):
        """The per-AG state of ``agno`` for the open transaction (kept from
        the last transaction that used it when its headers are unchanged)."""
        st = self.ags.get(agno)
        if st is None:
            tx = self.tx
            if tx is None:
                raise FsToolError("internal: AG state outside a transaction")
            st = self._perag.get(agno)
            if st is None or not st.rebind(tx):
                st = self._perag[agno] = PerAG(self, agno)
            self.ags[agno] = st
        return st

    def finish_mkfs(self) -> None:
        """Clear the superblock's in-progress mark (mkfs --populate's end)."""
        with self.transaction() as w:
            buf = w.tx.read_buf(0, self.sb.sectsize, V.SB, agno=0, block=0)
            buf.data[SB.offset("sb_inprogress")] = 0
        self.journal.sync()

    def sync(self) -> None:
        """Everything committed so far is on disk and in the log."""
        self.journal.sync()

    # -- time ------------------------------------------------------------------------
    def now_ns(self) -> int:
        if self.timestamp_ns is not None:
            return self.timestamp_ns
        return time.time_ns()


class _TxContext:
    def __init__(self, w: Writer):
        self.w = w

    def __enter__(self):
        self.w.begin()
        return self.w

    def __exit__(self, etype, exc, tb):
        w = self.w
        if w.tx is None:
            return False
        if etype is None:
            try:
                w.commit()
            except BaseException:
                w.abort()
                raise
        else:
            w.abort()
        return False
