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
