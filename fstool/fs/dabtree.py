"""The da-btree of directories and xattrs, read side: the node block layout
(format.structs.DA3_NODE_HDR and DA_NODE_ENTRY), the hash of a leaf
block's last entry, and the walk from the root to the leaf where a hash
belongs, moving on to the next leaf when equal hashes span sibling
blocks.

Every block is handed over by a ``read(blk)`` callable (the caller knows
the fork, the block size and the buffer type), so the same walk serves
directory lookups (fs.dir), xattr reads (fs.attr) and the writers of
fstool.ns.dabtree, which change the blocks of the path it returns.

Check's walk is here too: :func:`audit` goes over a whole tree as
xfs_repair does (left edge, leaf chain, the path above each leaf, the
right edge) and tells its caller every fault; :func:`node_faults` is the
node block's structure verifier (the kernel's xfs_da3_node_verify).
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


def set_magic(buf, m: int) -> None:
    _U16.pack_into(buf, MAGIC, m)


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


def lower_bound(buf, n: int, h: int, base: int = HDR, what: str = "da-btree block") -> int:
    """The first of ``n`` (hash, x) entries at ``base`` whose hash is >=
    ``h`` (``what`` names the block in an error)."""
    try:
        return parsers.hash_lower_bound(buf, base, n, h)
    except ValueError as e:
        raise CorruptionError(what, str(e), field="count") from None


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


def audit(read, root: int, leaf, bad, *, max_count: int, attr: bool,
          dir_root_leafn: bool = False, strict=None) -> None:
    """A da-btree walked as xfs_repair walks it (da_util.c and dir2.c /
    attr_repair.c): down the left edge from the root (traverse_int_dablock:
    node magic, entry counts, levels one apart), then along the leaves by
    their forward pointers, each leaf's back pointer naming the one
    before; at every leaf boundary the path above is verified
    (verify_da_path): the next node entry points at the leaf just done and
    carries its greatest hash, and a node whose entries are used up
    hands over to its right sibling, whose magic, back pointer, count and
    level must fit; after the last leaf, the right edge
    (verify_final_da_path): each node's last entry used, its first hash
    not above its last (xfs_repair 6.10.1; 6.1 wants it below), no right
    sibling.

    ``read(dablk)`` returns a verified buffer, or None when it cannot (and
    has said why); ``leaf(dablk, buf, greatest)`` checks one leaf block
    against the greatest hash before it and returns its own greatest (the
    last entry's; the one before for an empty leaf), or None when it is bad
    (and reported); ``strict(dablk, buf)``, if given, says why a node
    below the root fails where xfs_repair reads it stricter; ``bad(dablk,
    detail, field=None, hash_fault=False, **more)`` is told every fault
    (``hash_fault``: a node entry whose hash is not its child's greatest,
    which xfs_repair corrects in place).  ``max_count`` is the most
    entries a node holds; ``attr`` says the tree is an attr fork's (its
    root has no siblings, block 0 is never a leaf), else a directory's
    (whose root may be ``dir_root_leafn``: a single leafn block).  Like
    xfs_repair, the walk stops at the first break (a hash that differs
    from the child's greatest is reported and the walk goes on)."""
    def node_hdr(dablk, buf, below_root):
        """(forw, back, count, level, [(hash, before)]) of a node, or None
        (reported) when it is not one the walk can use."""
        got = magic(buf)
        if got != C.XFS_DA3_NODE_MAGIC:
            bad(dablk, f"magic 0x{got:x} where a da-btree node is expected", "magic",
                found=got)
            return None
        forw, back = siblings(buf)
        count, level = count_level(buf)
        if count == 0 or count > max_count:
            bad(dablk, f"{count} entries (1 to {max_count})", "count", found=count)
            return None
        if not 1 <= level < C.XFS_DA_NODE_MAXDEPTH:
            bad(dablk, f"level {level} is not valid", "level", found=level)
            return None
        why = strict(dablk, buf) if below_root and strict is not None else None
        if why:
            bad(dablk, why)
            return None
        return [forw, back, count, level, entries(buf, count)]

    # the left edge: one cursor entry per node level, [block, header, index,
    # first hash, the greatest hash of the children verified so far]
    buf = read(root)
    if buf is None:
        return
    if not is_node(buf) and dir_root_leafn:
        leaf(root, buf, 0)              # a single LEAFN block is the whole tree
        return
    cursor = {}
    dablk, top, level = root, None, None
    while True:
        hdr = node_hdr(dablk, buf, top is not None)
        if hdr is None:
            return
        if top is None:
            top = hdr[3]
            if attr and (hdr[0] or hdr[1]):
                # (xfs_repair would clear them; a directory's root
                # node's left sibling it does not look at)
                bad(dablk, f"the root has siblings ({hdr[0]}, {hdr[1]})", "forw")
        elif hdr[3] != level - 1:
            bad(dablk, f"level {hdr[3]} under a node of level {level}", "level",
                found=hdr[3], expected=level - 1)
            return
        level = hdr[3]
        cursor[level] = [dablk, hdr, 0, hdr[4][0][0], None]
        dablk = hdr[4][0][1]
        if level == 1:
            break
        buf = read(dablk)
        if buf is None:
            return
        if not attr and magic(buf) == C.XFS_DIR3_LEAFN_MAGIC:
            bad(dablk, f"a leaf block where a node of level {level - 1} is expected",
                "magic")
            return

    def verify_path(lvl, child, child_hash) -> bool:
        """verify_da_path: the entry at the cursor of level ``lvl`` names
        ``child`` with its greatest hash; moves the cursor on.  A node's
        own greatest, for the level above, is its children's (what its
        last entry holds once xfs_repair has corrected it), so that a
        wrong hash is reported, and corrected by repair, where it is."""
        if lvl > top:
            bad(child, "the chain below runs past the last entry of the tree's root",
                "forw")
            return False
        cur = cursor[lvl]
        hdr = cur[1]
        if cur[2] >= hdr[2]:
            # this node is used up: its path is checked, its right sibling follows
            if not verify_path(lvl + 1, cur[0], cur[4]):
                return False
            nxt = hdr[0]
            if nxt == 0:
                bad(cur[0], "its entries are used up but the chain below goes on and "
                    "it has no right sibling", "forw")
                return False
            nbuf = read(nxt)
            if nbuf is None:
                return False
            nhdr = node_hdr(nxt, nbuf, True)
            if nhdr is None:
                return False
            wrong = []
            if nhdr[1] != cur[0]:
                wrong.append(("back", f"back pointer {nhdr[1]}, the node before is "
                              f"{cur[0]}", nhdr[1], cur[0]))
            if nhdr[3] != lvl:
                wrong.append(("level", f"level {nhdr[3]} where level {lvl} is walked",
                              nhdr[3], lvl))
            for field, detail, found, expected in wrong:
                bad(nxt, detail, field, found=found, expected=expected)
            if wrong:
                return False
            cursor[lvl] = cur = [nxt, nhdr, 0, nhdr[4][0][0], None]
            hdr = nhdr
        h, before = hdr[4][cur[2]]
        if before != child:
            bad(cur[0], f"entry {cur[2]} points at block {before}, the walk reached "
                f"{child}", "before", index=cur[2], found=before, expected=child)
            return False
        if h != child_hash:
            bad(cur[0], f"entry {cur[2]} for block {child} has hash 0x{h:08x}, the "
                f"block's greatest is 0x{child_hash:08x}", "hashval", hash_fault=True,
                index=cur[2], found=h, expected=child_hash)
        cur[2] += 1
        cur[4] = child_hash
        return True

    def verify_final(lvl, child, child_hash) -> bool:
        """verify_final_da_path: the right edge from level ``lvl`` up."""
        cur = cursor[lvl]
        blk, hdr, entry, first, _greatest = cur
        count = hdr[2]
        broken = False
        if entry != count - 1:
            bad(blk, f"the walk ends at entry {entry} of its {count}", "count",
                found=count, expected=entry + 1)
            broken = True
        elif first > hdr[4][entry][0]:
            bad(blk, f"its first hash 0x{first:08x} is above its last "
                f"0x{hdr[4][entry][0]:08x}", "hashval")
            broken = True
        if hdr[0]:
            bad(blk, f"the last node of level {lvl} has a right sibling {hdr[0]}",
                "forw", found=hdr[0], expected=0)
            broken = True
        if broken:
            return False
        h, before = hdr[4][entry]
        if before != child:
            bad(blk, f"its last entry points at block {before}, the walk ended at "
                f"{child}", "before", index=entry, found=before, expected=child)
            return False
        if h != child_hash:
            bad(blk, f"entry {entry} for block {child} has hash 0x{h:08x}, the block's "
                f"greatest is 0x{child_hash:08x}", "hashval", hash_fault=True, index=entry,
                found=h, expected=child_hash)
        return lvl >= top or verify_final(lvl + 1, blk, child_hash)

    # the leaves, left to right by their forward pointers
    prev, greatest = 0, 0
    seen = set()
    while True:
        if dablk == 0 and attr:
            bad(0, "the leaf chain leads back to block 0 (a cycle)", "before")
            return
        if dablk in seen:
            bad(dablk, "the leaf chain reaches it twice (a cycle)", "forw")
            return
        seen.add(dablk)
        lbuf = read(dablk)
        if lbuf is None:
            return
        got = leaf(dablk, lbuf, greatest)
        if got is None:
            return
        greatest = got
        forw, back = siblings(lbuf)
        if back != prev:
            bad(dablk, f"back pointer {back}, the leaf before is {prev}", "back",
                found=back, expected=prev)
            return
        prev = dablk
        if not forw:
            break
        if not verify_path(1, dablk, greatest):
            return
        dablk = forw
    verify_final(1, dablk, greatest)
