"""The write core: transactions, space allocation and inode allocation.

A :class:`Writer` opens an image for writing (refusing images that are
mounted, locked by another fstool, carry a dirty log or need repair) and
changes it only inside a transaction::

    with Writer(path) as w:
        with w.transaction():
            ino = w.alloc_inode(parent_ino, is_dir=False)
            ...

What a transaction guarantees without a journal:

* Modified *existing* metadata (btree blocks, AG headers, inodes in chunks
  that were allocated before, the superblock) is held in memory and written
  only at commit; an exception aborts and the image on disk is untouched.
* New blocks (file data, fresh inode chunks, fresh directory/xattr blocks)
  are written as soon as they are filled: until commit they are free space
  on disk, so an abort leaves them as unreferenced free blocks.
* Blocks freed inside a transaction are not reused before it commits
  (they only reach the free-space btrees at commit, like the kernel's busy
  extents), so nothing the committed image references is overwritten early.

Space allocation follows the kernel's policies: free-space btrees (bnobt by
start, cntbt by length) updated through the generic btree engine, the AGFL
refilled to the minimum the free-space btrees may need before each
allocation, allocation near a target block (a file's blocks after its inode,
its next extent after its previous one) so small files end up packed with no
gap, and inode allocation through the finobt (or an inobt search without it)
near the parent directory's inode, new directories rotating across AGs
(inode64).
"""
from __future__ import annotations

import os
import struct

from ..errors import CorruptionError, FsToolError, NoSpaceError, UnsupportedError, WriteRefused
from ..format import constants as C
from ..format.structs import AGF, AGI, SB
from ..io import verify as V
from .encode import stamp_crc
from .._backend import parsers, writers
from .icore import _BIG_OFF, InodeEncoder
from .mount import Filesystem

XFS_INODES_PER_CHUNK = 64
XFS_INODES_PER_HOLEMASK_BIT = 4
ALL_FREE = (1 << 64) - 1
MAXEXTLEN = (1 << 21) - 1            # blocks in one bmbt record
NEAR_SCAN = 64                        # free extents looked at on each side of a target


NoSpace = NoSpaceError


def present_mask(holemask: int) -> int:
    """Bitmap of the inodes a record really has (each holemask bit hides 4)."""
    present = ALL_FREE
    while holemask:
        b = (holemask & -holemask).bit_length() - 1
        holemask &= holemask - 1
        present &= ~(0xF << (XFS_INODES_PER_HOLEMASK_BIT * b))
    return present


def _align_up(v: int, a: int) -> int:
    return v if a <= 1 else -(-v // a) * a


class _TreeStore:
    """Blocks of one per-AG btree, seen through the open transaction."""

    def __init__(self, w: "Writer", ag: "AGState", kind: str, buftype: V.BufType):
        self.w = w
        self.ag = ag
        self.kind = kind
        self.buftype = buftype
        self.blocksize = w.sb.blocksize

    def daddr(self, addr: int) -> int:
        return self.w.fs.agb_to_daddr(self.ag.agno, addr)

    def read(self, addr: int) -> bytearray:
        if not 0 < addr < self.ag.length:
            raise CorruptionError(self.buftype.name, f"pointer to block {addr} outside the AG",
                                  agno=self.ag.agno, block=addr)
        return self.w.meta(self.daddr(addr), self.buftype, agno=self.ag.agno, block=addr,
                           owner=self.ag.agno)

    def new(self, addr: int) -> bytearray:
        return self.w.new_meta(self.daddr(addr), self.buftype)

    def dirty(self, addr: int) -> None:
        self.w.dirty[self.daddr(addr)] = self.buftype.crc_off

    def alloc(self, near: int) -> int:
        ag = self.ag
        if self.kind in ("bno", "cnt"):
            bno = ag.agfl_get()
            ag.agf["agf_btreeblks"] += 1
            ag.agf_dirty = True
            return bno
        got = self.w.alloc_in_ag(ag, near, 1, 1)
        if got is None:
            raise NoSpace(f"AG {ag.agno} has no free block for an inode btree block")
        ag.count_iblocks(self.kind, +1)
        return got[0]

    def free(self, addr: int) -> None:
        ag = self.ag
        self.w.bufs.pop(self.daddr(addr), None)
        self.w.dirty.pop(self.daddr(addr), None)
        if self.kind in ("bno", "cnt"):
            ag.agfl_put(addr)
            ag.agf["agf_btreeblks"] -= 1
            ag.agf_dirty = True
        else:
            self.w.pending_free.append((ag.agno, addr, 1))
            ag.count_iblocks(self.kind, -1)


class AGState:
    """One AG's headers and btrees while a Writer has it open."""

    def __init__(self, w: "Writer", agno: int):
        from . import btree_write as BW
        fs = w.fs
        self.w = w
        self.agno = agno
        self.length = fs.ag_length(agno)
        self.agf = fs.agf(agno)
        self.agi = fs.agi(agno)
        agfl = fs.agfl(agno)
        self.agfl_slots = list(agfl["agfl_bno"])
        self.agfl_raw = bytearray(agfl["_raw"])
        self.agf_dirty = self.agi_dirty = self.agfl_dirty = False
        uuid = w.uuid
        f, i = self.agf, self.agi
        self.bno = BW.ShortBtree(C.XFS_ABTB_CRC_MAGIC, BW.BNO_CODEC,
                                 _TreeStore(w, self, "bno", V.BNOBT),
                                 root=f["agf_roots"][0], levels=f["agf_levels"][0],
                                 agno=agno, uuid=uuid)
        self.cnt = BW.ShortBtree(C.XFS_ABTC_CRC_MAGIC, BW.CNT_CODEC,
                                 _TreeStore(w, self, "cnt", V.CNTBT),
                                 root=f["agf_roots"][1], levels=f["agf_levels"][1],
                                 agno=agno, uuid=uuid)
        codec = BW.INO_CODEC_SPARSE if w.sparse else BW.INO_CODEC_FULL
        self.ino = BW.ShortBtree(C.XFS_IBT_CRC_MAGIC, codec, _TreeStore(w, self, "ino", V.INOBT),
                                 root=i["agi_root"], levels=i["agi_level"], agno=agno, uuid=uuid)
        self.fino = None
        if w.finobt:
            self.fino = BW.ShortBtree(C.XFS_FIBT_CRC_MAGIC, codec,
                                      _TreeStore(w, self, "fino", V.FINOBT),
                                      root=i["agi_free_root"], levels=i["agi_free_level"],
                                      agno=agno, uuid=uuid)
        self.longest_stale = False
        self.hot: dict = {}        # parent agino -> the free chunk nearest to it

    # -- AGFL ring -----------------------------------------------------------
    @property
    def flcount(self) -> int:
        return self.agf["agf_flcount"]

    def agfl_get(self) -> int:
        f = self.agf
        if f["agf_flcount"] == 0:
            raise NoSpace(f"AG {self.agno}: the free list is empty")
        n = len(self.agfl_slots)
        bno = self.agfl_slots[f["agf_flfirst"]]
        self.agfl_slots[f["agf_flfirst"]] = C.NULLAGBLOCK
        f["agf_flfirst"] = (f["agf_flfirst"] + 1) % n
        f["agf_flcount"] -= 1
        if not 0 < bno < self.length:
            raise CorruptionError("agfl", f"free list holds block {bno}", agno=self.agno)
        self.agf_dirty = self.agfl_dirty = True
        return bno

    def agfl_put(self, bno: int) -> None:
        f = self.agf
        n = len(self.agfl_slots)
        if f["agf_flcount"] >= n:
            raise NoSpace(f"AG {self.agno}: the free list is full")
        f["agf_fllast"] = (f["agf_fllast"] + 1) % n
        if f["agf_flcount"] == 0:
            f["agf_flfirst"] = f["agf_fllast"]
        self.agfl_slots[f["agf_fllast"]] = bno
        f["agf_flcount"] += 1
        self.agf_dirty = self.agfl_dirty = True

    def count_iblocks(self, kind: str, delta: int) -> None:
        if self.w.inobtcount:
            self.agi["agi_iblocks" if kind == "ino" else "agi_fblocks"] += delta
            self.agi_dirty = True

    def sync_roots(self) -> None:
        """Copy the btrees' current roots and heights into the AG headers."""
        f, i = self.agf, self.agi
        roots = [self.bno.root, self.cnt.root, f["agf_roots"][2]]
        levels = [self.bno.levels, self.cnt.levels, f["agf_levels"][2]]
        if roots != f["agf_roots"] or levels != f["agf_levels"]:
            f["agf_roots"], f["agf_levels"] = roots, levels
            self.agf_dirty = True
        if (self.ino.root, self.ino.levels) != (i["agi_root"], i["agi_level"]):
            i["agi_root"], i["agi_level"] = self.ino.root, self.ino.levels
            self.agi_dirty = True
        if self.fino is not None and \
                (self.fino.root, self.fino.levels) != (i["agi_free_root"], i["agi_free_level"]):
            i["agi_free_root"], i["agi_free_level"] = self.fino.root, self.fino.levels
            self.agi_dirty = True


class Chunk:
    """An inode btree record being changed by the open transaction."""
    __slots__ = ("agno", "startino", "holemask", "count", "freecount", "free", "in_fino",
                 "new", "buf", "put", "flushed", "loaded", "present")

    def __init__(self, agno, rec, in_fino: bool, new: bool):
        self.agno = agno
        self.startino, self.holemask, self.count, self.freecount, self.free = rec
        self.loaded = tuple(rec)         # the record as read, to skip unchanged ones
        self.in_fino = in_fino
        self.new = new
        self.buf = None          # bytearray of the whole chunk while new and unwritten
        self.put = 0             # bitmap of the inodes of a new chunk written into buf
        self.flushed = False
        self.present = present_mask(self.holemask)

    @property
    def rec(self) -> tuple:
        return (self.startino, self.holemask, self.count, self.freecount, self.free)


class Writer:
    """An image opened for writing; see the module docstring."""

    def __init__(self, path, *, timestamp_ns: int | None = None, cache_bytes: int = 64 << 20,
                 recovering: bool = False):
        """``recovering`` is for log recovery only (fstool.log.finish): the
        log has been replayed but is not marked clean yet."""
        from ..io.lock import ImageLock, refuse_if_mounted
        self._recovering = recovering
        refuse_if_mounted(os.fspath(path))
        self.fs = fs = Filesystem(path, cache_bytes=cache_bytes, writable=True)
        self.dev = fs.dev
        self.path = fs.dev.path
        self.fd = fs.dev.fd
        self._lock = ImageLock(self.fd, self.path)
        try:
            self._lock.__enter__()
            self._check_writable()
        except BaseException:
            fs.close()
            self.fd = -1
            raise
        sb = self.sb = fs.sb
        self.uuid = fs.uuid
        self.sparse = sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_SPINODES)
        self.finobt = sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_FINOBT)
        self.inobtcount = sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_INOBTCNT)
        self.bigtime = sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_BIGTIME)
        self.nrext64 = sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_NREXT64)
        self.enc = InodeEncoder(sb.inodesize, self.uuid, bigtime=self.bigtime,
                                nrext64=self.nrext64)
        f = sb.fields
        self.inoalign = max(1, f["sb_inoalignmt"])
        self.spino_align = f["sb_spino_align"]
        self.ialloc_blks = max(1, (XFS_INODES_PER_CHUNK * sb.inodesize) >> sb.blocklog)
        self.ialloc_inos = max(XFS_INODES_PER_CHUNK, sb.inopblock)
        self.timestamp_ns = timestamp_ns
        self.agirotor = 0
        self.in_tx = False
        self._reset()

    # -- lifetime ----------------------------------------------------------------
    def _check_writable(self) -> None:
        from .logstate import log_is_clean
        sb = self.fs.sb
        if sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_NEEDSREPAIR):
            raise WriteRefused(f"{self.path}: the filesystem is marked as needing repair; "
                               "run xfs_repair first")
        if sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_RMAPBT):
            raise UnsupportedError(f"{self.path}: writing to filesystems with the reverse "
                                   "mapping btree (rmapbt) is not supported yet")
        unknown = sb.incompat & ~(C.XFS_SB_FEAT_INCOMPAT_FTYPE | C.XFS_SB_FEAT_INCOMPAT_SPINODES
                                  | C.XFS_SB_FEAT_INCOMPAT_META_UUID
                                  | C.XFS_SB_FEAT_INCOMPAT_BIGTIME
                                  | C.XFS_SB_FEAT_INCOMPAT_NREXT64)
        if unknown:
            raise UnsupportedError(f"{self.path}: writing with incompat features 0x"
                                   f"{unknown:x} is not supported")
        if sb.log_incompat:
            raise UnsupportedError(f"{self.path}: log incompat features set; mount and "
                                   "unmount it with a kernel first")
        clean, why = log_is_clean(self.fs)
        if not clean and not self._recovering:
            raise WriteRefused(f"{self.path}: the journal is dirty ({why}); replay it "
                               "first with 'fstool log replay' (or mount the image once "
                               "with the kernel)")

    def close(self) -> None:
        if self.in_tx:
            self.abort()
        if self.fd >= 0:
            try:
                self._lock.__exit__(None, None, None)
            finally:
                self.fd = -1
                self.fs.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- transactions --------------------------------------------------------------
    def _reset(self) -> None:
        self.ags: dict[int, AGState] = {}
        self.bufs: dict[int, bytearray] = {}
        self.dirty: dict[int, int] = {}           # daddr -> crc offset
        self.pending_free: list = []             # (agno, agbno, length) freed at commit
        self.chunks: dict[tuple, Chunk] = {}     # (agno, startino) -> Chunk
        self.deferred_inodes: dict[int, bytes] = {}
        self.deferred_blocks: dict[int, bytes] = {}   # daddr -> finished buffer
        self.sb_dirty = False
        self.allocated = 0                        # blocks allocated in this transaction

    def transaction(self):
        return _Transaction(self)

    def abort(self) -> None:
        self._reset()
        self._drop_reader_caches()
        self.in_tx = False

    def _drop_reader_caches(self) -> None:
        self.fs.cache = type(self.fs.cache)(self.fs.cache.max_bytes)
        self.fs._inodes.clear()

    def commit(self) -> None:
        """Make every change of the transaction durable, in dependency order:
        new blocks, btree blocks, inodes, AG headers, superblock."""
        self._finish_chunks()
        self._apply_frees()
        for ag in self.ags.values():
            self.fix_freelist(ag)
            ag.sync_roots()
            self._update_longest(ag)
        for daddr, crc_off in sorted(self.dirty.items()):
            buf = self.bufs[daddr]
            stamp_crc(buf, crc_off)
            self._pwrite(daddr << C.BBSHIFT, buf)
        for daddr, data in sorted(self.deferred_blocks.items()):
            self._pwrite(daddr << C.BBSHIFT, data)
        for ch in self.chunks.values():
            if ch.buf is not None and not ch.flushed:
                self._flush_chunk(ch)
        for ino, raw in sorted(self.deferred_inodes.items()):
            self._pwrite(self._ino_offset(ino), raw)
        for ag in self.ags.values():
            self._write_ag_headers(ag)
        self._write_sb_counters()
        self.dev.fsync()
        self._reset()
        self._drop_reader_caches()
        self.in_tx = False

    def write_at_commit(self, daddr: int, data: bytes) -> None:
        """A finished buffer (CRC stamped) for a block the committed image
        still uses: written only when the transaction commits."""
        self.deferred_blocks[daddr] = data

    def _pwrite(self, offset: int, data) -> None:
        self.dev.pwrite(offset, data)

    # -- metadata buffers ----------------------------------------------------------
    def meta(self, daddr: int, bt: V.BufType, **where) -> bytearray:
        buf = self.bufs.get(daddr)
        if buf is None:
            raw = self.fs.read_meta(daddr, self.sb.blocksize, bt, **where)
            buf = self.bufs[daddr] = bytearray(raw)
        return buf

    def new_meta(self, daddr: int, bt: V.BufType) -> bytearray:
        buf = self.bufs[daddr] = bytearray(self.sb.blocksize)
        self.dirty[daddr] = bt.crc_off
        return buf

    def ag(self, agno: int) -> AGState:
        st = self.ags.get(agno)
        if st is None:
            st = self.ags[agno] = AGState(self, agno)
        return st

    def _write_ag_headers(self, ag: AGState) -> None:
        ss = self.sb.sectsize
        base = self.fs.agb_to_daddr(ag.agno, 0) << C.BBSHIFT
        if ag.agf_dirty:
            d = {k: v for k, v in ag.agf.items() if k != "_raw"}
            buf = bytearray(ag.agf["_raw"])
            raw = AGF.pack(d)
            buf[:len(raw)] = raw
            self._pwrite(base + ss, stamp_crc(buf, C.XFS_AGF_CRC_OFF))
        if ag.agi_dirty:
            d = {k: v for k, v in ag.agi.items() if k != "_raw"}
            buf = bytearray(ag.agi["_raw"])
            raw = AGI.pack(d)
            buf[:len(raw)] = raw
            self._pwrite(base + 2 * ss, stamp_crc(buf, C.XFS_AGI_CRC_OFF))
        if ag.agfl_dirty:
            buf = ag.agfl_raw
            struct.pack_into(f">{len(ag.agfl_slots)}I", buf, C.XFS_AGFL_HDR_SIZE,
                             *ag.agfl_slots)
            self._pwrite(base + 3 * ss, stamp_crc(buf, C.XFS_AGFL_CRC_OFF))

    def _write_sb_counters(self) -> None:
        """Superblock counters recomputed from every AG header, as the kernel
        does for lazy counters: exact by construction."""
        fs = self.fs
        icount = ifree = fdblocks = 0
        for agno in range(self.sb.agcount):
            st = self.ags.get(agno)
            agf = st.agf if st else fs.agf(agno)
            agi = st.agi if st else fs.agi(agno)
            icount += agi["agi_count"]
            ifree += agi["agi_freecount"]
            fdblocks += agf["agf_freeblks"] + agf["agf_flcount"] + agf["agf_btreeblks"]
        raw = bytearray(fs.dev.pread(0, self.sb.sectsize))
        f = SB.unpack(raw)
        if (f["sb_icount"], f["sb_ifree"], f["sb_fdblocks"]) == (icount, ifree, fdblocks):
            return
        f.update(sb_icount=icount, sb_ifree=ifree, sb_fdblocks=fdblocks)
        packed = SB.pack(f)
        raw[:len(packed)] = packed
        self._pwrite(0, stamp_crc(raw, C.XFS_SB_CRC_OFF))

    # -- free space ----------------------------------------------------------------
    def _min_freelist(self, ag: AGState) -> int:
        # room for a full split chain in each free-space btree, twice in the
        # cntbt (one extent may become two), plus one
        return 2 * (ag.cnt.levels + 1) + (ag.bno.levels + 1) + 1

    def fix_freelist(self, ag: AGState) -> None:
        need = self._min_freelist(ag)
        for _ in range(64):
            if ag.flcount >= need:
                break
            want = need - ag.flcount
            rec = ag.cnt.lookup_ge((want, 0)) or self._largest(ag)
            if rec is None:
                raise NoSpace(f"AG {ag.agno}: no space left for the free list")
            s, n = rec
            take = min(n, want)
            self._carve(ag, rec, s, take)
            for b in range(s, s + take):
                ag.agfl_put(b)
        limit = need + 8
        for _ in range(256):
            if ag.flcount <= limit:
                break
            self._insert_free(ag, ag.agfl_get(), 1)

    def _largest(self, ag: AGState):
        for rec in ag.cnt.iter_from(None, reverse=True):
            return rec
        return None

    def _update_longest(self, ag: AGState) -> None:
        rec = self._largest(ag)
        longest = rec[1] if rec else 0
        if ag.agf["agf_longest"] != longest:
            ag.agf["agf_longest"] = longest
            ag.agf_dirty = True

    def _carve(self, ag: AGState, rec: tuple, a: int, length: int) -> None:
        """Take [a, a+length) out of the free extent ``rec``."""
        s, n = rec
        if not (s <= a and a + length <= s + n and length > 0):
            raise CorruptionError("allocator", f"carving {a}+{length} from free extent "
                                  f"{s}+{n}", agno=ag.agno)
        left = a - s
        right = s + n - (a + length)
        if left:
            ag.bno.update((s, left))
        else:
            ag.bno.delete((s,))
        if right:
            ag.bno.insert((a + length, right))
        ag.cnt.delete((n, s))
        if left:
            ag.cnt.insert((s, left))
        if right:
            ag.cnt.insert((a + length, right))
        ag.agf["agf_freeblks"] -= length
        ag.agf_dirty = True

    def _insert_free(self, ag: AGState, start: int, length: int) -> None:
        """Return [start, start+length) to the free-space btrees, merging with
        free neighbours."""
        end = start + length
        if start <= 0 or end > ag.length:
            raise CorruptionError("allocator", f"freeing {start}+{length} outside the AG",
                                  agno=ag.agno, block=start)
        left = ag.bno.lookup_le((start,))
        right = ag.bno.lookup_ge((start,))
        if left is not None and left[0] + left[1] > start:
            raise CorruptionError("allocator", f"freeing block {start} which is already free",
                                  agno=ag.agno, block=start)
        if right is not None and right[0] < end:
            raise CorruptionError("allocator", f"freeing blocks {start}+{length} which "
                                  "overlap free space", agno=ag.agno, block=right[0])
        merge_l = left is not None and left[0] + left[1] == start
        merge_r = right is not None and right[0] == end
        ns, nn = start, length
        if merge_l:
            ag.cnt.delete((left[1], left[0]))
            ns, nn = left[0], nn + left[1]
        if merge_r:
            ag.cnt.delete((right[1], right[0]))
            ag.bno.delete((right[0],))
            nn += right[1]
        if merge_l:
            ag.bno.update((ns, nn))
        else:
            ag.bno.insert((ns, nn))
        ag.cnt.insert((ns, nn))
        ag.agf["agf_freeblks"] += length
        ag.agf_dirty = True
        ag.longest_stale = True

    def _apply_frees(self) -> None:
        frees, self.pending_free = self.pending_free, []
        while frees:
            for agno, start, length in sorted(frees):
                ag = self.ag(agno)
                self.fix_freelist(ag)
                self._insert_free(ag, start, length)
            # freeing may have released inode btree blocks in turn
            frees, self.pending_free = self.pending_free, []

    def free_extent(self, fsbno: int, length: int) -> None:
        """Free blocks at commit (they stay unusable until then)."""
        agno, agbno = self.fsb_split(fsbno)
        self.pending_free.append((agno, agbno, length))

    def fsb_split(self, fsbno: int) -> tuple[int, int]:
        return fsbno >> self.sb.agblklog, fsbno & ((1 << self.sb.agblklog) - 1)

    def fsb(self, agno: int, agbno: int) -> int:
        return (agno << self.sb.agblklog) | agbno

    def alloc_in_ag(self, ag: AGState, target: int, minlen: int, maxlen: int,
                    align: int = 1, exact: bool = False):
        """(agbno, length) of a free extent of minlen..maxlen blocks near
        ``target`` in this AG, taken out of the free space; None if it has none."""
        # like the kernel's fix_freelist: an AG without room for the
        # allocation and the free list it may need is skipped, not failed
        if ag.agf["agf_freeblks"] + ag.flcount < minlen + self._min_freelist(ag):
            return None
        try:
            self.fix_freelist(ag)
        except NoSpace:
            return None
        if ag.agf["agf_longest"] < minlen and not ag.longest_stale:
            return None
        target = min(max(target, 0), ag.length - 1)
        # 1. the free extent holding the target itself
        rec = ag.bno.lookup_le((target,))
        if rec is not None and rec[0] + rec[1] > target:
            a = _align_up(target, align)
            avail = rec[0] + rec[1] - a
            if avail >= minlen and (not exact or a == target):
                n = min(maxlen, avail)
                self._carve(ag, rec, a, n)
                return a, n
        if exact:
            return None
        # 2. the nearest extent on either side with room for maxlen
        best = None
        for i, rec in enumerate(ag.bno.iter_from((target,))):
            if i >= NEAR_SCAN:
                break
            a = _align_up(rec[0], align)
            if rec[0] + rec[1] - a >= maxlen:
                best = (a - target, rec, a)
                break
        for i, rec in enumerate(ag.bno.iter_from((target,), reverse=True)):
            if i >= NEAR_SCAN or (best and target - (rec[0] + rec[1]) >= best[0]):
                break
            end = rec[0] + rec[1]
            a = end - maxlen
            if align > 1:
                a -= a % align
            if a >= rec[0]:
                d = abs(target - a)
                if best is None or d < best[0]:
                    best = (d, rec, a)
                break
        if best is not None:
            self._carve(ag, best[1], best[2], maxlen)
            return best[2], maxlen
        # 3. any extent with room for maxlen (smallest first), then the largest
        for i, rec in enumerate(ag.cnt.iter_from((maxlen, 0))):
            if i >= NEAR_SCAN:
                break
            a = _align_up(rec[0], align)
            if rec[0] + rec[1] - a >= maxlen:
                self._carve(ag, rec, a, maxlen)
                return a, maxlen
        for i, rec in enumerate(ag.cnt.iter_from(None, reverse=True)):
            if i >= NEAR_SCAN or rec[1] < minlen:
                break
            a = _align_up(rec[0], align)
            avail = rec[0] + rec[1] - a
            if avail >= minlen:
                n = min(avail, maxlen)
                self._carve(ag, rec, a, n)
                return a, n
        ag.longest_stale = False
        self._update_longest(ag)
        return None

    def alloc_blocks(self, target_fsb: int, minlen: int, maxlen: int, align: int = 1):
        """(fsbno, length): an extent near ``target_fsb``, trying its AG first
        and then the others in order."""
        agno0, agbno = self.fsb_split(target_fsb)
        agcount = self.sb.agcount
        for k in range(agcount):
            agno = (agno0 + k) % agcount
            got = self.alloc_in_ag(self.ag(agno), agbno if k == 0 else 0, minlen, maxlen, align)
            if got is not None:
                self.allocated += got[1]
                return self.fsb(agno, got[0]), got[1]
        raise NoSpace(f"no free extent of {minlen} block(s) left in any AG")

    def alloc_run(self, target_fsb: int, count: int, unit: int = 1) -> list:
        """``count`` blocks as few extents as possible, each a multiple of
        ``unit`` blocks (directory blocks must not straddle extents); a list
        of (fsbno, length)."""
        out = []
        left = count
        while left:
            maxlen = min(left, MAXEXTLEN - MAXEXTLEN % unit)
            fsbno, n = self.alloc_blocks(target_fsb, unit, maxlen)
            if n % unit:
                self.free_extent(fsbno + n - n % unit, n % unit)
                n -= n % unit
            out.append((fsbno, n))
            left -= n
            target_fsb = fsbno + n
        return out

    # -- inodes --------------------------------------------------------------------------
    def ino_split(self, ino: int) -> tuple[int, int]:
        sb = self.sb
        return ino >> sb.agino_log, ino & ((1 << sb.agino_log) - 1)

    def _ino_offset(self, ino: int) -> int:
        agno, agino = self.ino_split(ino)
        sb = self.sb
        agbno = agino >> sb.inopblog
        return (self.fs.agb_to_daddr(agno, agbno) << C.BBSHIFT) + \
            ((agino & (sb.inopblock - 1)) << sb.inodelog)

    def ino_fsb(self, ino: int) -> int:
        agno, agino = self.ino_split(ino)
        return self.fsb(agno, agino >> self.sb.inopblog)

    def _chunk(self, agno: int, rec: tuple, in_fino: bool) -> Chunk:
        key = (agno, rec[0])
        ch = self.chunks.get(key)
        if ch is None:
            ch = self.chunks[key] = Chunk(agno, rec, in_fino, new=False)
        return ch

    def _ag_has_room(self, ag: AGState) -> bool:
        if ag.agi["agi_freecount"] > 0:
            return True
        # the smallest chunk this filesystem can take: a sparse cluster or a whole chunk
        need = self.spino_align if self.sparse and self.spino_align else self.ialloc_blks
        return (ag.agf["agf_longest"] >= need or ag.longest_stale) and \
            ag.agf["agf_freeblks"] + ag.flcount >= need + self._min_freelist(ag)

    def alloc_inode(self, parent: int | None, is_dir: bool) -> int:
        """Allocate an inode: directories rotate across AGs, everything else
        goes to its parent's AG; within the AG, the free inode nearest the
        parent (finobt), else a new chunk."""
        if not is_dir and parent is not None:
            # fast path: the parent's AG still has the chunk nearest the parent
            aglog = self.sb.agino_log
            ag = self.ags.get(parent >> aglog)
            if ag is not None:
                hot = ag.hot.get(parent & ((1 << aglog) - 1))
                if hot is not None and hot.freecount:
                    return self._take_inode(ag, hot)
        agcount = self.sb.agcount
        if is_dir or parent is None:
            start = self.agirotor
            self.agirotor = (self.agirotor + 1) % agcount
        else:
            start = self.ino_split(parent)[0]
        for k in range(agcount):
            agno = (start + k) % agcount
            ag = self.ag(agno)
            if not self._ag_has_room(ag):
                continue
            pagino = 0
            if parent is not None and self.ino_split(parent)[0] == agno:
                pagino = self.ino_split(parent)[1]
            # no free inode anywhere in the AG: straight to a new chunk
            ch = self._find_free_chunk(ag, pagino) if ag.agi["agi_freecount"] else None
            if ch is None:
                ch = self._new_chunk(ag)
            if ch is None:
                continue
            return self._take_inode(ag, ch)
        raise NoSpace("no free inodes and no room for a new inode chunk in any AG")

    def alloc_inodes(self, parent: int, n: int) -> list:
        """``n`` inodes for files in directory ``parent``, the ones ``n``
        calls of :meth:`alloc_inode` would give: once one comes from a chunk,
        the next ones are that chunk's lowest free inodes until it is full."""
        out = []
        aglog = self.sb.agino_log
        while len(out) < n:
            ino = self.alloc_inode(parent, is_dir=False)
            out.append(ino)
            agno = ino >> aglog
            ch = self.chunks[(agno, (ino & ((1 << aglog) - 1)) & ~(XFS_INODES_PER_CHUNK - 1))]
            k = min(ch.freecount, n - len(out))
            if k:
                out.extend(self._take_inodes(self.ags[agno], ch, k))
        return out

    def _take_inodes(self, ag: AGState, ch: Chunk, k: int) -> list:
        """Take the chunk's ``k`` lowest free inodes (holes are marked free
        but absent) and return their numbers."""
        avail = ch.free & ch.present
        lo = (avail & -avail).bit_length() - 1
        run = ((1 << k) - 1) << lo if avail else 0
        if avail and avail & run == run:
            # consecutive: one inode, or the start of a fresh chunk
            idxs = range(lo, lo + k)
            taken = run
        else:
            idxs, taken = [], 0
            for _ in range(k):
                if not avail:
                    raise CorruptionError("inobt", f"record {ch.startino} claims free inodes "
                                          "but has none", agno=ag.agno)
                low = avail & -avail
                avail ^= low
                taken |= low
                idxs.append(low.bit_length() - 1)
        ch.free &= ~taken
        ch.freecount -= k
        ag.agi["agi_freecount"] -= k
        ag.agi_dirty = True
        if ch.freecount == 0 and ch.in_fino:
            ag.fino.delete((ch.startino,))
            ch.in_fino = False
        base = (ag.agno << self.sb.agino_log) | ch.startino
        return [base + i for i in idxs]

    def put_simple_inodes(self, inos: list, items: list, ifmt: int, ctime_ns: int) -> None:
        """Store new inodes with empty forks: ``items`` holds ``(name, perm,
        uid, gid, atime_ns, mtime_ns)`` per inode, ``ifmt`` the file type."""
        enc = self.enc
        put = self.put_inode

        def encoded(k: int) -> bytes:          # one inode, by the general encoder
            _n, perm, uid, gid, at, mt = items[k]
            return enc.simple(inos[k], ifmt | perm, uid, gid, at, mt, ctime_ns, ctime_ns)
        if not self.bigtime:
            for k, ino in enumerate(inos):
                put(ino, encoded(k))
            return
        # runs of inodes in one new chunk are encoded straight into its buffer
        tpl = enc.simple_template(ifmt)
        fill = writers.fill_simple_inodes
        cksum = parsers.xfs_cksum
        big = _BIG_OFF
        aglog = self.sb.agino_log
        agmask = (1 << aglog) - 1
        chunks = self.chunks
        n = len(inos)
        i = 0
        while i < n:
            ino = inos[i]
            agino = ino & agmask
            startino = agino & ~(XFS_INODES_PER_CHUNK - 1)
            ch = chunks.get((ino >> aglog, startino))
            if ch is None or not ch.new or ch.flushed or ch.buf is None:
                put(ino, encoded(i))
                i += 1
                continue
            base = ino - (agino - startino)
            # the inodes from i on that follow one another in this chunk
            m = min(base + XFS_INODES_PER_CHUNK - ino, n - i)
            if inos[i:i + m] == list(range(ino, ino + m)):
                j = i + m
                put_bits = ((1 << m) - 1) << (ino - base)
            else:
                j = i + 1
                while j < n and base <= inos[j] < base + XFS_INODES_PER_CHUNK:
                    j += 1
                put_bits = 0
                for x in inos[i:j]:
                    put_bits |= 1 << (x - base)
            k = i
            while k < j:
                k = fill(ch.buf, tpl, base, inos, items, k, j, ifmt, ctime_ns, big,
                         C.XFS_DINODE_CRC_OFF, cksum)
                if k < j:
                    # a time outside the format: the clamping encoder
                    off = (inos[k] - base) << self.sb.inodelog
                    ch.buf[off:off + self.sb.inodesize] = encoded(k)
                    k += 1
            ch.put |= put_bits
            if ch.put == ch.present and ch.freecount == 0:
                self._flush_chunk(ch)
            i = j

    def _find_free_chunk(self, ag: AGState, pagino: int):
        # the chunk nearest the parent stays nearest while it has free
        # inodes: allocations only take inodes away, new chunks are only made
        # when no chunk has any, and frees reach the finobt at commit
        hot = ag.hot.get(pagino)
        if hot is not None and hot.freecount:
            return hot
        ch = self._search_free_chunk(ag, pagino)
        if ch is not None:
            ag.hot[pagino] = ch
        return ch

    def _search_free_chunk(self, ag: AGState, pagino: int):
        if ag.fino is not None:
            lo = ag.fino.lookup_le((pagino,))
            hi = ag.fino.lookup_ge((pagino + 1,)) if lo is None or \
                lo[0] + XFS_INODES_PER_CHUNK <= pagino else None
            cands = [r for r in (lo, hi) if r is not None]
            if not cands:
                return None
            rec = min(cands, key=lambda r: abs(r[0] - pagino))
            return self._chunk(ag.agno, rec, True)
        # no finobt: walk the inobt outwards from the parent's chunk
        left = ag.ino.iter_from((pagino,), reverse=True)
        right = ag.ino.iter_from((pagino + 1,))
        while left is not None or right is not None:
            for side in ("l", "r"):
                it = left if side == "l" else right
                if it is None:
                    continue
                rec = next(it, None)
                if rec is None:
                    if side == "l":
                        left = None
                    else:
                        right = None
                    continue
                ch = self._chunk(ag.agno, rec, False)
                if ch.freecount:
                    return ch
        return None

    def _new_chunk(self, ag: AGState):
        """Allocate a full inode chunk (aligned), right after the AG's newest
        chunk when that space is free, else near the inode btree root."""
        n = self.ialloc_blks
        got = None
        newino = ag.agi["agi_newino"]
        if newino != C.NULLAGINO:
            t = (newino >> self.sb.inopblog) + n
            if t % self.inoalign == 0 and t + n <= ag.length:
                got = self.alloc_in_ag(ag, t, n, n, exact=True)
        if got is None:
            got = self.alloc_in_ag(ag, ag.agi["agi_root"], n, n, align=self.inoalign)
        if got is None:
            return self._new_sparse_chunk(ag) if self.sparse else None
        agbno = got[0]
        self.allocated += n
        startino = agbno << self.sb.inopblog
        rec = (startino, 0, XFS_INODES_PER_CHUNK, XFS_INODES_PER_CHUNK, ALL_FREE)
        ag.ino.insert(rec)
        if ag.fino is not None:
            ag.fino.insert(rec)
        ch = self.chunks[(ag.agno, startino)] = Chunk(ag.agno, rec, ag.fino is not None,
                                                       new=True)
        ch.loaded = None
        # free inodes are filled in when the chunk is written (most slots
        # are overwritten by allocated inodes first)
        ch.buf = bytearray(XFS_INODES_PER_CHUNK << self.sb.inodelog)
        ag.agi["agi_count"] += XFS_INODES_PER_CHUNK
        ag.agi["agi_freecount"] += XFS_INODES_PER_CHUNK
        ag.agi["agi_newino"] = startino
        ag.agi_dirty = True
        return ch

    def _new_sparse_chunk(self, ag: AGState):
        """When free space has no aligned room for a whole chunk: one inode
        cluster (sb_spino_align blocks) recorded as the present part of a
        chunk-aligned sparse record, merged into that record if it exists."""
        sb = self.sb
        n = self.spino_align
        if not n or n >= self.ialloc_blks:
            return None
        got = self.alloc_in_ag(ag, ag.agi["agi_root"], n, n, align=n)
        if got is None:
            return None
        agbno = got[0]
        cstart = agbno - agbno % self.inoalign
        if cstart == 0 or cstart + self.ialloc_blks > ag.length:
            # the whole chunk's inode numbers must be valid: give it back
            self.pending_free.append((ag.agno, agbno, n))
            return None
        self.allocated += n
        startino = cstart << sb.inopblog
        first_idx = (agbno - cstart) << sb.inopblog
        ninodes = n << sb.inopblog
        present = ((1 << ninodes) - 1) << first_idx
        holemask = 0
        for b in range(XFS_INODES_PER_CHUNK // XFS_INODES_PER_HOLEMASK_BIT):
            if not (present >> (XFS_INODES_PER_HOLEMASK_BIT * b)) & 0xF:
                holemask |= 1 << b
        first = (ag.agno << sb.agino_log) | startino
        old = ag.ino.lookup_eq((startino,))
        if old is not None:
            ch = self.chunks.get((ag.agno, startino)) or \
                self._chunk(ag.agno, old, ag.fino is not None and old[3] > 0)
            if present & ch.present:
                raise CorruptionError("inobt", f"sparse chunk at {startino} already holds "
                                      "the inodes just allocated", agno=ag.agno)
            ch.holemask &= holemask
            ch.present |= present
            ch.count += ninodes
            ch.freecount += ninodes
            ch.free |= present
            for i in range(first_idx, first_idx + ninodes):
                self.put_inode(first + i, self.enc.free(first + i))
        else:
            rec = (startino, holemask, ninodes, ninodes, ALL_FREE)
            ag.ino.insert(rec)
            if ag.fino is not None:
                ag.fino.insert(rec)
            ch = self.chunks[(ag.agno, startino)] = Chunk(ag.agno, rec, ag.fino is not None,
                                                           new=True)
            ch.loaded = None
            ch.buf = bytearray(XFS_INODES_PER_CHUNK << sb.inodelog)
        ag.agi["agi_count"] += ninodes
        ag.agi["agi_freecount"] += ninodes
        ag.agi["agi_newino"] = startino
        ag.agi_dirty = True
        return ch

    def _take_inode(self, ag: AGState, ch: Chunk) -> int:
        return self._take_inodes(ag, ch, 1)[0]

    def free_inode(self, ino: int) -> None:
        """Mark an inode free (its blocks must already be freed); the chunk is
        released when every inode in it is free, as the kernel does."""
        agno, agino = self.ino_split(ino)
        ag = self.ag(agno)
        rec = ag.ino.lookup_le((agino,))
        if rec is None or not rec[0] <= agino < rec[0] + XFS_INODES_PER_CHUNK:
            raise CorruptionError("inobt", f"inode {ino} is in no inode chunk", agno=agno,
                                  ino=ino)
        ch = self.chunks.get((agno, rec[0])) or self._chunk(agno, rec, bool(rec[3]) and
                                                              ag.fino is not None)
        bit = 1 << (agino - ch.startino)
        if ch.free & bit:
            raise CorruptionError("inobt", f"inode {ino} is already free", agno=agno, ino=ino)
        ch.free |= bit
        ch.freecount += 1
        ag.agi["agi_freecount"] += 1
        ag.agi_dirty = True
        self.put_inode(ino, self.enc.free(ino))

    def put_inode(self, ino: int, raw: bytes) -> None:
        """Store an encoded inode: straight into a chunk made by this
        transaction, else deferred to commit."""
        agno, agino = self.ino_split(ino)
        startino = agino & ~(XFS_INODES_PER_CHUNK - 1)
        ch = self.chunks.get((agno, startino))
        if ch is not None and ch.new:
            if ch.flushed:
                self._pwrite(self._ino_offset(ino), raw)
                return
            off = (agino - startino) << self.sb.inodelog
            ch.buf[off:off + len(raw)] = raw
            ch.put |= 1 << (agino - startino)
            if ch.put == ch.present and ch.freecount == 0:
                self._flush_chunk(ch)
            return
        self.deferred_inodes[ino] = raw

    def chunk_done(self, ino: int) -> None:
        """Hint that the chunk of ``ino`` will get no new inodes soon: write it
        once all its allocated inodes have been stored."""
        agno, agino = self.ino_split(ino)
        ch = self.chunks.get((agno, agino & ~(XFS_INODES_PER_CHUNK - 1)))
        if ch is not None and ch.new and not ch.flushed and ch.freecount == 0 and \
                ch.put == ch.present:
            self._flush_chunk(ch)

    def _flush_chunk(self, ch: Chunk) -> None:
        """Write a new chunk's inodes (free ones initialised as the kernel
        does); a sparse chunk's holes are left alone."""
        first = (ch.agno << self.sb.agino_log) | ch.startino
        missing = ch.present & ~ch.put
        isize = self.sb.inodesize
        while missing:
            i = (missing & -missing).bit_length() - 1
            missing &= missing - 1
            ch.buf[i * isize:(i + 1) * isize] = self.enc.free(first + i)
        if ch.present == ALL_FREE:
            self._pwrite(self._ino_offset(first), ch.buf)
        else:
            i = 0
            while i < XFS_INODES_PER_CHUNK:
                if not ch.present >> i & 1:
                    i += 1
                    continue
                j = i
                while j < XFS_INODES_PER_CHUNK and ch.present >> j & 1:
                    j += 1
                self._pwrite(self._ino_offset(first + i), ch.buf[i * isize:j * isize])
                i = j
        ch.flushed = True
        ch.buf = None

    def _finish_chunks(self) -> None:
        """Write the changed inode records into the inobt and finobt, and
        release chunks whose inodes are all free."""
        for (agno, startino), ch in sorted(self.chunks.items()):
            ag = self.ag(agno)
            if not ch.new and ch.rec == ch.loaded:
                continue
            if ch.freecount == ch.count and not ch.new and ch.count == XFS_INODES_PER_CHUNK \
                    and not ch.holemask:
                # every inode free again: give the chunk back
                ag.ino.delete((startino,))
                if ch.in_fino:
                    ag.fino.delete((startino,))
                ag.agi["agi_count"] -= ch.count
                ag.agi["agi_freecount"] -= ch.count
                ag.agi_dirty = True
                self.pending_free.append((agno, startino >> self.sb.inopblog, self.ialloc_blks))
                for i in range(XFS_INODES_PER_CHUNK):
                    self.deferred_inodes.pop(((agno << self.sb.agino_log) | startino) + i, None)
                continue
            ag.ino.update(ch.rec)
            if ag.fino is None:
                continue
            if ch.freecount and ch.in_fino:
                ag.fino.update(ch.rec)
            elif ch.freecount:
                ag.fino.insert(ch.rec)
                ch.in_fino = True
            elif ch.in_fino:
                ag.fino.delete((startino,))
                ch.in_fino = False

    # -- time ------------------------------------------------------------------------
    def now_ns(self) -> int:
        if self.timestamp_ns is not None:
            return self.timestamp_ns
        import time
        return time.time_ns()


class _Transaction:
    def __init__(self, w: Writer):
        self.w = w

    def __enter__(self):
        if self.w.in_tx:
            raise FsToolError("nested transactions are not supported")
        self.w.in_tx = True
        return self.w

    def __exit__(self, etype, exc, tb):
        if etype is None:
            try:
                self.w.commit()
            except BaseException:
                self.w.abort()
                raise
        else:
            self.w.abort()
        return False
