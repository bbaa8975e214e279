"""The parent pointer phase of repair (xfs_repair 6.10.1's end of phase 6,
repair/pptr.c): once the namespace is settled, every inode's parent
pointers are made those of the entries that name it.

Which inodes: those check found parent pointer damage on, those the inode
phase mends or whose attr fork it drops (their pointers go with it, or
check could not judge them), and every inode
named by an entry of a directory the namespace phase rewrites, before or
after (entries dropped, files moved to lost+found, lost+found itself).  For
each, the pointers it wants are (directory, the directory's generation,
name) of every entry naming it once the repair is done; garbage pointers
and pointers no entry wants are removed, the wanted ones it lacks added
(after its other attributes and the pointers it keeps, as xfs_repair adds
them).  Directories are not rebuilt from their children's pointers:
xfs_repair 6.10.1 does not either ("The current implementation does not
try to rebuild directories from parent pointer information").

The new attr fork is written when it is shortform: in place of the old
shortform fork, or as a new one beside the data fork (an attr fork
offset where the data fork still fits; a bmbt root's pointers move to
where the smaller fork puts them).  An attr fork that stays in blocks is
left as it is and its findings reported, not repaired.
"""
from __future__ import annotations

import struct
import types
from collections import defaultdict

from ..._backend import parsers
from ...errors import FsToolError
from ...format import constants as C
from ...format import parent as P
from ...format.structs import DINODE, PARENT_REC
from ...fs import attr as xattr, attrleaf as L
from ...io import verify as V
from ...ns import attrbuild as AB
from ...ns import files as F
from ...ns.bmap import owned_blocks
from ..check.base import ATTR, BMBT_ATTR, file_owner
from ..check.namespace import metadata_inodes
from ..check.parents import dir_gen, entries_naming
from .agbuild import raw_buf
from .inodes import count_fields, sf_attr_entries, sf_attr_fork
from .namespace import RMAP_ATTR, NamespacePlan, _ReservedRuns, _runs, _Space

CODES = ("PARENT_MISSING", "PARENT_BAD", "PARENT_GARBAGE")
_BMDR_REC = 16              # a bmbt root's key and pointer


class ParentFix:
    """One inode's new attr fork: shortform ``fork`` at ``forkoff``; or one
    in blocks (``plan``, a ForkPlan, placed in the ``runs`` reserved for
    it); or, for a fork in blocks whose pointers only need another
    generation, ``gens``: [(daddr, byte offset, generation)] written in its
    leaves."""
    __slots__ = ("ino", "forkoff", "fork", "added", "removed", "gens", "plan", "runs",
                 "ablocks_old")

    def __init__(self, ino, forkoff, fork, added, removed, gens=(), plan=None, runs=()):
        self.ino, self.forkoff, self.fork = ino, forkoff, fork
        self.added, self.removed = added, removed
        self.gens = list(gens)
        self.plan, self.runs = plan, list(runs)
        self.ablocks_old = 0            # blocks of the fork it replaces


class ParentPlan:
    def __init__(self):
        self.fixes: dict[int, ParentFix] = {}
        self.changes: list = []
        self.unrepaired: dict = {}          # inode -> why its pointers stay as they are
        # the namespace plan (or one of its own when that phase does not
        # run) where the blocks of attr forks made in blocks are reserved,
        # so that the AG rebuild sees them taken
        self.blocks = None
        self.reserves = False

    def __bool__(self) -> bool:
        return bool(self.fixes)

    def write(self, w) -> None:
        """Every inode's new attr fork into the open transaction of ``w``
        (after the inode and namespace phases wrote theirs)."""
        lit = w.sb.inodesize - C.XFS_DINODE_CORE_SIZE
        core = C.XFS_DINODE_CORE_SIZE
        for ino in sorted(self.fixes):
            fix = self.fixes[ino]
            if fix.gens:
                _write_gens(w, fix.gens)
                continue
            afmt, literal, anext, ablocks = C.XFS_DINODE_FMT_LOCAL, fix.fork, 0, 0
            if fix.plan is not None:
                afmt, literal, anext, ablocks = _place(w, ino, fix, lit - fix.forkoff * 8)
            buf = bytearray(w.inodes.raw_inode(ino))
            d = DINODE.unpack(buf)
            old = d["di_forkoff"]
            if d["di_format"] == C.XFS_DINODE_FMT_BTREE and old != fix.forkoff:
                _move_bmbt_root(buf, old * 8 or lit, fix.forkoff * 8)
            area = buf[core:core + lit]
            area[fix.forkoff * 8:] = bytes(lit - fix.forkoff * 8)
            area[fix.forkoff * 8:fix.forkoff * 8 + len(literal)] = literal
            buf[core:core + lit] = area
            d["di_forkoff"] = fix.forkoff
            d["di_aformat"] = afmt
            d[count_fields(d["di_flags2"])[1]] = anext
            d["di_nblocks"] += ablocks - fix.ablocks_old
            packed = DINODE.pack(d)
            buf[:len(packed)] = packed
            w.inodes.put_inode(ino, w.enc.seal(buf))


def _place(w, ino: int, fix: ParentFix, space: int):
    """The blocks of ``fix``'s attr fork written into the runs reserved for
    them: (format, literal, extent count, blocks) of the fork."""
    shim = types.SimpleNamespace(tx=w.tx, fs=w.fs, sb=w.sb, space=_ReservedRuns(fix.runs))
    exts = F.place_plan(shim, fix.plan, 0, owner=None)
    fork = F.map_fork(shim, ino, exts, space, attr=True)
    return fork.fmt, fork.literal, fork.nextents, fork.blocks


def _write_gens(w, gens) -> None:
    """Parent pointer generations written in place in attr leaf blocks,
    their CRCs made again."""
    bs = w.sb.blocksize
    for daddr in sorted({d for d, _o, _g in gens}):
        buf = raw_buf(w.tx, daddr, bs, V.ATTR3_NODE_OR_LEAF)
        for _d, off, gen in (g for g in gens if g[0] == daddr):
            struct.pack_into(">I", buf.data, off, gen)
        struct.pack_into("<I", buf.data, C.XFS_DA3_BLKINFO_CRC_OFF,
                         parsers.xfs_cksum(bytes(buf.data), C.XFS_DA3_BLKINFO_CRC_OFF))


def _move_bmbt_root(buf: bytearray, old: int, new: int) -> None:
    """A bmbt root's pointers moved from where a fork of ``old`` bytes puts
    them to where one of ``new`` bytes does (xfs_bmbt root layout: level,
    numrecs, keys, then pointers after room for the fork's most keys)."""
    core = C.XFS_DINODE_CORE_SIZE
    _level, numrecs = struct.unpack_from(">HH", buf, core)
    old_max, new_max = (old - 4) // _BMDR_REC, (new - 4) // _BMDR_REC
    ptrs = bytes(buf[core + 4 + 8 * old_max:core + 4 + 8 * old_max + 8 * numrecs])
    buf[core + 4 + 8 * numrecs:core + old] = bytes(old - 4 - 8 * numrecs)
    buf[core + 4 + 8 * new_max:core + 4 + 8 * new_max + 8 * numrecs] = ptrs


def plan(checker, inodes, ns, findings) -> ParentPlan:
    """The parent pointer phase for the parent pointer ``findings`` of
    ``checker``, after the inode phase ``inodes`` and the namespace phase
    ``ns`` (None when it does not run)."""
    out = ParentPlan()
    fs = checker.fs
    if not fs.has_parent_pointers:
        return out
    cleared = set(inodes.cleared) if inodes is not None else set()
    dropped = set(inodes.attr_dropped) if inodes is not None else set()
    junk = {i: ch.sf_junk for i, ch in inodes.changes.items() if ch.sf_junk} \
        if inodes is not None else {}
    rebuilt = dict(ns.dirs) if ns else {}
    # an inode the inode phase mends (a bad CRC, a field) may have had
    # pointers check could not judge: they are looked at once it is mended
    mended = {i for i, ch in inodes.changes.items() if not ch.clear and not ch.reinit} \
        if inodes is not None else set()
    want = {f.ino for f in findings if f.ino is not None} | dropped | set(junk) | mended
    for d, fix in rebuilt.items():
        want.update(c for _n, c, _ft in fix.entries)
        old = ns.old_entries.get(d, ())
        want.update(c for _n, c in old)
        want.add(d)              # lost+found (new) wants its own pointer
    want -= cleared
    want -= metadata_inodes(checker)
    want.discard(fs.sb.rootino)
    want = {i for i in want if checker.table.in_use(i) or i in rebuilt}
    if not want:
        return out
    # every entry naming them once the repair is done: the directories as
    # they are, but those the namespace phase rewrites or the inode phase
    # clears, whose entries are the namespace phase's
    entries = defaultdict(list)
    # a directory that cannot be read now (a damaged inode the inode phase
    # mends, or one left as it is): its entries are not known, so the
    # pointers naming it are left as they are
    unread = set()
    for child, lst in entries_naming(checker, want, unread).items():
        for d, name in lst:
            if d not in rebuilt and d not in cleared:
                entries[child].append((d, name))
    for d, fix in rebuilt.items():
        for name, child, _ft in fix.entries:
            if child in want:
                entries[child].append((d, name))
    unread -= cleared | set(rebuilt)
    gens = {}
    out.blocks = ns if ns is not None else NamespacePlan()
    if out.blocks.space is None:
        out.blocks.space = _Space(checker)
    for ino in sorted(want):
        expect = [(d, _gen(checker, d, ns, gens), name) for d, name in entries.get(ino, ())]
        try:
            fix = _plan_inode(checker, ino, expect, ino in dropped, rebuilt.get(ino),
                              junk.get(ino, ()), out, unread)
        except FsToolError as e:
            out.unrepaired[ino] = f"reported, not repaired: inode {ino}: {e}"
            continue
        if isinstance(fix, str):
            out.unrepaired[ino] = fix
        elif fix is not None:
            out.fixes[ino] = fix
            out.changes.append(
                f"inode {ino}: parent pointers rewritten ({fix.added} added, "
                f"{fix.removed} removed)" if not fix.gens else
                f"inode {ino}: generation of {len(fix.gens)} parent pointers set right")
    return out


def _gen(checker, d: int, ns, gens: dict) -> int:
    """A directory's generation once the repair is done (a directory the
    namespace phase makes gets generation 0)."""
    if ns and d in (ns.new_lpf, ns.new_root):
        return 0
    return dir_gen(checker, d, gens)


def _inode(fs, ino: int):
    """The inode, read as the inode phase leaves it when only its CRC is
    wrong."""
    try:
        return fs.inode(ino)
    except FsToolError as e:
        if getattr(e, "field", None) != "di_crc":
            raise
        return fs.inode_crc_mended(ino)


def _plan_inode(checker, ino: int, expect: list, dropped: bool, dirfix, junk=(), pp=None,
                unread=frozenset()):
    """The new attr fork of ``ino`` (None: its pointers are right; a str:
    why it cannot be written).  ``junk``: indexes of shortform entries the
    inode phase removes; an attr fork that no longer fits in the inode is
    made in blocks reserved through ``pp``; pointers to a directory of
    ``unread`` are kept as they are."""
    fs = checker.fs
    sb = fs.sb
    lit = sb.inodesize - C.XFS_DINODE_CORE_SIZE
    new_lpf = dirfix is not None and dirfix.new
    node = None if new_lpf else _inode(fs, ino)
    if node is None or dropped or not node.forkoff:
        attrs = []
    elif node.aformat == C.XFS_DINODE_FMT_LOCAL:
        attrs = [e for i, e in enumerate(sf_attr_entries(node.fork_bytes(attr=True)))
                 if i not in junk and not e[0] & C.XFS_ATTR_INCOMPLETE]
    elif node.aformat == C.XFS_DINODE_FMT_EXTENTS and not _attr_extents(node):
        attrs = []                    # an attr fork in blocks that maps none
    else:
        attrs = None                  # an attr fork in blocks
    if attrs is None:
        fix = _plan_blocks(node, expect, unread)
        if fix != _BLOCKS_WHY.format(ino=ino) or pp is None or dirfix is not None:
            return fix
        # pointers to add or remove in a fork in blocks: the fork is made
        # again, in new blocks, with every other attribute it holds
        try:
            attrs = [(f, bytes(n), bytes(v)) for f, n, v in xattr.iter_attrs(node, True)]
            old = _owned(node)
        except FsToolError as e:
            return f"reported, not repaired: inode {ino}: its attr fork cannot be read: {e}"
        rebuilt_fork = True
    else:
        rebuilt_fork = False
    others = []
    have = []
    for flags, name, value in attrs:
        if P.is_parent(flags):
            if value is not None and len(value) == P.XFS_PARENT_REC_SIZE and \
                    xattr_ok(name):
                have.append((name, value))
        else:
            # the namespace bits (a leaf entry's flags also say local)
            others.append((flags & C.XFS_ATTR_NSP_ONDISK_MASK, bytes(name), bytes(value)))
    wanted = [(bytes(n), P.pack_rec(d, g & 0xFFFFFFFF)) for d, g, n in expect]
    left = list(wanted)
    kept = []
    for name, value in have:
        pair = (bytes(name), bytes(value))
        if P.unpack_rec(pair[1])[0] in unread:
            kept.append(pair)
        elif pair in left:
            left.remove(pair)
            kept.append(pair)
    new = others + [(C.XFS_ATTR_PARENT, n, v) for n, v in kept + left]
    removed = sum(1 for f, _n, _v in attrs if P.is_parent(f)) - len(kept)
    if not left and not removed and not junk:
        return None
    if not new and (dropped or node is None or not node.forkoff):
        return None
    # where the shortform fork goes
    fork = sf_attr_fork(new) if len(new) <= 255 and \
        all(len(n) < 255 and len(v) < 255 for _f, n, v in new) else None
    data_fmt, data_bytes = _data_fork(node, dirfix, lit)
    forkoff = 0 if dropped or node is None else node.forkoff
    if dirfix is not None and not dirfix.new and node.forkoff:
        forkoff = node.forkoff          # the rebuilt directory was laid out for it
    if fork is not None and forkoff and len(fork) <= lit - forkoff * 8:
        return ParentFix(ino, forkoff, fork, len(left), removed)
    if forkoff and dirfix is not None:
        return f"reported, not repaired: directory {ino}: its parent pointers do not fit its " \
            "attr fork"
    if fork is not None:
        fo = F._bytesfit(lit, data_fmt, data_bytes, 0, len(fork))
        if fo and data_bytes <= fo * 8 and len(fork) <= lit - fo * 8:
            return ParentFix(ino, fo, fork, len(left), removed)
    if pp is None or dirfix is not None:
        return (f"reported, not repaired: inode {ino}: its parent pointers do not fit a "
                "shortform attr fork beside its data fork")
    fix = _plan_in_blocks(checker, node, new, data_fmt, data_bytes, forkoff, len(left),
                          removed, pp)
    if rebuilt_fork and not isinstance(fix, str):
        # the old fork's blocks are given up (the AG rebuild frees them)
        _release(checker, pp.blocks, ino, old)
        fix.ablocks_old = sum(n for _b, n in old)
    return fix


def _attr_extents(node) -> list:
    try:
        return node.extents(attr=True)
    except FsToolError:
        return [None]                 # not known: taken as mapping blocks


def _owned(node) -> list:
    return owned_blocks(node, attr=True)


def _release(checker, res, ino: int, blocks) -> None:
    """The blocks of the attr fork of ``ino`` that is made again given up
    in the plan ``res`` carries to the AG rebuild."""
    for fsbno, n in blocks:
        agno, agbno = checker.fsb_split(fsbno)
        rel = res.released.setdefault(agno, {})
        for owner in (file_owner(ino, ATTR), file_owner(ino, BMBT_ATTR)):
            rel.setdefault(owner, set()).update(range(agbno, agbno + n))
    res.attr_rebuilt.add(ino)


def _plan_in_blocks(checker, node, attrs, data_fmt, data_bytes, forkoff, added, removed, pp):
    """An attr fork in blocks for ``attrs`` (as xfs_repair's phase 6 adds
    pointers the shortform fork cannot hold: the kernel's attr code turns it
    into a leaf), its blocks reserved from free space near the inode; a str
    when it cannot be made."""
    fs = checker.fs
    sb = fs.sb
    ino = node.ino
    lit = sb.inodesize - C.XFS_DINODE_CORE_SIZE
    why = f"reported, not repaired: inode {ino}: "
    try:
        plan = AB.encode_xattrs(attrs, ino=ino, uuid=fs.uuid, blocksize=sb.blocksize,
                                inline_space=0)
    except FsToolError as e:
        return why + f"its attributes cannot be encoded: {e}"
    runs = _runs(plan)
    space = pp.blocks.space
    home = ino >> sb.agino_log
    taken = []                      # (agno, pieces, first logical block)
    for total, unit, lblk in runs:
        for agno in [home] + [a for a in range(sb.agcount) if a != home]:
            pieces = space.take(agno, total, unit)
            if pieces is not None:
                taken.append((agno, pieces, lblk))
                break
        else:
            return why + "no free space for its attr fork"
    need = 16 * sum(len(pieces) for _a, pieces, _l in taken)
    if not (forkoff and need <= lit - forkoff * 8 and data_bytes <= forkoff * 8):
        forkoff = F._bytesfit(lit, data_fmt, data_bytes, 0, need)
    if not forkoff or data_bytes > forkoff * 8 or need > lit - forkoff * 8:
        return why + "the extents of its attr fork do not fit beside its data fork"
    res = pp.blocks
    for agno, pieces, lblk in taken:
        res.reserved.setdefault(agno, []).extend((a, n, file_owner(ino, ATTR))
                                                 for a, n in pieces)
        rm = res.rmaps.setdefault(agno, [])
        for a, n in pieces:
            rm.append((a, n, ino, lblk, RMAP_ATTR))
            lblk += n
    pp.reserves = True
    return ParentFix(ino, forkoff, b"", added, removed, plan=plan,
                     runs=[[((agno << sb.agblklog) | a, n) for a, n in pieces]
                           for agno, pieces, _l in taken])


def _plan_blocks(node, expect: list, unread=frozenset()):
    """An attr fork in blocks: None when its parent pointers are those
    wanted; a fix writing generations in place when only generations
    differ (the hashes do not depend on them); else why it stays."""
    ino = node.ino
    have = []               # (p_ino, name) -> [(gen, ablk, offset of p_gen)]
    for ablk, buf in xattr.leaf_blocks(node):
        for i in range(L.totals(buf)[0]):
            _h, nameidx, flags = L.entry(buf, i)
            if not P.is_parent(flags):
                continue
            if not flags & C.XFS_ATTR_LOCAL:
                return _BLOCKS_WHY.format(ino=ino)
            valuelen, namelen = L.local_name(buf, nameidx)
            v = nameidx + L.LOCAL + namelen
            if valuelen != P.XFS_PARENT_REC_SIZE:
                return _BLOCKS_WHY.format(ino=ino)
            p_ino, p_gen = P.unpack_rec(bytes(buf[v:v + P.XFS_PARENT_REC_SIZE]))
            if p_ino in unread:
                continue
            have.append(((p_ino, bytes(buf[nameidx + L.LOCAL:v])), p_gen, ablk,
                         v + PARENT_REC.offset("p_gen")))
    want = sorted(((d, bytes(n)), g & 0xFFFFFFFF) for d, g, n in expect)
    if sorted(k for k, *_r in have) != [k for k, _g in want]:
        return _BLOCKS_WHY.format(ino=ino)
    gens = dict(want)
    edits = []
    for key, gen, ablk, off in have:
        if gen != gens[key]:
            daddr, _pieces = node.read_fork_blocks(ablk, 1, attr=True)
            edits.append((daddr, off, gens[key]))
    if not edits:
        return None
    return ParentFix(ino, node.forkoff, b"", 0, 0, edits)


_BLOCKS_WHY = ("reported, not repaired: inode {ino}: its attr fork is in blocks; parent "
               "pointers are added or removed in shortform forks only (in blocks only "
               "their generation is set right)")


def xattr_ok(name) -> bool:
    """A parent pointer's name: a directory entry name (no '/' or NUL)."""
    return 0 < len(name) < 256 and b"/" not in name and b"\0" not in name


def _data_fork(node, dirfix, lit: int) -> tuple[int, int]:
    """(format, bytes it needs in the inode) of the data fork once the
    repair is done."""
    if dirfix is not None:
        if dirfix.fork.local is not None:
            return C.XFS_DINODE_FMT_LOCAL, len(dirfix.fork.local)
        if dirfix.bmbt:
            return C.XFS_DINODE_FMT_BTREE, lit
        n = sum(len(pieces) for pieces in dirfix.blocks)
        return C.XFS_DINODE_FMT_EXTENTS, 16 * n
    fmt = node.format
    if fmt == C.XFS_DINODE_FMT_DEV:
        return fmt, 0
    if fmt == C.XFS_DINODE_FMT_LOCAL:
        return fmt, node.size
    if fmt == C.XFS_DINODE_FMT_EXTENTS:
        return fmt, 16 * node.nextents
    numrecs = struct.unpack_from(">H", node.fork_bytes(), 2)[0]
    return fmt, F.bmdr_space(numrecs)
