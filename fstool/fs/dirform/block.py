"""Single-block directories (XDB3): data entries, then the hash-ordered
leaf entries, then a tail (count, stale) at the end of the block.
"""
from __future__ import annotations

from ...errors import CorruptionError
from ...format.structs import DIR2_BLOCK_TAIL, DIR2_LEAF_ENTRY, DIR3_DATA_HDR

_TAIL = DIR2_BLOCK_TAIL.struct
LEAF_ENT = DIR2_LEAF_ENTRY.size                   # 8: (hashval, address)
BLOCK_TAIL = DIR2_BLOCK_TAIL.size                 # 8: count, stale
_HDR = DIR3_DATA_HDR.size                         # entries start here


def block_tail(buf) -> tuple[int, int]:
    """(count, stale) of a single-block directory's leaf entries."""
    return _TAIL.unpack_from(buf, len(buf) - _TAIL.size)


def put_block_tail(buf, count: int, stale: int) -> None:
    _TAIL.pack_into(buf, len(buf) - _TAIL.size, count, stale)


def block_leaf_start(buf, count: int) -> int:
    """Where a single-block directory's ``count`` leaf entries start."""
    return len(buf) - _TAIL.size - LEAF_ENT * count


def leaf_bounds(buf, ino: int, block=None) -> tuple[int, int, int]:
    """(start of the leaf array, count, stale) of a single-block directory,
    verified: a CorruptionError when the tail's count overruns the block
    (``block``: the file offset the error names)."""
    end = len(buf) - _TAIL.size
    count, stale = _TAIL.unpack_from(buf, end)
    start = end - LEAF_ENT * count          # block_leaf_start
    if start < _HDR:
        raise CorruptionError("directory block", f"tail count {count} overruns the block",
                              ino=ino, block=block, field="count")
    return start, count, stale
