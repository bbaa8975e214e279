"""What repair does about each finding of check's problem table.

code -> (action, text).  The action is what :mod:`fstool.ops.repair` plans:

``ag``         rebuild the AG's free space and inode btrees, the AGFL and
               the AGF/AGI counters from the space map of every owner (the
               finding's AG; on an rmapbt filesystem every AG, rmapbt included)
``counters``   recompute the superblock counters from the AGs
``secondary``  rewrite the secondary superblock from the primary
``namespace``  the namespace phase (:mod:`.namespace`): rebuild the
               directories that need it from their valid entries, move what
               no directory reaches to lost+found, set link counts
``sb_field``   set the primary superblock's field to the finding's expected value
``log``        format the (clean) log anew with a cycle past the finding's LSN
``inode``      the inode phase (:mod:`fstool.ops.repair.inodes`): fix the
               inode in place, clear it or drop its attr fork, as
               xfs_repair does; empty unlinked buckets; clear quota inode
               numbers
``parent``     the parent pointer phase (:mod:`.parents`): an inode's parent
               pointers made those of the entries naming it
``none``       reported, not repaired: the text says why

docs/check-problems.md shows the text in its repair column (generated with
the problem table, ``python -m fstool.ops.problemdoc``).
"""
AG, COUNTERS, SECONDARY, NAMESPACE, INODE, NONE = ("ag", "counters", "secondary",
                                                  "namespace", "inode", "none")
SB_FIELD = "sb_field"
LOG = "log"
PARENT = "parent"
_PARENT_TEXT = ("repaired: the inode's parent pointers are made those of the directory "
                "entries naming it once the namespace is repaired (garbage and unwanted "
                "pointers removed, missing ones added, as xfs_repair 6.10.1's phase 6 does), "
                "in a shortform attr fork or, when they do not fit one, in an attr fork "
                "made in new blocks")

_AG_TEXT = ("rebuilt: the AG's bnobt, cntbt, inobt, finobt and free list are bulk-loaded "
            "from the space map of every owner and the inode chunks (on an rmapbt "
            "filesystem every AG's rmapbt too), the AGF/AGI counters recomputed")
_RMAP_TEXT = ("rebuilt: every AG's rmapbt is bulk-loaded from the owners found (AG headers, "
              "log, btrees, free list, inode chunks, file and attr extents, bmbt blocks; "
              "records merged as xfs_repair merges them), with the AG's other trees")
_NOT_YET = "reported, not repaired: "
_DIR_TEXT = ("repaired: the directory is rebuilt from the entries that can still be read "
             "and are valid (entries naming free, cleared or invalid inodes, illegal or "
             "duplicate names are dropped; '.', '..' and file types set right), in whichever "
             "form its size calls for")
_FREED = ("; its blocks return to free space and it is free in the rebuilt inode btrees "
          "(directory entries naming it are the namespace phase's)")
_CLEAR = "repaired: the inode is cleared (made free, as xfs_repair's clear_dinode leaves it)"
_ATTR = ("repaired: the attr fork is dropped (as xfs_repair does: no attr fork, the block "
         "count and extent counts left to the data fork); its blocks return to free space")
_BMBT = (_CLEAR + " when the block map is the data fork's; " + _ATTR[len("repaired: "):]
         + " when it is the attr fork's" + _FREED)
_REFC_TEXT = ("rebuilt: the AG's refcount btree is bulk-loaded from the blocks files share "
              "(CoW staging extents left behind are freed), with the AG's other trees")

REPAIRS = {
    "IMAGE_TRUNCATED": ("extend", "repaired with --extend-truncated: the image file is "
                        "extended with zeros to the size the superblock describes (what was "
                        "cut off is lost), then checked and repaired like any other; "
                        "without it repair stops"),
    "SB_PRIMARY": ("primary", "repaired: the primary superblock is restored from the "
                   "secondaries (the geometry most valid secondaries agree on, as xfs_repair's "
                   "phase 1 finds it), its counters summed again from the AGs; a geometry "
                   "no secondary can verify stops the repair before anything is written"),
    "SB_FEATURES": (NONE, _NOT_YET + "unknown features: repair cannot know what they "
                    "protect"),
    "SB_ROOTINO": (SB_FIELD, "repaired: the superblock field is set to the inode mkfs puts "
                   "there (xfs_repair's calculated root, realtime bitmap and summary inodes)"),
    "SB_QUOTINO": (INODE, "repaired: the superblock's quota inode number is cleared "
                   "(null) with the quota checked flags, as xfs_repair does; quotas are turned "
                   "off when no quota inode is left"),
    "SB_QFLAGS": (SB_FIELD, "repaired: the quota feature bit and flags are left as xfs_repair "
                  "leaves them: the feature off when no quota inode is named, the flag bits "
                  "no quota state has cleared, all of them when quotas are off"),
    "SB_NEEDSREPAIR": (SB_FIELD, "repaired: the mark is cleared once everything else check "
                       "finds is repaired, as xfs_repair clears it"),
    "SB_LSN_AHEAD": (SB_FIELD, "repaired: the superblock is stamped with the repair's own LSN, "
                     "as any block the repair writes"),
    "SB_SECONDARY": (SECONDARY, "repaired: the secondary superblock is rewritten from the "
                     "primary"),
    "SB_SECONDARY_LOG": (SECONDARY, "repaired: the secondary superblock is rewritten from "
                         "the primary, as xfs_repair syncs the bits"),
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
    "AGI_UNLINKED": (INODE, "repaired: the AG's unlinked buckets are emptied (rebuilt "
                     "with the AG) and the inodes they chained get a null di_next_unlinked, as "
                     "xfs_repair does; inodes in use they chained with no links go to "
                     "lost+found (the namespace phase)"),
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
    "BTREE_RMAP_KEY": (AG, _AG_TEXT),
    "BTREE_SIBLING": (AG, _AG_TEXT),
    "FREESP_MISMATCH": (AG, _AG_TEXT),
    "FREESP_ADJACENT": (AG, _AG_TEXT),
    "AGF_FREEBLKS": (AG, _AG_TEXT),
    "AGF_LONGEST": (AG, _AG_TEXT),
    "AGF_BTREEBLKS": (AG, _AG_TEXT),
    "AGF_RMAP_BLOCKS": (AG, _RMAP_TEXT),
    "AGF_REFCOUNT_BLOCKS": (AG, _REFC_TEXT),
    "INOBT_RECORD": (AG, _AG_TEXT + "; a reported record is derived again from the inodes "
                     "on disk (holemask, count and free mask: a cluster it called a hole is "
                     "kept when its inodes are there and no other owner claims its blocks); a "
                     "record whose start names no chunk (no inode there, a start no chunk can "
                     "have, a chunk overlapping another record's) is dropped and the chunks "
                     "there found by their inodes"),
    "INOBT_INODE": (AG, _AG_TEXT + "; the free mask follows the inodes on disk (an inode "
                    "with a mode is in use)"),
    "FINOBT_MISMATCH": (AG, _AG_TEXT),
    "AGI_COUNT": (AG, _AG_TEXT),
    "AGI_BLOCKS": (AG, _AG_TEXT),
    "REFCOUNT_COW": (AG, _REFC_TEXT),
    "REFCOUNT_MISMATCH": (AG, _REFC_TEXT),
    "RMAP_MISMATCH": (AG, _RMAP_TEXT),
    "SPACE_OVERLAP": (AG, "repaired when one of the claimants is free space, the free "
                      "list or an AG btree (the AG is rebuilt); else the fork whose record is "
                      "bad goes, decided as xfs_repair's phases 3 and 4 decide it (inode "
                      "order: an extent over metadata, or over a block an earlier file "
                      "uses, fails its fork; a multiply claimed bmbt block fails its file): "
                      "the inode is cleared, an attr fork dropped; reported, not repaired "
                      "when two kinds of metadata claim a block"),
    "SPACE_UNACCOUNTED": (AG, "repaired: leaked blocks return to free space when the AG is "
                          "rebuilt (inode chunks no inobt record names are found on disk "
                          "first, so no inode is freed)"),
    "INODE_CORRUPT": (INODE, "repaired: a bad CRC is rewritten, magic, version, padding and "
                      "di_onlink reset in place; an inode whose number or uuid is wrong is "
                      "cleared" + _FREED),
    "INODE_FREE": (INODE, "repaired: the free inode is re-initialised as xfs_repair's "
                   "clear_dinode leaves it"),
    "INODE_UNLINKED": (INODE, "repaired: di_next_unlinked is set to null (xfs_repair resets "
                       "it on every inode in use)"),
    "INODE_FORMAT": (INODE, _CLEAR + " when its type or data fork format is invalid; an "
                     "invalid attr fork format drops the attr fork, one without an attr fork "
                     "is reset; reported, not repaired when the root is not a directory"
                     + _FREED),
    "INODE_FLAGS": (INODE, "repaired: the bad di_flags/di_flags2 bits are cleared in place; "
                    "a reflink flag the inode cannot have clears the inode" + _FREED),
    "INODE_EXTSIZE": (INODE, "repaired: the hint is reset to zero and its flag cleared"),
    "INODE_TIMESTAMP": (INODE, "repaired: the timestamp's nanoseconds are reset to zero"),
    "INODE_SIZE": (INODE, _CLEAR + _FREED),
    "INODE_FORKOFF": (INODE, _CLEAR + _FREED),
    "INODE_EXTENT": (INODE, "repaired: a length run over the next record is trimmed in "
                     "place (in the inode or its bmbt leaf) to what ends before the next "
                     "record, takes in no block that is free or already claimed, and fits the "
                     "block count, and the file is kept; otherwise " + _BMBT[len("repaired: "):]),
    "INODE_NBLOCKS": (INODE, "repaired: di_nblocks is set to the blocks the forks map; an "
                      "inode with fewer blocks than extents is cleared" + _FREED),
    "INODE_VERIFY": (NONE, "reported, not repaired (a warning): xfs_repair leaves it too"),
    "INODE_NEXTENTS": (INODE, "repaired: the count is set to the extents the fork maps; "
                       "extents that do not fit the fork make it bad: " + _BMBT),
    "BMBT_ROOT": (INODE, _BMBT),
    "BMBT_BLOCK": (INODE, _BMBT),
    "BMBT_LEVEL": (INODE, _BMBT),
    "BMBT_NUMRECS": (INODE, _BMBT),
    "BMBT_KEY": (INODE, "repaired: a key that differs from its child's first key is set to "
                 "it (in the inode's root or the bmbt node); keys out of order make the block "
                 "map bad: " + _BMBT),
    "BMBT_SIBLING": (INODE, _BMBT),
    "BMBT_NODE_SIBLING": (NONE, "reported, not repaired (a warning): xfs_repair leaves it "
                          "too"),
    "BMBT_CYCLE": (INODE, _BMBT),
    "DIR_ROOT": (NAMESPACE, "repaired: a new, empty root directory is made in the root "
                 "inode (the old one cleared when it is in use, as xfs_repair does) and "
                 "everything no longer reached goes to lost+found; reported, not repaired "
                 "when the root is in use as another type of file that is not cleared"),
    "DIR_CORRUPT": (NAMESPACE, _DIR_TEXT),
    "DIR_NAME": (NAMESPACE, _DIR_TEXT),
    "DIR_BESTFREE": (NAMESPACE, _DIR_TEXT),
    "DIR_LEAF": (NAMESPACE, _DIR_TEXT),
    "DIR_NODE": (NAMESPACE, _DIR_TEXT),
    "DIR_FREE": (NAMESPACE, _DIR_TEXT),
    "DIR_ENTRY_TARGET": (NAMESPACE, _DIR_TEXT),
    "DIR_FTYPE": (NAMESPACE, _DIR_TEXT),
    "DIR_DOT": (NAMESPACE, _DIR_TEXT),
    "DIR_DOTDOT": (NAMESPACE, "repaired: '..' is set to the directory whose entry is kept "
                   "(the one '..' names, as xfs_repair keeps it; a directory no kept entry "
                   "names goes to lost+found)"),
    "DIR_MULTIPLE_PARENTS": (NAMESPACE, "repaired: the entry in the directory that '..' "
                             "names is kept (the first in inode order when '..' names "
                             "neither), the others are dropped"),
    "NLINK": (NAMESPACE, "repaired: link counts are set from the entries that remain (a "
              "directory: 2 plus its subdirectories)"),
    "DISCONNECTED": (NAMESPACE, "repaired: moved to /lost+found under its inode number "
                     "(lost+found is created when missing), a directory with '..' "
                     "pointing there"),
    "SYMLINK": (INODE, _CLEAR + _FREED + "; a remote symlink whose only fault is its "
                "buffer's CRC keeps its target, the CRC rewritten (as xfs_repair does)"),
    "PARENT_MISSING": (PARENT, _PARENT_TEXT),
    "PARENT_BAD": (PARENT, _PARENT_TEXT),
    "PARENT_GARBAGE": (PARENT, _PARENT_TEXT),
    "XATTR": (INODE, _ATTR),
    "XATTR_NODE": (INODE, _ATTR),
    "XATTR_NODE_HASH": (INODE, "repaired: the entry's hash is set to the greatest hash of "
                        "the block it names, in place (as xfs_repair corrects it); when the "
                        "fork has other faults that drop it, with it"),
    "XATTR_CRC": (INODE, "repaired: the block's CRC is rewritten when its structure is sound "
                  "(as xfs_repair does), else " + _ATTR[len("repaired: "):]),
    "XATTR_VERIFY": (INODE, "repaired: the block's address, uuid, owner and CRC are rewritten "
                     "when its structure is sound, else " + _ATTR[len("repaired: "):]
                     + " (the kernel cannot read the block)"),
    "LOG_DIRTY": (NONE, "refused: replay the log first (fstool log replay, or a kernel "
                  "mount)"),
    "CHECK_ABORTED": (NONE, _NOT_YET + "what the structure holds is not known"),
}

# the AG btrees repair rebuilds (findings about the others are not repaired)
REBUILT_TREES = ("bnobt", "cntbt", "inobt", "finobt", "refcountbt", "rmapbt", "agfl", "agf",
                 "agi", "space")


def action_of(finding) -> tuple[str, str]:
    """(action, text) for one finding, looking at the structure it names
    where the code alone does not decide."""
    action, text = REPAIRS.get(finding.code, (NONE, _NOT_YET + "no repair is known"))
    if action == AG:
        if finding.agno is None:
            return NONE, _NOT_YET + "the finding names no AG"
        if finding.structure not in REBUILT_TREES and finding.code.startswith("BTREE_"):
            return NONE, _NOT_YET + f"the {finding.structure} is not rebuilt"
    if action == SECONDARY and not finding.agno:
        return NONE, _NOT_YET + "the finding names no secondary superblock"
    if action == "primary" and finding.field in IN_PLACE and finding.expected is not None:
        return SB_FIELD, IN_PLACE[finding.field]
    return action, text


# fields of a primary superblock that is otherwise good which xfs_repair's
# phase 1 sets in place (no secondary is needed for them)
IN_PLACE = {
    "sb_shared_vn": "repaired: set to zero, as xfs_repair's phase 1 does",
    "sb_bad_features2": "repaired: set to sb_features2 (which a v5 superblock must hold as it "
                        "is: xfs_repair would merge the two, and then reject the result)",
}


def column(code: str) -> str:
    """The repair column of docs/check-problems.md for ``code``."""
    return REPAIRS.get(code, (NONE, _NOT_YET + "no repair is known"))[1]
