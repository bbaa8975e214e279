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

import struct
from dataclasses import dataclass, field

from ..format import log as L
from .records import RecordError

_U16x2 = struct.Struct("<HH")


@dataclass
class Item:
    regions: list = field(default_factory=list)   # bytes of each region
    total: int = 0

    @property
    def type(self) -> int:
        return _U16x2.unpack_from(self.regions[0], 0)[0] if self.regions and \
            len(self.regions[0]) >= 2 else 0


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


class Reassembler:
    """Feed records in log order; completed transactions come out of
    :meth:`feed` (a list per record), unmount records are counted."""

    def __init__(self):
        self.open: dict[int, Transaction] = {}
        self.unmounts = 0

    def feed(self, rec) -> list:
        done = []
        body = rec.body
        opened = self.open
        for i, (tid, oflags, _client, a, b) in enumerate(rec.raw_ops):
            t = opened.get(tid)
            if t is None:
                if not oflags & L.XLOG_START_TRANS:
                    continue            # slack before a transaction starts
                opened[tid] = Transaction(tid, rec.lsn, rec.blk)
                continue
            flags = oflags & ~L.XLOG_END_TRANS
            if flags & L.XLOG_WAS_CONT_TRANS:
                flags &= ~L.XLOG_CONTINUE_TRANS
            try:
                if flags == 0 or flags == L.XLOG_CONTINUE_TRANS:
                    if b > a:
                        self._add(t, bytes(body[a:b]))
                elif self._process(t, flags, oflags, bytes(body[a:b]), rec):
                    done.append(t)
            except RecordError:
                raise
            except ValueError as e:
                raise RecordError(rec.blk, f"op {i} (transaction 0x{tid:08x}): {e}") \
                    from None
        return done

    def _process(self, t: Transaction, flags: int, oflags: int, data: bytes, rec) -> bool:
        if flags == L.XLOG_WAS_CONT_TRANS:
            self._add_cont(t, data)
        elif flags == L.XLOG_COMMIT_TRANS:
            del self.open[t.tid]
            t.commit_lsn = rec.lsn
            t.commit_blk = rec.blk
            if not t.items and len(t.header) != L.TRANS_HEADER.size:
                return True
            return True
        elif flags == L.XLOG_UNMOUNT_TRANS:
            del self.open[t.tid]
            self.unmounts += 1
        else:
            raise ValueError(f"bad op flags 0x{oflags:x}")
        return False

    def _add(self, t: Transaction, region: bytes) -> None:
        n = len(region)
        items = t.items
        if items:
            item = items[-1]
            if item.total and len(item.regions) < item.total:
                item.regions.append(region)
                return
        self._add_slow(t, region, n)

    def _add_slow(self, t: Transaction, data: bytes, n: int) -> None:
        if not t.items and len(t.header) < L.TRANS_HEADER.size:
            if len(t.header) == 0:
                if n < 4 or struct.unpack_from("<I", data, 0)[0] != L.XFS_TRANS_HEADER_MAGIC:
                    raise ValueError("bad transaction header magic")
            if n > L.TRANS_HEADER.size:
                raise ValueError(f"transaction header of {n} bytes")
            t.header = bytes(data)
            return
        region = data
        item = t.items[-1] if t.items else None
        if item is None or (item.total and len(item.regions) == item.total):
            item = Item()
            t.items.append(item)
        if item.total == 0:
            if n < 4:
                raise ValueError(f"item's first region of {n} bytes")
            size = _U16x2.unpack_from(region, 0)[1]
            if size == 0 or size > L.XLOG_MAX_REGIONS_IN_ITEM:
                raise ValueError(f"bad number of regions ({size}) in log item "
                                 f"{L.ITEM_NAMES.get(_U16x2.unpack_from(region, 0)[0], '?')}")
            item.total = size
        if len(item.regions) >= item.total:
            raise ValueError(f"log item region count {len(item.regions)} overflows "
                             f"its size {item.total}")
        item.regions.append(region)

    def _add_cont(self, t: Transaction, data) -> None:
        if not t.items:
            # the transaction header was split across records
            if len(t.header) + len(data) > L.TRANS_HEADER.size:
                raise ValueError("transaction header continued past its size")
            t.header = t.header + bytes(data)
            return
        item = t.items[-1]
        if not item.regions:
            raise ValueError("continuation of an empty item")
        item.regions[-1] = item.regions[-1] + bytes(data)
