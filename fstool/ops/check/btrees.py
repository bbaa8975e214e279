"""Phases free_space, inode_btrees and refcounts: every AG btree walked
through the read engine (fs/btree.py), block by block, with the record
checks xfs_repair's scan_allocbt, scan_inobt, scan_refcbt and scan_rmapbt
make, and the AGF/AGI counters they feed."""
from __future__ import annotations

import struct

from ..._backend import checks
from ...format import constants as C
from ...fs import btree
from .base import OWN_AG, OWN_COW, OWN_FREE, OWN_INOBT, OWN_INODES, OWN_REFC
from .superblocks import check_lsn
from .table import InodeTable

REFC_COW_START = 1 << 31
MAXREFCOUNT = (1 << 32) - 1
RMAP_OFF_ATTR, RMAP_OFF_BMBT = C.XFS_RMAP_OFF_ATTR, C.XFS_RMAP_OFF_BMBT
RMAP_OFF_UNWRITTEN, RMAP_OFF_MASK = C.XFS_RMAP_OFF_UNWRITTEN, C.XFS_RMAP_OFF_MASK
RMAP_OWN_MIN = -9


def _i64(v: int) -> int:
    return v - (1 << 64) if v >> 63 else v


# -- one AG btree, block by block ------------------------------------------
def walk_ag_tree(ctx, agno: int, name: str, bt, root: int, height: int,
                 owner: int, on_leaf, on_node=None, on_key=None) -> int:
    """Walk one AG btree from the root the AGF/AGI names, claiming its
    blocks for ``owner`` and reporting block problems; ``on_leaf(blk,
    is_root)`` and ``on_node(blk, is_root)`` see every decoded block,
    ``on_key(blk, key)`` every block below the root with the raw key its
    parent holds for it.  Returns the number of blocks read (the root
    included)."""
    structure = name
    where = dict(agno=agno, structure=structure)
    if not ctx.verify_agbno(agno, root):
        ctx.report("BTREE_ROOT", f"{name} of AG {agno}: root block {root} is outside "
                   "the AG's usable blocks", found=root, **where)
        return 0
    if not 1 <= height <= C.XFS_BTREE_MAXLEVELS:
        ctx.report("BTREE_LEVEL", f"{name} of AG {agno}: height {height} is not valid",
                   block=root, field="level", found=height, **where)
        return 0
    reader = ctx.fs.ag_btree(agno, bt)
    leaf_min = bt.maxrecs(ctx.sb.blocksize, True) // 2
    node_min = bt.maxrecs(ctx.sb.blocksize, False) // 2

    def problem(addr, level, field, detail):
        code = {"ptr": "BTREE_BLOCK", "bb_level": "BTREE_LEVEL",
                "bb_numrecs": "BTREE_NUMRECS"}.get(field, "BTREE_BLOCK")
        if field == "ptr" and "twice" in detail:
            code = "BTREE_CYCLE"
        ctx.report(code, f"{name} block {addr} in AG {agno}: {detail}", block=addr,
                   field=None if field == "ptr" else field, **where)

    nblocks = 0
    for depth, row in enumerate(reader.walk([root], height, problem)):
        level = height - 1 - depth
        prev = None
        for blk, _key in row:
            nblocks += 1
            ctx.claim(agno, blk.addr, 1, owner)
            is_root = depth == 0
            check_lsn(ctx, blk.lsn, name, agno=agno, block=blk.addr, field="bb_lsn")
            minr = leaf_min if level == 0 else node_min
            if not is_root and blk.numrecs < minr:
                ctx.report("BTREE_NUMRECS", f"{name} block {blk.addr} in AG {agno}: "
                           f"{blk.numrecs} records, fewer than {minr}", block=blk.addr,
                           field="bb_numrecs", expected=minr, found=blk.numrecs, **where)
            _ag_siblings(ctx, name, agno, prev, blk, where)
            prev = blk
            if level == 0:
                on_leaf(blk, is_root)
            elif on_node is not None:
                on_node(blk, is_root)
            if on_key is not None and _key is not None:
                on_key(blk, _key)
        if prev is not None and prev.rightsib != C.NULLAGBLOCK:
            ctx.report("BTREE_SIBLING", f"{name} block {prev.addr} in AG {agno} is last "
                       f"in its level but has right sibling {prev.rightsib}",
                       block=prev.addr, field="bb_rightsib", found=prev.rightsib,
                       **where)
    return nblocks


def _ag_siblings(ctx, name, agno, prev, blk, where) -> None:
    """Sibling pointers of AG btree blocks: xfs_repair does not follow
    them (a warning); the kernel's verifier only wants them inside the
    AG and not pointing at the block itself (an error)."""
    for field, sib in (("bb_leftsib", blk.leftsib), ("bb_rightsib", blk.rightsib)):
        if sib != C.NULLAGBLOCK and (sib == blk.addr or not ctx.verify_agbno(agno, sib)):
            ctx.report("BTREE_BLOCK", f"{name} block {blk.addr} in AG {agno}: {field} "
                       f"{sib} is not a valid block", block=blk.addr, field=field,
                       found=sib, **where)
    if prev is None:
        if blk.leftsib != C.NULLAGBLOCK:
            ctx.report("BTREE_SIBLING", f"{name} block {blk.addr} in AG {agno} is first "
                       f"in its level but has left sibling {blk.leftsib}",
                       block=blk.addr, field="bb_leftsib", found=blk.leftsib, **where)
    elif prev.rightsib != blk.addr or blk.leftsib != prev.addr:
        ctx.report("BTREE_SIBLING", f"{name} blocks {prev.addr} and {blk.addr} in AG "
                   f"{agno} are not linked as siblings", block=blk.addr,
                   field="bb_leftsib", **where)


def _node_keys(ctx, name, agno, blk, bt, order) -> list:
    """A node's keys, in order; out-of-order keys are a warning for AG
    btrees (xfs_repair does not look)."""
    keys = [struct.unpack(bt.key_fmt, k) for k in blk.keys]
    okeys = [order(k) for k in keys]
    bad = next((i + 1 for i, (a, b) in enumerate(zip(okeys, okeys[1:])) if b <= a), None)
    if bad is not None:
        ctx.report("BTREE_KEY", f"{name} block {blk.addr} in AG {agno}: node key {bad} "
                   "is out of order", agno=agno, block=blk.addr, structure=name,
                   field="keys", index=bad)
    return keys


def _child_keys(ctx, name, agno, bt):
    """on_node / on_leaf pair checking that a node's key for each child is
    the child's lowest key (a warning: xfs_repair does not check AG
    btree keys).  A finding names the node and the key's index."""
    want = {}

    def on_node(blk, _is_root):
        for i, (k, p) in enumerate(zip(blk.keys, blk.ptrs)):
            want[p] = (struct.unpack(bt.key_fmt, k)[:len(bt.key_names)], blk.addr, i)

    def check(blk, first):
        got = want.get(blk.addr)
        if got is None or first is None:
            return
        k, parent, i = got
        if tuple(first) != tuple(k[:len(first)]):
            ctx.report("BTREE_KEY", f"{name} block {parent} in AG {agno}: key {i} "
                       f"{k[:len(first)]} differs from the first key {first} of its "
                       f"child, block {blk.addr}", agno=agno, block=parent,
                       structure=name, field="keys", index=i,
                       expected=list(first), found=list(k[:len(first)]))
    return on_node, check


def _keyed_walk(ctx, name, agno, bt, on_leaf, on_keys=None):
    """(on_leaf, on_node) for walk_ag_tree over an AG btree keyed by its
    records' first field (inobt, finobt, refcountbt): ``on_leaf`` sees every
    leaf, and a node's key for each child is held to the child's lowest
    record or key (BTREE_KEY, a warning, as for the free-space btrees: a key
    raised past it makes lookups miss records).  ``on_keys(blk, keys)``, if
    given, sees every node's keys."""
    keys_seen, child_key = _child_keys(ctx, name, agno, bt)

    def on_node(blk, is_root):
        keys = [k[0] for k in _node_keys(ctx, name, agno, blk, bt, lambda k: k)]
        if on_keys is not None:
            on_keys(blk, keys)
        if keys:
            child_key(blk, keys[:1])
        keys_seen(blk, is_root)

    def on_any_leaf(blk, is_root):
        on_leaf(blk, is_root)
        if blk.recs:
            child_key(blk, blk.recs[0][:1])
    return on_any_leaf, on_node


# -- phase: free space -----------------------------------------------------
def phase_free_space(ctx) -> None:
    for agno in sorted(ctx.agf):
        if agno in ctx.ag_filter:
            _free_space(ctx, agno, ctx.agf[agno])


def _free_space(ctx, agno: int, agf: dict) -> None:
    length = ctx.fs.ag_length(agno)
    found = {"bnobt": [], "cntbt": []}
    for name, bt, idx in (("bnobt", btree.BNOBT, 0), ("cntbt", btree.CNTBT, 1)):
        recs = found[name]
        on_node, check_key = _child_keys(ctx, name, agno, bt)

        def on_leaf(blk, _is_root, name=name, recs=recs, check_key=check_key):
            last = 0
            for i, (s, n) in enumerate(blk.recs):
                where = dict(agno=agno, block=blk.addr, structure=name, index=i)
                if s == 0 or not ctx.verify_agbno(agno, s):
                    ctx.report("BTREE_RECORD", f"{name} of AG {agno}: record {i} of "
                               f"block {blk.addr} starts at invalid block {s}",
                               field="startblock", found=s, **where)
                    continue
                if n == 0 or s + n > length or not ctx.verify_agbno(agno, s + n - 1):
                    ctx.report("BTREE_RECORD", f"{name} of AG {agno}: record {i} of "
                               f"block {blk.addr} has invalid length {n}",
                               field="blockcount", found=n, **where)
                    continue
                key = s if name == "bnobt" else n
                if (key <= last) if name == "bnobt" else (key < last):
                    ctx.report("BTREE_ORDER", f"{name} of AG {agno}: record {i} of block "
                               f"{blk.addr} ({s}, {n}) is out of order", **where)
                else:
                    last = key
                recs.append((s, n))
            first = blk.recs[0] if blk.recs else None
            if first is not None:
                check_key(blk, first)

        def node(blk, is_root, name=name, on_node=on_node, bt=bt):
            _node_keys(ctx, name, agno, blk, bt, (lambda k: k) if name == "bnobt"
                       else (lambda k: (k[1], k[0])))
            on_node(blk, is_root)

        n = walk_ag_tree(ctx, agno, name, bt, agf["agf_roots"][idx],
                         agf["agf_levels"][idx], OWN_AG, on_leaf, node)
        found[name + "_blocks"] = n
    bno, cnt = found["bnobt"], found["cntbt"]
    for s, n in bno:
        ctx.claim(agno, s, n, OWN_FREE)
    sb_, sc = sorted(bno), sorted(cnt)
    if sb_ != sc:
        only_b = sorted(set(sb_) - set(sc))
        only_c = sorted(set(sc) - set(sb_))
        ctx.report("FREESP_MISMATCH", f"AG {agno}: free extents only in the bnobt "
                   f"{only_b[:4]}, only in the cntbt {only_c[:4]}", agno=agno,
                   structure="cntbt")
    for (s1, n1), (s2, _n2) in zip(sb_, sb_[1:]):
        if s1 + n1 == s2:
            ctx.report("FREESP_ADJACENT", f"AG {agno}: free extents at {s1} and {s2} "
                       "touch (they should be one)", agno=agno, block=s2,
                       structure="bnobt")
    # agf_freeblks and agf_longest count the cntbt's records
    total = sum(n for _s, n in cnt)
    longest = max((n for _s, n in cnt), default=0)
    _expect(ctx, agno, agf, "agf_freeblks", total, "AGF_FREEBLKS", "agf")
    _expect(ctx, agno, agf, "agf_longest", longest, "AGF_LONGEST", "agf")
    btreeblks = max(0, found["bnobt_blocks"] - 1) + max(0, found["cntbt_blocks"] - 1)
    if ctx.has_rmap:
        btreeblks += max(0, _rmap_tree(ctx, agno, agf) - 1)
    _expect(ctx, agno, agf, "agf_btreeblks", btreeblks, "AGF_BTREEBLKS", "agf")
    ctx.ag_totals["fdblocks"] += total + btreeblks + getattr(
        ctx, "agfl_count", {}).get(agno, 0)


def _expect(ctx, agno, hdr, field, want, code, structure, block=0,
            counted_in=None) -> None:
    """A header field against what was counted.  ``counted_in`` names
    the tree the count comes from where two trees count one field (the
    inobt's and the finobt's free inodes: two findings, as xfs_repair
    reports them); the finding is then that tree's, at its root."""
    if hdr[field] != want:
        where = f" in the {counted_in}" if counted_in else ""
        ctx.report(code, f"AG {agno}: {field} is {hdr[field]}, counted {want}{where}",
                   agno=agno, block=block, structure=counted_in or structure,
                   field=field, expected=want, found=hdr[field])


# -- the rmapbt ------------------------------------------------------------
def _rmap_tree(ctx, agno: int, agf: dict) -> int:
    recs = ctx.rmaps[agno]
    length = ctx.fs.ag_length(agno)
    sb = ctx.sb
    reflink = sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK)

    agino_log, inopblog, agcount, agblocks = (sb.agino_log, sb.inopblog, sb.agcount,
                                              sb.agblocks)
    state = {"last": None}

    def on_leaf(blk, _is_root):
        last = state["last"]
        leaf = blk.recs
        i, nrec = 0, len(leaf)
        while i < nrec:
            flat = recs.flat()
            if flat is not None:
                # the common case, every rule at once, natively; any
                # doubt goes to the record-by-record checks, which word
                # the findings
                i, last = checks.rmap_leaf_take(leaf, i, flat, length, agino_log,
                                                inopblog, agcount, agblocks, reflink, last)
                if i >= nrec:
                    break
            s, n, owner, off = leaf[i]
            last = _rmap_record(ctx, agno, blk, i, s, n, owner, off, length, last,
                                reflink, recs)
            i += 1
        state["last"] = last

    on_node, on_key = _rmap_keys(ctx, agno)
    n = walk_ag_tree(ctx, agno, "rmapbt", btree.RMAPBT, agf["agf_roots"][2],
                     agf["agf_levels"][2], OWN_AG, on_leaf, on_node, on_key)
    _expect(ctx, agno, agf, "agf_rmap_blocks", n, "AGF_RMAP_BLOCKS", "agf")
    return n


def _rmap_keys(ctx, agno: int):
    """on_node / on_key pair checking the rmapbt's keys as scan_rmapbt
    does (an error: unlike other AG btrees' keys, xfs_repair checks
    these): a node's keys have valid flags and low keys in order, a
    block's lowest record or key is the low key its parent holds for it
    (xfs_repair's lookups go by it), and no record or key of a block lies
    past the high key its parent holds for it.  Keys compare as (startblock, owner, offset with its fork
    and bmbt bits), unsigned; a record's high key is its last block,
    and for a fork mapping its last file offset."""
    valid = RMAP_OFF_MASK | RMAP_OFF_ATTR | RMAP_OFF_BMBT | RMAP_OFF_UNWRITTEN
    keep = ~RMAP_OFF_UNWRITTEN
    unpack, high = struct.Struct(">IQQIQQ").unpack, struct.Struct(">IQQ").unpack_from

    def bad(blk, detail, **kw):
        ctx.report("BTREE_RMAP_KEY", f"rmapbt block {blk.addr} in AG {agno}: {detail}",
                   agno=agno, block=blk.addr, structure="rmapbt", **kw)

    def on_node(blk, _is_root):
        last = None
        for i, k in enumerate(blk.keys):
            s, o, f, _hs, _ho, hf = unpack(k)
            if f & ~valid or hf & ~valid:
                bad(blk, f"key {i} has invalid flags", field="keys", index=i)
                continue
            low = (s, o, f & keep)
            if last is not None and last > low:
                bad(blk, f"key {i} is out of order", field="keys", index=i)
            last = low

    def on_key(blk, key):
        ls, lo, lf = high(key, 0)
        hs, ho, hf = high(key, 20)
        if hf & ~valid or lf & ~valid:
            return              # the parent's key: reported with the parent
        bound = (hs, ho, hf & keep)
        # the low key must be the block's lowest (a lookup goes by it:
        # xfs_repair's finds no record the key says is elsewhere)
        first = unpack(blk.keys[0])[:3] if blk.level else \
            (blk.recs[0][0], blk.recs[0][2], blk.recs[0][3]) if blk.recs else None
        if first is not None and (first[0], first[1], first[2] & keep) != (ls, lo, lf & keep):
            want = [first[0], first[1], first[2] & keep]
            bad(blk, f"its lowest key {tuple(want)} is not the low key "
                f"{(ls, lo, lf & keep)} its parent holds for it", expected=want,
                found=[ls, lo, lf & keep])
        if blk.level:
            tops = [(ks, ko, kf & keep) for *_low, ks, ko, kf in map(unpack, blk.keys)]
        else:
            # natively where it can (None: a record it leaves to this code)
            tops = None
            top = checks.rmap_leaf_top(blk.recs)
            if top is None:
                tops = [(s + n - 1, o, (f & keep) if o >> 63 or f & RMAP_OFF_BMBT
                         else (f & keep) + n - 1) for s, n, o, f in blk.recs]
        if tops is not None:
            top = max(tops, default=None)
        if top is not None and top > bound:
            bad(blk, f"its greatest key {top} lies past the high key {bound} its parent "
                "holds for it", expected=list(bound), found=list(top))
    return on_node, on_key


def _rmap_record(ctx, agno, blk, i, s, n, owner, off, length, last, reflink, recs):
    """One rmapbt record the fast test doubted: every rule, each a
    finding; returns the key the next record must follow."""
    sb = ctx.sb
    where = dict(agno=agno, block=blk.addr, structure="rmapbt", index=i)
    o = _i64(owner)
    flags = off & (RMAP_OFF_ATTR | RMAP_OFF_BMBT | RMAP_OFF_UNWRITTEN)
    if off & ~(RMAP_OFF_MASK | flags) or \
            (flags & RMAP_OFF_BMBT and flags & RMAP_OFF_UNWRITTEN):
        ctx.report("BTREE_RECORD", f"rmapbt of AG {agno}: record {i} of block "
                   f"{blk.addr} has invalid flags", field="offset", **where)
        return last
    # (rmaps may start at block 0: the AG headers)
    if s >= length:
        ctx.report("BTREE_RECORD", f"rmapbt of AG {agno}: record {i} of block "
                   f"{blk.addr} starts at invalid block {s}",
                   field="startblock", found=s, **where)
        return last
    if n == 0 or s + n > length:
        ctx.report("BTREE_RECORD", f"rmapbt of AG {agno}: record {i} of block "
                   f"{blk.addr} has invalid length {n}", field="blockcount",
                   found=n, **where)
        return last
    if not (RMAP_OWN_MIN < o <= -3 or
            (o >= 0 and o >> sb.agino_log < sb.agcount and
             (o & ((1 << sb.agino_log) - 1)) >> sb.inopblog < sb.agblocks)):
        ctx.report("BTREE_RECORD", f"rmapbt of AG {agno}: record {i} of block "
                   f"{blk.addr} has invalid owner {o}", field="owner",
                   found=owner, **where)
    if o < 0 and (flags or off & RMAP_OFF_MASK):
        ctx.report("BTREE_RECORD", f"rmapbt of AG {agno}: record {i} of block "
                   f"{blk.addr} has a metadata owner with flags or an offset",
                   field="offset", **where)
    key = (s, owner, off) if reflink else (s,)
    if last is not None and key <= last:
        ctx.report("BTREE_ORDER", f"rmapbt of AG {agno}: record {i} of block "
                   f"{blk.addr} is out of order", **where)
    else:
        last = key
    recs.append((s, n, o, off & RMAP_OFF_MASK, flags))
    return last


# -- phase: inode btrees ---------------------------------------------------
def phase_inode_btrees(ctx) -> None:
    for agno in ctx.ag_filter:
        if agno in ctx.agi:
            _inode_btrees(ctx, agno, ctx.agi[agno])
        else:
            _table_for(ctx, agno, [])


def _inode_btrees(ctx, agno: int, agi: dict) -> None:
    sb = ctx.sb
    ctx._ialign = sb.fields["sb_inoalignmt"] if sb.fields["sb_versionnum"] & 0x80 else 0
    if not hasattr(ctx, "_agino_lo"):
        ctx._agino_lo, ctx._agino_hi = {}, {}
    ctx._agino_lo[agno], ctx._agino_hi[agno] = ctx.agino_range(agno)
    recs = []
    counts = {"count": 0, "free": 0, "fibt_free": 0}

    hooks = ctx.hooks

    def on_leaf(blk, _is_root):
        for i, rec in enumerate(blk.recs):
            counts["count"] += rec[2]
            counts["free"] += rec[3]
            n = len(ctx.findings)
            if _inobt_record(ctx, agno, "inobt", blk.addr, i, rec):
                recs.append(rec)
                if hooks is not None and len(ctx.findings) > n:
                    hooks.inobt_record_reported(ctx, agno, rec)

    nblocks = walk_ag_tree(ctx, agno, "inobt", ctx.fs.inobt_type(), agi["agi_root"],
                           agi["agi_level"], OWN_INOBT,
                           *_keyed_walk(ctx, "inobt", agno, ctx.fs.inobt_type(), on_leaf))
    good = _table_for(ctx, agno, recs)
    root = agi["agi_root"]
    _expect(ctx, agno, agi, "agi_count", counts["count"], "AGI_COUNT", "agi", root, "inobt")
    _expect(ctx, agno, agi, "agi_freecount", counts["free"], "AGI_COUNT", "agi", root,
            "inobt")
    ctx.ag_totals["icount"] += counts["count"]
    ctx.ag_totals["ifree"] += counts["free"]
    fblocks = 0
    if sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_FINOBT):
        by_start = {r[0]: r for r in good}
        frecs = []

        def on_fleaf(blk, _is_root):
            for i, rec in enumerate(blk.recs):
                counts["fibt_free"] += rec[3]
                where = dict(agno=agno, block=blk.addr, structure="finobt", index=i)
                if not _inobt_record(ctx, agno, "finobt", blk.addr, i, rec):
                    continue
                frecs.append(rec)
                match = by_start.get(rec[0])
                if match is None:
                    ctx.report("FINOBT_MISMATCH", f"finobt of AG {agno}: record for "
                               f"agino {rec[0]} has no inobt record",
                               field="ir_startino", found=rec[0], **where)
                elif match[1] != rec[1] or match[4] != rec[4] or match[2] != rec[2]:
                    ctx.report("FINOBT_MISMATCH", f"finobt of AG {agno}: record for "
                               f"agino {rec[0]} differs from the inobt's", field="ir_free",
                               expected=match[4], found=rec[4], **where)
                if rec[3] == 0:
                    ctx.report("FINOBT_MISMATCH", f"finobt of AG {agno}: record for "
                               f"agino {rec[0]} has no free inodes",
                               field="ir_freecount", **where)

        fblocks = walk_ag_tree(ctx, agno, "finobt", ctx.fs.inobt_type(free=True),
                               agi["agi_free_root"], agi["agi_free_level"], OWN_INOBT,
                               *_keyed_walk(ctx, "finobt", agno,
                                            ctx.fs.inobt_type(free=True), on_fleaf))
        _expect(ctx, agno, agi, "agi_freecount", counts["fibt_free"], "AGI_COUNT", "agi",
                agi["agi_free_root"], "finobt")
    if sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_INOBTCNT):
        _expect(ctx, agno, agi, "agi_iblocks", nblocks, "AGI_BLOCKS", "agi")
        _expect(ctx, agno, agi, "agi_fblocks", fblocks, "AGI_BLOCKS", "agi")
    _claim_chunks(ctx, agno, good)


def _inobt_record(ctx, agno, name, block, i, rec) -> bool:
    """The checks of one inobt/finobt record (xfs_repair's
    verify_single_ino_chunk_align and import_single_ino_chunk); False
    when the record cannot be used."""
    sb = ctx.sb
    startino, holemask, count, freecount, free = rec
    ialign = ctx._ialign
    if not holemask and count == 64 and free.bit_count() == freecount and startino and \
            not startino & 63 and not (ialign and (startino >> sb.inopblog) % ialign) and \
            ctx._agino_lo[agno] <= startino and startino + 63 <= ctx._agino_hi[agno]:
        return True                 # the common record: a whole, aligned chunk
    where = dict(agno=agno, block=block, structure=name, index=i)
    off = startino & (sb.inopblock - 1)
    agbno = startino >> sb.inopblog
    if startino == 0 or (sb.inopblock <= 64 and off) or \
            (sb.inopblock > 64 and off % 64) or (ialign and agbno % ialign):
        ctx.report("INOBT_RECORD", f"{name} of AG {agno}: record {i} of block {block} "
                   f"starts at badly aligned agino {startino}", field="ir_startino",
                   found=startino, **where)
    if not ctx.verify_agino(agno, startino) or not ctx.verify_agino(agno, startino + 63):
        ctx.report("INOBT_RECORD", f"{name} of AG {agno}: record {i} of block {block} at "
                   f"agino {startino} lies outside the AG", field="ir_startino",
                   found=startino, **where)
        return False
    holes = 0
    for bit in range(16):
        if holemask >> bit & 1:
            holes |= 0xF << (4 * bit)
    if holes & ~free & 0xFFFFFFFFFFFFFFFF:
        ctx.report("INOBT_RECORD", f"{name} of AG {agno}: record at agino {startino} has "
                   "sparse inodes not marked free", field="ir_holemask",
                   found=holemask, **where)
    ninodes = 64 - bin(holes).count("1")
    nfree = bin(free & ~holes & 0xFFFFFFFFFFFFFFFF).count("1")
    if nfree != freecount:
        ctx.report("INOBT_RECORD", f"{name} of AG {agno}: record at agino {startino} has "
                   f"freecount {freecount}, its mask frees {nfree}",
                   field="ir_freecount", expected=nfree, found=freecount, **where)
    if sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_SPINODES) and ninodes != count:
        ctx.report("INOBT_RECORD", f"{name} of AG {agno}: record at agino {startino} has "
                   f"count {count}, its holemask leaves {ninodes}", field="ir_count",
                   expected=ninodes, found=count, **where)
    # sparse inodes come a whole cluster at a time
    per_cluster = ctx.blocks_per_cluster << sb.inopblog
    if holemask and per_cluster > 4:
        for c in range(0, 64, per_cluster):
            bits = (holes >> c) & ((1 << per_cluster) - 1)
            if bits not in (0, (1 << per_cluster) - 1):
                ctx.report("INOBT_RECORD", f"{name} of AG {agno}: record at agino "
                           f"{startino} has a hole that splits an inode cluster",
                           field="ir_holemask", found=holemask, **where)
                break
    return True


def _table_for(ctx, agno: int, recs: list) -> list:
    """The AG's inode table: one slot per inode of every chunk, in inode
    order; a record that overlaps an earlier one gets none (it is
    reported) and its inodes are not looked at."""
    if ctx.hooks is not None:
        recs = ctx.hooks.chunk_records(ctx, agno, recs)
    base = agno << ctx.sb.agino_log
    keep = []
    end = -1
    for rec in sorted(recs, key=lambda r: r[0]):
        if rec[0] >= end:
            keep.append(rec)
            end = rec[0] + 64
        else:
            ctx.report("INOBT_RECORD", f"inobt record at agino {rec[0]} in AG {agno} "
                       "overlaps another record's chunk", agno=agno, structure="inobt",
                       field="ir_startino", found=rec[0])
    ctx.chunks[agno] = keep
    ctx.tables[agno] = InodeTable((base | r[0] for r in keep), pptr=ctx.has_pptr)
    return keep


def _claim_chunks(ctx, agno: int, recs: list) -> None:
    sb = ctx.sb
    chunk_blocks = 64 >> sb.inopblog
    shared = set()          # blocks claimed for a chunk that holds only part of them
    for startino, holemask, _n, _f, _free in recs:
        if not holemask and chunk_blocks and not startino & (sb.inopblock - 1):
            ctx.claim(agno, startino >> sb.inopblog, chunk_blocks, OWN_INODES)
            continue
        blocks = set()
        for i in range(64):
            if not holemask >> (i // 4) & 1:
                blocks.add((startino + i) >> sb.inopblog)
        # a block of more than 64 inodes (64 KiB blocks) holds several chunks
        for b in sorted(blocks - shared):
            ctx.claim(agno, b, 1, OWN_INODES)
        shared |= blocks
    if not chunk_blocks:
        # the kernel allocates such a block whole, a record for each 64
        # of its inodes: a part with no record holds no valid inodes
        starts = {r[0] for r in recs}
        per = sb.inopblock
        for b in sorted(shared):
            missing = [b * per + k for k in range(0, per, 64) if b * per + k not in starts]
            if missing:
                ctx.report("INOBT_RECORD", f"AG {agno} block {b} holds inode chunks but "
                           f"no inobt record for inodes {missing[0]} to "
                           f"{missing[0] + 63}", agno=agno, block=b, structure="inobt",
                           field="ir_startino", found=missing[0])


# -- phase: refcounts ------------------------------------------------------
def phase_refcounts(ctx) -> None:
    if not ctx.sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK):
        return
    for agno in sorted(ctx.agf):
        if agno not in ctx.ag_filter:
            continue
        agf = ctx.agf[agno]
        shared = ctx.refcounts.setdefault(agno, [])
        state = {"last": None}

        def on_leaf(blk, _is_root, shared=shared, state=state, agno=agno):
            lastblock = 0
            for i, (start, length, refcount) in enumerate(blk.recs):
                where = dict(agno=agno, block=blk.addr, structure="refcountbt", index=i)
                agb = start
                if start >= REFC_COW_START:
                    if refcount != 1:
                        ctx.report("BTREE_RECORD", f"refcountbt of AG {agno}: CoW "
                                   f"record {i} of block {blk.addr} has refcount "
                                   f"{refcount}", field="refcount", found=refcount,
                                   **where)
                    agb -= REFC_COW_START
                elif refcount == 1:
                    ctx.report("BTREE_RECORD", f"refcountbt of AG {agno}: record {i} of "
                               f"block {blk.addr} has refcount 1 outside the CoW "
                               "domain", field="startblock", found=start, **where)
                if not ctx.verify_agbno(agno, agb):
                    ctx.report("BTREE_RECORD", f"refcountbt of AG {agno}: record {i} of "
                               f"block {blk.addr} starts at invalid block {agb}",
                               field="startblock", found=start, **where)
                    continue
                if length == 0 or not ctx.verify_agbno(agno, agb + length - 1):
                    ctx.report("BTREE_RECORD", f"refcountbt of AG {agno}: record {i} of "
                               f"block {blk.addr} has invalid length {length}",
                               field="blockcount", found=length, **where)
                    continue
                if refcount == 1:
                    ctx.report("REFCOUNT_COW", f"AG {agno}: a CoW staging extent "
                               f"({agb}, {length}) was left behind", **where)
                    ctx.claim(agno, agb, length, OWN_COW)
                    continue
                if refcount < 2:
                    ctx.report("BTREE_RECORD", f"refcountbt of AG {agno}: record {i} of "
                               f"block {blk.addr} has invalid refcount {refcount}",
                               field="refcount", found=refcount, **where)
                    continue
                if start and start <= lastblock:
                    ctx.report("BTREE_ORDER", f"refcountbt of AG {agno}: record {i} of "
                               f"block {blk.addr} is out of order", **where)
                else:
                    lastblock = start
                last = state["last"]
                if last is not None and last[0] + last[1] == start and last[2] == refcount:
                    ctx.report("BTREE_RECORD", f"refcountbt of AG {agno}: record {i} of "
                               f"block {blk.addr} should be merged with the one before",
                               **where)
                state["last"] = (start, length, refcount)
                shared.append((start, length, refcount))

        tree = {"root": agf["agf_refcount_root"], "height": agf["agf_refcount_level"],
                "nodes": {}, "leaves": {}}
        ctx.refcount_trees[agno] = tree

        def on_keys(blk, keys, tree=tree):
            tree["nodes"][blk.addr] = (keys, list(blk.ptrs))

        def on_tree_leaf(blk, is_root, on_leaf=on_leaf, tree=tree):
            tree["leaves"][blk.addr] = list(blk.recs)
            on_leaf(blk, is_root)

        # (a key raised past its child's lowest: the shared-block count
        # below reports the records lookups miss)
        on_any_leaf, on_node = _keyed_walk(ctx, "refcountbt", agno, btree.REFCOUNTBT,
                                           on_tree_leaf, on_keys)
        n = walk_ag_tree(ctx, agno, "refcountbt", btree.REFCOUNTBT,
                         agf["agf_refcount_root"], agf["agf_refcount_level"],
                         OWN_REFC, on_any_leaf, on_node)
        _expect(ctx, agno, agf, "agf_refcount_blocks", n, "AGF_REFCOUNT_BLOCKS", "agf")
