"""Phases counters and log: the superblock counters against the AG totals,
and a clean log."""
from __future__ import annotations

from ...errors import LogDeviceNeeded
from ...fs.logstate import log_is_clean


class SummaryPhases:
    def phase_counters(self) -> None:
        f = self.sb.fields
        for field, key in (("sb_icount", "icount"), ("sb_ifree", "ifree"),
                           ("sb_fdblocks", "fdblocks")):
            if f[field] != self.ag_totals[key]:
                self.report("SB_COUNTERS", f"{field} is {f[field]}, the AGs add up to "
                            f"{self.ag_totals[key]}", agno=0, block=0, field=field,
                            expected=self.ag_totals[key], found=f[field])
        self._check_quota_inodes()

    def _check_quota_inodes(self) -> None:
        """xfs_repair's quotino_check: a quota inode named by the primary
        superblock (neither 0 nor null) is a valid inode number of an inode
        in use."""
        tab = getattr(self, "table", None)
        if tab is None:
            return          # the namespace phase did not get as far: nothing to compare
        sb = self.sb
        taken = self.not_quota_inodes()
        for name in ("sb_uquotino", "sb_gquotino", "sb_pquotino"):
            ino = sb.fields[name]
            if ino in (0, 0xFFFFFFFFFFFFFFFF):
                continue
            if ino in taken:
                self.report("SB_QUOTINO", f"{name} is {ino}, the root or a realtime inode",
                            agno=0, block=0, field=name, found=ino)
                continue
            agno = ino >> sb.agino_log
            ok = agno < sb.agcount and \
                self.verify_agino(agno, ino & ((1 << sb.agino_log) - 1)) and tab.in_use(ino)
            if not ok:
                self.report("SB_QUOTINO", f"{name} is {ino}, which is not an inode in use",
                            agno=0, block=0, field=name, found=ino)

    def phase_log(self) -> None:
        try:
            clean, why = log_is_clean(self.fs)
        except LogDeviceNeeded:
            raise               # not a finding: what the caller must give
        except Exception as e:       # noqa: BLE001 - an unreadable log is not clean
            clean, why = False, f"it cannot be read ({e})"
        if not clean:
            self.log_dirty = True
            self.report("LOG_DIRTY", f"the log is dirty ({why}): mount the image to replay "
                        "it, or replay it with fstool, before checking")
