"""Free space: allocation and freeing through the bnobt and cntbt.

Policies follow the kernel's xfs_alloc: the AGFL is refilled to the most
the free-space btrees may need before each allocation; space is allocated
near a target block (the extent holding it, else the nearest free extent
on either side in the bnobt, else by size from the cntbt), so that a file's
blocks follow its inode and small files end up packed with no gap.

Extents freed by a transaction reach the free-space btrees when it commits
(so it never reuses them itself) and stay *busy* until the checkpoint that
frees them is on disk; allocation steps around busy blocks, and when only
busy space is left it asks the journal for a checkpoint and tries again.
"""
from __future__ import annotations

from ..errors import CorruptionError, NoSpaceError
from ..trans.busy import coalesce, free_pieces

MAXEXTLEN = (1 << 21) - 1            # blocks in one bmbt record
NEAR_SCAN = 64                       # free extents looked at on each side of a target


def _align_up(v: int, a: int) -> int:
    return v if a <= 1 else -(-v // a) * a


class SpaceAllocator:
    def __init__(self, session):
        self.session = session
        self.sb = session.sb
        self.pending: list = []          # (agno, agbno, length) freed by the open transaction
        self.allocated = 0               # blocks allocated by the open transaction
        # size the free list exactly as the kernel does when it frees
        # (xfs_alloc_min_freelist), for log recovery's work after replay,
        # whose result must equal the kernel's
        self.kernel_freelist = False
        # blocks held for files growing by appends (speculative preallocation,
        # see fstool.ns.fileio): free on disk, but other allocations step
        # around them as around busy blocks; owner -> (agno, start, end)
        self.reserved: dict = {}

    def begin(self) -> None:
        self.pending = []
        self.allocated = 0

    # -- addresses ----------------------------------------------------------------
    def fsb_split(self, fsbno: int) -> tuple[int, int]:
        return fsbno >> self.sb.agblklog, fsbno & ((1 << self.sb.agblklog) - 1)

    def fsb(self, agno: int, agbno: int) -> int:
        return (agno << self.sb.agblklog) | agbno

    # -- the free list ---------------------------------------------------------------
    def min_freelist(self, ag) -> int:
        if self.kernel_freelist:
            return (ag.bno.levels + 1) + (ag.cnt.levels + 1)
        # room for a full split chain in each free-space btree, twice in the
        # cntbt (one extent may become two), plus one
        return 2 * (ag.cnt.levels + 1) + (ag.bno.levels + 1) + 1

    def fix_freelist(self, ag) -> None:
        need = self.min_freelist(ag)
        for _ in range(64):
            if ag.flcount >= need:
                break
            want = need - ag.flcount
            rec = ag.cnt.lookup_ge((want, 0)) or self._largest(ag)
            if rec is None:
                raise NoSpaceError(f"AG {ag.agno}: no space left for the free list")
            s, n = rec
            take = min(n, want)
            self._carve(ag, rec, s, take)
            for b in range(s, s + take):
                ag.agfl_put(b)
        limit = need if self.kernel_freelist else need + 8
        for _ in range(256):
            if ag.flcount <= limit:
                break
            self._insert_free(ag, ag.agfl_get(), 1)

    def _largest(self, ag):
        for rec in ag.cnt.iter_from(None, reverse=True):
            return rec
        return None

    def update_longest(self, ag) -> None:
        rec = self._largest(ag)
        longest = rec[1] if rec else 0
        if ag.agf["agf_longest"] != longest:
            ag.agf["agf_longest"] = longest
            ag.agf_dirty = True

    # -- btree edits -------------------------------------------------------------------
    def _carve(self, ag, rec: tuple, a: int, length: int) -> None:
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

    def _insert_free(self, ag, start: int, length: int) -> None:
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

    # -- freeing ------------------------------------------------------------------------
    def free_extent(self, fsbno: int, length: int) -> None:
        """Free blocks; they reach the free-space btrees when the transaction
        commits, and whatever buffer was cached over them is gone."""
        agno, agbno = self.fsb_split(fsbno)
        self.free_ag_extent(agno, agbno, length)

    def free_ag_extent(self, agno: int, agbno: int, length: int) -> None:
        s = self.session
        s.tx.binval(s.fs.agb_to_daddr(agno, agbno), length << (self.sb.blocklog - 9))
        self.pending.append((agno, agbno, length))

    def apply_frees(self) -> None:
        """At commit: every pending free into the free-space btrees (freeing
        may release inode btree blocks in turn)."""
        s = self.session
        frees, self.pending = self.pending, []
        while frees:
            for agno, start, length in sorted(frees):
                ag = s.ag(agno)
                self.fix_freelist(ag)
                self._insert_free(ag, start, length)
                s.tx.mark_busy(agno, start, length)
            frees, self.pending = self.pending, []

    def unalloc(self, fsbno: int, length: int) -> None:
        """Give back blocks the open transaction allocated and never used:
        they were free in the image before it, so they go straight back to
        the free-space btrees (not busy)."""
        agno, agbno = self.fsb_split(fsbno)
        ag = self.session.ag(agno)
        self.fix_freelist(ag)
        self._insert_free(ag, agbno, length)
        self.allocated -= length

    def alloc_exact(self, fsbno: int, length: int) -> int:
        """Allocate up to ``length`` blocks starting exactly at ``fsbno``;
        returns how many (0 when that block is not free)."""
        agno, agbno = self.fsb_split(fsbno)
        got = self._alloc_in_ag(self.session.ag(agno), agbno, 1, length, 1, True)
        if got is None:
            return 0
        self.allocated += got[1]
        return got[1]

    # -- allocating ---------------------------------------------------------------------
    def alloc_in_ag(self, ag, target: int, minlen: int, maxlen: int, align: int = 1,
                    exact: bool = False):
        """(agbno, length) of a free extent of minlen..maxlen blocks near
        ``target`` in this AG, taken out of the free space; None if it has
        none.  When only blocks freed by transactions whose checkpoint is
        still in memory would do, that checkpoint is written first (the
        kernel's busy-extent flush) and the search repeated; as in the
        kernel, not for an exact request (it just fails) nor when the AG
        has no free extent long enough, busy or not."""
        got = self._alloc_in_ag(ag, target, minlen, maxlen, align, exact)
        if got is None and not exact and self.session.journal.busy.ranges(ag.agno) and \
                self._has_room(ag, minlen):
            self.session.journal.push()
            got = self._alloc_in_ag(ag, target, minlen, maxlen, align, exact)
        return got

    def _has_room(self, ag, minlen: int) -> bool:
        """Whether the AG's free space (busy blocks counted) may hold an
        extent of ``minlen`` blocks beside the free list it needs."""
        if ag.agf["agf_freeblks"] + ag.flcount < minlen + self.min_freelist(ag):
            return False
        return ag.agf["agf_longest"] >= minlen or ag.longest_stale

    def _alloc_in_ag(self, ag, target: int, minlen: int, maxlen: int, align: int,
                     exact: bool):
        # like the kernel's fix_freelist: an AG without room for the
        # allocation and the free list it may need is skipped, not failed
        if ag.agf["agf_freeblks"] + ag.flcount < minlen + self.min_freelist(ag):
            return None
        try:
            self.fix_freelist(ag)
        except NoSpaceError:
            return None
        if ag.agf["agf_longest"] < minlen and not ag.longest_stale:
            return None
        target = min(max(target, 0), ag.length - 1)
        s = self.session
        # busy blocks: those of earlier transactions (kept coalesced by the
        # journal), then the few this one freed and those held for files
        old = s.journal.busy.merged(ag.agno)
        mine = coalesce([(b, b + n) for a, b, n in s.tx.busy if a == ag.agno] +
                        [(b, e) for a, b, e in self.reserved.values() if a == ag.agno])
        busy = old or mine

        def pieces(rec, reverse=False):
            if not busy:
                return (rec,)
            out = free_pieces(rec[0], rec[1], old, reverse) if old else (rec,)
            if mine:
                out = (q for p in out for q in free_pieces(p[0], p[1], mine, reverse))
            return out

        # 1. the free extent holding the target itself
        rec = ag.bno.lookup_le((target,))
        if rec is not None and rec[0] + rec[1] > target:
            for ps, pn in pieces(rec):
                if ps > target:
                    break
                if not ps <= target < ps + pn:
                    continue
                a = _align_up(target, align)
                avail = ps + pn - a
                if avail >= minlen and (not exact or a == target):
                    n = min(maxlen, avail)
                    self._carve(ag, rec, a, n)
                    return a, n
        if exact:
            return None
        # 2. the nearest extent on either side with room for maxlen
        best = None
        for i, rec in enumerate(ag.bno.iter_from((target,))):
            if i >= NEAR_SCAN or best is not None:
                break
            for ps, pn in pieces(rec):
                a = _align_up(ps, align)
                if ps + pn - a >= maxlen:
                    best = (a - target, rec, a)
                    break
        for i, rec in enumerate(ag.bno.iter_from((target,), reverse=True)):
            if i >= NEAR_SCAN or (best and target - (rec[0] + rec[1]) >= best[0]):
                break
            found = False
            for ps, pn in pieces(rec, reverse=True):
                a = ps + pn - maxlen
                if align > 1:
                    a -= a % align
                if a >= ps and a + maxlen <= ps + pn:
                    d = abs(target - a)
                    if best is None or d < best[0]:
                        best = (d, rec, a)
                    found = True
                    break
            if found:
                break
        if best is not None:
            self._carve(ag, best[1], best[2], maxlen)
            return best[2], maxlen
        # 3. any extent with room for maxlen (smallest first), then the largest
        for i, rec in enumerate(ag.cnt.iter_from((maxlen, 0))):
            if i >= NEAR_SCAN:
                break
            for ps, pn in pieces(rec):
                a = _align_up(ps, align)
                if ps + pn - a >= maxlen:
                    self._carve(ag, rec, a, maxlen)
                    return a, maxlen
        for i, rec in enumerate(ag.cnt.iter_from(None, reverse=True)):
            if i >= NEAR_SCAN or rec[1] < minlen:
                break
            for ps, pn in pieces(rec):
                a = _align_up(ps, align)
                avail = ps + pn - a
                if avail >= minlen:
                    n = min(avail, maxlen)
                    self._carve(ag, rec, a, n)
                    return a, n
        if not busy:
            ag.longest_stale = False
            self.update_longest(ag)
        return None

    def alloc_blocks(self, target_fsb: int, minlen: int, maxlen: int, align: int = 1):
        """(fsbno, length): an extent near ``target_fsb``, trying its AG first
        and then the others in order."""
        s = self.session
        agno0, agbno = self.fsb_split(target_fsb)
        agcount = self.sb.agcount
        for k in range(agcount):
            agno = (agno0 + k) % agcount
            got = self.alloc_in_ag(s.ag(agno), agbno if k == 0 else 0, minlen, maxlen, align)
            if got is not None:
                self.allocated += got[1]
                return self.fsb(agno, got[0]), got[1]
        raise NoSpaceError(f"no free extent of {minlen} block(s) left in any AG")

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
