"""What repair does about a finding: its action, from its row of the
problem registry (:mod:`fstool.ops.problems`, which lists the actions),
refined by the structure the finding names where the code alone does not
decide."""
from ..problems import (AG, COUNTERS, INODE, LOG, NAMESPACE, NONE, PARENT, PRIMARY, REGISTRY,
                        SB_FIELD, SECONDARY, not_repaired)

__all__ = ["AG", "COUNTERS", "INODE", "LOG", "NAMESPACE", "NONE", "PARENT", "SB_FIELD",
           "SECONDARY", "REPAIRS", "REBUILT_TREES", "IN_PLACE", "action_of", "column"]

# code -> (action, text): the registry's repair columns
REPAIRS = {p.code: (p.action, p.repair) for p in REGISTRY.values()}

# the AG btrees repair rebuilds (findings about the others are not repaired)
REBUILT_TREES = ("bnobt", "cntbt", "inobt", "finobt", "refcountbt", "rmapbt", "agfl", "agf",
                 "agi", "space")


def action_of(finding) -> tuple[str, str]:
    """(action, text) for one finding, looking at the structure it names
    where the code alone does not decide."""
    action, text = REPAIRS.get(finding.code, (NONE, not_repaired("no repair is known")))
    if action == AG:
        if finding.agno is None:
            return NONE, not_repaired("the finding names no AG")
        if finding.structure not in REBUILT_TREES and finding.code.startswith("BTREE_"):
            return NONE, not_repaired(f"the {finding.structure} is not rebuilt")
    if action == SECONDARY and not finding.agno:
        return NONE, not_repaired("the finding names no secondary superblock")
    if action == PRIMARY and finding.field in IN_PLACE and finding.expected is not None:
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
    return REPAIRS.get(code, (NONE, not_repaired("no repair is known")))[1]
