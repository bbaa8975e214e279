"""Write engine for XFS v5 btrees: insert, delete, update, bulk load.

Every tree is described once, by its :class:`~fstool.fs.btree.BtreeType`
(block format, magic, record and key codec): the read walk in
``fstool.fs.btree`` and this engine both take that descriptor.  This module
changes trees.  It follows the kernel's libxfs btree rules, because
xfs_repair and the kernel verifiers judge the result by them:

* a block holds at most ``maxrecs`` entries and, unless it is the root, at
  least ``minrecs = maxrecs // 2`` (xfs_repair rejects a lighter non-root
  block);
* every key in a node block equals the lowest key below its pointer;
* siblings at one level form a doubly linked chain, NULL at both ends.

Inserting into a full block first tries to pass one entry to the right
sibling, then to the left sibling, and only then splits the block in two
(the right half gets ``n // 2`` entries, one more when ``n`` is odd and the
new entry lands in the left half).  A full root splits the same way and gets
a new root above it.  Deleting below ``minrecs`` borrows one entry from the
right sibling, else from the left, else merges with the left sibling, else
with the right; the merge removes an entry one level up and so may cascade.
A root node left with a single child is freed and the child becomes the
root.  These are the kernel's choices, in the kernel's order.

Per-AG trees (:class:`ShortBtree`: bnobt, cntbt, inobt, finobt) keep their
root in a block named by the AGF/AGI.  The block-mapping btree
(:class:`BmbtTree`) keeps its root in the inode fork, with room for fewer
entries than a block: when that root is full its entries move down into a
new block and the root keeps one pointer to it; when a root above level 1
is down to one pointer and the child's entries fit, they move back up.
The root's only child is exempt from minrecs (the kernel leaves it so and
xfs_repair does not check it).

An insert may allocate up to one block per level plus one
(``max_alloc_per_op``); the caller makes sure ``alloc`` cannot fail part
way (the kernel fixes up the AGFL and reserves blocks before it starts),
since a failed split leaves the tree half changed.

Bulk loading builds a fresh tree bottom-up from sorted records the way the
kernel's staging loader (used by xfs_repair phase 5 and online repair) does:
each level is spread evenly over ``max(1, nr // (maxrecs - slack))`` blocks;
the default slack fills blocks halfway between minrecs and maxrecs (about
75 %); xfs_repair uses a slack of 2 when its AG is short of space.

Blocks are reached through a :class:`BlockStore` supplied by the caller (the
transaction layer): it hands out buffers, allocates and frees blocks and is
told which buffers changed.  The engine never stamps CRCs or LSNs: the
journal's write verifier does, once, when a block is logged or written.

Records are the tuples ``fstool.fs.btree`` decoders return: free space
``(startblock, blockcount)``, inode chunks ``(startino, holemask, count,
freecount, free)``, extents ``(startoff, startblock, blockcount, unwritten)``.
Inside blocks everything stays packed: searches read keys with precompiled
``struct`` objects and moves are ``bytearray`` slice copies, so one
operation costs a handful of microseconds per level.
"""
from __future__ import annotations

import struct
from typing import Callable, Iterator, Protocol, Sequence

from ..errors import CorruptionError, FsToolError, InvalidArgument
from ..format import constants as C
from .btree import (BMBT, LBLOCK_HDR_LEN, LONG, NULLAGBLOCK, NULLFSBLOCK, SHORT, BlockForm,
                    BtreeType, Codec)

BMDR_HDR_LEN = 4                                  # xfs_bmdr_block: level, numrecs
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_BMDR = struct.Struct(">HH")


class BtreeKeyError(FsToolError, KeyError):
    """A record operation named a key the tree does not (or already) holds."""

    def __str__(self) -> str:          # KeyError would print the repr
        return str(self.args[0]) if self.args else ""


class DuplicateKeyError(BtreeKeyError):
    """insert() of a key that is already in the tree."""


class MissingKeyError(BtreeKeyError):
    """delete()/update() of a key that is not in the tree."""


class BlockStore(Protocol):
    """Block access supplied by the caller (the transaction layer).

    ``read`` must return the same mutable buffer for an address until the
    caller commits (a buffer cache), because the engine may reach one block
    by two routes during an operation and relies on seeing its own changes.
    """
    blocksize: int

    def read(self, addr: int) -> bytearray: ...       # verified, mutable buffer
    def new(self, addr: int) -> bytearray: ...        # zeroed buffer, just allocated
    def dirty(self, addr: int) -> None: ...           # buffer changed; caller stamps CRC
    def alloc(self, near: int) -> int: ...            # a free block for the tree
    def free(self, addr: int) -> None: ...            # block left the tree
    def daddr(self, addr: int) -> int: ...            # for bb_blkno


# --------------------------------------------------------------------------
# Block geometry
# --------------------------------------------------------------------------

def bmdr_maxrecs(root_space: int) -> int:
    """Key/pointer pairs that fit a bmbt root of ``root_space`` bytes in an
    inode fork (records never live in the inode root)."""
    return (root_space - BMDR_HDR_LEN) // 16


class _Shape:
    """Per-tree constants shared by the incremental engine and the loader."""

    def __init__(self, bt: BtreeType, blocksize: int, maxrecs: tuple[int, int] | None):
        form = bt.form
        codec = bt.codec
        self.form = form
        self.codec = codec
        self.blocksize = blocksize
        phys_leaf = bt.maxrecs(blocksize, True)
        phys_node = bt.maxrecs(blocksize, False)
        if maxrecs is None:
            leaf, node = phys_leaf, phys_node
        else:
            # a smaller logical capacity: lets tests build tall trees from
            # few records; the on-disk layout (pointer offset) is unchanged
            leaf, node = maxrecs
            if not (4 <= leaf <= phys_leaf and 4 <= node <= phys_node):
                raise InvalidArgument(f"maxrecs {maxrecs} outside 4..({phys_leaf}, {phys_node})")
        self.maxrecs = (leaf, node)
        self.minrecs = (leaf // 2, node // 2)
        self.hdr = form.hdr
        self.ptroff = form.hdr + phys_node * codec.key_len


# --------------------------------------------------------------------------
# Incremental engine
# --------------------------------------------------------------------------

_IROOT = -1          # address standing for a root kept in an inode fork


class _Engine:
    """Insert, delete, update and lookups over packed blocks.

    A path is a list indexed by level (0 = leaf) of ``(addr, buf, index)``:
    the blocks from the root down to one leaf and the entry used in each.
    Subclasses say where the root lives.
    """

    _in_inode = False

    def _setup(self, bt: BtreeType, store: BlockStore, owner: int, uuid: bytes, maxrecs,
               where: dict) -> None:
        form = bt.form
        codec = bt.codec
        self.bt = bt
        self.magic = bt.magic
        self.codec = codec
        self.store = store
        self.uuid = bytes(uuid)
        self.nblocks_delta = 0
        # counts the changes made through this object (update, insert,
        # delete): a caller's note of a record stays good while it is unchanged
        self.gen = 0
        self.keys_gen = 0         # the same for insert and delete only
        self._form = form
        self._owner = owner
        self._where = where
        shape = _Shape(bt, store.blocksize, maxrecs)
        self.shape = shape
        self._maxrecs = shape.maxrecs
        self._minrecs = shape.minrecs
        self._hdr = shape.hdr
        self._ptroff = shape.ptroff
        self._rl = codec.rec_len
        self._kl = codec.key_len
        self._ps = form.ptr
        self._pl = form.ptr_len
        self._null = form.null
        self._right_off = form.right_off
        # an overlapping tree (the rmapbt) keys each child by its low key and
        # the greatest high key below it: the blocks an operation changed
        # are remembered and their high keys set right when it ends
        # (:meth:`_fix_high_keys`); low keys are kept as in any tree
        self._overlap = codec.overlapping
        self._shift = True
        self._touched: set = set()
        self._freed: set = set()

    # -- block primitives ------------------------------------------------
    @staticmethod
    def _numrecs(buf) -> int:
        return (buf[6] << 8) | buf[7]

    def _sibs(self, buf) -> tuple[int, int]:
        return self._form.sibs.unpack_from(buf, 8)

    def _set_left(self, buf, addr: int) -> None:
        self._ps.pack_into(buf, 8, addr)

    def _set_right(self, buf, addr: int) -> None:
        self._ps.pack_into(buf, self._right_off, addr)

    def _ptr(self, buf, i: int) -> int:
        return self._ps.unpack_from(buf, self._ptroff + self._pl * i)[0]

    def _corrupt(self, addr: int, detail: str, field: str | None = None):
        return CorruptionError(f"{self.codec.name} block", detail, block=addr, field=field,
                               **self._where)

    def _dirty(self, addr: int) -> None:
        self.store.dirty(addr)
        if self._overlap:
            self._touched.add(addr)

    def _cap(self, level: int) -> int:
        return self._maxrecs[level > 0]

    def _read(self, addr: int, level: int) -> bytearray:
        buf = self.store.read(addr)
        if ((buf[4] << 8) | buf[5]) != level:
            raise self._corrupt(addr, f"level {(buf[4] << 8) | buf[5]}, expected {level}",
                                "bb_level")
        if ((buf[6] << 8) | buf[7]) > self._maxrecs[level > 0]:
            raise self._corrupt(addr, f"{(buf[6] << 8) | buf[7]} records, at most "
                                f"{self._maxrecs[level > 0]}", "bb_numrecs")
        return buf

    def _low_key(self, buf, level: int) -> bytes:
        """On-disk key naming this block in its parent."""
        if level == 0:
            return self.codec.rec_key_bytes(buf, self._hdr)
        return bytes(buf[self._hdr:self._hdr + self._kl])

    def _take(self, buf, level: int, start: int, stop: int) -> tuple[bytes, bytes]:
        """Entries [start, stop) as packed (records or keys, pointers)."""
        h = self._hdr
        if level == 0:
            rl = self._rl
            return bytes(buf[h + start * rl:h + stop * rl]), b""
        kl, p, pl = self._kl, self._ptroff, self._pl
        return (bytes(buf[h + start * kl:h + stop * kl]),
                bytes(buf[p + pl * start:p + pl * stop]))

    def _put(self, buf, level: int, pos: int, n: int, chunk: tuple[bytes, bytes]) -> int:
        """Insert packed entries at ``pos`` of a block holding ``n``; returns
        the new count (numrecs is updated)."""
        h = self._hdr
        a, b = chunk
        la = len(a)
        if level == 0:
            m = la // self._rl
            off, end = h + pos * self._rl, h + n * self._rl
            if pos < n:
                buf[off + la:end + la] = buf[off:end]
            buf[off:off + la] = a
        else:
            kl, p, pl = self._kl, self._ptroff, self._pl
            m = la // kl
            off, end = h + pos * kl, h + n * kl
            if pos < n:
                buf[off + la:end + la] = buf[off:end]
            buf[off:off + la] = a
            lb = len(b)
            off, end = p + pl * pos, p + pl * n
            if pos < n:
                buf[off + lb:end + lb] = buf[off:end]
            buf[off:off + lb] = b
        n += m
        buf[6] = n >> 8
        buf[7] = n & 0xFF
        return n

    def _cut(self, buf, level: int, pos: int, n: int, m: int) -> int:
        """Remove ``m`` entries at ``pos``; the vacated tail is zeroed."""
        h = self._hdr
        if level == 0:
            rl = self._rl
            off, end, gap = h + pos * rl, h + n * rl, m * rl
            buf[off:end - gap] = buf[off + gap:end]
            buf[end - gap:end] = bytes(gap)
        else:
            kl, p, pl = self._kl, self._ptroff, self._pl
            off, end, gap = h + pos * kl, h + n * kl, m * kl
            buf[off:end - gap] = buf[off + gap:end]
            buf[end - gap:end] = bytes(gap)
            off, end, gap = p + pl * pos, p + pl * n, pl * m
            buf[off:end - gap] = buf[off + gap:end]
            buf[end - gap:end] = bytes(gap)
        n -= m
        buf[6] = n >> 8
        buf[7] = n & 0xFF
        return n

    def _new_block(self, near: int, level: int, left: int, right: int) -> tuple[int, bytearray]:
        addr = self.store.alloc(near)
        buf = self.store.new(addr)
        self._form.init_header(buf, self.magic, level, 0, left, right,
                               self.store.daddr(addr), self.uuid, self._owner)
        self.nblocks_delta += 1
        return addr, buf

    def _free_block(self, addr: int) -> None:
        self.store.free(addr)
        self.nblocks_delta -= 1
        if self._overlap:
            self._freed.add(addr)

    # -- overlapping trees: high keys ------------------------------------------
    def _block_key(self, buf, level: int) -> bytes:
        """The whole key naming a block of an overlapping tree in its
        parent: its first low key and the greatest high key of its entries."""
        return self.codec.entries_key(buf, self._hdr, self._numrecs(buf), level == 0)

    def _parent_entry(self, addr: int, level: int, key) -> tuple:
        """(parent address, parent buffer, index) of the entry pointing at
        block ``addr`` of ``level``, found by descending towards ``key``
        (the block's low key, as a comparison tuple)."""
        a = self.root
        h, kl = self._hdr, self._kl
        node_key_at = self.codec.node_key_at
        for lv in range(self.levels - 1, level, -1):
            buf = self._read(a, lv)
            n = self._numrecs(buf)
            lo, hi = 0, n
            while lo < hi:
                mid = (lo + hi) >> 1
                if node_key_at(buf, h + mid * kl) <= key:
                    lo = mid + 1
                else:
                    hi = mid
            i = lo - 1 if lo else 0
            if lv == level + 1:
                for j in (i, i - 1, i + 1):
                    if 0 <= j < n and self._ptr(buf, j) == addr:
                        return a, buf, j
                for j in range(n):
                    if self._ptr(buf, j) == addr:
                        return a, buf, j
                raise self._corrupt(a, f"no entry points at child block {addr}")
            a = self._ptr(buf, i)
        raise self._corrupt(addr, "block has no parent")

    def _fix_high_keys(self, path: list | None = None) -> None:
        """Set the key of every block the last operation changed in its
        parent (low and high key), level by level upwards, following every
        parent whose key changed in turn.  With ``path`` (the operation's
        descent) and only its leaf changed, the parents are the path's."""
        touched, self._touched = self._touched, set()
        freed, self._freed = self._freed, set()
        if path is not None and not freed and len(touched) <= 1 and \
                touched <= {path[0][0]} and len(path) == self.levels:
            kl, h = self._kl, self._hdr
            for level in range(self.levels - 1):
                _a, buf, _i = path[level]
                paddr, pbuf, pi = path[level + 1]
                key = self._block_key(buf, level)
                off = h + pi * kl
                if pbuf[off:off + kl] == key:
                    return
                pbuf[off:off + kl] = key
                self.store.dirty(paddr)
            return
        top = self.levels - 1
        pending: dict = {}
        for addr in touched:
            if addr in freed or addr == self.root:
                continue
            buf = self.store.read(addr)
            pending.setdefault((buf[4] << 8) | buf[5], set()).add(addr)
        kl, h = self._kl, self._hdr
        low_key = self.codec.node_key_at
        for level in range(top):
            for addr in sorted(pending.get(level, ())):
                buf = self._read(addr, level)
                if not self._numrecs(buf):
                    continue
                key = self._block_key(buf, level)
                paddr, pbuf, i = self._parent_entry(addr, level, low_key(key, 0))
                off = h + i * kl
                if pbuf[off:off + kl] != key:
                    pbuf[off:off + kl] = key
                    self.store.dirty(paddr)
                    if level + 1 < top:
                        pending.setdefault(level + 1, set()).add(paddr)

    @property
    def max_alloc_per_op(self) -> int:
        """Most blocks one insert can allocate (a split per level and a new
        root): what the caller's reservation (the AGFL for the free-space
        trees) must cover so that ``alloc`` never fails half-way."""
        return self.levels + 1

    # -- paths -------------------------------------------------------------
    def _descend(self, key) -> list:
        """Path towards ``key``: in nodes the last entry whose key is <= key
        (the first entry when none is), in the leaf the first record whose
        key is >= key (numrecs when none is)."""
        levels = self.levels
        path = [None] * levels
        addr = self.root
        h, kl = self._hdr, self._kl
        ptroff, pl, unpack_ptr = self._ptroff, self._pl, self._ps.unpack_from
        node_key_at = self.codec.node_key_at
        read = self._read
        for level in range(levels - 1, 0, -1):
            buf = read(addr, level)
            lo, hi = 0, (buf[6] << 8) | buf[7]
            if hi == 0:
                raise self._corrupt(addr, "empty node block", "bb_numrecs")
            while lo < hi:
                mid = (lo + hi) >> 1
                if node_key_at(buf, h + mid * kl) <= key:
                    lo = mid + 1
                else:
                    hi = mid
            i = lo - 1 if lo else 0
            path[level] = (addr, buf, i)
            addr = unpack_ptr(buf, ptroff + pl * i)[0]
        buf = read(addr, 0)
        path[0] = (addr, buf, self._leaf_index(buf, key))
        return path

    def _leaf_index(self, buf, key) -> int:
        """The first record of a leaf whose key is >= ``key`` (numrecs when
        none is)."""
        h, rl, rec_key_at = self._hdr, self._rl, self.codec.rec_key_at
        lo, hi = 0, (buf[6] << 8) | buf[7]
        while lo < hi:
            mid = (lo + hi) >> 1
            if rec_key_at(buf, h + mid * rl) < key:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _edge_path(self, right: bool) -> list:
        """Path to the first (or last) record of the tree."""
        path = [None] * self.levels
        addr = self.root
        for level in range(self.levels - 1, -1, -1):
            buf = self._read(addr, level)
            n = self._numrecs(buf)
            i = (n - 1 if n else 0) if right else 0
            path[level] = (addr, buf, i)
            if level:
                addr = self._ptr(buf, i)
        return path

    def _neighbor(self, path: list, level: int, step: int) -> list | None:
        """Path to the sibling (step -1 left, +1 right) of the block at
        ``level``; entries of levels below ``level`` are stale."""
        j = level + 1
        while j < self.levels:
            addr, buf, i = path[j]
            if 0 <= i + step < self._numrecs(buf):
                break
            j += 1
        else:
            return None
        new = list(path)
        new[j] = (addr, buf, i + step)
        for lv in range(j, level, -1):
            _, pbuf, pi = new[lv]
            child = self._ptr(pbuf, pi)
            cbuf = self._read(child, lv - 1)
            ci = 0 if step > 0 else max(self._numrecs(cbuf) - 1, 0)
            new[lv - 1] = (child, cbuf, ci)
        want = self._sibs(path[level][1])[0 if step < 0 else 1]
        if new[level][0] != want:
            raise self._corrupt(path[level][0], f"sibling pointer {want} but the tree "
                                f"holds {new[level][0]} next to this block",
                                "bb_rightsib" if step > 0 else "bb_leftsib")
        return new

    def _update_keys(self, path: list, level: int) -> None:
        """Copy the low key of the block at ``level`` into the parents, up
        to the first parent where it is not the first entry."""
        buf = path[level][1]
        if self._numrecs(buf) == 0:
            return
        key = self._low_key(buf, level)
        kl, h = self._kl, self._hdr
        for lv in range(level + 1, self.levels):
            paddr, pbuf, pi = path[lv]
            off = h + pi * kl
            if pbuf[off:off + kl] == key:
                return
            pbuf[off:off + kl] = key
            self._dirty(paddr)
            if pi:
                return

    # -- moving blocks -------------------------------------------------------
    def move_blocks(self, moves: Callable[[int], bool], near: int) -> int:
        """Move every block below the root for which ``moves(addr)`` holds
        to a block the store allocates (near ``near``): its contents copied
        with its own address rewritten, the pointer to it in its parent and
        those of its siblings changed, the old block given back to the
        store.  Keys and records stay as they are; returns how many
        blocks moved."""
        blkno = self.bt.buftype.blkno_off
        # a move changes no key: the blocks it rewrites are not remembered
        # for an overlapping tree's high keys (a sibling noted so could
        # move and be freed before the next operation looks for its parent)
        dirty = self.store.dirty if self._overlap else self._dirty
        moved = 0
        level = self.levels - 1
        parents = [self.root]
        while level > 0:
            children = []
            for paddr in parents:
                pbuf = self._read(paddr, level)
                for i in range(self._numrecs(pbuf)):
                    child = self._ptr(pbuf, i)
                    if moves(child):
                        old = self._read(child, level - 1)
                        new = self.store.alloc(near)
                        buf = self.store.new(new)
                        buf[:] = old
                        _U64.pack_into(buf, blkno, self.store.daddr(new))
                        dirty(new)
                        left, right = self._sibs(old)
                        if left != self._null:
                            self._set_right(self._read(left, level - 1), new)
                            dirty(left)
                        if right != self._null:
                            self._set_left(self._read(right, level - 1), new)
                            dirty(right)
                        self._ps.pack_into(pbuf, self._ptroff + self._pl * i, new)
                        dirty(paddr)
                        self.store.free(child)
                        child = new
                        moved += 1
                    children.append(child)
            parents = children
            level -= 1
        return moved

    # -- lookups -----------------------------------------------------------
    def _rec_at(self, buf, i: int):
        return self.codec.unpack_rec(buf, self._hdr + i * self._rl)

    def _is_key_at(self, buf, i: int, key) -> bool:
        return (i < self._numrecs(buf)
                and self.codec.rec_key_at(buf, self._hdr + i * self._rl) == key)

    def lookup_eq(self, key):
        """The record whose key equals ``key``, else None."""
        key = tuple(key)
        _, buf, i = self._descend(key)[0]
        return self._rec_at(buf, i) if self._is_key_at(buf, i, key) else None

    def lookup_ge(self, key):
        """The record with the smallest key >= ``key``, else None."""
        _, buf, i = self._descend(tuple(key))[0]
        while i >= self._numrecs(buf):
            right = self._sibs(buf)[1]
            if right == self._null:
                return None
            buf, i = self._read(right, 0), 0
        return self._rec_at(buf, i)

    def lookup_le(self, key):
        """The record with the largest key <= ``key``, else None."""
        key = tuple(key)
        _, buf, i = self._descend(key)[0]
        if self._is_key_at(buf, i, key):
            return self._rec_at(buf, i)
        i -= 1
        while i < 0:
            left = self._sibs(buf)[0]
            if left == self._null:
                return None
            buf = self._read(left, 0)
            i = self._numrecs(buf) - 1
        return self._rec_at(buf, i)

    def iter_from(self, key=None, reverse: bool = False) -> Iterator:
        """Records in key order from the first with key >= ``key`` (or, with
        ``reverse``, downwards from the last with key <= ``key``).  The tree
        must not change while the iterator is in use."""
        h, rl, codec, null = self._hdr, self._rl, self.codec, self._null
        if key is None:
            addr, buf, i = self._edge_path(reverse)[0]
            if reverse:
                i = self._numrecs(buf) - 1
        else:
            key = tuple(key)
            addr, buf, i = self._descend(key)[0]
            if reverse and not self._is_key_at(buf, i, key):
                i -= 1
        hops = 0
        while True:
            n = self._numrecs(buf)
            if reverse:
                if i >= 0:
                    yield from reversed(codec.unpack_recs(buf, h, i + 1))
                nxt = self._sibs(buf)[0]
            else:
                if i < n:
                    yield from codec.unpack_recs(buf, h + i * rl, n - i)
                nxt = self._sibs(buf)[1]
            if nxt == null:
                return
            hops += 1
            if hops > 1 << 32 or nxt == addr:
                raise self._corrupt(addr, "sibling chain loops", "bb_rightsib")
            addr, buf = nxt, self._read(nxt, 0)
            i = self._numrecs(buf) - 1 if reverse else 0

    def query_overlap(self, lo: int, hi: int) -> Iterator:
        """Records of an overlapping tree (the rmapbt) whose blocks meet
        [lo, hi]: start <= hi and start + count - 1 >= lo, in key order.
        Subtrees are skipped by their node keys (the low key's start and the
        high key's start, the last block below them)."""
        if not self._overlap:
            raise InvalidArgument(f"{self.codec.name} is not an overlapping tree")
        h, kl, rl = self._hdr, self._kl, self._rl
        unpack_rec = self.codec.unpack_rec
        start_at = _U32.unpack_from
        out = []
        stack = [(self.root, self.levels - 1)]
        while stack:
            addr, level = stack.pop()
            buf = self._read(addr, level)
            n = self._numrecs(buf)
            if level == 0:
                for i in range(n):
                    rec = unpack_rec(buf, h + i * rl)
                    if rec[0] > hi:
                        break
                    if rec[0] + rec[1] - 1 >= lo:
                        out.append(rec)
                continue
            kids = []
            for i in range(n):
                off = h + i * kl
                if start_at(buf, off)[0] > hi:
                    break
                if start_at(buf, off + kl // 2)[0] >= lo:
                    kids.append((self._ptr(buf, i), level - 1))
            stack.extend(reversed(kids))
        if len(out) > 1:
            key = self.codec.key
            out.sort(key=key)
        return iter(out)

    def count(self) -> int:
        """Number of records (walks the leaf level)."""
        addr, buf, _ = self._edge_path(False)[0]
        total = 0
        for _ in range(1 << 32):
            total += self._numrecs(buf)
            nxt = self._sibs(buf)[1]
            if nxt == self._null:
                return total
            addr, buf = nxt, self._read(nxt, 0)
        raise self._corrupt(addr, "sibling chain loops", "bb_rightsib")

    # -- update --------------------------------------------------------------
    def update(self, rec) -> None:
        """Replace the record that has ``rec``'s key."""
        self.gen += 1
        codec = self.codec
        key = codec.key(rec)
        path = self._descend(key)
        addr, buf, i = path[0]
        if not self._is_key_at(buf, i, key):
            raise MissingKeyError(f"{codec.name}: no record with key {key}")
        off = self._hdr + i * self._rl
        buf[off:off + self._rl] = codec.pack_rec(rec)
        self._dirty(addr)
        if i == 0:
            # bnobt keys carry the first record's length too
            self._update_keys(path, 0)
            self._note_leaf(None)
        else:
            self._note_leaf(path)
        if self._overlap:
            self._fix_high_keys()

    def replace(self, key, rec) -> None:
        """Overwrite the record whose key is ``key`` with ``rec``, whose key
        may differ but must keep the record's place in the order (the
        kernel's in-place record update: an rmap or refcount record whose
        start moves)."""
        self.gen += 1
        self.keys_gen += 1
        codec = self.codec
        key = tuple(key)
        path = self._descend(key)
        addr, buf, i = path[0]
        if not self._is_key_at(buf, i, key):
            raise MissingKeyError(f"{codec.name}: no record with key {key}")
        new = codec.key(rec)
        n = self._numrecs(buf)
        if new != key:
            prev = self.lookup_lt(key)
            nxt = self.lookup_gt(key)
            if (prev is not None and not codec.key(prev) < new) or \
                    (nxt is not None and not new < codec.key(nxt)):
                raise InvalidArgument(f"{codec.name}: record {rec} would leave its place "
                                      f"at key {key}")
        off = self._hdr + i * self._rl
        buf[off:off + self._rl] = codec.pack_rec(rec)
        self._dirty(addr)
        if i == 0 and n:
            self._update_keys(path, 0)
        self._note_leaf(None)
        if self._overlap:
            self._fix_high_keys()

    def move(self, key, rec) -> None:
        """``delete(key)`` then ``insert(rec)``, ``rec``'s key keeping the
        deleted record's place in the order (a free extent whose start or
        length changed): made in place, with one descent, when the two
        would leave just that (the leaf not below its minimum after the
        delete, so no block is joined or split, and the new key between the
        record's neighbours in its leaf, or at the tree's edge), else by
        the two.  The tree's bytes, and its counters, are the same either
        way."""
        key = tuple(key)
        codec = self.codec
        new = codec.key(rec)
        if not self._overlap and not self._in_inode:
            path = self._descend(key)
            addr, buf, i = path[0]
            n = self._numrecs(buf)
            if self._is_key_at(buf, i, key) and \
                    (self.levels == 1 or n - 1 >= self._minrecs[0]):
                h, rl, key_at = self._hdr, self._rl, codec.rec_key_at
                if i:
                    ok = key_at(buf, h + (i - 1) * rl) < new
                else:           # the first record: of the tree's first leaf
                    ok = all(p[2] == 0 for p in path[1:])
                if ok and i < n - 1:
                    ok = new < key_at(buf, h + (i + 1) * rl)
                elif ok:        # the last record: of the tree's last leaf
                    ok = all(p[2] == self._numrecs(p[1]) - 1 for p in path[1:])
                if ok:
                    self.gen += 2
                    self.keys_gen += 2
                    self._note_leaf(None)
                    off = h + i * rl
                    buf[off:off + rl] = codec.pack_rec(rec)
                    self._dirty(addr)
                    if i == 0 and self.levels > 1:
                        self._update_keys(path, 0)
                    return
        self.delete(key)
        self.insert(rec)

    def cursor(self, key) -> "Cursor":
        """A position in the tree from one descent towards ``key``."""
        return Cursor(self, tuple(key))

    def lookup_lt(self, key):
        """The record with the largest key < ``key``, else None."""
        for rec in self.iter_from(tuple(key), reverse=True):
            if self.codec.key(rec) < tuple(key):
                return rec
        return None

    def lookup_gt(self, key):
        """The record with the smallest key > ``key``, else None."""
        for rec in self.iter_from(tuple(key)):
            if self.codec.key(rec) > tuple(key):
                return rec
        return None

    def _note_leaf(self, path: list | None) -> None:
        """After an update: ``path`` when it changed no key above the leaf
        (subclasses may remember where the leaf is), else None."""

    # -- insert --------------------------------------------------------------
    def insert(self, rec, shift: bool = True) -> None:
        """Add a record; a record with the same key must not exist.  A full
        block first passes an entry to a sibling with room (the kernel's
        choice), unless ``shift`` is false: then it splits, leaving room
        for more records after this one (insert_sorted)."""
        self._shift = shift
        self.gen += 1
        self.keys_gen += 1
        codec = self.codec
        key = codec.key(rec)
        path = self._descend(key)
        _, buf, pos = path[0]
        if self._is_key_at(buf, pos, key):
            raise DuplicateKeyError(f"{codec.name}: key {key} is already in the tree")
        entry = (codec.pack_rec(rec), b"")
        level = 0
        while True:
            up = self._insrec(path, level, pos, entry)
            if up is None:
                break
            level += 1
            if level == self.levels:
                self._new_root(path, up)
                break
            entry = up
            pos = path[level][2] + 1
        if self._overlap:
            self._fix_high_keys()

    def insert_sorted(self, recs, before_insert=None) -> None:
        """Add records in key order that all fall between the same two
        neighbours already in the tree (nothing in the tree lies between
        any two of them): as many as a leaf has room for go in with one
        descent and one move; a full leaf takes one through :meth:`insert`
        (which splits it) and the rest follow into the room that made.
        The tree holds what one insert after another gives; its blocks may
        be fuller.  ``before_insert()``, when given, is called before each
        change that may split blocks (the caller's free list refilled)."""
        codec = self.codec
        packed = [codec.pack_rec(r) for r in recs]
        keys = [codec.key(r) for r in recs]
        for a, b in zip(keys, keys[1:]):
            if not a < b:
                raise InvalidArgument(f"{codec.name}: records out of order at key {b}")
        i = 0
        total = len(recs)
        while i < total:
            path = self._descend(keys[i])
            addr, buf, pos = path[0]
            n = self._numrecs(buf)
            room = self._cap(0) - n
            if pos == 0 or room <= 0 or self._is_key_at(buf, pos, keys[i]):
                # (a full leaf splits: the records after this one then fit)
                if before_insert is not None:
                    before_insert()
                self.insert(recs[i], shift=False)
                i += 1
                continue
            # the leaf takes the records up to the first its parents route
            # elsewhere (its next neighbour's key, if in this leaf)
            hi = None
            h, kl = self._hdr, self._kl
            for level in range(1, self.levels):
                _pa, pbuf, pi = path[level]
                if pi + 1 < self._numrecs(pbuf):
                    k = self.codec.node_key_at(pbuf, h + (pi + 1) * kl)
                    if hi is None or k < hi:
                        hi = k
            if pos < n:
                nxt = self.codec.rec_key_at(buf, h + pos * self._rl)
                if hi is None or nxt < hi:
                    hi = nxt
            j = i
            while j < total and j - i < room and (hi is None or keys[j] < hi):
                j += 1
            if j == i:
                if before_insert is not None:
                    before_insert()
                self.insert(recs[i])
                i += 1
                continue
            self.gen += 1
            self.keys_gen += 1
            self._note_leaf(None)
            self._put(buf, 0, pos, n, (b"".join(packed[i:j]), b""))
            self._dirty(addr)
            if self._overlap:
                self._fix_high_keys(path)
            i = j

    def _insrec(self, path: list, level: int, pos: int, entry) -> tuple | None:
        """Put one entry at ``pos`` of the block at ``level``.  Returns the
        (key, pointer) entry of a new right block when the block split."""
        addr, buf, _ = path[level]
        n = self._numrecs(buf)
        up = None
        if n >= self._cap(level):
            is_root = level == self.levels - 1
            if is_root and self._in_inode:
                self._new_iroot(path)
                addr, buf, _ = path[level]
            elif not is_root and pos < n - 1 and self._shift and \
                    self._rshift_one(path, level):
                n -= 1
            elif not is_root and pos > 0 and self._shift and \
                    self._lshift_one(path, level):
                n -= 1
                pos -= 1
            else:
                up, pos = self._split(path, level, pos)
                addr, buf, _ = path[level]
                n = self._numrecs(buf)
        self._put(buf, level, pos, n, entry)
        self._dirty(addr)
        path[level] = (addr, buf, pos)
        if pos == 0 and level < self.levels - 1:
            self._update_keys(path, level)
        return up

    def _rshift_one(self, path: list, level: int) -> bool:
        """Move the last entry of a full block to its right sibling, if that
        sibling has room."""
        addr, buf, _ = path[level]
        if self._sibs(buf)[1] == self._null:
            return False
        rpath = self._neighbor(path, level, +1)
        raddr, rbuf, _ = rpath[level]
        rn = self._numrecs(rbuf)
        if rn >= self._maxrecs[level > 0]:
            return False
        n = self._numrecs(buf)
        moved = self._take(buf, level, n - 1, n)
        self._cut(buf, level, n - 1, n, 1)
        self._put(rbuf, level, 0, rn, moved)
        self._dirty(addr)
        self._dirty(raddr)
        rpath[level] = (raddr, rbuf, 0)
        self._update_keys(rpath, level)
        return True

    def _lshift_one(self, path: list, level: int) -> bool:
        """Move the first entry of a full block to its left sibling, if that
        sibling has room."""
        addr, buf, _ = path[level]
        if self._sibs(buf)[0] == self._null:
            return False
        lpath = self._neighbor(path, level, -1)
        laddr, lbuf, _ = lpath[level]
        ln = self._numrecs(lbuf)
        if ln >= self._maxrecs[level > 0]:
            return False
        n = self._numrecs(buf)
        moved = self._take(buf, level, 0, 1)
        self._cut(buf, level, 0, n, 1)
        self._put(lbuf, level, ln, ln, moved)
        self._dirty(addr)
        self._dirty(laddr)
        self._update_keys(path, level)
        return True

    def _split(self, path: list, level: int, pos: int) -> tuple[tuple, int]:
        """Split a full block; the upper half goes to a new right sibling.
        Leaves ``path[level]`` on the half that receives position ``pos`` and
        returns the parent entry for the new block and the position there."""
        addr, buf, _ = path[level]
        n = self._numrecs(buf)
        rrecs = n // 2
        if (n & 1) and pos + 1 <= rrecs + 1:
            rrecs += 1
        lrecs = n - rrecs
        old_right = self._sibs(buf)[1]
        raddr, rbuf = self._new_block(addr, level, addr, old_right)
        self._put(rbuf, level, 0, 0, self._take(buf, level, lrecs, n))
        self._cut(buf, level, lrecs, n, rrecs)
        self._set_right(buf, raddr)
        if old_right != self._null:
            rr = self._read(old_right, level)
            self._set_left(rr, raddr)
            self._dirty(old_right)
        self._dirty(addr)
        self._dirty(raddr)
        up = (self._low_key(rbuf, level), self._ps.pack(raddr))
        if pos > lrecs:
            path[level] = (raddr, rbuf, pos - lrecs)
            pos -= lrecs
        return up, pos

    def _new_root(self, path: list, up: tuple) -> None:
        raise NotImplementedError

    def _new_iroot(self, path: list) -> None:
        raise NotImplementedError

    def _kill_iroot(self, path: list) -> None:
        raise NotImplementedError

    # -- delete --------------------------------------------------------------
    def delete(self, key):
        """Remove the record with exactly this key and return it."""
        self.gen += 1
        self.keys_gen += 1
        key = tuple(key)
        path = self._descend(key)
        _, buf, pos = path[0]
        if not self._is_key_at(buf, pos, key):
            raise MissingKeyError(f"{self.codec.name}: no record with key {key}")
        rec = self._rec_at(buf, pos)
        level = 0
        while self._delrec(path, level):
            level += 1
        if self._overlap:
            self._fix_high_keys()
        return rec

    def _delrec(self, path: list, level: int) -> bool:
        """Remove entry ``path[level].index``.  True when a merge removed a
        block, so its entry one level up must go too (``path`` then leads to
        that entry)."""
        addr, buf, pos = path[level]
        n = self._cut(buf, level, pos, self._numrecs(buf), 1)
        self._dirty(addr)
        top = self.levels - 1
        if level == top:
            if self._in_inode:
                self._kill_iroot(path)
            elif level > 0 and n == 1:
                # a root node with a single child: the child becomes the root
                child = self._ptr(buf, 0)
                self._free_block(addr)
                self.root = child
                self.levels -= 1
                path.pop()
            return False
        if pos == 0:
            self._update_keys(path, level)
        if n >= self._minrecs[level > 0]:
            return False

        null = self._null
        minr, maxr = self._minrecs[level > 0], self._maxrecs[level > 0]
        left, right = self._sibs(buf)
        if self._in_inode and left == null and right == null and level == top - 1:
            # the only child of an inode root: no minimum, maybe pulled up
            self._kill_iroot(path)
            return False
        rpath = lpath = None
        rrecs = lrecs = 0
        if right != null:
            rpath = self._neighbor(path, level, +1)
            raddr, rbuf, _ = rpath[level]
            rrecs = self._numrecs(rbuf)
            if rrecs - 1 >= minr:
                # borrow the right sibling's first entry
                moved = self._take(rbuf, level, 0, 1)
                self._cut(rbuf, level, 0, rrecs, 1)
                self._put(buf, level, n, n, moved)
                self._dirty(raddr)
                rpath[level] = (raddr, rbuf, 0)
                self._update_keys(rpath, level)
                if n == 0:
                    self._update_keys(path, level)
                return False
        if left != null:
            lpath = self._neighbor(path, level, -1)
            laddr, lbuf, _ = lpath[level]
            lrecs = self._numrecs(lbuf)
            if lrecs - 1 >= minr:
                # borrow the left sibling's last entry
                moved = self._take(lbuf, level, lrecs - 1, lrecs)
                self._cut(lbuf, level, lrecs - 1, lrecs, 1)
                self._put(buf, level, 0, n, moved)
                self._dirty(laddr)
                self._update_keys(path, level)
                return False
        if left != null and lrecs + n <= maxr:
            # merge this block into its left sibling; drop our parent entry
            laddr, lbuf, _ = lpath[level]
            self._join(laddr, lbuf, addr, buf, level)
            return True
        if right != null and rrecs + n <= maxr:
            # merge the right sibling into this block; drop its parent entry
            raddr, rbuf, _ = rpath[level]
            self._join(addr, buf, raddr, rbuf, level)
            if n == 0:
                self._update_keys(path, level)
            path[level + 1:] = rpath[level + 1:]
            return True
        raise self._corrupt(addr, f"{n} entries and no sibling to balance with",
                            "bb_numrecs")

    def _join(self, laddr: int, lbuf, raddr: int, rbuf, level: int) -> None:
        """Move every entry of the right block to the end of the left one and
        free the right block."""
        ln, rn = self._numrecs(lbuf), self._numrecs(rbuf)
        self._put(lbuf, level, ln, ln, self._take(rbuf, level, 0, rn))
        rr = self._sibs(rbuf)[1]
        self._set_right(lbuf, rr)
        if rr != self._null:
            rrbuf = self._read(rr, level)
            self._set_left(rrbuf, laddr)
            self._dirty(rr)
        self._dirty(laddr)
        self._free_block(raddr)


class Cursor:
    """A position in a tree from one descent towards a key (the kernel's
    btree cursor): the record there (the first whose key is >= the key, or
    none), the one before it, and changes made at the position without
    another descent while the tree has not changed since (else through the
    tree's own insert, update, delete).  Records are the tuples the codec
    decodes."""

    __slots__ = ("t", "key", "path", "gen")

    def __init__(self, tree: _Engine, key: tuple):
        self.t = tree
        self.key = key
        self.path = tree._descend(key)
        self.gen = tree.gen

    def _fresh(self) -> bool:
        return self.t.gen == self.gen

    def here(self):
        """The first record whose key is >= the cursor's key, else None."""
        t = self.t
        _a, buf, i = self.path[0]
        if i < t._numrecs(buf):
            return t._rec_at(buf, i)
        right = t._sibs(buf)[1]
        if right == t._null:
            return None
        rbuf = t._read(right, 0)
        return t._rec_at(rbuf, 0) if t._numrecs(rbuf) else None

    def after(self):
        """The record after :meth:`here`'s, else None."""
        t = self.t
        _a, buf, i = self.path[0]
        n = t._numrecs(buf)
        if i + 1 < n:
            return t._rec_at(buf, i + 1)
        right = t._sibs(buf)[1]
        if i + 1 > n:
            # here is the right sibling's first record
            if right == t._null:
                return None
            buf = t._read(right, 0)
            if t._numrecs(buf) > 1:
                return t._rec_at(buf, 1)
            right = t._sibs(buf)[1]
        while right != t._null:
            rbuf = t._read(right, 0)
            if t._numrecs(rbuf):
                return t._rec_at(rbuf, 0)
            right = t._sibs(rbuf)[1]
        return None

    def prev(self):
        """The last record whose key is < the cursor's key, else None."""
        t = self.t
        _a, buf, i = self.path[0]
        if i > 0:
            return t._rec_at(buf, i - 1)
        left = t._sibs(buf)[0]
        if left == t._null:
            return None
        lbuf = t._read(left, 0)
        n = t._numrecs(lbuf)
        return t._rec_at(lbuf, n - 1) if n else None

    def _done(self) -> None:
        t = self.t
        self.gen = t.gen
        if t._overlap:
            t._fix_high_keys(self.path)

    def insert(self, rec) -> None:
        """Add ``rec``, whose key belongs at the cursor's position."""
        t = self.t
        addr, buf, i = self.path[0]
        n = t._numrecs(buf)
        if not self._fresh() or i == 0 or n >= t._cap(0) or \
                (i < n and t._is_key_at(buf, i, t.codec.key(rec))):
            t.insert(rec)
            return
        t.gen += 1
        t.keys_gen += 1
        t._note_leaf(None)
        t._put(buf, 0, i, n, (t.codec.pack_rec(rec), b""))
        t._dirty(addr)
        self._done()

    def _rewrite(self, i: int, rec, old_key) -> bool:
        """Overwrite entry ``i`` of the cursor's leaf in place (its key
        unchanged, or i > 0 so no parent key changes); False when that
        cannot be done here."""
        t = self.t
        addr, buf, _i = self.path[0]
        if not self._fresh() or not 0 <= i < t._numrecs(buf) or \
                not t._is_key_at(buf, i, old_key) or \
                (i == 0 and t.codec.key(rec) != old_key):
            return False
        t.gen += 1
        if t.codec.key(rec) != old_key:
            t.keys_gen += 1
        t._note_leaf(None)
        off = t._hdr + i * t._rl
        buf[off:off + t._rl] = t.codec.pack_rec(rec)
        t._dirty(addr)
        if i == 0:
            t._update_keys(self.path, 0)
        self._done()
        return True

    def update_prev(self, rec) -> None:
        """Replace the record before the position (same key)."""
        key = self.t.codec.key(rec)
        if not self._rewrite(self.path[0][2] - 1, rec, key):
            self.t.update(rec)

    def delete_here(self, key) -> None:
        """Remove the record at the position (key ``key``), as
        :meth:`_Engine.delete` does but from the cursor's descent."""
        t = self.t
        key = tuple(key)
        _a, buf, i = self.path[0]
        if not self._fresh() or not t._is_key_at(buf, i, key):
            t.delete(key)
            return
        t.gen += 1
        t.keys_gen += 1
        path = list(self.path)
        level = 0
        while t._delrec(path, level):
            level += 1
        if t._overlap:
            t._fix_high_keys(path)

    def replace_here(self, old_key, rec) -> None:
        """Replace the record at the position (key ``old_key``) with ``rec``,
        whose key keeps its place."""
        if not self._rewrite(self.path[0][2], rec, tuple(old_key)):
            self.t.replace(old_key, rec)


class ShortBtree(_Engine):
    """A per-AG btree whose root lives in an AG header (AGF or AGI).

    After changes the caller writes ``root`` and ``levels`` back to the
    header and adds ``nblocks_delta`` to agf_btreeblks / agi_iblocks.
    ``maxrecs=(leaf, node)`` lowers the capacity below what the block holds;
    it exists for tests and is never right for a real image.
    """

    def __init__(self, bt: BtreeType, store: BlockStore, *, root: int,
                 levels: int, agno: int, uuid: bytes,
                 maxrecs: tuple[int, int] | None = None):
        if levels < 1 or levels > C.XFS_BTREE_MAXLEVELS:
            raise CorruptionError(f"{bt.name} root", f"tree height {levels}",
                                  agno=agno, field="levels")
        self._setup(bt, store, agno, uuid, maxrecs, {"agno": agno})
        self.root = root
        self.levels = levels
        self.agno = agno
        # (keys_gen, root, levels, low, high, leaf) of the leaf the last
        # update went to: keys from low (None: no bound) up to, not
        # including, high are in that leaf while no insert or delete
        # changed the tree (updates that change no key above a leaf do not)
        self._leaf_hint = None

    def _note_leaf(self, path: list | None) -> None:
        if path is None:
            self._leaf_hint = None
            return
        lo = hi = None
        h, kl = self._hdr, self._kl
        node_key_at = self.codec.node_key_at
        for level in range(len(path) - 1, 0, -1):
            _addr, buf, i = path[level]
            # the child at i takes keys from its own key (none below it for
            # the first) up to the next entry's key, within the parent's range
            if i:
                k = node_key_at(buf, h + i * kl)
                if lo is None or lo <= k:
                    lo = k
            if i + 1 < ((buf[6] << 8) | buf[7]):
                k = node_key_at(buf, h + (i + 1) * kl)
                if hi is None or k <= hi:
                    hi = k
        self._leaf_hint = (self.keys_gen, self.root, self.levels, lo, hi, path[0][0])

    def update(self, rec) -> None:
        """Replace the record that has ``rec``'s key (in the leaf the last
        update went to, without a descent from the root, when the key
        belongs there and is not its first)."""
        hint = self._leaf_hint
        if hint is not None and hint[0] == self.keys_gen and hint[1] == self.root and \
                hint[2] == self.levels and not self._overlap:
            codec = self.codec
            key = codec.key(rec)
            lo, hi = hint[3], hint[4]
            if (lo is None or lo <= key) and (hi is None or not hi <= key):
                addr = hint[5]
                buf = self._read(addr, 0)
                a = self._leaf_index(buf, key)
                if a and self._is_key_at(buf, a, key):
                    self.gen += 1
                    rl = self._rl
                    off = self._hdr + a * rl
                    buf[off:off + rl] = codec.pack_rec(rec)
                    self._dirty(addr)
                    return
        _Engine.update(self, rec)

    @classmethod
    def create(cls, bt: BtreeType, store: BlockStore, *, agno: int, uuid: bytes,
               near: int = 0, maxrecs: tuple[int, int] | None = None) -> "ShortBtree":
        """A new empty tree: one leaf root block from ``store.alloc``.  That
        block is not in ``nblocks_delta``: agi_iblocks/agi_fblocks count it,
        agf_btreeblks (which leaves roots out) does not."""
        addr = store.alloc(near)
        buf = store.new(addr)
        SHORT.init_header(buf, bt.magic, 0, 0, NULLAGBLOCK, NULLAGBLOCK, store.daddr(addr),
                          bytes(uuid), agno)
        store.dirty(addr)
        return cls(bt, store, root=addr, levels=1, agno=agno, uuid=uuid, maxrecs=maxrecs)

    def _new_root(self, path: list, up: tuple) -> None:
        """The root split: put a node above the two halves."""
        old = self.root                 # path[top] may now name the new half
        obuf = self.store.read(old)
        level = self.levels
        naddr, nbuf = self._new_block(old, level, NULLAGBLOCK, NULLAGBLOCK)
        self._put(nbuf, level, 0, 0, (self._low_key(obuf, level - 1) + up[0],
                                      _U32.pack(old) + up[1]))
        self._dirty(naddr)
        self.root = naddr
        self.levels += 1
        path.append((naddr, nbuf, 0))


class BmbtTree(_Engine):
    """A block-mapping btree rooted in an inode fork.

    ``root`` is the fork's bytes (an xfs_bmdr_block: level, numrecs, keys,
    then pointers at 4 + maxrecs * 8, maxrecs from ``root_space``).  Store
    addresses are filesystem block numbers.  After changes the caller copies
    ``root_bytes()`` back into the fork (when ``root_dirty``) and adds
    ``nblocks_delta`` to di_nblocks.  Like the kernel's btree code this never
    turns the fork back into the extents format; the caller does that when
    the records fit the fork again.
    """

    _in_inode = True

    def __init__(self, store: BlockStore, *, root: bytes, root_space: int, ino: int,
                 uuid: bytes, bt: BtreeType = BMBT,
                 maxrecs: tuple[int, int] | None = None):
        self._setup(bt, store, ino, uuid, maxrecs, {"ino": ino})
        self.ino = ino
        self.root_space = root_space
        self.root_maxrecs = bmdr_maxrecs(root_space)
        if not 1 <= self.root_maxrecs <= self._maxrecs[1]:
            raise InvalidArgument(f"a {root_space}-byte fork cannot hold this bmbt's root")
        level, numrecs = _BMDR.unpack_from(root, 0)
        if level < 1 or level >= C.XFS_BTREE_MAXLEVELS or numrecs > self.root_maxrecs:
            raise CorruptionError("bmbt root", f"level {level}, {numrecs} records",
                                  ino=ino, field="bb_level")
        # the root lives in memory as a block-format buffer, so that every
        # block primitive applies to it; its capacity is root_maxrecs
        buf = bytearray(store.blocksize)
        LONG.init_header(buf, bt.magic, level, 0, NULLFSBLOCK, NULLFSBLOCK, 0, self.uuid, ino)
        pbase = BMDR_HDR_LEN + 8 * self.root_maxrecs
        self._put(buf, level, 0, 0, (bytes(root[BMDR_HDR_LEN:BMDR_HDR_LEN + 8 * numrecs]),
                                     bytes(root[pbase:pbase + 8 * numrecs])))
        self._rootbuf = buf
        self.root = _IROOT
        self.levels = level + 1
        self.root_dirty = False

    @classmethod
    def create(cls, store: BlockStore, *, root_space: int, ino: int, uuid: bytes,
               extents: Sequence = (), near: int = 0,
               maxrecs: tuple[int, int] | None = None) -> "BmbtTree":
        """Turn an extent list into a one-leaf btree, the way the kernel
        converts a fork whose extents outgrew it: one leaf block holds the
        extents and the inode root points to it (di_nblocks grows by one,
        which ``nblocks_delta`` shows)."""
        codec = BMBT.codec
        _check_sorted(codec, extents)
        leafmax = (maxrecs or (BMBT.maxrecs(store.blocksize, True),))[0]
        if len(extents) > leafmax:
            raise InvalidArgument(f"{len(extents)} extents do not fit one bmbt leaf; "
                                  "use bulk_load_bmbt")
        addr = store.alloc(near)
        buf = store.new(addr)
        LONG.init_header(buf, BMBT.magic, 0, len(extents), NULLFSBLOCK,
                         NULLFSBLOCK, store.daddr(addr), bytes(uuid), ino)
        packed = codec.pack_recs(extents)
        buf[LBLOCK_HDR_LEN:LBLOCK_HDR_LEN + len(packed)] = packed
        store.dirty(addr)
        root = bytearray(root_space)
        _BMDR.pack_into(root, 0, 1, 1)
        root[BMDR_HDR_LEN:BMDR_HDR_LEN + 8] = _U64.pack(extents[0][0] if extents else 0)
        pbase = BMDR_HDR_LEN + 8 * bmdr_maxrecs(root_space)
        root[pbase:pbase + 8] = _U64.pack(addr)
        tree = cls(store, root=bytes(root), root_space=root_space, ino=ino, uuid=uuid,
                   maxrecs=maxrecs)
        tree.nblocks_delta = 1
        tree.root_dirty = True
        return tree

    def root_bytes(self) -> bytes:
        """The fork contents for the current root."""
        buf = self._rootbuf
        level, n = (buf[4] << 8) | buf[5], self._numrecs(buf)
        out = bytearray(self.root_space)
        _BMDR.pack_into(out, 0, level, n)
        keys, ptrs = self._take(buf, level, 0, n)
        out[BMDR_HDR_LEN:BMDR_HDR_LEN + len(keys)] = keys
        pbase = BMDR_HDR_LEN + 8 * self.root_maxrecs
        out[pbase:pbase + len(ptrs)] = ptrs
        return bytes(out)

    def single_leaf(self) -> int | None:
        """The address of the only leaf when the root (at level 1) points at
        one block, else None: the shape a fork may leave the btree format
        from."""
        buf = self._rootbuf
        if self.levels != 2 or self._numrecs(buf) != 1:
            return None
        return self._ptr(buf, 0)

    def _read(self, addr: int, level: int) -> bytearray:
        if addr == _IROOT:
            return self._rootbuf
        return _Engine._read(self, addr, level)

    def _dirty(self, addr: int) -> None:
        if addr == _IROOT:
            self.root_dirty = True
        else:
            self.store.dirty(addr)

    def _cap(self, level: int) -> int:
        if level == self.levels - 1:
            return self.root_maxrecs
        return self._maxrecs[level > 0]

    def _new_root(self, path: list, up: tuple) -> None:
        raise AssertionError("an inode root never splits")

    def _new_iroot(self, path: list) -> None:
        """The full inode root moves into a new block; the root keeps one
        pointer to it and the tree grows a level."""
        top = self.levels - 1
        rbuf = self._rootbuf
        n = self._numrecs(rbuf)
        near = self._ptr(rbuf, 0)
        caddr, cbuf = self._new_block(near, top, NULLFSBLOCK, NULLFSBLOCK)
        self._put(cbuf, top, 0, 0, self._take(rbuf, top, 0, n))
        self._dirty(caddr)
        self._cut(rbuf, top, 0, n, n)
        rbuf[4:6] = _U16.pack(top + 1)
        self._put(rbuf, top + 1, 0, 0, (self._low_key(cbuf, top), _U64.pack(caddr)))
        self.root_dirty = True
        self.levels += 1
        _, _, idx = path[top]
        path[top] = (caddr, cbuf, idx)
        path.append((_IROOT, rbuf, 0))

    def shrink_root(self, root_space: int) -> None:
        """Give the root a smaller fork (an attr fork is being added beside
        it): a root holding more pointers than ``root_space`` bytes can
        moves into a new block one level down first, as the kernel's
        xfs_bmap_add_attrfork_btree does."""
        maxrecs = bmdr_maxrecs(root_space)
        if maxrecs < 1:
            raise InvalidArgument(f"a {root_space}-byte fork cannot hold this bmbt's root")
        if self._numrecs(self._rootbuf) > maxrecs:
            self._new_iroot([(None, None, 0)] * self.levels)
        self.root_space = root_space
        self.root_maxrecs = maxrecs
        self.root_dirty = True

    def _kill_iroot(self, path: list) -> None:
        """When the root holds one pointer and the child's entries fit the
        root, the child's entries move up and the tree loses a level.  A
        root at level 1 stays: bmbt records never live in the inode."""
        top = self.levels - 1
        rbuf = self._rootbuf
        if top <= 1 or self._numrecs(rbuf) != 1:
            return
        caddr = self._ptr(rbuf, 0)
        cbuf = self._read(caddr, top - 1)
        cn = self._numrecs(cbuf)
        if cn > self.root_maxrecs:
            return
        self._cut(rbuf, top, 0, 1, 1)
        rbuf[4:6] = _U16.pack(top - 1)
        self._put(rbuf, top - 1, 0, 0, self._take(cbuf, top - 1, 0, cn))
        self._free_block(caddr)
        self.root_dirty = True
        self.levels -= 1
        path.pop()
        path[top - 1] = (_IROOT, rbuf, 0)


# --------------------------------------------------------------------------
# Bulk loading
# --------------------------------------------------------------------------

def _ensure_slack(slack: int, maxr: int, minr: int) -> int:
    """Negative slack means 'halfway between minrecs and maxrecs'; slack
    never lets a block fall under minrecs."""
    if slack < 0:
        slack = maxr - ((maxr + minr) >> 1)
    return min(slack, maxr - minr)


def _level_geometry(nr: int, desired: int, maxr: int) -> tuple[int, int, int]:
    """(blocks, entries per block, blocks that get one more) for ``nr``
    entries at one level: as many blocks as keep each at least ``desired``
    full, then the entries spread evenly."""
    blocks = max(1, nr // desired)
    npb, extra = divmod(nr, blocks)
    if npb > maxr or (npb == maxr and extra):
        blocks += 1
        npb, extra = divmod(nr, blocks)
    return blocks, min(npb, nr), extra


def bulk_geometry(nrecs: int, maxrecs: tuple[int, int], *, slack_leaf: int = -1,
                  slack_node: int = -1, root_maxrecs: int | None = None) -> list:
    """Block counts per level for a bulk load, from the leaves up:
    ``[(blocks, per_block, blocks_with_one_more), ...]``.  With
    ``root_maxrecs`` (inode-rooted trees) the last level is the inode root
    and records never sit in it."""
    leaf_max, node_max = maxrecs
    leaf_min, node_min = leaf_max // 2, node_max // 2
    slack_leaf = _ensure_slack(slack_leaf, leaf_max, leaf_min)
    slack_node = _ensure_slack(slack_node, node_max, node_min)
    out = []
    nr = nrecs
    level = 0
    while True:
        if level >= C.XFS_BTREE_MAXLEVELS:
            raise InvalidArgument(f"{nrecs} records need more than "
                                  f"{C.XFS_BTREE_MAXLEVELS} levels")
        maxr = leaf_max if level == 0 else node_max
        npb = maxr - (slack_leaf if level == 0 else slack_node)
        if root_maxrecs is not None:
            if level > 0 and nr <= root_maxrecs:
                out.append((1, nr, 0))
                return out
        else:
            # as a root first: does everything fit one block?
            geo = _level_geometry(nr, max(1, npb), maxr)
            if nr <= geo[1]:
                out.append(geo)
                return out
        minr = leaf_min if level == 0 else node_min
        geo = _level_geometry(nr, max(minr, npb), maxr)
        out.append(geo)
        nr = geo[0]
        level += 1


def _load_levels(form: BlockForm, shape: _Shape, magic: int, codec: Codec, store: BlockStore,
                 packed: bytes, geometry: list, owner: int, uuid: bytes,
                 top_in_blocks: bool) -> tuple[list, list]:
    """Write the block levels; returns the top level's (low keys, pointers)
    and the list of allocated addresses."""
    hdr, rl, kl = shape.hdr, codec.rec_len, codec.key_len
    ptroff = shape.ptroff
    null = form.null
    ptr_pack = form.ptr.pack
    nlevels = len(geometry) if top_in_blocks else len(geometry) - 1
    used = []
    near = 0
    keys: list = []
    ptrs: list = []
    for level in range(nlevels):
        blocks, npb, extra = geometry[level]
        prev_addr, prev_buf = null, None
        nkeys, nptrs = [], []
        src = 0
        for i in range(blocks):
            count = npb + (1 if i < extra else 0)
            addr = store.alloc(near)
            near = addr
            used.append(addr)
            buf = store.new(addr)
            form.init_header(buf, magic, level, count, prev_addr, null,
                             store.daddr(addr), uuid, owner)
            if level == 0:
                buf[hdr:hdr + count * rl] = packed[src * rl:(src + count) * rl]
                if not count:
                    nkeys.append(b"")
                elif codec.overlapping:
                    nkeys.append(codec.block_key([codec.rec_key_bytes(buf, hdr + j * rl)
                                                  for j in range(count)]))
                else:
                    nkeys.append(codec.rec_key_bytes(buf, hdr))
            else:
                buf[hdr:hdr + count * kl] = b"".join(keys[src:src + count])
                buf[ptroff:ptroff + count * form.ptr_len] = b"".join(
                    ptr_pack(p) for p in ptrs[src:src + count])
                nkeys.append(codec.block_key(keys[src:src + count]) if codec.overlapping
                             else keys[src])
            src += count
            nptrs.append(addr)
            if prev_buf is not None:
                form.ptr.pack_into(prev_buf, form.right_off, addr)
                store.dirty(prev_addr)
            prev_addr, prev_buf = addr, buf
        if prev_buf is not None:
            store.dirty(prev_addr)
        keys, ptrs = nkeys, nptrs
    return keys, ptrs, used


def _check_sorted(codec: Codec, records: Sequence) -> None:
    key = codec.key
    prev = None
    for r in records:
        k = key(r)
        if prev is not None and not prev < k:
            raise InvalidArgument(f"{codec.name}: records not in strictly increasing key "
                                  f"order at {k}")
        prev = k


def bulk_load(bt: BtreeType, store: BlockStore, records: Sequence, *,
              agno: int, uuid: bytes, slack_leaf: int = -1, slack_node: int = -1,
              maxrecs: tuple[int, int] | None = None) -> tuple[int, int, int]:
    """Build a fresh short-pointer tree from records sorted by key.

    Returns ``(root, levels, blocks_used)``.  Slack is the number of free
    slots left in each block: -1 (the default) fills leaves and nodes halfway
    between minrecs and maxrecs as the kernel's loader does; xfs_repair uses
    2 when less than a tenth of the AG is free.  Blocks are allocated in
    order leaves first, left to right, each near the previous one.
    """
    codec = bt.codec
    _check_sorted(codec, records)
    shape = _Shape(bt, store.blocksize, maxrecs)
    geometry = bulk_geometry(len(records), shape.maxrecs, slack_leaf=slack_leaf,
                             slack_node=slack_node)
    packed = codec.pack_recs(records)
    _, ptrs, used = _load_levels(SHORT, shape, bt.magic, codec, store, packed, geometry,
                                 agno, bytes(uuid), True)
    return ptrs[0], len(geometry), len(used)


def bulk_load_bmbt(extents: Sequence, *, ino: int, uuid: bytes, blocksize: int,
                   root_space: int, store: BlockStore, slack_leaf: int = -1,
                   slack_node: int = -1) -> tuple[bytes, int, list]:
    """Build a block-mapping btree for a fork whose extents do not fit it.

    ``extents`` are ``(startoff, startblock, blockcount, unwritten)`` sorted
    by offset; ``root_space`` is the fork's size in the inode (bytes);
    ``store`` addresses are filesystem block numbers.  Returns the fork
    contents (an xfs_bmdr_block padded to ``root_space``: level, numrecs,
    keys, then pointers at 4 + maxrecs * 8), the tree height counting the
    inode root (its bb_level is height - 1) and the list of blocks used
    (di_nblocks grows by their number).
    """
    codec = BMBT.codec
    if len(extents) * codec.rec_len <= root_space:
        raise InvalidArgument(f"{len(extents)} extents fit a {root_space}-byte fork "
                              "without a btree")
    _check_sorted(codec, extents)
    prev_end = -1
    for e in extents:
        if e[0] < prev_end:
            raise InvalidArgument(f"bmbt: extent at offset {e[0]} overlaps the previous one")
        prev_end = e[0] + e[2]
    root_max = bmdr_maxrecs(root_space)
    if root_max < 1:
        raise InvalidArgument(f"a {root_space}-byte fork cannot hold a bmbt root")
    shape = _Shape(BMBT, blocksize, None)
    geometry = bulk_geometry(len(extents), shape.maxrecs, slack_leaf=slack_leaf,
                             slack_node=slack_node, root_maxrecs=root_max)
    packed = codec.pack_recs(extents)
    keys, ptrs, used = _load_levels(LONG, shape, BMBT.magic, codec, store, packed, geometry,
                                    ino, bytes(uuid), False)
    levels = len(geometry)
    root = bytearray(root_space)
    _BMDR.pack_into(root, 0, levels - 1, len(ptrs))
    root[BMDR_HDR_LEN:BMDR_HDR_LEN + 8 * len(keys)] = b"".join(keys)
    poff = BMDR_HDR_LEN + root_max * 8
    root[poff:poff + 8 * len(ptrs)] = b"".join(_U64.pack(p) for p in ptrs)
    return bytes(root), levels, used
