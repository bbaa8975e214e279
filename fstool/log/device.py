"""The log as a device of 512-byte sectors: its geometry and bounded,
wrapping reads (everything that reads the log goes through it).  The log is
a range of the image, or the whole of an external log device
(``Filesystem.log_dev``: mkfs.xfs -l logdev=).
"""
from __future__ import annotations

from ..errors import CorruptionError
from ..format import log as L

BB = L.BBSIZE


class LogCorrupt(CorruptionError):
    """The log cannot be read the way the kernel would read it (the CLI's
    "corrupt" exit status)."""

    def __init__(self, detail: str, *, block: int | None = None):
        super().__init__("log", detail, block=block)


class LogDevice:
    """The log of an image: geometry and sector reads."""

    def __init__(self, fs):
        sb = fs.sb
        self.fs = fs
        self.dev = fs.log_dev
        self.start_daddr = fs.log_start_daddr
        self.bbsize = sb.logblocks << (sb.blocklog - L.BBSHIFT)     # l_logBBsize
        f = sb.fields
        self.sectsize = f["sb_logsectsize"] or BB
        self.sect_bb = max(1, self.sectsize >> L.BBSHIFT)
        self.sunit = f["sb_logsunit"] if f["sb_logsunit"] > 1 else 0
        self.uuid = sb.uuid_bytes
        self.logbsize = max(L.XLOG_BIG_RECORD_BSIZE, self.sunit)
        end = (self.start_daddr + self.bbsize) << L.BBSHIFT
        if self.bbsize <= 0 or end > self.dev.size:
            raise LogCorrupt(f"the log ({self.bbsize} sectors at daddr {self.start_daddr}) "
                             "lies outside the device")
        self.reads = 0

    def read(self, blk: int, n: int) -> bytes:
        """``n`` sectors from log block ``blk``, wrapping at the end of the log."""
        if n <= 0:
            return b""
        if n > self.bbsize:
            raise LogCorrupt(f"read of {n} sectors is larger than the log", block=blk)
        blk %= self.bbsize
        self.reads += 1
        first = min(n, self.bbsize - blk)
        data = self.dev.pread((self.start_daddr + blk) << L.BBSHIFT, first << L.BBSHIFT)
        if first < n:
            data += self.dev.pread(self.start_daddr << L.BBSHIFT, (n - first) << L.BBSHIFT)
        return data

    def cycle(self, blk: int) -> int:
        return L.get_cycle(self.read(blk, 1))

    def is_header(self, blk: int) -> bool:
        return self.read(blk, 1)[:4] == b"\xfe\xed\xba\xbe"
