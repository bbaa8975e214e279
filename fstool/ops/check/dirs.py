"""Directories in every form, block by block, as xfs_repair's process_dir2
and phase 6 look at them: shortform entries (targets, names, offsets,
counts, size), data blocks (entries, '.' and '..', the bestfree table),
the leaf (hash order, stale count, exactly the data entries, the bests) and
the node form's da-btree and free index.  Entries are counted into the inode
table natively (``parsers.dir_data_tally``); only odd entries come back to
Python."""
from __future__ import annotations

import functools

from ..._backend import checks, parsers
from ...errors import CorruptionError, FsToolError
from ...format import constants as C
from ...fs import dabtree as DA, dir as xdir, dirblock as B
from ...fs.dirform import data, leaf
from ...io import verify as V
from ..names import quoted_name
from .superblocks import check_lsn, root_ino, rt_inodes

# dir_data_tally / tally_entry flags
T_FREE, T_FTYPE, T_DIR, T_DOT, T_BADNAME, T_SELF = 1, 2, 4, 8, 16, 32
DIR2_MAX_SHORT_INUM = 0xFFFFFFFF


def name_ok(name: bytes) -> bool:
    """xfs_dir2_namecheck: no '/' or NUL, shorter than MAXNAMELEN."""
    return 0 < len(name) < 256 and b"/" not in name and b"\0" not in name


def setup_dir_geometry(ctx) -> None:
    sb = ctx.sb
    ctx.dir_data_first = B.HDR + 2 * B.MIN_ENTSIZE
    ctx.da_node_ents = (sb.dirblksize - DA.HDR) // DA.ENTRY
    ctx.attr_node_ents = (sb.blocksize - DA.HDR) // DA.ENTRY


def _data_entsize(ctx, namelen: int) -> int:
    return B.entsize(namelen, 1 if ctx.sb.has_ftype else 0)


# -- one directory ------------------------------------------------------------
def check_dir(ctx, node, tab, odd: list):
    """Count the directory's entries into the inode table, adding to
    ``odd`` the entries dir_data_tally singles out, and check its blocks
    per form.  Returns '..' of a shortform directory (the others have it
    among ``odd``)."""
    if ctx.hooks is not None:
        ctx.hooks.dir_node(ctx, node)
    kind = _dir_form(ctx, node)
    if kind is None:
        return None
    if kind == "shortform":
        return _shortform(ctx, node, tab, odd)
    if kind == "block":
        buf = _dirblock(ctx, node, 0, V.DIR3_BLOCK)
        count, stale = B.block_tail(buf)
        start = B.block_leaf_start(buf, count)
        if start < B.HDR:
            raise CorruptionError("directory block", f"tail count {count} overruns the "
                                  "block", ino=node.ino, block=0, field="count")
        frees, dsum = _data_tally(ctx, node, buf, start, 0, tab, odd)
        _check_bestfree(ctx, node, 0, buf, frees)
        _check_leaf(ctx, node, buf, start, count, stale, dsum, True, buf)
        return None
    dsum = 0
    bests = {}
    for fsb in data.block_fsbs(node):
        try:
            buf = _dirblock(ctx, node, fsb, V.DIR3_DATA)
        except FsToolError as e:
            ctx.from_error("DIR_CORRUPT", e, ino=node.ino, offset=fsb, fork="data",
                           structure="dir")
            continue
        frees, part = _data_tally(ctx, node, buf, len(buf), fsb, tab, odd)
        dsum += part
        bests[fsb // ctx.sb.dirblkfsbs] = _check_bestfree(ctx, node, fsb, buf, frees)
    _check_index(ctx, node, kind, dsum & 0xFFFFFFFFFFFFFFFF, bests)
    return None


def _dir_form(ctx, node):
    """The directory's form, or None (reported) when it has none."""
    try:
        return xdir.form(node)
    except CorruptionError as e:
        ctx.from_error("DIR_CORRUPT", e, ino=node.ino, structure="dir")
        return None


def _dirblock(ctx, node, fsb, bt):
    # read once while checking: not kept in the buffer cache
    sb = ctx.sb
    daddr, pieces = node.read_fork_blocks(fsb, sb.dirblkfsbs)
    buf = ctx.fs.read_meta(daddr, sb.dirblksize, bt, owner=node.ino, ino=node.ino,
                           block=fsb, pieces=pieces, keep=False)
    check_lsn(ctx, bt.lsn_of(buf), "dir", ino=node.ino, offset=fsb, fork="data",
                   field="lsn")
    return buf


# -- shortform ------------------------------------------------------------------
def _shortform(ctx, node, tab, odd):
    """process_sf_dir2 and shortform_dir2_entry_check."""
    sb = ctx.sb
    ino = node.ino
    fork = node.fork_bytes()
    size = node.size
    where = dict(ino=ino, structure="dir", fork="data")
    bad = functools.partial(_dir_bad, ctx)
    if size > len(fork) or size < B.SF_MIN:
        bad("DIR_CORRUPT", ino, f"shortform size {size} does not fit the fork "
            f"({len(fork)} bytes)", "di_size", where)
        return None
    count, i8count, width = B.sf_header(fork)
    if B.SF_HDR + width > size:
        bad("DIR_CORRUPT", ino, "shortform header runs past its size", "di_size", where)
        return None
    parent = B.sf_parent(fork, width)
    ft = 1 if sb.has_ftype else 0
    entsize_min = B.sf_entsize(1, ft, width)
    n = count
    if count * entsize_min + B.SF_HDR + width > len(fork) or count == 0:
        n = 0xFF
    pos = B.SF_HDR + width
    offset = ctx.dir_data_first
    bad_offset = False
    names = {}
    i8 = 1 if parent > DIR2_MAX_SHORT_INUM else 0
    found = 0
    entries = []
    while found < n and size > pos:
        if pos + B.SF_ENTRY > len(fork):
            break
        namelen = fork[pos]
        esize = B.sf_entsize(namelen, ft, width)
        if namelen == 0:
            bad("DIR_CORRUPT", ino, f"shortform entry {found} has a zero-length name",
                "namelen", where, index=found)
            break
        if pos + esize > size:
            bad("DIR_CORRUPT", ino, f"shortform entry {found} runs past the directory "
                "size", "namelen", where, index=found)
            break
        eoff, name, ftype, child, _size = B.sf_entry(fork, pos, ft, width)
        if not name_ok(name):
            bad("DIR_NAME", ino, f"shortform entry {quoted_name(name)} has an illegal "
                "name", "name", where, index=found)
        elif name in names:
            bad("DIR_NAME", ino, f"shortform entry {quoted_name(name)} is a duplicate "
                "name", "name", where, index=found)
        names.setdefault(name, child)
        if eoff < offset:
            bad_offset = True
        offset = eoff + _data_entsize(ctx, namelen)
        if child > DIR2_MAX_SHORT_INUM:
            i8 += 1
        entries.append((name, child, ftype, found))
        pos += esize
        found += 1
    if count != found:
        bad("DIR_CORRUPT", ino, f"shortform count {count}, {found} entries", "count",
            where, expected=found, found=count)
    if i8count != i8:
        bad("DIR_CORRUPT", ino, f"shortform i8count {i8count}, {i8} inode numbers need "
            "8 bytes", "i8count", where, expected=i8, found=i8count)
    if pos != size:
        bad("DIR_CORRUPT", ino, f"shortform size {size}, its entries end at {pos}",
            "di_size", where, expected=pos, found=size)
    if offset + (count + 2) * B.LEAF_ENT + B.BLOCK_TAIL > sb.dirblksize:
        bad_offset = True
    if bad_offset:
        bad("DIR_CORRUPT", ino, "shortform entry offsets are out of order or too high",
            "offset", where)
    # the parent
    if not verify_dir_ino(ctx, parent):
        bad("DIR_DOTDOT", ino, f"'..' is {parent}, not a valid inode", "parent", where,
            found=parent)
        parent = None
    elif ino == root_ino(ctx) and parent != ino:
        bad("DIR_DOTDOT", ino, f"the root directory's '..' is {parent}", "parent", where,
            expected=ino, found=parent)
    elif parent == ino and ino != root_ino(ctx):
        bad("DIR_DOTDOT", ino, "'..' points to the directory itself", "parent", where,
            found=parent)
        parent = None
    tally = parsers.tally_entry
    args = (tab.starts, tab.itype, tab.refs)
    for name, child, ftype, idx in entries:
        if child == ino or not verify_dir_ino(ctx, child):
            bad("DIR_ENTRY_TARGET", ino, f"shortform entry {quoted_name(name)} points to "
                f"{'itself' if child == ino else f'invalid inode {child}'}", "inumber",
                where, index=idx, found=child)
            continue
        flags = tally(*args, child, ftype, sb.has_ftype, tab.psums, ino, node.gen, name)
        if flags:
            odd.append((name, child, ftype, flags))
    return parent


def _dir_bad(ctx, code, ino, detail, field, where, **more) -> None:
    ctx.report(code, f"directory {ino}: {detail}", field=field, **where, **more)


def verify_dir_ino(ctx, ino: int) -> bool:
    """libxfs_verify_dir_ino: a valid inode number that is not one of the
    superblock's metadata inodes."""
    sb = ctx.sb
    agno = ino >> sb.agino_log
    if agno >= sb.agcount or not ctx.verify_agino(agno, ino & ((1 << sb.agino_log) - 1)):
        return False
    return ino not in rt_inodes(ctx) and ino not in quota_inodes(ctx)


def quota_inodes(ctx) -> set:
    """The quota inodes the primary superblock names: 0 and null aside,
    and the root and realtime inodes, which are no quota inodes (a field
    naming one is an SB_QUOTINO finding)."""
    f = ctx.sb.fields
    return {v for v in (f["sb_uquotino"], f["sb_gquotino"], f["sb_pquotino"])
            if v not in (0, 0xFFFFFFFFFFFFFFFF)} - not_quota_inodes(ctx)


def not_quota_inodes(ctx) -> set:
    return {root_ino(ctx), *rt_inodes(ctx)}


# -- data blocks ------------------------------------------------------------------
def _data_tally(ctx, node, buf, end: int, fsb: int, tab, odd: list):
    """(unused regions, leaf sum) of one data block, its odd entries added
    to ``odd``; a malformed block is reported once what preceded the bad
    entry is counted."""
    addr_base = (fsb // ctx.sb.dirblkfsbs) * ctx.sb.dirblksize
    try:
        frees, lsum, more, why = parsers.dir_data_tally(
            buf, B.HDR, end, ctx.sb.has_ftype, addr_base,
            tab.starts, tab.itype, tab.refs, node.ino, tab.psums, node.gen)
    except ValueError as e:
        frees, lsum, more, why = [], 0, [], str(e)
    odd += more
    if why:
        ctx.report("DIR_CORRUPT", f"directory {node.ino}: data block at {fsb}: {why}",
                   ino=node.ino, offset=fsb, fork="data", structure="dir")
    return frees, lsum


def _check_bestfree(ctx, node, fsb, buf, frees) -> int:
    """process_dir2_data's bestfree rules: the three slots list regions
    (by offset) at most once each, longest first, unused slots zero; no
    two free regions in a row; a region left out of the table is no
    longer than the shortest listed.  Returns the longest free run."""
    longest = checks.bestfree_ok(buf, frees)
    if longest >= 0:
        return longest          # the table is right
    slots = [tuple(s) for s in B.get_bf(buf)]         # (offset, length)
    bad = False
    seen = 0
    for i, (off, ln) in enumerate(slots):
        if ln == 0:
            bad |= off != 0
            seen |= 1 << i
    bad |= slots[0][1] < slots[1][1] or slots[1][1] < slots[2][1]
    prev_end = None
    for length, off in sorted(frees, key=lambda f: f[1]):
        if prev_end == off:
            bad = True
        prev_end = off + length
        bad |= checks.bestfree_region_bad(slots[0][0], slots[0][1], slots[1][0],
                                          slots[1][1], slots[2][0], slots[2][1],
                                          off, length)
        match = [i for i, s in enumerate(slots) if s[0] == off and s[1]]
        if match:
            i = match[0]
            bad |= bool(seen & (1 << i))
            seen |= 1 << i
        else:
            bad |= length > slots[2][1]
    if seen != 7 or bad:
        ctx.report("DIR_BESTFREE", f"directory {node.ino}: the bestfree table of data "
                   f"block {fsb} does not list its largest free regions", ino=node.ino,
                   offset=fsb, fork="data", structure="dir", field="bestfree")
    return max((f[0] for f in frees), default=0)


# -- the leaf ---------------------------------------------------------------------
def _check_leaf(ctx, node, buf, start, count, stale, dsum, block_form,
                blockbuf=None) -> None:
    """A block- or leaf-form directory's leaf entries against its data
    entries; on a mismatch, find the entry that is wrong."""
    fsb = 0 if block_form else C.XFS_DIR2_LEAF_OFFSET >> ctx.sb.blocklog
    if _leaf_block(ctx, node, fsb, buf, start, count, stale) == dsum:
        return
    before = len(ctx.findings)
    _check_leaf_ents(ctx, node, buf, start, count, block_form, blockbuf)
    if len(ctx.findings) == before:
        ctx.report("DIR_LEAF", f"directory {node.ino}: its leaf does not index exactly "
                   "its data entries", ino=node.ino, offset=fsb, fork="data",
                   structure="dir", field="hashval")


def _leaf_block(ctx, node, fsb, buf, start, count, stale) -> int:
    """Order and stale count of one leaf block's entries; their sum."""
    where = dict(ino=node.ino, offset=fsb, fork="data", structure="dir")
    try:
        ordered, nstale, lsum = parsers.leaf_tally(buf, start, count)
    except ValueError as e:
        raise CorruptionError("directory leaf block", str(e), ino=node.ino,
                              block=fsb, field="count") from None
    if not ordered:
        ctx.report("DIR_LEAF", f"directory {node.ino}: leaf hashes out of order",
                   field="hashval", **where)
    if nstale != stale:
        ctx.report("DIR_LEAF", f"directory {node.ino}: {nstale} stale leaf entries, "
                   f"the header says {stale}", field="stale", expected=nstale,
                   found=stale, **where)
    return lsum


def _check_leaf_ents(ctx, node, buf, start, count, block_form, blockbuf=None):
    """Each leaf entry's hash against the name it points to."""
    ino = node.ino
    for i in range(count):
        h, addr = B.leaf_entry(buf, start, i)
        if addr == C.XFS_DIR2_NULL_DATAPTR:
            continue
        try:
            _child, name = leaf.entry_at(node, addr, block_form, blockbuf)
        except FsToolError as e:
            ctx.from_error("DIR_LEAF", e, ino=ino, structure="dir", index=i)
            continue
        if parsers.da_hashname(name) != h:
            ctx.report("DIR_LEAF", f"directory {ino}: leaf hash 0x{h:08x} for "
                       f"{quoted_name(name)}, which hashes to "
                       f"0x{parsers.da_hashname(name):08x}",
                       ino=ino, structure="dir", field="hashval", index=i)


def _check_index(ctx, node, kind: str, dsum: int, bests: dict) -> None:
    """The leaf (leaf form) or the da-btree, leafn and free blocks (node
    form) of a directory whose data blocks summed to ``dsum``."""
    sb = ctx.sb
    ino = node.ino
    leaf_fsb = C.XFS_DIR2_LEAF_OFFSET >> sb.blocklog
    where = dict(ino=ino, fork="data", structure="dir")
    if kind == "leaf":
        try:
            buf = _dirblock(ctx, node, leaf_fsb, V.DIR3_LEAF)
        except FsToolError as e:
            ctx.from_error("DIR_CORRUPT", e, offset=leaf_fsb, **where)
            return
        count, stale = B.leaf_count_stale(buf)
        _check_leaf(ctx, node, buf, B.LEAF_HDR, count, stale, dsum, False)
        nbests = B.bestcount(buf)
        want = max(bests, default=-1) + 1
        if nbests != want:
            ctx.report("DIR_LEAF", f"directory {ino}: the leaf tail holds {nbests} "
                       f"best-free entries, the directory has {want} data blocks",
                       offset=leaf_fsb, field="bestcount", expected=want, found=nbests,
                       **where)
        stored = B.leaf_bests(buf, nbests) \
            if B.LEAF_HDR + B.LEAF_ENT * count <= B.leaf_bests_start(buf, nbests) else []
        _compare_bests(ctx, ino, stored, bests, 0, leaf_fsb)
        return
    # node form: the da-btree over the leafn blocks, then the free index
    free_fsb = C.XFS_DIR2_FREE_OFFSET >> sb.blocklog
    lsum = 0

    def read(dablk):
        return _dirblock(ctx, node, dablk, V.DA3_NODE_OR_LEAF)

    def leaf(dablk, buf, greatest):
        """process_leaf_block_dir2: order within the block (stale slots
        too: the read verifier), each live hash at least the greatest
        before it, the stale count; returns this block's greatest."""
        nonlocal lsum
        if DA.magic(buf) != C.XFS_DIR3_LEAFN_MAGIC:
            ctx.report("DIR_CORRUPT", f"directory {ino}: block {dablk} in the leaf "
                       "chain is not a leafn block", offset=dablk, field="magic",
                       **where)
            return None
        count, stale = B.leaf_count_stale(buf)
        before = len(ctx.findings)
        try:
            lsum += _leaf_block(ctx, node, dablk, buf, B.LEAF_HDR, count, stale)
        except CorruptionError as e:
            ctx.from_error("DIR_LEAF", e, offset=dablk, **where)
            return None
        if not count:
            return greatest
        ents = B.leaf_words(buf, B.LEAF_HDR, count)
        # (a stale slot is not compared, but the next one is compared with it)
        if ents[1] and ents[0] < greatest:
            ctx.report("DIR_LEAF", f"directory {ino}: leaf block {dablk} starts at "
                       f"hash 0x{ents[0]:08x}, below the greatest before it "
                       f"(0x{greatest:08x})", offset=dablk, field="hashval", **where)
        return None if len(ctx.findings) > before else ents[-2]
    check_da_tree(ctx, node, leaf_fsb, read, leaf, "dir", ctx.da_node_ents,
                  dir_root_leafn=True)
    if lsum & 0xFFFFFFFFFFFFFFFF != dsum:
        ctx.report("DIR_LEAF", f"directory {ino}: its leaf blocks do not index exactly "
                   "its data entries", field="hashval", **where)
    # each free block covers the bests of maxbests data blocks, by its
    # place: the kernel's verifier checks firstdb against it, and
    # xfs_repair reads the free block of every data block there is
    maxbests = (sb.dirblksize - B.FREE_HDR) // 2
    covered = set()
    for fsb in _dir_blocks_between(ctx, node, free_fsb, None):
        try:
            buf = _dirblock(ctx, node, fsb, V.DIR3_FREE)
        except FsToolError as e:
            ctx.from_error("DIR_CORRUPT", e, offset=fsb, **where)
            continue
        firstdb, nvalid, nused = B.free_hdr(buf)
        index = (fsb - free_fsb) // sb.dirblkfsbs
        covered.add(index)
        if firstdb != index * maxbests:
            ctx.report("DIR_FREE", f"directory {ino}: free block at {fsb} says it "
                       f"covers data blocks from {firstdb}, its place says "
                       f"{index * maxbests}", offset=fsb, field="firstdb",
                       expected=index * maxbests, found=firstdb, **where)
            continue
        fits = B.FREE_HDR + 2 * nvalid <= len(buf)
        stored = B.free_bests(buf, nvalid) if fits else []
        if not fits:
            ctx.report("DIR_FREE", f"directory {ino}: free block at {fsb} says "
                       f"{nvalid} entries", offset=fsb, field="nvalid", found=nvalid,
                       **where)
        _compare_bests(ctx, ino, stored, bests, firstdb, fsb)
        used = sum(1 for v in stored if v != 0xFFFF)
        if used != nused:
            ctx.report("DIR_FREE", f"directory {ino}: free block at {fsb} says "
                       f"{nused} used, holds {used}", offset=fsb, field="nused",
                       expected=used, found=nused, **where)
    for index in sorted({db // maxbests for db in bests} - covered):
        fsb = free_fsb + index * sb.dirblkfsbs
        ctx.report("DIR_FREE", f"directory {ino}: no free block at {fsb} for data "
                   f"blocks {index * maxbests} to {(index + 1) * maxbests - 1}",
                   offset=fsb, field="firstdb", **where)


def _compare_bests(ctx, ino, stored, bests, firstdb, fsb) -> None:
    for i, v in enumerate(stored):
        db = firstdb + i
        want = bests.get(db, 0xFFFF)
        if v != want:
            ctx.report("DIR_FREE", f"directory {ino}: best free space of data block "
                       f"{db} recorded as {v}, it is {want}", ino=ino, structure="dir",
                       fork="data", offset=fsb, field="bests", index=i, expected=want,
                       found=v)


def _dir_blocks_between(ctx, node, lo: int, hi):
    """File offsets of the directory blocks mapped in [lo, hi)."""
    step = ctx.sb.dirblkfsbs
    for startoff, _sb, count, _u in node.extents():
        end = startoff + count if hi is None else min(startoff + count, hi)
        first = -(-max(startoff, lo) // step) * step
        yield from range(first, end, step)


# -- da-btrees (directory node form, attr node form) ----------------------------------
def check_da_tree(ctx, node, root: int, read, leaf, what: str, node_ents: int,
                  dir_root_leafn: bool = False, strict=None) -> None:
    """A directory's (``what`` "dir") or attr fork's ("attr") da-btree
    walked as xfs_repair walks it (fstool.fs.dabtree.audit), each fault
    reported as a finding: ``read(dablk)`` returns a verified buffer or
    raises; ``leaf``, ``strict`` and ``dir_root_leafn`` are audit's."""
    ino = node.ino
    where = dict(ino=ino, fork="data" if what == "dir" else "attr",
                 structure="dir" if what == "dir" else "attr")
    code = "DIR_NODE" if what == "dir" else "XATTR_NODE"
    # an entry whose hash is not its child's greatest: xfs_repair corrects
    # it in place (a directory is rebuilt all the same)
    hash_code = "DIR_NODE" if what == "dir" else "XATTR_NODE_HASH"

    def bad(dablk, detail, field=None, hash_fault=False, **more):
        ctx.report(hash_code if hash_fault else code, f"{what} of inode {ino}: block "
                   f"{dablk}: {detail}", offset=dablk, field=field, **where, **more)

    def fetch(dablk):
        try:
            return read(dablk)
        except FsToolError as e:
            ctx.from_error(code, e, offset=dablk, **where)
            return None
    DA.audit(fetch, root, leaf, bad, max_count=node_ents, attr=what == "attr",
             dir_root_leafn=dir_root_leafn, strict=strict)
