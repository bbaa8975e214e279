"""The da-btree of directories and xattrs, write side: the node levels above
the leaves, changed as the kernel's xfs_da_btree.c changes them.

:class:`DaTree` works on one fork's tree through three callables the owner
gives it (the directory writer, fstool.ns.dirops, or the attr writer,
fstool.ns.attrops): ``read(blk)`` a block of the open transaction,
changed in place; ``grow(magic)`` a new block with its v5 header, as
(blk, buffer); ``shrink(blk)`` to unmap and free one.  Leaves are the
owner's business (their entries differ); the tree keeps the nodes above
them right: the hash path after a leaf's last hash changed, a new leaf (or
node) linked after a split one and entered in its parent, splitting full
nodes up to a new root level (xfs_da3_split, xfs_da3_node_split,
xfs_da3_root_split), a joined block dropped from its parent and a root of
one child collapsed into that child (xfs_da3_join, xfs_da3_root_join).
:func:`node_levels` builds the levels bottom-up over leaves laid out in
bulk.  Reading (the walk by hash) is fstool.fs.dabtree's.
"""
from __future__ import annotations

from collections import Counter

from ..format import constants as C
from ..format.structs import DA3_BLKINFO
from ..fs import dabtree as B
from ..fs.dabtree import HDR, descend, lasthash, next_leaf
from .dablock import da_block, pack


def init_header(buf, magic: int, daddr: int, uuid: bytes, owner: int) -> None:
    """The v5 blkinfo of a new block: no siblings, ``magic``, its own
    address, the filesystem's uuid and the owning inode."""
    DA3_BLKINFO.struct.pack_into(buf, 0, 0, 0, magic, 0, 0, daddr, 0, uuid, owner)


def reinit(buf, magic: int) -> None:
    """Empty a block of the tree in place for a new role: zeroes but for
    its identity (own address, uuid, owner) and the new ``magic``."""
    blkno = bytes(buf[B.BLKNO:B.BLKNO + 8])
    ident = bytes(buf[B.UUID:B.OWNER + 8])
    buf[:] = bytes(len(buf))
    buf[B.MAGIC:B.MAGIC + 2] = magic.to_bytes(2, "big")
    buf[B.BLKNO:B.BLKNO + 8] = blkno
    buf[B.UUID:B.OWNER + 8] = ident


class DaTree:
    """The node levels of one da-btree, rooted at block ``root``."""

    def __init__(self, read, grow, shrink, *, root: int, blksize: int, ino: int,
                 what: str, stats: Counter | None = None, join_nodes: bool = False):
        self.read = read
        self.grow = grow
        self.shrink = shrink
        self.root = root
        self.blksize = blksize
        self.ino = ino
        self.what = what                    # "directory node block", "xattr node block"
        self.max_node = (blksize - HDR) // B.ENTRY
        self.stats = stats if stats is not None else Counter()
        # nodes under half full merged into a sibling (xfs_da3_node_toosmall);
        # without, a node is only dropped when emptied
        self.join_nodes = join_nodes

    # -- walking -----------------------------------------------------------------------
    def path(self, h: int) -> list:
        """[(blk, buffer, index)] from the root to the leaf where hash ``h``
        belongs (fstool.fs.dabtree.descend over the transaction's blocks)."""
        return descend(self.read, self.root, h, what=self.what, ino=self.ino)

    def next_leaf(self, path) -> bool:
        return next_leaf(self.read, path)

    def path_to(self, blk: int, depth: int = -1):
        """A path from the root through block ``blk`` at ``depth`` (a leaf
        by default), found by the block's last hash; or None."""
        buf = self.read(blk)
        if not B.count(buf):
            return None
        path = self.path(lasthash(buf))
        for _ in range(64):
            if len(path) > depth and path[depth][0] == blk:
                return path
            if not self.next_leaf(path):
                return None
        return None

    # -- hashes ----------------------------------------------------------------------------
    def fixhashpath(self, path) -> None:
        """The leaf at the end of ``path`` may have a new last hash: carry it
        up while the nodes above record another (xfs_da3_fixhashpath)."""
        h = lasthash(path[-1][1])
        for lvl in range(len(path) - 2, -1, -1):
            _blk, buf, i = path[lvl]
            if B.hash_at(buf, i) == h:
                break
            B.set_hash(buf, i, h)
            h = lasthash(buf)

    def fix_up(self, path, lvl: int) -> None:
        """The last hash of the block at path[lvl] may have changed: carry it
        up while parents disagree."""
        while lvl > 0:
            _blk, buf, _i = path[lvl]
            h = lasthash(buf)
            _pblk, pbuf, pi = path[lvl - 1]
            if B.hash_at(pbuf, pi) == h:
                return
            B.set_hash(pbuf, pi, h)
            lvl -= 1

    # -- growing -----------------------------------------------------------------------------
    def link_after(self, oblk: int, obuf, nblk: int, nbuf) -> None:
        """Link new block ``nblk`` into its level right after ``oblk``."""
        forw = B.siblings(obuf)[0]
        B.set_siblings(nbuf, forw, oblk)
        if forw:
            B.set_back(self.read(forw), nblk)
        B.set_forw(obuf, nblk)

    def add_to_parent(self, path, lvl: int, oblk: int, obuf, nblk: int, nbuf) -> None:
        """Block ``oblk`` (at depth lvl+1 of ``path``) was split and ``nblk``
        linked after it: the node above gains an entry right after the old
        one's, splitting in turn when full (xfs_da3_node_split: half the
        entries to a new node after it); a split root is copied to a new
        block and the root becomes a node one level up (xfs_da3_root_split)."""
        if lvl < 0:
            self.stats["root-split"] += 1
            cblk, cbuf = self.grow(B.magic(obuf))
            own = bytes(cbuf[B.BLKNO:B.BLKNO + 8])
            cbuf[:] = obuf
            cbuf[B.BLKNO:B.BLKNO + 8] = own
            B.set_back(nbuf, cblk)
            level = B.count_level(obuf)[1] + 1 if B.is_node(obuf) else 1
            reinit(obuf, C.XFS_DA3_NODE_MAGIC)
            B.set_count_level(obuf, 2, level)
            B.put_entries(obuf, [(lasthash(cbuf), cblk), (lasthash(nbuf), nblk)])
            return
        pblk, pbuf, pi = path[lvl]
        count, level = B.count_level(pbuf)
        ents = B.entries(pbuf, count)
        ents[pi] = (lasthash(obuf), oblk)
        new = (lasthash(nbuf), nblk)
        if count + 1 <= self.max_node:
            ents.insert(pi + 1, new)
            B.set_count_level(pbuf, len(ents), level)
            B.put_entries(pbuf, ents)
            self.fix_up(path, lvl)
            return
        self.stats["node-split"] += 1
        sblk, sbuf = self.grow(C.XFS_DA3_NODE_MAGIC)
        move = count // 2
        e2 = ents[count - move:]
        ents = ents[:count - move]
        if pi < len(ents):
            ents.insert(pi + 1, new)
        else:
            e2.insert(pi - len(ents) + 1, new)
        pbuf[HDR:] = bytes(self.blksize - HDR)
        B.set_count_level(pbuf, len(ents), level)
        B.put_entries(pbuf, ents)
        B.set_count_level(sbuf, len(e2), level)
        B.put_entries(sbuf, e2)
        self.link_after(pblk, pbuf, sblk, sbuf)
        self.add_to_parent(path, lvl - 1, pblk, pbuf, sblk, sbuf)

    # -- shrinking ---------------------------------------------------------------------------
    def unlink(self, buf) -> None:
        """Take a block out of its level's sibling chain."""
        f, b = B.siblings(buf)
        if b:
            B.set_forw(self.read(b), f)
        if f:
            B.set_back(self.read(f), b)

    def drop_child(self, path, lvl: int, drop: int, save: int, save_hash: int) -> None:
        """Remove the entry for ``drop`` from the node at path[lvl] (and set
        ``save``'s hash there); a node left empty goes too."""
        pblk, pbuf, _pi = path[lvl]
        count, level = B.count_level(pbuf)
        ents = [e for e in B.entries(pbuf, count) if e[1] != drop]
        for k, e in enumerate(ents):
            if e[1] == save:
                ents[k] = (save_hash, save)
        pbuf[HDR:HDR + B.ENTRY * count] = bytes(B.ENTRY * count)
        B.set_count_level(pbuf, len(ents), level)
        B.put_entries(pbuf, ents)
        if ents or lvl == 0:
            path[lvl] = (pblk, pbuf, 0)
            # hashes above: the node's entry in its parent
            for up in range(lvl, 0, -1):
                _blk, buf, _i = path[up]
                _gblk, gbuf, _gi = path[up - 1]
                for k, e in enumerate(B.entries(gbuf)):
                    if e[1] == path[up][0] and e[0] != lasthash(buf):
                        B.set_hash(gbuf, k, lasthash(buf))
            if self.join_nodes and lvl > 0:
                self.node_join(path, lvl)
            return
        # an empty node: unlink it from its level and drop it from its parent
        self.unlink(pbuf)
        self.shrink(pblk)
        self.drop_child(path, lvl - 1, pblk, -1, 0)

    def node_join(self, path, lvl: int) -> None:
        """The node at path[lvl] (below the root) lost a child: when under
        half full it merges into a sibling that leaves a quarter of a node
        to spare, the lower-numbered block kept and the other dropped from
        its parent (xfs_da3_node_toosmall, xfs_da3_node_unbalance)."""
        blk, buf, _i = path[lvl]
        n = B.count(buf)
        if n > self.max_node // 2:
            return
        forw, back = B.siblings(buf)
        other = None
        for sib in sorted(b for b in (forw, back) if b):
            if n + B.count(self.read(sib)) <= self.max_node - self.max_node // 4:
                other = sib
                break
        if other is None:
            return
        opath = self.path_to(other, lvl)
        if opath is None:
            return
        self.stats["node-join"] += 1
        obuf = self.read(other)
        ents, oents = B.entries(buf), B.entries(obuf)
        merged = oents + ents if other == back else ents + oents
        if other < blk:
            save, save_path, drop, drop_path = other, opath, blk, path
        else:
            save, save_path, drop, drop_path = blk, path, other, opath
        sbuf, dbuf = self.read(save), self.read(drop)
        level = B.count_level(sbuf)[1]
        sbuf[HDR:] = bytes(self.blksize - HDR)
        B.set_count_level(sbuf, len(merged), level)
        B.put_entries(sbuf, merged)
        self.fix_up(save_path, lvl)
        self.unlink(dbuf)
        self.shrink(drop)
        self.drop_child(drop_path, lvl - 1, drop, save, lasthash(sbuf))

    def root_join(self) -> None:
        """While the root is a node of one entry, its only child moves into
        the root block (xfs_da3_root_join); a leaf child makes the tree one
        leaf again."""
        root = self.read(self.root)
        while B.is_node(root) and B.count(root) == 1:
            self.stats["root-join"] += 1
            child = B.entry(root, 0)[1]
            cbuf = self.read(child)
            own = bytes(root[B.BLKNO:B.BLKNO + 8])
            root[:] = cbuf
            root[B.BLKNO:B.BLKNO + 8] = own
            B.set_siblings(root, 0, 0)
            self.shrink(child)


def node_levels(children, *, root: int, take, size: int, magic: int, block) -> list:
    """The interior levels of a da-btree built bottom-up over ``children``
    [(last hash, block)] in hash order: nodes filled from the left (see
    fstool.ns.dablock.pack), level after level, the root at block ``root``
    and every other node at the block ``take()`` hands out; ``block(lblk,
    buf)`` turns a node into what the caller plans.  Returns those, root
    last."""
    out = []
    level = 1
    while True:
        groups = [children[a:b] for a, b in pack([c[0] for c in children],
                                                 size - HDR, B.ENTRY, lead=1)]
        top = len(groups) == 1
        lblks = [root] if top else [take() for _ in groups]
        above = []
        for k, (lblk, g) in enumerate(zip(lblks, groups)):
            buf = da_block(size, magic, count=len(g), second=level,
                           forw=lblks[k + 1] if k + 1 < len(groups) else 0,
                           back=lblks[k - 1] if k else 0, pairs=g)
            out.append(block(lblk, buf))
            above.append((g[-1][0], lblk))
        if top:
            return out
        children = above
        level += 1
