"""Writing to the log: unmount records, stale-block clearing, zeroing.

These are the few log writes recovery itself needs (the kernel's
``xlog_clear_stale_blocks`` and ``xlog_unmount_write``); records are built
with :mod:`fstool.format.log` exactly as a log writer builds them.
"""
from __future__ import annotations

from ..format import log as L
from .head import LogDevice

BB = L.BBSIZE


def iclog_size(ld: LogDevice) -> int:
    """The iclog size a default mount uses: 32 KiB, or the log stripe unit
    when that is larger."""
    return max(L.XLOG_BIG_RECORD_BSIZE, ld.sunit)


def build_record(ld: LogDevice, cycle: int, block: int, body: bytes, nops: int, *,
                 tail_lsn: int, prev_block: int) -> bytes:
    """One complete record (header sectors + stamped body) to be written at
    log block ``block``; blocks that wrap past the end of the log carry
    ``cycle + 1`` as the kernel's split writes do."""
    h_size = iclog_size(ld)
    hblks = L.header_blocks(L.XLOG_VERSION_2, h_size)
    unit = ld.sunit or BB
    total = -(-(hblks * BB + len(body)) // unit) * unit
    h_len = total - hblks * BB
    data = bytearray(body) + bytearray(h_len - len(body))
    hdr = bytearray(hblks * BB)
    hdr[:L.REC_HEADER.size] = L.REC_HEADER.pack({
        "h_magicno": L.XLOG_HEADER_MAGIC_NUM, "h_cycle": cycle,
        "h_version": L.XLOG_VERSION_2, "h_len": h_len, "h_lsn": L.lsn(cycle, block),
        "h_tail_lsn": tail_lsn, "h_crc": b"\0" * 4, "h_prev_block": prev_block,
        "h_num_logops": nops, "h_fmt": L.XLOG_FMT_LINUX_LE, "h_fs_uuid": ld.uuid,
        "h_size": h_size})
    L.stamp_cycles(hdr, data, cycle)
    rec = hdr + data
    # the part past the physical end of the log belongs to the next cycle
    split = ld.bbsize - block
    if split < len(rec) // BB:
        nxt = (cycle + 1).to_bytes(4, "big")
        for i in range(split, len(rec) // BB):
            rec[i * BB:i * BB + 4] = nxt
    hdr2 = rec[:hblks * BB]
    L.set_rec_crc(hdr2, rec[hblks * BB:], h_len)
    rec[:hblks * BB] = hdr2
    return bytes(rec)


def unmount_record(ld: LogDevice, cycle: int, block: int, prev_block: int) -> bytes:
    tid = (0x46535400 ^ block ^ (cycle << 8)) & 0xFFFFFFFF
    body = L.OP_HEADER.pack({"oh_tid": tid, "oh_len": 0, "oh_clientid": L.XFS_LOG,
                             "oh_flags": L.XLOG_UNMOUNT_TRANS})
    body += L.UNMOUNT_LOG_FORMAT.pack({"magic": L.XLOG_UNMOUNT_TYPE})
    return build_record(ld, cycle, block, body, 1, tail_lsn=L.lsn(cycle, block),
                        prev_block=prev_block)


def write_wrapped(ld: LogDevice, out, block: int, data: bytes) -> None:
    """Write sectors at log block ``block``, wrapping at the end of the log."""
    n = len(data) // BB
    first = min(n, ld.bbsize - block)
    out.pwrite((ld.start_daddr + block) * BB, data[:first * BB])
    if first < n:
        out.pwrite(ld.start_daddr * BB, data[first * BB:])


def empty_records(ld: LogDevice, cycle: int, start: int, count: int, tail_lsn: int) -> bytes:
    """xlog_add_record for ``count`` sectors: empty record headers carrying
    ``cycle`` (the kernel stamps blocks in front of the head this way)."""
    tpl = bytearray(BB)
    tpl[:L.REC_HEADER.size] = L.REC_HEADER.pack({
        "h_magicno": L.XLOG_HEADER_MAGIC_NUM, "h_cycle": cycle,
        "h_version": L.XLOG_VERSION_2, "h_lsn": 0, "h_tail_lsn": tail_lsn,
        "h_crc": b"\0" * 4, "h_fmt": L.XLOG_FMT_LINUX_LE, "h_fs_uuid": ld.uuid})
    out = bytearray(tpl * count)
    lsn_off = L.REC_HEADER.offset("h_lsn")
    hi = cycle << 32
    for j in range(count):
        o = j * BB + lsn_off
        out[o:o + 8] = (hi | (start + j)).to_bytes(8, "big")
    return bytes(out)


def clear_stale(ld: LogDevice, out, head_cycle: int, head: int, tail_lsn: int) -> int:
    """xlog_clear_stale_blocks: overwrite what may lie in front of the head
    (writes of iclogs that never completed) so it cannot pass for records
    of the current cycle.  Returns the sectors written."""
    tail_cycle, tail_block = L.cycle_lsn(tail_lsn), L.block_lsn(tail_lsn)
    if head_cycle == tail_cycle:
        if head < tail_block:
            return 0
        dist = tail_block + (ld.bbsize - head)
    else:
        if head >= tail_block or head_cycle != tail_cycle + 1:
            return 0
        dist = tail_block - head
    if dist <= 0:
        return 0
    n = min(L.XLOG_TOTAL_REC_SHIFT_BB, dist)
    if head + n <= ld.bbsize:
        out.pwrite((ld.start_daddr + head) * BB,
                   empty_records(ld, head_cycle - 1, head, n, tail_lsn))
    else:
        first = ld.bbsize - head
        out.pwrite((ld.start_daddr + head) * BB,
                   empty_records(ld, head_cycle - 1, head, first, tail_lsn))
        out.pwrite(ld.start_daddr * BB, empty_records(ld, head_cycle, 0, n - first, tail_lsn))
    return n


def mark_clean(ld: LogDevice, out, cycle: int, head: int, prev_block: int) -> int:
    """Write an unmount record at ``head`` (after clearing the stale blocks
    beyond it): the log reads as cleanly unmounted.  Returns the new head."""
    rec = unmount_record(ld, cycle, head, prev_block)
    nb = len(rec) // BB
    after = (head + nb) % ld.bbsize
    after_cycle = cycle + 1 if head + nb >= ld.bbsize else cycle
    clear_stale(ld, out, after_cycle, after, L.lsn(cycle, head))
    out.fsync()
    write_wrapped(ld, out, head, rec)
    out.fsync()
    return after


def zero_log(ld: LogDevice, out, cycle: int) -> None:
    """Like xfs_repair -L (libxfs_log_clear): one unmount record at block 0
    with ``cycle`` (above every LSN the metadata may carry) and, past cycle
    1, every other sector stamped with an empty record of the previous
    cycle, so that the head is found right after the unmount record."""
    base = ld.start_daddr * BB
    rec = unmount_record(ld, cycle, 0, 0)
    nrec = len(rec) // BB
    if cycle <= 1:
        out.zero_range(base, ld.bbsize * BB)
    else:
        step = 2048
        tail = L.lsn(cycle, 0)
        for blk in range(nrec, ld.bbsize, step):
            n = min(step, ld.bbsize - blk)
            out.pwrite(base + blk * BB, empty_records(ld, cycle - 1, blk, n, tail))
    out.fsync()
    out.pwrite(base, rec)
    out.fsync()





def transaction_records(ld: LogDevice, cycle: int, block: int, tid: int, items: list,
                        prev_block: int, tail_lsn: int) -> tuple[list, int, int, int]:
    """One committed transaction (start op, transaction header, every
    region of every item as its own op, commit op) laid out in records from
    log block ``block``.  ``items`` is a list of region lists.  Returns
    ``([(log block, record bytes)], new head, new head cycle, last record's
    block)``.  ``tail_lsn`` is the tail the records carry."""
    ops = [(L.XLOG_START_TRANS, b"")]
    nregions = sum(len(r) for r in items)
    ops.append((0, L.TRANS_HEADER.pack({"th_magic": L.XFS_TRANS_HEADER_MAGIC,
                                        "th_type": L.XFS_TRANS_CHECKPOINT, "th_tid": tid,
                                        "th_num_items": nregions})))
    for regions in items:
        for reg in regions:
            if len(reg) + 12 > L.XLOG_BIG_RECORD_BSIZE - BB:
                raise ValueError(f"region of {len(reg)} bytes does not fit a record")
            ops.append((0, bytes(reg)))
    ops.append((L.XLOG_COMMIT_TRANS, b""))
    h_size = iclog_size(ld)
    max_body = h_size - L.header_blocks(L.XLOG_VERSION_2, h_size) * BB
    groups, cur, size = [], [], 0
    for flags, data in ops:
        n = 12 + len(data)
        if cur and size + n > max_body:
            groups.append(cur)
            cur, size = [], 0
        cur.append((flags, data))
        size += n
    groups.append(cur)
    out = []
    pos, cyc, prev = block, cycle, prev_block
    for g in groups:
        body = b"".join(L.OP_HEADER.pack({"oh_tid": tid, "oh_len": len(d),
                                          "oh_clientid": L.XFS_TRANSACTION,
                                          "oh_flags": f}) + d for f, d in g)
        rec = build_record(ld, cyc, pos, body, len(g), tail_lsn=tail_lsn, prev_block=prev)
        out.append((pos, rec))
        prev = pos
        nb = len(rec) // BB
        if pos + nb >= ld.bbsize:
            cyc += 1
        pos = (pos + nb) % ld.bbsize
    return out, pos, cyc, prev
