"""One directory data block changed in place, the kernel's way.

The block's pieces (header, entries, unused regions) are read and written
through fstool.fs.dirblock; this module keeps the kernel's allocation.

A v5 data block (XDD3, or XDB3 for a single-block directory) holds a
64-byte header whose bestfree table lists the three longest unused
regions, then entries and unused regions back to back up to the data end
(the block's end, or the start of the leaf array of a single-block
directory).  Every entry and unused region ends with a 2-byte tag giving
its own offset.

The functions here use and release space exactly as xfs_dir2_data_use_free
and xfs_dir2_data_make_free do, keeping the bestfree table incrementally
(insert, remove, find) and rescanning the block only when the kernel would
(``needscan``), so that a block changed here has the same bestfree table
as the kernel's after the same operations.
"""
from __future__ import annotations

from .._backend import writers
from ..fs.dirblock import (FREETAG, HDR, data_end, entry_at, entry_head, entsize, free_len,
                           get_bf, put_bf, put_entry, put_unused, set_data_magic, tag_at)

__all__ = ["FREETAG", "HDR", "data_end", "entry_at", "entsize", "free_len", "get_bf", "put_bf",
           "put_entry", "put_unused", "regions", "freefind", "freeinsert", "freeremove",
           "freescan", "init_data", "use_free", "make_free"]


def regions(buf, start: int = HDR, end: int | None = None):
    """(offset, length, is_free) of every entry and unused region."""
    if end is None:
        end = data_end(buf)
    off = start
    while off < end:
        n = free_len(buf, off)
        if n is not None:
            if n < 8 or n & 7 or off + n > end:
                raise ValueError(f"unused region at {off} of length {n}")
            yield off, n, True
        else:
            n = entsize(entry_head(buf, off)[1])
            if off + n > end:
                raise ValueError(f"entry at {off} overruns the data end {end}")
            yield off, n, False
        off += n


# -- the bestfree table -------------------------------------------------------------
def freefind(bf, off: int, length: int):
    """Index of the region at ``off`` in the table (length as it is now), or None."""
    if length < bf[2][1]:
        return None
    for i in range(3):
        if not bf[i][0]:
            return None
        if bf[i][0] == off:
            return i
    return None


def freeinsert(bf, off: int, length: int):
    """Insert a region, longest first (ties after the ones there); its slot or None."""
    if length > bf[0][1]:
        bf[2], bf[1], bf[0] = bf[1], bf[0], [off, length]
        return 0
    if length > bf[1][1]:
        bf[2], bf[1] = bf[1], [off, length]
        return 1
    if length > bf[2][1]:
        bf[2] = [off, length]
        return 2
    return None


def freeremove(bf, i: int) -> None:
    if i == 0:
        bf[0], bf[1] = bf[1], bf[2]
    elif i == 1:
        bf[1] = bf[2]
    bf[2] = [0, 0]


def freescan(buf) -> None:
    """Rebuild the bestfree table from the block's unused regions."""
    writers.dir_freescan(buf)


def init_data(buf, magic: int) -> None:
    """A fresh data block: the header and one unused region after it."""
    set_data_magic(buf, magic)
    put_unused(buf, HDR, len(buf) - HDR)
    put_bf(buf, [[HDR, len(buf) - HDR], [0, 0], [0, 0]])


def use_free(buf, dupoff: int, off: int, length: int, defer: bool = False) -> bool:
    """Take [off, off+length) out of the unused region at ``dupoff``
    (xfs_dir2_data_use_free), rescanning when the kernel would (with
    ``defer``, returns whether a rescan is due instead)."""
    scan = writers.dir_use_free(buf, dupoff, off, length)
    if scan and not defer:
        freescan(buf)
        return False
    return scan


def make_free(buf, off: int, length: int, end: int | None = None,
              defer: bool = False) -> bool:
    """Release [off, off+length), joining unused neighbours
    (xfs_dir2_data_make_free), rescanning when the kernel would (with
    ``defer``, returns whether a rescan is due instead)."""
    if end is None:
        end = data_end(buf)
    bf = get_bf(buf)
    prev = None
    if off > HDR:
        poff = tag_at(buf, off)
        if free_len(buf, poff) is not None:
            prev = poff
    post = None
    if off + length < end and free_len(buf, off + length) is not None:
        post = off + length
    scan = False
    if prev is not None and post is not None:
        plen, qlen = free_len(buf, prev), free_len(buf, post)
        i = freefind(bf, prev, plen)
        j = freefind(bf, post, qlen)
        scan = bf[2][1] != 0
        put_unused(buf, prev, plen + length + qlen)
        if not scan:
            for k in sorted((x for x in (i, j) if x is not None), reverse=True):
                freeremove(bf, k)
            freeinsert(bf, prev, plen + length + qlen)
    elif prev is not None or post is not None:
        # one unused neighbour grows over the freed space
        old = prev if prev is not None else post
        olen = free_len(buf, old)
        start = prev if prev is not None else off
        i = freefind(bf, old, olen)
        put_unused(buf, start, olen + length)
        if i is not None:
            freeremove(bf, i)
            freeinsert(bf, start, olen + length)
        else:
            scan = olen + length > bf[2][1]
    else:
        put_unused(buf, off, length)
        freeinsert(bf, off, length)
    put_bf(buf, bf)
    if scan and not defer:
        freescan(buf)
        return False
    return scan
