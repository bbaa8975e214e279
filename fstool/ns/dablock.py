"""Blocks of the da-btree family shared by directories and xattrs: the
v5 da3_blkinfo header, node and hash/pointer entry arrays, and the finisher
that fills in a block's address, owner and uuid once it is placed (its LSN
and CRC come from the write verifier)."""
from __future__ import annotations

import struct

DA3_HDR = 64                                    # blkinfo (56) + count, level/stale, pad
_INFO = struct.Struct(">IIHHIQQ16sQ")           # forw back magic pad crc blkno lsn uuid owner


def da_block(size: int, magic: int, *, forw: int = 0, back: int = 0, count: int = 0,
             second: int = 0, pairs=()) -> bytearray:
    """A block with the da3 header; ``second`` is the node level or the leaf
    stale count; ``pairs`` (hash, address/before) follow the header."""
    buf = bytearray(size)
    _INFO.pack_into(buf, 0, forw, back, magic, 0, 0, 0, 0, b"\0" * 16, 0)
    struct.pack_into(">HH", buf, 56, count, second)
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
    return identity_finisher(buf, ino, uuid, 16, 32)


def node_levels(children, *, root: int, take, size: int, magic: int, block) -> list:
    """The interior levels of a da-btree built bottom-up over ``children``
    [(last hash, block)] in hash order: nodes filled from the left, level
    after level, the root at block ``root`` and every other node at the
    block ``take()`` hands out; ``block(lblk, buf)`` turns a node into
    what the caller plans.  Returns those, root last."""
    per_node = (size - DA3_HDR) // 8
    out = []
    level = 1
    while True:
        groups = [children[i:i + per_node] for i in range(0, len(children), per_node)]
        top = len(groups) == 1
        lblks = [root] if top else [take() for _ in groups]
        above = []
        for k, (lblk, g) in enumerate(zip(lblks, groups)):
            buf = da_block(size, magic, count=len(g), second=level,
                           forw=lblks[k + 1] if k + 1 < len(groups) else 0,
                           back=lblks[k - 1] if k else 0, pairs=g)
            out.append(block(lblk, buf))
            above.append((g[-1][0], lblk))
        if top:
            return out
        children = above
        level += 1
