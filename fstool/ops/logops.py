"""Whole-image log operations: info, print, replay and zero.

``replay`` does what the kernel's mount does to a dirty log, and leaves a
clean one:

1. find the head and tail (torn writes trimmed, CRCs checked);
2. passes 1 and 2 into a write-back cache; nothing is written until the
   whole log has been read and every item checked (when the blocks to
   write outgrow the cache, the log is first checked end to end without
   writing, then replayed writing as it goes);
3. refuse, still having written nothing, intents fstool cannot finish;
4. write the replayed blocks, fsync;
5. finish the unfinished intents (EFI, RUI, CUI, BUI, ATTRI, XMI), free
   the inodes on the AGI unlinked lists, recompute the superblock
   counters: one transaction of a write
   session that goes on writing the log from the recovered head (its
   checkpoint is logged before anything is written in place);
6. clear the stale sectors in front of the head and write an unmount
   record, fsync.

Until step 6 the log stays dirty, so an interrupted replay is simply run
again: replay is idempotent (the v5 LSN rule skips what was already
written, the rest is rewritten with the same bytes, and a post-replay
checkpoint already committed is replayed like any other).
"""
from __future__ import annotations

import os

from ..errors import FsToolError
from ..format import constants as C
from ..format import log as L
from ..fs.filesystem import Filesystem
from ..io.device import Device, writes_so_far
from ..io.lock import ImageLock, refuse_if_mounted
from ..log.head import LogDevice, find_state
from ..log.items import ItemError, attri_region_lines, decode, pptr_lines
from ..log.reassemble import Item
from ..recovery import finish
from ..recovery.memory import replay_in_memory
from ..recovery.recover import Recovery
from ..trans import logwriter as W
from ..io.signals import held
from ..io.undo import UndoLogExternal


def open_filesystem(path):
    """The image opened as every command opens it.  An error here is marked
    ``while_opening``: an image fstool cannot open at all keeps the common
    exit statuses, while a log that cannot be read or replayed is status 4."""
    try:
        return Filesystem(path)
    except FsToolError as e:
        e.while_opening = True
        raise


def info(fs) -> dict:
    return fs.log.info()


def print_records(fs):
    """Yield each record as a dict with its ops and decoded items.  An op
    that starts an item gets ``item``; the ops after it that carry the same
    item's further regions (as many as its format region announces) get
    ``region_of`` instead, naming the item and, for an ATTRI, what the
    region holds (name, newname, value, newvalue), as xfs_logprint reads
    them.  Continuations (WAS_CONT) are shown as such."""
    pending: dict = {}      # tid -> [item type, roles of the regions still to come]
    for rec in fs.log.records():
        h = rec.header
        ops = []
        for op in rec.ops:
            o = {"tid": op.tid, "len": len(op.data),
                 "client": L.CLIENT_NAMES.get(op.clientid, hex(op.clientid)),
                 "flags": L.flag_names(op.flags, L.OP_FLAG_NAMES)}
            if op.flags & L.XLOG_START_TRANS:
                pending.pop(op.tid, None)
            data = bytes(op.data)
            if op.flags & (L.XLOG_WAS_CONT_TRANS | L.XLOG_START_TRANS | L.XLOG_COMMIT_TRANS):
                pass
            elif pending.get(op.tid, (None, []))[1]:
                kind, roles = pending[op.tid][:2]
                role = roles.pop(0)
                o["region_of"] = {"type": kind, "region": role}
                attri = pending[op.tid][2]
                if attri is not None:
                    _attri_region(o, attri, role, data, last=not roles)
            elif len(data) >= 4:
                _op_item(o, data, op.tid, pending)
            ops.append(o)
        yield {"block": rec.blk, "lsn": L.lsn_str(h["h_lsn"]), "cycle": h["h_cycle"],
               "tail_lsn": L.lsn_str(h["h_tail_lsn"]), "length": h["h_len"],
               "num_ops": h["h_num_logops"], "crc_ok": rec.crc_ok,
               "header_sectors": rec.hblks, "ops": ops}


def _op_item(o: dict, data: bytes, tid: int, pending: dict) -> None:
    """Decode the item an op starts into ``o`` and note in ``pending`` the
    regions of it the next ops of ``tid`` carry."""
    code = int.from_bytes(data[:2], "little")
    if int.from_bytes(data[:4], "little") == L.XFS_TRANS_HEADER_MAGIC:
        th = L.TRANS_HEADER.unpack(data + bytes(max(0, 16 - len(data))))
        o["item"] = {"type": "TRANS", "num_items": th["th_num_items"],
                     "th_type": th["th_type"]}
        return
    if code not in L.ITEM_NAMES:
        return
    nregs = int.from_bytes(data[2:4], "little")
    roles = [f"region {i}" for i in range(1, nregs)]
    attri = None
    try:
        o["item"] = decode(Item([data], 0))
        if code == L.XFS_LI_ATTRI:
            roles = L.attri_region_roles(L.attri_format(data))
            attri = dict(o["item"])
    except (ItemError, IndexError, ValueError) as e:
        o["item"] = {"type": L.ITEM_NAMES[code], "error": str(e)}
    pending[tid] = [L.ITEM_NAMES[code], roles, attri]


_REGION_KEYS = {"name": "name", "newname": "new_name", "value": "value",
                "newvalue": "new_value"}


def _attri_region(o: dict, attri: dict, role: str, data: bytes, last: bool) -> None:
    """An op carrying a region of the ATTRI ``attri`` (its format decoded):
    its text as xfs_logprint's record dump shows it, in ``o["logprint"]``,
    and after the last region the parent pointers the regions hold."""
    o["logprint"] = attri_region_lines(attri, role, data)
    key = _REGION_KEYS[role]
    attri[key] = data[:attri[f"{key}_len"]]
    if last and attri["filter"] & C.XFS_ATTR_PARENT:
        o["logprint"] += pptr_lines(attri)


def print_transactions(fs):
    """Yield committed transactions (checkpoints) with their items."""
    for t, items in fs.log.transactions():
        th = t.theader or {}
        yield {"tid": t.tid, "lsn": L.lsn_str(t.lsn), "commit_lsn": L.lsn_str(t.commit_lsn),
               "start_block": t.start_blk, "commit_block": t.commit_blk,
               "type": th.get("th_type"), "num_items": len(items), "items": items}


def replay(path, *, dry_run: bool = False, undo=None) -> dict:
    """Recover the log of the image at ``path``.  Returns a report dict.
    ``undo`` (a callable given each device opened for writing the image,
    before anything is written through it: resize's undo file) sees every
    write of the replay and of the work after it."""

    path = os.fspath(path)
    refuse_if_mounted(path)
    writes0 = writes_so_far()
    fs = open_filesystem(path)
    lock = ImageLock(fs.dev, path)
    report = {"image": path, "dry_run": dry_run}
    try:
        lock.__enter__()
        ld, st = find_state(fs)
        report["state_before"] = "never written" if st.never_written else \
            ("dirty" if st.dirty else "clean")
        report["head"], report["tail"] = st.head, st.tail
        report["warnings"] = list(st.warnings)
        if not st.dirty:
            report["replayed"] = False
            return report
        out = None if dry_run else Device(path, writable=True)
        if out is not None and undo is not None:
            undo(out)
        r = Recovery(fs, ld, st, dry_run=dry_run, writer_dev=out)
        try:
            r.prepare()
            intents = finish.check_intents(r.intents, fs.sb)
            why = finish.writer_supported(fs)
            if why or any(d["type_code"] in (L.XFS_LI_ATTRI, L.XFS_LI_XMI, L.XFS_LI_BUI)
                          for d in intents):
                # what needs the image as replayed is checked on it in memory
                with Filesystem(path) as view:
                    replay_in_memory(view)
                    finish.check_intent_inodes(view, intents)
                    if why:
                        finish.refuse_unfinishable(view, intents, why)
        except BaseException:
            if out is not None:
                out.close()
            raise
        report["unfinished_intents"] = [(d["type"], d["id"]) for d in intents]
        if dry_run:
            r.replay()
            r.flush()
            _stats(report, r.stats)
            report["blocks_to_write"] = r.stats.blocks_written
            report["replayed"] = False
            return report
        with held():      # a signal waits for the log to be clean
            try:
                r.write_behind = True
                r.replay()
                r.flush()
                report["blocks_written"] = r.stats.blocks_written
                _stats(report, r.stats)
                fs.cache.clear()
                fs._inodes.clear()
                if finish.needs_writer(fs, intents):
                    # the work after replay: one journaled transaction of a
                    # write session going on from the recovered head, which
                    # marks the log clean when it closes
                    out.fsync()
                    lock.__exit__(None, None, None)
                    fs.close()
                    out.close()
                    tail_cycle = st.cycle if st.tail <= st.head else st.cycle - 1
                    position = (st.head, st.curr_cycle, st.head_rec,
                                L.lsn(max(tail_cycle, 1), st.tail))
                    done, counters = finish.finish_with_writer(path, intents, position,
                                                               undo=undo)
                    logged = done.pop("logged", None)
                    if logged:
                        report["logged_post_replay"] = {
                            "records": logged["records"], "buffers": logged["buffers"],
                            "efds": logged["other_items"],
                            "writes": logged["writes_so_far"] - writes0}
                    fs = Filesystem(path)
                    lock = ImageLock(fs.dev, path)
                    lock.__enter__()
                    out = Device(path, writable=True)
                    if undo is not None:
                        undo(out)
                    report["finished"] = done
                    report["counters"] = counters
                else:
                    # Two fsyncs order it all.  The replayed blocks, the
                    # superblock's counters and the stale log blocks past the
                    # unmount record's place are written in any order and made
                    # durable by one fsync: until the unmount record is on disk
                    # the log stays dirty, and a replay cut short anywhere in
                    # there is run again from the same head and tail (none of
                    # these writes moves them: the cleared blocks lie where the
                    # head search already finds no record of the current cycle,
                    # and the kernel clears them at mount before it replays).
                    # Then the unmount record, and a second fsync, after which
                    # the log is clean on disk.
                    report["counters"] = finish.recompute_counters(out, fs)
                    logout = fs.open_log_writable(out)
                    try:
                        W.clear_before_unmount(ld, logout, st.curr_cycle, st.head,
                                               st.head_rec)
                        out.fsync()
                        if logout is not out:
                            logout.fsync()
                        W.write_unmount_record(ld, logout, st.curr_cycle, st.head,
                                               st.head_rec)
                    finally:
                        if logout is not out:
                            logout.close()
            finally:
                out.close()
        report["replayed"] = True
        return report
    finally:
        try:
            lock.__exit__(None, None, None)
        except (OSError, ValueError):
            pass
        fs.close()


def _stats(report: dict, s) -> None:
    report.update(records=s.records, transactions=s.transactions, items=s.items,
                  replayed_items=s.replayed, skipped_lsn=s.skipped_lsn,
                  cancelled=s.cancelled, quota_items_skipped=s.quota_skipped,
                  checkpoints=[{"lsn": lsn, "items": n, "blocks": b}
                               for lsn, n, b in s.checkpoints])


def zero(path, min_cycle: int = 0, undo=None) -> dict:
    """Throw the log away (like xfs_repair -L) and leave a clean one, its
    cycle at least ``min_cycle``; ``undo`` (an UndoRecorder) saves what
    the new log overwrites."""
    path = os.fspath(path)
    refuse_if_mounted(path)
    fs = open_filesystem(path)
    try:
        with ImageLock(fs.dev, path):
            try:
                _ld, st = find_state(fs)
                cycle = st.curr_cycle + 1
                lost = (st.head - st.tail) % _ld.bbsize if st.dirty else 0
            except FsToolError:
                st, cycle, lost = None, None, None
            ld = LogDevice(fs)
            if cycle is None:
                cycle = _max_cycle(ld) + 1
            cycle = max(cycle, min_cycle)
            if fs.external_log:
                if undo is not None:
                    # the undo file holds the image's blocks: an external
                    # log's are not among them (the commands refuse
                    # --undo-file up front: io.undo.refuse_external_log)
                    raise UndoLogExternal(f"{path}: an undo file cannot save the external "
                                          "log zeroing it writes")
                out = fs.open_log_writable(None)
            else:
                out = Device(path, writable=True)
            if undo is not None:
                undo.dev = out
                out.write_hook = undo
            try:
                with held():
                    W.zero_log(ld, out, cycle)
            finally:
                out.close()
            return {"image": path, "cycle": cycle, "lost_sectors": lost}
    finally:
        fs.close()


def stamp(path, uuid: bytes | None = None) -> dict:
    """One unmount record at the head of a clean log, carrying ``uuid``
    (the superblock's unless given: a UUID change, ops/admin.py), as an
    unmount writes one: the stale blocks past its place cleared and made
    durable first, then the record.  The log reads as it did until the
    record is whole on disk (the head search finds no record of the current
    cycle past the head, and a torn record fails its CRC, so the previous
    one stays the head), and as clean at the new head after."""
    path = os.fspath(path)
    refuse_if_mounted(path)
    fs = open_filesystem(path)
    try:
        with ImageLock(fs.dev, path):
            ld, st = find_state(fs)
            if st.dirty:
                raise FsToolError(f"{path}: the log is dirty; replay it first")
            if uuid is not None:
                ld.uuid = uuid
            head, cycle, prev = ((0, 1, 0) if st.never_written or st.curr_cycle == 0
                                 else (st.head, st.curr_cycle, st.head_rec))
            out = Device(path, writable=True)
            logout = fs.open_log_writable(out)
            try:
                with held():
                    after = W.mark_clean(ld, logout, cycle, head, prev)
            finally:
                if logout is not out:
                    logout.close()
                out.close()
            return {"image": path, "block": head, "cycle": cycle, "head": after}
    finally:
        fs.close()


def _max_cycle(ld) -> int:
    """The highest cycle number any log sector carries (for an unreadable log)."""
    best = 0
    step = 2048
    for blk in range(0, ld.bbsize, step):
        n = min(step, ld.bbsize - blk)
        for c in L.sector_cycles(ld.read(blk, n), n):
            if c != L.XLOG_HEADER_MAGIC_NUM and c > best:
                best = c
    return best
