"""Phase inodes: every inode of every chunk, checked the way xfs_repair's
process_dinode checks an inode in use, and the kernel's inode verifier a
free one; forks mapped and their blocks claimed, block maps (bmbt) walked
through the read engine, symlinks read, attribute forks checked.

Inodes that are plainly fine (a regular file, directory, inline symlink,
device, fifo or socket with nothing unusual about it, or a clean free
inode) are checked entirely in native code (``parsers.scan_inode_chunk``);
everything else comes here."""
from __future__ import annotations

import functools
import struct

from ..._backend import checks, parsers
from ...errors import FsToolError
from ...format import constants as C
from ...format.structs import DINODE
from ...fs import btree
from ...fs.attr import read_symlink
from ...fs.inode import Inode
from .base import ATTR, BMBT_ATTR, BMBT_DATA, DATA, file_owner
from .superblocks import check_lsn, root_ino, rt_inodes
from .xattrs import check_xattrs

S_IFMT = C.S_IFMT
DIFLAG_REALTIME, DIFLAG_NEWRTBM = 0x1, 0x4
DIFLAG_RTINHERIT, DIFLAG_PROJINHERIT, DIFLAG_NOSYMLINKS = 0x100, 0x200, 0x400
DIFLAG_EXTSIZE, DIFLAG_EXTSZINHERIT = 0x800, 0x1000
DIFLAG_ANY = 0x7FFF
DIR_FLAGS = DIFLAG_RTINHERIT | DIFLAG_EXTSZINHERIT | DIFLAG_PROJINHERIT | DIFLAG_NOSYMLINKS
DIFLAG2_DAX, DIFLAG2_REFLINK, DIFLAG2_COWEXTSIZE = 1, 2, 4
DIFLAG2_BIGTIME, DIFLAG2_NREXT64 = 8, 16
DIFLAG2_ANY = 0x1F
MAX_BMBT_EXTLEN = (1 << 21) - 1
NSEC_PER_SEC = 1_000_000_000
# how far ahead of the inode chunk being scanned the kernel is asked to read
CHUNK_READAHEAD = 16 << 20
# inode chunks this close together are asked for as one range
CHUNK_READAHEAD_GAP = 64 << 10
_PAD = DINODE.field("di_big_nextents")      # di_v3_pad without NREXT64


def core_fields(raw: bytes) -> dict:
    """The inode core fields check needs, by short name."""
    f = DINODE.unpack(raw)
    flags2 = f["di_flags2"]
    nextents, anextents = f["di_nextents"], f["di_anextents"]
    if flags2 & DIFLAG2_NREXT64:
        nextents = f["di_big_nextents"]
        anextents = f["di_nextents"]
    return dict(magic=f["di_magic"], mode=f["di_mode"], version=f["di_version"],
                format=f["di_format"], onlink=f["di_onlink"], nlink=f["di_nlink"],
                pad=_PAD.raw(raw),
                atime=f["di_atime"], mtime=f["di_mtime"], ctime=f["di_ctime"],
                crtime=f["di_crtime"], size=f["di_size"], nblocks=f["di_nblocks"],
                extsize=f["di_extsize"], nextents=nextents, anextents=anextents,
                forkoff=f["di_forkoff"], aformat=f["di_aformat"] & 0xFF,
                flags=f["di_flags"], next_unlinked=f["di_next_unlinked"], flags2=flags2,
                cowextsize=f["di_cowextsize"], ino=f["di_ino"], uuid=f["di_uuid"])


def setup_inode_geometry(ctx) -> None:
    sb = ctx.sb
    ctx.litino = sb.inodesize - C.XFS_DINODE_CORE_SIZE
    ctx.max_file_offset = ((1 << 63) - 1) >> sb.blocklog
    leaf = (sb.blocksize - C.XFS_BTREE_LBLOCK_CRC_LEN) // 16
    ctx.bmbt_min = (leaf // 2, leaf // 2)
    large = sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_NREXT64)
    ctx.bm_maxlevels = (btree.bmap_maxlevels(sb.blocksize, large, True),
                        btree.bmap_maxlevels(sb.blocksize, large, False))
    ctx.max_symlink_blocks = -(-C.XFS_SYMLINK_MAXLEN //
                               (sb.blocksize - C.XFS_SYMLINK_HDR_SIZE))
    f2 = DIFLAG2_DAX | DIFLAG2_COWEXTSIZE
    if sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK):
        f2 |= DIFLAG2_REFLINK
    if sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_BIGTIME):
        f2 |= DIFLAG2_BIGTIME
    if large:
        f2 |= C.XFS_DIFLAG2_NREXT64
    ctx.flags2_plain = f2 & ~(DIFLAG2_DAX | DIFLAG2_COWEXTSIZE)


# -- the phase ---------------------------------------------------------------
def phase_inodes(ctx) -> None:
    """Every inode of every chunk, read a run of chunks at a time (not
    through the inode cache: each is looked at once)."""
    sb = ctx.sb
    fs = ctx.fs
    isize = sb.inodesize
    last_ag = fs.ag_length(sb.agcount - 1)
    total = sum(len(ctx.chunks.get(a, ())) for a in ctx.ag_filter)
    done = 0
    bigtime_fs = sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_BIGTIME)
    # the scan claims into every AG's flat arrays; should one be a list
    # (a claim too large for them), every inode takes the Python check
    arrays = _scan_arrays(ctx)
    for agno in ctx.ag_filter:
        tab = ctx.tables.get(agno)
        if tab is None:
            continue
        agmin, agmax = ctx.agino_range(agno)
        recs = ctx.chunks[agno]
        for k, chunk, base in _chunk_buffers(ctx, agno, recs):
            startino, holemask, _n, _nfree, free = recs[k]
            done += 1
            ctx._tick(done, total)
            if chunk is None:
                ctx.from_error("INODE_CORRUPT", base, agno=agno,
                               block=startino >> sb.inopblog, structure="inode")
                continue
            first = (agno << sb.agino_log) | startino
            others, dirs = parsers.scan_inode_chunk(
                chunk, base, isize, first, sb.meta_uuid, free, holemask,
                ctx.flags2_plain, bigtime_fs, sb.agblklog, sb.agcount, sb.agblocks,
                last_ag, ctx.agfl_block, ctx.max_file_offset, tab.itype, tab.nlinks,
                64 * k, sb.rootino, *arrays, psums=tab.psums,
                pptr_fs=ctx.has_pptr) if arrays is not None else \
                ([i for i in range(64) if not holemask >> (i // 4) & 1], [])
            ndirs = len(ctx.dirs)
            for i in dirs:
                ino = first + i
                ctx.dirs.append(ino)
                ctx.dir_raw[ino] = chunk[base + i * isize:base + (i + 1) * isize]
            for i in others:
                ino = first + i
                raw = chunk[base + i * isize:base + (i + 1) * isize]
                ctx.guarded(f"inode {ino}", _check_inode, ctx, agno, ino,
                            bool(free >> i & 1), raw, tab, 64 * k + i, agmin, agmax,
                            ino=ino, structure="inode")
            if dirs and len(ctx.dirs) > ndirs + len(dirs):
                # the chunk's directories in inode order, wherever checked
                ctx.dirs[ndirs:] = sorted(ctx.dirs[ndirs:])
            if others and arrays is not None:
                arrays = _scan_arrays(ctx)


def _scan_arrays(ctx):
    """(claims, expected rmaps or None) as scan_inode_chunk fills them:
    every AG's flat arrays; None when one is not flat."""
    agcount = ctx.sb.agcount
    claims = ctx.claims.flat(agcount)
    expect = ctx.rmap_expect.flat(agcount) if ctx.has_rmap else None
    if claims is None or (ctx.has_rmap and expect is None):
        return None
    return claims, expect


def _chunk_buffers(ctx, agno: int, recs: list):
    """(k, buffer, offset of the chunk's first inode in it) for every
    inode chunk record ``recs[k]`` of AG ``agno``, in order; (k, None,
    the error) for a chunk that cannot be read.  Chunks that follow one
    another on disk are read together, up to 2 MiB at a time (one read
    per chunk cost more than the copying)."""
    sb = ctx.sb
    fs = ctx.fs
    isize = sb.inodesize
    blocklog = sb.blocklog
    spans = []
    for rec in recs:
        startino = rec[0]
        base = (startino & (sb.inopblock - 1)) * isize
        # a misaligned record's chunk starts inside a block: read to its end
        spans.append((startino >> sb.inopblog, base,
                      max(1, -(-(base + 64 * isize) >> blocklog))))
    limit = (2 << 20) >> blocklog
    runs = []               # (k, j, first block, end): spans[k:j] read at once
    k = 0
    while k < len(spans):
        first_blk, base, nblocks = spans[k]
        end = first_blk + nblocks
        j = k + 1
        if not base:
            while j < len(spans) and not spans[j][1] and spans[j][0] == end and \
                    end + spans[j][2] - first_blk <= limit:
                end += spans[j][2]
                j += 1
        runs.append((k, j, first_blk, end))
        k = j
    # the kernel reads the runs ahead of their turn (up to CHUNK_READAHEAD
    # bytes), many at once, while the ones before are scanned; runs close
    # together are asked for as one range
    dev = fs.dev
    gap = CHUNK_READAHEAD_GAP >> blocklog
    asked = ahead = 0
    for r, (k, j, first_blk, end) in enumerate(runs):
        while ahead < len(runs) and (ahead <= r or asked < CHUNK_READAHEAD):
            b0, b1 = runs[ahead][2], runs[ahead][3]
            ahead += 1
            while ahead < len(runs) and b1 <= runs[ahead][2] < b1 + gap:
                b1 = runs[ahead][3]
                ahead += 1
            dev.will_need(fs.agb_to_daddr(agno, b0) << C.BBSHIFT, (b1 - b0) << blocklog)
            asked += (b1 - b0) << blocklog
        asked -= (end - first_blk) << blocklog
        try:
            buf = fs.dev.pread(fs.agb_to_daddr(agno, first_blk) << C.BBSHIFT,
                               (end - first_blk) << blocklog)
        except FsToolError as e:
            if j == k + 1:
                yield k, None, e
                continue
            # one of them cannot be read: each on its own, as it fails
            for m in range(k, j):
                blk, b, n = spans[m]
                try:
                    one = fs.dev.pread(fs.agb_to_daddr(agno, blk) << C.BBSHIFT,
                                       n << blocklog)
                except FsToolError as e1:
                    yield m, None, e1
                else:
                    yield m, one, b
            continue
        for m in range(k, j):
            yield m, buf, ((spans[m][0] - first_blk) << blocklog) + spans[m][1]


# -- one inode -----------------------------------------------------------------
def _check_inode(ctx, agno, ino, free, raw, tab, slot, agmin, agmax) -> None:
    sb = ctx.sb
    agbno = (ino & ((1 << sb.agino_log) - 1)) >> sb.inopblog
    where = dict(ino=ino, agno=agno, block=agbno, structure="inode")
    d = core_fields(raw)
    bad = functools.partial(report_inode, ctx)
    if not parsers.xfs_cksum_ok(raw, C.XFS_DINODE_CRC_OFF):
        bad("INODE_CORRUPT", "CRC mismatch", "di_crc", where)
    if d["magic"] != C.XFS_DINODE_MAGIC:
        bad("INODE_CORRUPT", f"bad magic 0x{d['magic']:04x}", "di_magic", where)
    if d["version"] != 3:
        bad("INODE_CORRUPT", f"version {d['version']}, expected 3", "di_version", where)
    nu = d["next_unlinked"]
    if nu != C.NULLAGINO:
        if not agmin <= nu <= agmax:
            bad("INODE_UNLINKED", f"next_unlinked {nu} is not an inode of its AG",
                "di_next_unlinked", where, found=nu)
        else:
            ctx.next_unlinked[ino] = nu
    if d["ino"] != ino:
        bad("INODE_CORRUPT", f"records inode number {d['ino']}", "di_ino", where,
            found=d["ino"])
        return
    if d["uuid"] != ctx.fs.uuid:
        bad("INODE_CORRUPT", "uuid does not match the filesystem", "di_uuid", where)
        return
    if d["size"] >> 63:
        bad("INODE_SIZE", f"size {d['size']} is negative", "di_size", where,
            found=d["size"])
        return
    mode = d["mode"]
    if mode == 0:
        if free:
            fault = verify_free(ctx, d, raw)
            if fault:
                bad("INODE_FREE", f"free inode fails the kernel's verifier: {fault[1]}",
                    fault[0], where)
        else:
            ctx.report("INOBT_INODE", f"inode {ino} is allocated in the inobt but free "
                       "on disk", field="di_mode", **where)
        return
    if free:
        ctx.report("INOBT_INODE", f"inode {ino} is free in the inobt but in use on disk",
                   field="di_mode", **where)
    ctx.pptrs_seen = []
    ctx.pptrs_whole = True
    ctx._data_blocks = None
    kept = _check_in_use(ctx, d, raw, ino, where)
    if ctx.hooks is not None:
        ctx.hooks.inode_checked(ctx, ino, kept, ctx._data_blocks)
    if kept:
        tab.itype[slot] = (mode & S_IFMT) >> 12 or 16
        tab.nlinks[slot] = d["nlink"]
        if tab.psums is not None:
            _count_pptrs(ctx, tab, slot, ino)


def _count_pptrs(ctx, tab, slot, ino) -> None:
    """Take the parent pointers check_xattrs met off the inode's slot
    (the entries naming it add theirs in the namespace phase)."""
    if not ctx.pptrs_whole:
        ctx.pptr_unread.append(ino)
        return
    mix = parsers.pptr_mix
    acc = 0
    for p_ino, p_gen, name in ctx.pptrs_seen:
        acc += mix(name, p_ino, p_gen)
    tab.psums[slot] = (tab.psums[slot] - acc) & 0xFFFFFFFFFFFFFFFF


def report_inode(ctx, code, detail, field, where, **more) -> None:
    ctx.report(code, f"inode {where['ino']}: {detail}", field=field, **where, **more)


def verify_free(ctx, d: dict, raw: bytes):
    """The kernel's xfs_dinode_verify for a free inode: (field, why) of
    the first failure, or None."""
    sb = ctx.sb
    if d["flags2"] & DIFLAG2_NREXT64:
        if not sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_NREXT64):
            return "di_flags2", "large extent counts without the feature"
    elif d["pad"] != bytes(8):
        return "di_v3_pad", "padding is not zero"
    if d["nextents"] + d["anextents"] == 0 and d["nblocks"]:
        return "di_nblocks", f"{d['nblocks']} blocks without extents"
    fault = _forkoff_fault(ctx, d)
    if fault:
        return fault
    if d["forkoff"]:
        fault = _fork_fault(ctx, d, attr=True)
        if fault:
            return fault
    else:
        if d["aformat"] not in (0, C.XFS_DINODE_FMT_EXTENTS):
            return "di_aformat", f"attr fork format {d['aformat']} without an attr fork"
        if d["anextents"]:
            return "di_anextents", f"{d['anextents']} attr extents without an attr fork"
    fault = _extsize_fault(ctx, d)
    if fault:
        return fault
    f2 = d["flags2"]
    if f2 & (DIFLAG2_REFLINK | DIFLAG2_COWEXTSIZE) and \
            not sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK):
        return "di_flags2", "reflink flags without the reflink feature"
    if f2 & DIFLAG2_REFLINK:
        return "di_flags2", "the reflink flag on an inode that is not a file"
    fault = _cowextsize_fault(ctx, d)
    if fault:
        return fault
    if f2 & DIFLAG2_BIGTIME and not sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_BIGTIME):
        return "di_flags2", "bigtime timestamps without the bigtime feature"
    return None


def _forkoff_fault(ctx, d):
    fo = d["forkoff"]
    if not fo:
        return None
    if d["format"] == C.XFS_DINODE_FMT_DEV:
        if fo != 1:
            return "di_forkoff", f"attr fork offset {fo} in a device inode, should be 1"
    elif d["format"] in (1, 2, 3):
        if fo >= ctx.litino >> 3:
            return "di_forkoff", f"attr fork offset {fo} beyond the inode"
    else:
        return "di_format", f"data fork format {d['format']} is not valid"
    return None


def _fork_size(ctx, d, attr: bool) -> int:
    fo = d["forkoff"]
    if attr:
        return ctx.litino - fo * 8 if fo else 0
    return fo * 8 if fo else ctx.litino


def _fork_fault(ctx, d, attr: bool):
    """xfs_dinode_verify_fork."""
    mode = d["mode"] & S_IFMT
    size = _fork_size(ctx, d, attr)
    fmt = d["aformat"] if attr else d["format"]
    n = d["anextents"] if attr else d["nextents"]
    name = "di_aformat" if attr else "di_format"
    if not attr:
        if mode in (C.S_IFDIR, C.S_IFLNK) and d["size"] <= size and fmt != 1:
            return name, f"size {d['size']} fits the inode but the fork is not local"
        if d["size"] > size and fmt == 1:
            return name, f"size {d['size']} does not fit a local fork of {size} bytes"
    if fmt == C.XFS_DINODE_FMT_LOCAL:
        if mode == C.S_IFREG and not attr:
            return name, "a regular file in local format"
        if n:
            return "di_anextents" if attr else "di_nextents", \
                f"{n} extents in a local fork"
    elif fmt == C.XFS_DINODE_FMT_EXTENTS:
        if n > size // 16:
            return "di_anextents" if attr else "di_nextents", \
                f"{n} extents do not fit the fork"
    elif fmt == C.XFS_DINODE_FMT_BTREE:
        large = bool(d["flags2"] & DIFLAG2_NREXT64)
        maxn = ((1 << 48) - 1 if large else (1 << 31) - 1) if not attr else \
            ((1 << 32) - 1 if large else (1 << 15) - 1)
        if n > maxn:
            return "di_anextents" if attr else "di_nextents", f"{n} extents"
    else:
        return name, f"fork format {fmt} is not valid"
    return None


def _extsize_fault(ctx, d):
    """xfs_inode_validate_extsize."""
    mode, flags, extsize = d["mode"] & S_IFMT, d["flags"], d["extsize"]
    hint, inherit = flags & DIFLAG_EXTSIZE, flags & DIFLAG_EXTSZINHERIT
    is_dir, is_reg = mode == C.S_IFDIR, mode == C.S_IFREG
    if (hint or inherit) and not (is_dir or is_reg):
        return "di_flags", "extent size hint flag on an inode that is not a file or dir"
    if hint and not is_reg:
        return "di_flags", "extent size flag on a directory"
    if inherit and not is_dir:
        return "di_flags", "extent size inherit flag on a file"
    if (hint or inherit) and extsize == 0:
        return "di_extsize", "extent size hint flag with a zero hint"
    if mode and not (hint or inherit) and extsize:
        return "di_extsize", f"extent size {extsize} without the hint flag"
    if flags & DIFLAG_REALTIME and extsize % max(1, ctx.sb.fields["sb_rextsize"]):
        return "di_extsize", f"extent size {extsize} is not whole realtime extents"
    if extsize > MAX_BMBT_EXTLEN:
        return "di_extsize", f"extent size {extsize} is too large"
    if not flags & DIFLAG_REALTIME and extsize > ctx.sb.agblocks // 2:
        return "di_extsize", f"extent size {extsize} is over half an AG"
    return None


def _cowextsize_fault(ctx, d):
    """xfs_inode_validate_cowextsize."""
    mode, flags, f2, cow = d["mode"] & S_IFMT, d["flags"], d["flags2"], d["cowextsize"]
    hint = f2 & DIFLAG2_COWEXTSIZE
    if hint and not ctx.sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK):
        return "di_flags2", "CoW extent size flag without the reflink feature"
    if hint and mode not in (C.S_IFDIR, C.S_IFREG):
        return "di_flags2", "CoW extent size flag on an inode that is not a file or dir"
    if hint and cow == 0:
        return "di_cowextsize", "CoW extent size flag with a zero hint"
    if mode and not hint and cow:
        return "di_cowextsize", f"CoW extent size {cow} without the flag"
    if hint and flags & DIFLAG_REALTIME:
        return "di_flags2", "CoW extent size hint on a realtime inode"
    if cow > MAX_BMBT_EXTLEN or cow > ctx.sb.agblocks // 2:
        return "di_cowextsize", f"CoW extent size {cow} is too large"
    return None


# -- an inode in use ----------------------------------------------------------------
def _check_in_use(ctx, d: dict, raw: bytes, ino: int, where: dict) -> bool:
    """process_dinode for an inode in use; False when xfs_repair would
    clear the inode (it then counts as free)."""
    sb = ctx.sb
    bad = functools.partial(report_inode, ctx)
    mode = d["mode"]
    ifmt = mode & S_IFMT
    fmt = d["format"]
    allowed = {C.S_IFIFO: (0,), C.S_IFCHR: (0,), C.S_IFBLK: (0,), C.S_IFSOCK: (0,),
               C.S_IFDIR: (1, 2, 3), C.S_IFREG: (2, 3), C.S_IFLNK: (1, 2)}.get(ifmt)
    if fmt >= C.XFS_DINODE_FMT_UUID or (allowed is not None and fmt not in allowed):
        bad("INODE_FORMAT", f"data fork format {fmt} does not suit file type "
            f"0o{ifmt:o}", "di_format", where, found=fmt)
        return False
    flags = d["flags"]
    if flags:
        problems = []
        if flags & ~DIFLAG_ANY:
            problems.append(f"unknown flags 0x{flags & ~DIFLAG_ANY:x}")
        if flags & DIFLAG_REALTIME:
            problems.append("the realtime flag without a realtime device")
        if flags & DIFLAG_NEWRTBM and ino != rt_inodes(ctx)[0]:
            problems.append("the realtime bitmap flag on another inode")
        if flags & DIR_FLAGS and ifmt != C.S_IFDIR:
            problems.append("directory flags on an inode that is not a directory")
        if flags & (DIFLAG_REALTIME | DIFLAG_EXTSIZE) and ifmt != C.S_IFREG:
            problems.append("file flags on an inode that is not a regular file")
        for p in problems:
            bad("INODE_FLAGS", p, "di_flags", where, found=flags)
    f2 = d["flags2"]
    if f2 & ~DIFLAG2_ANY:
        bad("INODE_FLAGS", f"unknown flags2 0x{f2 & ~DIFLAG2_ANY:x}", "di_flags2", where,
            found=f2)
    if f2 & DIFLAG2_DAX and ifmt not in (C.S_IFREG, C.S_IFDIR):
        bad("INODE_FLAGS", "the DAX flag on a special file", "di_flags2", where, found=f2)
    reflink_fs = sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK)
    if f2 & DIFLAG2_REFLINK:
        why = None
        if not reflink_fs:
            why = "the reflink flag without the reflink feature"
        elif ifmt != C.S_IFREG:
            why = "the reflink flag on an inode that is not a regular file"
        elif flags & (DIFLAG_REALTIME | DIFLAG_RTINHERIT):
            why = "the reflink flag on a realtime inode"
        if why:
            bad("INODE_FLAGS", why, "di_flags2", where, found=f2)
            return False
    if f2 & DIFLAG2_COWEXTSIZE:
        if not reflink_fs:
            bad("INODE_FLAGS", "a CoW extent size hint without the reflink feature",
                "di_flags2", where, found=f2)
        elif ifmt not in (C.S_IFDIR, C.S_IFREG):
            bad("INODE_FLAGS", "the CoW extent size flag on a special file",
                "di_flags2", where, found=f2)
        elif flags & (DIFLAG_REALTIME | DIFLAG_RTINHERIT):
            bad("INODE_FLAGS", "a CoW extent size hint on a realtime inode",
                "di_flags2", where, found=f2)
    if f2 & DIFLAG2_BIGTIME and not sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_BIGTIME):
        bad("INODE_FLAGS", "bigtime timestamps on a filesystem without bigtime",
            "di_flags2", where, found=f2)
    if f2 & DIFLAG2_NREXT64:
        if not sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_NREXT64):
            bad("INODE_FLAGS", "64-bit extent counters on a filesystem without nrext64",
                "di_flags2", where, found=f2)
    elif d["pad"] != bytes(8):
        bad("INODE_CORRUPT", "the padding after di_projid is not zero", "di_v3_pad",
            where)
    if ifmt not in C.TYPE_NAMES:
        bad("INODE_FORMAT", f"file type 0o{ifmt:o} is not valid", "di_mode", where,
            found=mode)
        return False
    if ino == root_ino(ctx) and ifmt != C.S_IFDIR:
        bad("INODE_FORMAT", "the root inode is not a directory", "di_mode", where,
            found=mode)
    fault = _extsize_fault(ctx, d)
    if fault:
        bad("INODE_EXTSIZE", fault[1], fault[0], where, found=d["extsize"])
    fault = _cowextsize_fault(ctx, d)
    if fault:
        bad("INODE_EXTSIZE", fault[1], fault[0], where, found=d["cowextsize"])
    if not f2 & DIFLAG2_BIGTIME:
        for name in ("atime", "mtime", "ctime", "crtime"):
            nsec = d[name] & 0xFFFFFFFF
            if nsec >= NSEC_PER_SEC:
                bad("INODE_TIMESTAMP", f"{name} nanoseconds {nsec} exceed a second",
                    "di_" + name, where, found=nsec)
    if not _check_sizes(ctx, d, ino, where):
        return False
    fault = _forkoff_fault(ctx, d)
    if fault:
        bad("INODE_FORKOFF", fault[1], fault[0], where, found=d["forkoff"])
        return False
    forks = _check_forks(ctx, d, raw, ino, where)
    if forks is None:
        return False
    node = forks
    if ifmt in (C.S_IFCHR, C.S_IFBLK, C.S_IFSOCK, C.S_IFIFO) and ctx._data_blocks:
        bad("INODE_SIZE", f"a {C.TYPE_NAMES[ifmt]} owns {ctx._data_blocks} blocks",
            "di_nblocks", where, found=ctx._data_blocks)
        return False
    if d["onlink"]:
        bad("INODE_CORRUPT", f"the obsolete di_onlink is {d['onlink']}", "di_onlink",
            where, found=d["onlink"])
    if ifmt == C.S_IFDIR:
        ctx.dirs.append(ino)
        ctx.dir_raw[ino] = raw
    elif ifmt == C.S_IFLNK and node:       # False: the core could not be decoded
        _check_symlink(ctx, node, d, where)
    return True


def _check_sizes(ctx, d, ino, where) -> bool:
    """process_check_inode_sizes."""
    ifmt = d["mode"] & S_IFMT
    size = d["size"]
    dsize = _fork_size(ctx, d, False)
    bad = functools.partial(report_inode, ctx)
    if ifmt == C.S_IFDIR:
        if size <= dsize and d["format"] != C.XFS_DINODE_FMT_LOCAL:
            bad("INODE_SIZE", f"directory size {size} fits the inode but the fork is "
                "not local", "di_size", where, found=size)
            return False
        if size > C.XFS_DIR2_LEAF_OFFSET:
            bad("INODE_SIZE", f"directory size {size} is beyond the data space",
                "di_size", where, found=size)
            return False
    elif ifmt == C.S_IFLNK:
        fault = _symlink_extlist(ctx, d)
        if fault:
            bad("SYMLINK", fault, "di_format", where)
            return False
    elif ifmt in (C.S_IFCHR, C.S_IFBLK, C.S_IFSOCK, C.S_IFIFO):
        if size:
            bad("INODE_SIZE", f"a {C.TYPE_NAMES[ifmt]} of size {size}", "di_size",
                where, found=size)
            return False
    return True


def _symlink_extlist(ctx, d):
    size, fmt = d["size"], d["format"]
    dsize = _fork_size(ctx, d, False)
    if size <= dsize:
        return None if fmt == C.XFS_DINODE_FMT_LOCAL else \
            f"size {size} fits the inode but the fork is not local"
    if fmt == C.XFS_DINODE_FMT_LOCAL:
        return f"size {size} does not fit the inode but the fork is local"
    n = d["nextents"]
    if n > ctx.max_symlink_blocks:
        return f"{n} extents, a symlink needs at most {ctx.max_symlink_blocks}"
    return None


# -- forks ---------------------------------------------------------------------
def _check_forks(ctx, d, raw, ino, where):
    """Both forks: extent lists and block maps checked and claimed, the
    block and extent counts compared.  Returns the Inode object (for the
    symlink and xattr checks), or None when the data fork is bad (the
    inode would be cleared)."""
    bad = functools.partial(report_inode, ctx)
    if ctx.hooks is not None:
        d, raw = ctx.hooks.fork_input(ctx, d, raw)
    try:
        node = Inode(ctx.fs, ino, raw)
    except FsToolError:
        node = None
    data = _fork_extents(ctx, d, raw, ino, where, attr=False)
    if data is None:
        return None
    nblocks, nextents = data
    ctx._data_blocks = nblocks
    anblocks = anextents = 0
    attr_ok = True
    if not d["forkoff"]:
        if d["aformat"] != C.XFS_DINODE_FMT_EXTENTS:
            bad("INODE_FORMAT", f"attr fork format {d['aformat']} without an attr fork",
                "di_aformat", where, found=d["aformat"])
    elif d["aformat"] == C.XFS_DINODE_FMT_LOCAL:
        size = _fork_size(ctx, d, True)
        off = C.XFS_DINODE_CORE_SIZE + d["forkoff"] * 8
        totsize = struct.unpack_from(">H", raw, off)[0] if off + 2 <= len(raw) else 0
        if totsize > size or totsize < 4:
            bad("XATTR", f"shortform attr fork size {totsize} (the fork holds {size})",
                "totsize", where, found=totsize, fork="attr")
            attr_ok = False
    elif d["aformat"] in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE):
        got = _fork_extents(ctx, d, raw, ino, where, attr=True)
        if got is None:
            attr_ok = False
        else:
            anblocks, anextents = got
    else:
        bad("INODE_FORMAT", f"attr fork format {d['aformat']} is not valid",
            "di_aformat", where, found=d["aformat"])
        attr_ok = False
    total = nblocks + anblocks
    if total != d["nblocks"]:
        bad("INODE_NBLOCKS", f"di_nblocks is {d['nblocks']}, it owns {total} blocks",
            "di_nblocks", where, expected=total, found=d["nblocks"])
    if nextents != d["nextents"]:
        bad("INODE_NEXTENTS", f"di_nextents is {d['nextents']}, the data fork maps "
            f"{nextents} extents", "di_nextents", where, expected=nextents,
            found=d["nextents"])
    if anextents != d["anextents"]:
        bad("INODE_NEXTENTS", f"di_anextents is {d['anextents']}, the attr fork maps "
            f"{anextents} extents", "di_anextents", where, expected=anextents,
            found=d["anextents"])
    if total < nextents + anextents:
        bad("INODE_NBLOCKS", "fewer blocks than extents", "di_nblocks", where)
        return None
    if attr_ok and node is not None and d["forkoff"]:
        ctx.guarded(f"inode {ino} xattrs", check_xattrs, ctx, node, **where)
    elif d["forkoff"]:
        ctx.pptrs_whole = False
    return node if node is not None else False


def _fork_extents(ctx, d, raw, ino, where, attr: bool):
    """(blocks, extents) of one fork in extents or btree format, every
    record checked and its blocks claimed; None when the fork is bad."""
    fmt = d["aformat"] if attr else d["format"]
    if fmt not in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE):
        return 0, 0
    off = C.XFS_DINODE_CORE_SIZE + (d["forkoff"] * 8 if attr else 0)
    size = _fork_size(ctx, d, attr)
    if ctx.hooks is not None:
        d = ctx.hooks.extent_count(ctx, d, raw, off, size, attr)
    fork = "attr" if attr else "data"
    where = dict(where, fork=fork)
    if fmt == C.XFS_DINODE_FMT_EXTENTS:
        n = d["anextents"] if attr else d["nextents"]
        if n * 16 > size:
            if attr or n * 16 > ctx.litino:
                report_inode(ctx, "INODE_NEXTENTS", f"{n} extents do not fit the {fork} "
                                  "fork", "di_anextents" if attr else "di_nextents",
                                  where, found=n)
                return None
            # past the attr fork offset but inside the inode: xfs_repair
            # reads the records there, the kernel's verifier refuses
            report_inode(ctx, "INODE_VERIFY", f"{n} extents run past the data fork "
                              f"({size} bytes by di_forkoff)", "di_forkoff", where,
                              found=d["forkoff"])
        recs = parsers.decode_bmbt_recs(raw, off, n)
        budget = None if attr or d["flags"] & DIFLAG_REALTIME else d["nblocks"]
        recs = _trim_long_extents(ctx, [(None, recs)], where, budget).get(None, recs)
        got = _extent_list(ctx, recs, ino, d, where, attr)
        if got is None:
            return None
        return got, n
    return _bmbt(ctx, d, raw, off, size, ino, where, attr)


def _trim_long_extents(ctx, leaves, where, budget=None) -> dict:
    """Records whose length runs over the next record's file offset
    while the offsets themselves are in order: the length is the fault
    (a startoff or a startblock moved leaves the order or the block
    claims wrong instead).  Each such record is reported (INODE_EXTENT,
    field br_blockcount, ``expected`` the length repair writes) and read
    as trimmed, to the shortest of what the evidence allows: ending
    before the next record's offset; running over no block the free
    space btrees call free or something else already claims (the blocks
    a grown length took in); and, with ``budget`` (the blocks di_nblocks
    leaves this fork) and one such record, no more than the fork's other
    records leave of it.  ``leaves`` is [(key, records)] in file order
    (the leaves of a bmbt, or one extent list); returns {key: records as
    trimmed} for the lists that changed.  xfs_repair clears the inode
    when the overlap lies inside one leaf and keeps the grown record,
    claiming free blocks, when it spans two: both keep less of the file
    than it held."""
    flat = [(key, i, r) for key, recs in leaves for i, r in enumerate(recs)]
    bad = [(x, y) for x, y in zip(flat, flat[1:]) if x[2][0] < y[2][0] < x[2][0] + x[2][2]]
    out: dict = {}
    if not bad:
        return out
    excess = sum(r[2] for _k, _i, r in flat) - budget if budget is not None else 0
    for (key, i, a), (_k, _j, b) in bad:
        n = min(a[2], b[0] - a[0])
        if len(bad) == 1 and 0 < excess < a[2]:
            n = min(n, a[2] - excess)
        n = _sound_length(ctx, a[1], n)
        recs = out.setdefault(key, list(dict(leaves)[key]))
        recs[i] = (a[0], a[1], n, a[3])
        bwhere = dict(where) if key is None else where[key]
        report_inode(ctx, "INODE_EXTENT", f"{bwhere['fork']} fork extent {i} at offset "
                          f"{a[0]} runs {a[2]} blocks, over the next extent at offset "
                          f"{b[0]}: its length is {n}", "br_blockcount", bwhere, index=i,
                          expected=n, found=a[2])
    return out


def _sound_length(ctx, startblock: int, n: int) -> int:
    """``n``, or less: the blocks from ``startblock`` up to the first that
    the free space btrees of its AG call free or that something already
    claims (one block at least)."""
    agno, agbno = ctx.fsb_split(startblock)
    for s, _n, _owner in ctx.claims.get(agno, ()):
        if agbno < s < agbno + n:
            n = s - agbno
    return max(n, 1)


def _extent_list(ctx, recs, ino, d, where, attr: bool, last_end=0, first=True):
    """process_bmbt_reclist: order, lengths, block numbers, no unwritten
    extents outside regular files' data forks; blocks claimed.  Returns
    the blocks mapped, or None on the first bad record."""
    sb = ctx.sb
    ifmt = d["mode"] & S_IFMT
    owner = file_owner(ino, ATTR if attr else DATA)
    prev_end = last_end
    bad = functools.partial(report_inode, ctx)
    # verify_fsbno of both ends, inlined: this loop sees every extent
    agblklog = sb.agblklog
    mask = (1 << agblklog) - 1
    agcount = sb.agcount
    lowest = ctx.agfl_block
    ag_len = ctx.ag_lengths
    unwritten_ok = not attr and ifmt == C.S_IFREG
    max_off = ctx.max_file_offset
    fast = checks.extent_list(recs, last_end, first, unwritten_ok, agblklog, agcount,
                              lowest, ag_len, max_off)
    # every record sound (fast is not None): the loop has nothing to report
    total, claims = fast if fast is not None else (0, [])
    for i, (startoff, startblock, count, unwritten) in enumerate(
            recs if fast is None else ()):
        field = "extents"
        if (i or not first) and startoff < prev_end:
            bad("INODE_EXTENT", f"{where['fork']} fork extent {i} at offset {startoff} "
                "is out of order or overlaps", field, where, index=i, found=startoff)
            return None
        prev_end = startoff + count
        if unwritten and not unwritten_ok:
            bad("INODE_EXTENT", f"unwritten extent {i} in the {where['fork']} fork of a "
                f"{C.TYPE_NAMES.get(ifmt, 'file')}", field, where, index=i)
            return None
        if count == 0:
            bad("INODE_EXTENT", f"{where['fork']} fork extent {i} has zero length",
                field, where, index=i)
            return None
        end = startblock + count - 1
        agno = (startblock >> agblklog) & 0xFFFFFFFF
        agbno = startblock & mask
        end_agbno = end & mask
        if agno != (end >> agblklog) & 0xFFFFFFFF or agno >= agcount or \
                not lowest < agbno < ag_len[agno] or not lowest < end_agbno < ag_len[agno]:
            bad("INODE_EXTENT", f"{where['fork']} fork extent {i} at block {startblock}, "
                f"{count} blocks, lies outside the filesystem or crosses an AG", field,
                where, index=i, found=startblock)
            return None
        if prev_end - 1 > max_off:
            bad("INODE_EXTENT", f"{where['fork']} fork extent {i} ends beyond the largest "
                "file offset", field, where, index=i, found=startoff)
            return None
        total += count
        claims.append((agno, agbno, count))
    if fast is not None and not ctx.has_rmap:
        checks.claim_extents(recs, agblklog, ctx.claims, owner)
        claims = ()
    for (agno, agbno, count), rec in zip(claims, recs):
        ctx.claims[agno].append((agbno, count, owner))
        if ctx.has_rmap:
            ctx.rmap_expect[agno].append(
                (agbno, count, ino, rec[0],
                 (1 << 63 if attr else 0) | (1 << 61 if rec[3] else 0)))
    if unwritten_ok and ctx.reflink:
        for rec in recs:
            if rec[3]:
                ctx.unwritten[(rec[1] >> agblklog) & 0xFFFFFFFF].append(
                    (rec[1] & mask, rec[2], owner))
    ctx._last_key = (recs[0][0], recs[-1][0]) if recs else None
    return total


def _bmbt(ctx, d, raw, off, size, ino, where, attr: bool):
    """process_btinode / scan_bmapbt: the root in the inode, every block
    below it walked through the read engine."""
    bad = functools.partial(report_inode, ctx)
    fork = where["fork"]
    level, numrecs = struct.unpack_from(">HH", raw, off)
    maxlev = ctx.bm_maxlevels[1 if attr else 0]
    if level == 0 or level > maxlev:
        bad("BMBT_ROOT", f"{fork} fork bmbt root has level {level}", "bb_level", where,
            found=level)
        return None
    if numrecs == 0 or 4 + 16 * numrecs > size:
        bad("BMBT_ROOT", f"{fork} fork bmbt root holds {numrecs} records", "bb_numrecs",
            where, found=numrecs)
        return None
    maxrecs = (size - 4) // 16
    keys = [k for (k,) in struct.iter_unpack(">Q", raw[off + 4:off + 4 + 8 * numrecs])]
    poff = off + 4 + 8 * maxrecs
    ptrs = [p for (p,) in struct.iter_unpack(">Q", raw[poff:poff + 8 * numrecs])]
    for p in ptrs:
        if not ctx.verify_fsbno(p):
            bad("BMBT_ROOT", f"{fork} fork bmbt root points at invalid block {p}",
                "ptrs", where, found=p)
            return None
    reader = ctx.fs.bmbt_reader(ino)
    problems = []

    def problem(addr, lvl, field, detail):
        problems.append((addr, field, detail))
    owner_blk = file_owner(ino, BMBT_ATTR if attr else BMBT_DATA)
    total = nrecs = 0
    ok = True
    last_leaf_end = 0
    first_leaf = True
    # where each block's key is held: (node address, or None for the
    # root in the inode, and the key's index)
    key_at = {p: (None, i) for i, p in enumerate(ptrs)}
    key_fixed: dict = {}        # (holder, index) -> the key its block's first key gives
    key_checks: list = []       # (block, its key above, its first key, leaf) top down
    node_keys: list = []        # (node address, its keys, where) of every node
    for depth, row in enumerate(reader.walk(ptrs, level, problem,
                                            root_keys=[struct.pack(">Q", k) for k in keys])):
        lvl = level - 1 - depth
        prev = None
        trimmed = {}
        if lvl == 0:
            trimmed = _trim_long_extents(
                ctx, [(blk.addr, blk.recs) for blk, _key in row],
                {blk.addr: dict(where, block=ctx.fsb_split(blk.addr)[1],
                                agno=ctx.fsb_split(blk.addr)[0], structure="bmbt")
                 for blk, _key in row},
                None if attr or d["flags"] & DIFLAG_REALTIME else
                d["nblocks"] - total - len(row))
        for blk, key in row:
            total += 1
            agno, agbno = ctx.fsb_split(blk.addr)
            ctx.claims[agno].append((agbno, 1, owner_blk))
            if ctx.has_rmap:
                ctx.rmap_expect[agno].append(
                    (agbno, 1, ino, 0, (1 << 62) | (1 << 63 if attr else 0)))
            bwhere = dict(where, block=agbno, agno=agno, structure="bmbt")
            check_lsn(ctx, blk.lsn, "bmbt", **{k: v for k, v in
                                               bwhere.items()
                                               if k != "structure"},
                           field="bb_lsn")
            if prev is None:
                if blk.leftsib != C.NULLFSBLOCK:
                    bad("BMBT_SIBLING", f"{fork} fork bmbt block {blk.addr} is first in "
                        f"its level but has left sibling {blk.leftsib}", "bb_leftsib",
                        bwhere, found=blk.leftsib)
                    ok = False
            elif prev.rightsib != blk.addr or blk.leftsib != prev.addr:
                bad("BMBT_SIBLING", f"{fork} fork bmbt blocks {prev.addr} and {blk.addr} "
                    "are not linked as siblings", "bb_leftsib", bwhere)
                ok = False
            prev = blk
            leaf = lvl == 0
            minr = ctx.bmbt_min[0 if leaf else 1]
            # the blocks right below the root in the inode may be sparse
            if depth and blk.numrecs < minr:
                bad("BMBT_NUMRECS", f"{fork} fork bmbt block {blk.addr} holds "
                    f"{blk.numrecs} records, fewer than {minr}", "bb_numrecs", bwhere,
                    expected=minr, found=blk.numrecs)
                ok = False
            first = blk.recs[0][0] if leaf and blk.recs else \
                (struct.unpack(">Q", blk.keys[0])[0] if blk.keys else None)
            if key is not None and first is not None:
                key_checks.append((blk.addr, struct.unpack(">Q", key)[0], first, leaf))
            if leaf:
                recs = trimmed.get(blk.addr, blk.recs)
                got = _extent_list(ctx, recs, ino, d, bwhere, attr, last_leaf_end,
                                   first_leaf)
                if got is None:
                    ok = False
                    continue
                first_leaf = False
                if recs:
                    last_leaf_end = recs[-1][0] + recs[-1][2]
                total += got
                nrecs += blk.numrecs
            else:
                node_keys.append((blk.addr, [struct.unpack(">Q", k)[0] for k in blk.keys],
                                  bwhere))
                for i, p in enumerate(blk.ptrs):
                    key_at[p] = (blk.addr, i)
                    if not ctx.verify_fsbno(p):
                        bad("BMBT_BLOCK", f"{fork} fork bmbt block {blk.addr} points at "
                            f"invalid block {p}", "ptrs", bwhere, found=p)
                        ok = False
        if prev is not None and prev.rightsib != C.NULLFSBLOCK:
            # xfs_repair's process_btinode looks at the leaf level's last
            # right sibling only; above it, a warning
            pwhere = dict(where, structure="bmbt", block=ctx.fsb_split(prev.addr)[1],
                          agno=ctx.fsb_split(prev.addr)[0])
            if lvl == 0:
                bad("BMBT_SIBLING", f"{fork} fork bmbt block {prev.addr} is last in its "
                    f"level but has right sibling {prev.rightsib}", "bb_rightsib",
                    pwhere, found=prev.rightsib)
                ok = False
            else:
                ctx.report("BMBT_NODE_SIBLING", f"inode {ino}: {fork} fork bmbt node "
                           f"{prev.addr} is last in its level but has right sibling "
                           f"{prev.rightsib}", field="bb_rightsib", found=prev.rightsib,
                           **pwhere)
    # each key against its block's first key, from the leaves up: a node
    # whose own first key is corrected (to its child's) is compared as
    # corrected, so a key is set to what the block will hold
    for addr, k, first, leaf in reversed(key_checks):
        want = first if leaf else key_fixed.get((addr, 0), first)
        if k == want:
            continue
        holder, kidx = key_at.get(addr, (None, None))
        if holder is None:
            kwhere = where
        else:
            hagno, hagbno = ctx.fsb_split(holder)
            kwhere = dict(where, block=hagbno, agno=hagno, structure="bmbt")
        bad("BMBT_KEY", f"{fork} fork bmbt key {k} for block {addr} differs from its "
            f"first key {want}", "keys", kwhere, index=kidx, expected=want, found=k)
        if kidx is not None:
            key_fixed[(holder, kidx)] = want
    # keys out of order, once each key that differs from its block's first
    # key (reported with the key repair writes) reads as that key:
    # xfs_repair corrects such a key and keeps the file
    for addr, ks, kwhere in [(None, keys, where)] + node_keys:
        ks = [key_fixed.get((addr, i), k) for i, k in enumerate(ks)]
        if any(b <= a for a, b in zip(ks, ks[1:])):
            bad("BMBT_KEY", f"{fork} fork bmbt " + ("root keys out of order" if addr is None
                                                    else f"block {addr}: keys out of order"),
                "keys", kwhere)
            ok = False
    # a block whose only fault is its CRC is salvaged (xfs_repair rewrites
    # the CRC and keeps the file): reported, the inode kept
    faults: dict = {}
    for addr, field, _detail in problems:
        faults.setdefault(addr, set()).add(field)
    for addr, field, detail in problems:
        code = {"bb_level": "BMBT_LEVEL", "bb_numrecs": "BMBT_NUMRECS"}.get(
            field, "BMBT_BLOCK")
        if field == "ptr" and "twice" in detail:
            code = "BMBT_CYCLE"
        bad(code, f"{fork} fork bmbt block {addr}: {detail}", field if field != "ptr"
            else None, dict(where, structure="bmbt",
                            block=ctx.fsb_split(addr)[1] if addr is not None else None,
                            agno=ctx.fsb_split(addr)[0] if addr is not None else None))
        if faults[addr] != {"crc"}:
            ok = False
    if not ok:
        return None
    if nrecs <= size // 16:
        bad("BMBT_ROOT", f"{fork} fork is in btree format but its {nrecs} extents fit "
            "the inode", "di_format" if not attr else "di_aformat", where, found=nrecs)
        return None
    return total, nrecs


# -- symlinks ------------------------------------------------------------------
def _check_symlink(ctx, node, d, where) -> None:
    bad = functools.partial(report_inode, ctx)
    size = d["size"]
    if size >= C.XFS_SYMLINK_MAXLEN:
        bad("SYMLINK", f"target of {size} bytes is too long", "di_size", where, found=size)
        return
    if size == 0:
        bad("SYMLINK", "zero-length target", "di_size", where)
        return
    try:
        target = read_symlink(node)
    except FsToolError as e:
        ctx.from_error("SYMLINK", e, **where)
        return
    if len(target) != size:
        bad("SYMLINK", "target shorter than di_size", "di_size", where)
    elif b"\0" in target:
        bad("SYMLINK", "target holds a NUL byte", "target", where)
