"""Shared blocks: the refcount btree kept record by record (the kernel's
xfs_refcount.c).

On a reflink filesystem every block has a reference count: how many file
mappings use it.  The refcount btree records only the blocks used more
than once, as maximal runs of one count: ``(startblock, blockcount,
refcount)``, refcount >= 2.  A block in no record is used once (or is free:
the free-space btrees tell).  Copy-on-write staging extents live in the same
tree in a domain of their own (``startblock | COW_FLAG``, refcount 1); the
kernel keeps them while a write's new blocks are not yet remapped, and
drops the leftovers at the next mount.

:meth:`Refcount.adjust` adds or takes one reference over a range of blocks
(xfs_refcount_increase_extent / decrease_extent): records are split at the
range's ends, counts moved, records of count 1 dropped and neighbours of
equal count merged, so the records stay the maximal runs xfs_repair
computes from the file mappings.  Taking the last reference of a block
(count 1, no record) frees it: the caller gets those runs back to free.
"""
from __future__ import annotations

from ..errors import CorruptionError

COW_FLAG = 1 << 31
MAXLEN = (1 << 31) - 1            # blocks in one refcount record


class Refcount:
    """One AG's refcount btree (a :class:`~fstool.fs.btree_write.ShortBtree`
    over the refcountbt descriptor)."""

    def __init__(self, tree, agno: int):
        self.tree = tree
        self.agno = agno

    def _corrupt(self, detail: str, block: int | None = None):
        return CorruptionError("refcountbt", detail, agno=self.agno, block=block)

    # -- lookups -------------------------------------------------------------------
    def shared(self, bno: int, length: int) -> list:
        """(start, length, refcount) of the shared-domain records over
        [bno, bno+length), clipped to it, in order."""
        out = []
        end = bno + length
        for s, n, c in self._records(bno, end):
            lo, hi = max(s, bno), min(s + n, end)
            if hi > lo:
                out.append((lo, hi - lo, c))
        return out

    def _records(self, bno: int, end: int) -> list:
        """Shared-domain records meeting [bno, end)."""
        t = self.tree
        out = []
        first = t.lookup_le((bno,))
        start = first if first is not None and first[0] + first[1] > bno else None
        if start is not None:
            out.append(tuple(start))
        for rec in t.iter_from((bno + 1,) if start is not None else (bno,)):
            if rec[0] >= end or rec[0] & COW_FLAG:
                break
            if start is not None and rec[0] == start[0]:
                continue
            out.append(tuple(rec))
        return out

    def cow_records(self) -> list:
        """(start, length) of every copy-on-write staging extent."""
        return [(s & ~COW_FLAG, n) for s, n, _c in self.tree.iter_from((COW_FLAG,))]

    def records(self) -> list:
        return [tuple(r) for r in self.tree.iter_from()]

    # -- changes --------------------------------------------------------------------
    def adjust(self, bno: int, length: int, delta: int) -> list:
        """Add (``delta`` +1) or take (-1) one reference to every block of
        [bno, bno+length); returns the (start, length) runs whose last
        reference went (to be freed)."""
        if length <= 0:
            return []
        if delta not in (1, -1):
            raise ValueError("refcount changes one reference at a time")
        if bno & COW_FLAG or bno + length > COW_FLAG:
            raise self._corrupt(f"blocks {bno}+{length} are outside the shared domain", bno)
        end = bno + length
        old = self._records(bno, end)
        # the counts over the span the old records and the range cover:
        # (start, end, count) pieces in order, count 1 where no record is
        pieces = []
        pos = bno
        for s, n, c in old:
            if s < bno:
                pieces.append((s, bno, c))
            lo, hi = max(s, bno), min(s + n, end)
            if lo > pos:
                pieces.append((pos, lo, 1 + delta))
            pieces.append((lo, hi, c + delta))
            if s + n > end:
                pieces.append((end, s + n, c))
            pos = max(pos, hi)
        if pos < end:
            pieces.append((pos, end, 1 + delta))
        freed = [(a, z - a) for a, z, c in pieces if c == 0]
        # neighbours that may merge with the new edges
        span_lo = pieces[0][0]
        span_hi = pieces[-1][1]
        t = self.tree
        left = t.lookup_le((span_lo - 1,)) if span_lo else None
        if left is not None and (left[0] & COW_FLAG or left[0] + left[1] != span_lo):
            left = None
        right = t.lookup_eq((span_hi,)) if span_hi < COW_FLAG else None
        keep = [(a, z, c) for a, z, c in pieces if c >= 2]
        if left is not None:
            keep.insert(0, (left[0], left[0] + left[1], left[2]))
        if right is not None:
            keep.append((right[0], right[0] + right[1], right[2]))
        merged: list = []
        for a, z, c in keep:
            if merged and merged[-1][1] == a and merged[-1][2] == c and \
                    z - merged[-1][0] <= MAXLEN:
                merged[-1] = (merged[-1][0], z, c)
            else:
                merged.append((a, z, c))
        # out with the old records (and the neighbours), in with the runs
        for rec in old:
            t.delete((rec[0],))
        if left is not None:
            t.delete((left[0],))
        if right is not None:
            t.delete((right[0],))
        for a, z, c in merged:
            t.insert((a, z - a, c))
        return freed

    def cow_add(self, bno: int, length: int) -> None:
        """Record a copy-on-write staging extent."""
        self.tree.insert((bno | COW_FLAG, length, 1))

    def cow_remove(self, bno: int, length: int) -> None:
        """Drop the staging extent recorded at ``bno`` (all of it)."""
        rec = self.tree.lookup_eq((bno | COW_FLAG,))
        if rec is None or rec[1] != length:
            raise self._corrupt(f"no copy-on-write staging extent {bno}+{length}", bno)
        self.tree.delete((bno | COW_FLAG,))
