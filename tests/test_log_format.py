"""The log's on-disk definitions: sizes against the kernel headers (see
/work/shared/reference/log_offsets.txt), cycle stamping and the record CRC."""
import random

import pytest

from fstool.format import constants as C
from fstool.format import log as L
from fstool.format.structs import PARENT_REC

SIZES = {
    L.REC_HEADER: 328, L.REC_EXT_HEADER: 260, L.OP_HEADER: 12, L.TRANS_HEADER: 16,
    L.UNMOUNT_LOG_FORMAT: 8, L.BUF_LOG_FORMAT: 88, L.INODE_LOG_FORMAT: 56,
    L.INODE_LOG_FORMAT_32: 52, L.LOG_DINODE: 176, L.ICREATE_LOG: 28,
    L.EFI_LOG_FORMAT: 16, L.EFD_LOG_FORMAT: 16, L.EXTENT_64: 16, L.EXTENT_32: 12,
    L.RUI_LOG_FORMAT: 16, L.RUD_LOG_FORMAT: 16, L.MAP_EXTENT: 32, L.CUI_LOG_FORMAT: 16,
    L.CUD_LOG_FORMAT: 16, L.PHYS_EXTENT: 16, L.BUI_LOG_FORMAT: 16, L.BUD_LOG_FORMAT: 16,
    L.XMI_LOG_FORMAT: 88, L.XMD_LOG_FORMAT: 16, L.ATTRI_LOG_FORMAT: 40,
    L.ATTRD_LOG_FORMAT: 16, L.DQ_LOGFORMAT: 24, L.QOFF_LOGFORMAT: 20,
    L.ATTRI_REPLACE_LOG_FORMAT: 40,
}


@pytest.mark.parametrize("layout", list(SIZES), ids=lambda x: x.name)
def test_sizes(layout):
    assert layout.size == SIZES[layout]


def test_offsets_match_kernel():
    assert L.REC_HEADER.offset("h_cycle_data") == 44
    assert L.REC_HEADER.offset("h_fmt") == 300
    assert L.REC_HEADER.offset("h_size") == 320
    assert L.BUF_LOG_FORMAT.offset("blf_data_map") == 20
    assert L.INODE_LOG_FORMAT.offset("ilf_blkno") == 40
    assert L.LOG_DINODE.offset("di_next_unlinked") == 96
    assert L.LOG_DINODE.offset("di_crtime") == 144


def test_attri_and_xmi_offsets_match_kernel():
    """xfs_attri_log_format / xfs_xmi_log_format field offsets, and the
    union that a PPTR_REPLACE intent reads as two 16-bit name lengths."""
    assert L.ATTRI_LOG_FORMAT.offset("alfi_op_flags") == 24
    assert L.ATTRI_LOG_FORMAT.offset("alfi_attr_filter") == 36
    assert L.ATTRI_REPLACE_LOG_FORMAT.offset("alfi_new_name_len") == 30
    assert L.XMI_LOG_FORMAT.offset("xmi_igen1") == 32
    assert L.XMI_LOG_FORMAT.offset("xmi_isize2") == 80
    assert PARENT_REC.size == 12


def test_attri_region_lengths():
    base = {"alfi_type": L.XFS_LI_ATTRI, "alfi_size": 5, "alfi_igen": 7, "alfi_id": 1,
            "alfi_ino": 131, "alfi_attr_filter": C.XFS_ATTR_PARENT}
    raw = L.ATTRI_REPLACE_LOG_FORMAT.pack(dict(
        base, alfi_op_flags=L.XFS_ATTRI_OP_FLAGS_PPTR_REPLACE, alfi_old_name_len=3,
        alfi_new_name_len=9, alfi_value_len=12))
    f = L.attri_format(raw)
    assert (f["name_len"], f["new_name_len"], f["value_len"], f["new_value_len"]) == \
        (3, 9, 12, 12)
    assert L.attri_region_roles(f) == ["name", "newname", "value", "newvalue"]
    raw = L.ATTRI_LOG_FORMAT.pack(dict(
        base, alfi_size=2, alfi_op_flags=L.XFS_ATTRI_OP_FLAGS_REMOVE,
        alfi_name_len=(9 << 16) | 3, alfi_value_len=0))
    f = L.attri_format(raw)
    assert (f["name_len"], f["new_name_len"], f["value_len"]) == ((9 << 16) | 3, 0, 0)
    assert L.attri_region_roles(f) == ["name"]


def test_pack_unpack_round_trip_both_endians():
    d = {"blf_type": L.XFS_LI_BUF, "blf_size": 3, "blf_flags": L.blft_to_flags(0, 5),
         "blf_len": 8, "blf_blkno": 123456, "blf_map_size": 1,
         "blf_data_map": [5] + [0] * 16}
    raw = L.BUF_LOG_FORMAT.pack(d)
    assert raw[:2] == L.XFS_LI_BUF.to_bytes(2, "little")
    assert L.BUF_LOG_FORMAT.unpack(raw) == d
    assert L.blft_from_flags(d["blf_flags"]) == 5
    c = L.BUF_LOG_FORMAT.parse_container(raw)
    assert c.blf_blkno == 123456
    ic = {"icl_type": L.XFS_LI_ICREATE, "icl_size": 1, "icl_ag": 2, "icl_agbno": 8,
          "icl_count": 64, "icl_isize": 512, "icl_length": 8, "icl_gen": 77}
    raw = L.pack_icreate(ic)
    assert raw[:2] == L.XFS_LI_ICREATE.to_bytes(2, "little")
    assert raw[4:8] == (2).to_bytes(4, "big")
    assert L.unpack_icreate(raw) == ic


def test_map_runs_and_make_map():
    words, size = L.make_map([0, 1, 2, 5, 31, 32, 33, 100])
    assert size == 4
    assert L.map_runs(words, size) == [(0, 3), (5, 1), (31, 3), (100, 1)]
    assert L.map_runs([0] * 17, 17) == []


@pytest.mark.parametrize("nsect", [1, 63, 64, 65, 200, 512])
def test_stamp_unstamp_round_trip(nsect):
    rng = random.Random(nsect)
    body = bytearray(rng.randbytes(nsect * 512))
    orig = bytes(body)
    h_len = nsect * 512 - rng.randrange(0, 8) * 4
    h_size = max(32768, -(-nsect * 512 // 32768) * 32768)
    hblks = L.header_blocks(2, h_size)
    hdr = bytearray(hblks * 512)
    hdr[:L.REC_HEADER.size] = L.REC_HEADER.pack({
        "h_magicno": L.XLOG_HEADER_MAGIC_NUM, "h_cycle": 7, "h_version": 2,
        "h_len": h_len, "h_lsn": L.lsn(7, 10), "h_tail_lsn": L.lsn(7, 2),
        "h_crc": b"\0" * 4, "h_num_logops": 1, "h_fmt": L.XLOG_FMT_LINUX_LE,
        "h_size": h_size})
    L.stamp_cycles(hdr, body, 7)
    for i in range(nsect):
        assert L.get_cycle(body[i * 512:i * 512 + 4]) == 7
    L.set_rec_crc(hdr, body, h_len)
    assert L.rec_crc_ok(hdr, body, h_len)
    body2 = bytearray(body)
    body2[h_len - 1] ^= 1
    assert not L.rec_crc_ok(hdr, body2, h_len)
    if hblks > 1 and h_len > 32768:
        hdr2 = bytearray(hdr)
        hdr2[512 + 100] ^= 1           # an extended header's cycle data is covered
        assert not L.rec_crc_ok(hdr2, body, h_len)
    L.unstamp_cycles(hdr, body, h_len)
    assert bytes(body) == orig


def test_lsn_helpers():
    v = L.lsn(3, 1000)
    assert L.cycle_lsn(v) == 3 and L.block_lsn(v) == 1000
    assert L.lsn_str(v) == "3/1000"


def test_sector_cycles_is_get_cycle_of_each_sector():
    """sector_cycles (the log head's search, a word every 512 bytes at
    once) gives get_cycle of each sector: record headers (their second
    word, which may itself be the magic number) and plain sectors alike,
    from bytes and bytearrays, a count below the data's sectors and one
    above them."""
    import random

    from fstool.format import log as LF
    rng = random.Random(5)
    for _ in range(300):
        n = rng.randrange(0, 30)
        secs = []
        for _j in range(n):
            s = bytearray(rng.randbytes(512))
            kind = rng.random()
            if kind < 0.3:
                s[0:4] = LF.XLOG_HEADER_MAGIC_NUM.to_bytes(4, "big")
                s[4:8] = rng.choice((0, 1, 2, LF.XLOG_HEADER_MAGIC_NUM,
                                     rng.randrange(1 << 32))).to_bytes(4, "big")
            elif kind < 0.7:
                s[0:4] = rng.choice((0, 1, 2)).to_bytes(4, "big")
            secs.append(bytes(s))
        data = b"".join(secs)
        want = [LF.get_cycle(data[j * 512:j * 512 + 8]) for j in range(n)]
        assert LF.sector_cycles(data, n) == want
        assert LF.sector_cycles(bytearray(data), n + 3) == want
        cut = rng.randrange(n + 1)
        assert LF.sector_cycles(data, cut) == want[:cut]
