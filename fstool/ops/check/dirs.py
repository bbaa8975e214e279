"""Directories in every form, block by block, as xfs_repair's process_dir2
and phase 6 look at them: shortform entries (targets, names, offsets,
counts, size), data blocks (entries, '.' and '..', the bestfree table),
the leaf (hash order, stale count, exactly the data entries, the bests) and
the node form's da-btree and free index.  Entries are counted into the inode
table natively (``parsers.dir_data_tally``); only odd entries come back to
Python."""
from __future__ import annotations

import struct

from ..._backend import checks, parsers
from ...errors import CorruptionError, FsToolError
from ...format import constants as C
from ...fs import dir as xdir
from ...io import verify as V
from ..names import quoted_name

# dir_data_tally / tally_entry flags
T_FREE, T_FTYPE, T_DIR, T_DOT, T_BADNAME, T_SELF = 1, 2, 4, 8, 16, 32
DIR2_MAX_SHORT_INUM = 0xFFFFFFFF


def name_ok(name: bytes) -> bool:
    """xfs_dir2_namecheck: no '/' or NUL, shorter than MAXNAMELEN."""
    return 0 < len(name) < 256 and b"/" not in name and b"\0" not in name


class DirChecks:
    def setup_dir_geometry(self) -> None:
        sb = self.sb
        self.dir_data_first = C.XFS_DIR3_DATA_HDR_SIZE + 2 * ((8 + 1 + 1 + 1 + 2 + 7) & ~7)
        self.da_node_ents = (sb.dirblksize - C.XFS_DA3_NODE_HDR_SIZE) // 8
        self.attr_node_ents = (sb.blocksize - C.XFS_DA3_NODE_HDR_SIZE) // 8

    def _data_entsize(self, namelen: int) -> int:
        ft = 1 if self.sb.has_ftype else 0
        return (8 + 1 + namelen + ft + 2 + 7) & ~7

    # -- one directory ------------------------------------------------------------
    def check_dir(self, node, tab, odd: list):
        """Count the directory's entries into the inode table, adding to
        ``odd`` the entries dir_data_tally singles out, and check its blocks
        per form.  Returns '..' of a shortform directory (the others have it
        among ``odd``)."""
        kind = self._dir_form(node)
        if kind is None:
            return None
        if kind == "shortform":
            return self._shortform(node, tab, odd)
        if kind == "block":
            buf = self._dirblock(node, 0, V.DIR3_BLOCK)
            count, stale = struct.unpack_from(">II", buf, len(buf) - 8)
            start = len(buf) - 8 - 8 * count
            if start < C.XFS_DIR3_DATA_HDR_SIZE:
                raise CorruptionError("directory block", f"tail count {count} overruns the "
                                      "block", ino=node.ino, block=0, field="count")
            frees, dsum = self._data_tally(node, buf, start, 0, tab, odd)
            self._check_bestfree(node, 0, buf, frees)
            self._check_leaf(node, buf, start, count, stale, dsum, True, buf)
            return None
        dsum = 0
        bests = {}
        for fsb in xdir._data_block_fsbs(node):
            try:
                buf = self._dirblock(node, fsb, V.DIR3_DATA)
            except FsToolError as e:
                self.from_error("DIR_CORRUPT", e, ino=node.ino, offset=fsb, fork="data",
                                structure="dir")
                continue
            frees, part = self._data_tally(node, buf, len(buf), fsb, tab, odd)
            dsum += part
            bests[fsb // self.sb.dirblkfsbs] = self._check_bestfree(node, fsb, buf, frees)
        self._check_index(node, kind, dsum & 0xFFFFFFFFFFFFFFFF, bests)
        return None

    def _dir_form(self, node):
        """The directory's form, or None (reported) when it has none."""
        try:
            return xdir.form(node)
        except CorruptionError as e:
            self.from_error("DIR_CORRUPT", e, ino=node.ino, structure="dir")
            return None

    def _dirblock(self, node, fsb, bt):
        buf = xdir._read_dirblock(node, fsb, bt)
        self._check_lsn(self._dir_lsn(buf, bt), "dir", ino=node.ino, offset=fsb,
                        fork="data", field="lsn")
        return buf

    @staticmethod
    def _dir_lsn(buf, bt) -> int:
        off = 16 if bt.magic_off == 0 else 24
        return struct.unpack_from(">Q", buf, off)[0]

    # -- shortform ------------------------------------------------------------------
    def _shortform(self, node, tab, odd):
        """process_sf_dir2 and shortform_dir2_entry_check."""
        sb = self.sb
        ino = node.ino
        fork = node.fork_bytes()
        size = node.size
        where = dict(ino=ino, structure="dir", fork="data")
        bad = self._dir_bad
        if size > len(fork) or size < 6:
            bad("DIR_CORRUPT", ino, f"shortform size {size} does not fit the fork "
                f"({len(fork)} bytes)", "di_size", where)
            return None
        count, i8count = fork[0], fork[1]
        width = 8 if i8count else 4
        if 2 + width > size:
            bad("DIR_CORRUPT", ino, "shortform header runs past its size", "di_size", where)
            return None
        parent = int.from_bytes(fork[2:2 + width], "big")
        ft = 1 if sb.has_ftype else 0
        entsize_min = 3 + 1 + ft + width
        n = count
        if count * entsize_min + 2 + width > len(fork) or count == 0:
            n = 0xFF
        pos = 2 + width
        offset = self.dir_data_first
        bad_offset = False
        names = {}
        i8 = 1 if parent > DIR2_MAX_SHORT_INUM else 0
        found = 0
        entries = []
        while found < n and size > pos:
            if pos + 3 > len(fork):
                break
            namelen = fork[pos]
            esize = 3 + namelen + ft + width
            if namelen == 0:
                bad("DIR_CORRUPT", ino, f"shortform entry {found} has a zero-length name",
                    "namelen", where, index=found)
                break
            if pos + esize > size:
                bad("DIR_CORRUPT", ino, f"shortform entry {found} runs past the directory "
                    "size", "namelen", where, index=found)
                break
            eoff = int.from_bytes(fork[pos + 1:pos + 3], "big")
            name = bytes(fork[pos + 3:pos + 3 + namelen])
            ftype = fork[pos + 3 + namelen] if ft else 0
            child = int.from_bytes(fork[pos + 3 + namelen + ft:pos + esize], "big")
            if not name_ok(name):
                bad("DIR_NAME", ino, f"shortform entry {quoted_name(name)} has an illegal "
                    "name", "name", where, index=found)
            elif name in names:
                bad("DIR_NAME", ino, f"shortform entry {quoted_name(name)} is a duplicate "
                    "name", "name", where, index=found)
            names.setdefault(name, child)
            if eoff < offset:
                bad_offset = True
            offset = eoff + self._data_entsize(namelen)
            if child > DIR2_MAX_SHORT_INUM:
                i8 += 1
            entries.append((name, child, ftype, found))
            pos += esize
            found += 1
        if count != found:
            bad("DIR_CORRUPT", ino, f"shortform count {count}, {found} entries", "count",
                where, expected=found, found=count)
        if i8count != i8:
            bad("DIR_CORRUPT", ino, f"shortform i8count {i8count}, {i8} inode numbers need "
                "8 bytes", "i8count", where, expected=i8, found=i8count)
        if pos != size:
            bad("DIR_CORRUPT", ino, f"shortform size {size}, its entries end at {pos}",
                "di_size", where, expected=pos, found=size)
        if offset + (count + 2) * 8 + 8 > sb.dirblksize:
            bad_offset = True
        if bad_offset:
            bad("DIR_CORRUPT", ino, "shortform entry offsets are out of order or too high",
                "offset", where)
        # the parent
        if not self.verify_dir_ino(parent):
            bad("DIR_DOTDOT", ino, f"'..' is {parent}, not a valid inode", "parent", where,
                found=parent)
            parent = None
        elif ino == sb.rootino and parent != ino:
            bad("DIR_DOTDOT", ino, f"the root directory's '..' is {parent}", "parent", where,
                expected=ino, found=parent)
        elif parent == ino and ino != sb.rootino:
            bad("DIR_DOTDOT", ino, "'..' points to the directory itself", "parent", where,
                found=parent)
            parent = None
        tally = parsers.tally_entry
        args = (tab.starts, tab.itype, tab.refs)
        for name, child, ftype, idx in entries:
            if child == ino or not self.verify_dir_ino(child):
                bad("DIR_ENTRY_TARGET", ino, f"shortform entry {quoted_name(name)} points to "
                    f"{'itself' if child == ino else f'invalid inode {child}'}", "inumber",
                    where, index=idx, found=child)
                continue
            flags = tally(*args, child, ftype, sb.has_ftype, tab.psums, ino, node.gen, name)
            if flags:
                odd.append((name, child, ftype, flags))
        return parent

    def _dir_bad(self, code, ino, detail, field, where, **more) -> None:
        self.report(code, f"directory {ino}: {detail}", field=field, **where, **more)

    def verify_dir_ino(self, ino: int) -> bool:
        """libxfs_verify_dir_ino: a valid inode number that is not one of the
        superblock's metadata inodes."""
        sb = self.sb
        agno = ino >> sb.agino_log
        if agno >= sb.agcount or not self.verify_agino(agno, ino & ((1 << sb.agino_log) - 1)):
            return False
        f = sb.fields
        return ino not in (f["sb_rbmino"], f["sb_rsumino"]) and \
            ino not in self.quota_inodes()

    def quota_inodes(self) -> set:
        f = self.sb.fields
        return {v for v in (f["sb_uquotino"], f["sb_gquotino"], f["sb_pquotino"])
                if v not in (0, 0xFFFFFFFFFFFFFFFF)}

    # -- data blocks ------------------------------------------------------------------
    def _data_tally(self, node, buf, end: int, fsb: int, tab, odd: list):
        """(unused regions, leaf sum) of one data block, its odd entries added
        to ``odd``; a malformed block is reported once what preceded the bad
        entry is counted."""
        addr_base = (fsb // self.sb.dirblkfsbs) * self.sb.dirblksize
        try:
            frees, lsum, more, why = parsers.dir_data_tally(
                buf, C.XFS_DIR3_DATA_HDR_SIZE, end, self.sb.has_ftype, addr_base,
                tab.starts, tab.itype, tab.refs, node.ino, tab.psums, node.gen)
        except ValueError as e:
            frees, lsum, more, why = [], 0, [], str(e)
        odd += more
        if why:
            self.report("DIR_CORRUPT", f"directory {node.ino}: data block at {fsb}: {why}",
                        ino=node.ino, offset=fsb, fork="data", structure="dir")
        return frees, lsum

    def _check_bestfree(self, node, fsb, buf, frees) -> int:
        """process_dir2_data's bestfree rules: the three slots list regions
        (by offset) at most once each, longest first, unused slots zero; no
        two free regions in a row; a region left out of the table is no
        longer than the shortest listed.  Returns the longest free run."""
        longest = checks.bestfree_ok(buf, frees)
        if longest >= 0:
            return longest          # the table is right
        bf = struct.unpack_from(">6H", buf, 48)
        slots = [(bf[i], bf[i + 1]) for i in (0, 2, 4)]     # (offset, length)
        bad = False
        seen = 0
        for i, (off, ln) in enumerate(slots):
            if ln == 0:
                bad |= off != 0
                seen |= 1 << i
        bad |= slots[0][1] < slots[1][1] or slots[1][1] < slots[2][1]
        prev_end = None
        for length, off in sorted(frees, key=lambda f: f[1]):
            if prev_end == off:
                bad = True
            prev_end = off + length
            bad |= checks.bestfree_region_bad(slots[0][0], slots[0][1], slots[1][0],
                                              slots[1][1], slots[2][0], slots[2][1],
                                              off, length)
            match = [i for i, s in enumerate(slots) if s[0] == off and s[1]]
            if match:
                i = match[0]
                bad |= bool(seen & (1 << i))
                seen |= 1 << i
            else:
                bad |= length > slots[2][1]
        if seen != 7 or bad:
            self.report("DIR_BESTFREE", f"directory {node.ino}: the bestfree table of data "
                        f"block {fsb} does not list its largest free regions", ino=node.ino,
                        offset=fsb, fork="data", structure="dir", field="bestfree")
        return max((f[0] for f in frees), default=0)

    # -- the leaf ---------------------------------------------------------------------
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
            self.report("DIR_LEAF", f"directory {node.ino}: its leaf does not index exactly "
                        "its data entries", ino=node.ino, offset=fsb, fork="data",
                        structure="dir", field="hashval")

    def _leaf_block(self, node, fsb, buf, start, count, stale) -> int:
        """Order and stale count of one leaf block's entries; their sum."""
        where = dict(ino=node.ino, offset=fsb, fork="data", structure="dir")
        try:
            ordered, nstale, lsum = parsers.leaf_tally(buf, start, count)
        except ValueError as e:
            raise CorruptionError("directory leaf block", str(e), ino=node.ino,
                                  block=fsb, field="count") from None
        if not ordered:
            self.report("DIR_LEAF", f"directory {node.ino}: leaf hashes out of order",
                        field="hashval", **where)
        if nstale != stale:
            self.report("DIR_LEAF", f"directory {node.ino}: {nstale} stale leaf entries, "
                        f"the header says {stale}", field="stale", expected=nstale,
                        found=stale, **where)
        return lsum

    def _check_leaf_ents(self, node, buf, start, count, block_form, blockbuf=None):
        """Each leaf entry's hash against the name it points to."""
        ino = node.ino
        for i in range(count):
            h, addr = struct.unpack_from(">II", buf, start + 8 * i)
            if addr == C.XFS_DIR2_NULL_DATAPTR:
                continue
            try:
                _child, name = xdir._entry_at(node, addr, block_form, blockbuf)
            except FsToolError as e:
                self.from_error("DIR_LEAF", e, ino=ino, structure="dir", index=i)
                continue
            if parsers.da_hashname(name) != h:
                self.report("DIR_LEAF", f"directory {ino}: leaf hash 0x{h:08x} for "
                            f"{quoted_name(name)}, which hashes to "
                            f"0x{parsers.da_hashname(name):08x}",
                            ino=ino, structure="dir", field="hashval", index=i)

    def _check_index(self, node, kind: str, dsum: int, bests: dict) -> None:
        """The leaf (leaf form) or the da-btree, leafn and free blocks (node
        form) of a directory whose data blocks summed to ``dsum``."""
        sb = self.sb
        ino = node.ino
        leaf_fsb = C.XFS_DIR2_LEAF_OFFSET >> sb.blocklog
        where = dict(ino=ino, fork="data", structure="dir")
        if kind == "leaf":
            try:
                buf = self._dirblock(node, leaf_fsb, V.DIR3_LEAF)
            except FsToolError as e:
                self.from_error("DIR_CORRUPT", e, offset=leaf_fsb, **where)
                return
            count, stale = struct.unpack_from(">HH", buf, 56)
            self._check_leaf(node, buf, C.XFS_DIR3_LEAF_HDR_SIZE, count, stale, dsum, False)
            nbests = struct.unpack_from(">I", buf, len(buf) - 4)[0]
            want = max(bests, default=-1) + 1
            if nbests != want:
                self.report("DIR_LEAF", f"directory {ino}: the leaf tail holds {nbests} "
                            f"best-free entries, the directory has {want} data blocks",
                            offset=leaf_fsb, field="bestcount", expected=want, found=nbests,
                            **where)
            off = len(buf) - 4 - 2 * nbests
            stored = list(struct.unpack_from(f">{nbests}H", buf, off)) \
                if C.XFS_DIR3_LEAF_HDR_SIZE + 8 * count <= off else []
            self._compare_bests(ino, stored, bests, 0, leaf_fsb)
            return
        # node form: the da-btree over the leafn blocks, then the free index
        free_fsb = C.XFS_DIR2_FREE_OFFSET >> sb.blocklog
        lsum = 0

        def read(dablk):
            return self._dirblock(node, dablk, V.DA3_NODE_OR_LEAF)

        def leaf(dablk, buf):
            nonlocal lsum
            if struct.unpack_from(">H", buf, 8)[0] != C.XFS_DIR3_LEAFN_MAGIC:
                self.report("DIR_CORRUPT", f"directory {ino}: block {dablk} in the leaf "
                            "chain is not a leafn block", offset=dablk, field="magic",
                            **where)
                return None
            count, stale = struct.unpack_from(">HH", buf, 56)
            lsum += self._leaf_block(node, dablk, buf, C.XFS_DIR3_LEAF_HDR_SIZE, count, stale)
            hashes = [struct.unpack_from(">I", buf, C.XFS_DIR3_LEAF_HDR_SIZE + 8 * i)[0]
                      for i in (0, count - 1)] if count else []
            return hashes
        self.check_da_tree(node, leaf_fsb, read, leaf, "dir", self.da_node_ents,
                           dir_root_leafn=True)
        if lsum & 0xFFFFFFFFFFFFFFFF != dsum:
            self.report("DIR_LEAF", f"directory {ino}: its leaf blocks do not index exactly "
                        "its data entries", field="hashval", **where)
        # each free block covers the bests of maxbests data blocks, by its
        # place: the kernel's verifier checks firstdb against it, and
        # xfs_repair reads the free block of every data block there is
        maxbests = (sb.dirblksize - C.XFS_DIR3_FREE_HDR_SIZE) // 2
        covered = set()
        for fsb in self._dir_blocks_between(node, free_fsb, None):
            try:
                buf = self._dirblock(node, fsb, V.DIR3_FREE)
            except FsToolError as e:
                self.from_error("DIR_CORRUPT", e, offset=fsb, **where)
                continue
            firstdb, nvalid, nused = struct.unpack_from(">III", buf, 48)
            index = (fsb - free_fsb) // sb.dirblkfsbs
            covered.add(index)
            if firstdb != index * maxbests:
                self.report("DIR_FREE", f"directory {ino}: free block at {fsb} says it "
                            f"covers data blocks from {firstdb}, its place says "
                            f"{index * maxbests}", offset=fsb, field="firstdb",
                            expected=index * maxbests, found=firstdb, **where)
                continue
            stored = list(struct.unpack_from(f">{nvalid}H", buf, 64)) \
                if 64 + 2 * nvalid <= len(buf) else []
            if 64 + 2 * nvalid > len(buf):
                self.report("DIR_FREE", f"directory {ino}: free block at {fsb} says "
                            f"{nvalid} entries", offset=fsb, field="nvalid", found=nvalid,
                            **where)
            self._compare_bests(ino, stored, bests, firstdb, fsb)
            used = sum(1 for v in stored if v != 0xFFFF)
            if used != nused:
                self.report("DIR_FREE", f"directory {ino}: free block at {fsb} says "
                            f"{nused} used, holds {used}", offset=fsb, field="nused",
                            expected=used, found=nused, **where)
        for index in sorted({db // maxbests for db in bests} - covered):
            fsb = free_fsb + index * sb.dirblkfsbs
            self.report("DIR_FREE", f"directory {ino}: no free block at {fsb} for data "
                        f"blocks {index * maxbests} to {(index + 1) * maxbests - 1}",
                        offset=fsb, field="firstdb", **where)

    def _compare_bests(self, ino, stored, bests, firstdb, fsb) -> None:
        for i, v in enumerate(stored):
            db = firstdb + i
            want = bests.get(db, 0xFFFF)
            if v != want:
                self.report("DIR_FREE", f"directory {ino}: best free space of data block "
                            f"{db} recorded as {v}, it is {want}", ino=ino, structure="dir",
                            fork="data", offset=fsb, field="bests", index=i, expected=want,
                            found=v)

    def _dir_blocks_between(self, node, lo: int, hi):
        """File offsets of the directory blocks mapped in [lo, hi)."""
        step = self.sb.dirblkfsbs
        for startoff, _sb, count, _u in node.extents():
            end = startoff + count if hi is None else min(startoff + count, hi)
            first = -(-max(startoff, lo) // step) * step
            yield from range(first, end, step)

    # -- da-btrees (directory node form, attr node form) ----------------------------------
    def check_da_tree(self, node, root: int, read, leaf, what: str, node_ents: int,
                      dir_root_leafn: bool = False, strict=None) -> None:
        """A da-btree from its root block: node blocks' levels, counts and
        siblings, each entry's 'before' pointer leading to the next block of
        the level below in order and its hash equal to that block's
        greatest; the leaves' forw/back chain.  ``read(dablk)`` returns a
        verified buffer; ``leaf(dablk, buf)`` checks one leaf block and
        returns [lowest, greatest] hash (or [] when empty, None when bad);
        ``strict(dablk, buf)``, if given, returns why a node block below the
        root fails verification (xfs_repair is stricter with those)."""
        ino = node.ino
        where = dict(ino=ino, fork="data" if what == "dir" else "attr",
                     structure="dir" if what == "dir" else "attr")
        code = "DIR_NODE" if what == "dir" else "XATTR_NODE"

        def bad(dablk, detail, field=None, **more):
            self.report(code, f"{what} of inode {ino}: block {dablk}: {detail}",
                        offset=dablk, field=field, **where, **more)
        try:
            buf = read(root)
        except FsToolError as e:
            self.from_error(code, e, offset=root, **where)
            return
        magic = struct.unpack_from(">H", buf, 8)[0]
        if magic != C.XFS_DA3_NODE_MAGIC:
            if dir_root_leafn:
                leaf(root, buf)
                return
            bad(root, f"magic 0x{magic:x} where a da-btree node is expected", "magic")
            return
        forw, back = struct.unpack_from(">II", buf, 0)
        if what == "attr" and (forw or back):
            # (xfs_repair clears these in attr block 0; a directory's root
            # node's siblings it ignores)
            bad(root, f"the root has siblings ({forw}, {back})", "forw")
        count, level = struct.unpack_from(">HH", buf, 56)
        if not 1 <= level < C.XFS_DA_NODE_MAXDEPTH:
            bad(root, f"root level {level} is not valid", "level", found=level)
            return
        row = [(root, buf)]
        seen = {root}
        while True:
            # one level of nodes, left to right: their entries name the
            # blocks of the level below, which must chain the same way
            children = []
            prev_hash = None
            for i, (dablk, nbuf) in enumerate(row):
                count, lvl = struct.unpack_from(">HH", nbuf, 56)
                if lvl != level:
                    bad(dablk, f"level {lvl}, expected {level}", "level", found=lvl)
                    return
                if count == 0 or count > node_ents:
                    bad(dablk, f"{count} entries (at most {node_ents})", "count", found=count)
                    return
                ents = [struct.unpack_from(">II", nbuf, C.XFS_DA3_NODE_HDR_SIZE + 8 * j)
                        for j in range(count)]
                for h, before in ents:
                    if prev_hash is not None and h < prev_hash:
                        bad(dablk, "entry hashes out of order", "hashval")
                    prev_hash = h
                    children.append((before, h, dablk))
                fw, bk = struct.unpack_from(">II", nbuf, 0)
                want_back = row[i - 1][0] if i else 0
                want_forw = row[i + 1][0] if i + 1 < len(row) else 0
                if i and bk != want_back:
                    bad(dablk, f"back pointer {bk}, the block before is {want_back}", "back")
                if fw != want_forw:
                    bad(dablk, f"forward pointer {fw}, the next block is {want_forw}", "forw")
            nxt = []
            for j, (before, h, parent) in enumerate(children):
                if before in seen:
                    bad(parent, f"points at block {before} twice (a cycle)", "before",
                        found=before)
                    return
                seen.add(before)
                try:
                    cbuf = read(before)
                except FsToolError as e:
                    self.from_error(code, e, offset=before, **where)
                    return
                nxt.append((before, cbuf, h, parent))
            level -= 1
            if level == 0:
                break
            for before, cbuf, _h, parent in nxt:
                if struct.unpack_from(">H", cbuf, 8)[0] != C.XFS_DA3_NODE_MAGIC:
                    bad(before, "not a da-btree node where one is expected", "magic")
                    return
                why = strict(before, cbuf) if strict is not None else None
                if why:
                    bad(before, why)
                    return
            # each child's greatest hash must be its parent's entry hash
            for before, cbuf, h, parent in nxt:
                cnt = struct.unpack_from(">H", cbuf, 56)[0]
                if cnt:
                    last = struct.unpack_from(">I", cbuf, C.XFS_DA3_NODE_HDR_SIZE +
                                              8 * (cnt - 1))[0]
                    if last != h:
                        bad(parent, f"entry for block {before} has hash 0x{h:08x}, the "
                            f"block's greatest is 0x{last:08x}", "hashval")
            row = [(b, c) for b, c, _h, _p in nxt]
        # the leaves, in the order the nodes give; their chain must agree
        prev_greatest = None
        for i, (before, cbuf, h, parent) in enumerate(nxt):
            hashes = leaf(before, cbuf)
            if hashes is None:
                return
            fw, bk = struct.unpack_from(">II", cbuf, 0)
            want_back = nxt[i - 1][0] if i else 0
            want_forw = nxt[i + 1][0] if i + 1 < len(nxt) else 0
            if bk != want_back:
                bad(before, f"back pointer {bk}, the leaf before is {want_back}", "back")
            if fw != want_forw:
                bad(before, f"forward pointer {fw}, the next leaf is {want_forw}", "forw")
            if hashes:
                if hashes[-1] != h:
                    bad(parent, f"entry for leaf {before} has hash 0x{h:08x}, the leaf's "
                        f"greatest is 0x{hashes[-1]:08x}", "hashval")
                if prev_greatest is not None and hashes[0] < prev_greatest:
                    bad(before, "its hashes start below the previous leaf's", "hashval")
                prev_greatest = hashes[-1]
