"""The da-btree of directories and xattrs, read side: the node block layout
(format.structs.DA3_NODE_HDR and DA_NODE_ENTRY), the hash of a leaf
block's last entry, and the walk from the root to the leaf where a hash
belongs, moving on to the next leaf when equal hashes span sibling
blocks.

Every block is handed over by a ``read(blk)`` callable (the caller knows
the fork, the block size and the buffer type), so the same walk serves
directory lookups (fs.dir), xattr reads (fs.attr) and the writers of
fstool.ns.dabtree, which change the blocks of the path it returns.
"""
from __future__ import annotations

import struct

from .._backend import parsers
from ..errors import CorruptionError
from ..format import constants as C
from ..format.structs import ATTR3_LEAF_HDR, DA3_BLKINFO, DA3_NODE_HDR, DA_NODE_ENTRY

HDR = DA3_NODE_HDR.size                               # 64: node entries start here
ENTRY = DA_NODE_ENTRY.size                            # 8: (hashval, before)
FORW = DA3_BLKINFO.offset("forw")
BACK = DA3_BLKINFO.offset("back")
MAGIC = DA3_BLKINFO.offset("magic")
BLKNO = DA3_BLKINFO.offset("blkno")
UUID = DA3_BLKINFO.offset("uuid")
OWNER = DA3_BLKINFO.offset("owner")
COUNT = DA3_NODE_HDR.offset("__count")                # leaf headers keep count here too
LEVEL = DA3_NODE_HDR.offset("__level")                # and a dir leaf its stale count
ATTR_LEAF_BASE = ATTR3_LEAF_HDR.size                  # 80: attr leaf entries start here
MAXDEPTH = C.XFS_DA_NODE_MAXDEPTH

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_HH = struct.Struct(">HH")
_II = struct.Struct(">II")
_U64 = struct.Struct(">Q")


def magic(buf) -> int:
    return _U16.unpack_from(buf, MAGIC)[0]


def blkno(buf) -> int:
    """The disk address the block records for itself."""
    return _U64.unpack_from(buf, BLKNO)[0]


def uuid(buf) -> bytes:
    return bytes(buf[UUID:UUID + 16])


def owner(buf) -> int:
    return _U64.unpack_from(buf, OWNER)[0]


def set_identity(buf, blkno_: int, uuid_: bytes, owner_: int) -> None:
    """The block's own address, the filesystem's uuid and the owning inode."""
    _U64.pack_into(buf, BLKNO, blkno_)
    buf[UUID:UUID + 16] = uuid_
    _U64.pack_into(buf, OWNER, owner_)


def node_faults(buf, max_count: int) -> list:
    """The kernel's xfs_da3_node_verify past the block header: [(field,
    why)] of a node block holding at most ``max_count`` entries, empty when
    it is sound (the read path takes the first)."""
    n, level = count_level(buf)
    out = []
    if not 1 <= level <= MAXDEPTH:
        out.append(("level", f"node level {level} is invalid"))
    if n == 0 or n > max_count:
        out.append(("count", f"node holds {n} entries"))
    return out


def count(buf) -> int:
    return _U16.unpack_from(buf, COUNT)[0]


def count_level(buf) -> tuple[int, int]:
    """(count, level) of a node; (count, stale) of a directory leaf."""
    return _HH.unpack_from(buf, COUNT)


def set_count_level(buf, n: int, level: int) -> None:
    _HH.pack_into(buf, COUNT, n, level)


def siblings(buf) -> tuple[int, int]:
    """(forw, back) of a block of one level."""
    return _II.unpack_from(buf, FORW)


def set_siblings(buf, forw: int, back: int) -> None:
    _II.pack_into(buf, FORW, forw, back)


def set_forw(buf, forw: int) -> None:
    _U32.pack_into(buf, FORW, forw)


def set_back(buf, back: int) -> None:
    _U32.pack_into(buf, BACK, back)


def is_node(buf) -> bool:
    return magic(buf) == C.XFS_DA3_NODE_MAGIC


def entries(buf, n: int | None = None, base: int = HDR) -> list:
    """[(hash, before)] of a node (or the (hash, address) entries of a
    directory leaf): ``n`` of them, the block's count when not given."""
    if n is None:
        n = count(buf)
    if not n:
        return []
    v = struct.unpack_from(f">{2 * n}I", buf, base)
    return list(zip(v[0::2], v[1::2]))


def put_entries(buf, ents, base: int = HDR) -> None:
    if ents:
        struct.pack_into(f">{2 * len(ents)}I", buf, base, *[x for e in ents for x in e])


def entry(buf, i: int, base: int = HDR) -> tuple[int, int]:
    return _II.unpack_from(buf, base + ENTRY * i)


def set_hash(buf, i: int, h: int) -> None:
    _U32.pack_into(buf, HDR + ENTRY * i, h)


def hash_at(buf, i: int, base: int = HDR) -> int:
    return _U32.unpack_from(buf, base + ENTRY * i)[0]


def lower_bound(buf, n: int, h: int, base: int = HDR) -> int:
    """The first of ``n`` entries at ``base`` whose hash is >= ``h``."""
    try:
        return parsers.hash_lower_bound(buf, base, n, h)
    except ValueError as e:
        raise CorruptionError("da-btree block", str(e), field="count") from None


def leaf_base(buf) -> int:
    """Where a block's hash-ordered entries start: an attr leaf's after its
    80-byte header, a node's or a directory leaf's after 64 bytes."""
    return ATTR_LEAF_BASE if magic(buf) == C.XFS_ATTR3_LEAF_MAGIC else HDR


def lasthash(buf) -> int:
    """The hash of a block's last entry (0 when it has none): what the
    node above records for it."""
    n = count(buf)
    return _U32.unpack_from(buf, leaf_base(buf) + ENTRY * (n - 1))[0] if n else 0


def descend(read, root: int, h: int | None, *, what: str, ino: int) -> list:
    """[(blk, buffer, index)] from ``root`` down to the leaf where hash
    ``h`` belongs (the leftmost leaf when ``h`` is None): at each node the
    first entry whose hash is >= h (the last when none is); at the leaf the
    first entry >= h.  The leaf's magic is the caller's to check.  Counts,
    levels, cycles and the depth are checked on the way (``what`` names the
    tree's blocks in errors: "directory node block")."""
    path = []
    blk = root
    seen = set()
    expect = None
    for _depth in range(MAXDEPTH + 1):
        buf = read(blk)
        seen.add(blk)
        if not is_node(buf):
            n = count(buf)
            base = leaf_base(buf)
            if base + ENTRY * n > len(buf):
                raise CorruptionError(what.replace("node", "leaf"), f"count {n} overruns the "
                                      "block", ino=ino, block=blk, field="count")
            path.append((blk, buf, 0 if h is None else lower_bound(buf, n, h, base)))
            return path
        n, level = count_level(buf)
        if expect is not None and level != expect:
            raise CorruptionError(what, f"level {level}, expected {expect}", ino=ino,
                                  block=blk, field="level")
        if n == 0 or HDR + ENTRY * n > len(buf):
            raise CorruptionError(what, f"count {n} is not valid", ino=ino, block=blk,
                                  field="count")
        i = 0 if h is None else min(lower_bound(buf, n, h), n - 1)
        path.append((blk, buf, i))
        blk = entry(buf, i)[1]
        expect = level - 1
        if blk in seen:
            raise CorruptionError(what, "da-btree cycle", ino=ino, block=blk)
    raise CorruptionError(what, "da-btree too deep", ino=ino)


def next_leaf(read, path) -> bool:
    """Move ``path`` on to the next leaf in hash order (equal hashes may
    go on there); False at the last leaf."""
    for lvl in range(len(path) - 2, -1, -1):
        blk, buf, i = path[lvl]
        if i + 1 < count(buf):
            path[lvl] = (blk, buf, i + 1)
            child = entry(buf, i + 1)[1]
            del path[lvl + 1:]
            for _depth in range(MAXDEPTH + 1):
                cbuf = read(child)
                path.append((child, cbuf, 0))
                if not is_node(cbuf):
                    return True
                child = entry(cbuf, 0)[1]
            return False
    return False


def leaves(read, root: int, *, what: str, ino: int):
    """(blk, buffer) of every leaf, left to right: down the leftmost path,
    then along the forw links (each block once)."""
    path = descend(read, root, None, what=what, ino=ino)
    seen = {p[0] for p in path}
    blk, buf, _i = path[-1]
    while True:
        yield blk, buf
        forw = siblings(buf)[0]
        if forw == 0:
            return
        if forw in seen:
            raise CorruptionError(what.replace("node", "leaf"), "forward link cycle", ino=ino,
                                  block=forw)
        seen.add(forw)
        blk = forw
        buf = read(blk)
