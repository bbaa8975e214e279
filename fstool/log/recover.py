"""Log recovery: the kernel's two passes over the log, then what follows.

Pass 1 collects cancelled buffers.  Pass 2 replays, transaction by
transaction in commit order, the items of every committed transaction in
the kernel's order (buffers, then other items, then inode-unlink buffers,
then cancels), with the v5 rule that a buffer is not replayed over a block
whose LSN is at least the transaction's, nor an inode over one whose LSN is
newer.  Replayed buffers of a known type get the transaction's LSN and a
fresh CRC, as the kernel's write verifiers give them.  Intents without a
done item are collected for :mod:`fstool.log.finish`.

Blocks are kept in a bounded write-back cache and written through the
image's :class:`~fstool.io.device.Device`; nothing is written with
``dry_run``.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

from .._backend import parsers
from ..format import constants as C
from ..format import log as L
from ..format import structs as S
from . import items as I
from ..errors import UnsupportedError
from .head import LogCorrupt
from .records import RecordError, walk
from .trans import Reassembler

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
_TYPE_SIZE = struct.Struct("<HH")
_LDI = L.LOG_DINODE.struct
_DISK_CORE = struct.Struct(">" + "".join(code for _n, code in L.LOG_DINODE.fields))
_F = {name: i for i, (name, _c) in enumerate(L.LOG_DINODE.fields)}
_T_ATIME, _T_MTIME, _T_CTIME, _T_CRTIME = (_F["di_atime"], _F["di_mtime"], _F["di_ctime"],
                                           _F["di_crtime"])
_T_NEXT, _T_CRC, _T_LSN = _F["di_next_unlinked"], _F["di_crc"], _F["di_lsn"]
_T_FLAGS2, _T_VERSION = _F["di_flags2"], _F["di_version"]
(_T_MAGIC, _T_MODE, _T_FORMAT, _T_FORKOFF, _T_BIGNEXT, _T_NEXT_EXT, _T_ANEXT,
 _T_NBLOCKS) = (_F["di_magic"], _F["di_mode"], _F["di_format"], _F["di_forkoff"],
                _F["di_big_nextents"], _F["di_nextents"], _F["di_anextents"], _F["di_nblocks"])
_PAD_CORE = {n: bytes(L.LOG_DINODE.size - n) for n in range(L.LOG_DINODE_V2_SIZE,
                                                               L.LOG_DINODE.size + 1)}


class Lite:
    """A buffer or inode item as replay needs it (indexable like the dicts
    the full decoder returns)."""
    __slots__ = ("type", "type_code", "blkno", "len", "flags", "cancel", "inode_buf",
                 "blf_type", "map", "map_size", "ino", "fields", "asize", "dsize",
                 "boffset", "ilf_u")

    def __getitem__(self, key):
        return getattr(self, key)


def _buf_lite(code, flags, length, blkno, words, msize) -> Lite:
    d = Lite()
    d.type, d.type_code, d.blkno, d.len, d.flags = "BUF", code, blkno, length, flags
    d.cancel = bool(flags & L.XFS_BLF_CANCEL)
    d.inode_buf = bool(flags & L.XFS_BLF_INODE_BUF)
    d.blf_type = L.blft_from_flags(flags)
    d.map, d.map_size = words, msize
    return d


def _inode_lite(code, fields, asize, dsize, ino, ilf_u, blkno, length, boff) -> Lite:
    d = Lite()
    d.type, d.type_code, d.ino, d.fields, d.asize, d.dsize = "INODE", code, ino, fields, \
        asize, dsize
    d.blkno, d.len, d.boffset, d.ilf_u = blkno, length, boff, ilf_u
    return d


def light_decode(it):
    """The few fields replay needs from buffer and inode items (the full
    decoder, fstool.log.items.decode, serves everything else)."""
    r0 = it.regions[0]
    code = _TYPE_SIZE.unpack_from(r0, 0)[0] if len(r0) >= 4 else 0
    if code == L.XFS_LI_BUF:
        if len(r0) < 20 or (len(r0) - 20) % 4:
            raise I.ItemError(f"buffer item format of {len(r0)} bytes")
        _t, _s, flags, length, blkno, msize = _BLF_HEAD.unpack_from(r0, 0)
        nwords = min((len(r0) - 20) // 4, L.XFS_BLF_DATAMAP_SIZE)
        words = struct.unpack_from(f"<{nwords}I", r0, 20)
        return _buf_lite(code, flags, length, blkno, words, msize)
    if code == L.XFS_LI_INODE:
        if len(r0) == _ILF64.size:
            v = _ILF64.unpack_from(r0, 0)
            ino, ilf_u, blkno, length, boff = v[6], v[7], v[8], v[9], v[10]
        elif len(r0) == _ILF32.size:
            v = _ILF32.unpack_from(r0, 0)
            ino, ilf_u, blkno, length, boff = v[5], v[6], v[7], v[8], v[9]
        else:
            raise I.ItemError(f"inode log format of {len(r0)} bytes")
        return _inode_lite(code, v[2], v[3], v[4], ino, ilf_u, blkno, length, boff)
    return DictItem(I.decode(it))


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
                blk = bytes(buf[o:o + bs])
                buf[o + 12:o + 16] = parsers.xfs_cksum(blk, 12).to_bytes(4, "little")
        return
    _BE64.pack_into(buf, lsn_off, lsn)
    m32 = _BE32.unpack_from(buf, 0)[0]
    n = sb.sectsize if m32 in (C.XFS_SB_MAGIC, C.XFS_AGF_MAGIC, C.XFS_AGI_MAGIC,
                               C.XFS_AGFL_MAGIC) else len(buf)
    buf[crc_off:crc_off + 4] = parsers.xfs_cksum(bytes(buf[:n]), crc_off).to_bytes(4, "little")


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
        self.sector_owner: dict[int, int] = {}
        self.cache_bytes = cache_bytes
        self.cached = 0
        self.spill: dict = {}          # dry runs: daddr -> (sectors, zlib data)
        self.early_writes = True       # False: raise CacheFull rather than write early
        self.group_lsn = None
        self.pending: list = []          # buffers waiting for their verifier stamp
        self.intents: dict = {}        # (kind, id) -> (lsn, decoded item)
        self.stats = Stats()
        self.uuid = fs.sb.meta_uuid
        self.isize = fs.sb.inodesize
        cluster = max(fs.sb.blocksize, 8192 * fs.sb.inodesize // 256)
        self.blocks_per_cluster = max(1, cluster >> fs.sb.blocklog)
        self.dev_bb = fs.sb.dblocks << (fs.sb.blocklog - C.BBSHIFT)
        self._ctx = (0, 0, 0, None)
        self._saved: list | None = []

    # -- the passes ------------------------------------------------------------------
    def run(self) -> Stats:
        """Both passes (what ``prepare`` then ``replay`` do)."""
        self.prepare()
        return self.replay()

    KEEP_BYTES = 96 << 20      # transactions kept from pass 1 for pass 2

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
        re = Reassembler()
        kept = 0
        saved = self._saved
        for rec in walk(self.ld, st.head, st.tail):
            self.stats.records += 1
            for t in re.feed(rec):
                decoded = self._decode(t, rec.blk)
                for _idx, _it, d in decoded:
                    code = d.type_code
                    if code == L.XFS_LI_BUF:
                        if d.cancel:
                            key = (d.blkno, d.len)
                            self.cancel[key] = self.cancel.get(key, 0) + 1
                    elif code in L.INTENT_DONE:
                        self.intents[(code, d.id)] = (t.lsn, d, rec.blk)
                    elif code in L.DONE_INTENT:
                        self.intents.pop((L.DONE_INTENT[code], d.intent_id), None)
                if saved is not None:
                    kept += sum(len(r) for it in t.items for r in it.regions)
                    if kept > self.KEEP_BYTES:
                        saved = self._saved = None
                    else:
                        saved.append((t, _At(rec.blk), decoded))

    def replay(self) -> Stats:
        """Pass 2: replay every committed transaction (after ``prepare``)."""
        st = self.state
        if st.head == st.tail or st.clean:
            return self.stats
        if self._saved is not None:
            for t, at, decoded in self._saved:
                self._commit(t, at, decoded)
            self._saved = None
        else:
            re = Reassembler()
            for rec in walk(self.ld, st.head, st.tail):
                for t in re.feed(rec):
                    self._commit(t, rec, self._decode(t, rec.blk))
        self._flush_group()
        return self.stats

    def _decode(self, t, blk: int) -> list:
        """(index, item, decoded) of every item of ``t``, checked."""
        out = []
        for idx, it in enumerate(t.items):
            if not it.regions:
                continue
            self._ctx = (blk, t.tid, idx, None)
            try:
                d = light_decode(it)
            except I.ItemError as e:
                raise self._bad(str(e)) from None
            code = d.type_code
            if code not in L.ITEM_NAMES:
                raise self._bad(f"unrecognised log item type 0x{code:x}")
            self._ctx = (blk, t.tid, idx, d.type)
            self._check(it, d)
            out.append((idx, it, d))
        return out

    def _check(self, it, d) -> None:
        """The checks that need nothing but the item and the geometry."""
        code = d.type_code
        if code == L.XFS_LI_BUF:
            if d.map_size > len(d.map):
                raise self._bad(f"dirty map of {d.map_size} words")
            if not d.cancel:
                self._check_range(d.blkno, d.len)
        elif code == L.XFS_LI_INODE:
            self._check_range(d.blkno, d.len)
            if d.fields & (L.XFS_ILOG_DOWNER | L.XFS_ILOG_AOWNER):
                # refused here, before anything is written, even where the
                # kernel would find the inode newer and skip the change
                raise self._unsupported("btree owner changes (logged by swapext) are not "
                                        "replayed by fstool")
            try:
                self.fs.ino_location(d.ino)
            except Exception:
                raise self._bad(f"inode {d.ino} does not exist in this filesystem") \
                    from None
            if d.boffset < 0 or d.boffset + self.isize > d.len << C.BBSHIFT:
                raise self._bad(f"inode offset {d.boffset} lies outside its "
                                f"{d.len}-sector buffer")
            if len(it.regions) < 2:
                raise self._bad("inode item without its core")
            n = len(it.regions[1])
            if n > L.LOG_DINODE.size or n < L.LOG_DINODE_V2_SIZE:
                raise self._bad(f"logged inode core of {n} bytes")
        elif code == L.XFS_LI_ICREATE:
            self._icreate_geometry(d)

    def _commit(self, t, rec, decoded) -> None:
        if t.lsn != self.group_lsn:
            self._flush_group()
            self.group_lsn = t.lsn
        self.stats.transactions += 1
        # reorder: buffers, other items, inode-unlink buffers, cancels
        bufs, others, ibufs, cancels = [], [], [], []
        for entry in decoded:
            d = entry[2]
            if d.type_code == L.XFS_LI_BUF:
                if d.cancel:
                    cancels.append(entry)
                elif d.inode_buf:
                    ibufs.append(entry)
                else:
                    bufs.append(entry)
            else:
                others.append(entry)
        before = self.stats.blocks_written
        n = 0
        lsn = t.lsn
        tid = t.tid
        blk = rec.blk
        for idx, it, d in bufs + others + ibufs[::-1] + cancels[::-1]:
            self._ctx = (blk, tid, idx, d.type)
            self._item(it, d, lsn, rec)
            n += 1
        self.stats.items += n
        self.stats.checkpoints.append((lsn, n, self.stats.blocks_written - before))

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
        elif code == L.XFS_LI_INODE:
            self._inode_item(it, d, lsn, rec)
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
        ino = buf[base:base + self.isize]
        buf[base + C.XFS_DINODE_CRC_OFF:base + C.XFS_DINODE_CRC_OFF + 4] = \
            parsers.xfs_cksum(ino, C.XFS_DINODE_CRC_OFF).to_bytes(4, "little")

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
    def _inode_item(self, it, d, lsn: int, rec) -> None:
        blkno, length, boff = d.blkno, d.len, d.boffset
        if self._is_cancelled(blkno, length):
            self.stats.cancelled += 1
            return
        b = self._get(blkno, length)
        buf = b.data
        if _BE16.unpack_from(buf, boff)[0] != C.XFS_DINODE_MAGIC:
            raise self._bad(f"bad inode magic in the buffer at daddr {blkno} offset {boff}",
                            rec)
        core = it.regions[1]
        v = list(_LDI.unpack(core + _PAD_CORE[len(core)]))
        if v[_T_MAGIC] != C.XFS_DINODE_MAGIC:
            raise self._bad(f"bad magic 0x{v[_T_MAGIC]:x} in the logged inode", rec)
        if v[_T_VERSION] < 3:
            raise self._bad(f"logged inode {d.ino} is version {v[_T_VERSION]} (v5 "
                            "filesystems log version 3 inodes)", rec)
        ver = buf[boff + 4]
        if ver >= 3:
            disk_lsn = _BE64.unpack_from(buf, boff + 112)[0]
            if disk_lsn and disk_lsn != 0xFFFFFFFFFFFFFFFF and disk_lsn > lsn:
                self.stats.skipped_lsn += 1
                return
        mode = v[_T_MODE]
        fmt = v[_T_FORMAT]
        ftype = mode & 0o170000
        if ftype == 0o100000 and fmt not in (C.XFS_DINODE_FMT_EXTENTS,
                                               C.XFS_DINODE_FMT_BTREE):
            raise self._bad(f"regular file inode {d.ino} in fork format {fmt}", rec)
        if ftype == 0o040000 and fmt not in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE,
                                               C.XFS_DINODE_FMT_LOCAL):
            raise self._bad(f"directory inode {d.ino} in fork format {fmt}", rec)
        forkoff_raw = v[_T_FORKOFF]
        if forkoff_raw > self.isize:
            raise self._bad(f"fork offset {forkoff_raw} past the inode size", rec)
        if v[_T_FLAGS2] & C.XFS_DIFLAG2_NREXT64:
            nex = v[_T_BIGNEXT] + v[_T_NEXT_EXT]
        else:
            nex = v[_T_NEXT_EXT] + v[_T_ANEXT]
        nblocks = v[_T_NBLOCKS]
        if nex > nblocks:
            raise self._bad(f"inode {d.ino}: {nex} extents but {nblocks} blocks", rec)
        self._dinode_to_disk(v, buf, boff, lsn)
        fields = d.fields
        if fields & L.XFS_ILOG_DEV:
            buf[boff + 176:boff + 180] = d.ilf_u[:4][::-1]
        size = len(it.regions)
        dptr = boff + C.XFS_DINODE_CORE_SIZE
        forkoff = forkoff_raw << 3
        dsize = forkoff if forkoff else self.isize - C.XFS_DINODE_CORE_SIZE
        asize = self.isize - C.XFS_DINODE_CORE_SIZE - forkoff
        if size > 2:
            ri = 2
            for kind, mask, data_f, ext_f, root_f, ptr, room in (
                    ("data", L.XFS_ILOG_DFORK, L.XFS_ILOG_DDATA, L.XFS_ILOG_DEXT,
                     L.XFS_ILOG_DBROOT, dptr, dsize),
                    ("attr", L.XFS_ILOG_AFORK, L.XFS_ILOG_ADATA, L.XFS_ILOG_AEXT,
                     L.XFS_ILOG_ABROOT, dptr + forkoff, asize)):
                flag = fields & mask
                if not flag:
                    continue
                if ri >= size:
                    raise self._bad(f"{kind} fork flagged but not logged", rec)
                src = it.regions[ri]
                ri += 1
                if flag in (data_f, ext_f):
                    if len(src) > room:
                        raise self._bad(f"{kind} fork of {len(src)} bytes does not fit "
                                        f"{room}", rec)
                    buf[ptr:ptr + len(src)] = src
                elif flag == root_f:
                    buf[ptr:ptr + room] = self._bmbt_to_bmdr(src, room, rec)
                else:
                    raise self._bad(f"invalid {kind} fork flags 0x{flag:x}", rec)
        self._inode_crc(buf, boff)
        b.dirty = True
        self.stats.count("inode")

    def _bmbt_to_bmdr(self, src: bytes, dlen: int, rec) -> bytes:
        """xfs_bmbt_to_bmdr: the in-core root (a long btree block with the
        v5 header) as the on-disk fork root (level, numrecs, keys, ptrs)."""
        hdr = C.XFS_BTREE_LBLOCK_CRC_LEN
        if len(src) < hdr:
            raise self._bad(f"btree root of {len(src)} bytes", rec)
        level, numrecs = struct.unpack_from(">HH", src, 4)
        rmax = (len(src) - hdr) // 16
        dmax = (dlen - 4) // 16
        if numrecs > dmax or numrecs > rmax:
            raise self._bad(f"btree root with {numrecs} records does not fit the fork", rec)
        out = bytearray(dlen)
        struct.pack_into(">HH", out, 0, level, numrecs)
        out[4:4 + 8 * numrecs] = src[hdr:hdr + 8 * numrecs]
        rp = hdr + rmax * 8
        dp = 4 + dmax * 8
        out[dp:dp + 8 * numrecs] = src[rp:rp + 8 * numrecs]
        return bytes(out)

    def _dinode_to_disk(self, v: list, buf: bytearray, o: int, lsn: int) -> None:
        """xfs_log_dinode_to_disk: the logged host-order core (``v``, the
        LOG_DINODE fields in order) into the big-endian on-disk core, which
        has the same fields in the same places.  Legacy timestamps are two
        host-order 32-bit halves (seconds low); di_lsn becomes the
        transaction's LSN; di_next_unlinked is left as it is on disk."""
        if not v[_T_FLAGS2] & C.XFS_DIFLAG2_BIGTIME:
            for i in (_T_ATIME, _T_MTIME, _T_CTIME, _T_CRTIME):
                t = v[i]
                v[i] = ((t & 0xFFFFFFFF) << 32) | (t >> 32)
        v[_T_NEXT] = _BE32.unpack_from(buf, o + 96)[0]
        v[_T_LSN] = lsn
        v[_T_CRC] = 0
        _DISK_CORE.pack_into(buf, o, *v)

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
        cancelled = sum(1 for i in range(nbufs)
                        if self._is_cancelled(self.fs.agb_to_daddr(agno, agbno + i * bpc),
                                              bb_per_cluster))
        if cancelled:
            self.stats.cancelled += 1
            return
        ipc = (bpc << sb.blocklog) >> sb.inodelog
        for j in range(nbufs):
            cbno = agbno + j * bpc
            daddr = self.fs.agb_to_daddr(agno, cbno)
            b = self._get(daddr, bb_per_cluster, fresh=True)
            buf = b.data
            buf[:] = bytes(len(buf))
            ino0 = (agno << sb.agino_log) | (cbno << sb.inopblog)
            for i in range(ipc):
                o = i << sb.inodelog
                struct.pack_into(">HHB", buf, o, C.XFS_DINODE_MAGIC, 0, 3)
                buf[o + 2:o + 4] = b"\0\0"
                buf[o + 4] = 3
                _BE32.pack_into(buf, o + 92, d.gen)
                _BE32.pack_into(buf, o + 96, C.NULLAGINO)
                _BE64.pack_into(buf, o + 152, ino0 + i)
                buf[o + 160:o + 176] = self.uuid
                self._inode_crc(buf, o)
            b.dirty = True
            b.stamp = None
        self.stats.count("icreate")

    # -- the buffer cache -------------------------------------------------------------
    def _get(self, daddr: int, nbb: int, fresh: bool = False) -> Buf:
        b = self.bufs.get(daddr)
        if b is not None and len(b.data) == nbb << C.BBSHIFT:
            return b
        # a different length at this address, or overlaps: write those out first
        for s in range(daddr, daddr + nbb):
            owner = self.sector_owner.get(s)
            if owner is not None and owner in self.bufs:
                self._evict(owner)
        if fresh:
            data = bytearray(nbb << C.BBSHIFT)
        elif self.spill and daddr in self.spill and \
                self.spill[daddr][0] == nbb:
            data = bytearray(zlib.decompress(self.spill.pop(daddr)[1]))
        else:
            data = bytearray(self.fs.dev.pread(daddr << C.BBSHIFT, nbb << C.BBSHIFT))
            if self.spill:
                self._unspill(daddr, nbb, data)
        b = Buf(daddr, data)
        self.bufs[daddr] = b
        for s in range(daddr, daddr + nbb):
            self.sector_owner[s] = daddr
        self.cached += len(data)
        return b

    def _evict(self, daddr: int) -> None:
        if not self.early_writes and self.bufs[daddr].dirty:
            raise CacheFull()
        b = self.bufs.pop(daddr)
        self._stamp(b)
        if b.dirty:
            self._write(b)
        for s in range(daddr, daddr + (len(b.data) >> C.BBSHIFT)):
            if self.sector_owner.get(s) == daddr:
                del self.sector_owner[s]
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
        stamps (the kernel writes its delwri list here); the cache is written
        out only when it grows past its bound."""
        for b in self.pending:
            self._stamp(b)
        self.pending.clear()
        if self.cached > self.cache_bytes:
            if not self.early_writes:
                raise CacheFull()
            self.flush()

    def flush(self) -> None:
        for daddr in sorted(self.bufs):
            b = self.bufs[daddr]
            self._stamp(b)
            if b.dirty:
                self._write(b)
        self.bufs.clear()
        self.sector_owner.clear()
        self.cached = 0


def recover(fs, ld, state, *, dry_run: bool = False, out=None) -> Recovery:
    """Run both passes; returns the Recovery (its bufs are not yet flushed)."""
    r = Recovery(fs, ld, state, dry_run=dry_run, writer_dev=out)
    try:
        r.run()
    except (RecordError, ReplayError):
        raise
    return r
