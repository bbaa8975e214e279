"""Verifiers attached to metadata buffer types.

Each :class:`BufType` says where a v5 block keeps its magic, CRC, self-address
(daddr), filesystem uuid and owner.  :func:`verify` checks them in the order
the kernel does (CRC, then magic and identity) and raises
:class:`~fstool.errors.CorruptionError` naming the structure and the field.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from .._backend import parsers
from ..errors import CorruptionError
from ..format import constants as C


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


def _bt_short(name, magic):
    return BufType(name, 0, ">I", (magic,), 52, 16, 32, 48, ">I")


BNOBT = _bt_short("bnobt block", C.XFS_ABTB_CRC_MAGIC)
CNTBT = _bt_short("cntbt block", C.XFS_ABTC_CRC_MAGIC)
INOBT = _bt_short("inobt block", C.XFS_IBT_CRC_MAGIC)
FINOBT = _bt_short("finobt block", C.XFS_FIBT_CRC_MAGIC)
REFCBT = _bt_short("refcountbt block", C.XFS_REFC_CRC_MAGIC)
RMAPBT = _bt_short("rmapbt block", C.XFS_RMAP_CRC_MAGIC)
BMBT = BufType("bmbt block", 0, ">I", (C.XFS_BMAP_CRC_MAGIC,), 64, 24, 40, 56, ">Q")

DIR3_BLOCK = BufType("directory block", 0, ">I", (C.XFS_DIR3_BLOCK_MAGIC,), 4, 8, 24, 40)
DIR3_DATA = BufType("directory data block", 0, ">I", (C.XFS_DIR3_DATA_MAGIC,), 4, 8, 24, 40)
DIR3_FREE = BufType("directory free block", 0, ">I", (C.XFS_DIR3_FREE_MAGIC,), 4, 8, 24, 40)
DIR3_LEAF = BufType("directory leaf block", 8, ">H",
                    (C.XFS_DIR3_LEAF1_MAGIC, C.XFS_DIR3_LEAFN_MAGIC), 12, 16, 32, 48)
DA3_NODE_OR_LEAF = BufType("directory node/leaf block", 8, ">H",
                           (C.XFS_DA3_NODE_MAGIC, C.XFS_DIR3_LEAFN_MAGIC,
                            C.XFS_DIR3_LEAF1_MAGIC), 12, 16, 32, 48)
ATTR3_NODE_OR_LEAF = BufType("xattr leaf/node block", 8, ">H",
                             (C.XFS_ATTR3_LEAF_MAGIC, C.XFS_DA3_NODE_MAGIC), 12, 16, 32, 48)
ATTR3_RMT = BufType("remote xattr value block", 0, ">I", (C.XFS_ATTR3_RMT_MAGIC,), 12, 40, 16, 32)
SYMLINK = BufType("symlink block", 0, ">I", (C.XFS_SYMLINK_MAGIC,), 12, 40, 16, 32)

SB = BufType("superblock", 0, ">I", (C.XFS_SB_MAGIC,), C.XFS_SB_CRC_OFF, None, 32, None)
AGF = BufType("agf", 0, ">I", (C.XFS_AGF_MAGIC,), C.XFS_AGF_CRC_OFF, None, 64, None)
AGI = BufType("agi", 0, ">I", (C.XFS_AGI_MAGIC,), C.XFS_AGI_CRC_OFF, None, 296, None)
AGFL = BufType("agfl", 0, ">I", (C.XFS_AGFL_MAGIC,), C.XFS_AGFL_CRC_OFF, None, 8, None)


def verify(buf, bt: BufType, *, uuid: bytes, daddr: int | None = None,
           owner: int | None = None, agno: int | None = None,
           block: int | None = None, ino: int | None = None) -> None:
    """Raise CorruptionError unless ``buf`` is a sound block of type ``bt``."""
    where = {"agno": agno, "block": block, "ino": ino}
    (magic,) = struct.unpack_from(bt.magic_fmt, buf, bt.magic_off)
    if magic not in bt.magics:
        want = " or ".join(f"0x{m:x}" for m in bt.magics)
        raise CorruptionError(bt.name, f"bad magic 0x{magic:x} (expected {want})",
                              field="magic", **where)
    stored = int.from_bytes(buf[bt.crc_off:bt.crc_off + 4], "little")
    computed = parsers.xfs_cksum(buf, bt.crc_off)
    if stored != computed:
        raise CorruptionError(bt.name, f"CRC mismatch (stored 0x{stored:08x}, "
                              f"computed 0x{computed:08x})", field="crc", **where)
    if bt.uuid_off is not None and buf[bt.uuid_off:bt.uuid_off + 16] != uuid:
        raise CorruptionError(bt.name, "uuid does not match the filesystem",
                              field="uuid", **where)
    if daddr is not None and bt.blkno_off is not None:
        (blkno,) = struct.unpack_from(">Q", buf, bt.blkno_off)
        if blkno != daddr:
            raise CorruptionError(bt.name, f"records daddr {blkno}, read from {daddr}",
                                  field="blkno", **where)
    if owner is not None and bt.owner_off is not None:
        (got,) = struct.unpack_from(bt.owner_fmt, buf, bt.owner_off)
        if got != owner:
            raise CorruptionError(bt.name, f"owner is {got}, expected {owner}",
                                  field="owner", **where)
