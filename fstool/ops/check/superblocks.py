"""Phase superblocks: the primary's fields beyond what opening the image
checks, every secondary against the primary (xfs_repair's verify_sb,
compare_sb and secondary_sb_whack), and the superblock inode numbers."""
from __future__ import annotations

from ...format import constants as C
from ...format.structs import SB
from ...fs.btree import alloc_maxlevels, rmap_maxlevels
from .base import OWN_FS

VERSION_ALIGNBIT, VERSION_DALIGNBIT, VERSION_SECTORBIT = 0x80, 0x100, 0x800
# fields every superblock must agree on (xfs_repair's get_sb_geometry)
GEOMETRY_FIELDS = ("sb_blocksize", "sb_dblocks", "sb_rblocks", "sb_rextents", "sb_logstart",
                   "sb_rextsize", "sb_agblocks", "sb_agcount", "sb_rbmblocks",
                   "sb_logblocks", "sb_sectsize", "sb_inodesize")
KNOWN_RO_COMPAT = 0xF
KNOWN_COMPAT = 0
MAX_LOG_BLOCKS = 1024 * 1024
MAX_LOG_BYTES = (2 << 30) - (10 << 20)
MIN_AG_BLOCKS = 64
NULLFSINO = 0xFFFFFFFFFFFFFFFF


def _log2_roundup(n: int) -> int:
    return max(0, (n - 1).bit_length())


def verify_sb(f: dict, raw: bytes, primary: bool) -> list:
    """What xfs_repair's verify_sb and secondary_sb_whack find wrong in one
    superblock: [(field, detail)] (the CRC included; geometry against the
    primary is compared by the caller)."""
    from ..._backend import parsers
    bad = []
    if f["sb_magicnum"] != C.XFS_SB_MAGIC:
        return [("sb_magicnum", f"bad magic 0x{f['sb_magicnum']:x}")]
    if f["sb_versionnum"] & C.XFS_SB_VERSION_NUMBITS != C.XFS_SB_VERSION_5:
        return [("sb_versionnum", f"version {f['sb_versionnum'] & 0xF}, expected 5")]
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
            if f[name] not in (NULLFSINO, 0):
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


class SuperblockPhase:
    # LSNs below this one are behind the log's head (log_head_lsn sets it)
    _lsn_behind = 0

    def phase_superblocks(self) -> None:
        sb = self.sb
        primary = sb.fields
        for field, detail in verify_sb(primary, sb.raw, True):
            self.report("SB_PRIMARY", f"primary superblock: {detail}", agno=0, block=0,
                        field=field)
        if primary["sb_shared_vn"]:
            self.report("SB_PRIMARY", "primary superblock: shared_vn is not zero", agno=0,
                        block=0, field="sb_shared_vn", found=primary["sb_shared_vn"])
        if primary["sb_bad_features2"] and primary["sb_bad_features2"] != \
                primary["sb_features2"]:
            self.report("SB_PRIMARY", "primary superblock: features2 and bad_features2 "
                        "differ", agno=0, block=0, field="sb_bad_features2",
                        expected=primary["sb_features2"], found=primary["sb_bad_features2"])
        unknown = primary["sb_features_ro_compat"] & ~KNOWN_RO_COMPAT
        if unknown:
            self.report("SB_FEATURES", f"unknown read-only-compatible features 0x{unknown:x}",
                        agno=0, block=0, field="sb_features_ro_compat", found=unknown)
        self._check_sb_inodes()
        # sb_lsn is not looked at: xfs_repair does not count the superblock's
        # among the metadata LSNs the log must be past
        for agno in range(1, sb.agcount):
            self._check_secondary(agno)

    def _check_sb_inodes(self) -> None:
        """The root, realtime bitmap and summary inodes sit where mkfs puts
        them (xfs_repair's calc_mkfs)."""
        want = self.expected_rootino()
        f = self.sb.fields
        for i, name in enumerate(("sb_rootino", "sb_rbmino", "sb_rsumino")):
            if f[name] != want + i:
                self.report("SB_ROOTINO", f"{name} is {f[name]}, mkfs puts it at {want + i}",
                            agno=0, block=0, field=name, expected=want + i, found=f[name])

    def rt_inodes(self) -> tuple:
        """(bitmap, summary): the realtime inodes as xfs_repair goes on with
        them, where mkfs puts them (a superblock field that says otherwise
        is an SB_ROOTINO finding, and repair resets it)."""
        got = getattr(self, "_rt_inodes", None)
        if got is None:
            want = self.expected_rootino()
            got = self._rt_inodes = (want + 1, want + 2)
        return got

    def expected_rootino(self) -> int:
        """The first inode mkfs allocates (the kernel's xfs_ialloc_calc_rootino)."""
        sb = self.sb
        f = sb.fields
        reflink = sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK)
        first = -(-4 * sb.sectsize // sb.blocksize) + 3      # headers, bno/cnt/ino roots
        # the initial AGFL: a split of each free-space btree, of the rmapbt
        first += 2 * min(2, alloc_maxlevels(sb.blocksize, sb.agblocks))
        if self.has_rmap:
            first += min(2, rmap_maxlevels(sb.blocksize, sb.agblocks, reflink))
        if sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_FINOBT):
            first += 1
        if self.has_rmap:
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

    def _check_secondary(self, agno: int) -> None:
        sb = self.sb
        primary = sb.fields
        where = dict(agno=agno, block=0)
        try:
            raw = self.fs.dev.pread(self.fs.agb_to_daddr(agno, 0) << C.BBSHIFT, sb.sectsize)
        except Exception as e:        # noqa: BLE001 - an unreadable sector is a finding
            self.report("SB_SECONDARY", f"secondary superblock in AG {agno} cannot be read: "
                        f"{e}", **where)
            return
        sec = SB.unpack(raw)
        for field, detail in verify_sb(sec, raw, False):
            self.report("SB_SECONDARY", f"secondary superblock in AG {agno}: {detail}",
                        field=field, **where)
        if sec["sb_magicnum"] != C.XFS_SB_MAGIC:
            return
        for f in GEOMETRY_FIELDS:
            if sec[f] != primary[f]:
                self.report("SB_SECONDARY", f"secondary superblock in AG {agno}: {f} "
                            "differs from the primary", field=f, expected=primary[f],
                            found=sec[f], **where)
        for bit, f in ((VERSION_ALIGNBIT, "sb_versionnum"), (VERSION_DALIGNBIT, "sb_versionnum")):
            if (sec[f] ^ primary[f]) & bit:
                self.report("SB_SECONDARY", f"secondary superblock in AG {agno}: alignment "
                            "feature bits differ from the primary", field=f,
                            expected=primary[f], found=sec[f], **where)
        for f, mask in (("sb_features_compat", 0xFFFFFFFF),
                        ("sb_features_ro_compat", 0xFFFFFFFF),
                        ("sb_features_incompat", ~C.XFS_SB_FEAT_INCOMPAT_NEEDSREPAIR)):
            if (sec[f] ^ primary[f]) & mask:
                self.report("SB_SECONDARY", f"secondary superblock in AG {agno}: {f} "
                            f"0x{sec[f]:x} differs from the primary's 0x{primary[f]:x}",
                            field=f, expected=primary[f], found=sec[f], **where)
        # a secondary's sb_lsn is not looked at: xfs_repair does not count
        # it among the metadata LSNs the log must be past

    # -- LSNs --------------------------------------------------------------------
    def _check_lsn(self, lsn: int, structure: str, **where) -> None:
        """Metadata stamped with an LSN the log has not reached (xfs_repair
        tracks the largest and would reformat the log)."""
        if lsn == 0xFFFFFFFFFFFFFFFF or lsn == 0 or lsn < self._lsn_behind:
            return
        cur = self.log_head_lsn()
        if cur is None:
            return
        cycle, block = _signed(lsn >> 32), _signed(lsn & 0xFFFFFFFF)
        if cycle > cur[0] or (cycle == cur[0] and block >= cur[1] and cur != (0, 0)):
            self.report("LSN_AHEAD", f"{structure} is stamped with LSN {cycle}:{block}, "
                        f"ahead of the log ({cur[0]}:{cur[1]})", structure=structure,
                        found=lsn, **where)

    def log_head_lsn(self):
        """(cycle, block) the log will write next, or None if unknown."""
        if not hasattr(self, "_log_head"):
            from ...log.head import find_state
            try:
                _ld, st = find_state(self.fs)
                # a log of zeroes is at 0:0 (so xfs_repair -n says): every
                # LSN a block was ever stamped with is ahead of it
                self._log_head = ((0, 0) if st.never_written else
                                  (_signed(st.curr_cycle or st.cycle), st.head))
            except Exception:       # noqa: BLE001 - a broken log is the log phase's finding
                self._log_head = None
            cur = self._log_head
            if cur is not None and cur[0] > 0 and cur[1] >= 0:
                # every LSN of a positive cycle below the log's, or of its
                # cycle and a block before the head, is behind it
                self._lsn_behind = (cur[0] << 32) | cur[1]
        return self._log_head

    def claim_ag_headers(self, agno: int) -> None:
        hdr_blocks = -(-4 * self.sb.sectsize // self.sb.blocksize)
        self.claim(agno, 0, hdr_blocks, OWN_FS)


def _signed(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v
