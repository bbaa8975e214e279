"""The check repair runs: fstool check with repair's hooks registered on
its context (:class:`RepairHooks`).  They put the inode chunk records an AG
plan derived from the inodes on disk in their AG's chunks (chunks no inobt
record names added, records whose masks or start are wrong replaced or
dropped), so that their inodes and the blocks those own are seen like any
other; keep the inobt records check reported (``suspect``), for the AG plan
to derive again; and keep, for the inode phase (:mod:`.inodes`), check's
verdict on every inode in use it looked at: kept, or one xfs_repair clears;
and the blocks its data fork maps."""
from __future__ import annotations

import struct

from ..._backend import parsers
from ...errors import FsToolError
from ...format import constants as C
from ...format.structs import DINODE
from ..check import Checker, CheckHooks


def repair_checker(fs, progress=None, chunk_fixes: dict | None = None) -> Checker:
    """A check context with repair's hooks registered (not yet run)."""
    return Checker(fs, progress, hooks=RepairHooks(chunk_fixes))


class RepairHooks(CheckHooks):
    MERGED_DICTS = ("verdicts", "suspect", "overlapping")
    # repair's phase 1 (primary.settle) has settled the primary before this
    # check: restored it, stopped the repair, or let it stand (the
    # secondaries of a truncated image, past its end then, not counted:
    # --extend-truncated has made them zeros since)
    geometry_settled = True

    def __init__(self, chunk_fixes: dict | None = None):
        # agno -> {startino: inobt record, or None to drop the inobt's record}
        self.chunk_fixes = chunk_fixes or {}
        # ino -> (kept, blocks of the data fork or None when not counted)
        self.verdicts: dict = {}
        # agno -> chunk fixes (as chunk_fixes) found on disk by an AG plan
        # that then ran out of free space (the next check claims what their
        # files own)
        self.pending_fixes: dict = {}
        # agno -> startinos of the inobt records check reported and kept
        self.suspect: dict = {}
        # agno -> startinos of kept inobt records another record overlaps
        self.overlapping: dict = {}
        # the inode whose forks are being checked, as the repair leaves it
        # when that differs from the disk (read by inode_checked)
        self._as_mended = None

    def inobt_record_reported(self, ctx, agno, rec) -> None:
        self.suspect.setdefault(agno, []).append(rec[0])

    def chunk_records(self, ctx, agno, recs):
        fixes = self.chunk_fixes.get(agno)
        if fixes:
            recs = [r for r in recs if r[0] not in fixes] + \
                [r for r in fixes.values() if r is not None]
        # records whose chunks overlap: one start at least is wrong, and the
        # record kept may be it (chunks aligned to less than 64 inodes)
        end, last = -1, None
        for r in sorted(recs, key=lambda r: r[0]):
            if r[0] < end:
                self.overlapping.setdefault(agno, []).append(last)
            else:
                end, last = r[0] + 64, r[0]
        return recs

    def inode_checked(self, ctx, ino, kept, data_blocks) -> None:
        self.verdicts[ino] = (bool(kept), data_blocks)
        if self._as_mended is not None and ino in ctx.dir_raw:
            # the directory check reads the inode as the repair leaves it
            ctx.dir_raw[ino] = self._as_mended
        self._as_mended = None

    def fork_input(self, ctx, d, raw):
        # xfs_repair notes a bad inode CRC (to rewrite it) and goes on
        # checking what the inode holds: so does the check repair runs, or
        # the faults a stale CRC hides (an attr fork, a symlink) would only
        # show once the CRC is rewritten
        self._as_mended = None
        stray = bool(d["flags2"] & C.XFS_DIFLAG2_NREXT64) and \
            not ctx.sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_NREXT64)
        if stray or not parsers.xfs_cksum_ok(raw, C.XFS_DINODE_CRC_OFF):
            raw = bytearray(raw)
            if stray:
                # 64-bit extent counters on a filesystem without them: the
                # flag is the fault (INODE_FLAGS, which the inode phase
                # clears); the counts stand where the filesystem's layout
                # keeps them, so the forks are read that way rather than
                # condemned for counts read from the wrong fields
                flags2 = d["flags2"] & ~C.XFS_DIFLAG2_NREXT64
                DINODE.put(raw, "di_flags2", flags2)
                DINODE.put(raw, "di_big_nextents", 0)
                n, an = DINODE.get(raw, "di_nextents"), DINODE.get(raw, "di_anextents")
                d = dict(d, flags2=flags2, nextents=n, anextents=an)
            struct.pack_into("<I", raw, C.XFS_DINODE_CRC_OFF,
                             parsers.xfs_cksum(bytes(raw), C.XFS_DINODE_CRC_OFF))
            raw = bytes(raw)
            if stray:
                self._as_mended = raw
        return d, raw

    def extent_count(self, ctx, d, raw, off, size, attr):
        # an extent count larger than the fork holds: xfs_repair (when it
        # may write) reads the records up to the first that is empty or out
        # of order, corrects the count to those and keeps the inode (its -n
        # run says it would clear it).  The count check then reports the
        # corrected count as the expected one, which the inode phase sets
        fmt = d["aformat"] if attr else d["format"]
        field = "anextents" if attr else "nextents"
        if fmt == C.XFS_DINODE_FMT_EXTENTS:
            n = d[field]
            if n * 16 > size:
                k, prev_end = 0, 0
                for startoff, _start, count, _unw in parsers.decode_bmbt_recs(raw, off,
                                                                              size // 16):
                    if not count or startoff < prev_end:
                        break
                    k += 1
                    prev_end = startoff + count
                if k:
                    d = dict(d, **{field: k})
        return d

    def dir_node(self, ctx, node) -> None:
        # a directory whose block map's only fault is a CRC (the inode phase
        # rewrites it, as xfs_repair does): its blocks are read through the
        # map as it stands, so the entries that can be read are kept
        salvaged = salvaged_extents(ctx.fs, node)
        if salvaged is not None:
            node._extents = salvaged[0]


def salvaged_extents(fs, node):
    """(extents, addresses of the bmbt blocks) of the data fork of a
    btree-format inode whose block map fails its strict read only through
    bmbt CRCs (read as xfs_repair reads a "suspect" block); None otherwise."""
    if node.format != C.XFS_DINODE_FMT_BTREE:
        return None
    faults = []
    try:
        level, _keys, ptrs = node.bmbt_root(False)
        rows = list(fs.bmbt_reader(node.ino).walk(
            ptrs, level, lambda addr, lvl, field, detail: faults.append(field)))
    except FsToolError:
        return None
    if not rows or not faults or any(f != "crc" for f in faults):
        return None
    return ([r for blk, _key in rows[-1] for r in blk.recs],
            [blk.addr for row in rows for blk, _key in row])
