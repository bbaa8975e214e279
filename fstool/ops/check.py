"""fstool check: verify every btree invariant and the cross-structure
accounting of an image, like xfs_repair -n.

The check is a list of phases.  Each phase records findings from the problem
table (ops/problems.py) and never stops the run: a structure that cannot be
read becomes a finding, and the phases that depend on it work with what was
read.  Exit status follows xfs_repair -n: 0 clean, 1 corruption, 2 dirty log,
4 operational error.
"""
from __future__ import annotations

import dataclasses
import struct
from array import array
from collections import defaultdict

from .._backend import parsers
from ..errors import CorruptionError, FsToolError
from ..format import constants as C
from ..fs import btree
from ..fs import dir as xdir
from ..fs.attr import _read_attr_block, iter_xattrs, read_symlink
from ..fs.inode import Inode
from ..io import verify as V
from .problems import ERROR, PROBLEMS

EXIT_CLEAN, EXIT_CORRUPT, EXIT_DIRTY_LOG, EXIT_OPERATIONAL = 0, 1, 2, 4
NULLAGBLOCK = C.NULLAGBLOCK


@dataclasses.dataclass
class Finding:
    code: str
    message: str
    agno: int | None = None
    block: int | None = None
    ino: int | None = None
    field: str | None = None
    expected: object = None
    found: object = None

    @property
    def severity(self) -> str:
        return PROBLEMS[self.code][0]

    def as_dict(self) -> dict:
        d = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        d["severity"] = self.severity
        return d


class InodeTable:
    """What check learns of every inode, in flat arrays indexed by a slot
    (no Python object per inode): the inode chunks, sorted by first inode
    number, are numbered 0, 1, ...; the inode at index i of chunk k has slot
    64 * k + i.  ``itype`` holds the file type (mode >> 12; 0 for an inode
    not in use, 16 for one in use with no valid type), ``nlinks`` the link
    count, ``refs`` the directory entries that name it."""

    def __init__(self, starts):
        self.starts = array("Q", starts)
        n = 64 * len(self.starts)
        self.itype = bytearray(n)
        self.nlinks = array("I", bytes(4 * n))
        self.refs = array("I", bytes(4 * n))

    @classmethod
    def concat(cls, parts) -> "InodeTable":
        """One table of several with ascending, disjoint inode ranges."""
        t = cls(())
        for part in parts:
            t.starts.extend(part.starts)
            t.itype.extend(part.itype)
            t.nlinks.extend(part.nlinks)
            t.refs.extend(part.refs)
        return t

    def slot(self, ino: int) -> int:
        return parsers.find_slot(self.starts, ino)

    def ino(self, slot: int) -> int:
        return self.starts[slot >> 6] + (slot & 63)


class Checker:
    def __init__(self, fs, progress=None, ag_filter=None):
        self.fs = fs
        self.sb = fs.sb
        self.ag_filter = list(ag_filter) if ag_filter is not None else range(fs.sb.agcount)
        self.dirs: list[int] = []
        # per AG: the inode table of its chunks, and those chunks' inobt records
        self.tables: dict[int, InodeTable] = {}
        self.chunks: dict[int, list] = {}
        self.findings: list[Finding] = []
        self.progress = progress
        self._phase = ""
        # per AG: list of (start, length, what) for every claimed block range
        self.claims: dict[int, list] = defaultdict(list)
        self.shared: dict[int, list] = defaultdict(list)     # refcount > 1 ranges
        self.log_dirty = False
        self.ag_totals = {"icount": 0, "ifree": 0, "fdblocks": 0}

    # -- reporting -------------------------------------------------------------
    def report(self, code: str, message: str, **where) -> None:
        assert code in PROBLEMS, code
        self.findings.append(Finding(code, message, **where))

    def from_error(self, code: str, err: Exception, **where) -> None:
        if isinstance(err, CorruptionError):
            where.setdefault("agno", err.agno)
            where.setdefault("block", err.block)
            where.setdefault("ino", err.ino)
            where.setdefault("field", err.field)
        self.report(code, str(err), **{k: v for k, v in where.items() if v is not None})

    def claim(self, agno: int, start: int, length: int, what: str) -> None:
        self.claims[agno].append((start, length, what))

    # -- driver ------------------------------------------------------------------
    # phases that look at one AG at a time (run in parallel with jobs > 1),
    # then the phases that need the whole filesystem
    AG_PHASES = ("ag_headers", "free_space", "inode_btrees", "refcounts", "inodes")
    GLOBAL_PHASES = ("namespace", "space_map", "counters", "log")
    PHASES = ("superblocks",) + AG_PHASES + GLOBAL_PHASES

    def run(self, jobs: int = 1) -> list[Finding]:
        self._run_phase("superblocks")
        if jobs > 1 and self.sb.agcount > 1:
            self._run_ag_phases_parallel(jobs)
        else:
            for name in self.AG_PHASES:
                self._run_phase(name)
        for name in self.GLOBAL_PHASES:
            self._run_phase(name)
        return self.findings

    def _run_phase(self, name: str) -> None:
        self._phase = name
        if self.progress:
            self.progress(name, 0, None)
        try:
            getattr(self, "phase_" + name)()
        except FsToolError as e:      # a phase stops; the others go on
            self.from_error("INODE_CORRUPT" if name in ("inodes", "namespace")
                            else "AG_HEADER", e)

    # what an AG worker hands back to be merged
    MERGED = ("findings", "claims", "shared", "tables", "dirs", "ag_totals")

    def _run_ag_phases_parallel(self, jobs: int) -> None:
        import multiprocessing
        agnos = list(range(self.sb.agcount))
        groups = [agnos[i::jobs] for i in range(min(jobs, len(agnos)))]
        if self.progress:
            self.progress(f"AGs in {len(groups)} processes", 0, None)
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(len(groups)) as pool:
            results = pool.starmap(_ag_worker, [(self.fs.dev.path, g) for g in groups])
        for part in results:
            self.findings.extend(part["findings"])
            for agno, claims in part["claims"].items():
                self.claims[agno].extend(claims)
            for agno, ranges in part["shared"].items():
                self.shared[agno].extend(ranges)
            self.tables.update(part["tables"])
            self.dirs.extend(part["dirs"])
            for k, v in part["ag_totals"].items():
                self.ag_totals[k] += v

    def _tick(self, done: int, total: int) -> None:
        """Report progress within the running phase (every 256 steps)."""
        if self.progress and (not done & 255 or done == total):
            self.progress(self._phase, done, total)

    @property
    def exit_code(self) -> int:
        if self.log_dirty:
            return EXIT_DIRTY_LOG
        if any(f.severity == ERROR for f in self.findings):
            return EXIT_CORRUPT
        return EXIT_CLEAN

    # -- phase: superblocks --------------------------------------------------------
    # fields the kernel never changes after mkfs; it does update feature and
    # version bits in the primary only, so those are not compared
    GEOMETRY_FIELDS = ("sb_blocksize", "sb_dblocks", "sb_agblocks", "sb_agcount",
                       "sb_logstart", "sb_logblocks", "sb_inodesize", "sb_sectsize",
                       "sb_inoalignmt", "sb_dirblklog", "sb_rextsize")
    KNOWN_RO_COMPAT = 0xF

    def phase_superblocks(self) -> None:
        from ..format.structs import SB
        primary = self.sb.fields
        unknown = primary["sb_features_ro_compat"] & ~self.KNOWN_RO_COMPAT
        if unknown:
            self.report("SB_FEATURES", f"unknown read-only-compatible features 0x{unknown:x}",
                        agno=0, block=0, field="sb_features_ro_compat", found=unknown)
        for agno in range(1, self.sb.agcount):
            try:
                # the uuid is not compared: xfs_repair ignores it in secondaries
                raw = self.fs._ag_sector(agno, 0, V.SB._replace(uuid_off=None))
            except FsToolError as e:
                self.from_error("SB_SECONDARY", e, agno=agno, block=0)
                continue
            sec = SB.unpack(raw)
            for f in self.GEOMETRY_FIELDS:
                if sec[f] != primary[f]:
                    self.report("SB_SECONDARY", f"secondary superblock in AG {agno}: {f} "
                                "differs from the primary", agno=agno, block=0, field=f,
                                expected=_jsonable(primary[f]), found=_jsonable(sec[f]))

    # -- phase: AG headers ------------------------------------------------------------
    def phase_ag_headers(self) -> None:
        self.agf = {}
        self.agi = {}
        hdr_blocks = (4 * self.sb.sectsize + self.sb.blocksize - 1) // self.sb.blocksize
        for agno in self.ag_filter:
            self.claim(agno, 0, hdr_blocks, "AG headers")
            for name, getter, store in (("agf", self.fs.agf, self.agf),
                                        ("agi", self.fs.agi, self.agi)):
                try:
                    store[agno] = getter(agno)
                except FsToolError as e:
                    self.from_error("AG_HEADER", e, agno=agno)
            if agno in self.agf:
                self._check_agfl(agno)
            if agno in self.agi:
                unl = [i for i, v in enumerate(self.agi[agno]["agi_unlinked"])
                       if v != C.NULLAGINO]
                if unl:
                    self.report("AGI_UNLINKED", f"AG {agno}: unlinked buckets {unl} hold "
                                "inodes", agno=agno, field="agi_unlinked")
        log_agno = self.sb.logstart >> self.sb.agblklog
        log_agbno = self.sb.logstart & ((1 << self.sb.agblklog) - 1)
        if log_agno in self.ag_filter:
            self.claim(log_agno, log_agbno, self.sb.logblocks, "log")

    def _check_agfl(self, agno: int) -> None:
        agf = self.agf[agno]
        size = (self.sb.sectsize - C.XFS_AGFL_HDR_SIZE) // 4
        first, last, count = agf["agf_flfirst"], agf["agf_fllast"], agf["agf_flcount"]
        if first >= size or last >= size or count > size or \
                (count and (last - first) % size + 1 != count) or \
                (not count and (first - last) % size != 1 and first != last + 1):
            self.report("AGFL_RING", f"AG {agno}: flfirst {first}, fllast {last}, flcount "
                        f"{count} do not describe a ring of {size} slots", agno=agno,
                        field="agf_flcount")
            return
        try:
            slots = self.fs.agfl(agno)["agfl_bno"]
        except FsToolError as e:
            # a stale checksum is an error to xfs_repair; a good checksum over
            # a bad magic or sequence number it silently rebuilds
            raw = self.fs.dev.pread((self.fs.agb_to_daddr(agno, 0) << C.BBSHIFT) +
                                    3 * self.sb.sectsize, self.sb.sectsize)
            bad_crc = not parsers.xfs_cksum_ok(raw, C.XFS_AGFL_CRC_OFF)
            self.from_error("AG_HEADER" if bad_crc else "AGFL_HEADER", e, agno=agno)
            # the blocks are still the free list's, as far as accounting goes
            slots = list(struct.unpack_from(f">{size}I", raw, C.XFS_AGFL_HDR_SIZE))
        seen = set()
        length = self.fs.ag_length(agno)
        for i in range(count):
            b = slots[(first + i) % size]
            if b >= length or b in seen:
                self.report("AGFL_BLOCK", f"AG {agno}: free list block {b} is out of range "
                            "or repeated", agno=agno, block=b)
                continue
            seen.add(b)
            self.claim(agno, b, 1, "AGFL")

    # -- btree walking with every invariant ------------------------------------------------
    def walk_tree(self, agno: int, name: str, reader, root: int, height: int,
                  rec_key, order=None, claim: bool = True) -> tuple[list, int]:
        """All records of a tree (in order) and its block count, checking
        levels, counts, order, keys against children, siblings and cycles.
        ``rec_key(record)`` is the key a parent stores for a record;
        ``order(key)`` what keys sort by (default: the key itself)."""
        order = order or (lambda k: k)
        bt = reader.bt
        bs = self.sb.blocksize
        leaf_max, node_max = bt.maxrecs(bs, True), bt.maxrecs(bs, False)
        records = []
        nblocks = 0
        seen = set()
        where = {"agno": agno}
        if not 1 <= height <= C.XFS_BTREE_MAXLEVELS:
            self.report("BTREE_LEVEL", f"{name} of AG {agno}: height {height} is not valid",
                        field="level", **where)
            return records, 0
        # (block, expected level, lowest key from the parent or None)
        row = [(root, height - 1, None)]
        while row:
            next_row = []
            prev = None
            for addr, level, parent_key in row:
                if addr in seen:
                    self.report("BTREE_CYCLE", f"{name} block {addr} in AG {agno} is reached "
                                "twice", block=addr, **where)
                    continue
                seen.add(addr)
                try:
                    blk = reader.read_block(addr, level)
                except FsToolError as e:
                    self.from_error("BTREE_BLOCK", e, agno=agno, block=addr)
                    continue
                nblocks += 1
                if claim:
                    self.claim(agno, addr, 1, name)
                limit = leaf_max if level == 0 else node_max
                is_root = level == height - 1
                if not is_root and blk.numrecs < limit // 2:
                    self.report("BTREE_NUMRECS", f"{name} block {addr} in AG {agno}: "
                                f"{blk.numrecs} records, fewer than half of {limit}",
                                block=addr, field="bb_numrecs", expected=limit // 2,
                                found=blk.numrecs, **where)
                if prev is not None:
                    if prev.rightsib != addr or blk.leftsib != prev.addr:
                        self.report("BTREE_SIBLING", f"{name} blocks {prev.addr} and {addr} "
                                    f"in AG {agno} are not linked as siblings", block=addr,
                                    **where)
                elif blk.leftsib != NULLAGBLOCK:
                    self.report("BTREE_SIBLING", f"{name} block {addr} in AG {agno} is first "
                                f"in its level but has left sibling {blk.leftsib}", block=addr,
                                field="bb_leftsib", **where)
                prev = blk
                if level == 0:
                    keys = [rec_key(r) for r in blk.recs]
                    if parent_key is not None and keys and keys[0] != parent_key:
                        self.report("BTREE_KEY", f"{name} block {addr} in AG {agno}: first "
                                    f"record key {keys[0]} differs from the parent key "
                                    f"{parent_key}", block=addr, **where)
                    records.extend(blk.recs)
                else:
                    keys = [struct.unpack(bt.key_fmt, k) for k in blk.keys]
                    if parent_key is not None and keys and keys[0] != parent_key:
                        self.report("BTREE_KEY", f"{name} block {addr} in AG {agno}: first "
                                    f"key {keys[0]} differs from the parent key {parent_key}",
                                    block=addr, **where)
                    for k, p in zip(keys, blk.ptrs):
                        next_row.append((p, level - 1, k))
                okeys = [order(k) for k in keys]
                if any(b <= a for a, b in zip(okeys, okeys[1:])):
                    self.report("BTREE_ORDER", f"{name} block {addr} in AG {agno}: keys or "
                                "records out of order", block=addr, **where)
            if prev is not None and prev.rightsib != NULLAGBLOCK:
                self.report("BTREE_SIBLING", f"{name} block {prev.addr} in AG {agno} is last "
                            f"in its level but has right sibling {prev.rightsib}",
                            block=prev.addr, field="bb_rightsib", **where)
            row = next_row
        return records, nblocks

    # -- phase: free space -------------------------------------------------------------------
    def phase_free_space(self) -> None:
        self.free = {}
        for agno, agf in self.agf.items():
            reader = self.fs.ag_btree(agno, btree.BNOBT)
            # both trees store (startblock, blockcount) keys; the cntbt sorts
            # them by length first
            bno, nb = self.walk_tree(agno, "bnobt", reader, agf["agf_roots"][0],
                                     agf["agf_levels"][0], tuple, lambda k: k[0])
            reader = self.fs.ag_btree(agno, btree.CNTBT)
            cnt, nc = self.walk_tree(agno, "cntbt", reader, agf["agf_roots"][1],
                                     agf["agf_levels"][1], tuple, lambda k: (k[1], k[0]))
            length = self.fs.ag_length(agno)
            for s, n in bno:
                if n == 0 or s + n > length:
                    self.report("BTREE_ORDER", f"bnobt of AG {agno}: free extent [{s},{n}] "
                                "is empty or runs past the AG", agno=agno, block=s)
            for (s1, n1), (s2, _n2) in zip(bno, bno[1:]):
                if s1 + n1 >= s2:
                    self.report("BTREE_ORDER", f"bnobt of AG {agno}: free extents at {s1} "
                                f"and {s2} overlap or touch (they should be merged)",
                                agno=agno, block=s2)
            if sorted(bno) != sorted(cnt):
                self.report("FREESP_MISMATCH", f"AG {agno}: bnobt holds {len(bno)} extents, "
                            f"cntbt {len(cnt)}, and they differ", agno=agno)
            for s, n in bno:
                self.claim(agno, s, n, "free space")
            total = sum(n for _s, n in bno)
            longest = max((n for _s, n in bno), default=0)
            self._expect(agno, "agf", agf, "agf_freeblks", total, "AGF_FREEBLKS")
            self._expect(agno, "agf", agf, "agf_longest", longest, "AGF_LONGEST")
            btreeblks = nb + nc - 2
            if self.sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_RMAPBT):
                btreeblks += self._rmap_blocks(agno, agf) - 1
            self._expect(agno, "agf", agf, "agf_btreeblks", btreeblks, "AGF_BTREEBLKS")
            self.free[agno] = total
            self.ag_totals["fdblocks"] += total + agf["agf_flcount"] + agf["agf_btreeblks"]

    def _rmap_blocks(self, agno: int, agf: dict) -> int:
        reader = self.fs.ag_btree(agno, btree.RMAPBT)
        _recs, n = self.walk_tree(agno, "rmapbt", reader, agf["agf_roots"][2],
                                  agf["agf_levels"][2], lambda r: (r[0], r[2], r[3]),
                                  lambda k: k)
        return n

    def _expect(self, agno, hdr, d, field, want, code) -> None:
        if d[field] != want:
            self.report(code, f"AG {agno}: {field} is {d[field]}, counted {want}", agno=agno,
                        field=field, expected=want, found=d[field])

    # -- phase: inode btrees --------------------------------------------------------------
    def phase_inode_btrees(self) -> None:
        sb = self.sb
        for agno, agi in self.agi.items():
            reader = self.fs.ag_btree(agno, self.fs.inobt_type())
            recs, nblocks = self.walk_tree(agno, "inobt", reader, agi["agi_root"],
                                           agi["agi_level"], lambda r: (r[0],))
            count = freecount = 0
            good = []
            inodes_in_ag = self.fs.ag_length(agno) << sb.inopblog
            for rec in recs:
                startino, holemask, n, nfree, free = rec
                count += n
                freecount += nfree
                if startino + 64 > inodes_in_ag:
                    self.report("INOBT_RECORD", f"inobt record at agino {startino} in AG "
                                f"{agno} lies outside the AG", agno=agno,
                                field="ir_startino", found=startino)
                    continue
                holes = 0
                for bit in range(16):
                    if holemask >> bit & 1:
                        holes |= 0xF << (4 * bit)
                real = 64 - bin(holes).count("1")
                if startino % 64 or n != real or nfree != bin(free & ~holes).count("1") or \
                        nfree > n:
                    self.report("INOBT_RECORD", f"inobt record at agino {startino} in AG "
                                f"{agno}: count {n}, freecount {nfree} and masks disagree",
                                agno=agno, field="ir_freecount")
                good.append(rec)
            self._table_for(agno, good)
            self._expect(agno, "agi", agi, "agi_count", count, "AGI_COUNT")
            self._expect(agno, "agi", agi, "agi_freecount", freecount, "AGI_COUNT")
            self.ag_totals["icount"] += count
            self.ag_totals["ifree"] += freecount
            fblocks = 0
            if sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_FINOBT):
                reader = self.fs.ag_btree(agno, self.fs.inobt_type(free=True))
                frecs, fblocks = self.walk_tree(agno, "finobt", reader, agi["agi_free_root"],
                                                agi["agi_free_level"], lambda r: (r[0],))
                want = [r for r in recs if r[3] > 0]
                if frecs != want:
                    self.report("FINOBT_MISMATCH", f"AG {agno}: finobt holds {len(frecs)} "
                                f"records, the inobt has {len(want)} with free inodes",
                                agno=agno)
            if sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_INOBTCNT):
                self._expect(agno, "agi", agi, "agi_iblocks", nblocks, "AGI_BLOCKS")
                self._expect(agno, "agi", agi, "agi_fblocks", fblocks, "AGI_BLOCKS")
            self._claim_chunks(agno, good)

    def _table_for(self, agno: int, recs: list) -> None:
        """The AG's inode table: one slot per inode of every chunk, in inode
        order; a record that overlaps an earlier one gets none (it is reported)
        and its inodes are not looked at."""
        base = agno << self.sb.agino_log
        keep = []
        end = -1
        for rec in sorted(recs, key=lambda r: r[0]):
            if rec[0] >= end:
                keep.append(rec)
                end = rec[0] + 64
            else:
                self.report("INOBT_RECORD", f"inobt record at agino {rec[0]} in AG {agno} "
                            "overlaps another record's chunk", agno=agno,
                            field="ir_startino", found=rec[0])
        self.chunks[agno] = keep
        self.tables[agno] = InodeTable(base | r[0] for r in keep)

    def _claim_chunks(self, agno: int, recs: list) -> None:
        sb = self.sb
        # a whole chunk spans whole blocks unless a block holds several chunks
        chunk_blocks = 64 >> sb.inopblog
        blocks = set()
        for startino, holemask, _n, _f, _free in recs:
            if not holemask and chunk_blocks and not startino & (sb.inopblock - 1):
                self.claim(agno, startino >> sb.inopblog, chunk_blocks, "inode chunk")
                continue
            for i in range(64):
                if holemask >> (i // 4) & 1:
                    continue
                blocks.add((startino + i) >> sb.inopblog)
        for b in sorted(blocks):
            self.claim(agno, b, 1, "inode chunk")

    # -- phase: refcounts -----------------------------------------------------------------------
    def phase_refcounts(self) -> None:
        if not self.sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK):
            return
        for agno, agf in self.agf.items():
            reader = self.fs.ag_btree(agno, btree.REFCOUNTBT)
            recs, n = self.walk_tree(agno, "refcountbt", reader, agf["agf_refcount_root"],
                                     agf["agf_refcount_level"], lambda r: (r[0],))
            self._expect(agno, "agf", agf, "agf_refcount_blocks", n, "AGF_REFCOUNT_BLOCKS")
            for start, length, refcount in recs:
                if start & 0x80000000:            # CoW staging extent: owned by the CoW fork
                    self.claim(agno, start & 0x7FFFFFFF, length, "CoW staging")
                elif refcount > 1:
                    self.shared[agno].append((start, length))

    # -- phase: inodes ----------------------------------------------------------------------------
    def phase_inodes(self) -> None:
        """Every inode of every chunk, read a chunk at a time (not through the
        inode cache: each is looked at once)."""
        sb = self.sb
        fs = self.fs
        isize = sb.inodesize
        last_ag = fs.ag_length(sb.agcount - 1)
        # di_flags2 bits a plain inode may carry on this filesystem
        flags2_ok = C.XFS_DIFLAG2_DAX | C.XFS_DIFLAG2_COWEXTSIZE
        if sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK):
            flags2_ok |= C.XFS_DIFLAG2_REFLINK
        if sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_BIGTIME):
            flags2_ok |= C.XFS_DIFLAG2_BIGTIME
        if sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_NREXT64):
            flags2_ok |= C.XFS_DIFLAG2_NREXT64
        total = sum(len(c) for c in self.chunks.values())
        done = 0
        for agno in sorted(self.chunks):
            tab = self.tables[agno]
            for k, (startino, holemask, _n, _nfree, free) in enumerate(self.chunks[agno]):
                done += 1
                self._tick(done, total)
                first_blk = startino >> sb.inopblog
                nblocks = max(1, (64 * isize) >> sb.blocklog)
                try:
                    chunk = fs.dev.pread(fs.agb_to_daddr(agno, first_blk) << C.BBSHIFT,
                                         nblocks << sb.blocklog)
                except FsToolError as e:
                    self.from_error("INODE_CORRUPT", e, agno=agno, block=first_blk)
                    continue
                base = (startino & (sb.inopblock - 1)) * isize
                first = (agno << sb.agino_log) | startino
                # plain files are checked natively; the rest in _check_inode
                claims, others = parsers.scan_inode_chunk(
                    chunk, base, isize, first, self.sb.meta_uuid, free, holemask,
                    flags2_ok, sb.agblklog, sb.agcount, sb.agblocks, last_ag,
                    tab.itype, tab.nlinks, 64 * k)
                for a, b, n, ino in claims:
                    self.claims[a].append((b, n, ino))
                for i in others:
                    ino = first + i
                    raw = chunk[base + i * isize:base + (i + 1) * isize]
                    self._check_inode(agno, ino, not (free >> i & 1), raw, tab, 64 * k + i)

    def _check_inode(self, agno: int, ino: int, allocated: bool, raw: bytes,
                     tab: InodeTable, slot: int) -> None:
        fs = self.fs
        try:
            node = Inode(fs, ino, raw)
        except CorruptionError as e:
            if allocated:
                self.from_error("INODE_CORRUPT", e, ino=ino)
            else:
                self._check_free_inode(ino)
            return
        if not allocated:
            if node.mode:
                self.report("INOBT_INODE", f"inode {ino} is free in the inobt but in use on "
                            "disk", ino=ino, field="di_mode")
            return
        if not node.mode:
            self.report("INOBT_INODE", f"inode {ino} is allocated in the inobt but free on "
                        "disk", ino=ino, field="di_mode")
            return
        ifmt = node.mode & C.S_IFMT
        tab.itype[slot] = ifmt >> 12 or 16
        tab.nlinks[slot] = node.nlink
        ok_formats = {
            C.S_IFREG: (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE),
            C.S_IFDIR: (C.XFS_DINODE_FMT_LOCAL, C.XFS_DINODE_FMT_EXTENTS,
                        C.XFS_DINODE_FMT_BTREE),
            C.S_IFLNK: (C.XFS_DINODE_FMT_LOCAL, C.XFS_DINODE_FMT_EXTENTS,
                        C.XFS_DINODE_FMT_BTREE),
        }.get(ifmt, (C.XFS_DINODE_FMT_DEV,))
        if ifmt not in C.TYPE_NAMES:
            self.report("INODE_FORMAT", f"inode {ino}: file type 0o{ifmt:o} is not "
                        "valid", ino=ino, field="di_mode")
            return
        if node.format not in ok_formats:
            self.report("INODE_FORMAT", f"inode {ino}: data fork format {node.format} does "
                        f"not suit a {node.type_name}", ino=ino, field="di_format")
            return
        if node.flags2 & ~0x1F:
            self.report("INODE_FLAGS", f"inode {ino}: unknown di_flags2 bits "
                        f"0x{node.flags2 & ~0x1F:x}", ino=ino, field="di_flags2")
        if node.flags2 & C.XFS_DIFLAG2_REFLINK and (
                not node.is_reg or
                not self.sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK)):
            self.report("INODE_FLAGS", f"inode {ino}: the reflink flag is set on a "
                        f"{node.type_name} or without the reflink feature", ino=ino,
                        field="di_flags2")
        if node.size >> 63:
            self.report("INODE_SIZE", f"inode {ino}: size {node.size} is negative", ino=ino,
                        field="di_size", found=node.size)
        if node.format in (C.XFS_DINODE_FMT_LOCAL, C.XFS_DINODE_FMT_DEV) and node.nextents:
            self.report("INODE_FORMAT", f"inode {ino}: {node.nextents} extents in a "
                        f"{C.DINODE_FORMAT_NAMES[node.format]}-format fork", ino=ino,
                        field="di_nextents", expected=0, found=node.nextents)
        if node.flags2 & C.XFS_DIFLAG2_BIGTIME and \
                not self.sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_BIGTIME):
            self.report("INODE_FLAGS", f"inode {ino} has bigtime timestamps on a filesystem "
                        "without bigtime", ino=ino, field="di_flags2")
        if node.flags2 & C.XFS_DIFLAG2_NREXT64 and \
                not self.sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_NREXT64):
            self.report("INODE_FLAGS", f"inode {ino} has 64-bit extent counters on a "
                        "filesystem without nrext64", ino=ino, field="di_flags2")
        owned = 0
        for attr in (False, True):
            fmt = node.aformat if attr else node.format
            if fmt not in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE):
                continue
            if attr and not node.forkoff:
                continue
            if fmt == C.XFS_DINODE_FMT_EXTENTS and not (node.anextents if attr
                                                        else node.nextents):
                continue
            try:
                exts = node.extents(attr)
            except FsToolError as e:
                self.from_error("INODE_CORRUPT", e, ino=ino)
                return
            for _off, start, count, _unwritten in exts:
                a = start >> self.sb.agblklog
                b = start & ((1 << self.sb.agblklog) - 1)
                self.claims[a].append((b, count, ino))
                owned += count
            if fmt == C.XFS_DINODE_FMT_BTREE:
                owned += self._claim_bmbt(node, attr)
        if owned != node.nblocks:
            self.report("INODE_NBLOCKS", f"inode {ino}: di_nblocks is {node.nblocks}, it "
                        f"owns {owned} blocks", ino=ino, field="di_nblocks", expected=owned,
                        found=node.nblocks)
        if node.is_dir:
            self.dirs.append(ino)
        elif node.is_symlink:
            try:
                target = read_symlink(node)
                if len(target) != node.size:
                    raise CorruptionError("symlink", "target shorter than di_size", ino=ino)
            except FsToolError as e:
                self.from_error("SYMLINK", e, ino=ino)
        if node.forkoff and (node.aformat == C.XFS_DINODE_FMT_LOCAL or node.anextents):
            try:
                for _ in iter_xattrs(node, values=True):
                    pass
                if node.anextents and node.aformat in (C.XFS_DINODE_FMT_EXTENTS,
                                                       C.XFS_DINODE_FMT_BTREE):
                    self._check_attr_leaves(node)
            except FsToolError as e:
                self.from_error("XATTR", e, ino=ino)

    def _check_attr_leaves(self, node) -> None:
        """Hash order, hash values and usedbytes of every xattr leaf block."""
        for startoff, _sb, count, _u in node.extents(True):
            for ablk in range(startoff, startoff + count):
                # remote value blocks share the fork: look at the magic first
                daddr, _pieces = node.read_fork_blocks(ablk, 1, attr=True)
                magic = self.fs.dev.pread((daddr << C.BBSHIFT) + 8, 2)
                if struct.unpack(">H", magic)[0] != C.XFS_ATTR3_LEAF_MAGIC:
                    continue
                buf = _read_attr_block(node, ablk)
                n, usedbytes = struct.unpack_from(">HH", buf, 56)
                used = 0
                prev = -1
                for i in range(n):
                    hashval, nameidx, flags = struct.unpack_from(">IHB", buf, 80 + 8 * i)
                    if flags & C.XFS_ATTR_LOCAL:
                        vlen, nlen = struct.unpack_from(">HB", buf, nameidx)
                        name = buf[nameidx + 3:nameidx + 3 + nlen]
                        used += (3 + nlen + vlen + 3) & ~3
                    else:
                        nlen = buf[nameidx + 8]
                        name = buf[nameidx + 9:nameidx + 9 + nlen]
                        used += (11 + nlen + 3) & ~3
                    if hashval < prev:
                        self.report("XATTR", f"inode {node.ino}: xattr leaf {ablk} hashes out "
                                    "of order", ino=node.ino, block=ablk)
                    prev = hashval
                    if not flags & C.XFS_ATTR_PARENT and parsers.da_hashname(name) != hashval:
                        self.report("XATTR", f"inode {node.ino}: xattr {name!r} has hash "
                                    f"0x{hashval:08x}, its name hashes to "
                                    f"0x{parsers.da_hashname(name):08x}", ino=node.ino,
                                    block=ablk, field="hashval")
                if used != usedbytes:
                    self.report("XATTR", f"inode {node.ino}: xattr leaf {ablk} says "
                                f"{usedbytes} bytes used, its entries use {used}",
                                ino=node.ino, block=ablk, field="usedbytes", expected=used,
                                found=usedbytes)

    def _claim_bmbt(self, node, attr: bool) -> int:
        level, _keys, ptrs = node.bmbt_root(attr)
        reader = self.fs.bmbt_reader(node.ino)
        n = 0
        for blk in reader.blocks(ptrs, level):
            a = blk.addr >> self.sb.agblklog
            b = blk.addr & ((1 << self.sb.agblklog) - 1)
            self.claims[a].append((b, 1, -node.ino))      # negative: a bmbt block
            n += 1
        return n

    def _check_free_inode(self, ino: int) -> None:
        """A free inode that fails verification is only a problem if it claims
        to be in use."""
        fs = self.fs
        agno, agbno, idx = fs.ino_location(ino)
        raw = fs.dev.pread((fs.agb_to_daddr(agno, agbno) << C.BBSHIFT) +
                           idx * self.sb.inodesize, 4)
        if raw[:2] == b"IN" and raw[2:4] != b"\0\0":
            self.report("INOBT_INODE", f"inode {ino} is free in the inobt but looks in use",
                        ino=ino)

    # -- phase: namespace ---------------------------------------------------------------------
    def phase_namespace(self) -> None:
        """Every directory's entries counted into the inode table natively
        (targets in use, file types, references), its blocks checked per
        form; then '..', reachability and link counts."""
        fs = self.fs
        tab = InodeTable.concat(self.tables[a] for a in sorted(self.tables))
        self.table = tab
        subdirs = defaultdict(int)
        parents = {}
        dotdot = {}
        children = defaultdict(list)      # directory -> its subdirectories
        for done, ino in enumerate(self.dirs, 1):
            self._tick(done, len(self.dirs))
            # what was counted before a block failed to read still counts
            odd = []
            dd = failed = None
            try:
                dd = self._tally_dir(fs.inode(ino), tab, odd)
            except FsToolError as e:
                self.from_error("DIR_CORRUPT", e, ino=ino)
                failed = True
            for name, child, ftype, flags in odd:
                if flags & 8:                       # '.' or '..'
                    if name == b"..":
                        dd = child
                    continue
                if flags & 1:
                    self.report("DIR_ENTRY_TARGET", f"directory {ino}: entry "
                                f"{name!r} points to inode {child}, which is not in use",
                                ino=ino, found=child)
                    continue
                if flags & 2:
                    t = tab.itype[tab.slot(child)] << 12
                    self.report("DIR_FTYPE", f"directory {ino}: entry {name!r} has file type "
                                f"{ftype}, inode {child} is a {C.TYPE_NAMES.get(t, '?')}",
                                ino=ino, field="ftype")
                if flags & 4:
                    subdirs[ino] += 1
                    if child in parents:
                        self.report("DIR_MULTIPLE_PARENTS", f"directory {child} is linked "
                                    f"from {parents[child]} and {ino}", ino=child)
                    parents[child] = ino
                    children[ino].append(child)
            if dd is not None:
                dotdot[ino] = dd
            elif not failed:
                self.report("DIR_CORRUPT", f"directory {ino}: no '..' entry", ino=ino)
        root = self.sb.rootino
        parents.setdefault(root, root)
        for d, got in dotdot.items():
            want = parents.get(d)
            if want is not None and got != want:
                self.report("DIR_DOTDOT", f"directory {d}: '..' is {got}, its parent is "
                            f"{want}", ino=d, expected=want, found=got)
        self._link_counts(tab, root, subdirs, children)

    def _link_counts(self, tab: InodeTable, root: int, subdirs, children) -> None:
        """Every inode in use is reachable from the root and has as many links
        as entries name it (a directory: 2 plus its subdirectories)."""
        f = self.sb.fields
        special = {root, f["sb_rbmino"], f["sb_rsumino"], f["sb_uquotino"],
                   f["sb_gquotino"], f["sb_pquotino"]}
        reach = self._reachable(root, children)
        # entries in directories the root does not reach make nothing reachable
        unreached = defaultdict(int)
        for d in self.dirs:
            if d not in reach:
                try:
                    for _name, child, _ft in xdir.iter_entries(self.fs.inode(d)):
                        unreached[child] += 1
                except FsToolError:
                    pass
        slots = set(parsers.nlink_scan(tab.itype, tab.nlinks, tab.refs))
        slots.update(s for s in map(tab.slot, unreached) if s >= 0 and tab.itype[s])
        for slot in sorted(slots):
            ino = tab.ino(slot)
            nlink, refs = tab.nlinks[slot], tab.refs[slot]
            is_dir = tab.itype[slot] == 4
            if ino in special:
                if ino == root and nlink != 2 + subdirs[root]:
                    self.report("NLINK", f"root directory: nlink {nlink}, expected "
                                f"{2 + subdirs[root]}", ino=ino, expected=2 + subdirs[root],
                                found=nlink)
                continue
            if is_dir:
                want = 2 + subdirs[ino] if refs else 0
                reachable = ino in reach
            else:
                want = refs
                reachable = refs > unreached.get(ino, 0)
            if not reachable:
                self.report("DISCONNECTED", f"inode {ino} is allocated but not reachable "
                            "from the root", ino=ino)
            elif nlink != want:
                self.report("NLINK", f"inode {ino}: nlink {nlink}, counted {want}", ino=ino,
                            field="di_nlink", expected=want, found=nlink)

    # -- directory blocks: entries counted, invariants per form ------------------------
    def _tally_dir(self, node, tab: InodeTable, odd: list):
        """Count the directory's entries into the inode table, adding to
        ``odd`` the entries dir_data_tally singles out, and check its blocks
        per form: leaf hashes sorted and matching the data entries (names'
        hashes and addresses), stale counts, bestfree in every data block,
        and the bests kept in the leaf tail or the free blocks.  Returns '..'
        of a shortform directory (the others have it among ``odd``)."""
        kind = xdir.form(node)
        if kind == "shortform":
            parent, ents = xdir._shortform(node)
            odd += self._tally_entries(tab, ((n, i, f) for _o, i, n, f in ents))
            return parent
        sb = self.sb
        if kind == "block":
            buf = xdir._read_dirblock(node, 0, V.DIR3_BLOCK)
            start, count = xdir._block_tail(node, buf)
            frees, dsum = self._data_tally(node, buf, start, 0, tab, odd)
            self._check_bestfree(node, 0, buf, frees)
            stale = struct.unpack_from(">I", buf, len(buf) - 4)[0]
            self._check_leaf(node, buf, start, count, stale, dsum, True, buf)
            return None
        dsum = 0
        bests = {}
        for fsb in xdir._data_block_fsbs(node):
            buf = xdir._read_dirblock(node, fsb, V.DIR3_DATA)
            frees, part = self._data_tally(node, buf, len(buf), fsb, tab, odd)
            dsum += part
            bests[fsb // sb.dirblkfsbs] = self._check_bestfree(node, fsb, buf, frees)
        self._check_index(node, kind, dsum & 0xFFFFFFFFFFFFFFFF, bests)
        return None

    def _check_index(self, node, kind: str, dsum: int, bests: dict) -> None:
        """The leaf (leaf form) or the leafn and free blocks (node form) of a
        directory whose data blocks summed to ``dsum`` with these bests."""
        sb = self.sb
        ino = node.ino
        leaf_fsb = C.XFS_DIR2_LEAF_OFFSET >> sb.blocklog
        if kind == "leaf":
            buf = xdir._read_dirblock(node, leaf_fsb, V.DIR3_LEAF)
            count, stale = struct.unpack_from(">HH", buf, 56)
            self._check_leaf(node, buf, C.XFS_DIR3_LEAF_HDR_SIZE, count, stale, dsum, False)
            nbests = struct.unpack_from(">I", buf, len(buf) - 4)[0]
            want = max(bests, default=-1) + 1
            if nbests != want:
                self.report("DIR_CORRUPT", f"directory {ino}: the leaf tail holds {nbests} "
                            f"best-free entries, the directory has {want} data blocks",
                            ino=ino, field="bestcount", expected=want, found=nbests)
            off = len(buf) - 4 - 2 * nbests
            stored = list(struct.unpack_from(f">{nbests}H", buf, off)) if off > 0 else []
            self._compare_bests(ino, stored, bests, 0)
            return
        # node form: leaf blocks below the free index, then the free index
        free_fsb = C.XFS_DIR2_FREE_OFFSET >> sb.blocklog
        lsum = 0
        for fsb in self._dir_blocks_between(node, leaf_fsb, free_fsb):
            buf = xdir._read_dirblock(node, fsb, V.DA3_NODE_OR_LEAF)
            if struct.unpack_from(">H", buf, 8)[0] != C.XFS_DIR3_LEAFN_MAGIC:
                continue
            count, stale = struct.unpack_from(">HH", buf, 56)
            lsum += self._leaf_block(node, fsb, buf, C.XFS_DIR3_LEAF_HDR_SIZE, count, stale)
        if lsum & 0xFFFFFFFFFFFFFFFF != dsum:
            self.report("DIR_CORRUPT", f"directory {ino}: its leaf blocks do not index "
                        "exactly its data entries", ino=ino, field="hashval")
        for fsb in self._dir_blocks_between(node, free_fsb, None):
            buf = xdir._read_dirblock(node, fsb, V.DIR3_FREE)
            firstdb, nvalid, nused = struct.unpack_from(">III", buf, 48)
            stored = list(struct.unpack_from(f">{nvalid}H", buf, 64)) \
                if 64 + 2 * nvalid <= len(buf) else []
            self._compare_bests(ino, stored, bests, firstdb)
            used = sum(1 for v in stored if v != 0xFFFF)
            if used != nused:
                self.report("DIR_CORRUPT", f"directory {ino}: free block at {fsb} says "
                            f"{nused} used, holds {used}", ino=ino, block=fsb,
                            field="nused", expected=used, found=nused)

    def _dir_blocks_between(self, node, lo: int, hi):
        """File offsets of the directory blocks mapped in [lo, hi)."""
        step = self.sb.dirblkfsbs
        for startoff, _sb, count, _u in node.extents():
            end = startoff + count if hi is None else min(startoff + count, hi)
            first = -(-max(startoff, lo) // step) * step
            yield from range(first, end, step)

    def _data_tally(self, node, buf, end: int, fsb: int, tab: InodeTable, odd: list):
        """(unused regions, leaf sum) of one data block, its odd entries added
        to ``odd``; a malformed block raises once what preceded the bad entry
        is counted and added."""
        addr_base = (fsb // self.sb.dirblkfsbs) * self.sb.dirblksize
        try:
            frees, lsum, more, bad = parsers.dir_data_tally(
                buf, C.XFS_DIR3_DATA_HDR_SIZE, end, self.sb.has_ftype, addr_base,
                tab.starts, tab.itype, tab.refs)
        except ValueError as e:
            bad = str(e)
        else:
            odd += more
        if bad:
            raise CorruptionError("directory data block", bad, ino=node.ino, block=fsb)
        return frees, lsum

    def _tally_entries(self, tab: InodeTable, entries) -> list:
        """dir_data_tally's counting for entries already decoded (shortform)."""
        tally = parsers.tally_entry
        args = (tab.starts, tab.itype, tab.refs)
        has_ftype = self.sb.has_ftype
        odd = []
        for name, child, ftype in entries:
            flags = tally(*args, child, ftype, has_ftype)
            if flags:
                odd.append((name, child, ftype, flags))
        return odd

    def _leaf_block(self, node, fsb, buf, start, count, stale) -> int:
        """Order and stale count of one leaf block's entries; their sum."""
        try:
            ordered, nstale, lsum = parsers.leaf_tally(buf, start, count)
        except ValueError as e:
            raise CorruptionError("directory leaf block", str(e), ino=node.ino,
                                  block=fsb, field="count") from None
        if not ordered:
            self.report("DIR_CORRUPT", f"directory {node.ino}: leaf hashes out of order",
                        ino=node.ino, block=fsb, field="hashval")
        if nstale != stale:
            self.report("DIR_CORRUPT", f"directory {node.ino}: {nstale} stale leaf entries, "
                        f"the header says {stale}", ino=node.ino, block=fsb, field="stale",
                        expected=nstale, found=stale)
        return lsum

    def _check_leaf(self, node, buf, start, count, stale, dsum, block_form,
                    blockbuf=None) -> None:
        """A block- or leaf-form directory's leaf entries against its data
        entries; on a mismatch, find the entry that is wrong."""
        fsb = 0 if block_form else C.XFS_DIR2_LEAF_OFFSET >> self.sb.blocklog
        if self._leaf_block(node, fsb, buf, start, count, stale) == dsum:
            return
        before = len(self.findings)
        self._check_leaf_ents(node, buf, start, count, block_form, blockbuf)
        if len(self.findings) == before:
            self.report("DIR_CORRUPT", f"directory {node.ino}: its leaf does not index "
                        "exactly its data entries", ino=node.ino, field="hashval")

    def _compare_bests(self, ino, stored, bests, firstdb) -> None:
        for i, v in enumerate(stored):
            db = firstdb + i
            want = bests.get(db, 0xFFFF)
            if v != want:
                self.report("DIR_CORRUPT", f"directory {ino}: best free space of data block "
                            f"{db} recorded as {v}, it is {want}", ino=ino, field="bests",
                            expected=want, found=v)

    def _check_bestfree(self, node, fsb, buf, free) -> int:
        """Check a data block's bestfree table against its unused regions
        ``free`` [(length, offset)]; return its longest free run."""
        ino = node.ino
        stored = struct.unpack_from(">6H", buf, 48)
        stored = [(stored[i + 1], stored[i]) for i in (0, 2, 4) if stored[i + 1]]
        lengths = sorted((f[0] for f in free), reverse=True)
        if [s[0] for s in stored] != lengths[:len(stored)] or \
                (len(stored) < 3 and len(lengths) > len(stored)) or \
                any(s not in free for s in stored):
            self.report("DIR_CORRUPT", f"directory {ino}: bestfree of data block {fsb} "
                        f"{stored} does not list its largest free regions", ino=ino,
                        block=fsb, field="bestfree")
        return lengths[0] if lengths else 0

    def _check_leaf_ents(self, node, buf, start, count, block_form, blockbuf=None):
        """Each leaf entry's hash against the name it points to."""
        ino = node.ino
        for i in range(count):
            h, addr = struct.unpack_from(">II", buf, start + 8 * i)
            if addr == C.XFS_DIR2_NULL_DATAPTR:
                continue
            _child, name = xdir._entry_at(node, addr, block_form, blockbuf)
            if parsers.da_hashname(name) != h:
                self.report("DIR_CORRUPT", f"directory {ino}: leaf hash 0x{h:08x} for "
                            f"{name!r}, which hashes to 0x{parsers.da_hashname(name):08x}",
                            ino=ino, field="hashval")

    @staticmethod
    def _reachable(root: int, children) -> set:
        """The directories reachable from the root."""
        seen = {root}
        stack = [root]
        while stack:
            for c in children.get(stack.pop(), ()):
                if c not in seen:
                    seen.add(c)
                    stack.append(c)
        return seen

    # -- phase: every block accounted for exactly once ---------------------------------------
    def phase_space_map(self) -> None:
        for agno in range(self.sb.agcount):
            length = self.fs.ag_length(agno)
            claims = sorted(self.claims.get(agno, ()))
            shared = sorted(self.shared.get(agno, ()))
            pos = 0
            last_what = None
            for start, n, what in claims:
                if start > pos:
                    self.report("SPACE_UNACCOUNTED", f"AG {agno}: blocks {pos}-{start - 1} "
                                "are neither free nor in use", agno=agno, block=pos)
                elif start < pos and not (_is_file(what) and _is_file(last_what) and
                                          _within(shared, start, min(pos, start + n))):
                    self.report("SPACE_OVERLAP", f"AG {agno}: block {start} is claimed by "
                                f"{_owner(what)} and by {_owner(last_what)}", agno=agno,
                                block=start)
                if start + n > pos:
                    pos = start + n
                    last_what = what
            if pos < length:
                self.report("SPACE_UNACCOUNTED", f"AG {agno}: blocks {pos}-{length - 1} are "
                            "neither free nor in use", agno=agno, block=pos)
            elif pos > length:
                self.report("SPACE_OVERLAP", f"AG {agno}: {_owner(last_what)} runs past the end of "
                            "the AG", agno=agno, block=length)

    # -- phase: superblock counters ------------------------------------------------------------
    def phase_counters(self) -> None:
        f = self.sb.fields
        for field, key in (("sb_icount", "icount"), ("sb_ifree", "ifree"),
                           ("sb_fdblocks", "fdblocks")):
            if f[field] != self.ag_totals[key]:
                self.report("SB_COUNTERS", f"{field} is {f[field]}, the AGs add up to "
                            f"{self.ag_totals[key]}", field=field,
                            expected=self.ag_totals[key], found=f[field])

    # -- phase: the log --------------------------------------------------------------------------
    def phase_log(self) -> None:
        from ..fs.logstate import log_is_clean
        clean, why = log_is_clean(self.fs)
        if not clean:
            self.log_dirty = True
            self.report("LOG_DIRTY", f"the log is dirty ({why}): mount the image to replay "
                        "it, or replay it with fstool, before checking")


def _is_file(what) -> bool:
    """Claims by files carry the inode number (negative for bmbt blocks)."""
    return isinstance(what, int) and what > 0


def _owner(what) -> str:
    if isinstance(what, int):
        return f"inode {what}" if what > 0 else f"the block map of inode {-what}"
    return str(what)


def _within(ranges: list, start: int, end: int) -> bool:
    return any(s <= start and end <= s + n for s, n in ranges)


def _jsonable(v):
    if isinstance(v, bytes):
        return v.hex()
    return v


def _ag_worker(path: str, agnos: list) -> dict:
    """Run the per-AG phases for some AGs in a child process."""
    from ..fs.mount import Filesystem
    with Filesystem(path) as fs:
        c = Checker(fs, ag_filter=agnos)
        for name in Checker.AG_PHASES:
            c._run_phase(name)
        return {k: (dict(v) if isinstance(v, defaultdict) else v)
                for k, v in ((k, getattr(c, k)) for k in Checker.MERGED)}


def check(fs, progress=None, jobs: int = 1) -> Checker:
    """Check ``fs``; ``progress(phase, done, total)``, if given, hears of each
    phase as it starts (done 0, total None) and of the steps of the long ones
    (inode chunks, directories)."""
    c = Checker(fs, progress)
    c.run(jobs)
    return c
