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

from ..errors import InvalidArgument, NameTooLongError
from ..format import constants as C
from ..format import parent as P
from .dablock import da_block, da_finisher, node_levels, pack
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


def xattr_sf_size(attrs) -> int:
    return 4 + sum(3 + len(n) + len(v) for _f, n, v in attrs)


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


def _remote_blocks(data: bytes, blocksize: int) -> int:
    per = blocksize - RMT_HDR
    return max(1, -(-len(data) // per))


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
    return (2 + 1 + len(name) + len(value) + 3) & ~3


def _remote_size(name: bytes) -> int:
    # the kernel sizes it from the padded 12-byte struct, minus its name[1]
    return (11 + len(name) + 3) & ~3


def encode_xattrs(attrs, *, ino: int, uuid: bytes, blocksize: int,
                  inline_space: int) -> ForkPlan:
    """The attr fork for ``attrs`` [(flags, name, value)] in insertion order."""
    _check(attrs)
    if not attrs:
        return ForkPlan(b"", [], 0)
    sf = xattr_sf_size(attrs)
    if sf <= inline_space and all(len(n) < 255 and len(v) < 255 for _f, n, v in attrs):
        out = bytearray(struct.pack(">HBB", sf, len(attrs), 0))
        for flags, name, value in attrs:
            out += struct.pack(">BBB", len(name), len(value), flags) + name + value
        return ForkPlan(bytes(out), [], 0)
    local_max = (blocksize >> 1) + (blocksize >> 2)
    items = []          # (hash, seq, flags, name, value, local)
    for seq, (flags, name, value) in enumerate(attrs):
        local = _local_size(name, value) < local_max
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
            n = _remote_blocks(it[4], blocksize)
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
    pos = blocksize
    usedbytes = 0
    for k, (h, seq, flags, name, value, local) in enumerate(leaf):
        if local:
            size = _local_size(name, value)
            pos -= size
            struct.pack_into(">HB", buf, pos, len(value), len(name))
            buf[pos + 3:pos + 3 + len(name)] = name
            buf[pos + 3 + len(name):pos + 3 + len(name) + len(value)] = value
            eflags = flags | C.XFS_ATTR_LOCAL
        else:
            size = _remote_size(name)
            pos -= size
            blk, _n = remote_at[seq]
            struct.pack_into(">IIB", buf, pos, blk, len(value), len(name))
            buf[pos + 9:pos + 9 + len(name)] = name
            eflags = flags
        usedbytes += size
        struct.pack_into(">IHBB", buf, LEAF_HDR + 8 * k, h, pos, eflags, 0)
    base = LEAF_HDR + 8 * len(leaf)
    # count, usedbytes, firstused, holes, pad, freemap[3]
    struct.pack_into(">HHHBBHHHHHH", buf, 56, len(leaf), usedbytes, pos, 0, 0,
                     base, pos - base, 0, 0, 0, 0)
    return da_finisher(buf, ino, uuid)


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
    n = _remote_blocks(target, blocksize)
    return ForkPlan(None, [PlannedBlock(0, n, _headed_finisher(
        target, n, blocksize, C.XFS_SYMLINK_MAGIC, ino, uuid, span=n), V.SYMLINK)],
        len(target))
