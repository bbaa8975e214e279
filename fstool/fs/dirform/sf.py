"""Shortform directories: the entries in the inode's data fork.

The fork is a header (count, i8count), the parent's inode number (4 bytes,
8 when any number needs them) and the entries, each its name length, its
offset (where it would sit in a data block), the name, the file type
(ftype filesystems) and the inode number.
"""
from __future__ import annotations

from ..._backend import parsers
from ...errors import CorruptionError
from ...format import problem_codes as K
from ...format.structs import DIR2_SF_ENTRY, DIR2_SF_HDR
from . import block, data, leaf, name_ok

SF_HDR = DIR2_SF_HDR.size                         # 2: count, i8count; the parent follows
SF_ENTRY = DIR2_SF_ENTRY.size                     # 3: namelen, offset; the name follows
SF_MIN = SF_HDR + 4                               # the smallest fork: a 4-byte parent
MAX_SHORT_INUM = 0xFFFFFFFF                       # the largest 4-byte inode number


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
    big = parent > MAX_SHORT_INUM or any(e[3] > MAX_SHORT_INUM for e in ents)
    width = 8 if big else 4
    return SF_HDR + width + sum(sf_entsize(len(e[1]), 1, width) for e in ents)


def sf_encode(parent: int, ents) -> bytes:
    """A shortform directory (ftype) of ``parent`` and ``ents`` [(offset,
    name, ftype, ino)], in order."""
    i8 = sum(1 for e in ents if e[3] > MAX_SHORT_INUM) + (parent > MAX_SHORT_INUM)
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


# -- decode, verify, salvage --------------------------------------------------------------
def decode(node, listing: bool = False):
    """(parent, entries) of directory inode ``node``'s fork, verified as the
    read path verifies it (the first fault raised): entries as
    parsers.dir2_sf_entries gives them ((name, ino, ftype) with
    ``listing``, else (offset, ino, name, ftype))."""
    fork = node.fork_bytes()
    if node.size > len(fork) or node.size < SF_MIN:
        raise CorruptionError("shortform directory", f"size {node.size} does not fit the "
                              f"inode fork ({len(fork)} bytes)", ino=node.ino, field="di_size")
    try:
        return parsers.dir2_sf_entries(fork, 0, node.size, node.fs.sb.has_ftype, listing)
    except ValueError as e:
        raise CorruptionError("shortform directory", str(e), ino=node.ino) from None


def verify(fork, size: int, has_ftype: bool, data_first: int, dirblksize: int,
           quote=repr):
    """xfs_repair's process_sf_dir2 over a shortform fork: (parent or None,
    [(name, ino, ftype, index)], faults), the faults [(code, detail, field,
    more)] in the order found.  The entries' names are judged (legal, not
    repeated) but not their targets, nor the parent: those need the
    filesystem (fstool.ops.check.dirs).  ``quote(name)``: a name as the
    details show it."""
    faults = []

    def bad(code, detail, field, **more):
        faults.append((code, detail, field, more))
    if size > len(fork) or size < SF_MIN:
        bad(K.DIR_CORRUPT, f"shortform size {size} does not fit the fork "
            f"({len(fork)} bytes)", "di_size")
        return None, [], faults
    count, i8count, width = sf_header(fork)
    if SF_HDR + width > size:
        bad(K.DIR_CORRUPT, "shortform header runs past its size", "di_size")
        return None, [], faults
    parent = sf_parent(fork, width)
    ft = 1 if has_ftype else 0
    n = count
    if count * sf_entsize(1, ft, width) + SF_HDR + width > len(fork) or count == 0:
        n = 0xFF
    pos = SF_HDR + width
    offset = data_first
    bad_offset = False
    names = set()
    i8 = 1 if parent > MAX_SHORT_INUM else 0
    found = 0
    entries = []
    while found < n and size > pos:
        if pos + SF_ENTRY > len(fork):
            break
        namelen = fork[pos]
        esize = sf_entsize(namelen, ft, width)
        if namelen == 0:
            bad(K.DIR_CORRUPT, f"shortform entry {found} has a zero-length name",
                "namelen", index=found)
            break
        if pos + esize > size:
            bad(K.DIR_CORRUPT, f"shortform entry {found} runs past the directory size",
                "namelen", index=found)
            break
        eoff, name, ftype, child, _size = sf_entry(fork, pos, ft, width)
        if not name_ok(name):
            bad(K.DIR_NAME, f"shortform entry {quote(name)} has an illegal name",
                "name", index=found)
        elif name in names:
            bad(K.DIR_NAME, f"shortform entry {quote(name)} is a duplicate name",
                "name", index=found)
        names.add(name)
        if eoff < offset:
            bad_offset = True
        offset = eoff + data.entsize(namelen, ft)
        if child > MAX_SHORT_INUM:
            i8 += 1
        entries.append((name, child, ftype, found))
        pos += esize
        found += 1
    if count != found:
        bad(K.DIR_CORRUPT, f"shortform count {count}, {found} entries", "count",
            expected=found, found=count)
    if i8count != i8:
        bad(K.DIR_CORRUPT, f"shortform i8count {i8count}, {i8} inode numbers need "
            "8 bytes", "i8count", expected=i8, found=i8count)
    if pos != size:
        bad(K.DIR_CORRUPT, f"shortform size {size}, its entries end at {pos}",
            "di_size", expected=pos, found=size)
    if offset + (count + 2) * leaf.LEAF_ENT + block.BLOCK_TAIL > dirblksize:
        bad_offset = True
    if bad_offset:
        bad(K.DIR_CORRUPT, "shortform entry offsets are out of order or too high",
            "offset")
    return parent, entries, faults


def salvage(fork: bytes, size: int, has_ftype: bool):
    """('..', [(name, ino, ftype)]) of a shortform fork, as far as its
    entries parse (repair's lenient read)."""
    ft = 1 if has_ftype else 0
    if size < SF_MIN or size > len(fork):
        size = len(fork)
    _count, _i8count, width = sf_header(fork)
    parent = sf_parent(fork, width)
    pos = SF_HDR + width
    out = []
    while pos + SF_ENTRY <= size:
        namelen = fork[pos]
        esize = sf_entsize(namelen, ft, width)
        if namelen == 0 or pos + esize > size:
            break
        _offset, name, ftype, ino, _size = sf_entry(fork, pos, ft, width)
        out.append((name, ino, ftype))
        pos += esize
    return parent, out
