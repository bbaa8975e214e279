"""The log writer: checkpoints and unmount records in the kernel's format.

The internal log is a ring of 512-byte basic blocks.  Each write is a log
record: one header block (magic, cycle, length, its own LSN, the tail LSN,
CRC, the number of operations) and up to 32 KiB of data holding operations,
each behind a 12-byte op header.  The first word of every data block is
replaced by the cycle number (the words it held travel in the header's
``h_cycle_data``), so that the head of the log can be found after a crash by
looking for the place where the cycle number drops.

A checkpoint (one ``write_checkpoint`` call) is written as the kernel's
delayed logging writes one: a start operation, a transaction header
(``XFS_TRANS_CHECKPOINT``), every item's regions as operations (regions that
do not fit the record are continued in the next), then a commit operation
in the last record.  Every record but the last is written, the device is
flushed, then the record holding the commit operation is written and flushed
again: recovery replays a checkpoint only when its commit operation is on
disk, and then everything before it is too.

Records carry the tail: the LSN of the oldest checkpoint whose buffers may
not yet be written back in place.  The journal writes a checkpoint's buffers
back right after it, and the next flush makes them durable, so the tail
never lags more than one checkpoint behind the head.

Records wrap around the end of the log like the kernel's: the part past the
end continues at block 0, and the first words of its blocks carry the next
cycle number.
"""
from __future__ import annotations

import struct

from .._backend import parsers
from ..errors import CorruptionError, FsToolError
from ..format import constants as C

XLOG_HEADER_MAGIC_NUM = 0xFEEDBABE
XLOG_VERSION_2 = 2
XLOG_FMT_LINUX_LE = 1
XLOG_RECORD_BSIZE = 32 * 1024          # data bytes of one record (h_size): no extended headers
XLOG_REC_CRC_SIZE = 328                # bytes of the record header the CRC covers
XLOG_CYCLE_DATA_WORDS = 64

XFS_TRANSACTION = 0x69
XFS_LOG = 0xAA
XLOG_START_TRANS = 0x01
XLOG_COMMIT_TRANS = 0x02
XLOG_CONTINUE_TRANS = 0x04
XLOG_WAS_CONT_TRANS = 0x08
XLOG_UNMOUNT_TRANS = 0x20
XLOG_UNMOUNT_TYPE = 0x556E

XFS_TRANS_HEADER_MAGIC = 0x5452414E    # "TRAN"
XFS_TRANS_CHECKPOINT = 40
XFS_LI_BUF = 0x123C
XFS_BLF_CANCEL = 1 << 1
XFS_BLF_CHUNK = 128
XFS_BLFT_SHIFT = 11

# record header: magic cycle version len lsn tail_lsn crc prev_block num_logops
_REC_HDR = struct.Struct(">IIIIQQIII")
_REC_TAIL = struct.Struct(">I16sI")            # h_fmt, h_fs_uuid, h_size at offset 300
_OP_HDR = struct.Struct(">IIBBH")              # tid len clientid flags res2
# log item formats are in the host's byte order (x86: little-endian), as
# recorded by h_fmt = XLOG_FMT_LINUX_LE
_TRANS_HDR = struct.Struct("<IIiI")            # magic type tid num_items
_BLF_HDR = struct.Struct("<HHHHqI")            # type size flags len blkno map_size
_UNMOUNT = struct.Struct("<HHI")               # magic pad1 pad2
_U32 = struct.Struct(">I")
_CRC = struct.Struct("<I")


def lsn(cycle: int, block: int) -> int:
    return (cycle << 32) | block


def buf_item_regions(daddr: int, nbytes: int, blft: int, chunks: list, data,
                     cancel: bool = False) -> list:
    """The regions of a buffer log item: the xfs_buf_log_format (with the
    dirty map of ``chunks``, the logged 128-byte chunk numbers, sorted) and
    the bytes of every run of consecutive chunks."""
    nchunks = (nbytes + XFS_BLF_CHUNK - 1) // XFS_BLF_CHUNK
    map_size = (nchunks + 31) // 32
    words = [0] * map_size
    runs = []
    for c in chunks:
        words[c >> 5] |= 1 << (c & 31)
        if runs and runs[-1][1] == c:
            runs[-1][1] = c + 1
        else:
            runs.append([c, c + 1])
    flags = (blft << XFS_BLFT_SHIFT) | (XFS_BLF_CANCEL if cancel else 0)
    fmt = _BLF_HDR.pack(XFS_LI_BUF, 1 + len(runs), flags, nbytes >> C.BBSHIFT, daddr,
                        map_size) + struct.pack(f"<{map_size}I", *words)
    regions = [fmt]
    for a, b in runs:
        regions.append(bytes(data[a * XFS_BLF_CHUNK:b * XFS_BLF_CHUNK]))
    return regions


class LogWriter:
    """Appends records to the internal log of an open image."""

    def __init__(self, dev, sb, *, head_block: int, head_cycle: int, prev_block: int):
        if sb.fields["sb_logstart"] == 0:
            raise FsToolError("external logs are not supported for writing")
        self.dev = dev
        self.uuid = sb.fields["sb_uuid"]
        agno = sb.logstart >> sb.agblklog
        agbno = sb.logstart & ((1 << sb.agblklog) - 1)
        self.start = (agno * sb.agblocks + agbno) << (sb.blocklog - C.BBSHIFT)
        self.size = sb.logblocks << (sb.blocklog - C.BBSHIFT)       # in 512-byte blocks
        sunit = sb.fields["sb_logsunit"]
        self.roundoff = sunit if sunit > C.BBSIZE and sunit % C.BBSIZE == 0 else C.BBSIZE
        # data bytes a record may hold so that, padded to the log stripe unit,
        # it still fits the 64 cycle words of one header
        most = (C.BBSIZE + XLOG_RECORD_BSIZE) // self.roundoff * self.roundoff - C.BBSIZE
        if most < 4 * C.BBSIZE:
            raise FsToolError(f"a log stripe unit of {sunit} bytes is not supported for writing")
        self.room = min(XLOG_RECORD_BSIZE, most)
        if head_cycle == 0:
            head_block, head_cycle = 0, 1
        if head_block >= self.size:
            head_block, head_cycle = 0, head_cycle + 1
        self.block = head_block
        self.cycle = head_cycle
        self.prev_block = prev_block
        self.tail_lsn = lsn(self.cycle, self.block)
        self.bytes_written = 0
        self.records_written = 0

    @property
    def head_lsn(self) -> int:
        return lsn(self.cycle, self.block)

    def capacity(self) -> int:
        """Bytes of the log."""
        return self.size << C.BBSHIFT

    # -- records ---------------------------------------------------------------
    def _record(self, ops: list, tail_lsn: int) -> tuple[bytes, int]:
        """Pack ``ops`` [(op header, payload)] into one record at the head;
        returns (record bytes, its LSN) and moves the head past it."""
        body = bytearray()
        for hdr, payload in ops:
            body += hdr
            body += payload
        total = C.BBSIZE + len(body)
        total = -(-total // self.roundoff) * self.roundoff
        body += bytes(total - C.BBSIZE - len(body))
        nblocks = len(body) >> C.BBSHIFT
        if nblocks > XLOG_CYCLE_DATA_WORDS:
            raise FsToolError("internal: log record larger than its header can describe")
        rec_lsn = lsn(self.cycle, self.block)
        header = bytearray(C.BBSIZE)
        # the first word of every data block is replaced by the cycle number
        cycle_data = []
        for i in range(nblocks):
            off = i << C.BBSHIFT
            cycle_data.append(_U32.unpack_from(body, off)[0])
            _U32.pack_into(body, off, self.cycle)
        _REC_HDR.pack_into(header, 0, XLOG_HEADER_MAGIC_NUM, self.cycle, XLOG_VERSION_2,
                           len(body), rec_lsn, tail_lsn, 0, self.prev_block, len(ops))
        struct.pack_into(f">{nblocks}I", header, 44, *cycle_data)
        _REC_TAIL.pack_into(header, 300, XLOG_FMT_LINUX_LE, self.uuid, XLOG_RECORD_BSIZE)
        crc = parsers.crc32c(bytes(header[:XLOG_REC_CRC_SIZE]))
        crc = _crc_continue(crc, body)
        _CRC.pack_into(header, 32, crc)
        rec = bytes(header) + bytes(body)
        self.prev_block = self.block
        return rec, rec_lsn

    def _put(self, rec: bytes) -> None:
        """Write a record at the head, wrapping at the end of the log."""
        nbb = len(rec) >> C.BBSHIFT
        if nbb > self.size:
            raise FsToolError("internal: log record larger than the log")
        first = min(nbb, self.size - self.block)
        self.dev.pwrite((self.start + self.block) << C.BBSHIFT, rec[:first << C.BBSHIFT])
        if first < nbb:
            # the part past the end: its blocks carry the next cycle number
            rest = bytearray(rec[first << C.BBSHIFT:])
            nxt = self.cycle + 1
            if nxt == XLOG_HEADER_MAGIC_NUM:
                nxt += 1
            for off in range(0, len(rest), C.BBSIZE):
                _U32.pack_into(rest, off, nxt)
            self.dev.pwrite(self.start << C.BBSHIFT, bytes(rest))
        self.block += nbb
        if self.block >= self.size:
            self.block -= self.size
            self.cycle += 1
            if self.cycle == XLOG_HEADER_MAGIC_NUM:
                self.cycle += 1
        self.bytes_written += len(rec)
        self.records_written += 1

    # -- what the journal writes -------------------------------------------------
    def write_checkpoint(self, tid: int, items: list, new_tail_lsn: int) -> int:
        """Write one checkpoint: ``items`` is a list of region lists (one per
        log item).  Records before the last carry the current tail; the last
        one, written after a flush, carries ``new_tail_lsn``.  Returns the
        checkpoint's LSN (that of its first record)."""
        nitems = sum(len(regions) for regions in items)
        ops = [(XLOG_START_TRANS, b"")]
        ops.append((0, _TRANS_HDR.pack(XFS_TRANS_HEADER_MAGIC, XFS_TRANS_CHECKPOINT,
                                       _signed32(tid), nitems)))
        for regions in items:
            for r in regions:
                ops.append((0, r))
        ops.append((XLOG_COMMIT_TRANS, b""))
        records = self._pack_ops(tid, XFS_TRANSACTION, ops)
        start_lsn = self.head_lsn
        for k, rec_ops in enumerate(records):
            last = k == len(records) - 1
            if last:
                self.dev.fsync()
                self.tail_lsn = new_tail_lsn
            rec, _ = self._record(rec_ops, self.tail_lsn)
            self._put(rec)
        self.dev.fsync()
        return start_lsn

    def write_unmount(self, tid: int) -> int:
        """The unmount record that marks the log clean (every checkpoint's
        buffers are on disk; the caller flushed them)."""
        self.tail_lsn = self.head_lsn
        hdr = _OP_HDR.pack(tid, _UNMOUNT.size, XFS_LOG, XLOG_UNMOUNT_TRANS, 0)
        rec, rec_lsn = self._record([(hdr, _UNMOUNT.pack(XLOG_UNMOUNT_TYPE, 0, 0))],
                                    self.tail_lsn)
        self._put(rec)
        self.dev.fsync()
        self.tail_lsn = self.head_lsn
        return rec_lsn

    def _pack_ops(self, tid: int, client: int, ops: list) -> list:
        """Split operations [(flags, payload)] into records of at most
        XLOG_RECORD_BSIZE data bytes; a payload that does not fit is
        continued in the next record (CONTINUE, then WAS_CONT)."""
        records: list = []
        cur: list = []
        full = self.room
        room = full
        hsz = _OP_HDR.size
        for flags, payload in ops:
            pos = 0
            n = len(payload)
            cont = False
            while True:
                left = n - pos
                if room < hsz + (8 if left else 0):
                    records.append(cur)
                    cur, room = [], full
                take = min(left, (room - hsz) & ~3)
                f = flags
                if cont:
                    f |= XLOG_WAS_CONT_TRANS
                if take < left:
                    f |= XLOG_CONTINUE_TRANS
                piece = payload[pos:pos + take]
                cur.append((_OP_HDR.pack(tid, take, client, f, 0), piece))
                room -= hsz + take
                pos += take
                if pos >= n:
                    break
                cont = True
        if cur:
            records.append(cur)
        return records


def _signed32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def _crc_continue(crc: int, data) -> int:
    """crc32c over ``data`` continuing from a finished crc32c value."""
    return parsers.crc32c(bytes(data), crc)


def find_log_head(fs) -> tuple[int, int, int]:
    """(head block, cycle, block of the last record header) of a clean
    log, as the writer continues it."""
    from ..fs.logstate import XLOG_HEADER_MAGIC, find_head
    sb = fs.sb
    head, cycle = find_head(fs)
    base = fs.fsb_to_daddr(sb.logstart)
    nblocks = sb.logblocks << (sb.blocklog - C.BBSHIFT)
    prev = 0
    if cycle:
        blk = (head - 1) % nblocks
        for _ in range(min(nblocks, 520)):
            raw = fs.dev.pread((base + blk) << C.BBSHIFT, 4)
            if _U32.unpack(raw)[0] == XLOG_HEADER_MAGIC:
                prev = blk
                break
            blk = (blk - 1) % nblocks
        else:
            raise CorruptionError("log", "no record header before the head")
    return head, cycle, prev
