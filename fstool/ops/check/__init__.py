"""fstool check: every check xfs_repair -n makes on a v5 image (and the
kernel's verifiers where they are stricter), as findings from one problem
table (ops/problems.py).

The check is a list of phases, one module each; each records findings and
never stops the run: a structure that cannot be read becomes a finding, and
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
from .agheaders import AGGeometry, AGHeaderPhase
from .base import (EXIT_CLEAN, EXIT_CORRUPT, EXIT_DIRTY_LOG, EXIT_OPERATIONAL, CheckerBase,
                   Finding)
from .btrees import BtreePhases
from .dirs import DirChecks
from .inodes import InodePhase
from .namespace import NamespacePhase
from .parents import ParentPointerChecks
from .spacemap import SpaceMapPhase
from .summary import SummaryPhases
from .superblocks import SuperblockPhase
from .table import InodeTable
from .xattrs import XattrChecks

__all__ = ["Checker", "Finding", "InodeTable", "check", "EXIT_CLEAN", "EXIT_CORRUPT",
           "EXIT_DIRTY_LOG", "EXIT_OPERATIONAL"]


class Checker(SuperblockPhase, AGHeaderPhase, BtreePhases, InodePhase, XattrChecks,
              DirChecks, NamespacePhase, ParentPointerChecks, SpaceMapPhase, SummaryPhases,
              AGGeometry, CheckerBase):
    FIRST_PHASES = ("superblocks",)
    AG_PHASES = ("ag_headers", "free_space", "inode_btrees", "refcounts", "inodes",
                 "unlinked")
    GLOBAL_PHASES = ("namespace", "space_map", "counters", "log")
    PHASES = FIRST_PHASES + AG_PHASES + GLOBAL_PHASES

    def __init__(self, fs, progress=None, ag_filter=None):
        super().__init__(fs, progress, ag_filter)
        self.setup_geometry()
        self.setup_inode_geometry()
        self.setup_dir_geometry()


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
