"""Our header layouts against the offsets compiled from the xfsprogs headers
(fixtures/reference/ondisk_offsets.txt and da_offsets.txt, copies of the
shared reference kept beside the checkout, so the test runs wherever the
repository is checked out)."""
import pathlib
import re

import pytest

from fstool.format import constants as C
from fstool.format import parent as P
from fstool.format import structs as S

ROOT = pathlib.Path(__file__).resolve().parents[1]
REF = ROOT / "fixtures" / "reference"
SHARED = ROOT.parent / "shared" / "reference"
NAMES = ("ondisk_offsets.txt", "da_offsets.txt")

# our layout -> the reference struct it must match
CASES = [
    (S.SB, "xfs_dsb"),
    (S.AGF, "xfs_agf"),
    (S.AGI, "xfs_agi"),
    (S.AGFL, "xfs_agfl"),
    (S.DINODE, "xfs_dinode"),
    (S.DIR3_BLK_HDR, "xfs_dir3_blk_hdr"),
    (S.DA3_BLKINFO, "xfs_da3_blkinfo"),
    (S.ATTR3_RMT_HDR, "xfs_attr3_rmt_hdr"),
    (S.DA3_NODE_HDR, "xfs_da3_node_hdr"),
    (S.DA_NODE_ENTRY, "xfs_da_node_entry"),
    (S.ATTR_LEAF_ENTRY, "xfs_attr_leaf_entry"),
    (S.DSYMLINK_HDR, "xfs_dsymlink_hdr"),
    (S.DIR3_DATA_HDR, "xfs_dir3_data_hdr"),
    (S.DIR2_DATA_FREE, "xfs_dir2_data_free"),
    (S.DIR2_BLOCK_TAIL, "xfs_dir2_block_tail"),
    (S.DIR2_LEAF_ENTRY, "xfs_dir2_leaf_entry"),
    (S.DIR2_LEAF_TAIL, "xfs_dir2_leaf_tail"),
    (S.DIR3_LEAF_HDR, "xfs_dir3_leaf_hdr"),
    (S.DIR3_FREE_HDR, "xfs_dir3_free_hdr"),
    (S.DIR2_SF_ENTRY, "xfs_dir2_sf_entry"),
    (S.ATTR3_LEAF_HDR, "xfs_attr3_leaf_hdr"),
    (S.ATTR_LEAF_MAP, "xfs_attr_leaf_map"),
]

# the fixed part of a structure whose C form ends in a name (and is padded
# past it): each field at the offset the kernel's struct gives it
PREFIXES = [
    (S.DIR2_DATA_ENTRY, "xfs_dir2_data_entry"),
    (S.DIR2_DATA_UNUSED, "xfs_dir2_data_unused"),
    (S.DIR2_SF_HDR, "xfs_dir2_sf_hdr"),
    (S.ATTR_LEAF_NAME_LOCAL, "xfs_attr_leaf_name_local"),
    (S.ATTR_LEAF_NAME_REMOTE, "xfs_attr_leaf_name_remote"),
]


def parse_reference():
    structs = {}
    for name in NAMES:
        cur = None
        for line in (REF / name).read_text().splitlines():
            m = re.match(r"== struct (\S+) size=(\d+)", line)
            if m:
                cur = structs.setdefault(m.group(1), {"size": int(m.group(2)), "fields": {}})
                continue
            m = re.match(r"\s+(\d+)\s+(?:\(nested\) )?(\w+)", line)
            if m and cur is not None:
                cur["fields"].setdefault(m.group(2), int(m.group(1)))
    return structs


@pytest.fixture(scope="module")
def reference():
    return parse_reference()


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"no shared reference at {SHARED} to compare the copy with")
@pytest.mark.parametrize("name", NAMES)
def test_reference_copy_is_current(name):
    assert (REF / name).read_bytes() == (SHARED / name).read_bytes()


@pytest.mark.parametrize("layout,refname", CASES, ids=[c[1] for c in CASES])
def test_layout_matches_kernel_offsets(reference, layout, refname):
    ref = reference[refname]
    assert layout.size == ref["size"]
    checked = 0
    for fname, _code in layout.fields:
        if fname in ref["fields"]:
            assert layout.offset(fname) == ref["fields"][fname], fname
            checked += 1
    assert checked >= len(ref["fields"]) // 2, "too few fields matched by name"


@pytest.mark.parametrize("layout,refname", PREFIXES, ids=[c[1] for c in PREFIXES])
def test_prefix_layout_matches_kernel_offsets(reference, layout, refname):
    ref = reference[refname]["fields"]
    for fname, _code in layout.fields:
        assert layout.offset(fname) == ref[fname], fname
    assert layout.size <= reference[refname]["size"]


def test_btree_block_header_offsets(reference):
    # the reference gives the short/long header part after magic/level/numrecs
    shdr = reference["xfs_btree_block_shdr"]["fields"]
    lhdr = reference["xfs_btree_block_lhdr"]["fields"]
    for name, off in shdr.items():
        assert S.BTREE_SBLOCK.offset(name) == 8 + off, name
    for name, off in lhdr.items():
        assert S.BTREE_LBLOCK.offset(name) == 8 + off, name


def test_unpack_roundtrip():
    raw = bytes(range(256)) * 2
    d = S.AGI.unpack(raw)
    assert len(d["agi_unlinked"]) == 64
    c = S.AGI.parse_container(raw)
    for name, _ in S.AGI.fields:
        assert c[name] == d[name], name


def test_parent_rec_codec():
    assert P.XFS_PARENT_REC_SIZE == 12
    raw = P.pack_rec(0x0123456789ABCDEF, 0xCAFEBABE)
    assert raw == bytes.fromhex("0123456789abcdef cafebabe")
    assert P.unpack_rec(raw) == (0x0123456789ABCDEF, 0xCAFEBABE)
    for bad in (raw[:11], raw + b"\0", b""):
        with pytest.raises(ValueError):
            P.unpack_rec(bad)
    assert P.is_parent(C.XFS_ATTR_PARENT | C.XFS_ATTR_LOCAL)
    assert not P.is_parent(C.XFS_ATTR_LOCAL)
    assert not P.is_parent(C.XFS_ATTR_ROOT | C.XFS_ATTR_LOCAL)


@pytest.mark.parametrize("layout,refname", CASES, ids=[c[1] for c in CASES])
def test_field_accessors_agree_with_the_whole_struct(reference, layout, refname):
    """Each Field (the one offset table for in-place reads and patches) sits
    where the kernel's header puts it, and reads and writes exactly the
    value the whole-structure unpack and pack see, touching no other byte."""
    ref = reference[refname]["fields"]
    for i, (fname, _code) in enumerate(layout.fields):
        f = layout.field(fname)
        if fname in ref:
            assert f.offset == ref[fname], fname
        buf = bytearray(range(256)) * ((layout.size + 8) // 256 + 1)
        before = bytes(buf)
        whole = layout.unpack(buf, 4)
        assert layout.get(buf, fname, 4) == (tuple(whole[fname]) if isinstance(whole[fname], list)
                                             else whole[fname]), fname
        new = bytes(f.size) if isinstance(whole[fname], bytes) else \
            (tuple(0 for _ in whole[fname]) if isinstance(whole[fname], list) else 0)
        layout.put(buf, fname, new, 4)
        assert layout.unpack(buf, 4) == dict(whole, **{fname: list(new) if isinstance(new, tuple)
                                                       else new}), fname
        changed = [k for k in range(len(buf)) if buf[k] != before[k]]
        assert changed and 4 + f.offset <= min(changed) and max(changed) < 4 + f.offset + f.size
        assert f.raw(before, 4) == before[4 + f.offset:4 + f.offset + f.size]


def test_dinode_indexes_are_the_unpacked_positions():
    values = S.DINODE.struct.unpack(bytes(range(176)))
    at = S.DINODE.indexes()
    assert sorted(at) == sorted(f for f, _c in S.DINODE.fields)
    for fname, i in at.items():
        assert values[i] == S.DINODE.get(bytes(range(176)), fname)
