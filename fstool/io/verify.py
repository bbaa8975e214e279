"""Read and write verifiers attached to metadata buffer types.

Each :class:`BufType` says where a v5 block keeps its magic, CRC, self-address
(daddr), filesystem uuid, owner and LSN, and which log buffer type
(``XFS_BLFT_*``) the journal records for it.  :func:`verify` checks a block
read from disk in the order the kernel does (CRC, then magic and identity)
and raises :class:`~fstool.errors.CorruptionError` naming the structure and
the field; :func:`stamp` is the write verifier: it sets the LSN and the CRC
of a block about to be logged or written, and is the only place on the
write path that computes metadata CRCs (inodes aside, whose encoder keeps
each inode's CRC current so that readers in the same transaction can use
them).
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from .._backend import parsers, writers
from ..errors import CorruptionError
from ..format import constants as C
from ..format.structs import AGF as _AGF, AGFL as _AGFL, AGI as _AGI, DINODE as _DINODE
from ..format.structs import SB as _SB
from ..format.structs import (ATTR3_RMT_HDR as _ATTR3_RMT_HDR, DA3_BLKINFO as _DA3_BLKINFO,
                              DIR3_BLK_HDR as _DIR3_BLK_HDR, DSYMLINK_HDR as _DSYMLINK_HDR)

SB_LSN_OFF = _SB.offset("sb_lsn")
AGF_LSN_OFF = _AGF.offset("agf_lsn")
AGI_LSN_OFF = _AGI.offset("agi_lsn")
AGFL_LSN_OFF = _AGFL.offset("agfl_lsn")
DINODE_LSN_OFF = _DINODE.offset("di_lsn")
_U64 = struct.Struct(">Q")
_CRC = struct.Struct("<I")
_NULLCOMMITLSN = (1 << 64) - 1


# log buffer types (enum xfs_blft in xfs_log_format.h): what recovery
# verifies a replayed buffer as
XFS_BLFT_BTREE_BUF = 4
XFS_BLFT_AGF_BUF = 5
XFS_BLFT_AGFL_BUF = 6
XFS_BLFT_AGI_BUF = 7
XFS_BLFT_DINO_BUF = 8
XFS_BLFT_SYMLINK_BUF = 9
XFS_BLFT_DIR_BLOCK_BUF = 10
XFS_BLFT_DIR_DATA_BUF = 11
XFS_BLFT_DIR_FREE_BUF = 12
XFS_BLFT_DIR_LEAF1_BUF = 13
XFS_BLFT_DIR_LEAFN_BUF = 14
XFS_BLFT_DA_NODE_BUF = 15
XFS_BLFT_ATTR_LEAF_BUF = 16
XFS_BLFT_ATTR_RMT_BUF = 17
XFS_BLFT_SB_BUF = 18

# the log buffer type of a block, by its magic number
BLFT_BY_MAGIC = {
    C.XFS_ABTB_CRC_MAGIC: XFS_BLFT_BTREE_BUF, C.XFS_ABTC_CRC_MAGIC: XFS_BLFT_BTREE_BUF,
    C.XFS_IBT_CRC_MAGIC: XFS_BLFT_BTREE_BUF, C.XFS_FIBT_CRC_MAGIC: XFS_BLFT_BTREE_BUF,
    C.XFS_BMAP_CRC_MAGIC: XFS_BLFT_BTREE_BUF, C.XFS_REFC_CRC_MAGIC: XFS_BLFT_BTREE_BUF,
    C.XFS_RMAP_CRC_MAGIC: XFS_BLFT_BTREE_BUF,
    C.XFS_DIR3_BLOCK_MAGIC: XFS_BLFT_DIR_BLOCK_BUF, C.XFS_DIR3_DATA_MAGIC: XFS_BLFT_DIR_DATA_BUF,
    C.XFS_DIR3_FREE_MAGIC: XFS_BLFT_DIR_FREE_BUF, C.XFS_DIR3_LEAF1_MAGIC: XFS_BLFT_DIR_LEAF1_BUF,
    C.XFS_DIR3_LEAFN_MAGIC: XFS_BLFT_DIR_LEAFN_BUF, C.XFS_DA3_NODE_MAGIC: XFS_BLFT_DA_NODE_BUF,
    C.XFS_ATTR3_LEAF_MAGIC: XFS_BLFT_ATTR_LEAF_BUF, C.XFS_ATTR3_RMT_MAGIC: XFS_BLFT_ATTR_RMT_BUF,
    C.XFS_SYMLINK_MAGIC: XFS_BLFT_SYMLINK_BUF, C.XFS_SB_MAGIC: XFS_BLFT_SB_BUF,
    C.XFS_AGF_MAGIC: XFS_BLFT_AGF_BUF, C.XFS_AGI_MAGIC: XFS_BLFT_AGI_BUF,
    C.XFS_AGFL_MAGIC: XFS_BLFT_AGFL_BUF,
}


class BufType(NamedTuple):
    name: str
    magic_off: int
    magic_fmt: str            # ">I" or ">H"
    magics: tuple
    crc_off: int
    blkno_off: int | None     # where the block records its own daddr
    uuid_off: int | None
    owner_off: int | None
    owner_fmt: str = ">Q"
    lsn_off: int | None = None
    per_block: bool = False   # a header (and CRC) in every fs block: remote values
    inodes: bool = False      # an inode cluster: every inode has its own CRC and LSN
    # the LSN field holds NULLCOMMITLSN, never an LSN: remote xattr value
    # blocks, which the kernel writes unlogged (xfs_attr3_rmt_hdr_set) and
    # whose write verifier refuses any other value, log recovery included
    null_lsn: bool = False

    def magic_of(self, data) -> int:
        return struct.unpack_from(self.magic_fmt, data, self.magic_off)[0]

    def lsn_of(self, data) -> int:
        """The LSN the block records (0 for a type without one)."""
        return 0 if self.lsn_off is None else _U64.unpack_from(data, self.lsn_off)[0]

    def blft(self, data) -> int:
        """The XFS_BLFT_* type the log records for a buffer of this type."""
        if self.inodes:
            return XFS_BLFT_DINO_BUF
        return BLFT_BY_MAGIC.get(self.magic_of(data), 0)


def _bt_short(name, magic):
    return BufType(name, 0, ">I", (magic,), 52, 16, 32, 48, ">I", lsn_off=24)


def _hdr(layout, name, magics, magic="magic", crc="crc", blkno="blkno", uuid="uuid",
         owner="owner", lsn="lsn", **more):
    """A block type whose header is ``layout`` (its fields by name)."""
    o = layout.offset
    code = dict(layout.fields)[magic]
    return BufType(name, o(magic), ">" + code, magics, o(crc), o(blkno), o(uuid), o(owner),
                   lsn_off=o(lsn), **more)


def _dir3(name, *magics):
    return _hdr(_DIR3_BLK_HDR, name, magics)


def _da3(name, *magics):
    return _hdr(_DA3_BLKINFO, name, magics)


_REMOTE_HDR = 56       # xfs_attr3_rmt_hdr and xfs_dsymlink_hdr: magic, offset, bytes, crc, ...


def _remote(name, magic, layout, p, null_lsn=False):
    """Remote value or symlink blocks: a header (fields named ``p``...) in each."""
    return _hdr(layout, name, (magic,), p + "magic", p + "crc", p + "blkno", p + "uuid",
                p + "owner", p + "lsn", per_block=True, null_lsn=null_lsn)


BNOBT = _bt_short("bnobt block", C.XFS_ABTB_CRC_MAGIC)
CNTBT = _bt_short("cntbt block", C.XFS_ABTC_CRC_MAGIC)
INOBT = _bt_short("inobt block", C.XFS_IBT_CRC_MAGIC)
FINOBT = _bt_short("finobt block", C.XFS_FIBT_CRC_MAGIC)
REFCBT = _bt_short("refcountbt block", C.XFS_REFC_CRC_MAGIC)
RMAPBT = _bt_short("rmapbt block", C.XFS_RMAP_CRC_MAGIC)
BMBT = BufType("bmbt block", 0, ">I", (C.XFS_BMAP_CRC_MAGIC,), 64, 24, 40, 56, ">Q", lsn_off=32)

DIR3_BLOCK = _dir3("directory block", C.XFS_DIR3_BLOCK_MAGIC)
DIR3_DATA = _dir3("directory data block", C.XFS_DIR3_DATA_MAGIC)
DIR3_FREE = _dir3("directory free block", C.XFS_DIR3_FREE_MAGIC)
# any directory data-space block (block form or data), for writers
DIR3_DATA_ANY = _dir3("directory data block", C.XFS_DIR3_DATA_MAGIC, C.XFS_DIR3_BLOCK_MAGIC)
DIR3_LEAF = _da3("directory leaf block", C.XFS_DIR3_LEAF1_MAGIC, C.XFS_DIR3_LEAFN_MAGIC)
DA3_NODE_OR_LEAF = _da3("directory node/leaf block", C.XFS_DA3_NODE_MAGIC,
                        C.XFS_DIR3_LEAFN_MAGIC, C.XFS_DIR3_LEAF1_MAGIC)
ATTR3_NODE_OR_LEAF = _da3("xattr leaf/node block", C.XFS_ATTR3_LEAF_MAGIC, C.XFS_DA3_NODE_MAGIC)
ATTR3_RMT = _remote("remote xattr value block", C.XFS_ATTR3_RMT_MAGIC, _ATTR3_RMT_HDR, "rm_",
                    null_lsn=True)
SYMLINK = _remote("symlink block", C.XFS_SYMLINK_MAGIC, _DSYMLINK_HDR, "sl_")

# no uuid test: sb_uuid is the user-visible UUID, which differs from the one
# the metadata is stamped with once it was changed (incompat META_UUID)
SB = BufType("superblock", 0, ">I", (C.XFS_SB_MAGIC,), C.XFS_SB_CRC_OFF, None, None, None,
             lsn_off=SB_LSN_OFF)
AGF = BufType("agf", 0, ">I", (C.XFS_AGF_MAGIC,), C.XFS_AGF_CRC_OFF, None, 64, None,
              lsn_off=AGF_LSN_OFF)
AGI = BufType("agi", 0, ">I", (C.XFS_AGI_MAGIC,), C.XFS_AGI_CRC_OFF, None, 296, None,
              lsn_off=AGI_LSN_OFF)
AGFL = BufType("agfl", 0, ">I", (C.XFS_AGFL_MAGIC,), C.XFS_AGFL_CRC_OFF, None, 8, None,
               lsn_off=AGFL_LSN_OFF)
# an inode cluster buffer (inodes are verified one by one as they are read)
DINO = BufType("inode cluster", 0, ">H", (C.XFS_DINODE_MAGIC,), C.XFS_DINODE_CRC_OFF, None,
               None, None, lsn_off=DINODE_LSN_OFF, inodes=True)


def verify(buf, bt: BufType, *, uuid: bytes, daddr: int | None = None,
           owner: int | None = None, agno: int | None = None,
           block: int | None = None, ino: int | None = None) -> None:
    """Raise CorruptionError unless ``buf`` is a sound block of type ``bt``."""
    (magic,) = struct.unpack_from(bt.magic_fmt, buf, bt.magic_off)
    crc_off = bt.crc_off
    uuid_off = bt.uuid_off
    # the sound block, as most are, costs no more than these tests
    fault = None
    if magic not in bt.magics:
        want = " or ".join(f"0x{m:x}" for m in bt.magics)
        fault = f"bad magic 0x{magic:x} (expected {want})", "magic"
    elif not parsers.xfs_cksum_ok(buf, crc_off):
        stored = int.from_bytes(buf[crc_off:crc_off + 4], "little")
        computed = parsers.xfs_cksum(buf, crc_off)
        fault = f"CRC mismatch (stored 0x{stored:08x}, computed 0x{computed:08x})", "crc"
    elif uuid_off is not None and buf[uuid_off:uuid_off + 16] != uuid:
        fault = "uuid does not match the filesystem", "uuid"
    elif daddr is not None and bt.blkno_off is not None and \
            _U64.unpack_from(buf, bt.blkno_off)[0] != daddr:
        fault = f"records daddr {_U64.unpack_from(buf, bt.blkno_off)[0]}, read from {daddr}", \
            "blkno"
    elif owner is not None and bt.owner_off is not None:
        (got,) = struct.unpack_from(bt.owner_fmt, buf, bt.owner_off)
        if got != owner:
            fault = f"owner is {got}, expected {owner}", "owner"
    if fault is not None:
        raise CorruptionError(bt.name, fault[0], field=fault[1], agno=agno, block=block,
                              ino=ino)


def _stamp_one(data, off: int, size: int, crc_off: int, lsn_off, lsn: int) -> None:
    if lsn_off is not None:
        _U64.pack_into(data, off + lsn_off, lsn)
    region = data if off == 0 and size == len(data) else data[off:off + size]
    _CRC.pack_into(data, off + crc_off, parsers.xfs_cksum(region, crc_off))


def stamp(bt: BufType, data: bytearray, lsn: int, *, blocksize: int, inodesize: int = 0,
          clean=None) -> None:
    """The write verifier: give a block about to be logged or written its
    LSN and CRC.  Remote value and symlink buffers get them in every block
    header; an inode cluster in every inode that changed since ``clean``
    (every inode when there is no clean copy), so that unchanged inodes stay
    byte for byte as they are on disk."""
    if bt.inodes:
        writers.stamp_inodes(data, clean, inodesize, lsn, bt.lsn_off, bt.crc_off,
                             parsers.xfs_cksum)
        return
    if bt.per_block:
        # a header's CRC covers the blocks its bytes reach: one block for
        # remote values, the whole buffer for a symlink the kernel wrote in
        # one extent (one header per mapping, sl_bytes past the first block)
        (magic,) = bt.magics
        off = 0
        while off < len(data):
            span = blocksize
            if struct.unpack_from(">I", data, off)[0] == magic:
                nbytes = struct.unpack_from(">I", data, off + 8)[0]
                span = min(len(data) - off, max(blocksize, -(-(_REMOTE_HDR + nbytes)
                                                            // blocksize) * blocksize))
                _stamp_one(data, off, span, bt.crc_off, bt.lsn_off,
                           _NULLCOMMITLSN if bt.null_lsn else lsn)
            off += span
        return
    _stamp_one(data, 0, len(data), bt.crc_off, bt.lsn_off, lsn)
