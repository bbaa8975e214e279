"""Builders for v5 metadata blocks: the write-side twin of the verifiers.

Every builder returns bytes with the CRC already stamped, so a block is never
written without its checksum.
"""
from __future__ import annotations

import struct

from .._backend import parsers
from ..format import constants as C
from ..format.structs import BTREE_SBLOCK, DINODE

NULLFSINO = 0xFFFFFFFFFFFFFFFF


def stamp_crc(buf: bytearray, crc_off: int) -> bytearray:
    """Compute the CRC32C of ``buf`` (with the field zeroed) and store it."""
    buf[crc_off:crc_off + 4] = b"\0\0\0\0"
    buf[crc_off:crc_off + 4] = struct.pack("<I", parsers.xfs_cksum(bytes(buf), crc_off))
    return buf


def short_btree_block(blocksize: int, magic: int, *, level: int, recs: bytes, numrecs: int,
                      daddr: int, uuid: bytes, owner: int,
                      leftsib: int = C.NULLAGBLOCK, rightsib: int = C.NULLAGBLOCK) -> bytes:
    """A short-pointer (per-AG) btree block holding ``recs`` (already encoded)."""
    buf = bytearray(blocksize)
    hdr = BTREE_SBLOCK.pack({"bb_magic": magic, "bb_level": level, "bb_numrecs": numrecs,
                             "bb_leftsib": leftsib, "bb_rightsib": rightsib,
                             "bb_blkno": daddr, "bb_uuid": uuid, "bb_owner": owner})
    buf[:len(hdr)] = hdr
    buf[len(hdr):len(hdr) + len(recs)] = recs
    return bytes(stamp_crc(buf, C.XFS_BTREE_SBLOCK_CRC_OFF))


def encode_timestamp(ns: int, bigtime: bool) -> int:
    """Nanoseconds since the Unix epoch as an on-disk timestamp."""
    if bigtime:
        return ns + C.XFS_BIGTIME_EPOCH_OFFSET * C.NSEC_PER_SEC
    sec, nsec = divmod(ns, C.NSEC_PER_SEC)
    return ((sec & 0xFFFFFFFF) << 32) | nsec


def dinode(inodesize: int, *, ino: int, uuid: bytes, mode: int = 0, fmt: int = 0,
           nlink: int = 0, uid: int = 0, gid: int = 0, size: int = 0, nblocks: int = 0,
           flags: int = 0, flags2: int = 0, gen: int = 0, changecount: int = 0,
           atime_ns: int | None = None, mtime_ns: int | None = None,
           ctime_ns: int | None = None, crtime_ns: int | None = None,
           aformat: int = C.XFS_DINODE_FMT_EXTENTS, nextents: int = 0,
           literal: bytes = b"") -> bytes:
    """A v3 inode.  With no mode it is a free inode as mkfs and the kernel
    initialise them: identity, uuid and an empty unlinked pointer only."""
    bigtime = bool(flags2 & C.XFS_DIFLAG2_BIGTIME)

    def ts(ns):
        return 0 if ns is None else encode_timestamp(ns, bigtime)
    fields = {
        "di_magic": C.XFS_DINODE_MAGIC, "di_mode": mode, "di_version": 3, "di_format": fmt,
        "di_uid": uid, "di_gid": gid, "di_nlink": nlink,
        "di_atime": ts(atime_ns), "di_mtime": ts(mtime_ns), "di_ctime": ts(ctime_ns),
        "di_crtime": ts(crtime_ns), "di_size": size, "di_nblocks": nblocks,
        "di_nextents": nextents, "di_aformat": aformat if mode else 0, "di_flags": flags,
        "di_gen": gen, "di_next_unlinked": C.NULLAGINO, "di_changecount": changecount,
        "di_flags2": flags2, "di_ino": ino, "di_uuid": uuid,
    }
    buf = bytearray(inodesize)
    core = DINODE.pack(fields)
    buf[:len(core)] = core
    buf[len(core):len(core) + len(literal)] = literal
    return bytes(stamp_crc(buf, C.XFS_DINODE_CRC_OFF))
