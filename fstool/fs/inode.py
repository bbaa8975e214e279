"""Inodes: the v3 core, both forks, extent maps and file data."""
from __future__ import annotations

import bisect
import operator
import os
import struct

from .._backend import parsers
from ..errors import CorruptionError, InvalidArgument
from ..format import constants as C
from ..format.structs import DINODE

_CORE = DINODE.struct
# positions of the core fields in the unpacked tuple (DINODE has no arrays)
_I = DINODE.indexes()
I_MAGIC, I_MODE, I_VERSION, I_FORMAT = _I["di_magic"], _I["di_mode"], _I["di_version"], _I["di_format"]
I_UID, I_GID, I_NLINK = _I["di_uid"], _I["di_gid"], _I["di_nlink"]
I_PROJLO, I_PROJHI, I_BIGNEXT = _I["di_projid_lo"], _I["di_projid_hi"], _I["di_big_nextents"]
I_ATIME, I_MTIME, I_CTIME, I_CRTIME = _I["di_atime"], _I["di_mtime"], _I["di_ctime"], _I["di_crtime"]
I_SIZE, I_NBLOCKS, I_EXTSIZE = _I["di_size"], _I["di_nblocks"], _I["di_extsize"]
I_NEXTENTS, I_ANEXTENTS, I_FORKOFF, I_AFORMAT = (_I["di_nextents"], _I["di_anextents"],
                                                 _I["di_forkoff"], _I["di_aformat"])
I_FLAGS, I_GEN, I_NEXT_UNLINKED = _I["di_flags"], _I["di_gen"], _I["di_next_unlinked"]
I_FLAGS2, I_COWEXTSIZE, I_INO, I_UUID = (_I["di_flags2"], _I["di_cowextsize"], _I["di_ino"],
                                         _I["di_uuid"])


_STARTOFF = operator.itemgetter(0)
_NEXT64 = DINODE.field("di_big_nextents")
_NEXT32 = DINODE.field("di_nextents")
_ANEXT16 = DINODE.field("di_anextents")
_NBLOCKS = DINODE.field("di_nblocks")
_GEN = DINODE.field("di_gen")


_inode_stat = parsers.inode_stat
_single_extent_read = parsers.single_extent_read


def raw_stat(fs, ino: int, raw) -> tuple:
    """(os.stat_result, generation) of encoded inode ``raw`` of filesystem
    ``fs``, what ``fs.inode(ino)``'s ``stat()`` and ``gen`` give once it is
    written, without decoding it (not for devices, whose ``st_rdev`` this
    leaves 0)."""
    return _inode_stat(raw, ino, fs._stat_ctx), _GEN.get(raw)


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


class Inode(parsers.InodeCore):
    """One inode read from disk and verified.  Forks are decoded lazily.

    The core fields every caller reads (``ino``, ``mode``, ``format``,
    ``size``, ``nlink``, ``uid``, ``gid``, ``forkoff``, ``aformat``,
    ``flags2``, ``raw``) live in ``parsers.InodeCore``, which
    ``Filesystem`` fills natively a batch at a time (``load_inodes``)."""

    __slots__ = ()

    def __init__(self, fs, ino: int, raw: bytes):
        self.fs = fs
        self.ino = ino
        self.raw = raw
        try:
            (self.mode, self.format, self.size, self.nlink, self.uid, self.gid,
             self.forkoff, self.aformat, self.flags2) = parsers.dinode_core(raw, ino, fs.uuid)
        except ValueError as e:
            field, _, detail = str(e).partition("|")
            raise CorruptionError("inode", detail, ino=ino, field=field) from None
        if self.forkoff and C.XFS_DINODE_CORE_SIZE + self.forkoff * 8 >= len(raw):
            raise CorruptionError("inode", f"attr fork offset {self.forkoff} beyond the inode",
                                  ino=ino, field="di_forkoff")
        self._core = None
        self._extents = None
        self._aextents = None

    @property
    def core(self) -> tuple:
        """Every core field, in DINODE order (decoded on first use)."""
        if self._core is None:
            self._core = _CORE.unpack_from(self.raw, 0)
        return self._core

    # -- core fields used less often ------------------------------------------
    @property
    def nextents(self) -> int:
        if self.flags2 & C.XFS_DIFLAG2_NREXT64:
            return _NEXT64.get(self.raw)
        return _NEXT32.get(self.raw)

    @property
    def anextents(self) -> int:
        if self.flags2 & C.XFS_DIFLAG2_NREXT64:
            return _NEXT32.get(self.raw)
        return _ANEXT16.get(self.raw)

    def _time(self, idx: int) -> int:
        return decode_timestamp(self.core[idx], bool(self.flags2 & C.XFS_DIFLAG2_BIGTIME))

    atime_ns = property(lambda self: self._time(I_ATIME))
    mtime_ns = property(lambda self: self._time(I_MTIME))
    ctime_ns = property(lambda self: self._time(I_CTIME))
    crtime_ns = property(lambda self: self._time(I_CRTIME))
    nblocks = property(lambda self: _NBLOCKS.get(self.raw))
    flags = property(lambda self: self.core[I_FLAGS])
    gen = property(lambda self: self.core[I_GEN])
    extsize = property(lambda self: self.core[I_EXTSIZE])
    cowextsize = property(lambda self: self.core[I_COWEXTSIZE])
    next_unlinked = property(lambda self: self.core[I_NEXT_UNLINKED])
    projid = property(lambda self: (self.core[I_PROJHI] << 16) | self.core[I_PROJLO])

    def stat(self) -> os.stat_result:
        """The inode as ``os.stat_result``, with the values the kernel's stat
        gives for it: times to the nanosecond, ``st_blocks`` in 512-byte
        units (every block the inode owns, metadata included), ``st_rdev``
        for devices, ``st_dev`` a number derived from the filesystem uuid."""
        ifmt = self.mode & 0o170000
        if ifmt == 0o020000 or ifmt == 0o060000:          # character or block device
            return _inode_stat(self.raw, self.ino, self.fs._stat_ctx, os.makedev(*self.rdev))
        return _inode_stat(self.raw, self.ino, self.fs._stat_ctx)

    # -- identity -----------------------------------------------------------
    @property
    def ifmt(self) -> int:
        return self.mode & C.S_IFMT

    @property
    def type_name(self) -> str:
        return C.TYPE_NAMES.get(self.mode & C.S_IFMT, "unknown")

    @property
    def is_dir(self) -> bool:
        return self.mode & C.S_IFMT == C.S_IFDIR

    @property
    def is_reg(self) -> bool:
        return self.mode & C.S_IFMT == C.S_IFREG

    @property
    def is_symlink(self) -> bool:
        return self.mode & C.S_IFMT == C.S_IFLNK

    @property
    def perm(self) -> int:
        return self.mode & 0o7777

    @property
    def rdev(self) -> tuple[int, int] | None:
        ifmt = self.mode & C.S_IFMT
        if ifmt != C.S_IFCHR and ifmt != C.S_IFBLK:
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
        which = "attr" if attr else "data"
        if fmt == C.XFS_DINODE_FMT_EXTENTS:
            try:
                return parsers.inline_extents(self.raw, attr, *self.fs._extent_bounds)
            except ValueError as e:
                field, _, detail = str(e).partition("|")
                raise CorruptionError("extent map" if field == "extents" else "inode", detail,
                                      ino=self.ino, field=field) from None
        if fmt == C.XFS_DINODE_FMT_BTREE:
            nrecs = self.anextents if attr else self.nextents
            off, size = self.fork_bounds(attr)
            exts = self._load_bmbt(off, size, which)
            if len(exts) != nrecs:
                raise CorruptionError("inode", f"{which} fork btree holds {len(exts)} extents, "
                                      f"the inode says {nrecs}", ino=self.ino,
                                      field="di_nextents")
            if exts:
                bad = parsers.check_extents(exts, *self.fs._extent_bounds)
                if bad is not None:
                    raise CorruptionError("extent map", f"{which} fork extent {bad[0]}: "
                                          f"{bad[1]}", ino=self.ino, field="extents")
            return exts
        if fmt in (C.XFS_DINODE_FMT_LOCAL, C.XFS_DINODE_FMT_DEV) or (attr and not self.forkoff):
            return []
        raise CorruptionError("inode", f"{which} fork format {fmt} is not valid",
                              ino=self.ino, field="di_aformat" if attr else "di_format")

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
            return self._aextents
        if self._extents is None:
            self._extents = self._load_map(False)
        return self._extents

    @property
    def extents_loaded(self) -> bool:
        """Whether the data fork's extent list is decoded already (a btree
        fork's is read whole by :meth:`extents`)."""
        return self._extents is not None

    def map_block(self, fileblock: int, attr: bool = False):
        """The extent holding ``fileblock`` or None for a hole."""
        exts = self.extents(attr)
        i = bisect.bisect_right(exts, fileblock, key=_STARTOFF) - 1
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
        """File data in [offset, offset+size) clipped to EOF (all of it by
        default); holes and unwritten extents read as zeros."""
        fsize = self.size
        if size < 0 or offset + size > fsize:
            size = fsize - offset
        if size <= 0 or offset < 0:
            if offset < 0:
                raise InvalidArgument(f"inode {self.ino}: negative offset {offset}")
            return b""
        fmt = self.format
        if fmt == C.XFS_DINODE_FMT_EXTENTS:
            # the common small file: one written extent from offset 0, planned
            # and read in one native call
            data = _single_extent_read(self.raw, offset, size, self.fs._read_ctx)
            if data is not None:
                return data
        elif fmt == C.XFS_DINODE_FMT_LOCAL:
            return self.fork_bytes()[offset:offset + size]
        out = bytearray(size)
        self._read_into(offset, memoryview(out))
        return bytes(out)

    def readinto(self, offset: int, buf) -> int:
        """Read file data at ``offset`` into the writable buffer ``buf`` (clipped
        to EOF); returns the number of bytes read."""
        view = memoryview(buf).cast("B")
        if offset < 0:
            raise InvalidArgument(f"inode {self.ino}: negative offset {offset}")
        size = min(len(view), self.size - offset)
        if size <= 0:
            return 0
        if self.format == C.XFS_DINODE_FMT_LOCAL:
            view[:size] = self.fork_bytes()[offset:offset + size]
        else:
            self._read_into(offset, view[:size])
        return size

    def _read_into(self, offset: int, view) -> None:
        """Fill ``view`` with the data at ``offset`` (inside EOF) of an
        extents- or btree-format file: zeros where no written extent maps."""
        fs = self.fs
        exts = self.extents()
        blog = fs._blocklog
        size = len(view)
        end = offset + size
        i = max(0, bisect.bisect_right(exts, offset >> blog, key=_STARTOFF) - 1)
        readv = fs.dev.preadinto
        pos = offset          # bytes of view below pos are filled
        n = len(exts)
        while i < n and pos < end:
            startoff, startblock, count, unwritten = exts[i]
            i += 1
            e_start = startoff << blog
            if e_start >= end:
                break
            lo = max(pos, e_start)
            hi = min(end, e_start + (count << blog))
            if lo >= hi:
                continue
            if lo > pos:
                view[pos - offset:lo - offset] = bytes(lo - pos)
            if unwritten:
                view[lo - offset:hi - offset] = bytes(hi - lo)
            else:
                readv(view[lo - offset:hi - offset], fs._fsb_offset(startblock) + lo - e_start)
            pos = hi
        if pos < end:
            view[pos - offset:] = bytes(end - pos)
