"""The log writer: checkpoints, unmount records and the other writes the log
receives, in the kernel's format (structures from :mod:`fstool.format.log`).

The internal log is a ring of 512-byte basic blocks.  Each write is a log
record: header sectors (magic, cycle, length, its own LSN, the tail LSN,
CRC, the number of operations) and up to one iclog of data (32 KiB, or the
log stripe unit when that is larger) holding operations, each behind a
12-byte op header.  The first word of every data block is replaced by the
cycle number (the words it held travel in the header's cycle data), so that
the head of the log can be found after a crash by looking for the place
where the cycle number drops.

A checkpoint (:meth:`LogWriter.write_checkpoint`) is written as the
kernel's delayed logging writes one: a start operation, a transaction
header (``XFS_TRANS_CHECKPOINT``), every item's regions as operations
(regions that do not fit the record are continued in the next:
``CONTINUE``, then ``WAS_CONT``), then a commit operation in the last
record.  Every record but the last is written, the device is flushed, then
the record holding the commit operation is written and flushed again:
recovery replays a checkpoint only when its commit operation is on disk,
and then everything before it is too.

Records carry the tail: the LSN of the oldest checkpoint whose buffers may
not yet be written back in place.  The journal writes a checkpoint's
buffers back right after it, and the next flush makes them durable, so the
tail never lags more than one checkpoint behind the head.

Records wrap around the end of the log like the kernel's: the part past the
end continues at block 0, and the first words of its blocks carry the next
cycle number.  Before writing at a head found after a crash, the blocks in
front of it are stamped with the previous cycle (the kernel's
xlog_clear_stale_blocks), so that leftovers of writes that never completed
can never pass for new records.
"""
from __future__ import annotations

import struct

from ..errors import CorruptionError, FsToolError, NoSpaceError
from ..format import constants as C, log as L
from ..log.head import find_state

BB = L.BBSIZE
XFS_BLF_CHUNK = L.XFS_BLF_CHUNK


def lsn(cycle: int, block: int) -> int:
    return L.lsn(cycle, block)


class LogGeometry:
    """Where the log lies on its device (the image, or an external log
    device) and how records are sized (what a writer needs; the log
    reader's LogDevice carries the same attributes)."""

    def __init__(self, fs):
        sb = fs.sb
        self.start_daddr = fs.log_start_daddr
        self.bbsize = sb.logblocks << (sb.blocklog - C.BBSHIFT)
        sunit = sb.fields["sb_logsunit"]
        self.sunit = sunit if sunit > 1 else 0
        self.uuid = sb.uuid_bytes
        self.logbsize = max(L.XLOG_BIG_RECORD_BSIZE, self.sunit)


def iclog_size(g) -> int:
    """The iclog size a default mount uses: 32 KiB, or the log stripe unit
    when that is larger."""
    return max(L.XLOG_BIG_RECORD_BSIZE, g.sunit)


def build_record(g, cycle: int, block: int, body: bytes, nops: int, *,
                 tail_lsn: int, prev_block: int) -> bytes:
    """One complete record (header sectors + stamped body) to be written at
    log block ``block``; blocks that wrap past the end of the log carry
    ``cycle + 1`` as the kernel's split writes do."""
    h_size = iclog_size(g)
    hblks = L.header_blocks(L.XLOG_VERSION_2, h_size)
    unit = g.sunit or BB
    total = -(-(hblks * BB + len(body)) // unit) * unit
    h_len = total - hblks * BB
    data = bytearray(body) + bytearray(h_len - len(body))
    hdr = bytearray(hblks * BB)
    hdr[:L.REC_HEADER.size] = L.REC_HEADER.pack({
        "h_magicno": L.XLOG_HEADER_MAGIC_NUM, "h_cycle": cycle,
        "h_version": L.XLOG_VERSION_2, "h_len": h_len, "h_lsn": L.lsn(cycle, block),
        "h_tail_lsn": tail_lsn, "h_crc": b"\0" * 4, "h_prev_block": prev_block,
        "h_num_logops": nops, "h_fmt": L.XLOG_FMT_LINUX_LE, "h_fs_uuid": g.uuid,
        "h_size": h_size})
    L.stamp_cycles(hdr, data, cycle)
    rec = hdr + data
    # the part past the physical end of the log belongs to the next cycle
    split = g.bbsize - block
    if split < len(rec) // BB:
        nxt = _next_cycle(cycle).to_bytes(4, "big")
        for i in range(split, len(rec) // BB):
            rec[i * BB:i * BB + 4] = nxt
    hdr2 = rec[:hblks * BB]
    L.set_rec_crc(hdr2, rec[hblks * BB:], h_len)
    rec[:hblks * BB] = hdr2
    return bytes(rec)


def _next_cycle(cycle: int) -> int:
    nxt = cycle + 1
    return nxt + 1 if nxt == L.XLOG_HEADER_MAGIC_NUM else nxt


def write_wrapped(g, out, block: int, data: bytes) -> None:
    """Write sectors at log block ``block``, wrapping at the end of the log."""
    n = len(data) // BB
    first = min(n, g.bbsize - block)
    out.pwrite((g.start_daddr + block) * BB, data[:first * BB])
    if first < n:
        out.pwrite(g.start_daddr * BB, data[first * BB:])


def unmount_record(g, cycle: int, block: int, prev_block: int) -> bytes:
    tid = (0x46535400 ^ block ^ (cycle << 8)) & 0xFFFFFFFF
    body = L.OP_HEADER.pack({"oh_tid": tid, "oh_len": L.UNMOUNT_LOG_FORMAT.size,
                             "oh_clientid": L.XFS_LOG, "oh_flags": L.XLOG_UNMOUNT_TRANS})
    body += L.UNMOUNT_LOG_FORMAT.pack({"magic": L.XLOG_UNMOUNT_TYPE})
    return build_record(g, cycle, block, body, 1, tail_lsn=L.lsn(cycle, block),
                        prev_block=prev_block)


def empty_records(g, cycle: int, start: int, count: int, tail_lsn: int) -> bytearray:
    """xlog_add_record for ``count`` sectors: empty record headers carrying
    ``cycle`` (the kernel stamps blocks in front of the head this way)."""
    tpl = bytearray(BB)
    tpl[:L.REC_HEADER.size] = L.REC_HEADER.pack({
        "h_magicno": L.XLOG_HEADER_MAGIC_NUM, "h_cycle": cycle,
        "h_version": L.XLOG_VERSION_2, "h_lsn": L.lsn(cycle, 0), "h_tail_lsn": tail_lsn,
        "h_crc": b"\0" * 4, "h_fmt": L.XLOG_FMT_LINUX_LE, "h_fs_uuid": g.uuid})
    out = tpl * count
    # each sector's LSN is (cycle, its block): the block, the LSN's low
    # word, one strided assignment for each of its four bytes
    blocks = struct.pack(f">{count}I", *range(start, start + count))
    low = L.REC_HEADER.offset("h_lsn") + 4
    for k in range(4):
        out[low + k::BB] = blocks[k::4]
    return out


def clear_stale(g, out, head_cycle: int, head: int, tail_lsn: int) -> int:
    """xlog_clear_stale_blocks: overwrite what may lie in front of the head
    (writes of iclogs that never completed) so it cannot pass for records
    of the current cycle.  Returns the sectors written."""
    tail_cycle, tail_block = L.cycle_lsn(tail_lsn), L.block_lsn(tail_lsn)
    if head_cycle == tail_cycle:
        if head < tail_block:
            return 0
        dist = tail_block + (g.bbsize - head)
    else:
        if head >= tail_block or head_cycle != tail_cycle + 1:
            return 0
        dist = tail_block - head
    if dist <= 0:
        return 0
    n = min(L.XLOG_TOTAL_REC_SHIFT_BB, dist)
    if head + n <= g.bbsize:
        out.pwrite((g.start_daddr + head) * BB,
                   empty_records(g, head_cycle - 1, head, n, tail_lsn))
    else:
        first = g.bbsize - head
        out.pwrite((g.start_daddr + head) * BB,
                   empty_records(g, head_cycle - 1, head, first, tail_lsn))
        out.pwrite(g.start_daddr * BB, empty_records(g, head_cycle, 0, n - first, tail_lsn))
    return n


def front_is_stale(g, dev, head_cycle: int, head: int) -> bool:
    """Whether a block the kernel's xlog_clear_stale_blocks would stamp in
    front of a clean head (up to XLOG_TOTAL_REC_SHIFT_BB of them) carries a
    cycle other than the one it would stamp: ``head_cycle - 1`` before the
    end of the log, ``head_cycle`` past it.  Such blocks (the zeroed hole
    xfsprogs' log clear leaves behind its cycle-2 unmount record at block 0,
    for one) would make records written at the head unfindable, so the
    writer clears them first as the kernel does at mount."""
    n = min(L.XLOG_TOTAL_REC_SHIFT_BB, g.bbsize)
    step = 2048
    done = 0
    while done < n:
        cnt = min(step, n - done)
        blk = (head + done) % g.bbsize
        cnt = min(cnt, g.bbsize - blk)
        want = head_cycle - 1 if head + done < g.bbsize else head_cycle
        data = dev.pread((g.start_daddr + blk) * BB, cnt * BB)
        if L.sector_cycles(data, cnt).count(want) != cnt:
            return True
        done += cnt
    return False


def mark_clean(g, out, cycle: int, head: int, prev_block: int) -> int:
    """Write an unmount record at ``head`` (after clearing the stale blocks
    beyond it): the log reads as cleanly unmounted.  Returns the new head."""
    clear_before_unmount(g, out, cycle, head, prev_block)
    out.fsync()
    return write_unmount_record(g, out, cycle, head, prev_block)


def clear_before_unmount(g, out, cycle: int, head: int, prev_block: int) -> None:
    """The first half of :func:`mark_clean`: the stale blocks past where the
    unmount record will go cleared (stamped with the previous cycle).  They
    lie where the head search already sees no record of the current
    cycle, so they may reach the disk in any order with other writes; they
    must be durable before the unmount record is written."""
    nb = len(unmount_record(g, cycle, head, prev_block)) // BB
    after = (head + nb) % g.bbsize
    after_cycle = cycle + 1 if head + nb >= g.bbsize else cycle
    clear_stale(g, out, after_cycle, after, L.lsn(cycle, head))


def write_unmount_record(g, out, cycle: int, head: int, prev_block: int) -> int:
    """The second half of :func:`mark_clean`: the unmount record at
    ``head``, made durable.  Returns the new head."""
    rec = unmount_record(g, cycle, head, prev_block)
    write_wrapped(g, out, head, rec)
    out.fsync()
    return (head + len(rec) // BB) % g.bbsize


def zero_log(g, out, cycle: int) -> None:
    """Like xfs_repair -L (libxfs_log_clear): one unmount record at block 0
    with ``cycle`` (above every LSN the metadata may carry) and, past cycle
    1, every other sector stamped with an empty record of the previous
    cycle, so that the head is found right after the unmount record.

    Block 0 is zeroed first: stopped part way, the log reads as a log of
    zeroes (clean, at 0:0: metadata stamped with any LSN is then ahead of
    it, which formatting the log again mends), never as a mixture of old
    records and new ones."""
    base = g.start_daddr * BB
    rec = unmount_record(g, cycle, 0, 0)
    nrec = len(rec) // BB
    if cycle <= 1:
        out.zero_range(base, g.bbsize * BB)
    else:
        out.pwrite(base, bytes(BB))
        out.fsync()
        step = 2048
        tail = L.lsn(cycle, 0)
        for blk in range(nrec, g.bbsize, step):
            n = min(step, g.bbsize - blk)
            out.pwrite(base + blk * BB, empty_records(g, cycle - 1, blk, n, tail))
    out.fsync()
    out.pwrite(base, rec)
    out.fsync()


def _xfsprogs_record(buf: bytearray, off: int, uuid: bytes, sunit: int, lsn_: int,
                     tail_lsn: int) -> int:
    """libxfs_log_header: one record holding an unmount record, written at
    byte ``off`` of ``buf`` (a record of ``sunit`` bytes when that is over
    two sectors, its cycle data in extended headers past 32 KiB; the CRC
    left zero, as xfsprogs leaves it).  Returns its length in bytes."""
    cycle = L.cycle_lsn(lsn_)
    hdrs = -(-sunit // L.XLOG_HEADER_CYCLE_SIZE) if sunit > L.XLOG_HEADER_CYCLE_SIZE else 1
    nbb = max(-(-sunit // BB) if sunit else 1, hdrs + 1)
    cyc = cycle.to_bytes(4, "big")
    op = L.OP_HEADER.pack({"oh_tid": 0xB0C0D0D0, "oh_len": 8, "oh_clientid": L.XFS_LOG,
                           "oh_flags": L.XLOG_UNMOUNT_TRANS, "oh_res2": 0})
    # the unmount payload in host order, as xfsprogs copies it (x86-64, arm64: little)
    body = op + L.XLOG_UNMOUNT_TYPE.to_bytes(2, "little") + bytes(6)
    hdr = L.REC_HEADER.pack({
        "h_magicno": L.XLOG_HEADER_MAGIC_NUM, "h_cycle": cycle, "h_version": L.XLOG_VERSION_2,
        "h_len": max(2 * BB, sunit) - hdrs * BB, "h_lsn": lsn_, "h_tail_lsn": tail_lsn,
        "h_crc": bytes(4), "h_prev_block": 0xFFFFFFFF, "h_num_logops": 1,
        "h_cycle_data": [int.from_bytes(body[:4], "big")] + [0] * (L.XLOG_CYCLE_DATA_SIZE - 1),
        "h_fmt": L.XLOG_FMT_LINUX_LE, "h_fs_uuid": uuid,
        "h_size": max(sunit, L.XLOG_BIG_RECORD_BSIZE), "h_pad0": 0})
    buf[off:off + nbb * BB] = bytes(nbb * BB)
    buf[off:off + len(hdr)] = hdr
    # the cycle at the start of every sector after the header's: each of
    # its four bytes in one strided assignment
    for k in range(4):
        buf[off + BB + k:off + nbb * BB:BB] = cyc[k:k + 1] * (nbb - 1)
    unmount = off + hdrs * BB
    buf[unmount + 4:unmount + len(body)] = body[4:]
    return nbb * BB


def xfsprogs_cleared_log(bbsize: int, uuid: bytes, logsunit: int, cycle: int) -> bytearray:
    """The log as xfsprogs' libxfs_log_clear formats it in memory (what
    xfs_metadump puts in a dump in place of a clean log): an unmount record
    at block 0 with ``cycle``; past cycle 1, from block 512 on, 256 KiB
    unmount records of the previous cycle (blocks 2 to 511 stay zero)."""
    buf = bytearray(bbsize * BB)
    sunit = logsunit if logsunit > 1 else 0
    first = max(-(-sunit // BB) if sunit else 2, 2)
    tail = L.lsn(cycle, 0) if cycle == 1 else L.lsn(cycle - 1, bbsize - first)
    _xfsprogs_record(buf, 0, uuid, sunit, L.lsn(cycle, 0), tail)
    if cycle == 1:
        return buf
    step = (256 * 1024) // BB
    blk = step
    n = min(bbsize - blk, step)
    while blk < bbsize:
        _xfsprogs_record(buf, blk * BB, uuid, n * BB, L.lsn(cycle - 1, blk),
                         L.lsn(cycle - 1, blk - n))
        blk += n
        n = min(bbsize - blk, n)
    return buf


def buf_item_regions(daddr: int, nbytes: int, blft: int, chunks: list, data,
                     cancel: bool = False) -> list:
    """The regions of a buffer log item: the xfs_buf_log_format (with the
    dirty map of ``chunks``, the logged 128-byte chunk numbers, sorted) and
    the bytes of every run of consecutive chunks."""
    nchunks = (nbytes + XFS_BLF_CHUNK - 1) // XFS_BLF_CHUNK
    map_size = (nchunks + 31) // 32
    words, _used = L.make_map(chunks)
    runs = []
    for c in chunks:
        if runs and runs[-1][1] == c:
            runs[-1][1] = c + 1
        else:
            runs.append([c, c + 1])
    flags = L.blft_to_flags(L.XFS_BLF_CANCEL if cancel else 0, blft)
    fmt = L.BUF_LOG_FORMAT.pack({"blf_type": L.XFS_LI_BUF, "blf_size": 1 + len(runs),
                                 "blf_flags": flags, "blf_len": nbytes >> C.BBSHIFT,
                                 "blf_blkno": daddr, "blf_map_size": map_size,
                                 "blf_data_map": words})
    # only the words of the map this buffer uses are logged, as the kernel does
    regions = [fmt[:L.BUF_LOG_FORMAT.offset("blf_data_map") + 4 * map_size]]
    for a, b in runs:
        regions.append(bytes(data[a * XFS_BLF_CHUNK:b * XFS_BLF_CHUNK]))
    return regions


def efd_regions(efi_id: int, extents) -> list:
    """An EFD item: the extents of EFI ``efi_id`` are freed."""
    ext = b"".join(L.EXTENT_64.pack({"ext_start": s, "ext_len": n}) for s, n in extents)
    return [L.EFD_LOG_FORMAT.pack({"efd_type": L.XFS_LI_EFD, "efd_size": 1,
                                   "efd_nextents": len(extents), "efd_efi_id": efi_id}) + ext]


def done_regions(code: int, intent_id: int) -> list:
    """The done item of an RUI, CUI, BUI, ATTRI or XMI (``code``: XFS_LI_RUD,
    XFS_LI_CUD, XFS_LI_BUD, XFS_LI_ATTRD or XFS_LI_XMD): the intent's work
    is finished."""
    lay, prefix, field = {L.XFS_LI_RUD: (L.RUD_LOG_FORMAT, "rud", "rud_rui_id"),
                          L.XFS_LI_CUD: (L.CUD_LOG_FORMAT, "cud", "cud_cui_id"),
                          L.XFS_LI_BUD: (L.BUD_LOG_FORMAT, "bud", "bud_bui_id"),
                          L.XFS_LI_ATTRD: (L.ATTRD_LOG_FORMAT, "alfd", "alfd_alf_id"),
                          L.XFS_LI_XMD: (L.XMD_LOG_FORMAT, "xmd", "xmd_xmi_id")}[code]
    return [lay.pack({f"{prefix}_type": code, f"{prefix}_size": 1, "__pad": 0,
                      field: intent_id})]


class LogWriter:
    """Appends records to the internal log of an open image, from a head
    (block, cycle, the block of the last record header) and a tail."""

    def __init__(self, dev, g, *, head_block: int, head_cycle: int, prev_block: int,
                 tail_lsn: int | None = None, sync=None):
        head_lsn_written = head_cycle != 0
        self.dev = dev
        # what makes the log and what it vouches for durable: the device's
        # fsync, or (an external log) that of the image and then the log's
        self.sync = sync or dev.fsync
        self.g = g
        self.size = g.bbsize                 # in 512-byte blocks
        unit = g.sunit or BB
        hblks = L.header_blocks(L.XLOG_VERSION_2, iclog_size(g))
        # data bytes a record holds: one iclog, less its header sectors
        self.room = iclog_size(g) - hblks * BB
        if unit > self.room + hblks * BB:
            raise FsToolError(f"a log stripe unit of {g.sunit} bytes is not supported for "
                              "writing")
        if head_cycle == 0:
            head_block, head_cycle = 0, 1
        if head_block >= self.size:
            head_block, head_cycle = 0, _next_cycle(head_cycle)
        self.block = head_block
        self.cycle = head_cycle
        self.prev_block = prev_block
        self.tail_lsn = L.lsn(self.cycle, self.block) if tail_lsn is None else tail_lsn
        # after a crash the blocks in front of the head are cleared first,
        # and again in front of the unmount record (as recovery marks a log
        # clean)
        self.recovered = tail_lsn is not None
        self.stale_pending = self.recovered or (
            head_lsn_written and front_is_stale(g, dev, self.cycle, self.block))
        self.bytes_written = 0
        self.records_written = 0

    @property
    def head_lsn(self) -> int:
        return L.lsn(self.cycle, self.block)

    def capacity(self) -> int:
        """Bytes of the log."""
        return self.size << C.BBSHIFT

    def free_blocks(self) -> int:
        """Sectors between the head and the tail that may be written."""
        tc, tb = L.cycle_lsn(self.tail_lsn), L.block_lsn(self.tail_lsn)
        if (tc, tb) == (self.cycle, self.block):
            return self.size
        return (tb - self.block) % self.size

    def _put(self, rec: bytes) -> None:
        """Write a record at the head, wrapping at the end of the log."""
        nbb = len(rec) // BB
        if nbb > self.size:
            raise FsToolError("internal: log record larger than the log")
        if self.stale_pending:
            clear_stale(self.g, self.dev, self.cycle, self.block, self.tail_lsn)
            self.stale_pending = False
        write_wrapped(self.g, self.dev, self.block, rec)
        self.prev_block = self.block
        self.block += nbb
        if self.block >= self.size:
            self.block -= self.size
            self.cycle = _next_cycle(self.cycle)
        self.bytes_written += len(rec)
        self.records_written += 1

    def _record(self, ops: list, tail_lsn: int) -> bytes:
        body = b"".join(hdr + payload for hdr, payload in ops)
        return build_record(self.g, self.cycle, self.block, body, len(ops),
                            tail_lsn=tail_lsn, prev_block=self.prev_block)

    # -- what the journal writes -------------------------------------------------
    def write_checkpoint(self, tid: int, items: list, new_tail_lsn: int) -> int:
        """Write one checkpoint: ``items`` is a list of region lists (one per
        log item).  Records before the last carry the current tail; the last
        one, written after a flush, carries ``new_tail_lsn``.  Returns the
        checkpoint's LSN (that of its first record)."""
        nregions = sum(len(regions) for regions in items)
        ops = [(L.XLOG_START_TRANS, b"")]
        ops.append((0, L.TRANS_HEADER.pack({"th_magic": L.XFS_TRANS_HEADER_MAGIC,
                                            "th_type": L.XFS_TRANS_CHECKPOINT,
                                            "th_tid": _signed32(tid),
                                            "th_num_items": nregions})))
        for regions in items:
            for r in regions:
                ops.append((0, r))
        ops.append((L.XLOG_COMMIT_TRANS, b""))
        records = self._pack_ops(tid, L.XFS_TRANSACTION, ops)
        # never over the part of the log still needed (after a crash, the
        # unreplayed log lies between the tail and the head)
        hblks = L.header_blocks(L.XLOG_VERSION_2, iclog_size(self.g))
        need = sum(hblks + (sum(len(h) + len(p) for h, p in r) + BB - 1) // BB
                   for r in records) + L.XLOG_TOTAL_REC_SHIFT_BB // 8 + 2
        if need >= self.free_blocks():
            raise NoSpaceError(f"the log has no room for a checkpoint of {need} sectors "
                               f"({self.free_blocks()} free)")
        start_lsn = self.head_lsn
        for k, rec_ops in enumerate(records):
            if k == len(records) - 1:
                self.sync()
                self.tail_lsn = new_tail_lsn
            self._put(self._record(rec_ops, self.tail_lsn))
        self.sync()
        return start_lsn

    def write_unmount(self) -> int:
        """The unmount record that marks the log clean (every checkpoint's
        buffers are on disk; the caller flushed them).  A writer that went
        on from a recovered log marks it clean as recovery does
        (:func:`mark_clean`: the stale blocks past the record cleared
        first), so that an interrupted recovery run again ends the same."""
        rec_lsn = self.head_lsn
        if self.recovered:
            self.stale_pending = False
            nb = len(unmount_record(self.g, self.cycle, self.block, self.prev_block)) // BB
            after = mark_clean(self.g, self.dev, self.cycle, self.block, self.prev_block)
            self.prev_block = self.block
            if self.block + nb >= self.size:
                self.cycle = _next_cycle(self.cycle)
            self.block = after
        else:
            self.tail_lsn = self.head_lsn
            self._put(unmount_record(self.g, self.cycle, self.block, self.prev_block))
            self.sync()
        self.tail_lsn = self.head_lsn
        return rec_lsn

    def _pack_ops(self, tid: int, client: int, ops: list) -> list:
        """Split operations [(flags, payload)] into records of at most
        ``room`` data bytes; a payload that does not fit is continued in
        the next record (CONTINUE, then WAS_CONT)."""
        records: list = []
        cur: list = []
        full = self.room
        room = full
        hsz = L.OP_HEADER.size
        pack = L.OP_HEADER.struct.pack
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
                    f |= L.XLOG_WAS_CONT_TRANS
                if take < left:
                    f |= L.XLOG_CONTINUE_TRANS
                cur.append((pack(tid, take, client, f, 0), payload[pos:pos + take]))
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


def find_log_head(fs) -> tuple[int, int, int]:
    """(head block, cycle, block of the last record header) of a clean
    log, as the writer continues it."""
    _ld, st = find_state(fs)
    if st.dirty:
        raise CorruptionError("log", "the log is dirty")
    if st.never_written:
        return 0, 0, 0
    return st.head, st.curr_cycle, st.head_rec
