"""Directories in every form, block by block, as xfs_repair's process_dir2
and phase 6 look at them: shortform entries (targets, names, offsets,
counts, size), data blocks (entries, '.' and '..', the bestfree table),
the leaf (hash order, stale count, exactly the data entries, the bests) and
the node form's da-btree and free index.  Entries are counted into the inode
table natively (``parsers.dir_data_tally``); only odd entries come back to
Python.  Each form's decode and verifier are its module's in
fstool.fs.dirform: this phase reports their faults and adds what needs the
whole filesystem (the entries' targets, '..', the data entries counted
against the leaf)."""
from __future__ import annotations

import struct

from ..._backend import checks, parsers
from ...errors import CorruptionError, FsToolError
from ...format import constants as C
from ...fs import dabtree as DA
from ...format.structs import DINODE
from ...fs.dirform import BLOCK, LEAF, SHORTFORM, block, data, form, free, leaf, \
    node as nodeform, sf
from ...fs.inode import Inode
from ...io import verify as V
from ..names import quoted_name
from .superblocks import check_lsn, root_ino, rt_inodes

# dir_data_tally / tally_entry flags
T_FREE, T_FTYPE, T_DIR, T_DOT, T_BADNAME, T_SELF = 1, 2, 4, 8, 16, 32
_GEN = struct.Struct(">I")
_GEN_OFF = DINODE.offset("di_gen")


def setup_dir_geometry(ctx) -> None:
    sb = ctx.sb
    ctx.dir_data_first = data.HDR + 2 * data.MIN_ENTSIZE
    ctx.da_node_ents = (sb.dirblksize - DA.HDR) // DA.ENTRY
    ctx.attr_node_ents = (sb.blocksize - DA.HDR) // DA.ENTRY


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
    if kind == SHORTFORM:
        return _shortform(ctx, node, tab, odd)
    if kind == BLOCK:
        buf = _dirblock(ctx, node, 0, V.DIR3_BLOCK)
        _block_form(ctx, node.ino, node.gen, buf, tab, odd, lambda: node)
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
        frees, part = _data_tally(ctx, node.ino, node.gen, buf, len(buf), fsb, tab, odd)
        dsum += part
        bests[fsb // ctx.sb.dirblkfsbs] = _check_bestfree(ctx, node.ino, fsb, buf, frees)
    _check_index(ctx, node, kind, dsum & 0xFFFFFFFFFFFFFFFF, bests)
    return None


def _dir_form(ctx, node):
    """The directory's form, or None (reported) when it has none."""
    try:
        return form(node)
    except CorruptionError as e:
        ctx.from_error("DIR_CORRUPT", e, ino=node.ino, structure="dir")
        return None


def _dirblock(ctx, node, fsb, bt):
    # read once while checking: not kept in the buffer cache
    buf = _mapped_block(ctx, node, fsb, bt)
    if buf is None:
        buf = data.read_block(node, fsb, bt, False)
    check_lsn(ctx, bt.lsn_of(buf), "dir", ino=node.ino, offset=fsb, fork="data",
                   field="lsn")
    return buf


def _mapped_block(ctx, node, fsb, bt):
    """Directory block ``fsb`` of ``node`` as data.read_block reads it (not
    kept), when one extent maps all of it: without walking the block map
    block by block; None when it is not so mapped or not plainly sound
    (read_block then reads it and says what is wrong)."""
    if bt.magic_fmt != ">I":
        return None
    e = node.map_block(fsb)
    if e is None or fsb + ctx.sb.dirblkfsbs > e[0] + e[2]:
        return None
    # (a mapped extent lies inside its AG: the map was checked)
    return _sound_block(ctx, node.ino, ctx.fs._fsb_offset(e[1] + fsb - e[0]), bt)


def _sound_block(ctx, ino: int, at: int, bt):
    """The directory block of ``ino`` at byte ``at`` of the filesystem, read
    as FileSystem.read_meta reads a block it does not keep, when it is not
    in the buffer cache and verifies as ``bt`` (one 32-bit magic of its
    own: v5_hdr_sound); else None, nothing said."""
    fs = ctx.fs
    size = ctx.sb.dirblksize
    daddr = at >> C.BBSHIFT
    if fs.cache.get((daddr, size)) is not None:
        return None
    try:
        buf = fs.dev.pread(at, size)
    except FsToolError:
        return None
    magic = bt.magic_of(buf)
    if magic not in bt.magics or not checks.v5_hdr_sound(
            buf, bt.magic_off, magic, bt.crc_off, bt.uuid_off, fs.uuid, bt.blkno_off, daddr,
            bt.owner_off, ino):
        return None
    return buf


def _block_form(ctx, ino, gen, buf, tab, odd, inode) -> None:
    """A block-form directory's one block ``buf`` (read and verified):
    its data entries counted, its bestfree table and its leaf checked
    (``inode()``: the directory's Inode, wanted only to find which leaf
    entry is wrong); in one native call (checks.block_dir_tally) when it
    has nothing to report."""
    got = checks.block_dir_tally(buf, data.HDR, ctx.sb.has_ftype, tab.starts, tab.itype,
                                 tab.refs, ino, tab.psums, gen)
    if got is None:
        # the tail overruns the block (leaf_bounds says so)
        start, count, stale = block.leaf_bounds(buf, ino, 0)
        frees, dsum = _data_tally(ctx, ino, gen, buf, start, 0, tab, odd)
    else:
        sound, tally, start, count, stale = got
        frees, dsum = _tallied(ctx, ino, 0, tally, odd)
        if sound:
            return
    _check_bestfree(ctx, ino, 0, buf, frees)
    _check_leaf(ctx, ino, inode, buf, start, count, stale, dsum, True, buf)


def check_block_dir(ctx, ino: int, raw: bytes, tab, odd: list) -> bool:
    """check_dir of directory ``ino`` (raw inode ``raw``) when it plainly
    is in block form, without its Inode: a sound core, one extent mapping
    its directory block, the block not in the buffer cache, read and
    verified as check_dir reads it.  True when checked here (the findings
    and counts check_dir gives); False, with nothing counted or reported,
    when anything about it is unusual and check_dir must look."""
    fs = ctx.fs
    sb = ctx.sb
    if ctx.hooks is not None:
        return False
    try:
        core = parsers.dinode_core(raw, ino, fs.uuid)
        if core[1] != C.XFS_DINODE_FMT_EXTENTS or core[2] != sb.dirblksize or \
                (core[6] and C.XFS_DINODE_CORE_SIZE + core[6] * 8 >= len(raw)):
            return False
        exts = parsers.inline_extents(raw, False, *fs._extent_bounds)
    except ValueError:
        return False
    if len(exts) != 1:
        return False
    startoff, startblock, blocks, unwritten = exts[0]
    if startoff or blocks != sb.dirblkfsbs or unwritten:
        return False
    # (an extent inline_extents passed lies inside its AG)
    buf = _sound_block(ctx, ino, fs._fsb_offset(startblock), V.DIR3_BLOCK)
    if buf is None:
        return False
    check_lsn(ctx, V.DIR3_BLOCK.lsn_of(buf), "dir", ino=ino, offset=0, fork="data",
              field="lsn")
    _block_form(ctx, ino, _GEN.unpack_from(raw, _GEN_OFF)[0], buf, tab, odd,
                lambda: Inode(fs, ino, raw))
    return True


# -- shortform ------------------------------------------------------------------
def _shortform(ctx, node, tab, odd):
    """process_sf_dir2 and shortform_dir2_entry_check."""
    sb = ctx.sb
    ino = node.ino
    where = dict(ino=ino, structure="dir", fork="data")
    parent, entries, faults = sf.verify(node.fork_bytes(), node.size, sb.has_ftype,
                                        ctx.dir_data_first, sb.dirblksize, quoted_name)
    for code, detail, field, more in faults:
        _dir_bad(ctx, code, ino, detail, field, where, **more)
    if parent is None:
        return None
    # the parent
    if not verify_dir_ino(ctx, parent):
        _dir_bad(ctx, "DIR_DOTDOT", ino, f"'..' is {parent}, not a valid inode", "parent",
                 where, found=parent)
        parent = None
    elif ino == root_ino(ctx) and parent != ino:
        _dir_bad(ctx, "DIR_DOTDOT", ino, f"the root directory's '..' is {parent}", "parent",
                 where, expected=ino, found=parent)
    elif parent == ino and ino != root_ino(ctx):
        _dir_bad(ctx, "DIR_DOTDOT", ino, "'..' points to the directory itself", "parent",
                 where, found=parent)
        parent = None
    tally = parsers.tally_entry
    args = (tab.starts, tab.itype, tab.refs)
    for name, child, ftype, idx in entries:
        if child == ino or not verify_dir_ino(ctx, child):
            _dir_bad(ctx, "DIR_ENTRY_TARGET", ino, f"shortform entry {quoted_name(name)} "
                     f"points to {'itself' if child == ino else f'invalid inode {child}'}",
                     "inumber", where, index=idx, found=child)
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
def _data_tally(ctx, ino, gen, buf, end: int, fsb: int, tab, odd: list):
    """(unused regions, leaf sum) of one data block, its odd entries added
    to ``odd``; a malformed block is reported once what preceded the bad
    entry is counted."""
    addr_base = (fsb // ctx.sb.dirblkfsbs) * ctx.sb.dirblksize
    try:
        tally = parsers.dir_data_tally(buf, data.HDR, end, ctx.sb.has_ftype, addr_base,
                                       tab.starts, tab.itype, tab.refs, ino, tab.psums, gen)
    except ValueError as e:
        tally = [], 0, [], str(e)
    return _tallied(ctx, ino, fsb, tally, odd)


def _tallied(ctx, ino, fsb: int, tally, odd: list):
    """(unused regions, leaf sum) of a data block dir_data_tally counted
    (``tally``: what it returned), its odd entries added to ``odd`` and a
    malformed block reported."""
    frees, lsum, more, why = tally
    odd += more
    if why:
        ctx.report("DIR_CORRUPT", f"directory {ino}: data block at {fsb}: {why}",
                   ino=ino, offset=fsb, fork="data", structure="dir")
    return frees, lsum


def _check_bestfree(ctx, ino, fsb, buf, frees) -> int:
    """The data block's bestfree table (fstool.fs.dirform.data.
    bestfree_verify); returns the longest free run."""
    longest, sound = data.bestfree_verify(buf, frees)
    if not sound:
        ctx.report("DIR_BESTFREE", f"directory {ino}: the bestfree table of data "
                   f"block {fsb} does not list its largest free regions", ino=ino,
                   offset=fsb, fork="data", structure="dir", field="bestfree")
    return longest


# -- the leaf ---------------------------------------------------------------------
def _check_leaf(ctx, ino, inode, buf, start, count, stale, dsum, block_form,
                blockbuf=None) -> None:
    """A block- or leaf-form directory's leaf entries against its data
    entries; on a mismatch, find the entry that is wrong (``inode()``:
    the directory's Inode)."""
    fsb = 0 if block_form else leaf.leaf_fsb(ctx.sb.blocklog)
    if _leaf_block(ctx, ino, fsb, buf, start, count, stale) == dsum:
        return
    before = len(ctx.findings)
    _check_leaf_ents(ctx, inode(), buf, start, count, block_form, blockbuf)
    if len(ctx.findings) == before:
        ctx.report("DIR_LEAF", f"directory {ino}: its leaf does not index exactly "
                   "its data entries", ino=ino, offset=fsb, fork="data",
                   structure="dir", field="hashval")


def _leaf_block(ctx, ino, fsb, buf, start, count, stale) -> int:
    """Order and stale count of one leaf block's entries; their sum."""
    where = dict(ino=ino, offset=fsb, fork="data", structure="dir")
    lsum, faults = leaf.tally(buf, start, count, stale, ino, fsb)
    for code, detail, field, more in faults:
        _dir_bad(ctx, code, ino, detail, field, where, **more)
    return lsum


def _check_leaf_ents(ctx, node, buf, start, count, block_form, blockbuf=None):
    """Each leaf entry's hash against the name it points to."""
    ino = node.ino
    where = dict(ino=ino, structure="dir")
    for i, fault in leaf.hash_faults(node, buf, start, count, block_form, blockbuf,
                                     quoted_name):
        if isinstance(fault, FsToolError):
            ctx.from_error("DIR_LEAF", fault, index=i, **where)
        else:
            code, detail, field, more = fault
            _dir_bad(ctx, code, ino, detail, field, where, index=i, **more)


def _check_index(ctx, node, kind: str, dsum: int, bests: dict) -> None:
    """The leaf (leaf form) or the da-btree, leafn and free blocks (node
    form) of a directory whose data blocks summed to ``dsum``."""
    sb = ctx.sb
    ino = node.ino
    leaf_fsb = leaf.leaf_fsb(sb.blocklog)
    where = dict(ino=ino, fork="data", structure="dir")
    if kind == LEAF:
        try:
            buf = _dirblock(ctx, node, leaf_fsb, V.DIR3_LEAF)
        except FsToolError as e:
            ctx.from_error("DIR_CORRUPT", e, offset=leaf_fsb, **where)
            return
        count, stale = leaf.leaf_count_stale(buf)
        _check_leaf(ctx, ino, lambda: node, buf, leaf.LEAF_HDR, count, stale, dsum, False)
        nbests = leaf.bestcount(buf)
        want = max(bests, default=-1) + 1
        if nbests != want:
            ctx.report("DIR_LEAF", f"directory {ino}: the leaf tail holds {nbests} "
                       f"best-free entries, the directory has {want} data blocks",
                       offset=leaf_fsb, field="bestcount", expected=want, found=nbests,
                       **where)
        stored = leaf.leaf_bests(buf, nbests) \
            if leaf.LEAF_HDR + leaf.LEAF_ENT * count <= leaf.leaf_bests_start(buf, nbests) \
            else []
        _report(ctx, ino, free.bests_faults(stored, bests, 0), leaf_fsb)
        return
    # node form: the da-btree over the leafn blocks, then the free index
    free_fsb = C.XFS_DIR2_FREE_OFFSET >> sb.blocklog
    lsum = 0

    def read(dablk):
        return _dirblock(ctx, node, dablk, V.DA3_NODE_OR_LEAF)

    def leafn(dablk, buf, greatest):
        """process_leaf_block_dir2: order within the block (stale slots
        too: the read verifier), each live hash at least the greatest
        before it, the stale count; returns this block's greatest."""
        nonlocal lsum
        if DA.magic(buf) != C.XFS_DIR3_LEAFN_MAGIC:
            ctx.report("DIR_CORRUPT", f"directory {ino}: block {dablk} in the leaf "
                       "chain is not a leafn block", offset=dablk, field="magic",
                       **where)
            return None
        count, stale = leaf.leaf_count_stale(buf)
        before = len(ctx.findings)
        try:
            lsum += _leaf_block(ctx, ino, dablk, buf, leaf.LEAF_HDR, count, stale)
        except CorruptionError as e:
            ctx.from_error("DIR_LEAF", e, offset=dablk, **where)
            return None
        faults, last = nodeform.leafn_faults(buf, greatest)
        if last is None:
            return greatest
        for code, detail, field, more in faults:
            _dir_bad(ctx, code, ino, f"leaf block {dablk} {detail}", field,
                     dict(offset=dablk, **where), **more)
        return None if len(ctx.findings) > before else last
    check_da_tree(ctx, node, leaf_fsb, read, leafn, "dir", ctx.da_node_ents,
                  dir_root_leafn=True)
    if lsum & 0xFFFFFFFFFFFFFFFF != dsum:
        ctx.report("DIR_LEAF", f"directory {ino}: its leaf blocks do not index exactly "
                   "its data entries", field="hashval", **where)
    # each free block covers the bests of maxbests data blocks, by its
    # place: the kernel's verifier checks firstdb against it, and
    # xfs_repair reads the free block of every data block there is
    maxbests = free.max_bests(sb.dirblksize)
    covered = set()
    for fsb in _dir_blocks_between(ctx, node, free_fsb, None):
        try:
            buf = _dirblock(ctx, node, fsb, V.DIR3_FREE)
        except FsToolError as e:
            ctx.from_error("DIR_CORRUPT", e, offset=fsb, **where)
            continue
        index = (fsb - free_fsb) // sb.dirblkfsbs
        covered.add(index)
        _report(ctx, ino, free.verify(buf, fsb, index, sb.dirblksize, bests), fsb)
    for index in sorted({db // maxbests for db in bests} - covered):
        fsb = free_fsb + index * sb.dirblkfsbs
        ctx.report("DIR_FREE", f"directory {ino}: no free block at {fsb} for data "
                   f"blocks {index * maxbests} to {(index + 1) * maxbests - 1}",
                   offset=fsb, field="firstdb", **where)


def _report(ctx, ino, faults, fsb) -> None:
    """A leaf tail's or free block's faults (at file offset ``fsb``)."""
    where = dict(ino=ino, structure="dir", fork="data", offset=fsb)
    for code, detail, field, more in faults:
        _dir_bad(ctx, code, ino, detail, field, where, **more)


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
