"""Encoders for extended attributes (shortform, leaf, node, remote values)
and symlink targets (inline or remote blocks).

Shortform entries keep insertion order, as the kernel appends them.  Leaf
blocks hold hash-sorted entries with names (and local values) packed from
the end of the block downwards; a value whose local entry would take 3/4 of
a block or more is stored remotely in XARM blocks, each with its own
header.  More entries than one leaf holds give a da-btree: the root node at
attr block 0, leaves after it, remote values after the leaves.  Node-form
leaves are filled in hash order rather than split as kernel insertions
would leave them; the format allows both (the last leaf starts early enough
to hold the final run of equal hashes: dablock.pack).
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from ..errors import InvalidArgument, NameTooLongError
from ..format import constants as C
from ..format import parent as P
from ..format import structs as S
from ..fs import attrleaf as L
from .dablock import da_block, da_finisher, pack
from .dabtree import node_levels
from ..io import verify as V
from .forkplan import ForkPlan, PlannedBlock

LEAF_HDR = C.XFS_ATTR3_LEAF_HDR_SIZE            # 80
RMT_HDR = C.XFS_ATTR3_RMT_HDR_SIZE              # 56
NAMESPACES = {"user.": 0, "trusted.": C.XFS_ATTR_ROOT, "security.": C.XFS_ATTR_SECURE}
_RMT = struct.Struct(">IIII16sQQQ")
MAX_VALUE = 65536


def split_name(full) -> tuple[int, bytes]:
    """("user.foo" | b"user.foo") -> (namespace flags, b"foo")."""
    s = full if isinstance(full, str) else full.decode("utf-8", "surrogateescape")
    for prefix, flags in NAMESPACES.items():
        if s.startswith(prefix):
            name = s[len(prefix):].encode("utf-8", "surrogateescape")
            if not name or len(name) > 255:
                raise InvalidArgument(f"xattr {s[:60]!r}: names are 1 to 255 bytes after "
                                      "the namespace")
            return flags, name
    raise InvalidArgument(f"xattr {s[:60]!r}: the name must start with user., trusted. or "
                          "security.")


xattr_sf_size = L.sf_size


def _check(attrs) -> None:
    seen = set()
    for flags, name, value in attrs:
        if not 1 <= len(name) <= 255:
            raise InvalidArgument(f"xattr name of {len(name)} bytes (1 to 255 allowed)")
        if len(value) > MAX_VALUE:
            raise InvalidArgument(f"xattr {name[:40]!r}: value of {len(value)} bytes "
                                  f"(at most {MAX_VALUE})")
        # parent pointers are told apart by name and value (one name from
        # two directories)
        key = (flags, name, value) if P.is_parent(flags) else (flags, name)
        if key in seen:
            raise InvalidArgument(f"xattr {name[:40]!r} given twice")
        seen.add(key)


def _headed_finisher(data: bytes, nblocks: int, blocksize: int, magic: int, ino: int,
                     uuid: bytes, first: int = 0, span: int = 1):
    """A value (or symlink target) over ``nblocks`` contiguous blocks, each
    run of ``span`` blocks headed by an XARM/XSLM header carrying its own
    address (``first``: the offset in the whole value where ``data``
    starts).  Remote xattr values have a header in every block; the kernel
    writes a symlink with one header per mapping, its target running on
    across the blocks."""
    per = span * blocksize - RMT_HDR
    bb = blocksize >> C.BBSHIFT

    def finish(daddr: int) -> bytes:
        out = bytearray(nblocks * blocksize)
        for k, i in enumerate(range(0, nblocks, span)):
            chunk = data[k * per:(k + 1) * per]
            base = i * blocksize
            _RMT.pack_into(out, base, magic, first + k * per, len(chunk), 0, uuid, ino,
                           daddr + i * bb, 0)
            out[base + RMT_HDR:base + RMT_HDR + len(chunk)] = chunk
        return bytes(out)
    return finish


def _local_size(name: bytes, value: bytes) -> int:
    return L.local_size(len(name), len(value))


def _remote_size(name: bytes) -> int:
    return L.remote_size(len(name))


def encode_xattrs(attrs, *, ino: int, uuid: bytes, blocksize: int,
                  inline_space: int) -> ForkPlan:
    """The attr fork for ``attrs`` [(flags, name, value)] in insertion order."""
    _check(attrs)
    if not attrs:
        return ForkPlan(b"", [], 0)
    sf = xattr_sf_size(attrs)
    if sf <= inline_space and all(len(n) < 255 and len(v) < 255 for _f, n, v in attrs):
        return ForkPlan(L.sf_encode(attrs), [], 0)
    items = []          # (hash, seq, flags, name, value, local)
    for seq, (flags, name, value) in enumerate(attrs):
        local = is_local(name, value, blocksize)
        items.append((P.attr_hash(flags, name, value), seq, flags, name, value, local))
    items.sort(key=lambda t: (t[0], -t[1]))
    # pack into leaves
    sizes = [8 + (_local_size(it[3], it[4]) if it[5] else _remote_size(it[3]))
             for it in items]
    leaves = [items[a:b] for a, b in pack([it[0] for it in items], blocksize - LEAF_HDR,
                                          sizes)]
    node = len(leaves) > 1
    first_leaf = 1 if node else 0
    next_blk = first_leaf + len(leaves)
    remote_at = {}
    blocks = []
    for it in items:
        if not it[5]:
            n = remote_blocks(len(it[4]), blocksize)
            remote_at[it[1]] = (next_blk, n)
            # one buffer per block, as readers (and the kernel) address them
            per = blocksize - RMT_HDR
            for i in range(n):
                blocks.append(PlannedBlock(next_blk + i, 1, _headed_finisher(
                    it[4][i * per:(i + 1) * per], 1, blocksize, C.XFS_ATTR3_RMT_MAGIC, ino,
                    uuid, first=i * per), V.ATTR3_RMT))
            next_blk += n
    leaf_blks = list(range(first_leaf, first_leaf + len(leaves)))
    for k, leaf in enumerate(leaves):
        forw = leaf_blks[k + 1] if node and k + 1 < len(leaves) else 0
        back = leaf_blks[k - 1] if node and k else 0
        blocks.append(PlannedBlock(leaf_blks[k], 1, _leaf_finisher(
            leaf, remote_at, blocksize, ino, uuid, forw, back), V.ATTR3_NODE_OR_LEAF))
    if node:
        # the root at block 0; deeper node levels after the remote values
        def take():
            nonlocal next_blk
            next_blk += 1
            return next_blk - 1
        blocks.extend(node_levels([(leaf[-1][0], leaf_blks[k]) for k, leaf in enumerate(leaves)],
                                  root=0, take=take, size=blocksize,
                                  magic=C.XFS_DA3_NODE_MAGIC,
                                  block=lambda lblk, buf: PlannedBlock(
                                      lblk, 1, da_finisher(buf, ino, uuid),
                                      V.ATTR3_NODE_OR_LEAF)))
    return ForkPlan(None, blocks, 0)


def _leaf_finisher(leaf, remote_at, blocksize, ino, uuid, forw, back):
    buf = da_block(blocksize, C.XFS_ATTR3_LEAF_MAGIC, forw=forw, back=back)
    write_leaf(buf, [LeafEnt(h, flags, name, value if local else None,
                             0 if local else remote_at[seq][0], len(value))
                     for h, seq, flags, name, value, local in leaf])
    return da_finisher(buf, ino, uuid)


class LeafEnt(NamedTuple):
    """One entry of an attr leaf block: ``value`` for a local one, None for a
    remote one (its value at attr block ``valueblk``, ``valuelen`` bytes)."""
    hash: int
    flags: int              # namespace bits (XFS_ATTR_LOCAL is derived from value)
    name: bytes
    value: bytes | None
    valueblk: int
    valuelen: int

    @property
    def size(self) -> int:
        """Bytes its name (and local value) take in the block."""
        return _local_size(self.name, self.value) if self.value is not None else \
            _remote_size(self.name)


_ENT = S.ATTR_LEAF_ENTRY
_LOCAL = S.ATTR_LEAF_NAME_LOCAL
_REMOTE = S.ATTR_LEAF_NAME_REMOTE
_LH = S.ATTR3_LEAF_HDR
_LEAF_FIELDS = struct.Struct(">HHHBB6HI")       # count .. pad2 of xfs_attr3_leaf_hdr
_LEAF_AT = _LH.offset("count")
assert _LEAF_FIELDS.size + _LEAF_AT == LEAF_HDR


def leaf_used(ents) -> int:
    """Bytes a leaf block holding ``ents`` fills."""
    return LEAF_HDR + sum(_ENT.size + e.size for e in ents)


def write_leaf(buf, ents) -> None:
    """Lay ``ents`` (in hash order) into attr leaf block ``buf``, compacted:
    the entry array after the header, names (and local values) packed from
    the end of the block down; the block's blkinfo stays as it is."""
    size = len(buf)
    pos = size
    parts = []
    arr = []
    for e in ents:
        rec, eflags = _leaf_record(e)
        pos -= len(rec)
        parts.append(rec)
        arr += (e.hash, pos, eflags, 0)
    base = LEAF_HDR + _ENT.size * len(ents)
    # count, usedbytes, firstused, holes, pad, freemap[3], pad2
    _set_leaf_header(buf, len(ents), size - pos, pos)
    if ents:
        struct.pack_into(">" + "IHBB" * len(ents), buf, LEAF_HDR, *arr)
    buf[base:pos] = bytes(pos - base)
    parts.reverse()
    buf[pos:] = b"".join(parts)


def _leaf_record(e) -> tuple[bytes, int]:
    """(name part of ``e`` padded to its size, entry flags)."""
    if e.value is not None:
        rec = _LOCAL.struct.pack(len(e.value), len(e.name)) + e.name + e.value
        flags = e.flags | C.XFS_ATTR_LOCAL
    else:
        rec = _REMOTE.struct.pack(e.valueblk, e.valuelen, len(e.name)) + e.name
        flags = e.flags
    return rec + bytes(e.size - len(rec)), flags


def leaf_fill(buf) -> int:
    """Bytes attr leaf block ``buf`` fills: header, entries and names."""
    count, used = struct.unpack_from(">HH", buf, _LEAF_AT)
    return LEAF_HDR + _ENT.size * count + used


def _compact(buf) -> tuple[int, int, int]:
    """(count, usedbytes, firstused) of a leaf whose names fill the block's
    end without holes, compacting it first when they do not."""
    count, used, first, holes = struct.unpack_from(">HHHB", buf, _LEAF_AT)
    if holes or used != len(buf) - first:
        write_leaf(buf, read_leaf(buf))
        count, used, first = struct.unpack_from(">HHH", buf, _LEAF_AT)
    return count, used, first


def _set_leaf_header(buf, count: int, used: int, first: int) -> None:
    base = LEAF_HDR + _ENT.size * count
    _LEAF_FIELDS.pack_into(buf, _LEAF_AT, count, used, first, 0, 0, base, first - base,
                           0, 0, 0, 0, 0)


def leaf_insert(buf, i: int, e) -> bool:
    """Put entry ``e`` at index ``i`` of attr leaf block ``buf`` in place
    (its name below the others, the entry array shifted); False, the block
    unchanged but perhaps compacted, when it has no room."""
    count, used, first = _compact(buf)
    n = e.size
    pos = first - n
    if pos < LEAF_HDR + _ENT.size * (count + 1):
        return False
    rec, flags = _leaf_record(e)
    buf[pos:first] = rec
    a, end = LEAF_HDR + _ENT.size * i, LEAF_HDR + _ENT.size * count
    buf[a + _ENT.size:end + _ENT.size] = buf[a:end]
    _ENT.struct.pack_into(buf, a, e.hash, pos, flags, 0)
    _set_leaf_header(buf, count + 1, used + n, pos)
    return True


def leaf_remove(buf, i: int) -> LeafEnt:
    """Take entry ``i`` out of attr leaf block ``buf`` in place (the names
    below it move up over its own); returns it."""
    count, used, first = _compact(buf)
    e = leaf_entry(buf, i)
    idx = _ENT.struct.unpack_from(buf, LEAF_HDR + _ENT.size * i)[1]
    n = e.size
    buf[first + n:idx + n] = buf[first:idx]
    buf[first:first + n] = bytes(n)
    arr = list(struct.unpack_from(">" + "IHBB" * count, buf, LEAF_HDR))
    del arr[4 * i:4 * i + 4]
    for k in range(1, len(arr), 4):
        if arr[k] < idx:
            arr[k] += n
    if arr:
        struct.pack_into(">" + "IHBB" * (count - 1), buf, LEAF_HDR, *arr)
    end = LEAF_HDR + _ENT.size * (count - 1)
    buf[end:end + _ENT.size] = bytes(_ENT.size)
    _set_leaf_header(buf, count - 1, used - n, first + n)
    return e


def leaf_entry(buf, i: int) -> LeafEnt:
    """Entry ``i`` of attr leaf block ``buf``."""
    h, idx, flags, _pad = _ENT.struct.unpack_from(buf, LEAF_HDR + _ENT.size * i)
    if flags & C.XFS_ATTR_LOCAL:
        vlen, nlen = _LOCAL.struct.unpack_from(buf, idx)
        at = idx + _LOCAL.size
        return LeafEnt(h, flags & ~C.XFS_ATTR_LOCAL, bytes(buf[at:at + nlen]),
                       bytes(buf[at + nlen:at + nlen + vlen]), 0, vlen)
    vblk, vlen, nlen = _REMOTE.struct.unpack_from(buf, idx)
    at = idx + _REMOTE.size
    return LeafEnt(h, flags, bytes(buf[at:at + nlen]), None, vblk, vlen)


def read_leaf(buf) -> list:
    """The entries of attr leaf block ``buf`` in their order, as
    :class:`LeafEnt` (incomplete ones too: their flag kept in ``flags``)."""
    return [leaf_entry(buf, k) for k in range(struct.unpack_from(">H", buf, _LEAF_AT)[0])]


def is_local(name: bytes, value: bytes, blocksize: int) -> bool:
    """Whether a value stays in its leaf entry (xfs_attr_leaf_newentsize):
    an entry under 3/4 of a block does."""
    return _local_size(name, value) < (blocksize >> 1) + (blocksize >> 2)


def remote_blocks(valuelen: int, blocksize: int) -> int:
    """Blocks a remote value of ``valuelen`` bytes takes (a header in each)."""
    return max(1, -(-valuelen // (blocksize - RMT_HDR)))


def remote_block(value: bytes, k: int, blocksize: int, ino: int, uuid: bytes, daddr: int) -> bytes:
    """Block ``k`` of a remote value, at ``daddr``, with its XARM header."""
    per = blocksize - RMT_HDR
    return _headed_finisher(value[k * per:(k + 1) * per], 1, blocksize, C.XFS_ATTR3_RMT_MAGIC,
                            ino, uuid, first=k * per)(daddr)


# the longest symlink target XFS holds (the kernel's symlink(2) refuses
# XFS_SYMLINK_MAXLEN bytes and more with ENAMETOOLONG)
SYMLINK_MAX = C.XFS_SYMLINK_MAXLEN - 1


def check_symlink_target(target: bytes, what: str = "") -> bytes:
    """``target`` when XFS can hold it as a symlink's target: 1 to
    SYMLINK_MAX bytes without NUL.  A longer one raises NameTooLongError
    (ENAMETOOLONG, as symlink(2) does), an empty one or one with a NUL
    InvalidArgument."""
    if target and len(target) <= SYMLINK_MAX and b"\0" not in target:
        return target
    msg = (f"{what}: " if what else "") + (f"symlink target of {len(target)} bytes: XFS "
                                           f"holds 1 to {SYMLINK_MAX} bytes without NUL")
    raise (NameTooLongError if len(target) > SYMLINK_MAX else InvalidArgument)(msg)


def encode_symlink(target: bytes, *, ino: int, uuid: bytes, blocksize: int,
                   inline_space: int) -> ForkPlan:
    check_symlink_target(target)
    if len(target) <= inline_space:
        return ForkPlan(bytes(target), [], len(target))
    n = remote_blocks(len(target), blocksize)
    return ForkPlan(None, [PlannedBlock(0, n, _headed_finisher(
        target, n, blocksize, C.XFS_SYMLINK_MAGIC, ino, uuid, span=n), V.SYMLINK)],
        len(target))
