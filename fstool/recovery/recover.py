"""Log recovery: the kernel's two passes over the log, then what follows.

Pass 1 collects cancelled buffers.  Pass 2 replays, transaction by
transaction in commit order, the items of every committed transaction in
the kernel's order (buffers, then other items, then inode-unlink buffers,
then cancels), with the v5 rule that a buffer is not replayed over a block
whose LSN is at least the transaction's, nor an inode over one whose LSN is
newer.  Replayed buffers of a known type get the transaction's LSN and a
fresh CRC, as the kernel's write verifiers give them.  Intents without a
done item are collected for :mod:`fstool.recovery.finish`.

Blocks are kept in a bounded write-back cache and written through the
image's :class:`~fstool.io.device.Device`; nothing is written with
``dry_run``.
"""
from __future__ import annotations

import gc
import struct
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field

from .._backend import parsers
from ..format import constants as C
from ..format import log as L
from ..format import structs as S
from ..log import items as I
from ..errors import UnsupportedError
from ..log.device import LogCorrupt
from ..log.records import RecordError, walk
from ..log.reassemble import Reassembler

_BE64 = struct.Struct(">Q")
_BE32 = struct.Struct(">I")
_BE16 = struct.Struct(">H")

# where a v5 block keeps its LSN and uuid, by the magic found in it
# (xlog_recover_get_buf_lsn); offsets come from the header layouts
_SB_LSN = (S.SB.offset("sb_lsn"), S.SB.offset("sb_uuid"))
_AGF_LSN = (S.AGF.offset("agf_lsn"), S.AGF.offset("agf_uuid"))
_AGI_LSN = (S.AGI.offset("agi_lsn"), S.AGI.offset("agi_uuid"))
_AGFL_LSN = (S.AGFL.offset("agfl_lsn"), S.AGFL.offset("agfl_uuid"))
_SBT_LSN = (S.BTREE_SBLOCK.offset("bb_lsn"), S.BTREE_SBLOCK.offset("bb_uuid"))
_LBT_LSN = (S.BTREE_LBLOCK.offset("bb_lsn"), S.BTREE_LBLOCK.offset("bb_uuid"))
_DIR_LSN = (S.DIR3_BLK_HDR.offset("lsn"), S.DIR3_BLK_HDR.offset("uuid"))
_DA_LSN = (S.DA3_BLKINFO.offset("lsn"), S.DA3_BLKINFO.offset("uuid"))
_SL_LSN = (S.DSYMLINK_HDR.offset("sl_lsn"), S.DSYMLINK_HDR.offset("sl_uuid"))
_LSN32 = {
    C.XFS_ABTB_CRC_MAGIC: _SBT_LSN, C.XFS_ABTC_CRC_MAGIC: _SBT_LSN,
    C.XFS_RMAP_CRC_MAGIC: _SBT_LSN, C.XFS_REFC_CRC_MAGIC: _SBT_LSN,
    C.XFS_IBT_CRC_MAGIC: _SBT_LSN, C.XFS_FIBT_CRC_MAGIC: _SBT_LSN,
    C.XFS_BMAP_CRC_MAGIC: _LBT_LSN,
    C.XFS_AGF_MAGIC: _AGF_LSN, C.XFS_AGFL_MAGIC: _AGFL_LSN, C.XFS_AGI_MAGIC: _AGI_LSN,
    C.XFS_SYMLINK_MAGIC: _SL_LSN,
    C.XFS_DIR3_BLOCK_MAGIC: _DIR_LSN, C.XFS_DIR3_DATA_MAGIC: _DIR_LSN,
    C.XFS_DIR3_FREE_MAGIC: _DIR_LSN,
    C.XFS_SB_MAGIC: _SB_LSN,
}
_LSNDA = {C.XFS_DIR3_LEAF1_MAGIC, C.XFS_DIR3_LEAFN_MAGIC, C.XFS_DA3_NODE_MAGIC}

# write-verifier stamping by buffer type: (lsn offset or None, crc offset)
_SHORT_BT = {C.XFS_ABTB_CRC_MAGIC, C.XFS_ABTC_CRC_MAGIC, C.XFS_RMAP_CRC_MAGIC,
             C.XFS_REFC_CRC_MAGIC, C.XFS_IBT_CRC_MAGIC, C.XFS_FIBT_CRC_MAGIC}


def _stamp_rule(blft: int, buf) -> tuple | None:
    """(lsn_off, crc_off) the buffer type's write verifier stamps, or None
    when the type has no verifier that stamps (or the magic disagrees)."""
    m32 = _BE32.unpack_from(buf, 0)[0] if len(buf) >= 4 else 0
    m16 = _BE16.unpack_from(buf, 8)[0] if len(buf) >= 10 else 0
    if blft == L.XFS_BLFT_BTREE_BUF:
        if m32 in _SHORT_BT:
            return (_SBT_LSN[0], C.XFS_BTREE_SBLOCK_CRC_OFF)
        if m32 == C.XFS_BMAP_CRC_MAGIC:
            return (_LBT_LSN[0], C.XFS_BTREE_LBLOCK_CRC_OFF)
        return None
    if blft == L.XFS_BLFT_AGF_BUF and m32 == C.XFS_AGF_MAGIC:
        return (_AGF_LSN[0], C.XFS_AGF_CRC_OFF)
    if blft == L.XFS_BLFT_AGFL_BUF and m32 == C.XFS_AGFL_MAGIC:
        return (_AGFL_LSN[0], C.XFS_AGFL_CRC_OFF)
    if blft == L.XFS_BLFT_AGI_BUF and m32 == C.XFS_AGI_MAGIC:
        return (_AGI_LSN[0], C.XFS_AGI_CRC_OFF)
    if blft == L.XFS_BLFT_SYMLINK_BUF and m32 == C.XFS_SYMLINK_MAGIC:
        return (_SL_LSN[0], S.DSYMLINK_HDR.offset("sl_crc"))
    if blft in (L.XFS_BLFT_DIR_BLOCK_BUF, L.XFS_BLFT_DIR_DATA_BUF, L.XFS_BLFT_DIR_FREE_BUF) \
            and m32 in (C.XFS_DIR3_BLOCK_MAGIC, C.XFS_DIR3_DATA_MAGIC, C.XFS_DIR3_FREE_MAGIC):
        return (_DIR_LSN[0], S.DIR3_BLK_HDR.offset("crc"))
    if blft in (L.XFS_BLFT_DIR_LEAF1_BUF, L.XFS_BLFT_DIR_LEAFN_BUF, L.XFS_BLFT_DA_NODE_BUF,
                L.XFS_BLFT_ATTR_LEAF_BUF) and m16 in (C.XFS_DIR3_LEAF1_MAGIC,
                                                      C.XFS_DIR3_LEAFN_MAGIC,
                                                      C.XFS_DA3_NODE_MAGIC,
                                                      C.XFS_ATTR3_LEAF_MAGIC):
        return (_DA_LSN[0], S.DA3_BLKINFO.offset("crc"))
    if blft == L.XFS_BLFT_SB_BUF and m32 == C.XFS_SB_MAGIC:
        return (_SB_LSN[0], C.XFS_SB_CRC_OFF)
    if blft == L.XFS_BLFT_ATTR_RMT_BUF and m32 == C.XFS_ATTR3_RMT_MAGIC:
        return ("rmt", 12)
    return None


_BLF_HEAD = struct.Struct("<HHHHqI")
_ILF64 = struct.Struct("<HHIHHIQ16sqii")
_ILF32 = struct.Struct("<HHIHHQ16sqii")
_F = {name: i for i, (name, _c) in enumerate(L.LOG_DINODE.fields)}


def _dinode_swap_map() -> bytes:
    """For fstool_native's ItemReplayer: the width of each LOG_DINODE field
    stored byte-swapped, at the field's first byte (0 for byte strings)."""
    out = bytearray(L.LOG_DINODE.size)
    o = 0
    for _name, code in L.LOG_DINODE.fields:
        n = struct.calcsize("<" + code)
        if not code.endswith("s"):
            out[o] = n
        o += n
    return bytes(out)


def _dinode_offsets() -> tuple:
    offs = {}
    o = 0
    for name, code in L.LOG_DINODE.fields:
        offs[name] = o
        o += struct.calcsize("<" + code)
    return tuple(offs[n] for n in (
        "di_atime", "di_mtime", "di_ctime", "di_crtime", "di_next_unlinked", "di_crc",
        "di_lsn", "di_flags2", "di_version", "di_mode", "di_format", "di_forkoff",
        "di_big_nextents", "di_nextents", "di_anextents", "di_nblocks"))


_REPLAYER_CONSTS = (
    L.XFS_LI_BUF, L.XFS_LI_INODE, _BLF_HEAD.size, L.XFS_BLF_DATAMAP_SIZE, L.XFS_BLF_CANCEL,
    L.XFS_BLF_INODE_BUF, L.XFS_BLFT_MASK, L.XFS_BLFT_SHIFT, _ILF64.size, _ILF32.size,
    L.XFS_ILOG_DOWNER | L.XFS_ILOG_AOWNER, L.XFS_ILOG_DEV, L.XFS_ILOG_DFORK,
    L.XFS_ILOG_DDATA, L.XFS_ILOG_DEXT, L.XFS_ILOG_DBROOT, L.XFS_ILOG_AFORK, L.XFS_ILOG_ADATA,
    L.XFS_ILOG_AEXT, L.XFS_ILOG_ABROOT, L.LOG_DINODE.size, L.LOG_DINODE_V2_SIZE,
    C.XFS_DINODE_CORE_SIZE, C.XFS_BTREE_LBLOCK_CRC_LEN)


def item_replayer(fs, mod=None):
    """fstool_native's ItemReplayer for this filesystem (``mod``: the
    parsers backend, the active one by default)."""
    sb = fs.sb
    mod = mod or parsers
    geo = (sb.dblocks << (sb.blocklog - C.BBSHIFT), sb.inodesize, sb.inodelog,
           sb.agino_log, sb.inopblog, sb.agcount, [fs.ag_length(a) for a in range(sb.agcount)],
           C.XFS_DIFLAG2_BIGTIME, C.XFS_DIFLAG2_NREXT64, sb.meta_uuid)
    return mod.ItemReplayer(_REPLAYER_CONSTS, _dinode_swap_map(), _dinode_offsets(), geo)


class DictItem(dict):
    """A decoded item (fstool.log.items.decode) with attribute access too."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


def stamp_block(buf: bytearray, rule: tuple, lsn: int, sb) -> None:
    """What the buffer type's write verifier does to a replayed buffer: the
    LSN of the transaction that replayed it, and a fresh CRC."""
    lsn_off, crc_off = rule
    if lsn_off == "rmt":
        # remote attr blocks: the verifier stamps each filesystem block's CRC
        bs = sb.blocksize
        for o in range(0, len(buf), bs):
            if _BE32.unpack_from(buf, o)[0] == C.XFS_ATTR3_RMT_MAGIC:
                parsers.stamp_cksum(buf, o, min(o + bs, len(buf)), o + 12)
        return
    _BE64.pack_into(buf, lsn_off, lsn)
    m32 = _BE32.unpack_from(buf, 0)[0]
    n = sb.sectsize if m32 in (C.XFS_SB_MAGIC, C.XFS_AGF_MAGIC, C.XFS_AGI_MAGIC,
                               C.XFS_AGFL_MAGIC) else len(buf)
    parsers.stamp_cksum(buf, 0, n, crc_off)


@contextmanager
def gc_paused():
    """The cyclic garbage collector off for a while: recovery makes hundreds
    of thousands of small objects that live until it ends (no cycles among
    them), and each full collection would walk them all again.  On the way
    out they are moved to the permanent generation (``gc.freeze``): switched
    back on, the collector would otherwise walk all of them at the next
    allocation, since they count as new."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.freeze()
            gc.enable()


class CacheFull(Exception):
    """The blocks to write outgrew the cache before the end of the log."""


class ReplayError(LogCorrupt):
    """A log item recovery must refuse (names the record and the item)."""


class _At:
    """Where a transaction was committed (for messages)."""
    __slots__ = ("blk",)

    def __init__(self, blk: int):
        self.blk = blk


@dataclass
class Buf:
    daddr: int
    data: bytearray
    stamp: tuple | None = None        # (lsn_off, crc_off) pending at the group boundary
    lsn: int = 0
    dirty: bool = False


@dataclass
class Stats:
    records: int = 0
    transactions: int = 0
    items: int = 0
    replayed: dict = field(default_factory=dict)
    skipped_lsn: int = 0
    cancelled: int = 0
    blocks_written: int = 0
    bytes_written: int = 0
    quota_skipped: int = 0
    checkpoints: list = field(default_factory=list)   # (lsn, items, blocks)

    def count(self, what: str) -> None:
        self.replayed[what] = self.replayed.get(what, 0) + 1


class Recovery:
    def __init__(self, fs, ld, state, *, dry_run: bool = False, writer_dev=None,
                 cache_bytes: int = 32 << 20):
        self.fs = fs
        self.sb = fs.sb
        self.ld = ld
        self.state = state
        self.dry_run = dry_run
        self.out = writer_dev          # a writable Device (None for dry runs)
        self.cancel: dict = {}
        self.bufs: dict[int, Buf] = {}
        # filesystem block -> daddrs of the cached buffers covering part of
        # it (finds the buffers a new one overlaps)
        self.block_owner: dict[int, list] = {}
        self._osh = fs.sb.blocklog - C.BBSHIFT
        self.cache_bytes = cache_bytes
        self.cached = 0
        self.spill: dict = {}          # dry runs: daddr -> (sectors, zlib data)
        self.early_writes = True       # False: raise CacheFull rather than write early
        self.write_behind = False      # True: write blocks at group ends as they come
        self._behind_mark = 0          # self.cached when blocks were last written
        self.group_lsn = None
        self.pending: list = []          # buffers waiting for their verifier stamp
        self.intents: dict = {}        # (kind, id) -> (lsn, decoded item)
        self.stats = Stats()
        self.uuid = fs.sb.meta_uuid
        self.isize = fs.sb.inodesize
        cluster = max(fs.sb.blocksize, 8192 * fs.sb.inodesize // 256)
        self.blocks_per_cluster = max(1, cluster >> fs.sb.blocklog)
        self._cluster_bb = self.blocks_per_cluster << (fs.sb.blocklog - C.BBSHIFT)
        self._pool: dict = {}          # sectors -> free bytearrays (fresh buffers)
        self.dev_bb = fs.sb.dblocks << (fs.sb.blocklog - C.BBSHIFT)
        self._ctx = (0, 0, 0, None)
        self._saved: list | None = []
        self._ir = item_replayer(fs)

    # -- the passes ------------------------------------------------------------------
    def run(self) -> Stats:
        """Both passes (what ``prepare`` then ``replay`` do)."""
        self.prepare()
        return self.replay()

    KEEP_BYTES = 96 << 20      # transactions kept from pass 1 for pass 2
    WRITE_BEHIND_BYTES = 8 << 20   # new cached bytes that make a group's end write

    def prepare(self) -> None:
        """Pass 1: read the whole log, reassemble and check every committed
        transaction and item (formats, block ranges, inode numbers), collect
        cancelled buffers and the intents left without a done item.  Nothing
        is read from the filesystem or written: a damaged log is refused
        here."""
        st = self.state
        self._saved = []
        if st.head == st.tail or st.clean:
            return
        with gc_paused():
            self._pass1()

    def _pass1(self) -> None:
        st = self.state
        re = Reassembler()
        saved = self._saved
        cancel = self.cancel
        for rec in walk(self.ld, st.head, st.tail, parse_ops=False):
            self.stats.records += 1
            for t in re.feed(rec):
                decoded, cancels, others = self._decode(t, rec.blk)
                for _idx, _it, d in cancels:
                    key = (d.blkno, d.len)
                    cancel[key] = cancel.get(key, 0) + 1
                for _idx, _it, d in others:
                    code = d.type_code
                    if code in L.INTENT_DONE:
                        self.intents[(code, d.id)] = (t.lsn, d, rec.blk)
                    elif code in L.DONE_INTENT:
                        self.intents.pop((L.DONE_INTENT[code], d.intent_id), None)
                if saved is not None:
                    # the bytes reassembled so far bound what is kept
                    if re.nbytes > self.KEEP_BYTES:
                        saved = self._saved = None
                    else:
                        saved.append((t, _At(rec.blk), decoded))

    def replay(self) -> Stats:
        """Pass 2: replay every committed transaction (after ``prepare``)."""
        st = self.state
        if st.head == st.tail or st.clean:
            return self.stats
        with gc_paused():
            self._pass2()
        return self.stats

    def _pass2(self) -> None:
        st = self.state
        if self._saved is not None:
            for t, at, decoded in self._saved:
                self._commit(t, at, decoded)
            self._saved = None
        else:
            re = Reassembler()
            for rec in walk(self.ld, st.head, st.tail, parse_ops=False):
                for t in re.feed(rec):
                    self._commit(t, rec, self._decode(t, rec.blk)[0])
        self._flush_group()

    def _decode(self, t, blk: int) -> tuple:
        """The items of ``t``, checked, as (index, item, decoded) entries:
        all of them in the order pass 2 replays them (buffers, other items,
        inode-unlink buffers, cancels: xlog_recover_reorder_trans), the
        cancelled buffers, and the items other than buffers and inodes in
        log order.  Buffer and inode items are decoded and checked by
        fstool_native (ItemReplayer.classify), the others by
        fstool.log.items.decode."""
        def other(idx, it):
            self._ctx = (blk, t.tid, idx, None)
            try:
                d = DictItem(I.decode(it))
            except I.ItemError as e:
                raise self._bad(str(e)) from None
            code = d.type_code
            if code not in L.ITEM_NAMES:
                raise self._bad(f"unrecognised log item type 0x{code:x}")
            self._ctx = (blk, t.tid, idx, d.type)
            self._check(it, d)
            return d

        try:
            return self._ir.classify(t.items, other)
        except parsers.LogItemError as e:
            idx = e.index
            self._ctx = (blk, t.tid, idx, L.ITEM_NAMES.get(t.items[idx].type) if e.stage
                         else None)
            if e.stage == 2:
                raise self._unsupported(str(e)) from None
            raise self._bad(str(e)) from None

    def _check(self, it, d) -> None:
        """The checks of items other than buffers and inodes that need
        nothing but the item and the geometry."""
        if d.type_code == L.XFS_LI_ICREATE:
            self._icreate_geometry(d)

    def _commit(self, t, rec, ordered) -> None:
        """Replay the items of ``t`` (``ordered`` as ``_decode`` gives
        them).  Inode items, the bulk of most logs, are handled inline."""
        if t.lsn != self.group_lsn:
            self._flush_group()
            self.group_lsn = t.lsn
        st = self.stats
        st.transactions += 1
        before = st.blocks_written
        lsn = t.lsn
        tid = t.tid
        blk = rec.blk
        inode_code = L.XFS_LI_INODE
        run = self._ir.inode_run
        bufs = self.bufs
        cancel = self.cancel
        n_inode = n_skipped = n_cancelled = 0
        i, n = 0, len(ordered)
        while i < n:
            try:
                # inode items whose buffer is cached, in one native call
                i, rep, skip = run(ordered, i, bufs, cancel, lsn)
            except parsers.LogItemError as e:
                idx, _it, d = ordered[e.index]
                self._ctx = (blk, tid, idx, d.type)
                raise self._bad(str(e), rec) from None
            n_inode += rep
            n_skipped += skip
            if i >= n:
                break
            idx, it, d = ordered[i]
            i += 1
            self._ctx = (blk, tid, idx, d.type)
            if d.type_code != inode_code:
                self._item(it, d, lsn, rec)
                continue
            # xlog_recover_inode_commit_pass2, when the buffer is to be read
            # or the item is cancelled
            blkno, length = d.blkno, d.len
            if (blkno, length) in cancel:
                n_cancelled += 1
                continue
            b = self._get(blkno, length)
            try:
                replayed = self._ir.inode(b.data, d.boffset, d, it.regions, lsn)
            except parsers.LogItemError as e:
                raise self._bad(str(e), rec) from None
            if replayed:
                b.dirty = True
                n_inode += 1
            else:
                n_skipped += 1
        if n_inode:
            st.replayed["inode"] = st.replayed.get("inode", 0) + n_inode
        st.skipped_lsn += n_skipped
        st.cancelled += n_cancelled
        st.items += len(ordered)
        st.checkpoints.append((lsn, len(ordered), st.blocks_written - before))

    def _where(self) -> str:
        blk, tid, idx, what = self._ctx
        kind = f" ({what})" if what else ""
        return f"record at log block {blk}, transaction 0x{tid:08x}, item {idx}{kind}"

    def _bad(self, detail: str, rec=None) -> ReplayError:
        return ReplayError(f"{self._where()}: {detail}")

    def _unsupported(self, detail: str) -> UnsupportedError:
        return UnsupportedError(f"{self._where()}: {detail}; nothing was written: mount the "
                                "image with the kernel to recover it")

    # -- items -------------------------------------------------------------------------
    def _item(self, it, d, lsn: int, rec) -> None:
        code = d.type_code
        if code == L.XFS_LI_BUF:
            self._buf_item(it, d, lsn, rec)
        elif code == L.XFS_LI_ICREATE:
            self._icreate_item(d, lsn, rec)
        elif code in L.INTENT_DONE or code in L.DONE_INTENT:
            self.stats.count(d.type)       # matched in prepare()
        elif code in (L.XFS_LI_DQUOT, L.XFS_LI_QUOTAOFF):
            # the kernel replays quota items only when mounted with quota
            # options; a plain mount (what fstool reproduces) skips them
            self.stats.quota_skipped += 1
        elif code == L.XFS_LI_IUNLINK:
            pass
        else:
            raise self._bad(f"unrecognised log item type 0x{code:x}", rec)

    def _is_cancelled(self, blkno: int, length: int) -> bool:
        return (blkno, length) in self.cancel

    def _put_cancelled(self, blkno: int, length: int) -> bool:
        key = (blkno, length)
        n = self.cancel.get(key)
        if n is None:
            return False
        if n <= 1:
            del self.cancel[key]
        else:
            self.cancel[key] = n - 1
        return True

    def _check_range(self, blkno: int, length: int, rec=None) -> None:
        if blkno < 0 or length <= 0 or blkno + length > self.dev_bb:
            raise self._bad(f"block range daddr {blkno} length {length} lies outside the "
                            f"filesystem ({self.dev_bb} sectors)")

    def _buf_item(self, it, d, lsn: int, rec) -> None:
        blkno, length = d.blkno, d.len
        if d.cancel:
            if self._put_cancelled(blkno, length):
                self.stats.cancelled += 1
                return
        elif self._is_cancelled(blkno, length):
            self.stats.cancelled += 1
            return
        self._check_range(blkno, length, rec)
        if d.flags & L.XFS_BLF_DQUOT_BUF:
            self.stats.quota_skipped += 1
            return
        b = self._get(blkno, length)
        buf = b.data
        on_disk = self._buf_lsn(buf)
        if on_disk and on_disk != -1 and on_disk >= lsn:
            self.stats.skipped_lsn += 1
            return
        regions = self._regions(it, d, len(buf), rec)
        if d.inode_buf:
            self._inode_buffer(buf, regions, rec)
            b.dirty = True
            self.stats.count("inode buffer")
            return
        for off, data in regions:
            buf[off:off + len(data)] = data
        rule = _stamp_rule(d.blf_type, buf)
        if rule is not None:
            if b.stamp is None:
                self.pending.append(b)
            b.stamp = rule
            b.lsn = lsn
        b.dirty = True
        self.stats.count("buffer")

    def _regions(self, it, d, buflen: int, rec) -> list:
        """(offset, bytes) of each logged region (xlog_recover_do_reg_buffer's
        walk: a run of dirty chunks may be split over several regions)."""
        words = d.map
        size = d.map_size
        if size > len(words):
            raise self._bad(f"dirty map of {size} words", rec)
        nbits = size * 32
        out = []
        i = 1
        bit = 0
        while True:
            while bit < nbits and not (words[bit >> 5] >> (bit & 31)) & 1:
                bit += 1
            if bit >= nbits:
                break
            run = 0
            while bit + run < nbits and (words[(bit + run) >> 5] >> ((bit + run) & 31)) & 1:
                run += 1
            if i >= len(it.regions):
                raise self._bad(f"dirty map names more regions than the {len(it.regions) - 1} "
                                "logged", rec)
            reg = it.regions[i]
            if len(reg) < (run << L.XFS_BLF_SHIFT):
                run = len(reg) >> L.XFS_BLF_SHIFT
            if run == 0:
                raise self._bad(f"region {i} of {len(reg)} bytes is shorter than a chunk", rec)
            off = bit << L.XFS_BLF_SHIFT
            if off + (run << L.XFS_BLF_SHIFT) > buflen:
                raise self._bad(f"region {i} (bytes {off}..{off + (run << 7)}) runs past the "
                                f"{buflen}-byte buffer", rec)
            out.append((off, reg[:run << L.XFS_BLF_SHIFT]))
            i += 1
            bit += run
        return out

    def _inode_buffer(self, buf: bytearray, regions, rec) -> None:
        """xlog_recover_do_inode_buffer: only the logged di_next_unlinked
        fields are replayed, and each touched inode gets a fresh CRC."""
        isz = self.isize
        for off, data in regions:
            end = off + len(data)
            first = off // isz
            for i in range(first, (end + isz - 1) // isz):
                nu = i * isz + 96
                if off <= nu and nu + 4 <= end:
                    val = data[nu - off:nu - off + 4]
                    if val == b"\0\0\0\0":
                        raise self._bad("inode buffer item replays a zero di_next_unlinked",
                                        rec)
                    buf[nu:nu + 4] = val
                    base = i * isz
                    if _BE16.unpack_from(buf, base)[0] == C.XFS_DINODE_MAGIC:
                        self._inode_crc(buf, base)

    def _inode_crc(self, buf: bytearray, base: int) -> None:
        parsers.stamp_cksum(buf, base, base + self.isize, base + C.XFS_DINODE_CRC_OFF)

    def _buf_lsn(self, buf) -> int:
        """xlog_recover_get_buf_lsn: the block's LSN, or -1 to replay anyway."""
        if len(buf) < 64:
            return -1
        m32 = _BE32.unpack_from(buf, 0)[0]
        if m32 == C.XFS_FIBT_CRC_MAGIC:
            loc = (24, 32)
        else:
            loc = _LSN32.get(m32)
        if loc is not None:
            lsn_off, uuid_off = loc
            if len(buf) < uuid_off + 16:
                return -1
            uuid = bytes(buf[uuid_off:uuid_off + 16])
            if m32 == C.XFS_SB_MAGIC:
                incompat = _BE32.unpack_from(buf, S.SB.offset("sb_features_incompat"))[0]
                mo = S.SB.offset("sb_meta_uuid")
                uuid = bytes(buf[mo:mo + 16]) if incompat & C.XFS_SB_FEAT_INCOMPAT_META_UUID \
                    else uuid
            if uuid != self.uuid:
                return -1
            return _BE64.unpack_from(buf, lsn_off)[0]
        m16 = _BE16.unpack_from(buf, 8)[0]
        if m16 in _LSNDA:
            lo, uo = _DA_LSN
            if bytes(buf[uo:uo + 16]) != self.sb.uuid_bytes:
                return -1
            return _BE64.unpack_from(buf, lo)[0]
        return -1

    # -- inodes -----------------------------------------------------------------------
    # -- inode creation ---------------------------------------------------------------
    def _icreate_geometry(self, d) -> None:
        """xlog_recover_icreate_commit_pass2's checks of an icreate item."""
        sb = self.sb
        agno, agbno, count, length = d.agno, d.agbno, d.count, d.length
        ialloc_blks = max(1, (64 * sb.inodesize) >> sb.blocklog)
        spalign = sb.fields["sb_spino_align"]
        ialloc_min = spalign if sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_SPINODES) and spalign \
            else ialloc_blks
        if agno >= sb.agcount:
            raise self._bad(f"icreate in AG {agno} of {sb.agcount}")
        if not agbno or agbno >= self.fs.ag_length(agno):
            raise self._bad(f"icreate at AG block {agbno} outside the AG")
        if d.isize != sb.inodesize:
            raise self._bad(f"icreate inode size {d.isize} (the filesystem's is "
                            f"{sb.inodesize})")
        if not count:
            raise self._bad("icreate of zero inodes")
        if not length or length >= sb.agblocks or length not in (ialloc_blks, ialloc_min):
            raise self._bad(f"icreate length {length} blocks is not an inode chunk")
        if (count >> sb.inopblog) != length:
            raise self._bad(f"icreate count {count} does not fill {length} blocks")
        if agbno + length > self.fs.ag_length(agno):
            raise self._bad(f"icreate blocks {agbno}+{length} run past the AG")

    def _icreate_item(self, d, lsn: int, rec) -> None:
        sb = self.sb
        agno, agbno, length = d.agno, d.agbno, d.length
        bpc = self.blocks_per_cluster
        bb_per_cluster = bpc << (sb.blocklog - C.BBSHIFT)
        nbufs = max(1, length // bpc)
        # the clusters of a chunk follow each other within its AG
        daddr0 = self.fs.agb_to_daddr(agno, agbno)
        cancel = self.cancel
        if cancel and any((daddr0 + j * bb_per_cluster, bb_per_cluster) in cancel
                          for j in range(nbufs)):
            self.stats.cancelled += 1
            return
        ino0 = (agno << sb.agino_log) | (agbno << sb.inopblog)
        per = bpc << sb.inopblog
        init = self._ir.icreate_cluster
        gen = d.gen
        get = self._get
        for j in range(nbufs):
            b = get(daddr0 + j * bb_per_cluster, bb_per_cluster, fresh=True)
            init(b.data, gen, ino0 + j * per)
            b.dirty = True
            b.stamp = None
        self.stats.count("icreate")

    # -- the buffer cache -------------------------------------------------------------
    def _get(self, daddr: int, nbb: int, fresh: bool = False) -> Buf:
        b = self.bufs.get(daddr)
        if b is not None and len(b.data) == nbb << C.BBSHIFT:
            return b
        # a different length at this address, or overlaps: write those out first
        osh = self._osh
        first, last = daddr >> osh, (daddr + nbb - 1) >> osh
        owners = self.block_owner
        end = daddr + nbb
        for k in range(first, last + 1):
            lst = owners.get(k)
            if lst:
                for o in [o for o in lst if o < end and
                          o + (len(self.bufs[o].data) >> C.BBSHIFT) > daddr]:
                    if o in self.bufs:
                        self._evict(o)
        if fresh:
            # a buffer given back by an earlier flush, when one of this size
            # is free (its contents are overwritten whole): fresh memory
            # costs a page fault per page
            pool = self._pool.get(nbb)
            data = pool.pop() if pool else bytearray(nbb << C.BBSHIFT)
        elif self.spill and daddr in self.spill and \
                self.spill[daddr][0] == nbb:
            data = bytearray(zlib.decompress(self.spill.pop(daddr)[1]))
        else:
            pool = self._pool.get(nbb)
            data = pool.pop() if pool else bytearray(nbb << C.BBSHIFT)
            self.fs.dev.preadinto(memoryview(data), daddr << C.BBSHIFT)
            if self.spill:
                self._unspill(daddr, nbb, data)
        b = Buf(daddr, data)
        self.bufs[daddr] = b
        for k in range(first, last + 1):
            lst = owners.get(k)
            if lst is None:
                owners[k] = [daddr]
            else:
                lst.append(daddr)
        self.cached += len(data)
        return b

    def _evict(self, daddr: int) -> None:
        if not self.early_writes and self.bufs[daddr].dirty:
            raise CacheFull()
        b = self.bufs.pop(daddr)
        self._stamp(b)
        if b.dirty:
            self._write(b)
        osh = self._osh
        owners = self.block_owner
        for k in range(daddr >> osh, ((daddr + (len(b.data) >> C.BBSHIFT) - 1) >> osh) + 1):
            lst = owners.get(k)
            if lst is not None and daddr in lst:
                lst.remove(daddr)
                if not lst:
                    del owners[k]
        self.cached -= len(b.data)

    def _stamp(self, b: Buf) -> None:
        if b.stamp is None:
            return
        stamp_block(b.data, b.stamp, b.lsn, self.sb)
        b.stamp = None

    def _write(self, b: Buf) -> None:
        self.stats.blocks_written += 1
        self.stats.bytes_written += len(b.data)
        if not self.dry_run:
            self.out.pwrite(b.daddr << C.BBSHIFT, b.data)
        else:
            # a dry run keeps what it would have written, compressed, so
            # that later items see it
            self.spill[b.daddr] = (len(b.data) >> C.BBSHIFT, zlib.compress(bytes(b.data), 1))
        b.dirty = False

    def _unspill(self, daddr: int, nbb: int, data: bytearray) -> None:
        """Lay spilled buffers overlapping [daddr, daddr+nbb) over ``data``."""
        end = daddr + nbb
        for d in [d for d in self.spill if d < end and d + self.spill[d][0] > daddr]:
            n, z = self.spill.pop(d)
            raw = zlib.decompress(z)
            lo, hi = max(d, daddr), min(d + n, end)
            data[(lo - daddr) << C.BBSHIFT:(hi - daddr) << C.BBSHIFT] = \
                raw[(lo - d) << C.BBSHIFT:(hi - d) << C.BBSHIFT]
            if d < daddr or d + n > end:      # keep the parts outside this buffer
                self.spill[d] = (n, zlib.compress(raw, 1))

    def _flush_group(self) -> None:
        """The end of one LSN's transactions: buffers get their verifier
        stamps (the kernel writes its delwri list here).  The cache is
        written out and emptied when it grows past its bound.  With
        ``write_behind``, the dirty blocks are also written (and kept) once
        the cache has grown by WRITE_BEHIND_BYTES since the last time, and
        the host starts writing them to disk while the next groups are
        replayed, so that the final fsync has little left to wait for."""
        for b in self.pending:
            self._stamp(b)
        self.pending.clear()
        if self.cached > self.cache_bytes:
            if not self.early_writes:
                raise CacheFull()
            self.flush(writeback=self.write_behind)
        elif self.write_behind and self.early_writes and \
                self.cached - self._behind_mark >= self.WRITE_BEHIND_BYTES:
            # enough new blocks for the disk to work on while the next
            # groups are replayed (small groups wait: a log of many small
            # checkpoints would otherwise rewrite its hot blocks each time)
            self._write_dirty(writeback=True)
            self._behind_mark = self.cached

    def _write_dirty(self, writeback: bool = False) -> None:
        """Write every dirty cached buffer (stamped), in address order, each
        run of adjacent buffers in one write."""
        bufs = self.bufs
        todo = []
        for daddr in sorted(bufs):
            b = bufs[daddr]
            if b.stamp is not None:
                self._stamp(b)
            if b.dirty:
                todo.append(b)
        if self.dry_run or not hasattr(self.out, "pwritev"):
            for b in todo:
                self._write(b)
            return
        st = self.stats
        out = self.out
        i, n = 0, len(todo)
        while i < n:
            first = todo[i]
            run = [first.data]
            end = first.daddr + (len(first.data) >> C.BBSHIFT)
            first.dirty = False
            i += 1
            while i < n and todo[i].daddr == end:
                b = todo[i]
                run.append(b.data)
                end += len(b.data) >> C.BBSHIFT
                b.dirty = False
                i += 1
            nbytes = (end - first.daddr) << C.BBSHIFT
            out.pwritev(first.daddr << C.BBSHIFT, run)
            st.blocks_written += len(run)
            st.bytes_written += nbytes
            if writeback:
                out.start_writeback(first.daddr << C.BBSHIFT, nbytes)

    def flush(self, writeback: bool = False) -> None:
        """Write every dirty buffer and empty the cache (``writeback``: and
        have the host start writing them to disk now)."""
        self._write_dirty(writeback)
        self._behind_mark = 0
        if self.write_behind:
            # keep the buffers of the commonest size for fresh ones (within
            # the cache's bound: they replace what is dropped here)
            pool = self._pool.setdefault(self._cluster_bb, [])
            size = self._cluster_bb << C.BBSHIFT
            room = (self.cache_bytes >> 1) // size - len(pool)
            for b in self.bufs.values():
                if room <= 0:
                    break
                if len(b.data) == size:
                    pool.append(b.data)
                    room -= 1
        self.bufs.clear()
        self.block_owner.clear()
        self.cached = 0


def recover(fs, ld, state, *, dry_run: bool = False, out=None) -> Recovery:
    """Run both passes; returns the Recovery (its bufs are not yet flushed)."""
    r = Recovery(fs, ld, state, dry_run=dry_run, writer_dev=out)
    try:
        r.run()
    except (RecordError, ReplayError):
        raise
    return r
