"""What the kernel does after replaying the log, before the mount completes.

* intents left without a done item are finished: an EFI's extents are
  freed; the other kinds (RUI, CUI, BUI, ATTRI, XMI) need rmap, refcount,
  bmap or xattr machinery fstool's writer does not have, and are refused
  (before anything is written);
* the inodes on the AGI unlinked lists (open when the system stopped, but
  unlinked) are freed with their blocks, as inode inactivation does;
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
from ..errors import UnsupportedError
from ..format import constants as C
from ..format import log as L
from ..format.structs import SB

FINISHABLE = {L.XFS_LI_EFI}


class IntentRefused(UnsupportedError):
    """Replay needs work fstool cannot do (the CLI's "unsupported" exit
    status); nothing was written."""


def check_intents(intents: dict) -> list:
    """The unfinished intents as dicts; raises IntentRefused naming the first
    kind fstool cannot finish."""
    out = []
    for (code, iid), (lsn, d, blk) in sorted(intents.items(), key=lambda kv: kv[1][0]):
        if code not in FINISHABLE:
            raise IntentRefused(
                f"record at log block {blk}: {d['type']} intent 0x{iid:x} has no done item "
                f"and fstool cannot finish {d['type']} intents ({_why(code)}); nothing was "
                "written: mount the image with the kernel to recover it")
        out.append(d)
    return out


def _why(code: int) -> str:
    return {L.XFS_LI_RUI: "it has no reverse-mapping btree writer",
            L.XFS_LI_CUI: "it has no refcount btree writer",
            L.XFS_LI_BUI: "it has no block-mapping update writer",
            L.XFS_LI_ATTRI: "it has no logged-xattr writer",
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


XFS_REFC_COWFLAG = 1 << 31


def cow_leftovers(fs) -> list:
    """(agno, startblock, blockcount) of the CoW staging extents left in the
    refcount btrees (the kernel frees them at every mount of a reflink
    filesystem: xfs_reflink_recover_cow)."""
    out = []
    if not fs.sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK):
        return out
    for agno in range(fs.sb.agcount):
        agf = fs.agf(agno)
        root, level = agf["agf_refcount_root"], agf["agf_refcount_level"]
        if not root or not level:
            continue
        daddr = fs.agb_to_daddr(agno, root)
        for rec in _refcount_recs(fs, agno, root, level):
            if rec[0] & XFS_REFC_COWFLAG:
                out.append((agno, rec[0] & ~XFS_REFC_COWFLAG, rec[1], daddr, level))
    return out


def _refcount_recs(fs, agno: int, root: int, level: int) -> list:
    import struct as _s
    from ..io import verify as V
    recs = []
    todo = [(root, level)]
    seen = 0
    while todo:
        bno, lvl = todo.pop()
        seen += 1
        if seen > 1 << 16:
            break
        buf = fs.read_meta(fs.agb_to_daddr(agno, bno), fs.sb.blocksize, V.REFCBT,
                           agno=agno, block=bno)
        n = _s.unpack_from(">H", buf, 6)[0]
        hdr = C.XFS_BTREE_SBLOCK_CRC_LEN
        if _s.unpack_from(">H", buf, 4)[0] == 0:
            recs += [_s.unpack_from(">III", buf, hdr + 12 * i) for i in range(n)]
        else:
            maxr = (fs.sb.blocksize - hdr) // 8
            ptrs = [_s.unpack_from(">I", buf, hdr + 4 * maxr + 4 * i)[0] for i in range(n)]
            todo += [(p, lvl - 1) for p in reversed(ptrs)]
    return recs


def needs_writer(fs, efis: list) -> bool:
    return bool(efis) or bool(unlinked_inodes(fs)) or bool(cow_leftovers(fs))


def writer_supported(fs) -> str | None:
    """None when the writer can free blocks and inodes on this filesystem,
    else why not."""
    if fs.sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_RMAPBT):
        return "freeing blocks on a filesystem with the reverse-mapping btree (rmapbt) " \
               "needs rmap updates fstool cannot make yet"
    return None


def refuse_unfinishable(view, efis: list, why: str) -> None:
    """``view`` is the image as replayed (in memory): refuse, before anything
    is written, when what follows replay cannot be done here."""
    work = []
    if efis:
        work.append(f"{len(efis)} unfinished extent-free intents")
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


def finish_with_writer(path, efis: list, position: tuple) -> tuple[dict, dict]:
    """Free the EFIs' extents, the unlinked inodes and the leftover CoW
    extents in one journaled transaction of a write session that goes on
    from ``position`` (head block, cycle, last record block, tail LSN); the
    superblock counters come out recomputed from every AG and the
    log-incompatible feature bits cleared, as an unmount leaves them.
    Returns (what was done, with ``logged``: what its checkpoint put in the
    log; the counters before and after)."""
    from ..format.structs import SB as SBL
    from ..io import verify as V
    from ..ns.namespace import Namespace
    from ..ns.writer import Writer
    from ..trans.logwriter import efd_regions
    done = {"efi_extents": 0, "unlinked_inodes": 0, "cow_extents": 0}
    with Writer(path, recovering=position) as w:
        w.space.kernel_freelist = True
        sb = w.sb
        f0 = sb.fields
        before = {k: f0[k] for k in ("sb_icount", "sb_ifree", "sb_fdblocks")}
        cow = cow_leftovers(w.fs)
        for agno, _s, _n, _d, level in cow:
            if level != 1:
                raise IntentRefused(
                    f"AG {agno}: CoW staging extents left in a refcount btree of {level} "
                    "levels; fstool removes them only from one-level trees (nothing was "
                    "written by this step: mount the image with the kernel instead)")
        with w.transaction():
            tx = w.tx
            by_block: dict = {}
            for agno, start, count, daddr, _lvl in cow:
                by_block.setdefault((agno, daddr), []).append((start, count))
            for (agno, daddr), exts in by_block.items():
                buf = tx.read_buf(daddr, sb.blocksize, V.REFCBT, agno=agno).data
                hdr = C.XFS_BTREE_SBLOCK_CRC_LEN
                n = struct.unpack_from(">H", buf, 6)[0]
                keep = [struct.unpack_from(">III", buf, hdr + 12 * i) for i in range(n)]
                keep = [r for r in keep if not r[0] & XFS_REFC_COWFLAG]
                body = b"".join(struct.pack(">III", *r) for r in keep)
                buf[hdr:hdr + 12 * n] = body + bytes(12 * n - len(body))
                struct.pack_into(">H", buf, 6, len(keep))
                for start, count in exts:
                    w.space.free_extent((agno << sb.agblklog) | start, count, owner=R.COW)
                    done["cow_extents"] += 1
            for d in efis:
                for start, length in d["extents"]:
                    # an EFI names no owner: whatever rmap is left goes
                    w.space.free_extent(start, length, owner=R.UNKNOWN)
                    done["efi_extents"] += 1
                w.journal.add_item(efd_regions(d["id"], d["extents"]))
            ns = Namespace(w)
            for agno, bucket, chain in unlinked_inodes(w.fs):
                ag = w.ag(agno)
                for ino in chain:
                    ns._destroy(ino)          # its blocks, then the inode
                    done["unlinked_inodes"] += 1
                ag.agi["agi_unlinked"][bucket] = C.NULLAGINO
                ag.agi_dirty = True
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


def recompute_counters(dev, fs) -> dict:
    """xfs_initialize_perag_data: icount, ifree and fdblocks from every AG
    header; also clears the log-incompatible feature bits, as an unmount
    does.  Writes the primary superblock through ``dev``."""
    from ..io import verify as V
    icount = ifree = fdblocks = 0
    for agno in range(fs.sb.agcount):
        agf = fs.agf(agno)
        agi = fs.agi(agno)
        icount += agi["agi_count"]
        ifree += agi["agi_freecount"]
        fdblocks += agf["agf_freeblks"] + agf["agf_flcount"] + agf["agf_btreeblks"]
    raw = bytearray(dev.pread(0, fs.sb.sectsize))
    f = SB.unpack(raw)
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
