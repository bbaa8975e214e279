"""What every check phase shares: findings, block ownership claims, the
phase driver (one process or one per group of AGs) and the exit status;
the phase registry's row and the hooks a caller of the check (repair)
takes part through."""
from __future__ import annotations

import functools
from collections import defaultdict
from typing import Callable, NamedTuple

from ...errors import CorruptionError, FsToolError
from ...format import constants as C
from ...fs.filesystem import Filesystem
from ...io import signals
from ..problems import ERROR, PROBLEMS
from .records import Claims, RecordMap, Rmaps

EXIT_CLEAN, EXIT_CORRUPT, EXIT_DIRTY_LOG, EXIT_OPERATIONAL = 0, 1, 2, 4

# Who owns a range of AG blocks.  Metadata owners are the rmapbt's special
# owners (XFS_RMAP_OWN_*) and two of check's own; a file's blocks are owned by
# ``ino << 2 | kind``: its data fork, its attr fork, or the bmbt of either.
OWN_FS, OWN_LOG, OWN_AG, OWN_INOBT, OWN_INODES, OWN_REFC, OWN_COW = -3, -4, -5, -6, -7, -8, -9
OWN_AGFL, OWN_FREE = -20, -21
DATA, ATTR, BMBT_DATA, BMBT_ATTR = 0, 1, 2, 3

_OWNER_NAMES = {OWN_FS: "the AG headers", OWN_LOG: "the log", OWN_AG: "a free space btree",
                OWN_INOBT: "an inode btree", OWN_INODES: "an inode chunk",
                OWN_REFC: "the refcount btree", OWN_COW: "a CoW staging extent",
                OWN_AGFL: "the AG free list", OWN_FREE: "free space"}
_KIND_NAMES = ("the data fork", "the attr fork", "the data fork block map",
               "the attr fork block map")


def file_owner(ino: int, kind: int) -> int:
    return ino << 2 | kind


def owner_name(owner: int) -> str:
    if owner < 0:
        return _OWNER_NAMES.get(owner, f"owner {owner}")
    return f"{_KIND_NAMES[owner & 3]} of inode {owner >> 2}"


class Finding:
    """One problem: its code in the problem table, a message, and where it
    is, as precisely as a repair needs it: the structure (``sb``, ``agf``,
    ``bnobt``, ``inode``, ``dir``...), the AG and AG block holding it, the
    inode, fork and file block offset for structures inside a file, the
    field, the index of a record or entry, and for values the expected and
    found ones.  (A plain class, not a dataclass: loading dataclasses
    loads inspect, ast and dis, a few milliseconds of every check.)"""
    FIELDS = ("code", "message", "structure", "agno", "block", "ino", "fork", "offset",
              "field", "index", "expected", "found")
    __slots__ = FIELDS

    def __init__(self, code: str, message: str, structure: str | None = None,
                 agno: int | None = None, block: int | None = None, ino: int | None = None,
                 fork: str | None = None, offset: int | None = None,
                 field: str | None = None, index: int | None = None, expected=None,
                 found=None):
        self.code, self.message, self.structure = code, message, structure
        self.agno, self.block, self.ino, self.fork, self.offset = agno, block, ino, fork, offset
        self.field, self.index, self.expected, self.found = field, index, expected, found

    def _values(self) -> tuple:
        return tuple(getattr(self, k) for k in self.FIELDS)

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    __hash__ = None

    def __repr__(self) -> str:
        return "Finding(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.FIELDS) + ")"

    def __getstate__(self):
        return self._values()

    def __setstate__(self, state) -> None:
        for k, v in zip(self.FIELDS, state):
            setattr(self, k, v)

    @property
    def severity(self) -> str:
        return PROBLEMS[self.code][0]

    def as_dict(self) -> dict:
        d = {k: v for k in self.FIELDS if (v := getattr(self, k)) is not None}
        d["severity"] = self.severity
        return d


# a phase's scope: run first, once (and the run stops there when it says
# so); per AG (each phase over the AGs of ``ag_filter``; with jobs > 1 the
# per-AG phases run in worker processes, each over a group of AGs); or
# global, once the per-AG phases are done, over the whole filesystem
FIRST, PER_AG, GLOBAL = "first", "per-AG", "global"


class Phase(NamedTuple):
    """One row of the phase registry (``Checker.PHASES``): its name (what
    progress shows), its scope, and the function that runs it on the check
    context (``run(ctx)``)."""
    name: str
    scope: str
    run: Callable


class CheckHooks:
    """Where a caller takes part in the check, registered on the context
    (``hooks=``): the check calls each at its point and does without when
    no hooks are given.  Repair's (:class:`fstool.ops.repair.checker.
    RepairHooks`) makes the check it runs see the filesystem as its plan
    will leave it and keeps check's verdicts for the plan.  This class
    does nothing; its methods are the points there are."""

    # names of the hooks' own dicts an AG worker hands back to be merged
    MERGED_DICTS: tuple = ()

    # the primary superblock's geometry is settled before the check (no
    # vote against the secondaries)
    geometry_settled = False

    def inobt_record_reported(self, ctx, agno: int, rec) -> None:
        """An inobt record kept for the inode table was reported."""

    def chunk_records(self, ctx, agno: int, recs: list) -> list:
        """The inobt records the AG's inode table is made from."""
        return recs

    def fork_input(self, ctx, d: dict, raw: bytes) -> tuple:
        """(fields, raw inode) the forks of an inode in use are checked from."""
        return d, raw

    def extent_count(self, ctx, d: dict, raw: bytes, off: int, size: int, attr: bool) -> dict:
        """The fields an extents-format fork's records are read by (``off``
        and ``size``: the fork's place in the inode)."""
        return d

    def inode_checked(self, ctx, ino: int, kept, data_blocks) -> None:
        """Check's verdict on an inode in use: kept (or one xfs_repair
        clears), and the blocks its data fork maps (None when not counted)."""

    def dir_node(self, ctx, node) -> None:
        """A directory's inode, before its blocks are read."""


class CheckContext:
    """The check context: the state the phases share (the filesystem and
    its geometry, the findings, the tables the phases fill and merge), the
    hooks registered on it, and the driver that runs the phase registry
    (``PHASES``) over it."""

    PHASES: tuple = ()
    # what an AG worker hands back to be merged
    MERGED_LISTS = ("findings", "dirs", "pptr_unread")
    MERGED_DICTS = ("tables", "chunks", "unlinked", "next_unlinked", "refcounts", "rmaps",
                    "agf", "agi", "refcount_trees", "dir_raw")
    MERGED_AG_LISTS = ("claims", "rmap_expect", "unwritten")
    MERGED_COUNTS = ("ag_totals",)

    def __init__(self, fs, progress=None, ag_filter=None, hooks: CheckHooks | None = None):
        self.fs = fs
        self.hooks = hooks
        self.sb = fs.sb
        self.ag_filter = list(ag_filter) if ag_filter is not None else range(fs.sb.agcount)
        self.progress = progress
        self._phase = ""
        self.findings: list[Finding] = []
        self.dirs: list[int] = []
        self.dir_raw: dict = {}           # directory inode -> its raw inode
        self.tables: dict = {}
        self.chunks: dict = {}
        self.agf: dict = {}
        self.agi: dict = {}
        # per AG: [(start, length, owner)] for every claimed block range
        self.claims: dict = RecordMap(Claims)
        # per AG: the refcount btree's shared ranges [(start, length, refcount)]
        self.refcounts: dict = {}
        # per AG: the refcount btree's nodes and leaves, for lookups
        self.refcount_trees: dict = {}
        # per AG: the rmapbt's records, and the ones check expects
        self.rmaps: dict = RecordMap(Rmaps)
        self.rmap_expect: dict = RecordMap(Rmaps)
        # per AG, on a reflink filesystem: the claims of unwritten file
        # extents, which share no block (xfs_repair's rmap_shareable): the
        # refcount btree counts them out
        self.unwritten: dict = RecordMap(Claims)
        self.reflink = fs.sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK)
        # per AG: the unlinked buckets; per inode: its next_unlinked
        self.unlinked: dict = {}
        self.next_unlinked: dict = {}
        self.ag_totals = {"icount": 0, "ifree": 0, "fdblocks": 0}
        self.log_dirty = False
        # set by a first phase when nothing after it can be checked (the
        # primary superblock's geometry is outvoted by the secondaries')
        self.stop = False
        self.has_rmap = fs.sb.has_ro_compat(1 << 1)
        self.has_pptr = fs.sb.has_incompat(1 << 7)
        # inodes whose attr fork could not be read whole: their parent
        # pointers are not known, and not compared with the entries
        self.pptr_unread: list[int] = []
        # what the superblocks module finds the first time it is asked
        # (superblocks.root_ino, log_head_lsn): the root inode as check
        # goes on with it, the log's head (None when unknown) and the LSNs
        # behind it, which are not compared with the head
        self.root_inode = None
        self.log_head = None
        self.log_head_read = False
        self.lsn_behind = 0
        self._setup_geometry()

    # -- geometry ------------------------------------------------------------
    def _setup_geometry(self) -> None:
        """Block and inode number validity, as the kernel's xfs_verify_agbno
        and xfs_verify_agino define them (the methods below)."""
        sb = self.sb
        f = sb.fields
        self.agfl_block = (3 * sb.sectsize) >> sb.blocklog
        self.agfl_size = (sb.sectsize - C.XFS_AGFL_HDR_SIZE) // 4
        cluster_bytes = 8192 * (sb.inodesize // 256)
        if f["sb_inoalignmt"] < cluster_bytes >> sb.blocklog:
            cluster_bytes = 8192
        self.blocks_per_cluster = max(1, cluster_bytes >> sb.blocklog)
        if f["sb_versionnum"] & 0x80 and f["sb_inoalignmt"] >= self.blocks_per_cluster:
            self.cluster_align = f["sb_inoalignmt"]
        else:
            self.cluster_align = 1

    @functools.cached_property
    def ag_lengths(self) -> list:
        """Blocks in each AG (the last may be shorter)."""
        return [self.fs.ag_length(a) for a in range(self.sb.agcount)]

    def verify_agbno(self, agno: int, agbno: int) -> bool:
        return self.agfl_block < agbno < self.fs.ag_length(agno)

    def fsb_split(self, fsbno: int) -> tuple[int, int]:
        """(AG, block in AG) of a filesystem block number.  The AG number
        is 32 bits wide (XFS_FSB_TO_AGNO), so bits above it are dropped: the
        kernel and xfs_repair both read such a number as the block those bits
        fall back to."""
        agblklog = self.sb.agblklog
        return (fsbno >> agblklog) & 0xFFFFFFFF, fsbno & ((1 << agblklog) - 1)

    def verify_fsbno(self, fsbno: int) -> bool:
        agno, agbno = self.fsb_split(fsbno)
        return agno < self.sb.agcount and self.verify_agbno(agno, agbno)

    def agino_range(self, agno: int) -> tuple[int, int]:
        ca = self.cluster_align
        first = -(-(self.agfl_block + 1) // ca) * ca
        last = self.fs.ag_length(agno) // ca * ca
        return first << self.sb.inopblog, (last << self.sb.inopblog) - 1

    def verify_agino(self, agno: int, agino: int) -> bool:
        lo, hi = self.agino_range(agno)
        return lo <= agino <= hi

    # -- reporting -----------------------------------------------------------
    def report(self, code: str, message: str, **where) -> None:
        assert code in PROBLEMS, code
        if where.get("structure") is None and PROBLEMS[code][1] is not None:
            where["structure"] = PROBLEMS[code][1]
        self.findings.append(Finding(code, message, **where))

    def from_error(self, code: str, err: Exception, **where) -> None:
        """A finding from an exception: a CorruptionError's location fills
        what ``where`` leaves out."""
        if isinstance(err, CorruptionError):
            for k in ("agno", "block", "ino", "field"):
                if where.get(k) is None:
                    where[k] = getattr(err, k)
        self.report(code, str(err), **{k: v for k, v in where.items() if v is not None})

    def claim(self, agno: int, start: int, length: int, owner: int) -> None:
        self.claims[agno].append((start, length, owner))

    def claim_fsb(self, fsbno: int, length: int, owner: int) -> None:
        agno, agbno = self.fsb_split(fsbno)
        self.claims[agno].append((agbno, length, owner))

    # -- driver --------------------------------------------------------------
    def phases(self, *scopes: str) -> list:
        """The registry's phases of these scopes, in order."""
        return [p for p in self.PHASES if p.scope in scopes]

    def phase(self, name: str) -> Phase:
        """The registry's phase of this name."""
        return next(p for p in self.PHASES if p.name == name)

    def run(self, jobs: int = 1) -> list:
        for phase in self.phases(FIRST):
            self.run_phase(phase)
        if self.stop:
            return self.findings
        if jobs > 1 and self.sb.agcount > 1:
            self._run_ag_phases_parallel(jobs)
        else:
            for phase in self.phases(PER_AG):
                self.run_phase(phase)
        for phase in self.phases(GLOBAL):
            self.run_phase(phase)
        return self.findings

    def run_phase(self, phase: Phase) -> None:
        name = phase.name
        self._phase = name
        if self.progress:
            self.progress(name, 0, None)
        try:
            phase.run(self)
        except FsToolError as e:      # a phase stops; the others go on
            self.from_error("CHECK_ABORTED", e)
        except Exception as e:        # noqa: BLE001 - never a traceback for damage
            self.report("CHECK_ABORTED", f"phase {name} stopped: {type(e).__name__}: {e}")

    def guarded(self, what: str, fn, *args, **where):
        """Run one structure's check; an unexpected exception (damage the
        checks do not foresee) becomes a CHECK_ABORTED finding about that
        structure instead of ending the run."""
        try:
            return fn(*args)
        except FsToolError as e:
            self.from_error("CHECK_ABORTED", e, **where)
        except Exception as e:        # noqa: BLE001
            self.report("CHECK_ABORTED", f"{what} could not be checked: "
                        f"{type(e).__name__}: {e}", **where)
        return None

    def _run_ag_phases_parallel(self, jobs: int) -> None:
        import multiprocessing  # lazy: start-up, only --jobs needs it
        agnos = list(range(self.sb.agcount))
        groups = [agnos[i::jobs] for i in range(min(jobs, len(agnos)))]
        if self.progress:
            self.progress(f"AGs in {len(groups)} processes", 0, None)
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(len(groups), initializer=signals.as_worker) as pool:
            results = pool.starmap(_ag_worker, [(type(self), self.fs.dev.path, g, self.hooks)
                                                for g in groups])
        for part in results:
            for k in self.MERGED_LISTS:
                getattr(self, k).extend(part[k])
            for k in self.MERGED_DICTS:
                getattr(self, k).update(part[k])
            for k in self.MERGED_AG_LISTS:
                for agno, lst in part[k].items():
                    getattr(self, k)[agno].extend(lst)
            for k, v in part["ag_totals"].items():
                self.ag_totals[k] += v
            for k, v in part["hooks"].items():
                getattr(self.hooks, k).update(v)
        # findings in AG order, whatever the grouping
        self.findings.sort(key=lambda f: -1 if f.agno is None else f.agno)

    def _tick(self, done: int, total: int) -> None:
        """Report progress within the running phase (every 256 steps)."""
        if self.progress and (not done & 255 or done == total):
            self.progress(self._phase, done, total)

    @property
    def exit_code(self) -> int:
        if self.log_dirty:
            return EXIT_DIRTY_LOG
        if any(f.severity == ERROR for f in self.findings):
            return EXIT_CORRUPT
        return EXIT_CLEAN


def _ag_worker(cls, path: str, agnos: list, hooks: CheckHooks | None) -> dict:
    """Run the per-AG phases for some AGs in a child process (the first
    phases ran in the parent)."""
    with Filesystem(path) as fs:
        c = cls(fs, ag_filter=agnos, hooks=hooks)
        for phase in c.phases(PER_AG):
            c.run_phase(phase)
        out = {}
        for k in c.MERGED_LISTS + c.MERGED_DICTS + c.MERGED_AG_LISTS + c.MERGED_COUNTS:
            v = getattr(c, k)
            out[k] = dict(v) if isinstance(v, defaultdict) else v
        out["hooks"] = {k: getattr(hooks, k) for k in (hooks.MERGED_DICTS if hooks else ())}
        return out
