"""fstool metadump / mdrestore: the metadata of an image alone, in
xfs_metadump's file formats (:mod:`fstool.format.metadump`), and back.

What a dump holds is what xfs_metadump copies: per AG the superblock, AGF,
AGI and AGFL sectors, every block of the free-space, rmap, refcount, inode
and free-inode btrees, every inode cluster the inode btree lists, and for
every inode the blocks of its block-map btree, of a directory, of a
symlink kept out of line and of its attribute fork; then the data of the
realtime bitmap, summary and quota inodes; then the log.  File data is
never copied.

By default, as xfs_metadump does:

* names are obfuscated: every directory entry, attribute name and symlink
  path component of five bytes or more is replaced by random characters
  with the same length and the same directory hash (the last five bytes
  are solved for the hash), so that every hash-ordered structure stays
  valid; names that would repeat in one inode get an alternate with the
  same hash; attribute values become ``v``s; ``lost+found`` and the
  entries in it named by their inode number are kept; the label becomes
  ``L``s;
* the unused parts of metadata blocks (past the records of a btree block,
  between a directory block's entries, free inodes' literal areas, past
  the used part of an inode fork...) are zeroed;
* a clean log is replaced by an empty clean log (a dirty one is copied as
  it is, names and all: it is what recovery needs);

a block modified so gets a new CRC when its old one was right (a block
with a bad CRC keeps a bad CRC, so the dump shows the damage as it is).

``mdrestore`` (:mod:`fstool.ops.mdrestore`) makes an image of a dump again.
"""
from __future__ import annotations

import os
import random
import struct

from .._backend import parsers
from ..errors import FsToolError, InvalidArgument
from ..format import constants as C, metadump as M
from ..format.structs import SB
from ..fs import dabtree, dirform
from ..fs.dirform import data as dirdata, free as dirfree, leaf as dirleaf, sf as dirsf
from ..fs.filesystem import Filesystem
from ..log.head import find_state
from ..trans.logwriter import LogGeometry, xfsprogs_cleared_log
from .mdrestore import refuse_same

BB = C.BBSIZE
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_CRC = struct.Struct("<I")
XFS_SB_VERSION_BORGBIT = 0x4000     # ascii-ci: case-insensitive directory hashes
MAX_EXTLEN = (1 << 21) - 1          # XFS_MAX_BMBT_EXTLEN: xfs_metadump's default -m
# the most extents a fork can count: (data, attr) with small and large counts
_MAX_NEXTENTS = {False: ((1 << 31) - 1, (1 << 15) - 1), True: ((1 << 48) - 1, (1 << 32) - 1)}
ORPHANAGE = b"lost+found"
_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_TO_ALPHABET = bytes(_ALPHABET[b & 63] for b in range(256))

# btree geometry: (header size, record size, key size, pointer size)
_SHORT, _LONG = C.XFS_BTREE_SBLOCK_CRC_LEN, C.XFS_BTREE_LBLOCK_CRC_LEN
_BT = {"bno": (_SHORT, 8, 8, 4), "cnt": (_SHORT, 8, 8, 4), "ino": (_SHORT, 16, 4, 4),
       "fino": (_SHORT, 16, 4, 4), "rmap": (_SHORT, 24, 40, 4), "refc": (_SHORT, 12, 4, 4),
       "bmbt": (_LONG, 16, 8, 8)}
_BT_CRC = {"bmbt": C.XFS_BTREE_LBLOCK_CRC_OFF}


# -- names ---------------------------------------------------------------------------
def _invalid(c: int) -> bool:
    return c == 0 or c == 0x2F


def obfuscate_name(name: bytes, rng: random.Random, ci: bool = False) -> bytes:
    """A name of the same length and directory hash as ``name`` (names
    shorter than five bytes are kept: the last five bytes are what is
    solved for the hash): random characters (the alphabet has 64: six
    random bits each), then the five bytes that reach the hash.  With
    ``ci`` (a directory entry of an ascii-ci filesystem) the hash folds
    capitals, so no solved byte may be one: another prefix is drawn, up to
    a thousand times, then the name is kept (as xfs_metadump does)."""
    n = len(name)
    if n < 5:
        return name
    if not ci:
        # rng.randbytes(k), one call less
        return parsers.metadump_name(
            rng.getrandbits((n - 5) * 8).to_bytes(n - 5, "little").translate(_TO_ALPHABET),
            parsers.da_hashname(name), False)
    want = parsers.da_hashname_ci(name)
    for _ in range(1001):
        new = parsers.metadump_name(rng.randbytes(n - 5).translate(_TO_ALPHABET), want, True)
        if new is not None:
            return new
    return name


# pairs of (byte, bit) whose flips change the hash the same way
_FLIPS = (((0, 0), (1, 7)), ((1, 0), (2, 7)), ((2, 0), (3, 7)), ((0, 4), (4, 0)),
          ((0, 5), (4, 1)), ((0, 6), (4, 2)), ((0, 7), (4, 3)), ((3, 0), (4, 7)),
          ((0, 0), (5, 3)), ((0, 1), (5, 4)), ((0, 2), (5, 5)), ((0, 3), (5, 6)),
          ((0, 4), (5, 7)), ((4, 0), (5, 7)))


def _flip(name: bytearray, bitseq: int) -> int:
    n = len(name)
    index = 0
    while index < len(_FLIPS) and _FLIPS[index][1][0] < n:
        index += 1
    index -= 1
    if bitseq > index:
        return -1
    offset = n - (_FLIPS[index][1][0] + 1)
    (b0, m0), (b1, m1) = _FLIPS[index - bitseq]
    p0, p1 = offset + b0, offset + b1
    if _invalid(name[p0] ^ (1 << m0)) or _invalid(name[p1] ^ (1 << m1)):
        return 0
    name[p0] ^= 1 << m0
    name[p1] ^= 1 << m1
    return 1


def alternate(name: bytes, seq: int):
    """The ``seq``-th name with the same length and hash as ``name``
    (None: not a valid name; -1: no more alternates)."""
    if len(name) < 2:
        return -1
    out = bytearray(name)
    bitseq = 0
    bits = seq
    while bits:
        if bits & (1 << bitseq):
            r = _flip(out, bitseq)
            if r < 1:
                return -1 if r else None
            bits ^= 1 << bitseq
        bitseq += 1
    return bytes(out)


# -- writing a dump ------------------------------------------------------------------
class _V1Out:
    def __init__(self, f, info: int):
        self.f = f
        self.info = info
        self.daddrs: list = []
        self.data: list = []

    def write(self, daddr: int, data, log: bool = False) -> None:
        n = len(data) // BB
        i = 0
        while i < n:
            # as many sectors as the current index has room for, at once
            k = min(n - i, M.V1_INDICES - len(self.daddrs))
            self.daddrs.extend(range(daddr + i, daddr + i + k))
            self.data.append(bytes(data[i * BB:(i + k) * BB]))
            i += k
            if len(self.daddrs) == M.V1_INDICES:
                self._flush()

    def _flush(self) -> None:
        self.f.write(M.v1_index(len(self.daddrs), self.info, self.daddrs))
        self.f.write(b"".join(self.data))
        self.daddrs, self.data = [], []

    def finish(self) -> None:
        self._flush()


class _V2Out:
    def __init__(self, f, compat: int):
        self.f = f
        f.write(M.v2_header(compat))

    def write(self, daddr: int, data, log: bool = False) -> None:
        self.f.write(M.v2_extent(daddr, len(data) // BB, log))
        self.f.write(data)

    def finish(self) -> None:
        pass


def _fill(buf: bytearray, start: int, end: int, byte: int = 0) -> None:
    """Set ``buf[start:end]`` to ``byte``, clipped to the buffer (a damaged
    block's counts may point past it: the buffer never grows)."""
    start, end = max(0, start), min(end, len(buf))
    if end > start:
        buf[start:end] = bytes(end - start) if not byte else bytes([byte]) * (end - start)


def _put(buf: bytearray, start: int, data: bytes) -> None:
    """Write ``data`` at ``start``, clipped to the buffer."""
    n = min(len(data), len(buf) - start)
    if start >= 0 and n > 0:
        buf[start:start + n] = data[:n]


def _core(dip) -> int:
    """Where an inode's literal area starts: after the v3 core, or after
    the v1/v2 core when the version byte says so (a damaged inode is read
    as xfs_metadump reads it, by what it says of itself)."""
    return C.XFS_DINODE_CORE_SIZE if dip[4] == 3 else 100


def _crc_ok(buf, crc_off: int) -> bool:
    return parsers.xfs_cksum_ok(bytes(buf), crc_off)


def _set_crc(buf: bytearray, crc_off: int) -> None:
    _CRC.pack_into(buf, crc_off, parsers.xfs_cksum(bytes(buf), crc_off))


def _bm_maxlevels(blocksize: int, large_counts: bool) -> tuple[int, int]:
    """The most levels a block-map btree can have, (data fork, attr fork):
    as many as it takes the fullest fork, at half-full blocks, to come down
    to a root in the inode of the least size a fork can have (3 pointers
    for the data fork, 2 for the attr fork)."""
    leaf = (blocksize - _LONG) // 16 // 2
    node = (blocksize - _LONG) // 16 // 2
    out = []
    for whichfork, root_ptrs in ((0, 3), (1, 2)):
        blocks = -(-_MAX_NEXTENTS[large_counts][whichfork] // leaf)
        level = 1
        while blocks > 1:
            blocks = 1 if blocks <= root_ptrs else -(-blocks // node)
            level += 1
        out.append(level)
    return out[0], out[1]


class _Unreadable(Exception):
    """A block the walk cannot read (beyond the device, an I/O error)."""


class Dumper:
    def __init__(self, fs, out, *, obfuscate: bool, zero: bool, log: bool,
                 max_extent: int = MAX_EXTLEN, seed=None):
        self.fs = fs
        self.dev = fs.dev
        self.sb = sb = fs.sb
        self.out = out
        self.obfuscate = obfuscate
        self.zero = zero
        self.copy_log = log
        self.max_extent = max_extent
        self.rng = random.Random(seed)
        self.bs = sb.blocksize
        self.bbs = sb.blocksize // BB
        f = sb.fields
        self.sectbb = max(1, f["sb_sectsize"] // BB)
        self.isize = sb.inodesize
        self.lit = sb.inodesize - C.XFS_DINODE_CORE_SIZE
        self.ftype = sb.has_ftype
        self.sparse = bool(sb.incompat & C.XFS_SB_FEAT_INCOMPAT_SPINODES)
        self.parent = bool(sb.incompat & C.XFS_SB_FEAT_INCOMPAT_PARENT)
        # ascii-ci: directory entries (and parent pointers) hash with
        # capitals folded; attribute names and symlink targets do not
        self.ci = bool(sb.fields["sb_versionnum"] & XFS_SB_VERSION_BORGBIT)
        self.dirbs = sb.dirblksize
        self.dirfsbs = sb.dirblkfsbs
        # directory address spaces in directory-block units of fsbs
        self.leafblk = (C.XFS_DIR2_LEAF_OFFSET // self.bs)
        self.freeblk = (C.XFS_DIR2_FREE_OFFSET // self.bs)
        self.mxr = {k: ((self.bs - h) // r, (self.bs - h) // (k_ + p))
                    for k, (h, r, k_, p) in _BT.items()}
        cluster = max(self.bs, 8192 * self.isize // 256)
        self.blocks_per_cluster = max(1, cluster // self.bs)
        self.ialloc_blks = max(1, 64 // sb.inopblock)
        self.last_ag_len = sb.dblocks - (sb.agcount - 1) * sb.agblocks
        self.bm_maxlevels = _bm_maxlevels(self.bs, bool(sb.incompat &
                                                        C.XFS_SB_FEAT_INCOMPAT_NREXT64))
        self.cur_ino = 0
        self.names: set = set()
        self.remap: dict = {}           # (parent ino, old name) -> new name
        self.orphanage = 0
        self.remote_vals: set = set()
        self.blocks = 0
        self.warnings: list = []

    # -- reading and writing ---------------------------------------------------------
    def read(self, daddr: int, nbb: int) -> bytearray:
        try:
            return bytearray(self.dev.pread(daddr * BB, nbb * BB))
        except FsToolError as e:
            raise _Unreadable(f"cannot read {nbb} sectors at daddr {daddr}: {e}") from None

    def _guarded(self, what: str, fn, *args) -> None:
        """Run one piece of the walk; what cannot be read, or makes no
        sense even to a careful reader, is left out with a warning (as
        xfs_metadump goes on past read errors), never the whole dump."""
        try:
            fn(*args)
        except _Unreadable as e:
            self.warnings.append(f"{what}: {e}")
        except (IndexError, struct.error, ValueError, OverflowError) as e:
            self.warnings.append(f"{what}: skipped ({type(e).__name__}: {e})")

    def emit(self, daddr: int, data, log: bool = False) -> None:
        self.out.write(daddr, data, log)
        self.blocks += 1

    def agb_daddr(self, agno: int, agbno: int) -> int:
        return (agno * self.sb.agblocks + agbno) * self.bbs

    def fsb_split(self, fsb: int) -> tuple[int, int]:
        return fsb >> self.sb.agblklog, fsb & ((1 << self.sb.agblklog) - 1)

    def valid_bno(self, agno: int, agbno: int) -> bool:
        sb = self.sb
        if agno < sb.agcount - 1:
            return 0 < agbno <= sb.agblocks
        if agno == sb.agcount - 1:
            return 0 < agbno <= self.last_ag_len
        return False

    # -- the whole image ---------------------------------------------------------------
    def run(self) -> None:
        for agno in range(self.sb.agcount):
            self.scan_ag(agno)
        f = self.sb.fields
        for ino in (f["sb_rbmino"], f["sb_rsumino"], f["sb_uquotino"], f["sb_gquotino"],
                    f["sb_pquotino"]):
            self.copy_sb_inode(ino)
        if self.copy_log:
            self.dump_log()
        self.out.finish()

    def scan_ag(self, agno: int) -> None:
        sb = self.sb
        base = self.agb_daddr(agno, 0)
        sbuf = self.read(base, self.sectbb)
        if self.obfuscate:
            fname = SB.offset("sb_fname")
            label = bytes(sbuf[fname:fname + 12])
            n = label.index(0) if 0 in label else 12
            if n:
                ok = _crc_ok(sbuf[:sb.sectsize], C.XFS_SB_CRC_OFF)
                sbuf[fname:fname + n] = b"L" * n
                if ok:
                    self._sb_crc(sbuf)
        self.emit(base, sbuf)
        agf = self.read(base + self.sectbb, self.sectbb)
        self.emit(base + self.sectbb, agf)
        agi = self.read(base + 2 * self.sectbb, self.sectbb)
        self.emit(base + 2 * self.sectbb, agi)
        agfl = self.read(base + 3 * self.sectbb, self.sectbb)
        if self.zero:
            self._zero_agfl(agf, agfl)
        self.emit(base + 3 * self.sectbb, agfl)
        u32 = lambda b, o: _U32.unpack_from(b, o)[0]  # noqa: E731
        for kind, root_off, lvl_off in (("bno", 16, 28), ("cnt", 20, 32), ("rmap", 24, 36)):
            if kind == "rmap" and not sb.ro_compat & C.XFS_SB_FEAT_RO_COMPAT_RMAPBT:
                continue
            self.tree(agno, u32(agf, root_off), u32(agf, lvl_off), kind)
        if sb.ro_compat & C.XFS_SB_FEAT_RO_COMPAT_REFLINK:
            self.tree(agno, u32(agf, 88), u32(agf, 92), "refc")
        self.tree(agno, u32(agi, 20), u32(agi, 24), "ino")
        if sb.ro_compat & C.XFS_SB_FEAT_RO_COMPAT_FINOBT:
            self.tree(agno, u32(agi, 328), u32(agi, 332), "fino")

    def _sb_crc(self, sbuf: bytearray) -> None:
        n = self.sb.sectsize
        head = bytearray(sbuf[:n])
        _set_crc(head, C.XFS_SB_CRC_OFF)
        sbuf[:n] = head

    def _zero_agfl(self, agf: bytearray, agfl: bytearray) -> None:
        ok = _crc_ok(agfl[:self.sb.sectsize], C.XFS_AGFL_CRC_OFF)
        size = (self.sb.sectsize - C.XFS_AGFL_HDR_SIZE) // 4
        first, last = _U32.unpack_from(agf, 40)[0], _U32.unpack_from(agf, 44)[0]
        if first >= size or last >= size:
            return
        i = last
        while True:
            i = (i + 1) % size
            if i == first:
                break
            _U32.pack_into(agfl, C.XFS_AGFL_HDR_SIZE + 4 * i, C.NULLAGBLOCK)
        if ok:
            _set_crc(agfl, C.XFS_AGFL_CRC_OFF)

    # -- btrees ----------------------------------------------------------------------
    def tree(self, agno: int, root: int, levels: int, kind: str) -> None:
        if root == 0 or root > self.sb.agblocks or levels > C.XFS_BTREE_MAXLEVELS:
            return
        self._btree_block(agno, root, levels, kind, None)

    def _btree_block(self, agno: int, agbno: int, level: int, kind: str, itype) -> None:
        self._guarded(f"{kind} block {agno}/{agbno}", self._btree_block_walk, agno, agbno,
                      level, kind, itype)

    def _btree_block_walk(self, agno: int, agbno: int, level: int, kind: str, itype) -> None:
        daddr = self.agb_daddr(agno, agbno)
        buf = self.read(daddr, self.bbs)
        hdr, rsz, ksz, psz = _BT[kind]
        crc_off = _BT_CRC.get(kind, C.XFS_BTREE_SBLOCK_CRC_OFF)
        nrecs = _U16.unpack_from(buf, 6)[0]
        lvl = _U16.unpack_from(buf, 4)[0]
        leaf_mxr, node_mxr = self.mxr[kind]
        if self.zero and kind not in ("rmap", "refc"):
            ok = _crc_ok(buf, crc_off)
            if lvl > 0 and nrecs <= node_mxr:
                kend = hdr + nrecs * ksz
                pstart = hdr + node_mxr * ksz
                _fill(buf, kend, pstart)
                pend = pstart + nrecs * psz
                _fill(buf, pend, len(buf))
            elif lvl == 0 and nrecs <= leaf_mxr:
                end = hdr + nrecs * rsz
                _fill(buf, end, len(buf))
            if ok:
                _set_crc(buf, crc_off)
        self.emit(daddr, buf)
        level -= 1
        if level == 0:
            if kind == "ino":
                for i in range(min(nrecs, leaf_mxr)):
                    self.inode_chunk(agno, buf[hdr + i * rsz:hdr + (i + 1) * rsz])
            elif kind == "bmbt" and nrecs <= leaf_mxr:
                self.extents(buf, hdr, nrecs, itype)
            return
        if nrecs > node_mxr:
            if kind in ("ino", "fino"):
                nrecs = node_mxr
            else:
                return
        pstart = hdr + node_mxr * ksz
        for i in range(nrecs):
            if psz == 4:
                ag, bno = agno, _U32.unpack_from(buf, pstart + 4 * i)[0]
                if not self.valid_bno(ag, bno):
                    continue
            else:
                ag, bno = self.fsb_split(_U64.unpack_from(buf, pstart + 8 * i)[0])
                if bno == 0 or bno > self.sb.agblocks or ag > self.sb.agcount:
                    continue
            self._btree_block(ag, bno, level, kind, itype)

    # -- inodes ----------------------------------------------------------------------
    def inode_chunk(self, agno: int, rec) -> None:
        self._guarded(f"inode chunk in AG {agno}", self.inode_chunk_walk, agno, rec)

    def inode_chunk_walk(self, agno: int, rec) -> None:
        sb = self.sb
        agino = _U32.unpack_from(rec, 0)[0]
        holemask = _U16.unpack_from(rec, 4)[0] if self.sparse else 0
        free = _U64.unpack_from(rec, 8)[0]
        agbno = agino >> sb.inopblog
        off = agino & ((1 << sb.inopblog) - 1)
        bpb = self.blocks_per_cluster if self.sparse else self.ialloc_blks
        ipb = min(bpb * sb.inopblock, 64)
        if off and ipb != 64:
            return
        align = sb.fields["sb_inoalignmt"]
        if (sb.inopblock <= 64 and off) or (sb.inopblock > 64 and off % 64) or \
                (align and agbno % align):
            return
        if agino == 0 or agino == C.NULLAGINO or not self.valid_bno(agno, agbno) or \
                not self.valid_bno(agno, (agino + 63) >> sb.inopblog):
            return
        end = agbno + self.ialloc_blks
        ioff = 0
        while agbno < end and ioff < 64:
            if not holemask >> (ioff // 4) & 1:
                daddr = self.agb_daddr(agno, agbno)
                buf = self.read(daddr, bpb * self.bbs)
                i = 0
                while i < ipb:
                    # the inodes that are only zeroed go native, in order;
                    # the walk takes the first that needs more, then on
                    i = parsers.metadump_plain_inodes(
                        buf, off + i, ipb - i, self.isize, self.zero,
                        self.obfuscate or self.zero, free >> (ioff + i)) - off
                    if i >= ipb:
                        break
                    o = (off + i) * self.isize
                    # a data fork its fork offset makes longer than the
                    # literal area reaches on into the inodes after it:
                    # xfs_metadump zeroes it over them (up to the end of the
                    # cluster here, where xfs_metadump's buffer ends)
                    stop = len(buf) if buf[o + 82] * 8 > self.lit else o + self.isize
                    view = buf[o:stop]
                    ino = (agno << sb.agino_log) | (agino + ioff + i)
                    self.inode(ino, view, bool(free >> (ioff + i) & 1))
                    buf[o:stop] = view
                    i += 1
                self.emit(daddr, buf)
            agbno += bpb
            ioff += ipb

    def _forks(self, dip) -> tuple[int, int]:
        forkoff = dip[82] * 8
        dsize = forkoff if forkoff else self.lit
        return dsize, (self.lit - forkoff if forkoff else 0)

    @staticmethod
    def _large_counts(dip) -> bool:
        return dip[4] >= 3 and bool(_U64.unpack_from(dip, 120)[0] & C.XFS_DIFLAG2_NREXT64)

    def _nextents(self, dip, attr: bool) -> int:
        nrext64 = self._large_counts(dip)
        if attr:
            return _U32.unpack_from(dip, 76)[0] if nrext64 else _U16.unpack_from(dip, 80)[0]
        return _U64.unpack_from(dip, 24)[0] if nrext64 else _U32.unpack_from(dip, 76)[0]

    def _extents_used(self, dip, attr: bool):
        """(extent count, bytes they fill) of an extent-list fork, as
        xfs_metadump takes them: None past the most the fork can count;
        the byte count as a 32-bit int (a count of 2**28 extents or more
        wraps it), None where that is negative."""
        nex = self._nextents(dip, attr)
        if nex > _MAX_NEXTENTS[self._large_counts(dip)][attr]:
            return None
        used = (nex * 16) & 0xFFFFFFFF
        return None if used >= 1 << 31 else (nex, used)

    def _crc_ok_inode(self, dip) -> bool:
        return _crc_ok(dip if len(dip) == self.isize else dip[:self.isize],
                       C.XFS_DINODE_CRC_OFF)

    def _set_crc_inode(self, dip: bytearray) -> None:
        if len(dip) == self.isize:
            _set_crc(dip, C.XFS_DINODE_CRC_OFF)
        else:
            head = dip[:self.isize]
            _set_crc(head, C.XFS_DINODE_CRC_OFF)
            dip[:self.isize] = head

    def inode(self, ino: int, dip: bytearray, free: bool) -> None:
        """One inode of a cluster, changed in place; an inode whose forks
        make no sense is copied as it is."""
        original = bytes(dip)
        try:
            self.inode_walk(ino, dip, free)
        except _Unreadable as e:
            self.warnings.append(f"inode {ino}: {e}")
        except (IndexError, struct.error, ValueError, OverflowError) as e:
            dip[:] = original
            self.warnings.append(f"inode {ino}: copied as it is ({type(e).__name__}: {e})")

    def inode_walk(self, ino: int, dip: bytearray, free: bool) -> None:
        self.cur_ino = ino
        ok = False
        if self.obfuscate or self.zero:
            ok = self._crc_ok_inode(dip)
        new_crc = self.zero
        core = _core(dip)
        if free:
            if self.zero:
                _fill(dip, core, core + self.lit)
        else:
            mode = _U16.unpack_from(dip, 2)[0] & C.S_IFMT
            fmt = dip[5]
            dsize, asize = self._forks(dip)
            go_on = True
            if mode == C.S_IFDIR:
                go_on = self.fork_data(dip, "dir")
                new_crc |= fmt == C.XFS_DINODE_FMT_LOCAL
            elif mode == C.S_IFLNK:
                go_on = self.fork_data(dip, "symlink")
                new_crc |= fmt == C.XFS_DINODE_FMT_LOCAL
            elif mode == C.S_IFREG:
                go_on = self.fork_data(dip, "data")
            elif mode in (C.S_IFIFO, C.S_IFCHR, C.S_IFBLK, C.S_IFSOCK):
                if self._nextents(dip, False) == 0 and dsize <= self.lit and self.zero:
                    _fill(dip, core + 4, core + dsize)
                new_crc = True
            self.names = set()
            if go_on and asize > 0:
                self.remote_vals = set()
                afmt = dip[83]
                if afmt == C.XFS_DINODE_FMT_LOCAL:
                    new_crc = True
                    if self.obfuscate or self.zero:
                        self.sf_attr(dip, core + dsize, asize)
                elif afmt in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE):
                    self.fork_blocks(dip, True, "attr")
                self.names = set()
        if ok and new_crc:
            self._set_crc_inode(dip)

    def fork_data(self, dip: bytearray, itype: str) -> bool:
        fmt = dip[5]
        core = _core(dip)
        dsize, _a = self._forks(dip)
        if fmt == C.XFS_DINODE_FMT_LOCAL:
            if not (self.obfuscate or self.zero) or dsize > self.lit:
                return True
            if itype == "dir":
                self.sf_dir(dip, core, dsize)
            elif itype == "symlink":
                size = min(_U64.unpack_from(dip, 56)[0], dsize)
                area = dip[core:core + dsize]
                if self.obfuscate:
                    self.path_components(area, size)
                if self.zero:
                    _fill(area, size, len(area))
                dip[core:core + dsize] = area
            return True
        if fmt in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE):
            return self.fork_blocks(dip, False, itype)
        return True

    def fork_blocks(self, dip: bytearray, attr: bool, itype: str) -> bool:
        core = _core(dip)
        dsize, asize = self._forks(dip)
        start, size = (core + dsize, asize) if attr else (core, dsize)
        fmt = dip[83] if attr else dip[5]
        if fmt == C.XFS_DINODE_FMT_EXTENTS:
            nu = self._extents_used(dip, attr)
            if nu is None or nu[1] > size:
                return True
            nex, used = nu
            if self.zero and used < size:
                _fill(dip, start + used, start + size)
            self.extents(dip, start, nex, itype)
            return True
        # a btree root in the inode
        level, nrecs = _U16.unpack_from(dip, start)[0], _U16.unpack_from(dip, start + 2)[0]
        if level > self.bm_maxlevels[attr]:
            return True
        if level == 0:
            self.extents(dip, start + 4, nrecs, itype)
            return True
        maxrecs = (size - 4) // 16
        if nrecs > maxrecs:
            return True
        pstart = start + 4 + maxrecs * 8
        if self.zero:
            top = start + 4 + nrecs * 8
            _fill(dip, top, pstart)
            top = pstart + nrecs * 8
            _fill(dip, top, start + size)
        for i in range(nrecs):
            ag, bno = self.fsb_split(_U64.unpack_from(dip, pstart + 8 * i)[0])
            if bno == 0 or bno > self.sb.agblocks or ag > self.sb.agcount:
                continue
            self._btree_block(ag, bno, level, "bmbt", itype)
        return True

    def extents(self, buf, off: int, n: int, itype: str) -> None:
        """The blocks an extent list maps (nothing for a regular file's)."""
        if itype == "data" or n <= 0:
            return
        recs = []
        for i in range(n):
            hi, lo = struct.unpack_from(">QQ", buf, off + 16 * i)
            recs.append(((hi >> 9) & ((1 << 54) - 1),
                         ((hi & 0x1FF) << 43) | (lo >> 21), lo & 0x1FFFFF))
        last = recs[-1][0] + recs[-1][2]
        prev_end = None
        for o, s, c in recs:
            if prev_end is not None and prev_end > o:
                break
            if c > self.max_extent:
                break
            prev_end = o + c
            ag, bno = self.fsb_split(s)
            if not self.valid_bno(ag, bno) or not self.valid_bno(ag, bno + c - 1):
                break
            if itype == "symlink":
                self.symlink_block(s, c)
            elif itype == "dir" and self.dirfsbs > 1:
                self.multi_dir(o, s, c, last)
            else:
                for i in range(c):
                    self.single_block(itype, o + i, s + i, last)

    def _fsb_daddr(self, fsb: int) -> int:
        ag, bno = self.fsb_split(fsb)
        return self.agb_daddr(ag, bno)

    # -- directory, attribute and symlink blocks ---------------------------------------
    def single_block(self, itype: str, o: int, s: int, last: int) -> None:
        self._guarded(f"{itype} block at fsb {s}", self.single_block_walk, itype, o, s, last)

    def single_block_walk(self, itype: str, o: int, s: int, last: int) -> None:
        daddr = self._fsb_daddr(s)
        buf = self.read(daddr, self.bbs)
        if itype in ("dir", "attr") and (self.obfuscate or self.zero):
            original = bytes(buf)
            try:
                self._da_block(buf, itype, o, last)
            except (IndexError, struct.error, ValueError, OverflowError) as e:
                buf[:] = original
                self.warnings.append(f"{itype} block at fsb {s}: copied as it is "
                                     f"({type(e).__name__}: {e})")
        self.emit(daddr, buf)

    def _da_block(self, buf: bytearray, itype: str, o: int, last: int) -> None:
        """A directory or attribute block of one fsb, changed in place."""
        magic = _U16.unpack_from(buf, 8)[0]
        crc_off = self._da_crc_off(buf, o, itype)
        ok = crc_off is not None and _crc_ok(buf, crc_off)
        if self.zero and magic == C.XFS_DA3_NODE_MAGIC:
            used = C.XFS_DA3_NODE_HDR_SIZE + _U16.unpack_from(buf, 56)[0] * 8
            if used < self.bs:
                _fill(buf, used, len(buf))
        if itype == "dir":
            self.dir_block(buf, o, self._block_form(last))
        else:
            self.attr_block(buf, o)
        if ok:
            _set_crc(buf, crc_off)

    def _block_form(self, last: int) -> bool:
        """Whether a directory whose mapped blocks end at ``last`` is in block form."""
        return dirform.form_of(last, self.dirfsbs, self.sb.blocklog) == dirform.BLOCK

    def multi_dir(self, o: int, s: int, c: int, last: int) -> None:
        self._guarded(f"directory block at fsb {s}", self.multi_dir_walk, o, s, c, last)

    def multi_dir_walk(self, o: int, s: int, c: int, last: int) -> None:
        """Directory blocks of several fsbs, each read as one buffer (its
        pieces may lie apart: each is written at its own address)."""
        pos = 0
        while pos < c:
            # a directory block starts at an offset aligned to its size
            first = o + pos
            n = self.dirfsbs - (first % self.dirfsbs)
            n = min(n, c - pos)
            if first % self.dirfsbs == 0 and n == self.dirfsbs:
                daddr = self._fsb_daddr(s + pos)
                buf = self.read(daddr, self.bbs * n)
                if self.obfuscate or self.zero:
                    crc_off = self._da_crc_off(buf, first, "dir")
                    ok = crc_off is not None and _crc_ok(buf, crc_off)
                    self.dir_block(buf, first, self._block_form(last))
                    if ok:
                        _set_crc(buf, crc_off)
                self.emit(daddr, buf)
            else:
                # a directory block split across extents: copy the piece
                daddr = self._fsb_daddr(s + pos)
                self.emit(daddr, self.read(daddr, self.bbs * n))
            pos += n

    def _da_crc_off(self, buf, o: int, itype: str):
        magic32 = _U32.unpack_from(buf, 0)[0]
        if magic32 in (C.XFS_DIR3_BLOCK_MAGIC, C.XFS_DIR3_DATA_MAGIC, C.XFS_DIR3_FREE_MAGIC):
            return C.XFS_DIR3_BLK_HDR_CRC_OFF
        if magic32 == C.XFS_ATTR3_RMT_MAGIC:
            return 12
        magic16 = _U16.unpack_from(buf, 8)[0]
        if magic16 in (C.XFS_DIR3_LEAF1_MAGIC, C.XFS_DIR3_LEAFN_MAGIC, C.XFS_DA3_NODE_MAGIC,
                       C.XFS_ATTR3_LEAF_MAGIC):
            return C.XFS_DA3_BLKINFO_CRC_OFF
        return None

    def dir_block(self, buf: bytearray, o: int, is_block: bool) -> None:
        if o >= self.freeblk:
            if self.zero and dirdata.data_magic(buf) == C.XFS_DIR3_FREE_MAGIC:
                high = dirfree.FREE_HDR + 2 * dirfree.free_hdr(buf)[1]     # nvalid
                if high < self.dirbs:
                    _fill(buf, high, self.dirbs)
        elif o >= self.leafblk:
            if not self.zero:
                return
            magic = dabtree.magic(buf)
            free = dirleaf.LEAF_HDR + dirleaf.LEAF_ENT * dirleaf.leaf_count(buf)
            if magic == C.XFS_DIR3_LEAF1_MAGIC:
                lbp = dirleaf.leaf_bests_start(buf, dirleaf.bestcount(buf))
                if free < lbp:
                    _fill(buf, free, lbp)
            elif magic == C.XFS_DIR3_LEAFN_MAGIC and free < self.dirbs:
                _fill(buf, free, self.dirbs)
        else:
            self.dir_data(buf, is_block)

    def dir_data(self, buf: bytearray, is_block: bool) -> None:
        entries = parsers.metadump_dir_data(buf, is_block, self.dirbs, self.ftype, self.zero,
                                            self.obfuscate)
        for pos, ino, namelen in entries:
            # the walk checked each entry lies inside the block; the new
            # name has the old one's length
            buf[pos + 9:pos + 9 + namelen] = self.dirent_name(
                ino, bytes(buf[pos + 9:pos + 9 + namelen]))

    def sf_dir(self, dip: bytearray, start: int, dsize: int) -> None:
        size = min(_U64.unpack_from(dip, 56)[0], dsize)
        area = dip[start:start + dsize]
        count, _i8count, inosz = dirsf.sf_header(area)
        pos = dirsf.SF_HDR + inosz
        ft = 1 if self.ftype else 0
        for i in range(count):
            if pos >= size:
                break
            namelen = area[pos]
            entsize = dirsf.sf_entsize(namelen, ft, inosz)
            if namelen == 0 or pos + entsize > size:
                if i != count - 1:
                    break
                # xfs_metadump's guess for a last entry that runs over
                namelen = size - (pos + dirsf.SF_ENTRY)
                entsize = dirsf.sf_entsize(namelen, ft, inosz)
            if self.obfuscate and namelen > 0:
                name_at = pos + dirsf.SF_ENTRY
                ino_at = name_at + namelen + ft
                raw = bytes(area[ino_at:ino_at + inosz]).ljust(inosz, b"\0")
                ino = int.from_bytes(raw, "big")
                name = bytes(area[name_at:name_at + namelen])
                _put(area, name_at, self.dirent_name(ino, name))
            pos += entsize
        if self.zero and size < dsize:
            # from the end of the entries read, as many bytes as the fork
            # has past the directory's size
            _fill(area, pos, pos + dsize - size)
        dip[start:start + dsize] = area[:dsize]

    def dirent_name(self, ino: int, name: bytes) -> bytes:
        """The obfuscated name of a directory entry (kept: lost+found and
        the orphans in it named by their inode number)."""
        orphanage = self.orphanage
        if ino and (not orphanage or ino == orphanage or self.cur_ino == orphanage) and \
                self._in_lost_found(ino, name):
            return name
        if self.parent:
            key = (self.cur_ino, name)
            if key in self.remap:
                return self.remap[key]
        new = self._unique(obfuscate_name(name, self.rng, self.ci), self.ci)
        if self.parent:
            self.remap[(self.cur_ino, name)] = new
        return new

    def _unique(self, name: bytes, ci: bool = False) -> bytes:
        """``name``, or when the inode has it already, the first alternate
        with its hash it does not have (with ``ci``, the folded hash: an
        alternate whose flipped bits make a capital is passed over)."""
        if len(name) >= 5 and name in self.names:
            seq = 1
            want = parsers.da_hashname_ci(name) if ci else 0
            while True:
                alt = alternate(name, seq)
                seq += 1
                if alt == -1:
                    break
                if alt is not None and alt not in self.names and \
                        (not ci or parsers.da_hashname_ci(alt) == want):
                    name = alt
                    break
        self.names.add(name)
        return name

    def _in_lost_found(self, ino: int, name: bytes) -> bool:
        if not self.orphanage and self.cur_ino == self.sb.rootino and name == ORPHANAGE:
            self.orphanage = ino
        if ino == self.orphanage:
            return True
        if self.cur_ino != self.orphanage:
            return False
        return name == str(ino).encode()

    def path_components(self, area: bytearray, length: int) -> None:
        """Obfuscate each component of a symlink target in place."""
        pos = 0
        end = length
        while pos < end:
            nul = area.find(b"\0", pos, end)
            stop = nul if nul >= 0 else end
            slash = area.find(b"/", pos, stop)
            if slash < 0:
                n = stop - pos
                if n:
                    _put(area, pos, obfuscate_name(bytes(area[pos:pos + n]), self.rng))
                break
            n = slash - pos
            if n:
                _put(area, pos, obfuscate_name(bytes(area[pos:pos + n]), self.rng))
            pos = slash + 1

    def symlink_block(self, s: int, c: int) -> None:
        self._guarded(f"symlink block at fsb {s}", self.symlink_block_walk, s, c)

    def symlink_block_walk(self, s: int, c: int) -> None:
        """A symlink extent: one buffer, one header, one CRC over it all."""
        daddr = self._fsb_daddr(s)
        buf = self.read(daddr, self.bbs * c)
        hdr = C.XFS_SYMLINK_HDR_SIZE
        ok = _U32.unpack_from(buf, 0)[0] == C.XFS_SYMLINK_MAGIC and _crc_ok(buf, 12)
        link = buf[hdr:]
        if self.obfuscate:
            nbytes = _U32.unpack_from(buf, 8)[0] if ok else 0
            self.path_components(link, max(min(nbytes, len(link)), self.bs - hdr))
        if self.zero:
            n = link.find(b"\0")
            linklen = n if n >= 0 else len(link)
            zlen = self.bs - linklen - hdr
            if 0 <= zlen < self.bs:
                _fill(link, linklen, linklen + zlen)
        buf[hdr:] = link
        if ok:
            _set_crc(buf, 12)
        self.emit(daddr, buf)

    def sf_attr(self, dip: bytearray, start: int, asize: int) -> None:
        area = dip[start:start + asize]
        count = area[2]
        if count == 0:
            return
        total = min(_U16.unpack_from(area, 0)[0], asize)
        pos = 4
        for _ in range(count):
            if pos >= total:
                break
            if pos + 3 > total:
                break
            namelen, valuelen, flags = area[pos], area[pos + 1], area[pos + 2]
            if namelen == 0 or pos + 3 + namelen + valuelen > total:
                break
            n0 = pos + 3
            self._local_attr(area, n0, namelen, valuelen, flags)
            pos += 3 + namelen + valuelen
        if self.zero and total < asize:
            _fill(area, pos, pos + asize - total)
        dip[start:start + asize] = area[:asize]

    def _local_attr(self, buf: bytearray, n0: int, namelen: int, valuelen: int,
                    flags: int) -> None:
        """A local attribute's name (at ``n0``) and value as the dump holds
        them: a parent pointer follows its directory entry's name; any other
        name is obfuscated and its value overwritten."""
        if flags & C.XFS_ATTR_PARENT:
            self.pptr(buf, n0, namelen, valuelen)
        elif self.obfuscate:
            _put(buf, n0, self._unique(obfuscate_name(bytes(buf[n0:n0 + namelen]), self.rng)))
            _fill(buf, n0 + namelen, n0 + namelen + valuelen, 0x76)

    def pptr(self, area: bytearray, n0: int, namelen: int, valuelen: int) -> None:
        """A parent pointer gets the name its directory entry got."""
        if not self.obfuscate or valuelen != 12:
            return
        parent = _U64.unpack_from(area, n0 + namelen)[0]
        name = bytes(area[n0:n0 + namelen])
        child = self.cur_ino
        self.cur_ino = parent
        keep = self._in_lost_found(child, name)
        self.cur_ino = child
        if keep:
            return
        key = (parent, name)
        if key not in self.remap:
            self.remap[key] = obfuscate_name(name, self.rng, self.ci)
        _put(area, n0, self.remap[key])

    def attr_block(self, buf: bytearray, o: int) -> None:
        bs = self.bs
        magic = _U16.unpack_from(buf, 8)[0]
        rmt_space = bs - C.XFS_ATTR3_RMT_HDR_SIZE
        if magic != C.XFS_ATTR3_LEAF_MAGIC:
            if self.obfuscate and o in self.remote_vals:
                _fill(buf, bs - rmt_space, bs, 0x76)
            return
        hsz = C.XFS_ATTR3_LEAF_HDR_SIZE
        n = _U16.unpack_from(buf, 56)[0]
        if n == 0 or n * 8 + hsz > rmt_space:
            return
        first = None
        for i in range(n):
            e = hsz + 8 * i
            nameidx = _U16.unpack_from(buf, e + 4)[0]
            flags = buf[e + 6]
            if first is None or nameidx < first:
                first = nameidx
            if nameidx > bs:
                break
            if flags & C.XFS_ATTR_LOCAL:
                if nameidx + 3 > bs:
                    break
                valuelen = _U16.unpack_from(buf, nameidx)[0]
                namelen = buf[nameidx + 2]
                if namelen == 0:
                    break
                n0 = nameidx + 3
                self._local_attr(buf, n0, namelen, valuelen, flags)
                if self.zero:
                    z0 = n0 + namelen + valuelen
                    z1 = nameidx + ((3 + namelen + valuelen + 3) & ~3)
                    _fill(buf, z0, z1)
            else:
                if nameidx + 9 > bs:
                    break
                valueblk, valuelen = struct.unpack_from(">II", buf, nameidx)
                namelen = buf[nameidx + 8]
                if namelen == 0 or valueblk == 0:
                    break
                n0 = nameidx + 9
                if flags & C.XFS_ATTR_PARENT or self.obfuscate:
                    if not flags & C.XFS_ATTR_PARENT:
                        _put(buf, n0, self._unique(
                            obfuscate_name(bytes(buf[n0:n0 + namelen]), self.rng)))
                    blk, left = valueblk, valuelen
                    while left > 0:
                        self.remote_vals.add(blk)
                        blk += 1
                        left -= rmt_space
                if self.zero:
                    z0 = n0 + namelen
                    z1 = nameidx + ((11 + namelen + 3) & ~3)
                    _fill(buf, z0, z1)
        if self.zero and first is not None:
            e = hsz + 8 * n
            if first > e:
                _fill(buf, e, first)

    # -- superblock inodes and the log ------------------------------------------------
    def copy_sb_inode(self, ino: int) -> None:
        self._guarded(f"inode {ino}", self.copy_sb_inode_walk, ino)

    def copy_sb_inode_walk(self, ino: int) -> None:
        sb = self.sb
        if ino in (0, C.NULLFSINO):
            return
        agno = ino >> sb.agino_log
        agino = ino & ((1 << sb.agino_log) - 1)
        agbno = agino >> sb.inopblog
        off = agino & ((1 << sb.inopblog) - 1)
        if agno >= sb.agcount or agbno >= sb.agblocks:
            return
        blk = self.read(self.agb_daddr(agno, agbno), self.bbs)
        dip = blk[off * self.isize:(off + 1) * self.isize]
        self.cur_ino = ino
        if dip[5] in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE):
            self.fork_blocks(dip, False, "meta")

    def dump_log(self) -> None:
        fs = self.fs
        g = LogGeometry(fs)
        start = g.start_daddr
        data = None
        if self.obfuscate or self.zero:
            try:
                _ld, st = find_state(fs)
                clean = not st.dirty
                cycle = st.curr_cycle + 1
            except FsToolError:
                clean = False
            if clean:
                data = xfsprogs_cleared_log(g.bbsize, g.uuid, self.sb.fields["sb_logsunit"],
                                            cycle)
        if data is None:
            data = fs.log_dev.pread(start * BB, g.bbsize * BB)
        # an external log's extent says so (v2: the dump's log device)
        self.emit(start, data, fs.external_log)


def log_is_dirty(fs) -> bool:
    if not fs.logdev_given:
        return False
    try:
        _ld, st = find_state(fs)
    except FsToolError:
        return True
    return st.dirty


def metadump(image, out_path, *, version: int | None = None, obfuscate: bool = True,
             full_blocks: bool = False, log: bool = True, max_extent: int = MAX_EXTLEN,
             seed=None, logdev=None) -> dict:
    """Write the metadata of ``image`` to ``out_path`` in xfs_metadump's
    format ``version`` (1 or 2; by default 1, or 2 for a filesystem whose
    external log was given: only v2 holds one, as xfs_metadump -l picks).
    The dump is written beside ``out_path`` and renamed onto it once
    complete."""
    if version not in (None, 1, 2):
        raise InvalidArgument(f"metadump version {version}: only 1 and 2 exist")
    out_path = os.fspath(out_path)
    refuse_same(image, out_path, "the dump would replace the image")
    fs = Filesystem(os.fspath(image), logdev=logdev)
    tmp = f"{out_path}.tmp{os.getpid()}"
    warnings = []
    try:
        if version is None:
            version = 2 if fs.external_log and fs.logdev_given else 1
        if fs.external_log and log:
            if version == 1:
                # v1 has no place for a second device (xfs_metadump skips it too)
                warnings.append("the log is external: a v1 dump cannot hold it (use -v 2)")
                log = False
            else:
                fs.require_log()
        # an external log left out is not looked at (xfs_metadump's v1 too)
        dirty = False if fs.external_log and not log else log_is_dirty(fs)
        if dirty and obfuscate and log:
            warnings.append("the log is dirty and is copied as it is: log recovery of "
                            "the dump can bring back names it does not obfuscate (mount "
                            "or replay the log first, or use -o)")
        with open(tmp, "wb") as f:
            if version == 1:
                info = M.XFS_METADUMP_INFO_FLAGS
                info |= M.XFS_METADUMP_OBFUSCATED if obfuscate else 0
                info |= M.XFS_METADUMP_FULLBLOCKS if full_blocks else 0
                info |= M.XFS_METADUMP_DIRTYLOG if dirty else 0
                out = _V1Out(f, info)
            else:
                compat = M.XFS_MD2_COMPAT_OBFUSCATED if obfuscate else 0
                compat |= M.XFS_MD2_COMPAT_FULLBLOCKS if full_blocks else 0
                compat |= M.XFS_MD2_COMPAT_DIRTYLOG if dirty else 0
                compat |= M.XFS_MD2_COMPAT_EXTERNALLOG if fs.external_log and log else 0
                out = _V2Out(f, compat)
            d = Dumper(fs, out, obfuscate=obfuscate, zero=not full_blocks, log=log,
                       max_extent=max_extent, seed=seed)
            d.run()
        warnings += d.warnings
        os.replace(tmp, out_path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    finally:
        fs.close()
    return {"version": version, "obfuscated": obfuscate, "full_blocks": full_blocks,
            "dirty_log": dirty, "buffers": d.blocks, "bytes": os.path.getsize(out_path),
            "warnings": warnings}
