"""Superblock decoding, validation and derived geometry."""
from __future__ import annotations

from .._backend import parsers
from ..errors import CorruptionError, NotXfsError, UnknownFeatureError, UnsupportedError
from ..format import constants as C
from ..format.structs import SB


def _log2(n: int) -> int:
    return n.bit_length() - 1


class Superblock:
    """The primary superblock plus the geometry derived from it."""

    def __init__(self, raw: bytes):
        self.raw = raw
        f = SB.unpack(raw)
        self.fields = f
        if f["sb_magicnum"] != C.XFS_SB_MAGIC:
            raise NotXfsError(
                "superblock", f"bad magic 0x{f['sb_magicnum']:08x}: not an XFS filesystem "
                "(or its primary superblock is destroyed)", agno=0, block=0, field="sb_magicnum")
        version = f["sb_versionnum"] & C.XFS_SB_VERSION_NUMBITS
        if version != C.XFS_SB_VERSION_5:
            raise UnsupportedError(
                f"XFS version {version} (non-CRC, v4) filesystems are not supported; "
                "fstool reads XFS v5 only")
        for name, lo, hi in (("sb_blocksize", 512, 65536), ("sb_sectsize", 512, 32768),
                             ("sb_inodesize", 256, 2048)):
            v = f[name]
            if not lo <= v <= hi or v & (v - 1):
                raise CorruptionError("superblock", f"{v} is not a valid size",
                                      agno=0, block=0, field=name)
        sectsize = f["sb_sectsize"]
        stored = int.from_bytes(raw[C.XFS_SB_CRC_OFF:C.XFS_SB_CRC_OFF + 4], "little")
        computed = parsers.xfs_cksum(raw[:sectsize], C.XFS_SB_CRC_OFF)
        if stored != computed:
            raise CorruptionError("superblock", f"CRC mismatch (stored 0x{stored:08x}, "
                                  f"computed 0x{computed:08x})", agno=0, block=0, field="sb_crc")
        self.blocksize = f["sb_blocksize"]
        self.blocklog = f["sb_blocklog"]
        self.sectsize = sectsize
        self.inodesize = f["sb_inodesize"]
        self.inodelog = f["sb_inodelog"]
        self.inopblock = f["sb_inopblock"]
        self.inopblog = f["sb_inopblog"]
        self.agblocks = f["sb_agblocks"]
        self.agcount = f["sb_agcount"]
        self.agblklog = f["sb_agblklog"]
        self.dblocks = f["sb_dblocks"]
        self.rootino = f["sb_rootino"]
        self.dirblklog = f["sb_dirblklog"]
        self.logstart = f["sb_logstart"]
        self.logblocks = f["sb_logblocks"]
        self.uuid_bytes = f["sb_uuid"]
        self.incompat = f["sb_features_incompat"]
        self.ro_compat = f["sb_features_ro_compat"]
        self.log_incompat = f["sb_features_log_incompat"]
        self._check_geometry()
        self._check_features()
        # metadata blocks are stamped with meta_uuid when the uuid was changed
        if self.incompat & C.XFS_SB_FEAT_INCOMPAT_META_UUID:
            self.meta_uuid = f["sb_meta_uuid"]
        else:
            self.meta_uuid = self.uuid_bytes
        self.has_ftype = bool(self.incompat & C.XFS_SB_FEAT_INCOMPAT_FTYPE)
        self.dirblksize = self.blocksize << self.dirblklog
        self.dirblkfsbs = 1 << self.dirblklog
        self.bb_per_fsb = self.blocksize >> C.BBSHIFT
        self.agino_log = self.agblklog + self.inopblog

    def _bad(self, field: str, detail: str):
        raise CorruptionError("superblock", detail, agno=0, block=0, field=field)

    def _check_geometry(self) -> None:
        if 1 << self.blocklog != self.blocksize:
            self._bad("sb_blocklog", f"{self.blocklog} does not match blocksize {self.blocksize}")
        if 1 << self.inodelog != self.inodesize:
            self._bad("sb_inodelog", f"{self.inodelog} does not match inodesize {self.inodesize}")
        if self.inopblock != self.blocksize // self.inodesize or \
                1 << self.inopblog != self.inopblock:
            self._bad("sb_inopblock", f"{self.inopblock} inodes per block is inconsistent")
        if self.agcount == 0 or self.agblocks < 64:
            self._bad("sb_agblocks", f"{self.agcount} AGs of {self.agblocks} blocks is invalid")
        if self.agblklog != _log2(self.agblocks - 1) + 1:
            self._bad("sb_agblklog", f"{self.agblklog} does not fit agblocks {self.agblocks}")
        if not (self.agcount - 1) * self.agblocks < self.dblocks <= self.agcount * self.agblocks:
            self._bad("sb_dblocks", f"{self.dblocks} blocks do not fit {self.agcount} AGs "
                      f"of {self.agblocks} blocks")
        if self.dirblklog > 16 or (self.blocksize << self.dirblklog) > 65536:
            self._bad("sb_dirblklog", f"directory block size {self.blocksize << self.dirblklog} "
                      "exceeds 64 KiB")

    def _check_features(self) -> None:
        f = self.fields
        if f["sb_rblocks"] or f["sb_rextents"]:
            raise UnsupportedError("filesystems with a realtime device are not supported")
        unknown = self.incompat & ~C.READ_INCOMPAT_OK
        if unknown:
            names = [C.INCOMPAT_NAMES.get(1 << b, f"0x{1 << b:x}")
                     for b in range(32) if unknown & (1 << b)]
            raise UnknownFeatureError(
                f"incompatible features not supported: {', '.join(names)}")

    # -- features --------------------------------------------------------
    def has_incompat(self, bit: int) -> bool:
        return bool(self.incompat & bit)

    def has_ro_compat(self, bit: int) -> bool:
        return bool(self.ro_compat & bit)

    @property
    def uuid(self):
        """The filesystem uuid as a ``uuid.UUID`` (the module imported on use:
        opening an image does not need it)."""
        import uuid as uuidlib  # lazy: start-up (uuid loads platform: ~11M instructions)
        return uuidlib.UUID(bytes=self.uuid_bytes)

    @property
    def label(self) -> str:
        return self.fields["sb_fname"].split(b"\0", 1)[0].decode("utf-8", "replace")

    def feature_names(self) -> list[str]:
        names = ["crc"]
        names += [n for b, n in C.RO_COMPAT_NAMES.items() if self.ro_compat & b]
        names += [n for b, n in C.INCOMPAT_NAMES.items() if self.incompat & b]
        return names
