"""What the kernel does after replaying the log, before the mount completes.

* intents left without a done item are finished, in log order, as the
  kernel's xlog_recover_process_intents does: an EFI's extents are freed
  (whatever rmap records they still have removed, the EFI naming no
  owner), an RUI's reverse mappings made (map, unmap, convert, their shared
  variants, alloc, free), a CUI's reference counts moved (increase,
  decrease — freeing what loses its last reference — and copy-on-write
  staging extents recorded or dropped), a BUI's file mapping added to or
  removed from an inode's data fork; each gets its done item.  The kinds
  parent pointers and exchange-range bring (ATTRI, XMI), and BUIs of an
  attr fork, are refused before anything is written;
* the inodes on the AGI unlinked lists (open when the system stopped, but
  unlinked) are freed with their blocks, as inode inactivation does;
* copy-on-write staging extents left in the refcount btrees are dropped and
  their blocks freed (xfs_reflink_recover_cow);
* the superblock's lazy counters are recomputed from the AG headers.

The freeing is one transaction of the write session
(``fstool.ns.writer.Writer``), opened with ``recovering=`` the recovered
head and tail: it accepts the image while its log is still dirty, and its
journal writes the transaction as a checkpoint right after the replayed log
(with an EFD for every EFI it finished), writes it back, then writes the
unmount record.  Interrupted anywhere, a new replay reaches the same image:
before the commit record the checkpoint is ignored and the work redone;
after it, the checkpoint is replayed and nothing is left to do.  This
module is the only place recovery touches the write side.
"""
from __future__ import annotations

import struct

from ..alloc import rmap as R
from ..alloc.refcount import COW_FLAG
from ..errors import UnsupportedError
from ..format import constants as C, log as L
from ..format.structs import SB, SB as SBL
from ..fs import btree as B
from ..fs.filesystem import Filesystem
from ..io import verify as V
from ..log.items import intent_what
from ..ns.fileio import FileIO
from ..ns.namespace import Namespace
from ..ns.writer import Writer
from ..trans.logwriter import done_regions, efd_regions

FINISHABLE = {L.XFS_LI_EFI, L.XFS_LI_RUI, L.XFS_LI_CUI, L.XFS_LI_BUI}


class IntentRefused(UnsupportedError):
    """Replay needs work fstool cannot do (the CLI's "unsupported" exit
    status); nothing was written."""


def check_intents(intents: dict) -> list:
    """The unfinished intents as dicts; raises IntentRefused naming the first
    kind fstool cannot finish."""
    out = []
    for (code, iid), (lsn, d, blk) in sorted(intents.items(), key=lambda kv: kv[1][0]):
        if code == L.XFS_LI_BUI and any(e["flags"] & (L.XFS_BMAP_EXTENT_ATTR_FORK |
                                                      L.XFS_BMAP_EXTENT_REALTIME)
                                        for e in d["extents"]):
            raise IntentRefused(
                f"record at log block {blk}: BUI intent 0x{iid:x} maps an attr fork or "
                "realtime extent, which fstool cannot finish; nothing was written: mount "
                "the image with the kernel to recover it")
        if code not in FINISHABLE:
            what = intent_what(d)
            raise IntentRefused(
                f"record at log block {blk}: {d['type']} intent 0x{iid:x}"
                f"{f' ({what})' if what else ''} has no done item "
                f"and fstool cannot finish {d['type']} intents ({_why(code)}); nothing was "
                "written: mount the image with the kernel to recover it")
        out.append(d)
    return out


def _why(code: int) -> str:
    return {L.XFS_LI_ATTRI: "it has no logged-xattr writer",
            L.XFS_LI_XMI: "it has no file-mapping exchange writer"}.get(
                code, "unsupported intent type")


def unlinked_inodes(fs) -> list:
    """(agno, bucket, [inode numbers]) of every AGI unlinked chain."""
    out = []
    sb = fs.sb
    for agno in range(sb.agcount):
        agi = fs.agi(agno)
        for b, head in enumerate(agi["agi_unlinked"]):
            chain = []
            agino = head
            seen = set()
            while agino != C.NULLAGINO and agino not in seen and len(chain) < 1 << 20:
                seen.add(agino)
                ino = (agno << sb.agino_log) | agino
                chain.append(ino)
                raw = fs.inode(ino).raw
                agino = struct.unpack_from(">I", raw, 96)[0]
            if chain:
                out.append((agno, b, chain))
    return out


def cow_leftovers(fs) -> list:
    """(agno, startblock, blockcount) of the CoW staging extents left in the
    refcount btrees (the kernel frees them at every mount of a reflink
    filesystem: xfs_reflink_recover_cow)."""
    out = []
    sb = fs.sb
    if not sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK):
        return out
    for agno in range(sb.agcount):
        agf = fs.agf(agno)
        root, level = agf["agf_refcount_root"], agf["agf_refcount_level"]
        if not root or not level:
            continue
        reader = B.BtreeReader(fs, B.REFCOUNTBT, agno=agno, owner=agno,
                               addr_to_daddr=lambda a, agno=agno: fs.agb_to_daddr(agno, a))
        for start, count, _refc in reader.ag_records(root, level):
            if start & COW_FLAG:
                out.append((agno, start & ~COW_FLAG, count))
    return out


def needs_writer(fs, intents: list) -> bool:
    return bool(intents) or bool(unlinked_inodes(fs)) or bool(cow_leftovers(fs))


def writer_supported(fs) -> str | None:
    """None when the writer can do the work after replay on this
    filesystem, else why not (every supported filesystem can now)."""
    return None


def refuse_unfinishable(view, intents: list, why: str) -> None:
    """``view`` is the image as replayed (in memory): refuse, before anything
    is written, when what follows replay cannot be done here."""
    work = []
    if intents:
        work.append(f"{len(intents)} unfinished intents")
    n = sum(len(c) for _a, _b, c in unlinked_inodes(view))
    if n:
        work.append(f"{n} inodes on the AGI unlinked lists (files deleted while open)")
    cow = cow_leftovers(view)
    if cow:
        work.append(f"{len(cow)} leftover CoW staging extents")
    if work:
        raise IntentRefused(
            f"after replay the kernel would free {', '.join(work)}; {why}; nothing was "
            "written: mount the image with the kernel to recover it")


def finish_with_writer(path, intents: list, position: tuple) -> tuple[dict, dict]:
    """Finish the unfinished intents, free the unlinked inodes and the
    leftover CoW extents in one journaled transaction of a write session
    that goes on from ``position`` (head block, cycle, last record block,
    tail LSN); the superblock counters come out recomputed from every AG and
    the log-incompatible feature bits cleared, as an unmount leaves them.
    Returns (what was done, with ``logged``: what its checkpoint put in the
    log; the counters before and after)."""
    done = {"efi_extents": 0, "rui_extents": 0, "cui_extents": 0, "bui_extents": 0,
            "unlinked_inodes": 0, "cow_extents": 0}
    # names are not changed here (intents that would, ATTRI and XMI, are
    # refused before): parent pointers stay as the replayed log left them
    with Writer(path, recovering=position, keeps_parents=True) as w:
        w.space.kernel_freelist = True
        sb = w.sb
        f0 = sb.fields
        before = {k: f0[k] for k in ("sb_icount", "sb_ifree", "sb_fdblocks")}
        with w.transaction():
            tx = w.tx
            for d in intents:
                code = d["type_code"]
                if code == L.XFS_LI_EFI:
                    for start, length in d["extents"]:
                        # an EFI names no owner: whatever rmap is left goes
                        w.space.free_extent(start, length, owner=R.UNKNOWN)
                        done["efi_extents"] += 1
                    w.journal.add_item(efd_regions(d["id"], d["extents"]))
                    continue
                for e in d["extents"]:
                    if code == L.XFS_LI_RUI:
                        _finish_rmap(w, e)
                        done["rui_extents"] += 1
                    elif code == L.XFS_LI_CUI:
                        _finish_refcount(w, e)
                        done["cui_extents"] += 1
                    else:
                        _finish_bmap(w, e)
                        done["bui_extents"] += 1
                w.journal.add_item(done_regions(L.INTENT_DONE[code], d["id"]))
            ns = Namespace(w)
            for agno, bucket, chain in unlinked_inodes(w.fs):
                ag = w.ag(agno)
                for ino in chain:
                    ns._destroy(ino)          # its blocks, then the inode
                    done["unlinked_inodes"] += 1
                ag.agi["agi_unlinked"][bucket] = C.NULLAGINO
                ag.agi_dirty = True
            for agno, start, count in cow_leftovers(w.fs):
                w.ag(agno).refc.cow_remove(start, count)
                w.space.free_ag_extent(agno, start, count, owner=R.COW)
                done["cow_extents"] += 1
            # every AG's counters summed into the superblock (the session
            # does that at commit for the AGs it changed; all of them here)
            for agno in range(sb.agcount):
                w.ag(agno).agf_dirty = True
            sbuf = tx.read_buf(0, sb.sectsize, V.SB, agno=0, block=0)
            sbuf.data[SBL.offset("sb_features_log_incompat"):
                      SBL.offset("sb_features_log_incompat") + 4] = bytes(4)
        w.journal.push()
        logged = w.journal.last_checkpoint
        after_sb = SBL.unpack(w.fs.get_buf(0, sb.sectsize, V.SB).data)
        after = {k: after_sb[k] for k in ("sb_icount", "sb_ifree", "sb_fdblocks")}
    done["logged"] = logged
    return done, {"before": before, "after": after}


_RMAP_OPS = {1: "map", 2: "map_shared", 3: "unmap", 4: "unmap_shared", 5: "convert",
             6: "convert_shared", 7: "map", 8: "unmap"}


def _finish_rmap(w, e: dict) -> None:
    """One extent of an RUI (xfs_rmap_finish_one)."""
    flags = e["flags"]
    op = _RMAP_OPS.get(flags & L.XFS_RMAP_EXTENT_TYPE_MASK)
    if op is None:
        raise IntentRefused(f"RUI extent of unknown type {flags & 0xFF}")
    owner = e["owner"]
    fl = 0
    if flags & L.XFS_RMAP_EXTENT_ATTR_FORK:
        fl |= R.ATTR_FORK
    if flags & L.XFS_RMAP_EXTENT_BMBT_BLOCK:
        fl |= R.BMBT_BLOCK
    offset = 0 if R.non_inode(owner) or fl & R.BMBT_BLOCK else e["startoff"]
    unwritten = bool(flags & L.XFS_RMAP_EXTENT_UNWRITTEN)
    agno, agbno = w.space.fsb_split(e["startblock"])
    w.space.rmap_op(agno, op, agbno, e["len"], R.Owner(owner, offset, fl), unwritten)


def _finish_refcount(w, e: dict) -> None:
    """One extent of a CUI (xfs_refcount_finish_one): a reference more or
    less (blocks losing their last freed), or a staging extent recorded or
    dropped."""
    op = e["flags"] & L.XFS_REFCOUNT_EXTENT_TYPE_MASK
    agno, agbno = w.space.fsb_split(e["startblock"])
    refc = w.ag(agno).refc
    n = e["len"]
    if op in (1, 2):
        for start, k in refc.adjust(agbno, n, +1 if op == 1 else -1):
            w.space.free_ag_extent(agno, start, k, owner=None)
    elif op == 3:
        refc.cow_add(agbno, n)
    elif op == 4:
        refc.cow_remove(agbno, n)
    else:
        raise IntentRefused(f"CUI extent of unknown type {op}")


def _finish_bmap(w, e: dict) -> None:
    """One extent of a BUI (xfs_bmap_finish_one): a file mapping added to or
    removed from an inode's data fork (the blocks neither allocated nor
    freed: the intents that go with it do that), its rmap changed with it."""
    op = e["flags"] & L.XFS_BMAP_EXTENT_TYPE_MASK
    unwritten = 1 if e["flags"] & L.XFS_BMAP_EXTENT_UNWRITTEN else 0
    io = FileIO(w)
    if op == 1:
        io.map_extent(e["owner"], e["startoff"], e["startblock"], e["len"], unwritten)
    elif op == 2:
        io.unmap_extent(e["owner"], e["startoff"], e["len"])
    else:
        raise IntentRefused(f"BUI extent of unknown type {op}")


def recompute_counters(dev, fs) -> dict:
    """xfs_initialize_perag_data: icount, ifree and fdblocks from every AG
    header; also clears the log-incompatible feature bits, as an unmount
    does.  Writes the primary superblock through ``dev``."""
    raw = bytearray(dev.pread(0, fs.sb.sectsize))
    f = SB.unpack(raw)
    view = fs
    if (f["sb_dblocks"], f["sb_agcount"]) != (fs.sb.dblocks, fs.sb.agcount):
        # the log changed the geometry (a grow or a shrink, which the
        # kernel's recovery takes up too): the AGs as replay left them
        view = Filesystem(dev.path)
    icount = ifree = fdblocks = 0
    try:
        for agno in range(view.sb.agcount):
            agf = view.agf(agno)
            agi = view.agi(agno)
            icount += agi["agi_count"]
            ifree += agi["agi_freecount"]
            fdblocks += agf["agf_freeblks"] + agf["agf_flcount"] + agf["agf_btreeblks"]
    finally:
        if view is not fs:
            view.close()
    before = {k: f[k] for k in ("sb_icount", "sb_ifree", "sb_fdblocks")}
    f.update(sb_icount=icount, sb_ifree=ifree, sb_fdblocks=fdblocks,
             sb_features_log_incompat=0)
    packed = SB.pack(f)
    raw[:len(packed)] = packed
    # the write verifier, keeping the superblock's LSN
    V.stamp(V.SB, raw, f["sb_lsn"], blocksize=fs.sb.blocksize)
    dev.pwrite(0, raw)
    return {"before": before, "after": {"sb_icount": icount, "sb_ifree": ifree,
                                        "sb_fdblocks": fdblocks}}
