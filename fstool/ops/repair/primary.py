"""The primary superblock restored from the secondaries (xfs_repair's phase 1).

When the primary superblock cannot be trusted (it fails verification, or
fstool cannot even open the image with it), every rebuild would start from
a wrong geometry.  Like xfs_repair, repair then looks for the secondary
superblocks mkfs wrote at the start of every other AG, keeps the geometry
most of the valid ones agree on, and writes that copy over the primary
(``sb_inprogress``, which mkfs leaves set in the secondaries, cleared; the
counters it carries are summed again from the AGs by the repair that
follows).  Secondaries are first looked for where the damaged primary's own
block and AG sizes put them; failing that, the image's data is scanned for
superblock magic at every sector boundary, as xfs_repair does.
"""
from __future__ import annotations

from ...errors import FsToolError
from ...format import constants as C
from ...format.structs import SB
from ..check.superblocks import GEOMETRY_FIELDS, verify_sb

MAX_VOTES = 16                 # valid secondaries enough to settle the geometry
SCAN_CHUNK = 4 << 20
_KEY_FIELDS = GEOMETRY_FIELDS + ("sb_uuid", "sb_meta_uuid", "sb_features_compat",
                                 "sb_features_ro_compat", "sb_features_incompat",
                                 "sb_features_log_incompat")


class PrimaryPlan:
    """The secondary chosen to replace the primary, and why."""

    def __init__(self, agno: int, raw: bytes, why: str, votes: int, seen: int):
        self.agno, self.raw, self.why = agno, raw, why
        self.votes, self.seen = votes, seen

    @property
    def change(self) -> str:
        return (f"primary superblock: rewritten from the secondary in AG {self.agno} "
                f"({self.votes} of {self.seen} valid secondaries agree on its geometry)")

    def header_sectors(self) -> list:
        """(offset, length) of every AG's header sectors under the restored
        geometry: what an undo file's digest covers."""
        f = SB.unpack(self.raw)
        agsize = f["sb_agblocks"] * f["sb_blocksize"]
        return [(agno * agsize, 4 * f["sb_sectsize"]) for agno in range(f["sb_agcount"])]

    def sector(self) -> bytes:
        """The new primary sector: the secondary with sb_inprogress cleared
        and its CRC stamped again."""
        from ..._backend import parsers
        buf = bytearray(self.raw)
        buf[SB.offset("sb_inprogress")] = 0
        parsers.stamp_cksum(buf, 0, len(buf), C.XFS_SB_CRC_OFF)
        return bytes(buf)


def trouble(dev) -> str | None:
    """Why the primary superblock cannot be trusted, or None: it does not
    open (bad magic, sizes, CRC, geometry) or fails xfs_repair's checks."""
    from ...fs.mount import _sectsize_guess
    from ...fs.superblock import Superblock
    head = dev.pread(0, min(dev.size, 32768))
    if len(head) < C.BBSIZE:
        return "the image is shorter than a superblock"
    raw = head[:max(C.BBSIZE, _sectsize_guess(head))]
    try:
        Superblock(raw)
    except FsToolError as e:
        return str(e)
    f = SB.unpack(raw)
    bad = verify_sb(f, raw, True)
    # what check's superblock phase adds (SB_PRIMARY too)
    if f["sb_shared_vn"]:
        bad.append(("sb_shared_vn", "not zero"))
    if f["sb_bad_features2"] and f["sb_bad_features2"] != f["sb_features2"]:
        bad.append(("sb_bad_features2", "differs from sb_features2"))
    return "; ".join(f"{field}: {detail}" for field, detail in bad) or None


def _candidate(dev, offset: int):
    """(AG number, sector bytes, fields) of a valid secondary superblock at
    ``offset``, or None."""
    from ...fs.superblock import Superblock
    try:
        raw = dev.pread(offset, 512)
    except FsToolError:
        return None
    if len(raw) < 512 or raw[:4] != b"XFSB":
        return None
    ss = int.from_bytes(raw[102:104], "big")
    if ss != 512:
        if not 512 < ss <= 32768 or ss & (ss - 1) or offset + ss > dev.size:
            return None
        raw = dev.pread(offset, ss)
    f = SB.unpack(raw)
    if verify_sb(f, raw, False):
        return None
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
    from ...io.sparse import data_ranges_of
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
