"""The structure verifiers of the da-btree's blocks (fstool.fs.dabtree.
node_faults, fstool.fs.attrleaf.leaf_faults) return every fault they find,
in the order the kernel's verifier meets them (check and the read path take
the first); a sound block has none."""
from fstool.format import constants as C
from fstool.format.structs import ATTR3_LEAF_HDR, DA3_NODE_HDR
from fstool.fs import attrleaf, dabtree

BS = 4096
MAX = (BS - dabtree.HDR) // dabtree.ENTRY


def node(count: int, level: int) -> bytearray:
    buf = bytearray(BS)
    DA3_NODE_HDR.struct.pack_into(buf, 0, 0, 0, C.XFS_DA3_NODE_MAGIC, 0, 0, 0, 0, b"", 0,
                                  count, level, 0)
    return buf


def test_node_faults_lists_every_fault():
    assert dabtree.node_faults(node(3, 1), MAX) == []
    assert [f for f, _why in dabtree.node_faults(node(0, 1), MAX)] == ["count"]
    assert [f for f, _why in dabtree.node_faults(node(3, 0), MAX)] == ["level"]
    both = dabtree.node_faults(node(MAX + 1, C.XFS_DA_NODE_MAXDEPTH + 1), MAX)
    assert [f for f, _why in both] == ["level", "count"]


def leaf(freemap=(0, 0), count: int = 0, firstused: int = BS) -> bytearray:
    buf = bytearray(BS)
    fields = ATTR3_LEAF_HDR.unpack(bytes(ATTR3_LEAF_HDR.size))
    fields.update(magic=C.XFS_ATTR3_LEAF_MAGIC, count=count, firstused=firstused & 0xFFFF,
                  freemap=[freemap[0], freemap[1], 0, 0, 0, 0])
    buf[:ATTR3_LEAF_HDR.size] = ATTR3_LEAF_HDR.pack(fields)
    return buf


def test_leaf_faults_lists_every_fault():
    assert attrleaf.leaf_faults(leaf(), BS) == []
    # the count runs into the names, and the free map is odd: both said
    both = attrleaf.leaf_faults(leaf(freemap=(81, 4), count=600, firstused=200), BS)
    assert [f for f, _why in both] == ["count", "freemap"]
    only_map = attrleaf.leaf_faults(leaf(freemap=(BS, 8)), BS)
    assert [f for f, _why in only_map] == ["freemap"]
