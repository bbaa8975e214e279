"""Incremental directory changes: insert, remove and replace one entry in a
shortform, block, leaf or node directory, inside the open transaction,
touching only the blocks the kernel would touch.

The algorithms are the kernel's (xfs_dir2_sf_addname, xfs_dir2_block_addname,
xfs_dir2_leaf_addname, xfs_dir2_node_addname and their removename and
replace counterparts), with its conversions: shortform -> block when the
inode's fork is full, block -> leaf when the block is, leaf -> node when the
leaf block cannot take another entry or bests slot; and back: node -> leaf
when the da-btree has shrunk to one leaf that can carry the bests table,
leaf -> block when one data block is left and its tail has room for the
leaf, block -> shortform when the entries fit the inode again.  Leaf
entries with stale slots, compaction, the bests table and free-index
blocks, emptied data blocks given back and leafn splits and joins follow the
kernel, and full da-btree nodes split (the root moving down a level) as
xfs_da3_node_split and xfs_da3_root_split do.  Differences: nodes are not
joined when they become small (an emptied node is removed), and leaves
whose sibling hangs under another node are not joined; both leave valid,
if less compact, trees.

Blocks are read with ``tx.read_buf`` and changed in place (the journal logs
the bytes that changed); new blocks come from ``tx.get_buf``.  The inode is
written once per operation by :meth:`Dir.save`.
"""
from __future__ import annotations

import bisect
from collections import Counter

from .._backend import parsers, writers
from ..errors import CorruptionError, FsToolError, NotADirectoryImageError, UnsupportedError
from ..format import constants as C
from ..format.structs import DIR2_SF_ENTRY
from ..fs.icore import InodeEdit
from ..alloc import rmap as R
from ..io import verify as V
from . import dirdata as D
from . import files as F
from .bmap import first_unused, owned_extents
from .dabtree import DaTree, init_header
from ..fs import dabtree, dirblock as B
from ..fs.dirform import BLOCK, LEAF, NODE, SHORTFORM, form_of

HDR = D.HDR
_DOTDOT = HDR + D.entsize(len(b"."))        # where '..' and the first entry start
_FIRST = _DOTDOT + D.entsize(len(b".."))
NULLOFF = 0xFFFF
#: conversions and da-btree reshapes done so far, by name ("sf->block",
#: "block->leaf", "leaf->node", "node->leaf", "leaf->block", "block->sf",
#: "split", "root-split", "join", "root-join"): for tests and benchmarks
CONVERSIONS: Counter = Counter()


def _hash(name: bytes) -> int:
    return parsers.da_hashname(name)


def _ents(buf, start: int, count: int) -> list:
    """(hash, address) pairs of a leaf or node entry array."""
    return dabtree.entries(buf, count, start)


class _BufEnts:
    """The (hash, address) pairs of a leaf or node entry array read where
    they lie, one at a time: for lookups, which touch a few of them (a
    binary search and the run of equal hashes), not the whole array."""
    __slots__ = ("buf", "start", "count")

    def __init__(self, buf, start: int, count: int):
        self.buf = buf
        self.start = start
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> tuple:
        if not 0 <= i < self.count:
            raise IndexError(i)
        return B.leaf_entry(self.buf, self.start, i)


def _put_ents(buf, start: int, ents) -> None:
    dabtree.put_entries(buf, ents, start)


def _lower_bound(ents, h: int) -> int:
    if type(ents) is _BufEnts:
        return parsers.hash_lower_bound(ents.buf, ents.start, ents.count, h)
    return bisect.bisect_left(ents, (h, -1))


sf_parse = B.sf_parse
sf_encode = B.sf_encode
sf_size = B.sf_size


class Dir:
    """One directory inode changed by the open transaction."""

    def __init__(self, w, ino: int, now_ns: int):
        self.w = w
        self.fs = fs = w.fs
        self.sb = sb = w.sb
        self.ino = ino
        self.now = now_ns
        node = self.node = fs.inode(ino)
        if not node.is_dir:
            raise NotADirectoryImageError(f"inode {ino} is not a directory")
        self.gen = node.gen             # (its parent pointers' generation)
        if not sb.has_ftype:
            raise UnsupportedError("directories without ftype are not supported for writing")
        self.dbs = sb.dirblksize
        self.fsbs = sb.dirblkfsbs
        self.leafblk = C.XFS_DIR2_LEAF_OFFSET >> sb.blocklog
        self.freeblk = C.XFS_DIR2_FREE_OFFSET >> sb.blocklog
        self.format = node.format
        self.size = node.size
        self.forkoff = node.forkoff
        self.dsize = node.forkoff * 8 if node.forkoff else \
            sb.inodesize - C.XFS_DINODE_CORE_SIZE
        if self.format == C.XFS_DINODE_FMT_LOCAL:
            self.sf = bytes(node.fork_bytes()[:node.size])
            self.exts = []
        elif self.format in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE):
            self.sf = None
            self.exts = sorted((e[0], e[1], e[2]) for e in node.extents())
        else:
            raise CorruptionError("directory", f"data fork format {self.format}", ino=ino)
        self._sf_memo = (None, 0, ())
        self._sf_end = (None, None)     # (fork, _sf_tail() of it)
        # da -> the buffer read last: while the open transaction has it
        # joined (and has not freed it), the next read of the block is that
        # buffer, without mapping and looking it up again (a create reads
        # its directory's blocks for the lookup and again for the insert)
        self._bufs: dict = {}
        self.map_changed = False
        self.blocks_delta = 0
        self.dirty = False
        self.nlink_delta = 0
        self.unsaved = 0                # entries added since the inode was last written
        self.max_leaf = (self.dbs - B.LEAF_HDR) // B.LEAF_ENT
        self.max_bests = (self.dbs - B.FREE_HDR) // 2
        self.da = DaTree(self.read, self._grow_node, self.shrink, root=self.leafblk,
                         blksize=self.dbs, ino=ino, what="directory node block",
                         stats=CONVERSIONS)

    def _grow_node(self, magic: int):
        """A new block of the leaf/node space for the da-btree."""
        return self.new_block(self.leafblk, V.DA3_NODE_OR_LEAF, magic, True)

    def _sf_ents(self):
        """(parent, [entries]) of the shortform fork: ``sf_parse`` once per
        version of it (a lookup, the create's check and its insert all read
        the same bytes); the list is the caller's to change."""
        sf, parent, ents = self._sf_memo
        if sf is not self.sf:
            parent, ents = sf_parse(self.sf)
            ents = tuple(ents)
            self._sf_memo = (self.sf, parent, ents)
        return parent, list(ents)

    def _sf_set(self, parent: int, ents) -> bytes:
        """Encode the shortform fork (not yet installed) and remember its
        entries."""
        sf = sf_encode(parent, ents)
        self._sf_memo = (sf, parent, tuple(ents))
        return sf

    # -- the block map ----------------------------------------------------------
    def form(self) -> str:
        """The directory's form (one of fstool.fs.dirform.FORMS), told by
        the detector every reader uses, over the block map as this
        transaction has changed it."""
        if self.format == C.XFS_DINODE_FMT_LOCAL:
            return SHORTFORM
        if not self.exts:
            raise CorruptionError("directory", "no blocks", ino=self.ino)
        o, _b, n = self.exts[-1]
        return form_of(o + n, self.fsbs, self.sb.blocklog)

    def _fsb(self, da: int):
        i = bisect.bisect_right(self.exts, (da, 1 << 64)) - 1
        if i >= 0:
            o, b, n = self.exts[i]
            if o <= da and da + self.fsbs <= o + n:
                return b + (da - o)
        return None

    def _daddr(self, da: int) -> int:
        fsb = self._fsb(da)
        if fsb is None:
            raise CorruptionError("directory", f"block {da} is not mapped", ino=self.ino,
                                  block=da)
        return self.fs.fsb_to_daddr(fsb)

    def read(self, da: int, bt=V.DA3_NODE_OR_LEAF) -> bytearray:
        """A directory block: the transaction's buffer, or (outside one) the
        cached one, read only."""
        tx = self.w.tx
        if tx is None:
            return self.fs.get_buf(self._daddr(da), self.dbs, bt, owner=self.ino,
                                   ino=self.ino, block=da).data
        buf = self._bufs.get(da)
        if buf is not None and not buf.stale and tx.joined.get(buf.key) is buf:
            return buf.data
        buf = tx.read_buf(self._daddr(da), self.dbs, bt, owner=self.ino, ino=self.ino,
                          block=da)
        self._bufs[da] = buf
        return buf.data

    def exists(self, da: int) -> bool:
        return self._fsb(da) is not None

    def first_unused(self, start: int) -> int:
        """The first hole of a directory block at or after start."""
        return first_unused(self.exts, start, self.fsbs)

    def grow(self, space_start: int, bt) -> tuple:
        """Map a new directory block at the first hole of a space: (da, buffer)."""
        w = self.w
        da = self.first_unused(space_start)
        i = bisect.bisect_right(self.exts, (da, 1 << 64)) - 1
        near = self.exts[i][1] + self.exts[i][2] if i >= 0 else w.inodes.ino_fsb(self.ino)
        fsb, _n = w.space.alloc_blocks(near, self.fsbs, self.fsbs, owner=R.data(self.ino, da))
        bisect.insort(self.exts, (da, fsb, self.fsbs))
        self._bufs.clear()
        self.map_changed = True
        self.blocks_delta += self.fsbs
        buf = w.tx.get_buf(self.fs.fsb_to_daddr(fsb), self.dbs, bt).data
        if space_start == 0:
            end = (da + self.fsbs) << self.sb.blocklog
            if end > self.size:
                self.size = end
        return da, buf

    def shrink(self, da: int) -> None:
        """Unmap and free one directory block (xfs_dir2_shrink_inode)."""
        i = bisect.bisect_right(self.exts, (da, 1 << 64)) - 1
        o, b, n = self.exts[i]
        if not (o <= da and da + self.fsbs <= o + n):
            raise CorruptionError("directory", f"block {da} is not mapped", ino=self.ino)
        pieces = []
        if da > o:
            pieces.append((o, b, da - o))
        if da + self.fsbs < o + n:
            pieces.append((da + self.fsbs, b + (da + self.fsbs - o), o + n - da - self.fsbs))
        self.exts[i:i + 1] = pieces
        self._bufs.clear()
        self.w.space.free_extent(b + (da - o), self.fsbs, owner=R.data(self.ino, da))
        self.map_changed = True
        self.blocks_delta -= self.fsbs
        if da < self.leafblk:
            dbs = self.dbs
            db = da // self.fsbs
            if self.size > (db + 1) * dbs:
                return
            last = 0
            for o2, _b2, n2 in self.exts:
                if o2 < da:
                    last = max(last, min(o2 + n2, da))
            self.size = last << self.sb.blocklog

    def init_blk(self, buf, magic: int, da_hdr: bool, daddr: int) -> None:
        """Identity of a new directory block: magic, own address, uuid, owner."""
        if da_hdr:
            init_header(buf, magic, daddr, self.w.uuid, self.ino)
        else:
            B.init_header(buf, magic, daddr, self.w.uuid, self.ino)

    def new_block(self, space_start: int, bt, magic: int, da_hdr: bool):
        """A new block at the first hole of a space, with its header: (da, buffer)."""
        da, buf = self.grow(space_start, bt)
        self.init_blk(buf, magic, da_hdr, self._daddr(da))
        return da, buf

    # -- the inode ----------------------------------------------------------------
    def save(self, mtime_ns=None) -> None:
        """Write the directory inode: fork, size, blocks, times, link count
        (and one change more in the change count for each entry added
        without a save of its own, ``unsaved``)."""
        w = self.w
        ed = InodeEdit(w.inodes.raw_inode(self.ino))
        if self.format == C.XFS_DINODE_FMT_LOCAL:
            lit = self.sf
            fmt, nextents = C.XFS_DINODE_FMT_LOCAL, 0
            if self.node.format == C.XFS_DINODE_FMT_BTREE:
                for fsbno in self._free_old_bmbt():
                    w.space.free_extent(fsbno, 1, owner=R.bmbt(self.ino))
        elif self.map_changed or self.node.format == C.XFS_DINODE_FMT_LOCAL:
            pool = self._free_old_bmbt() if self.node.format == C.XFS_DINODE_FMT_BTREE \
                else []
            fork = F.map_fork(w, self.ino, list(self.exts), self.dsize, reuse=pool)
            for fsbno in pool:          # old bmbt blocks the new tree did not take
                w.space.free_extent(fsbno, 1, owner=R.bmbt(self.ino))
            mapped = sum(n for _o, _b, n in self.exts)
            self.blocks_delta += fork.blocks - mapped
            lit, fmt, nextents = fork.literal, fork.fmt, fork.nextents
        else:
            lit = None
            fmt, nextents = self.format, None
        # the fields that change, edited in place (the rest of the core as it is)
        if lit is not None:
            ed.set_data_fork(fmt, lit, self.dsize, nextents)
        ed.set("di_size", self.size)
        ed.add("di_nblocks", self.blocks_delta)
        ed.add("di_nlink", self.nlink_delta)
        ed.set_time("di_ctime", self.now)
        ed.set_time("di_mtime", self.now if mtime_ns is None else mtime_ns)
        ed.changed(1 + self.unsaved)
        w.inodes.put_inode(self.ino, ed.sealed())
        self.blocks_delta = 0
        self.nlink_delta = 0
        self.unsaved = 0
        self.map_changed = False
        self.node = self.fs.inode(self.ino)

    def _free_old_bmbt(self) -> list:
        """The old bmbt's blocks (no longer counted): a new tree takes them
        first, so a full filesystem can still change a large directory; the
        caller frees the rest."""
        node = self.node
        out = []
        for fsbno, n, who, _u in owned_extents(node, attr=False):
            if who.flags & R.BMBT_BLOCK:
                out.extend(range(fsbno, fsbno + n))
                self.blocks_delta -= n
        self.node = None
        return out

    # -- lookups -------------------------------------------------------------------
    def lookup(self, name: bytes):
        """(ino, ftype) of ``name`` or None."""
        r = self._find(name)
        return None if r is None else (r[0], r[1])

    def _find(self, name: bytes):
        """(ino, ftype, where) of ``name``; where tells the form's position."""
        form = self.form()
        if form == SHORTFORM:
            parent, ents = self._sf_ents()
            if name == b"..":
                return parent, C.XFS_DIR3_FT_DIR, (SHORTFORM, -1)
            if name == b".":
                return self.ino, C.XFS_DIR3_FT_DIR, (SHORTFORM, -2)
            for k, e in enumerate(ents):
                if e[1] == name:
                    return e[3], e[2], (SHORTFORM, k)
            return None
        h = _hash(name)
        if form == BLOCK:
            buf = self.read(0, V.DIR3_DATA_ANY)
            count = B.block_tail(buf)[0]
            start = B.block_leaf_start(buf, count)
            ents = _BufEnts(buf, start, count)
            r = self._scan(ents, _lower_bound(ents, h), h, name, buf)
            return None if r is None else (r[0], r[1], (BLOCK, r[2]))
        if form == LEAF:
            lbuf = self.read(self.leafblk)
            count = B.leaf_count(lbuf)
            ents = _BufEnts(lbuf, B.LEAF_HDR, count)
            r = self._scan(ents, _lower_bound(ents, h), h, name, None)
            return None if r is None else (r[0], r[1], (LEAF, r[2]))
        path = self._node_path(h)
        while True:
            da, lbuf, idx = path[-1]
            count = B.leaf_count(lbuf)
            ents = _BufEnts(lbuf, B.LEAF_HDR, count)
            r = self._scan(ents, idx, h, name, None)
            if r is not None:
                path[-1] = (da, lbuf, r[2])
                return r[0], r[1], (NODE, path)
            # equal hashes may go on in the next leaf
            i = idx
            while i < count and ents[i][0] == h:
                i += 1
            if i < count or not self.da.next_leaf(path):
                return None

    def _scan(self, ents, i: int, h: int, name: bytes, blockbuf):
        while i < len(ents) and ents[i][0] == h:
            addr = ents[i][1]
            if addr:
                ino, ename, ft, _n = self._entry(addr, blockbuf)
                if ename == name:
                    return ino, ft, i
            i += 1
        return None

    def _entry(self, addr: int, blockbuf=None):
        byte = addr << 3
        db, off = divmod(byte, self.dbs)
        buf = blockbuf if blockbuf is not None else self.read(db * self.fsbs, V.DIR3_DATA_ANY)
        return D.entry_at(buf, off)

    def _node_path(self, h: int) -> list:
        """[(da, buffer, index)] from the root to the leaf where ``h`` belongs."""
        path = self.da.path(h)
        da, buf, _i = path[-1]
        magic = dabtree.magic(buf)
        if magic != C.XFS_DIR3_LEAFN_MAGIC:
            raise CorruptionError("directory leaf", f"magic 0x{magic:x}", ino=self.ino,
                                  block=da)
        return path

    def entries_from(self, cookie: int):
        """(position, name, ino, ftype) from dir2 position ``cookie`` on, then
        (end position, None, 0, 0)."""
        dbs = self.dbs
        form = self.form()
        if form == SHORTFORM:
            parent, ents = self._sf_ents()
            items = [(HDR >> 3, b".", self.ino, C.XFS_DIR3_FT_DIR),
                     (_DOTDOT >> 3, b"..", parent, C.XFS_DIR3_FT_DIR)]
            items += [(off >> 3, name, ino, ft) for off, name, ft, ino in ents]
            for it in items:
                if it[0] >= cookie:
                    yield it
            yield (dbs >> 3, None, 0, 0)
            return
        if form == BLOCK:
            buf = self.read(0, V.DIR3_DATA_ANY)
            for off, n, free in D.regions(buf):
                if not free and off >> 3 >= cookie:
                    ino, name, ft, _s = D.entry_at(buf, off)
                    yield (off >> 3, name, ino, ft)
            yield (dbs >> 3, None, 0, 0)
            return
        first = (cookie << 3) // dbs * self.fsbs
        end = 0
        for o, _b, n in list(self.exts):
            if o >= self.leafblk:
                break
            for da in range(max(o, first), o + n, self.fsbs):
                buf = self.read(da, V.DIR3_DATA_ANY)
                base = da // self.fsbs * dbs
                for off, _n, free in D.regions(buf):
                    if not free and (base + off) >> 3 >= cookie:
                        ino, name, ft, _s = D.entry_at(buf, off)
                        yield ((base + off) >> 3, name, ino, ft)
                end = base + dbs
        yield (min(end >> 3, 0x7FFFFFFF), None, 0, 0)

    def is_empty(self) -> bool:
        for _pos, name, _ino, _ft in self.entries_from(0):
            if name is not None and name not in (b".", b".."):
                return False
        return True

    # -- adding -------------------------------------------------------------------------
    def add(self, name: bytes, ino: int, ftype: int) -> None:
        form = self.form()
        h = _hash(name)
        if form == SHORTFORM:
            self._sf_add(name, ino, ftype, h)
        elif form == BLOCK:
            self._block_add(name, ino, ftype, h)
        elif form == LEAF:
            self._leaf_add(name, ino, ftype, h)
        else:
            self._node_add(name, ino, ftype, h)
        self.dirty = True

    def _sf_tail(self):
        """(end of the last entry's space in the block form, entries) of the
        shortform fork, or None when its length is not what its entries
        take (an append then goes the general way)."""
        sf = self.sf
        tail = self._sf_end
        if tail[0] is sf:
            return tail[1]
        parent, ents = self._sf_ents()
        got = None
        if len(sf) == sf_size(parent, ents):
            e = ents[-1] if ents else None
            got = (_FIRST if e is None else e[0] + D.entsize(len(e[1])), len(ents))
        self._sf_end = (sf, got)
        return got

    def _sf_append(self, name, ino, ftype) -> bool:
        """The common shortform insert, as :meth:`_sf_add` makes it without
        re-encoding the fork: a name whose inode number fits 32 bits,
        appended after the last entry where the fork and the block form
        both have room for it.  False (nothing done) otherwise."""
        if ino > 0xFFFFFFFF:
            return False
        tail = self._sf_tail()
        if tail is None:
            return False
        end, count = tail
        sf = self.sf
        width = 8 if sf[1] else 4
        size = D.entsize(len(name))
        if count >= 254 or len(sf) + B.sf_entsize(len(name), 1, width) > self.dsize or \
                end + (count + 3) * B.LEAF_ENT + B.BLOCK_TAIL + size > self.dbs:
            return False
        new = bytes((count + 1,)) + sf[1:] + DIR2_SF_ENTRY.struct.pack(len(name), end) + name + \
            bytes((ftype,)) + ino.to_bytes(width, "big")
        _sf, parent, ents = self._sf_memo
        if _sf is sf:
            self._sf_memo = (new, parent, ents + ((end, name, ftype, ino),))
        self._sf_end = (new, (end + size, count + 1))
        self.sf = new
        self.size = len(new)
        return True

    def _sf_add(self, name, ino, ftype, h) -> None:
        if self._sf_append(name, ino, ftype):
            return
        parent, ents = self._sf_ents()
        new = ents + [(0, name, ftype, ino)]
        if sf_size(parent, new) > self.dsize:
            self._sf_to_block()
            return self._block_add(name, ino, ftype, h)
        size = D.entsize(len(name))
        off = _FIRST
        holefit = False
        for e in ents:
            if not holefit:
                holefit = off + size <= e[0]
            off = e[0] + D.entsize(len(e[1]))
        used = off + (len(ents) + 3) * B.LEAF_ENT + B.BLOCK_TAIL
        if used + (0 if holefit else size) > self.dbs:
            self._sf_to_block()
            return self._block_add(name, ino, ftype, h)
        objchange = ino > 0xFFFFFFFF and not any(e[3] > 0xFFFFFFFF for e in ents) \
            and parent <= 0xFFFFFFFF
        if objchange or used + size > self.dbs:
            # the hard way: the first hole that fits, in offset order
            off = _FIRST
            pos = len(ents)
            for k, e in enumerate(ents):
                if off + size <= e[0]:
                    pos = k
                    break
                off = e[0] + D.entsize(len(e[1]))
            ents.insert(pos, (off, name, ftype, ino))
        else:
            ents.append((off, name, ftype, ino))
        self.sf = self._sf_set(parent, ents)
        self.size = len(self.sf)

    def _sf_to_block(self) -> None:
        CONVERSIONS["sf->block"] += 1
        parent, ents = self._sf_ents()
        self.format = C.XFS_DINODE_FMT_EXTENTS
        self.sf = None
        self.size = 0
        dbs = self.dbs
        _da, buf = self.new_block(0, V.DIR3_DATA_ANY, C.XFS_DIR3_BLOCK_MAGIC, False)
        count = len(ents) + 2
        endoff = B.block_leaf_start(buf, count)
        B.put_block_tail(buf, count, 0)
        bf = [[0, 0], [0, 0], [0, 0]]
        D.put_entry(buf, HDR, self.ino, b".", C.XFS_DIR3_FT_DIR)
        D.put_entry(buf, _DOTDOT, parent, b"..", C.XFS_DIR3_FT_DIR)
        leaf = [(_hash(b"."), HDR >> 3), (_hash(b".."), _DOTDOT >> 3)]
        off = _FIRST
        for eoff, name, ft, ino in ents + [(endoff, None, 0, 0)]:
            if off < eoff:
                D.put_unused(buf, off, eoff - off)
                D.freeinsert(bf, off, eoff - off)
            if name is None:
                break
            off = eoff + D.put_entry(buf, eoff, ino, name, ft)
            leaf.append((_hash(name), eoff >> 3))
        leaf.sort(key=lambda e: e[0])
        _put_ents(buf, endoff, leaf)
        D.put_bf(buf, bf)
        self.size = dbs

    def _block_add(self, name, ino, ftype, h) -> None:
        buf = self.read(0, V.DIR3_DATA_ANY)
        # the common case (no stale entry, room before the leaf array: the
        # leaf array grows by one slot downwards) in one call
        if writers.dir_block_add(buf, name, ino, ftype, h):
            return
        length = D.entsize(len(name))
        count, stale = B.block_tail(buf)
        blp = B.block_leaf_start(buf, count)
        bf = D.get_bf(buf)
        compact = False
        enddup = dup = None
        if stale:
            if bf[0][1] >= length:
                dup = bf[0][0]
            else:
                compact = True
                d = B.tag_at(buf, blp)
                fl = D.free_len(buf, d)
                if fl is not None:
                    dup = d if fl + (stale - 1) * B.LEAF_ENT >= length else None
                elif (stale - 1) * B.LEAF_ENT < length:
                    dup = None
                else:
                    dup = blp
        else:
            d = B.tag_at(buf, blp)
            fl = D.free_len(buf, d)
            if fl is not None:
                enddup = d
                dup = bf[0][0]
                if dup != enddup:
                    if bf[0][1] < length:
                        dup = None
                elif fl < length + 8:
                    dup = bf[1][0] if bf[1][1] >= length else None
        if dup is None:
            self._block_to_leaf(buf)
            return self._leaf_add(name, ino, ftype, h)
        ents = _ents(buf, blp, count)
        if compact:
            # keep the highest-numbered stale entry, drop the others
            kept = []
            seen_stale = False
            for e in reversed(ents):
                if e[1] == 0:
                    if seen_stale:
                        continue
                    seen_stale = True
                kept.append(e)
            ents = kept[::-1]
            freed = (stale - 1) * B.LEAF_ENT
            count -= stale - 1
            stale = 1
            B.put_block_tail(buf, count, stale)
            D.make_free(buf, blp, freed)
            blp += freed
        mid = _lower_bound(ents, h) - 1
        if not stale:
            fl = D.free_len(buf, enddup)
            scan = D.use_free(buf, enddup, enddup + fl - 8, 8, defer=True)
            count += 1
            B.put_block_tail(buf, count, stale)
            blp -= 8
            if scan:
                D.freescan(buf)
            mid += 1
            ents.insert(mid, (h, 0))
        else:
            lowstale = mid
            while lowstale >= 0 and ents[lowstale][1] != 0:
                lowstale -= 1
            highstale = mid + 1
            while highstale < count and ents[highstale][1] != 0 and \
                    (lowstale < 0 or mid - lowstale > highstale - mid):
                highstale += 1
            if lowstale >= 0 and (highstale == count or mid - lowstale <= highstale - mid):
                del ents[lowstale]
                ents.insert(mid, (h, 0))
            else:
                mid += 1
                del ents[highstale]
                ents.insert(mid, (h, 0))
            stale -= 1
            B.put_block_tail(buf, count, stale)
        ents[mid] = (h, dup >> 3)
        _put_ents(buf, blp, ents)
        _put_at(buf, dup, length, ino, name, ftype)

    def _block_to_leaf(self, buf) -> None:
        CONVERSIONS["block->leaf"] += 1
        dbs = self.dbs
        count, stale = B.block_tail(buf)
        blp = B.block_leaf_start(buf, count)
        ents = _ents(buf, blp, count)
        _lda, lbuf = self.new_block(self.leafblk, V.DA3_NODE_OR_LEAF, C.XFS_DIR3_LEAF1_MAGIC,
                                    True)
        B.put_leaf_count_stale(lbuf, count, stale)
        _put_ents(lbuf, B.LEAF_HDR, ents)
        scan = D.make_free(buf, blp, dbs - blp, defer=True)
        B.set_data_magic(buf, C.XFS_DIR3_DATA_MAGIC)
        if scan:
            D.freescan(buf)
        B.put_leaf_bests(lbuf, [D.get_bf(buf)[0][1]])

    # leaf form
    def _leaf_read(self):
        lbuf = self.read(self.leafblk)
        count, stale = B.leaf_count_stale(lbuf)
        ents = _ents(lbuf, B.LEAF_HDR, count)
        bests = B.leaf_bests(lbuf)
        return lbuf, ents, stale, bests

    def _leaf_write(self, lbuf, ents, stale, bests) -> None:
        B.put_leaf_count_stale(lbuf, len(ents), stale)
        _put_ents(lbuf, B.LEAF_HDR, ents)
        B.put_leaf_bests(lbuf, bests)

    def _leaf_add(self, name, ino, ftype, h) -> None:
        dbs = self.dbs
        lbuf = self.read(self.leafblk)
        count, stale = B.leaf_count_stale(lbuf)
        # read where they lie: the whole array is decoded only for the
        # rare changes that rearrange it (stale entries, conversion)
        ents = _BufEnts(lbuf, B.LEAF_HDR, count)
        bests = B.leaf_bests(lbuf)
        length = D.entsize(len(name))
        index = _lower_bound(ents, h)
        use = -1
        while index < len(ents) and ents[index][0] == h:
            addr = ents[index][1]
            if addr:
                db = (addr << 3) // dbs
                if bests[db] >= length:
                    use = db
                    break
            index += 1
        if use == -1:
            for i, b in enumerate(bests):
                if b == NULLOFF and use == -1:
                    use = i
                elif b != NULLOFF and b >= length:
                    use = i
                    break
        need = (0 if stale else 8) + (2 if use == -1 else 0)
        if use != -1 and bests[use] == NULLOFF:
            use = -1
        room = B.leaf_bests_start(lbuf, len(bests)) - (B.LEAF_HDR + B.LEAF_ENT * len(ents))
        compact = False
        lowstale = highstale = None
        if room < need and stale > 1:
            compact = True
        elif room < need:
            self._leaf_to_node(lbuf, _ents(lbuf, B.LEAF_HDR, count), stale, bests)
            return self._node_add(name, ino, ftype, h)
        if compact:
            ents, stale, index, lowstale, highstale = _compact_x1(
                _ents(lbuf, B.LEAF_HDR, count), stale, index)
        if use == -1:
            da, dbuf = self.new_block(0, V.DIR3_DATA_ANY, C.XFS_DIR3_DATA_MAGIC, False)
            D.init_data(dbuf, C.XFS_DIR3_DATA_MAGIC)
            use = da // self.fsbs
            if use >= len(bests):
                bests.append(0)
            bests[use] = D.get_bf(dbuf)[0][1]
        else:
            dbuf = self.read(use * self.fsbs, V.DIR3_DATA_ANY)
        dup = D.get_bf(dbuf)[0][0]
        _put_at(dbuf, dup, length, ino, name, ftype)
        bests[use] = D.get_bf(dbuf)[0][1]
        addr = (use * dbs + dup) >> 3
        if not stale and not compact:
            # the common case: no stale entry, the new one goes in at
            # ``index``, the ones above it move up one slot in place
            # (room for it was checked above)
            E = B.LEAF_ENT
            at = B.LEAF_HDR + E * index
            end = B.LEAF_HDR + E * count
            lbuf[at + E:end + E] = lbuf[at:end]
            B.put_leaf_entry(lbuf, B.LEAF_HDR, index, h, addr)
            B.put_leaf_count_stale(lbuf, count + 1, 0)
            B.put_leaf_bests(lbuf, bests)
            return
        if not compact:
            ents = _ents(lbuf, B.LEAF_HDR, count)
        ents, stale, slot = _find_entry(ents, stale, index, compact, lowstale, highstale)
        ents[slot] = (h, addr)
        self._leaf_write(lbuf, ents, stale, bests)

    def _leaf_to_node(self, lbuf, ents, stale, bests) -> None:
        CONVERSIONS["leaf->node"] += 1
        _fda, fbuf = self.new_block(self.freeblk, V.DIR3_FREE, C.XFS_DIR3_FREE_MAGIC, False)
        nused = sum(1 for b in bests if b != NULLOFF)
        B.put_free_hdr(fbuf, 0, len(bests), nused)
        B.put_free_bests(fbuf, bests)
        B.put_leaf_count_stale(lbuf, len(ents), stale)
        _put_ents(lbuf, B.LEAF_HDR, ents)
        dabtree.set_magic(lbuf, C.XFS_DIR3_LEAFN_MAGIC)

    # node form
    def _free_loc(self, db: int):
        k, findex = divmod(db, self.max_bests)
        return self.freeblk + k * self.fsbs, findex

    def _free_read(self, fda: int):
        fbuf = self.read(fda, V.DIR3_FREE)
        firstdb, nvalid, nused = B.free_hdr(fbuf)
        bests = B.free_bests(fbuf, nvalid)
        return fbuf, firstdb, nused, bests

    @staticmethod
    def _free_write(fbuf, nused, bests) -> None:
        B.put_free_counts(fbuf, len(bests), nused)
        B.put_free_bests(fbuf, bests)

    def _node_add(self, name, ino, ftype, h) -> None:
        dbs = self.dbs
        length = D.entsize(len(name))
        path = self._node_path(h)
        lda, lbuf, index = path[-1]
        count = B.leaf_count(lbuf)
        ents = _ents(lbuf, B.LEAF_HDR, count)
        # a data block holding an entry of the same hash, with room
        use = None
        while index < count and ents[index][0] == h:
            if ents[index][1]:
                db = (ents[index][1] << 3) // dbs
                fda, fi = self._free_loc(db)
                if self.exists(fda):
                    _fb, _f, _n, fb = self._free_read(fda)
                    if fi < len(fb) and fb[fi] != NULLOFF and fb[fi] >= length:
                        use = db
                        break
            index += 1
        path[-1] = (lda, lbuf, index)
        if use is None:
            use = self._node_find_free(length)
        if use is None:
            da, dbuf = self.new_block(0, V.DIR3_DATA_ANY, C.XFS_DIR3_DATA_MAGIC, False)
            D.init_data(dbuf, C.XFS_DIR3_DATA_MAGIC)
            use = da // self.fsbs
            fda, fi = self._free_loc(use)
            if self.exists(fda):
                fbuf, _first, nused, fb = self._free_read(fda)
            else:
                got, fbuf = self.new_block(self.freeblk, V.DIR3_FREE, C.XFS_DIR3_FREE_MAGIC,
                                           False)
                if got != fda:
                    raise CorruptionError("directory", f"free block {fda} needed, {got} "
                                          "was the first hole", ino=self.ino)
                B.put_free_hdr(fbuf, (fda - self.freeblk) // self.fsbs * self.max_bests, 0, 0)
                nused, fb = 0, []
            while len(fb) <= fi:
                fb.append(NULLOFF)
            if fb[fi] == NULLOFF:
                nused += 1
            fb[fi] = D.get_bf(dbuf)[0][1]
        else:
            dbuf = self.read(use * self.fsbs, V.DIR3_DATA_ANY)
            fda, fi = self._free_loc(use)
            fbuf, _first, nused, fb = self._free_read(fda)
        dup = D.get_bf(dbuf)[0][0]
        _put_at(dbuf, dup, length, ino, name, ftype)
        fb[fi] = D.get_bf(dbuf)[0][1]
        self._free_write(fbuf, nused, fb)
        addr = (use * dbs + dup) >> 3
        if not self._leafn_add(lbuf, index, h, addr):
            self._split(path, h, addr)
        else:
            self.da.fixhashpath(path)

    def _node_find_free(self, length: int):
        """A data block with room, from the free-index blocks scanned from the
        last one back (xfs_dir2_node_find_freeblk)."""
        last = self.exts[-1][0] + self.exts[-1][2]
        fda = last - self.fsbs
        while fda >= self.freeblk:
            if self.exists(fda):
                _fb, firstdb, _nu, bests = self._free_read(fda)
                for k in range(len(bests) - 1, -1, -1):
                    if bests[k] != NULLOFF and bests[k] >= length:
                        return firstdb + k
            fda -= self.fsbs
        return None

    def _leafn_add(self, lbuf, index: int, h: int, addr: int) -> bool:
        count, stale = B.leaf_count_stale(lbuf)
        ents = _ents(lbuf, B.LEAF_HDR, count)
        compact = False
        lowstale = highstale = None
        if count == self.max_leaf:
            if not stale:
                return False
            compact = stale > 1
        if compact:
            ents, stale, index, lowstale, highstale = _compact_x1(ents, stale, index)
        ents, stale, slot = _find_entry(ents, stale, index, compact, lowstale, highstale)
        ents[slot] = (h, addr)
        B.put_leaf_count_stale(lbuf, len(ents), stale)
        _put_ents(lbuf, B.LEAF_HDR, ents)
        return True

    def _split(self, path, h: int, addr: int) -> None:
        """xfs_da3_split for a full leaf: a new leaf after it takes half the
        entries, the new entry goes where the kernel puts it, and the parent
        gains an entry (a leaf at the root is first moved down under a new
        root node)."""
        oda, obuf, index = path[-1]
        CONVERSIONS["split"] += 1
        nda, nbuf = self.new_block(self.leafblk, V.DA3_NODE_OR_LEAF, C.XFS_DIR3_LEAFN_MAGIC,
                                   True)
        c1, s1 = B.leaf_count_stale(obuf)
        e1 = _ents(obuf, B.LEAF_HDR, c1)
        mid = c1 >> 1
        isleft = h <= e1[mid][0] if c1 & 1 else True
        move = c1 - mid + (0 if isleft else 1)
        e2 = e1[c1 - move:]
        e1 = e1[:c1 - move]
        s2 = sum(1 for e in e2 if e[1] == 0)
        s1 -= s2
        B.put_leaf_count_stale(obuf, len(e1), s1)
        _put_ents(obuf, B.LEAF_HDR, e1)
        B.put_leaf_count_stale(nbuf, len(e2), s2)
        _put_ents(nbuf, B.LEAF_HDR, e2)
        if len(e1) < len(e2):
            inleaf = False
        elif len(e1) > len(e2):
            inleaf = True
        else:
            inleaf = index <= len(e1)
        nindex = index
        if not inleaf:
            nindex = index - len(e1)
            if nindex < 0:
                inleaf, nindex = True, index
        self.da.link_after(oda, obuf, nda, nbuf)
        if inleaf:
            self._leafn_add(obuf, index, h, addr)
        else:
            self._leafn_add(nbuf, nindex, h, addr)
        self.da.add_to_parent(path, len(path) - 2, oda, obuf, nda, nbuf)

    # -- removing -----------------------------------------------------------------------
    def remove(self, name: bytes):
        """Remove ``name``; returns (ino, ftype) it named, or None when absent."""
        r = self._find(name)
        if r is None:
            return None
        ino, ft, where = r
        kind = where[0]
        if kind == SHORTFORM:
            self._sf_remove(where[1])
        elif kind == BLOCK:
            self._block_remove(where[1])
        elif kind == LEAF:
            self._leaf_remove(where[1])
        else:
            self._node_remove(where[1])
        self.dirty = True
        return ino, ft

    def _sf_remove(self, k: int) -> None:
        parent, ents = self._sf_ents()
        del ents[k]
        self.sf = self._sf_set(parent, ents)
        self.size = len(self.sf)

    def _block_remove(self, i: int) -> None:
        buf = self.read(0, V.DIR3_DATA_ANY)
        count, stale = B.block_tail(buf)
        blp = B.block_leaf_start(buf, count)
        h, addr = B.leaf_entry(buf, blp, i)
        off = addr << 3
        size = D.entsize(B.entry_head(buf, off)[1])
        D.make_free(buf, off, size)
        B.put_block_tail(buf, count, stale + 1)
        B.put_leaf_entry(buf, blp, i, h, 0)
        self._maybe_block_to_sf(buf)

    def _block_sf(self, buf):
        """(parent, sf entries) of a block-form block."""
        parent = self.ino
        ents = []
        for off, _n, free in D.regions(buf):
            if free:
                continue
            ino, name, ft, _s = D.entry_at(buf, off)
            if name == b".":
                continue
            if name == b"..":
                parent = ino
                continue
            ents.append((off, name, ft, ino))
        return parent, ents

    def _maybe_block_to_sf(self, buf) -> None:
        count, stale = B.block_tail(buf)
        live = count - stale
        # quick bound: every entry takes at least 9 bytes in shortform
        if 6 + (live - 2) * 9 > self.dsize:
            return
        parent, ents = self._block_sf(buf)
        if sf_size(parent, ents) > self.dsize:
            return
        CONVERSIONS["block->sf"] += 1
        self.shrink(0)
        self.format = C.XFS_DINODE_FMT_LOCAL
        self.sf = sf_encode(parent, ents)
        self.size = len(self.sf)

    def _leaf_remove(self, i: int) -> None:
        dbs = self.dbs
        lbuf, ents, stale, bests = self._leaf_read()
        h, addr = ents[i]
        db, off = divmod(addr << 3, dbs)
        dbuf = self.read(db * self.fsbs, V.DIR3_DATA_ANY)
        D.make_free(dbuf, off, D.entsize(dbuf[off + 8]))
        stale += 1
        ents[i] = (h, 0)
        longest = D.get_bf(dbuf)[0][1]
        if longest != bests[db]:
            bests[db] = longest
        if longest == dbs - HDR:
            self.shrink(db * self.fsbs)
            if db == len(bests) - 1:
                k = db - 1
                while k > 0 and bests[k] == NULLOFF:
                    k -= 1
                del bests[k + 1:]
            else:
                bests[db] = NULLOFF
        self._leaf_write(lbuf, ents, stale, bests)
        self._leaf_to_block(lbuf, ents, stale, bests)

    def _leaf_to_block(self, lbuf, ents, stale, bests) -> None:
        dbs = self.dbs
        while self.size > dbs:
            if bests[-1] == dbs - HDR:
                self.shrink((len(bests) - 1) * self.fsbs)
                bests.pop()
                self._leaf_write(lbuf, ents, stale, bests)
            else:
                return
        dbuf = self.read(0, V.DIR3_DATA_ANY)
        live = [e for e in ents if e[1]]
        need = B.BLOCK_TAIL + B.LEAF_ENT * len(live)
        dup = B.tag_at(dbuf, dbs)
        fl = D.free_len(dbuf, dup)
        if fl is None or fl < need:
            return
        CONVERSIONS["leaf->block"] += 1
        B.set_data_magic(dbuf, C.XFS_DIR3_BLOCK_MAGIC)
        scan = D.use_free(dbuf, dup, dbs - need, need, defer=True)
        B.put_block_tail(dbuf, len(live), 0)
        _put_ents(dbuf, dbs - need, live)
        if scan:
            D.freescan(dbuf)
        self.shrink(self.leafblk)
        self._maybe_block_to_sf(dbuf)

    def _node_remove(self, path) -> None:
        dbs = self.dbs
        lda, lbuf, i = path[-1]
        count, stale = B.leaf_count_stale(lbuf)
        h, addr = B.leaf_entry(lbuf, B.LEAF_HDR, i)
        B.put_leaf_entry(lbuf, B.LEAF_HDR, i, h, 0)
        stale += 1
        B.put_leaf_count_stale(lbuf, count, stale)
        db, off = divmod(addr << 3, dbs)
        dbuf = self.read(db * self.fsbs, V.DIR3_DATA_ANY)
        before = D.get_bf(dbuf)[0][1]
        D.make_free(dbuf, off, D.entsize(dbuf[off + 8]))
        longest = D.get_bf(dbuf)[0][1]
        if before < longest:
            fda, fi = self._free_loc(db)
            fbuf, _first, nused, fb = self._free_read(fda)
            if longest == dbs - HDR:
                self.shrink(db * self.fsbs)
                if fi == len(fb) - 1:
                    k = fi - 1
                    while k >= 0 and fb[k] == NULLOFF:
                        k -= 1
                    del fb[k + 1:]
                else:
                    fb[fi] = NULLOFF
                nused -= 1
                if not nused:
                    self.shrink(fda)
                else:
                    self._free_write(fbuf, nused, fb)
            else:
                fb[fi] = longest
                self._free_write(fbuf, nused, fb)
        toosmall = B.LEAF_HDR + B.LEAF_ENT * (count - stale) < dbs * 37 // 100
        self.da.fixhashpath(path)
        if toosmall and len(path) > 1:
            self._join(path)
        self._node_to_leaf()

    def _join(self, path) -> None:
        """xfs_da3_join for a leaf that became small: merged into a sibling
        with room (the lower-numbered block kept), the parent entry removed,
        and a root node left with one child replaced by that child."""
        dbs = self.dbs
        lda, lbuf, _i = path[-1]
        count, stale = B.leaf_count_stale(lbuf)
        live = count - stale
        if B.LEAF_HDR + B.LEAF_ENT * live > dbs >> 1:
            return
        forw, back = dabtree.siblings(lbuf)
        other = None
        if live == 0:
            other = forw or back
            if not other:
                return
        else:
            forward = forw < back
            for _k in range(2):
                blk = forw if forward else back
                forward = not forward
                if not blk:
                    continue
                sbuf = self.read(blk)
                sc, ss = B.leaf_count_stale(sbuf)
                if dbs - (dbs >> 2) - B.LEAF_ENT * (live + sc - ss) >= 0:
                    other = blk
                    break
            if other is None:
                return
        if live == 0 or other < lda:
            save_da, drop_da = other, lda
        else:
            save_da, drop_da = lda, other
        other_path = self.da.path_to(other)
        if other_path is None:
            return
        save_path, drop_path = (other_path, path) if save_da == other else (path, other_path)
        CONVERSIONS["join"] += 1
        sbuf, dbuf = self.read(save_da), self.read(drop_da)
        se = [e for e in _ents(sbuf, B.LEAF_HDR, B.leaf_count(sbuf)) if e[1]]
        de = [e for e in _ents(dbuf, B.LEAF_HDR, B.leaf_count(dbuf)) if e[1]]
        if se and de and (de[0][0] < se[0][0] or de[-1][0] < se[-1][0]):
            merged = de + se
        else:
            merged = se + de
        B.put_leaf_count_stale(sbuf, len(merged), 0)
        _put_ents(sbuf, B.LEAF_HDR, merged)
        self.da.fix_up(save_path, len(save_path) - 1)
        self.da.unlink(dbuf)
        self.shrink(drop_da)
        # the parent entries: the dropped leaf's goes, the kept one's hash follows
        self.da.drop_child(drop_path, len(drop_path) - 2, drop_da, save_da,
                         dabtree.lasthash(sbuf))
        self.da.root_join()

    def _node_to_leaf(self) -> None:
        dbs = self.dbs
        root = self.read(self.leafblk)
        if dabtree.magic(root) != C.XFS_DIR3_LEAFN_MAGIC:
            return
        last = self.exts[-1][0] + self.exts[-1][2] - self.fsbs
        if last != self.freeblk:
            return
        # the block before the free space must be the leaf
        before = max((o + n for o, _b, n in self.exts if o < self.freeblk), default=0)
        if before > self.leafblk + self.fsbs:
            return
        fbuf, _first, _nused, fb = self._free_read(self.freeblk)
        count, stale = B.leaf_count_stale(root)
        if B.LEAF_HDR + B.LEAF_ENT * (count - stale) + 2 * len(fb) + B.LEAF_TAIL > dbs:
            return
        CONVERSIONS["node->leaf"] += 1
        ents = [e for e in _ents(root, B.LEAF_HDR, count) if e[1]]
        dabtree.set_magic(root, C.XFS_DIR3_LEAF1_MAGIC)
        self._leaf_write(root, ents, 0, fb)
        self.shrink(self.freeblk)

    # -- replacing ------------------------------------------------------------------------
    def replace(self, name: bytes, ino: int, ftype: int):
        """Point ``name`` at another inode; returns the old (ino, ftype)."""
        r = self._find(name)
        if r is None:
            return None
        old_ino, old_ft, where = r
        if where[0] == SHORTFORM:
            parent, ents = self._sf_ents()
            if where[1] == -1:
                parent = ino
            else:
                off, n, _f, _i = ents[where[1]]
                ents[where[1]] = (off, n, ftype, ino)
            new = sf_encode(parent, ents)
            if len(new) > self.dsize:
                self._sf_to_block()
                return self.replace(name, ino, ftype)
            self.sf = new
            self.size = len(new)
        else:
            if where[0] == BLOCK:
                buf = self.read(0, V.DIR3_DATA_ANY)
                addr = B.leaf_entry(buf, B.block_leaf_start(buf, B.block_tail(buf)[0]),
                                    where[1])[1]
            elif where[0] == LEAF:
                lbuf = self.read(self.leafblk)
                addr = B.leaf_entry(lbuf, B.LEAF_HDR, where[1])[1]
            else:
                _da, lbuf, i = where[1][-1]
                addr = B.leaf_entry(lbuf, B.LEAF_HDR, i)[1]
            db, off = divmod(addr << 3, self.dbs)
            dbuf = self.read(db * self.fsbs, V.DIR3_DATA_ANY)
            B.set_entry_ino(dbuf, off, ino)
            dbuf[off + B.ENTRY + B.entry_head(dbuf, off)[1]] = ftype
        self.dirty = True
        return old_ino, old_ft


def _put_at(buf, dup: int, length: int, ino: int, name: bytes, ftype: int) -> None:
    """A new entry (of ``length`` bytes) at the start of the unused region
    ``dup``; the bestfree rescan, when due, once the entry is there (as the
    kernel orders it)."""
    writers.dir_put_entry(buf, dup, ino, name, ftype)


def _compact_x1(ents, stale: int, index: int):
    """xfs_dir3_leaf_compact_x1: squeeze out all stale entries but the one
    nearest ``index``; returns (ents, stale, index, lowstale, highstale)."""
    count = len(ents)
    lowstale = index - 1
    while lowstale >= 0 and ents[lowstale][1] != 0:
        lowstale -= 1
    highstale = index
    while highstale < count and ents[highstale][1] != 0 and \
            (lowstale < 0 or index - lowstale > highstale - index):
        highstale += 1
    if lowstale >= 0 and (highstale == count or index - lowstale <= highstale - index):
        keep = lowstale
    else:
        keep = highstale
    out = []
    newindex = None
    for frm, e in enumerate(ents):
        if frm == index:
            newindex = len(out)
        if frm != keep and e[1] == 0:
            continue
        if frm == keep:
            lowstale = highstale = len(out)
        out.append(e)
    if newindex is None:
        newindex = len(out)
    if lowstale >= newindex:
        lowstale = -1
    else:
        highstale = len(out)
    return out, 1, newindex, lowstale, highstale


def _find_entry(ents, stale: int, index: int, compact: bool, lowstale, highstale):
    """xfs_dir3_leaf_find_entry: make a slot for a new entry at ``index``,
    using the nearest stale entry when there is one; (ents, stale, slot)."""
    if not stale:
        ents.insert(index, (0, 0))
        return ents, stale, index
    count = len(ents)
    if not compact:
        lowstale = index - 1
        while lowstale >= 0 and ents[lowstale][1] != 0:
            lowstale -= 1
        highstale = index
        while highstale < count and ents[highstale][1] != 0 and \
                (lowstale < 0 or index - lowstale - 1 >= highstale - index):
            highstale += 1
    if lowstale >= 0 and (highstale == count or index - lowstale - 1 < highstale - index):
        del ents[lowstale]
        ents.insert(index - 1, (0, 0))
        return ents, stale - 1, index - 1
    del ents[highstale]
    ents.insert(index, (0, 0))
    return ents, stale - 1, index


__all__ = ["Dir", "sf_parse", "sf_encode", "FsToolError"]
