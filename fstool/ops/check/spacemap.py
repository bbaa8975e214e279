"""Phase space_map: every block of every AG owned exactly once (file data
may be shared on a reflink filesystem), the refcount btree against the
sharing actually found, and the rmapbt against every owner found
(xfs_repair's phase 4 and its check_refcounts / rmaps_verify_btree)."""
from __future__ import annotations

import bisect
from array import array
from collections import Counter

from ..._backend import checks
from ...format import constants as C
from .base import (DATA, OWN_AG, OWN_AGFL, OWN_COW, OWN_FS, OWN_INOBT, OWN_INODES,
                   OWN_LOG, OWN_REFC, owner_name)
from .records import Rmaps, flat_claims

# check's owners as the rmapbt names them
_RMAP_OWNER = {OWN_FS: -3, OWN_LOG: -4, OWN_AG: -5, OWN_AGFL: -5, OWN_INOBT: -6,
               OWN_INODES: -7, OWN_REFC: -8, OWN_COW: -9}
_RMAP_OWNER_PAIRS = array("q", [v for pair in _RMAP_OWNER.items() for v in pair])


def _lookup_le(tree: dict, target: int):
    """The record an LE lookup of ``target`` finds, descending the tree by
    its node keys as the kernel's xfs_btree_lookup does (so wrong keys lead
    it astray, as they lead xfs_repair's check_refcounts astray)."""
    addr, level = tree["root"], tree["height"] - 1
    while level > 0:
        node = tree["nodes"].get(addr)
        if node is None or not node[0]:
            return None
        keys, ptrs = node
        i = bisect.bisect_right(keys, target) - 1
        addr = ptrs[max(i, 0)]
        level -= 1
    recs = tree["leaves"].get(addr)
    if not recs:
        return None
    i = bisect.bisect_right([r[0] for r in recs], target) - 1
    return tuple(recs[i]) if i >= 0 else None


def _data_overlaps(claims) -> bool:
    """Whether two file data claims of ``claims`` (sorted) may overlap: a
    claim starts before the previous one ends, or has no length."""
    flat = flat_claims(claims)
    got = None if flat is None else checks.data_overlaps(flat, DATA)
    return _data_overlaps_py(claims) if got is None else got


def _data_overlaps_py(claims) -> bool:
    """_data_overlaps in Python, for numbers the native test leaves to it."""
    end = -1
    for start, n, owner in claims:
        if owner >= 0 and owner & 3 == DATA:
            if n <= 0 or start < end:
                return True
            end = start + n
    return False


def shared_runs(claims, unwritten=()) -> tuple[list, set]:
    """The runs of file data blocks shared by two or more owners, as the
    refcount btree must hold them ([start, refcount, length], maximal runs
    of one count), and the inodes that share blocks.  ``claims`` is
    sorted; the claims also in ``unwritten`` (unwritten extents) share
    nothing and are counted out, as xfs_repair counts them out."""
    if not _data_overlaps(claims):
        return [], set()       # nothing is shared
    skip = Counter(tuple(u) for u in unwritten)
    events = []
    for start, n, owner in claims:
        if owner >= 0 and owner & 3 == DATA:
            if skip and skip[start, n, owner] > 0:
                skip[start, n, owner] -= 1
                continue
            events.append((start, 1, owner >> 2))
            events.append((start + n, -1, owner >> 2))
    events.sort()
    computed = []
    sharing = set()
    active = {}
    count = 0
    prev = None
    cur = None          # (start, count) of the run being built
    for pos, delta, ino in events:
        if prev is not None and pos > prev and count >= 2:
            if cur is not None and cur[1] == count and cur[0] + cur[2] == prev:
                cur[2] += pos - prev
            else:
                if cur is not None:
                    computed.append(tuple(cur))
                cur = [prev, count, pos - prev]
            sharing.update(i for i, c in active.items() if c)
        count += delta
        active[ino] = active.get(ino, 0) + delta
        prev = pos
    if cur is not None:
        computed.append(tuple(cur))
    return computed, sharing


def rmap_records(claims, file_maps) -> list:
    """The reverse mappings an AG must hold: one for every metadata owner's
    blocks in ``claims`` (check's (start, length, owner)) and every file
    mapping in ``file_maps`` ((start, length, inode, offset, flags)),
    merged where xfs_repair's rmaps_are_mergeable merges them (one owner,
    adjacent blocks; for a fork mapping the same flags and adjacent file
    offsets too; never across owners, so blocks reflink shares keep a
    record per owner).  (start, length, owner, offset, flags), sorted by
    owner, flags and start."""
    expect = [(start, n, _RMAP_OWNER[owner], 0, 0) for start, n, owner in claims
              if owner in _RMAP_OWNER]
    expect.extend(file_maps)
    expect.sort(key=lambda r: (r[2], r[4], r[0], r[3]))
    merged = []
    for s, n, o, off, fl in expect:
        if merged:
            ps, pn, po, poff, pfl = merged[-1]
            inode_data = o >= 0 and not fl & C.XFS_RMAP_OFF_BMBT
            if po == o and pfl == fl and ps + pn == s and \
                    (not inode_data or poff + pn == off):
                merged[-1] = (ps, pn + n, po, poff, pfl)
                continue
        merged.append((s, n, o, off, fl))
    return merged


def rmap_disk_order(records) -> list:
    """``records`` (from :func:`rmap_records`) as rmapbt records
    (startblock, blockcount, owner, offset with its flags) in the tree's
    key order: startblock, owner (unsigned), offset (the unwritten flag
    aside)."""
    out = [(s, n, o & _U64, off | fl) for s, n, o, off, fl in records]
    out.sort(key=lambda r: (r[0], r[2], r[3] & ~C.XFS_RMAP_OFF_UNWRITTEN))
    return out


_U64 = (1 << 64) - 1


def phase_space_map(ctx) -> None:
    reflink = ctx.sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK)
    shared_inodes = set()
    for agno in range(ctx.sb.agcount):
        claims = ctx.claims.get(agno, [])
        claims.sort()
        _sweep(ctx, agno, claims, reflink)
        if reflink:
            shared_inodes |= _check_refcounts(ctx, agno, claims)
        if ctx.has_rmap:
            _check_rmaps(ctx, agno, claims)
    for ino in sorted(shared_inodes):
        try:
            flags2 = ctx.fs.inode(ino).flags2
        except Exception:       # noqa: BLE001 - the inode's own problem is reported
            # an inode whose one fault is its CRC (its blocks were
            # claimed): judged as the CRC's rewrite will leave it, as
            # xfs_repair judges an inode whatever its CRC says
            try:
                flags2 = ctx.fs.inode_crc_mended(ino).flags2
            except Exception:   # noqa: BLE001 - damaged beyond its CRC: reported
                continue
        if not flags2 & C.XFS_DIFLAG2_REFLINK:
            ctx.report("INODE_FLAGS", f"inode {ino} shares blocks but lacks the reflink "
                       "flag", ino=ino, structure="inode", field="di_flags2")


def _sweep(ctx, agno: int, claims: list, reflink: bool) -> None:
    """Overlaps (file data may overlap file data on a reflink
    filesystem) and blocks nothing claims."""
    length = ctx.fs.ag_length(agno)
    flat = flat_claims(claims)
    if flat is not None and checks.space_sweep_ok(flat, length, reflink, DATA):
        return              # nothing to report (the loop below words it)
    pos = 0
    last = None
    unaccounted = []
    for start, n, owner in claims:
        if start > pos:
            unaccounted.append((pos, start - pos))
        elif start < pos and not (reflink and owner >= 0 and last >= 0 and
                                  owner & 3 == DATA and last & 3 == DATA):
            ctx.report("SPACE_OVERLAP", f"AG {agno}: block {start} is claimed by "
                       f"{owner_name(owner)} and by {owner_name(last)}", agno=agno,
                       block=start, structure="space",
                       ino=owner >> 2 if owner >= 0 else None)
        if start + n > pos:
            pos = start + n
            last = owner
    if pos < length:
        unaccounted.append((pos, length - pos))
    elif pos > length:
        ctx.report("SPACE_OVERLAP", f"AG {agno}: {owner_name(last)} runs past the end of "
                   "the AG", agno=agno, block=length, structure="space")
    for start, n in unaccounted:
        ctx.report("SPACE_UNACCOUNTED", f"AG {agno}: blocks {start}-{start + n - 1} are "
                   "neither free nor in use", agno=agno, block=start, structure="space",
                   found=n)


def _check_refcounts(ctx, agno: int, claims: list) -> set:
    """The shared ranges of file data (reference count of 2 or more,
    maximal runs of one count) against the refcount btree, as
    check_refcounts compares them: each must be a record of the tree.
    Returns the inodes that share blocks."""
    computed, sharing = shared_runs(claims, ctx.unwritten.get(agno, ()))
    tree = ctx.refcount_trees.get(agno)
    for start, refcount, length in computed:
        rec = _lookup_le(tree, start) if tree else None
        if rec is None or rec != (start, length, refcount):
            ctx.report("REFCOUNT_MISMATCH", f"AG {agno}: blocks {start}-"
                       f"{start + length - 1} are shared {refcount} times, the refcount "
                       f"btree gives {rec if rec else 'nothing'}", agno=agno, block=start,
                       structure="refcountbt", expected=[start, length, refcount],
                       found=list(rec) if rec else None)
    return sharing


def _check_rmaps(ctx, agno: int, claims: list) -> None:
    """Every owner check found must be covered by an rmapbt record of the
    same owner and flags (rmaps_verify_btree)."""
    expect = ctx.rmap_expect.get(agno) or Rmaps()
    have = ctx.rmaps.get(agno) or Rmaps()
    flat = flat_claims(claims)
    if flat is not None and expect.flat() is not None and have.flat() is not None and \
            checks.rmaps_match(flat, expect.flat(), have.flat(), _RMAP_OWNER_PAIRS):
        # exactly the merged records of every owner (what the kernel and
        # fstool leave): nothing to report, in either direction
        return
    merged = rmap_records(claims, expect)
    if len(have) == len(merged) and sorted(have) == sorted(merged):
        return
    by_owner = {}
    for s, n, o, off, fl in ctx.rmaps.get(agno, ()):
        by_owner.setdefault((o, fl), []).append((s, n, off))
    for lst in by_owner.values():
        lst.sort()
    for s, n, o, off, fl in merged:
        lst = by_owner.get((o, fl), [])
        i = bisect.bisect_right(lst, (s, float("inf"), float("inf"))) - 1
        ok = False
        while i >= 0:
            bs, bn, boff = lst[i]
            if bs + bn >= s + n:
                ok = o < 0 or fl & (1 << 62) or (boff <= off and boff + bn >= off + n)
                if ok:
                    break
            i -= 1
            if i >= 0 and lst[i][0] + lst[i][1] < s:
                break
        if not ok:
            ctx.report("RMAP_MISMATCH", f"AG {agno}: no rmapbt record covers blocks "
                       f"{s}-{s + n - 1} of owner {o} (offset {off}, flags 0x{fl:x})",
                       agno=agno, block=s, structure="rmapbt",
                       expected=[s, n, o, off, fl])
    # and the other way (scan_rmapbt's block states): every record maps
    # blocks its owner was found to own, at the offsets it owns them
    owned = {}
    for s, n, o, off, fl in merged:
        owned.setdefault((o, fl), []).append((s, n, off))
    for lst in owned.values():
        lst.sort()
    for s, n, o, off, fl in ctx.rmaps.get(agno, ()):
        lst = owned.get((o, fl), ())
        i = bisect.bisect_right(lst, (s, float("inf"), float("inf"))) - 1
        ok = False
        while i >= 0 and not ok:
            es, en, eoff = lst[i]
            if es + en >= s + n:
                ok = o < 0 or fl & C.XFS_RMAP_OFF_BMBT or off - eoff == s - es
            i -= 1
            if i >= 0 and lst[i][0] + lst[i][1] < s:
                break
        if not ok:
            ctx.report("RMAP_MISMATCH", f"AG {agno}: the rmapbt maps blocks {s}-"
                       f"{s + n - 1} to owner {o} (offset {off}, flags 0x{fl:x}), which "
                       "does not own them", agno=agno, block=s, structure="rmapbt",
                       found=[s, n, o, off, fl])
