"""Finding the head and tail of the log, as the kernel's log recovery does.

The algorithm is the kernel's (``xlog_find_tail`` and what it calls): find
the first sector of the newest cycle (binary search, then a scan back over
the sectors that in-flight iclogs could have torn), back up over a record
written only in part, find the newest record header before the head, take
the tail from it, check for an unmount record, then CRC-check the records
near the head (a failure there is a torn write: the head moves back to the
last good record) and from the tail to the head (a failure near the head
moves the tail forward, as after an overwritten tail).

Sectors are addressed as log blocks (512-byte units from the start of the
log).  Every read goes through :class:`LogDevice`, which bounds it to the
log.
"""
from __future__ import annotations

from typing import NamedTuple

from ..format import log as L
from .device import BB, LogCorrupt, LogDevice
from .records import crc_pass


class LogState(NamedTuple):
    """Where the log stands, as recovery sees it."""
    head: int                  # log block where the next record would go
    tail: int                  # log block of the oldest record still needed
    cycle: int                 # cycle of the head record (l_curr_cycle before a bump)
    clean: bool                # newest record is an unmount record at the head
    never_written: bool        # the log is all zeroes
    head_rec: int = -1         # log block of the last good record header
    head_lsn: int = 0          # h_lsn of that record
    tail_lsn: int = 0          # h_tail_lsn of that record
    curr_cycle: int = 0        # cycle the next record would be written with
    torn_at: int | None = None  # first bad record when a torn write was trimmed
    warnings: tuple = ()

    @property
    def dirty(self) -> bool:
        return not self.clean and not self.never_written and self.head != self.tail


def _hblks(rhead: dict) -> int:
    return L.header_blocks(rhead["h_version"], rhead["h_size"])


class HeadFinder:
    def __init__(self, ld: LogDevice):
        self.ld = ld
        self.warnings: list[str] = []

    # -- the pieces of xlog_find_head ------------------------------------------
    def find_cycle_start(self, first: int, last: int, cycle: int) -> int:
        """xlog_find_cycle_start: binary search for the first block of ``cycle``."""
        end = last
        mid = (first + end) >> 1
        while mid != first and mid != end:
            if self.ld.cycle(mid) == cycle:
                end = mid
            else:
                first = mid
            mid = (first + end) >> 1
        return end

    def find_verify_cycle(self, start: int, nbblks: int, stop_cycle: int) -> int:
        """xlog_find_verify_cycle: first block in [start, start+n) whose cycle
        is ``stop_cycle``, or -1."""
        step = 2048
        i = start
        end = start + nbblks
        while i < end:
            cnt = min(step, end - i)
            cycles = L.sector_cycles(self.ld.read(i, cnt), cnt)
            if stop_cycle in cycles:
                return i + cycles.index(stop_cycle)
            i += cnt
        return -1

    def find_verify_log_record(self, start: int, last: int, extra: int) -> tuple[int, int]:
        """xlog_find_verify_log_record: (status, last).  Status 1 means no
        header was found down to block 0 (the caller looks at the end of
        the log); a block between them that is not reached is corruption."""
        num = last - start
        data = self.ld.read(start, num) if num > 0 else b""
        i = last - 1
        found = None
        while i >= 0:
            if i < start:
                raise LogCorrupt("log inconsistent: no record header before the head "
                                 f"(searched blocks {start}..{last - 1})", block=last)
            off = (i - start) * BB
            if data[off:off + 4] == b"\xfe\xed\xba\xbe":
                found = data[off:off + BB]
                break
            i -= 1
        if i == -1:
            return 1, last
        rhead = L.REC_HEADER.unpack(found)
        self._check_uuid(rhead, i)
        xhdrs = _hblks(rhead)
        if last - i + extra != L.record_blocks(rhead["h_len"]) + xhdrs:
            last = i
        return 0, last

    def _check_uuid(self, rhead: dict, blk: int) -> None:
        u = rhead["h_fs_uuid"]
        if u != bytes(16) and u != self.ld.uuid:
            raise LogCorrupt("the log belongs to another filesystem (record uuid "
                             "does not match the superblock)", block=blk)

    def find_zeroed(self) -> tuple[int, int]:
        """xlog_find_zeroed: (1, first zero block) for a log not yet fully
        written once, (0, 0) otherwise."""
        ld = self.ld
        if ld.cycle(0) == 0:
            return 1, 0
        if ld.cycle(ld.bbsize - 1) != 0:
            return 0, 0
        last = self.find_cycle_start(0, ld.bbsize - 1, 0)
        num = min(L.XLOG_TOTAL_REC_SHIFT_BB, last)
        start = last - num
        new = self.find_verify_cycle(start, num, 0)
        if new != -1:
            last = new
        status, last = self.find_verify_log_record(start, last, 0)
        if status == 1:
            raise LogCorrupt("no record header before the first zeroed block", block=last)
        return 1, last

    def find_head(self) -> int:
        ld = self.ld
        nbb = ld.bbsize
        z, first_blk = self.find_zeroed()
        if z == 1:
            return first_blk
        first_half = ld.cycle(0)
        last_blk = head = nbb - 1
        last_half = ld.cycle(last_blk)
        if first_half == last_half:
            head = nbb
            stop = last_half - 1
        else:
            stop = last_half
            head = self.find_cycle_start(0, last_blk, last_half)
        num = min(nbb, L.XLOG_TOTAL_REC_SHIFT_BB)
        goto_validate = False
        if head >= num:
            new = self.find_verify_cycle(head - num, num, stop)
            if new != -1:
                head = new
        else:
            start = nbb - (num - head)
            new = self.find_verify_cycle(start, num - head, stop - 1)
            if new != -1:
                head = new
                goto_validate = True
            if not goto_validate:
                new = self.find_verify_cycle(0, head, stop)
                if new != -1:
                    head = new
        num = L.XLOG_REC_SHIFT_BB
        if head >= num:
            status, head = self.find_verify_log_record(head - num, head, 0)
            if status == 1:
                raise LogCorrupt("no record header found before the head", block=head)
        else:
            status, new_head = self.find_verify_log_record(0, head, 0)
            if status == 1:
                start = nbb - (num - head)
                status, new = self.find_verify_log_record(start, nbb, head)
                if status == 1:
                    raise LogCorrupt("no record header found before the head", block=head)
                if new != nbb:
                    head = new
            else:
                head = new_head
        return 0 if head == nbb else head

    # -- seeking record headers -------------------------------------------------------
    def _scan_down(self, hi: int, lo: int, count: int, found: list) -> bool:
        """Record headers from block ``hi`` down to ``lo`` appended to
        ``found``; True once ``count`` have been found."""
        i = hi
        while i >= lo:
            start = max(lo, i - 255)
            data = self.ld.read(start, i - start + 1)
            for k in range(i, start - 1, -1):
                off = (k - start) * BB
                if data[off:off + 4] == b"\xfe\xed\xba\xbe":
                    found.append((k, data[off:off + BB]))
                    if len(found) == count:
                        return True
            i = start - 1
        return False

    def rseek(self, head: int, tail: int, count: int):
        """xlog_rseek_logrec_hdr: walk back from ``head`` (to the tail, or to
        block 0 then from the end of the log down to the tail when the tail
        is not behind the head).  Returns (found, blk, header sector, wrapped)."""
        found: list = []
        wrapped = False
        done = self._scan_down(head - 1, tail if head > tail else 0, count, found)
        if not done and tail >= head:
            before = len(found)
            self._scan_down(self.ld.bbsize - 1, tail, count, found)
            wrapped = len(found) > before
        if not found:
            return 0, -1, None, False
        blk, sect = found[-1]
        return len(found), blk, sect, wrapped

    def seek(self, head: int, tail: int, count: int):
        """xlog_seek_logrec_hdr: walk forward from ``tail`` to the head."""
        ld = self.ld
        found = 0
        rblk, rsect, wrapped = -1, None, False
        end = head if head > tail else ld.bbsize - 1
        i = tail
        while i <= end:
            hi = min(end, i + 255)
            data = ld.read(i, hi - i + 1)
            for k in range(i, hi + 1):
                off = (k - i) * BB
                if data[off:off + 4] == b"\xfe\xed\xba\xbe":
                    rblk, rsect = k, data[off:off + BB]
                    found += 1
                    if found == count:
                        return found, rblk, rsect, wrapped
            i = hi + 1
        if tail > head and found != count:
            for k in range(0, head):
                if ld.is_header(k):
                    wrapped = True
                    rblk, rsect = k, ld.read(k, 1)
                    found += 1
                    if found == count:
                        return found, rblk, rsect, wrapped
        return found, rblk, rsect, wrapped

    # -- tail ---------------------------------------------------------------------------
    def check_unmount_rec(self, head: int, rhead: dict, rblk: int) -> tuple[bool, int]:
        """xlog_check_unmount_rec: (clean, tail)."""
        hblks = _hblks(rhead)
        after = (rblk + hblks + L.record_blocks(rhead["h_len"])) % self.ld.bbsize
        if head == after and rhead["h_num_logops"] == 1:
            data = self.ld.read((rblk + hblks) % self.ld.bbsize, 1)
            if data[9] & L.XLOG_UNMOUNT_TRANS:
                return True, after
        return False, L.block_lsn(rhead["h_tail_lsn"])

    def verify_head(self, head: int, tail: int, rblk: int, rsect: bytes, wrapped: bool):
        """xlog_verify_head: CRC-check the last XLOG_MAX_ICLOGS records; a
        failure is a torn write and the head moves back to it."""
        found, tmp_blk, _s, _w = self.rseek(head, tail, L.XLOG_MAX_ICLOGS)
        torn = None
        first_bad = crc_pass(self.ld, head, tmp_blk) if found else None
        if first_bad == 0:
            raise LogCorrupt("log record CRC mismatch at log block 0", block=0)
        if first_bad is not None:
            self.warnings.append(f"torn write (CRC failure) detected at log block "
                                 f"{first_bad}: the head moves back from {head}")
            torn = first_bad
            found, rblk, rsect, wrapped = self.rseek(first_bad, tail, 1)
            if found == 0:
                raise LogCorrupt("no good record before the torn write", block=first_bad)
            head = first_bad
            rhead = L.REC_HEADER.unpack(rsect)
            tail = L.block_lsn(rhead["h_tail_lsn"])
            if head == tail:
                return head, tail, rblk, rsect, wrapped, torn
        rhead = L.REC_HEADER.unpack(rsect)
        tail = self.verify_tail(head, tail, rhead["h_size"])
        return head, tail, rblk, rsect, wrapped, torn

    def verify_tail(self, head: int, tail: int, hsize: int) -> int:
        """xlog_verify_tail: CRC-check tail to head; corruption within reach
        of the head (an overwritten tail) moves the tail forward."""
        orig = tail
        found, tmp, _s, _w = self.seek(head, tail, 1)
        if found and tmp != tail:
            tail = tmp
        why: list = []
        first_bad = crc_pass(self.ld, head, tail, why)
        while first_bad is not None:
            reason = why[-1] if why else f"record at log block {first_bad}: bad record"
            if first_bad == 0:
                raise LogCorrupt(f"{reason} (at log block 0)", block=0)
            dist = (first_bad - head) if head < first_bad else \
                first_bad + (self.ld.bbsize - head)
            if dist > L.record_blocks(L.XLOG_MAX_ICLOGS * hsize):
                raise LogCorrupt(f"{reason}; too far from the head to be a torn write, "
                                 "recovery cannot go past it", block=first_bad)
            found, tmp, _s, _w = self.seek(head, first_bad, 2)
            tail = tmp
            first_bad = crc_pass(self.ld, head, tail, why)
        if tail != orig:
            self.warnings.append(f"tail block {orig} overwrite detected; tail moved "
                                 f"to {tail}")
        return tail

    def find_tail(self) -> LogState:
        ld = self.ld
        head = self.find_head()
        if head == 0 and ld.cycle(0) == 0:
            return LogState(head=0, tail=0, cycle=0, clean=True, never_written=True,
                            curr_cycle=1, warnings=tuple(self.warnings))
        found, rblk, rsect, wrapped = self.rseek(head, head, 1)
        if not found:
            raise LogCorrupt("couldn't find a record header (sync record) in the log",
                             block=head)
        rhead = L.REC_HEADER.unpack(rsect)
        tail = L.block_lsn(rhead["h_tail_lsn"])
        clean, tail2 = self.check_unmount_rec(head, rhead, rblk)
        if clean:
            tail = tail2
        torn = None
        if not clean:
            orig = head
            head, tail, rblk, rsect, wrapped, torn = self.verify_head(
                head, tail, rblk, rsect, wrapped)
            rhead = L.REC_HEADER.unpack(rsect)
            if head != orig:
                clean, tail2 = self.check_unmount_rec(head, rhead, rblk)
                if clean:
                    tail = tail2
        if tail >= ld.bbsize or head >= ld.bbsize:
            raise LogCorrupt(f"tail block {tail} lies outside the log ({ld.bbsize} sectors)",
                             block=tail)
        curr_cycle = rhead["h_cycle"] + (1 if wrapped else 0)
        return LogState(head=head, tail=tail, cycle=rhead["h_cycle"], clean=clean,
                        never_written=False, head_rec=rblk, head_lsn=rhead["h_lsn"],
                        tail_lsn=rhead["h_tail_lsn"], curr_cycle=curr_cycle,
                        torn_at=torn, warnings=tuple(self.warnings))


def find_state(fs) -> tuple[LogDevice, LogState]:
    ld = LogDevice(fs)
    return ld, HeadFinder(ld).find_tail()
