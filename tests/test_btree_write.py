"""The btree write engine against a sorted-list model and against xfs_repair.

In memory: thousands of random inserts, deletes and updates per tree type,
with tiny block capacities (tall trees, every split/shift/merge path) and
with real ones.  After every batch the tree is walked with
``fstool.fs.btree.BtreeReader`` (its own decoders, and the metadata verifier
over CRC, magic, uuid, blkno and owner) and checked: records equal the
model, key order, node keys equal the low key of the child, sibling chains,
numrecs within [minrecs, maxrecs] below the root, levels, and the blocks
reached are exactly the blocks the store holds allocated.

The bmbt gets the same treatment under an inode root (root growth into a
new block, pull-up when the only child fits the root again).

On images: a kernel-written filesystem with multi-level free-space and
inode btrees has its inobt and finobt rebuilt record by record into new
blocks, allocated through a small allocator that edits the real bnobt and
cntbt with the same engine (their own blocks come from the AGFL); the old
blocks are freed back.  Another copy gets all four trees bulk loaded.  A
kernel-written file with thousands of extents gets its bmbt bulk loaded,
and another one grows and shrinks a level through incremental inserts and
deletes with real data blocks.  ``xfs_repair -n`` must accept every result,
and the kernel must mount it, read it, change it without shutting down,
and leave it clean for xfs_repair again.
"""
from __future__ import annotations

import bisect
import os
import random
import struct
import subprocess
import types
import zlib
from pathlib import Path

import pytest

from fixtures import images
from fstool.errors import CorruptionError, InvalidArgument
from fstool.format import constants as C
from fstool.format.structs import AGF, AGI, SB
from fstool.fs import btree as R
from fstool.fs import btree_write as W
from fstool._backend import parsers


def stamp_crc(buf: bytearray, crc_off: int) -> bytearray:
    """This test's own CRC stamping (it builds images without the journal)."""
    buf[crc_off:crc_off + 4] = struct.pack("<I", parsers.xfs_cksum(bytes(buf), crc_off))
    return buf
from fstool.io import verify as V

UUID = bytes(range(16))
NULL = C.NULLAGBLOCK


# --------------------------------------------------------------------------
# Tree kinds, described independently of the engine's codecs
# --------------------------------------------------------------------------

class Kind:
    def __init__(self, name, magic, codec, bt, order, keybytes, nodekey, gen):
        self.name, self.magic, self.codec, self.bt = name, magic, codec, bt
        self.order = order          # record -> comparison key
        self.keybytes = keybytes    # record -> on-disk node key
        self.nodekey = nodekey      # on-disk node key bytes -> comparison key
        self.gen = gen              # rng -> random record


def _ino_rec(rng):
    holemask = rng.choice((0, 0, 0xFF00, 0x00F0))
    count = 64 - 4 * bin(holemask).count("1")
    free = rng.getrandbits(64)
    return (rng.randrange(0, 1 << 26) * 64, holemask, count, rng.randrange(count + 1), free)


def _ino_full_rec(rng):
    return (rng.randrange(0, 1 << 26) * 64, 0, 64, rng.randrange(65), rng.getrandbits(64))


def _alloc_rec(rng):
    return (rng.randrange(1, 1 << 20), rng.randrange(1, 1 << 12))


def _rmap_rec(rng):
    """A random rmapbt record: (start, count, owner, offset | flags)."""
    if rng.random() < 0.3:
        owner = (1 << 64) - rng.randrange(3, 10)           # a special owner
        off = 0
    else:
        owner = rng.randrange(128, 1 << 40)
        flags = rng.choice((0, 0, 0, C.XFS_RMAP_OFF_ATTR, C.XFS_RMAP_OFF_BMBT,
                            C.XFS_RMAP_OFF_UNWRITTEN))
        off = (0 if flags == C.XFS_RMAP_OFF_BMBT else rng.randrange(1 << 30)) | flags
    return (rng.randrange(1, 1 << 20), rng.randrange(1, 1 << 12), owner, off)


def _rmap_order(r):
    return (r[0], r[2], r[3] & ~C.XFS_RMAP_OFF_UNWRITTEN)


def _rmap_keybytes(r):
    return R.RMAP_CODEC.rec_key_bytes(R.RMAP_CODEC.pack_rec(r), 0)


_I = struct.Struct(">I")
_II = struct.Struct(">II")
_IQQ = struct.Struct(">IQQ")

KINDS = {
    "inobt": Kind("inobt", C.XFS_IBT_CRC_MAGIC, R.INO_CODEC, R.INOBT_SPARSE,
                  lambda r: (r[0],), lambda r: _I.pack(r[0]),
                  lambda b: _I.unpack(b), _ino_rec),
    "finobt_full": Kind("finobt", C.XFS_FIBT_CRC_MAGIC, R.INO_CODEC_FULL, R.FINOBT_FULL,
                        lambda r: (r[0],), lambda r: _I.pack(r[0]),
                        lambda b: _I.unpack(b), _ino_full_rec),
    "bnobt": Kind("bnobt", C.XFS_ABTB_CRC_MAGIC, R.BNO_CODEC, R.BNOBT,
                  lambda r: (r[0],), lambda r: _II.pack(*r),
                  lambda b: (_II.unpack(b)[0],), _alloc_rec),
    "cntbt": Kind("cntbt", C.XFS_ABTC_CRC_MAGIC, R.CNT_CODEC, R.CNTBT,
                  lambda r: (r[1], r[0]), lambda r: _II.pack(*r),
                  lambda b: _II.unpack(b)[::-1], _alloc_rec),
    # the overlapping tree: node keys are a low and a high key
    "rmapbt": Kind("rmapbt", C.XFS_RMAP_CRC_MAGIC, R.RMAP_CODEC, R.RMAPBT, _rmap_order,
                   _rmap_keybytes,
                   lambda b: (lambda s, o, f: (s, o, f & ~C.XFS_RMAP_OFF_UNWRITTEN))(
                       *_IQQ.unpack_from(b, 0)), _rmap_rec),
}


# --------------------------------------------------------------------------
# In-memory block store with alloc/free accounting and CRC "commits"
# --------------------------------------------------------------------------

class MemStore:
    def __init__(self, blocksize=1024, agno=3, agblocks=1 << 22, seed=0):
        self.blocksize = blocksize
        self.agno, self.agblocks = agno, agblocks
        self.blocks: dict[int, bytearray] = {}
        self.allocated: set[int] = set()
        self.pending: set[int] = set()
        self.freed: list[int] = []
        self.next = 100
        self.rng = random.Random(seed)
        self.nalloc = self.nfree = 0

    def read(self, addr):
        assert addr in self.allocated, f"read of unallocated block {addr}"
        return self.blocks[addr]

    def new(self, addr):
        assert addr in self.allocated, f"new() of unallocated block {addr}"
        self.blocks[addr] = bytearray(self.blocksize)
        return self.blocks[addr]

    def dirty(self, addr):
        assert addr in self.allocated, f"dirty() of unallocated block {addr}"
        self.pending.add(addr)

    def alloc(self, near):
        if self.freed and self.rng.random() < 0.7:
            addr = self.freed.pop(self.rng.randrange(len(self.freed)))
        else:
            addr = self.next
            self.next += 1
        assert addr not in self.allocated
        self.allocated.add(addr)
        self.nalloc += 1
        return addr

    def free(self, addr):
        assert addr in self.allocated, f"double free of {addr}"
        self.allocated.remove(addr)
        del self.blocks[addr]
        self.pending.discard(addr)
        self.freed.append(addr)
        self.nfree += 1

    def daddr(self, addr):
        return (self.agno * self.agblocks + addr) * (self.blocksize // 512)

    def commit(self):
        for addr in self.pending:
            stamp_crc(self.blocks[addr], C.XFS_BTREE_SBLOCK_CRC_OFF)
        self.pending.clear()


class _FakeFs:
    """Just enough of Filesystem for BtreeReader: verified block reads."""

    def __init__(self, store: MemStore):
        self.store = store
        self.sb = types.SimpleNamespace(blocksize=store.blocksize)

    def read_meta(self, daddr, length, bt, *, owner=None, agno=None, block=None, ino=None):
        st = self.store
        assert daddr == st.daddr(block)
        buf = bytes(st.blocks[block])
        V.verify(buf, bt, uuid=UUID, daddr=daddr, owner=owner, agno=agno, block=block)
        return buf


def walk(kind: Kind, fs, root: int, levels: int, agno: int, maxrecs, addr_to_daddr):
    """Check every structural rule; returns (records in order, block addrs)."""
    reader = R.BtreeReader(fs, kind.bt, agno=agno, owner=agno, addr_to_daddr=addr_to_daddr)
    rows = list(reader.levels([root], levels))
    assert len(rows) == levels
    minrecs = (maxrecs[0] // 2, maxrecs[1] // 2)
    addrs = []
    for depth, row in enumerate(rows):
        level = levels - 1 - depth
        assert [b.level for b in row] == [level] * len(row)
        for i, blk in enumerate(row):
            addrs.append(blk.addr)
            assert blk.leftsib == (row[i - 1].addr if i else NULL), (level, i)
            assert blk.rightsib == (row[i + 1].addr if i + 1 < len(row) else NULL), (level, i)
            cap = maxrecs[level > 0]
            assert blk.numrecs <= cap
            if depth == 0:
                assert len(row) == 1
                if level > 0:
                    assert blk.numrecs >= 2, "a root node needs two children"
            else:
                assert blk.numrecs >= minrecs[level > 0], \
                    f"level {level} block {blk.addr}: {blk.numrecs} < minrecs"
        if level > 0:
            child_row = {b.addr: b for b in rows[depth + 1]}
            ordered = [p for b in row for p in b.ptrs]
            assert ordered == [b.addr for b in rows[depth + 1]], "pointers out of chain order"
            keys = [k for b in row for k in b.keys]
            nk = [kind.nodekey(k) for k in keys]
            assert nk == sorted(set(nk)), "node keys not strictly increasing"
            for key, ptr in zip(keys, ordered):
                child = child_row[ptr]
                if kind.codec.overlapping:
                    # the child's low key and the greatest high key below it
                    below = child.keys if child.level else [kind.keybytes(r)
                                                           for r in child.recs]
                    assert key == kind.codec.block_key(below), \
                        f"key of child {ptr} is not its low and high key"
                    continue
                low = child.keys[0] if child.level else kind.keybytes(child.recs[0])
                assert key == low, f"key of child {ptr} is not its low key"
    recs = [r for blk in rows[-1] for r in blk.recs]
    ks = [kind.order(r) for r in recs]
    assert all(a < b for a, b in zip(ks, ks[1:])), "records out of order"
    return recs, addrs


def check(kind, tree: W.ShortBtree, store: MemStore, model: dict, nblocks0: int):
    store.commit()
    fs = _FakeFs(store)
    recs, addrs = walk(kind, fs, tree.root, tree.levels, store.agno, tree.shape.maxrecs,
                       store.daddr)
    assert recs == [model[k] for k in sorted(model)]
    assert len(addrs) == len(set(addrs))
    assert set(addrs) == store.allocated, "leaked or stray blocks"
    assert len(addrs) == nblocks0 + tree.nblocks_delta
    assert tree.count() == len(model)


def _norm(kind, rec):
    """A record as the reader returns it (full inobt records read back with
    holemask 0 and count 64)."""
    return kind.codec.unpack_rec(kind.codec.pack_rec(rec), 0)


def check_lookups(kind, tree, model, rng, n=40):
    keys = sorted(model)
    for _ in range(n):
        probe = kind.order(kind.gen(rng)) if rng.random() < 0.7 or not keys else \
            rng.choice(keys)
        i = bisect.bisect_left(keys, probe)
        ge = model[keys[i]] if i < len(keys) else None
        eq = ge if ge is not None and keys[i] == probe else None
        j = bisect.bisect_right(keys, probe) - 1
        le = model[keys[j]] if j >= 0 else None
        assert tree.lookup_ge(probe) == ge
        assert tree.lookup_eq(probe) == eq
        assert tree.lookup_le(probe) == le
        cur = tree.cursor(probe)
        assert cur.here() == ge
        assert cur.after() == (model[keys[i + 1]] if i + 1 < len(keys) else None)
        fwd = list(zip(range(5), tree.iter_from(probe)))
        assert [r for _, r in fwd] == [model[k] for k in keys[i:i + 5]]
        back = list(zip(range(5), tree.iter_from(probe, reverse=True)))
        assert [r for _, r in back] == [model[k] for k in keys[max(j - 4, 0):j + 1][::-1]]


def empty_tree(kind, store, maxrecs):
    tree = W.ShortBtree.create(kind.bt, store, agno=store.agno, uuid=UUID,
                               maxrecs=maxrecs)
    assert tree.levels == 1 and tree.count() == 0 and tree.nblocks_delta == 0
    return tree


def run_random(kind, tree, store, model, rng, ops, batch, target, nblocks0):
    """Random operations steering the size towards ``target``."""
    for n in range(ops):
        size = len(model)
        p_insert = 0.75 if size < target else 0.25
        r = rng.random()
        if r < p_insert or not model:
            rec = _norm(kind, kind.gen(rng))
            k = kind.order(rec)
            if k in model:
                with pytest.raises(W.DuplicateKeyError):
                    tree.insert(rec)
            else:
                tree.insert(rec)
                model[k] = rec
        elif r < p_insert + (1 - p_insert) * 0.8:
            if rng.random() < 0.05:
                probe = kind.order(kind.gen(rng))
                if probe not in model:
                    with pytest.raises(W.MissingKeyError):
                        tree.delete(probe)
                    continue
            k = rng.choice(list(model)) if size < 64 else _pick(model, rng)
            if rng.random() < 0.5:
                # from a cursor's descent
                cur = tree.cursor(k)
                assert cur.here() == model.pop(k)
                cur.delete_here(k)
            else:
                assert tree.delete(k) == model.pop(k)
        else:
            k = _pick(model, rng)
            rec = _same_key(kind, model[k], rng)
            tree.update(rec)
            model[k] = rec
        if n % batch == batch - 1:
            check(kind, tree, store, model, nblocks0)
            check_lookups(kind, tree, model, rng, 10)
    check(kind, tree, store, model, nblocks0)


def _same_key(kind, old, rng):
    """A record with ``old``'s key and a new payload."""
    new = _norm(kind, kind.gen(rng))
    if kind.name == "cntbt":
        return old
    if kind.name == "bnobt":
        return (old[0], new[1])
    if kind.name == "rmapbt":
        # another length and written state: the high key moves
        unw = old[3] & C.XFS_RMAP_OFF_UNWRITTEN if old[3] & C.XFS_RMAP_OFF_BMBT or \
            old[2] >> 63 else rng.choice((0, C.XFS_RMAP_OFF_UNWRITTEN))
        return (old[0], new[1], old[2], (old[3] & ~C.XFS_RMAP_OFF_UNWRITTEN) | unw)
    return (old[0],) + new[1:]


def _pick(model, rng):
    # dict order is insertion order: a random existing key without a list copy
    it = iter(model)
    for _ in range(rng.randrange(min(len(model), 64))):
        next(it)
    return next(it)


@pytest.mark.parametrize("kind_name", sorted(KINDS))
@pytest.mark.parametrize("maxrecs", [(4, 4), (5, 7), None], ids=["cap4", "cap5_7", "real"])
def test_random_ops_against_model(kind_name, maxrecs):
    kind = KINDS[kind_name]
    rng = random.Random(zlib.crc32(f"{kind_name}{maxrecs}".encode()))
    store = MemStore(blocksize=1024, seed=rng.randrange(1 << 30))
    tree = empty_tree(kind, store, maxrecs)
    model: dict = {}
    small = maxrecs is not None
    # grow, shrink to nothing, grow again
    run_random(kind, tree, store, model, rng, 3000 if small else 6000, 100,
               400 if small else 3000, 1)
    assert tree.levels >= (4 if small else 2)
    peak_levels = tree.levels
    while model:
        k = _pick(model, rng)
        assert tree.delete(k) == model.pop(k)
        if len(model) % 97 == 0:
            check(kind, tree, store, model, 1)
    check(kind, tree, store, model, 1)
    assert tree.levels == 1 and len(store.allocated) == 1
    run_random(kind, tree, store, model, rng, 1500, 150, 300, 1)
    assert peak_levels > 1
    assert store.nalloc - store.nfree == len(store.allocated)


@pytest.mark.parametrize("order", ["ascending", "descending"])
def test_sequential_inserts_and_deletes(order):
    """Monotonic keys drive the shift-to-sibling and split paths at one edge
    of the tree; deleting from the other edge drives the merges."""
    kind = KINDS["inobt"]
    store = MemStore(blocksize=1024)
    tree = empty_tree(kind, store, (6, 5))
    model = {}
    keys = list(range(0, 64 * 2000, 64))
    if order == "descending":
        keys.reverse()
    for i, k in enumerate(keys):
        rec = (k, 0, 64, 7, (1 << 64) - 1)
        tree.insert(rec)
        model[(k,)] = rec
        if i % 250 == 0:
            check(kind, tree, store, model, 1)
    check(kind, tree, store, model, 1)
    assert tree.levels >= 5
    for i, k in enumerate(keys):
        assert tree.delete((k,))[0] == k
        del model[(k,)]
        if i % 250 == 0:
            check(kind, tree, store, model, 1)
    check(kind, tree, store, model, 1)
    assert tree.levels == 1


def test_bnobt_key_carries_blockcount_of_first_record():
    """Updating the length of a leaf's first extent rewrites the parent key
    (bnobt keys hold startblock and blockcount as the kernel writes them)."""
    kind = KINDS["bnobt"]
    store = MemStore()
    tree = empty_tree(kind, store, (4, 4))
    model = {}
    for s in range(10, 400, 10):
        tree.insert((s, 3))
        model[(s,)] = (s, 3)
    check(kind, tree, store, model, 1)
    for s in range(10, 400, 10):
        tree.update((s, 5 + s % 7))
        model[(s,)] = (s, 5 + s % 7)
    check(kind, tree, store, model, 1)


def test_errors():
    kind = KINDS["inobt"]
    store = MemStore()
    tree = empty_tree(kind, store, None)
    rec = (64, 0, 64, 64, (1 << 64) - 1)
    tree.insert(rec)
    with pytest.raises(W.DuplicateKeyError):
        tree.insert(rec)
    with pytest.raises(W.MissingKeyError):
        tree.delete((128,))
    with pytest.raises(KeyError):
        tree.update((128, 0, 64, 0, 0))
    # a block whose level disagrees with its place in the tree
    buf = store.read(tree.root)
    buf[5] = 1
    with pytest.raises(CorruptionError):
        tree.lookup_eq((64,))
    with pytest.raises(InvalidArgument):
        W.bulk_load(kind.bt, store, [rec, rec], agno=3, uuid=UUID)


# --------------------------------------------------------------------------
# Bulk load
# --------------------------------------------------------------------------

def _bulk(kind, nrecs, seed, **kw):
    rng = random.Random(seed)
    recs = {}
    while len(recs) < nrecs:
        r = _norm(kind, kind.gen(rng))
        recs[kind.order(r)] = r
    model = dict(sorted(recs.items()))
    store = MemStore(blocksize=kw.pop("blocksize", 4096), seed=seed)
    root, levels, used = W.bulk_load(kind.bt, store, list(model.values()),
                                     agno=store.agno, uuid=UUID, **kw)
    tree = W.ShortBtree(kind.bt, store, root=root, levels=levels,
                        agno=store.agno, uuid=UUID, maxrecs=kw.get("maxrecs"))
    check(kind, tree, store, model, used)
    return tree, store, model, used


def _leaf_counts(tree, store):
    counts = []
    addr = tree._edge_path(False)[0][0]
    while addr != NULL:
        buf = store.read(addr)
        counts.append(struct.unpack_from(">H", buf, 6)[0])
        addr = struct.unpack_from(">I", buf, 12)[0]
    return counts


def test_bulk_load_geometry_matches_kernel_rules():
    kind = KINDS["inobt"]
    # 4 KiB inobt: 252 records a leaf, minrecs 126; default slack 63 leaves
    # 189 wanted per leaf: 1000 records -> 5 leaves of 200, one root above
    tree, store, _, used = _bulk(kind, 1000, 1)
    assert (tree.levels, used) == (2, 6)
    assert _leaf_counts(tree, store) == [200] * 5
    # the block count rounds down: 1130 // 189 = 5 leaves of 226 (not 6)
    tree, store, _, _ = _bulk(kind, 1130, 1)
    assert _leaf_counts(tree, store) == [226] * 5
    # slack 2 (xfs_repair when the AG is short of space): 250 wanted ->
    # 1000 // 250 = 4 leaves of 250
    tree, store, _, used = _bulk(kind, 1000, 1, slack_leaf=2, slack_node=2)
    assert _leaf_counts(tree, store) == [250] * 4
    # 1001 records with slack 2: 4 leaves would need 251, 251, 251, 248?
    # no: spread evenly as 1001 = 4 * 250 + 1 -> 251, 250, 250, 250
    tree, store, _, _ = _bulk(kind, 1001, 1, slack_leaf=2, slack_node=2)
    assert _leaf_counts(tree, store) == [251, 250, 250, 250]
    # slack 0 with exactly full blocks: 504 = 2 * 252
    tree, store, _, _ = _bulk(kind, 504, 1, slack_leaf=0)
    assert _leaf_counts(tree, store) == [252, 252]
    # one more than fits: 505 // 252 = 2 blocks would need 253 -> 3 blocks
    tree, store, _, _ = _bulk(kind, 505, 1, slack_leaf=0)
    assert _leaf_counts(tree, store) == [169, 168, 168]
    # everything fits one leaf: a single-level tree
    tree, store, _, used = _bulk(kind, 189, 1)
    assert (tree.levels, used) == (1, 1)
    tree, store, _, used = _bulk(kind, 0, 1)
    assert (tree.levels, used, tree.count()) == (1, 1, 0)


@pytest.mark.parametrize("kind_name", sorted(KINDS))
def test_bulk_load_then_random_ops(kind_name):
    kind = KINDS[kind_name]
    for n, maxrecs in ((700, (6, 6)), (2500, (8, 5)), (40000, None)):
        tree, store, model, used = _bulk(kind, n, n, maxrecs=maxrecs, blocksize=1024)
        assert tree.levels >= 3
        run_random(kind, tree, store, model, random.Random(n), 1500, 300, n, used)


# --------------------------------------------------------------------------
# bmbt bulk load
# --------------------------------------------------------------------------

class _FsbStore(MemStore):
    """bmbt blocks are addressed by filesystem block number."""
    agblklog = 16

    def daddr(self, fsb):
        agno, agbno = fsb >> self.agblklog, fsb & ((1 << self.agblklog) - 1)
        return (agno * self.agblocks + agbno) * (self.blocksize // 512)

    def commit(self):
        for addr in self.pending:
            stamp_crc(self.blocks[addr], C.XFS_BTREE_LBLOCK_CRC_OFF)
        self.pending.clear()


@pytest.mark.parametrize("next,root_space", [(40, 336), (2000, 336), (30000, 76)])
def test_bulk_load_bmbt(next, root_space):
    rng = random.Random(next)
    exts, off = [], 0
    for _ in range(next):
        off += rng.randrange(0, 5)
        n = rng.randrange(1, 1 << 21)
        exts.append((off, rng.randrange(1, 1 << 40), n, rng.randrange(2)))
        off += n
    store = _FsbStore(blocksize=4096, agblocks=1 << 16)
    store.next = (2 << 16) + 10
    ino = 0x1234567
    root, levels, blocks = W.bulk_load_bmbt(exts, ino=ino, uuid=UUID, blocksize=4096,
                                            root_space=root_space, store=store)
    store.commit()
    assert len(root) == root_space and sorted(blocks) == sorted(store.allocated)
    level, numrecs = struct.unpack_from(">HH", root, 0)
    dmax = (root_space - 4) // 16
    assert level == levels - 1 >= 1 and 1 <= numrecs <= dmax
    keys = [struct.unpack_from(">Q", root, 4 + 8 * i)[0] for i in range(numrecs)]
    ptrs = [struct.unpack_from(">Q", root, 4 + 8 * dmax + 8 * i)[0] for i in range(numrecs)]
    fs = _FakeFs(store)
    reader = R.BtreeReader(fs, R.BMBT, agno=None, owner=ino, addr_to_daddr=store.daddr)
    rows = list(reader.levels(ptrs, levels - 1))
    assert len(rows) == levels - 1
    # keys in the inode root are the children's first offsets
    assert keys == [struct.unpack(">Q", b.keys[0])[0] if b.level else b.recs[0][0]
                    for b in rows[0]]
    maxrecs = {False: (4096 - 72) // 16, True: (4096 - 72) // (8 + 8)}
    for depth, row in enumerate(rows):
        for i, b in enumerate(row):
            assert b.leftsib == (row[i - 1].addr if i else C.NULLFSBLOCK)
            assert b.rightsib == (row[i + 1].addr if i + 1 < len(row) else C.NULLFSBLOCK)
            assert b.numrecs <= maxrecs[b.level > 0]
            if len(row) > 1:
                assert b.numrecs >= maxrecs[b.level > 0] // 2
            if b.level:
                child = {c.addr: c for c in rows[depth + 1]}
                for k, p in zip(b.keys, b.ptrs):
                    c = child[p]
                    low = struct.unpack(">Q", c.keys[0])[0] if c.level else c.recs[0][0]
                    assert struct.unpack(">Q", k)[0] == low
    recs = [r for b in rows[-1] for r in b.recs]
    assert recs == exts
    assert len(blocks) == sum(len(r) for r in rows)
    with pytest.raises(InvalidArgument):
        W.bulk_load_bmbt(exts[:3], ino=ino, uuid=UUID, blocksize=4096, root_space=336,
                         store=store)


# --------------------------------------------------------------------------
# A real image: xfs_repair and the kernel judge trees the engine changed
# --------------------------------------------------------------------------

FINOBT = Kind("finobt", C.XFS_FIBT_CRC_MAGIC, R.INO_CODEC, R.FINOBT_SPARSE,
              lambda r: (r[0],), lambda r: _I.pack(r[0]), lambda b: _I.unpack(b), _ino_rec)
_U32 = struct.Struct(">I")


class ImageAG:
    """One AG of an image file: cached block buffers and the AGF, AGI and
    AGFL sectors; commit() stamps CRCs and writes what changed."""

    def __init__(self, f, sb: dict, agno: int):
        self.f, self.agno = f, agno
        self.bs, self.agblocks, self.ss = sb["sb_blocksize"], sb["sb_agblocks"], sb["sb_sectsize"]
        self.uuid = sb["sb_uuid"]
        self.cache: dict[int, bytearray] = {}
        self.dirty: set[int] = set()
        self.hdr = {n: bytearray(os.pread(f, self.ss, self._sector(i)))
                    for i, n in ((1, "agf"), (2, "agi"), (3, "agfl"))}
        self.agfl_size = (self.ss - C.XFS_AGFL_HDR_SIZE) // 4

    def _sector(self, i):
        return self.agno * self.agblocks * self.bs + i * self.ss

    def daddr(self, agbno):
        return (self.agno * self.agblocks + agbno) * (self.bs // 512)

    def block(self, agbno):
        buf = self.cache.get(agbno)
        if buf is None:
            buf = self.cache[agbno] = bytearray(os.pread(self.f, self.bs, self.daddr(agbno) * 512))
        return buf

    def new(self, agbno):
        buf = self.cache[agbno] = bytearray(self.bs)
        return buf

    def drop(self, agbno):
        self.cache.pop(agbno, None)
        self.dirty.discard(agbno)

    def get(self, hdr, layout, field, i=0):
        return _U32.unpack_from(self.hdr[hdr], layout.offset(field) + 4 * i)[0]

    def set(self, hdr, layout, field, value, i=0):
        _U32.pack_into(self.hdr[hdr], layout.offset(field) + 4 * i, value)

    def agfl_get(self):
        cnt = self.get("agf", AGF, "agf_flcount")
        assert cnt > 0, "AGFL ran dry"
        first = self.get("agf", AGF, "agf_flfirst")
        bno = _U32.unpack_from(self.hdr["agfl"], C.XFS_AGFL_HDR_SIZE + 4 * first)[0]
        self.set("agf", AGF, "agf_flfirst", (first + 1) % self.agfl_size)
        self.set("agf", AGF, "agf_flcount", cnt - 1)
        return bno

    def agfl_put(self, bno):
        cnt = self.get("agf", AGF, "agf_flcount")
        assert cnt < self.agfl_size
        last = (self.get("agf", AGF, "agf_fllast") + 1) % self.agfl_size
        _U32.pack_into(self.hdr["agfl"], C.XFS_AGFL_HDR_SIZE + 4 * last, bno)
        self.set("agf", AGF, "agf_fllast", last)
        self.set("agf", AGF, "agf_flcount", cnt + 1)
        self.drop(bno)

    def commit(self):
        for addr in self.dirty:
            buf = self.cache[addr]
            long_form = buf[:4] == struct.pack(">I", C.XFS_BMAP_CRC_MAGIC)
            stamp_crc(buf, C.XFS_BTREE_LBLOCK_CRC_OFF if long_form else C.XFS_BTREE_SBLOCK_CRC_OFF)
            os.pwrite(self.f, buf, self.daddr(addr) * 512)
        self.dirty.clear()
        for i, name, off in ((1, "agf", C.XFS_AGF_CRC_OFF), (2, "agi", C.XFS_AGI_CRC_OFF),
                             (3, "agfl", C.XFS_AGFL_CRC_OFF)):
            os.pwrite(self.f, stamp_crc(self.hdr[name], off), self._sector(i))


class AgStore:
    """The BlockStore the engine sees, with the block source chosen per tree."""

    def __init__(self, ag: ImageAG, alloc, free):
        self.ag, self.blocksize = ag, ag.bs
        self._alloc, self._free = alloc, free

    def read(self, a):
        return self.ag.block(a)

    def new(self, a):
        return self.ag.new(a)

    def dirty(self, a):
        self.ag.dirty.add(a)

    def alloc(self, near):
        return self._alloc(near)

    def free(self, a):
        self.ag.drop(a)
        self._free(a)

    def daddr(self, a):
        return self.ag.daddr(a)


class Allocator:
    """A minimal AG allocator over the real bnobt and cntbt, driven through
    the engine: smallest fitting extent, taken from its end; frees merge with
    both neighbours.  Free-space btree blocks come from and go to the AGFL,
    which is topped up and trimmed between operations as the kernel does."""

    def __init__(self, ag: ImageAG):
        self.ag = ag
        g = lambda f, i=0: ag.get("agf", AGF, f, i)   # noqa: E731
        st = AgStore(ag, lambda near: ag.agfl_get(), ag.agfl_put)
        self.bno = W.ShortBtree(R.BNOBT, st, root=g("agf_roots", 0),
                                levels=g("agf_levels", 0), agno=ag.agno, uuid=ag.uuid)
        self.cnt = W.ShortBtree(R.CNTBT, st, root=g("agf_roots", 1),
                                levels=g("agf_levels", 1), agno=ag.agno, uuid=ag.uuid)
        self.freeblks = g("agf_freeblks")
        self.fd0 = self._fd()

    def _fd(self):
        """What the AG adds to sb_fdblocks."""
        return sum(self.ag.get("agf", AGF, f)
                   for f in ("agf_freeblks", "agf_flcount", "agf_btreeblks"))

    def fix_freelist(self):
        ag = self.ag
        while ag.get("agf", AGF, "agf_flcount") < 8:
            ag.agfl_put(self._take(1))
        for _ in range(4):
            if ag.get("agf", AGF, "agf_flcount") <= 16:
                break
            self._give(ag.agfl_get(), 1)

    def alloc(self, length=1):
        self.fix_freelist()
        return self._take(length)

    def free(self, agbno, length=1):
        self.fix_freelist()
        self._give(agbno, length)

    def _take(self, length):
        start, count = self.cnt.lookup_ge((length, 0))
        self.cnt.delete((count, start))
        if count == length:
            self.bno.delete((start,))
        else:
            self.bno.update((start, count - length))
            self.cnt.insert((start, count - length))
        self.freeblks -= length
        return start + count - length

    def _give(self, agbno, length):
        left = self.bno.lookup_le((agbno,))
        right = self.bno.lookup_ge((agbno,))
        assert left is None or left[0] + left[1] <= agbno, "freeing free space"
        assert right is None or right[0] >= agbno + length, "freeing free space"
        merge_l = left is not None and left[0] + left[1] == agbno
        merge_r = right is not None and right[0] == agbno + length
        if merge_l:
            self.cnt.delete((left[1], left[0]))
        if merge_r:
            self.cnt.delete((right[1], right[0]))
            self.bno.delete((right[0],))
        start = left[0] if merge_l else agbno
        total = length + (left[1] if merge_l else 0) + (right[1] if merge_r else 0)
        if merge_l:
            self.bno.update((start, total))
        else:
            self.bno.insert((start, total))
        self.cnt.insert((start, total))
        self.freeblks += length

    def finish(self):
        """Write roots and counters back to the AGF; returns the change of
        free blocks as sb_fdblocks counts them."""
        ag = self.ag
        for i, t in enumerate((self.bno, self.cnt)):
            ag.set("agf", AGF, "agf_roots", t.root, i)
            ag.set("agf", AGF, "agf_levels", t.levels, i)
        ag.set("agf", AGF, "agf_btreeblks", ag.get("agf", AGF, "agf_btreeblks")
               + self.bno.nblocks_delta + self.cnt.nblocks_delta)
        self.bno.nblocks_delta = self.cnt.nblocks_delta = 0
        ag.set("agf", AGF, "agf_freeblks", self.freeblks)
        last = next(self.cnt.iter_from(reverse=True), (0, 0))
        ag.set("agf", AGF, "agf_longest", last[1])
        new = self._fd()
        delta, self.fd0 = new - self.fd0, new
        return delta


def _repair(img: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["xfs_repair", "-n", "-f", str(img)], capture_output=True, text=True)


def _copy_image(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "btreewrite.img"
    subprocess.run(["cp", "--sparse=always", str(src), str(dst)], check=True)
    return dst


def _adjust_fdblocks(f, delta):
    sb = bytearray(os.pread(f, 512, 0))
    off = SB.offset("sb_fdblocks")
    struct.pack_into(">Q", sb, off, struct.unpack_from(">Q", sb, off)[0] + delta)
    os.pwrite(f, stamp_crc(sb, C.XFS_SB_CRC_OFF), 0)


def _tree_blocks(fsr, kind, agno, root, levels):
    bs = fsr.sb.blocksize
    maxrecs = (kind.bt.maxrecs(bs, True), kind.bt.maxrecs(bs, False))
    return walk(kind, fsr, root, levels, agno, maxrecs, lambda a: fsr.agb_to_daddr(agno, a))


def _snapshot(img: Path):
    """Records and blocks of every AG's four trees, checked by the walker."""
    import fstool
    fsr = fstool.open_image(img)
    out = {}
    for agno in range(fsr.sb.agcount):
        agf, agi = fsr.agf(agno), fsr.agi(agno)
        trees = {
            "bnobt": (KINDS["bnobt"], agf["agf_roots"][0], agf["agf_levels"][0]),
            "cntbt": (KINDS["cntbt"], agf["agf_roots"][1], agf["agf_levels"][1]),
            "inobt": (KINDS["inobt"], agi["agi_root"], agi["agi_level"]),
            "finobt": (FINOBT, agi["agi_free_root"], agi["agi_free_level"]),
        }
        for name, (kind, root, levels) in trees.items():
            recs, addrs = _tree_blocks(fsr, kind, agno, root, levels)
            out[agno, name] = (recs, addrs, levels)
    return fsr, out


def _read_sb(f):
    return SB.unpack(os.pread(f, 512, 0))


needs_kernel = pytest.mark.skipif(not images.loop_available(),
                                  reason="needs root, xfsprogs and a kernel loop mount of XFS")


def _assert_alive(mnt: Path) -> None:
    """A filesystem the kernel shut down (corruption found while it worked)
    fails new writes with EIO; make sure that did not happen."""
    fd = os.open(mnt / "alive-probe", os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        os.write(fd, b"alive")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.sync()
    os.unlink(mnt / "alive-probe")


def _kernel_round_trip(img: Path):
    """The kernel mounts the image, allocates and frees inodes and blocks in
    the rebuilt trees, unmounts cleanly; xfs_repair must still agree."""
    with images.Mounted(img) as mnt:
        d = mnt / "btreewrite"
        d.mkdir()
        for i in range(3000):
            (d / f"n{i}").write_bytes(b"x" * (4096 if i % 3 else 100))
        for i in range(0, 3000, 2):
            (d / f"n{i}").unlink()
        old = sorted(mnt.glob("d0/f*"))[:500]
        for p in old:
            p.unlink()
        _assert_alive(mnt)
    r = _repair(img)
    assert r.returncode == 0, r.stdout + r.stderr


@needs_kernel
def test_image_incremental_rebuild_passes_xfs_repair(fragmented_img, tmp_path):
    """inobt and finobt rebuilt record by record into new blocks, with the
    bnobt/cntbt edited by the engine for every block; then the free-space
    trees shrink a level (thousands of single-block allocations) and grow
    back (the blocks freed in random order)."""
    img = _copy_image(fragmented_img, tmp_path)
    fsr, before = _snapshot(img)
    del fsr
    rng = random.Random(7)
    f = os.open(img, os.O_RDWR)
    try:
        sb = _read_sb(f)
        fd_delta = 0
        for agno in range(sb["sb_agcount"]):
            ag = ImageAG(f, sb, agno)
            al = Allocator(ag)
            levels_seen = {al.bno.levels}
            # 1. new inobt and finobt, built by inserts in random order, with
            #    a third deleted and re-inserted (joins, root shrink, regrowth)
            for kind, rootf, levf, cntf in (
                    (KINDS["inobt"], "agi_root", "agi_level", "agi_iblocks"),
                    (FINOBT, "agi_free_root", "agi_free_level", "agi_fblocks")):
                recs, old_blocks, _ = before[agno, kind.name]
                st = AgStore(ag, lambda near: al.alloc(1), lambda a: al.free(a, 1))
                t = W.ShortBtree.create(kind.bt, st, agno=agno, uuid=ag.uuid)
                order = recs[:]
                rng.shuffle(order)
                for r in order:
                    t.insert(r)
                again = rng.sample(order, len(order) // 3 * 2)
                for r in again:
                    assert t.delete((r[0],)) == r
                for r in again[::-1]:
                    t.insert(r)
                assert list(t.iter_from()) == recs
                for a in old_blocks:
                    al.free(a, 1)
                ag.set("agi", AGI, rootf, t.root)
                ag.set("agi", AGI, levf, t.levels)
                ag.set("agi", AGI, cntf, 1 + t.nblocks_delta)
                assert t.levels == before[agno, kind.name][2]
            # 2. drain the single-block free extents, some longer ones, then
            #    give everything back in random order
            held = []
            while al.bno.count() > 300:
                held.append((al.alloc(1), 1))
                levels_seen.add(al.bno.levels)
            for n in (2, 3, 17, 64, 500):
                held.append((al.alloc(n), n))
            rng.shuffle(held)
            for agbno, n in held:
                al.free(agbno, n)
                levels_seen.add(al.bno.levels)
            assert levels_seen >= {1, 2}, levels_seen
            fd_delta += al.finish()
            ag.commit()
        _adjust_fdblocks(f, fd_delta)
    finally:
        os.close(f)
    _, after = _snapshot(img)
    for agno in range(sb["sb_agcount"]):
        for name in ("inobt", "finobt"):
            assert after[agno, name][0] == before[agno, name][0]
            assert not set(after[agno, name][1]) & set(before[agno, name][1])
    r = _repair(img)
    assert r.returncode == 0, r.stdout + r.stderr
    _kernel_round_trip(img)


@needs_kernel
def test_image_repair_notices_a_bad_tree(fragmented_img, tmp_path):
    """The oracle can fail: a free extent dropped from the bnobt alone (the
    engine keeps the tree itself sound) is reported by xfs_repair -n."""
    img = _copy_image(fragmented_img, tmp_path)
    f = os.open(img, os.O_RDWR)
    try:
        sb = _read_sb(f)
        ag = ImageAG(f, sb, 0)
        al = Allocator(ag)
        start, count = next(al.bno.iter_from((5000,)))
        al.bno.delete((start,))
        al.freeblks -= count
        al.finish()
        ag.commit()
    finally:
        os.close(f)
    assert _repair(img).returncode != 0


@needs_kernel
def test_image_bulk_load_passes_xfs_repair(fragmented_img, tmp_path):
    """All four AG btrees replaced by bulk-loaded ones.  inobt/finobt blocks
    come from the allocator; the free-space trees reuse their old blocks and
    the AGFL's, plus the tail of the longest free extent when those are not
    enough (as repair's phase 5 sets the space aside before loading)."""
    img = _copy_image(fragmented_img, tmp_path)
    fsr, before = _snapshot(img)
    bs = fsr.sb.blocksize
    f = os.open(img, os.O_RDWR)
    shapes = {}
    try:
        sb = _read_sb(f)
        fd_delta = 0
        for agno in range(sb["sb_agcount"]):
            ag = ImageAG(f, sb, agno)
            al = Allocator(ag)
            for kind, rootf, levf, cntf, slack in (
                    (KINDS["inobt"], "agi_root", "agi_level", "agi_iblocks", -1),
                    (FINOBT, "agi_free_root", "agi_free_level", "agi_fblocks", 2)):
                recs, old_blocks, _ = before[agno, kind.name]
                st = AgStore(ag, lambda near: al.alloc(1), lambda a: al.free(a, 1))
                root, levels, used = W.bulk_load(kind.bt, st, recs, agno=agno,
                                                 uuid=ag.uuid, slack_leaf=slack,
                                                 slack_node=slack)
                for a in old_blocks:
                    al.free(a, 1)
                ag.set("agi", AGI, rootf, root)
                ag.set("agi", AGI, levf, levels)
                ag.set("agi", AGI, cntf, used)
                shapes[agno, kind.name] = (levels, used)
            fd_delta += al.finish()
            # free-space trees: the records are fixed before loading
            old_fd = sum(ag.get("agf", AGF, x) for x in
                         ("agf_freeblks", "agf_flcount", "agf_btreeblks"))
            pool = before[agno, "bnobt"][1] + before[agno, "cntbt"][1]
            while ag.get("agf", AGF, "agf_flcount"):
                pool.append(ag.agfl_get())
            free = list(al.bno.iter_from())
            maxrecs = (R.BNOBT.maxrecs(bs, True), R.BNOBT.maxrecs(bs, False))
            need = 2 * sum(g[0] for g in W.bulk_geometry(len(free), maxrecs))
            longest = max(free, key=lambda r: (r[1], r[0]))
            extra = max(0, need - len(pool))
            if extra:
                i = free.index(longest)
                free[i] = (longest[0], longest[1] - extra)
                pool += range(longest[0] + longest[1] - extra, longest[0] + longest[1])
            spare = pool[need:]
            pool = pool[:need]
            by_cnt = sorted(free, key=lambda r: (r[1], r[0]))
            nblocks = []
            for i, (bt, recs) in enumerate(((R.BNOBT, free), (R.CNTBT, by_cnt))):
                st = AgStore(ag, lambda near: pool.pop(0), None)
                root, levels, used = W.bulk_load(bt, st, recs, agno=agno,
                                                 uuid=ag.uuid)
                ag.set("agf", AGF, "agf_roots", root, i)
                ag.set("agf", AGF, "agf_levels", levels, i)
                nblocks.append(used)
                shapes[agno, ("bnobt", "cntbt")[i]] = (levels, used)
            assert not pool
            for a in spare:
                ag.agfl_put(a)
            ag.set("agf", AGF, "agf_btreeblks", sum(nblocks) - 2)
            ag.set("agf", AGF, "agf_freeblks", sum(r[1] for r in free))
            ag.set("agf", AGF, "agf_longest", max(r[1] for r in free))
            fd_delta += sum(ag.get("agf", AGF, x) for x in
                            ("agf_freeblks", "agf_flcount", "agf_btreeblks")) - old_fd
            ag.commit()
        _adjust_fdblocks(f, fd_delta)
    finally:
        os.close(f)
    _, after = _snapshot(img)
    for (agno, name), (levels, used) in shapes.items():
        recs, addrs, lv = after[agno, name]
        assert (lv, len(addrs)) == (levels, used)
        assert lv >= 2
        if name in ("inobt", "finobt"):
            assert recs == before[agno, name][0]
    r = _repair(img)
    assert r.returncode == 0, r.stdout + r.stderr
    _kernel_round_trip(img)


def _fresh_image(tmp_path: Path) -> Path:
    img = tmp_path / "bmbt.img"
    subprocess.run(["truncate", "-s", "512M", str(img)], check=True)
    subprocess.run(["mkfs.xfs", "-q", "-f", "-m", f"uuid={images.UUID}", str(img)],
                   check=True, capture_output=True)
    return img


@needs_kernel
@pytest.mark.parametrize("nextents", [1500, 5000])
def test_image_bmbt_bulk_load_passes_xfs_repair(tmp_path, nextents):
    """A kernel-written file with thousands of extents gets its block map
    rebuilt by bulk_load_bmbt into blocks from the allocator; the old bmbt
    blocks are freed.  xfs_repair accepts it and the kernel reads the file
    through the new tree, then changes it."""
    img = _fresh_image(tmp_path)
    data = {}
    with images.Mounted(img) as mnt:
        path = mnt / "sparse"
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            # highest offset first: no EOF growth, so no speculative
            # preallocation fills the holes; every block is its own extent
            for i in range(nextents - 1, -1, -1):
                blk = struct.pack(">I", i) * 1024
                os.pwrite(fd, blk, 2 * i * 4096)
                data[i] = blk
        finally:
            os.close(fd)
    import fstool
    fsr = fstool.open_image(img)
    node = fsr.lookup("/sparse")
    exts = node.extents()
    assert len(exts) == nextents and node.format == C.XFS_DINODE_FMT_BTREE
    level, _keys, ptrs = node.bmbt_root()
    old_blocks = [b.addr for row in fsr.bmbt_reader(node.ino).levels(ptrs, level) for b in row]
    agno_i, agbno_i, slot = fsr.ino_location(node.ino)
    sb = fsr.sb
    fork_off, fork_size = node.fork_bounds(False)
    ino = node.ino
    fsr.close()

    f = os.open(img, os.O_RDWR)
    try:
        sbd = _read_sb(f)
        ags = {}

        def ag_of(agno):
            if agno not in ags:
                ag = ImageAG(f, sbd, agno)
                ags[agno] = (ag, Allocator(ag))
            return ags[agno]

        ag, al = ag_of(agno_i)
        mask = (1 << sb.agblklog) - 1

        class FsbStore:
            blocksize = sb.blocksize

            def read(self, fsb):
                raise AssertionError("a bulk load reads nothing")

            def new(self, fsb):
                return ag_of(fsb >> sb.agblklog)[0].new(fsb & mask)

            def dirty(self, fsb):
                ags[fsb >> sb.agblklog][0].dirty.add(fsb & mask)

            def alloc(self, near):
                return (agno_i << sb.agblklog) | al.alloc(1)

            def free(self, fsb):
                raise AssertionError("a bulk load frees nothing")

            def daddr(self, fsb):
                return ((fsb >> sb.agblklog) * sb.agblocks + (fsb & mask)) * (sb.blocksize // 512)

        root, levels, blocks = W.bulk_load_bmbt(exts, ino=ino, uuid=sbd["sb_uuid"],
                                                blocksize=sb.blocksize, root_space=fork_size,
                                                store=FsbStore())
        assert levels == (2 if nextents < 3000 else 3)
        assert not set(blocks) & set(old_blocks)
        for fsb in old_blocks:
            ag_of(fsb >> sb.agblklog)[1].free(fsb & mask, 1)
        # the inode: new fork root and block count
        ipos = ((agno_i * sb.agblocks + agbno_i) * sb.blocksize) + slot * sb.inodesize
        raw = bytearray(os.pread(f, sb.inodesize, ipos))
        raw[fork_off:fork_off + fork_size] = root
        nb = struct.unpack_from(">Q", raw, 64)[0]       # di_nblocks
        struct.pack_into(">Q", raw, 64, nb - len(old_blocks) + len(blocks))
        os.pwrite(f, stamp_crc(raw, C.XFS_DINODE_CRC_OFF), ipos)
        fd_delta = 0
        for ag, al in ags.values():
            fd_delta += al.finish()
            ag.commit()
        _adjust_fdblocks(f, fd_delta)
    finally:
        os.close(f)
    r = _repair(img)
    assert r.returncode == 0, r.stdout + r.stderr
    fsr = fstool.open_image(img)
    assert fsr.lookup("/sparse").extents() == exts
    fsr.close()
    with images.Mounted(img) as mnt:
        fd = os.open(mnt / "sparse", os.O_RDWR)
        try:
            for i in range(0, nextents, 7):
                assert os.pread(fd, 4096, 2 * i * 4096) == data[i]
                assert os.pread(fd, 4096, (2 * i + 1) * 4096) == bytes(4096)
            for i in range(0, nextents, 5):                 # fill some holes
                os.pwrite(fd, b"z" * 4096, (2 * i + 1) * 4096)
            os.truncate(fd, nextents * 4096)                # and drop half the map
        finally:
            os.close(fd)
        _assert_alive(mnt)
    r = _repair(img)
    assert r.returncode == 0, r.stdout + r.stderr


# --------------------------------------------------------------------------
# bmbt: incremental changes under an inode root
# --------------------------------------------------------------------------

def bmbt_walk(fs, tree: W.BmbtTree, addr_to_daddr, maxrecs):
    """Check the inode root and the blocks below it; returns (records,
    block addresses)."""
    root = tree.root_bytes()
    assert len(root) == tree.root_space
    level, numrecs = struct.unpack_from(">HH", root, 0)
    dmax = (tree.root_space - 4) // 16
    assert level == tree.levels - 1 >= 1 and 1 <= numrecs <= dmax
    keys = [struct.unpack_from(">Q", root, 4 + 8 * i)[0] for i in range(numrecs)]
    ptrs = [struct.unpack_from(">Q", root, 4 + 8 * dmax + 8 * i)[0] for i in range(numrecs)]
    reader = R.BtreeReader(fs, R.BMBT, agno=None, owner=tree.ino, addr_to_daddr=addr_to_daddr)
    rows = list(reader.levels(ptrs, level))
    assert len(rows) == level
    assert [b.addr for b in rows[0]] == ptrs
    for key, b in zip(keys, rows[0]):
        if b.numrecs:       # (the key above an emptied only leaf means nothing)
            assert key == (struct.unpack(">Q", b.keys[0])[0] if b.level else b.recs[0][0])
    minrecs = (maxrecs[0] // 2, maxrecs[1] // 2)
    for depth, row in enumerate(rows):
        for i, b in enumerate(row):
            assert b.leftsib == (row[i - 1].addr if i else C.NULLFSBLOCK)
            assert b.rightsib == (row[i + 1].addr if i + 1 < len(row) else C.NULLFSBLOCK)
            assert b.numrecs <= maxrecs[b.level > 0]
            if not (depth == 0 and len(row) == 1):
                assert b.numrecs >= minrecs[b.level > 0], (depth, i, b.numrecs)
            if b.level:
                child = {c.addr: c for c in rows[depth + 1]}
                assert b.ptrs == [c.addr for c in rows[depth + 1]][
                    sum(x.numrecs for x in row[:i]):sum(x.numrecs for x in row[:i + 1])]
                for k, p in zip(b.keys, b.ptrs):
                    c = child[p]
                    low = struct.unpack(">Q", c.keys[0])[0] if c.level else c.recs[0][0]
                    assert struct.unpack(">Q", k)[0] == low
    recs = [r for b in rows[-1] for r in b.recs]
    assert all(a[0] < b[0] for a, b in zip(recs, recs[1:]))
    return recs, [b.addr for row in rows for b in row]


def _bm_ext(rng, off):
    return (off, rng.randrange(1, 1 << 40), rng.randrange(1, 1 << 21), rng.randrange(2))


@pytest.mark.parametrize("maxrecs,root_space", [((4, 4), 4 + 16 * 2), ((5, 6), 4 + 16 * 3),
                                               (None, 336)], ids=["cap4", "cap5_6", "real"])
def test_bmbt_random_ops_against_model(maxrecs, root_space):
    rng = random.Random(root_space)
    store = _FsbStore(blocksize=1024, agblocks=1 << 16)
    store.next = (1 << 16) + 50
    ino = 0x2000083
    tree = W.BmbtTree.create(store, root_space=root_space, ino=ino, uuid=UUID,
                             extents=[(0, 777, 1, 0)], maxrecs=maxrecs)
    model = {(0,): (0, 777, 1, 0)}
    phys = (R.BMBT.maxrecs(1024, True), R.BMBT.maxrecs(1024, False))
    fs = _FakeFs(store)
    fs.read_meta = _bmbt_read_meta(store)

    def check_bm():
        store.commit()
        recs, addrs = bmbt_walk(fs, tree, store.daddr, maxrecs or phys)
        assert recs == [model[k] for k in sorted(model)]
        assert sorted(addrs) == sorted(store.allocated)
        assert len(addrs) == tree.nblocks_delta
        assert tree.count() == len(model)

    levels_seen = set()
    target = 600 if maxrecs else 4000
    for phase in range(3):
        for n in range(3000 if maxrecs else 9000):
            grow = phase != 1
            if (rng.random() < (0.7 if grow else 0.25)) or len(model) < 2:
                off = rng.randrange(1 << 30)
                if (off,) in model:
                    continue
                rec = _bm_ext(rng, off)
                tree.insert(rec)
                model[(off,)] = rec
            elif rng.random() < 0.85:
                k = _pick(model, rng)
                assert tree.delete(k) == model.pop(k)
            else:
                k = _pick(model, rng)
                rec = _bm_ext(rng, k[0])
                tree.update(rec)
                model[k] = rec
            levels_seen.add(tree.levels)
            if n % 150 == 0:
                check_bm()
                for _ in range(5):
                    probe = (rng.randrange(1 << 30),)
                    ks = sorted(model)
                    i = bisect.bisect_left(ks, probe)
                    assert tree.lookup_ge(probe) == (model[ks[i]] if i < len(ks) else None)
            if grow and len(model) > target:
                break
            if not grow and len(model) < 3:
                break
        check_bm()
    assert {2, 3} <= levels_seen, levels_seen
    if maxrecs:
        assert max(levels_seen) >= 5


def _bmbt_read_meta(store):
    def read_meta(daddr, length, bt, *, owner=None, agno=None, block=None, ino=None):
        assert daddr == store.daddr(block)
        buf = bytes(store.blocks[block])
        V.verify(buf, bt, uuid=UUID, daddr=daddr, owner=owner)
        return buf
    return read_meta


def test_bmbt_bulk_then_incremental():
    """A bulk-loaded bmbt accepts incremental changes and shrinks back to a
    root with one leaf below it when the records go."""
    rng = random.Random(3)
    exts, off = [], 0
    for _ in range(3000):
        off += rng.randrange(1, 9)
        exts.append((off, rng.randrange(1, 1 << 40), 1, rng.randrange(2)))
        off += 1
    store = _FsbStore(blocksize=1024, agblocks=1 << 16)
    store.next = 77
    root, levels, blocks = W.bulk_load_bmbt(exts, ino=99, uuid=UUID, blocksize=1024,
                                            root_space=4 + 16 * 5, store=store)
    tree = W.BmbtTree(store, root=root, root_space=4 + 16 * 5, ino=99, uuid=UUID)
    assert tree.levels == levels >= 3
    fs = _FakeFs(store)
    fs.read_meta = _bmbt_read_meta(store)
    phys = (R.BMBT.maxrecs(1024, True), R.BMBT.maxrecs(1024, False))
    model = {(e[0],): e for e in exts}
    order = list(model)
    rng.shuffle(order)
    for i, k in enumerate(order):
        assert tree.delete(k) == model.pop(k)
        if i % 200 == 0 or len(model) < 40:
            store.commit()
            recs, addrs = bmbt_walk(fs, tree, store.daddr, phys)
            assert recs == [model[k] for k in sorted(model)]
            assert sorted(addrs) == sorted(store.allocated)
            assert len(addrs) == len(blocks) + tree.nblocks_delta
    assert tree.levels == 2 and len(store.allocated) == 1


@needs_kernel
def test_image_bmbt_incremental_passes_xfs_repair(tmp_path):
    """A kernel-written 2000-extent file: 1999 one-block extents are added
    in its holes (data written to blocks from the allocator), so the bmbt
    grows a level through the inode root, then 3000 extents are removed
    (their blocks freed) and it shrinks back.  xfs_repair accepts the
    result and the kernel reads every block of the file as written."""
    img = _fresh_image(tmp_path)
    nextents = 2000
    content = {}
    with images.Mounted(img) as mnt:
        fd = os.open(mnt / "sparse", os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            for i in range(nextents - 1, -1, -1):
                content[2 * i] = struct.pack(">I", 2 * i) * 1024
                os.pwrite(fd, content[2 * i], 2 * i * 4096)
        finally:
            os.close(fd)
    import fstool
    fsr = fstool.open_image(img)
    node = fsr.lookup("/sparse")
    ino, exts = node.ino, node.extents()
    agno_i, agbno_i, slot = fsr.ino_location(ino)
    fork_off, fork_size = node.fork_bounds(False)
    root0 = node.fork_bytes(False)
    sb = fsr.sb
    fsr.close()
    mask = (1 << sb.agblklog) - 1
    rng = random.Random(11)
    f = os.open(img, os.O_RDWR)
    try:
        sbd = _read_sb(f)
        ags = {}

        def ag_of(agno):
            if agno not in ags:
                ag = ImageAG(f, sbd, agno)
                ags[agno] = (ag, Allocator(ag))
            return ags[agno]

        class FsbStore:
            blocksize = sb.blocksize

            def read(self, fsb):
                return ag_of(fsb >> sb.agblklog)[0].block(fsb & mask)

            def new(self, fsb):
                return ag_of(fsb >> sb.agblklog)[0].new(fsb & mask)

            def dirty(self, fsb):
                ag_of(fsb >> sb.agblklog)[0].dirty.add(fsb & mask)

            def alloc(self, near):
                return (agno_i << sb.agblklog) | ag_of(agno_i)[1].alloc(1)

            def free(self, fsb):
                ag, al = ag_of(fsb >> sb.agblklog)
                ag.drop(fsb & mask)
                al.free(fsb & mask, 1)

            def daddr(self, fsb):
                return ((fsb >> sb.agblklog) * sb.agblocks + (fsb & mask)) * (sb.blocksize // 512)

        store = FsbStore()
        tree = W.BmbtTree(store, root=root0, root_space=fork_size, ino=ino, uuid=sbd["sb_uuid"])
        model = {e[0]: e for e in exts}
        levels = [tree.levels]
        data_delta = 0
        holes = [2 * i + 1 for i in range(nextents - 1)]
        rng.shuffle(holes)
        for off in holes:
            fsb = store.alloc(0)
            content[off] = struct.pack(">I", off) * 1024
            os.pwrite(f, content[off], store.daddr(fsb) * 512)
            tree.insert((off, fsb, 1, 0))
            model[off] = (off, fsb, 1, 0)
            data_delta += 1
            levels.append(tree.levels)
        victims = rng.sample(sorted(model), 3000)
        for off in victims:
            rec = tree.delete((off,))
            assert rec == model.pop(off)
            store.free(rec[1])
            del content[off]
            data_delta -= 1
            levels.append(tree.levels)
        steps = {(a, b) for a, b in zip(levels, levels[1:]) if a != b}
        assert steps == {(2, 3), (3, 2)} and levels[-1] == 2, steps
        assert list(tree.iter_from()) == [model[k] for k in sorted(model)]
        # the inode: fork, extent count, block count
        ipos = ((agno_i * sb.agblocks + agbno_i) * sb.blocksize) + slot * sb.inodesize
        raw = bytearray(os.pread(f, sb.inodesize, ipos))
        raw[fork_off:fork_off + fork_size] = tree.root_bytes()
        struct.pack_into(">I", raw, 76, len(model))                      # di_nextents
        nb = struct.unpack_from(">Q", raw, 64)[0]                        # di_nblocks
        struct.pack_into(">Q", raw, 64, nb + data_delta + tree.nblocks_delta)
        os.pwrite(f, stamp_crc(raw, C.XFS_DINODE_CRC_OFF), ipos)
        fd_delta = 0
        for ag, al in ags.values():
            fd_delta += al.finish()
            ag.commit()
        _adjust_fdblocks(f, fd_delta)
    finally:
        os.close(f)
    r = _repair(img)
    assert r.returncode == 0, r.stdout + r.stderr
    fsr = fstool.open_image(img)
    assert fsr.lookup("/sparse").extents() == [model[k] for k in sorted(model)]
    fsr.close()
    with images.Mounted(img) as mnt:
        fd = os.open(mnt / "sparse", os.O_RDWR)
        try:
            for blk in range(2 * nextents - 1):
                assert os.pread(fd, 4096, blk * 4096) == content.get(blk, bytes(4096)), blk
            for blk in range(1, 2 * nextents - 1, 9):
                os.pwrite(fd, b"k" * 4096, blk * 4096)
            os.truncate(fd, nextents * 4096)
        finally:
            os.close(fd)
        _assert_alive(mnt)
    r = _repair(img)
    assert r.returncode == 0, r.stdout + r.stderr


# not the rmapbt: an update moves its high keys up the tree, so it always
# descends
@pytest.mark.parametrize("kind_name", sorted(k for k in KINDS if k != "rmapbt"))
def test_update_runs_in_remembered_leaf(kind_name):
    """Runs of updates between inserts and deletes (as commits update the
    inobt and finobt records of the chunks they used): an update whose key
    belongs to the leaf the last update went to is made there without a
    descent from the root; the tree stays exactly the model."""
    kind = KINDS[kind_name]
    rng = random.Random(zlib.crc32(f"runs{kind_name}".encode()))
    store = MemStore(blocksize=1024, seed=rng.randrange(1 << 30))
    tree = empty_tree(kind, store, (16, 4))
    model: dict = {}
    while len(model) < 800:
        rec = _norm(kind, kind.gen(rng))
        if kind.order(rec) not in model:
            tree.insert(rec)
            model[kind.order(rec)] = rec
    assert tree.levels >= 4
    descents = []
    real = tree._descend

    def counted(key):
        descents.append(key)
        return real(key)
    tree._descend = counted
    updates = 0
    for _round in range(150):
        # a change of shape now and then: what the remembered leaf depends on
        if rng.random() < 0.3:
            k = _pick(model, rng)
            assert tree.delete(k) == model.pop(k)
        if rng.random() < 0.3:
            rec = _norm(kind, kind.gen(rng))
            if kind.order(rec) not in model:
                tree.insert(rec)
                model[kind.order(rec)] = rec
        # a run of updates near one key: the same leaf, its neighbours, its first
        keys = sorted(model)
        at = rng.randrange(len(keys))
        for k in keys[max(0, at - 6):at + 6]:
            rec = _same_key(kind, model[k], rng)
            tree.update(rec)
            model[k] = rec
            updates += 1
        check(kind, tree, store, model, 1)
    tree._descend = real
    check_lookups(kind, tree, model, rng, 200)
    # most updates found their leaf without a descent
    assert len(descents) < updates * 0.5

    def bump(k):
        rec = _same_key(kind, model[k], rng)
        tree.update(rec)
        model[k] = rec
    # the remembered leaf emptied by deletes around the key (joined into a
    # sibling and freed, or refilled): the next update must not go there
    for _ in range(40):
        keys = sorted(model)
        k = keys[rng.randrange(1, len(keys))]
        _addr, buf, i = tree._descend(k)[0]
        if i == 0:
            continue
        bump(k)
        for other in [kind.order(tree._rec_at(buf, j)) for j in range(tree._numrecs(buf))]:
            if other != k:
                assert tree.delete(other) == model.pop(other)
        bump(k)
        check(kind, tree, store, model, 1)


@pytest.mark.parametrize("kind_name", ["rmapbt", "bnobt"])
@pytest.mark.parametrize("maxrecs", [(4, 4), None], ids=["cap4", "real"])
def test_replace_moves_a_record_within_its_place(kind_name, maxrecs):
    """replace() rewrites a record whose key changes but keeps its place in
    the order (an rmap record whose start moves): the tree stays the model
    (node low and high keys included); a key that would leave its place is
    refused and changes nothing."""
    kind = KINDS[kind_name]
    rng = random.Random(zlib.crc32(f"replace{kind_name}{maxrecs}".encode()))
    store = MemStore(blocksize=1024, seed=rng.randrange(1 << 30))
    tree = empty_tree(kind, store, maxrecs)
    model: dict = {}
    while len(model) < 600:
        rec = _norm(kind, kind.gen(rng))
        if kind.order(rec) not in model:
            tree.insert(rec)
            model[kind.order(rec)] = rec
    moved = refused = 0
    for n in range(1500):
        keys = sorted(model)
        i = rng.randrange(len(keys))
        old = model[keys[i]]
        lo = keys[i - 1][0] if i else 0
        hi = keys[i + 1][0] if i + 1 < len(keys) else 1 << 20
        if rng.random() < 0.8:
            start = rng.randrange(lo, hi + 1)
        else:                               # beyond a neighbour
            start = rng.choice((max(lo - rng.randrange(1, 50), 0), hi + rng.randrange(1, 50)))
        new = (start,) + tuple(old[1:])
        k = kind.order(new)
        inside = (not i or keys[i - 1] < k) and (i + 1 == len(keys) or k < keys[i + 1])
        if inside:
            tree.replace(keys[i], new)
            del model[keys[i]]
            model[k] = new
            moved += 1
        else:
            with pytest.raises(InvalidArgument):
                tree.replace(keys[i], new)
            refused += 1
        if n % 100 == 99:
            check(kind, tree, store, model, 1)
    check(kind, tree, store, model, 1)
    assert moved > 500 and refused > 10


@pytest.mark.parametrize("kind_name", ["bnobt", "cntbt"])
@pytest.mark.parametrize("maxrecs", [(4, 4), (5, 7), None], ids=["cap4", "cap5_7", "real"])
def test_move_leaves_what_delete_and_insert_leave(kind_name, maxrecs):
    """``move(key, rec)`` (a free extent whose start or length changed: the
    allocator's carve) leaves the tree, block for block, and its counters as
    ``delete(key)`` then ``insert(rec)`` leave them: in place where that is
    the same, by the two where not (records at leaf edges, leaves at their
    minimum, keys leaving their place)."""
    kind = KINDS[kind_name]
    rng = random.Random(zlib.crc32(f"move{kind_name}{maxrecs}".encode()))
    stores = [MemStore(seed=7), MemStore(seed=7)]
    trees = [empty_tree(kind, st, maxrecs) for st in stores]
    n0 = 60 if maxrecs is not None else 3000
    starts = sorted(rng.sample(range(10, 1 << 20, 64), n0))
    recs = {s: (s, rng.randrange(1, 60)) for s in starts}
    for s in rng.sample(starts, len(starts)):
        for t in trees:
            t.insert(recs[s])
    in_place = fallback = 0
    deletes = []
    real_delete = trees[1].delete
    trees[1].delete = lambda key: deletes.append(key) or real_delete(key)
    for step in range(1500 if maxrecs is not None else 600):
        s = rng.choice(sorted(recs))
        old = recs.pop(s)
        cut = rng.randrange(0, old[1])
        if rng.random() < 0.5:          # carved from its start
            new = (s + cut + 1, max(1, old[1] - cut - 1) + rng.randrange(0, 3))
        else:                           # carved from its end
            new = (s, max(1, old[1] - cut - 1))
        if new[0] in recs or kind_name == "cntbt" and \
                any(r[1] == new[1] and r[0] == new[0] for r in recs.values()):
            recs[s] = old
            continue
        recs[new[0]] = new
        key = kind.codec.key(old)
        a, b = trees
        a.delete(key)
        a.insert(new)
        deletes.clear()
        b.move(key, new)
        in_place += not deletes
        fallback += bool(deletes)
        assert (a.root, a.levels, a.gen, a.keys_gen, a.nblocks_delta) == \
            (b.root, b.levels, b.gen, b.keys_gen, b.nblocks_delta), step
        assert stores[0].blocks == stores[1].blocks, step
        assert (stores[0].nalloc, stores[0].nfree) == (stores[1].nalloc, stores[1].nfree)
        if rng.random() < 0.2 and len(recs) > 20:        # trees shrink and grow
            s = rng.choice(sorted(recs))
            gone = recs.pop(s)
            for t in trees:
                t.delete(kind.codec.key(gone))
    for st in stores:
        st.commit()
    model = {(r[0],) if kind_name == "bnobt" else kind.codec.key(r): r for r in recs.values()}
    check(kind, trees[1], stores[1], model, 1)
    assert trees[1].levels > 1 and in_place > 10 and fallback > 10
