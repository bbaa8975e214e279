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

Every allocation and every free names the blocks' owner
(:class:`fstool.alloc.rmap.Owner`): on a filesystem with the reverse
mapping btree, the blocks are mapped to it (or unmapped) in the same
transaction, as the kernel's xfs_alloc_vextent / xfs_free_extent do for
metadata.  ``owner=None`` leaves the rmapbt to the caller: the block map
(:mod:`fstool.ns.bmap`) maps file data as it inserts and removes records,
as the kernel's xfs_bmap does.

Per-AG reservations (the kernel's xfs_ag_resv): blocks the refcount btree,
the finobt and the rmapbt may still need to grow to their largest size are
kept out of ordinary allocations, so that those trees can always grow,
when a file is freed as when it is written.
"""
from __future__ import annotations

from ..errors import CorruptionError, NoSpaceError
from ..fs import btree as B
from ..fs.btree import alloc_maxlevels, rmap_maxlevels
from ..trans.busy import coalesce, free_pieces
from . import rmap as R

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
        # per-AG reservations: agno -> (metadata ask, rmapbt ask) in blocks
        self._resv_ask: dict = {}
        # rmapbt maps put off (map_later): agno -> [(agbno, length, owner,
        # unwritten)], applied in one pass before any other rmapbt change
        # in the AG and before the transaction commits
        self.later: dict = {}
        self._fino_used: dict = {}

    def begin(self) -> None:
        self.pending = []
        self.allocated = 0
        self.later = {}

    # -- addresses ----------------------------------------------------------------
    def fsb_split(self, fsbno: int) -> tuple[int, int]:
        return fsbno >> self.sb.agblklog, fsbno & ((1 << self.sb.agblklog) - 1)

    def fsb(self, agno: int, agbno: int) -> int:
        return (agno << self.sb.agblklog) | agbno

    # -- the free list ---------------------------------------------------------------
    def min_freelist(self, ag) -> int:
        rm = ag.rmap
        if self.kernel_freelist:
            return kernel_min_freelist(ag.bno.levels, ag.cnt.levels,
                                       rm.tree.levels if rm is not None else None,
                                       self._alloc_maxlevels(), self._rmap_maxlevels())
        # room for a full split chain in each free-space btree, twice in the
        # cntbt (one extent may become two), plus one; twice in the rmapbt
        # (a record split in two while the free list itself is refilled)
        need = 2 * (ag.cnt.levels + 1) + (ag.bno.levels + 1) + 1
        if rm is not None:
            need += 2 * (rm.tree.levels + 1)
        return need

    def _alloc_maxlevels(self) -> int:
        sb = self.sb
        return alloc_maxlevels(sb.blocksize, sb.agblocks)

    def _rmap_maxlevels(self) -> int:
        sb = self.sb
        return rmap_maxlevels(sb.blocksize, sb.agblocks, self.session.reflink)

    def fix_freelist(self, ag, below: int | None = None) -> None:
        """Refill the AG free list to what the free-space btrees and the
        rmapbt may take from it before the next call, or give back what it
        holds beyond that.  Blocks on the free list belong to the AG
        (OWN_AG in the rmapbt), as do those of the trees that take them.
        ``below``: refill only from free blocks before that AG block."""
        need = self.min_freelist(ag)
        rm = ag.rmap
        for _ in range(64):
            if ag.flcount >= need:
                break
            want = need - ag.flcount
            if below is None:
                rec = ag.cnt.lookup_ge((want, 0)) or self._largest(ag)
            else:
                # the first free extent before ``below``, from its start
                rec = next(iter(ag.bno.iter_from(None)), None)
                if rec is not None and rec[0] >= below:
                    rec = None
            if rec is None:
                raise NoSpaceError(f"AG {ag.agno}: no space left for the free list")
            s, n = rec
            take = min(n, want) if below is None else min(n, want, below - s)
            if not self.kernel_freelist and below is None:
                # from the end of the extent: the space files are being
                # placed in from its start stays in one piece
                s += n - take
            self._carve(ag, rec, s, take)
            for b in range(s, s + take):
                ag.agfl_put(b)
            if rm is not None:
                rm.map(s, take, R.AG)
            need = self.min_freelist(ag)
        limit = need if self.kernel_freelist else need + 8
        for _ in range(256):
            if ag.flcount <= limit:
                break
            b = ag.agfl_get()
            if rm is not None:
                rm.unmap(b, 1, R.AG)
            self._insert_free(ag, b, 1)

    def release_freelist(self, ag, start: int) -> int:
        """The free list's blocks at or past AG block ``start`` given back to
        the free space (their rmapbt records with them), the list refilled
        from the free blocks before ``start``: an AG about to be cut there.
        How many blocks went back."""
        rm = ag.rmap
        keep, back = [], 0
        for _ in range(ag.flcount):
            b = ag.agfl_get()
            if b < start:
                keep.append(b)
                continue
            if rm is not None:
                rm.unmap(b, 1, R.AG)
            self._insert_free(ag, b, 1)
            back += 1
        for b in keep:
            ag.agfl_put(b)
        if back:
            self.fix_freelist(ag, below=start)
        return back

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
        bno, cnt = ag.bno, ag.cnt
        # (a delete followed by an insert is one move: the same tree)
        if left:
            bno.update((s, left))
            if right:
                bno.insert((a + length, right))
        elif right:
            bno.move((s,), (a + length, right))
        else:
            bno.delete((s,))
        if left:
            cnt.move((n, s), (s, left))
            if right:
                cnt.insert((a + length, right))
        elif right:
            cnt.move((n, s), (a + length, right))
        else:
            cnt.delete((n, s))
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
    def free_extent(self, fsbno: int, length: int, *, owner: R.Owner | None,
                    unwritten: bool = False) -> None:
        """Free blocks of ``owner`` (unmapped from it in the rmapbt now;
        None: the caller's block map did that); they reach the free-space
        btrees when the transaction commits, and whatever buffer was cached
        over them is gone."""
        agno, agbno = self.fsb_split(fsbno)
        self.free_ag_extent(agno, agbno, length, owner=owner, unwritten=unwritten)

    def free_ag_extent(self, agno: int, agbno: int, length: int, *,
                       owner: R.Owner | None, unwritten: bool = False) -> None:
        s = self.session
        if owner is not None and s.rmap_on:
            self.rmap_op(agno, "unmap", agbno, length, owner, unwritten)
        s.tx.binval(s.fs.agb_to_daddr(agno, agbno), length << (self.sb.blocklog - 9))
        self.pending.append((agno, agbno, length))

    def free_shared(self, fsbno: int, length: int, *, owner: R.Owner | None,
                    unwritten: bool = False) -> None:
        """Give up a reflinked file's data blocks (the inode's reflink
        flag): unmapped from ``owner`` (None: the block map did that), one
        reference taken from each in the refcount btree, and freed where
        that was the last (the kernel's xfs_refcount_decrease_extent)."""
        agno, agbno = self.fsb_split(fsbno)
        s = self.session
        if owner is not None and s.rmap_on:
            self.rmap_op(agno, "unmap_shared", agbno, length, owner, unwritten)
        if not s.reflink:
            self.free_ag_extent(agno, agbno, length, owner=None)
            return
        for start, n in s.ag(agno).refc.adjust(agbno, length, -1):
            self.free_ag_extent(agno, start, n, owner=None)

    def share(self, fsbno: int, length: int) -> None:
        """One more reference to every block of the range (a reflink)."""
        agno, agbno = self.fsb_split(fsbno)
        freed = self.session.ag(agno).refc.adjust(agbno, length, +1)
        if freed:
            raise CorruptionError("refcountbt", f"adding a reference freed blocks {freed}",
                                  agno=agno)

    def shared_blocks(self, fsbno: int, length: int) -> list:
        """(fsbno, length, refcount) of the shared blocks in a range of one
        AG's blocks."""
        agno, agbno = self.fsb_split(fsbno)
        if not self.session.reflink:
            return []
        return [(self.fsb(agno, a), n, c)
                for a, n, c in self.session.ag(agno).refc.shared(agbno, length)]

    # -- the rmapbt ------------------------------------------------------------------
    def rmap_op(self, agno: int, op: str, agbno: int, length: int, owner: R.Owner,
                unwritten: bool = False) -> None:
        """One rmapbt change by name (map, unmap, convert and their _shared
        variants) in the AG, with the free list refilled for it first."""
        if self.later:
            self.flush_maps(agno)
        rm = self._rmap_ag(agno)
        if rm is not None:
            getattr(rm, op)(agbno, length, owner, unwritten)

    def map_later(self, fsbno: int, length: int, owner: R.Owner) -> None:
        """Map blocks of a run handed out piece by piece (the data pool's):
        put off until another rmapbt change in the AG or the commit, then
        made in one pass (``Rmap.map_run``), which costs far less than one
        map each."""
        if self.session.rmap_on:
            agno, agbno = self.fsb_split(fsbno)
            self.later.setdefault(agno, []).append((agbno, length, owner, False))

    def flush_maps(self, agno: int | None = None) -> None:
        """Make the maps put off (in one AG, or all)."""
        for a in ([agno] if agno is not None else sorted(self.later)):
            recs = self.later.pop(a, None)
            if not recs:
                continue
            rm = self._rmap_ag(a)
            recs.sort(key=lambda r: r[0])
            # runs of pieces that follow one another (one pool run's): no
            # other record can lie inside one
            group = [recs[0]]
            for r in recs[1:]:
                if r[0] != group[-1][0] + group[-1][1]:
                    rm.map_run(group)
                    group = []
                group.append(r)
            rm.map_run(group)

    def rmap_fsb(self, op: str, fsbno: int, length: int, owner: R.Owner,
                 unwritten: bool = False) -> None:
        if self.session.rmap_on:
            agno, agbno = self.fsb_split(fsbno)
            self.rmap_op(agno, op, agbno, length, owner, unwritten)

    def rmap_reown(self, fsbno: int, length: int, owner: R.Owner, new_owner: int,
                   unwritten: bool = False) -> None:
        """Blocks of ``owner`` (not shared) pass to inode ``new_owner`` at
        the same offset: an unmap and a map, made as one record's change
        where that is what they come to (:meth:`Rmap.reown`)."""
        if not self.session.rmap_on:
            return
        agno, agbno = self.fsb_split(fsbno)
        if self.later:
            self.flush_maps(agno)
        if not self._rmap_ag(agno).reown(agbno, length, owner, new_owner, unwritten):
            self.rmap_op(agno, "unmap", agbno, length, owner, unwritten)
            self.rmap_op(agno, "map", agbno, length, R.Owner(new_owner, owner.offset,
                                                             owner.flags), unwritten)

    def _rmap_ag(self, agno: int):
        """The AG's rmap state with its free list made right for one rmapbt
        change (refilled for the blocks a split may take, or emptied down
        for those a join may give back), as the kernel's
        xfs_rmap_finish_one fixes the free list before each; None without
        an rmapbt."""
        s = self.session
        if not s.rmap_on:
            return None
        ag = s.ag(agno)
        self.rmap_room(ag)
        return ag.rmap

    def rmap_room(self, ag) -> None:
        """Set the AG's free list right for one more rmapbt change."""
        need = self.min_freelist(ag)
        if ag.flcount < need or ag.flcount > (need if self.kernel_freelist else need + 8):
            self.fix_freelist(ag)



    # -- per-AG reservations -----------------------------------------------------------
    def _asks(self, ag) -> tuple[int, int]:
        """(metadata, rmapbt) blocks the kernel reserves in this AG for its
        trees' largest size (xfs_ag_resv_init)."""
        got = self._resv_ask.get(ag.agno)
        if got is None:
            s = self.session
            got = self._resv_ask[ag.agno] = resv_asks(self.sb, ag.agno, ag.length, s.reflink,
                                                      s.finobt, s.sparse, s.rmapbt)
        return got

    def forget_resv(self, agno: int) -> None:
        """The AG's length changed: its reservations are counted again."""
        self._resv_ask.pop(agno, None)

    def resv_needed(self, ag, resv: str = "none") -> int:
        """Blocks of the AG an allocation of kind ``resv`` must leave free:
        "none" (file data, inode chunks, directory blocks...) leaves every
        reservation, "meta" (finobt, refcount btree blocks) leaves the
        rmapbt's, "agfl" (free list refills) none."""
        if resv == "agfl":
            return 0
        meta_ask, rmap_ask = self._asks(ag)
        need = 0
        if resv != "meta" and meta_ask:
            used = ag.agf["agf_refcount_blocks"]
            if self.session.finobt:
                used += self._finobt_used(ag)
            need += max(0, meta_ask - used)
        if rmap_ask:
            need += max(0, rmap_ask - ag.agf["agf_rmap_blocks"])
        return need

    def _finobt_used(self, ag) -> int:
        if self.session.inobtcount:
            return ag.agi["agi_fblocks"]
        # without the counters the kernel counts the tree's blocks at mount
        got = self._fino_used.get(ag.agno)
        if got is None:
            got = self._fino_used[ag.agno] = _count_blocks(ag.fino)
        return got

    def apply_frees(self) -> None:
        """At commit: the maps put off, then every pending free into the
        free-space btrees (freeing may release inode btree blocks in
        turn)."""
        if self.later:
            self.flush_maps()
        s = self.session
        frees, self.pending = self.pending, []
        while frees:
            for agno, start, length in _touching_joined(frees):
                ag = s.ag(agno)
                self.fix_freelist(ag)
                self._insert_free(ag, start, length)
                s.tx.mark_busy(agno, start, length)
            frees, self.pending = self.pending, []

    def unalloc(self, fsbno: int, length: int, *, owner: R.Owner | None) -> None:
        """Give back blocks the open transaction allocated for ``owner`` and
        never used: they were free in the image before it, so they go
        straight back to the free-space btrees (not busy)."""
        agno, agbno = self.fsb_split(fsbno)
        if owner is not None:
            self.rmap_op(agno, "unmap", agbno, length, owner)
        ag = self.session.ag(agno)
        self.fix_freelist(ag)
        self._insert_free(ag, agbno, length)
        self.allocated -= length

    def alloc_exact(self, fsbno: int, length: int, *, owner: R.Owner | None) -> int:
        """Allocate up to ``length`` blocks starting exactly at ``fsbno``;
        returns how many (0 when that block is not free)."""
        agno, agbno = self.fsb_split(fsbno)
        got = self._alloc_in_ag(self.session.ag(agno), agbno, 1, length, 1, True, "none")
        if got is None:
            return 0
        if owner is not None:
            self.rmap_op(agno, "map", got[0], got[1], owner)
        self.allocated += got[1]
        return got[1]

    # -- allocating ---------------------------------------------------------------------
    def alloc_in_ag(self, ag, target: int, minlen: int, maxlen: int, align: int = 1,
                    exact: bool = False, *, owner: R.Owner | None, resv: str = "none",
                    unwritten: bool = False):
        """(agbno, length) of a free extent of minlen..maxlen blocks near
        ``target`` in this AG, taken out of the free space for ``owner``
        (mapped to it in the rmapbt; None: by the caller); None if it has
        none.  When only blocks freed by transactions whose checkpoint is
        still in memory would do, that checkpoint is written first (the
        kernel's busy-extent flush) and the search repeated; as in the
        kernel, not for an exact request (it just fails) nor when the AG
        has no free extent long enough, busy or not.  ``resv`` says which
        per-AG reservations the allocation may not touch
        (:meth:`resv_needed`)."""
        got = self._alloc_in_ag(ag, target, minlen, maxlen, align, exact, resv)
        if got is None and not exact and self.session.journal.busy.ranges(ag.agno) and \
                self._has_room(ag, minlen, resv):
            self.session.journal.push()
            got = self._alloc_in_ag(ag, target, minlen, maxlen, align, exact, resv)
        if got is not None and owner is not None:
            self.rmap_op(ag.agno, "map", got[0], got[1], owner, unwritten)
        return got

    def _available(self, ag, resv: str) -> int:
        """Blocks an allocation may take from the AG: its free space and
        free list, less the free list it must keep and the reservations
        (xfs_alloc_space_available)."""
        need = self.min_freelist(ag)
        return (ag.agf["agf_freeblks"] + min(ag.flcount, need) - need
                - self.resv_needed(ag, resv))

    def _has_room(self, ag, minlen: int, resv: str = "none") -> bool:
        """Whether the AG's free space (busy blocks counted) may hold an
        extent of ``minlen`` blocks beside the free list it needs."""
        if self._available(ag, resv) < minlen:
            return False
        return ag.agf["agf_longest"] >= minlen or ag.longest_stale

    def _alloc_in_ag(self, ag, target: int, minlen: int, maxlen: int, align: int,
                     exact: bool, resv: str):
        # like the kernel's fix_freelist: an AG without room for the
        # allocation, the free list it may need and the reservations is
        # skipped, not failed; the request is cut to what is available
        avail = self._available(ag, resv)
        if avail < minlen:
            return None
        maxlen = min(maxlen, avail)
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

    def alloc_blocks(self, target_fsb: int, minlen: int, maxlen: int, align: int = 1, *,
                     owner: R.Owner | None, unwritten: bool = False):
        """(fsbno, length): an extent for ``owner`` near ``target_fsb``,
        trying its AG first and then the others in order."""
        s = self.session
        agno0, agbno = self.fsb_split(target_fsb)
        agcount = self.sb.agcount
        for k in range(agcount):
            agno = (agno0 + k) % agcount
            got = self.alloc_in_ag(s.ag(agno), agbno if k == 0 else 0, minlen, maxlen, align,
                                   owner=owner, unwritten=unwritten)
            if got is not None:
                self.allocated += got[1]
                return self.fsb(agno, got[0]), got[1]
        raise NoSpaceError(f"no free extent of {minlen} block(s) left in any AG")

    def alloc_run(self, target_fsb: int, count: int, unit: int = 1, *,
                  owner: R.Owner | None) -> list:
        """``count`` blocks as few extents as possible, each a multiple of
        ``unit`` blocks (directory blocks must not straddle extents); a list
        of (fsbno, length).  ``owner`` is the owner of the first block (a
        fork mapping's offset moves on with each piece)."""
        out = []
        left = count
        pos = 0
        while left:
            maxlen = min(left, MAXEXTLEN - MAXEXTLEN % unit)
            who = owner.at(pos) if owner is not None else None
            fsbno, n = self.alloc_blocks(target_fsb, unit, maxlen, owner=who)
            if n % unit:
                cut = n - n % unit
                self.free_extent(fsbno + cut, n % unit, owner=who.at(cut) if who else None)
                n = cut
            out.append((fsbno, n))
            left -= n
            pos += n
            target_fsb = fsbno + n
        return out


def _touching_joined(frees: list) -> list:
    """Pending frees (agno, agbno, length) in order, those that touch
    joined (one free-space btree insert for a run of extents freed one
    after another, as a shrink's moves free them); overlapping ones are
    left apart for the insert to refuse."""
    out: list = []
    for agno, start, length in sorted(frees):
        if out and out[-1][0] == agno and out[-1][1] + out[-1][2] == start:
            out[-1] = (agno, out[-1][1], out[-1][2] + length)
        else:
            out.append((agno, start, length))
    return out


def resv_asks(sb, agno: int, length: int, reflink: bool, finobt: bool, sparse: bool,
              rmapbt: bool) -> tuple[int, int]:
    """(metadata, rmapbt) blocks the kernel reserves in an AG of ``length``
    blocks for its trees' largest size (xfs_ag_resv_init)."""
    agblocks = length
    if sb.logstart and (sb.logstart >> sb.agblklog) == agno:
        agblocks -= sb.logblocks
    bs = sb.blocksize
    meta = 0
    if reflink:
        meta += _calc_size(B.REFCOUNTBT, bs, agblocks)
    if finobt:
        meta += _calc_size(B.inobt_type(sparse), bs, agblocks * sb.inopblock // 64)
    rmap = 0
    if rmapbt:
        rmap = max(agblocks // 100, _calc_size(B.RMAPBT, bs, agblocks))
    return meta, rmap


def kernel_min_freelist(bno_levels: int, cnt_levels: int, rmap_levels: int | None,
                        alloc_max: int, rmap_max: int) -> int:
    """The free list an AG must keep, as the kernel's xfs_alloc_min_freelist
    counts it: each tree's split to a new level, then a second split under
    the old root while refilling (``rmap_levels`` None: no rmapbt)."""
    need = min(bno_levels + 1, alloc_max) * 2 - 2
    need += min(cnt_levels + 1, alloc_max) * 2 - 2
    if rmap_levels is not None:
        need += min(rmap_levels + 1, rmap_max) * 2 - 2
    return need


def _calc_size(bt, blocksize: int, records: int) -> int:
    """Blocks a btree of ``records`` takes with every block half full
    (xfs_btree_calc_size over the tree's minimum records per block)."""
    leaf_min = bt.maxrecs(blocksize, True) // 2
    node_min = bt.maxrecs(blocksize, False) // 2
    level = -(-records // leaf_min)
    total = level
    while level > 1:
        level = -(-level // node_min)
        total += level
    return total


def _count_blocks(tree) -> int:
    """Blocks of a ShortBtree (a walk of its levels)."""
    if tree is None:
        return 0
    total = 0
    addr = tree.root
    for level in range(tree.levels - 1, -1, -1):
        buf = tree._read(addr, level)
        row = addr
        while True:
            total += 1
            nxt = tree._sibs(tree._read(row, level))[1]
            if nxt == tree._null:
                break
            row = nxt
        if level:
            addr = tree._ptr(buf, 0)
    return total
