"""Reverse mapping: the rmapbt kept record by record (the kernel's xfs_rmap.c).

Every block of an AG that is in use has an owner, and the rmapbt holds one
record per run of blocks with the same owner: ``(startblock, blockcount,
owner, offset | flags)``.  The owner is an inode number, or one of the
special owners below for metadata that belongs to no inode (the AG headers,
the log, the free-space btrees with the rmapbt and the free list, the inode
btrees, inode chunks, the refcount btree, copy-on-write staging extents).
For an inode the offset is the file offset of the first block and the flags
say which fork (attr) and whether the blocks hold the fork's bmbt (then the
offset means nothing) or unwritten data.

:class:`Rmap` changes one AG's rmapbt the way the kernel does, so that the
records are the ones the kernel (and xfs_repair, which derives them from
every owner) would have:

* :meth:`Rmap.map` adds blocks to an owner, merged with the record on the
  left and/or the right when they have the same owner and flags and
  continue it on disk (and in the file, for inode fork mappings);
* :meth:`Rmap.unmap` removes blocks, trimming or splitting the record that
  holds them;
* :meth:`Rmap.convert` changes fork blocks between written and unwritten,
  splitting and merging as xfs_rmap_convert does.

Blocks with one owner use those; the data forks of reflinked files (the
inode's reflink flag) use the shared variants :meth:`Rmap.map_shared`,
:meth:`Rmap.unmap_shared` and :meth:`Rmap.convert_shared` (the kernel's
xfs_rmap_*_shared), which find the owner's own neighbours among records of
other owners over the same blocks (the tree's overlap query) and change
keys by delete and insert.  A record that breaks the rules (an owner that
does not match, blocks not mapped, a new mapping over another) is
corruption: :class:`~fstool.errors.CorruptionError` naming the rmapbt.
"""
from __future__ import annotations

from typing import NamedTuple

from ..errors import CorruptionError
from ..format import constants as C

_U64 = (1 << 64) - 1
OWN_NULL = _U64              # -1: no owner (growfs of new space)
OWN_UNKNOWN = _U64 - 1       # -2: unknown owner (EFI recovery)
OWN_FS = _U64 - 2            # -3: static fs metadata (AG headers)
OWN_LOG = _U64 - 3           # -4: the journal
OWN_AG = _U64 - 4            # -5: free-space btrees, rmapbt, free list
OWN_INOBT = _U64 - 5         # -6: inode btrees
OWN_INODES = _U64 - 6        # -7: inode chunks
OWN_REFC = _U64 - 7          # -8: refcount btree
OWN_COW = _U64 - 8           # -9: copy-on-write staging
OWNER_NAMES = {OWN_NULL: "null", OWN_UNKNOWN: "unknown", OWN_FS: "fs", OWN_LOG: "log",
               OWN_AG: "ag", OWN_INOBT: "inobt", OWN_INODES: "inodes", OWN_REFC: "refc",
               OWN_COW: "cow"}

ATTR_FORK = C.XFS_RMAP_OFF_ATTR
BMBT_BLOCK = C.XFS_RMAP_OFF_BMBT
UNWRITTEN = C.XFS_RMAP_OFF_UNWRITTEN
FLAGS = ATTR_FORK | BMBT_BLOCK | UNWRITTEN
OFF_MASK = C.XFS_RMAP_OFF_MASK
LEN_MAX = 0xFFFFFFFF


def non_inode(owner: int) -> bool:
    return bool(owner >> 63)


class Owner(NamedTuple):
    """Who blocks belong to (the kernel's xfs_owner_info): an inode with the
    file offset of the first block and the fork and bmbt flags, or a
    special owner."""
    owner: int
    offset: int = 0
    flags: int = 0

    def at(self, delta: int) -> "Owner":
        """The owner of the blocks ``delta`` further on: a later file offset
        for a fork mapping, the same owner otherwise."""
        if not delta or non_inode(self.owner) or self.flags & BMBT_BLOCK:
            return self
        return Owner(self.owner, self.offset + delta, self.flags)

    def describe(self) -> str:
        if non_inode(self.owner):
            return OWNER_NAMES.get(self.owner, f"owner 0x{self.owner:x}")
        what = "attr fork" if self.flags & ATTR_FORK else "data fork"
        if self.flags & BMBT_BLOCK:
            return f"inode {self.owner} {what} bmbt"
        return f"inode {self.owner} {what} offset {self.offset}"


AG = Owner(OWN_AG)
FS = Owner(OWN_FS)
LOG = Owner(OWN_LOG)
INOBT = Owner(OWN_INOBT)
INODES = Owner(OWN_INODES)
REFC = Owner(OWN_REFC)
COW = Owner(OWN_COW)
UNKNOWN = Owner(OWN_UNKNOWN)


def data(ino: int, offset: int) -> Owner:
    """Blocks of an inode's data fork from file block ``offset``."""
    return Owner(ino, offset, 0)


def fork(ino: int, offset: int, attr: bool) -> Owner:
    """Blocks of an inode's data or attr fork from file block ``offset``."""
    return Owner(ino, offset, ATTR_FORK if attr else 0)


def bmbt(ino: int, attr: bool = False) -> Owner:
    """A block of an inode's bmbt (data or attr fork)."""
    return Owner(ino, 0, BMBT_BLOCK | (ATTR_FORK if attr else 0))


class Rec(NamedTuple):
    """A decoded rmapbt record."""
    start: int
    count: int
    owner: int
    offset: int
    flags: int

    @property
    def end(self) -> int:
        return self.start + self.count

    def disk(self) -> tuple:
        return (self.start, self.count, self.owner, self.offset | self.flags)

    def key(self) -> tuple:
        return (self.start, self.owner, (self.offset | self.flags) & ~UNWRITTEN)


def _rec(raw) -> Rec | None:
    if raw is None:
        return None
    s, n, o, f = raw
    return Rec(s, n, o, f & OFF_MASK, f & FLAGS)


def _mergeable(r: Rec | None, owner: int, flags: int) -> bool:
    """Same owner, the same fork, bmbt and unwritten flags
    (xfs_rmap_is_mergeable)."""
    return (r is not None and r.owner != OWN_NULL and r.owner == owner
            and r.flags == flags)


class Rmap:
    """One AG's rmapbt (a :class:`~fstool.fs.btree_write.ShortBtree` over
    the overlapping rmapbt descriptor), changed record by record."""

    def __init__(self, tree, agno: int, room=None):
        self.tree = tree
        self.agno = agno
        # called before each change that may split blocks in a run of them
        # (the free list refilled), when given
        self.room = room

    def _corrupt(self, detail: str, block: int | None = None):
        return CorruptionError("rmapbt", detail, agno=self.agno, block=block)

    # -- record lookups --------------------------------------------------------
    def lookup_le(self, bno: int, owner: int, offset: int, flags: int) -> Rec | None:
        return _rec(self.tree.lookup_le((bno, owner, (offset | flags) & ~UNWRITTEN)))

    def _next(self, r: Rec | None, key: tuple) -> Rec | None:
        """The record after ``r`` (the first at or after ``key`` when there
        is no ``r``): the kernel's cursor increment."""
        if r is None:
            return _rec(self.tree.lookup_ge(key))
        return _rec(self.tree.lookup_gt(r.key()))

    def _prev(self, r: Rec) -> Rec | None:
        return _rec(self.tree.lookup_lt(r.key()))

    def records(self):
        """Every record in key order (tests, checks)."""
        for raw in self.tree.iter_from():
            yield _rec(raw)

    # -- map -----------------------------------------------------------------------
    def map(self, bno: int, length: int, oi: Owner, unwritten: bool = False) -> None:
        """Blocks [bno, bno+length) now belong to ``oi`` (xfs_rmap_map)."""
        if length <= 0:
            return
        owner, offset, flags = oi.owner, oi.offset, oi.flags
        if unwritten:
            flags |= UNWRITTEN
        ignore_off = non_inode(owner) or bool(flags & BMBT_BLOCK)
        key = (bno, owner, (offset | flags) & ~UNWRITTEN)
        # one descent: the record at or after the key and the one before
        cur = self.tree.cursor(key)
        gt = _rec(cur.here())
        if gt is not None and gt.key() == key:
            lt, gt = gt, _rec(self.tree.lookup_gt(key))
        else:
            lt = _rec(cur.prev())
        have_lt = _mergeable(lt, owner, flags)
        # (the kernel looks for an overlap only with a record it could merge
        # with; any overlap is refused here: blocks have one owner)
        if lt is not None and lt.end > bno:
            raise self._corrupt(f"mapping blocks {bno}+{length} to {oi.describe()} over "
                                f"the record {lt.start}+{lt.count}", bno)
        have_gt = False
        if gt is not None:
            if bno + length > gt.start:
                raise self._corrupt(f"mapping blocks {bno}+{length} to {oi.describe()} over "
                                    f"the record {gt.start}+{gt.count}", bno)
            have_gt = _mergeable(gt, owner, flags)
        t = self.tree
        if have_lt and lt.end == bno and (ignore_off or lt.offset + lt.count == offset):
            count = lt.count + length
            if have_gt and bno + length == gt.start and \
                    (ignore_off or offset + length == gt.offset) and \
                    count + length + gt.count <= LEN_MAX:
                t.delete(gt.key())
                t.update(lt._replace(count=count + gt.count).disk())
            else:
                cur.update_prev(lt._replace(count=count).disk())
        elif have_gt and bno + length == gt.start and \
                (ignore_off or offset + length == gt.offset):
            cur.replace_here(gt.key(), gt._replace(
                start=bno, count=gt.count + length,
                offset=gt.offset if ignore_off else offset).disk())
        else:
            cur.insert(Rec(bno, length, owner, offset, flags).disk())

    def map_run(self, recs) -> None:
        """:meth:`map` for many extents at once, in block order, that lie in
        blocks nothing maps (a run of free space handed out piece by
        piece): adjacent ones of one owner merged first, the first and the
        last mapped one by one (they may merge with the records around the
        run), the rest inserted in one pass."""
        run = []
        for bno, length, oi, unwritten in recs:
            flags = oi.flags | (UNWRITTEN if unwritten else 0)
            r = Rec(bno, length, oi.owner, oi.offset, flags)
            if run:
                p = run[-1]
                ignore = non_inode(p.owner) or bool(p.flags & BMBT_BLOCK)
                if _mergeable(p, r.owner, r.flags) and p.end == r.start and \
                        (ignore or p.offset + p.count == r.offset) and \
                        p.count + r.count <= LEN_MAX:
                    run[-1] = p._replace(count=p.count + r.count)
                    continue
                if r.start < p.end:
                    raise self._corrupt(f"mapping blocks {r.start}+{r.count} over "
                                        f"{p.start}+{p.count} in one run", r.start)
            run.append(r)
        if len(run) <= 2:
            for r in run:
                self.map(r.start, r.count, Owner(r.owner, r.offset, r.flags & ~UNWRITTEN),
                         bool(r.flags & UNWRITTEN))
            return
        first, middle, last = run[0], run[1:-1], run[-1]
        self.map(first.start, first.count, Owner(first.owner, first.offset,
                                                 first.flags & ~UNWRITTEN),
                 bool(first.flags & UNWRITTEN))
        # nothing may lie between the first and the last
        nxt = _rec(self.tree.lookup_gt(first.key()))
        if nxt is not None and nxt.start < last.end:
            raise self._corrupt(f"mapping blocks {middle[0].start}+ over the record "
                                f"{nxt.start}+{nxt.count}", nxt.start)
        self.tree.insert_sorted([r.disk() for r in middle], before_insert=self.room)
        self.map(last.start, last.count, Owner(last.owner, last.offset,
                                               last.flags & ~UNWRITTEN),
                 bool(last.flags & UNWRITTEN))

    # -- unmap ---------------------------------------------------------------------
    def unmap(self, bno: int, length: int, oi: Owner, unwritten: bool = False) -> None:
        """Blocks [bno, bno+length) no longer belong to ``oi``
        (xfs_rmap_unmap)."""
        if length <= 0:
            return
        owner, offset, flags = oi.owner, oi.offset, oi.flags
        if unwritten:
            flags |= UNWRITTEN
        ignore_off = non_inode(owner) or bool(flags & BMBT_BLOCK)
        key = (bno, owner, (offset | flags) & ~UNWRITTEN)
        cur = self.tree.cursor(key)
        here = _rec(cur.here())
        at = here is not None and here.key() == key
        lt = here if at else _rec(cur.prev())
        if lt is None:
            raise self._corrupt(f"unmapping blocks {bno}+{length} of {oi.describe()}: no "
                                "record at or before them", bno)
        if owner == OWN_NULL:
            if bno < lt.end:
                raise self._corrupt(f"new space {bno}+{length} is mapped", bno)
            return
        if owner == OWN_UNKNOWN and lt.end <= bno:
            nxt = here if not at else self._next(lt, None)
            if nxt is None or nxt.start >= bno + length:
                return
        if lt.start > bno or lt.end < bno + length:
            raise self._corrupt(f"unmapping blocks {bno}+{length} of {oi.describe()}: the "
                                f"record {lt.start}+{lt.count} does not hold them", bno)
        self._check_owner(lt, bno, length, owner, offset, flags, oi)
        t = self.tree
        if lt.start == bno and lt.count == length:
            if at:
                cur.delete_here(lt.key())
            else:
                t.delete(lt.key())
        elif lt.start == bno:
            moved = lt._replace(start=bno + length, count=lt.count - length,
                                offset=lt.offset if ignore_off else lt.offset + length)
            if at:
                cur.replace_here(lt.key(), moved.disk())
            else:
                t.replace(lt.key(), moved.disk())
        elif lt.end == bno + length:
            if at:
                t.update(lt._replace(count=lt.count - length).disk())
            else:
                cur.update_prev(lt._replace(count=lt.count - length).disk())
        else:
            left = bno - lt.start
            right = Rec(bno + length, lt.count - length - left, lt.owner,
                        0 if ignore_off else offset + length, flags).disk()
            if at:
                t.update(lt._replace(count=left).disk())
                t.insert(right)
            else:
                cur.update_prev(lt._replace(count=left).disk())
                cur.insert(right)

    def reown(self, bno: int, length: int, oi: Owner, new_owner: int,
              unwritten: bool = False) -> bool:
        """:meth:`unmap` of blocks [bno, bno+length) of ``oi`` and :meth:`map`
        of them to inode ``new_owner`` (the same offset, fork and flags)
        made as the one change they come to when a record is exactly those
        blocks of ``oi``, no other record starts at its block (shared
        blocks) and none beside it could merge with the new owner's: the
        record's owner rewritten in place, one descent.  False, and nothing
        changed, otherwise (the caller unmaps and maps)."""
        owner, offset, flags = oi.owner, oi.offset, oi.flags
        if unwritten:
            flags |= UNWRITTEN
        if non_inode(owner) or non_inode(new_owner):
            return False
        key = (bno, owner, (offset | flags) & ~UNWRITTEN)
        cur = self.tree.cursor(key)
        here = _rec(cur.here())
        if here is None or here.key() != key or here.count != length or here.flags != flags:
            return False
        lt = _rec(cur.prev())
        if lt is not None and (lt.start == bno or lt.end > bno or
                               (lt.end == bno and _mergeable(lt, new_owner, flags))):
            return False
        gt = _rec(cur.after())
        if gt is not None and (gt.start < bno + length or
                               (gt.start == bno + length and
                                _mergeable(gt, new_owner, flags))):
            return False
        cur.replace_here(key, here._replace(owner=new_owner).disk())
        return True

    def _check_owner(self, r: Rec, bno, length, owner, offset, flags, oi) -> None:
        """xfs_rmap_free_check_owner."""
        if owner == OWN_UNKNOWN:
            return
        bad = None
        if (flags & UNWRITTEN) != (r.flags & UNWRITTEN):
            bad = "its unwritten state differs"
        elif owner != r.owner:
            bad = f"the record belongs to {Owner(r.owner, r.offset, r.flags).describe()}"
        elif not non_inode(owner):
            if flags & BMBT_BLOCK:
                if not r.flags & BMBT_BLOCK:
                    bad = "the record is no bmbt block"
            elif r.offset > offset or offset + length > r.offset + r.count:
                bad = f"the record maps file offsets {r.offset}+{r.count}"
        if bad:
            raise self._corrupt(f"unmapping blocks {bno}+{length} of {oi.describe()}: {bad}",
                                bno)

    # -- convert -------------------------------------------------------------------
    def convert(self, bno: int, length: int, oi: Owner, unwritten: bool) -> None:
        """Change fork blocks [bno, bno+length) of ``oi`` from unwritten to
        written (``unwritten`` True: their state now) or back
        (xfs_rmap_convert)."""
        if length <= 0:
            return
        owner, offset = oi.owner, oi.offset
        if non_inode(owner) or oi.flags & (ATTR_FORK | BMBT_BLOCK):
            raise self._corrupt(f"converting blocks of {oi.describe()}", bno)
        oldext = UNWRITTEN if unwritten else 0
        newext = UNWRITTEN - oldext
        end_off = offset + length
        prev = self.lookup_le(bno, owner, offset, oldext)
        if prev is None or prev.owner != owner or prev.offset > offset or \
                prev.offset + prev.count < end_off or prev.flags != oldext or \
                prev.start > bno or prev.end < bno + length:
            raise self._corrupt(f"converting blocks {bno}+{length} of {oi.describe()}: no "
                                "record in that state holds them", bno)
        lfill = prev.offset == offset
        rfill = prev.offset + prev.count == end_off
        left = self._prev(prev)
        lcont = rcont = False
        if left is not None:
            if left.end > bno:
                raise self._corrupt(f"record {left.start}+{left.count} overlaps "
                                    f"{bno}+{length}", bno)
            lcont = (left.end == bno and left.offset + left.count == offset
                     and _mergeable(left, owner, newext))
        right = self._next(prev, None)
        if right is not None:
            if bno + length > right.start:
                raise self._corrupt(f"record {right.start}+{right.count} overlaps "
                                    f"{bno}+{length}", bno)
            rcont = (bno + length == right.start and end_off == right.offset
                     and _mergeable(right, owner, newext))
        if lfill and lcont and rfill and rcont and \
                left.count + length + right.count > LEN_MAX:
            rcont = False
        t = self.tree
        if lfill and rfill:
            if lcont and rcont:
                t.delete(right.key())
                t.delete(prev.key())
                t.update(left._replace(count=left.count + prev.count + right.count).disk())
            elif lcont:
                t.delete(prev.key())
                t.update(left._replace(count=left.count + prev.count).disk())
            elif rcont:
                t.delete(right.key())
                t.update(prev._replace(count=length + right.count, flags=newext).disk())
            else:
                t.update(prev._replace(flags=newext).disk())
        elif lfill:
            moved = prev._replace(start=prev.start + length, offset=prev.offset + length,
                                  count=prev.count - length)
            t.replace(prev.key(), moved.disk())
            if lcont:
                t.update(left._replace(count=left.count + length).disk())
            else:
                t.insert(Rec(bno, length, owner, offset, newext).disk())
        elif rfill:
            t.update(prev._replace(count=prev.count - length).disk())
            if rcont:
                t.replace(right.key(), right._replace(start=bno, offset=offset,
                                                      count=right.count + length).disk())
            else:
                t.insert(Rec(bno, length, owner, offset, newext).disk())
        else:
            # the middle: one record becomes three
            t.replace(prev.key(), Rec(bno + length, prev.offset + prev.count - end_off,
                                      owner, end_off, prev.flags).disk())
            t.insert(prev._replace(count=offset - prev.offset).disk())
            t.insert(Rec(bno, length, owner, offset, newext).disk())

    # -- the shared variants (reflinked data forks) ----------------------------------
    def _find_left(self, bno: int, owner: int, offset: int, flags: int) -> Rec | None:
        """The owner's record ending just before ``bno`` (and, for a fork
        mapping, just before ``offset`` in the file), among every record
        over block bno-1 (xfs_rmap_find_left_neighbor)."""
        if bno == 0:
            return None
        ignore = non_inode(owner) or bool(flags & BMBT_BLOCK)
        if not ignore and offset == 0:
            return None
        for raw in self.tree.query_overlap(bno - 1, bno - 1):
            r = _rec(raw)
            if r.owner != owner:
                continue
            if not non_inode(r.owner) and not r.flags & BMBT_BLOCK and \
                    r.offset + r.count - 1 != offset - 1:
                continue
            return r
        return None

    def _find_covering(self, bno: int, owner: int, offset: int, flags: int) -> Rec | None:
        """The owner's record holding block ``bno`` at file ``offset``,
        among every record over that block (xfs_rmap_lookup_le_range)."""
        for raw in self.tree.query_overlap(bno, bno):
            r = _rec(raw)
            if r.owner != owner:
                continue
            if not non_inode(r.owner) and not r.flags & BMBT_BLOCK and \
                    (r.offset > offset or r.offset + r.count <= offset):
                continue
            return r
        return None

    def _lookup_eq(self, bno: int, owner: int, offset: int, flags: int) -> Rec | None:
        return _rec(self.tree.lookup_eq((bno, owner, (offset | flags) & ~UNWRITTEN)))

    def map_shared(self, bno: int, length: int, oi: Owner, unwritten: bool = False) -> None:
        """:meth:`map` where the blocks may also belong to other files
        (xfs_rmap_map_shared)."""
        if length <= 0:
            return
        owner, offset, flags = oi.owner, oi.offset, oi.flags
        if unwritten:
            flags |= UNWRITTEN
        lt = self._find_left(bno, owner, offset, flags)
        if lt is not None and not _mergeable(lt, owner, flags):
            lt = None
        gt = self._lookup_eq(bno + length, owner, offset + length, flags)
        if gt is not None and not _mergeable(gt, owner, flags):
            gt = None
        t = self.tree
        if lt is not None and lt.end == bno and lt.offset + lt.count == offset:
            count = lt.count + length
            if gt is not None and bno + length == gt.start and offset + length == gt.offset:
                count += gt.count
                t.delete(gt.key())
            t.update(lt._replace(count=count).disk())
        elif gt is not None and bno + length == gt.start and offset + length == gt.offset:
            t.delete(gt.key())
            t.insert(gt._replace(start=bno, offset=offset, count=gt.count + length).disk())
        else:
            t.insert(Rec(bno, length, owner, offset, flags).disk())

    def unmap_shared(self, bno: int, length: int, oi: Owner, unwritten: bool = False) -> None:
        """:meth:`unmap` where the blocks may also belong to other files
        (xfs_rmap_unmap_shared)."""
        if length <= 0:
            return
        owner, offset, flags = oi.owner, oi.offset, oi.flags
        if unwritten:
            flags |= UNWRITTEN
        lt = self._find_covering(bno, owner, offset, flags)
        bad = None
        if lt is None:
            bad = "no record of that owner holds them"
        elif lt.start > bno or lt.end < bno + length:
            bad = f"the record {lt.start}+{lt.count} does not hold them"
        elif (flags & UNWRITTEN) != (lt.flags & UNWRITTEN):
            bad = "its unwritten state differs"
        elif lt.offset > offset or offset > lt.offset + lt.count:
            bad = f"the record maps file offsets {lt.offset}+{lt.count}"
        if bad:
            raise self._corrupt(f"unmapping shared blocks {bno}+{length} of "
                                f"{oi.describe()}: {bad}", bno)
        t = self.tree
        if lt.start == bno and lt.count == length:
            t.delete(lt.key())
        elif lt.start == bno:
            t.delete(lt.key())
            t.insert(lt._replace(start=bno + length, count=lt.count - length,
                                 offset=lt.offset + length).disk())
        elif lt.end == bno + length:
            t.update(lt._replace(count=lt.count - length).disk())
        else:
            left = bno - lt.start
            t.update(lt._replace(count=left).disk())
            t.insert(Rec(bno + length, lt.count - length - left, owner, offset + length,
                         lt.flags).disk())

    def convert_shared(self, bno: int, length: int, oi: Owner, unwritten: bool) -> None:
        """:meth:`convert` where the blocks may also belong to other files
        (xfs_rmap_convert_shared): the same result, each change of a record
        the owner's own."""
        if length <= 0:
            return
        # an unmap of the old state and a map of the new leave the records
        # the kernel's conversion leaves: the owner's runs merged where they
        # meet in blocks, file offsets and state
        self.unmap_shared(bno, length, oi, unwritten)
        self.map_shared(bno, length, oi, not unwritten)
