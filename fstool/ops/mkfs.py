"""Create XFS v5 filesystems: geometry as mkfs.xfs chooses it (the choices
of release 6.1 or 6.10.1, see RELEASES), and the initial metadata written
block for block as mkfs.xfs writes it.

Only metadata is written.  A new image file is created sparse, and the log
of an existing file is cleared by punching a hole, never by writing zeros.
"""
from __future__ import annotations

import dataclasses
import os
import stat
import struct
import time
import uuid as uuidlib

from ..errors import BadValue, FsToolError
from ..format import constants as C
from ..format.structs import AGF, AGFL, AGI, SB
from ..fs import btree as B
from ..fs import btree_write as BW
from ..fs.btree import agfl_prefill
from ..fs.icore import InodeEncoder, InodeSpec
from ..fs.logres import LogGeometry, min_log_blocks
from ..io import verify as V
from ..io.device import Device, refuse_not_an_image
from ..format import log as L
from ..io.partition import read_table, split
from ..ns.attrbuild import encode_xattrs
from ..io.lock import refuse_if_mounted
from ..io.lock import ImageLock
from ..io.signals import held

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40

XFS_AG_MIN_BYTES = 16 * MiB
XFS_AG_MAX_BYTES = 1 << 40
XFS_MIN_LOG_BYTES = 10 * MiB          # mkfs.xfs's floor from 1 GiB up
XFS_MAX_LOG_BYTES = 2 * GiB - XFS_MIN_LOG_BYTES  # the kernel refuses larger logs
XFS_MAX_LOG_BLOCKS = 1024 * 1024
XFS_MIN_LOG_BLOCKS = 512
XFS_MIN_REALISTIC_LOG_BYTES = 64 * MiB
MKFS_MIN_SIZE = 300 * MiB             # below this mkfs.xfs refuses; fstool goes on
MIN_SIZE = 16 * MiB
XFS_INODE_BIG_CLUSTER_SIZE = 8192
XFS_INODES_PER_CHUNK = 64
XFS_DFL_IMAXPCT = 25
MKFS_UNMOUNT_TID = 0xB0C0D0D0

VERSIONNUM_V5 = 0xB4A5     # v5 | MOREBITS | DIRV2 | EXTFLG | LOGV2 | ALIGN | NLINK
SECTORBIT = 0x0800         # sector sizes other than 512 bytes
FEATURES2 = 0x18A           # LAZYSBCOUNT | ATTR2 | PROJID32 | CRC

ATTRBIT = 0x0010            # the superblock's "has extended attributes" bit
ATTR_BTREE_ROOT_MIN = 4 + 2 * 16   # an attr fork bmbt root of two keys and pointers

# rmapbt owners of the space mkfs hands out (XFS_RMAP_OWN_*)
OWN_FS, OWN_LOG, OWN_AG, OWN_INOBT, OWN_INODES, OWN_REFC = (
    (1 << 64) - n for n in (3, 4, 5, 6, 7, 8))

# What mkfs.xfs turns on when not told, by release.  The release also
# decides the few choices that are not features: how many blocks the AGFL
# is filled with, and the -N text.
RELEASES = {
    "6.1": dict(finobt=True, sparse=True, reflink=True, rmapbt=False, nrext64=False,
                bigtime=True),
    "6.10": dict(finobt=True, sparse=True, reflink=True, rmapbt=True, nrext64=True,
                 bigtime=True),
}
DEFAULT_RELEASE = "6.10"
_DEFAULTS = RELEASES[DEFAULT_RELEASE]
AUTOFSCK = ("none", "check", "optimize", "repair")


class MkfsError(FsToolError):
    """mkfs refuses its target (exit status 1)."""


class MkfsValueError(MkfsError, BadValue):
    """An option's value (or the size given) makes no valid filesystem
    (exit status 2, as for any invalid value)."""


@dataclasses.dataclass
class Options:
    """What the user asked for; None means "choose as mkfs.xfs would"."""
    size: int | None = None
    blocksize: int = 4096
    sectsize: int = 512
    inodesize: int = 512
    agcount: int | None = None
    agsize: int | None = None          # bytes
    logsize: int | None = None         # bytes
    dirblocksize: int | None = None
    finobt: bool = _DEFAULTS["finobt"]
    sparse: bool = _DEFAULTS["sparse"]
    reflink: bool = _DEFAULTS["reflink"]
    rmapbt: bool = _DEFAULTS["rmapbt"]
    nrext64: bool = _DEFAULTS["nrext64"]
    bigtime: bool = _DEFAULTS["bigtime"]
    inobtcount: bool | None = None     # None: with the finobt
    autofsck: str | None = None        # the root directory's autofsck property
    parent: bool = False               # parent pointers (-n parent=1)
    exchange: bool | None = None       # exchange-range; None: with parent pointers
    release: str = DEFAULT_RELEASE     # whose choices: a key of RELEASES
    imaxpct: int | None = None
    label: str = ""
    uuid: str | None = None
    timestamp_ns: int | None = None

    @classmethod
    def of_release(cls, release: str = DEFAULT_RELEASE, **kw) -> "Options":
        """The options with ``release``'s defaults for what ``kw`` does not say."""
        if release not in RELEASES:
            raise MkfsValueError(f"unknown mkfs.xfs release {release!r}")
        return cls(**{**RELEASES[release], "release": release, **kw})


@dataclasses.dataclass
class Geometry:
    blocksize: int
    blocklog: int
    sectsize: int
    inodesize: int
    dblocks: int
    agcount: int
    agblocks: int
    agblklog: int
    dirblocksize: int
    logblocks: int
    logagno: int                  # -1: an external log, in no AG (resize.mkfs_geometry)
    logstart_agbno: int
    prealloc: int                 # first block after the static btree roots
    roots: dict                   # tree name -> AG block of its root
    minfree: int                  # AGFL blocks mkfs fills
    inoalignmt: int
    spino_align: int
    ialloc_blks: int
    ialloc_inos: int
    root_agbno: int
    imaxpct: int
    finobt: bool
    sparse: bool
    reflink: bool
    nrext64: bool
    rmapbt: bool = False
    bigtime: bool = True
    inobtcount: bool = True
    autofsck: str | None = None
    release: str = DEFAULT_RELEASE
    parent: bool = False
    exchange: bool = False

    @property
    def inopblock(self) -> int:
        return self.blocksize // self.inodesize

    @property
    def log_sunit(self) -> int:
        """The log stripe unit in bytes mkfs.xfs sets when none is asked
        for: one filesystem block where the log's sectors are over 512
        bytes, else none (0)."""
        return self.blocksize if self.sectsize != 512 else 0

    @property
    def inopblog(self) -> int:
        return self.inopblock.bit_length() - 1

    @property
    def rootino(self) -> int:
        return (self.root_agbno << self.inopblog)

    def ag_length(self, agno: int) -> int:
        if agno == self.agcount - 1:
            return self.dblocks - agno * self.agblocks
        return self.agblocks


def _log2(n: int) -> int:
    return n.bit_length() - 1


def _pow2(name: str, v: int, lo: int, hi: int) -> None:
    if v < lo or v > hi or v & (v - 1):
        raise MkfsValueError(f"{name} {v} is not valid: it must be a power of two from "
                             f"{lo} to {hi}")


def _default_ag_geometry(dblocks: int, blocklog: int) -> tuple[int, int]:
    """mkfs.xfs's choice for a single device: 4 AGs from 128 MiB to 4 TiB,
    1 TiB AGs above, fewer AGs below 128 MiB."""
    max_blocks = (XFS_AG_MAX_BYTES - 1) >> blocklog
    nbytes = dblocks << blocklog
    if nbytes >= 4 * TiB:
        agsize = max_blocks
    else:
        if nbytes >= 64 * MiB:
            shift = 2
        elif nbytes >= 32 * MiB:
            shift = 1
        else:
            shift = 0
        agsize = dblocks >> shift
        if dblocks & ((1 << shift) - 1) and agsize < max_blocks:
            agsize += 1
    agcount = dblocks // agsize + (dblocks % agsize != 0)
    return agcount, agsize


def compute_geometry(opts: Options) -> Geometry:
    B = opts.blocksize
    _pow2("block size", B, 512, 65536)
    if B < 1024:
        raise MkfsValueError("block size must be at least 1024 bytes for a v5 (CRC) filesystem")
    _pow2("sector size", opts.sectsize, 512, 32768)
    if opts.sectsize > B:
        raise MkfsValueError(f"sector size {opts.sectsize} cannot exceed the block size {B}")
    _pow2("inode size", opts.inodesize, 256, 2048)
    if opts.inodesize < 512:
        raise MkfsValueError("minimum inode size for CRC-enabled (v5) filesystems is 512 bytes")
    if opts.inodesize > B // 2:
        raise MkfsValueError(f"inode size {opts.inodesize} is too large for {B}-byte blocks: at "
                             f"most {B // 2} (two inodes per block)")
    dirbs = opts.dirblocksize or max(B, 4096)
    _pow2("directory block size", dirbs, 4096, 65536)
    if dirbs < B:
        raise MkfsValueError(f"directory block size {dirbs} is smaller than the block size {B}")
    if opts.size is None:
        raise MkfsError("no size given and the target has none: use --size")
    blocklog = _log2(B)
    dblocks = opts.size >> blocklog
    if opts.size < MIN_SIZE:
        raise MkfsValueError(f"{opts.size} bytes is too small: fstool formats images of "
                             f"{MIN_SIZE >> 20} MiB and more")

    ag_min = XFS_AG_MIN_BYTES >> blocklog
    ag_max = (XFS_AG_MAX_BYTES - 1) >> blocklog
    if opts.agsize is not None and opts.agcount is not None:
        raise MkfsValueError("give agcount or agsize, not both")
    if opts.agsize is not None:
        if opts.agsize % B:
            raise MkfsValueError(f"agsize {opts.agsize} is not a multiple of the block size {B}")
        agblocks = opts.agsize >> blocklog
        agcount = dblocks // agblocks + (dblocks % agblocks != 0)
    elif opts.agcount is not None:
        if opts.agcount < 1:
            raise MkfsValueError("agcount must be at least 1")
        agcount = opts.agcount
        agblocks = dblocks // agcount + (dblocks % agcount != 0)
    else:
        agcount, agblocks = _default_ag_geometry(dblocks, blocklog)
    if agblocks < ag_min:
        raise MkfsValueError(f"AG size {agblocks} blocks is too small: the minimum is {ag_min} "
                             f"blocks ({XFS_AG_MIN_BYTES >> 20} MiB)")
    if agblocks > ag_max:
        raise MkfsValueError(f"AG size {agblocks} blocks is too large: the maximum is {ag_max}")
    # a last AG smaller than the minimum is dropped, as mkfs.xfs does
    if dblocks % agblocks and dblocks % agblocks < ag_min:
        dblocks = (agcount - 1) * agblocks
        agcount -= 1
    if agcount < 1:
        raise MkfsValueError("the device is too small for one allocation group")
    agblklog = _log2(agblocks - 1) + 1

    if opts.release not in RELEASES:
        raise MkfsValueError(f"unknown mkfs.xfs release {opts.release!r}")
    inobtcount = opts.finobt if opts.inobtcount is None else opts.inobtcount
    if inobtcount and not opts.finobt:
        raise MkfsValueError("inode btree counters (inobtcount=1) need the free inode btree "
                             "(finobt=1)")
    autofsck = opts.autofsck
    if autofsck is not None and autofsck not in AUTOFSCK:
        raise MkfsValueError(f"autofsck={autofsck} is not valid: use {', '.join(AUTOFSCK)}")
    if opts.release == "6.1" and autofsck is not None:
        # mkfs.xfs 6.1 knew no autofsck property: "none" is what its
        # filesystems have without one; the others need today's choices
        if autofsck != "none":
            raise MkfsValueError(f"autofsck={autofsck} is not part of the mkfs.xfs 6.1 profiles")
        autofsck = None
    # parent pointers turn on exchange-range unless told otherwise
    exchange = opts.parent if opts.exchange is None else opts.exchange
    if opts.release == "6.1" and (opts.parent or exchange):
        raise MkfsError("parent pointers and exchange-range are not part of the mkfs.xfs 6.1 "
                        "profiles")

    hdr_blocks = (4 * opts.sectsize + B - 1) // B
    roots, prealloc = static_roots(B, opts.sectsize, opts.finobt, opts.rmapbt, opts.reflink)
    minfree = agfl_prefill(opts.release, B, agblocks, opts.rmapbt, opts.reflink)

    # inode allocation geometry
    isize = opts.inodesize
    inopblock = B // isize
    ialloc_inos = max(XFS_INODES_PER_CHUNK, inopblock)
    ialloc_blks = ialloc_inos * isize // B
    inoalign = (XFS_INODE_BIG_CLUSTER_SIZE * isize // 256) >> blocklog
    if opts.sparse:
        spino_align = inoalign
        inoalignmt = (XFS_INODES_PER_CHUNK * isize) >> blocklog
    else:
        spino_align = 0
        inoalignmt = inoalign

    # the internal log, at the start of the middle AG
    reserved = hdr_blocks + 4 + 3 + int(opts.finobt) + int(opts.rmapbt) + int(opts.reflink)
    max_logblocks = agblocks - reserved - 1
    need = max(XFS_MIN_LOG_BLOCKS, min_log_blocks(LogGeometry(
        B, opts.sectsize, isize, dirbs, agblocks, agblklog,
        B if opts.sectsize != 512 else 0, opts.finobt, opts.rmapbt, opts.reflink,
        opts.nrext64, opts.parent)))
    big = (dblocks << blocklog) >= MKFS_MIN_SIZE
    logagno = agcount // 2
    if logagno == 0:
        # mkfs.xfs leaves room for the root inode chunk beside a log in AG 0
        max_logblocks -= 4 * (XFS_INODES_PER_CHUNK * isize >> blocklog)
    if opts.logsize is not None:
        if opts.logsize % B:
            raise MkfsValueError(f"log size {opts.logsize} is not a multiple of the block "
                                 f"size {B}")
        logblocks = opts.logsize >> blocklog
        if opts.logsize < XFS_MIN_LOG_BYTES and big:
            raise MkfsValueError(f"log size {opts.logsize} is too small: the minimum is "
                                 f"{XFS_MIN_LOG_BYTES >> 20} MiB")
        if logblocks < need:
            raise MkfsValueError(f"log size {logblocks} blocks is too small: this geometry needs "
                                 f"at least {need} blocks")
        if logblocks > max_logblocks:
            raise MkfsValueError(f"log size {logblocks} blocks does not fit in an AG of "
                                 f"{agblocks} blocks (at most {max_logblocks})")
    else:
        if (dblocks << blocklog) >= GiB:
            need = max(need, XFS_MIN_LOG_BYTES >> blocklog)
        if max_logblocks < need:
            raise MkfsValueError(f"{opts.size >> 20} MiB is too small for {B}-byte blocks: the "
                                 f"kernel needs a log of {need} blocks inside one AG; use a larger "
                                 "size or a smaller block size")
        if big:
            logblocks = max((dblocks << blocklog) // 2048 >> blocklog,
                            XFS_MIN_REALISTIC_LOG_BYTES >> blocklog)
        else:
            # below 300 MiB (where mkfs.xfs stops unless --unsupported) the
            # smallest log the kernel accepts
            logblocks = need
        logblocks = min(max(logblocks, need), max_logblocks, XFS_MAX_LOG_BLOCKS,
                        XFS_MAX_LOG_BYTES >> blocklog)
    if prealloc + logblocks + minfree >= (dblocks - logagno * agblocks if logagno ==
                                          agcount - 1 else agblocks):
        raise MkfsValueError(f"the log ({logblocks} blocks) does not fit in AG {logagno}")

    first = prealloc + minfree + (logblocks if logagno == 0 else 0)
    if inoalignmt > 1:
        first = -(-first // inoalignmt) * inoalignmt
    if first + ialloc_blks > (dblocks if agcount == 1 else agblocks):
        raise MkfsValueError("the device is too small to hold the root inode chunk")

    if opts.imaxpct is not None:
        if not 0 <= opts.imaxpct <= 100:
            raise MkfsValueError("imaxpct must be between 0 and 100")
        imaxpct = opts.imaxpct
    elif (dblocks << blocklog) < TiB:
        imaxpct = XFS_DFL_IMAXPCT
    elif (dblocks << blocklog) < 50 * TiB:
        imaxpct = 5
    else:
        imaxpct = 1
    return Geometry(B, blocklog, opts.sectsize, isize, dblocks, agcount, agblocks, agblklog,
                    dirbs, logblocks, logagno, prealloc, prealloc, roots, minfree,
                    inoalignmt, spino_align, ialloc_blks, ialloc_inos, first, imaxpct,
                    opts.finobt, opts.sparse, opts.reflink, opts.nrext64, opts.rmapbt,
                    opts.bigtime, inobtcount, autofsck, opts.release, opts.parent, exchange)


def static_roots(blocksize: int, sectsize: int, finobt: bool, rmapbt: bool,
                 reflink: bool) -> tuple[dict, int]:
    """The static blocks at the start of every AG: (tree name -> AG block
    of its root, the first block after them).  The headers come first,
    then one root block per tree (the kernel's XFS_BNO_BLOCK ...
    xfs_refc_block, XFS_PREALLOC_BLOCKS)."""
    roots = {}
    nxt = (4 * sectsize + blocksize - 1) // blocksize
    for name, on in (("bnobt", True), ("cntbt", True), ("inobt", True),
                     ("finobt", finobt), ("rmapbt", rmapbt), ("refcountbt", reflink)):
        if on:
            roots[name] = nxt
            nxt += 1
    return roots, nxt


# -- writing -----------------------------------------------------------------

def _flags(*pairs) -> int:
    """The OR of the bits whose condition holds ((condition, bit) pairs)."""
    return sum(bit for on, bit in pairs if on)


def _free_extents(geo: Geometry, agno: int) -> tuple[list, list]:
    """(AGFL blocks, free extents) of a fresh AG."""
    length = geo.ag_length(agno)
    used = [(0, geo.prealloc)]
    pos = geo.prealloc
    if agno == geo.logagno:
        used.append((pos, geo.logblocks))
        pos += geo.logblocks
    agfl = list(range(pos, pos + geo.minfree))
    used.append((pos, geo.minfree))
    if agno == 0:
        used.append((geo.root_agbno, geo.ialloc_blks))
    used.sort()
    free = []
    cur = 0
    for start, n in used:
        if start > cur:
            free.append((cur, start - cur))
        cur = max(cur, start + n)
    if cur < length:
        free.append((cur, length - cur))
    return agfl, free


class _RootStore:
    """The one block of a new btree's root, for the btree engine's bulk
    loader: mkfs places every root at a fixed block."""

    def __init__(self, fmt: "Formatter", agno: int, agbno: int):
        self.fmt = fmt
        self.agno = agno
        self.agbno = agbno
        self.blocksize = fmt.geo.blocksize
        self.buf = None

    def daddr(self, addr: int) -> int:
        return self.fmt.daddr(self.agno, addr)

    def alloc(self, near: int) -> int:
        if self.buf is not None:
            raise MkfsError("internal: a new btree outgrew its root block")
        return self.agbno

    def new(self, addr: int) -> bytearray:
        self.buf = bytearray(self.blocksize)
        return self.buf

    def read(self, addr: int) -> bytearray:
        return self.buf

    def dirty(self, addr: int) -> None:
        pass

    def free(self, addr: int) -> None:
        raise MkfsError("internal: mkfs never frees btree blocks")


class Formatter:
    """Writes a fresh filesystem with the given geometry to a Device: every
    block is built by the same code the write path uses (the btree engine's
    bulk loader, the inode encoder) and leaves through the write verifier."""

    def __init__(self, dev, geo: Geometry, fs_uuid: bytes, label: str, now_ns: int,
                 in_progress: bool = False):
        self.dev = dev
        self.geo = geo
        self.uuid = fs_uuid
        self.label = label.encode()
        self.now = now_ns
        self.in_progress = in_progress

    def daddr(self, agno: int, agbno: int) -> int:
        g = self.geo
        return (agno * g.agblocks + agbno) << (g.blocklog - C.BBSHIFT)

    def _write(self, bt, daddr: int, data: bytearray) -> None:
        g = self.geo
        V.stamp(bt, data, 0, blocksize=g.blocksize, inodesize=g.inodesize)
        self.dev.pwrite(daddr << C.BBSHIFT, data)

    def run(self) -> dict:
        g = self.geo
        ag_info = [_free_extents(g, agno) for agno in range(g.agcount)]
        fdblocks = sum(sum(n for _s, n in free) + len(agfl) for agfl, free in ag_info)
        icount = g.ialloc_inos
        sb_primary = self.superblock(icount, icount - 3, fdblocks, primary=True)
        # Secondaries are the superblock as it stood before the root inode was
        # made; like mkfs.xfs we then set rootino in the last AG's copy and,
        # with more than two AGs, in the middle one.
        early = fdblocks + g.ialloc_blks
        sb_plain = self.superblock(0, 0, early, primary=False, rootino=False)
        sb_rooted = self.superblock(0, 0, early, primary=False)
        rooted = {g.agcount - 1} | ({(g.agcount - 1) // 2} if g.agcount > 2 else set())
        for agno, (agfl, free) in enumerate(ag_info):
            sb = sb_primary if agno == 0 else sb_rooted if agno in rooted else sb_plain
            self.write_ag(agno, agfl, free, bytearray(sb))
        self.write_root_chunk()
        self.clear_log()
        return {"fdblocks": fdblocks, "icount": icount}

    def superblock(self, icount: int, ifree: int, fdblocks: int, primary: bool,
                   rootino: bool = True) -> bytes:
        g = self.geo
        ro = _flags((g.finobt, C.XFS_SB_FEAT_RO_COMPAT_FINOBT),
                    (g.inobtcount, C.XFS_SB_FEAT_RO_COMPAT_INOBTCNT),
                    (g.rmapbt, C.XFS_SB_FEAT_RO_COMPAT_RMAPBT),
                    (g.reflink, C.XFS_SB_FEAT_RO_COMPAT_REFLINK))
        inc = _flags((True, C.XFS_SB_FEAT_INCOMPAT_FTYPE),
                     (g.bigtime, C.XFS_SB_FEAT_INCOMPAT_BIGTIME),
                     (g.sparse, C.XFS_SB_FEAT_INCOMPAT_SPINODES),
                     (g.nrext64, C.XFS_SB_FEAT_INCOMPAT_NREXT64),
                     (g.exchange, C.XFS_SB_FEAT_INCOMPAT_EXCHRANGE),
                     (g.parent, C.XFS_SB_FEAT_INCOMPAT_PARENT))
        f = {
            "sb_magicnum": C.XFS_SB_MAGIC, "sb_blocksize": g.blocksize,
            "sb_dblocks": g.dblocks, "sb_uuid": self.uuid,
            "sb_logstart": (g.logagno << g.agblklog) | g.logstart_agbno,
            "sb_rootino": g.rootino if rootino else C.NULLFSINO,
            "sb_rbmino": g.rootino + 1 if primary else C.NULLFSINO,
            "sb_rsumino": g.rootino + 2 if primary else C.NULLFSINO,
            "sb_rextsize": max(1, 4096 // g.blocksize), "sb_agblocks": g.agblocks,
            "sb_agcount": g.agcount, "sb_logblocks": g.logblocks,
            "sb_versionnum": VERSIONNUM_V5 | (SECTORBIT if g.sectsize != 512 else 0)
            # the root directory's autofsck property is an xattr; with
            # parent pointers every superblock says attributes are in use
            | (ATTRBIT if (primary and g.autofsck) or g.parent else 0),
            "sb_sectsize": g.sectsize,
            "sb_inodesize": g.inodesize, "sb_inopblock": g.inopblock,
            "sb_fname": self.label, "sb_blocklog": g.blocklog,
            "sb_sectlog": _log2(g.sectsize), "sb_inodelog": _log2(g.inodesize),
            "sb_inopblog": g.inopblog, "sb_agblklog": g.agblklog,
            "sb_inprogress": 1 if self.in_progress or not primary else 0,
            "sb_imax_pct": g.imaxpct,
            "sb_icount": icount, "sb_ifree": ifree, "sb_fdblocks": fdblocks,
            "sb_inoalignmt": g.inoalignmt,
            "sb_dirblklog": _log2(g.dirblocksize) - g.blocklog,
            # the log's sectors are the data's; with log sectors over 512
            # bytes, records are padded to a log stripe unit of one block
            "sb_logsectsize": g.sectsize if g.sectsize != 512 else 0,
            "sb_logsectlog": _log2(g.sectsize) if g.sectsize != 512 else 0,
            "sb_logsunit": g.log_sunit or 1,
            "sb_features2": FEATURES2, "sb_bad_features2": FEATURES2,
            "sb_features_ro_compat": ro, "sb_features_incompat": inc,
            "sb_spino_align": g.spino_align,
        }
        buf = bytearray(g.sectsize)
        raw = SB.pack(f)
        buf[:len(raw)] = raw
        return bytes(buf)

    def write_ag(self, agno: int, agfl: list, free: list, sb: bytearray) -> None:
        g = self.geo
        length = g.ag_length(agno)
        uuid = self.uuid
        base = self.daddr(agno, 0)
        sect = g.sectsize >> C.BBSHIFT
        self._write(V.SB, base, sb)
        # AGF
        f = {"agf_magicnum": C.XFS_AGF_MAGIC, "agf_versionnum": 1, "agf_seqno": agno,
             "agf_length": length,
             "agf_roots": [g.roots["bnobt"], g.roots["cntbt"], 0],
             "agf_levels": [1, 1, 0], "agf_flfirst": 1, "agf_fllast": len(agfl),
             "agf_flcount": len(agfl), "agf_freeblks": sum(n for _s, n in free),
             "agf_longest": max((n for _s, n in free), default=0), "agf_uuid": uuid}
        if g.rmapbt:
            f["agf_roots"][2] = g.roots["rmapbt"]
            f["agf_levels"][2] = 1
            f["agf_rmap_blocks"] = 1
        if g.reflink:
            f.update(agf_refcount_blocks=1, agf_refcount_root=g.roots["refcountbt"],
                     agf_refcount_level=1)
        self._write(V.AGF, base + sect, self._sector(AGF.pack(f)))
        # AGI
        in_ag0 = agno == 0
        agino = g.root_agbno << g.inopblog
        a = {"agi_magicnum": C.XFS_AGI_MAGIC, "agi_versionnum": 1, "agi_seqno": agno,
             "agi_length": length, "agi_count": g.ialloc_inos if in_ag0 else 0,
             "agi_root": g.roots["inobt"], "agi_level": 1,
             "agi_freecount": g.ialloc_inos - 3 if in_ag0 else 0,
             "agi_newino": agino if in_ag0 else C.NULLAGINO, "agi_dirino": C.NULLAGINO,
             "agi_unlinked": [C.NULLAGINO] * C.XFS_AGI_UNLINKED_BUCKETS, "agi_uuid": uuid,
             "agi_iblocks": 1 if g.inobtcount else 0,
             "agi_fblocks": 1 if g.inobtcount and g.finobt else 0}
        if g.finobt:
            a.update(agi_free_root=g.roots["finobt"], agi_free_level=1)
        self._write(V.AGI, base + 2 * sect, self._sector(AGI.pack(a)))
        # AGFL: mkfs.xfs leaves slot 0 empty and fills from slot 1
        slots = (g.sectsize - C.XFS_AGFL_HDR_SIZE) // 4
        bno = [C.NULLAGBLOCK] * slots
        for i, b in enumerate(agfl):
            bno[1 + i] = b
        hdr = AGFL.pack({"agfl_magicnum": C.XFS_AGFL_MAGIC, "agfl_seqno": agno,
                         "agfl_uuid": uuid})
        self._write(V.AGFL, base + 3 * sect,
                    self._sector(hdr + struct.pack(f">{slots}I", *bno)))
        # btree roots, one leaf each, by the btree engine's bulk loader
        irecs = self._inobt_recs() if in_ag0 else []
        trees = [("bnobt", B.BNOBT, free),
                 ("cntbt", B.CNTBT, sorted(free, key=lambda e: (e[1], e[0]))),
                 ("inobt", B.inobt_type(g.sparse), irecs)]
        if g.finobt:
            trees.append(("finobt", B.inobt_type(g.sparse, free=True), irecs))
        if g.rmapbt:
            trees.append(("rmapbt", B.RMAPBT, self._rmap_recs(agno, agfl)))
        if g.reflink:
            trees.append(("refcountbt", B.REFCOUNTBT, []))
        for name, bt, recs in trees:
            store = _RootStore(self, agno, g.roots[name])
            BW.bulk_load(bt, store, recs, agno=agno, uuid=uuid)
            self._write(bt.buftype, store.daddr(store.agbno), store.buf)

    def _sector(self, body: bytes) -> bytearray:
        buf = bytearray(self.geo.sectsize)
        buf[:len(body)] = body
        return buf

    def _rmap_recs(self, agno: int, agfl: list) -> list:
        """The owners of every used block of a fresh AG, as mkfs.xfs leaves
        them: the headers, each btree root, the log, the AGFL and the root
        inode chunk (records (start, length, owner, offset))."""
        g = self.geo
        r = g.roots
        ext = [(0, r["bnobt"], OWN_FS), (r["bnobt"], 2, OWN_AG),
               (r["inobt"], r["rmapbt"] - r["inobt"], OWN_INOBT), (r["rmapbt"], 1, OWN_AG)]
        if g.reflink:
            ext.append((r["refcountbt"], 1, OWN_REFC))
        if agno == g.logagno:
            ext.append((g.logstart_agbno, g.logblocks, OWN_LOG))
        # the AGFL's blocks were allocated afterwards, and an allocation
        # joins the record of the same owner it touches
        if agfl:
            start, n = agfl[0], len(agfl)
            last = ext[-1]
            if last[2] == OWN_AG and last[0] + last[1] == start:
                ext[-1] = (last[0], last[1] + n, OWN_AG)
            else:
                ext.append((start, n, OWN_AG))
        if agno == 0:
            ext.append((g.root_agbno, g.ialloc_blks, OWN_INODES))
        return [(start, n, owner, 0) for start, n, owner in sorted(ext)]

    def _inobt_recs(self) -> list:
        g = self.geo
        start = g.root_agbno << g.inopblog
        recs = []
        for k in range(g.ialloc_inos // XFS_INODES_PER_CHUNK):
            free = (1 << 64) - 1
            if k == 0:
                free &= ~0b111            # root, rt bitmap and rt summary
            recs.append((start + 64 * k, 0, 64, bin(free).count("1"), free))
        return recs

    def _root_attrs(self) -> dict:
        """The root directory's attr fork: the autofsck property, set as
        mkfs.xfs 6.10.1 sets it (trusted.xfs:autofsck = the mode, shortform,
        the fork as far out in the inode as a btree root allows)."""
        g = self.geo
        if not g.autofsck:
            return {}
        plan = encode_xattrs([(C.XFS_ATTR_ROOT, b"xfs:autofsck", g.autofsck.encode())],
                             ino=g.rootino, uuid=self.uuid, blocksize=g.blocksize,
                             inline_space=g.inodesize)
        litino = g.inodesize - C.XFS_DINODE_CORE_SIZE
        # (the fork's creation and the set each count a change)
        return {"forkoff": (litino - ATTR_BTREE_ROOT_MIN) >> 3,
                "aformat": C.XFS_DINODE_FMT_LOCAL, "attr": plan.local, "changecount": 4}

    def write_root_chunk(self) -> None:
        g = self.geo
        root = g.rootino
        enc = InodeEncoder(g.inodesize, self.uuid, bigtime=g.bigtime, nrext64=g.nrext64)
        common = dict(changecount=2, atime_ns=0, mtime_ns=self.now, ctime_ns=self.now,
                      crtime_ns=self.now)
        # shortform root directory: no entries, parent is itself
        sf = struct.pack(">BBI", 0, 0, root)
        rootdir = dict(common, **self._root_attrs())
        chunk = [enc.encode(root, InodeSpec(mode=C.S_IFDIR | 0o755, nlink=2, size=len(sf),
                                            fmt=C.XFS_DINODE_FMT_LOCAL, data=sf, **rootdir)),
                 enc.encode(root + 1, InodeSpec(mode=C.S_IFREG, nlink=1,
                                                flags=C.XFS_DIFLAG_NEWRTBM, **common)),
                 enc.encode(root + 2, InodeSpec(mode=C.S_IFREG, nlink=1, **common))]
        for i in range(3, g.ialloc_inos):
            chunk.append(enc.free(root + i))
        self._write(V.DINO, self.daddr(0, g.root_agbno), bytearray(b"".join(chunk)))

    def clear_log(self) -> None:
        """Empty the log and write one record holding an unmount record, as
        mkfs.xfs does: cycle 1 in the record's sectors, nothing after (and,
        like mkfs.xfs, no record CRC)."""
        g = self.geo
        off = self.daddr(g.logagno, g.logstart_agbno) << C.BBSHIFT
        self.dev.zero_range(off, g.logblocks << g.blocklog)
        # the record spans the log stripe unit (one block where the log's
        # sectors are over 512 bytes, two sectors otherwise); a record over
        # 32 KiB has an extended header per further 32 KiB, holding only
        # the cycle, since every data sector but the first is zeros
        sunit = g.log_sunit
        total = max(2 * C.BBSIZE, sunit)
        hdrs = -(-sunit // L.XLOG_HEADER_CYCLE_SIZE) if sunit > L.XLOG_HEADER_CYCLE_SIZE else 1
        dlen = total - hdrs * C.BBSIZE
        hdr = bytearray(hdrs * C.BBSIZE)
        struct.pack_into(">IIIIQQIiI", hdr, 0, L.XLOG_HEADER_MAGIC_NUM, 1, L.XLOG_VERSION_2,
                         dlen, 1 << 32, 1 << 32, 0, -1, 1)
        # the first word of each data sector is replaced by the cycle number;
        # the word it held is kept in h_cycle_data
        struct.pack_into(">I", hdr, 44, MKFS_UNMOUNT_TID)
        struct.pack_into(">I16sI", hdr, 300, L.XLOG_FMT_LINUX_LE, self.uuid,
                         max(sunit, L.XLOG_BIG_RECORD_BSIZE))
        for ext in range(C.BBSIZE, len(hdr), C.BBSIZE):
            struct.pack_into(">I", hdr, ext, 1)
        data = bytearray(dlen)
        struct.pack_into(">IIBBH", data, 0, 1, 8, L.XFS_LOG, L.XLOG_UNMOUNT_TRANS, 0)
        struct.pack_into("<H", data, 12, L.XLOG_UNMOUNT_TYPE)
        for sector in range(C.BBSIZE, dlen, C.BBSIZE):
            struct.pack_into(">I", data, sector, 1)
        self.dev.pwrite(off, bytes(hdr) + bytes(data))



# -- the operation -------------------------------------------------------------

def _has_filesystem(dev) -> str | None:
    head = dev.pread(0, min(dev.size, 8192))
    if head[:4] == b"XFSB":
        return "an XFS filesystem"
    if len(head) >= 1082 and head[1080:1082] == b"\x53\xef":
        return "an ext2/3/4 filesystem"
    if not dev.start:
        table = read_table(dev.fd, dev.size, head)
        if table is not None:
            return (f"a partition table ({table.kind.upper()}; give IMAGE@N to make the "
                    "filesystem in one of its partitions)")
    return None


def mkfs(path: str, opts: Options, force: bool = False, dry_run: bool = False,
         in_progress: bool = False, discard: bool = True):
    """Create (or format) ``path``.  Returns the Geometry.  With
    ``in_progress`` the superblock says the filesystem is still being made
    (the kernel will not mount it) until a populate that writes without the
    journal clears it.  An existing image file's old contents in the
    filesystem's range are punched out first unless ``discard`` is off
    (mkfs.xfs -K): nothing of them stays in the new filesystem's free
    space, and the same build over any old file gives the same bytes."""
    file, sel = split(path)
    exists = os.path.exists(file)
    if exists:
        st = os.stat(file)
        if stat.S_ISDIR(st.st_mode):
            raise MkfsError(f"{path}: is a directory")
        refuse_not_an_image(path, st)
        refuse_if_mounted(path)
        if sel is not None:
            # a partition of a disk image: its size, and never more
            probe = Device(path, whole=True)
            room = probe.size
            probe.close()
        else:
            with open(file, "rb") as f:
                room = f.seek(0, os.SEEK_END)
        if opts.size is None:
            if room == 0:
                raise MkfsError(f"{path}: empty file and no --size given")
            opts = dataclasses.replace(opts, size=room)
        elif sel is not None and opts.size > room:
            raise MkfsError(f"{path}: --size {opts.size} is larger than the partition "
                            f"({room} bytes)")
    elif opts.size is None:
        raise MkfsError(f"{path}: does not exist; give --size to create it")
    geo = compute_geometry(opts)
    if dry_run:
        return geo
    fs_uuid = uuidlib.UUID(opts.uuid).bytes if opts.uuid else uuidlib.uuid4().bytes
    now = opts.timestamp_ns
    if now is None:
        sde = os.environ.get("SOURCE_DATE_EPOCH")
        now = int(sde) * C.NSEC_PER_SEC if sde else time.time_ns() // 1000 * 1000
    if not exists:
        os.close(os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_CREAT | os.O_EXCL, 0o644))
    dev = None
    try:
        dev = Device(path, writable=True, whole=True)
        with ImageLock(dev, path):
            if exists:
                what = _has_filesystem(dev)
                if what and not force:
                    raise MkfsError(f"{path}: already contains {what}; use -f/--force to "
                                    "overwrite it")
            if exists and discard:
                dev.punch(0, min(opts.size, dev.size))
            if not dev.fixed_size and dev.size < opts.size:
                dev.resize(opts.size)
            with held():
                Formatter(dev, geo, fs_uuid, opts.label, now, in_progress).run()
                dev.fsync()
    except BaseException:
        if dev is not None:
            dev.close()
        if not exists:
            try:
                os.unlink(path)
            except OSError:
                pass
        raise
    dev.close()
    return geo
