"""The file formats of xfs_metadump (include/xfs_metadump.h in xfsprogs).

v1 ("XFSM"): a sequence of 512-byte index sectors, each followed by the
sectors it lists.  An index holds the magic, the number of sectors that
follow (``mb_count``), the log2 of their size (always 9: 512-byte sectors)
and informational flags, then up to 63 big-endian daddrs, one per sector
that follows.  A dump ends with an index listing fewer than 63 sectors
(possibly none).  The first sector listed is the primary superblock.

v2 ("XMD2"): a 24-byte header (magic, version 2, compat and incompat
flags, a reserved word), then extents: a 12-byte header (an address whose
low 54 bits are a daddr and next 2 bits the device, 0 data or 1 external
log; a length in 512-byte sectors) followed by the extent's bytes.  The
first extent is the primary superblock at daddr 0.
"""
from __future__ import annotations

import struct

XFS_MD_MAGIC_V1 = 0x5846534D        # "XFSM"
XFS_MD_MAGIC_V2 = 0x584D4432        # "XMD2"

# v1 mb_info flags (informational)
XFS_METADUMP_INFO_FLAGS = 1 << 0
XFS_METADUMP_OBFUSCATED = 1 << 1
XFS_METADUMP_FULLBLOCKS = 1 << 2
XFS_METADUMP_DIRTYLOG = 1 << 3

# v2 compat flags
XFS_MD2_COMPAT_OBFUSCATED = 1 << 0
XFS_MD2_COMPAT_FULLBLOCKS = 1 << 1
XFS_MD2_COMPAT_DIRTYLOG = 1 << 2
XFS_MD2_COMPAT_EXTERNALLOG = 1 << 3

XME_ADDR_DEVICE_SHIFT = 54
XME_ADDR_DADDR_MASK = (1 << XME_ADDR_DEVICE_SHIFT) - 1
XME_ADDR_DEVICE_MASK = 3 << XME_ADDR_DEVICE_SHIFT
XME_ADDR_DATA_DEVICE = 0
XME_ADDR_LOG_DEVICE = 1 << XME_ADDR_DEVICE_SHIFT

V1_BLOCKLOG = 9
V1_HDR = struct.Struct(">IHBB")           # mb_magic, mb_count, mb_blocklog, mb_info
V1_INDICES = (512 - V1_HDR.size) // 8     # 63 daddrs per index sector
V2_HDR = struct.Struct(">IIIIQ")          # magic, version, compat, incompat, reserved
V2_EXTENT = struct.Struct(">QI")          # xme_addr, xme_len (512-byte sectors)


def v1_index(count: int, info: int, daddrs) -> bytes:
    """One v1 index sector listing ``daddrs`` (at most 63)."""
    out = bytearray(512)
    V1_HDR.pack_into(out, 0, XFS_MD_MAGIC_V1, count, V1_BLOCKLOG, info)
    struct.pack_into(f">{len(daddrs)}Q", out, V1_HDR.size, *daddrs)
    return bytes(out)


def v2_header(compat: int) -> bytes:
    return V2_HDR.pack(XFS_MD_MAGIC_V2, 2, compat, 0, 0)


def v2_extent(daddr: int, nsect: int, log_device: bool = False) -> bytes:
    addr = daddr | (XME_ADDR_LOG_DEVICE if log_device else XME_ADDR_DATA_DEVICE)
    return V2_EXTENT.pack(addr, nsect)
