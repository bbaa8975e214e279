"""Blocks of the da-btree family shared by directories and xattrs: the
v5 da3_blkinfo header, node and hash/pointer entry arrays, and the finisher
that fills in a block's address, owner and uuid once it is placed (its LSN
and CRC come from the write verifier)."""
from __future__ import annotations

import struct

from ..format.structs import DA3_BLKINFO, DA3_NODE_HDR

DA3_HDR = DA3_NODE_HDR.size                     # blkinfo (56) + count, level/stale, pad
_INFO = DA3_BLKINFO.struct                      # forw back magic pad crc blkno lsn uuid owner
_COUNT = DA3_NODE_HDR.offset("__count")


def da_block(size: int, magic: int, *, forw: int = 0, back: int = 0, count: int = 0,
             second: int = 0, pairs=()) -> bytearray:
    """A block with the da3 header; ``second`` is the node level or the leaf
    stale count; ``pairs`` (hash, address/before) follow the header."""
    buf = bytearray(size)
    _INFO.pack_into(buf, 0, forw, back, magic, 0, 0, 0, 0, b"\0" * 16, 0)
    struct.pack_into(">HH", buf, _COUNT, count, second)
    if pairs:
        struct.pack_into(f">{2 * len(pairs)}I", buf, DA3_HDR, *[v for pair in pairs for v in pair])
    return buf


def identity_finisher(buf: bytearray, ino: int, uuid: bytes, blkno_off: int, uuid_off: int):
    """finish(daddr) for a v5 block whose header records its own address at
    ``blkno_off`` and the uuid and owner (8 bytes) at ``uuid_off``."""
    def finish(daddr: int) -> bytes:
        b = bytearray(buf)
        struct.pack_into(">Q", b, blkno_off, daddr)
        struct.pack_into(">16sQ", b, uuid_off, uuid, ino)
        return bytes(b)
    return finish


def da_finisher(buf: bytearray, ino: int, uuid: bytes):
    """finish(daddr) for a da3 block: address, uuid, owner."""
    return identity_finisher(buf, ino, uuid, DA3_BLKINFO.offset("blkno"),
                             DA3_BLKINFO.offset("uuid"))


def pack(keys, capacity: int, size=8, lead: int = 0) -> list:
    """Blocks for ``keys`` (hashes in order), as (start, end) index pairs:
    filled from the left, each item taking ``size`` bytes (one number for
    all, or a list) of a block's ``capacity``; then the last block starts
    early enough, when it can hold them, to take the whole final run of
    keys equal to the greatest plus ``lead`` keys below it.

    xfs_repair before 6.3 (verify_final_da_path, which compares with >=)
    rejects a da-btree whose rightmost node at any level has a first entry
    hash not below its last: a root with one child, or two children both
    ending in the greatest hash because equal hashes straddle the last
    leaf boundary; and every xfs_repair rejects a last node below the root
    whose one child is the last leaf (its walk moves to a level's next node
    only when a later leaf needs it, so it never reaches that node).
    Leaves are packed with ``lead`` 0 (the leaf before the last ends below
    the greatest hash), nodes with ``lead`` 1 (the last node holds a child
    ending below it, so two children at least); together they keep every
    rightmost node acceptable unless one block cannot hold the run."""
    n = len(keys)
    if isinstance(size, int):
        per = max(1, capacity // size)
        starts = list(range(0, n, per))

        def fits(a: int) -> bool:
            return (n - a) * size <= capacity
    else:
        starts, used = [], capacity
        for i, s in enumerate(size):
            if used + s > capacity:
                starts.append(i)
                used = 0
            used += s

        def fits(a: int) -> bool:
            return sum(size[a:]) <= capacity
    if len(starts) > 1:
        run = n - 1
        while run and keys[run - 1] == keys[-1]:
            run -= 1
        want = run - lead
        if starts[-2] < want < starts[-1] and fits(want):
            starts[-1] = want
    return list(zip(starts, starts[1:] + [n]))
