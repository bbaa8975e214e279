"""The pieces of an attr fork, over the layouts of fstool.format.structs:
the shortform header and entries, an attr leaf block's header, entry
table, local and remote names and free map, a remote value block's
header; and the leaf block's structure verifier (the kernel's
xfs_attr3_leaf_verify past the block header), one list of every fault it
finds.  The reader (fstool.fs.attr) and check (fstool.ops.check.xattrs)
go through them; the walk of a node-form fork is fstool.fs.dabtree's.
"""
from __future__ import annotations

import struct

from ..format import constants as C
from ..format.structs import (ATTR3_LEAF_HDR, ATTR3_RMT_HDR, ATTR_LEAF_ENTRY,
                              ATTR_LEAF_MAP, ATTR_LEAF_NAME_LOCAL, ATTR_LEAF_NAME_REMOTE,
                              ATTR_SF_ENTRY, ATTR_SF_HDR, DSYMLINK_HDR)

# -- shortform ----------------------------------------------------------------------------
SF_HDR = ATTR_SF_HDR.size                         # 4: totsize, count, padding
SF_ENTRY = ATTR_SF_ENTRY.size                     # 3: namelen, valuelen, flags
_SF_HDR = struct.Struct(">HB")                    # totsize, count (the padding left out)
_SF_ONE = struct.Struct(">HBBBBB")                # the header and one entry's (sf_encode)


def sf_header(fork) -> tuple[int, int]:
    """(totsize, count) of a shortform attr fork."""
    return _SF_HDR.unpack_from(fork, 0)


def sf_count(fork) -> int:
    return fork[ATTR_SF_HDR.offset("count")]


def sf_entry(fork, pos: int) -> tuple[int, int, int]:
    """(namelen, valuelen, flags) of the shortform entry at ``pos``; its
    name and value follow at ``pos + SF_ENTRY``."""
    return ATTR_SF_ENTRY.struct.unpack_from(fork, pos)


def sf_size(attrs) -> int:
    """Bytes of a shortform attr fork holding ``attrs`` [(flags, name, value)]."""
    return SF_HDR + sum(SF_ENTRY + len(n) + len(v) for _f, n, v in attrs)


def sf_encode(attrs) -> bytes:
    """The shortform attr fork of ``attrs`` [(flags, name, value)], in order."""
    if len(attrs) == 1:
        # the common one: a new file's parent pointer alone
        flags, name, value = attrs[0]
        return _SF_ONE.pack(SF_HDR + SF_ENTRY + len(name) + len(value), 1, 0, len(name),
                            len(value), flags) + name + value
    out = bytearray(ATTR_SF_HDR.struct.pack(sf_size(attrs), len(attrs), 0))
    for flags, name, value in attrs:
        out += ATTR_SF_ENTRY.struct.pack(len(name), len(value), flags) + name + value
    return bytes(out)


# -- leaf blocks ----------------------------------------------------------------------------
HDR = ATTR3_LEAF_HDR.size                         # 80: the entry table starts here
ENTRY = ATTR_LEAF_ENTRY.size                      # 8: hashval, nameidx, flags, pad
LOCAL = ATTR_LEAF_NAME_LOCAL.size                 # 3: valuelen, namelen; name, value follow
REMOTE = ATTR_LEAF_NAME_REMOTE.size               # 9: valueblk, valuelen, namelen; name
_COUNT = ATTR3_LEAF_HDR.offset("count")
_FREEMAP = ATTR3_LEAF_HDR.offset("freemap")
_FLAGS = ATTR_LEAF_ENTRY.offset("flags")
_TOTALS = struct.Struct(">HHHB")                  # count, usedbytes, firstused, holes
_ENT = struct.Struct(">IHB")                      # hashval, nameidx, flags (the pad left out)
_LOCAL = ATTR_LEAF_NAME_LOCAL.struct
_REMOTE = ATTR_LEAF_NAME_REMOTE.struct
_MAP = ATTR_LEAF_MAP.struct


def totals(buf) -> tuple[int, int, int, int]:
    """(count, usedbytes, firstused, holes) of a leaf block's header."""
    return _TOTALS.unpack_from(buf, _COUNT)


def entry(buf, i: int) -> tuple[int, int, int]:
    """(hashval, nameidx, flags) of entry ``i``."""
    return _ENT.unpack_from(buf, HDR + ENTRY * i)


def entry_flags(buf, i: int) -> int:
    return buf[HDR + ENTRY * i + _FLAGS]


def freemap(buf, i: int) -> tuple[int, int]:
    """(base, size) of free map slot ``i`` (of three)."""
    return _MAP.unpack_from(buf, _FREEMAP + _MAP.size * i)


def local_name(buf, nameidx: int) -> tuple[int, int]:
    """(valuelen, namelen) of a local entry's name part at ``nameidx``."""
    return _LOCAL.unpack_from(buf, nameidx)


def remote_name(buf, nameidx: int) -> tuple[int, int, int]:
    """(valueblk, valuelen, namelen) of a remote entry's name part."""
    return _REMOTE.unpack_from(buf, nameidx)


def local_size(namelen: int, valuelen: int) -> int:
    """Bytes of a local entry's name part, rounded up to 4."""
    return (LOCAL + namelen + valuelen + 3) & ~3


def remote_size(namelen: int) -> int:
    """Bytes of a remote entry's name part (its C struct is 12 bytes with
    one byte of name), rounded up to 4."""
    return (REMOTE + 2 + namelen + 3) & ~3


def leaf_faults(buf, bs: int) -> list:
    """The kernel's xfs_attr3_leaf_verify past the block header: [(field,
    why)] of a leaf block of ``bs`` bytes, empty when it is sound.  Like the
    kernel's, the entry table is judged up to its first bad entry (what
    follows a bad entry is not read), and not at all when the header's
    count or firstused is bad; the free map is judged either way.  The
    read path takes the first fault, as the kernel does."""
    out = []
    count, _used, firstused, _holes = totals(buf)
    firstused = firstused or bs
    if firstused > bs or firstused < HDR:
        out.append(("firstused", f"first name at {firstused} is outside the name area"))
        count = 0
    elif HDR + ENTRY * count > firstused:
        out.append(("count", f"{count} entries run into the names at {firstused}"))
        count = 0
    last = 0
    for i in range(count):
        h, nameidx, flags = entry(buf, i)
        why = None
        if h < last:
            why = "hashval", f"entry {i} is out of hash order"
        last = h
        if why is None and (nameidx < firstused or nameidx >= bs):
            why = "nameidx", f"entry {i} name index {nameidx} is outside the names"
        if why is None and flags & C.XFS_ATTR_LOCAL:
            if nameidx + LOCAL > bs:
                why = "nameidx", f"entry {i} overruns the block"
            else:
                valuelen, namelen = local_name(buf, nameidx)
                size = local_size(namelen, valuelen)
        elif why is None:
            if nameidx + REMOTE > bs:
                why = "nameidx", f"entry {i} overruns the block"
            else:
                valueblk, _vl, namelen = remote_name(buf, nameidx)
                size = remote_size(namelen)
                if not flags & C.XFS_ATTR_INCOMPLETE and valueblk == 0:
                    why = "valueblk", f"remote entry {i} has no value block"
        if why is None and namelen == 0:
            why = "namelen", f"entry {i} has a zero-length name"
        if why is None and nameidx + size > bs:
            why = "nameidx", f"entry {i} overruns the block"
        if why is not None:
            out.append(why)
            break
    for i in range(3):
        base, size = freemap(buf, i)
        if base > bs or base & 3 or size > bs or size & 3 or base + size > bs:
            out.append(("freemap", f"free map {i} ({base}, {size}) is invalid"))
    return out


# -- remote value blocks ----------------------------------------------------------------------
RMT_HDR = ATTR3_RMT_HDR.size                      # 56: the value's bytes follow
_RMT = struct.Struct(">III")                      # rm_magic, rm_offset, rm_bytes
_RMT_PART = struct.Struct(">II")                  # rm_offset, rm_bytes
_RMT_OFFSET = ATTR3_RMT_HDR.offset("rm_offset")
assert (DSYMLINK_HDR.offset("sl_offset"), DSYMLINK_HDR.offset("sl_bytes")) == \
    (_RMT_OFFSET, ATTR3_RMT_HDR.offset("rm_bytes"))
_RMT_UUID = ATTR3_RMT_HDR.offset("rm_uuid")
_RMT_OWNER = ATTR3_RMT_HDR.offset("rm_owner")
_RMT_BLKNO = ATTR3_RMT_HDR.offset("rm_blkno")
_U64 = struct.Struct(">Q")


def rmt_head(buf) -> tuple[int, int, int]:
    """(magic, offset, bytes) of a remote value block."""
    return _RMT.unpack_from(buf, 0)


def rmt_part(buf) -> tuple[int, int]:
    """(offset, bytes) of a remote value block's (or a remote symlink
    block's: the same places) part of the value."""
    return _RMT_PART.unpack_from(buf, _RMT_OFFSET)


def rmt_uuid(buf) -> bytes:
    return bytes(buf[_RMT_UUID:_RMT_UUID + 16])


def rmt_owner(buf) -> int:
    return _U64.unpack_from(buf, _RMT_OWNER)[0]


def rmt_blkno(buf) -> int:
    return _U64.unpack_from(buf, _RMT_BLKNO)[0]
