"""Directory data blocks (XDD3, and a single-block directory's XDB3 up to
its leaf entries): the header with its bestfree table, then entries and
unused regions, each ending in a tag (its own offset).
"""
from __future__ import annotations

import struct

from ..._backend import checks, parsers
from ...errors import CorruptionError
from ...format import constants as C
from ...format.structs import (DIR3_BLK_HDR, DIR2_DATA_ENTRY, DIR2_DATA_FREE, DIR2_DATA_UNUSED,
                               DIR3_DATA_HDR)
from . import block

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
    1, or True, on ftype filesystems), tag, rounded up to 8."""
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
        return block.block_leaf_start(buf, block.block_tail(buf)[0])
    return len(buf)


# -- where the data blocks are ------------------------------------------------------------
def read_block(node, fsb: int, bt, keep: bool = True) -> bytes:
    """Directory block ``fsb`` (file offset, fs blocks) of ``node``, read
    and verified as buffer type ``bt`` (``keep`` False: not kept in the
    buffer cache)."""
    fs = node.fs
    sb = fs.sb
    ino = node.ino
    daddr, pieces = node.read_fork_blocks(fsb, sb.dirblkfsbs)
    return fs.read_meta(daddr, sb.dirblksize, bt, owner=ino, ino=ino, block=fsb,
                        pieces=pieces, keep=keep)


def block_fsbs(node):
    """File offsets (fs blocks) of every directory data block, in order."""
    sb = node.fs.sb
    leaf_fsb = C.XFS_DIR2_LEAF_OFFSET >> sb.blocklog
    step = sb.dirblkfsbs
    for startoff, _sb, count, _u in node.extents():
        if startoff >= leaf_fsb:
            break
        first = -(-startoff // step) * step
        for fsb in range(first, min(startoff + count, leaf_fsb), step):
            yield fsb


# -- decode, verify, salvage --------------------------------------------------------------
def decode(node, buf, end: int, listing: bool = False):
    """The entries of a data block up to ``end``, verified as the read path
    verifies them (the first fault raised), as parsers.dir2_data_entries
    gives them."""
    try:
        return parsers.dir2_data_entries(buf, HDR, end, node.fs.sb.has_ftype, listing)
    except ValueError as e:
        raise CorruptionError("directory data block", str(e), ino=node.ino) from None


def bestfree_verify(buf, frees) -> tuple[int, bool]:
    """xfs_repair's process_dir2_data bestfree rules over a block whose
    unused regions are ``frees`` [(length, offset)]: the three slots list
    regions (by offset) at most once each, longest first, unused slots
    zero; no two free regions in a row; a region left out of the table is
    no longer than the shortest listed.  (longest free run, sound)."""
    longest = checks.bestfree_ok(buf, frees)
    if longest >= 0:
        return longest, True          # the table is right
    slots = [tuple(s) for s in get_bf(buf)]         # (offset, length)
    bad = False
    seen = 0
    for i, (off, ln) in enumerate(slots):
        if ln == 0:
            bad |= off != 0
            seen |= 1 << i
    bad |= slots[0][1] < slots[1][1] or slots[1][1] < slots[2][1]
    prev_end = None
    for length, off in sorted(frees, key=lambda f: f[1]):
        if prev_end == off:
            bad = True
        prev_end = off + length
        bad |= checks.bestfree_region_bad(slots[0][0], slots[0][1], slots[1][0],
                                          slots[1][1], slots[2][0], slots[2][1],
                                          off, length)
        match = [i for i, s in enumerate(slots) if s[0] == off and s[1]]
        if match:
            i = match[0]
            bad |= bool(seen & (1 << i))
            seen |= 1 << i
        else:
            bad |= length > slots[2][1]
    return max((f[0] for f in frees), default=0), seen == 7 and not bad


def salvage(buf, block_form: bool, has_ftype: bool) -> list:
    """[(name, ino, ftype)] of one directory data block (with '.' and
    '..'), as far as its entries and unused regions parse (repair's
    lenient read).  A wrong magic is no reason to give the block up:
    xfs_repair sets the magic right and keeps the entries (each is judged
    on its own afterwards)."""
    if len(buf) < HDR:
        return []
    ft = 1 if has_ftype else 0
    end = len(buf)
    if block_form:
        end = block.block_leaf_start(buf, block.block_tail(buf)[0])
        if end < HDR:
            end = block.block_leaf_start(buf, 0)
    pos = HDR
    out = []
    while pos + 8 <= end:
        length = free_len(buf, pos)
        if length is not None:
            if length == 0 or length & 7 or pos + length > end:
                break
            pos += length
            continue
        ino, namelen = entry_head(buf, pos)
        esize = entsize(namelen, ft)
        if pos + esize > end or tag_at(buf, pos + esize) != pos:
            break
        if namelen == 0:
            # an entry with no name whose tag still fits: xfs_repair clears
            # it and reads on, since the entries after it are where their
            # own tags say
            pos += esize
            continue
        out.append((entry_name(buf, pos, namelen), ino,
                    entry_ftype(buf, pos, namelen) if ft else 0))
        pos += esize
    return out
