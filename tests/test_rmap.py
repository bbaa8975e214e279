"""The rmapbt kept record by record (fstool.alloc.rmap) against a model.

The model is who owns every block (owner, file offset, fork, bmbt and
unwritten flags).  Thousands of random maps, unmaps and written/unwritten
conversions go through :class:`fstool.alloc.rmap.Rmap` over a real rmapbt
(the overlapping btree engine, tiny blocks so the tree is tall); after
every batch the tree's records must be exactly the model's blocks merged
the way xfs_repair and the kernel merge them (one owner, the same flags,
adjacent blocks and, for fork mappings, adjacent file offsets), and the
tree must pass the structural walk of test_btree_write (low and high node
keys included).  What the kernel calls corruption (mapping over mapped
blocks, unmapping blocks of another owner or in another state) is refused
and changes nothing.
"""
from __future__ import annotations

import random

import pytest

from fstool.alloc import rmap as R
from fstool.errors import CorruptionError
from test_btree_write import KINDS, MemStore, check as check_tree, empty_tree

NBLOCKS = 600


def merged(model: dict) -> list:
    """The records the model's blocks must give, in the tree's key order."""
    out = []
    for b in sorted(model):
        owner, off, flags = model[b]
        if out:
            s, n, o, poff, pfl = out[-1]
            ignore = R.non_inode(owner) or flags & R.BMBT_BLOCK
            if s + n == b and o == owner and pfl == flags and (ignore or poff + n == off):
                out[-1] = (s, n + 1, o, poff, pfl)
                continue
        out.append((b, 1, owner, off, flags))
    return sorted((s, n, o, off | fl) for s, n, o, off, fl in out)


def _owner(rng):
    r = rng.random()
    if r < 0.25:
        return rng.choice((R.AG, R.INOBT, R.INODES, R.REFC, R.COW))
    ino = rng.choice((131, 132, 133, 5000))
    if r < 0.35:
        return R.bmbt(ino, rng.random() < 0.3)
    return R.fork(ino, rng.randrange(0, 200), rng.random() < 0.2)


def _run(rng, rm: R.Rmap, model: dict):
    """One random operation; returns its kind."""
    op = rng.random()
    if op < 0.45 or not model:
        bno = rng.randrange(1, NBLOCKS - 8)
        n = rng.randrange(1, 8)
        oi = _owner(rng)
        unw = rng.random() < 0.3 and not R.non_inode(oi.owner) and \
            not oi.flags & (R.BMBT_BLOCK | R.ATTR_FORK)
        free = all(b not in model for b in range(bno, bno + n))
        if not free:
            before = list(rm.records())
            with pytest.raises(CorruptionError):
                rm.map(bno, n, oi, unw)
            assert list(rm.records()) == before
            return "refused"
        rm.map(bno, n, oi, unw)
        for k in range(n):
            who = oi.at(k)
            model[bno + k] = (who.owner, who.offset, who.flags | (R.UNWRITTEN if unw else 0))
        return "map"
    # a run of blocks of one owner somewhere in the model
    b = rng.choice(list(model))
    owner, off, flags = model[b]
    lo = b
    while lo - 1 in model and model[lo - 1][0] == owner and model[lo - 1][2] == flags:
        lo -= 1
    hi = b + 1
    while hi in model and model[hi][0] == owner and model[hi][2] == flags:
        hi += 1
    ignore = R.non_inode(owner) or flags & R.BMBT_BLOCK
    # the run of one record: offsets must follow each other too
    if not ignore:
        while lo < b and model[lo][1] + (b - lo) != off:
            lo += 1
        while hi > b + 1 and model[hi - 1][1] - (hi - 1 - b) != off:
            hi -= 1
    a = rng.randrange(lo, b + 1)
    z = rng.randrange(b + 1, hi + 1)
    oi = R.Owner(owner, model[a][1], flags & (R.ATTR_FORK | R.BMBT_BLOCK))
    unw = bool(flags & R.UNWRITTEN)
    if op < 0.75 or ignore or flags & R.ATTR_FORK:
        if rng.random() < 0.05:
            # the wrong owner, or the wrong state: refused
            with pytest.raises(CorruptionError):
                rm.unmap(a, z - a, R.Owner(owner ^ 1 if not R.non_inode(owner) else
                                           R.OWN_FS, oi.offset, oi.flags), unw)
            return "refused"
        rm.unmap(a, z - a, oi, unw)
        for k in range(a, z):
            del model[k]
        return "unmap"
    rm.convert(a, z - a, oi, unw)
    for k in range(a, z):
        o, f, fl = model[k]
        model[k] = (o, f, fl ^ R.UNWRITTEN)
    return "convert"


@pytest.mark.parametrize("maxrecs", [(4, 4), (6, 5), None], ids=["cap4", "cap6_5", "real"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rmap_ops_against_model(maxrecs, seed):
    rng = random.Random(seed * 7919 + (maxrecs or (0, 0))[0])
    kind = KINDS["rmapbt"]
    store = MemStore(blocksize=1024, seed=seed)
    tree = empty_tree(kind, store, maxrecs)
    rm = R.Rmap(tree, agno=store.agno)
    model: dict = {}
    seen = {"map": 0, "unmap": 0, "convert": 0, "refused": 0}
    for n in range(3000):
        seen[_run(rng, rm, model)] += 1
        if n % 50 == 49:
            want = merged(model)
            assert [tuple(r.disk()) for r in rm.records()] == want
            check_tree(kind, tree, store, {kind.order(r): r for r in want}, 1)
    assert min(seen.values()) > 20, seen
    assert tree.levels >= (3 if maxrecs else 1)


def test_special_owners_merge_regardless_of_offset():
    store = MemStore(blocksize=1024)
    rm = R.Rmap(empty_tree(KINDS["rmapbt"], store, None), agno=store.agno)
    rm.map(10, 2, R.AG)
    rm.map(12, 3, R.AG)
    rm.map(8, 2, R.AG)
    rm.map(20, 1, R.bmbt(200))
    rm.map(21, 1, R.bmbt(200))
    assert [r.disk() for r in rm.records()] == [(8, 7, R.OWN_AG, 0),
                                                (20, 2, 200, R.BMBT_BLOCK)]
    # file data merges only when the file offsets follow on
    rm.map(30, 2, R.data(300, 0))
    rm.map(32, 2, R.data(300, 5))
    rm.map(34, 2, R.data(300, 7))
    assert [r.disk() for r in rm.records()][2:] == [(30, 2, 300, 0), (32, 4, 300, 5)]
    # the middle of a record: split in two, the right part at its offset
    rm.unmap(33, 2, R.data(300, 6))
    assert [r.disk() for r in rm.records()][2:] == [(30, 2, 300, 0), (32, 1, 300, 5),
                                                    (35, 1, 300, 8)]
    # a conversion in the middle: one record becomes three
    rm.map(40, 10, R.data(301, 100), unwritten=True)
    rm.convert(43, 2, R.data(301, 103), unwritten=True)
    assert [r.disk() for r in rm.records()][5:] == [
        (40, 3, 301, 100 | R.UNWRITTEN), (43, 2, 301, 103), (45, 5, 301, 105 | R.UNWRITTEN)]
    # and back: the three merge again
    rm.convert(43, 2, R.data(301, 103), unwritten=False)
    assert [r.disk() for r in rm.records()][5:] == [(40, 10, 301, 100 | R.UNWRITTEN)]
