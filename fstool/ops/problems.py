"""The one problem table: every finding `fstool check` can report.

code -> (severity, structure, what it means).  The structure is the default
``structure`` of a finding with that code (findings name it more precisely
where they can).  Severity follows xfs_repair -n: an error is something it
reports (exit 1), a warning something it silently rebuilds or does not
look at.  docs/check-problems.md is generated from this table
(``python -m fstool.ops.problemdoc``, which adds the repair column);
tests check it is current.
"""
ERROR, WARNING = "error", "warning"

# what a finding's ``structure`` names: the superblocks, the AG headers, each
# AG btree, an inode core, a file's bmbt, directory, attr or symlink blocks,
# the space map and the log
STRUCTURES = ("sb", "agf", "agi", "agfl", "bnobt", "cntbt", "inobt", "finobt", "refcountbt",
              "rmapbt", "inode", "bmbt", "dir", "attr", "symlink", "space", "log")

PROBLEMS = {
    # superblocks
    "SB_PRIMARY": (ERROR, "sb", "the primary superblock fails verification (sizes, geometry, "
                   "log, alignment, unused bytes not zero, flags), or the secondaries outvote "
                   "its geometry or feature words (check stops there, as xfs_repair -n does), "
                   "or no secondary can verify its geometry"),
    "IMAGE_TRUNCATED": (ERROR, "sb", "the image file is shorter than the filesystem the "
                        "superblock describes (check stops there; repair extends it with "
                        "zeros when asked to)"),
    "SB_FEATURES": (ERROR, "sb", "the superblock sets feature bits fstool does not know"),
    "SB_ROOTINO": (ERROR, "sb", "the root, realtime bitmap or summary inode number is not "
                   "where mkfs puts it"),
    "SB_SECONDARY": (ERROR, "sb", "a secondary superblock fails verification or disagrees "
                     "with the primary on geometry or features"),
    "SB_SECONDARY_LOG": (WARNING, "sb", "a secondary superblock's log incompat feature bits "
                         "differ from the primary's (xfs_repair -n does not count it as "
                         "damage; its repair syncs them)"),
    "SB_COUNTERS": (ERROR, "sb", "sb_icount, sb_ifree or sb_fdblocks differs from the AG "
                    "totals"),
    "SB_QUOTINO": (ERROR, "sb", "a quota inode number in the superblock is not an inode in "
                   "use, or is the root or a realtime inode (xfs_repair would clear the quota "
                   "information)"),
    "SB_QFLAGS": (ERROR, "sb", "the superblock's quota state: the quota feature on with no "
                  "quota inode named (xfs_repair turns quotas off), or quota flags holding the "
                  "group/project bits of a v4 superblock, which the kernel refuses on v5 "
                  "(xfs_repair -n says nothing of those; its repair clears stray bits)"),
    "SB_NEEDSREPAIR": (ERROR, "sb", "the filesystem is marked as needing repair (an upgrade "
                       "by xfs_repair or xfs_admin did not finish)"),
    "SB_LSN_AHEAD": (WARNING, "sb", "the primary superblock is stamped with an LSN ahead of "
                     "the log: the kernel refuses to mount it (xfs_repair -n does not count it; "
                     "its repair formats the log past it)"),
    "LSN_AHEAD": (ERROR, "log", "a metadata block is stamped with an LSN the log has not "
                  "reached"),
    # AG headers
    "AGF_HEADER": (ERROR, "agf", "the AGF fails verification (CRC, magic, version, sequence "
                   "number, length, uuid, free list indexes)"),
    "AGI_HEADER": (ERROR, "agi", "the AGI fails verification (CRC, magic, version, sequence "
                   "number, length, uuid)"),
    "AGFL_CRC": (ERROR, "agfl", "the AG free list's CRC is wrong"),
    "AGFL_HEADER": (WARNING, "agfl", "the AGFL header's magic, sequence number or uuid is "
                    "wrong under a good CRC (xfs_repair rebuilds the free list silently)"),
    "AGFL_COUNT": (ERROR, "agf", "agf_flcount differs from the free list's slots from "
                   "flfirst to fllast"),
    "AGFL_BLOCK": (ERROR, "agfl", "a free list slot holds a block outside the AG"),
    "AGFL_DUPLICATE": (WARNING, "agfl", "a block is on the free list twice (xfs_repair "
                       "rebuilds the list silently)"),
    "AGI_UNLINKED": (ERROR, "agi", "an AGI unlinked bucket is not empty, or chains an inode "
                     "that is invalid, free, linked or in the wrong bucket"),
    # btrees
    "BTREE_ROOT": (ERROR, None, "an AG btree root pointer lies outside the AG"),
    "BTREE_BLOCK": (ERROR, None, "a btree block fails verification (magic, CRC, uuid, "
                    "self-address, owner, sibling range) or cannot be read"),
    "BTREE_LEVEL": (ERROR, None, "a btree block's level does not fit its place in the tree"),
    "BTREE_NUMRECS": (ERROR, None, "a btree block holds more records than fit, or fewer "
                      "than half full outside the root"),
    "BTREE_RECORD": (ERROR, None, "a btree record is invalid (block range, length, "
                     "refcount, rmap owner or flags, records to merge)"),
    "BTREE_ORDER": (ERROR, None, "btree records are out of order within a block"),
    "BTREE_CYCLE": (ERROR, None, "a btree block is reached twice"),
    "BTREE_KEY": (WARNING, None, "an AG btree node's key differs from the lowest key of "
                  "the child it points to, or keys are out of order (xfs_repair does not "
                  "look; the kernel's lookups go wrong)"),
    "BTREE_RMAP_KEY": (ERROR, "rmapbt", "an rmapbt node's key has invalid flags or is out "
                       "of order, or a block's records or keys lie past the high key its "
                       "parent holds for it (xfs_repair checks the rmapbt's keys)"),
    "BTREE_SIBLING": (WARNING, None, "AG btree sibling pointers do not chain a level in "
                      "order (xfs_repair does not follow them)"),
    # free space, inode allocation, sharing, reverse mappings
    "FREESP_MISMATCH": (ERROR, "cntbt", "the bnobt and the cntbt do not hold the same free "
                        "extents"),
    "FREESP_ADJACENT": (WARNING, "bnobt", "two free extents touch (they should be one)"),
    "AGF_FREEBLKS": (ERROR, "agf", "agf_freeblks differs from the free space in the cntbt"),
    "AGF_LONGEST": (ERROR, "agf", "agf_longest differs from the longest free extent"),
    "AGF_BTREEBLKS": (ERROR, "agf", "agf_btreeblks differs from the free space and rmap "
                      "btree blocks"),
    "AGF_RMAP_BLOCKS": (ERROR, "agf", "agf_rmap_blocks differs from the rmap btree"),
    "AGF_REFCOUNT_BLOCKS": (ERROR, "agf", "agf_refcount_blocks differs from the refcount "
                            "btree"),
    "INOBT_RECORD": (ERROR, "inobt", "an inobt or finobt record is badly aligned, outside "
                     "its AG, overlapping, or its counts, free mask and holemask disagree; "
                     "or a block of more than 64 inodes has a part no record holds"),
    "INOBT_INODE": (ERROR, "inode", "an inode's allocation state on disk differs from the "
                    "inobt"),
    "FINOBT_MISMATCH": (ERROR, "finobt", "a finobt record differs from the inobt's or has no "
                        "free inodes"),
    "AGI_COUNT": (ERROR, "inobt", "agi_count or agi_freecount differs from what the inobt "
                  "counts, or agi_freecount from what the finobt counts (one finding per "
                  "tree, named by it, as xfs_repair reports them)"),
    "AGI_BLOCKS": (ERROR, "agi", "agi_iblocks or agi_fblocks differs from the inode btrees"),
    "REFCOUNT_COW": (ERROR, "refcountbt", "a CoW staging extent was left behind"),
    "REFCOUNT_MISMATCH": (ERROR, "refcountbt", "blocks shared by files have no refcount "
                          "record of their count"),
    "RMAP_MISMATCH": (ERROR, "rmapbt", "an owner of blocks has no rmapbt record covering "
                      "them, or an rmapbt record maps blocks to an owner that does not "
                      "own them"),
    "SPACE_OVERLAP": (ERROR, "space", "a block is claimed twice (by metadata, a file or free "
                      "space)"),
    "SPACE_UNACCOUNTED": (WARNING, "space", "blocks are neither free nor used by anything "
                          "(xfs_repair -n does not report leaked blocks)"),
    # inodes
    "INODE_CORRUPT": (ERROR, "inode", "an inode fails verification (CRC, magic, version, "
                      "number, uuid, padding, di_onlink)"),
    "INODE_FREE": (ERROR, "inode", "a free inode fails the kernel's inode verifier"),
    "INODE_UNLINKED": (ERROR, "inode", "di_next_unlinked is not an inode of the AG, or is "
                       "set on an inode in use on no unlinked list"),
    "INODE_FORMAT": (ERROR, "inode", "an inode's type or fork format is invalid or does not "
                     "suit its file type"),
    "INODE_FLAGS": (ERROR, "inode", "inode flags are unknown, do not suit the file type, or "
                    "use a feature the filesystem does not have"),
    "INODE_EXTSIZE": (ERROR, "inode", "the extent size or CoW extent size hint is invalid "
                      "for the inode"),
    "INODE_TIMESTAMP": (ERROR, "inode", "a timestamp's nanoseconds exceed a second"),
    "INODE_SIZE": (ERROR, "inode", "di_size is not valid for the inode"),
    "INODE_FORKOFF": (ERROR, "inode", "the attr fork offset is invalid"),
    "INODE_EXTENT": (ERROR, "inode", "an extent record is out of order, empty, outside the "
                     "filesystem or unwritten where it may not be; or its length runs over "
                     "the next record's file offset (field `br_blockcount`, `expected` the "
                     "sound length)"),
    "INODE_NBLOCKS": (ERROR, "inode", "di_nblocks differs from the blocks the inode owns"),
    "INODE_VERIFY": (WARNING, "inode", "an inode in use fails the kernel's inode verifier "
                     "where xfs_repair -n does not look (extents past the data fork that "
                     "di_forkoff leaves, inside the inode): the kernel refuses to read it"),
    "INODE_NEXTENTS": (ERROR, "inode", "di_nextents or di_anextents differs from the extents "
                       "mapped"),
    "BMBT_ROOT": (ERROR, "inode", "a fork's bmbt root is invalid (level, record count, "
                  "pointers, or few enough extents for extents format)"),
    "BMBT_BLOCK": (ERROR, "bmbt", "a bmbt block fails verification or points outside the "
                   "filesystem"),
    "BMBT_LEVEL": (ERROR, "bmbt", "a bmbt block's level does not fit its place"),
    "BMBT_NUMRECS": (ERROR, "bmbt", "a bmbt block holds too few or too many records"),
    "BMBT_KEY": (ERROR, "bmbt", "a bmbt key differs from its child's first key, or keys are "
                 "out of order"),
    "BMBT_SIBLING": (ERROR, "bmbt", "bmbt sibling pointers do not chain a level in order"),
    "BMBT_NODE_SIBLING": (WARNING, "bmbt", "the last bmbt node of a level above the leaves "
                          "has a right sibling (xfs_repair looks at the leaf level only; the "
                          "kernel's verifier rejects a sibling that is not a valid block)"),
    "BMBT_CYCLE": (ERROR, "bmbt", "a bmbt block is reached twice"),
    # directories and the namespace
    "DIR_ROOT": (ERROR, "inode", "the root inode is not a directory in use"),
    "DIR_CORRUPT": (ERROR, "dir", "a directory block or shortform fork cannot be read or its "
                    "structure is broken (entries, counts, offsets, size)"),
    "DIR_NAME": (ERROR, "dir", "a directory entry's name is illegal ('/', NUL) or a "
                 "duplicate"),
    "DIR_BESTFREE": (ERROR, "dir", "a data block's bestfree table does not list its largest "
                     "free regions"),
    "DIR_LEAF": (ERROR, "dir", "a directory leaf does not index exactly the data entries "
                 "(hash order, stale count, bests)"),
    "DIR_NODE": (ERROR, "dir", "a directory's da-btree fails xfs_repair's walk of it (node "
                 "magic, counts and levels; leaf back and forward pointers; node entries "
                 "naming the leaves in chain order with their greatest hashes; node "
                 "siblings; the right edge: last entries used, no right sibling, first "
                 "hash not above the last)"),
    "DIR_FREE": (ERROR, "dir", "a directory free index block disagrees with the data blocks"),
    "DIR_ENTRY_TARGET": (ERROR, "dir", "a directory entry points to a free, invalid or "
                         "metadata inode, or to the directory itself"),
    "DIR_FTYPE": (ERROR, "dir", "a directory entry's file type differs from the inode's"),
    "DIR_DOT": (ERROR, "dir", "a directory's '.' entry is missing, repeated or names another "
                "inode"),
    "DIR_DOTDOT": (ERROR, "dir", "a directory's '..' is missing, repeated, invalid or does "
                   "not name its parent"),
    "DIR_MULTIPLE_PARENTS": (ERROR, "dir", "a directory is linked from more than one place"),
    "NLINK": (ERROR, "inode", "an inode's link count differs from the entries naming it"),
    "DISCONNECTED": (ERROR, "inode", "an allocated inode is not reachable from the root"),
    "PARENT_MISSING": (ERROR, "attr", "a directory entry has no parent pointer on the inode "
                       "it names (parent pointer filesystems)"),
    "PARENT_BAD": (ERROR, "attr", "a parent pointer names no directory entry, or its "
                   "directory's generation differs"),
    "PARENT_GARBAGE": (ERROR, "attr", "an attribute of the parent namespace is not a parent "
                       "pointer: its value is not a 12-byte record or its parent cannot be a "
                       "directory"),
    # symlinks and xattrs
    "SYMLINK": (ERROR, "symlink", "a symlink's target cannot be read, has the wrong length, "
                "holds a NUL, or its fork does not suit its size"),
    "XATTR": (ERROR, "attr", "an attribute fork's entries are broken (names, hashes, "
              "counts, sizes, used bytes, remote values)"),
    "XATTR_NODE": (ERROR, "attr", "an attribute fork's da-btree fails xfs_repair's walk of "
                   "it (as DIR_NODE; block 0 has no siblings)"),
    "XATTR_NODE_HASH": (ERROR, "attr", "an attribute da-btree node entry's hash differs from "
                        "the greatest hash of the block it names (xfs_repair corrects it in "
                        "place)"),
    "XATTR_CRC": (ERROR, "attr", "an attribute leaf or node block's CRC is wrong: the "
                  "kernel refuses to read it, xfs_repair (6.10) reports it (6.1 let it pass)"),
    "XATTR_VERIFY": (WARNING, "attr", "an attribute block fails the kernel's verifier (owner, "
                     "self-address or uuid past block 0, or its structure) where xfs_repair -n "
                     "does not look: the kernel refuses to read it"),
    # the log, and the check itself
    "LOG_DIRTY": (ERROR, "log", "the log holds transactions that were not replayed"),
    "CHECK_ABORTED": (ERROR, None, "a structure could not be checked (damage fstool does "
                      "not foresee); what it holds is not known"),
}
