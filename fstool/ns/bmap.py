"""Incremental edits of a data fork's extent map (the block map).

:class:`ForkMap` holds the data fork of one inode for the length of one
operation inside the open transaction and changes it record by record, the
way the kernel's xfs_bmap.c does: records are inserted into holes, removed
(split where a range ends inside one), changed between written and
unwritten, and joined with neighbours that are contiguous in the file and
on disk, in the same state, and not longer together than a record holds.

Two forms hold the records:

* extents format: the packed records live in the inode's fork (at most
  ``fork bytes / 16`` of them); they are kept as a short sorted list and
  packed again when the operation ends, which costs at most a few hundred
  bytes whatever the file's size;
* btree format: the records live in a bmbt whose root is in the fork; every
  change is one insert, delete or update of main's btree engine
  (:class:`fstool.fs.btree_write.BmbtTree`), so its cost grows with the
  tree's height, not with the number of extents.

When an operation ends (:meth:`ForkMap.finish`) the fork changes form as
the kernel changes it: an extent list that no longer fits the fork moves
into a one-leaf btree (xfs_bmap_extents_to_btree: one block allocated near
the inode, di_nblocks grows by one); a btree whose records fit the fork
again, and whose root points at a single leaf, goes back to the extents
format and its leaf is freed (xfs_bmap_btree_to_extents).  Regular file
data never lives in the fork itself: the kernel has no inline form for
file data, so a data fork here is always extents or btree.

Blocks leave a fork through the session's space allocator
(``SpaceAllocator.free_extent``): the free reaches the free-space btrees in
the same transaction as the unmapping (so no EFI/EFD pair is needed, the
two are one atomic change) and the blocks stay busy until that
transaction's checkpoint is on disk, as every other free in fstool does.

On a filesystem with the rmapbt, every record edit here changes the
reverse mapping in the same transaction (the kernel's xfs_bmap defers an
rmap map, unmap or convert intent for each): :meth:`ForkMap.add` maps the
new blocks to the inode's data fork at their file offset,
:meth:`ForkMap.remove` unmaps what it cuts out, and a change between
written and unwritten is an unmap and a map of the blocks in their new
state (the records that leaves are those of the kernel's convert); the
bmbt's own blocks are mapped as bmbt blocks of the fork when allocated.
Callers therefore allocate and free file data with ``owner=None``.
"""
from __future__ import annotations

import bisect

from ..alloc import rmap as R
from ..alloc.space import MAXEXTLEN
from ..errors import CorruptionError, UnsupportedError
from ..format import constants as C
from ..fs import btree_write as BW
from ..fs.btree import BMBT
from ..io import verify as V
from .files import BMBT_REC, BmbtStore

EXTENTS = C.XFS_DINODE_FMT_EXTENTS
BTREE = C.XFS_DINODE_FMT_BTREE
_INF = 1 << 64


class ReadStore:
    """bmbt blocks read through the shared buffer cache, for lookups outside
    a transaction (the cache holds what the open and committed transactions
    changed)."""

    def __init__(self, fs):
        self.fs = fs
        self.blocksize = fs.sb.blocksize

    def daddr(self, addr: int) -> int:
        return self.fs.fsb_to_daddr(addr)

    def read(self, addr: int) -> bytearray:
        return self.fs.get_buf(self.daddr(addr), self.blocksize, V.BMBT).data

    def _refuse(self, *_a):
        raise CorruptionError("bmbt", "internal: a read-only map was changed")

    new = alloc = free = dirty = _refuse


class ForkMap:
    """The data fork (or, ``attr``, the attr fork) of one inode: lookups
    and record edits.

    ``fork`` is the fork's bytes (``space`` of them), ``fmt`` its format and
    ``nextents`` its record count.  With a session ``w`` inside a
    transaction, changes are allowed; without, only lookups."""

    def __init__(self, fs, ino: int, fmt: int, fork: bytes, space: int, nextents: int,
                 w=None, near: int = 0, shared: bool = False, attr: bool = False):
        self.fs = fs
        self.w = w
        self.ino = ino
        # the attr fork's map (its blocks and bmbt owned by the attr fork)
        self.attr = attr
        # a reflinked file (the inode's reflink flag): its blocks may belong
        # to other files too, and the rmapbt is changed with the shared
        # variants
        self.shared = shared
        self.fmt = fmt
        self.space = space
        self.maxext = space // BMBT_REC
        self.nextents = nextents
        self.bmbt_delta = 0           # bmbt blocks added (or removed) by this operation
        self.changed = False
        self.near = near
        self.recs = None
        self.tree = None
        if fmt == EXTENTS:
            if nextents > self.maxext:
                raise CorruptionError("inode", f"{nextents} extents in a fork of "
                                      f"{space} bytes", ino=ino, field="di_nextents")
            recs = BMBT.codec.unpack_recs(fork, 0, nextents) if nextents else []
            self.recs = [tuple(r) for r in recs]
        elif fmt == BTREE:
            store = BmbtStore(w, near, owner=R.bmbt(ino, attr)) if w is not None \
                else ReadStore(fs)
            self.tree = BW.BmbtTree(store, root=bytes(fork[:space]), root_space=space,
                                    ino=ino, uuid=fs.uuid)
        else:
            raise UnsupportedError(f"inode {ino}: data fork format {fmt} holds no extent map")

    # -- lookups ---------------------------------------------------------------------
    def _le(self, lblk: int):
        """The record with the largest start <= lblk, else None."""
        if self.recs is not None:
            i = bisect.bisect_right(self.recs, (lblk, _INF)) - 1
            return self.recs[i] if i >= 0 else None
        r = self.tree.lookup_le((lblk,))
        return tuple(r) if r is not None else None

    def _ge(self, lblk: int):
        """The record with the smallest start >= lblk, else None."""
        if self.recs is not None:
            i = bisect.bisect_left(self.recs, (lblk,))
            return self.recs[i] if i < len(self.recs) else None
        r = self.tree.lookup_ge((lblk,))
        return tuple(r) if r is not None else None

    def lookup(self, lblk: int):
        """The record mapping ``lblk``, else None."""
        r = self._le(lblk)
        return r if r is not None and lblk < r[0] + r[2] else None

    def prev(self, lblk: int):
        """The last record that starts before ``lblk``."""
        return self._le(lblk - 1) if lblk > 0 else None

    def next(self, lblk: int):
        """The record mapping ``lblk`` or, when it is a hole, the first after."""
        r = self.lookup(lblk)
        return r if r is not None else self._ge(lblk)

    def range(self, a: int, b: int, limit: int | None = None) -> list:
        """Records overlapping logical blocks [a, b), in order (at most
        ``limit`` of them)."""
        out = []
        r = self.lookup(a)
        if r is not None:
            out.append(r)
        start = a + 1 if r is not None else a
        if start >= b:
            return out
        if self.recs is not None:
            i = bisect.bisect_left(self.recs, (start,))
            recs = self.recs
            while i < len(recs) and recs[i][0] < b:
                if limit is not None and len(out) >= limit:
                    break
                out.append(recs[i])
                i += 1
            return out
        for rec in self.tree.iter_from((start,)):
            if rec[0] >= b or (limit is not None and len(out) >= limit):
                break
            out.append(tuple(rec))
        return out

    def last(self):
        return self._le(_INF >> 12)

    def all(self) -> list:
        if self.recs is not None:
            return list(self.recs)
        return [tuple(r) for r in self.tree.iter_from()] if self.nextents else []

    # -- record edits (the only places that touch the forms) ---------------------------
    def _insert(self, rec) -> None:
        if self.recs is not None:
            bisect.insort(self.recs, rec)
        else:
            self.tree.insert(rec)
        self.nextents += 1
        self.changed = True

    def _delete(self, startoff: int) -> None:
        if self.recs is not None:
            i = bisect.bisect_left(self.recs, (startoff,))
            if i >= len(self.recs) or self.recs[i][0] != startoff:
                raise CorruptionError("bmap", f"no extent at offset {startoff}", ino=self.ino)
            del self.recs[i]
        else:
            self.tree.delete((startoff,))
        self.nextents -= 1
        self.changed = True

    def _update(self, rec) -> None:
        """Replace the record starting at rec[0]."""
        if self.recs is not None:
            i = bisect.bisect_left(self.recs, (rec[0],))
            self.recs[i] = rec
        else:
            self.tree.update(rec)
        self.changed = True

    # -- map edits -----------------------------------------------------------------------
    def _joinable(self, a, b) -> bool:
        """Record ``b`` continues record ``a`` in the file and on disk."""
        ag = self.fs.sb.agblklog
        return (a[0] + a[2] == b[0] and a[1] + a[2] == b[1] and a[3] == b[3]
                and a[2] + b[2] <= MAXEXTLEN and (a[1] >> ag) == (b[1] >> ag))

    def add(self, rec) -> None:
        """Map a hole: ``rec`` = (startoff, fsbno, length, unwritten); joined
        with contiguous neighbours."""
        rec = tuple(rec)
        left = self.prev(rec[0])
        if left is not None and left[0] + left[2] > rec[0]:
            raise CorruptionError("bmap", f"mapping offset {rec[0]} over extent {left}",
                                  ino=self.ino)
        right = self._ge(rec[0])
        if right is not None and right[0] < rec[0] + rec[2]:
            raise CorruptionError("bmap", f"mapping {rec} over extent {right}", ino=self.ino)
        jl = left is not None and self._joinable(left, rec)
        jr = right is not None and self._joinable(rec, right)
        if jl and jr and left[2] + rec[2] + right[2] > MAXEXTLEN:
            jr = False
        if self.w is not None and self.w.rmap_on:
            self.w.space.rmap_fsb("map_shared" if self.shared else "map", rec[1], rec[2],
                                  R.fork(self.ino, rec[0], self.attr), rec[3])
        if jr:
            self._delete(right[0])
            rec = (rec[0], rec[1], rec[2] + right[2], rec[3])
        if jl:
            self._update((left[0], left[1], left[2] + rec[2], left[3]))
        else:
            self._insert(rec)

    def remove(self, a: int, b: int, limit: int | None = None) -> list:
        """Unmap logical blocks [a, b): returns the (startoff, fsbno, length,
        unwritten) pieces that were mapped there; records that cross an end
        of the range are cut, one spanning it is split in two.  With
        ``limit``, only the first ``limit`` records met are unmapped."""
        out = []
        for o, p, n, u in self.range(a, b, limit):
            e = o + n
            if o < a and e > b:
                self._update((o, p, a - o, u))
                self._insert((b, p + (b - o), e - b, u))
                out.append((a, p + (a - o), b - a, u))
            elif o < a:
                self._update((o, p, a - o, u))
                out.append((a, p + (a - o), e - a, u))
            elif e > b:
                self._delete(o)
                self._insert((b, p + (b - o), e - b, u))
                out.append((o, p, b - o, u))
            else:
                self._delete(o)
                out.append((o, p, n, u))
        if out and self.w is not None and self.w.rmap_on:
            space = self.w.space
            op = "unmap_shared" if self.shared else "unmap"
            for o, p, n, u in out:
                space.rmap_fsb(op, p, n, R.fork(self.ino, o, self.attr), u)
        return out

    def set_state(self, a: int, b: int, unwritten: int) -> None:
        """Mark the mapped blocks in [a, b) written (0) or unwritten (1)."""
        pieces = [r for r in self.range(a, b) if r[3] != unwritten]
        for o, _p, n, _u in pieces:
            lo, hi = max(o, a), min(o + n, b)
            for po, pp, pn, _pu in self.remove(lo, hi):
                self.add((po, pp, pn, unwritten))

    # -- the end of an operation -----------------------------------------------------------
    def finish(self) -> tuple[int, bytes]:
        """Change the fork's form where the kernel would and return (format,
        fork bytes of ``space``)."""
        w = self.w
        if self.recs is not None and len(self.recs) > self.maxext:
            store = BmbtStore(w, self.near, owner=R.bmbt(self.ino, self.attr))
            recs = self.recs
            leafmax = BMBT.maxrecs(store.blocksize, True)
            if len(recs) <= leafmax:
                tree = BW.BmbtTree.create(store, root_space=self.space, ino=self.ino,
                                          uuid=self.fs.uuid, extents=recs, near=self.near)
                self.bmbt_delta += tree.nblocks_delta
                tree.nblocks_delta = 0
            else:
                root, _h, used = BW.bulk_load_bmbt(recs, ino=self.ino, uuid=self.fs.uuid,
                                                   blocksize=store.blocksize,
                                                   root_space=self.space, store=store)
                self.bmbt_delta += len(used)
                tree = BW.BmbtTree(store, root=root, root_space=self.space, ino=self.ino,
                                   uuid=self.fs.uuid)
            self.tree, self.recs, self.fmt = tree, None, BTREE
        elif self.tree is not None:
            self.bmbt_delta += self.tree.nblocks_delta
            self.tree.nblocks_delta = 0
            leaf = self.tree.single_leaf()
            if self.nextents <= self.maxext and leaf is not None:
                self.recs = self.all()
                self.tree.store.free(leaf)
                self.bmbt_delta -= 1
                self.tree, self.fmt = None, EXTENTS
        if self.recs is not None:
            lit = BMBT.codec.pack_recs(self.recs)
        else:
            lit = self.tree.root_bytes()
        return self.fmt, lit + bytes(self.space - len(lit))


def first_unused(exts, start: int, length: int) -> int:
    """xfs_bmap_first_unused: the first fork block at or after ``start``
    that begins a hole of ``length`` blocks, over ``exts`` [(offset, fsb,
    count)] in offset order."""
    lowest = top = start
    for o, _b, n in exts:
        if o >= lowest + length and o - top >= length:
            break
        top = max(o + n, lowest)
    return top


def owned_blocks(node, attr: bool) -> list:
    """(fsbno, length) of every block a fork owns: mapped extents and, for a
    btree-format fork, the bmbt blocks below its root."""
    return [(b, n) for b, n, _o, _u in owned_extents(node, attr)]


def owned_extents(node, attr: bool) -> list:
    """(fsbno, length, owner, unwritten) of every block a fork owns, owner
    as the rmapbt names it: the fork's mapped extents at their file
    offsets, then the bmbt blocks below a btree-format fork's root."""
    ino = node.ino
    out = [(b, n, R.fork(ino, o, attr), bool(u)) for o, b, n, u in node.extents(attr=attr)]
    fmt = node.aformat if attr else node.format
    if fmt == C.XFS_DINODE_FMT_BTREE:
        level, _keys, ptrs = node.bmbt_root(attr)
        reader = node.fs.bmbt_reader(ino)
        who = R.bmbt(ino, attr)
        for blk in reader.blocks(ptrs, level):
            out.append((blk.addr, 1, who, False))
    return out


def free_fork(w, node, attr: bool) -> int:
    """Free every block a fork owns (each unmapped from its owner in the
    rmapbt; a reflinked file's data blocks lose one reference each and go
    only when that was the last); returns how many the fork counted."""
    total = 0
    shared = not attr and bool(node.flags2 & C.XFS_DIFLAG2_REFLINK)
    space = w.space
    for fsbno, n, who, unwritten in owned_extents(node, attr):
        if shared and not who.flags & R.BMBT_BLOCK:
            space.free_shared(fsbno, n, owner=who, unwritten=unwritten)
        else:
            space.free_extent(fsbno, n, owner=who, unwritten=unwritten)
        total += n
    return total
