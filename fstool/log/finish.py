"""What the kernel does after replaying the log, before the mount completes.

* intents left without a done item are finished: an EFI's extents are
  freed; the other kinds (RUI, CUI, BUI, ATTRI, XMI) need rmap, refcount,
  bmap or xattr machinery fstool's writer does not have, and are refused
  (before anything is written);
* the inodes on the AGI unlinked lists (open when the system stopped, but
  unlinked) are freed with their blocks, as inode inactivation does;
* the superblock's lazy counters are recomputed from the AG headers.

The freeing goes through today's writer (``fstool.fs.writer.Writer`` and
the namespace layer's block walk), opened with ``recovering=True`` so that
it accepts the image while its log is still dirty.  This module is the
only place recovery touches the write side.
"""
from __future__ import annotations

import struct

from ..errors import UnsupportedError
from ..format import constants as C
from ..format import log as L
from ..format.structs import SB

FINISHABLE = {L.XFS_LI_EFI}


class IntentRefused(UnsupportedError):
    exit_status = 4


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


def _kernel_freelist(w) -> None:
    """Make the writer size the AG free list as the kernel does when it
    frees (xfs_alloc_min_freelist: one block per level plus one, for the
    bnobt and the cntbt; refilled to that, and shrunk back to it)."""
    orig_fix = w.fix_freelist

    def min_freelist(ag):
        return (ag.bno.levels + 1) + (ag.cnt.levels + 1)

    def fix_freelist(ag):
        orig_fix(ag)
        need = min_freelist(ag)
        while ag.flcount > need:
            w._insert_free(ag, ag.agfl_get(), 1)
    w._min_freelist = min_freelist
    w.fix_freelist = fix_freelist


def finish_with_writer(path, efis: list) -> tuple[dict, list, dict]:
    """Free the EFIs' extents, the unlinked inodes and the leftover CoW
    extents in one writer transaction, then recompute the counters; every
    write is captured, nothing reaches the image.  Returns (what was done,
    the captured writes in order, the counters)."""
    from ..fs.namespace import Namespace
    from ..fs.writer import Writer
    from ..io import verify as V
    from ..io.overlay import CaptureDevice
    done = {"efi_extents": 0, "unlinked_inodes": 0, "cow_extents": 0}
    with Writer(path, recovering=True) as w:
        cap = CaptureDevice(w.dev)
        w.dev = w.fs.dev = cap
        w.fs.cache.clear()
        _kernel_freelist(w)
        cow = cow_leftovers(w.fs)
        for agno, _s, _n, _d, level in cow:
            if level != 1:
                raise IntentRefused(
                    f"AG {agno}: CoW staging extents left in a refcount btree of {level} "
                    "levels; fstool removes them only from one-level trees (nothing was "
                    "written by this step: mount the image with the kernel instead)")
        with w.transaction():
            by_block: dict = {}
            for agno, start, count, daddr, _lvl in cow:
                by_block.setdefault((agno, daddr), []).append((start, count))
            for (agno, daddr), exts in by_block.items():
                buf = w.meta(daddr, V.REFCBT)
                hdr = C.XFS_BTREE_SBLOCK_CRC_LEN
                n = struct.unpack_from(">H", buf, 6)[0]
                keep = [struct.unpack_from(">III", buf, hdr + 12 * i) for i in range(n)]
                keep = [r for r in keep if not r[0] & XFS_REFC_COWFLAG]
                body = b"".join(struct.pack(">III", *r) for r in keep)
                buf[hdr:hdr + 12 * n] = body + bytes(12 * n - len(body))
                struct.pack_into(">H", buf, 6, len(keep))
                w.dirty[daddr] = V.REFCBT.crc_off
                for start, count in exts:
                    w.free_extent((agno << w.sb.agblklog) | start, count)
                    done["cow_extents"] += 1
            for d in efis:
                for start, length in d["extents"]:
                    w.free_extent(start, length)
                    done["efi_extents"] += 1
            ns = Namespace(w)
            for agno, bucket, chain in unlinked_inodes(w.fs):
                ag = w.ag(agno)
                for ino in chain:
                    ns._destroy(ino)          # its blocks, then the inode
                    done["unlinked_inodes"] += 1
                ag.agi["agi_unlinked"][bucket] = C.NULLAGINO
                ag.agi_dirty = True
        w.fs.cache.clear()
        w.fs._inodes.clear()
        counters = recompute_counters(cap, w.fs)
        writes = cap.writes
        w.dev = w.fs.dev = cap.base
    return done, writes, counters


def logged_buffers(base_dev, fs, writes: list) -> list:
    """The captured writes as buffers to log: AG header sectors one by one,
    everything else by filesystem block (16 KiB pieces at most), each with
    the buffer type its magic says.  Returns [(daddr, bytes, blft)] in
    address order."""
    from .recover import _stamp_rule  # noqa: F401  (same type rules as replay)
    sb = fs.sb
    ss = sb.sectsize
    bs = sb.blocksize
    piece = min(bs, 16384)
    agbytes = sb.agblocks * bs
    spans = {}
    for off, data in writes:
        pos, end = off, off + len(data)
        while pos < end:
            in_ag = pos % agbytes
            if in_ag < 4 * ss:
                start, size = pos - pos % ss, ss
            else:
                start, size = pos - pos % piece, piece
            spans[start] = size
            pos = start + size
    out = []
    for start in sorted(spans):
        size = spans[start]
        buf = bytearray(base_dev.pread(start, size))
        for off, data in writes:
            lo, hi = max(off, start), min(off + len(data), start + size)
            if lo < hi:
                buf[lo - start:hi - start] = data[lo - off:hi - off]
        out.append((start >> 9, buf, _blft_of(buf, start, agbytes, ss)))
    return out


def _blft_of(buf, start: int, agbytes: int, ss: int) -> int:
    m32 = struct.unpack_from(">I", buf, 0)[0]
    m16 = struct.unpack_from(">H", buf, 8)[0]
    if start % agbytes < 4 * ss:
        return {C.XFS_SB_MAGIC: L.XFS_BLFT_SB_BUF, C.XFS_AGF_MAGIC: L.XFS_BLFT_AGF_BUF,
                C.XFS_AGI_MAGIC: L.XFS_BLFT_AGI_BUF,
                C.XFS_AGFL_MAGIC: L.XFS_BLFT_AGFL_BUF}.get(m32, L.XFS_BLFT_UNKNOWN_BUF)
    if m32 in (C.XFS_ABTB_CRC_MAGIC, C.XFS_ABTC_CRC_MAGIC, C.XFS_IBT_CRC_MAGIC,
               C.XFS_FIBT_CRC_MAGIC, C.XFS_BMAP_CRC_MAGIC, C.XFS_REFC_CRC_MAGIC,
               C.XFS_RMAP_CRC_MAGIC):
        return L.XFS_BLFT_BTREE_BUF
    if m32 >> 16 == C.XFS_DINODE_MAGIC:
        return L.XFS_BLFT_DINO_BUF
    return {C.XFS_DIR3_BLOCK_MAGIC: L.XFS_BLFT_DIR_BLOCK_BUF,
            C.XFS_DIR3_DATA_MAGIC: L.XFS_BLFT_DIR_DATA_BUF,
            C.XFS_DIR3_FREE_MAGIC: L.XFS_BLFT_DIR_FREE_BUF,
            C.XFS_SYMLINK_MAGIC: L.XFS_BLFT_SYMLINK_BUF,
            C.XFS_ATTR3_RMT_MAGIC: L.XFS_BLFT_ATTR_RMT_BUF}.get(m32) or \
        {C.XFS_DIR3_LEAF1_MAGIC: L.XFS_BLFT_DIR_LEAF1_BUF,
         C.XFS_DIR3_LEAFN_MAGIC: L.XFS_BLFT_DIR_LEAFN_BUF,
         C.XFS_DA3_NODE_MAGIC: L.XFS_BLFT_DA_NODE_BUF,
         C.XFS_ATTR3_LEAF_MAGIC: L.XFS_BLFT_ATTR_LEAF_BUF}.get(m16, L.XFS_BLFT_UNKNOWN_BUF)


def buf_item(daddr: int, data: bytes, blft: int) -> list:
    """The regions of a buffer log item logging all of ``data``."""
    nchunks = len(data) // L.XFS_BLF_CHUNK
    words, msize = L.make_map(range(nchunks))
    fmt = L.BUF_LOG_FORMAT.pack({"blf_type": L.XFS_LI_BUF, "blf_size": 2,
                                 "blf_flags": L.blft_to_flags(0, blft),
                                 "blf_len": len(data) >> 9, "blf_blkno": daddr,
                                 "blf_map_size": msize, "blf_data_map": words})
    return [fmt, bytes(data)]


def efd_item(d: dict) -> list:
    ext = b"".join(L.EXTENT_64.pack({"ext_start": s, "ext_len": n}) for s, n in d["extents"])
    return [L.EFD_LOG_FORMAT.pack({"efd_type": L.XFS_LI_EFD, "efd_size": 1,
                                   "efd_nextents": len(d["extents"]),
                                   "efd_efi_id": d["id"]}) + ext]


def recompute_counters(dev, fs) -> dict:
    """xfs_initialize_perag_data: icount, ifree and fdblocks from every AG
    header; also clears the log-incompatible feature bits, as an unmount
    does.  Writes the primary superblock through ``dev``."""
    from ..fs.encode import stamp_crc
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
    dev.pwrite(0, stamp_crc(raw, C.XFS_SB_CRC_OFF))
    return {"before": before, "after": {"sb_icount": icount, "sb_ifree": ifree,
                                        "sb_fdblocks": fdblocks}}
