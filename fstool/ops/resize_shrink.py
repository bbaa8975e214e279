"""Shrinking a filesystem offline: the smallest size it can be cut to, and
the cut itself once everything past the new end is free.

The blocks of files can move (see :func:`movable`;
:mod:`fstool.ops.resize_move` moves them): regular files' data extents
(reflinked ones too: a shared block moves once), directory, symlink and
xattr blocks and bmbt blocks; and so can the log (:func:`log_home`,
``fstool.ops.resize.move_log``; :func:`log_front`: to the front of the
last AG, once what lies past what stays there has moved out); and so can the inodes of a chunk whose
every inode can move (:func:`inode_moves`: they get new numbers;
directories too, on parent-pointer filesystems their children's pointers
renamed).  What a crash leaves for a mount to free (unlinked inodes,
copy-on-write staging extents) is freed before (``fstool.ops.resize``).
What can be cut:

* whole AGs at the end that hold nothing but their own headers and empty
  btrees, blocks that move, inode chunks whose inodes move and the log
  when it can move: every used block is a header, a btree block of their
  own, a free list block, a block that moves or the log;
* the tail of the AG that becomes the last, past the last block that
  stays: once the data and the AG's own btree blocks there move
  (:func:`ag_btree_blocks`; ``fstool.ops.resize_move.move_ag_btrees``)
  the blocks past the new end are one free extent of its free-space btrees, and no inode chunk (sparse ones too:
  their whole aligned range) may reach past it, as the kernel's
  xfs_ag_shrink_space requires.

At least two AGs are kept (mkfs.xfs refuses fewer, "at least 2
superblocks for redundancy", and xfs_repair will not check a one-AG
filesystem without -o force_geometry), and the last AG keeps at least
XFS_MIN_AG_BLOCKS (64) blocks.

The cut is made in at most two steps, each of which a crash leaves whole:

A. AGs dropped: the primary superblock (one sector, written in place with
   the log clean) gets the smaller AG count, a size of whole AGs and the
   free block count less the dropped AGs' free space.  It is not logged:
   the kernel's log recovery refuses a superblock whose AG count went
   down ("Shrinking AG count in log recovery not supported"), while a
   sector is written whole or not at all.
B. the last AG shortened: one logged transaction takes its tail out of
   the free-space btrees (the rmapbt does not map free space), sets its
   AGF and AGI lengths and the superblock's size and free block count, as
   the kernel's xfs_ag_shrink_space and xfs_growfs_data_private do; log
   recovery (the kernel's or fstool's) replays it.

Then, as for a grow, the secondary superblocks are rewritten from the
primary and the file is truncated to the new size.  Killed between A and
B, the image holds a filesystem of whole AGs in between the two sizes;
resize run again goes on from there.

What cannot move (see above) bounds the cut: a size below the minimum is
refused with the minimum and the inodes whose chunks lie in the way.
"""
from __future__ import annotations

import copy
import dataclasses

from ..format import constants as C
from ..alloc import rmap as R
from ..alloc.inodes import present_mask
from ..alloc.space import kernel_min_freelist, resv_asks
from ..format.structs import SB
from ..fs.btree import alloc_maxlevels, rmap_maxlevels
from ..ns.bmap import owned_extents
from ..trans.busy import coalesce, free_pieces
from ..io import verify as V
from . import mkfs as M
from .stats import AG_TREES, ag_tree, iter_allocated_inodes

XFS_MIN_AG_BLOCKS = 64
MIN_AGCOUNT = 2


@dataclasses.dataclass
class AgUse:
    """What one AG holds, as far as cutting it goes."""
    agno: int
    length: int
    droppable: bool          # nothing but its own headers and empty btrees
    floor: int               # the shortest it can be cut to (blocks)
    lost_free: int           # free blocks (free space, free list, btree blocks) it counts


def static_blocks(sb) -> int:
    """The blocks an AG's headers and btree roots take, as mkfs lays them
    out (the first block after them)."""
    return M.static_roots(sb.blocksize, sb.sectsize,
                          sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_FINOBT),
                          sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_RMAPBT),
                          sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK))[1]


def _spare(sb, agno: int, agf: dict, agi: dict, newlen: int, free: int) -> int:
    """Blocks an AG cut to ``newlen`` blocks, ``free`` of them free, has
    beyond the free list it must keep and the per-AG reservations of that
    length (negative: short by that many)."""
    ro = sb.has_ro_compat
    rmapbt, reflink = ro(C.XFS_SB_FEAT_RO_COMPAT_RMAPBT), ro(C.XFS_SB_FEAT_RO_COMPAT_REFLINK)
    finobt = ro(C.XFS_SB_FEAT_RO_COMPAT_FINOBT)
    sparse = sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_SPINODES)
    levels = agf["agf_levels"]
    need = kernel_min_freelist(levels[0], levels[1], levels[2] if rmapbt else None,
                               alloc_maxlevels(sb.blocksize, sb.agblocks),
                               rmap_maxlevels(sb.blocksize, sb.agblocks, reflink))
    # finobt blocks in use: counted by the AGI, else at least its root
    fino_used = agi.get("agi_fblocks", 0) or 1
    meta, rmap = resv_asks(sb, agno, newlen, reflink, finobt, sparse, rmapbt)
    resv = max(0, meta - agf["agf_refcount_blocks"] - (fino_used if finobt else 0))
    resv += max(0, rmap - agf["agf_rmap_blocks"]) if rmapbt else 0
    return free + min(agf["agf_flcount"], need) - need - resv


def _tail_floor(sb, agno: int, agf: dict, agi: dict, start: int, moved: int = 0) -> int:
    """The shortest AG ``agno`` whose free tail begins at ``start`` can be
    cut to, as an exact allocation of the tail takes it: the AG keeps its
    minimum free list (a refill may take the tail's first blocks) and the
    per-AG reservations of its new length, as the kernel's
    xfs_ag_shrink_space re-establishes them.  ``moved``: blocks past
    ``start`` that are to move out first (they are not free yet)."""
    length = agf["agf_length"]
    levels = agf["agf_levels"]
    rmapbt = sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_RMAPBT)
    need = kernel_min_freelist(
        levels[0], levels[1], levels[2] if rmapbt else None,
        alloc_maxlevels(sb.blocksize, sb.agblocks),
        rmap_maxlevels(sb.blocksize, sb.agblocks,
                       sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK)))

    def fits(newlen: int) -> bool:
        free = agf["agf_freeblks"] - (length - newlen - moved)
        return _spare(sb, agno, agf, agi, newlen, free) >= 0

    lo = start + max(0, need - agf["agf_flcount"])
    hi = length
    if lo >= hi or not fits(hi):
        return length
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


#: what a moved block is (the last field of a :func:`movable` record)
DATA = 0        # a regular file's data: copied in place, then remapped
FORK = 1        # a directory's or symlink's data fork block: logged at its new place
ATTR = 2        # an attr fork block (leaf, node or remote value): the same
BMBT = 3        # a data fork's bmbt block: its parent's and siblings' pointers follow
ABMBT = 4       # an attr fork's bmbt block
SHARED = 5      # a reflinked file's data: moved once for every file mapping it
INODES = 6      # (a run of) an inode chunk whose inodes all move to new numbers


def span(moves, start: int = 0) -> int:
    """How many blocks at or past AG block ``start`` the :func:`movable`
    records of one AG cover (blocks several files share counted once)."""
    runs = coalesce([(max(m[0], start), m[0] + m[1]) for m in moves if m[0] + m[1] > start])
    return sum(b - a for a, b in runs)


def movable(fs) -> dict:
    """agno -> sorted [(agbno, length, ino, startoff, unwritten, kind)]:
    the blocks of inodes a shrink can move (``kind``: :data:`DATA`,
    :data:`FORK`, :data:`ATTR`, :data:`BMBT`, :data:`ABMBT`,
    :data:`SHARED`: a block several files share is listed once for each).
    Inode chunks stay."""
    sb = fs.sb
    mask = (1 << sb.agblklog) - 1
    out: dict = {}
    for ip in iter_allocated_inodes(fs):
        for attr in (False, True):
            for fsbno, count, who, unwritten in owned_extents(ip, attr):
                if who.flags & R.BMBT_BLOCK:
                    kind = ABMBT if attr else BMBT
                elif attr:
                    kind = ATTR
                elif not ip.is_reg:
                    kind = FORK
                elif ip.flags2 & C.XFS_DIFLAG2_REFLINK:
                    kind = SHARED
                else:
                    kind = DATA
                out.setdefault(fsbno >> sb.agblklog, []).append(
                    (fsbno & mask, count, ip.ino, who.offset, unwritten, kind))
    for agno, recs in _chunk_moves(fs).items():
        out.setdefault(agno, []).extend(recs)
    for recs in out.values():
        recs.sort()
    return out


def inode_moves(ip, fixed: dict) -> bool:
    """Whether inode ``ip`` can move to a new number: linked, and not one
    of the ``fixed`` (:func:`fixed_inodes`).  The quota inodes move (the
    superblock's fields naming them follow)."""
    return ip.nlink > 0 and ip.ino not in fixed


#: the superblock's fields naming the quota inodes, which follow them
QUOTA_FIELDS = ("sb_uquotino", "sb_gquotino", "sb_pquotino")


def quota_fields(sb) -> dict:
    """inode -> the superblock field naming it, for the quota inodes."""
    f = sb.fields
    return {f[k]: k for k in QUOTA_FIELDS if f.get(k) not in (None, 0, C.NULLFSINO)}


def incore_quota(f: dict) -> None:
    """Superblock fields ``f`` as the kernel logs its in-core superblock,
    where a quota inode of 0 reads as none."""
    for q in QUOTA_FIELDS:
        if f[q] == 0:
            f[q] = C.NULLFSINO


def log_sb(tx, sb, edit) -> None:
    """The primary superblock changed by ``edit`` (given its fields) in
    transaction ``tx``."""
    buf = tx.read_buf(0, sb.sectsize, V.SB, agno=0, block=0)
    f = SB.unpack(buf.data)
    edit(f)
    raw = SB.pack(f)
    buf.data[:len(raw)] = raw


def fixed_inodes(sb) -> dict:
    """inode -> why it cannot move: the root directory and the realtime
    bitmap and summary inodes, which xfs_repair expects to be the first
    three inodes, where mkfs puts them (its calc_mkfs).  They lie in the
    root's chunk at the start of AG 0, which no shrink cuts."""
    why = "xfs_repair expects it among the first three inodes, where mkfs puts it"
    f = sb.fields
    out = {f[k]: f"the {what} ({why})" for k, what in (("sb_rsumino", "realtime summary"),
                                                        ("sb_rbmino", "realtime bitmap"))
           if f.get(k) not in (None, 0, C.NULLFSINO)}
    out[sb.rootino] = f"the root directory ({why})"
    return out


def _chunk_moves(fs) -> dict:
    """agno -> [(agbno, length, startino, 0, False, INODES)]: the blocks of
    the inode chunks whose every inode can move (:func:`inode_moves`), in
    AGs with no unlinked inodes; ``startino`` names the chunk's record."""
    sb = fs.sb
    fixed = fixed_inodes(sb)
    out: dict = {}
    for agno in range(sb.agcount):
        if any(b != C.NULLAGINO for b in fs.agi(agno)["agi_unlinked"]):
            continue
        reader, root, height = ag_tree(fs, agno, "inobt")
        for startino, holemask, _count, _freecount, free in reader.ag_records(root, height):
            present = present_mask(holemask)
            inos = [(agno << sb.agino_log) | (startino + i) for i in range(64)
                    if present >> i & 1 and not free >> i & 1]
            if not all(inode_moves(fs.inode(ino), fixed) for ino in inos):
                continue
            blocks = coalesce([((startino + i) >> sb.inopblog, ((startino + i) >> sb.inopblog) + 1)
                               for i in range(64) if present >> i & 1])
            out.setdefault(agno, []).extend((a, b - a, startino, 0, False, INODES)
                                            for a, b in blocks)
    return out


def _used(fs, agno: int, length: int) -> list:
    """[(start, end)] of the AG's blocks not in its free-space btrees."""
    reader, root, height = ag_tree(fs, agno, "bnobt")
    out, pos = [], 0
    for start, count in reader.ag_records(root, height):
        if start > pos:
            out.append((pos, start))
        pos = start + count
    if pos < length:
        out.append((pos, length))
    return out


def freelist_blocks(fs, agno: int) -> list:
    """The AG blocks on AG ``agno``'s free list."""
    agf = fs.agf(agno)
    slots = fs.agfl(agno)["agfl_bno"]
    return [slots[(agf["agf_flfirst"] + i) % len(slots)] for i in range(agf["agf_flcount"])]


NO_LOG_AG = -1     # log_extent's AG of an external log: no AG holds it


def log_extent(sb) -> tuple[int, int, int]:
    """(agno, agbno, blocks) of the internal log; (NO_LOG_AG, 0, 0) for an
    external one (``sb_logstart`` 0, mkfs.xfs -l logdev=), which occupies
    no block of the data device (AG 0 block 0 is the superblock's)."""
    if sb.logstart == 0:
        return NO_LOG_AG, 0, 0
    return (sb.logstart >> sb.agblklog, sb.logstart & ((1 << sb.agblklog) - 1),
            sb.logblocks)


def ag_btree_blocks(fs, agno: int) -> list:
    """The AG blocks of AG ``agno``'s own btrees (free space, inodes, free
    inodes, reverse mappings, reference counts), roots included: only
    their node blocks are read."""
    out = []
    for name in AG_TREES:
        tree = ag_tree(fs, agno, name)
        if tree is None:
            continue
        reader, root, height = tree
        row = [root]
        out.append(root)
        for level in range(height - 1, 0, -1):
            row = [p for addr in row for p in reader.read_block(addr, level).ptrs]
            out.extend(row)
    return sorted(out)


def ag_use(fs, agno: int, prealloc: int, moves: list | None = None,
           log_moves: bool = False) -> AgUse:
    """How far AG ``agno`` can be cut, nothing moved, or (``moves``: the
    AG's :func:`movable` extents; ``log_moves``: the log too) once those
    are moved out.  The AG's own btree blocks past a cut move below it
    (``fstool.ops.resize_move.move_ag_btrees``), taking as many of its
    free blocks."""
    sb = fs.sb
    agf, agi = fs.agf(agno), fs.agi(agno)
    length = agf["agf_length"]
    logagno, logagbno, logblocks = log_extent(sb)
    moves = list(moves or ())
    if log_moves and agno == logagno:
        moves.append((logagbno, logblocks, 0, 0, 0, DATA))
        moves.sort()
    chunks = {m[2] for m in moves if m[5] == INODES}
    reader, root, height = ag_tree(fs, agno, "inobt")
    inobt = list(reader.ag_records(root, height))
    moving = [(m[0], m[0] + m[1]) for m in moves]
    btree = [(b, b + 1) for b in ag_btree_blocks(fs, agno)]
    flist = [(b, b + 1) for b in freelist_blocks(fs, agno)]
    used = _used(fs, agno, length)
    # dropped whole: every block in use is a header or static root, a
    # block of its own btrees or free list, or one that moves
    gone = coalesce([(0, prealloc)] + btree + flist + moving)
    droppable = (all(rec[0] in chunks for rec in inobt) and (agno != logagno or log_moves)
                 and not any(next(iter(free_pieces(a, b - a, gone)), None) for a, b in used))
    # the end of what stays: the last used block that is not to move, nor
    # on the free list (the cut gives the list's blocks past it back to the
    # free space and refills the list below: see the shrink's step B), nor
    # a block of the AG's btrees (moved below the cut first)
    stay = coalesce(moving + flist + btree)
    end = 0
    for a, b in reversed(used):
        pieces = list(free_pieces(a, b - a, stay, reverse=True))
        if pieces:
            end = pieces[0][0] + pieces[0][1]
            break
    floor = length
    if end < length:
        past = span(moves, end)
        floor = _tail_floor(sb, agno, agf, agi, end, past)
    # no inode chunk that stays may reach past the end, sparse or not
    chunk = max(1, M.XFS_INODES_PER_CHUNK >> sb.inopblog)
    for rec in inobt:
        if rec[0] not in chunks:
            floor = max(floor, (rec[0] >> sb.inopblog) + chunk)
    floor = max(floor, XFS_MIN_AG_BLOCKS, prealloc)
    return AgUse(agno, length, droppable, floor,
                 agf["agf_freeblks"] + agf["agf_flcount"] + agf["agf_btreeblks"])


def log_home(fs, dblocks: int, agcount: int) -> int | None:
    """Where the log can move to when a cut to ``dblocks`` blocks in
    ``agcount`` AGs leaves it outside: the first block of the lowest free
    extent, in an AG other than the log's and wholly inside, that holds it
    with room to spare for the AG's free list; None when there is none.
    Never AG 0: where mkfs puts the root inode depends on whether the log
    is in AG 0 (xfs_repair's libxfs_ialloc_calc_rootino), so a log moved
    into AG 0 would make a filesystem's root inode look misplaced."""
    sb = fs.sb
    logagno = log_extent(sb)[0]
    last = agcount - 1
    newlen = dblocks - last * sb.agblocks
    for agno in range(1, agcount):
        if agno == logagno:
            continue
        agbno = _log_spot(fs, agno, newlen if agno == last else fs.agf(agno)["agf_length"])
        if agbno is not None:
            return (agno << sb.agblklog) | agbno
    return None


def _log_spot(fs, agno: int, end: int) -> int | None:
    """The first block of the lowest free extent of AG ``agno`` that holds
    the log below block ``end`` (its start aligned to the log stripe unit,
    a few blocks left before it for the free list to take), or None."""
    sb = fs.sb
    sunit = sb.fields["sb_logsunit"] // sb.blocksize if sb.fields["sb_logsunit"] > 1 else 1
    reader, root, height = ag_tree(fs, agno, "bnobt")
    for start, count in reader.ag_records(root, height):
        a = -(-(start + 16) // sunit) * sunit
        if a + sb.logblocks <= min(start + count, end):
            return a
    return None


def log_outside(sb, dblocks: int, agcount: int) -> bool:
    """Whether a cut to ``dblocks`` blocks in ``agcount`` AGs takes the log
    (never an external log: no cut reaches it)."""
    agno, agbno, n = log_extent(sb)
    if agno == NO_LOG_AG:
        return False
    last = agcount - 1
    return agno > last or (agno == last and agbno + n > dblocks - last * sb.agblocks)


def minimum_blocks(fs, moves: dict | None = None) -> int:
    """The smallest size (in blocks) the filesystem can be cut to, nothing
    moved or (``moves``: :func:`movable`) once the data extents and the log
    past it are moved into the part kept, which must hold them beside its
    own free lists and reservations (see the module docstring)."""
    sb = fs.sb
    if moves is None:
        return _minimum(fs, {}, False)
    low = _minimum(fs, moves, True)
    agcount = -(-low // sb.agblocks)
    if log_outside(sb, low, agcount) and log_home(fs, low, agcount) is None:
        # the last AG kept made long enough to hold the log: where a free
        # extent holds it as the AG stands, or at its front once
        # everything past what stays there has moved out
        room = _log_room(fs, low, agcount)
        n = -(-room // sb.agblocks) if room is not None else agcount
        if room is None or log_home(fs, room, n) is None or \
                plan(fs, room, n, moves)[2] is not None:
            room = _minimum(fs, moves, False)
        front = _front_room(fs, moves, low, agcount)
        if front is not None and front < room and \
                plan(fs, front, agcount, moves)[2] is None:
            room = front
        low = room
    return low


def log_front(fs, moves: dict, dblocks: int, agcount: int) -> int | None:
    """When a cut to ``dblocks`` blocks in ``agcount`` AGs takes the log
    and no free extent inside holds it as things stand, but one will at
    the front of the last AG once everything past what stays in it has
    moved out: the cut (in blocks) the moves are to be made to, the log
    moved after them (:func:`log_home` then finds its place); else None."""
    sb = fs.sb
    if not log_outside(sb, dblocks, agcount) or log_home(fs, dblocks, agcount) is not None:
        return None
    spot = _front_spot(fs, moves, agcount)
    last = agcount - 1
    if spot is None or spot[1] + sb.logblocks > dblocks - last * sb.agblocks:
        return None
    return last * sb.agblocks + spot[0]


def _front_spot(fs, moves: dict, agcount: int) -> tuple[int, int] | None:
    """(floor, agbno): the shortest the last AG of ``agcount`` can be cut
    to with ``moves`` made and the log not in it, and where the log goes
    in it once everything past that floor has moved out (the first free
    extent that holds it, by :func:`_log_spot`'s rule, among those the
    blocks that stay leave: its own btrees' blocks and free list stay
    until the cut); None when it does not fit or the log cannot go there."""
    sb = fs.sb
    last = agcount - 1
    if last == 0 or last == log_extent(sb)[0]:
        return None
    mv = moves.get(last, ())
    floor = ag_use(fs, last, static_blocks(sb), mv).floor
    length = fs.ag_length(last)
    moving = coalesce([(m[0], m[0] + m[1]) for m in mv if m[0] + m[1] > floor])
    stay = coalesce([p for a, b in _used(fs, last, length)
                     for p in ((q, q + n) for q, n in free_pieces(a, b - a, moving))])
    sunit = sb.fields["sb_logsunit"] // sb.blocksize if sb.fields["sb_logsunit"] > 1 else 1
    pos = 0
    for a, b in stay + [(length, length)]:
        start = -(-(pos + 16) // sunit) * sunit
        if a > pos and start >= floor and start + sb.logblocks <= a:
            return floor, start
        pos = max(pos, b)
    return None


def _front_room(fs, moves: dict, low: int, agcount: int) -> int | None:
    """The size (blocks) with the log at the front of the last AG of
    ``agcount`` (:func:`_front_spot`), its tail cut as it then can be;
    None when the log cannot go there, ``low`` (the minimum were the log
    elsewhere) lies past that AG, or what moves past its floor does not
    fit in the AGs before it."""
    sb = fs.sb
    last = agcount - 1
    spot = _front_spot(fs, moves, agcount)
    if spot is None or low > (last + 1) * sb.agblocks:
        return None
    floor, a = spot
    moving, room = _room(fs, moves, last, floor)
    if moving > room:
        return None
    agf = fs.agf(last)
    mv = moves.get(last, ())
    end = a + sb.logblocks
    # what moves out of [floor, end) is free there, less the log's blocks
    # (the AG's reservations counted without them, as the kernel counts
    # them in the log's AG)
    moved = copy.copy(sb)
    moved.logstart = (last << sb.agblklog) | a
    after = dict(agf, agf_freeblks=agf["agf_freeblks"] - sb.logblocks + span(mv, floor)
                 - span(mv, end))
    return last * sb.agblocks + _tail_floor(moved, last, after, fs.agi(last), end,
                                            span(mv, end))


def _log_room(fs, low: int, agcount: int) -> int | None:
    """``low`` grown until the last AG holds a free extent that takes the
    log (see :func:`log_home`), or None."""
    sb = fs.sb
    last = agcount - 1
    logagno = log_extent(sb)[0]
    if last == 0 or last == logagno:
        return None
    agf = fs.agf(last)
    a = _log_spot(fs, last, agf["agf_length"])
    if a is None:
        return None
    # the AG's tail past the log, as it is cut once the log is there (its
    # reservations counted without the log's blocks, as the kernel counts
    # them in the log's AG)
    moved = copy.copy(sb)
    moved.logstart = (last << sb.agblklog) | a
    after = dict(agf, agf_freeblks=agf["agf_freeblks"] - sb.logblocks)
    return max(low, last * sb.agblocks + _tail_floor(moved, last, after, fs.agi(last),
                                                     a + sb.logblocks))


def _room(fs, mv: dict, k: int, floor: int) -> tuple[int, int]:
    """(blocks to move, room for them): the :func:`movable` extents ``mv``
    past block ``floor`` of AG ``k`` and in the AGs after it, and the
    blocks the AGs before it can take beside their free lists and
    reservations."""
    sb = fs.sb
    moving = sum(span(mv.get(agno, ())) for agno in range(k + 1, sb.agcount))
    moving += span(mv.get(k, ()), floor)
    room = 0
    for agno in range(k):
        agf, agi = fs.agf(agno), fs.agi(agno)
        room += max(0, _spare(sb, agno, agf, agi, agf["agf_length"], agf["agf_freeblks"]))
    return moving, room


def _minimum(fs, mv: dict, log_moves: bool) -> int:
    sb = fs.sb
    prealloc = static_blocks(sb)
    k = sb.agcount - 1
    while k >= MIN_AGCOUNT and ag_use(fs, k, prealloc, mv.get(k), log_moves).droppable:
        k -= 1
    floor = ag_use(fs, k, prealloc, mv.get(k), log_moves).floor
    low = k * sb.agblocks + floor
    if not mv:
        return low
    # the room the moved extents need in what is kept
    moving, room = _room(fs, mv, k, floor)
    if log_moves and log_outside(sb, low, k + 1):
        moving += sb.logblocks
    if moving > room:
        low += moving - room
        # the room spills into the next AG, cut no shorter than it can be
        j = (low - 1) // sb.agblocks
        if k < j < sb.agcount:
            low = max(low, j * sb.agblocks + ag_use(fs, j, prealloc, mv.get(j), log_moves).floor)
    return min(low, sb.dblocks)


class Cut:
    """Which blocks a cut to ``dblocks`` blocks in ``agcount`` AGs takes."""

    def __init__(self, sb, dblocks: int, agcount: int):
        self.agblklog = sb.agblklog
        self.last = agcount - 1
        self.newlen = dblocks - self.last * sb.agblocks

    def __call__(self, fsbno: int, count: int = 1) -> bool:
        agno, agbno = fsbno >> self.agblklog, fsbno & ((1 << self.agblklog) - 1)
        return agno > self.last or (agno == self.last and agbno + count > self.newlen)


def blockers(fs, dblocks: int, agcount: int, limit: int = 10) -> list:
    """Up to ``limit`` (inode, why) that keep the filesystem from being
    cut to ``dblocks`` blocks in ``agcount`` AGs: their chunk lies past it
    and cannot move (an inode of :func:`fixed_inodes` in it, an unlinked
    inode in its AG)."""
    sb = fs.sb
    cut = Cut(sb, dblocks, agcount)
    moving = {(agno, m[2]) for agno, recs in _chunk_moves(fs).items() for m in recs}
    fixed = fixed_inodes(sb)
    found: list = []
    chunk_mask = (1 << sb.agino_log) - 1
    for ip in iter_allocated_inodes(fs):
        agno, agino = ip.ino >> sb.agino_log, ip.ino & chunk_mask
        if not cut((agno << sb.agblklog) | (agino >> sb.inopblog)):
            continue
        if (agno, agino & ~63) in moving:
            continue
        found.append((ip.ino, fixed.get(ip.ino) or
                      ("it has no links" if not ip.nlink else
                       "an unlinked inode in its AG" if any(
                           b != C.NULLAGINO for b in fs.agi(agno)["agi_unlinked"])
                       else "beside an inode that cannot move")))
        if len(found) >= limit:
            break
    return found


def past(sb, moves: dict, dblocks: int, agcount: int) -> list:
    """The :func:`movable` extents that lie (in part) past ``dblocks``, as
    (agno, agbno, length, ino, startoff, unwritten, kind)."""
    last = agcount - 1
    newlen = dblocks - last * sb.agblocks
    out = []
    for agno, recs in sorted(moves.items()):
        for agbno, n, ino, off, unwritten, kind in recs:
            if agno > last or (agno == last and agbno + n > newlen):
                out.append((agno, agbno, n, ino, off, unwritten, kind))
    return out


def plan(fs, dblocks: int, agcount: int, moves: dict | None = None) \
        -> tuple[list, int, str | None]:
    """(AGs dropped, free blocks they count, why the cut cannot be made or
    None) for a cut to ``dblocks`` blocks in ``agcount`` AGs, nothing
    moved or (``moves``) once the movable extents and the log past it are
    moved."""
    sb = fs.sb
    prealloc = static_blocks(sb)
    mv = moves or {}
    if agcount < MIN_AGCOUNT:
        return [], 0, f"a filesystem keeps at least {MIN_AGCOUNT} AGs"
    log_moves = False
    if log_outside(sb, dblocks, agcount):
        if moves is None or (log_home(fs, dblocks, agcount) is None and
                             log_front(fs, moves, dblocks, agcount) is None):
            return [], 0, "the log lies there and no free extent inside can hold it"
        log_moves = True
    dropped, lost = [], 0
    for agno in range(agcount, sb.agcount):
        u = ag_use(fs, agno, prealloc, mv.get(agno), log_moves)
        if not u.droppable:
            return [], 0, f"AG {agno} is in use"
        dropped.append(agno)
        lost += u.lost_free
    last = agcount - 1
    newlen = dblocks - last * sb.agblocks
    u = ag_use(fs, last, prealloc, mv.get(last), log_moves)
    if newlen < u.floor:
        return [], 0, f"AG {last} is in use up to block {u.floor}"
    return dropped, lost, None


def drop_ags(dev, sb, agcount: int, lost_free: int) -> None:
    """Step A: the primary superblock names ``agcount`` whole AGs and
    counts ``lost_free`` fewer free blocks; one sector, in place, flushed."""
    ss = sb.sectsize
    buf = bytearray(dev.pread(0, ss))
    f = SB.unpack(buf)
    f["sb_agcount"] = agcount
    f["sb_dblocks"] = agcount * sb.agblocks
    f["sb_fdblocks"] -= lost_free
    raw = SB.pack(f)
    buf[:len(raw)] = raw
    V.stamp(V.SB, buf, f["sb_lsn"], blocksize=sb.blocksize)
    dev.pwrite(0, bytes(buf))
    dev.fsync()
