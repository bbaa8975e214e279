"""The namespace phase of repair (xfs_repair's phases 6 and 7): directory
entries, '.' and '..', reachability, lost+found and link counts.

:func:`plan` works from what check learned (the inode table: which inodes
are in use and their types; the directories) and from the directories
themselves, read leniently:

1. every directory's entries are read as far as they can be: a shortform
   fork up to its first malformed entry, every data block up to its first
   malformed entry (a wrong magic is no reason to give a block up:
   xfs_repair sets it right and keeps the entries; a block that cannot be
   read is skipped);
2. the directories are walked in inode order, as xfs_repair's phase 6
   traverses them, keeping an entry only when its name is legal and not
   already used in that directory, and it names an inode in use (not one
   the inode phase clears, not a metadata inode, not the directory itself);
   an entry naming a directory is kept only when that directory is not yet
   reached and its '..' names this directory (or it has no usable '..',
   when the first entry wins), so a directory linked from two places keeps
   one parent;
3. inodes in use that no kept entry reaches go to /lost+found (reused when
   the root holds one, else created in a free inode of an existing chunk),
   named by inode number as xfs_repair names them; directories among them
   get '..' pointing there; directory cycles no path from the root enters
   are broken the same way;
4. link counts follow the entries that remain (phase 7): a file has one per
   entry, a directory two plus one per subdirectory.

A directory that changes (an entry dropped or added, a wrong file type,
'..' or any finding about its blocks) is rebuilt whole with the namespace
layer's encoder (:func:`fstool.ns.dirbuild.encode_dir`), in whichever form
its size calls for, into blocks reserved from space that is free in the
space map (owned by no one and free in the free space btrees); its old
blocks become free space.  The AG rebuild (:class:`.agbuild.AGPlan`) sees
both through :meth:`NamespacePlan.claims_for` and :meth:`NamespacePlan.
records_for`, and runs in every AG the phase touched.  :meth:`NamespacePlan.
write` puts it all into the repair's one transaction.
"""
from __future__ import annotations

import collections
import types

from ..._backend import parsers
from ...alloc.inodes import chunk_start
from ...errors import FsToolError
from ...format import constants as C
from ...format.structs import DINODE
from ...fs import dir as xdir, dirform
from ...fs.dirform import data as dirdata, sf as dirsf
from ..check.base import BMBT_DATA, DATA, file_owner
from ..check.dirs import verify_dir_ino
from ..check.namespace import metadata_inodes
from ..check.superblocks import root_ino
from ..names import quoted_name

RMAP_ATTR, RMAP_BMBT = C.XFS_RMAP_OFF_ATTR, C.XFS_RMAP_OFF_BMBT
import time

from ...fs import btree_write as BW
from ...fs.btree import BMBT
from ...fs.icore import InodeSpec, encode_ts
from ...io import verify as V
from ...ns import dirbuild as DB, files as F
from ...ns.namespace import owned_blocks
from ..check.base import OWN_FREE, OWN_INODES
from .agbuild import RepairError, complement, merge, normal_record
from .checker import salvaged_extents
from .inodes import edited, shares_blocks

CODES = ("DIR_CORRUPT", "DIR_NAME", "DIR_BESTFREE", "DIR_LEAF", "DIR_NODE", "DIR_FREE",
         "DIR_ENTRY_TARGET", "DIR_FTYPE", "DIR_DOT", "DIR_DOTDOT", "DIR_MULTIPLE_PARENTS",
         "NLINK", "DISCONNECTED")
ORPHANAGE = b"lost+found"
# the directory entry file type of an inode table type (mode >> 12)
FTYPE_OF = {C.S_IFREG >> 12: C.XFS_DIR3_FT_REG_FILE, C.S_IFDIR >> 12: C.XFS_DIR3_FT_DIR,
            C.S_IFCHR >> 12: C.XFS_DIR3_FT_CHRDEV, C.S_IFBLK >> 12: C.XFS_DIR3_FT_BLKDEV,
            C.S_IFIFO >> 12: C.XFS_DIR3_FT_FIFO, C.S_IFSOCK >> 12: C.XFS_DIR3_FT_SOCK,
            C.S_IFLNK >> 12: C.XFS_DIR3_FT_SYMLINK}


class NamespaceError(RepairError):
    """The namespace cannot be repaired (nothing of it is changed)."""


# -- reading directories leniently -----------------------------------------------------
def read_dir(fs, node):
    """('..' or None, [(name, ino, ftype)] without '.' and '..', exact) of
    a directory: exact when it reads without a fault (through the verified
    readers), else what could be salvaged."""
    try:
        return xdir.parent(node), list(xdir.iter_entries(node)), True
    except FsToolError:
        pass
    sb = fs.sb
    if node.format == C.XFS_DINODE_FMT_LOCAL:
        parent, ents = dirsf.salvage(node.fork_bytes(), node.size, sb.has_ftype)
        return parent, ents, False
    if node.format not in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE):
        raise NamespaceError(f"directory {node.ino}: data fork format {node.format} cannot "
                             "be read")
    salvaged = salvaged_extents(fs, node)
    if salvaged is not None:
        node._extents = salvaged[0]
    try:
        fsbs = list(dirdata.block_fsbs(node))
        exts = node.extents()
    except FsToolError as e:
        raise NamespaceError(f"directory {node.ino}: its block map cannot be read: {e}") \
            from None
    block_form = fsbs == [0] and \
        dirform.form_of(exts[-1][0] + exts[-1][2], sb.dirblkfsbs, sb.blocklog) == dirform.BLOCK
    parent = None
    out = []
    for fsb in fsbs:
        try:
            _daddr, pieces = node.read_fork_blocks(fsb, sb.dirblkfsbs)
        except FsToolError:
            continue
        buf = b"".join(fs.dev.pread(d << C.BBSHIFT, n) for d, n in pieces)
        for name, ino, ftype in dirdata.salvage(buf, block_form, sb.has_ftype):
            if name == b"..":
                if parent is None:
                    parent = ino
            elif name != b".":
                out.append((name, ino, ftype))
    return parent, out, False


# -- the plan ---------------------------------------------------------------------------
class DirFix:
    """A directory the phase rewrites: its entries and parent after repair."""
    __slots__ = ("ino", "parent", "entries", "new", "fork", "blocks", "released",
                 "nblocks_old", "space", "bmbt")

    def __init__(self, ino, parent, entries, new=False):
        self.ino = ino
        self.parent = parent
        self.entries = entries          # [(name, ino, ftype)] in order
        self.new = new
        self.fork = None                # ForkPlan
        self.blocks = []                # reserved runs: [[(fsbno, n), ...] per run]
        self.released = []              # (fsbno, n) the old fork owned
        self.nblocks_old = 0
        self.space = 0
        self.bmbt = []                  # fsbnos reserved for its block map btree


class NamespacePlan:
    """What the namespace phase will write; see the module docstring."""

    def __init__(self):
        self.dirs: dict[int, DirFix] = {}       # rebuilt directories
        self.nlink: dict[int, int] = {}          # other inodes whose link count changes
        self.new_lpf = None                      # inode made lost+found, or None
        self.new_root = None                     # root inode made a new directory, or None
        self.changes: list = []
        self.reserved: dict = {}                 # agno -> [(agbno, n)]
        self.released: dict = {}                 # agno -> {claim owner: set(agbno)}
        self.used_inodes: dict = {}              # agno -> {agino}
        self.new_chunks: dict = {}               # agno -> [startagino] of chunks made
        # agno -> [(agbno, n, ino, offset, flags)]: the reverse mappings of
        # the blocks rebuilt directories take (their old data fork mappings
        # go: ``remaps``)
        self.rmaps: dict = {}
        # directory rewritten -> [(name, inode)] of the entries it held
        # (the parent pointer phase takes their pointers off)
        self.old_entries: dict = {}
        self.now = 0
        self.space = None                        # the _Space blocks are reserved from
        # inodes whose attr fork the parent pointer phase makes again in new
        # blocks (their old attr fork mappings go: ``remaps``)
        self.attr_rebuilt: set = set()

    @property
    def ags(self) -> set:
        return set(self.reserved) | set(self.released) | set(self.used_inodes)

    def __bool__(self) -> bool:
        return bool(self.dirs or self.nlink)

    # -- what the AG rebuild sees -----------------------------------------------------
    def claims_for(self, agno: int, claims: list) -> list:
        """An AG's claims with the blocks rebuilt directories give up taken
        out and the blocks they take added."""
        rel = self.released.get(agno)
        res = self.reserved.get(agno)
        if not rel and not res:
            return claims
        out = []
        for s, n, o in claims:
            gone = rel.get(o) if rel else None
            if not gone:
                out.append((s, n, o))
                continue
            run = None
            for b in range(s, s + n):
                if b in gone:
                    if run is not None:
                        out.append((run, b - run, o))
                        run = None
                elif run is None:
                    run = b
            if run is not None:
                out.append((run, s + n - run, o))
        out.extend(res or ())
        return out

    def records_for(self, agno: int, recs: dict, align: int) -> None:
        """Mark the inodes the phase takes (lost+found) in use in ``recs``
        (startino -> inobt record; chunks start at multiples of ``align``),
        and the chunks the phase makes, free but for those."""
        for start in self.new_chunks.get(agno, ()):
            recs[start] = normal_record(start, 0, (1 << 64) - 1)
        for agino in self.used_inodes.get(agno, ()):
            start = chunk_start(recs.__contains__, agino, align)
            r = recs.get(start)
            if r is None:
                raise NamespaceError(f"AG {agno}: internal: no inode record for agino {agino}")
            recs[start] = normal_record(start, r[1], r[4] & ~(1 << (agino - start)))

    def remaps(self, ino: int, flags: int) -> bool:
        """Whether a reverse mapping of ``ino`` with ``flags`` is replaced:
        the data fork of a directory the phase rewrites, the attr fork the
        parent pointer phase makes again."""
        if flags & RMAP_ATTR:
            return ino in self.attr_rebuilt
        return ino in self.dirs

    # -- writing ---------------------------------------------------------------------------
    def write(self, w) -> None:
        """Everything into the open transaction of the write session ``w``."""
        fs = w.fs
        sb = fs.sb
        for agno, starts in sorted(self.new_chunks.items()):
            # a new inode chunk: every inode written free first
            for start in starts:
                first = (agno << sb.agino_log) | start
                for ino in range(first, first + 64):
                    w.inodes.put_inode(ino, w.enc.free(ino))
        for ino in sorted(self.dirs):
            fix = self.dirs[ino]
            if fix.fork.local is not None:
                fork = F.Fork(C.XFS_DINODE_FMT_LOCAL, fix.fork.local, 0, 0)
            else:
                runs = list(fix.blocks)
                shim = types.SimpleNamespace(tx=w.tx, fs=fs, sb=sb,
                                             space=_ReservedRuns(runs))
                exts = F.place_plan(shim, fix.fork, 0, owner=None)
                fork = _bmbt_fork(w, ino, exts, fix) if fix.bmbt else \
                    F.map_fork(shim, ino, exts, fix.space)
            nlink = self.nlink.pop(ino)
            if fix.new:
                t = self.now
                spec = InodeSpec(mode=C.S_IFDIR | 0o755, nlink=nlink, atime_ns=t, mtime_ns=t,
                                 ctime_ns=t, crtime_ns=t, size=fix.fork.size,
                                 nblocks=fork.blocks, fmt=fork.fmt, nextents=fork.nextents,
                                 data=fork.literal)
                w.inodes.put_inode(ino, w.enc.encode(ino, spec))
                continue
            raw = w.inodes.raw_inode(ino)
            d = DINODE.unpack(raw)
            buf = bytearray(raw)
            F.put_data_fork(d, buf, fork, fix.space, fix.fork.size)
            d["di_nblocks"] = max(0, d["di_nblocks"] - fix.nblocks_old) + fork.blocks
            d["di_nlink"] = nlink
            bigtime = bool(d["di_flags2"] & C.XFS_DIFLAG2_BIGTIME)
            d["di_ctime"] = encode_ts(self.now, bigtime)
            packed = DINODE.pack(d)
            buf[:len(packed)] = packed
            w.inodes.put_inode(ino, w.enc.seal(buf))
        for ino, nlink in sorted(self.nlink.items()):
            raw = w.inodes.raw_inode(ino)
            d = DINODE.unpack(raw)
            d["di_nlink"] = nlink
            buf = bytearray(raw)
            packed = DINODE.pack(d)
            buf[:len(packed)] = packed
            w.inodes.put_inode(ino, w.enc.seal(buf))


def bmbt_blocks(sb, nexts: int, space: int) -> int:
    """Blocks of the block map btree that maps ``nexts`` extents from a
    fork of ``space`` bytes (0 when they fit the fork), as the bulk loader
    builds it."""
    if nexts * 16 <= space:
        return 0
    geo = BW.bulk_geometry(nexts, (BMBT.maxrecs(sb.blocksize, True),
                                   BMBT.maxrecs(sb.blocksize, False)),
                           root_maxrecs=BW.bmdr_maxrecs(space))
    return sum(g[0] for g in geo[:-1])


class _ReservedBmbt:
    """The bulk loader's block store for a rebuilt directory's block map
    btree: the blocks reserved for it at plan time, in order, each written
    anew in the transaction."""

    def __init__(self, w, blocks):
        self.w = w
        self.blocksize = w.fs.sb.blocksize
        self.blocks = list(blocks)

    def daddr(self, addr: int) -> int:
        return self.w.fs.fsb_to_daddr(addr)

    def alloc(self, _near=None) -> int:
        if not self.blocks:
            raise NamespaceError("internal: a directory's reserved bmbt blocks ran out")
        return self.blocks.pop(0)

    def new(self, addr: int) -> bytearray:
        return self.w.tx.get_buf(self.daddr(addr), self.blocksize, V.BMBT).data

    def read(self, addr: int) -> bytearray:
        return self.w.tx.read_buf(self.daddr(addr), self.blocksize, V.BMBT).data

    def dirty(self, addr: int) -> None:
        """Changes are found by comparing with the image's copy."""

    def free(self, addr: int) -> None:
        raise NamespaceError("internal: a rebuilt directory's bmbt frees no block")


def _bmbt_fork(w, ino: int, exts: list, fix):
    """The data fork of a rebuilt directory whose extents need a block map
    btree: bulk-loaded into exactly the blocks reserved for it."""
    exts = F.merge_extents(exts)
    store = _ReservedBmbt(w, fix.bmbt)
    root, _h, used = BW.bulk_load_bmbt([(o, b, n, 0) for o, b, n in exts], ino=ino,
                                       uuid=w.fs.uuid, blocksize=w.fs.sb.blocksize,
                                       root_space=fix.space, store=store)
    if store.blocks or len(used) != len(fix.bmbt):
        raise NamespaceError(f"internal: directory {ino}: its bmbt took {len(used)} blocks, "
                             f"{len(fix.bmbt)} were reserved")
    return F.Fork(C.XFS_DINODE_FMT_BTREE, root, len(exts),
                  sum(n for _o, _b, n in exts) + len(used))


class _ReservedRuns:
    """place_plan's allocator for a rebuilt directory: the runs reserved for
    it at plan time, in order."""

    def __init__(self, runs):
        self.runs = runs

    def alloc_run(self, _target, total, _unit, *, owner=None):
        if not self.runs:
            raise NamespaceError("internal: a directory's reserved blocks ran out")
        pieces = self.runs.pop(0)
        if sum(n for _b, n in pieces) != total:
            raise NamespaceError("internal: a directory's reserved run has the wrong size")
        return pieces

    def alloc_blocks(self, *_a):
        raise NamespaceError("internal: a rebuilt directory needs a block map btree")


class _Space:
    """Blocks a rebuilt directory may take: free in the space map (owned by
    no one and recorded free), less what is already reserved."""

    def __init__(self, checker):
        self.fs = checker.fs
        self.checker = checker
        self.free = {}                  # agno -> free extents, worked out on first use

    def _free(self, agno: int) -> list:
        free = self.free.get(agno)
        if free is None:
            claims = self.checker.claims.get(agno, [])
            owned = merge([(s, n) for s, n, o in claims if o != OWN_FREE])
            recorded = merge([(s, n) for s, n, o in claims if o == OWN_FREE])
            unowned = complement(owned, self.fs.ag_length(agno))
            free = self.free[agno] = _intersect(unowned, recorded)
        return free

    def take(self, agno: int, total: int, unit: int):
        """Pieces [(agbno, n)] of ``total`` blocks (each a multiple of
        ``unit``) from AG ``agno``: one extent when one is long enough."""
        free = self._free(agno)
        for i, (s, e) in enumerate(free):
            a = -(-s // unit) * unit if unit > 1 else s
            if e - a >= total:
                self._cut(agno, a, total)
                return [(a, total)]
        pieces, left = [], total
        for s, e in list(free):
            a = -(-s // unit) * unit if unit > 1 else s
            k = min((e - a) // unit * unit, left)
            if k > 0:
                pieces.append((a, k))
                left -= k
            if not left:
                break
        if left:
            return None
        for a, k in pieces:
            self._cut(agno, a, k)
        return pieces

    def take_aligned(self, agno: int, n: int, align: int, limit: int):
        """The first run of ``n`` blocks starting at a multiple of
        ``align`` and ending at or below ``limit``, taken; or None."""
        for s, e in self._free(agno):
            a = -(-s // align) * align
            if a + n <= min(e, limit):
                self._cut(agno, a, n)
                return a
        return None

    def _cut(self, agno: int, start: int, n: int) -> None:
        out = []
        for s, e in self.free[agno]:
            if e <= start or s >= start + n:
                out.append([s, e])
                continue
            if s < start:
                out.append([s, start])
            if e > start + n:
                out.append([start + n, e])
        self.free[agno] = out


def _intersect(a: list, b: list) -> list:
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if s < e:
            out.append([s, e])
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _runs(fork) -> list:
    """The planned blocks of ``fork`` grouped as place_plan groups them:
    [(total blocks, unit, first logical block)]."""
    blocks = sorted(fork.blocks, key=lambda b: b.lblk)
    out = []
    i = 0
    while i < len(blocks):
        j = i
        unit = blocks[i].nblocks
        while j + 1 < len(blocks) and blocks[j + 1].lblk == blocks[j].lblk + \
                blocks[j].nblocks and blocks[j + 1].nblocks == unit:
            j += 1
        out.append((sum(b.nblocks for b in blocks[i:j + 1]), unit, blocks[i].lblk))
        i = j + 1
    return out


def plan(checker, cleared: set, mended: dict | None = None) -> NamespacePlan:
    """The namespace phase's plan for what ``checker`` found, treating the
    inodes in ``cleared`` (which the inode phase frees) as free and the
    directories in ``mended`` (inode -> the inode phase's change, from
    InodePlan.mended) as that change leaves them.  Raises
    :class:`NamespaceError` when the namespace cannot be repaired safely."""
    mended = mended or {}
    fs = checker.fs
    sb = fs.sb
    if not sb.has_ftype:
        raise NamespaceError("directories without file types (ftype) are not rewritten")
    tab = getattr(checker, "table", None)
    if tab is None:
        raise NamespaceError("check did not reach the namespace phase")
    root = root_ino(checker)
    special = metadata_inodes(checker)

    def itype(ino):
        if ino in cleared:
            return 0
        s = tab.slot(ino)
        return tab.itype[s] if s >= 0 else 0

    # a root that is no directory: a new one is made in its inode (xfs_repair's
    # mk_root_dir) once the inode phase has cleared it, or when it is free
    new_root = itype(root) != C.S_IFDIR >> 12
    if new_root and root not in cleared and itype(root):
        raise NamespaceError(f"the root directory (inode {root}) is in use as another type "
                             "of file")
    flagged = {f.ino for f in checker.findings
               if f.code.startswith("DIR_") and f.code in CODES and f.ino is not None}
    dirs = sorted(d for d in set(checker.dirs) if itype(d) == C.S_IFDIR >> 12)
    # a directory whose inode or block map is damaged is the inode phase's
    # to clear or mend first: until then its entries are not trusted
    doubtful = {f.ino for f in checker.findings if f.severity == "error" and
                f.code.startswith(("INODE_", "BMBT_")) and not shares_blocks(f)} - mended.keys()
    for d in dirs:
        if d in doubtful:
            raise NamespaceError(f"directory {d} has inode or block map damage that is not "
                                 "repaired")
    # 1. what every directory holds
    read = {}
    if new_root:
        read[root] = (root, [], True, None)
    for d in dirs:
        try:
            ch = mended.get(d)
            # an inode the inode phase mends (magic, CRC, counts, attr fork):
            # read as it will be
            node = fs.inode(d) if ch is None else \
                fs.inode_as(d, lambda raw, ch=ch: edited(raw, ch, checker))
        except FsToolError as e:
            raise NamespaceError(f"directory {d} cannot be read: {e}") from None
        read[d] = read_dir(fs, node) + (node,)
    if new_root:
        dirs = sorted(dirs + [root])
    # 2. entries kept, in xfs_repair's traversal order
    dotdot = {}
    for d in dirs:
        p = read[d][0]
        dotdot[d] = p if p is not None and p != d and verify_dir_ino(checker, p) else None
    dotdot[root] = root
    reached = set()
    parent = {root: root}
    kept = {}
    changed = set()
    # a directory check found nothing wrong with, whose entries name no
    # inode anything was found about (nor one cleared or special), needs no
    # look at its entries to other files: check's native tally found their
    # names, types and targets good; only its subdirectories are followed
    # one by one (parents, cycles), and names are made sure to be unique
    noted = None if any(f.code == "CHECK_ABORTED" for f in checker.findings) else \
        {f.ino for f in checker.findings if f.ino is not None} | set(cleared) | set(special)
    DIR = C.XFS_DIR3_FT_DIR
    no_subdirs = set()              # directories kept as read that hold no directory
    dropped = collections.Counter()     # entries not kept, by the inode they name
    for d in dirs:
        _p, ents, exact = read[d][:3]
        fast = noted is not None and exact and d not in noted and d not in flagged and \
            noted.isdisjoint([e[1] for e in ents]) and len({e[0] for e in ents}) == len(ents)
        if fast:
            plain = [e for e in ents if e[2] != DIR]
            reached.update([e[1] for e in plain])
            if len(plain) == len(ents):
                kept[d] = plain
                no_subdirs.add(d)
                continue
        names = set()
        out = []
        for name, child, ftype in ents:
            if fast and ftype != DIR:
                names.add(name)
                out.append((name, child, ftype))
                continue
            t = itype(child) if verify_dir_ino(checker, child) else 0
            ok = (0 < len(name) < 256 and b"/" not in name and b"\0" not in name
                  and name not in names and name not in (b".", b"..") and child != d
                  and child not in special and t and t in FTYPE_OF)
            if ok and t == C.S_IFDIR >> 12:
                if child in reached or child == root:
                    ok = False
                elif dotdot.get(child) is None:
                    dotdot[child] = d
                elif dotdot[child] != d:
                    ok = False
                if ok:
                    parent[child] = d
            if not ok:
                if not t and child not in cleared and verify_dir_ino(checker, child) and \
                        _looks_in_use(fs, child):
                    # the inode btrees call it free, the inode says otherwise:
                    # which is right is the inode and AG phases' to settle
                    raise NamespaceError(f"directory {d}: entry {quoted_name(name)} names inode "
                                         f"{child}, which the inode btree calls free but "
                                         "is in use on disk")
                changed.add(d)
                dropped[child] += 1
                continue
            reached.add(child)
            names.add(name)
            want = FTYPE_OF[t]
            if want != ftype:
                changed.add(d)
            out.append((name, child, want))
        kept[d] = out
        if not exact or d in flagged:
            changed.add(d)
    # 3. what no kept entry reaches, and cycles no path from the root enters.
    # When every directory read exactly and none has damage, check's tally
    # counted the very entries read: only inodes it counted no entry for
    # (nlink_scan) and those whose entries were dropped can be unreached,
    # and only those, the directories and what lost+found takes can need
    # another link count; else every inode is looked at
    # (a directory the inode phase cleared held entries the tally counted:
    # what they named may be reached by nothing now)
    tallied = noted is not None and not flagged and all(read[d][2] for d in dirs) and \
        set(checker.dirs) <= set(dirs)
    scan = parsers.nlink_scan(tab.itype, tab.nlinks, tab.refs) if tallied else None
    if tallied:
        maybe = sorted({tab.ino(s) for s in scan if not tab.refs[s]} | set(dropped))
        named = [(s, ino) for s, ino in ((tab.slot(i), i) for i in maybe)
                 if s >= 0 and tab.itype[s] in FTYPE_OF]
    else:
        named = _named_slots(tab)
    orphans = []
    for _s, ino in named:
        if ino in reached or ino == root or ino in special or ino in cleared:
            continue
        orphans.append(ino)
    lpf = taken = None
    for name, child, ft in kept[root]:
        if name == ORPHANAGE:
            taken = child
            lpf = child if ft == C.XFS_DIR3_FT_DIR else None
    out = NamespacePlan()
    out.now = time.time_ns()
    if new_root:
        out.new_root = root
        changed.add(root)
        out.changes.append(f"root directory (inode {root}) made anew")
    space = out.space = _Space(checker)

    def subdirs(d):
        return [] if d in no_subdirs else [c for _n, c, ft in kept[d] if ft == DIR]

    children = {d: subdirs(d) for d in dirs}
    while True:
        start = [root] + [o for o in orphans if o in children]
        seen = set(start)
        stack = list(start)
        while stack:
            for c in children.get(stack.pop(), ()):
                if c not in seen:
                    seen.add(c)
                    stack.append(c)
        cycle = [d for d in dirs if d not in seen]
        if not cycle:
            break
        # a directory cycle no path from the root enters: its lowest
        # directory goes to lost+found
        top = cycle[0]
        p = parent.pop(top)
        kept[p] = [e for e in kept[p] if e[1] != top]
        dropped[top] += 1
        children[p] = subdirs(p)
        changed.add(p)
        orphans.append(top)
    if orphans and lpf is None:
        if taken is not None:
            raise NamespaceError(f"/lost+found (inode {taken}) is not a directory")
        try:
            lpf = _free_inode(checker, cleared, root)
        except NamespaceError:
            lpf = _new_chunk(checker, space, out, root)
        out.new_lpf = lpf
        kept[lpf] = []
        dirs.append(lpf)
        kept[root].append((ORPHANAGE, lpf, C.XFS_DIR3_FT_DIR))
        parent[lpf] = root
        changed.update((root, lpf))
        out.changes.append(f"lost+found created (inode {lpf})")
    if orphans:
        names = {e[0] for e in kept[lpf]}
        for ino in sorted(orphans):
            name = str(ino).encode()
            k = 0
            while name in names:
                k += 1
                name = f"{ino}.{k}".encode()
            names.add(name)
            ft = FTYPE_OF[itype(ino)]
            kept[lpf].append((name, ino, ft))
            if ft == C.XFS_DIR3_FT_DIR:
                parent[ino] = lpf
            out.changes.append(f"inode {ino} moved to lost+found as {name.decode()}")
        changed.add(lpf)
    for d in dirs:
        if d != out.new_lpf and parent[d] != read[d][0]:
            changed.add(d)
    # 4. link counts
    no_subdirs.difference_update((root, lpf))      # (lost+found may have gained some)
    want = {d: 2 + len(subdirs(d)) for d in dirs}
    if tallied:
        # entries as check counted them, less those dropped, plus those added
        added = collections.Counter(e[1] for e in kept[lpf][-len(orphans):]) \
            if orphans else collections.Counter()
        if out.new_lpf is not None:
            added[out.new_lpf] += 1
        look = set(scan)
        look.update(s for s in map(tab.slot, set(dropped) | set(added) | changed) if s >= 0)
        refs = {tab.ino(s): tab.refs[s] for s in look}
        for ino, k in dropped.items():
            if ino in refs:
                refs[ino] -= k
        for ino, k in added.items():
            if ino in refs:
                refs[ino] += k
        named = sorted((s, tab.ino(s)) for s in look if tab.itype[s] in FTYPE_OF)
    else:
        refs = collections.Counter(c for d in dirs for _n, c, _ft in kept[d])
        named = _named_slots(tab)
    for s, ino in named:
        if ino in special or ino in cleared:
            continue
        n = want.get(ino, refs.get(ino, 0))
        if n != tab.nlinks[s] or ino in changed:
            out.nlink[ino] = n
            if ino not in changed:
                out.changes.append(f"inode {ino}: link count {tab.nlinks[s]} set to {n}")
    for new in (out.new_lpf, out.new_root):
        if new is not None:
            out.nlink[new] = want[new]
    # 5. the directories rebuilt, their blocks reserved
    for d in sorted(changed):
        if d in read:
            out.old_entries[d] = [(name, ino) for name, ino, _ft in read[d][1]]
        _build(out, checker, space, d, parent[d], kept[d],
               read.get(d), d in (out.new_lpf, out.new_root))
        out.changes.append(f"directory {d}: rebuilt with {len(kept[d])} entries")
    return out


_NAMED = bytes(1 if t in FTYPE_OF else 0 for t in range(256))


def _named_slots(tab):
    """(slot, inode) of every inode of ``tab`` in use with a type a
    directory entry can name, in slot order."""
    mask = bytes(tab.itype).translate(_NAMED)
    starts = tab.starts
    s = mask.find(1)
    while s >= 0:
        yield s, starts[s >> 6] + (s & 63)
        s = mask.find(1, s + 1)


def _looks_in_use(fs, ino: int) -> bool:
    """The inode on disk has the magic, version, its own number and uuid,
    and a mode: in use as far as the inode itself says."""
    sb = fs.sb
    try:
        agno, agbno, index = fs.ino_location(ino)
    except FsToolError:
        return False
    raw = fs.dev.pread((fs.agb_to_daddr(agno, agbno) << C.BBSHIFT) + index * sb.inodesize,
                       sb.inodesize)
    if len(raw) != sb.inodesize:
        return False
    d = DINODE.unpack(raw)
    return d["di_magic"] == C.XFS_DINODE_MAGIC and d["di_version"] == 3 and \
        d["di_mode"] != 0 and d["di_ino"] == ino and d["di_uuid"] == fs.uuid


def _new_chunk(checker, space, out, root: int) -> int:
    """The first inode of a new inode chunk for lost+found, when no chunk
    has a free inode: 64 inodes in blocks free in the space map, aligned as
    the superblock says chunks are, the root's AG first (the chunk is
    written, all free but lost+found, with the rebuilt inode btrees)."""
    sb = checker.sb
    if sb.inopblock > 64:
        raise NamespaceError("no free inode in an existing chunk for lost+found (a new "
                             "chunk in blocks shared by two chunks is not supported yet)")
    nblocks = 64 // sb.inopblock
    align = max(1, sb.fields["sb_inoalignmt"])
    ragno = root >> sb.agino_log
    # the chunk's last inode must have an AG inode number
    limit = ((1 << sb.agino_log) - 1) >> sb.inopblog
    for agno in [ragno] + [a for a in range(sb.agcount) if a != ragno]:
        a = space.take_aligned(agno, nblocks, align, limit)
        if a is not None:
            out.reserved.setdefault(agno, []).append((a, nblocks, OWN_INODES))
            out.new_chunks.setdefault(agno, []).append(a << sb.inopblog)
            out.changes.append(f"AG {agno}: inode chunk made at agino {a << sb.inopblog} "
                               f"(blocks {a}-{a + nblocks - 1}) for lost+found")
            return (agno << sb.agino_log) | (a << sb.inopblog)
    raise NamespaceError("no free inode in an existing chunk for lost+found, and no free "
                         "space for a new chunk")


def _free_inode(checker, cleared, root: int) -> int:
    """A free inode of an existing chunk for lost+found, the root's AG first."""
    sb = checker.sb
    ragno = root >> sb.agino_log
    for agno in [ragno] + [a for a in range(sb.agcount) if a != ragno]:
        for startino, holemask, _c, _f, free in sorted(checker.chunks.get(agno, ())):
            for i in range(64):
                if free >> i & 1 and not (holemask >> (i // 4) & 1):
                    ino = (agno << sb.agino_log) | (startino + i)
                    if ino not in cleared and ino != root and \
                            not checker.table.in_use(ino):
                        return ino
    raise NamespaceError("no free inode in an existing chunk for lost+found (allocating a "
                         "new inode chunk is not supported yet)")


def _build(out: NamespacePlan, checker, space: _Space, d: int, parent, entries, read,
           new: bool) -> None:
    """Encode directory ``d`` and reserve its blocks."""
    fs = checker.fs
    sb = fs.sb
    fix = DirFix(d, parent, entries, new)
    lit = sb.inodesize - C.XFS_DINODE_CORE_SIZE
    if new:
        fix.space = lit
    else:
        node = read[3]
        fix.space = node.forkoff * 8 if node.forkoff else lit
        if node.format in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE):
            salvaged = salvaged_extents(fs, node)
            try:
                fix.released = owned_blocks(node, attr=False) if salvaged is None else \
                    [(b, n) for _o, b, n, _u in salvaged[0]] + [(a, 1) for a in salvaged[1]]
            except FsToolError as e:
                raise NamespaceError(f"directory {d}: its blocks cannot be listed: {e}") \
                    from None
            fix.nblocks_old = sum(n for _b, n in fix.released)
    try:
        fix.fork = DB.encode_dir(entries, ino=d, parent=parent, uuid=fs.uuid,
                                 blocksize=sb.blocksize, dirblksize=sb.dirblksize,
                                 has_ftype=True, inline_space=fix.space)
    except FsToolError as e:
        raise NamespaceError(f"directory {d}: cannot be encoded: {e}") from None
    if fix.fork.local is None:
        home = d >> sb.agino_log
        nexts = 0
        for total, unit, lblk in _runs(fix.fork):
            pieces = None
            for agno in [home] + [a for a in range(sb.agcount) if a != home]:
                pieces = space.take(agno, total, unit)
                if pieces is not None:
                    break
            if pieces is None:
                raise NamespaceError(f"directory {d}: no free space for its {total} blocks")
            fix.blocks.append([((agno << sb.agblklog) | a, n) for a, n in pieces])
            out.reserved.setdefault(agno, []).extend((a, n, file_owner(d, DATA))
                                                     for a, n in pieces)
            # their reverse mappings: place_plan maps the run's pieces in order
            rm = out.rmaps.setdefault(agno, [])
            for a, n in pieces:
                rm.append((a, n, d, lblk, 0))
                lblk += n
            nexts += len(pieces)
        # extents beyond what the fork holds go into a block map btree,
        # its blocks reserved here too (one at a time, near the directory)
        for _i in range(bmbt_blocks(sb, nexts, fix.space)):
            pieces = None
            for agno in [home] + [a for a in range(sb.agcount) if a != home]:
                pieces = space.take(agno, 1, 1)
                if pieces is not None:
                    break
            if pieces is None:
                raise NamespaceError(f"directory {d}: no free space for its block map btree")
            fix.bmbt.append((agno << sb.agblklog) | pieces[0][0])
            out.reserved.setdefault(agno, []).append((pieces[0][0], 1,
                                                      file_owner(d, BMBT_DATA)))
            out.rmaps.setdefault(agno, []).append((pieces[0][0], 1, d, 0, RMAP_BMBT))
    for fsbno, n in fix.released:
        agno, agbno = checker.fsb_split(fsbno)
        rel = out.released.setdefault(agno, {})
        for owner in (file_owner(d, DATA), file_owner(d, BMBT_DATA)):
            rel.setdefault(owner, set()).update(range(agbno, agbno + n))
    if new:
        sbb = checker.sb
        out.used_inodes.setdefault(d >> sbb.agino_log, set()).add(d & ((1 << sbb.agino_log)
                                                                       - 1))
    out.dirs[d] = fix
