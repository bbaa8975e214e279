"""The one problem table: every finding `fstool check` can report.

code -> (severity, what it means).  docs/check-problems.md is generated from
this table (``python -m fstool.ops.problems``) and tests check it is current.
"""
ERROR, WARNING = "error", "warning"

PROBLEMS = {
    # superblocks and AG headers
    "SB_FEATURES": (ERROR, "the superblock sets feature bits fstool does not know"),
    "SB_SECONDARY": (ERROR, "a secondary superblock is unreadable or disagrees with the "
                     "primary on geometry"),
    "AG_HEADER": (ERROR, "an AGF, AGI or AGFL fails verification (magic, CRC, uuid, "
                  "sequence number, length)"),
    "AGFL_HEADER": (WARNING, "the AGFL header fails verification (xfs_repair rebuilds the "
                    "free list without reporting it)"),
    "AGFL_RING": (ERROR, "the AGF's free list indexes do not describe a valid ring"),
    "AGFL_BLOCK": (ERROR, "a free list block lies outside the AG or appears twice"),
    # btrees
    "BTREE_BLOCK": (ERROR, "a btree block fails verification or cannot be read"),
    "BTREE_LEVEL": (ERROR, "a btree block's level does not fit its place in the tree"),
    "BTREE_NUMRECS": (ERROR, "a btree block holds more records than fit, or fewer than "
                      "half full outside the root"),
    "BTREE_ORDER": (ERROR, "btree records or keys are out of order or overlap"),
    "BTREE_KEY": (ERROR, "a node key differs from the lowest key of the child it points to"),
    "BTREE_SIBLING": (ERROR, "sibling pointers do not chain the blocks of a level in order"),
    "BTREE_CYCLE": (ERROR, "a btree block is reached twice"),
    # free space
    "FREESP_MISMATCH": (ERROR, "the bnobt and the cntbt do not hold the same free extents"),
    "AGF_FREEBLKS": (ERROR, "agf_freeblks differs from the free space in the btrees"),
    "AGF_LONGEST": (ERROR, "agf_longest differs from the longest free extent"),
    "AGF_BTREEBLKS": (ERROR, "agf_btreeblks differs from the blocks in the free space btrees"),
    "AGF_REFCOUNT_BLOCKS": (ERROR, "agf_refcount_blocks differs from the refcount btree"),
    "SPACE_OVERLAP": (ERROR, "a block is claimed twice (by metadata, a file or free space)"),
    "SPACE_UNACCOUNTED": (ERROR, "blocks are neither free nor used by anything"),
    # inode allocation
    "INOBT_RECORD": (ERROR, "an inobt record's counts, mask or holemask are inconsistent"),
    "INOBT_INODE": (ERROR, "an inode's allocation state on disk differs from the inobt"),
    "FINOBT_MISMATCH": (ERROR, "the finobt does not hold exactly the inobt records with "
                        "free inodes"),
    "AGI_COUNT": (ERROR, "agi_count or agi_freecount differs from the inode btree"),
    "AGI_BLOCKS": (ERROR, "agi_iblocks or agi_fblocks differs from the inode btrees"),
    "AGI_UNLINKED": (WARNING, "an AGI unlinked bucket is not empty"),
    "SB_COUNTERS": (ERROR, "sb_icount, sb_ifree or sb_fdblocks differs from the AG totals"),
    # inodes
    "INODE_CORRUPT": (ERROR, "an inode fails verification or its forks cannot be decoded"),
    "INODE_FORMAT": (ERROR, "an inode's fork format does not suit its file type"),
    "INODE_NBLOCKS": (ERROR, "di_nblocks differs from the blocks the inode owns"),
    "INODE_FLAGS": (ERROR, "inode flags are unknown, do not suit the file type, or use a "
                    "feature the filesystem does not have"),
    "INODE_SIZE": (ERROR, "di_size is not valid for the inode"),
    # directories and the namespace
    "DIR_CORRUPT": (ERROR, "a directory block or shortform fork cannot be read"),
    "DIR_ENTRY_TARGET": (ERROR, "a directory entry points to a free or invalid inode"),
    "DIR_FTYPE": (ERROR, "a directory entry's file type differs from the inode's"),
    "DIR_DOTDOT": (ERROR, "a directory's '..' does not name its parent"),
    "DIR_MULTIPLE_PARENTS": (ERROR, "a directory is linked from more than one place"),
    "NLINK": (ERROR, "an inode's link count differs from the entries naming it"),
    "DISCONNECTED": (ERROR, "an allocated inode is not reachable from the root"),
    # symlinks and xattrs
    "SYMLINK": (ERROR, "a symlink target cannot be read or has the wrong length"),
    "XATTR": (ERROR, "an extended attribute fork cannot be read, or a leaf's hashes, "
              "order or used-bytes count are wrong"),
    # the log
    "LOG_DIRTY": (ERROR, "the log holds transactions that were not replayed"),
}


def markdown() -> str:
    lines = ["# fstool check: the problem table", "",
             "Every finding `fstool check` reports carries one of these codes "
             "(generated from `fstool/ops/problems.py`).", "",
             "| code | severity | meaning |", "| --- | --- | --- |"]
    for code, (sev, text) in PROBLEMS.items():
        lines.append(f"| `{code}` | {sev} | {text} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
