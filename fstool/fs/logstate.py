"""Whether the internal log is clean: its newest record is an unmount record
and the tail has caught up with it."""
from __future__ import annotations

import struct

from ..format import constants as C

XLOG_HEADER_MAGIC = 0xFEEDBABE
XLOG_UNMOUNT_TRANS = 0x20
OP_HEADER = struct.Struct(">IIBBH")


def _cycle(fs, base: int, blk: int) -> int:
    """The cycle number of a log block: the first word of a data block, the
    second of a record header (whose first word is the magic)."""
    word, nxt = struct.unpack(">II", fs.dev.pread((base + blk) << C.BBSHIFT, 8))
    return nxt if word == XLOG_HEADER_MAGIC else word


def find_head(fs) -> tuple[int, int]:
    """(head block, cycle) in 512-byte log blocks: the first block whose cycle
    is lower than the first block's (binary search, as the kernel does when
    the log was written in one sweep per cycle)."""
    sb = fs.sb
    base = fs.fsb_to_daddr(sb.logstart)
    nblocks = sb.logblocks << (sb.blocklog - C.BBSHIFT)
    first = _cycle(fs, base, 0)
    last = _cycle(fs, base, nblocks - 1)
    if first == last:
        return 0 if first == 0 else nblocks, first    # never written, or exactly full
    lo, hi = 0, nblocks - 1             # cycle(lo) == first, cycle(hi) != first
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _cycle(fs, base, mid) == first:
            lo = mid
        else:
            hi = mid
    return hi, first


def log_is_clean(fs) -> tuple[bool, str]:
    sb = fs.sb
    base = fs.fsb_to_daddr(sb.logstart)
    nblocks = sb.logblocks << (sb.blocklog - C.BBSHIFT)
    head, cycle = find_head(fs)
    if cycle == 0:
        return True, "never written"
    # the newest record header lies within 256 KiB (the largest record) before the head
    blk = (head - 1) % nblocks
    for _ in range(min(nblocks, 520)):
        raw = fs.dev.pread((base + blk) << C.BBSHIFT, C.BBSIZE)
        magic, rcycle, _ver, length = struct.unpack_from(">IIII", raw, 0)
        if magic == XLOG_HEADER_MAGIC:
            nops = struct.unpack_from(">I", raw, 40)[0]
            data = fs.dev.pread(((base + (blk + 1) % nblocks) << C.BBSHIFT),
                                min(length, C.BBSIZE))
            # as the kernel decides: the log is clean when its newest record
            # is an unmount record (the tail then moves to the head)
            if nops and len(data) >= OP_HEADER.size:
                _tid, _oplen, _client, flags, _r = OP_HEADER.unpack_from(data, 0)
                if flags & XLOG_UNMOUNT_TRANS:
                    return True, "unmounted"
            return False, "its newest record is not an unmount record"
        blk = (blk - 1) % nblocks
    return False, "no record header found before the head"
