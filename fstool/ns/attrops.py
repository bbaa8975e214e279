"""Incremental changes to an attr fork in leaf or node form: set or remove
one xattr inside the open transaction, touching only the blocks on its
hash path (O(log n) blocks per change), as the kernel's xfs_attr_leaf.c
and xfs_attr.c do.

- leaf form (one leaf at attr block 0): the entry goes into the leaf;
  a full leaf becomes a node form first (xfs_attr3_leaf_to_node: the leaf
  moves to a new block under a root node at block 0), then splits;
- node form: the walk by hash (fstool.fs.dabtree) finds the leaf; a full
  leaf splits in two (or three, when a large entry leaves no balanced
  cut), the new leaf linked after it and entered in its parent, nodes
  splitting up to a new root level (fstool.ns.dabtree.DaTree);
- removal: the entry leaves its leaf; an emptied leaf is dropped and a
  small one merged into a sibling with room (xfs_attr3_leaf_toosmall and
  xfs_da3_join), a root of one child collapses into it (a node form of
  one leaf is a leaf form again);
- values of 3/4 of a block and more live in remote blocks (a header in
  each) at the first hole of the fork large enough
  (xfs_bmap_first_unused), freed with their entry.

Leaf blocks are rewritten compacted (names packed from the block's end:
attrbuild.write_leaf), which the format allows at any time.  The
shortform fork and the conversions between shortform and leaf form stay
with fstool.ns.namespace (they hold a few hundred bytes).  The inode's
attr fork map, format and block count are written by :meth:`AttrFork.save`.
"""
from __future__ import annotations

import bisect
from collections import Counter

from ..alloc import rmap as R
from ..errors import CorruptionError
from ..format import constants as C
from ..format import parent as P
from ..format.structs import DINODE
from ..fs import dabtree as B
from ..io import verify as V
from . import attrbuild as AB
from . import files as F
from .bmap import first_unused, owned_extents
from .dabtree import DaTree, init_header, reinit

#: reshapes done so far ("leaf->node", "split", "node-split", "root-split",
#: "join", "root-join", "node->leaf"): for tests and benchmarks
ATTR_CONVERSIONS: Counter = Counter()
_BT = V.ATTR3_NODE_OR_LEAF


class AttrFork:
    """The leaf- or node-form attr fork of one inode, changed by the open
    transaction of session ``w``."""

    def __init__(self, w, ino: int, match_incomplete: bool = False):
        self.w = w
        # log recovery finds entries left incomplete too, to replace or
        # remove them (xfs_attr_match_mask with XFS_DA_OP_RECOVERY)
        self.match_incomplete = match_incomplete
        self.fs = fs = w.fs
        self.ino = ino
        self.node = node = fs.inode(ino)
        if node.aformat not in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE) or \
                not node.forkoff:
            raise ValueError(f"inode {ino}: the attr fork is not in leaf or node form")
        self.bs = w.sb.blocksize
        self.exts = sorted((o, b, n) for o, b, n, *_ in node.extents(attr=True))
        self.map_changed = False
        self.blocks_delta = 0
        self.da = DaTree(self.read, self._grow, self._shrink, root=0, blksize=self.bs,
                         ino=ino, what="xattr node block", stats=ATTR_CONVERSIONS,
                         join_nodes=True)

    # -- the block map ------------------------------------------------------------------
    def _fsb(self, ablk: int):
        i = bisect.bisect_right(self.exts, (ablk, 1 << 64)) - 1
        if i >= 0:
            o, b, n = self.exts[i]
            if o <= ablk < o + n:
                return b + (ablk - o)
        return None

    def _daddr(self, ablk: int) -> int:
        fsb = self._fsb(ablk)
        if fsb is None:
            raise CorruptionError("xattr fork", f"attr block {ablk} is not mapped",
                                  ino=self.ino, block=ablk)
        return self.fs.fsb_to_daddr(fsb)

    def read(self, ablk: int) -> bytearray:
        """An attr leaf or node block of the transaction, changed in place."""
        return self.w.tx.read_buf(self._daddr(ablk), self.bs, _BT, owner=self.ino,
                                  ino=self.ino, block=ablk).data

    def _alloc(self, ablk: int, count: int) -> None:
        """Map ``count`` new blocks at attr block ``ablk`` (a hole)."""
        at, left = ablk, count
        while left:
            i = bisect.bisect_right(self.exts, (at, 1 << 64)) - 1
            near = self.exts[i][1] + self.exts[i][2] if i >= 0 else \
                self.w.inodes.ino_fsb(self.ino)
            fsb, n = self.w.space.alloc_blocks(near, 1, left, owner=R.fork(self.ino, at, True))
            bisect.insort(self.exts, (at, fsb, n))
            at += n
            left -= n
        self.map_changed = True
        self.blocks_delta += count

    def _unmap(self, ablk: int, count: int) -> None:
        """Unmap and free attr blocks [ablk, ablk + count)."""
        end = ablk + count
        keep = []
        for o, b, n in self.exts:
            if o + n <= ablk or o >= end:
                keep.append((o, b, n))
                continue
            lo, hi = max(o, ablk), min(o + n, end)
            if o < lo:
                keep.append((o, b, lo - o))
            if hi < o + n:
                keep.append((hi, b + hi - o, o + n - hi))
            self.w.space.free_extent(b + lo - o, hi - lo, owner=R.fork(self.ino, lo, True))
            self.blocks_delta -= hi - lo
        self.exts = keep
        self.map_changed = True

    def _grow(self, magic: int):
        """A new da block at the fork's first hole (xfs_da_grow_inode)."""
        ablk = first_unused(self.exts, 0, 1)
        self._alloc(ablk, 1)
        daddr = self._daddr(ablk)
        buf = self.w.tx.get_buf(daddr, self.bs, _BT).data
        buf[:] = bytes(self.bs)
        init_header(buf, magic, daddr, self.w.uuid, self.ino)
        return ablk, buf

    def _shrink(self, ablk: int) -> None:
        self._unmap(ablk, 1)

    # -- remote values --------------------------------------------------------------------
    def _put_remote(self, value: bytes) -> int:
        """Write a remote value at the first hole that holds it; its first block."""
        n = AB.remote_blocks(len(value), self.bs)
        ablk = first_unused(self.exts, 0, n)
        self._alloc(ablk, n)
        for k in range(n):
            daddr = self._daddr(ablk + k)
            buf = self.w.tx.get_buf(daddr, self.bs, V.ATTR3_RMT).data
            buf[:] = AB.remote_block(value, k, self.bs, self.ino, self.w.uuid, daddr)
        return ablk

    def _drop_value(self, ent) -> None:
        if ent.value is None:
            self._unmap(ent.valueblk, AB.remote_blocks(ent.valuelen, self.bs))

    # -- finding ------------------------------------------------------------------------------
    def _find(self, h: int, flags: int, name: bytes, value=None):
        """(insert path, insert index, found): the path to the leaf where
        hash ``h`` goes and the index there; found is None or (path, index)
        of the entry named (in that leaf or, when equal hashes span leaves,
        a later one).  A parent pointer is found by its name and value
        (``value``): one name may link the file from two directories."""
        parent = P.is_parent(flags)
        path = self.da.path(h)
        ins = None
        while True:
            blk, buf, i = path[-1]
            if B.magic(buf) != C.XFS_ATTR3_LEAF_MAGIC:
                raise CorruptionError("xattr leaf block", "not a leaf below the nodes",
                                      ino=self.ino, block=blk, field="magic")
            if ins is None:
                ins = (list(path), i)
            n = B.count(buf)
            while i < n and B.hash_at(buf, i, AB.LEAF_HDR) == h:
                e = AB.leaf_entry(buf, i)
                if e.name == name and (e.flags & C.XFS_ATTR_NSP_ONDISK_MASK) == flags and \
                        (self.match_incomplete or not e.flags & C.XFS_ATTR_INCOMPLETE) and \
                        (not parent or e.value == value):
                    return ins + ((path, i),)
                i += 1
            if i < n or not self.da.next_leaf(path):
                return ins + (None,)

    # -- setting ------------------------------------------------------------------------------
    def set(self, flags: int, name: bytes, value: bytes) -> None:
        """Add ``name`` with ``value``, replacing the value it has (a parent
        pointer, told apart by its value too, is added when not there)."""
        value = bytes(value)
        h = P.attr_hash(flags, name, value)
        path, i, found = self._find(h, flags, name, value)
        if found is not None and found[0][-1][0] != path[-1][0]:
            # the old entry sits in a later leaf (equal hashes): out first
            self.remove(flags, name, join=False, value=value)
            path, i, found = self._find(h, flags, name, value)
        blk, buf, _i = path[-1]
        if found is not None:
            i = found[1]
            self._drop_value(AB.leaf_remove(buf, i))
        if AB.is_local(name, value, self.bs):
            ent = AB.LeafEnt(h, flags, name, value, 0, len(value))
        else:
            ent = AB.LeafEnt(h, flags, name, None, self._put_remote(value), len(value))
        if AB.leaf_insert(buf, i, ent):
            self.da.fixhashpath(path)
            return
        ents = AB.read_leaf(buf)
        ents.insert(i, ent)
        if len(path) == 1:
            path = self._leaf_to_node(path)
        self._split(path, ents)

    def _leaf_to_node(self, path) -> list:
        """xfs_attr3_leaf_to_node: the leaf at block 0 moves to a new block,
        block 0 becomes a root node over it; the path to the moved leaf."""
        ATTR_CONVERSIONS["leaf->node"] += 1
        _blk, root, i = path[0]
        nblk, nbuf = self._grow(C.XFS_ATTR3_LEAF_MAGIC)
        own = bytes(nbuf[B.BLKNO:B.BLKNO + 8])
        nbuf[:] = root
        nbuf[B.BLKNO:B.BLKNO + 8] = own
        reinit(root, C.XFS_DA3_NODE_MAGIC)
        B.set_count_level(root, 1, 1)
        B.put_entries(root, [(B.lasthash(nbuf), nblk)])
        return [(0, root, 0), (nblk, nbuf, i)]

    def _cut(self, ents) -> list:
        """Where to cut entries that overflow a leaf: the cuts (indexes)
        giving the most even pieces that fit, between different hashes when
        that can be (xfs_attr3_leaf_rebalance keeps the halves near equal)."""
        sizes = [8 + e.size for e in ents]
        total = sum(sizes)
        room = self.bs - AB.LEAF_HDR
        best = None
        left = 0
        for k in range(1, len(ents)):
            left += sizes[k - 1]
            if left > room or total - left > room:
                continue
            key = (ents[k - 1].hash == ents[k].hash, abs(total - 2 * left))
            if best is None or key < best[0]:
                best = (key, k)
        if best is not None:
            return [best[1]]
        # one large entry leaves no two-way cut: as full as can be, in order
        cuts, used = [], 0
        for k, s in enumerate(sizes):
            if used + s > room:
                cuts.append(k)
                used = 0
            used += s
        return cuts

    def _split(self, path, ents) -> None:
        """The leaf at the end of ``path`` cannot hold ``ents``: the first
        piece stays, each further one goes to a new leaf linked after it
        and entered in the parent (xfs_attr3_leaf_split, xfs_da3_split)."""
        cuts = self._cut(ents)
        pieces = [ents[a:b] for a, b in zip([0] + cuts, cuts + [len(ents)])]
        oblk, obuf, _i = path[-1]
        AB.write_leaf(obuf, pieces[0])
        for piece in pieces[1:]:
            ATTR_CONVERSIONS["split"] += 1
            nblk, nbuf = self._grow(C.XFS_ATTR3_LEAF_MAGIC)
            AB.write_leaf(nbuf, piece)
            self.da.link_after(oblk, obuf, nblk, nbuf)
            self.da.add_to_parent(path, len(path) - 2, oblk, obuf, nblk, nbuf)
            if piece is not pieces[-1]:
                path = self.da.path_to(nblk)
                if path is None:
                    raise CorruptionError("xattr leaf block", "not found again after its "
                                          "split", ino=self.ino, block=nblk)
            oblk, obuf = nblk, nbuf

    # -- removing ----------------------------------------------------------------------------
    def remove(self, flags: int, name: bytes, join: bool = True, value=None) -> bool:
        """Remove ``name``; False when there is none.  ``join`` false leaves
        the tree's shape as it is (a replace adds the name back at once).
        A parent pointer needs its ``value`` (its hash and identity)."""
        if value is not None:
            value = bytes(value)
        found = self._find(P.attr_hash(flags, name, value), flags, name, value)[2]
        if found is None:
            return False
        path, i = found
        blk, buf, _i = path[-1]
        self._drop_value(AB.leaf_remove(buf, i))
        if len(path) == 1:
            return True
        if not B.count(buf):
            self._drop_leaf(path)
        else:
            self.da.fixhashpath(path)
            if join:
                self._join(path)
        return True

    def _drop_leaf(self, path) -> None:
        blk, buf, _i = path[-1]
        ATTR_CONVERSIONS["join"] += 1
        self.da.unlink(buf)
        self._shrink(blk)
        self.da.drop_child(path, len(path) - 2, blk, -1, 0)
        self._root_join()

    def _join(self, path) -> None:
        """xfs_attr3_leaf_toosmall and xfs_da3_join: a leaf under half full
        merges into a sibling when both fit with a quarter of a block to
        spare (the lower-numbered block kept)."""
        bs = self.bs
        blk, buf, _i = path[-1]
        fill = AB.leaf_fill(buf)
        if fill > bs >> 1:
            return
        forw, back = B.siblings(buf)
        other = None
        for sib in sorted(b for b in (forw, back) if b):
            if fill + AB.leaf_fill(self.read(sib)) - AB.LEAF_HDR <= bs - (bs >> 2):
                other = sib
                break
        if other is None:
            return
        other_path = self.da.path_to(other)
        if other_path is None:
            return
        ATTR_CONVERSIONS["join"] += 1
        obuf = self.read(other)
        ents = AB.read_leaf(buf)
        merged = AB.read_leaf(obuf) + ents if other == back else ents + AB.read_leaf(obuf)
        if other < blk:
            save, save_path, drop, drop_path, dbuf = other, other_path, blk, path, buf
        else:
            save, save_path, drop, drop_path, dbuf = blk, path, other, other_path, obuf
        sbuf = self.read(save)
        AB.write_leaf(sbuf, merged)
        self.da.fix_up(save_path, len(save_path) - 1)
        self.da.unlink(dbuf)
        self._shrink(drop)
        self.da.drop_child(drop_path, len(drop_path) - 2, drop, save, B.lasthash(sbuf))
        self._root_join()

    def _root_join(self) -> None:
        self.da.root_join()
        if not B.is_node(self.read(0)):
            ATTR_CONVERSIONS["node->leaf"] += 1

    # -- the whole fork ------------------------------------------------------------------------
    def leaf_form(self) -> bool:
        return not B.is_node(self.read(0))

    def leaf_entries(self) -> list:
        """The entries of a leaf-form fork."""
        return AB.read_leaf(self.read(0))

    def save(self) -> None:
        """Write the attr fork's map, format and the block count into the
        inode (its times are the caller's)."""
        if not self.map_changed and not self.blocks_delta:
            return
        w = self.w
        ino = self.ino
        raw = bytearray(w.inodes.raw_inode(ino))
        d = DINODE.unpack(raw)
        c = C.XFS_DINODE_CORE_SIZE
        lit = w.sb.inodesize - c
        start = d["di_forkoff"] * 8
        space = lit - start
        if self.map_changed:
            pool = []
            if self.node.aformat == C.XFS_DINODE_FMT_BTREE:
                for fsbno, n, who, _u in owned_extents(self.node, attr=True):
                    if who.flags & R.BMBT_BLOCK:
                        pool.extend(range(fsbno, fsbno + n))
                        self.blocks_delta -= n
            fork = F.map_fork(w, ino, list(self.exts), space, attr=True, reuse=pool)
            for fsbno in pool:          # old bmbt blocks the new tree did not take
                w.space.free_extent(fsbno, 1, owner=R.bmbt(ino, True))
            self.blocks_delta += fork.blocks - sum(n for _o, _b, n in self.exts)
            raw[c + start:c + lit] = fork.literal + bytes(space - len(fork.literal))
            d["di_aformat"] = fork.fmt
            if d["di_flags2"] & C.XFS_DIFLAG2_NREXT64:
                d["di_nextents"] = fork.nextents
            else:
                d["di_anextents"] = fork.nextents
        d["di_nblocks"] += self.blocks_delta
        packed = DINODE.pack(d)
        raw[:len(packed)] = packed
        w.inodes.put_inode(ino, w.enc.seal(raw))
        self.blocks_delta = 0
        self.map_changed = False
        self.node = self.fs.inode(ino)
