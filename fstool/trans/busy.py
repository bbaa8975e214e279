"""Busy extents: blocks freed by transactions whose checkpoint is not yet on
disk.  Until it is, the image still has them in use by their old owner, so
they may not be written in place (as file data or as new metadata) and the
allocator steps around them, as the kernel's xfs_extent_busy does."""
from __future__ import annotations

import bisect


class BusyExtents:
    def __init__(self):
        self._ags: dict[int, list] = {}     # agno -> sorted [(start, end)]

    def __bool__(self) -> bool:
        return bool(self._ags)

    def add(self, agno: int, agbno: int, length: int) -> None:
        lst = self._ags.setdefault(agno, [])
        bisect.insort(lst, (agbno, agbno + length))

    def clear(self) -> None:
        self._ags.clear()

    def overlaps(self, agno: int, agbno: int, length: int) -> bool:
        lst = self._ags.get(agno)
        if not lst:
            return False
        end = agbno + length
        i = bisect.bisect_left(lst, (end, end))
        return any(e > agbno for _s, e in lst[:i])

    def ranges(self, agno: int) -> list:
        return list(self._ags.get(agno, ()))


def free_pieces(start: int, length: int, busy: list):
    """The parts of [start, start+length) outside the sorted ``busy``
    ranges [(s, e)], in order."""
    pos, end = start, start + length
    for s, e in busy:
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
