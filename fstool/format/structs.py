"""Header layouts of XFS v5 metadata, field names as in xfs_format.h.

Offsets were checked against the kernel headers (see the size asserts in
tests/test_format.py); every structure here is big-endian on disk.
"""
from .layout import Layout

SB = Layout("xfs_dsb", [
    ("sb_magicnum", "I"), ("sb_blocksize", "I"), ("sb_dblocks", "Q"),
    ("sb_rblocks", "Q"), ("sb_rextents", "Q"), ("sb_uuid", "16s"),
    ("sb_logstart", "Q"), ("sb_rootino", "Q"), ("sb_rbmino", "Q"),
    ("sb_rsumino", "Q"), ("sb_rextsize", "I"), ("sb_agblocks", "I"),
    ("sb_agcount", "I"), ("sb_rbmblocks", "I"), ("sb_logblocks", "I"),
    ("sb_versionnum", "H"), ("sb_sectsize", "H"), ("sb_inodesize", "H"),
    ("sb_inopblock", "H"), ("sb_fname", "12s"), ("sb_blocklog", "B"),
    ("sb_sectlog", "B"), ("sb_inodelog", "B"), ("sb_inopblog", "B"),
    ("sb_agblklog", "B"), ("sb_rextslog", "B"), ("sb_inprogress", "B"),
    ("sb_imax_pct", "B"), ("sb_icount", "Q"), ("sb_ifree", "Q"),
    ("sb_fdblocks", "Q"), ("sb_frextents", "Q"), ("sb_uquotino", "Q"),
    ("sb_gquotino", "Q"), ("sb_qflags", "H"), ("sb_flags", "B"),
    ("sb_shared_vn", "B"), ("sb_inoalignmt", "I"), ("sb_unit", "I"),
    ("sb_width", "I"), ("sb_dirblklog", "B"), ("sb_logsectlog", "B"),
    ("sb_logsectsize", "H"), ("sb_logsunit", "I"), ("sb_features2", "I"),
    ("sb_bad_features2", "I"), ("sb_features_compat", "I"),
    ("sb_features_ro_compat", "I"), ("sb_features_incompat", "I"),
    ("sb_features_log_incompat", "I"), ("sb_crc", "I"),
    ("sb_spino_align", "I"), ("sb_pquotino", "Q"), ("sb_lsn", "Q"),
    ("sb_meta_uuid", "16s"),
])

AGF = Layout("xfs_agf", [
    ("agf_magicnum", "I"), ("agf_versionnum", "I"), ("agf_seqno", "I"),
    ("agf_length", "I"),
    # agf_roots[] / agf_levels[] indexed by bno, cnt, rmap
    ("agf_roots", "3I"), ("agf_levels", "3I"),
    ("agf_flfirst", "I"), ("agf_fllast", "I"), ("agf_flcount", "I"),
    ("agf_freeblks", "I"), ("agf_longest", "I"), ("agf_btreeblks", "I"),
    ("agf_uuid", "16s"), ("agf_rmap_blocks", "I"), ("agf_refcount_blocks", "I"),
    ("agf_refcount_root", "I"), ("agf_refcount_level", "I"),
    ("agf_spare64", "14Q"), ("agf_lsn", "Q"), ("agf_crc", "I"), ("agf_spare2", "I"),
])

AGI = Layout("xfs_agi", [
    ("agi_magicnum", "I"), ("agi_versionnum", "I"), ("agi_seqno", "I"),
    ("agi_length", "I"), ("agi_count", "I"), ("agi_root", "I"),
    ("agi_level", "I"), ("agi_freecount", "I"), ("agi_newino", "I"),
    ("agi_dirino", "I"), ("agi_unlinked", "64I"), ("agi_uuid", "16s"),
    ("agi_crc", "I"), ("agi_pad32", "I"), ("agi_lsn", "Q"),
    ("agi_free_root", "I"), ("agi_free_level", "I"),
    ("agi_iblocks", "I"), ("agi_fblocks", "I"),
])

AGFL = Layout("xfs_agfl", [
    ("agfl_magicnum", "I"), ("agfl_seqno", "I"), ("agfl_uuid", "16s"),
    ("agfl_lsn", "Q"), ("agfl_crc", "I"),
])

# The v3 inode core.  di_big_nextents overlays di_v3_pad (bytes 24..31) and
# di_big_anextents overlays di_nextents (76..79) when the inode has NREXT64;
# Inode decoding picks the right interpretation.
DINODE = Layout("xfs_dinode", [
    ("di_magic", "H"), ("di_mode", "H"), ("di_version", "B"), ("di_format", "B"),
    ("di_onlink", "H"), ("di_uid", "I"), ("di_gid", "I"), ("di_nlink", "I"),
    ("di_projid_lo", "H"), ("di_projid_hi", "H"), ("di_big_nextents", "Q"),
    ("di_atime", "Q"), ("di_mtime", "Q"), ("di_ctime", "Q"), ("di_size", "Q"),
    ("di_nblocks", "Q"), ("di_extsize", "I"), ("di_nextents", "I"),
    ("di_anextents", "H"), ("di_forkoff", "B"), ("di_aformat", "b"),
    ("di_dmevmask", "I"), ("di_dmstate", "H"), ("di_flags", "H"), ("di_gen", "I"),
    ("di_next_unlinked", "I"), ("di_crc", "I"), ("di_changecount", "Q"),
    ("di_lsn", "Q"), ("di_flags2", "Q"), ("di_cowextsize", "I"),
    ("di_pad2", "12s"), ("di_crtime", "Q"), ("di_ino", "Q"), ("di_uuid", "16s"),
])

BTREE_SBLOCK = Layout("xfs_btree_block_short", [
    ("bb_magic", "I"), ("bb_level", "H"), ("bb_numrecs", "H"),
    ("bb_leftsib", "I"), ("bb_rightsib", "I"), ("bb_blkno", "Q"),
    ("bb_lsn", "Q"), ("bb_uuid", "16s"), ("bb_owner", "I"), ("bb_crc", "I"),
])

BTREE_LBLOCK = Layout("xfs_btree_block_long", [
    ("bb_magic", "I"), ("bb_level", "H"), ("bb_numrecs", "H"),
    ("bb_leftsib", "Q"), ("bb_rightsib", "Q"), ("bb_blkno", "Q"),
    ("bb_lsn", "Q"), ("bb_uuid", "16s"), ("bb_owner", "Q"), ("bb_crc", "I"),
    ("bb_pad", "I"),
])

# Shared v5 header of directory data/block/free blocks
DIR3_BLK_HDR = Layout("xfs_dir3_blk_hdr", [
    ("magic", "I"), ("crc", "I"), ("blkno", "Q"), ("lsn", "Q"),
    ("uuid", "16s"), ("owner", "Q"),
])

# A v5 directory data block (XDD3) or single-block directory (XDB3): the
# block header, then the bestfree table, three (offset, length) pairs
# longest first (xfs_dir2_data_free)
DIR3_DATA_HDR = Layout("xfs_dir3_data_hdr", [
    ("magic", "I"), ("crc", "I"), ("blkno", "Q"), ("lsn", "Q"),
    ("uuid", "16s"), ("owner", "Q"), ("best_free", "6H"), ("pad", "I"),
])

DIR2_DATA_FREE = Layout("xfs_dir2_data_free", [("offset", "H"), ("length", "H")])

# the fixed part of a data entry: the name, the file type (ftype
# filesystems) and the 2-byte tag (the entry's own offset) follow, the
# whole rounded up to 8 bytes
DIR2_DATA_ENTRY = Layout("xfs_dir2_data_entry", [("inumber", "Q"), ("namelen", "B")])

# an unused region of a data block: FREETAG, its length; its last 2 bytes
# are the tag (its offset)
DIR2_DATA_UNUSED = Layout("xfs_dir2_data_unused", [("freetag", "H"), ("length", "H")])

# the last 8 bytes of a single-block directory; its leaf entries come
# right before them
DIR2_BLOCK_TAIL = Layout("xfs_dir2_block_tail", [("count", "I"), ("stale", "I")])

# a leaf entry (block tail, leaf1 and leafn blocks): the name's hash and
# its data entry's address in 8-byte units
DIR2_LEAF_ENTRY = Layout("xfs_dir2_leaf_entry", [("hashval", "I"), ("address", "I")])

# the last 4 bytes of a leaf1 block; bestcount 2-byte bests come right
# before them
DIR2_LEAF_TAIL = Layout("xfs_dir2_leaf_tail", [("bestcount", "I")])

# the shortform directory header: parent follows, 4 bytes (8 when
# i8count), then the entries: this, the name, the file type, the inumber
DIR2_SF_HDR = Layout("xfs_dir2_sf_hdr", [("count", "B"), ("i8count", "B")])
DIR2_SF_ENTRY = Layout("xfs_dir2_sf_entry", [("namelen", "B"), ("offset", "H")])

# the shortform attr fork: this header, then entries of this fixed part,
# the name and the value
ATTR_SF_HDR = Layout("xfs_attr_sf_hdr", [("totsize", "H"), ("count", "B"), ("padding", "B")])
ATTR_SF_ENTRY = Layout("xfs_attr_sf_entry", [("namelen", "B"), ("valuelen", "B"),
                                             ("flags", "B")])

# Shared v5 header of dir leaf, da node and attr leaf blocks
DA3_BLKINFO = Layout("xfs_da3_blkinfo", [
    ("forw", "I"), ("back", "I"), ("magic", "H"), ("pad", "H"),
    ("crc", "I"), ("blkno", "Q"), ("lsn", "Q"), ("uuid", "16s"), ("owner", "Q"),
])

# A v5 da-btree node block (directories and xattrs): the blkinfo, then
# count and level; xfs_da_node_entry pairs follow it
DA3_NODE_HDR = Layout("xfs_da3_node_hdr", [
    ("forw", "I"), ("back", "I"), ("magic", "H"), ("pad", "H"),
    ("crc", "I"), ("blkno", "Q"), ("lsn", "Q"), ("uuid", "16s"), ("owner", "Q"),
    ("__count", "H"), ("__level", "H"), ("__pad32", "I"),
])

DA_NODE_ENTRY = Layout("xfs_da_node_entry", [("hashval", "I"), ("before", "I")])

# A v5 directory leaf block (leaf1 or leafn): the blkinfo, then count and
# stale; the leaf entries follow it
DIR3_LEAF_HDR = Layout("xfs_dir3_leaf_hdr", [
    ("forw", "I"), ("back", "I"), ("magic", "H"), ("info_pad", "H"),
    ("crc", "I"), ("blkno", "Q"), ("lsn", "Q"), ("uuid", "16s"), ("owner", "Q"),
    ("count", "H"), ("stale", "H"), ("pad", "I"),
])

DIR3_FREE_HDR = Layout("xfs_dir3_free_hdr", [
    ("magic", "I"), ("crc", "I"), ("blkno", "Q"), ("lsn", "Q"),
    ("uuid", "16s"), ("owner", "Q"),
    ("firstdb", "I"), ("nvalid", "I"), ("nused", "I"), ("pad", "I"),
])

ATTR3_LEAF_HDR = Layout("xfs_attr3_leaf_hdr", [
    ("forw", "I"), ("back", "I"), ("magic", "H"), ("pad", "H"),
    ("crc", "I"), ("blkno", "Q"), ("lsn", "Q"), ("uuid", "16s"), ("owner", "Q"),
    ("count", "H"), ("usedbytes", "H"), ("firstused", "H"), ("holes", "B"),
    ("pad1", "B"), ("freemap", "6H"), ("pad2", "I"),
])

ATTR_LEAF_MAP = Layout("xfs_attr_leaf_map", [("base", "H"), ("size", "H")])

ATTR_LEAF_ENTRY = Layout("xfs_attr_leaf_entry", [
    ("hashval", "I"), ("nameidx", "H"), ("flags", "B"), ("pad2", "B"),
])

# the name part of an attr leaf entry: a local one holds the value after
# the name, a remote one points at the value's first block (the trailing
# one-byte arrays of the C structs are not part of these layouts)
ATTR_LEAF_NAME_LOCAL = Layout("xfs_attr_leaf_name_local", [("valuelen", "H"), ("namelen", "B")])
ATTR_LEAF_NAME_REMOTE = Layout("xfs_attr_leaf_name_remote", [
    ("valueblk", "I"), ("valuelen", "I"), ("namelen", "B"),
])

ATTR3_RMT_HDR = Layout("xfs_attr3_rmt_hdr", [
    ("rm_magic", "I"), ("rm_offset", "I"), ("rm_bytes", "I"), ("rm_crc", "I"),
    ("rm_uuid", "16s"), ("rm_owner", "Q"), ("rm_blkno", "Q"), ("rm_lsn", "Q"),
])

DSYMLINK_HDR = Layout("xfs_dsymlink_hdr", [
    ("sl_magic", "I"), ("sl_offset", "I"), ("sl_bytes", "I"), ("sl_crc", "I"),
    ("sl_uuid", "16s"), ("sl_owner", "Q"), ("sl_blkno", "Q"), ("sl_lsn", "Q"),
])

# the value of every parent-pointer attribute (fstool.format.parent)
PARENT_REC = Layout("xfs_parent_rec", [("p_ino", "Q"), ("p_gen", "I")])
