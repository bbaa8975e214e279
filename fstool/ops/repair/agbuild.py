"""Rebuilding one AG's free space and inode btrees, its free list and the
AGF/AGI counters (xfs_repair's phase 5, agbtree.c's order of work).

From what check learned of the AG (every owner's blocks: ``claims``; the
inode chunks: ``chunks``):

1. the inode records: check's inobt records with their counts made to
   follow their masks, the free mask of chunks holding a finding made to
   follow the inodes on disk, and chunks no record names found by their
   inodes on disk in the blocks no one claims (so a lost inobt block loses
   no inode);
2. the blocks every new tree needs are *reserved* from the space that is
   free now: not used by any owner kept, nor by the trees and free list
   being replaced (their blocks stay as they are until the rebuild
   commits, so a crash before then leaves the image as it was);
3. the free space records are what no kept owner and no new tree uses,
   the old trees' blocks included;
4. every tree is bulk-loaded through the one btree engine
   (:func:`fstool.fs.btree_write.bulk_load`) into its reserved blocks; the
   AGF, AGI and AGFL are rewritten around them.

Everything goes through the open transaction of a write session: the new
blocks are written in place before the checkpoint that commits the AG
headers naming them (they are free space until then), the headers are
logged.
"""
from __future__ import annotations

import bisect
import struct

from ...errors import FsToolError
from ...format import constants as C
from ...format.structs import AGF, AGI
from ...alloc.inodes import chunk_align, chunk_start
from ...fs import btree as B
from ...fs import btree_write as BW
from ...io import verify as V
from ...io.buf import Buf
from ..check.base import (ATTR, BMBT_ATTR, BMBT_DATA, DATA, OWN_AG, OWN_AGFL, OWN_COW,
                          OWN_FREE, OWN_INODES, OWN_INOBT, OWN_REFC, file_owner)
from ..check.spacemap import rmap_disk_order, rmap_records, shared_runs

# owners whose blocks a rebuild replaces (with the refcount btree: its
# blocks and the CoW staging extents left behind too)
REPLACED = (OWN_AG, OWN_INOBT, OWN_AGFL, OWN_FREE)
REPLACED_REFC = REPLACED + (OWN_REFC, OWN_COW)
_FULL = (1 << 64) - 1


class RepairError(FsToolError):
    """A rebuild that cannot be made (the image is left as it was)."""


def merge(ranges) -> list:
    """Sorted, merged [start, end) pairs from (start, length) ranges."""
    out = []
    for s, n in sorted(ranges):
        e = s + n
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return out


def complement(merged: list, length: int) -> list:
    """The [start, end) gaps of ``merged`` within [0, length)."""
    out = []
    pos = 0
    for s, e in merged:
        if s > pos:
            out.append([pos, min(s, length)])
        pos = max(pos, e)
        if pos >= length:
            break
    if pos < length:
        out.append([pos, length])
    return [r for r in out if r[1] > r[0]]


def holes_of(holemask: int) -> int:
    """The 64-bit mask of inodes a sparse record's holemask leaves out."""
    holes = 0
    for bit in range(16):
        if holemask >> bit & 1:
            holes |= 0xF << (4 * bit)
    return holes


def holemask_of(present: int) -> int:
    """The holemask of a chunk whose inodes ``present`` (a 64-bit mask)
    are there: a bit for each four inodes none of which is."""
    return sum(1 << bit for bit in range(16) if not present >> (4 * bit) & 0xF)


def normal_record(startino: int, holemask: int, free: int) -> tuple:
    """An inobt record whose count and freecount follow its masks (sparse
    inodes are free)."""
    if not holemask:
        free &= _FULL
        return (startino, 0, 64, bin(free).count("1"), free)
    holes = holes_of(holemask)
    free = (free | holes) & _FULL
    return (startino, holemask, 64 - bin(holes).count("1"),
            bin(free & ~holes & _FULL).count("1"), free)


def raw_buf(tx, daddr: int, length: int, bt) -> Buf:
    """A metadata buffer joined to ``tx`` as the image holds it, without
    verification (a header repair rewrites what fails it)."""
    fs = tx.fs
    key = (daddr, length)
    buf = fs.cache.get(key)
    if buf is None or buf.stale:
        buf = Buf(daddr, length, bytearray(fs.dev.pread(daddr << C.BBSHIFT, length)), bt)
        buf.verified.add(bt.name)
        buf = fs.cache.insert(buf)
    return tx.join(buf)


class ReservedStore:
    """The btree engine's block store for a bulk load into blocks reserved
    beforehand: ``alloc`` hands them out in order, never anything else."""

    def __init__(self, tx, fs, agno: int, blocks: list, buftype):
        self.tx = tx
        self.fs = fs
        self.agno = agno
        self.blocks = list(blocks)
        self.buftype = buftype
        self.blocksize = fs.sb.blocksize
        self.used = []

    def daddr(self, addr: int) -> int:
        return self.fs.agb_to_daddr(self.agno, addr)

    def alloc(self, near: int) -> int:
        if not self.blocks:
            raise RepairError(f"AG {self.agno}: internal: the blocks reserved for the "
                              f"{self.buftype.name}s ran out")
        b = self.blocks.pop(0)
        self.used.append(b)
        return b

    def new(self, addr: int) -> bytearray:
        return self.tx.get_buf(self.daddr(addr), self.blocksize, self.buftype).data

    def dirty(self, addr: int) -> None:
        """New buffers are written whole at the checkpoint."""

    def read(self, addr: int) -> bytearray:        # pragma: no cover - bulk loads never read
        raise RepairError("internal: a bulk load read a block")

    def free(self, addr: int) -> None:             # pragma: no cover
        raise RepairError("internal: a bulk load freed a block")


def tree_blocks(bt, blocksize: int, nrecs: int) -> int:
    """Blocks a default bulk load of ``nrecs`` records takes."""
    geo = BW.bulk_geometry(nrecs, (bt.maxrecs(blocksize, True), bt.maxrecs(blocksize, False)))
    return sum(g[0] for g in geo)


def tree_levels(bt, blocksize: int, nrecs: int) -> int:
    return len(BW.bulk_geometry(nrecs, (bt.maxrecs(blocksize, True),
                                        bt.maxrecs(blocksize, False))))


class AGPlan:
    """What a rebuild of one AG will write, computed before anything is
    (so ``-n`` can tell it, and a rebuild that cannot be made changes
    nothing).  ``ns``, the namespace phase's plan when it runs, tells the
    directory blocks it gives up and takes and the inode it takes."""

    def __init__(self, checker, agno: int, *, finobt: bool, recheck_inos=(),
                 scan_lost: bool = False, free_leaks: bool = True, refcount: bool = False,
                 ns=None, inodes=None):
        fs = checker.fs
        sb = fs.sb
        self.fs, self.sb, self.agno = fs, sb, agno
        self.length = fs.ag_length(agno)
        self.finobt = finobt
        self.sparse = sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_SPINODES)
        self.inobtcount = sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_INOBTCNT)
        self.notes: list = []
        claims = all_claims = checker.claims.get(agno, [])
        # the inode phase (.inodes): cleared inodes and dropped attr forks
        # own nothing any more; their unlinked buckets are emptied
        self.empty_unlinked = inodes is not None and agno in inodes.unlinked_ags
        if inodes is not None and (inodes.cleared or inodes.attr_dropped):
            claims = [c for c in claims if not inodes.drops(c[2])]
        if ns is not None:
            # the namespace phase's directory blocks, given up and taken, and
            # the blocks of attr forks the parent pointer phase makes (after
            # the inode phase's drops: a dropped fork's new blocks stay)
            claims = ns.claims_for(agno, claims)
        self.refcount = refcount
        self.rmap = sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_RMAPBT)
        replaced = REPLACED_REFC if refcount else REPLACED
        self.replaced = replaced
        # (inode chunks are kept as the new inobt records name them, below:
        # check claimed the chunks of the records it read, one of which may
        # be dropped, moved or found again on disk)
        kept = [(s, n) for s, n, o in claims if o not in replaced and o != OWN_INODES]
        old = [(s, n) for s, n, o in claims if o in replaced and o != OWN_FREE]
        self.overlaps = self._kept_overlaps(claims)
        self.refcrecs = []
        if refcount:
            runs, _inos = shared_runs(sorted(claims), checker.unwritten.get(agno, ()))
            self.refcrecs = [(start, length, count) for start, count, length in runs]
        # 1. inode records
        recs = {}
        for startino, holemask, _c, _f, free in checker.chunks.get(agno, ()):
            recs[startino] = normal_record(startino, holemask if self.sparse else 0, free)
        agmask = (1 << sb.agino_log) - 1
        align = chunk_align(sb)
        fix = {chunk_start(recs.__contains__, ino & agmask, align)
               for ino in recheck_inos if ino >> sb.agino_log == agno}
        # the records check reported (masks, counts or start wrong): derived
        # again from the inodes on disk, as xfs_repair keeps the inodes it
        # finds in a chunk whatever the inobt said of them; and a record
        # holding inodes that are no inodes (bad magic, version, number):
        # dropped when none of its chunk is an inode (its start is wrong:
        # what is there is someone else's, never to be written as inodes)
        self.bpc = checker.blocks_per_cluster
        self.rederived = {}
        suspect = set(getattr(checker.hooks, "suspect", {}).get(agno, ()))
        corrupt = {chunk_start(recs.__contains__, f.ino & agmask, align)
                   for f in checker.findings
                   if f.code == "INODE_CORRUPT" and f.ino is not None and
                   f.ino >> sb.agino_log == agno} - suspect - {None}
        claimed = merge([(s, n) for s, n, _o in checker.claims.get(agno, ())])
        # a record another overlaps is dropped: the search for chunks no
        # record names lays the chunks out again from the inodes there
        for startino in getattr(checker.hooks, "overlapping", {}).get(agno, ()):
            if startino in recs:
                self.rederived[startino] = None
                del recs[startino]
        for startino in sorted(suspect | corrupt):
            if startino in recs:
                rec = self._derive_record(recs[startino], claimed)
                if startino in corrupt and rec is not None:
                    continue
                if rec != recs[startino]:
                    self.rederived[startino] = rec
                    if rec is None:
                        del recs[startino]
                    else:
                        recs[startino] = rec
        for startino in sorted(fix & set(recs) - set(self.rederived)):
            recs[startino] = self._record_from_disk(startino, recs[startino][1])
        if inodes is not None:
            for ino in inodes.freed:
                agino = ino & agmask
                start = chunk_start(recs.__contains__, agino, align)
                if ino >> sb.agino_log == agno and start is not None:
                    r = recs[start]
                    recs[start] = normal_record(start, r[1], r[4] | 1 << (agino - start))
        # (blocks given back by the inode and namespace phases were claimed:
        # they are not among the unclaimed ones kept when leaks are not
        # freed; the namespace phase takes its new blocks from free space)
        unclaimed = complement(merge([(s, n) for s, n, _o in all_claims]), self.length)
        self.lost = []
        if any(r is None for r in self.rederived.values()):
            # a record that names no chunk: its blocks are searched with the
            # unclaimed ones for the chunk it should have named
            others = [(s, n) for s, n, o in all_claims if o != OWN_INODES]
            others += [c for r in recs.values() for c in self._chunk_blocks(r)]
            unclaimed = complement(merge(others), self.length)
            scan_lost = True
        if scan_lost:
            region = unclaimed
            if sb.inopblock > 64:
                # a block holds several chunks: the parts of the inode blocks
                # no record names are searched too
                region = merge([(s, e - s) for s, e in unclaimed] +
                               [c for r in recs.values() for c in self._chunk_blocks(r)])
            for rec in self._scan_lost(region, checker):
                if rec[0] not in recs:
                    recs[rec[0]] = rec
                    self.lost.append(rec)
        if ns is not None:
            ns.records_for(agno, recs, align)  # lost+found's inode, when made
        if not free_leaks:
            # blocks no one claims may belong to what check could not read:
            # they stay as they are (leaked, never reused)
            kept.extend((s, e - s) for s, e in unclaimed)
        self.inorecs = [recs[k] for k in sorted(recs)]
        self.finorecs = [r for r in self.inorecs if r[3] > 0] if finobt else []
        # the blocks of the inode chunks: once each (a block of more than 64
        # inodes holds several chunks)
        chunk_blocks = [(s, e - s) for s, e in
                        merge(c for r in self.inorecs for c in self._chunk_blocks(r))]
        kept.extend(chunk_blocks)
        # 2. reservations
        kept_m = merge(kept)
        # the new trees are written in place before the commit: never over
        # blocks the image uses until then, those the namespace and inode
        # phases give up included (free only in the trees built here)
        in_use = [(s, n) for s, n, o in checker.claims.get(agno, ()) if o != OWN_FREE]
        free_now = complement(merge(kept + old + in_use), self.length)
        final0 = complement(kept_m, self.length)
        bs = sb.blocksize
        ibt = B.inobt_type(self.sparse)
        self.n_ino = tree_blocks(ibt, bs, len(self.inorecs))
        self.n_fino = tree_blocks(B.inobt_type(self.sparse, True), bs,
                                  len(self.finorecs)) if finobt else 0
        self.n_refc = tree_blocks(B.REFCOUNTBT, bs, len(self.refcrecs)) if refcount else 0
        self.agfl_slots = (sb.sectsize - C.XFS_AGFL_HDR_SIZE) // 4
        if self.rmap:
            # the reverse mappings of everything kept (the new trees' own
            # blocks are added once they are placed)
            self._rmap_static = [(s, n, o) for s, n, o in claims
                                 if o not in replaced and o != OWN_INODES]
            self._rmap_static.extend((s, n, OWN_INODES) for s, n in chunk_blocks)
            self._rmap_files = self._file_maps(checker, ns, inodes)
            n_rrecs = len(rmap_records(self._rmap_static, self._rmap_files)) + 3
            n_rmap = tree_blocks(B.RMAPBT, bs, n_rrecs)
        else:
            n_rrecs = n_rmap = 0
        guess = len(final0) + 1
        for _ in range(16):
            n_free = tree_blocks(B.BNOBT, bs, guess)
            n_fl = self._agfl_min(tree_levels(B.BNOBT, bs, guess),
                                  tree_levels(B.RMAPBT, bs, n_rrecs))
            need = self.n_ino + self.n_fino + self.n_refc + 2 * n_free + n_rmap + n_fl
            taken, pieces = self._take(free_now, need)
            if len(taken) < need:
                e = RepairError(f"AG {agno}: {need} free blocks are needed for the new "
                                f"btrees and free list, only {len(taken)} are free")
                # inode chunks found on disk so far: a check that knows them
                # claims what their files own, which may free the rest
                e.fixes = self.chunk_fixes()
                raise e
            if self.rmap:
                self.rmaprecs = self._rmap_final(taken, self.n_ino + self.n_fino, self.n_refc)
                n_r = tree_blocks(B.RMAPBT, bs, len(self.rmaprecs))
                if n_r > n_rmap or len(self.rmaprecs) > n_rrecs:
                    n_rmap, n_rrecs = max(n_r, n_rmap), max(n_rrecs, len(self.rmaprecs))
                    continue
            if len(final0) + pieces <= guess:
                break
            guess = len(final0) + pieces
        else:
            raise RepairError(f"AG {agno}: could not size the free space btrees")
        # 3. free space: what no kept owner and no new block uses
        taken_m = merge((b, 1) for b in taken)
        self.free_recs = [(s, e - s) for s, e in complement(merge(
            [(s, e - s) for s, e in kept_m] + [(s, e - s) for s, e in taken_m]), self.length)]
        n_bno = tree_blocks(B.BNOBT, bs, len(self.free_recs))
        self.levels_bno = tree_levels(B.BNOBT, bs, len(self.free_recs))
        pos = 0
        self.ino_blocks = taken[pos:pos + self.n_ino]
        pos += self.n_ino
        self.fino_blocks = taken[pos:pos + self.n_fino]
        pos += self.n_fino
        self.refc_blocks = taken[pos:pos + self.n_refc]
        pos += self.n_refc
        self.bno_blocks = taken[pos:pos + n_bno]
        pos += n_bno
        self.cnt_blocks = taken[pos:pos + n_bno]
        pos += n_bno
        # (an rmapbt smaller than reserved leaves the rest to the free list:
        # OWN_AG blocks either way, so its records stay as computed)
        self.n_rmap = tree_blocks(B.RMAPBT, bs, len(self.rmaprecs)) if self.rmap else 0
        self.rmap_blocks = taken[pos:pos + self.n_rmap]
        pos += self.n_rmap
        self.agfl = taken[pos:]
        if len(self.agfl) > self.agfl_slots:
            raise RepairError(f"AG {agno}: internal: {len(self.agfl)} blocks left for a "
                              f"free list of {self.agfl_slots} slots")
        self.n_bno = n_bno
        self.freeblks = sum(n for _s, n in self.free_recs)
        self.longest = max((n for _s, n in self.free_recs), default=0)

    # -- pieces --------------------------------------------------------------------
    def chunk_fixes(self) -> dict:
        """The AG's inode chunk records this plan found on disk, for the
        next check (RepairHooks.chunk_fixes): startino -> the record found
        with no inobt record, the record derived again, or None for a
        record that names no chunk."""
        out = dict(self.rederived)
        out.update((r[0], r) for r in self.lost)
        return out

    def fix_notes(self, fixes: dict, old: dict) -> list:
        """What ``fixes`` change, one line each (``old``: check's records)."""
        out = []
        for start, rec in sorted(fixes.items()):
            was = old.get(start)
            if was is not None and rec is not None and \
                    normal_record(*was[:2], was[4]) == rec:
                continue                # dropped and found again as it was
            if was is None:
                out.append(f"AG {self.agno}: inode chunk at agino {start} found on disk with "
                           "no inobt record")
            elif rec is None:
                out.append(f"AG {self.agno}: inobt record at agino {start} dropped: its start "
                           "does not name an inode chunk on disk")
            else:
                out.append(f"AG {self.agno}: inobt record at agino {start} derived from the "
                           f"inodes on disk (holemask 0x{was[1]:x} -> 0x{rec[1]:x}, count "
                           f"{was[2]} -> {rec[2]}, free 0x{was[4]:x} -> 0x{rec[4]:x})")
        return out

    def _agfl_min(self, bno_levels: int, rmap_levels: int) -> int:
        """Blocks the free list is filled with: the kernel's minimum
        (xfs_alloc_min_freelist) for the bnobt and cntbt and, with an
        rmapbt, for its levels too (the larger of the two rules kernels
        have used: one block a level plus one, two a level)."""
        n = 2 * min(bno_levels + 1, C.XFS_BTREE_MAXLEVELS)
        if self.rmap:
            top = B.rmap_maxlevels(self.sb.blocksize, self.sb.agblocks,
                                   self.sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK))
            k = min(rmap_levels + 1, top)
            n += max(k, 2 * k - 2)
        return n

    def _file_maps(self, checker, ns, inodes) -> list:
        """The AG's fork mappings (check's, as the rmapbt must hold them)
        after the inode and namespace phases: those of cleared inodes,
        dropped attr forks and rewritten directories go, the blocks the
        rewritten directories take come."""
        out = []
        for rec in checker.rmap_expect.get(self.agno, ()):
            ino, fl = rec[2], rec[4]
            kind = (BMBT_ATTR if fl & C.XFS_RMAP_OFF_BMBT else ATTR) \
                if fl & C.XFS_RMAP_OFF_ATTR else \
                (BMBT_DATA if fl & C.XFS_RMAP_OFF_BMBT else DATA)
            if inodes is not None and inodes.drops(file_owner(ino, kind)):
                continue
            if ns is not None and ns.remaps(ino, fl):
                continue
            out.append(rec)
        if ns is not None:
            out.extend(ns.rmaps.get(self.agno, ()))
        return out

    def _rmap_final(self, taken: list, n_inobt: int, n_refc: int) -> list:
        """The new rmapbt's records (disk order) when the new trees take
        ``taken``: inobt and finobt first (OWN_INOBT), the refcountbt
        (OWN_REFC), then the free space btrees, the rmapbt and the free list
        (all OWN_AG)."""
        new = [(b, 1, OWN_INOBT) for b in taken[:n_inobt]]
        new += [(b, 1, OWN_REFC) for b in taken[n_inobt:n_inobt + n_refc]]
        new += [(b, 1, OWN_AG) for b in taken[n_inobt + n_refc:]]
        return rmap_disk_order(rmap_records(self._rmap_static + new, self._rmap_files))

    def _kept_overlaps(self, claims) -> list:
        """Blocks two kept owners claim: a rebuild cannot settle those."""
        out = []
        end = -1
        for s, n, o in sorted((c for c in claims if c[2] not in self.replaced)):
            if s < end:
                out.append((s, min(end, s + n) - s))
            end = max(end, s + n)
        return out

    @staticmethod
    def _take(free_now: list, need: int) -> tuple[list, int]:
        """``need`` blocks from the front of the free extents, lowest first;
        how many extents they came from."""
        taken = []
        pieces = 0
        for s, e in free_now:
            if len(taken) >= need:
                break
            k = min(e - s, need - len(taken))
            taken.extend(range(s, s + k))
            pieces += 1
        return taken, pieces

    def _chunk_blocks(self, rec) -> list:
        sb = self.sb
        holes = holes_of(rec[1])
        blocks = sorted({(rec[0] + i) >> sb.inopblog for i in range(64) if not holes >> i & 1})
        return [(b, 1) for b in blocks]

    def _read_inodes(self, startino: int, n: int) -> bytes | None:
        """The ``n`` inodes from ``startino`` as the disk holds them (a
        chunk may start inside a block of more than 64 inodes); None past
        the AG's end."""
        sb = self.sb
        isz = sb.inodesize
        agbno = startino >> sb.inopblog
        off = (startino & (sb.inopblock - 1)) * isz
        nblocks = max(1, -(-(off + n * isz) // sb.blocksize))
        if agbno + nblocks > self.length:
            return None
        daddr = self.fs.agb_to_daddr(self.agno, agbno)
        raw = self.fs.dev.pread(daddr << C.BBSHIFT, nblocks * sb.blocksize)
        return raw[off:off + n * isz] if off or len(raw) != n * isz else raw

    def _inode_ok(self, raw, k: int, agino: int) -> bool:
        isz = self.sb.inodesize
        off = k * isz
        if raw[off:off + 2] != b"IN" or raw[off + 4] != 3:
            return False
        ino = (self.agno << self.sb.agino_log) | agino
        return struct.unpack_from(">Q", raw, off + 152)[0] == ino and \
            bytes(raw[off + 160:off + 176]) == self.fs.uuid

    def _record_from_disk(self, startino: int, holemask: int) -> tuple:
        """The record of a chunk with its free mask read from the inodes: an
        inode with a mode is in use (what xfs_repair keeps)."""
        raw = self._read_inodes(startino, 64)
        holes = holes_of(holemask)
        free = 0
        for i in range(64):
            if holes >> i & 1:
                continue
            off = i * self.sb.inodesize
            mode = struct.unpack_from(">H", raw, off + 2)[0] if raw else 0
            if not (raw and self._inode_ok(raw, i, startino + i) and mode):
                free |= 1 << i
        return normal_record(startino, holemask, free)

    def _derive_record(self, rec, claimed: list) -> tuple | None:
        """The record of the chunk at ``rec``'s start as its inodes on disk
        show it: a cluster is there when one of its inodes is an inode
        (magic, version, its own number, the uuid) and the record has it, or
        it has none of it and no owner claims its blocks (``claimed``:
        merged [start, end) runs); an inode is in use when it is an inode
        with a mode.  None when no inode of the chunk is there (the record
        names no chunk, or its start is not one a chunk can have: the
        search for chunks no record names then finds the chunk)."""
        sb = self.sb
        startino = rec[0]
        raw = None if startino % chunk_align(sb) else self._read_inodes(startino, 64)
        if raw is None:
            return None
        isz = sb.inodesize
        ipc = min(64, max(4, self.bpc << sb.inopblog))
        holes = holes_of(rec[1]) if self.sparse else 0
        present = used = 0
        for c in range(0, 64, ipc):
            mask = ((1 << ipc) - 1) << c
            ok = [i for i in range(c, c + ipc) if self._inode_ok(raw, i, startino + i)]
            if not ok:
                continue
            if holes & mask == mask:
                first = (startino + c) >> sb.inopblog
                last = (startino + c + ipc - 1) >> sb.inopblog
                k = bisect.bisect_right(claimed, [last, 1 << 62])
                if k and claimed[k - 1][1] > first:
                    continue            # someone else's blocks: a hole indeed
            present |= mask
            for i in ok:
                if struct.unpack_from(">H", raw, i * isz + 2)[0]:
                    used |= 1 << i
        if not present:
            return None
        holemask = holemask_of(present) if self.sparse else 0
        return normal_record(startino, holemask, ~used & _FULL)

    def _scan_lost(self, unclaimed: list, checker) -> list:
        """Inode clusters in blocks no one claims, found by their inodes
        (magic, version, inode number, uuid), grouped into chunk records."""
        sb = self.sb
        bpc = checker.blocks_per_cluster
        ipc = bpc << sb.inopblog
        unit = min(64, ipc)
        lo, hi = checker.agino_range(self.agno)
        found = {}
        for s, e in unclaimed:
            b = -(-s // bpc) * bpc
            while b + bpc <= e:
                agino = b << sb.inopblog
                if lo <= agino <= hi:
                    raw = self._read_inodes(agino, ipc)
                    # a cluster (or, where a cluster holds several chunks, its
                    # part in one chunk) is there when any of its inodes is an
                    # inode: the others in it are free (a cut or zeroed part
                    # of a cluster is no hole: holes are whole clusters)
                    for g in range(0, ipc if raw else 0, unit):
                        ok = [i for i in range(g, g + unit) if self._inode_ok(raw, i, agino + i)]
                        for i in range(g, g + unit) if ok else ():
                            mode = struct.unpack_from(">H", raw, i * sb.inodesize + 2)[0] \
                                if i in ok else 0
                            found[agino + i] = 1 if mode else 2
                b += bpc
        # chunks start at multiples of the chunk alignment, the first where
        # an inode is found not yet in a chunk
        align = chunk_align(sb)
        out = []
        end = -1
        for agino in sorted(found):
            if agino < end:
                continue
            start = agino - agino % align
            end = start + 64
            present = free = 0
            for i in range(64):
                st = found.get(start + i)
                if st:
                    present |= 1 << i
                    if st == 2:
                        free |= 1 << i
            holemask = holemask_of(present)
            if holemask and not self.sparse:
                continue            # a partial chunk cannot be named without sparse inodes
            out.append(normal_record(start, holemask, free | holes_of(holemask)))
        return out

    # -- what it changes ---------------------------------------------------------------
    def summary(self) -> str:
        return (f"AG {self.agno}: inobt {len(self.inorecs)} records in {self.n_ino} blocks"
                + (f", finobt {len(self.finorecs)} records in {self.n_fino} blocks"
                   if self.finobt else "")
                + (f", refcountbt {len(self.refcrecs)} records in {self.n_refc} blocks"
                   if self.refcount else "")
                + (f", rmapbt {len(self.rmaprecs)} records in {self.n_rmap} blocks"
                   if self.rmap else "")
                + f", bnobt/cntbt {len(self.free_recs)} free extents ({self.freeblks} blocks)"
                f" in {self.n_bno}+{self.n_bno} blocks, free list {len(self.agfl)} blocks")

    def write(self, tx, agf: dict | None, agi: dict | None) -> tuple[int, int, int]:
        """Bulk-load the trees and rewrite the AG headers in ``tx``;
        ``agf``/``agi`` are the headers as check read them.  Returns the
        AG's (inodes, free inodes, free blocks) for the superblock."""
        fs, sb, agno = self.fs, self.sb, self.agno
        if agf is None or agi is None:
            raise RepairError(f"AG {agno}: the AGF or AGI cannot be read; rebuilding AG "
                              "headers from scratch is not supported yet")
        uuid = fs.uuid

        def load(bt, blocks, recs, buftype):
            store = ReservedStore(tx, fs, agno, blocks, buftype)
            root, levels, used = BW.bulk_load(bt, store, recs, agno=agno, uuid=uuid)
            if used != len(blocks):
                raise RepairError(f"AG {agno}: internal: {bt.name} used {used} of "
                                  f"{len(blocks)} reserved blocks")
            return root, levels

        ino_root, ino_lvl = load(B.inobt_type(self.sparse), self.ino_blocks, self.inorecs,
                                 V.INOBT)
        if self.finobt:
            fino_root, fino_lvl = load(B.inobt_type(self.sparse, True), self.fino_blocks,
                                       self.finorecs, V.FINOBT)
        if self.refcount:
            refc_root, refc_lvl = load(B.REFCOUNTBT, self.refc_blocks, self.refcrecs, V.REFCBT)
        if self.rmap:
            rmap_root, rmap_lvl = load(B.RMAPBT, self.rmap_blocks, self.rmaprecs, V.RMAPBT)
        bno_root, bno_lvl = load(B.BNOBT, self.bno_blocks, self.free_recs, V.BNOBT)
        cnt_recs = sorted(self.free_recs, key=lambda r: (r[1], r[0]))
        cnt_root, cnt_lvl = load(B.CNTBT, self.cnt_blocks, cnt_recs, V.CNTBT)
        ss = sb.sectsize
        base = fs.agb_to_daddr(agno, 0)
        step = ss >> C.BBSHIFT
        # AGF
        f = dict(agf)
        f.pop("_raw", None)
        f.pop("_salvaged", None)
        f.update(agf_magicnum=C.XFS_AGF_MAGIC, agf_versionnum=1, agf_seqno=agno,
                 agf_length=self.length, agf_uuid=uuid)
        roots, levels = list(f["agf_roots"]), list(f["agf_levels"])
        roots[0], roots[1], levels[0], levels[1] = bno_root, cnt_root, bno_lvl, cnt_lvl
        if self.rmap:
            roots[2], levels[2] = rmap_root, rmap_lvl
            f.update(agf_rmap_blocks=self.n_rmap)
        nfl = len(self.agfl)
        f.update(agf_roots=roots, agf_levels=levels, agf_freeblks=self.freeblks,
                 agf_longest=self.longest, agf_btreeblks=self.btreeblks,
                 agf_flfirst=0, agf_fllast=(nfl - 1) % self.agfl_slots, agf_flcount=nfl)
        if self.refcount:
            f.update(agf_refcount_root=refc_root, agf_refcount_level=refc_lvl,
                     agf_refcount_blocks=self.n_refc)
        buf = raw_buf(tx, base + step, ss, V.AGF)
        packed = AGF.pack(f)
        buf.data[:len(packed)] = packed
        # AGFL: header and slots
        buf = raw_buf(tx, base + 3 * step, ss, V.AGFL)
        hdr = bytearray(C.XFS_AGFL_HDR_SIZE)
        struct.pack_into(">II", hdr, 0, C.XFS_AGFL_MAGIC, agno)
        hdr[8:24] = uuid
        slots = list(self.agfl) + [C.NULLAGBLOCK] * (self.agfl_slots - nfl)
        buf.data[:] = bytes(hdr) + struct.pack(f">{self.agfl_slots}I", *slots) + \
            bytes(ss - C.XFS_AGFL_HDR_SIZE - 4 * self.agfl_slots)
        # AGI
        i = dict(agi)
        i.pop("_raw", None)
        i.pop("_salvaged", None)
        i.update(agi_magicnum=C.XFS_AGI_MAGIC, agi_versionnum=1, agi_seqno=agno,
                 agi_length=self.length, agi_uuid=uuid)
        count = sum(r[2] for r in self.inorecs)
        freecount = sum(r[3] for r in self.inorecs)
        i.update(agi_root=ino_root, agi_level=ino_lvl, agi_count=count, agi_freecount=freecount)
        if self.empty_unlinked:
            i["agi_unlinked"] = [C.NULLAGINO] * C.XFS_AGI_UNLINKED_BUCKETS
        if self.finobt:
            i.update(agi_free_root=fino_root, agi_free_level=fino_lvl)
        if self.inobtcount:
            i.update(agi_iblocks=self.n_ino, agi_fblocks=self.n_fino)
        buf = raw_buf(tx, base + 2 * step, ss, V.AGI)
        packed = AGI.pack(i)
        buf.data[:len(packed)] = packed
        return count, freecount, self.freeblks + nfl + self.btreeblks

    @property
    def btreeblks(self) -> int:
        """agf_btreeblks: the free space btrees' blocks (and the rmapbt's)
        besides their roots."""
        return 2 * (self.n_bno - 1) + (self.n_rmap - 1 if self.rmap else 0)
