"""Phases counters and log: the superblock counters against the AG totals,
and a clean log; functions of the check context."""
from __future__ import annotations

from ...errors import LogDeviceNeeded
from ...fs.logstate import log_is_clean
from .dirs import not_quota_inodes


def phase_counters(ctx) -> None:
    f = ctx.sb.fields
    for field, key in (("sb_icount", "icount"), ("sb_ifree", "ifree"),
                       ("sb_fdblocks", "fdblocks")):
        if f[field] != ctx.ag_totals[key]:
            ctx.report("SB_COUNTERS", f"{field} is {f[field]}, the AGs add up to "
                       f"{ctx.ag_totals[key]}", agno=0, block=0, field=field,
                       expected=ctx.ag_totals[key], found=f[field])
    _check_quota_inodes(ctx)


def _check_quota_inodes(ctx) -> None:
    """xfs_repair's quotino_check: a quota inode named by the primary
    superblock (neither 0 nor null) is a valid inode number of an inode
    in use."""
    tab = getattr(ctx, "table", None)
    if tab is None:
        return          # the namespace phase did not get as far: nothing to compare
    sb = ctx.sb
    taken = not_quota_inodes(ctx)
    for name in ("sb_uquotino", "sb_gquotino", "sb_pquotino"):
        ino = sb.fields[name]
        if ino in (0, 0xFFFFFFFFFFFFFFFF):
            continue
        if ino in taken:
            ctx.report("SB_QUOTINO", f"{name} is {ino}, the root or a realtime inode",
                       agno=0, block=0, field=name, found=ino)
            continue
        agno = ino >> sb.agino_log
        ok = agno < sb.agcount and \
            ctx.verify_agino(agno, ino & ((1 << sb.agino_log) - 1)) and tab.in_use(ino)
        if not ok:
            ctx.report("SB_QUOTINO", f"{name} is {ino}, which is not an inode in use",
                       agno=0, block=0, field=name, found=ino)


def phase_log(ctx) -> None:
    try:
        clean, why = log_is_clean(ctx.fs)
    except LogDeviceNeeded:
        raise               # not a finding: what the caller must give
    except Exception as e:       # noqa: BLE001 - an unreadable log is not clean
        clean, why = False, f"it cannot be read ({e})"
    if not clean:
        ctx.log_dirty = True
        ctx.report("LOG_DIRTY", f"the log is dirty ({why}): mount the image to replay "
                   "it, or replay it with fstool, before checking")
