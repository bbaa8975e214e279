"""Phase namespace: every directory's blocks (dirs.py) and entries, '.' and
'..', reachability from the root and link counts (xfs_repair's phases 6
and 7)."""
from __future__ import annotations

from array import array
from collections import defaultdict

from ..._backend import checks
from ...errors import FsToolError
from ...format import constants as C
from ...fs import dir as xdir
from ...fs.inode import Inode
from ..names import quoted_name
from .dirs import T_BADNAME, T_DIR, T_DOT, T_FREE, T_FTYPE, T_SELF, check_block_dir, check_dir, \
    quota_inodes
from .parents import check_parent_pointers
from .superblocks import root_ino, rt_inodes
from .table import InodeTable


# directory blocks this close together are asked to be read as one range
DIR_READAHEAD_GAP = 64 << 10


def phase_namespace(ctx) -> None:
    """Every directory's entries counted into the inode table natively
    (targets in use, file types, references), its blocks checked per
    form; then '..', reachability and link counts."""
    fs = ctx.fs
    tab = InodeTable.concat(ctx.tables[a] for a in sorted(ctx.tables))
    ctx.table = tab
    root = root_ino(ctx)
    rslot = tab.slot(root)
    if rslot < 0 or tab.itype[rslot] != 4:
        ctx.report("DIR_ROOT", f"the root directory (inode {root}) is not a directory in "
                   "use", ino=root, structure="inode")
    # per slot: subdirectory entries, the directory linking it (0: none
    # yet); the (directory, subdirectory) slot pairs of the links
    nslots = len(tab.itype)
    subdirs = array("I", bytes(4 * nslots))
    parent = array("Q", bytes(8 * nslots))
    edges = array("q")
    dotdot = {}
    _dir_blocks_ahead(ctx)
    starts = tab.starts
    ndirs = len(ctx.dirs)
    tick = ctx._tick if ctx.progress else None
    # (each raw inode dropped once read: nothing after this phase needs it)
    take_raw = ctx.dir_raw.pop
    links = checks.dir_links
    sf_run = checks.ShortformRun(_shortform_args(ctx, tab), root, subdirs, parent,
                                 edges).run
    dirs = ctx.dirs
    k = 0
    while k < ndirs:
        # the sound shortform directories with nothing to report, in
        # one native loop; the next other one below
        k, fast = sf_run(dirs, k, ctx.dir_raw, dotdot)
        if tick:
            tick(min(k + 1, ndirs), ndirs)
        if k >= ndirs:
            break
        ino = dirs[k]
        k += 1
        failed = False
        raw = take_raw(ino, None)
        if fast is not None:
            # a sound shortform directory, its entries counted
            dd, odd = fast
            local = True
        else:
            # what was counted before a block failed to read still counts
            odd = []
            dd = None
            local = False
            try:
                # a plain block-form directory without its Inode; else
                # check_dir looks at it whole
                if raw is None or not check_block_dir(ctx, ino, raw, tab, odd):
                    node = Inode(fs, ino, raw) if raw is not None else fs.inode(ino)
                    local = node.format == C.XFS_DINODE_FMT_LOCAL
                    dd = check_dir(ctx, node, tab, odd)
            except FsToolError as e:
                ctx.from_error("DIR_CORRUPT", e, ino=ino, structure="dir")
                failed = True
            except Exception as e:      # noqa: BLE001 - never a traceback for damage
                ctx.report("CHECK_ABORTED", f"directory {ino} could not be checked: "
                           f"{type(e).__name__}: {e}", ino=ino, structure="dir")
                failed = True
        dots = 0
        dotdots = 0
        # the plain subdirectory links are counted natively
        for name, child, ftype, flags in links(odd, ino, starts, subdirs, parent, edges):
            where = dict(ino=ino, structure="dir")
            if flags & T_DOT:
                if name == b"..":
                    dotdots += 1
                    if dotdots > 1:
                        ctx.report("DIR_DOTDOT", f"directory {ino}: more than one '..' "
                                   "entry", **where)
                        continue
                    dd = child
                else:
                    dots += 1
                    if dots > 1:
                        ctx.report("DIR_DOT", f"directory {ino}: more than one '.' "
                                   "entry", **where)
                    elif child != ino:
                        ctx.report("DIR_DOT", f"directory {ino}: '.' names inode "
                                   f"{child}", expected=ino, found=child, **where)
                continue
            if flags & T_BADNAME:
                ctx.report("DIR_NAME", f"directory {ino}: entry {quoted_name(name)} has "
                           "an illegal name", field="name", **where)
            if flags & T_SELF:
                ctx.report("DIR_ENTRY_TARGET", f"directory {ino}: entry "
                           f"{quoted_name(name)} points to the directory itself",
                           found=child, **where)
                continue
            if flags & T_FREE:
                ctx.report("DIR_ENTRY_TARGET", f"directory {ino}: entry "
                           f"{quoted_name(name)} points to inode {child}, which is not "
                           "in use", found=child,
                           field="inumber", **where)
                continue
            if flags & T_FTYPE:
                t = tab.itype[tab.slot(child)] << 12
                ctx.report("DIR_FTYPE", f"directory {ino}: entry {quoted_name(name)} has "
                           f"file type {ftype}, inode {child} is a "
                           f"{C.TYPE_NAMES.get(t, '?')}",
                           field="ftype", found=ftype, **where)
            if flags & T_DIR:
                _dir_link(ctx, tab, ino, child, subdirs, parent, edges)
        if failed:
            continue
        if not local and not dots:
            ctx.report("DIR_DOT", f"directory {ino}: no '.' entry", ino=ino,
                       structure="dir")
        if dd is not None:
            dotdot[ino] = dd
            if dd == ino and ino != root:
                ctx.report("DIR_DOTDOT", f"directory {ino}: '..' points to itself",
                           ino=ino, structure="dir", found=dd)
            elif ino == root and dd != root:
                ctx.report("DIR_DOTDOT", f"the root directory's '..' is {dd}", ino=ino,
                           structure="dir", expected=root, found=dd)
        else:
            ctx.report("DIR_DOTDOT", f"directory {ino}: no '..' entry", ino=ino,
                       structure="dir")
    if rslot >= 0 and not parent[rslot]:
        parent[rslot] = root
    keys = array("Q", dotdot)
    vals = array("Q", dotdot.values())
    for i in checks.dotdot_doubts(keys, vals, starts, parent):
        d, got = keys[i], vals[i]
        want = parent[tab.slot(d)]
        ctx.report("DIR_DOTDOT", f"directory {d}: '..' is {got}, its parent is "
                   f"{want}", ino=d, structure="dir", expected=want, found=got)
    for meta in metadata_inodes(ctx):
        s = tab.slot(meta)
        if s >= 0 and tab.refs[s]:
            ctx.report("DIR_ENTRY_TARGET", f"a directory entry points to metadata inode "
                       f"{meta}", ino=meta, structure="dir")
    _link_counts(ctx, tab, root, subdirs, edges)
    check_parent_pointers(ctx, tab)


def _dir_blocks_ahead(ctx) -> None:
    """Ask the kernel to start reading the blocks of every directory in
    extents form, nearby ones as one range (checks.dir_block_runs),
    before the directories are walked one by one (a hint: with the image
    out of the page cache the walk would wait for each block in turn,
    which xfs_repair's prefetch avoids)."""
    sb = ctx.sb
    dev = ctx.fs.dev
    log = sb.blocklog
    for first, end in checks.dir_block_runs(ctx.dir_raw.values(), sb.agblklog,
                                            sb.agblocks, sb.agcount,
                                            DIR_READAHEAD_GAP >> log):
        dev.will_need(first << log, (end - first) << log)


def _dir_link(ctx, tab: InodeTable, ino: int, child: int, subdirs, parent,
              edges) -> None:
    """Directory ``ino``'s entry naming directory ``child`` (as
    checks.dir_links counts the plain ones): a subdirectory of ``ino``,
    ``child``'s parent, one link."""
    ps, cs = tab.slot(ino), tab.slot(child)
    if ps < 0 or cs < 0:
        return
    subdirs[ps] += 1
    if parent[cs]:
        ctx.report("DIR_MULTIPLE_PARENTS", f"directory {child} is linked "
                   f"from {parent[cs]} and {ino}", ino=child, structure="dir")
    parent[cs] = ino
    edges.extend((ps, cs))


def _shortform_args(ctx, tab: InodeTable) -> tuple:
    """What ``parsers.sf_dir_tally(raw, ino, *args)`` takes after the
    raw inode and its number to check a shortform directory and count
    its entries natively ('..' and the entries to look at, as check_dir
    gives them; on a filesystem with parent pointers each entry's parent
    pointer added to its target's ``psums`` slot, as check_dir adds it;
    None when the Python check must look): checks.ShortformRun's
    ``tally_args``."""
    sb = ctx.sb
    f = sb.fields
    lo = ctx.agino_range(0)[0]
    hi = array("Q", [ctx.agino_range(a)[1] for a in range(sb.agcount)])
    meta = array("Q", [f["sb_rbmino"], f["sb_rsumino"], *sorted(quota_inodes(ctx))])
    return (ctx.fs.uuid, sb.has_ftype, sb.dirblksize, ctx.dir_data_first, sb.rootino,
            sb.agino_log, sb.agcount, lo, hi, meta, tab.starts, tab.itype, tab.refs,
            tab.psums)


def metadata_inodes(ctx) -> set:
    return set(rt_inodes(ctx)) | quota_inodes(ctx)


def _link_counts(ctx, tab: InodeTable, root: int, subdirs, edges) -> None:
    """Every inode in use is reachable from the root and has as many links
    as entries name it (a directory: 2 plus its subdirectories)."""
    special = {root} | metadata_inodes(ctx)
    rslot = tab.slot(root)
    reach = checks.reach_slots(edges, rslot, len(tab.itype))
    # entries in directories the root does not reach make nothing reachable
    unreached = defaultdict(int)
    for d in checks.unreached_dirs(array("Q", ctx.dirs), tab.starts, reach):
        try:
            for _name, child, _ft in xdir.iter_entries(ctx.fs.inode(d)):
                unreached[child] += 1
        except FsToolError:
            pass
    slots = set(checks.link_doubts(tab.itype, tab.nlinks, tab.refs, subdirs, reach, rslot))
    slots.update(s for s in map(tab.slot, unreached) if s >= 0 and tab.itype[s])
    for slot in sorted(slots):
        ino = tab.ino(slot)
        nlink, refs = tab.nlinks[slot], tab.refs[slot]
        is_dir = tab.itype[slot] == 4
        if ino in special:
            if ino == root and nlink != 2 + subdirs[slot]:
                ctx.report("NLINK", f"root directory: nlink {nlink}, expected "
                           f"{2 + subdirs[slot]}", ino=ino, structure="inode",
                           field="di_nlink", expected=2 + subdirs[slot], found=nlink)
            continue
        if is_dir:
            want = 2 + subdirs[slot] if refs else 0
            reachable = bool(reach[slot])
        else:
            want = refs
            reachable = refs > unreached.get(ino, 0)
        if not reachable:
            ctx.report("DISCONNECTED", f"inode {ino} is allocated but not reachable "
                       "from the root", ino=ino, structure="inode")
        elif nlink != want:
            ctx.report("NLINK", f"inode {ino}: nlink {nlink}, counted {want}", ino=ino,
                       structure="inode", field="di_nlink", expected=want, found=nlink)
