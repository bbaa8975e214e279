"""Fast encoding of v3 inodes for the write path.

The generic :data:`fstool.format.structs.DINODE` layout is the one source of
field order; this module precompiles it once and packs a whole inode (core,
data fork, attr fork) with a single ``struct.pack_into`` plus a CRC, because
populate writes one inode per file.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from .._backend import parsers
from ..format import constants as C
from ..format.structs import DINODE

_CORE = DINODE.struct
assert _CORE.size == C.XFS_DINODE_CORE_SIZE

_BIG_OFF = C.XFS_BIGTIME_EPOCH_OFFSET * C.NSEC_PER_SEC
_U64 = (1 << 64) - 1
_TIMES = struct.Struct(">QQQ")          # di_atime, di_mtime, di_ctime at offset 32
_CRT_INO = struct.Struct(">QQ")         # di_crtime, di_ino at offset 144
_CRC = struct.Struct("<I")
assert DINODE.offset("di_atime") == 32 and DINODE.offset("di_crtime") == 144 \
    and DINODE.offset("di_ino") == 152


def encode_ts(ns: int, bigtime: bool) -> int:
    """Nanoseconds since the epoch as an on-disk timestamp (clamped to the
    range the format holds)."""
    if bigtime:
        v = ns + C.XFS_BIGTIME_EPOCH_OFFSET * C.NSEC_PER_SEC
        return min(max(v, 0), (1 << 64) - 1)
    sec, nsec = divmod(ns, C.NSEC_PER_SEC)
    sec = min(max(sec, -(1 << 31)), (1 << 31) - 1)
    return ((sec & 0xFFFFFFFF) << 32) | nsec


def encode_dev(major: int, minor: int) -> bytes:
    """An xfs_dev_t: major in the high 14 bits, minor in the low 18."""
    if not 0 <= major < (1 << 14) or not 0 <= minor < (1 << C.XFS_DEV_BITSMINOR):
        raise ValueError(f"device {major}:{minor} does not fit an XFS device number")
    return struct.pack(">I", (major << C.XFS_DEV_BITSMINOR) | minor)


def count_fields(flags2: int) -> tuple[str, str]:
    """The core fields holding the data and attr fork extent counts of an
    inode with ``flags2`` (NREXT64 moves both)."""
    if flags2 & C.XFS_DIFLAG2_NREXT64:
        return "di_big_nextents", "di_nextents"
    return "di_nextents", "di_anextents"


class InodeEdit:
    """A written inode changed in place, field by field, and sealed once:
    the one way the writers patch an inode they read back (the directory
    writer's save, the namespace's attribute and link count changes).
    Fields are DINODE's names; times are given in nanoseconds and encoded
    as the inode's bigtime flag says; extent counts go where its NREXT64
    flag puts them."""
    __slots__ = ("buf", "flags2")

    def __init__(self, raw):
        self.buf = bytearray(raw)
        self.flags2 = DINODE.get(self.buf, "di_flags2")

    def get(self, name: str):
        return DINODE.get(self.buf, name)

    def set(self, name: str, value) -> None:
        DINODE.put(self.buf, name, value)

    def add(self, name: str, delta: int) -> None:
        if delta:
            DINODE.put(self.buf, name, DINODE.get(self.buf, name) + delta)

    def set_time(self, name: str, ns: int) -> None:
        DINODE.put(self.buf, name, encode_ts(ns, bool(self.flags2 & C.XFS_DIFLAG2_BIGTIME)))

    def set_data_fork(self, fmt: int, literal: bytes, space: int, nextents: int) -> None:
        """A new data fork: ``literal`` in a literal area of ``space`` bytes
        (the rest zeroed), its format and extent count."""
        c = C.XFS_DINODE_CORE_SIZE
        self.buf[c:c + space] = bytes(space)
        self.buf[c:c + len(literal)] = literal
        DINODE.put(self.buf, "di_format", fmt)
        DINODE.put(self.buf, count_fields(self.flags2)[0], nextents)

    def changed(self, n: int = 1) -> None:
        """``n`` changes more in the change count."""
        DINODE.put(self.buf, "di_changecount",
                   (DINODE.get(self.buf, "di_changecount") + n) & _U64)

    def sealed(self) -> bytes:
        return InodeEncoder.seal(self.buf)


@dataclass
class InodeSpec:
    """Everything that goes into one allocated inode."""
    mode: int                      # type and permission bits
    nlink: int = 1
    uid: int = 0
    gid: int = 0
    atime_ns: int = 0
    mtime_ns: int = 0
    ctime_ns: int = 0
    crtime_ns: int = 0
    size: int = 0
    nblocks: int = 0
    fmt: int = C.XFS_DINODE_FMT_EXTENTS
    nextents: int = 0
    data: bytes = b""              # data fork literal bytes
    aformat: int = C.XFS_DINODE_FMT_EXTENTS
    anextents: int = 0
    forkoff: int = 0               # in 8-byte units; 0 = no attr fork
    attr: bytes = b""              # attr fork literal bytes
    flags: int = 0
    gen: int = 0
    changecount: int = 1
    extra: dict = field(default_factory=dict)


class InodeEncoder:
    """Packs inodes for one filesystem (inode size, uuid, features)."""

    def __init__(self, inodesize: int, uuid: bytes, *, bigtime: bool, nrext64: bool):
        self.inodesize = inodesize
        self.uuid = uuid
        self.bigtime = bigtime
        self.nrext64 = nrext64
        self.flags2 = (C.XFS_DIFLAG2_BIGTIME if bigtime else 0) | \
            (C.XFS_DIFLAG2_NREXT64 if nrext64 else 0)
        self.literal = inodesize - C.XFS_DINODE_CORE_SIZE
        self._templates: dict = {}

    @staticmethod
    def seal(raw) -> bytes:
        """An inode whose fields were edited, with its CRC made current (so
        that readers in the same transaction can use it; the journal's write
        verifier stamps LSN and CRC again as it leaves)."""
        buf = bytearray(raw)
        struct.pack_into("<I", buf, C.XFS_DINODE_CRC_OFF,
                         parsers.xfs_cksum(buf, C.XFS_DINODE_CRC_OFF))
        return bytes(buf)

    def free(self, ino: int, gen: int = 0) -> bytes:
        """A free inode as the kernel initialises a new chunk."""
        buf = bytearray(self.inodesize)
        _CORE.pack_into(buf, 0, C.XFS_DINODE_MAGIC, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0,
                        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, gen, C.NULLAGINO, 0, 0, 0, 0,
                        0, b"", 0, ino, self.uuid)
        struct.pack_into("<I", buf, C.XFS_DINODE_CRC_OFF,
                         parsers.xfs_cksum(bytes(buf), C.XFS_DINODE_CRC_OFF))
        return bytes(buf)

    def simple(self, ino: int, mode: int, uid: int, gid: int, atime_ns: int, mtime_ns: int,
               ctime_ns: int, crtime_ns: int) -> bytes:
        """An inode with empty forks (an empty file, a fifo...), from a
        template per (mode, uid, gid): only times, number and CRC change."""
        key = (mode, uid, gid)
        tpl = self._templates.get(key)
        if tpl is None:
            if len(self._templates) > 256:
                self._templates.clear()
            tpl = self._templates[key] = bytearray(self.encode(0, InodeSpec(
                mode=mode, uid=uid, gid=gid)))
        if not self.bigtime:
            return self.encode(ino, InodeSpec(mode=mode, uid=uid, gid=gid, atime_ns=atime_ns,
                                              mtime_ns=mtime_ns, ctime_ns=ctime_ns,
                                              crtime_ns=crtime_ns))
        at, mt, ct, crt = (atime_ns + _BIG_OFF, mtime_ns + _BIG_OFF, ctime_ns + _BIG_OFF,
                           crtime_ns + _BIG_OFF)
        if min(at, mt, ct, crt) < 0 or max(at, mt, ct, crt) > _U64:
            return self.encode(ino, InodeSpec(mode=mode, uid=uid, gid=gid, atime_ns=atime_ns,
                                              mtime_ns=mtime_ns, ctime_ns=ctime_ns,
                                              crtime_ns=crtime_ns))
        buf = bytearray(tpl)
        _TIMES.pack_into(buf, 32, at, mt, ct)
        _CRT_INO.pack_into(buf, 144, crt, ino)
        _CRC.pack_into(buf, C.XFS_DINODE_CRC_OFF, parsers.xfs_cksum(buf, C.XFS_DINODE_CRC_OFF))
        return bytes(buf)

    def simple_template(self, ifmt: int) -> bytes:
        """The inode :meth:`simple` starts from for file type ``ifmt``, with
        permissions, owners, times and number zero."""
        key = ("tpl", ifmt)
        tpl = self._templates.get(key)
        if tpl is None:
            tpl = self._templates[key] = self.encode(0, InodeSpec(mode=ifmt))
        return tpl

    def encode(self, ino: int, s: InodeSpec) -> bytes:
        bt = self.bigtime
        if bt:
            # bigtime: nanoseconds from 1901; anything outside the format is clamped
            at, mt = s.atime_ns + _BIG_OFF, s.mtime_ns + _BIG_OFF
            ct, crt = s.ctime_ns + _BIG_OFF, s.crtime_ns + _BIG_OFF
            if min(at, mt, ct, crt) < 0 or max(at, mt, ct, crt) > _U64:
                at, mt, ct, crt = (encode_ts(t, True) for t in
                                   (s.atime_ns, s.mtime_ns, s.ctime_ns, s.crtime_ns))
        else:
            at, mt, ct, crt = (encode_ts(t, False) for t in
                               (s.atime_ns, s.mtime_ns, s.ctime_ns, s.crtime_ns))
        if self.nrext64:
            big_nextents, nextents, anextents = s.nextents, s.anextents, 0
        else:
            big_nextents, nextents, anextents = 0, s.nextents, s.anextents
        aformat = s.aformat if s.forkoff else C.XFS_DINODE_FMT_EXTENTS
        buf = bytearray(self.inodesize)
        _CORE.pack_into(
            buf, 0, C.XFS_DINODE_MAGIC, s.mode, 3, s.fmt, 0, s.uid, s.gid, s.nlink, 0, 0,
            big_nextents, at, mt, ct, s.size, s.nblocks, 0, nextents, anextents, s.forkoff,
            aformat, 0, 0, s.flags, s.gen, C.NULLAGINO, 0, s.changecount, 0,
            self.flags2, 0, b"", crt, ino, self.uuid)
        lit = C.XFS_DINODE_CORE_SIZE
        if s.data:
            buf[lit:lit + len(s.data)] = s.data
        if s.forkoff and s.attr:
            aoff = lit + s.forkoff * 8
            buf[aoff:aoff + len(s.attr)] = s.attr
        struct.pack_into("<I", buf, C.XFS_DINODE_CRC_OFF,
                         parsers.xfs_cksum(bytes(buf), C.XFS_DINODE_CRC_OFF))
        return bytes(buf)
