"""fstool resize: grow an image offline as xfs_growfs grows a mounted
filesystem, and shrink it (see :mod:`fstool.ops.resize_shrink`).

Growing follows the kernel's xfs_growfs_data_private step by step:

1. the image file is extended to the new size (a hole);
2. the headers of every new AG are written in place, where nothing of the
   filesystem lies yet (the superblock copy, AGF, AGI, AGFL and the root
   block of each AG btree, as xfs_ag_init_headers makes them: the new
   AG's free space one extent after its static blocks, an empty free list,
   the rmapbt naming the static blocks; the secondary superblock the old
   geometry marked in progress), then flushed;
3. one logged transaction extends the last AG to its full size (its AGF
   and AGI lengths, the new blocks freed into its free-space btrees, as
   xfs_ag_extend_space; the rmapbt does not map free space) and sets the
   primary superblock's size, AG count and free block count;
4. every secondary superblock is rewritten from the new primary (the
   kernel's xfs_update_secondary_sbs).

A kill before step 3's checkpoint leaves the old filesystem (in a larger
file); after it, log recovery gives the new one.  Run again, resize
finishes step 4 (secondaries that disagree with the primary are
rewritten) and truncates or extends the file to the filesystem's size.

The new size is cut as the kernel cuts it: a last AG of fewer than
XFS_MIN_AG_BLOCKS (64) blocks is not made.
"""
from __future__ import annotations

import dataclasses
import math
import os

from ..errors import FsToolError, InvalidArgument
from ..format import constants as C
from ..format.structs import SB
from ..fs.filesystem import Filesystem
from ..fs.logstate import log_is_clean
from ..io import verify as V
from ..io.device import Device
from ..io.lock import ImageLock, refuse_if_mounted
from ..io.undo import UndoRecorder, refuse_external_log
from ..alloc import rmap as R
from ..log.device import LogDevice
from ..log.head import find_state
from ..trans.logwriter import zero_log
from ..ns.writer import Writer
from . import mkfs as M
from .guard import require_sound
from ..recovery import finish
from .logops import replay
from .mkfs import Formatter
from . import resize_move as RM
from . import resize_shrink as RS
from .resize_shrink import XFS_MIN_AG_BLOCKS
from ..io.signals import held



class ResizeError(FsToolError):
    """A resize that cannot be made (the reason is the message)."""


@dataclasses.dataclass
class ResizeResult:
    old_dblocks: int
    new_dblocks: int
    old_agcount: int
    new_agcount: int
    blocksize: int
    changes: list
    written: bool = False
    minimum: int | None = None          # the smallest size (bytes), when computed

    @property
    def old_size(self) -> int:
        return self.old_dblocks * self.blocksize

    @property
    def new_size(self) -> int:
        return self.new_dblocks * self.blocksize

    def as_dict(self) -> dict:
        return {"old_size": self.old_size, "new_size": self.new_size,
                "old_dblocks": self.old_dblocks, "new_dblocks": self.new_dblocks,
                "old_agcount": self.old_agcount, "new_agcount": self.new_agcount,
                "blocksize": self.blocksize, "written": self.written,
                "minimum_size": self.minimum, "changes": self.changes}


# -- geometry ------------------------------------------------------------------

def target_blocks(sb, size: int) -> tuple[int, int]:
    """(dblocks, agcount) of a filesystem of ``size`` bytes with ``sb``'s AG
    size, as xfs_growfs_data_private computes them: a last AG shorter than
    XFS_MIN_AG_BLOCKS is left out."""
    nb = size // sb.blocksize
    agcount, rest = divmod(nb, sb.agblocks)
    if rest:
        agcount += 1
    if rest and rest < XFS_MIN_AG_BLOCKS:
        agcount -= 1
        nb = agcount * sb.agblocks
    return nb, agcount


def mkfs_geometry(sb, dblocks: int, agcount: int):
    """The superblock's geometry as mkfs's :class:`~fstool.ops.mkfs.Geometry`
    (with ``dblocks`` and ``agcount``), so that new AGs are written by the
    code that writes them at mkfs time."""
    f = sb.fields
    finobt = sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_FINOBT)
    rmapbt = sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_RMAPBT)
    reflink = sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK)
    roots, prealloc = M.static_roots(sb.blocksize, sb.sectsize, finobt, rmapbt, reflink)
    ialloc_inos = max(M.XFS_INODES_PER_CHUNK, sb.inopblock)
    # an external log (sb_logstart 0) is in no AG: never laid out in AG 0
    logagno, logagbno, _n = RS.log_extent(sb)
    return M.Geometry(
        blocksize=sb.blocksize, blocklog=sb.blocklog, sectsize=sb.sectsize,
        inodesize=sb.inodesize, dblocks=dblocks, agcount=agcount, agblocks=sb.agblocks,
        agblklog=sb.agblklog, dirblocksize=sb.dirblksize, logblocks=sb.logblocks,
        logagno=logagno, logstart_agbno=logagbno, prealloc=prealloc,
        roots=roots, minfree=0, inoalignmt=f["sb_inoalignmt"],
        spino_align=f["sb_spino_align"], ialloc_blks=ialloc_inos * sb.inodesize // sb.blocksize,
        ialloc_inos=ialloc_inos, root_agbno=(sb.rootino >> sb.inopblog) & ((1 << sb.agblklog) - 1),
        imaxpct=f["sb_imax_pct"], finobt=finobt,
        sparse=sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_SPINODES), reflink=reflink,
        nrext64=sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_NREXT64), rmapbt=rmapbt,
        bigtime=sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_BIGTIME),
        inobtcount=sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_INOBTCNT))


def parse_size(text: str, blocksize: int = 4096) -> int:
    """A size in bytes: a number with an optional k/m/g/t/p suffix (powers
    of 1024) or b (filesystem blocks)."""
    t = text.strip().lower()
    mult = 1
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50,
             "b": blocksize}
    if t.endswith("ib"):
        t = t[:-2]
    if t and t[-1] in units:
        mult, t = units[t[-1]], t[:-1]
    try:
        value = int(t)
    except ValueError:
        raise InvalidArgument(f"{text!r} is not a size (bytes, or a number with k, m, g, t, "
                              "p or b for filesystem blocks)") from None
    if value <= 0:
        raise InvalidArgument(f"{text!r}: the size must be positive")
    return value * mult


# -- the superblocks -----------------------------------------------------------

def _sector(sb_raw: bytes, sectsize: int, **fields) -> bytearray:
    """A superblock sector: ``sb_raw`` with ``fields`` changed."""
    buf = bytearray(sb_raw[:sectsize].ljust(sectsize, b"\0"))
    if fields:
        f = SB.unpack(buf)
        f.update(fields)
        raw = SB.pack(f)
        buf[:len(raw)] = raw
    return buf


def write_secondaries(dev, sb, agcount: int, only_stale: bool = False) -> list:
    """Every secondary superblock rewritten from the primary as it is on
    disk (xfs_update_secondary_sbs), in place, then flushed; with
    ``only_stale`` only those that differ from it.  The AGs rewritten."""
    ss = sb.sectsize
    primary = dev.pread(0, ss)
    want = _sector(primary, ss, sb_inprogress=0)
    V.stamp(V.SB, want, SB.unpack(primary)["sb_lsn"], blocksize=sb.blocksize)
    done = []
    agbytes = sb.agblocks * sb.blocksize
    for agno in range(1, agcount):
        off = agno * agbytes
        if only_stale and dev.pread(off, ss) == want:
            continue
        dev.pwrite(off, want)
        done.append(agno)
    if done:
        dev.fsync()
    return done


def _resized_primary(path) -> bool:
    """True when every secondary superblock that disagrees with the primary
    names one other geometry (size, AG count, log start) of the same AG
    size: what a resize stopped before the secondaries' rewrite leaves (a
    grow between its commit and that rewrite, as xfs_growfs has the same
    window; a shrink anywhere after it moved the log or cut AGs)."""
    dev = Device(path)
    try:
        p = SB.unpack(dev.pread(0, SB.size))
        other = set()
        for agno in range(1, p["sb_agcount"]):
            f = SB.unpack(dev.pread(agno * p["sb_agblocks"] * p["sb_blocksize"], SB.size))
            geo = (f["sb_dblocks"], f["sb_agcount"], f["sb_logstart"])
            if geo == (p["sb_dblocks"], p["sb_agcount"], p["sb_logstart"]):
                continue
            if f["sb_magicnum"] != C.XFS_SB_MAGIC or f["sb_agblocks"] != p["sb_agblocks"]:
                return False
            other.add(geo)
        return len(other) == 1
    finally:
        dev.close()


# -- growing -------------------------------------------------------------------

def _log_geometry(tx, sb, dblocks: int, agcount: int, dfree: int) -> None:
    """The primary superblock's size and AG count set in transaction
    ``tx`` (its free block count moved by ``dfree`` past what the AGs'
    counters give), as the kernel logs it."""
    def edit(f):
        f["sb_dblocks"] = dblocks
        f["sb_agcount"] = agcount
        f["sb_fdblocks"] += dfree
        RS.incore_quota(f)
    RS.log_sb(tx, sb, edit)


def _new_ag_headers(dev, sb, geo, agno: int, uuid: bytes) -> int:
    """Write AG ``agno``'s headers and btree roots as xfs_ag_init_headers
    does (through mkfs's AG writer); returns its free blocks."""
    length = geo.ag_length(agno)
    fmt = Formatter(dev, geo, uuid, "", 0)
    free = [(geo.prealloc, length - geo.prealloc)]
    # the kernel's xfs_sbblock_init: the superblock as it stands before
    # the grow, marked in progress until the secondaries are updated
    old = _sector(dev.pread(0, sb.sectsize), sb.sectsize, sb_inprogress=1)
    fmt.write_ag(agno, [], free, old)
    return length - geo.prealloc


def grow(path, dblocks: int, agcount: int, *, undo=None, changes: list) -> None:
    """Grow the filesystem of ``path`` to ``dblocks`` blocks in ``agcount``
    AGs (see the module docstring).  ``undo``: a function given the open
    Device, returning an undo recorder to attach (or None)."""
    # growing changes no names: parent pointers stay as they are
    w = Writer(path, keeps_parents=True)
    try:
        if undo is not None:
            undo(w.dev)
        sb = w.sb
        old_agcount, old_dblocks = sb.agcount, sb.dblocks
        geo = mkfs_geometry(sb, dblocks, agcount)
        dev = w.dev
        if not dev.fixed_size and dev.size < dblocks * sb.blocksize:
            dev.resize(dblocks * sb.blocksize)
        # 1. the new AGs' headers, where nothing of the filesystem lies yet
        nfree = 0
        for agno in range(agcount - 1, old_agcount - 1, -1):
            nfree += _new_ag_headers(dev, sb, geo, agno, w.uuid)
        if agcount > old_agcount:
            dev.fsync()
            changes.append(f"AGs {old_agcount} to {agcount - 1} made "
                           f"({agcount - old_agcount} new AG{'s' if agcount - old_agcount > 1 else ''})")
        # 2. the last AG extended, the superblock's geometry, one transaction
        last = old_agcount - 1
        old_len = sb.dblocks - last * sb.agblocks
        new_len = geo.ag_length(last)
        w.space.kernel_freelist = True
        with w.transaction():
            tx = w.tx
            if new_len > old_len:
                ag = w.ag(last)
                ag.length = new_len
                ag.agf["agf_length"] = ag.agi["agi_length"] = new_len
                ag.agf_dirty = ag.agi_dirty = True
                # the rmapbt does not map free space (XFS_RMAP_OINFO_SKIP_UPDATE)
                w.space.free_ag_extent(last, old_len, new_len - old_len, owner=None)
                changes.append(f"AG {last} extended from {old_len} to {new_len} blocks")

            tx.precommit.append(lambda tx: _log_geometry(tx, sb, dblocks, agcount, nfree))
        w._sb_sum = None            # the session's counters are the old AGs' only
        w.journal.sync()
        changes.append(f"filesystem grown from {old_dblocks} to {dblocks} blocks")
    except BaseException:
        w.close()
        raise
    w.close()


# -- shrinking -----------------------------------------------------------------

def shrink(path, dblocks: int, agcount: int, *, undo=None, changes: list) -> None:
    """Shrink the filesystem of ``path`` to ``dblocks`` blocks in
    ``agcount`` AGs, everything past the new end being free (see
    :mod:`fstool.ops.resize_shrink`)."""
    with Filesystem(path) as fs:
        sb = fs.sb
        dropped, lost, why = RS.plan(fs, dblocks, agcount)
        last = agcount - 1
        new_len = dblocks - last * sb.agblocks
        # the last AG's own btree blocks in its tail, moved below first
        tail_trees = why is None and new_len < fs.ag_length(last) and any(
            b >= new_len for b in RS.ag_btree_blocks(fs, last))
    if why is not None:
        raise ResizeError(f"{path}: cannot shrink to {dblocks * sb.blocksize} bytes: {why}")
    if dropped:
        # A. whole AGs dropped: one superblock sector, in place
        fs = Filesystem(path, writable=True)
        try:
            with ImageLock(fs.dev, fs.dev.path):
                if undo is not None:
                    undo(fs.dev)
                try:
                    RS.drop_ags(fs.dev, fs.sb, agcount, lost)
                finally:
                    # the AGs kept name the new geometry at once (the
                    # one write between is what a rerun finishes): with
                    # two AGs left, xfs_repair refuses a primary its one
                    # secondary contradicts, and step B may take a while
                    # or fail
                    write_secondaries(fs.dev, fs.sb, agcount, only_stale=True)
        finally:
            fs.close()
        changes.append(f"AG {dropped[0]} dropped" if len(dropped) == 1 else
                       f"AGs {dropped[0]} to {dropped[-1]} dropped ({len(dropped)} AGs)")
    if dblocks == agcount * sb.agblocks:
        changes.append(f"filesystem shrunk from {sb.dblocks} to {dblocks} blocks")
        return
    # B. the last AG's free tail cut off, one logged transaction
    with Writer(path, keeps_parents=True) as w:
        if undo is not None:
            undo(w.dev)
        sb1 = w.sb
        old_len = sb1.dblocks - last * sb1.agblocks
        w.space.kernel_freelist = True
        if tail_trees:
            RM.fence(w, dblocks, agcount)
            n = RM.move_ag_btrees(w, last, new_len)
            RM.unfence(w)
            # the blocks they left are busy until their checkpoint is written
            w.journal.push()
            changes.append(f"{n} block(s) of AG {last}'s btrees moved below block {new_len}")
        with w.transaction():
            ag = w.ag(last)
            # free-list blocks in the tail (a refill may have taken them
            # there) go back to the free space, the list refilled before it
            w.space.release_freelist(ag, new_len)
            # the rmapbt does not map free space (XFS_RMAP_OINFO_SKIP_UPDATE);
            # the AG's reservations are set aside for the allocation, as
            # xfs_ag_shrink_space does, and made again for its new length
            got = w.space.alloc_in_ag(ag, new_len, old_len - new_len, old_len - new_len, 1,
                                      True, owner=None, resv="agfl")
            w.space.forget_resv(last)
            if got != (new_len, old_len - new_len):
                raise ResizeError(f"{path}: cannot shrink to {dblocks * sb1.blocksize} bytes: "
                                  f"blocks {new_len} to {old_len - 1} of AG {last} are not "
                                  "all free")
            ag.length = new_len
            ag.agf["agf_length"] = ag.agi["agi_length"] = new_len
            ag.agf_dirty = ag.agi_dirty = True
            w.tx.precommit.append(lambda tx: _log_geometry(tx, sb1, dblocks, agcount, 0))
        w._sb_sum = None
        w.journal.sync()
        changes.append(f"AG {last} cut from {old_len} to {new_len} blocks")
        changes.append(f"filesystem shrunk from {sb.dblocks} to {dblocks} blocks")


def move_log(path, dblocks: int, agcount: int, *, undo=None, changes: list) -> None:
    """Move the (clean) internal log into the part a shrink to ``dblocks``
    blocks in ``agcount`` AGs keeps:

    1. a clean log is formatted in free space there, its cycle above the
       old log's (so above every LSN the metadata carries);
    2. one transaction, written into that new log, allocates its blocks
       (to the log, in the rmapbt), frees the old log's and sets the
       superblock's log start; the checkpoint writes the superblock back
       first and flushes it.

    Killed before the superblock is written back, the old log (clean)
    stands and the new one is free space; after, the superblock names the
    new log, whose transaction log recovery replays."""
    with Filesystem(path) as fs:
        sb = fs.sb
        home = RS.log_home(fs, dblocks, agcount)
        if home is None:
            raise ResizeError(f"{path}: no free extent inside {dblocks * sb.blocksize} bytes "
                              f"holds the log ({sb.logblocks} blocks)")
        _ld, st = find_state(fs)
        cycle = st.curr_cycle + 1
        ld = LogDevice(fs)
        ld.start_daddr = fs.fsb_to_daddr(home)
        old = sb.logstart
        out = Device(path, writable=True)
        try:
            with ImageLock(out, out.path):
                if undo is not None:
                    undo(out)
                with held():
                    zero_log(ld, out, cycle)
        finally:
            out.close()
    with Writer(path, log_at=home, keeps_parents=True) as w:
        if undo is not None:
            undo(w.dev)
        w.journal.sb_barrier = True
        w.space.kernel_freelist = True
        space = w.space
        n = sb.logblocks
        with w.transaction():
            agno, agbno = space.fsb_split(home)
            got = space.alloc_in_ag(w.ag(agno), agbno, n, n, 1, True, owner=R.LOG,
                                    resv="agfl")
            if got != (agbno, n):
                raise ResizeError(f"{path}: blocks {agbno} to {agbno + n - 1} of AG {agno} "
                                  "are not free for the log")
            space.free_extent(old, n, owner=R.LOG)

            w.tx.precommit.append(
                lambda tx: RS.log_sb(tx, sb, lambda f: f.__setitem__("sb_logstart", home)))
        w.journal.sync()
        changes.append(f"log moved from block {old} to block {home}")


def minimum_size(fs) -> int:
    """The smallest size in bytes ``fs`` can be shrunk to, file data moved
    (what ``fstool info`` reports)."""
    return RS.minimum_blocks(fs, RS.movable(fs)) * fs.sb.blocksize


def _minimum_target(fs, slack: float, moves: dict | None) -> int:
    """The size (blocks) -M cuts to: the minimum, or larger so that
    ``slack`` percent of it is free; never more than the size now."""
    sb = fs.sb
    want = RS.minimum_blocks(fs, moves)
    if slack:
        used = sb.dblocks - sb.fields["sb_fdblocks"]
        want = max(want, math.ceil(used / (1 - slack / 100)))
        rest = want % sb.agblocks
        if 0 < rest < XFS_MIN_AG_BLOCKS:
            want += XFS_MIN_AG_BLOCKS - rest
    return min(want, sb.dblocks)


def _too_small(path, fs, dblocks: int, agcount: int, why: str) -> ResizeError:
    """The error for a size below what can be cut, naming the minimum and
    the inodes in the way."""
    bs = fs.sb.blocksize
    low = RS.minimum_blocks(fs, RS.movable(fs))
    msg = (f"{path}: cannot shrink to {dblocks * bs} bytes ({why}); the smallest size is "
           f"{low * bs} bytes ({low} blocks)")
    if dblocks < low and agcount >= RS.MIN_AGCOUNT:
        inos = RS.blockers(fs, dblocks, agcount)
        if inos:
            msg += ("; these inodes lie there and cannot move: "
                    + ", ".join(f"{ino} ({why})" for ino, why in inos))
    return ResizeError(msg)


# -- the operation -----------------------------------------------------------------

class _Undo:
    """One undo file for every device a resize opens for writing
    (:mod:`fstool.io.undo`): ranges are saved before their first
    overwrite, whichever step writes them."""

    def __init__(self, path, extra: list):
        self.path = path
        self.extra = extra
        self.rec = None

    def attach(self, dev) -> None:
        if self.path is None:
            return
        if self.rec is None:
            self.rec = UndoRecorder(dev, self.path, self.extra)
        else:
            self.rec.dev = dev
        dev.write_hook = self.rec

    def finish(self, path) -> None:
        if self.rec is None or self.rec.fd < 0:
            return
        dev = Device(path)
        try:
            self.rec.finish(dev)
        finally:
            dev.close()


def _replay_dirty_log(path, changes: list, dry_run: bool, undo) -> None:
    """A dirty log (a resize, or anything else, killed on the way) is
    replayed first, as a mount would; ``undo`` (the undo file's attach)
    saves what the replay overwrites, so that undo gives back the image
    with its dirty log."""
    with Filesystem(path) as fs:
        clean, why = log_is_clean(fs)
    if clean:
        return
    if dry_run:
        raise ResizeError(f"{path}: the log is dirty ({why}); replay it first (fstool log "
                          "replay, or a kernel mount), or run without -n")
    replay(path, undo=undo)
    changes.append("the dirty log was replayed first")


def _free_leftovers(path, changes: list, dry_run: bool, undo) -> bool:
    """What a crash leaves for the kernel's mount to free, found under a
    clean log (a snapshot whose log was thrown away, a tool that zeroed
    it): the inodes on the AGI unlinked lists (files deleted while open)
    are freed with their blocks, as log recovery frees them, and the
    copy-on-write staging extents are dropped, as every mount drops them
    (xfs_reflink_recover_cow): one journaled transaction, first.  Both are
    garbage once nothing has the filesystem mounted; fstool check and
    xfs_repair -n report them (REFCOUNT_COW, AGI_UNLINKED).  A damaged
    unlinked list is refused (fstool repair mends it)."""
    with Filesystem(path) as fs:
        chains = finish.unlinked_inodes(fs)
        cow = finish.cow_leftovers(fs)
        faults = finish.unlinked_faults(fs, chains)
    if not chains and not cow:
        return False
    what = ", ".join(filter(None, (
        f"{sum(len(c) for _a, _b, c in chains)} inode(s) on the AGI unlinked lists"
        if chains else "", f"{len(cow)} CoW staging extent(s)" if cow else "")))
    if faults:
        raise ResizeError(f"{path}: {faults[0]}: a damaged unlinked list, which resize does "
                          "not free; fstool repair mends it")
    if dry_run:
        raise ResizeError(f"{path}: the image holds {what}, which resize frees first as a "
                          "mount does; run without -n, or mount the image (or fstool repair "
                          "it) first")
    with Writer(path, keeps_parents=True) as w:
        undo(w.dev)
        w.space.kernel_freelist = True
        with w.transaction():
            finish.free_leftovers(w)
        w.journal.sync()
    changes.append(f"{what} freed first, as a mount frees them")
    return True


def resize(path, size: int | None = None, *, minimum: bool = False, slack: float = 0.0,
           undo_file=None, dry_run: bool = False, check: bool = True) -> ResizeResult:
    """Grow or shrink the filesystem of ``path`` to ``size`` bytes (or, with
    ``minimum``, to the smallest size that holds what it holds, with
    ``slack`` percent of it left free).  Run again after an interrupted
    resize, it finishes what the image shows was left undone."""
    path = os.fspath(path)
    if (size is None) == (not minimum):
        raise InvalidArgument("give --size or -M (--minimum), one of them")
    refuse_if_mounted(path)
    if undo_file is not None and not dry_run:
        refuse_external_log(path, "resize")
    changes: list = []
    with Filesystem(path) as fs:
        sb = fs.sb
    undo = _Undo(undo_file, [(agno * sb.agblocks * sb.blocksize, 4 * sb.sectsize)
                             for agno in range(sb.agcount)])
    try:
        _replay_dirty_log(path, changes, dry_run, undo.attach)
        with held():
            freed = _free_leftovers(path, changes, dry_run, undo.attach)
        result = _resize(path, size, minimum, slack, dry_run, check, changes, undo)
        result.written |= freed
        return result
    finally:
        undo.finish(path)


def _resize(path, size: int | None, minimum: bool, slack: float, dry_run: bool, check: bool,
            changes: list, undo: _Undo) -> ResizeResult:
    """:func:`resize` once a dirty log is replayed and what a mount frees
    is freed."""
    with Filesystem(path) as fs:
        sb = fs.sb
        fixed = fs.dev.fixed_size
        devsize = fs.dev.size
    old = (sb.dblocks, sb.agcount)
    bs = sb.blocksize
    result = ResizeResult(old[0], old[0], old[1], old[1], bs, changes)
    moves: list = []
    front = None            # the cut the moves are made to, when the log goes after them
    movable = None          # what can move, reckoned once
    if minimum:
        if not 0 <= slack < 100:
            raise InvalidArgument(f"--slack {slack}: give a percentage from 0 to below 100")
        with Filesystem(path) as fs:
            movable = RS.movable(fs)
            size = _minimum_target(fs, slack, movable) * bs
    if fixed and size > devsize:
        raise ResizeError(f"{path}: the device (or partition) holds {devsize} bytes; it "
                          f"cannot hold {size}")
    dblocks, agcount = target_blocks(sb, size)
    result.new_dblocks, result.new_agcount = dblocks, agcount
    if dblocks < old[0]:
        with Filesystem(path) as fs:
            if movable is None:
                movable = RS.movable(fs)
            result.minimum = RS.minimum_blocks(fs, movable) * bs
            why = RS.plan(fs, dblocks, agcount, movable)[2]
            if why is not None or dblocks < result.minimum // bs:
                raise _too_small(path, fs, dblocks, agcount, why or "too little room for the "
                                 "data to move")
            # the log to the front of the last AG: what lies past what
            # stays there moves out first
            front = RS.log_front(fs, movable, dblocks, agcount)
            moves = RS.past(sb, movable, front or dblocks, agcount)
    if dry_run:
        if RS.log_outside(sb, dblocks, agcount):
            changes.append("would move the log")
        data = [m for m in moves if m[6] == RS.DATA]
        if data:
            changes.append(f"would move {len(data)} data extent(s) "
                           f"({sum(m[2] for m in data)} blocks)")
        shared = [m for m in moves if m[6] == RS.SHARED]
        if shared:
            blocks = sum(RS.span([m[1:] for m in shared if m[0] == agno])
                         for agno in {m[0] for m in shared})
            changes.append(f"would move {blocks} block(s) of "
                           f"reflinked files ({len({m[3] for m in shared})} file(s) remapped)")
        meta = [m for m in moves if m[6] not in (RS.DATA, RS.SHARED, RS.INODES)]
        if meta:
            changes.append(f"would move {sum(m[2] for m in meta)} directory, symlink, "
                           "xattr and bmbt block(s)")
        chunks = {(m[0], m[3]) for m in moves if m[6] == RS.INODES}
        if chunks:
            changes.append(f"would move the inodes of {len(chunks)} inode chunk(s) to new "
                           "numbers")
        if dblocks != old[0]:
            changes.append(f"would {'grow' if dblocks > old[0] else 'shrink'} from {old[0]} "
                           f"to {dblocks} blocks ({old[1]} to {agcount} AGs)")
        return result
    stale = []
    if check:
        # secondaries that disagree with the primary are what an
        # interrupted resize leaves: rewritten below, as it would have;
        # when the primary is a grow of what they say, check's vote for
        # them against it is that same interruption
        ignore = ("SB_SECONDARY",) + (("SB_PRIMARY",) if _resized_primary(path) else ())
        stale = require_sound(path, ignore=ignore)
    # a signal (SIGINT, SIGTERM) waits until the resize is written whole
    with held():
        try:
            if stale:
                _finish(path, result, undo)
                require_sound(path)     # the whole image, its superblocks agreeing again
            if dblocks > old[0]:
                grow(path, dblocks, agcount, undo=undo.attach, changes=changes)
                result.written = True
            elif dblocks < old[0]:
                log_moves = RS.log_outside(sb, dblocks, agcount)
                if log_moves and front is None:
                    move_log(path, dblocks, agcount, undo=undo.attach, changes=changes)
                    result.written = True
                cut = front or dblocks
                data = [m for m in moves if m[6] == RS.DATA]
                if data:
                    RM.move_out(path, cut, agcount, data, undo=undo.attach, changes=changes)
                    result.written = True
                shared = [m for m in moves if m[6] == RS.SHARED]
                if shared:
                    RM.move_shared(path, cut, agcount, shared, undo=undo.attach,
                                   changes=changes)
                    result.written = True
                chunks = [m for m in moves if m[6] == RS.INODES]
                if len(data) + len(shared) + len(chunks) < len(moves):
                    RM.move_metadata(path, cut, agcount, moves, undo=undo.attach,
                                     changes=changes)
                    result.written = True
                if chunks:
                    # last: the moves above name inodes by their old numbers
                    RM.move_inodes(path, cut, agcount, chunks, undo=undo.attach,
                                   changes=changes)
                    result.written = True
                if log_moves and front is not None:
                    # into the room the moves left at the last AG's front
                    move_log(path, dblocks, agcount, undo=undo.attach, changes=changes)
                    result.written = True
                if minimum and (moves or log_moves):
                    # what is left to cut, the data and the log moved: the
                    # minimum as the image now stands
                    with Filesystem(path) as fs:
                        dblocks, agcount = target_blocks(
                            fs.sb, _minimum_target(fs, slack, None) * bs)
                    result.new_dblocks, result.new_agcount = dblocks, agcount
                shrink(path, dblocks, agcount, undo=undo.attach, changes=changes)
                result.written = True
            _finish(path, result, undo)
        except BaseException:
            _settle(path, undo)
            raise
        finally:
            undo.finish(path)
    return result


def _settle(path, undo: _Undo) -> None:
    """After a resize failed part way (an error, not a kill), what the
    next run would do first is done at once, so that the image is left as
    xfs_repair and the kernel accept it: a log the failure left dirty is
    replayed, and every secondary superblock that disagrees with the
    primary (a log move, an AG drop or a cut committed before the error)
    is rewritten from it.  The file keeps its size (larger than the
    filesystem).  Best effort: when this fails too (the device still
    failing), the first error is the one reported, and the next resize
    finishes it."""
    try:
        with Filesystem(path) as fs:
            clean, _why = log_is_clean(fs)
        if not clean:
            replay(path, undo=undo.attach)
        fs = Filesystem(path, writable=True)
        try:
            with ImageLock(fs.dev, fs.dev.path):
                undo.attach(fs.dev)
                write_secondaries(fs.dev, fs.sb, fs.sb.agcount, only_stale=True)
        finally:
            fs.close()
    except Exception:       # the error being raised is the one to report
        pass


def _finish(path, result: ResizeResult, undo: _Undo) -> None:
    """The end of every resize (and of one interrupted earlier): every
    secondary superblock as the primary, the image file the filesystem's
    size."""
    fs = Filesystem(path, writable=True)
    try:
        with ImageLock(fs.dev, fs.dev.path):
            undo.attach(fs.dev)
            sb = fs.sb
            done = write_secondaries(fs.dev, sb, sb.agcount, only_stale=True)
            if done:
                result.written = True
                result.changes.append(f"secondary superblocks of {len(done)} AG(s) "
                                      "rewritten from the primary")
            want = sb.dblocks * sb.blocksize
            if not fs.dev.fixed_size and fs.dev.size != want:
                if want < fs.dev.size and undo.rec is not None and undo.rec.fd >= 0:
                    undo.rec.before_truncate(want)
                fs.dev.resize(want)
                fs.dev.fsync()
                result.written = True
    finally:
        fs.close()
