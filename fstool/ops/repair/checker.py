"""The check repair runs: fstool check, with inode chunks found on disk (that
no inobt record names) added to their AG's chunks, so that their inodes and
the blocks those own are seen like any other."""
from __future__ import annotations

from ..check import Checker


class RepairChecker(Checker):
    extra_chunks: dict = {}          # agno -> [inobt record]

    def _table_for(self, agno, recs):
        extra = self.extra_chunks.get(agno)
        if extra:
            known = {r[0] for r in recs}
            recs = list(recs) + [r for r in extra if r[0] not in known]
        return super()._table_for(agno, recs)

    def metadata_inodes(self) -> set:
        """Check's metadata inodes, and those the superblock fields repair
        sets name (a primary restored from a secondary carries no realtime
        inode numbers: those inodes are metadata, not files to relink)."""
        fixes = getattr(self, "sb_fixes", {})
        return super().metadata_inodes() | {v for k, v in fixes.items()
                                            if k in ("sb_rbmino", "sb_rsumino")}
