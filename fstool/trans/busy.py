"""Busy extents: blocks freed by transactions whose checkpoint is not yet on
disk.  Until it is, the image still has them in use by their old owner, so
they may not be written in place (as file data or as new metadata) and the
allocator steps around them, as the kernel's xfs_extent_busy does."""
from __future__ import annotations

import bisect


class BusyExtents:
    def __init__(self):
        self._ags: dict[int, list] = {}     # agno -> sorted [(start, end)]
        self._merged: dict[int, list] = {}  # agno -> coalesce(_ags[agno]), on demand

    def __bool__(self) -> bool:
        return bool(self._ags)

    def add(self, agno: int, agbno: int, length: int) -> None:
        lst = self._ags.setdefault(agno, [])
        bisect.insort(lst, (agbno, agbno + length))
        self._merged.pop(agno, None)

    def clear(self) -> None:
        self._ags.clear()
        self._merged.clear()

    def overlaps(self, agno: int, agbno: int, length: int) -> bool:
        lst = self._ags.get(agno)
        if not lst:
            return False
        end = agbno + length
        i = bisect.bisect_left(lst, (end, end))
        return any(e > agbno for _s, e in lst[:i])

    def ags(self) -> list:
        """The AGs with busy extents."""
        return sorted(self._ags)

    def ranges(self, agno: int) -> list:
        return list(self._ags.get(agno, ()))

    def merged(self, agno: int) -> list:
        """The AG's busy ranges, sorted and coalesced (a shared list: do not
        change it)."""
        m = self._merged.get(agno)
        if m is None:
            m = self._merged[agno] = coalesce(self._ags.get(agno, ()))
        return m


def coalesce(ranges: list) -> list:
    """Sorted [(s, e)] ranges with overlapping and touching ones joined."""
    out: list = []
    for s, e in sorted(ranges):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def free_pieces(start: int, length: int, busy: list, reverse: bool = False):
    """The parts of [start, start+length) outside the ``busy`` ranges
    [(s, e)], in order (last first with ``reverse``); ``busy`` is sorted and
    its ranges do not overlap (see :func:`coalesce`), so the search starts
    where the range falls and stops as soon as the caller does."""
    end = start + length
    if reverse:
        hi = end
        i = bisect.bisect_left(busy, (end,)) - 1
        while i >= 0:
            s, e = busy[i]
            i -= 1
            if s >= hi:
                continue
            if e <= start:
                break
            if e < hi:
                yield e, hi - e
            hi = min(hi, s)
            if hi <= start:
                return
        if hi > start:
            yield start, hi - start
        return
    pos = start
    n = len(busy)
    i = max(bisect.bisect_right(busy, (start, 1 << 62)) - 1, 0)
    while i < n:
        s, e = busy[i]
        i += 1
        if e <= pos:
            continue
        if s >= end:
            break
        if s > pos:
            yield pos, s - pos
        pos = max(pos, e)
        if pos >= end:
            return
    if pos < end:
        yield pos, end - pos
