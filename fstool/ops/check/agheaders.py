"""Phase ag_headers: every AG's AGF, AGI and free list, as xfs_repair's
verify_set_agf/agi and scan_freelist see them; and (phase unlinked) the
AGI unlinked lists against the inodes they chain."""
from __future__ import annotations

import functools
import struct

from ..._backend import parsers
from ...errors import FsToolError
from ...format import constants as C
from ...format.structs import AGF, AGFL, AGI
from .base import OWN_AGFL, OWN_LOG


class AGGeometry:
    """Block and inode number validity, as the kernel's xfs_verify_agbno
    and xfs_verify_agino define them."""

    def setup_geometry(self) -> None:
        sb = self.sb
        f = sb.fields
        self.agfl_block = (3 * sb.sectsize) >> sb.blocklog
        self.agfl_size = (sb.sectsize - C.XFS_AGFL_HDR_SIZE) // 4
        cluster_bytes = 8192 * (sb.inodesize // 256)
        if f["sb_inoalignmt"] < cluster_bytes >> sb.blocklog:
            cluster_bytes = 8192
        self.blocks_per_cluster = max(1, cluster_bytes >> sb.blocklog)
        if f["sb_versionnum"] & 0x80 and f["sb_inoalignmt"] >= self.blocks_per_cluster:
            self.cluster_align = f["sb_inoalignmt"]
        else:
            self.cluster_align = 1

    @functools.cached_property
    def ag_lengths(self) -> list:
        """Blocks in each AG (the last may be shorter)."""
        return [self.fs.ag_length(a) for a in range(self.sb.agcount)]

    def verify_agbno(self, agno: int, agbno: int) -> bool:
        return self.agfl_block < agbno < self.fs.ag_length(agno)

    def fsb_split(self, fsbno: int) -> tuple[int, int]:
        """(AG, block in AG) of a filesystem block number.  The AG number
        is 32 bits wide (XFS_FSB_TO_AGNO), so bits above it are dropped: the
        kernel and xfs_repair both read such a number as the block those bits
        fall back to."""
        agblklog = self.sb.agblklog
        return (fsbno >> agblklog) & 0xFFFFFFFF, fsbno & ((1 << agblklog) - 1)

    def verify_fsbno(self, fsbno: int) -> bool:
        agno, agbno = self.fsb_split(fsbno)
        return agno < self.sb.agcount and self.verify_agbno(agno, agbno)

    def agino_range(self, agno: int) -> tuple[int, int]:
        ca = self.cluster_align
        first = -(-(self.agfl_block + 1) // ca) * ca
        last = self.fs.ag_length(agno) // ca * ca
        return first << self.sb.inopblog, (last << self.sb.inopblog) - 1

    def verify_agino(self, agno: int, agino: int) -> bool:
        lo, hi = self.agino_range(agno)
        return lo <= agino <= hi


class AGHeaderPhase:
    def phase_ag_headers(self) -> None:
        sb = self.sb
        for agno in self.ag_filter:
            self.claim_ag_headers(agno)
            self._check_agf(agno)
            self._check_agi(agno)
        log_agno = sb.logstart >> sb.agblklog
        if sb.logstart and log_agno in self.ag_filter and log_agno < sb.agcount:
            self.claim(log_agno, sb.logstart & ((1 << sb.agblklog) - 1), sb.logblocks,
                       OWN_LOG)

    def _sector(self, agno: int, n: int) -> bytes:
        ss = self.sb.sectsize
        return self.fs.dev.pread((self.fs.agb_to_daddr(agno, 0) << C.BBSHIFT) + n * ss, ss)

    def _header_common(self, agno, raw, d, name, magic, crc_off, prefix, uuid_field):
        """The checks the AGF and AGI share; True when the header can be
        used to find the AG's btrees (repair skips the AG otherwise)."""
        where = dict(agno=agno, block=self.agfl_block if name == "agfl" else 0)
        code = name.upper() + "_HEADER"
        usable = True
        if not parsers.xfs_cksum_ok(raw, crc_off):
            self.report(code, f"AG {agno}: {name} CRC mismatch", field=prefix + "crc", **where)
        if d[prefix + "magicnum"] != magic:
            self.report(code, f"AG {agno}: {name} bad magic 0x{d[prefix + 'magicnum']:x}",
                        field=prefix + "magicnum", found=d[prefix + "magicnum"], **where)
            usable = False
        if d[prefix + "versionnum"] != 1:
            self.report(code, f"AG {agno}: {name} version {d[prefix + 'versionnum']}, "
                        "expected 1", field=prefix + "versionnum",
                        expected=1, found=d[prefix + "versionnum"], **where)
            usable = False
        if d[prefix + "seqno"] != agno:
            self.report(code, f"AG {agno}: {name} sequence number {d[prefix + 'seqno']}",
                        field=prefix + "seqno", expected=agno, found=d[prefix + "seqno"],
                        **where)
            usable = False
        length = self.fs.ag_length(agno)
        if d[prefix + "length"] != length:
            self.report(code, f"AG {agno}: {name} length {d[prefix + 'length']}, the AG "
                        f"has {length} blocks", field=prefix + "length", expected=length,
                        found=d[prefix + "length"], **where)
            usable = False
        if d[uuid_field] != self.fs.uuid:
            self.report(code, f"AG {agno}: {name} uuid does not match the filesystem",
                        field=uuid_field, **where)
            usable = False
        self._check_lsn(d[prefix + "lsn"], name, agno=agno, block=0, field=prefix + "lsn")
        return usable

    def _salvage(self, agno: int, d: dict, prefix: str, uuid_field: str, magic: int) -> dict:
        """A header whose naming fields are wrong (magic, version, sequence
        number, length, uuid; already reported) with those fields set to
        what they must be, as xfs_repair's verify_set_agf/agi correct them
        before going on: the tree roots and counters it holds are then
        checked like any other header's, and repair rewrites it whole."""
        d = dict(d, **{prefix + "magicnum": magic, prefix + "versionnum": 1,
                       prefix + "seqno": agno, prefix + "length": self.fs.ag_length(agno),
                       uuid_field: self.fs.uuid, "_salvaged": True})
        return d

    def _read_header(self, agno: int, sector: int, code: str, layout):
        """An AG header sector decoded (its raw bytes under ``_raw``), or None
        when it cannot be read (reported)."""
        try:
            raw = self._sector(agno, sector)
        except FsToolError as e:
            self.from_error(code, e, agno=agno, block=0)
            return None
        d = layout.unpack(raw)
        d["_raw"] = raw
        return d

    def _check_agf(self, agno: int) -> None:
        agf = self._read_header(agno, 1, "AGF_HEADER", AGF)
        if agf is None:
            return
        usable = self._header_common(agno, agf["_raw"], agf, "agf", C.XFS_AGF_MAGIC,
                                     C.XFS_AGF_CRC_OFF, "agf_", "agf_uuid")
        for f in ("agf_flfirst", "agf_fllast"):
            if agf[f] >= self.agfl_size:
                self.report("AGF_HEADER", f"AG {agno}: {f} {agf[f]} is beyond the free list "
                            f"({self.agfl_size} slots)", agno=agno, block=0, field=f,
                            found=agf[f])
        if not usable:
            agf = self._salvage(agno, agf, "agf_", "agf_uuid", C.XFS_AGF_MAGIC)
        self.agf[agno] = agf
        self._check_agfl(agno, agf)

    def _check_agi(self, agno: int) -> None:
        agi = self._read_header(agno, 2, "AGI_HEADER", AGI)
        if agi is None:
            return
        if not self._header_common(agno, agi["_raw"], agi, "agi", C.XFS_AGI_MAGIC,
                                   C.XFS_AGI_CRC_OFF, "agi_", "agi_uuid"):
            agi = self._salvage(agno, agi, "agi_", "agi_uuid", C.XFS_AGI_MAGIC)
        self.agi[agno] = agi
        self.unlinked[agno] = list(agi["agi_unlinked"])
        for i, v in enumerate(agi["agi_unlinked"]):
            if v != C.NULLAGINO:
                self.report("AGI_UNLINKED", f"AG {agno}: unlinked bucket {i} holds inode "
                            f"{(agno << self.sb.agino_log) | v}", agno=agno, block=0,
                            field="agi_unlinked", index=i, found=v)

    def _check_agfl(self, agno: int, agf: dict) -> None:
        """scan_freelist: nothing is looked at when the list is empty; a bad
        checksum is an error; a bad magic, uuid or sequence number under a
        good checksum repair silently rebuilds (a warning here)."""
        count, first, last = agf["agf_flcount"], agf["agf_flfirst"], agf["agf_fllast"]
        if not count:
            return
        where = dict(agno=agno, block=self.agfl_block)
        try:
            raw = self._sector(agno, 3)
        except FsToolError as e:
            self.from_error("AGFL_CRC", e, **where)
            return
        if not parsers.xfs_cksum_ok(raw, C.XFS_AGFL_CRC_OFF):
            self.report("AGFL_CRC", f"AG {agno}: free list CRC mismatch", field="agfl_crc",
                        **where)
        hdr = AGFL.unpack(raw)
        for field, bad in (("agfl_magicnum", hdr["agfl_magicnum"] != C.XFS_AGFL_MAGIC),
                           ("agfl_seqno", hdr["agfl_seqno"] != agno),
                           ("agfl_uuid", hdr["agfl_uuid"] != self.fs.uuid)):
            if bad:
                self.report("AGFL_HEADER", f"AG {agno}: free list header {field} is wrong "
                            "(xfs_repair rebuilds the list without reporting it)",
                            field=field, **where)
        self._check_lsn(hdr["agfl_lsn"], "agfl", field="agfl_lsn", **where)
        if first >= self.agfl_size or last >= self.agfl_size:
            return
        slots = struct.unpack_from(f">{self.agfl_size}I", raw, C.XFS_AGFL_HDR_SIZE)
        seen = set()
        i, n = first, 0
        while True:
            b = slots[i]
            n += 1
            if not self.verify_agbno(agno, b):
                self.report("AGFL_BLOCK", f"AG {agno}: free list slot {i} holds block {b}, "
                            "outside the AG's usable blocks", field="agfl_bno", index=i,
                            found=b, **where)
            elif b in seen:
                self.report("AGFL_DUPLICATE", f"AG {agno}: block {b} is on the free list "
                            "twice (xfs_repair rebuilds the list without reporting it)",
                            field="agfl_bno", index=i, found=b, **where)
            else:
                seen.add(b)
                self.claim(agno, b, 1, OWN_AGFL)
            if i == last or n > self.agfl_size:
                break
            i = (i + 1) % self.agfl_size
        if n != count:
            self.report("AGFL_COUNT", f"AG {agno}: the free list from slot {first} to {last} "
                        f"holds {n} blocks, agf_flcount says {count}", agno=agno, block=0,
                        structure="agf", field="agf_flcount", expected=n, found=count)
        self.agfl_count = getattr(self, "agfl_count", {})
        self.agfl_count[agno] = n

    # -- phase: unlinked lists ---------------------------------------------------
    def phase_unlinked(self) -> None:
        """Every inode an unlinked bucket chains must be allocated, have no
        links, hash to its bucket and end the chain; an inode in use whose
        next_unlinked is set is on no valid list (xfs_repair clears it)."""
        sb = self.sb
        on_list = set()
        for agno in self.ag_filter:
            buckets = self.unlinked.get(agno) or []
            tab = self.tables.get(agno)
            for bucket, agino in enumerate(buckets):
                seen = set()
                while agino != C.NULLAGINO:
                    ino = (agno << sb.agino_log) | agino
                    where = dict(agno=agno, block=0, structure="agi", field="agi_unlinked",
                                 index=bucket)
                    if agino in seen:
                        self.report("AGI_UNLINKED", f"AG {agno}: unlinked bucket {bucket} "
                                    f"loops back to inode {ino}", found=agino, **where)
                        break
                    seen.add(agino)
                    if not self.verify_agino(agno, agino):
                        self.report("AGI_UNLINKED", f"AG {agno}: unlinked bucket {bucket} "
                                    f"chains inode number {agino}, outside the AG",
                                    found=agino, **where)
                        break
                    slot = tab.slot(ino) if tab is not None else -1
                    if slot < 0 or not tab.itype[slot]:
                        self.report("AGI_UNLINKED", f"AG {agno}: unlinked bucket {bucket} "
                                    f"chains inode {ino}, which is not in use", ino=ino,
                                    found=agino, **where)
                        break
                    if tab.nlinks[slot]:
                        self.report("AGI_UNLINKED", f"AG {agno}: unlinked bucket {bucket} "
                                    f"chains inode {ino}, which has {tab.nlinks[slot]} "
                                    "links", ino=ino, found=agino, **where)
                    if agino % C.XFS_AGI_UNLINKED_BUCKETS != bucket:
                        self.report("AGI_UNLINKED", f"AG {agno}: inode {ino} is chained from "
                                    f"unlinked bucket {bucket}, it hashes to "
                                    f"{agino % C.XFS_AGI_UNLINKED_BUCKETS}", ino=ino,
                                    found=agino, **where)
                    on_list.add(ino)
                    agino = self.next_unlinked.get(ino, C.NULLAGINO)
        for ino, nxt in sorted(self.next_unlinked.items()):
            agno = ino >> sb.agino_log
            if agno not in self.ag_filter or ino in on_list:
                continue
            tab = self.tables.get(agno)
            slot = tab.slot(ino) if tab is not None else -1
            if slot >= 0 and tab.itype[slot]:
                self.report("INODE_UNLINKED", f"inode {ino} is in use and its next_unlinked "
                            f"is {nxt}, but it is on no unlinked list", ino=ino,
                            field="di_next_unlinked", found=nxt, expected=C.NULLAGINO)
