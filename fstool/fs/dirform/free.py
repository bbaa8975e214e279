"""The node form's free index (XDF3 blocks in the free space): each block
holds the best free length of ``maxbests`` data blocks from ``firstdb``
(0xFFFF for a data block that is gone), ``nvalid`` of them, ``nused`` not
0xFFFF.
"""
from __future__ import annotations

import struct

from ...format import problem_codes as K
from ...format.structs import DIR3_FREE_HDR

FREE_HDR = DIR3_FREE_HDR.size                     # 64: bests start here
NO_BLOCK = 0xFFFF                                 # the best of a data block that is gone
_FREE = struct.Struct(">III")
_FIRSTDB = DIR3_FREE_HDR.offset("firstdb")
_NVALID = DIR3_FREE_HDR.offset("nvalid")


def max_bests(dirblksize: int) -> int:
    """Data blocks one free block covers."""
    return (dirblksize - FREE_HDR) // 2


def free_hdr(buf) -> tuple[int, int, int]:
    """(firstdb, nvalid, nused) of a free block."""
    return _FREE.unpack_from(buf, _FIRSTDB)


def put_free_hdr(buf, firstdb: int, nvalid: int, nused: int) -> None:
    struct.pack_into(">IIII", buf, _FIRSTDB, firstdb, nvalid, nused, 0)


def put_free_counts(buf, nvalid: int, nused: int) -> None:
    struct.pack_into(">II", buf, _NVALID, nvalid, nused)


def free_bests(buf, n: int) -> list:
    return list(struct.unpack_from(f">{n}H", buf, FREE_HDR)) if n else []


def put_free_bests(buf, bests) -> None:
    if bests:
        struct.pack_into(f">{len(bests)}H", buf, FREE_HDR, *bests)


def bests_faults(stored, bests: dict, firstdb: int) -> list:
    """The faults (as :func:`verify` gives them) of the bests ``stored`` (of
    a leaf1 tail or a free block, from data block ``firstdb``) that differ
    from ``bests`` {data block: longest free run}."""
    out = []
    for i, v in enumerate(stored):
        db = firstdb + i
        want = bests.get(db, NO_BLOCK)
        if v != want:
            out.append((K.DIR_FREE, f"best free space of data block {db} recorded as {v}, "
                        f"it is {want}", "bests", dict(index=i, expected=want, found=v)))
    return out


def verify(buf, fsb: int, index: int, dirblksize: int, bests: dict) -> list:
    """Free block number ``index`` (at file offset ``fsb``) of a node-form
    directory whose data blocks have the longest free runs ``bests``:
    [(code, detail, field, more)], each fault xfs_repair finds in it (its
    place, its count, its bests, its count of used ones); a block whose
    place is wrong is not read further."""
    maxbests = max_bests(dirblksize)
    firstdb, nvalid, nused = free_hdr(buf)
    if firstdb != index * maxbests:
        return [(K.DIR_FREE, f"free block at {fsb} says it covers data blocks from "
                 f"{firstdb}, its place says {index * maxbests}", "firstdb",
                 dict(expected=index * maxbests, found=firstdb))]
    out = []
    fits = FREE_HDR + 2 * nvalid <= len(buf)
    stored = free_bests(buf, nvalid) if fits else []
    if not fits:
        out.append((K.DIR_FREE, f"free block at {fsb} says {nvalid} entries", "nvalid",
                    dict(found=nvalid)))
    out += bests_faults(stored, bests, firstdb)
    used = sum(1 for v in stored if v != NO_BLOCK)
    if used != nused:
        out.append((K.DIR_FREE, f"free block at {fsb} says {nused} used, holds {used}",
                    "nused", dict(expected=used, found=nused)))
    return out
