"""Transactions reassembled from ops, as the kernel's recovery does it.

Ops are grouped by transaction id (``oh_tid``).  A transaction starts with
a START op, its first region is the transaction header, then each item is
a run of regions whose count is given by the first region's second 16-bit
field (``*_size``); an op flagged WAS_CONT continues the previous region.
A COMMIT op completes the transaction: only committed transactions are
replayed.  Each transaction carries the LSN of the record holding its
START op (``r_lsn``), which drives the v5 replay-ordering rule.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .._backend import parsers
from ..format import log as L
from .records import RecordError


# an item: its regions (bytes) and the region count its first region
# announces; ``type`` is the item type code (fstool_native's LogItem)
Item = parsers.LogItem


@dataclass
class Transaction:
    tid: int
    lsn: int                      # h_lsn of the record with the START op
    start_blk: int
    header: bytes = b""
    items: list = field(default_factory=list)
    commit_lsn: int = 0
    commit_blk: int = -1
    _theader_parts: bytearray = field(default_factory=bytearray, repr=False)

    @property
    def theader(self) -> dict | None:
        if len(self.header) == L.TRANS_HEADER.size:
            return L.TRANS_HEADER.unpack(self.header)
        return None


_CONSTS = (L.XLOG_START_TRANS, L.XLOG_END_TRANS, L.XLOG_WAS_CONT_TRANS,
           L.XLOG_CONTINUE_TRANS, L.XLOG_COMMIT_TRANS, L.XLOG_UNMOUNT_TRANS,
           L.TRANS_HEADER.size, L.XFS_TRANS_HEADER_MAGIC, L.XLOG_MAX_REGIONS_IN_ITEM,
           L.ITEM_NAMES)


class Reassembler:
    """Feed records in log order; completed transactions come out of
    :meth:`feed` (a list per record), unmount records are counted.  The
    work is fstool_native's LogReassembler (one call per record)."""

    def __init__(self):
        self._r = parsers.LogReassembler(Transaction, _CONSTS)

    @property
    def open(self) -> dict:
        """tid -> the transactions not yet committed."""
        return {tid: e[0] for tid, e in self._r.open.items()}

    @property
    def nbytes(self) -> int:
        """Bytes of the regions reassembled so far."""
        return self._r.nbytes

    @property
    def unmounts(self) -> int:
        return self._r.unmounts

    def feed(self, rec) -> list:
        """The transactions ``rec`` completes (its ops are cut and checked
        here: records may come from ``walk(..., parse_ops=False)``)."""
        h = rec.header
        try:
            return self._r.feed_record(rec.body, h["h_len"], h["h_num_logops"], rec.lsn,
                                       rec.blk)
        except ValueError as e:
            raise RecordError(rec.blk, str(e)) from None
