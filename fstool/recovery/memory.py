"""Replay into memory: the image as it would be after replay, unchanged on disk.

Passes 1 and 2 and the counter recomputation run as for ``fstool log
replay``, but every block goes to an :class:`~fstool.io.overlay.OverlayDevice`
that then serves the reads.  Unfinished EFIs and the AGI unlinked lists are
left as they are: they change free space and inode accounting, never what
a path shows.
"""
from __future__ import annotations

from ..fs.superblock import Superblock
from ..io.overlay import OverlayDevice
from ..log.head import find_state
from .finish import recompute_counters
from .recover import Recovery


class _Sink:
    def __init__(self, ov):
        self.ov = ov

    def pwrite(self, offset, data):
        self.ov.put(offset, data)

    def pread(self, offset, length):
        return self.ov.pread(offset, length)

    def fsync(self):
        pass


def replay_in_memory(fs) -> dict | None:
    """Make ``fs`` read the replayed image.  Returns None when the log is
    clean, else a short summary."""
    ld, st = find_state(fs)
    if not st.dirty:
        return None
    ov = OverlayDevice(fs.dev)
    sink = _Sink(ov)
    fs.dev = ov                  # blocks written early are read back from the overlay
    r = Recovery(fs, ld, st, writer_dev=sink)
    r.run()
    r.flush()
    fs.cache.clear()
    fs._inodes.clear()
    recompute_counters(sink, fs)
    fs.cache.clear()
    fs.sb = Superblock(ov.pread(0, fs.sb.sectsize))
    fs._log = None
    return {"blocks": r.stats.blocks_written, "transactions": r.stats.transactions,
            "unfinished_intents": len(r.intents)}
