"""fstool check: every check xfs_repair -n makes on a v5 image (and the
kernel's verifiers where they are stricter), as findings from one problem
table (ops/problems.py).

The check is a registry of phases (``PHASES``: name, scope, function), one
module each, run over one check context; each records findings and never
stops the run: a structure that cannot be read becomes a finding, and
the phases that depend on it work with what was read.  Exit status follows
xfs_repair -n: 0 clean, 1 corruption, 2 dirty log, 4 operational error.

    superblocks   primary and secondary superblocks      (superblocks.py)
    ag_headers    AGF, AGI, AGFL of every AG             (agheaders.py)
    free_space    bnobt, cntbt, rmapbt; AGF counters     (btrees.py)
    inode_btrees  inobt, finobt; AGI counters            (btrees.py)
    refcounts     refcount btree                         (btrees.py)
    inodes        every inode, its forks and block maps  (inodes.py, xattrs.py)
    unlinked      the AGI unlinked lists                 (agheaders.py)
    namespace     directories, '..', reachability, links,
                  parent pointers against the entries  (namespace.py, dirs.py,
                                                         parents.py)
    space_map     every block owned once; refcounts and
                  rmaps against the owners found         (spacemap.py)
    counters      superblock counters                    (summary.py)
    log           a clean log                            (summary.py)
"""
from __future__ import annotations

from .. import gc_paused
from . import agheaders, btrees, dirs, inodes, namespace, spacemap, summary, superblocks
from .base import (EXIT_CLEAN, EXIT_CORRUPT, EXIT_DIRTY_LOG, EXIT_OPERATIONAL, FIRST, GLOBAL,
                   PER_AG, CheckContext, CheckHooks, Finding, Phase)
from .table import InodeTable

__all__ = ["Checker", "CheckHooks", "Finding", "InodeTable", "Phase", "PHASES", "check",
           "FIRST", "PER_AG", "GLOBAL", "EXIT_CLEAN", "EXIT_CORRUPT", "EXIT_DIRTY_LOG",
           "EXIT_OPERATIONAL"]

# the phase registry, in the order the phases run
PHASES = (
    Phase("superblocks", FIRST, superblocks.phase_superblocks),
    Phase("ag_headers", PER_AG, agheaders.phase_ag_headers),
    Phase("free_space", PER_AG, btrees.phase_free_space),
    Phase("inode_btrees", PER_AG, btrees.phase_inode_btrees),
    Phase("refcounts", PER_AG, btrees.phase_refcounts),
    Phase("inodes", PER_AG, inodes.phase_inodes),
    Phase("unlinked", PER_AG, agheaders.phase_unlinked),
    Phase("namespace", GLOBAL, namespace.phase_namespace),
    Phase("space_map", GLOBAL, spacemap.phase_space_map),
    Phase("counters", GLOBAL, summary.phase_counters),
    Phase("log", GLOBAL, summary.phase_log),
)


class Checker(CheckContext):
    """The check context with fstool check's phase registry, and the
    geometry its inode and directory modules read by.  The phases are
    functions of it (``PHASES``); what repair and the tests call is
    public in the phase modules."""
    PHASES = PHASES

    def __init__(self, fs, progress=None, ag_filter=None, hooks: CheckHooks | None = None):
        super().__init__(fs, progress, ag_filter, hooks)
        inodes.setup_inode_geometry(self)
        dirs.setup_dir_geometry(self)


# the buffer cache's bound while a check runs
CHECK_CACHE_BYTES = 4 << 20


def check(fs, progress=None, jobs: int = 1) -> Checker:
    """Check ``fs``; ``progress(phase, done, total)``, if given, hears of each
    phase as it starts (done 0, total None) and of the steps of the long ones
    (inode chunks, directories)."""
    c = Checker(fs, progress)
    # the check reads each metadata block once or nearly (a directory's
    # blocks while it is walked): a small buffer cache serves it as well as
    # the default 64 MiB and keeps its peak memory down (dirty and pinned
    # buffers of a write session are never evicted)
    cache = getattr(fs, "cache", None)
    bound = getattr(cache, "max_bytes", None)
    if bound is not None:
        cache.max_bytes = min(bound, CHECK_CACHE_BYTES)
    try:
        with gc_paused():
            c.run(jobs)
    finally:
        if bound is not None:
            cache.max_bytes = bound
    return c
