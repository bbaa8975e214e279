"""The XFS log on disk: records, op headers and every log item, defined once.

Names follow the kernel's ``xfs_log_format.h``.  Each structure is one
:class:`~fstool.format.layout.Layout` (a field list giving both the fast
``struct`` view and the printable ``construct`` one), so a log writer and a
log reader share exactly one definition.

Byte order
----------
The physical log (record headers, extended headers, op headers) is
big-endian.  The log *items* are written by the kernel in host order: the
transaction header, every ``*_log_format`` structure and the logged inode
core (``xfs_log_dinode``) are little-endian here, as an x86-64 or arm64
kernel writes them.  Two fields break the pattern and are handled by the
helpers below: ``h_crc`` is little-endian inside the big-endian record
header (kept as 4 raw bytes in :data:`REC_HEADER`; use :func:`rec_crc`),
and ``xfs_icreate_log`` has host-order type and size but big-endian body
(use :func:`unpack_icreate` / :func:`pack_icreate`).

How a writer uses this module
-----------------------------
1. Build the record body: for each op, ``OP_HEADER.pack(...)`` followed by
   the op's bytes (``TRANS_HEADER``, ``BUF_LOG_FORMAT`` + chunks,
   ``INODE_LOG_FORMAT`` + ``LOG_DINODE`` + forks, ...); pad the body to a
   multiple of 512 bytes (:func:`record_blocks`).
2. Build the header blocks (``hblks = header_blocks(h_size)`` sectors):
   ``REC_HEADER.pack(...)`` with ``h_lsn = lsn(cycle, block)``, ``h_len``
   the unpadded body length, ``h_size`` the iclog size, ``h_fmt =
   XLOG_FMT_LINUX_LE``.
3. ``stamp_cycles(hdr, body, cycle)``: moves the first word of every body
   sector into ``h_cycle_data`` / the extended headers and stamps the cycle.
4. ``set_rec_crc(hdr, body)``: the record CRC over the header, extended
   headers and the stamped body, with ``h_crc`` taken as zero.
5. Write ``hdr + body`` at log block ``block``.

How a reader uses it
--------------------
Read ``header_blocks(h_size)`` sectors for the header, check
``rec_crc_ok(hdr, body)`` on the body as read, then ``unstamp_cycles(hdr,
body)`` restores the original first words and the body can be walked op
by op (``OP_HEADER``) and item by item (``ITEM_TYPE`` of the first
region, then the matching layout).
"""
from __future__ import annotations

import struct
import sys
from array import array

from .._backend import parsers
from .layout import Layout

BBSHIFT = 9
BBSIZE = 1 << BBSHIFT

# -- the physical log -------------------------------------------------------
XLOG_HEADER_MAGIC_NUM = 0xFEEDBABE      # also "not a cycle number"
XLOG_VERSION_1 = 1
XLOG_VERSION_2 = 2                      # large iclogs, log stripe unit
XLOG_VERSION_OKBITS = XLOG_VERSION_1 | XLOG_VERSION_2
XLOG_MIN_RECORD_BSIZE = 16 * 1024
XLOG_BIG_RECORD_BSIZE = 32 * 1024
XLOG_MAX_RECORD_BSIZE = 256 * 1024
XLOG_HEADER_CYCLE_SIZE = 32 * 1024      # body bytes whose cycle words one header holds
XLOG_CYCLE_DATA_SIZE = XLOG_HEADER_CYCLE_SIZE // BBSIZE     # 64 words
XLOG_MAX_ICLOGS = 8
XLOG_HEADER_SIZE = 512
XLOG_REC_SHIFT_BB = XLOG_MAX_RECORD_BSIZE >> BBSHIFT        # v2 logs: 512 sectors
XLOG_TOTAL_REC_SHIFT_BB = (XLOG_MAX_ICLOGS * XLOG_MAX_RECORD_BSIZE) >> BBSHIFT

XLOG_FMT_UNKNOWN = 0
XLOG_FMT_LINUX_LE = 1
XLOG_FMT_LINUX_BE = 2
XLOG_FMT_IRIX_BE = 3

# log clients (oh_clientid)
XFS_TRANSACTION = 0x69
XFS_LOG = 0xAA
CLIENT_NAMES = {XFS_TRANSACTION: "XFS_TRANSACTION", XFS_LOG: "XFS_LOG"}

# op header flags (oh_flags)
XLOG_START_TRANS = 0x01
XLOG_COMMIT_TRANS = 0x02
XLOG_CONTINUE_TRANS = 0x04
XLOG_WAS_CONT_TRANS = 0x08
XLOG_END_TRANS = 0x10
XLOG_UNMOUNT_TRANS = 0x20
OP_FLAG_NAMES = [(XLOG_START_TRANS, "START"), (XLOG_COMMIT_TRANS, "COMMIT"),
                 (XLOG_CONTINUE_TRANS, "CONTINUE"), (XLOG_WAS_CONT_TRANS, "WAS_CONT"),
                 (XLOG_END_TRANS, "END"), (XLOG_UNMOUNT_TRANS, "UNMOUNT")]

XLOG_UNMOUNT_TYPE = 0x556E              # "Un"
XFS_TRANS_HEADER_MAGIC = 0x5452414E     # "TRAN"
XFS_TRANS_CHECKPOINT = 40               # the only th_type a delayed-logging log holds
XLOG_MAX_REGIONS_IN_ITEM = 65536 // 128 // 2 + 1

# xlog_rec_header: big-endian, alone in its 512-byte sector (zero padded).
# h_crc is little-endian on disk: kept as raw bytes here (see rec_crc).
REC_HEADER = Layout("xlog_rec_header", [
    ("h_magicno", "I"), ("h_cycle", "I"), ("h_version", "I"), ("h_len", "I"),
    ("h_lsn", "Q"), ("h_tail_lsn", "Q"), ("h_crc", "4s"), ("h_prev_block", "I"),
    ("h_num_logops", "I"), ("h_cycle_data", f"{XLOG_CYCLE_DATA_SIZE}I"),
    ("h_fmt", "I"), ("h_fs_uuid", "16s"), ("h_size", "I"), ("h_pad0", "I"),
])
XLOG_REC_SIZE = REC_HEADER.size                 # 328: what the record CRC covers
H_CRC_OFF = REC_HEADER.offset("h_crc")          # 32
H_CYCLE_DATA_OFF = REC_HEADER.offset("h_cycle_data")

# xlog_rec_ext_header: one per further 32 KiB of body, each in its own
# sector after the record header; the rest of the sector is xh_reserved.
REC_EXT_HEADER = Layout("xlog_rec_ext_header", [
    ("xh_cycle", "I"), ("xh_cycle_data", f"{XLOG_CYCLE_DATA_SIZE}I"),
])
XLOG_REC_EXT_SIZE = REC_EXT_HEADER.size         # 260

OP_HEADER = Layout("xlog_op_header", [
    ("oh_tid", "I"), ("oh_len", "I"), ("oh_clientid", "B"), ("oh_flags", "B"),
    ("oh_res2", "H"),
])

# -- log items (host order: little-endian) --------------------------------------
TRANS_HEADER = Layout("xfs_trans_header", [
    ("th_magic", "I"), ("th_type", "I"), ("th_tid", "i"), ("th_num_items", "I"),
], endian="<")

UNMOUNT_LOG_FORMAT = Layout("xfs_unmount_log_format", [
    ("magic", "H"), ("pad1", "H"), ("pad2", "I"),
], endian="<")

# log item types (the first 16 bits of an item's first region)
XFS_LI_EFI = 0x1236
XFS_LI_EFD = 0x1237
XFS_LI_IUNLINK = 0x1238
XFS_LI_INODE = 0x123B
XFS_LI_BUF = 0x123C
XFS_LI_DQUOT = 0x123D
XFS_LI_QUOTAOFF = 0x123E
XFS_LI_ICREATE = 0x123F
XFS_LI_RUI = 0x1240
XFS_LI_RUD = 0x1241
XFS_LI_CUI = 0x1242
XFS_LI_CUD = 0x1243
XFS_LI_BUI = 0x1244
XFS_LI_BUD = 0x1245
XFS_LI_ATTRI = 0x1246
XFS_LI_ATTRD = 0x1247
XFS_LI_XMI = 0x1248
XFS_LI_XMD = 0x1249
XFS_LI_EFI_RT = 0x124A
XFS_LI_EFD_RT = 0x124B
XFS_LI_RUI_RT = 0x124C
XFS_LI_RUD_RT = 0x124D
XFS_LI_CUI_RT = 0x124E
XFS_LI_CUD_RT = 0x124F
ITEM_NAMES = {
    XFS_LI_EFI: "EFI", XFS_LI_EFD: "EFD", XFS_LI_IUNLINK: "IUNLINK",
    XFS_LI_INODE: "INODE", XFS_LI_BUF: "BUF", XFS_LI_DQUOT: "DQUOT",
    XFS_LI_QUOTAOFF: "QUOTAOFF", XFS_LI_ICREATE: "ICREATE", XFS_LI_RUI: "RUI",
    XFS_LI_RUD: "RUD", XFS_LI_CUI: "CUI", XFS_LI_CUD: "CUD", XFS_LI_BUI: "BUI",
    XFS_LI_BUD: "BUD", XFS_LI_ATTRI: "ATTRI", XFS_LI_ATTRD: "ATTRD",
    XFS_LI_XMI: "XMI", XFS_LI_XMD: "XMD", XFS_LI_EFI_RT: "EFI_RT",
    XFS_LI_EFD_RT: "EFD_RT", XFS_LI_RUI_RT: "RUI_RT", XFS_LI_RUD_RT: "RUD_RT",
    XFS_LI_CUI_RT: "CUI_RT", XFS_LI_CUD_RT: "CUD_RT",
}
# intent type -> its done type
INTENT_DONE = {XFS_LI_EFI: XFS_LI_EFD, XFS_LI_RUI: XFS_LI_RUD, XFS_LI_CUI: XFS_LI_CUD,
               XFS_LI_BUI: XFS_LI_BUD, XFS_LI_ATTRI: XFS_LI_ATTRD, XFS_LI_XMI: XFS_LI_XMD,
               XFS_LI_EFI_RT: XFS_LI_EFD_RT, XFS_LI_RUI_RT: XFS_LI_RUD_RT,
               XFS_LI_CUI_RT: XFS_LI_CUD_RT}
DONE_INTENT = {v: k for k, v in INTENT_DONE.items()}

# -- buffer items ------------------------------------------------------------------
XFS_BLF_CHUNK = 128
XFS_BLF_SHIFT = 7
NBWORD = 32
XFS_MAX_BLOCKSIZE = 65536
XFS_BLF_DATAMAP_SIZE = XFS_MAX_BLOCKSIZE // XFS_BLF_CHUNK // NBWORD + 1    # 17 words

XFS_BLF_INODE_BUF = 1 << 0
XFS_BLF_CANCEL = 1 << 1
XFS_BLF_UDQUOT_BUF = 1 << 2
XFS_BLF_PDQUOT_BUF = 1 << 3
XFS_BLF_GDQUOT_BUF = 1 << 4
XFS_BLF_DQUOT_BUF = XFS_BLF_UDQUOT_BUF | XFS_BLF_PDQUOT_BUF | XFS_BLF_GDQUOT_BUF
BLF_FLAG_NAMES = [(XFS_BLF_INODE_BUF, "INODE_BUF"), (XFS_BLF_CANCEL, "CANCEL"),
                  (XFS_BLF_UDQUOT_BUF, "UDQUOT_BUF"), (XFS_BLF_PDQUOT_BUF, "PDQUOT_BUF"),
                  (XFS_BLF_GDQUOT_BUF, "GDQUOT_BUF")]

# the buffer type lives in the top 5 bits of blf_flags
XFS_BLFT_BITS = 5
XFS_BLFT_SHIFT = 11
XFS_BLFT_MASK = ((1 << XFS_BLFT_BITS) - 1) << XFS_BLFT_SHIFT
(XFS_BLFT_UNKNOWN_BUF, XFS_BLFT_UDQUOT_BUF, XFS_BLFT_PDQUOT_BUF, XFS_BLFT_GDQUOT_BUF,
 XFS_BLFT_BTREE_BUF, XFS_BLFT_AGF_BUF, XFS_BLFT_AGFL_BUF, XFS_BLFT_AGI_BUF,
 XFS_BLFT_DINO_BUF, XFS_BLFT_SYMLINK_BUF, XFS_BLFT_DIR_BLOCK_BUF, XFS_BLFT_DIR_DATA_BUF,
 XFS_BLFT_DIR_FREE_BUF, XFS_BLFT_DIR_LEAF1_BUF, XFS_BLFT_DIR_LEAFN_BUF,
 XFS_BLFT_DA_NODE_BUF, XFS_BLFT_ATTR_LEAF_BUF, XFS_BLFT_ATTR_RMT_BUF, XFS_BLFT_SB_BUF,
 XFS_BLFT_RTBITMAP_BUF, XFS_BLFT_RTSUMMARY_BUF) = range(21)
XFS_BLFT_MAX_BUF = 1 << XFS_BLFT_BITS
BLFT_NAMES = ["unknown", "udquot", "pdquot", "gdquot", "btree", "agf", "agfl", "agi",
              "dinode", "symlink", "dir block", "dir data", "dir free", "dir leaf1",
              "dir leafn", "da node", "attr leaf", "attr remote", "superblock",
              "rt bitmap", "rt summary"]

BUF_LOG_FORMAT = Layout("xfs_buf_log_format", [
    ("blf_type", "H"), ("blf_size", "H"), ("blf_flags", "H"), ("blf_len", "H"),
    ("blf_blkno", "q"), ("blf_map_size", "I"),
    ("blf_data_map", f"{XFS_BLF_DATAMAP_SIZE}I"),
], endian="<")


def blft_from_flags(blf_flags: int) -> int:
    return (blf_flags & XFS_BLFT_MASK) >> XFS_BLFT_SHIFT


def blft_to_flags(blf_flags: int, blft: int) -> int:
    return (blf_flags & ~XFS_BLFT_MASK) | ((blft << XFS_BLFT_SHIFT) & XFS_BLFT_MASK)


def map_runs(data_map, map_size: int):
    """The dirty bitmap as runs ``(first_chunk, nchunks)`` of 128-byte
    chunks, in order: each run is one logged region after the format
    region (the kernel's xfs_next_bit / xfs_contig_bits walk)."""
    runs = []
    nbits = map_size * NBWORD
    bit = 0
    while bit < nbits:
        word = data_map[bit >> 5] >> (bit & 31)
        if not word:
            bit = (bit | 31) + 1
            continue
        if not word & 1:
            bit += (word & -word).bit_length() - 1
            continue
        start = bit
        while bit < nbits and data_map[bit >> 5] >> (bit & 31) & 1:
            bit += 1
        runs.append((start, bit - start))
    return runs


def make_map(chunks) -> tuple[list, int]:
    """``(blf_data_map, blf_map_size)`` for an iterable of dirty chunk
    numbers (what a writer logging a buffer fills in)."""
    words = [0] * XFS_BLF_DATAMAP_SIZE
    top = -1
    for c in chunks:
        if not 0 <= c < (XFS_BLF_DATAMAP_SIZE - 1) * NBWORD:
            raise ValueError(f"chunk {c} outside the dirty bitmap")
        words[c >> 5] |= 1 << (c & 31)
        top = max(top, c)
    return words, (top >> 5) + 1 if top >= 0 else 0


# -- inode items ----------------------------------------------------------------------
XFS_ILOG_CORE = 0x001
XFS_ILOG_DDATA = 0x002
XFS_ILOG_DEXT = 0x004
XFS_ILOG_DBROOT = 0x008
XFS_ILOG_DEV = 0x010
XFS_ILOG_UUID = 0x020
XFS_ILOG_ADATA = 0x040
XFS_ILOG_AEXT = 0x080
XFS_ILOG_ABROOT = 0x100
XFS_ILOG_DOWNER = 0x200
XFS_ILOG_AOWNER = 0x400
XFS_ILOG_DFORK = XFS_ILOG_DDATA | XFS_ILOG_DEXT | XFS_ILOG_DBROOT
XFS_ILOG_AFORK = XFS_ILOG_ADATA | XFS_ILOG_AEXT | XFS_ILOG_ABROOT
ILOG_NAMES = [(XFS_ILOG_CORE, "CORE"), (XFS_ILOG_DDATA, "DDATA"), (XFS_ILOG_DEXT, "DEXT"),
              (XFS_ILOG_DBROOT, "DBROOT"), (XFS_ILOG_DEV, "DEV"), (XFS_ILOG_UUID, "UUID"),
              (XFS_ILOG_ADATA, "ADATA"), (XFS_ILOG_AEXT, "AEXT"), (XFS_ILOG_ABROOT, "ABROOT"),
              (XFS_ILOG_DOWNER, "DOWNER"), (XFS_ILOG_AOWNER, "AOWNER")]

INODE_LOG_FORMAT = Layout("xfs_inode_log_format", [
    ("ilf_type", "H"), ("ilf_size", "H"), ("ilf_fields", "I"), ("ilf_asize", "H"),
    ("ilf_dsize", "H"), ("ilf_pad", "I"), ("ilf_ino", "Q"), ("ilf_u", "16s"),
    ("ilf_blkno", "q"), ("ilf_len", "i"), ("ilf_boffset", "i"),
], endian="<")

# written by old 32-bit kernels: no ilf_pad (52 bytes); recovery accepts both
INODE_LOG_FORMAT_32 = Layout("xfs_inode_log_format_32", [
    ("ilf_type", "H"), ("ilf_size", "H"), ("ilf_fields", "I"), ("ilf_asize", "H"),
    ("ilf_dsize", "H"), ("ilf_ino", "Q"), ("ilf_u", "16s"),
    ("ilf_blkno", "q"), ("ilf_len", "i"), ("ilf_boffset", "i"),
], endian="<")

# the in-core inode as logged (host order); must mirror xfs_dinode field by field
LOG_DINODE = Layout("xfs_log_dinode", [
    ("di_magic", "H"), ("di_mode", "H"), ("di_version", "b"), ("di_format", "b"),
    ("di_metatype", "H"), ("di_uid", "I"), ("di_gid", "I"), ("di_nlink", "I"),
    ("di_projid_lo", "H"), ("di_projid_hi", "H"), ("di_big_nextents", "Q"),
    ("di_atime", "Q"), ("di_mtime", "Q"), ("di_ctime", "Q"), ("di_size", "q"),
    ("di_nblocks", "Q"), ("di_extsize", "I"), ("di_nextents", "I"),
    ("di_anextents", "H"), ("di_forkoff", "B"), ("di_aformat", "b"),
    ("di_dmevmask", "I"), ("di_dmstate", "H"), ("di_flags", "H"), ("di_gen", "I"),
    ("di_next_unlinked", "I"), ("di_crc", "I"), ("di_changecount", "Q"),
    ("di_lsn", "Q"), ("di_flags2", "Q"), ("di_cowextsize", "I"), ("di_pad2", "12s"),
    ("di_crtime", "Q"), ("di_ino", "Q"), ("di_uuid", "16s"),
], endian="<")
# a v2 (pre-v5) log dinode ends before di_next_unlinked
LOG_DINODE_V2_SIZE = LOG_DINODE.offset("di_next_unlinked")

# -- inode create -------------------------------------------------------------------
# icl_type and icl_size are host order; the rest is big-endian
ICREATE_LOG = Layout("xfs_icreate_log", [
    ("icl_type", "H"), ("icl_size", "H"), ("icl_ag", "I"), ("icl_agbno", "I"),
    ("icl_count", "I"), ("icl_isize", "I"), ("icl_length", "I"), ("icl_gen", "I"),
])


def unpack_icreate(buf, offset: int = 0) -> dict:
    d = ICREATE_LOG.unpack(buf, offset)
    d["icl_type"], d["icl_size"] = struct.unpack_from("<HH", buf, offset)
    return d


def pack_icreate(values: dict) -> bytes:
    raw = bytearray(ICREATE_LOG.pack(values))
    struct.pack_into("<HH", raw, 0, values.get("icl_type", XFS_LI_ICREATE),
                     values.get("icl_size", 1))
    return bytes(raw)


# -- intents and done items -------------------------------------------------------------
def _intent_head(prefix: str, name: str, count_field: str | None, id_field: str) -> Layout:
    fields = [(f"{prefix}_type", "H"), (f"{prefix}_size", "H")]
    fields.append((count_field, "I") if count_field else ("__pad", "I"))
    fields.append((id_field, "Q"))
    return Layout(name, fields, endian="<")


EFI_LOG_FORMAT = _intent_head("efi", "xfs_efi_log_format", "efi_nextents", "efi_id")
EFD_LOG_FORMAT = _intent_head("efd", "xfs_efd_log_format", "efd_nextents", "efd_efi_id")
EXTENT_64 = Layout("xfs_extent_64", [("ext_start", "Q"), ("ext_len", "I"),
                                     ("ext_pad", "I")], endian="<")
EXTENT_32 = Layout("xfs_extent_32", [("ext_start", "Q"), ("ext_len", "I")], endian="<")

RUI_LOG_FORMAT = _intent_head("rui", "xfs_rui_log_format", "rui_nextents", "rui_id")
RUD_LOG_FORMAT = _intent_head("rud", "xfs_rud_log_format", None, "rud_rui_id")
BUI_LOG_FORMAT = _intent_head("bui", "xfs_bui_log_format", "bui_nextents", "bui_id")
BUD_LOG_FORMAT = _intent_head("bud", "xfs_bud_log_format", None, "bud_bui_id")
MAP_EXTENT = Layout("xfs_map_extent", [
    ("me_owner", "Q"), ("me_startblock", "Q"), ("me_startoff", "Q"), ("me_len", "I"),
    ("me_flags", "I"),
], endian="<")
CUI_LOG_FORMAT = _intent_head("cui", "xfs_cui_log_format", "cui_nextents", "cui_id")
CUD_LOG_FORMAT = _intent_head("cud", "xfs_cud_log_format", None, "cud_cui_id")
PHYS_EXTENT = Layout("xfs_phys_extent", [
    ("pe_startblock", "Q"), ("pe_len", "I"), ("pe_flags", "I"),
], endian="<")

XMI_LOG_FORMAT = Layout("xfs_xmi_log_format", [
    ("xmi_type", "H"), ("xmi_size", "H"), ("__pad", "I"), ("xmi_id", "Q"),
    ("xmi_inode1", "Q"), ("xmi_inode2", "Q"), ("xmi_igen1", "I"), ("xmi_igen2", "I"),
    ("xmi_startoff1", "Q"), ("xmi_startoff2", "Q"), ("xmi_blockcount", "Q"),
    ("xmi_flags", "Q"), ("xmi_isize1", "q"), ("xmi_isize2", "q"),
], endian="<")
XMD_LOG_FORMAT = _intent_head("xmd", "xfs_xmd_log_format", None, "xmd_xmi_id")

ATTRI_LOG_FORMAT = Layout("xfs_attri_log_format", [
    ("alfi_type", "H"), ("alfi_size", "H"), ("alfi_igen", "I"), ("alfi_id", "Q"),
    ("alfi_ino", "Q"), ("alfi_op_flags", "I"), ("alfi_name_len", "I"),
    ("alfi_value_len", "I"), ("alfi_attr_filter", "I"),
], endian="<")
# the same 40 bytes as a PPTR_REPLACE intent reads them: alfi_name_len is a
# union whose two 16-bit halves are the old and the new name lengths
ATTRI_REPLACE_LOG_FORMAT = Layout("xfs_attri_log_format_pptr_replace", [
    ("alfi_type", "H"), ("alfi_size", "H"), ("alfi_igen", "I"), ("alfi_id", "Q"),
    ("alfi_ino", "Q"), ("alfi_op_flags", "I"), ("alfi_old_name_len", "H"),
    ("alfi_new_name_len", "H"), ("alfi_value_len", "I"), ("alfi_attr_filter", "I"),
], endian="<")
ATTRD_LOG_FORMAT = _intent_head("alfd", "xfs_attrd_log_format", None, "alfd_alf_id")

# rmap intent types (me_flags low byte) and flags
RMAP_TYPE_NAMES = {1: "map", 2: "map_shared", 3: "unmap", 4: "unmap_shared",
                   5: "convert", 6: "convert_shared", 7: "alloc", 8: "free"}
XFS_RMAP_EXTENT_TYPE_MASK = 0xFF
XFS_RMAP_EXTENT_ATTR_FORK = 1 << 31
XFS_RMAP_EXTENT_BMBT_BLOCK = 1 << 30
XFS_RMAP_EXTENT_UNWRITTEN = 1 << 29
# refcount intent types (pe_flags low byte)
REFCOUNT_TYPE_NAMES = {1: "increase", 2: "decrease", 3: "alloc_cow", 4: "free_cow"}
XFS_REFCOUNT_EXTENT_TYPE_MASK = 0xFF
# bmap intent types (me_flags low byte) and flags
BMAP_TYPE_NAMES = {1: "map", 2: "unmap"}
XFS_BMAP_EXTENT_TYPE_MASK = 0xFF
XFS_BMAP_EXTENT_ATTR_FORK = 1 << 31
XFS_BMAP_EXTENT_UNWRITTEN = 1 << 30
XFS_BMAP_EXTENT_REALTIME = 1 << 29
# xattr intent operations (alfi_op_flags low byte)
XFS_ATTRI_OP_FLAGS_SET = 1
XFS_ATTRI_OP_FLAGS_REMOVE = 2
XFS_ATTRI_OP_FLAGS_REPLACE = 3
XFS_ATTRI_OP_FLAGS_PPTR_SET = 4
XFS_ATTRI_OP_FLAGS_PPTR_REMOVE = 5
XFS_ATTRI_OP_FLAGS_PPTR_REPLACE = 6
ATTRI_OP_NAMES = {XFS_ATTRI_OP_FLAGS_SET: "set", XFS_ATTRI_OP_FLAGS_REMOVE: "remove",
                  XFS_ATTRI_OP_FLAGS_REPLACE: "replace",
                  XFS_ATTRI_OP_FLAGS_PPTR_SET: "pptr_set",
                  XFS_ATTRI_OP_FLAGS_PPTR_REMOVE: "pptr_remove",
                  XFS_ATTRI_OP_FLAGS_PPTR_REPLACE: "pptr_replace"}
XFS_ATTRI_OP_FLAGS_TYPE_MASK = 0xFF
# alfi_attr_filter: the namespace of the attribute (xfs_da_format.h bits)
ATTR_FILTER_NAMES = ((1 << 1, "root"), (1 << 2, "secure"), (1 << 3, "parent"),
                     (1 << 7, "incomplete"))
# exchange-mapping flags
XFS_EXCHMAPS_ATTR_FORK = 1 << 0
XFS_EXCHMAPS_SET_SIZES = 1 << 1
XFS_EXCHMAPS_INO1_WRITTEN = 1 << 2
XFS_EXCHMAPS_CLEAR_INO1_REFLINK = 1 << 3
XFS_EXCHMAPS_CLEAR_INO2_REFLINK = 1 << 4
EXCHMAPS_FLAG_NAMES = ((XFS_EXCHMAPS_ATTR_FORK, "ATTR_FORK"),
                       (XFS_EXCHMAPS_SET_SIZES, "SET_SIZES"),
                       (XFS_EXCHMAPS_INO1_WRITTEN, "INO1_WRITTEN"),
                       (XFS_EXCHMAPS_CLEAR_INO1_REFLINK, "CLEAR_INO1_REFLINK"),
                       (XFS_EXCHMAPS_CLEAR_INO2_REFLINK, "CLEAR_INO2_REFLINK"))


def attri_format(region) -> dict:
    """An ATTRI's format region with the lengths of the regions after it:
    ``name_len``, ``new_name_len``, ``value_len``, ``new_value_len``.  A
    PPTR_REPLACE intent reads alfi_name_len as two 16-bit lengths (old and
    new name) and logs the value twice (old and new, same length)."""
    f = ATTRI_LOG_FORMAT.unpack(region)
    if f["alfi_op_flags"] & XFS_ATTRI_OP_FLAGS_TYPE_MASK == XFS_ATTRI_OP_FLAGS_PPTR_REPLACE:
        r = ATTRI_REPLACE_LOG_FORMAT.unpack(region)
        f.update(alfi_old_name_len=r["alfi_old_name_len"],
                 alfi_new_name_len=r["alfi_new_name_len"],
                 name_len=r["alfi_old_name_len"], new_name_len=r["alfi_new_name_len"],
                 value_len=f["alfi_value_len"], new_value_len=f["alfi_value_len"])
    else:
        f.update(name_len=f["alfi_name_len"], new_name_len=0,
                 value_len=f["alfi_value_len"], new_value_len=0)
    return f


def attri_region_roles(f: dict) -> list:
    """The roles of an ATTRI's regions after the format region, in log
    order: ``name``, ``newname``, ``value``, ``newvalue`` (each present when
    its length is not zero)."""
    return [role for role, n in (("name", f["name_len"]), ("newname", f["new_name_len"]),
                                 ("value", f["value_len"]), ("newvalue", f["new_value_len"]))
            if n]


# -- quota items ---------------------------------------------------------------------------
DQ_LOGFORMAT = Layout("xfs_dq_logformat", [
    ("qlf_type", "H"), ("qlf_size", "H"), ("qlf_id", "I"), ("qlf_blkno", "q"),
    ("qlf_len", "i"), ("qlf_boffset", "I"),
], endian="<")
QOFF_LOGFORMAT = Layout("xfs_qoff_logformat", [
    ("qf_type", "H"), ("qf_size", "H"), ("qf_flags", "I"), ("qf_pad", "12s"),
], endian="<")
XFS_DQUOT_MAGIC = 0x4451                # "DQ"
XFS_DQ_USER = 0x01
XFS_DQ_PROJ = 0x02
XFS_DQ_GROUP = 0x04
XFS_UQUOTA_ACCT = 0x0001
XFS_UQUOTA_ENFD = 0x0002
XFS_UQUOTA_CHKD = 0x0004
XFS_PQUOTA_ACCT = 0x0008
XFS_OQUOTA_ENFD = 0x0010
XFS_OQUOTA_CHKD = 0x0020
XFS_GQUOTA_ACCT = 0x0040
XFS_GQUOTA_ENFD = 0x0080
XFS_GQUOTA_CHKD = 0x0100
XFS_PQUOTA_ENFD = 0x0200
XFS_PQUOTA_CHKD = 0x0400


# -- LSNs --------------------------------------------------------------------------------
def lsn(cycle: int, block: int) -> int:
    """xlog_assign_lsn: cycle in the high 32 bits, log block in the low."""
    return (cycle << 32) | block


def cycle_lsn(value: int) -> int:
    return (value >> 32) & 0xFFFFFFFF


def block_lsn(value: int) -> int:
    return value & 0xFFFFFFFF


def lsn_str(value: int) -> str:
    return f"{cycle_lsn(value)}/{block_lsn(value)}"


NULLCOMMITLSN = 0xFFFFFFFFFFFFFFFF


# -- sectors, header blocks and cycle stamping ------------------------------------------
def get_cycle(sector) -> int:
    """xlog_get_cycle: the cycle number a log sector carries (the second
    word of a record header, the first word of any other sector)."""
    word = int.from_bytes(sector[0:4], "big")
    if word == XLOG_HEADER_MAGIC_NUM:
        return int.from_bytes(sector[4:8], "big")
    return word


def sector_cycles(data, count: int) -> list:
    """get_cycle of each of the first ``count`` 512-byte sectors of
    ``data``, taken a word every 512 bytes at once rather than a sector at a
    time (the log head's search looks at thousands)."""
    count = min(count, len(data) // 512)
    words = memoryview(data)[:count * 512].cast("I")
    first = array("I", words[0::128].tobytes())
    if sys.byteorder == "little":
        first.byteswap()
    cycles = first.tolist()
    if XLOG_HEADER_MAGIC_NUM in cycles:
        second = array("I", words[1::128].tobytes())
        if sys.byteorder == "little":
            second.byteswap()
        for j, c in enumerate(cycles):
            if c == XLOG_HEADER_MAGIC_NUM:
                cycles[j] = second[j]
    return cycles


def header_blocks(h_version: int, h_size: int) -> int:
    """Sectors a record header occupies (xlog_logrec_hblks): one, plus one
    extended header per further 32 KiB of iclog for v2 logs."""
    if h_version & XLOG_VERSION_2 and h_size > XLOG_HEADER_CYCLE_SIZE:
        return -(-h_size // XLOG_HEADER_CYCLE_SIZE)
    return 1


def record_blocks(h_len: int) -> int:
    """Sectors the body of a record of ``h_len`` bytes occupies (BTOBB)."""
    return (h_len + BBSIZE - 1) >> BBSHIFT


def _cycle_slot(i: int) -> int:
    """Byte offset, within the header blocks, of the word that saves the
    first word of body sector ``i``."""
    j, k = divmod(i, XLOG_CYCLE_DATA_SIZE)
    if j == 0:
        return H_CYCLE_DATA_OFF + 4 * k
    return j * BBSIZE + 4 + 4 * k


def stamp_cycles(hdr: bytearray, body: bytearray, cycle: int) -> None:
    """Writer side: save the first word of every body sector in the header
    (``h_cycle_data``, then the extended headers' ``xh_cycle_data``) and
    replace it with ``cycle``; also stamps ``xh_cycle`` in every extended
    header present.  ``hdr`` holds all the record's header sectors."""
    nsect = record_blocks(len(body))
    need = 1 + (nsect - 1) // XLOG_CYCLE_DATA_SIZE if nsect else 1
    if len(hdr) < need * BBSIZE:
        raise ValueError(f"{nsect} body sectors need {need} header sectors")
    cyc = cycle.to_bytes(4, "big")
    for i in range(nsect):
        pos = i << BBSHIFT
        slot = _cycle_slot(i)
        hdr[slot:slot + 4] = body[pos:pos + 4]
        body[pos:pos + 4] = cyc
    for j in range(1, len(hdr) // BBSIZE):
        hdr[j * BBSIZE:j * BBSIZE + 4] = cyc


def unstamp_cycles(hdr, body: bytearray, h_len: int | None = None) -> None:
    """Reader side (xlog_unpack_data): put back the first word of every body
    sector from the header's cycle data.  ``h_len`` bounds the sectors
    restored (the kernel restores BTOBB(h_len) sectors)."""
    nsect = record_blocks(len(body) if h_len is None else h_len)
    nsect = min(nsect, len(body) >> BBSHIFT)
    parsers.log_unstamp_cycles(hdr, body, nsect, H_CYCLE_DATA_OFF, XLOG_CYCLE_DATA_SIZE)


# -- record CRC ------------------------------------------------------------------------------
def rec_crc(hdr, body, h_len: int | None = None) -> int:
    """The record CRC as the kernel computes it (xlog_cksum): CRC-32C over
    the first XLOG_REC_SIZE bytes of the header with h_crc taken as zero,
    then XLOG_REC_EXT_SIZE bytes of each extended header that covers the
    body (ceil(h_len / 32 KiB) - 1 of them), then the h_len body bytes as
    they are on disk (cycle-stamped)."""
    if h_len is None:
        h_len = REC_HEADER.struct.unpack_from(hdr, 0)[3]
    head = bytearray(hdr[:XLOG_REC_SIZE])
    head[H_CRC_OFF:H_CRC_OFF + 4] = b"\0\0\0\0"
    crc = parsers.crc32c(bytes(head))
    xheads = -(-h_len // XLOG_HEADER_CYCLE_SIZE)
    for j in range(1, xheads):
        crc = parsers.crc32c(bytes(hdr[j * BBSIZE:j * BBSIZE + XLOG_REC_EXT_SIZE]), crc)
    return parsers.crc32c(bytes(body[:h_len]), crc)


def stored_rec_crc(hdr) -> int:
    return int.from_bytes(hdr[H_CRC_OFF:H_CRC_OFF + 4], "little")


def rec_crc_ok(hdr, body, h_len: int | None = None) -> bool:
    """True when the stored record CRC matches, or is zero (mkfs writes its
    unmount record with no CRC, and the kernel accepts that)."""
    stored = stored_rec_crc(hdr)
    return stored == 0 or stored == rec_crc(hdr, body, h_len)


def set_rec_crc(hdr: bytearray, body, h_len: int | None = None) -> None:
    hdr[H_CRC_OFF:H_CRC_OFF + 4] = rec_crc(hdr, body, h_len).to_bytes(4, "little")


def flag_names(value: int, names) -> str:
    out = [n for bit, n in names if value & bit]
    return "|".join(out) if out else "0"
