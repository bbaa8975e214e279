"""Phase ag_headers: every AG's AGF, AGI and free list, as xfs_repair's
verify_set_agf/agi and scan_freelist see them; and (phase unlinked) the
AGI unlinked lists against the inodes they chain."""
from __future__ import annotations

import struct

from ..._backend import parsers
from ...errors import FsToolError
from ...format import constants as C
from ...format.structs import AGF, AGFL, AGI
from .base import OWN_AGFL, OWN_LOG
from .superblocks import check_lsn, claim_ag_headers


def phase_ag_headers(ctx) -> None:
    sb = ctx.sb
    for agno in ctx.ag_filter:
        claim_ag_headers(ctx, agno)
        _check_agf(ctx, agno)
        _check_agi(ctx, agno)
    log_agno = sb.logstart >> sb.agblklog
    if sb.logstart and log_agno in ctx.ag_filter and log_agno < sb.agcount:
        ctx.claim(log_agno, sb.logstart & ((1 << sb.agblklog) - 1), sb.logblocks,
                  OWN_LOG)


def _sector(ctx, agno: int, n: int) -> bytes:
    ss = ctx.sb.sectsize
    return ctx.fs.dev.pread((ctx.fs.agb_to_daddr(agno, 0) << C.BBSHIFT) + n * ss, ss)


def _header_common(ctx, agno, raw, d, name, magic, crc_off, prefix, uuid_field):
    """The checks the AGF and AGI share; True when the header can be
    used to find the AG's btrees (repair skips the AG otherwise)."""
    where = dict(agno=agno, block=ctx.agfl_block if name == "agfl" else 0)
    code = name.upper() + "_HEADER"
    usable = True
    if not parsers.xfs_cksum_ok(raw, crc_off):
        ctx.report(code, f"AG {agno}: {name} CRC mismatch", field=prefix + "crc", **where)
    if d[prefix + "magicnum"] != magic:
        ctx.report(code, f"AG {agno}: {name} bad magic 0x{d[prefix + 'magicnum']:x}",
                   field=prefix + "magicnum", found=d[prefix + "magicnum"], **where)
        usable = False
    if d[prefix + "versionnum"] != 1:
        ctx.report(code, f"AG {agno}: {name} version {d[prefix + 'versionnum']}, "
                   "expected 1", field=prefix + "versionnum",
                   expected=1, found=d[prefix + "versionnum"], **where)
        usable = False
    if d[prefix + "seqno"] != agno:
        ctx.report(code, f"AG {agno}: {name} sequence number {d[prefix + 'seqno']}",
                   field=prefix + "seqno", expected=agno, found=d[prefix + "seqno"],
                   **where)
        usable = False
    length = ctx.fs.ag_length(agno)
    if d[prefix + "length"] != length:
        ctx.report(code, f"AG {agno}: {name} length {d[prefix + 'length']}, the AG "
                   f"has {length} blocks", field=prefix + "length", expected=length,
                   found=d[prefix + "length"], **where)
        usable = False
    if d[uuid_field] != ctx.fs.uuid:
        ctx.report(code, f"AG {agno}: {name} uuid does not match the filesystem",
                   field=uuid_field, **where)
        usable = False
    check_lsn(ctx, d[prefix + "lsn"], name, agno=agno, block=0, field=prefix + "lsn")
    return usable


def _salvage(ctx, agno: int, d: dict, prefix: str, uuid_field: str, magic: int) -> dict:
    """A header whose naming fields are wrong (magic, version, sequence
    number, length, uuid; already reported) with those fields set to
    what they must be, as xfs_repair's verify_set_agf/agi correct them
    before going on: the tree roots and counters it holds are then
    checked like any other header's, and repair rewrites it whole."""
    d = dict(d, **{prefix + "magicnum": magic, prefix + "versionnum": 1,
                   prefix + "seqno": agno, prefix + "length": ctx.fs.ag_length(agno),
                   uuid_field: ctx.fs.uuid, "_salvaged": True})
    return d


def _read_header(ctx, agno: int, sector: int, code: str, layout):
    """An AG header sector decoded (its raw bytes under ``_raw``), or None
    when it cannot be read (reported)."""
    try:
        raw = _sector(ctx, agno, sector)
    except FsToolError as e:
        ctx.from_error(code, e, agno=agno, block=0)
        return None
    d = layout.unpack(raw)
    d["_raw"] = raw
    return d


def _check_agf(ctx, agno: int) -> None:
    agf = _read_header(ctx, agno, 1, "AGF_HEADER", AGF)
    if agf is None:
        return
    usable = _header_common(ctx, agno, agf["_raw"], agf, "agf", C.XFS_AGF_MAGIC,
                            C.XFS_AGF_CRC_OFF, "agf_", "agf_uuid")
    for f in ("agf_flfirst", "agf_fllast"):
        if agf[f] >= ctx.agfl_size:
            ctx.report("AGF_HEADER", f"AG {agno}: {f} {agf[f]} is beyond the free list "
                       f"({ctx.agfl_size} slots)", agno=agno, block=0, field=f,
                       found=agf[f])
    if not usable:
        agf = _salvage(ctx, agno, agf, "agf_", "agf_uuid", C.XFS_AGF_MAGIC)
    ctx.agf[agno] = agf
    _check_agfl(ctx, agno, agf)


def _check_agi(ctx, agno: int) -> None:
    agi = _read_header(ctx, agno, 2, "AGI_HEADER", AGI)
    if agi is None:
        return
    if not _header_common(ctx, agno, agi["_raw"], agi, "agi", C.XFS_AGI_MAGIC,
                          C.XFS_AGI_CRC_OFF, "agi_", "agi_uuid"):
        agi = _salvage(ctx, agno, agi, "agi_", "agi_uuid", C.XFS_AGI_MAGIC)
    ctx.agi[agno] = agi
    ctx.unlinked[agno] = list(agi["agi_unlinked"])
    for i, v in enumerate(agi["agi_unlinked"]):
        if v != C.NULLAGINO:
            ctx.report("AGI_UNLINKED", f"AG {agno}: unlinked bucket {i} holds inode "
                       f"{(agno << ctx.sb.agino_log) | v}", agno=agno, block=0,
                       field="agi_unlinked", index=i, found=v)


def _check_agfl(ctx, agno: int, agf: dict) -> None:
    """scan_freelist: nothing is looked at when the list is empty; a bad
    checksum is an error; a bad magic, uuid or sequence number under a
    good checksum repair silently rebuilds (a warning here)."""
    count, first, last = agf["agf_flcount"], agf["agf_flfirst"], agf["agf_fllast"]
    if not count:
        return
    where = dict(agno=agno, block=ctx.agfl_block)
    try:
        raw = _sector(ctx, agno, 3)
    except FsToolError as e:
        ctx.from_error("AGFL_CRC", e, **where)
        return
    if not parsers.xfs_cksum_ok(raw, C.XFS_AGFL_CRC_OFF):
        ctx.report("AGFL_CRC", f"AG {agno}: free list CRC mismatch", field="agfl_crc",
                   **where)
    hdr = AGFL.unpack(raw)
    for field, bad in (("agfl_magicnum", hdr["agfl_magicnum"] != C.XFS_AGFL_MAGIC),
                       ("agfl_seqno", hdr["agfl_seqno"] != agno),
                       ("agfl_uuid", hdr["agfl_uuid"] != ctx.fs.uuid)):
        if bad:
            ctx.report("AGFL_HEADER", f"AG {agno}: free list header {field} is wrong "
                       "(xfs_repair rebuilds the list without reporting it)",
                       field=field, **where)
    check_lsn(ctx, hdr["agfl_lsn"], "agfl", field="agfl_lsn", **where)
    if first >= ctx.agfl_size or last >= ctx.agfl_size:
        return
    slots = struct.unpack_from(f">{ctx.agfl_size}I", raw, C.XFS_AGFL_HDR_SIZE)
    seen = set()
    i, n = first, 0
    while True:
        b = slots[i]
        n += 1
        if not ctx.verify_agbno(agno, b):
            ctx.report("AGFL_BLOCK", f"AG {agno}: free list slot {i} holds block {b}, "
                       "outside the AG's usable blocks", field="agfl_bno", index=i,
                       found=b, **where)
        elif b in seen:
            ctx.report("AGFL_DUPLICATE", f"AG {agno}: block {b} is on the free list "
                       "twice (xfs_repair rebuilds the list without reporting it)",
                       field="agfl_bno", index=i, found=b, **where)
        else:
            seen.add(b)
            ctx.claim(agno, b, 1, OWN_AGFL)
        if i == last or n > ctx.agfl_size:
            break
        i = (i + 1) % ctx.agfl_size
    if n != count:
        ctx.report("AGFL_COUNT", f"AG {agno}: the free list from slot {first} to {last} "
                   f"holds {n} blocks, agf_flcount says {count}", agno=agno, block=0,
                   structure="agf", field="agf_flcount", expected=n, found=count)
    ctx.agfl_count = getattr(ctx, "agfl_count", {})
    ctx.agfl_count[agno] = n


# -- phase: unlinked lists ---------------------------------------------------
def phase_unlinked(ctx) -> None:
    """Every inode an unlinked bucket chains must be allocated, have no
    links, hash to its bucket and end the chain; an inode in use whose
    next_unlinked is set is on no valid list (xfs_repair clears it)."""
    sb = ctx.sb
    on_list = set()
    for agno in ctx.ag_filter:
        buckets = ctx.unlinked.get(agno) or []
        tab = ctx.tables.get(agno)
        for bucket, agino in enumerate(buckets):
            seen = set()
            while agino != C.NULLAGINO:
                ino = (agno << sb.agino_log) | agino
                where = dict(agno=agno, block=0, structure="agi", field="agi_unlinked",
                             index=bucket)
                if agino in seen:
                    ctx.report("AGI_UNLINKED", f"AG {agno}: unlinked bucket {bucket} "
                               f"loops back to inode {ino}", found=agino, **where)
                    break
                seen.add(agino)
                if not ctx.verify_agino(agno, agino):
                    ctx.report("AGI_UNLINKED", f"AG {agno}: unlinked bucket {bucket} "
                               f"chains inode number {agino}, outside the AG",
                               found=agino, **where)
                    break
                slot = tab.slot(ino) if tab is not None else -1
                if slot < 0 or not tab.itype[slot]:
                    ctx.report("AGI_UNLINKED", f"AG {agno}: unlinked bucket {bucket} "
                               f"chains inode {ino}, which is not in use", ino=ino,
                               found=agino, **where)
                    break
                if tab.nlinks[slot]:
                    ctx.report("AGI_UNLINKED", f"AG {agno}: unlinked bucket {bucket} "
                               f"chains inode {ino}, which has {tab.nlinks[slot]} "
                               "links", ino=ino, found=agino, **where)
                if agino % C.XFS_AGI_UNLINKED_BUCKETS != bucket:
                    ctx.report("AGI_UNLINKED", f"AG {agno}: inode {ino} is chained from "
                               f"unlinked bucket {bucket}, it hashes to "
                               f"{agino % C.XFS_AGI_UNLINKED_BUCKETS}", ino=ino,
                               found=agino, **where)
                on_list.add(ino)
                agino = ctx.next_unlinked.get(ino, C.NULLAGINO)
    for ino, nxt in sorted(ctx.next_unlinked.items()):
        agno = ino >> sb.agino_log
        if agno not in ctx.ag_filter or ino in on_list:
            continue
        tab = ctx.tables.get(agno)
        slot = tab.slot(ino) if tab is not None else -1
        if slot >= 0 and tab.itype[slot]:
            ctx.report("INODE_UNLINKED", f"inode {ino} is in use and its next_unlinked "
                       f"is {nxt}, but it is on no unlinked list", ino=ino,
                       field="di_next_unlinked", found=nxt, expected=C.NULLAGINO)
