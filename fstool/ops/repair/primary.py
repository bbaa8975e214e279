"""The primary superblock verified against the secondaries, and restored
from them (xfs_repair's phase 1).

Every later phase reads and writes where the primary superblock's geometry
says, so it is settled first.  A primary that is valid in itself is
compared with the secondary superblocks mkfs wrote at the start of every
other AG, where its own geometry puts them (:func:`..check.superblocks.
vote_geometry`): the geometry most superblocks share wins.  Outvoted, the
primary is rewritten from the first secondary of the winning geometry, its
root, realtime and quota inode numbers and its version bits other than the
alignment ones kept (xfs_repair's copy_sb).  A geometry nothing can vouch
for (no valid secondary where the primary puts them, two AGs that
disagree, no geometry shared by half of the superblocks) stops the repair
before anything is written: any write would land where an unverified field
says.

A primary that cannot be trusted at all (it fails verification, or fstool
cannot even open the image with it) is replaced: repair looks for the
secondaries where the damaged primary's own block and AG sizes put them,
failing that scans the image's data for superblock magic at every sector
boundary, as xfs_repair does, keeps the geometry most of the valid ones
agree on, and writes that copy over the primary (``sb_inprogress``, which
mkfs leaves set in the secondaries, cleared; the counters it carries are
summed again from the AGs by the repair that follows).
"""
from __future__ import annotations

from ..._backend import parsers
from ...errors import FsToolError, UnsupportedError
from ...format import constants as C
from ...format.structs import SB
from ...fs.superblock import Superblock
from ...io.sparse import data_ranges_of
from ...ns.writer import PARENT_INCOMPAT, WRITABLE_INCOMPAT
from ..check.superblocks import (GEOMETRY_FIELDS, KNOWN_COMPAT, KNOWN_RO_COMPAT, VERSION_ALIGNBIT,
                                 VERSION_DALIGNBIT, layout_confirmed, primary_sector,
                                 read_secondary, verify_sb, vote_geometry)
from .agbuild import RepairError

MAX_VOTES = 16                 # valid secondaries enough to settle the geometry
SCAN_CHUNK = 4 << 20
_KEY_FIELDS = GEOMETRY_FIELDS + ("sb_uuid", "sb_meta_uuid", "sb_features_compat",
                                 "sb_features_ro_compat", "sb_features_incompat",
                                 "sb_features_log_incompat")


# what an outvoted primary keeps of its own (xfs_repair's copy_sb)
_KEPT = ("sb_rootino", "sb_rbmino", "sb_rsumino", "sb_uquotino", "sb_gquotino",
         "sb_pquotino")


class PrimaryPlan:
    """The secondary chosen to replace the primary, and why."""

    def __init__(self, agno: int, raw: bytes, why: str, votes: int, seen: int,
                 counted: str = "valid secondaries"):
        self.agno, self.raw, self.why = agno, raw, why
        self.votes, self.seen, self.counted = votes, seen, counted

    @property
    def change(self) -> str:
        return (f"primary superblock: rewritten from the secondary in AG {self.agno} "
                f"({self.votes} of {self.seen} {self.counted} agree on its geometry)")

    def header_sectors(self) -> list:
        """(offset, length) of every AG's header sectors under the restored
        geometry: what an undo file's digest covers."""
        f = SB.unpack(self.raw)
        agsize = f["sb_agblocks"] * f["sb_blocksize"]
        return [(agno * agsize, 4 * f["sb_sectsize"]) for agno in range(f["sb_agcount"])]

    def sector(self) -> bytes:
        """The new primary sector: the secondary with sb_inprogress cleared
        and its CRC stamped again."""
        buf = bytearray(self.raw)
        buf[SB.offset("sb_inprogress")] = 0
        parsers.stamp_cksum(buf, 0, len(buf), C.XFS_SB_CRC_OFF)
        return bytes(buf)


def _features(f: dict) -> str | None:
    """Feature bits of a v5 superblock repair cannot write with: unknown
    ones (xfs_repair refuses them too) and known ones no writer keeps."""
    if f["sb_versionnum"] & C.XFS_SB_VERSION_NUMBITS != C.XFS_SB_VERSION_5:
        return None
    out = []
    incompat = f["sb_features_incompat"] & ~(WRITABLE_INCOMPAT | PARENT_INCOMPAT |
                                             C.XFS_SB_FEAT_INCOMPAT_NEEDSREPAIR)
    if incompat:
        names = [C.INCOMPAT_NAMES.get(1 << b, f"0x{1 << b:x}")
                 for b in range(32) if incompat >> b & 1]
        out.append(f"incompatible features {', '.join(names)}")
    ro = f["sb_features_ro_compat"] & ~KNOWN_RO_COMPAT
    if ro:
        out.append(f"unknown read-only-compatible features 0x{ro:x}")
    compat = f["sb_features_compat"] & ~KNOWN_COMPAT
    if compat:
        out.append(f"unknown compatible features 0x{compat:x}")
    return "a filesystem with " + " and ".join(out) if out else None


def unsupported(dev) -> str | None:
    """The layout fstool does not handle (v4, a realtime section) the image has, or None: the primary says it and the
    secondaries do not deny it (layout_confirmed).  Nothing is to be looked
    for or written then; a primary the secondaries contradict is damaged,
    and phase 1 restores it."""
    raw = primary_sector(dev)
    if not raw or raw[:4] != b"XFSB":
        return None
    return layout_confirmed(dev, SB.unpack(raw))


def settle(dev) -> PrimaryPlan | None:
    """Phase 1, nothing written: the secondary to rewrite the primary from
    (:func:`outvoted`, else :func:`find` for a primary that cannot be
    trusted), None when the primary stands.  The superblock phase 1 keeps
    is then the filesystem's: feature bits repair cannot write with in it
    raise UnsupportedError (xfs_repair too stops on unknown ones once its
    phase 1 is done; a primary alone in holding them is outvoted before).
    Raises RepairError when no secondary can stand in for a primary that
    cannot be trusted, or no geometry can be verified."""
    plan = outvoted(dev)
    if plan is None:
        raw = primary_sector(dev)
        if raw and not verify_sb(SB.unpack(raw), raw, True, whack=False):
            _refuse_features(dev, raw)          # it stands: its features are the image's
        why = trouble(dev)
        if why is None:
            return None
        plan = find(dev, why)
        if plan is None:
            raise RepairError(f"{dev.path}: the primary superblock cannot be trusted ({why}) "
                              "and no valid secondary superblock was found to restore it from")
    _refuse_features(dev, plan.sector())
    return plan


def _refuse_features(dev, raw: bytes) -> None:
    why = _features(SB.unpack(raw))
    if why is not None:
        raise UnsupportedError(f"{dev.path}: not supported: {why}; nothing was written")


def trouble(dev) -> str | None:
    """Why the primary superblock cannot be trusted, or None: it does not
    open (bad magic, sizes, CRC, geometry) or fails xfs_repair's checks."""
    raw = primary_sector(dev)
    if not raw:
        return "the image is shorter than a superblock"
    try:
        Superblock(raw)
    except FsToolError as e:
        return str(e)
    f = SB.unpack(raw)
    bad = verify_sb(f, raw, True)
    # (sb_shared_vn and sb_bad_features2, which check reports too, are set
    # in place with the rest of the repair: no secondary is needed for them)
    return "; ".join(f"{field}: {detail}" for field, detail in bad) or None


def outvoted(dev) -> PrimaryPlan | None:
    """The secondary to rewrite the primary from when the secondaries
    outvote its geometry; None when it stands, or is not valid in itself
    (xfs_repair's verify_sb: :func:`trouble` says why).  Raises RepairError
    when no geometry can be verified."""
    raw = primary_sector(dev)
    if not raw:
        return None
    f = SB.unpack(raw)
    if verify_sb(f, raw, True, whack=False):
        return None
    vote = vote_geometry(dev, f)
    if vote.verdict == "unverified":
        raise RepairError(f"{dev.path}: the primary superblock's geometry cannot be verified "
                          f"({vote.reason}); nothing was written")
    if vote.verdict != "outvoted":
        return None
    return PrimaryPlan(vote.agno, adopt(raw, vote.raw), vote.describe(f), vote.refs, vote.sbs,
                       "superblocks")


def adopt(primary: bytes, secondary: bytes) -> bytes:
    """The secondary's sector with what the primary keeps of its own (its
    inode numbers, its version bits but the alignment ones): xfs_repair's
    copy_sb."""
    p, s = SB.unpack(primary), SB.unpack(secondary)
    for k in _KEPT:
        s[k] = p[k]
    geo = VERSION_ALIGNBIT | VERSION_DALIGNBIT
    s["sb_versionnum"] = (p["sb_versionnum"] & ~geo) | (s["sb_versionnum"] & geo)
    buf = bytearray(secondary)
    packed = SB.pack(s)
    buf[:len(packed)] = packed
    return bytes(buf)


def _candidate(dev, offset: int):
    """(AG number, sector bytes, fields) of a valid secondary superblock at
    ``offset``, or None."""
    got = read_secondary(dev, offset, whack=True)
    if got is None:
        return None
    raw, f = got
    try:
        Superblock(raw)
    except FsToolError:
        return None
    agsize = f["sb_agblocks"] * f["sb_blocksize"]
    if not agsize or offset % agsize:
        return None
    agno = offset // agsize
    if not 1 <= agno < f["sb_agcount"] or f["sb_dblocks"] * f["sb_blocksize"] > dev.size:
        return None
    return agno, raw, f


def _hinted_offsets(dev) -> list:
    """Where the damaged primary's block size and AG size (when they are
    plausible) put the secondaries."""
    head = dev.pread(0, 512)
    if len(head) < 104:
        return []
    f = SB.unpack(head.ljust(SB.size, b"\0"))
    bs, agblocks, agcount = f["sb_blocksize"], f["sb_agblocks"], f["sb_agcount"]
    if not 512 <= bs <= 65536 or bs & (bs - 1) or not 64 <= agblocks < 1 << 31:
        return []
    agsize = bs * agblocks
    n = min(agcount if 2 <= agcount <= 1 << 20 else 1 << 20, dev.size // agsize + 1)
    return [k * agsize for k in range(1, n) if k * agsize + 512 <= dev.size][:4 * MAX_VOTES]


def _scanned_offsets(dev):
    """Every sector boundary of the image's data holding the superblock
    magic (xfs_repair's find_secondary_sb), in order."""
    ranges = data_ranges_of(dev.fd) if hasattr(dev, "fd") and not dev.start else None
    for start, length in ranges or [(0, dev.size)]:
        pos = max(start, 512)
        end = start + length
        while pos < end:
            n = min(SCAN_CHUNK, end - pos)
            data = dev.pread(pos, n)
            i = data.find(b"XFSB")
            while i >= 0:
                if (pos + i) % 512 == 0:
                    yield pos + i
                i = data.find(b"XFSB", i + 1)
            pos += n


def find(dev, why: str) -> PrimaryPlan | None:
    """The secondary to restore the primary from (the geometry most valid
    secondaries share; the lowest AG of those), or None when there is none."""
    seen = {}
    for offsets in (_hinted_offsets(dev), _scanned_offsets(dev)):
        for off in offsets:
            c = _candidate(dev, off)
            if c is not None and c[0] not in seen:
                seen[c[0]] = c
                if len(seen) >= MAX_VOTES:
                    break
        if seen:
            break
    if not seen:
        return None
    groups = {}
    for agno in sorted(seen):
        _a, _raw, f = seen[agno]
        groups.setdefault(tuple(f[k] for k in _KEY_FIELDS), []).append(agno)
    best = max(groups.values(), key=lambda agnos: (len(agnos), -agnos[0]))
    agno = best[0]
    return PrimaryPlan(agno, seen[agno][1], why, len(best), len(seen))


def restore(dev, plan: PrimaryPlan) -> None:
    """Write the new primary and make it durable before anything else reads
    the image through it."""
    new = plan.sector()
    dev.pwrite(0, new)
    dev.fsync()
