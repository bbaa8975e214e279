"""Directory leaf blocks: the leaf1 block of a leaf-form directory (its
hash-ordered entries, then the bests of the data blocks and a tail with
their count) and a node-form directory's leafn blocks (entries only).  A
single-block directory's leaf array is read by the same entry accessors
and looked up by the same scan.
"""
from __future__ import annotations

import struct

from ..._backend import parsers
from ...errors import CorruptionError, FsToolError
from ...format import constants as C
from ...format import problem_codes as K
from ...format.structs import DA3_NODE_HDR, DIR2_LEAF_ENTRY, DIR2_LEAF_TAIL, DIR3_LEAF_HDR
from ...io import verify as V
from .. import dabtree
from . import data

LEAF_HDR = DIR3_LEAF_HDR.size                     # 64: leaf entries start here
LEAF_ENT = DIR2_LEAF_ENTRY.size                   # 8: (hashval, address)
_BESTCOUNT = DIR2_LEAF_TAIL.struct
LEAF_TAIL = DIR2_LEAF_TAIL.size                   # 4: bestcount
_LEAF_ENT = DIR2_LEAF_ENTRY.struct
_U16 = struct.Struct(">H")
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


def put_leaf_words(buf, start: int, words) -> None:
    """Leaf entries at ``start`` from ``words`` flat: hash, address, hash, ..."""
    if words:
        struct.pack_into(f">{len(words)}I", buf, start, *words)


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


def leaf_fsb(blocklog: int) -> int:
    """File offset (fs blocks) of the leaf space's first block: a
    leaf-form directory's leaf1 block, a node-form one's da-btree root."""
    return C.XFS_DIR2_LEAF_OFFSET >> blocklog


# -- decode, verify ---------------------------------------------------------------------
def leaf1_count(buf, ino: int) -> int:
    """The entry count of a leaf1 block, verified: a CorruptionError when
    its entries overrun the block."""
    count = leaf_count(buf)
    if LEAF_HDR + LEAF_ENT * count > len(buf):
        raise CorruptionError("directory leaf block", f"count {count} overruns the block",
                              ino=ino, field="count")
    return count


def entry_at(node, addr: int, block_form: bool, blockbuf=None):
    """(ino, name) of the data entry a leaf address (8-byte units) points
    to: in ``blockbuf`` for a single-block directory, else in the data
    block it names (read and verified)."""
    sb = node.fs.sb
    byte = addr << C.XFS_DIR2_DATA_ALIGN_LOG
    db, off = divmod(byte, sb.dirblksize)
    if block_form:
        if db:
            raise CorruptionError("directory block", f"leaf address {addr} beyond the block",
                                  ino=node.ino, field="address")
        buf = blockbuf
    else:
        buf = data.read_block(node, db * sb.dirblkfsbs, V.DIR3_DATA)
    if off < data.HDR or off + data.ENTRY + data.TAG > len(buf):
        raise CorruptionError("directory leaf", f"address {addr} points outside a data block",
                              ino=node.ino, field="address")
    ino, namelen = data.entry_head(buf, off)
    if off + data.ENTRY + namelen > len(buf):
        raise CorruptionError("directory data block", f"entry at {off} overruns the block",
                              ino=node.ino, field="namelen")
    return ino, data.entry_name(buf, off, namelen)


def scan(node, buf, start, count, hashval, name, block_form, blockbuf=None):
    """Look for ``name`` among the leaf entries with ``hashval``; (ino or
    None, ran_off_end), ran_off_end when equal hashes may go on in the
    next leaf block."""
    i = dabtree.lower_bound(buf, count, hashval, start, what="directory leaf")
    while i < count:
        h, addr = leaf_entry(buf, start, i)
        if h != hashval:
            return None, False
        if addr != C.XFS_DIR2_NULL_DATAPTR:
            ino, ename = entry_at(node, addr, block_form, blockbuf)
            if ename == name:
                return ino, False
        i += 1
    return None, True


def tally(buf, start: int, count: int, stale: int, ino: int, fsb: int):
    """(sum over the entries, faults) of one leaf array: its hashes in
    order, its stale count right ([(code, detail, field, more)]); a
    CorruptionError when the array overruns the block."""
    try:
        ordered, nstale, lsum = parsers.leaf_tally(buf, start, count)
    except ValueError as e:
        raise CorruptionError("directory leaf block", str(e), ino=ino,
                              block=fsb, field="count") from None
    faults = []
    if not ordered:
        faults.append((K.DIR_LEAF, "leaf hashes out of order", "hashval", {}))
    if nstale != stale:
        faults.append((K.DIR_LEAF, f"{nstale} stale leaf entries, the header says {stale}",
                       "stale", dict(expected=nstale, found=stale)))
    return lsum, faults


def hash_faults(node, buf, start: int, count: int, block_form: bool, blockbuf=None,
                quote=repr):
    """Each live leaf entry's hash against the name it points to: yields
    (index, fault) with fault (code, detail, field, more), or (index,
    error) when the entry cannot be read (a FsToolError)."""
    for i in range(count):
        h, addr = leaf_entry(buf, start, i)
        if addr == C.XFS_DIR2_NULL_DATAPTR:
            continue
        try:
            _child, name = entry_at(node, addr, block_form, blockbuf)
        except FsToolError as e:
            yield i, e
            continue
        right = parsers.da_hashname(name)
        if right != h:
            yield i, (K.DIR_LEAF, f"leaf hash 0x{h:08x} for {quote(name)}, which hashes "
                      f"to 0x{right:08x}", "hashval", {})
