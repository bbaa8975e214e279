"""fstool repair: mend what check finds, on the one journaled write path.

Repair is driven by check (:mod:`fstool.ops.check`): every finding maps to
an action (:mod:`.actions`, the repair column of docs/check-problems.md) or
is reported as not repaired, with the reason.  The actions:

* an AG whose free space or inode btrees, free list or AGF/AGI counters are
  wrong is rebuilt whole (:mod:`.agbuild`): the inode records from check's
  inobt records and the chunks found on disk, the free space from the space
  map of every owner, each tree bulk-loaded into blocks reserved from the
  space that is free now (never from the trees being replaced);
* directories, '.' and '..', link counts and files no directory reaches
  (:mod:`.namespace`, xfs_repair's phases 6 and 7): damaged directories are
  rebuilt from the entries that can be read and are valid, the rest goes
  to lost+found; its directory blocks are reserved from free space and the
  blocks it gives up freed by the AG rebuild, which runs after it;
* the superblock counters are summed from the AGs;
* parent pointers (:mod:`.parents`, the end of xfs_repair's phase 6):
  every inode the other phases or check's findings touch gets the parent
  pointers of the entries naming it;
* secondary superblocks are rewritten from the primary;
* inodes (the inode phase, :mod:`.inodes`, run first): fields fixed in
  place, inodes cleared or attr forks dropped as xfs_repair does, unlinked
  buckets emptied, bad quota inode numbers cleared; the AGs holding what
  they gave back are rebuilt with it free.

``--rebuild`` forces the AG rebuild in every AG (``finobt``, ``inobt``,
``bnobt``, ``cntbt``, ``agfl`` or ``all``: the trees of an AG are rebuilt
together); ``--add-finobt`` turns on the free inode btree of an image made
without one (the trees in every AG, the feature bit in every superblock).

Everything is one transaction of a write session (:class:`fstool.ns.writer.Writer`):
the new tree blocks are written in place (free space until the commit),
the headers logged, one checkpoint commits it all.  A repair killed at
any moment leaves, once the log is replayed, the image as it was or
repaired.  ``undo_file`` saves every range before it is first overwritten
(:mod:`fstool.io.undo`).

All or nothing: when the plan leaves findings that repair cannot mend,
nothing is written (``RepairResult.refused``) unless ``partial`` is asked
for.  The steps that write before the plan can be made (the primary
superblock's restore, the extension of a cut image, its log's format) are
recorded in an undo file first (the user's, else a scratch one) and put
back (:func:`_put_back`).

A repair that rewrites more existing metadata than the log holds in one
transaction (a small log, a deeply truncated image) is written in place
instead, as xfs_repair writes, with an undo file as its crash guard (the
user's ``undo_file``, else :func:`guard_path` beside the image, removed at
the end): the primary superblock is first marked in progress
(``sb_inprogress``: the kernel refuses to mount it), every range is saved
in the guard before it is overwritten, and the mark is cleared last, once
everything is durable.  A kill on the way leaves the image marked and the
guard incomplete; the next ``fstool repair`` puts the saved ranges back
first (:func:`recover_interrupted`: the image as it was before) and repairs
it from there.
"""
from __future__ import annotations

import dataclasses
import os
import struct
import tempfile

from ..._backend import parsers
from ...errors import (BadValue, FsToolError, ImageTruncatedError, NoSpaceError, UnsupportedError,
                       WriteRefused)
from ...format import constants as C
from ...format.structs import SB
from ...fs import btree as B
from ...fs.filesystem import Filesystem
from ...fs.logstate import log_is_clean
from ...io import verify as V
from ...io.device import Device
from ...io.logdev import replay_command
from ...io.lock import ImageLock, refuse_if_mounted
from ...io.signals import held
from ...io.undo import (UndoError, UndoRecorder, apply_undo, read_undo, refuse_external_log,
                       roll_back)
from ...ns.writer import Writer
from ..check import Checker
from ..check.base import Finding
from ..check.superblocks import root_ino
from ..logops import zero
from ..names import shown_name
from . import primary
from .actions import (AG, COUNTERS, INODE, LOG, NAMESPACE, PARENT, REBUILT_TREES, SB_FIELD,
                      SECONDARY, action_of)
from .agbuild import AGPlan, RepairError, raw_buf
from .checker import repair_checker
from .inodes import paths_of, plan_inodes
from .namespace import NamespaceError, plan as ns_plan
from .parents import plan as pptr_plan

EXIT_CLEAN, EXIT_REPAIRED, EXIT_CANNOT = 0, 1, 4
TREES = ("finobt", "inobt", "bnobt", "cntbt", "agfl", "refcountbt", "all")


@dataclasses.dataclass
class RepairResult:
    findings: list                         # what check found first
    actions: list                          # (finding, action, text)
    changes: list                          # what was (or, with -n, would be) changed
    unrepaired: list                       # (finding, reason) left as they are
    written: bool = False
    dry_run: bool = False
    forced: bool = False
    # --extend-truncated: the paths of files whose data lay past the cut
    # (it reads as zeros now); None when the image was not extended
    zeroed: list | None = None
    # problems remain that repair cannot mend and --partial was not given:
    # nothing was (with -n: would be) written; ``withheld`` is what
    # --partial would change
    refused: bool = False
    withheld: list = dataclasses.field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if self.unrepaired:
            return EXIT_CANNOT
        if self.findings and self.changes:
            return EXIT_REPAIRED
        return EXIT_CLEAN


def refuse_unusable(fs, path) -> None:
    """Images repair does not write: a dirty log, unknown or unsupported
    features (the same rules as every writer)."""
    clean, why = log_is_clean(fs)
    if not clean:
        raise WriteRefused(f"{path}: the log is dirty ({why}); replay it first with "
                           f"'{replay_command(path)}' (or mount and unmount it)")


def plan(checker, *, rebuild=(), add_finobt: bool = False, scan: bool = True):
    """(AG plans, secondary superblocks, counters?, changes, actions,
    unrepaired, (inode plan, namespace plan or None, parent pointer plan or
    None)) for the findings of ``checker`` and the options."""
    fs = checker.fs
    sb = fs.sb
    findings = checker.findings
    actions, unrepaired = [], []
    ag_set, secondaries = set(), set()
    counters = False
    recheck = set()
    scan_ags = set()
    refc_ags = set()
    sb_fixes = checker.sb_fixes = {}        # primary superblock field -> value
    checker.log_cycle = 0                   # format the log at this cycle at the end
    ns_findings = []
    pptr_findings = []
    # the inode phase (xfs_repair's phases 3 and 4) is planned first: what
    # it clears is free to every later phase
    inodes = plan_inodes(checker)
    for f in findings:
        action, text = action_of(f)
        if f.code == "SPACE_OVERLAP" and f.agno is not None:
            action = AG             # settled below: kept owners' overlaps are not
        if action == LOG and not (isinstance(f.found, int) and (f.found >> 32) + 1 < 1 << 31):
            # no log cycle can be past it: what the AG rebuild rewrites gets
            # the log's LSN, anything else stays
            if f.structure in REBUILT_TREES and f.agno is not None:
                action, text = AG, "rebuilt with the AG, stamped with the log's current LSN"
            else:
                action, text = "none", ("reported, not repaired: the LSN is past every cycle "
                                        "a log can be formatted at")
        actions.append((f, action, text))
        if action == AG:
            ag_set.add(f.agno)
            if f.structure == "refcountbt" or f.code == "AGF_REFCOUNT_BLOCKS":
                refc_ags.add(f.agno)
            if f.code == "INOBT_INODE" and f.ino is not None:
                recheck.add(f.ino)
            if f.code in ("SPACE_UNACCOUNTED", "AGI_HEADER") or (
                    f.structure in ("inobt", "finobt", "agi") and f.code.startswith("BTREE_")) \
                    or (f.code == "INOBT_RECORD" and f.index is None and f.block is not None):
                # (the last: a block of several chunks with a part no record names)
                scan_ags.add(f.agno)
        elif action == COUNTERS:
            counters = True
        elif action == SECONDARY:
            secondaries.add(f.agno)
        elif action == INODE or inodes.settles(f):
            why = inodes.reason(f)
            if why:
                unrepaired.append((f, why))
        elif action == SB_FIELD and f.field and f.expected is not None:
            sb_fixes[f.field] = f.expected
        elif action == LOG:
            checker.log_cycle = max(checker.log_cycle, (f.found >> 32) + 1)
        elif action == NAMESPACE:
            ns_findings.append(f)
        elif action == PARENT:
            pptr_findings.append(f)
        elif f.severity == "error":
            unrepaired.append((f, text))
    ag_set.update(inodes.ags)
    if rebuild or add_finobt:
        ag_set.update(range(sb.agcount))
    rmap = sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_RMAPBT)
    reflink = sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK)
    if reflink and ("refcountbt" in rebuild or "all" in rebuild):
        refc_ags.update(range(sb.agcount))
    if reflink:
        refc_ags.update(inodes.ags)     # blocks a cleared inode shared are shared less
    finobt = add_finobt or sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_FINOBT)
    # directory entries naming an inode the inode phase clears (one check
    # kept: a bad symlink, a file claiming another's blocks) are the
    # namespace phase's to remove, as are the namespace findings
    dangling = list(inodes.dangling(checker))
    # -- phases, in xfs_repair's order: the inodes (planned above), the
    # namespace (treating what the inode phase clears as free), then the AGs
    # and counters
    root_cleared = root_ino(checker) in inodes.cleared
    ns = _plan_namespace(checker, inodes, ns_findings, unrepaired) \
        if (ns_findings or dangling or inodes.orphaned or root_cleared) else None
    if ns is None and root_cleared:
        inodes.withdraw_root(root_ino(checker), "the namespace phase cannot run")
        unrepaired.extend(fu for fu in inodes.unrepaired if fu not in unrepaired)
    if ns is None and inodes.orphaned:
        # inodes in use with no links an unlinked list chains go to
        # lost+found when the lists are emptied: without the namespace phase
        # the lists stay
        inodes.withdraw_unlinked("the namespace phase cannot run")
        unrepaired.extend(fu for fu in inodes.unrepaired if fu not in unrepaired)
    if ns is None:
        for ino, f in dangling:
            unrepaired.append((f, f"reported, not repaired: inode {ino} is cleared but "
                               "directory entries still name it and the namespace phase "
                               "cannot run"))

    # the parent pointers (the end of phase 6), before the AGs: an attr fork
    # they make in blocks reserves them where the namespace phase reserves
    # its own (``blocks``: that phase's plan, or one of their own)
    pp = _plan_parents(checker, inodes, ns, pptr_findings, unrepaired)
    blocks = pp.blocks if pp is not None and pp.reserves else ns

    if rmap and (ag_set or ns or blocks):
        # an rmapbt image: whatever changes an AG's blocks rebuilds every
        # AG's rmapbt from the owners found, as xfs_repair's phase 5 does
        ag_set.update(range(sb.agcount))

    def ag_plans():
        # while anything stays unrepaired (an inode, a block map, a structure
        # check could not read), who owns the blocks no one claims is not
        # known: they are left as they are rather than freed
        return _plan_ags(checker, ag_set | inodes.ags | (blocks.ags if blocks else set()),
                         actions, finobt, recheck, scan and scan_ags, not unrepaired,
                         reflink and refc_ags, blocks, inodes)

    plans, ag_changes, failed, unrep_ags = ag_plans()
    if failed & (inodes.ags | (blocks.ags if blocks else set())):
        # an AG a phase needs cannot be rebuilt: the inode phase is withdrawn
        # there, the namespace phase altogether (what it planned assumed the
        # inodes cleared), and the AGs planned again
        missing = failed & inodes.ags
        if missing:
            inodes.withdraw(missing, "the AG holding the inode or its blocks cannot be rebuilt")
            unrepaired.extend(fu for fu in inodes.unrepaired if fu not in unrepaired)
        if ns is not None:
            unrepaired.extend((f, "reported, not repaired: an AG the namespace phase needs "
                               "cannot be rebuilt") for f in ns_findings)
            unrepaired.extend((f, f"reported, not repaired: inode {ino} is cleared but "
                               "directory entries still name it") for ino, f in dangling
                              if ino in inodes.cleared)
            ns = None
        if pp is not None:
            # the parent pointers were planned on what the phases before
            # would do: they are not written
            unrepaired.extend((f, "reported, not repaired: an AG the repair needs cannot be "
                               "rebuilt") for f in pptr_findings
                              if all(f is not u[0] for u in unrepaired))
            pp = None
        blocks = ns
        ag_set.difference_update(failed)
        plans, ag_changes, failed, unrep_ags = ag_plans()
    unrepaired.extend(unrep_ags)
    # a clear or a dropped attr fork names the file it costs
    lost = [i for i, ch in inodes.changes.items() if ch.clear or ch.drop_attr]
    names = paths_of(fs, lost) if lost else {}
    changes = [inodes.changes[i].describe(names.get(i)) for i in sorted(inodes.changes)] + \
        inodes.notes
    if ns:
        changes.extend(ns.changes)
    if pp:
        changes.extend(pp.changes)
    changes.extend(ag_changes)
    if plans:
        counters = True
    if add_finobt:
        changes.append("superblocks: the free inode btree feature (finobt) is set")
        secondaries.update(range(1, sb.agcount))
    if counters:
        changes.append("superblock: sb_icount, sb_ifree and sb_fdblocks summed from the AGs")
    for field, value in sorted(sb_fixes.items()):
        if field == "sb_lsn":
            changes.append("superblock: stamped with the repair's LSN (its sb_lsn was ahead of "
                           "the log)")
        else:
            changes.append(f"superblock: {field} set to {value}")
    if checker.log_cycle:
        changes.append(f"log: formatted anew at cycle {checker.log_cycle} or later, past the "
                       "highest LSN the metadata carries")
    for agno in sorted(secondaries):
        if agno:
            changes.append(f"AG {agno}: secondary superblock rewritten from the primary")
    return (plans, sorted(secondaries - {0}), counters, changes, actions, unrepaired,
            (inodes, ns, pp))


def _plan_parents(checker, inodes, ns, findings, unrepaired):
    """The parent pointer phase's plan (None on a filesystem without parent
    pointers or when nothing touches them); its findings it cannot mend
    go to ``unrepaired``."""
    touched = findings or ns or inodes.attr_dropped or \
        any(not ch.clear for ch in inodes.changes.values())
    if not checker.fs.has_parent_pointers or not touched:
        return None
    pp = pptr_plan(checker, inodes, ns, findings)
    for f in findings:
        why = pp.unrepaired.get(f.ino)
        if why is not None:
            unrepaired.append((f, why))
    return pp


def _plan_namespace(checker, inodes, ns_findings, unrepaired):
    """The namespace phase's plan, or None (its findings then unrepaired)."""
    try:
        return ns_plan(checker, inodes.cleared, inodes.mended())
    except NamespaceError as e:
        unrepaired.extend((f, f"reported, not repaired: {e}") for f in ns_findings)
        return None


def _plan_ags(checker, ag_set, actions, finobt, recheck, scan_ags, free_leaks, refc_ags, ns,
              inodes):
    """(AG plans, changes, AGs that cannot be rebuilt, unrepaired)."""
    scan_ags = scan_ags or set()
    refc_ags = refc_ags or set()
    unrepaired = []
    failed = set()
    plans = {}
    changes = []
    for agno in sorted(ag_set):
        if agno not in checker.agf or agno not in checker.agi:
            for f, action, _t in actions:
                if f.agno == agno and action == AG:
                    unrepaired.append((f, "reported, not repaired: the AG's AGF or AGI "
                                       "cannot be read; rebuilding AG headers from scratch is "
                                       "not supported yet"))
            failed.add(agno)
            continue
        try:
            p = AGPlan(checker, agno, finobt=finobt, recheck_inos=recheck,
                       scan_lost=agno in scan_ags, free_leaks=free_leaks,
                       refcount=agno in refc_ags, ns=ns, inodes=inodes)
        except RepairError as e:
            for f, action, _t in actions:
                if f.agno == agno and action == AG:
                    unrepaired.append((f, f"reported, not repaired: {e}"))
            failed.add(agno)
            if getattr(e, "fixes", None) and hasattr(checker.hooks, "pending_fixes"):
                checker.hooks.pending_fixes[agno] = e.fixes
            continue
        if p.overlaps:
            for f, action, _t in actions:
                if f.agno == agno and f.code == "SPACE_OVERLAP" and any(
                        s <= (f.block or 0) < s + n for s, n in p.overlaps):
                    unrepaired.append((f, "reported, not repaired: two kinds of metadata "
                                       "claim the block"))
        plans[agno] = p
        changes.extend(p.notes)
        changes.append(p.summary())
    return plans, changes, failed, unrepaired


def finobt_reservation(fs, agno: int) -> int:
    """Blocks the kernel reserves in an AG for its finobt when it mounts
    (xfs_finobt_calc_reserves: a finobt as big as the AG's inode capacity
    could make it, xfs_inobt_max_size)."""
    sb = fs.sb
    agblocks = fs.ag_length(agno)
    if sb.logstart and (sb.logstart >> sb.agblklog) == agno:
        agblocks -= sb.logblocks        # the log never needs btree room
    n = (agblocks << sb.inopblog) // 64
    bt = B.inobt_type(sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_SPINODES), True)
    limits = (bt.maxrecs(sb.blocksize, True) // 2, bt.maxrecs(sb.blocksize, False) // 2)
    # xfs_btree_calc_size: every level of half-full blocks up to one root
    blocks, level = 0, 0
    while n > 1:
        per = limits[1 if level else 0]
        n = -(-n // per)
        blocks += n
        level += 1
    return blocks


def _check_and_plan(fs, progress, jobs, rebuild, add_finobt):
    """Check, plan; when the plan finds inode chunks no inobt record names,
    or derives inobt records check reported again from the inodes on disk,
    check again with those records (so the inodes are looked at and the
    blocks their files own are claimed), and plan from that."""
    c = repair_checker(fs, progress)
    c.run(jobs)
    first = c.findings
    out = plan(c, rebuild=rebuild, add_finobt=add_finobt)
    fixes = {agno: f for agno, p in out[0].items() if (f := p.chunk_fixes())}
    # and those an AG's plan found before it ran out of free space (every
    # block no one claimed is kept while anything is unrepaired)
    fixes.update(c.hooks.pending_fixes)
    if fixes:
        old = {agno: {r[0]: r for r in c.chunks.get(agno, ())} for agno in fixes}
        c = repair_checker(fs, progress, chunk_fixes=fixes)
        c.run(1)
        out = plan(c, rebuild=rebuild, add_finobt=add_finobt, scan=False)
        for agno, f in fixes.items():
            if agno in out[0]:
                notes = out[0][agno].fix_notes(f, old[agno])
                out[0][agno].notes[:0] = notes
                out[3][:0] = notes
    return c, first, out


def repair(path, *, dry_run: bool = False, rebuild=(), add_finobt: bool = False,
           undo_file=None, jobs: int = 1, progress=None,
           extend_truncated: bool = False, partial: bool = False) -> RepairResult:
    """Check ``path`` and mend what can be mended; see the module docstring.
    ``extend_truncated``: an image file shorter than its superblock says is
    first extended with zeros to its full size (else repair stops).

    All or nothing: when the plan leaves problems it cannot repair, nothing
    is written (``result.refused``; what the steps before the plan wrote,
    the primary superblock's restore, the extension and the cut log's
    format, is put back) unless ``partial``, which writes what can be
    repaired."""
    path = os.fspath(path)
    for t in rebuild:
        if t not in TREES:
            raise BadValue(f"--rebuild: unknown tree {t!r} (one of {', '.join(TREES)})")
    refuse_if_mounted(path)
    _refuse_unsupported(path)
    if undo_file is not None and not dry_run:
        refuse_external_log(path, "repair")
    rolled_back = None if dry_run else recover_interrupted(path, undo_file)
    restored, recorder = _primary_phase(path, dry_run, undo_file)
    if restored is not None and dry_run:
        # what follows depends on the primary, which -n does not write
        f = _primary_finding(restored)
        return RepairResult([f], [(f, "primary", restored.change)],
                            [restored.change, "the rest is checked once the primary is "
                             "restored (run without -n)"], [], dry_run=True)
    grown = None
    if extend_truncated:
        try:
            grown, recorder = _extend_phase(path, dry_run, undo_file, recorder)
        except BaseException:
            if recorder is not None and not _drop_scratch(recorder):
                recorder.close()
            raise
    log_cut = grown is not None and not dry_run and _log_cut_off(path, grown, recorder)
    if grown is not None and dry_run:
        f = grown
        return RepairResult([f], [(f, "extend", f.message)],
                            [_extended_text(f, True)] +
                            _log_cut_text(getattr(f, "log_cut", False), True) +
                            ["the rest is checked once the image is extended (run without "
                             "-n)"], [], dry_run=True)
    try:
        result = _repair(path, dry_run, rebuild, add_finobt, undo_file, jobs, progress,
                         recorder, partial)
    except FsToolError as e:
        # repair stops before its transaction wrote anything: what was
        # written before the plan goes back too
        _put_back(path, recorder)
        if not isinstance(e, ImageTruncatedError) or extend_truncated or \
                "superblock describes" not in str(e):
            raise
        raise ImageTruncatedError(f"{e}; --extend-truncated extends it with zeros to that "
                                  "size and repairs the rest") from None
    finally:
        _drop_scratch(recorder)
        if recorder is not None and recorder.fd >= 0:
            # the primary was restored and nothing else written (or the rest
            # failed): the undo file still gives the old primary back
            dev = Device(path)
            try:
                recorder.finish(dev)
            finally:
                dev.close()
    if result.refused:
        # nothing written: what the steps before the plan would do is told
        # with the rest of what --partial would change
        if grown is not None:
            result.findings.insert(0, grown)
            result.actions.insert(0, (grown, "extend", grown.message))
            result.withheld[:0] = [_extended_text(grown, True)] + _log_cut_text(log_cut, True)
        if restored is not None:
            f = _primary_finding(restored)
            result.findings.insert(0, f)
            result.actions.insert(0, (f, "primary", restored.change))
            result.withheld.insert(0, restored.change)
        if rolled_back is not None:
            result.changes.insert(0, f"an interrupted repair rolled back ({rolled_back} bytes "
                                     "put back from its undo file)")
        return result
    if grown is not None:
        result.findings.insert(0, grown)
        result.actions.insert(0, (grown, "extend", grown.message))
        result.zeroed = _zeroed_paths(path, grown.found)
        result.changes[:0] = [_extended_text(grown, False)] + _log_cut_text(log_cut, False) + \
            [_zeroed_text(result.zeroed)]
        result.written = True
    if rolled_back is not None:
        result.changes.insert(0, f"an interrupted repair rolled back ({rolled_back} bytes "
                                 "put back from its undo file)")
    if restored is not None:
        f = _primary_finding(restored)
        result.findings.insert(0, f)
        result.actions.insert(0, (f, "primary", restored.change))
        result.changes.insert(0, restored.change)
        result.written = True
    return result


def _refuse_unsupported(path) -> None:
    """An image of a layout repair does not handle (primary.unsupported)
    is refused before anything else looks at it: nothing is searched for or
    written.  (Feature bits are judged on the superblock phase 1 keeps:
    primary.settle.)"""
    dev = Device(path)
    try:
        why = primary.unsupported(dev)
    finally:
        dev.close()
    if why is not None:
        raise UnsupportedError(f"{path}: not supported: {why}; nothing was written")


def _primary_finding(plan):
    return Finding("SB_PRIMARY", f"primary superblock: {plan.why}", structure="sb", agno=0,
                   block=0)


def _extend_phase(path, dry_run, undo_file, recorder):
    """(IMAGE_TRUNCATED finding, undo recorder) when ``path`` is an image
    file shorter than the filesystem its primary superblock describes: the
    file is extended with zeros to that size (unless ``dry_run``), the old
    size kept in ``undo_file`` (``fstool undo`` cuts the file back);
    (None, recorder) when it is not short."""
    dev = Device(path, writable=not dry_run)
    try:
        with ImageLock(dev, path):
            head = dev.pread(0, min(dev.size, C.BBSIZE)) if dev.size >= C.BBSIZE else b""
            if len(head) < SB.size or head[:4] != b"XFSB":
                return None, recorder
            f = SB.unpack(head)
            need = f["sb_dblocks"] * f["sb_blocksize"]
            agcount, agblocks = f["sb_agcount"], f["sb_agblocks"]
            # only a size the AG geometry agrees with (as the kernel checks
            # dblocks): a damaged dblocks never grows the file
            if dev.fixed_size or dev.size >= need or not 0 < need < 1 << 63 or \
                    not (agcount - 1) * agblocks < f["sb_dblocks"] <= agcount * agblocks:
                return None, recorder
            ag = f["sb_agblocks"] * f["sb_blocksize"]
            first = dev.size // f["sb_blocksize"]
            found = _TruncatedImage("IMAGE_TRUNCATED",
                            f"the image holds {dev.size} bytes, the superblock describes "
                            f"{need}: blocks {first} to {f['sb_dblocks'] - 1} (from AG "
                            f"{dev.size // ag if ag else 0}) are missing", structure="sb",
                            agno=0, block=0, field="size", expected=need, found=dev.size)
            # an internal log whose end is cut off: what it held past the cut
            # is gone (formatted anew when it then reads dirty: _log_cut_off)
            log = f["sb_logstart"]
            if log:
                bs = f["sb_blocksize"]
                end = ((log >> f["sb_agblklog"]) * agblocks + (log & ((1 << f["sb_agblklog"]) - 1))
                       + f["sb_logblocks"]) * bs
                found.log_cut = end > dev.size
            if dry_run:
                return found, recorder
            if recorder is None:
                extra = [(agno * ag, 4 * f["sb_sectsize"])
                         for agno in range(f["sb_agcount"]) if agno * ag < dev.size]
                recorder = _pre_recorder(dev, undo_file, extra)
                os.fsync(recorder.fd)           # the old size is on disk first
            dev.resize(need)
            dev.fsync()
            return found, recorder
    finally:
        dev.close()


class _TruncatedImage(Finding):
    """The IMAGE_TRUNCATED finding of --extend-truncated, with whether the
    cut ran through an internal log (``log_cut``)."""
    __slots__ = ("log_cut",)

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.log_cut = False


def _log_cut_off(path, grown, recorder) -> bool:
    """An internal log the cut ran through (``grown.log_cut``: part of it
    now the zeros the image was extended with) cannot be replayed: what it
    held past the cut is lost.  When it reads as dirty it is formatted anew,
    as xfs_repair -L does (its old sectors saved in the undo file when there
    is one); a log that still reads clean holds nothing to replay and is left
    as it is.  Returns whether it was formatted."""
    if not getattr(grown, "log_cut", False):
        return False
    fs = Filesystem(path)
    try:
        if log_is_clean(fs)[0]:
            return False
    finally:
        fs.close()
    zero(path, undo=recorder)
    return True


def _extended_text(f, dry_run: bool) -> str:
    return (f"the image {'would be' if dry_run else 'was'} extended from {f.found} to "
            f"{f.expected} bytes with zeros (the {f.expected - f.found} bytes cut off are "
            "lost: metadata there is repaired like any damage, file data there reads as "
            "zeros)")


def _zeroed_paths(path, size: int) -> list:
    """The paths (text, surrogateescape) of the files whose data lay, in
    whole or in part, past the first ``size`` bytes of the image: what
    extending a cut image made zeros.  Read from the repaired image."""
    out = []
    with Filesystem(path) as fs:
        bs = fs.sb.blocksize
        try:
            for p, node in fs.walk("/"):
                if not node.is_reg:
                    continue
                for _off, start, count, _unwritten in node.extents():
                    if (fs.fsb_to_daddr(start) << C.BBSHIFT) + count * bs > size:
                        out.append(p)
                        break
        except FsToolError as e:
            out.append(f"(the walk stopped: {e})")
    return out


def _zeroed_text(paths: list) -> str:
    if not paths:
        return "no file had data in the part cut off"
    shown = ", ".join(shown_name(p) for p in paths[:20])
    more = f" and {len(paths) - 20} more (--json lists them all)" if len(paths) > 20 else ""
    return f"data lost (it reads as zeros) in {len(paths)} file(s): {shown}{more}"


def _log_cut_text(cut: bool, dry_run: bool) -> list:
    if not cut:
        return []
    if dry_run:
        return ["log: its end was cut off with the image; if it reads dirty once the image is "
                "extended it would be formatted anew (what it held that was not on disk is "
                "lost, as with xfs_repair -L)"]
    return ["log: its end was cut off with the image and it read dirty, so it was formatted "
            "anew (what it held that was not on disk is lost, as with xfs_repair -L)"]


def _primary_phase(path, dry_run, undo_file):
    """(plan, undo recorder) when the primary superblock cannot be trusted
    or the secondaries outvote its geometry, and a secondary can replace it
    (written now unless ``dry_run``, saved first in ``undo_file``); (None,
    None) when the primary is good.  Raises what primary.settle raises
    (nothing written)."""
    dev = Device(path, writable=not dry_run)
    recorder = None
    try:
        with ImageLock(dev, path):
            plan = primary.settle(dev)
            if plan is None:
                return None, None
            if dry_run:
                return plan, None
            recorder = _pre_recorder(dev, undo_file, plan.header_sectors())
            dev.write_hook = recorder
            primary.restore(dev, plan)
            dev.write_hook = None
            return plan, recorder
    except BaseException:
        if recorder is not None and not _drop_scratch(recorder):
            recorder.close()
        raise
    finally:
        dev.close()


def guard_path(path) -> str:
    """The crash guard of a repair written in place: an undo file beside
    the image (the user's ``--undo-file`` serves when one is given)."""
    return os.fspath(path) + ".fstool-repair-undo"


def _sb_inprogress(dev) -> int:
    raw = dev.pread(0, 512)
    return raw[SB.offset("sb_inprogress")] if raw[:4] == b"XFSB" else 0


def _mark_in_progress(dev, value: int) -> None:
    """The primary superblock's sb_inprogress set to ``value`` (its CRC
    made again) and made durable: while set, the kernel refuses to mount the
    image and the next repair rolls the interrupted one back."""
    (sect,) = struct.unpack_from(">H", dev.pread(0, 512), SB.offset("sb_sectsize"))
    buf = bytearray(dev.pread(0, max(512, sect)))
    buf[SB.offset("sb_inprogress")] = value
    parsers.stamp_cksum(buf, 0, len(buf), C.XFS_SB_CRC_OFF)
    dev.pwrite(0, bytes(buf))
    dev.fsync()


def recover_interrupted(path, undo_file=None) -> int | None:
    """A repair written in place and killed on the way left the image marked
    in progress and its crash guard incomplete: put back what the guard
    saved (the image is then as it was before that repair) and remove it.
    Returns the bytes restored, or None when there was nothing to recover."""
    guards = [g for g in (undo_file, guard_path(path)) if g is not None and
              os.path.exists(g)]
    dev = Device(path, writable=True)
    lock = ImageLock(dev, path)
    try:
        # another fstool repairing in place holds the image: never roll
        # back under it (ImageBusy)
        lock.__enter__()
    except BaseException:
        dev.close()
        raise
    try:
        if not _sb_inprogress(dev):
            return None
        for g in guards:
            try:
                if read_undo(g, partial=True)[3] is not None:
                    continue            # complete: the repair that wrote it finished
            except UndoError:
                continue
            n = roll_back(dev, g)
            if g == guard_path(path):
                os.unlink(g)
            return n
        return None
    finally:
        lock.__exit__(None, None, None)
        dev.close()


def _repair(path, dry_run, rebuild, add_finobt, undo_file, jobs, progress, recorder,
            partial=False):
    if dry_run:
        return _repair_once(path, dry_run, rebuild, add_finobt, undo_file, jobs, progress,
                            recorder, partial=partial)
    try:
        return _repair_once(path, dry_run, rebuild, add_finobt, undo_file, jobs, progress,
                            recorder, partial=partial)
    except NoSpaceError as e:
        if "more than the log" not in str(e):
            raise
    # more existing metadata to rewrite than the log holds in one
    # transaction (nothing was written): written in place, as xfs_repair
    # writes, with the undo file as the crash guard (see the module
    # docstring)
    return _repair_once(path, dry_run, rebuild, add_finobt, undo_file, jobs, progress,
                        recorder if recorder is not None and recorder.fd >= 0 else None,
                        in_place=True, partial=partial)


def _repair_once(path, dry_run, rebuild, add_finobt, undo_file, jobs, progress, recorder,
                 in_place: bool = False, partial: bool = False):
    if dry_run:
        fs = Filesystem(path)
        lock = ImageLock(fs.dev, path)
        try:
            lock.__enter__()
        except BaseException:
            fs.close()
            raise
        try:
            _refuse(fs, path, add_finobt)
            c, first, (plans, secs, counters, changes, actions, unrep, _ph) = \
                _check_and_plan(fs, progress, jobs, rebuild, add_finobt)
            if add_finobt:
                _check_finobt_room(fs, plans)
            return _refused(RepairResult(first, actions, changes, unrep, dry_run=True,
                                         forced=bool(rebuild or add_finobt)), partial)
        finally:
            lock.__exit__(None, None, None)
            fs.close()
    # the AG rebuild writes every AG's rmapbt anew (plan()), so repair may
    # open an rmapbt image for writing; the parent pointer phase keeps the
    # pointers of everything the other phases change (exchange-range leaves
    # nothing on disk to keep)
    w = Writer(path, rebuilds_rmapbt=True, clears_needsrepair=True, keeps_parents=True,
               logged=not in_place)
    guard = None
    given = recorder
    retried = False         # the in-place retry goes on recording into ``given``
    try:
        fs = w.fs
        _refuse(fs, path, add_finobt)
        c, first, (plans, secs, counters, changes, actions, unrep, phases) = \
            _check_and_plan(fs, progress, jobs, rebuild, add_finobt)
        if add_finobt:
            _check_finobt_room(fs, plans)
        result = _refused(RepairResult(first, actions, changes, unrep,
                                       forced=bool(rebuild or add_finobt)), partial)
        if result.refused:
            # all or nothing: the steps before the plan are put back too
            w.close()
            _put_back(path, recorder)
            return result
        if recorder is not None:
            # what was written before the plan stays (the scratch record of
            # it goes; an undo file the user asked for goes on recording)
            recorder.kept = True
            if _drop_scratch(recorder):
                recorder = None
        if not changes:
            return result
        with held():      # a signal waits until the repair is written whole
            if in_place and recorder is None:
                guard = undo_file if undo_file is not None else guard_path(path)
            if recorder is None and (undo_file is not None or guard is not None):
                recorder = UndoRecorder(fs.dev, guard or undo_file, _digest_sectors(fs))
            if recorder is not None:
                recorder.dev = fs.dev
                fs.dev.write_hook = recorder
            if in_place:
                # the first write: the image is marked in progress (its old
                # superblock saved in the guard first)
                _mark_in_progress(fs.dev, 1)
            _apply(w, c, plans, secs, counters, add_finobt, phases, in_place)
            w.close()
            if c.log_cycle:
                zero(path, min_cycle=c.log_cycle, undo=recorder)
            if in_place:
                # every block is written and durable: the mark goes, last
                dev = Device(path, writable=True)
                dev.write_hook = recorder
                try:
                    _mark_in_progress(dev, 0)
                finally:
                    dev.close()
            result.written = True
            if recorder is not None:
                fs.dev.write_hook = None
                dev = Device(path)
                try:
                    recorder.finish(dev)
                finally:
                    dev.close()
                recorder = None
                if guard is not None and guard != undo_file:
                    os.unlink(guard)
            if result.unrepaired:
                result.unrepaired = _remaining(path, jobs, result.unrepaired)
            return result
    except NoSpaceError as e:
        # too much for the log (nothing committed): _repair writes it in
        # place, and the undo file the user gave, which holds what was
        # written before the plan (the primary's restore, the extension),
        # stays open for it, so that undo gives back the image as it was
        # before the whole run
        retried = not in_place and "more than the log" in str(e) and \
            recorder is not None and recorder is given
        raise
    finally:
        if recorder is not None and not retried:
            recorder.close()
        if not w.closed:
            w.close()


def _refused(result, partial: bool):
    """``result`` marked refused (nothing written, its changes withheld)
    when problems remain that the plan cannot repair and ``partial`` was
    not asked for."""
    if result.unrepaired and not partial:
        result.refused = True
        result.withheld, result.changes = result.changes, []
    return result


def _pre_recorder(dev, undo_file, extra):
    """The recorder of what repair writes before its plan is made (the
    primary superblock's restore, the extension of a cut image, its log's
    format): the user's undo file, else a scratch one (``scratch``: removed
    once the plan decides), so that a repair that then writes nothing can
    put it back."""
    if undo_file is not None:
        return UndoRecorder(dev, undo_file, extra)
    fd, tmp = tempfile.mkstemp(prefix="fstool-repair-", suffix=".undo")
    os.close(fd)
    rec = UndoRecorder(dev, tmp, extra)
    rec.scratch = True
    return rec


def _drop_scratch(recorder) -> bool:
    """Close and remove ``recorder``'s file when it is a scratch one."""
    if recorder is None or not getattr(recorder, "scratch", False):
        return False
    recorder.close()
    try:
        os.unlink(recorder.path)
    except FileNotFoundError:
        pass
    return True


def _put_back(path, recorder) -> None:
    """Put back what ``recorder`` saved of the steps before the plan
    (unless they were kept: the plan went on to write), the image file cut
    back to its size before them; an undo file the user asked for is
    finished (it gives back what the image holds now)."""
    if recorder is None or getattr(recorder, "kept", False):
        return
    if recorder.fd >= 0:
        recorder.before_fsync()
    size, records, _extra, _digest = read_undo(recorder.path, partial=True)
    dev = Device(path, writable=True)
    try:
        with held():
            for off, data in records:
                dev.pwrite(off, data)
            if dev.size > size and not dev.fixed_size:
                dev.resize(size)
            dev.fsync()
        if recorder.fd >= 0 and not getattr(recorder, "scratch", False):
            recorder.finish(dev)
    finally:
        dev.close()
    recorder.kept = True            # put back once


def _remaining(path, jobs, before=()) -> list:
    """What check still finds after the repair (some findings were only
    consequences of what was rebuilt): (finding, reason) for each error,
    the reason given before the repair for its code when there was one."""
    with Filesystem(path) as fs:
        c = Checker(fs)
        c.run(jobs)
    why = {}
    for f, reason in before:
        why.setdefault(f.code, reason)
    out = []
    for f in c.findings:
        if f.severity == "error":
            action, text = action_of(f)
            out.append((f, text if action == "none" else why.get(
                f.code, "reported, not repaired: still found after the repair")))
    return out


def _refuse(fs, path, add_finobt: bool) -> None:
    refuse_unusable(fs, path)
    sb = fs.sb
    if add_finobt:
        if sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_FINOBT):
            raise WriteRefused(f"{path}: the filesystem already has a free inode btree")


def _check_finobt_room(fs, plans) -> None:
    """--add-finobt: each AG must have room for the kernel's finobt
    reservation besides the trees themselves."""
    for agno, p in plans.items():
        need = finobt_reservation(fs, agno)
        if p.freeblks < need:
            raise RepairError(f"AG {agno}: {p.freeblks} free blocks, the kernel reserves "
                              f"{need} for the free inode btree; --add-finobt needs that room")


def _digest_sectors(fs) -> list:
    """The primary superblock and every AG header sector: what an undo
    checks besides the blocks it saved."""
    sb = fs.sb
    out = []
    for agno in range(sb.agcount):
        base = fs.agb_to_daddr(agno, 0) << C.BBSHIFT
        out.append((base, 4 * sb.sectsize))
    return out


def _apply(w, checker, plans, secondaries, counters, add_finobt, phases=(None, None, None),
           in_place: bool = False) -> None:
    fs = w.fs
    sb = fs.sb
    with w.transaction():
        tx = w.tx
        inodes, ns, pp = phases
        # the inode phase first, then the namespace and the parent pointers
        # of what it settled, then the AGs (which see what the first two
        # give up and take through their plans) and counters
        if inodes is not None:
            inodes.apply(tx, checker)
        if ns:
            ns.write(w)
        if pp:
            pp.write(w)
        totals = {}
        for agno, p in plans.items():
            totals[agno] = p.write(tx, checker.agf.get(agno), checker.agi.get(agno))
        sbuf = tx.read_buf(0, sb.sectsize, V.SB, agno=0, block=0)
        f = SB.unpack(sbuf.data)
        if counters:
            icount = ifree = fdblocks = 0
            for agno in range(sb.agcount):
                t = totals.get(agno)
                if t is None:
                    agf, agi = checker.agf.get(agno), checker.agi.get(agno)
                    if agf is None or agi is None:
                        raise RepairError(f"AG {agno}: the AGF or AGI cannot be read; the "
                                          "superblock counters cannot be summed")
                    t = (agi["agi_count"], agi["agi_freecount"],
                         agf["agf_freeblks"] + agf["agf_flcount"] + agf["agf_btreeblks"])
                icount += t[0]
                ifree += t[1]
                fdblocks += t[2]
            f.update(sb_icount=icount, sb_ifree=ifree, sb_fdblocks=fdblocks)
        if add_finobt:
            f["sb_features_ro_compat"] |= C.XFS_SB_FEAT_RO_COMPAT_FINOBT
        f.update(getattr(checker, "sb_fixes", {}))
        if in_place:
            # written in place in any order: marked until the end
            f["sb_inprogress"] = 1
        if inodes is not None:
            inodes.apply_sb(f)
        packed = SB.pack(f)
        sbuf.data[:len(packed)] = packed
        for agno in secondaries:
            daddr = fs.agb_to_daddr(agno, 0)
            buf = raw_buf(tx, daddr, sb.sectsize, V.SB)
            buf.data[:] = sbuf.data


def undo(path, undo_file) -> int:
    """Put back what ``undo_file`` saved (refusing a changed image, an
    incomplete undo file, a mounted or locked image); the bytes restored."""
    path = os.fspath(path)
    refuse_if_mounted(path)
    dev = Device(path, writable=True)
    try:
        with ImageLock(dev, path):
            return apply_undo(dev, undo_file)
    finally:
        dev.close()
