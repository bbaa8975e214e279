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


def needs_writer(fs, efis: list) -> bool:
    return bool(efis) or bool(unlinked_inodes(fs))


def finish_with_writer(path, efis: list) -> dict:
    """Free the EFIs' extents and the unlinked inodes in one transaction."""
    from ..fs.namespace import owned_blocks
    from ..fs.writer import Writer
    done = {"efi_extents": 0, "unlinked_inodes": 0}
    with Writer(path, recovering=True) as w:
        with w.transaction():
            for d in efis:
                for start, length in d["extents"]:
                    w.free_extent(start, length)
                    done["efi_extents"] += 1
            for agno, bucket, chain in unlinked_inodes(w.fs):
                ag = w.ag(agno)
                for ino in chain:
                    node = w.fs.inode(ino)
                    for attr in (False, True):
                        if attr and not node.forkoff:
                            continue
                        fmt = node.aformat if attr else node.format
                        if fmt in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE):
                            for fsbno, n in owned_blocks(node, attr=attr):
                                w.free_extent(fsbno, n)
                    w.free_inode(ino)
                    done["unlinked_inodes"] += 1
                ag.agi["agi_unlinked"][bucket] = C.NULLAGINO
                ag.agi_dirty = True
    return done


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
