"""The pieces of the directory blocks, over the layouts of
fstool.format.structs: one place that knows where a data block's bestfree
table, entries and unused regions are, a single-block directory's tail, a
leaf block's header, entries and bests, and a free block's header and
bests.  Readers (fstool.fs.dir), check (fstool.ops.check.dirs), repair's
lenient reader and the writers (fstool.ns.dirdata, fstool.ns.dirops) all
go through them; the hash-ordered walk of a node-form directory's leaves
is fstool.fs.dabtree's.

Every function takes the block's bytes (a bytearray for the ``put_``
ones); none checks more than it must to find a field: judging a block is
the caller's.
"""
from __future__ import annotations

import struct

from ..format import constants as C
from ..format.structs import (DA3_NODE_HDR, DIR3_BLK_HDR, DIR2_BLOCK_TAIL, DIR2_DATA_ENTRY,
                              DIR2_DATA_FREE, DIR2_DATA_UNUSED, DIR2_LEAF_ENTRY, DIR2_LEAF_TAIL,
                              DIR2_SF_ENTRY, DIR2_SF_HDR, DIR3_DATA_HDR, DIR3_FREE_HDR,
                              DIR3_LEAF_HDR)
from . import dabtree

# -- shortform (the inode's data fork) ---------------------------------------------------
SF_HDR = DIR2_SF_HDR.size                         # 2: count, i8count; the parent follows
SF_ENTRY = DIR2_SF_ENTRY.size                     # 3: namelen, offset; the name follows
SF_MIN = SF_HDR + 4                               # the smallest fork: a 4-byte parent


def sf_header(fork) -> tuple[int, int, int]:
    """(count, i8count, width of its inode numbers) of a shortform directory."""
    count, i8count = DIR2_SF_HDR.struct.unpack_from(fork, 0)
    return count, i8count, 8 if i8count else 4


def sf_parent(fork, width: int) -> int:
    return int.from_bytes(fork[SF_HDR:SF_HDR + width], "big")


def sf_entsize(namelen: int, ft: int, width: int) -> int:
    """Bytes of a shortform entry: the fixed part, the name, the file type
    (``ft`` 1 on ftype filesystems), the inode number."""
    return SF_ENTRY + namelen + ft + width


def sf_entry(fork, pos: int, ft: int, width: int):
    """(offset, name, ftype, ino, size) of the shortform entry at ``pos``
    (whose name length, ``fork[pos]``, the caller has judged)."""
    namelen, offset = DIR2_SF_ENTRY.struct.unpack_from(fork, pos)
    name = pos + SF_ENTRY
    size = sf_entsize(namelen, ft, width)
    return (offset, bytes(fork[name:name + namelen]), fork[name + namelen] if ft else 0,
            int.from_bytes(fork[name + namelen + ft:pos + size], "big"), size)

def sf_size(parent: int, ents) -> int:
    """Bytes of a shortform directory (ftype) of ``parent`` and ``ents``
    [(offset, name, ftype, ino)]."""
    big = parent > 0xFFFFFFFF or any(e[3] > 0xFFFFFFFF for e in ents)
    width = 8 if big else 4
    return SF_HDR + width + sum(sf_entsize(len(e[1]), 1, width) for e in ents)


def sf_encode(parent: int, ents) -> bytes:
    """A shortform directory (ftype) of ``parent`` and ``ents`` [(offset,
    name, ftype, ino)], in order."""
    i8 = sum(1 for e in ents if e[3] > 0xFFFFFFFF) + (parent > 0xFFFFFFFF)
    width = 8 if i8 else 4
    out = bytearray(DIR2_SF_HDR.struct.pack(len(ents), i8))
    out += parent.to_bytes(width, "big")
    for off, name, ft, ino in ents:
        out += DIR2_SF_ENTRY.struct.pack(len(name), off) + name + bytes((ft,)) + \
            ino.to_bytes(width, "big")
    return bytes(out)


def sf_parse(fork):
    """(parent, [(offset, name, ftype, ino)]) of a shortform directory
    (ftype) whose entries the caller trusts."""
    count, _i8count, width = sf_header(fork)
    pos = SF_HDR + width
    out = []
    for _ in range(count):
        off, name, ft, ino, size = sf_entry(fork, pos, 1, width)
        out.append((off, name, ft, ino))
        pos += size
    return sf_parent(fork, width), out


# -- data blocks (XDD3, and XDB3 up to its leaf entries) ---------------------------------
HDR = DIR3_DATA_HDR.size                          # 64: entries start here
BF = DIR3_DATA_HDR.offset("best_free")            # 48: bestfree[3]
FREETAG = 0xFFFF
ENTRY = DIR2_DATA_ENTRY.size                      # 9: inumber, namelen; the name follows
TAG = 2                                           # an entry's or unused region's last bytes
# the smallest entry (a one-byte name, a file type): where the entry
# after '.' and '..' starts in a fresh block
MIN_ENTSIZE = (ENTRY + 1 + 1 + TAG + 7) & ~7

_BF = struct.Struct(f">{3 * DIR2_DATA_FREE.struct.format[1:]}")
_UNUSED = DIR2_DATA_UNUSED.struct
_ULEN = DIR2_DATA_UNUSED.offset("length")
_ENT = DIR2_DATA_ENTRY.struct
_INUMBER = struct.Struct(">Q")
assert DIR2_DATA_ENTRY.offset("inumber") == 0
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_DMAGIC = DIR3_DATA_HDR.offset("magic")


def entsize(namelen: int, ft: int = 1) -> int:
    """Bytes of a data entry: inumber, namelen, name, file type (``ft``
    1 on ftype filesystems), tag, rounded up to 8."""
    return (ENTRY + namelen + ft + TAG + 7) & ~7


def get_bf(buf) -> list:
    """The bestfree table: [[offset, length]] * 3, longest first."""
    v = _BF.unpack_from(buf, BF)
    return [[v[0], v[1]], [v[2], v[3]], [v[4], v[5]]]


def put_bf(buf, bf) -> None:
    _BF.pack_into(buf, BF, bf[0][0], bf[0][1], bf[1][0], bf[1][1], bf[2][0], bf[2][1])


def free_len(buf, off: int):
    """Length of the unused region at ``off``, or None when an entry is there."""
    if _U16.unpack_from(buf, off)[0] == FREETAG:
        return _U16.unpack_from(buf, off + _ULEN)[0]
    return None


def put_unused(buf, off: int, length: int) -> None:
    _UNUSED.pack_into(buf, off, FREETAG, length)
    _U16.pack_into(buf, off + length - TAG, off)


def tag_at(buf, end: int) -> int:
    """The tag (own offset) of the entry or unused region ending at ``end``."""
    return _U16.unpack_from(buf, end - TAG)[0]


def entry_head(buf, off: int) -> tuple[int, int]:
    """(inumber, namelen) of the data entry at ``off``."""
    return _ENT.unpack_from(buf, off)


def entry_name(buf, off: int, namelen: int) -> bytes:
    return bytes(buf[off + ENTRY:off + ENTRY + namelen])


def entry_ftype(buf, off: int, namelen: int) -> int:
    return buf[off + ENTRY + namelen]


def init_header(buf, magic: int, daddr: int, uuid: bytes, owner: int) -> None:
    """The v5 header of a new data, block or free block: ``magic``, its own
    address, the filesystem's uuid, the owning inode (CRC and LSN zero)."""
    DIR3_BLK_HDR.struct.pack_into(buf, 0, magic, 0, daddr, 0, uuid, owner)


def set_entry_ino(buf, off: int, ino: int) -> None:
    """The inode number of the data entry at ``off``."""
    _INUMBER.pack_into(buf, off, ino)


def put_entry(buf, off: int, ino: int, name: bytes, ftype: int) -> int:
    """Write an entry (ftype filesystems) at ``off``; its size."""
    size = entsize(len(name))
    _ENT.pack_into(buf, off, ino, len(name))
    end = off + ENTRY + len(name)
    buf[off + ENTRY:end] = name
    buf[end] = ftype
    buf[end + 1:off + size - TAG] = bytes(off + size - TAG - end - 1)
    _U16.pack_into(buf, off + size - TAG, off)
    return size


def entry_at(buf, off: int):
    """(ino, name, ftype, size) of the data entry at ``off`` (ftype
    filesystems)."""
    ino, n = _ENT.unpack_from(buf, off)
    return ino, entry_name(buf, off, n), entry_ftype(buf, off, n), entsize(n)


def data_magic(buf) -> int:
    return _U32.unpack_from(buf, _DMAGIC)[0]


def set_data_magic(buf, magic: int) -> None:
    _U32.pack_into(buf, _DMAGIC, magic)


def data_end(buf) -> int:
    """Where entries end: the leaf array of a block-form block, else the block end."""
    if data_magic(buf) == C.XFS_DIR3_BLOCK_MAGIC:
        return len(buf) - DIR2_BLOCK_TAIL.size - DIR2_LEAF_ENTRY.size * block_tail(buf)[0]
    return len(buf)


# -- the tail of a single-block directory ----------------------------------------------
_TAIL = DIR2_BLOCK_TAIL.struct
LEAF_ENT = DIR2_LEAF_ENTRY.size                   # 8: (hashval, address)
BLOCK_TAIL = DIR2_BLOCK_TAIL.size                 # 8: count, stale


def block_tail(buf) -> tuple[int, int]:
    """(count, stale) of a single-block directory's leaf entries."""
    return _TAIL.unpack_from(buf, len(buf) - _TAIL.size)


def put_block_tail(buf, count: int, stale: int) -> None:
    _TAIL.pack_into(buf, len(buf) - _TAIL.size, count, stale)


def block_leaf_start(buf, count: int) -> int:
    """Where a single-block directory's ``count`` leaf entries start."""
    return len(buf) - _TAIL.size - LEAF_ENT * count


# -- leaf blocks (leaf1, leafn) --------------------------------------------------------
LEAF_HDR = DIR3_LEAF_HDR.size                     # 64: leaf entries start here
_BESTCOUNT = DIR2_LEAF_TAIL.struct
LEAF_TAIL = DIR2_LEAF_TAIL.size                   # 4: bestcount
_LEAF_ENT = DIR2_LEAF_ENTRY.struct
# a leaf's count and stale sit where a da node keeps its count and level:
# the same accessors serve both
assert (DIR3_LEAF_HDR.offset("count"), DIR3_LEAF_HDR.offset("stale")) == \
    (DA3_NODE_HDR.offset("__count"), DA3_NODE_HDR.offset("__level"))
leaf_count = dabtree.count
leaf_count_stale = dabtree.count_level                  # (count, stale)
put_leaf_count_stale = dabtree.set_count_level


def leaf_entry(buf, start: int, i: int) -> tuple[int, int]:
    """(hashval, address) of leaf entry ``i`` of the array at ``start``."""
    return _LEAF_ENT.unpack_from(buf, start + LEAF_ENT * i)


def put_leaf_entry(buf, start: int, i: int, h: int, addr: int) -> None:
    _LEAF_ENT.pack_into(buf, start + LEAF_ENT * i, h, addr)


def leaf_words(buf, start: int, count: int) -> tuple:
    """The ``count`` leaf entries at ``start`` flat: hash, address, hash, ..."""
    return struct.unpack_from(f">{2 * count}I", buf, start)


def bestcount(buf) -> int:
    """The leaf1 tail's count of bests."""
    return _BESTCOUNT.unpack_from(buf, len(buf) - _BESTCOUNT.size)[0]


def put_bestcount(buf, n: int) -> None:
    _BESTCOUNT.pack_into(buf, len(buf) - _BESTCOUNT.size, n)


def leaf_bests_start(buf, n: int) -> int:
    """Where a leaf1 block's ``n`` bests start (right before its tail)."""
    return len(buf) - _BESTCOUNT.size - 2 * n


def leaf_bests(buf, n: int | None = None) -> list:
    """A leaf1 block's bests (``n`` of them, the tail's count when not given)."""
    if n is None:
        n = bestcount(buf)
    return list(struct.unpack_from(f">{n}H", buf, leaf_bests_start(buf, n)))


def put_leaf_bests(buf, bests) -> None:
    """The bests and the tail's count of a leaf1 block."""
    put_bestcount(buf, len(bests))
    if bests:
        struct.pack_into(f">{len(bests)}H", buf, leaf_bests_start(buf, len(bests)), *bests)


def put_last_best(buf, best: int) -> None:
    """The last of a leaf1 block's bests (just before the tail)."""
    _U16.pack_into(buf, leaf_bests_start(buf, 1), best)


# -- free blocks -------------------------------------------------------------------------
FREE_HDR = DIR3_FREE_HDR.size                     # 64: bests start here
_FREE = struct.Struct(">III")
_FIRSTDB = DIR3_FREE_HDR.offset("firstdb")
_NVALID = DIR3_FREE_HDR.offset("nvalid")


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
