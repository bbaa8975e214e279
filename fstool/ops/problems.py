"""The one problem registry: every finding `fstool check` can report, with
what `fstool repair` does about it, one row per code.

A row holds the code, its severity, the structure a finding with that code
names by default (findings name it more precisely where they can), the
check's text (what the finding means), and the repair's decision: an
action and its text.  Severity follows xfs_repair -n: an error is something
it reports (exit 1), a warning something it silently rebuilds or does not
look at.  The action is what :mod:`fstool.ops.repair` plans:

``ag``         rebuild the AG's free space and inode btrees, the AGFL and
               the AGF/AGI counters from the space map of every owner (the
               finding's AG; on an rmapbt filesystem every AG, rmapbt included)
``counters``   recompute the superblock counters from the AGs
``secondary``  rewrite the secondary superblock from the primary
``namespace``  the namespace phase (:mod:`fstool.ops.repair.namespace`):
               rebuild the directories that need it from their valid
               entries, move what no directory reaches to lost+found, set
               link counts
``sb_field``   set the primary superblock's field to the finding's expected value
``log``        format the (clean) log anew with a cycle past the finding's LSN
``inode``      the inode phase (:mod:`fstool.ops.repair.inodes`): fix the
               inode in place, clear it or drop its attr fork, as
               xfs_repair does; empty unlinked buckets; clear quota inode
               numbers
``parent``     the parent pointer phase (:mod:`fstool.ops.repair.parents`):
               an inode's parent pointers made those of the entries naming it
``primary``    restore the primary superblock from the secondaries (repair's
               phase 1, before anything else)
``extend``     extend a truncated image with zeros (``--extend-truncated``)
``none``       reported, not repaired: the text says why

``PROBLEMS`` (code -> (severity, structure, check text)) is the view check
reports through; :mod:`fstool.ops.repair.actions` decides a finding's action
from its row.  docs/check-problems.md is generated from the registry
(``python -m fstool.ops.problemdoc``); tests check it is current.
"""
from typing import NamedTuple

from ..format import problem_codes as K

ERROR, WARNING = "error", "warning"

# what a finding's ``structure`` names: the superblocks, the AG headers, each
# AG btree, an inode core, a file's bmbt, directory, attr or symlink blocks,
# the space map and the log
STRUCTURES = ("sb", "agf", "agi", "agfl", "bnobt", "cntbt", "inobt", "finobt", "refcountbt",
              "rmapbt", "inode", "bmbt", "dir", "attr", "symlink", "space", "log")

# the repair actions (see above)
AG, COUNTERS, SECONDARY, NAMESPACE, INODE, NONE = ("ag", "counters", "secondary",
                                                  "namespace", "inode", "none")
SB_FIELD = "sb_field"
LOG = "log"
PARENT = "parent"
PRIMARY, EXTEND = "primary", "extend"
ACTIONS = (AG, COUNTERS, SECONDARY, NAMESPACE, INODE, NONE, SB_FIELD, LOG, PARENT, PRIMARY,
           EXTEND)


class Problem(NamedTuple):
    """One row: a problem code, what check says of it, what repair does."""
    code: str
    severity: str
    structure: str | None     # None: the finding names the btree
    check: str
    action: str
    repair: str


_NOT_YET = "reported, not repaired: "


def not_repaired(why: str) -> str:
    """The repair text of a finding repair leaves, saying why."""
    return _NOT_YET + why


# repair texts several rows share
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

ROWS = (
    # superblocks
    Problem(K.SB_PRIMARY, ERROR, "sb",
            check="the primary superblock fails verification (sizes, geometry, log, alignment, "
                  "unused bytes not zero, flags), or the secondaries outvote its geometry, "
                  "feature words or the UUID its metadata carries (check stops there, as "
                  "xfs_repair -n does), or no secondary can verify its geometry",
            action=PRIMARY,
            repair="repaired: the primary superblock is restored from the secondaries (the "
                   "geometry most valid secondaries agree on, as xfs_repair's phase 1 finds it), "
                   "its counters summed again from the AGs; a geometry no secondary can verify "
                   "stops the repair before anything is written"),
    Problem(K.IMAGE_TRUNCATED, ERROR, "sb",
            check="the image file is shorter than the filesystem the superblock describes (check "
                  "stops there; repair extends it with zeros when asked to)",
            action=EXTEND,
            repair="repaired with --extend-truncated: the image file is extended with zeros to "
                   "the size the superblock describes (what was cut off is lost), then checked "
                   "and repaired like any other; without it repair stops"),
    Problem(K.SB_FEATURES, ERROR, "sb",
            check="the superblock sets feature bits fstool does not know",
            action=NONE,
            repair=not_repaired("unknown features: repair cannot know what they protect")),
    Problem(K.SB_ROOTINO, ERROR, "sb",
            check="the root, realtime bitmap or summary inode number is not where mkfs puts it",
            action=SB_FIELD,
            repair="repaired: the superblock field is set to the inode mkfs puts there "
                   "(xfs_repair's calculated root, realtime bitmap and summary inodes)"),
    Problem(K.SB_SECONDARY, ERROR, "sb",
            check="a secondary superblock fails verification or disagrees with the primary on "
                  "geometry or features",
            action=SECONDARY,
            repair="repaired: the secondary superblock is rewritten from the primary"),
    Problem(K.SB_SECONDARY_LOG, WARNING, "sb",
            check="a secondary superblock's log incompat feature bits differ from the primary's "
                  "(xfs_repair -n does not count it as damage; its repair syncs them)",
            action=SECONDARY,
            repair="repaired: the secondary superblock is rewritten from the primary, as "
                   "xfs_repair syncs the bits"),
    Problem(K.SB_COUNTERS, ERROR, "sb",
            check="sb_icount, sb_ifree or sb_fdblocks differs from the AG totals",
            action=COUNTERS,
            repair="repaired: sb_icount, sb_ifree and sb_fdblocks are summed from the AG headers"),
    Problem(K.SB_QUOTINO, ERROR, "sb",
            check="a quota inode number in the superblock is not an inode in use, or is the root "
                  "or a realtime inode (xfs_repair would clear the quota information)",
            action=INODE,
            repair="repaired: the superblock's quota inode number is cleared (null) with the "
                   "quota checked flags, as xfs_repair does; quotas are turned off when no quota "
                   "inode is left"),
    Problem(K.SB_QFLAGS, ERROR, "sb",
            check="the superblock's quota state: the quota feature on with no quota inode named "
                  "(xfs_repair turns quotas off), or quota flags holding the group/project bits "
                  "of a v4 superblock, which the kernel refuses on v5 (xfs_repair -n says "
                  "nothing of those; its repair clears stray bits)",
            action=SB_FIELD,
            repair="repaired: the quota feature bit and flags are left as xfs_repair leaves "
                   "them: the feature off when no quota inode is named, the flag bits no quota "
                   "state has cleared, all of them when quotas are off"),
    Problem(K.SB_NEEDSREPAIR, ERROR, "sb",
            check="the filesystem is marked as needing repair (an upgrade by xfs_repair or "
                  "xfs_admin did not finish)",
            action=SB_FIELD,
            repair="repaired: the mark is cleared once everything else check finds is repaired, "
                   "as xfs_repair clears it"),
    Problem(K.SB_LSN_AHEAD, WARNING, "sb",
            check="the primary superblock is stamped with an LSN ahead of the log: the kernel "
                  "refuses to mount it (xfs_repair -n does not count it; its repair formats the "
                  "log past it)",
            action=SB_FIELD,
            repair="repaired: the superblock is stamped with the repair's own LSN, as any block "
                   "the repair writes"),
    Problem(K.LSN_AHEAD, ERROR, "log",
            check="a metadata block is stamped with an LSN the log has not reached",
            action=LOG,
            repair="repaired: the log (clean by then) is formatted anew with a cycle past the "
                   "highest LSN the metadata carries, as xfs_repair formats it"),
    # AG headers
    Problem(K.AGF_HEADER, ERROR, "agf",
            check="the AGF fails verification (CRC, magic, version, sequence number, length, "
                  "uuid, free list indexes)",
            action=AG,
            repair="rebuilt: the AGF is written anew (magic, version, sequence number, length "
                   "and uuid as they must be) with the AG's bnobt, cntbt, inobt, finobt and free "
                   "list bulk-loaded from the space map of every owner"),
    Problem(K.AGI_HEADER, ERROR, "agi",
            check="the AGI fails verification (CRC, magic, version, sequence number, length, "
                  "uuid)",
            action=AG,
            repair="rebuilt: the AGI is written anew (magic, version, sequence number, length "
                   "and uuid as they must be; inode chunks the inobt does not reach are looked "
                   "for on disk) with the AG's trees and free list bulk-loaded from the space "
                   "map of every owner"),
    Problem(K.AGFL_CRC, ERROR, "agfl",
            check="the AG free list's CRC is wrong",
            action=AG,
            repair=_AG_TEXT),
    Problem(K.AGFL_HEADER, WARNING, "agfl",
            check="the AGFL header's magic, sequence number or uuid is wrong under a good CRC "
                  "(xfs_repair rebuilds the free list silently)",
            action=AG,
            repair=_AG_TEXT),
    Problem(K.AGFL_COUNT, ERROR, "agf",
            check="agf_flcount differs from the free list's slots from flfirst to fllast",
            action=AG,
            repair=_AG_TEXT),
    Problem(K.AGFL_BLOCK, ERROR, "agfl",
            check="a free list slot holds a block outside the AG",
            action=AG,
            repair=_AG_TEXT),
    Problem(K.AGFL_DUPLICATE, WARNING, "agfl",
            check="a block is on the free list twice (xfs_repair rebuilds the list silently)",
            action=AG,
            repair=_AG_TEXT),
    Problem(K.AGI_UNLINKED, ERROR, "agi",
            check="an AGI unlinked bucket is not empty, or chains an inode that is invalid, "
                  "free, linked or in the wrong bucket",
            action=INODE,
            repair="repaired: the AG's unlinked buckets are emptied (rebuilt with the AG) and "
                   "the inodes they chained get a null di_next_unlinked, as xfs_repair does; "
                   "inodes in use they chained with no links go to lost+found (the namespace "
                   "phase)"),
    # btrees
    Problem(K.BTREE_ROOT, ERROR, None,
            check="an AG btree root pointer lies outside the AG",
            action=AG,
            repair=_AG_TEXT),
    Problem(K.BTREE_BLOCK, ERROR, None,
            check="a btree block fails verification (magic, CRC, uuid, self-address, owner, "
                  "sibling range) or cannot be read",
            action=AG,
            repair=_AG_TEXT),
    Problem(K.BTREE_LEVEL, ERROR, None,
            check="a btree block's level does not fit its place in the tree",
            action=AG,
            repair=_AG_TEXT),
    Problem(K.BTREE_NUMRECS, ERROR, None,
            check="a btree block holds more records than fit, or fewer than half full outside "
                  "the root",
            action=AG,
            repair=_AG_TEXT),
    Problem(K.BTREE_RECORD, ERROR, None,
            check="a btree record is invalid (block range, length, refcount, rmap owner or "
                  "flags, records to merge)",
            action=AG,
            repair=_AG_TEXT),
    Problem(K.BTREE_ORDER, ERROR, None,
            check="btree records are out of order within a block",
            action=AG,
            repair=_AG_TEXT),
    Problem(K.BTREE_CYCLE, ERROR, None,
            check="a btree block is reached twice",
            action=AG,
            repair=_AG_TEXT),
    Problem(K.BTREE_KEY, WARNING, None,
            check="an AG btree node's key differs from the lowest key of the child it points to, "
                  "or keys are out of order (xfs_repair does not look; the kernel's lookups go "
                  "wrong)",
            action=AG,
            repair=_AG_TEXT),
    Problem(K.BTREE_RMAP_KEY, ERROR, "rmapbt",
            check="an rmapbt node's key has invalid flags or is out of order, a block's "
                  "lowest record or key is not the low key its parent holds for it (xfs_repair's "
                  "lookups miss the records), or a block's records or keys lie past the high "
                  "key its parent holds for it (xfs_repair checks the rmapbt's keys)",
            action=AG,
            repair=_AG_TEXT),
    Problem(K.BTREE_SIBLING, WARNING, None,
            check="AG btree sibling pointers do not chain a level in order (xfs_repair does not "
                  "follow them)",
            action=AG,
            repair=_AG_TEXT),
    # free space, inode allocation, sharing, reverse mappings
    Problem(K.FREESP_MISMATCH, ERROR, "cntbt",
            check="the bnobt and the cntbt do not hold the same free extents",
            action=AG,
            repair=_AG_TEXT),
    Problem(K.FREESP_ADJACENT, WARNING, "bnobt",
            check="two free extents touch (they should be one)",
            action=AG,
            repair=_AG_TEXT),
    Problem(K.AGF_FREEBLKS, ERROR, "agf",
            check="agf_freeblks differs from the free space in the cntbt",
            action=AG,
            repair=_AG_TEXT),
    Problem(K.AGF_LONGEST, ERROR, "agf",
            check="agf_longest differs from the longest free extent",
            action=AG,
            repair=_AG_TEXT),
    Problem(K.AGF_BTREEBLKS, ERROR, "agf",
            check="agf_btreeblks differs from the free space and rmap btree blocks",
            action=AG,
            repair=_AG_TEXT),
    Problem(K.AGF_RMAP_BLOCKS, ERROR, "agf",
            check="agf_rmap_blocks differs from the rmap btree",
            action=AG,
            repair=_RMAP_TEXT),
    Problem(K.AGF_REFCOUNT_BLOCKS, ERROR, "agf",
            check="agf_refcount_blocks differs from the refcount btree",
            action=AG,
            repair=_REFC_TEXT),
    Problem(K.INOBT_RECORD, ERROR, "inobt",
            check="an inobt or finobt record is badly aligned, outside its AG, overlapping, or "
                  "its counts, free mask and holemask disagree; or a block of more than 64 "
                  "inodes has a part no record holds",
            action=AG,
            repair=_AG_TEXT + "; a reported record is derived again from the inodes on disk "
                   "(holemask, count and free mask: a cluster it called a hole is kept when its "
                   "inodes are there and no other owner claims its blocks); a record whose start "
                   "names no chunk (no inode there, a start no chunk can have, a chunk "
                   "overlapping another record's) is dropped and the chunks there found by their "
                   "inodes"),
    Problem(K.INOBT_INODE, ERROR, "inode",
            check="an inode's allocation state on disk differs from the inobt",
            action=AG,
            repair=_AG_TEXT + "; the free mask follows the inodes on disk (an inode with a mode "
                   "is in use)"),
    Problem(K.FINOBT_MISMATCH, ERROR, "finobt",
            check="a finobt record differs from the inobt's or has no free inodes",
            action=AG,
            repair=_AG_TEXT),
    Problem(K.AGI_COUNT, ERROR, "inobt",
            check="agi_count or agi_freecount differs from what the inobt counts, or "
                  "agi_freecount from what the finobt counts (one finding per tree, named by it, "
                  "as xfs_repair reports them)",
            action=AG,
            repair=_AG_TEXT),
    Problem(K.AGI_BLOCKS, ERROR, "agi",
            check="agi_iblocks or agi_fblocks differs from the inode btrees",
            action=AG,
            repair=_AG_TEXT),
    Problem(K.REFCOUNT_COW, ERROR, "refcountbt",
            check="a CoW staging extent was left behind",
            action=AG,
            repair=_REFC_TEXT),
    Problem(K.REFCOUNT_MISMATCH, ERROR, "refcountbt",
            check="blocks shared by files have no refcount record of their count",
            action=AG,
            repair=_REFC_TEXT),
    Problem(K.RMAP_MISMATCH, ERROR, "rmapbt",
            check="an owner of blocks has no rmapbt record covering them, or an rmapbt record "
                  "maps blocks to an owner that does not own them",
            action=AG,
            repair=_RMAP_TEXT),
    Problem(K.SPACE_OVERLAP, ERROR, "space",
            check="a block is claimed twice (by metadata, a file or free space)",
            action=AG,
            repair="repaired when one of the claimants is free space, the free list or an AG "
                   "btree (the AG is rebuilt); else the fork whose record is bad goes, decided "
                   "as xfs_repair's phases 3 and 4 decide it (inode order: an extent over "
                   "metadata, or over a block an earlier file uses, fails its fork; a multiply "
                   "claimed bmbt block fails its file): the inode is cleared, an attr fork "
                   "dropped; reported, not repaired when two kinds of metadata claim a block"),
    Problem(K.SPACE_UNACCOUNTED, WARNING, "space",
            check="blocks are neither free nor used by anything (xfs_repair -n does not report "
                  "leaked blocks)",
            action=AG,
            repair="repaired: leaked blocks return to free space when the AG is rebuilt (inode "
                   "chunks no inobt record names are found on disk first, so no inode is freed)"),
    # inodes
    Problem(K.INODE_CORRUPT, ERROR, "inode",
            check="an inode fails verification (CRC, magic, version, number, uuid, padding, "
                  "di_onlink)",
            action=INODE,
            repair="repaired: a bad CRC is rewritten, magic, version, padding and di_onlink "
                   "reset in place; an inode whose number or uuid is wrong is cleared" + _FREED),
    Problem(K.INODE_FREE, ERROR, "inode",
            check="a free inode fails the kernel's inode verifier",
            action=INODE,
            repair="repaired: the free inode is re-initialised as xfs_repair's clear_dinode "
                   "leaves it"),
    Problem(K.INODE_UNLINKED, ERROR, "inode",
            check="di_next_unlinked is not an inode of the AG, or is set on an inode in use on "
                  "no unlinked list",
            action=INODE,
            repair="repaired: di_next_unlinked is set to null (xfs_repair resets it on every "
                   "inode in use)"),
    Problem(K.INODE_FORMAT, ERROR, "inode",
            check="an inode's type or fork format is invalid or does not suit its file type",
            action=INODE,
            repair=_CLEAR + " when its type or data fork format is invalid; an invalid attr fork "
                   "format drops the attr fork, one without an attr fork is reset; reported, not "
                   "repaired when the root is not a directory" + _FREED),
    Problem(K.INODE_FLAGS, ERROR, "inode",
            check="inode flags are unknown, do not suit the file type, or use a feature the "
                  "filesystem does not have",
            action=INODE,
            repair="repaired: the bad di_flags/di_flags2 bits are cleared in place; a reflink "
                   "flag the inode cannot have clears the inode" + _FREED),
    Problem(K.INODE_EXTSIZE, ERROR, "inode",
            check="the extent size or CoW extent size hint is invalid for the inode",
            action=INODE,
            repair="repaired: the hint is reset to zero and its flag cleared"),
    Problem(K.INODE_TIMESTAMP, ERROR, "inode",
            check="a timestamp's nanoseconds exceed a second",
            action=INODE,
            repair="repaired: the timestamp's nanoseconds are reset to zero"),
    Problem(K.INODE_SIZE, ERROR, "inode",
            check="di_size is not valid for the inode",
            action=INODE,
            repair=_CLEAR + _FREED),
    Problem(K.INODE_FORKOFF, ERROR, "inode",
            check="the attr fork offset is invalid",
            action=INODE,
            repair=_CLEAR + _FREED),
    Problem(K.INODE_EXTENT, ERROR, "inode",
            check="an extent record is out of order, empty, outside the filesystem or unwritten "
                  "where it may not be; or its length runs over the next record's file offset "
                  "(field `br_blockcount`, `expected` the sound length)",
            action=INODE,
            repair="repaired: a length run over the next record is trimmed in place (in the "
                   "inode or its bmbt leaf) to what ends before the next record, takes in no "
                   "block that is free or already claimed, and fits the block count, and the "
                   "file is kept; otherwise " + _BMBT[len("repaired: "):]),
    Problem(K.INODE_NBLOCKS, ERROR, "inode",
            check="di_nblocks differs from the blocks the inode owns",
            action=INODE,
            repair="repaired: di_nblocks is set to the blocks the forks map; an inode with fewer "
                   "blocks than extents is cleared" + _FREED),
    Problem(K.INODE_VERIFY, WARNING, "inode",
            check="an inode in use fails the kernel's inode verifier where xfs_repair -n does "
                  "not look (extents past the data fork that di_forkoff leaves, inside the "
                  "inode): the kernel refuses to read it",
            action=NONE,
            repair="reported, not repaired (a warning): xfs_repair leaves it too"),
    Problem(K.INODE_NEXTENTS, ERROR, "inode",
            check="di_nextents or di_anextents differs from the extents mapped",
            action=INODE,
            repair="repaired: the count is set to the extents the fork maps; extents that do not "
                   "fit the fork make it bad: " + _BMBT),
    Problem(K.BMBT_ROOT, ERROR, "inode",
            check="a fork's bmbt root is invalid (level, record count, pointers, or few enough "
                  "extents for extents format)",
            action=INODE,
            repair=_BMBT),
    Problem(K.BMBT_BLOCK, ERROR, "bmbt",
            check="a bmbt block fails verification or points outside the filesystem",
            action=INODE,
            repair=_BMBT),
    Problem(K.BMBT_LEVEL, ERROR, "bmbt",
            check="a bmbt block's level does not fit its place",
            action=INODE,
            repair=_BMBT),
    Problem(K.BMBT_NUMRECS, ERROR, "bmbt",
            check="a bmbt block holds too few or too many records",
            action=INODE,
            repair=_BMBT),
    Problem(K.BMBT_KEY, ERROR, "bmbt",
            check="a bmbt key differs from its child's first key, or keys are out of order",
            action=INODE,
            repair="repaired: a key that differs from its child's first key is set to it (in the "
                   "inode's root or the bmbt node); keys out of order make the block map bad: " +
                   _BMBT),
    Problem(K.BMBT_SIBLING, ERROR, "bmbt",
            check="bmbt sibling pointers do not chain a level in order",
            action=INODE,
            repair=_BMBT),
    Problem(K.BMBT_NODE_SIBLING, WARNING, "bmbt",
            check="the last bmbt node of a level above the leaves has a right sibling "
                  "(xfs_repair looks at the leaf level only; the kernel's verifier rejects a "
                  "sibling that is not a valid block)",
            action=NONE,
            repair="reported, not repaired (a warning): xfs_repair leaves it too"),
    Problem(K.BMBT_CYCLE, ERROR, "bmbt",
            check="a bmbt block is reached twice",
            action=INODE,
            repair=_BMBT),
    # directories and the namespace
    Problem(K.DIR_ROOT, ERROR, "inode",
            check="the root inode is not a directory in use",
            action=NAMESPACE,
            repair="repaired: a new, empty root directory is made in the root inode (the old one "
                   "cleared when it is in use, as xfs_repair does) and everything no longer "
                   "reached goes to lost+found; reported, not repaired when the root is in use "
                   "as another type of file that is not cleared"),
    Problem(K.DIR_CORRUPT, ERROR, "dir",
            check="a directory block or shortform fork cannot be read or its structure is broken "
                  "(entries, counts, offsets, size)",
            action=NAMESPACE,
            repair=_DIR_TEXT),
    Problem(K.DIR_NAME, ERROR, "dir",
            check="a directory entry's name is illegal ('/', NUL) or a duplicate",
            action=NAMESPACE,
            repair=_DIR_TEXT),
    Problem(K.DIR_BESTFREE, ERROR, "dir",
            check="a data block's bestfree table does not list its largest free regions",
            action=NAMESPACE,
            repair=_DIR_TEXT),
    Problem(K.DIR_LEAF, ERROR, "dir",
            check="a directory leaf does not index exactly the data entries (hash order, stale "
                  "count, bests)",
            action=NAMESPACE,
            repair=_DIR_TEXT),
    Problem(K.DIR_NODE, ERROR, "dir",
            check="a directory's da-btree fails xfs_repair's walk of it (node magic, counts and "
                  "levels; leaf back and forward pointers; node entries naming the leaves in "
                  "chain order with their greatest hashes; node siblings; the right edge: last "
                  "entries used, no right sibling, first hash not above the last)",
            action=NAMESPACE,
            repair=_DIR_TEXT),
    Problem(K.DIR_FREE, ERROR, "dir",
            check="a directory free index block disagrees with the data blocks",
            action=NAMESPACE,
            repair=_DIR_TEXT),
    Problem(K.DIR_ENTRY_TARGET, ERROR, "dir",
            check="a directory entry points to a free, invalid or metadata inode, or to the "
                  "directory itself",
            action=NAMESPACE,
            repair=_DIR_TEXT),
    Problem(K.DIR_FTYPE, ERROR, "dir",
            check="a directory entry's file type differs from the inode's",
            action=NAMESPACE,
            repair=_DIR_TEXT),
    Problem(K.DIR_DOT, ERROR, "dir",
            check="a directory's '.' entry is missing, repeated or names another inode",
            action=NAMESPACE,
            repair=_DIR_TEXT),
    Problem(K.DIR_DOTDOT, ERROR, "dir",
            check="a directory's '..' is missing, repeated, invalid or does not name its parent",
            action=NAMESPACE,
            repair="repaired: '..' is set to the directory whose entry is kept (the one '..' "
                   "names, as xfs_repair keeps it; a directory no kept entry names goes to "
                   "lost+found)"),
    Problem(K.DIR_MULTIPLE_PARENTS, ERROR, "dir",
            check="a directory is linked from more than one place",
            action=NAMESPACE,
            repair="repaired: the entry in the directory that '..' names is kept (the first in "
                   "inode order when '..' names neither), the others are dropped"),
    Problem(K.NLINK, ERROR, "inode",
            check="an inode's link count differs from the entries naming it",
            action=NAMESPACE,
            repair="repaired: link counts are set from the entries that remain (a directory: 2 "
                   "plus its subdirectories)"),
    Problem(K.DISCONNECTED, ERROR, "inode",
            check="an allocated inode is not reachable from the root",
            action=NAMESPACE,
            repair="repaired: moved to /lost+found under its inode number (lost+found is created "
                   "when missing), a directory with '..' pointing there"),
    Problem(K.PARENT_MISSING, ERROR, "attr",
            check="a directory entry has no parent pointer on the inode it names (parent pointer "
                  "filesystems)",
            action=PARENT,
            repair=_PARENT_TEXT),
    Problem(K.PARENT_BAD, ERROR, "attr",
            check="a parent pointer names no directory entry, or its directory's generation "
                  "differs",
            action=PARENT,
            repair=_PARENT_TEXT),
    Problem(K.PARENT_GARBAGE, ERROR, "attr",
            check="an attribute of the parent namespace is not a parent pointer: its value is "
                  "not a 12-byte record or its parent cannot be a directory",
            action=PARENT,
            repair=_PARENT_TEXT),
    # symlinks and xattrs
    Problem(K.SYMLINK, ERROR, "symlink",
            check="a symlink's target cannot be read, has the wrong length, holds a NUL, or its "
                  "fork does not suit its size",
            action=INODE,
            repair=_CLEAR + _FREED + "; a remote symlink whose only fault is its buffer's CRC "
                   "keeps its target, the CRC rewritten (as xfs_repair does)"),
    Problem(K.XATTR, ERROR, "attr",
            check="an attribute fork's entries are broken (names, hashes, counts, sizes, used "
                  "bytes, remote values)",
            action=INODE,
            repair=_ATTR),
    Problem(K.XATTR_NODE, ERROR, "attr",
            check="an attribute fork's da-btree fails xfs_repair's walk of it (as DIR_NODE; "
                  "block 0 has no siblings)",
            action=INODE,
            repair=_ATTR),
    Problem(K.XATTR_NODE_HASH, ERROR, "attr",
            check="an attribute da-btree node entry's hash differs from the greatest hash of the "
                  "block it names (xfs_repair corrects it in place)",
            action=INODE,
            repair="repaired: the entry's hash is set to the greatest hash of the block it "
                   "names, in place (as xfs_repair corrects it); when the fork has other faults "
                   "that drop it, with it"),
    Problem(K.XATTR_CRC, ERROR, "attr",
            check="an attribute leaf or node block's CRC is wrong: the kernel refuses to read "
                  "it, xfs_repair (6.10) reports it (6.1 let it pass)",
            action=INODE,
            repair="repaired: the block's CRC is rewritten when its structure is sound (as "
                   "xfs_repair does), else " + _ATTR[len("repaired: "):]),
    Problem(K.XATTR_VERIFY, WARNING, "attr",
            check="an attribute block fails the kernel's verifier (owner, self-address or uuid "
                  "past block 0, or its structure) where xfs_repair -n does not look: the kernel "
                  "refuses to read it",
            action=INODE,
            repair="repaired: the block's address, uuid, owner and CRC are rewritten when its "
                   "structure is sound, else " + _ATTR[len("repaired: "):] + " (the kernel "
                   "cannot read the block)"),
    # the log, and the check itself
    Problem(K.LOG_DIRTY, ERROR, "log",
            check="the log holds transactions that were not replayed",
            action=NONE,
            repair="refused: replay the log first (fstool log replay, or a kernel mount)"),
    Problem(K.CHECK_ABORTED, ERROR, None,
            check="a structure could not be checked (damage fstool does not foresee); what it "
                  "holds is not known",
            action=NONE,
            repair=not_repaired("what the structure holds is not known")),
)


REGISTRY = {p.code: p for p in ROWS}

# the view check reports through: code -> (severity, structure, check text)
PROBLEMS = {p.code: (p.severity, p.structure, p.check) for p in ROWS}
