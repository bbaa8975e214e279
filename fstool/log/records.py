"""Log records from the tail to the head, and the ops inside them.

:func:`walk` follows the kernel's ``xlog_do_recovery_pass``: the header
size comes from the tail record, every record header is validated, the
body is read (wrapping at the end of the log), CRC-checked, its cycle
words restored, and the ops are cut out one by one with the kernel's
checks (client id, length inside the record).
"""
from __future__ import annotations

from typing import NamedTuple

from .._backend import parsers
from ..format import log as L
from .device import LogCorrupt, LogDevice

_MAGIC = b"\xfe\xed\xba\xbe"


class Op(NamedTuple):
    tid: int
    flags: int
    clientid: int
    data: memoryview          # oh_len bytes
    offset: int               # byte offset of the op header in the record body


class Record:
    """A log record: its header (decoded), body and ops."""
    __slots__ = ("blk", "header", "hblks", "crc_ok", "body", "raw_ops")

    def __init__(self, blk: int, header: dict, hblks: int, crc_ok: bool, body: bytearray,
                 raw_ops: list | None = None):
        self.blk = blk                  # log block of the header
        self.header = header
        self.hblks = hblks
        self.crc_ok = crc_ok
        self.body = body
        self.raw_ops = [] if raw_ops is None else raw_ops  # (tid, flags, client, start, end)

    def __repr__(self) -> str:
        return f"Record(blk={self.blk}, header={self.header!r}, hblks={self.hblks}, " \
               f"crc_ok={self.crc_ok})"

    @property
    def ops(self) -> list:
        mv = memoryview(self.body)
        return [Op(tid, flags, client, mv[a:b], a - 12) for tid, flags, client, a, b in
                self.raw_ops]

    @property
    def lsn(self) -> int:
        return self.header["h_lsn"]

    @property
    def length(self) -> int:
        return self.header["h_len"]

    @property
    def nblocks(self) -> int:
        return self.hblks + L.record_blocks(self.header["h_len"])


class RecordError(LogCorrupt):
    def __init__(self, blk: int, detail: str):
        self.rec_blk = blk
        super().__init__(f"record at log block {blk}: {detail}")


def _valid_header(rhead: dict, blk: int, bufsize: int, uuid: bytes) -> None:
    if rhead["h_magicno"] != L.XLOG_HEADER_MAGIC_NUM:
        raise RecordError(blk, f"bad magic 0x{rhead['h_magicno']:08x} (no record header "
                          "where the previous record ends)")
    v = rhead["h_version"]
    if not v or v & ~L.XLOG_VERSION_OKBITS:
        raise RecordError(blk, f"unrecognised log version {v}")
    hlen = rhead["h_len"]
    if hlen <= 0 or hlen > bufsize or hlen >= 1 << 31:
        raise RecordError(blk, f"impossible length {hlen} (iclog size {bufsize})")


def _header_size(ld: LogDevice, tail: int) -> int:
    sect = ld.read(tail, 1)
    rhead = L.REC_HEADER.unpack(sect)
    h_size = rhead["h_size"]
    h_len = rhead["h_len"]
    if rhead["h_magicno"] == L.XLOG_HEADER_MAGIC_NUM and h_len > h_size and \
            h_len <= ld.logbsize and rhead["h_num_logops"] == 1:
        h_size = ld.logbsize               # the xfsprogs lsunit quirk the kernel forgives
    _valid_header(rhead, tail, h_size, ld.uuid)
    if h_size > L.XLOG_MAX_RECORD_BSIZE:
        raise RecordError(tail, f"iclog size {h_size} exceeds 256 KiB")
    return h_size, rhead


def walk(ld: LogDevice, head: int, tail: int, *, check_crc: bool = True,
         parse_ops: bool = True, crc_only: bool = False):
    """Yield :class:`Record` objects from ``tail`` up to ``head``.

    With ``crc_only`` the bodies are not unpacked (the CRC pass).  A record
    whose CRC does not match raises :class:`RecordError` when
    ``check_crc`` is set (v5 recovery treats it as fatal corruption);
    otherwise it is yielded with ``crc_ok`` False."""
    if head == tail:
        return
    h_size, trhead = _header_size(ld, tail)
    hblks = L.header_blocks(trhead["h_version"], h_size)
    total = (head - tail) % ld.bbsize
    pos = 0
    while pos < total:
        blk = (tail + pos) % ld.bbsize
        hdr = ld.read(blk, hblks)
        rhead = L.REC_HEADER.unpack(hdr)
        _valid_header(rhead, blk, h_size, ld.uuid)
        bblks = L.record_blocks(rhead["h_len"])
        body = bytearray(ld.read(blk + hblks, bblks))
        crc_ok = L.rec_crc_ok(hdr, body, rhead["h_len"])
        stored = L.stored_rec_crc(hdr)
        if crc_only:
            # the CRC pass accepts a zero CRC; recovery proper does not (v5)
            if not crc_ok:
                raise RecordError(blk, "record CRC mismatch")
            yield Record(blk, rhead, hblks, crc_ok, body)
            pos += hblks + bblks
            continue
        crc_ok = crc_ok and stored != 0
        if check_crc and not crc_ok:
            raise RecordError(blk, f"record CRC mismatch (stored 0x{stored:08x}, computed "
                              f"0x{L.rec_crc(hdr, body, rhead['h_len']):08x})")
        if rhead["h_fmt"] != L.XLOG_FMT_LINUX_LE:
            raise RecordError(blk, f"log written in format {rhead['h_fmt']} (not "
                              "little-endian Linux): can't recover")
        if rhead["h_fs_uuid"] != ld.uuid:
            raise RecordError(blk, "record uuid does not match the superblock")
        L.unstamp_cycles(hdr, body, rhead["h_len"])
        rec = Record(blk, rhead, hblks, crc_ok, body)
        if parse_ops:
            rec.raw_ops = split_ops(rec)
        yield rec
        pos += hblks + bblks


def split_ops(rec: Record) -> list:
    """The ops of a record (xlog_recover_process_data's loop)."""
    try:
        return parsers.log_split_ops(rec.body, rec.header["h_len"], rec.header["h_num_logops"])
    except ValueError as e:
        raise RecordError(rec.blk, str(e)) from None


def crc_pass(ld: LogDevice, head: int, tail: int, why: list | None = None):
    """XLOG_RECOVER_CRCPASS: the log block of the first record that fails
    its CRC or its header checks, or None when all pass.  The reason is
    appended to ``why`` when given."""
    last = tail
    try:
        for rec in walk(ld, head, tail, crc_only=True):
            last = (rec.blk + rec.nblocks) % ld.bbsize
    except LogCorrupt as e:
        if why is not None:
            why.append(e.detail)
        return getattr(e, "rec_blk", last)
    except Exception as e:
        if why is not None:
            why.append(f"record at log block {last}: {e}")
        return last
    return None
