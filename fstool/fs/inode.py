"""Inodes: the v3 core, both forks, extent maps and file data."""
from __future__ import annotations

import bisect
import struct

from .._backend import parsers
from ..errors import CorruptionError
from ..format import constants as C
from ..format.structs import DINODE
from . import btree

_IDX = {name: i for i, name in enumerate(
    n for n, count in DINODE._arrays)}   # scalar fields only in DINODE
_CORE = DINODE.struct


def decode_timestamp(raw: int, bigtime: bool) -> int:
    """An on-disk timestamp as nanoseconds since the Unix epoch."""
    if bigtime:
        return raw - C.XFS_BIGTIME_EPOCH_OFFSET * C.NSEC_PER_SEC
    sec = raw >> 32
    if sec & 0x80000000:
        sec -= 1 << 32
    return sec * C.NSEC_PER_SEC + (raw & 0xFFFFFFFF)


class Extent(tuple):
    """(startoff, startblock, blockcount, unwritten) in filesystem blocks."""
    __slots__ = ()


class Inode:
    """One inode read from disk and verified.  Forks are decoded lazily."""

    __slots__ = ("fs", "ino", "raw", "mode", "format", "uid", "gid", "nlink", "size",
                 "nblocks", "nextents", "anextents", "forkoff", "aformat", "flags",
                 "flags2", "gen", "atime_ns", "mtime_ns", "ctime_ns", "crtime_ns",
                 "extsize", "cowextsize", "projid", "next_unlinked", "_extents",
                 "_starts", "_aextents", "_astarts")

    def __init__(self, fs, ino: int, raw: bytes):
        self.fs = fs
        self.ino = ino
        self.raw = raw
        v = _CORE.unpack_from(raw, 0)
        if v[_IDX["di_magic"]] != C.XFS_DINODE_MAGIC:
            raise CorruptionError("inode", f"bad magic 0x{v[_IDX['di_magic']]:04x}",
                                  ino=ino, field="di_magic")
        if v[_IDX["di_version"]] != 3:
            raise CorruptionError("inode", f"version {v[_IDX['di_version']]}, expected 3",
                                  ino=ino, field="di_version")
        stored = int.from_bytes(raw[C.XFS_DINODE_CRC_OFF:C.XFS_DINODE_CRC_OFF + 4], "little")
        if parsers.xfs_cksum(raw, C.XFS_DINODE_CRC_OFF) != stored:
            raise CorruptionError("inode", "CRC mismatch", ino=ino, field="di_crc")
        if v[_IDX["di_ino"]] != ino:
            raise CorruptionError("inode", f"records number {v[_IDX['di_ino']]}",
                                  ino=ino, field="di_ino")
        if v[_IDX["di_uuid"]] != fs.sb.meta_uuid:
            raise CorruptionError("inode", "uuid does not match the filesystem",
                                  ino=ino, field="di_uuid")
        self.mode = v[_IDX["di_mode"]]
        self.format = v[_IDX["di_format"]]
        self.uid = v[_IDX["di_uid"]]
        self.gid = v[_IDX["di_gid"]]
        self.nlink = v[_IDX["di_nlink"]]
        self.size = v[_IDX["di_size"]]
        self.nblocks = v[_IDX["di_nblocks"]]
        self.forkoff = v[_IDX["di_forkoff"]]
        self.aformat = v[_IDX["di_aformat"]]
        self.flags = v[_IDX["di_flags"]]
        self.flags2 = f2 = v[_IDX["di_flags2"]]
        self.gen = v[_IDX["di_gen"]]
        self.extsize = v[_IDX["di_extsize"]]
        self.cowextsize = v[_IDX["di_cowextsize"]]
        self.projid = (v[_IDX["di_projid_hi"]] << 16) | v[_IDX["di_projid_lo"]]
        self.next_unlinked = v[_IDX["di_next_unlinked"]]
        if f2 & C.XFS_DIFLAG2_NREXT64:
            self.nextents = v[_IDX["di_big_nextents"]]
            self.anextents = v[_IDX["di_nextents"]]
        else:
            self.nextents = v[_IDX["di_nextents"]]
            self.anextents = v[_IDX["di_anextents"]]
        big = bool(f2 & C.XFS_DIFLAG2_BIGTIME)
        self.atime_ns = decode_timestamp(v[_IDX["di_atime"]], big)
        self.mtime_ns = decode_timestamp(v[_IDX["di_mtime"]], big)
        self.ctime_ns = decode_timestamp(v[_IDX["di_ctime"]], big)
        self.crtime_ns = decode_timestamp(v[_IDX["di_crtime"]], big)
        if self.forkoff and C.XFS_DINODE_CORE_SIZE + self.forkoff * 8 >= len(raw):
            raise CorruptionError("inode", f"attr fork offset {self.forkoff} beyond the inode",
                                  ino=ino, field="di_forkoff")
        self._extents = None
        self._aextents = None

    # -- identity -----------------------------------------------------------
    @property
    def ifmt(self) -> int:
        return self.mode & C.S_IFMT

    @property
    def type_name(self) -> str:
        return C.TYPE_NAMES.get(self.ifmt, "unknown")

    @property
    def is_dir(self) -> bool:
        return self.ifmt == C.S_IFDIR

    @property
    def is_reg(self) -> bool:
        return self.ifmt == C.S_IFREG

    @property
    def is_symlink(self) -> bool:
        return self.ifmt == C.S_IFLNK

    @property
    def perm(self) -> int:
        return self.mode & 0o7777

    @property
    def rdev(self) -> tuple[int, int] | None:
        if self.ifmt not in (C.S_IFCHR, C.S_IFBLK):
            return None
        if self.format != C.XFS_DINODE_FMT_DEV:
            raise CorruptionError("inode", "device inode without a device fork",
                                  ino=self.ino, field="di_format")
        (dev,) = struct.unpack_from(">I", self.raw, C.XFS_DINODE_CORE_SIZE)
        return dev >> C.XFS_DEV_BITSMINOR, dev & C.XFS_DEV_MINORMASK

    # -- forks --------------------------------------------------------------
    def fork_bounds(self, attr: bool) -> tuple[int, int]:
        """(offset, size) of a fork inside the raw inode."""
        lit = len(self.raw) - C.XFS_DINODE_CORE_SIZE
        if attr:
            if not self.forkoff:
                return C.XFS_DINODE_CORE_SIZE, 0
            off = self.forkoff * 8
            return C.XFS_DINODE_CORE_SIZE + off, lit - off
        return C.XFS_DINODE_CORE_SIZE, (self.forkoff * 8 if self.forkoff else lit)

    def fork_bytes(self, attr: bool = False) -> bytes:
        off, size = self.fork_bounds(attr)
        return self.raw[off:off + size]

    def _load_map(self, attr: bool) -> list:
        fmt = self.aformat if attr else self.format
        nrecs = self.anextents if attr else self.nextents
        off, size = self.fork_bounds(attr)
        which = "attr" if attr else "data"
        if fmt == C.XFS_DINODE_FMT_EXTENTS:
            if nrecs * 16 > size:
                raise CorruptionError("inode", f"{nrecs} extents do not fit the {which} fork",
                                      ino=self.ino, field="di_nextents")
            exts = parsers.decode_bmbt_recs(self.raw, off, nrecs)
        elif fmt == C.XFS_DINODE_FMT_BTREE:
            exts = self._load_bmbt(off, size, which)
            if len(exts) != nrecs:
                raise CorruptionError("inode", f"{which} fork btree holds {len(exts)} extents, "
                                      f"the inode says {nrecs}", ino=self.ino,
                                      field="di_nextents")
        elif fmt in (C.XFS_DINODE_FMT_LOCAL, C.XFS_DINODE_FMT_DEV) or (attr and not self.forkoff):
            exts = []
        else:
            raise CorruptionError("inode", f"{which} fork format {fmt} is not valid",
                                  ino=self.ino, field="di_aformat" if attr else "di_format")
        prev_end = -1
        for e in exts:
            if e[0] < prev_end or e[2] == 0:
                raise CorruptionError("inode", f"{which} fork extent map unsorted, overlapping "
                                      "or empty", ino=self.ino, field="extents")
            prev_end = e[0] + e[2]
            self.fs.check_fsb_range(e[1], e[2], ino=self.ino)
        return exts

    def bmbt_root(self, attr: bool = False) -> tuple[int, list, list]:
        """(level, keys, ptrs) of the bmbt root kept in a btree-format fork."""
        off, size = self.fork_bounds(attr)
        level, numrecs = struct.unpack_from(">HH", self.raw, off)
        maxrecs = (size - 4) // 16
        if level == 0 or numrecs == 0 or numrecs > maxrecs:
            raise CorruptionError("inode", f"bmbt root with level {level}, {numrecs} records",
                                  ino=self.ino, field="bb_numrecs")
        keys = [k for (k,) in struct.iter_unpack(">Q", self.raw[off + 4:off + 4 + 8 * numrecs])]
        poff = off + 4 + 8 * maxrecs
        ptrs = [p for (p,) in struct.iter_unpack(">Q", self.raw[poff:poff + 8 * numrecs])]
        return level, keys, ptrs

    def _load_bmbt(self, off: int, size: int, which: str) -> list:
        level, _keys, ptrs = self.bmbt_root(which == "attr")
        reader = self.fs.bmbt_reader(self.ino)
        return list(reader.records(ptrs, level))

    def extents(self, attr: bool = False) -> list:
        """The fork's extent list: (startoff, startblock, blockcount, unwritten)."""
        if attr:
            if self._aextents is None:
                self._aextents = self._load_map(True)
                self._astarts = [e[0] for e in self._aextents]
            return self._aextents
        if self._extents is None:
            self._extents = self._load_map(False)
            self._starts = [e[0] for e in self._extents]
        return self._extents

    def map_block(self, fileblock: int, attr: bool = False):
        """The extent holding ``fileblock`` or None for a hole."""
        exts = self.extents(attr)
        starts = self._astarts if attr else self._starts
        i = bisect.bisect_right(starts, fileblock) - 1
        if i >= 0:
            e = exts[i]
            if fileblock < e[0] + e[2]:
                return e
        return None

    def read_fork_blocks(self, fileblock: int, count: int, attr: bool = False):
        """The fs blocks [fileblock, fileblock+count) of a fork as one buffer and
        the daddr of its first block; every block must be mapped."""
        pieces = []
        first_daddr = None
        b = fileblock
        end = fileblock + count
        bs = self.fs.sb.blocksize
        while b < end:
            e = self.map_block(b, attr)
            if e is None:
                raise CorruptionError("inode", f"{'attr' if attr else 'data'} fork block {b} "
                                      "is a hole where metadata is expected", ino=self.ino,
                                      field="extents")
            n = min(end, e[0] + e[2]) - b
            fsb = e[1] + (b - e[0])
            daddr = self.fs.fsb_to_daddr(fsb)
            if first_daddr is None:
                first_daddr = daddr
            pieces.append((daddr, n * bs))
            b += n
        return first_daddr, pieces

    # -- data ---------------------------------------------------------------
    def read(self, offset: int = 0, size: int = -1) -> bytes:
        """File data in [offset, offset+size) clipped to EOF; holes and
        unwritten extents read as zeros."""
        if size < 0 or offset + size > self.size:
            size = max(0, self.size - offset)
        if size <= 0:
            return b""
        if self.format == C.XFS_DINODE_FMT_LOCAL:
            data = self.fork_bytes()[:self.size]
            return data[offset:offset + size]
        out = bytearray(size)
        bs = self.fs.sb.blocksize
        blog = self.fs.sb.blocklog
        end = offset + size
        exts = self.extents()
        i = max(0, bisect.bisect_right(self._starts, offset >> blog) - 1)
        dev = self.fs.dev
        while i < len(exts):
            startoff, startblock, count, unwritten = exts[i]
            i += 1
            e_start = startoff << blog
            if e_start >= end:
                break
            e_end = e_start + count * bs
            lo = max(offset, e_start)
            hi = min(end, e_end)
            if lo >= hi or unwritten:
                continue
            daddr = self.fs.fsb_to_daddr(startblock)
            out[lo - offset:hi - offset] = dev.pread((daddr << C.BBSHIFT) + lo - e_start, hi - lo)
        return bytes(out)
