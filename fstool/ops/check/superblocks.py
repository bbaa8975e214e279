"""Phase superblocks: the primary's fields beyond what opening the image
checks, its geometry put to the vote of the secondaries (xfs_repair's
phase 1: :func:`vote_geometry`, which repair's phase 1 runs too), every
secondary against the primary (xfs_repair's verify_sb, compare_sb and
secondary_sb_whack), and the superblock inode numbers."""
from __future__ import annotations


from ..._backend import parsers
from ...errors import FsToolError
from ...format import constants as C
from ...format.structs import SB
from ...fs.btree import agfl_prefill
from ...fs.filesystem import _sectsize_guess
from ...log.head import find_state
from .base import OWN_FS, Finding

VERSION_ALIGNBIT, VERSION_DALIGNBIT, VERSION_SECTORBIT = 0x80, 0x100, 0x800
VERSION_QUOTABIT = 0x40
# sb_qflags: every quota state bit (XFS_MOUNT_QUOTA_ALL), and the v4 group
# and project bits (OQUOTA_ENFD, OQUOTA_CHKD) the kernel refuses on v5
QFLAGS_ALL = 0x7CF
QFLAGS_V4_ONLY = 0x30
# what xfs_sb_good_version asks of a v5 superblock: no version bit it does
# not know (the shared bit is one), these version and features2 bits set,
# no other features2 bit
VERSION_OKBITS = 0xFFFF & ~0x200
V5_VERSION_BITS = 0x20 | VERSION_ALIGNBIT | 0x400 | 0x1000 | 0x2000 | 0x8000
V5_FEATURES2_BITS = 0x2 | 0x8 | 0x80 | 0x100      # lazy counters, attr2, projid32, crc
FEATURES2_OKBITS = V5_FEATURES2_BITS | 0x200       # and ftype
# fields every superblock must agree on (xfs_repair's get_sb_geometry)
GEOMETRY_FIELDS = ("sb_blocksize", "sb_dblocks", "sb_rblocks", "sb_rextents", "sb_logstart",
                   "sb_rextsize", "sb_agblocks", "sb_agcount", "sb_rbmblocks",
                   "sb_logblocks", "sb_sectsize", "sb_inodesize")
KNOWN_RO_COMPAT = 0xF
KNOWN_COMPAT = 0
MAX_LOG_BLOCKS = 1024 * 1024
MAX_LOG_BYTES = (2 << 30) - (10 << 20)
MIN_AG_BLOCKS = 64


def _log2_roundup(n: int) -> int:
    return max(0, (n - 1).bit_length())


def verify_sb(f: dict, raw: bytes, primary: bool, whack: bool = True) -> list:
    """What xfs_repair's verify_sb and (with ``whack``) secondary_sb_whack
    find wrong in one superblock: [(field, detail)] (the CRC included;
    geometry against the other superblocks is compared by the caller)."""
    bad = []
    if f["sb_magicnum"] != C.XFS_SB_MAGIC:
        return [("sb_magicnum", f"bad magic 0x{f['sb_magicnum']:x}")]
    version = f["sb_versionnum"]
    if version & C.XFS_SB_VERSION_NUMBITS != C.XFS_SB_VERSION_5:
        return [("sb_versionnum", f"version {version & 0xF}, expected 5")]
    if version & ~VERSION_OKBITS or version & V5_VERSION_BITS != V5_VERSION_BITS:
        return [("sb_versionnum", f"version bits 0x{version:x} are invalid for a v5 "
                 "superblock")]
    f2 = f["sb_features2"]
    if f2 & ~FEATURES2_OKBITS or f2 & V5_FEATURES2_BITS != V5_FEATURES2_BITS:
        return [("sb_features2", f"features2 0x{f2:x} is invalid for a v5 superblock")]
    if primary and f["sb_inprogress"]:
        bad.append(("sb_inprogress", "inprogress is set: mkfs, or a repair written in "
                    "place, did not finish (fstool repair rolls such a repair back first)"))
    ss = f["sb_sectsize"]
    if not 512 <= ss <= 32768 or ss & (ss - 1) or 1 << f["sb_sectlog"] != ss:
        return bad + [("sb_sectsize", f"sector size {ss} (log {f['sb_sectlog']}) is invalid")]
    if len(raw) < ss or not parsers.xfs_cksum_ok(raw[:ss], C.XFS_SB_CRC_OFF):
        bad.append(("sb_crc", "CRC mismatch"))
    bs, blog = f["sb_blocksize"], f["sb_blocklog"]
    if not 9 <= blog <= 16 or bs != 1 << blog:
        return bad + [("sb_blocksize", f"block size {bs} (log {blog}) is invalid")]
    agc, agb = f["sb_agcount"], f["sb_agblocks"]
    if not f["sb_dblocks"] or f["sb_dblocks"] > agc * agb or \
            f["sb_dblocks"] < (agc - 1) * agb + MIN_AG_BLOCKS:
        bad.append(("sb_dblocks", f"{f['sb_dblocks']} blocks do not fit {agc} AGs of {agb}"))
    if f["sb_agblklog"] != _log2_roundup(agb) & 0xFF:
        bad.append(("sb_agblklog", f"{f['sb_agblklog']} does not fit agblocks {agb}"))
    isz, ilog = f["sb_inodesize"], f["sb_inodelog"]
    if not 256 <= isz <= 2048 or not 8 <= ilog <= 11 or isz != 1 << ilog or \
            f["sb_logsunit"] > 256 * 1024 or f["sb_inopblock"] != -(-bs // isz) or \
            blog - ilog != f["sb_inopblog"]:
        bad.append(("sb_inodesize", "inode size fields are inconsistent"))
    lb = f["sb_logblocks"]
    if not lb or lb > MAX_LOG_BLOCKS or lb << blog > MAX_LOG_BYTES or \
            (f["sb_logsunit"] > 1 and f["sb_logsunit"] % bs):
        bad.append(("sb_logblocks", f"log geometry ({lb} blocks, sunit "
                    f"{f['sb_logsunit']}) is invalid"))
    if f["sb_versionnum"] & VERSION_SECTORBIT:
        lss = f["sb_logsectsize"]
        if not 512 <= lss <= 32768 or lss & (lss - 1) or 1 << f["sb_logsectlog"] != lss:
            bad.append(("sb_logsectsize", f"log sector size {lss} is invalid"))
    rx = f["sb_rextsize"] * bs
    if not 4096 <= rx <= 1 << 30:
        bad.append(("sb_rextsize", f"realtime extent size {rx} bytes is invalid"))
    if not f["sb_rblocks"]:
        for name in ("sb_rextents", "sb_rbmblocks", "sb_rextslog", "sb_frextents"):
            if f[name]:
                bad.append((name, "set without a realtime device"))
    elif f["sb_rextsize"]:
        rext = f["sb_rextents"]
        if not rext or f["sb_rblocks"] // f["sb_rextsize"] != rext or \
                f["sb_rextslog"] != max(rext.bit_length() - 1, 0) or \
                f["sb_rbmblocks"] != -(-rext // (8 * bs)):
            bad.append(("sb_rblocks", f"realtime geometry ({f['sb_rblocks']} blocks, "
                        f"{rext} extents, {f['sb_rbmblocks']} bitmap blocks) is inconsistent"))
    if not _ino_align_ok(f):
        bad.append(("sb_inoalignmt", f"inode alignment {f['sb_inoalignmt']} is invalid"))
    if f["sb_imax_pct"] > 100:
        bad.append(("sb_imax_pct", f"{f['sb_imax_pct']}% of the space for inodes"))
    unit, width = f["sb_unit"], f["sb_width"]
    if f["sb_versionnum"] & VERSION_DALIGNBIT:
        if (not unit and width) or (unit and agb % unit) or (unit and not width) or \
                (width and unit and width % unit):
            bad.append(("sb_unit", f"stripe unit {unit} / width {width} are invalid"))
    elif unit or width:
        bad.append(("sb_unit", "stripe unit or width set without the feature"))
    if blog + f["sb_dirblklog"] > 16:
        bad.append(("sb_dirblklog", f"directory blocks of 2^{blog + f['sb_dirblklog']}"))
    if not whack:
        return bad
    # secondary_sb_whack, which repair runs on every superblock
    end = (SB.offset("sb_meta_uuid") + 16
           if f["sb_features_incompat"] & C.XFS_SB_FEAT_INCOMPAT_META_UUID
           else SB.offset("sb_lsn") + 8)
    if any(raw[end:ss]):
        bad.append(("unused", f"bytes after the last field (offset {end}) are not zero"))
    if f["sb_flags"]:
        bad.append(("sb_flags", f"flags 0x{f['sb_flags']:x} set"))
    if f["sb_inprogress"] == 1:
        for name in ("sb_uquotino", "sb_gquotino", "sb_pquotino"):
            if f[name] not in (C.NULLFSINO, 0):
                bad.append((name, "quota inode set in a superblock mkfs wrote"))
        if f["sb_qflags"]:
            bad.append(("sb_qflags", "quota flags set in a superblock mkfs wrote"))
    if not f["sb_versionnum"] & VERSION_ALIGNBIT and f["sb_inoalignmt"]:
        bad.append(("sb_inoalignmt", "inode alignment set without the feature"))
    if not f["sb_versionnum"] & VERSION_SECTORBIT and (
            ss != 512 or f["sb_sectlog"] != 9 or f["sb_logsectsize"] or f["sb_logsectlog"]):
        bad.append(("sb_logsectsize", f"sector sizes (data {ss}, log {f['sb_logsectsize']}, "
                    f"log 2^{f['sb_logsectlog']}) set without the sector size feature"))
    return bad


def _ino_align_ok(f: dict) -> bool:
    """sb_validate_ino_align: the alignment mkfs would have chosen."""
    if not f["sb_versionnum"] & VERSION_ALIGNBIT:
        return True
    blog = f["sb_blocklog"]
    if 8192 >> blog == f["sb_inoalignmt"]:
        return True
    align = (8192 * f["sb_inodesize"] // 256) >> blog
    if align == f["sb_inoalignmt"]:
        return True
    if f["sb_features_incompat"] & C.XFS_SB_FEAT_INCOMPAT_SPINODES:
        if align != f["sb_spino_align"]:
            return False
        return (f["sb_inodesize"] * 64) >> blog == f["sb_inoalignmt"]
    return False


GEOMETRY_NAMES = GEOMETRY_FIELDS + ("sb_versionnum (inode alignment bit)",
                                    "sb_versionnum (stripe alignment bit)",
                                    "sb_dirblklog", "sb_features_compat",
                                    "sb_features_ro_compat", "sb_features_incompat",
                                    "sb_meta_uuid (the UUID the metadata carries)")


def geometry_of(f: dict) -> tuple:
    """What every superblock of a filesystem must agree on, in
    GEOMETRY_NAMES' order: xfs_repair's get_sb_geometry (GEOMETRY_FIELDS,
    whether the inode and stripe alignment features are on), the directory
    block size and the three feature words (needsrepair aside: it is set in
    the primary alone).  xfs_repair takes those of a primary whose geometry
    the secondaries agree with: a primary that lost a feature bit has the
    secondaries rewritten without it and the metadata of that feature left
    behind (its own -n rejects the result), one that gained an unknown bit
    stops it, one with another directory block size has every directory
    cleared and its files moved to lost+found.  mkfs sets them once and
    for all, so fstool counts them as geometry: what only the primary holds
    is the primary's damage.  But for META_UUID: a UUID change (xfs_admin
    -U, fstool admin) sets or clears it on a finished filesystem, the
    primary first and then each secondary, so a change stopped part way
    leaves the primary alone ahead of the others, and xfs_repair (which
    votes on geometry alone) keeps that primary and names the secondaries.
    What no UUID change moves is the UUID the metadata carries
    (sb_meta_uuid under META_UUID, else sb_uuid): that counts instead of
    the bit, so such a primary stands and one whose bit or UUID alone is
    damaged is outvoted."""
    v = f["sb_versionnum"]
    return tuple(f[k] for k in GEOMETRY_FIELDS) + (
        bool(v & VERSION_ALIGNBIT), bool(v & VERSION_DALIGNBIT), f["sb_dirblklog"],
        f["sb_features_compat"],
        f["sb_features_ro_compat"],
        f["sb_features_incompat"] & ~(C.XFS_SB_FEAT_INCOMPAT_NEEDSREPAIR |
                                      C.XFS_SB_FEAT_INCOMPAT_META_UUID),
        _uuid_text(f["sb_meta_uuid"] if f["sb_features_incompat"] &
                   C.XFS_SB_FEAT_INCOMPAT_META_UUID else f["sb_uuid"]))


def _uuid_text(raw: bytes) -> str:
    """16 bytes as str(uuid.UUID(bytes=raw)) gives them (the uuid module is
    not loaded for it: it loads platform, more than a check's vote costs)."""
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def read_secondary(dev, offset: int, whack: bool = False):
    """(sector, fields) of the superblock at byte ``offset`` when it passes
    xfs_repair's verify_sb as a secondary (what phase 1 counts: with
    ``whack``, secondary_sb_whack's checks too), else None (beyond the
    image's end, unreadable, no superblock or an invalid one)."""
    if offset < 0 or offset + C.BBSIZE > dev.size:
        return None
    try:
        raw = dev.pread(offset, C.BBSIZE)
        if raw[:4] != b"XFSB":
            return None
        ss = int.from_bytes(raw[SB.offset("sb_sectsize"):SB.offset("sb_sectsize") + 2], "big")
        if ss != C.BBSIZE:
            if not C.BBSIZE < ss <= 32768 or ss & (ss - 1) or offset + ss > dev.size:
                return None
            raw = dev.pread(offset, ss)
    except FsToolError:
        return None
    f = SB.unpack(raw)
    if verify_sb(f, raw, False, whack=whack):
        return None
    return raw, f


class GeometryVote:
    """The primary superblock's geometry against the secondaries where it
    puts them (xfs_repair's verify_set_primary_sb).  ``verdict``:

    - ``single``: the primary names no secondary inside the image (one AG):
      nothing to compare it with, it is taken as it is;
    - ``verified``: the most superblocks agree with it (secondaries that
      differ are the ones to rewrite);
    - ``outvoted``: more superblocks agree on another geometry, that of the
      secondary in AG ``agno`` (``raw``, ``fields``);
    - ``unverified``: no geometry can be trusted (``reason``): no valid
      secondary where the primary puts them, two AGs that disagree, or too
      few superblocks agreeing on any one geometry."""

    def __init__(self, verdict: str, sbs: int = 1, refs: int = 1, agno: int = 0,
                 raw: bytes | None = None, fields: dict | None = None, reason: str = ""):
        self.verdict = verdict
        self.sbs = sbs              # superblocks the primary names in the image, its own included
        self.refs = refs            # superblocks with the winning geometry
        self.agno = agno
        self.raw = raw
        self.fields = fields
        self.reason = reason

    def differs(self, f: dict) -> list:
        """[(field, what the primary says, what the secondary says)] where
        the primary's geometry differs from the secondary's."""
        out = []
        for name, a, b in zip(GEOMETRY_NAMES, geometry_of(f), geometry_of(self.fields)):
            if a != b:
                if isinstance(a, bool):
                    a, b = ("set" if a else "clear"), ("set" if b else "clear")
                elif name.startswith("sb_features"):
                    a, b = f"0x{a:x}", f"0x{b:x}"
                out.append((name, a, b))
        return out

    def describe(self, f: dict) -> str:
        """Where the primary differs from the secondary, in words."""
        return ", ".join(f"{name} is {a} (AG {self.agno}'s: {b})"
                         for name, a, b in self.differs(f))


def primary_sector(dev) -> bytes:
    """The primary superblock's sector (at least 512 bytes; its sector
    size when that is readable), b"" when the image is shorter."""
    head = dev.pread(0, min(dev.size, 32768))
    if len(head) < C.BBSIZE:
        return b""
    return head[:max(C.BBSIZE, _sectsize_guess(head))]


def contradicted_primary(dev) -> list:
    """Findings for a primary superblock that says the image's layout is
    one fstool does not handle (unsupported_layout) where the secondaries
    deny it: what verify_sb finds wrong with it, else where the secondaries
    outvote its geometry.  [] when the layout is the image's."""
    raw = primary_sector(dev)
    if not raw or raw[:4] != b"XFSB":
        return []
    f = SB.unpack(raw)
    why = unsupported_layout(f)
    if why is not None:
        if layout_confirmed(dev, f) is not None:
            return []
    elif f["sb_logstart"] == 0 and not external_log_confirmed(dev, f):
        why = "an external log"
    else:
        return []
    where = dict(structure="sb", agno=0, block=0)
    out = [Finding("SB_PRIMARY", f"primary superblock: {detail}", field=field, **where)
           for field, detail in verify_sb(f, raw, True)]
    if not out:
        vote = vote_geometry(dev, f)
        if vote.verdict == "outvoted":
            out = [Finding("SB_PRIMARY", message, field=field, expected=expected, found=found,
                           **where) for message, field, expected, found in outvoted_by(vote, f)]
    return out or [Finding("SB_PRIMARY", f"primary superblock: it says {why}, the "
                           "secondaries do not", **where)]


def outvoted_by(vote, f: dict) -> list:
    """(message, field, expected, found) for each geometry field of the
    primary (``f``) that ``vote`` outvotes."""
    out = []
    for name, mine, theirs in vote.differs(f):
        field = name.split(" ")[0]
        # the metadata's UUID is given as text (it is one of two fields)
        expected, found = (theirs, mine) if field == "sb_meta_uuid" else \
            (vote.fields[field], f[field])
        out.append((f"primary superblock: {name} is {mine}, {vote.refs} of {vote.sbs} "
                    f"superblocks say {theirs} (the rest is checked once the primary is "
                    "restored)", field, expected, found))
    return out


def secondary_offsets(f: dict, size: int) -> list:
    """The byte offsets where the superblock ``f`` puts the secondaries
    (AGs 1 on) that lie inside an image of ``size`` bytes; none when its
    block size or AG size is not one a filesystem can have."""
    bs, agblocks = f["sb_blocksize"], f["sb_agblocks"]
    if not 512 <= bs <= 65536 or bs & (bs - 1) or agblocks < MIN_AG_BLOCKS:
        return []
    agsize = bs * agblocks
    n = min(f["sb_agcount"], size // agsize + 1)
    return [agno * agsize for agno in range(1, n) if agno * agsize + C.BBSIZE <= size]


def unsupported_layout(f: dict) -> str | None:
    """What of the filesystem's layout a superblock says fstool does not
    handle: a v4 (or older) filesystem, a realtime section; None for a v5
    superblock with no realtime section, or a version no filesystem has
    (damage)."""
    version = f["sb_versionnum"] & C.XFS_SB_VERSION_NUMBITS
    if 1 <= version <= 4:
        return f"an XFS v{version} filesystem (no metadata CRCs; fstool handles v5 only)"
    if version != C.XFS_SB_VERSION_5:
        return None
    if f["sb_rblocks"] or f["sb_rextents"]:
        return "a filesystem with a realtime section"
    return None


def layout_confirmed(dev, f: dict) -> str | None:
    """The primary superblock's (``f``) unsupported layout when it is the
    image's: as many superblocks (magic right) where the primary puts the
    secondaries say it as deny it, or none can be read.  A primary the
    secondaries contradict is damaged instead (and phase 1 restores it)."""
    why = unsupported_layout(f)
    if why is None:
        return None
    return why if _secondaries_agree(dev, f, unsupported_layout) else None


def external_log_confirmed(dev, f: dict) -> bool:
    """Whether the primary superblock's (``f``) external log (sb_logstart
    0) is the image's: the secondaries do not outvote it (as
    :func:`layout_confirmed` counts them)."""
    return f["sb_logstart"] == 0 and \
        _secondaries_agree(dev, f, lambda g: g["sb_logstart"] == 0)


def _secondaries_agree(dev, f: dict, judge) -> bool:
    """Whether as many superblocks (magic right) where the primary (``f``)
    puts the secondaries give ``judge`` the primary's answer as not (true
    when none can be read)."""
    mine = judge(f)
    said = denied = 0
    for off in secondary_offsets(f, dev.size)[:64]:
        sec = dev.pread(off, C.BBSIZE)
        if sec[:4] == b"XFSB":
            if judge(SB.unpack(sec)) == mine:
                said += 1
            else:
                denied += 1
    return said >= denied


def vote_geometry(dev, f: dict) -> GeometryVote:
    """Compare the primary superblock's geometry (fields ``f``, valid in
    themselves) with every valid secondary where it puts them and choose,
    as xfs_repair's phase 1 does, the geometry most superblocks share (the
    primary's counted; a tie goes to the geometry found last, so never to
    the primary's); at least half of the superblocks must share it, and
    with two AGs both.  Secondaries beyond the image's end (a truncated
    image) are not counted; where every valid secondary agrees with the
    primary it stands, however few they are (xfs_repair wants half)."""
    agsize = f["sb_agblocks"] * f["sb_blocksize"]
    offsets = secondary_offsets(f, dev.size)
    sbs = 1 + len(offsets)
    if sbs == 1:
        return GeometryVote("single")
    mine = geometry_of(f)
    groups = {mine: [0]}            # geometry -> AGs, in the order found
    first = {}                      # geometry -> (sector, fields) of its first secondary
    valid = 0
    for off in offsets:
        got = read_secondary(dev, off)
        if got is None:
            continue
        valid += 1
        geo = geometry_of(got[1])
        groups.setdefault(geo, []).append(off // agsize)
        first.setdefault(geo, got)
    if not valid:
        return GeometryVote("unverified", sbs, reason=(
            f"no valid secondary superblock where it puts them (AGs 1 to {sbs - 1})"))
    if len(groups) == 1:
        return GeometryVote("verified", sbs, refs=1 + valid)
    best = max(reversed(list(groups)), key=lambda g: len(groups[g]))
    refs = len(groups[best])
    if best == mine and refs >= sbs // 2:
        return GeometryVote("verified", sbs, refs)
    # the geometry the primary is outvoted by, or (no geometry winning) the
    # first other one, to name
    other = best if best != mine else next(g for g in groups if g != mine)
    vote = GeometryVote("outvoted", sbs, refs, groups[other][0], *first[other])
    if sbs == 2:
        vote.verdict = "unverified"
        vote.reason = (f"the only secondary superblock disagrees with it ({vote.describe(f)}): "
                       "with two AGs neither can be trusted over the other")
    elif refs < sbs // 2:
        vote.verdict = "unverified"
        vote.reason = (f"no geometry is shared by half of the {sbs} superblocks (at most "
                       f"{refs})")
    return vote


def phase_superblocks(ctx) -> None:
    sb = ctx.sb
    primary = sb.fields
    for field, detail in verify_sb(primary, sb.raw, True):
        ctx.report("SB_PRIMARY", f"primary superblock: {detail}", agno=0, block=0,
                   field=field)
    if primary["sb_shared_vn"]:
        ctx.report("SB_PRIMARY", "primary superblock: shared_vn is not zero", agno=0,
                   block=0, field="sb_shared_vn", expected=0,
                   found=primary["sb_shared_vn"])
    if primary["sb_bad_features2"] and primary["sb_bad_features2"] != \
            primary["sb_features2"]:
        ctx.report("SB_PRIMARY", "primary superblock: features2 and bad_features2 "
                   "differ", agno=0, block=0, field="sb_bad_features2",
                   expected=primary["sb_features2"], found=primary["sb_bad_features2"])
    _check_quota_state(ctx)
    incompat = primary["sb_features_incompat"]
    if incompat & C.XFS_SB_FEAT_INCOMPAT_NEEDSREPAIR:
        ctx.report("SB_NEEDSREPAIR", "primary superblock: the filesystem is marked as "
                   "needing repair", agno=0, block=0, field="sb_features_incompat",
                   expected=incompat & ~C.XFS_SB_FEAT_INCOMPAT_NEEDSREPAIR, found=incompat)
    unknown = primary["sb_features_ro_compat"] & ~KNOWN_RO_COMPAT
    if unknown:
        ctx.report("SB_FEATURES", f"unknown read-only-compatible features 0x{unknown:x}",
                   agno=0, block=0, field="sb_features_ro_compat", found=unknown)
    hooks = ctx.hooks
    if not (hooks is not None and hooks.geometry_settled) and not _vote_geometry(ctx):
        return
    _check_sb_inodes(ctx)
    _check_sb_lsn(ctx)
    for agno in range(1, sb.agcount):
        _check_secondary(ctx, agno)


def _check_quota_state(ctx) -> None:
    """The quota feature bit and flags as xfs_repair leaves them: no
    quota inode named, quotas are turned off (its -n says it would);
    quota flags with the v4 group/project bits, which the kernel
    refuses on v5 (xfs_repair -n says nothing: it clears them when it
    writes)."""
    f = ctx.sb.fields
    v, q = f["sb_versionnum"], f["sb_qflags"]
    named = any(f[n] not in (0, C.NULLFSINO) for n in ("sb_uquotino", "sb_gquotino",
                                                       "sb_pquotino"))
    turned_off = bool(v & VERSION_QUOTABIT) and not named
    if turned_off:
        ctx.report("SB_QFLAGS", "primary superblock: the quota feature is on and no "
                   "quota inode is named", agno=0, block=0, field="sb_versionnum",
                   expected=v & ~VERSION_QUOTABIT, found=v)
    want = q & QFLAGS_ALL if v & VERSION_QUOTABIT and named else 0
    if q != want and (turned_off or q & QFLAGS_V4_ONLY):
        why = "hold v4 bits the kernel refuses" if q & QFLAGS_V4_ONLY else \
            "are set with quotas turned off"
        ctx.report("SB_QFLAGS", f"primary superblock: quota flags 0x{q:x} {why}", agno=0,
                   block=0, field="sb_qflags", expected=want, found=q)


def _vote_geometry(ctx) -> bool:
    """The primary's geometry against the secondaries' (xfs_repair's
    phase 1).  Outvoted, each field the others agree on otherwise is a
    finding and the check stops here, as xfs_repair -n does: everything
    else would be read where the damaged geometry says.  Returns whether
    the check goes on."""
    primary = ctx.sb.fields
    vote = vote_geometry(ctx.fs.dev, primary)
    if vote.verdict == "unverified":
        ctx.report("SB_PRIMARY", f"primary superblock: its geometry cannot be verified: "
                   f"{vote.reason}", agno=0, block=0, field="geometry")
    if vote.verdict != "outvoted":
        return True
    for message, field, expected, found in outvoted_by(vote, primary):
        ctx.report("SB_PRIMARY", message, agno=0, block=0, field=field,
                   expected=expected, found=found)
    ctx.stop = True
    return False


def _check_sb_lsn(ctx) -> None:
    """The primary's sb_lsn ahead of the log: the kernel refuses to
    mount it.  xfs_repair -n does not count the superblock's LSN among
    the metadata LSNs (so this is a warning: check's status stays its);
    its repair, which writes the superblock, then formats the log past
    it.  Repair stamps the superblock with its own LSN instead."""
    lsn = ctx.sb.fields["sb_lsn"]
    if lsn in (0, 0xFFFFFFFFFFFFFFFF):
        return
    cur = log_head_lsn(ctx)
    if cur is None:
        return
    cycle, block = _signed(lsn >> 32), _signed(lsn & 0xFFFFFFFF)
    if cycle > cur[0] or (cycle == cur[0] and block > cur[1]):
        ctx.report("SB_LSN_AHEAD", f"primary superblock: sb_lsn {cycle}:{block} is ahead "
                   f"of the log ({cur[0]}:{cur[1]})", agno=0, block=0, field="sb_lsn",
                   expected=(cur[0] << 32) | cur[1], found=lsn)


def _check_sb_inodes(ctx) -> None:
    """The root, realtime bitmap and summary inodes sit where mkfs puts
    them (xfs_repair's calc_mkfs)."""
    want = root_ino(ctx)
    f = ctx.sb.fields
    for i, name in enumerate(("sb_rootino", "sb_rbmino", "sb_rsumino")):
        if f[name] != want + i:
            ctx.report("SB_ROOTINO", f"{name} is {f[name]}, mkfs puts it at {want + i}",
                       agno=0, block=0, field=name, expected=want + i, found=f[name])


def root_ino(ctx) -> int:
    """The root directory as xfs_repair goes on with it: where mkfs puts
    it (a superblock field that says otherwise is an SB_ROOTINO finding,
    and repair resets it)."""
    got = ctx.root_inode
    if got is None:
        places = expected_rootinos(ctx)
        rootino = ctx.sb.fields["sb_rootino"]
        got = ctx.root_inode = rootino if rootino in places else places[0]
    return got


def rt_inodes(ctx) -> tuple:
    """(bitmap, summary): the realtime inodes, likewise where mkfs puts
    them."""
    root = root_ino(ctx)
    return root + 1, root + 2


def expected_rootinos(ctx) -> list:
    """Where mkfs puts the first inode (the kernel's
    xfs_ialloc_calc_rootino): after the AGFL's first fill, which
    mkfs.xfs 6.10.1 makes smaller than 6.1 did where a btree cannot
    grow (64 KiB blocks); either place is right."""
    sb = ctx.sb
    reflink = sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK)
    return [_rootino_after(ctx, agfl_prefill(release, sb.blocksize, sb.agblocks,
                                             ctx.has_rmap, reflink))
            for release in ("6.10", "6.1")]


def _rootino_after(ctx, agfl: int) -> int:
    sb = ctx.sb
    f = sb.fields
    reflink = sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK)
    first = -(-4 * sb.sectsize // sb.blocksize) + 3      # headers, bno/cnt/ino roots
    first += agfl
    if sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_FINOBT):
        first += 1
    if ctx.has_rmap:
        first += 1
    if reflink:
        first += 1
    if sb.logstart and sb.logstart >> sb.agblklog == 0:
        first += sb.logblocks
    if f["sb_versionnum"] & VERSION_DALIGNBIT and f["sb_unit"]:
        first = -(-first // f["sb_unit"]) * f["sb_unit"]
    elif f["sb_versionnum"] & VERSION_ALIGNBIT and f["sb_inoalignmt"] > 1:
        a = f["sb_inoalignmt"]
        first = -(-first // a) * a
    return first << sb.inopblog


def _check_secondary(ctx, agno: int) -> None:
    sb = ctx.sb
    primary = sb.fields
    where = dict(agno=agno, block=0)
    try:
        raw = ctx.fs.dev.pread(ctx.fs.agb_to_daddr(agno, 0) << C.BBSHIFT, sb.sectsize)
    except Exception as e:        # noqa: BLE001 - an unreadable sector is a finding
        ctx.report("SB_SECONDARY", f"secondary superblock in AG {agno} cannot be read: "
                   f"{e}", **where)
        return
    sec = SB.unpack(raw)
    for field, detail in verify_sb(sec, raw, False):
        ctx.report("SB_SECONDARY", f"secondary superblock in AG {agno}: {detail}",
                   field=field, **where)
    if sec["sb_magicnum"] != C.XFS_SB_MAGIC:
        return
    for f in GEOMETRY_FIELDS:
        if sec[f] != primary[f]:
            ctx.report("SB_SECONDARY", f"secondary superblock in AG {agno}: {f} "
                       "differs from the primary", field=f, expected=primary[f],
                       found=sec[f], **where)
    for bit, f in ((VERSION_ALIGNBIT, "sb_versionnum"), (VERSION_DALIGNBIT, "sb_versionnum")):
        if (sec[f] ^ primary[f]) & bit:
            ctx.report("SB_SECONDARY", f"secondary superblock in AG {agno}: alignment "
                       "feature bits differ from the primary", field=f,
                       expected=primary[f], found=sec[f], **where)
    for f, mask in (("sb_features_compat", 0xFFFFFFFF),
                    ("sb_features_ro_compat", 0xFFFFFFFF),
                    ("sb_features_incompat", ~C.XFS_SB_FEAT_INCOMPAT_NEEDSREPAIR)):
        if (sec[f] ^ primary[f]) & mask:
            ctx.report("SB_SECONDARY", f"secondary superblock in AG {agno}: {f} "
                       f"0x{sec[f]:x} differs from the primary's 0x{primary[f]:x}",
                       field=f, expected=primary[f], found=sec[f], **where)
    if sec["sb_features_log_incompat"] != primary["sb_features_log_incompat"]:
        ctx.report("SB_SECONDARY_LOG", f"secondary superblock in AG {agno}: "
                   f"sb_features_log_incompat 0x{sec['sb_features_log_incompat']:x} "
                   f"differs from the primary's "
                   f"0x{primary['sb_features_log_incompat']:x}",
                   field="sb_features_log_incompat",
                   expected=primary["sb_features_log_incompat"],
                   found=sec["sb_features_log_incompat"], **where)
    # a secondary's sb_lsn is not looked at: xfs_repair does not count
    # it among the metadata LSNs the log must be past


# -- LSNs --------------------------------------------------------------------
def check_lsn(ctx, lsn: int, structure: str, **where) -> None:
    """Metadata stamped with an LSN the log has not reached (xfs_repair
    tracks the largest and would reformat the log)."""
    if lsn == 0xFFFFFFFFFFFFFFFF or lsn == 0 or lsn < ctx.lsn_behind:
        return
    cur = log_head_lsn(ctx)
    if cur is None:
        return
    cycle, block = _signed(lsn >> 32), _signed(lsn & 0xFFFFFFFF)
    if cycle > cur[0] or (cycle == cur[0] and block >= cur[1] and cur != (0, 0)):
        ctx.report("LSN_AHEAD", f"{structure} is stamped with LSN {cycle}:{block}, "
                   f"ahead of the log ({cur[0]}:{cur[1]})", structure=structure,
                   found=lsn, **where)


def log_head_lsn(ctx):
    """(cycle, block) the log will write next, or None if unknown."""
    if not ctx.log_head_read:
        ctx.log_head_read = True
        try:
            _ld, st = find_state(ctx.fs)
            # a log of zeroes is at 0:0 (so xfs_repair -n says): every
            # LSN a block was ever stamped with is ahead of it
            ctx.log_head = ((0, 0) if st.never_written else
                            (_signed(st.curr_cycle or st.cycle), st.head))
        except Exception:       # noqa: BLE001 - a broken log is the log phase's finding
            ctx.log_head = None
        cur = ctx.log_head
        if cur is not None and cur[0] > 0 and cur[1] >= 0:
            # every LSN of a positive cycle below the log's, or of its
            # cycle and a block before the head, is behind it
            ctx.lsn_behind = (cur[0] << 32) | cur[1]
    return ctx.log_head


def claim_ag_headers(ctx, agno: int) -> None:
    hdr_blocks = -(-4 * ctx.sb.sectsize // ctx.sb.blocksize)
    ctx.claim(agno, 0, hdr_blocks, OWN_FS)


def _signed(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v
