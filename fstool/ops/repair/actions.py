"""What repair does about each finding of check's problem table.

code -> (action, text).  The action is what :mod:`fstool.ops.repair` plans:

``ag``         rebuild the AG's free space and inode btrees, the AGFL and
               the AGF/AGI counters from the space map of every owner (the
               finding's AG)
``counters``   recompute the superblock counters from the AGs
``secondary``  rewrite the secondary superblock from the primary
``sb_field``   set the primary superblock's field to the finding's expected value
``log``        format the (clean) log anew with a cycle past the finding's LSN
``none``       reported, not repaired: the text says why

docs/check-problems.md shows the text in its repair column (generated with
the problem table, ``python -m fstool.ops.problems``).
"""
AG, COUNTERS, SECONDARY, NONE = "ag", "counters", "secondary", "none"
SB_FIELD = "sb_field"
LOG = "log"

_AG_TEXT = ("rebuilt: the AG's bnobt, cntbt, inobt, finobt and free list are bulk-loaded "
            "from the space map of every owner and the inode chunks, the AGF/AGI counters "
            "recomputed")
_NOT_YET = "reported, not repaired: "
_REFC_TEXT = ("rebuilt: the AG's refcount btree is bulk-loaded from the blocks files share "
              "(CoW staging extents left behind are freed), with the AG's other trees")

REPAIRS = {
    "SB_PRIMARY": ("primary", "repaired: the primary superblock is restored from the "
                   "secondaries (the geometry most valid secondaries agree on, as xfs_repair's "
                   "phase 1 finds it), its counters summed again from the AGs"),
    "SB_FEATURES": (NONE, _NOT_YET + "unknown features: repair cannot know what they "
                    "protect"),
    "SB_ROOTINO": (SB_FIELD, "repaired: the superblock field is set to the inode mkfs puts "
                   "there (xfs_repair's calculated root, realtime bitmap and summary inodes)"),
    "SB_QUOTINO": (NONE, _NOT_YET + "clearing a quota inode the superblock names wrongly "
                   "(with its quota flags) is not supported yet"),
    "SB_SECONDARY": (SECONDARY, "repaired: the secondary superblock is rewritten from the "
                     "primary"),
    "SB_COUNTERS": (COUNTERS, "repaired: sb_icount, sb_ifree and sb_fdblocks are summed "
                    "from the AG headers"),
    "LSN_AHEAD": (LOG, "repaired: the log (clean by then) is formatted anew with a cycle "
                  "past the highest LSN the metadata carries, as xfs_repair formats it"),
    "AGF_HEADER": (AG, "rebuilt: the AGF is written anew (magic, version, sequence number, "
                   "length and uuid as they must be) with the AG's bnobt, cntbt, inobt, finobt "
                   "and free list bulk-loaded from the space map of every owner"),
    "AGI_HEADER": (AG, "rebuilt: the AGI is written anew (magic, version, sequence number, "
                   "length and uuid as they must be; inode chunks the inobt does not reach are "
                   "looked for on disk) with the AG's trees and free list bulk-loaded from the "
                   "space map of every owner"),
    "AGFL_CRC": (AG, _AG_TEXT),
    "AGFL_HEADER": (AG, _AG_TEXT),
    "AGFL_COUNT": (AG, _AG_TEXT),
    "AGFL_BLOCK": (AG, _AG_TEXT),
    "AGFL_DUPLICATE": (AG, _AG_TEXT),
    "AGI_UNLINKED": (NONE, _NOT_YET + "unlinked lists need the inodes on them freed or "
                     "relinked; not supported yet"),
    # btree findings are repaired for the AG trees repair rebuilds; see
    # ag_tree_finding() for the refcountbt and rmapbt
    "BTREE_ROOT": (AG, _AG_TEXT),
    "BTREE_BLOCK": (AG, _AG_TEXT),
    "BTREE_LEVEL": (AG, _AG_TEXT),
    "BTREE_NUMRECS": (AG, _AG_TEXT),
    "BTREE_RECORD": (AG, _AG_TEXT),
    "BTREE_ORDER": (AG, _AG_TEXT),
    "BTREE_CYCLE": (AG, _AG_TEXT),
    "BTREE_KEY": (AG, _AG_TEXT),
    "BTREE_SIBLING": (AG, _AG_TEXT),
    "FREESP_MISMATCH": (AG, _AG_TEXT),
    "FREESP_ADJACENT": (AG, _AG_TEXT),
    "AGF_FREEBLKS": (AG, _AG_TEXT),
    "AGF_LONGEST": (AG, _AG_TEXT),
    "AGF_BTREEBLKS": (AG, _AG_TEXT),
    "AGF_RMAP_BLOCKS": (NONE, _NOT_YET + "writing filesystems with an rmapbt is not "
                        "supported yet"),
    "AGF_REFCOUNT_BLOCKS": (AG, _REFC_TEXT),
    "INOBT_RECORD": (AG, _AG_TEXT + "; a record's counts follow its free mask and holemask"),
    "INOBT_INODE": (AG, _AG_TEXT + "; the free mask follows the inodes on disk (an inode "
                    "with a mode is in use)"),
    "FINOBT_MISMATCH": (AG, _AG_TEXT),
    "AGI_COUNT": (AG, _AG_TEXT),
    "AGI_BLOCKS": (AG, _AG_TEXT),
    "REFCOUNT_COW": (AG, _REFC_TEXT),
    "REFCOUNT_MISMATCH": (AG, _REFC_TEXT),
    "RMAP_MISMATCH": (NONE, _NOT_YET + "writing filesystems with an rmapbt is not "
                      "supported yet"),
    "SPACE_OVERLAP": (AG, "repaired when one of the claimants is free space, the free "
                      "list or an AG btree (the AG is rebuilt); reported, not repaired "
                      "when two files or a file and other metadata claim a block (which "
                      "one owns it needs the file checks repair does not make yet)"),
    "SPACE_UNACCOUNTED": (AG, "repaired: leaked blocks return to free space when the AG is "
                          "rebuilt (inode chunks no inobt record names are found on disk "
                          "first, so no inode is freed)"),
    "INODE_CORRUPT": (NONE, _NOT_YET + "inode repair (clearing or fixing fields as "
                      "xfs_repair does) is not supported yet"),
    "INODE_FREE": (NONE, _NOT_YET + "inode repair is not supported yet"),
    "INODE_UNLINKED": (NONE, _NOT_YET + "unlinked lists are not repaired yet"),
    "INODE_FORMAT": (NONE, _NOT_YET + "inode repair is not supported yet"),
    "INODE_FLAGS": (NONE, _NOT_YET + "inode repair is not supported yet"),
    "INODE_EXTSIZE": (NONE, _NOT_YET + "inode repair is not supported yet"),
    "INODE_TIMESTAMP": (NONE, _NOT_YET + "inode repair is not supported yet"),
    "INODE_SIZE": (NONE, _NOT_YET + "inode repair is not supported yet"),
    "INODE_FORKOFF": (NONE, _NOT_YET + "inode repair is not supported yet"),
    "INODE_EXTENT": (NONE, _NOT_YET + "inode repair is not supported yet"),
    "INODE_NBLOCKS": (NONE, _NOT_YET + "inode repair is not supported yet"),
    "INODE_NEXTENTS": (NONE, _NOT_YET + "inode repair is not supported yet"),
    "BMBT_ROOT": (NONE, _NOT_YET + "block map repair is not supported yet"),
    "BMBT_BLOCK": (NONE, _NOT_YET + "block map repair is not supported yet"),
    "BMBT_LEVEL": (NONE, _NOT_YET + "block map repair is not supported yet"),
    "BMBT_NUMRECS": (NONE, _NOT_YET + "block map repair is not supported yet"),
    "BMBT_KEY": (NONE, _NOT_YET + "block map repair is not supported yet"),
    "BMBT_SIBLING": (NONE, _NOT_YET + "block map repair is not supported yet"),
    "BMBT_CYCLE": (NONE, _NOT_YET + "block map repair is not supported yet"),
    "DIR_ROOT": (NONE, _NOT_YET + "directory repair is not supported yet"),
    "DIR_CORRUPT": (NONE, _NOT_YET + "directory repair is not supported yet"),
    "DIR_NAME": (NONE, _NOT_YET + "directory repair is not supported yet"),
    "DIR_BESTFREE": (NONE, _NOT_YET + "directory repair is not supported yet"),
    "DIR_LEAF": (NONE, _NOT_YET + "directory repair is not supported yet"),
    "DIR_NODE": (NONE, _NOT_YET + "directory repair is not supported yet"),
    "DIR_FREE": (NONE, _NOT_YET + "directory repair is not supported yet"),
    "DIR_ENTRY_TARGET": (NONE, _NOT_YET + "directory repair is not supported yet"),
    "DIR_FTYPE": (NONE, _NOT_YET + "directory repair is not supported yet"),
    "DIR_DOT": (NONE, _NOT_YET + "directory repair is not supported yet"),
    "DIR_DOTDOT": (NONE, _NOT_YET + "directory repair is not supported yet"),
    "DIR_MULTIPLE_PARENTS": (NONE, _NOT_YET + "directory repair is not supported yet"),
    "NLINK": (NONE, _NOT_YET + "link counts are not repaired yet"),
    "DISCONNECTED": (NONE, _NOT_YET + "moving files to lost+found is not supported yet"),
    "SYMLINK": (NONE, _NOT_YET + "symlink repair is not supported yet"),
    "XATTR": (NONE, _NOT_YET + "xattr repair is not supported yet"),
    "XATTR_NODE": (NONE, _NOT_YET + "xattr repair is not supported yet"),
    "XATTR_VERIFY": (NONE, _NOT_YET + "xattr repair is not supported yet"),
    "LOG_DIRTY": (NONE, "refused: replay the log first (fstool log replay, or a kernel "
                  "mount)"),
    "CHECK_ABORTED": (NONE, _NOT_YET + "what the structure holds is not known"),
}

# the AG btrees repair rebuilds (findings about the others are not repaired)
REBUILT_TREES = ("bnobt", "cntbt", "inobt", "finobt", "refcountbt", "agfl", "agf", "agi",
                 "space")


def action_of(finding) -> tuple[str, str]:
    """(action, text) for one finding, looking at the structure it names
    where the code alone does not decide."""
    action, text = REPAIRS.get(finding.code, (NONE, _NOT_YET + "no repair is known"))
    if action == AG:
        if finding.agno is None:
            return NONE, _NOT_YET + "the finding names no AG"
        if finding.structure not in REBUILT_TREES and finding.code.startswith("BTREE_"):
            if finding.structure == "rmapbt":
                return NONE, _NOT_YET + "writing filesystems with an rmapbt is not supported yet"
            return NONE, _NOT_YET + f"the {finding.structure} is not rebuilt"
    if action == SECONDARY and not finding.agno:
        return NONE, _NOT_YET + "the finding names no secondary superblock"
    return action, text


def column(code: str) -> str:
    """The repair column of docs/check-problems.md for ``code``."""
    return REPAIRS.get(code, (NONE, _NOT_YET + "no repair is known"))[1]
