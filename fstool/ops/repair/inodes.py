"""The inode phase of repair (xfs_repair's phases 3 and 4 as they treat v5
inodes): what check found wrong in inodes is fixed in place, or the inode
is cleared, or its attribute fork dropped, the way xfs_repair's
process_dinode answers each fault:

* fixed in place: a bad CRC (rewritten), magic, version, v3 padding and
  the obsolete di_onlink (reset), unknown or misplaced di_flags/di_flags2
  bits (cleared), an invalid extent size or CoW extent size hint (reset to
  zero with its flag), timestamps whose nanoseconds exceed a second (zero
  nanoseconds), di_nblocks, di_nextents and di_anextents (set to what the
  forks map), a bmbt key that differs from its child's first key (set to
  it), an attr fork format without an attr fork (extents), and
  di_next_unlinked of an inode on no unlinked list (null);
* cleared (the inode is made free, the way xfs_repair's clear_dinode leaves
  it: a v5 core with no mode, links, size, blocks, extents or flags, forks
  zeroed): an inode whose number or uuid is wrong, whose size is negative,
  whose type or data fork format is invalid, whose sizes or attr fork offset
  do not suit it, whose data fork or block map cannot be trusted, a
  reflinked inode the filesystem cannot have, a symlink whose target cannot
  be read; a free inode failing the kernel's verifier is re-initialised the
  same way;
* attr fork dropped (clear_dinode_attr: no attr fork, di_nblocks and the
  extent counts left to the data fork): an attr fork whose format, extent
  list, block map or entries are bad.

The blocks of a cleared inode and of a dropped attr fork become free space
when their AGs are rebuilt (:mod:`.agbuild` leaves them out of the owners
it keeps; a block another owner claims stays used), and a cleared inode is
free in the rebuilt inobt and finobt.  An AG whose unlinked lists are
broken gets empty buckets, and every inode they chained a null
di_next_unlinked (xfs_repair empties every bucket and lets phases 6 and 7
deal with the inodes: that is the namespace phase's part).  A quota inode
number in the superblock that names no quota inode is cleared, with the
quota "checked" flags (quotas are turned off when no quota inode is left).

:func:`plan_inodes` decides from check's findings and its verdict on each
inode (:class:`.checker.RepairHooks`); :meth:`InodePlan.apply` writes the
inodes in the repair's one transaction.  ``cleared`` is what the namespace
phase needs: directory entries naming those inodes go.
"""
from __future__ import annotations

import bisect
import dataclasses
import struct

from ..._backend import parsers
from ...format import constants as C
from ...format.structs import DINODE
from ...io import verify as V
from ..check.base import ATTR, BMBT_ATTR, BMBT_DATA, DATA, Finding, owner_name
from ..check.inodes import (DIFLAG2_ANY, DIFLAG2_BIGTIME, DIFLAG2_COWEXTSIZE, DIFLAG2_DAX,
                            DIFLAG2_NREXT64, DIFLAG_ANY, DIFLAG_EXTSIZE, DIFLAG_EXTSZINHERIT,
                            DIFLAG_NEWRTBM, DIFLAG_REALTIME, DIFLAG_RTINHERIT, DIR_FLAGS,
                            core_fields, verify_free)
from ..check.superblocks import rt_inodes
from .agbuild import REPLACED, raw_buf
from ...errors import FsToolError
from ...fs import attrleaf as L, dabtree as DA, dir as D
from ...fs.icore import count_fields
from ..names import shown_name

# sb_qflags: the "quota checked" bits xfs_repair clears (XFS_ALL_QUOTA_CHKD)
QUOTA_CHKD = 0x0004 | 0x0020 | 0x0100 | 0x0400
XFS_SB_VERSION_QUOTABIT = 0x0040


# the findings this phase answers (the others are the AG rebuild's or the
# namespace phase's)
CODES = ("INODE_CORRUPT", "INODE_FREE", "INODE_FORMAT", "INODE_FLAGS", "INODE_EXTSIZE",
         "INODE_TIMESTAMP", "INODE_SIZE", "INODE_FORKOFF", "INODE_EXTENT", "INODE_NBLOCKS",
         "INODE_NEXTENTS", "BMBT_ROOT", "BMBT_BLOCK", "BMBT_LEVEL", "BMBT_NUMRECS",
         "BMBT_KEY", "BMBT_SIBLING", "BMBT_CYCLE", "SYMLINK", "XATTR", "XATTR_NODE",
         "XATTR_NODE_HASH", "XATTR_CRC", "XATTR_VERIFY", "INODE_UNLINKED", "AGI_UNLINKED",
         "SB_QUOTINO")


# one inode core field of a raw inode by name, read and set in place
get, put = DINODE.get, DINODE.put


@dataclasses.dataclass
class InodeChange:
    """What repair does to one inode."""
    ino: int
    clear: bool = False            # an inode in use made free
    reinit: bool = False           # a free inode re-initialised
    drop_attr: bool = False
    nblocks: int | None = None     # the data fork's blocks (for drop_attr)
    fields: dict = dataclasses.field(default_factory=dict)   # core field -> value
    counts: dict = dataclasses.field(default_factory=dict)   # "data"/"attr" -> extents
    fix_flags: bool = False
    set_reflink: bool = False
    fix_extsize: bool = False
    fix_cowextsize: bool = False
    nsec: list = dataclasses.field(default_factory=list)     # timestamps to fix
    root_keys: dict = dataclasses.field(default_factory=dict)  # (attr, index) -> key
    rewrite: bool = False          # only the CRC is wrong
    attr_blocks: set = dataclasses.field(default_factory=set)  # attr blocks restamped
    attr_hashes: int = 0           # attr node entries whose hash is corrected
    node_keys: int = 0             # keys fixed in bmbt nodes
    extent_lengths: dict = dataclasses.field(default_factory=dict)  # (attr, index) -> blocks
    leaf_extents: int = 0          # extent lengths trimmed in bmbt leaves
    bmbt_crc: int = 0              # bmbt blocks whose CRC is rewritten
    symlink_crc: int = 0           # remote symlink buffers whose CRC is rewritten
    sf_junk: set = dataclasses.field(default_factory=set)    # shortform attr entries removed
    why: list = dataclasses.field(default_factory=list)
    ags: set = dataclasses.field(default_factory=set)          # AGs its rebuild needs

    def describe(self, paths=None) -> str:
        """What is done to the inode; ``paths`` (its names, from
        :func:`paths_of`) name the file a clear or a dropped attr fork costs."""
        cost = ""
        if (self.clear or self.drop_attr) and paths is not None:
            what = "file" if self.clear else "file whose xattrs"
            if not paths:
                cost = f"; the {what} it costs has no name reached from the root"
            else:
                more = f" and {len(paths) - 3} more names" if len(paths) > 3 else ""
                cost = f"; the {what} it costs: " + \
                    ", ".join(shown_name(n) for n in paths[:3]) + more
        if self.clear:
            what = "cleared (made free; its blocks return to free space)"
        elif self.reinit:
            what = "free inode re-initialised"
        else:
            parts = []
            if self.drop_attr:
                parts.append("attr fork dropped")
            elif self.sf_junk:
                parts.append(f"{len(self.sf_junk)} shortform attribute entries removed")
            parts += sorted(self.fields)
            parts += [f"{w} fork extent count" for w in sorted(self.counts)]
            if self.fix_flags:
                parts.append("flags")
            if self.set_reflink:
                parts.append("reflink flag set")
            if self.fix_extsize:
                parts.append("extent size hint")
            if self.fix_cowextsize:
                parts.append("CoW extent size hint")
            parts += [f"{n} nanoseconds" for n in self.nsec]
            if self.root_keys:
                parts.append("bmbt root keys")
            if self.node_keys:
                parts.append("bmbt node keys")
            if self.extent_lengths or self.leaf_extents:
                parts.append("extent lengths trimmed")
            if self.bmbt_crc:
                parts.append("CRC of bmbt blocks")
            if self.symlink_crc:
                parts.append("CRC of symlink blocks")
            if self.attr_blocks:
                parts.append("identity and CRC of attr blocks "
                             + ", ".join(map(str, sorted(self.attr_blocks))))
            if self.attr_hashes and not self.drop_attr:
                parts.append("hashes of attr node entries")
            if self.rewrite and not parts:
                parts.append("CRC")
            what = "fixed: " + ", ".join(parts)
        return f"inode {self.ino}: {what}{cost}"


def paths_of(fs, inos, limit: int = 1 << 20) -> dict:
    """inode -> the paths (bytes) naming it, for the inodes ``inos``: the
    directories are walked from the root (breadth first, each once, a
    directory that cannot be read skipped) until every one is named or
    ``limit`` directories are read."""
    want = set(inos)
    out = {i: [] for i in want}
    if not want:
        return out
    root = fs.sb.rootino
    queue = [(root, b"")]
    seen = {root}
    for d, path in queue:
        if len(seen) > limit:
            break
        try:
            ents = list(D.iter_entries(fs.inode(d)))
        except (FsToolError, ValueError, IndexError, KeyError):
            continue
        for name, child, ftype in ents:
            full = path + b"/" + bytes(name)
            if child in want:
                out[child].append(full)
            if ftype == C.XFS_DIR3_FT_DIR and child not in seen:
                seen.add(child)
                queue.append((child, full))
    return out


@dataclasses.dataclass
class InodePlan:
    """What the inode phase will write (computed before anything is)."""
    changes: dict = dataclasses.field(default_factory=dict)      # ino -> InodeChange
    cleared: set = dataclasses.field(default_factory=set)         # inodes in use freed
    reinit: set = dataclasses.field(default_factory=set)          # free inodes rewritten
    attr_dropped: set = dataclasses.field(default_factory=set)
    node_keys: list = dataclasses.field(default_factory=list)     # (agno, agbno, index, key)
    # (agno, agbno, index, blocks): bmbt leaf records whose length is trimmed
    leaf_extents: list = dataclasses.field(default_factory=list)
    bmbt_crc: set = dataclasses.field(default_factory=set)        # (agno, agbno) restamped
    attr_blocks: dict = dataclasses.field(default_factory=dict)   # daddr -> owner inode
    # (daddr, owner inode, entry, hash): attr node entries whose hash is corrected
    attr_hashes: list = dataclasses.field(default_factory=list)
    symlink_crc: dict = dataclasses.field(default_factory=dict)   # daddr -> buffer length
    unlinked_ags: set = dataclasses.field(default_factory=set)    # buckets emptied
    # agno -> (inodes in use with no links its lists chain, its AGI_UNLINKED
    # findings, [(inode chained, whether its change was made for that alone)])
    orphaned: dict = dataclasses.field(default_factory=dict)
    quota: dict = dataclasses.field(default_factory=dict)         # sb field -> value
    handled: set = dataclasses.field(default_factory=set)         # id() of findings
    unrepaired: list = dataclasses.field(default_factory=list)    # (finding, reason)
    notes: list = dataclasses.field(default_factory=list)
    ags: set = dataclasses.field(default_factory=set)             # AGs to rebuild
    findings_of: dict = dataclasses.field(default_factory=dict)   # ino -> its findings

    @property
    def freed(self) -> set:
        """Inodes the rebuilt inobt must count free."""
        return self.cleared | self.reinit

    def drops(self, owner: int) -> bool:
        """Whether a claim of ``owner`` (check's block owners) goes: the
        blocks of cleared inodes and of dropped attr forks."""
        if owner < 0:
            return False
        ino = owner >> 2
        if ino in self.cleared:
            return True
        return ino in self.attr_dropped and owner & 3 in (ATTR, BMBT_ATTR)

    def withdraw(self, agnos, why: str) -> None:
        """The AGs ``agnos`` cannot be rebuilt: inodes whose clearing or
        dropped attr fork needs them are left as they are, reported."""
        for ino in sorted(self.cleared | self.attr_dropped):
            ch = self.changes[ino]
            ags = set(ch.ags)
            if not ags & set(agnos):
                continue
            for f in self.findings_of.get(ino, ()):
                self.handled.discard(id(f))
                self.unrepaired.append((f, "reported, not repaired: " + why))
            del self.changes[ino]
            self.cleared.discard(ino)
            self.attr_dropped.discard(ino)

    def withdraw_unlinked(self, why: str) -> None:
        """The namespace phase cannot take the inodes in use with no links
        that unlinked lists chain: those lists are left as they are."""
        for agno, (orphans, fl, chained) in sorted(self.orphaned.items()):
            self.unlinked_ags.discard(agno)
            self.notes.remove(f"AG {agno}: the AGI unlinked buckets are emptied")
            for f in fl:
                self.handled.discard(id(f))
                self.unrepaired.append((f, "reported, not repaired: the list chains inodes "
                                        "in use with no links (" + ", ".join(
                                            map(str, orphans[:3])) + "), which only "
                                        "lost+found can take, and " + why))
            for ino, created in chained:
                if created:
                    del self.changes[ino]
                elif ino in self.changes:
                    self.changes[ino].fields.pop("di_next_unlinked", None)
        self.orphaned = {}

    def mended(self) -> dict:
        """Inodes this phase keeps whose every finding it fixes within the
        inode itself, without touching a block its forks map (a CRC, flags,
        timestamps, hints, magic, version, next_unlinked, the block count
        and extent counts, the attr fork dropped), each with the change
        made: their directory entries can be trusted once it has, read from
        the inode as :func:`edited` leaves it (a directory whose map lost
        its extents then reads as empty, its entries' inodes go to
        lost+found, as xfs_repair does)."""
        safe = {"di_next_unlinked", "di_nblocks", "di_onlink", "di_magic", "di_version",
                "di_big_nextents"}
        out = {}
        for ino, ch in self.changes.items():
            if ch.clear or ch.reinit or ch.root_keys or \
                    ch.node_keys or ch.attr_blocks or ch.attr_hashes or ch.symlink_crc or \
                    ch.extent_lengths or ch.leaf_extents or ch.set_reflink or \
                    not set(ch.fields) <= safe:
                continue
            if all(id(f) in self.handled for f in self.findings_of.get(ino, ())
                   if f.code.startswith(("INODE_", "BMBT_")) and not shares_blocks(f)):
                out[ino] = ch
        return out

    def withdraw_root(self, root: int, why: str) -> None:
        """The root is not cleared after all (no phase makes a new one): its
        findings are reported, not repaired."""
        if root not in self.cleared:
            return
        self.cleared.discard(root)
        del self.changes[root]
        for f in self.findings_of.get(root, ()):
            self.handled.discard(id(f))
            self.unrepaired.append((f, "reported, not repaired: xfs_repair would clear the "
                                    "root directory and make a new one; " + why))

    def settles(self, finding) -> bool:
        """Whether clearing an inode answers a finding of another phase
        about it (an inode check kept but xfs_repair clears, such as a bad
        symlink or a file claiming another's blocks, is not reachable, has
        a wrong link count, or is a directory with bad entries: once it is
        free, none of that matters)."""
        return finding.ino in self.cleared and (
            finding.code in ("DISCONNECTED", "NLINK") or finding.code.startswith("DIR_"))

    def dangling(self, checker) -> list:
        """(inode, a finding of it) for every inode this phase clears that
        check saw in use with directory entries naming it: those entries
        are the namespace phase's to remove (until it has, repair is not
        done)."""
        tab = getattr(checker, "table", None)      # the whole filesystem's
        out = []
        for ino in sorted(self.cleared):
            slot = tab.slot(ino) if tab is not None else -1
            if slot >= 0 and tab.itype[slot] and tab.refs[slot]:
                fl = self.findings_of.get(ino)
                if fl:
                    out.append((ino, fl[0]))
                else:
                    # cleared for blocks it shares with another owner (no
                    # finding of its own): the entries naming it go all the same
                    why = "; ".join(self.changes[ino].why) or "cleared"
                    out.append((ino, Finding("SPACE_OVERLAP", f"inode {ino}: {why}",
                                             structure="inode", ino=ino,
                                             agno=ino >> checker.sb.agino_log)))
        return out

    def reason(self, finding) -> str | None:
        """None when this phase repairs ``finding``; else why not."""
        if id(finding) in self.handled or self.settles(finding):
            return None
        for f, why in self.unrepaired:
            if f is finding:
                return why
        return None

    # -- writing ---------------------------------------------------------------------
    def apply(self, tx, checker) -> None:
        """Write every inode change, the bmbt node keys, in ``tx``."""
        fs = tx.fs
        isz = fs.sb.inodesize
        for ino in sorted(self.changes):
            ch = self.changes[ino]
            buf, off = fs.inode_cluster(ino)
            tx.join(buf)
            new = edited(buf.data[off:off + isz], ch, checker)
            buf.data[off:off + isz] = new
            fs.forget_inode(ino)
        bs = fs.sb.blocksize
        for agno, agbno, index, key in self.node_keys:
            buf = raw_buf(tx, fs.agb_to_daddr(agno, agbno), bs, V.BMBT)
            struct.pack_into(">Q", buf.data, C.XFS_BTREE_LBLOCK_CRC_LEN + 8 * index, key)
        for agno, agbno, index, n in self.leaf_extents:
            buf = raw_buf(tx, fs.agb_to_daddr(agno, agbno), bs, V.BMBT)
            set_extent_length(buf.data, C.XFS_BTREE_LBLOCK_CRC_LEN + 16 * index, n)
        for agno, agbno in sorted(self.bmbt_crc):
            buf = raw_buf(tx, fs.agb_to_daddr(agno, agbno), bs, V.BMBT)
            struct.pack_into("<I", buf.data, C.XFS_BTREE_LBLOCK_CRC_OFF,
                             parsers.xfs_cksum(bytes(buf.data), C.XFS_BTREE_LBLOCK_CRC_OFF))
        for daddr, length in sorted(self.symlink_crc.items()):
            buf = raw_buf(tx, daddr, length, V.SYMLINK)
            struct.pack_into(">I", buf.data, 0, C.XFS_SYMLINK_MAGIC)
            buf.data[16:32] = fs.sb.meta_uuid
            struct.pack_into(">Q", buf.data, 40, daddr)      # sl_blkno
            struct.pack_into("<I", buf.data, SYMLINK_CRC_OFF,
                             parsers.xfs_cksum(bytes(buf.data), SYMLINK_CRC_OFF))
        for daddr, ino, index, h in self.attr_hashes:
            ch = self.changes.get(ino)
            if ch is not None and (ch.drop_attr or ch.clear):
                continue            # the fork goes: nothing of it to correct
            buf = raw_buf(tx, daddr, bs, V.ATTR3_NODE_OR_LEAF)
            DA.set_hash(buf.data, index, h)
            self.attr_blocks.setdefault(daddr, ino)
        for daddr, ino in sorted(self.attr_blocks.items()):
            # an attr leaf or node block's identity and CRC (the kernel's
            # verifier refuses it otherwise)
            buf = raw_buf(tx, daddr, bs, V.ATTR3_NODE_OR_LEAF)
            DA.set_identity(buf.data, daddr, fs.sb.meta_uuid, ino)
            struct.pack_into("<I", buf.data, C.XFS_DA3_BLKINFO_CRC_OFF,
                             parsers.xfs_cksum(bytes(buf.data), C.XFS_DA3_BLKINFO_CRC_OFF))

    def apply_sb(self, f: dict) -> None:
        """The superblock's quota fields (``f`` is the unpacked primary)."""
        if not self.quota:
            return
        f.update(self.quota)
        f["sb_qflags"] &= ~QUOTA_CHKD
        if all(f[n] in (0, C.NULLFSINO) for n in ("sb_uquotino", "sb_gquotino", "sb_pquotino")):
            f["sb_qflags"] = 0
            f["sb_versionnum"] &= ~XFS_SB_VERSION_QUOTABIT


# -- the edits ---------------------------------------------------------------------------
def edited(raw, ch: InodeChange, checker) -> bytearray:
    """The inode ``raw`` with ``ch`` made, its CRC current."""
    b = bytearray(raw)
    if ch.clear or ch.reinit:
        cleared_inode(b, ch.ino, checker)
    else:
        d = core_fields(b)
        for name, value in ch.fields.items():
            put(b, name, value)
        flags, flags2 = get(b, "di_flags"), get(b, "di_flags2")
        if ch.fix_flags:
            flags, flags2 = fixed_flags(checker, d, ch.ino)
        if ch.set_reflink:
            flags2 |= C.XFS_DIFLAG2_REFLINK
        if ch.fix_extsize:
            put(b, "di_extsize", 0)
            flags &= ~(DIFLAG_EXTSIZE | DIFLAG_EXTSZINHERIT)
        if ch.fix_cowextsize:
            put(b, "di_cowextsize", 0)
            flags2 &= ~DIFLAG2_COWEXTSIZE
        old2 = get(b, "di_flags2")
        if (old2 ^ flags2) & DIFLAG2_NREXT64:
            # large extent counters on a filesystem without them (the only
            # way the flag is cleared): the counts were kept in the
            # filesystem's own fields all along (the check repair runs reads
            # them there), and the 64-bit count's place is padding again
            put(b, "di_big_nextents", 0)
        put(b, "di_flags", flags)
        put(b, "di_flags2", flags2)
        names = count_fields(flags2)
        for which, n in ch.counts.items():
            put(b, names[which == "attr"], n)
        for name in ch.nsec:
            put(b, name, get(b, name) & ~0xFFFFFFFF)
        for (attr, index), n in ch.extent_lengths.items():
            set_extent_length(b, C.XFS_DINODE_CORE_SIZE + (get(b, "di_forkoff") * 8 if attr
                                                           else 0) + 16 * index, n)
        for (attr, index), key in ch.root_keys.items():
            off = C.XFS_DINODE_CORE_SIZE + (get(b, "di_forkoff") * 8 if attr else 0)
            struct.pack_into(">Q", b, off + 4 + 8 * index, key)
        if ch.drop_attr:
            drop_attr_fork(b, checker)
            if ch.nblocks is not None:
                put(b, "di_nblocks", ch.nblocks)
        elif ch.sf_junk and get(b, "di_forkoff"):
            off = C.XFS_DINODE_CORE_SIZE + get(b, "di_forkoff") * 8
            keep = [e for i, e in enumerate(sf_attr_entries(b[off:])) if i not in ch.sf_junk]
            fork = sf_attr_fork(keep)
            b[off:] = fork + bytes(len(b) - off - len(fork))
    struct.pack_into("<I", b, C.XFS_DINODE_CRC_OFF,
                     parsers.xfs_cksum(bytes(b), C.XFS_DINODE_CRC_OFF))
    return b


def sf_attr_entries(fork) -> list:
    """[(flags, name, value)] of a shortform attr fork's entries, as far as
    they lie inside its totsize (incomplete ones included)."""
    totsize, count = L.sf_header(fork)
    end = min(totsize, len(fork))
    out, pos = [], L.SF_HDR
    for _ in range(count):
        if pos + L.SF_ENTRY > end:
            break
        namelen, valuelen, flags = L.sf_entry(fork, pos)
        name = pos + L.SF_ENTRY
        if name + namelen + valuelen > end:
            break
        out.append((flags, bytes(fork[name:name + namelen]),
                    bytes(fork[name + namelen:name + namelen + valuelen])))
        pos = name + namelen + valuelen
    return out


# a shortform attr fork of [(flags, name, value)], in order
sf_attr_fork = L.sf_encode


def set_extent_length(b: bytearray, off: int, n: int) -> None:
    """The length (br_blockcount, the low 21 bits) of the packed extent
    record at ``off`` set to ``n``."""
    (lo,) = struct.unpack_from(">Q", b, off + 8)
    struct.pack_into(">Q", b, off + 8, (lo & ~0x1FFFFF) | n)


def cleared_inode(b: bytearray, ino: int, checker) -> None:
    """xfs_repair's clear_dinode, in place: a v5 core with no mode, links,
    size, blocks, extents, flags or forks; uid, gid, timestamps and the
    generation are kept."""
    for name in ("di_mode", "di_flags", "di_dmevmask", "di_forkoff", "di_size", "di_nblocks",
                 "di_onlink", "di_nextents", "di_anextents", "di_nlink", "di_flags2",
                 "di_lsn", "di_changecount", "di_big_nextents"):
        put(b, name, 0)
    put(b, "di_magic", C.XFS_DINODE_MAGIC)
    put(b, "di_version", 3)
    put(b, "di_format", C.XFS_DINODE_FMT_EXTENTS)
    put(b, "di_aformat", C.XFS_DINODE_FMT_EXTENTS)
    put(b, "di_ino", ino)
    put(b, "di_uuid", checker.sb.meta_uuid)
    put(b, "di_pad2", bytes(12))
    put(b, "di_next_unlinked", C.NULLAGINO)
    b[C.XFS_DINODE_CORE_SIZE:] = bytes(len(b) - C.XFS_DINODE_CORE_SIZE)
    # hints the kernel's verifier refuses even in a free inode go too
    for _ in range(2):
        fault = verify_free(checker, core_fields(b), b)
        if fault and fault[0] in ("di_extsize", "di_cowextsize"):
            put(b, fault[0], 0)


def drop_attr_fork(b: bytearray, checker) -> None:
    """clear_dinode_attr: no attr fork; the data fork has the whole literal
    area (a bmbt root's pointers move to where the larger fork puts them)."""
    forkoff = get(b, "di_forkoff")
    flags2 = get(b, "di_flags2")
    put(b, count_fields(flags2)[1], 0)
    put(b, "di_aformat", C.XFS_DINODE_FMT_EXTENTS)
    put(b, "di_forkoff", 0)
    if not forkoff:
        return
    lit = C.XFS_DINODE_CORE_SIZE
    size = checker.litino
    old = min(forkoff * 8, size)
    data = bytes(b[lit:lit + old])
    area = bytearray(size)
    if get(b, "di_format") == C.XFS_DINODE_FMT_BTREE:
        _level, numrecs = struct.unpack_from(">HH", data, 0)
        old_max, new_max = (old - 4) // 16, (size - 4) // 16
        numrecs = min(numrecs, old_max)
        area[:4 + 8 * numrecs] = data[:4 + 8 * numrecs]
        ptrs = data[4 + 8 * old_max:4 + 8 * old_max + 8 * numrecs]
        area[4 + 8 * new_max:4 + 8 * new_max + len(ptrs)] = ptrs
    else:
        area[:old] = data
    b[lit:lit + size] = area


def fixed_flags(checker, d: dict, ino: int) -> tuple[int, int]:
    """di_flags and di_flags2 with the bits xfs_repair clears cleared
    (unknown bits, realtime without a realtime device, the realtime bitmap
    flag elsewhere, directory flags on other files, file flags on other
    inodes, DAX on special files, CoW hints where they cannot be, bigtime
    and large extent counts without their features)."""
    sb = checker.sb
    ifmt = d["mode"] & C.S_IFMT
    flags = d["flags"] & DIFLAG_ANY
    flags &= ~DIFLAG_REALTIME
    if ino != rt_inodes(checker)[0]:
        flags &= ~DIFLAG_NEWRTBM
    if ifmt != C.S_IFDIR:
        flags &= ~DIR_FLAGS
    if ifmt != C.S_IFREG:
        flags &= ~(DIFLAG_REALTIME | DIFLAG_EXTSIZE)
    f2 = d["flags2"] & DIFLAG2_ANY
    if ifmt not in (C.S_IFREG, C.S_IFDIR):
        f2 &= ~DIFLAG2_DAX
    reflink = sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK)
    if not reflink or ifmt not in (C.S_IFREG, C.S_IFDIR) or \
            flags & (DIFLAG_REALTIME | DIFLAG_RTINHERIT):
        f2 &= ~DIFLAG2_COWEXTSIZE
    if not sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_BIGTIME):
        f2 &= ~DIFLAG2_BIGTIME
    if not sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_NREXT64):
        f2 &= ~DIFLAG2_NREXT64
    return flags, f2


# -- the plan ----------------------------------------------------------------------------
_CLEAR_FIELDS = ("di_ino", "di_uuid")


def _inobt_allocated(checker, ino: int) -> bool:
    """Whether check's inobt records count ``ino`` in use."""
    sb = checker.sb
    agno = ino >> sb.agino_log
    agino = ino & ((1 << sb.agino_log) - 1)
    for rec in checker.chunks.get(agno, ()):
        if rec[0] <= agino < rec[0] + 64:
            return not rec[4] >> (agino - rec[0]) & 1
    return False


def shares_blocks(f) -> bool:
    """A finding of an inode that shares blocks without the reflink flag:
    for anything but a regular file, its block map points at another file's
    blocks.  A directory's rebuild reads each block as a directory block
    (what is not one is junked) and gives up only what no other owner
    claims, so the finding does not keep the directory from being rebuilt."""
    return f.code == "INODE_FLAGS" and "lacks the reflink flag" in f.message


def _mode_on_disk(checker, ino: int) -> int:
    buf, off = checker.fs.inode_cluster(ino)
    return get(buf.data[off:off + checker.sb.inodesize], "di_mode")


def plan_inodes(checker) -> InodePlan:
    """The inode phase's plan for the findings of ``checker`` (a
    check context with :class:`.checker.RepairHooks`)."""
    sb = checker.sb
    p = InodePlan()
    verdicts = getattr(checker.hooks, "verdicts", {})
    by_ino: dict = {}
    unlinked: dict = {}           # agno -> its AGI_UNLINKED findings
    for f in checker.findings:
        if f.code not in CODES:
            continue
        if f.code == "SB_QUOTINO":
            p.quota[f.field] = C.NULLFSINO
            p.handled.add(id(f))
            p.notes.append(f"superblock: {f.field} ({f.found}) names no quota inode: "
                           "cleared, with the quota checked flags")
            continue
        if f.code == "AGI_UNLINKED":
            if f.agno is None:
                p.unrepaired.append((f, "reported, not repaired: the finding names no AG"))
                continue
            unlinked.setdefault(f.agno, []).append(f)
            continue
        if f.ino is None:
            p.unrepaired.append((f, "reported, not repaired: the finding names no inode"))
            continue
        by_ino.setdefault(f.ino, []).append(f)
    # an inode the inobt counts in use but free on disk: the AG rebuild
    # frees it, and xfs_repair clears it ("correcting imap and clearing
    # inode"), so that it also passes the kernel's verifier of free inodes
    for f in checker.findings:
        if f.code == "INOBT_INODE" and f.ino is not None and f.ino not in by_ino and \
                _inobt_allocated(checker, f.ino) and not _mode_on_disk(checker, f.ino):
            ch = p.changes.setdefault(f.ino, InodeChange(f.ino, clear=True))
            ch.why.append(f.message)
            p.cleared.add(f.ino)

    def change(ino) -> InodeChange:
        ch = p.changes.get(ino)
        if ch is None:
            ch = p.changes[ino] = InodeChange(ino)
        return ch

    for ino, fs_ in sorted(by_ino.items()):
        verdict = verdicts.get(ino)
        codes = {f.code for f in fs_}
        early = any(f.code == "INODE_CORRUPT" and f.field in _CLEAR_FIELDS or
                    f.code == "INODE_SIZE" and f.field == "di_size" and verdict is None
                    for f in fs_)
        if early or (verdict is None and "INODE_FREE" in codes):
            # xfs_repair's clear_dinode: an inode it clears, or a free one
            # failing the kernel's verifier
            ch = change(ino)
            if verdict is None and not (early and _inobt_allocated(checker, ino)):
                ch.reinit = True
                p.reinit.add(ino)
            else:
                ch.clear = True
                p.cleared.add(ino)
            ch.why = [f.message for f in fs_]
            p.handled.update(id(f) for f in fs_)
            continue
        if codes == {"SYMLINK"} and (verdict is None or verdict[0]):
            bufs = _symlink_crc_only(checker, ino, fs_)
            if bufs:
                # xfs_repair: "Correcting CRC, but symlink may be bad"; the
                # target is whole, so the link is kept
                ch = change(ino)
                ch.why = [f.message for f in fs_]
                ch.symlink_crc = len(bufs)
                p.symlink_crc.update(bufs)
                p.handled.update(id(f) for f in fs_)
                continue
        if verdict is not None and not verdict[0] or "SYMLINK" in codes:
            ch = change(ino)
            ch.clear = True
            ch.why = [f.message for f in fs_]
            p.cleared.add(ino)
            p.handled.update(id(f) for f in fs_)
            continue
        # the inode is kept: fix fields, drop a bad attr fork
        ch = None
        for f in fs_:
            fix = _attr_block_fix(checker, p, f) \
                if f.code in ("XATTR_VERIFY", "XATTR_CRC") else \
                _attr_hash_fix(checker, f) if f.code == "XATTR_NODE_HASH" else None
            fix = fix or _field_fix(f, verdict)
            ifmt = _mode_on_disk(checker, ino) & C.S_IFMT if shares_blocks(f) else C.S_IFREG
            if ifmt == C.S_IFDIR:
                # only a regular file may share blocks (the kernel's verifier
                # refuses the flag on anything else): a directory's block map
                # points at another file's blocks.  The namespace phase
                # rebuilds it from the blocks that read as directory blocks
                # and gives up only its own claims (the finding stays, and
                # is reported, when it does not)
                p.handled.add(id(f))
                continue
            if ifmt != C.S_IFREG:
                p.unrepaired.append((f, "reported, not repaired: only regular files share "
                                        "blocks; this inode's block map points at another "
                                        "file's blocks"))
                continue
            if fix is None:
                p.unrepaired.append((f, _why_not(f)))
                continue
            ch = ch or change(ino)
            ch.why.append(f.message)
            p.handled.add(id(f))
            fix(ch, p)
        if ch is not None and ch.drop_attr and _data_fits_without_attr(checker, ino, ch):
            # xfs_repair drops the attr fork, then finds the btree data fork
            # holds fewer extents than the whole literal area would: "extent
            # count too low for file format", and clears the inode
            ch.drop_attr = False
            ch.clear = True
            p.cleared.add(ino)
            continue
        if ch is not None and ch.drop_attr:
            p.attr_dropped.add(ino)
            ch.nblocks = verdict[1] if verdict is not None else None
            # the counts of the dropped fork no longer matter
            ch.counts.pop("attr", None)
            if ch.nblocks is not None:
                ch.fields.pop("di_nblocks", None)
    # unlinked lists: empty the AG's buckets; every inode they chain gets a
    # null next_unlinked.  An inode in use with no links on them is left on
    # no list: xfs_repair moves it to lost+found (its phases 6 and 7), the
    # namespace phase's part (it takes every inode in use no entry reaches)
    for agno, fl in sorted(unlinked.items()):
        chained = _chained(checker, agno)
        tab = checker.tables.get(agno)
        orphans = [i for i in chained if tab is not None and tab.slot(i) >= 0 and
                   tab.itype[tab.slot(i)] and not tab.nlinks[tab.slot(i)]]
        p.unlinked_ags.add(agno)
        p.handled.update(id(f) for f in fl)
        edits = []
        for ino in chained:
            if ino not in p.freed:
                edits.append((ino, ino not in p.changes))
                ch = change(ino)
                ch.fields["di_next_unlinked"] = C.NULLAGINO
        if orphans:
            p.orphaned[agno] = (orphans, fl, edits)
        p.notes.append(f"AG {agno}: the AGI unlinked buckets are emptied")
    # a block two owners claim: the claims that go, decided as xfs_repair's
    # phases 3 and 4 decide them (_conflicts)
    reflink = sb.has_ro_compat(C.XFS_SB_FEAT_RO_COMPAT_REFLINK)
    kept = {agno: sorted(c for c in claims if c[2] not in REPLACED and not p.drops(c[2]))
            for agno, claims in checker.claims.items()}
    for o, why in _conflicts(kept, reflink, lambda ino: _mode_on_disk(checker, ino)):
        if p.drops(o):
            continue
        ch = change(o >> 2)
        ch.why.append(why)
        if o & 3 in (ATTR, BMBT_ATTR) and not _data_fits_without_attr(checker, o >> 2, ch):
            ch.drop_attr = True
            p.attr_dropped.add(o >> 2)
            v = verdicts.get(o >> 2)
            ch.nblocks = v[1] if v is not None else None
            ch.counts.pop("attr", None)
        else:
            ch.clear = True
            p.cleared.add(o >> 2)
    # a file given the reflink flag for blocks it shares only with forks
    # that go keeps its flags as they are
    for ino, ch in list(p.changes.items()):
        if ch.set_reflink and not ch.clear and not _shares_with_kept(kept, ino, p):
            ch.set_reflink = False
            if ch == InodeChange(ino, why=ch.why, ags=ch.ags):
                del p.changes[ino]
    # the root directory is never freed here: a new root is the namespace
    # phase's to make (until then its findings stay reported)
    # the root directory is cleared like any inode: the namespace phase
    # makes a new one in its place (withdraw_root when it cannot)
    # which AGs the rebuild covers: those of inodes freed or dropping forks,
    # and of every block they give back
    for ino in p.cleared:
        p.changes[ino].ags.add(ino >> sb.agino_log)
    for agno, claims in checker.claims.items():
        for s, n, owner in claims:
            if p.drops(owner):
                p.changes[owner >> 2].ags.add(agno)
    p.findings_of = by_ino
    p.ags = p.unlinked_ags.union(*(ch.ags for ch in p.changes.values()))
    return p


def _data_fits_without_attr(checker, ino: int, ch) -> bool:
    """Whether ``ino``'s data fork is a btree whose extents (the count
    the repair leaves) would fit the inode once its attr fork is gone."""
    fs = checker.fs
    sb = fs.sb
    try:
        agno, agbno, index = fs.ino_location(ino)
        raw = fs.dev.pread((fs.agb_to_daddr(agno, agbno) << C.BBSHIFT) +
                           index * sb.inodesize, sb.inodesize)
        d = DINODE.unpack(raw)
    except Exception:       # noqa: BLE001 - an inode that cannot be read is left as planned
        return False
    if d["di_format"] != C.XFS_DINODE_FMT_BTREE:
        return False
    data = count_fields(d["di_flags2"])[0]
    n = ch.counts.get("data", d[data])
    return n * 16 <= sb.inodesize - C.XFS_DINODE_CORE_SIZE


def _conflicts(kept: dict, reflink: bool, mode_of) -> list:
    """(owner, why) for each fork that goes for blocks it shares with
    another claim, decided as xfs_repair decides it: not "every claimant",
    but the fork whose record is bad, so that a sound file whose blocks a
    bad extent runs over is kept.

    ``kept`` is agno -> sorted (start, length, owner) claims.  Only claims
    that overlap another matter (the others conflict with nothing).
    xfs_repair's phase 3 takes inodes in order with the metadata already
    marked (AG headers, log, inode chunks, refcount btree, CoW extents):
    each block map btree block is marked used, and one found used already
    is marked multiply claimed (its inode is not failed for it); then each
    extent of the fork: one over metadata, or over a block an earlier inode
    uses (on a reflink filesystem a regular file may share blocks) makes
    the fork bad, and its extents are not marked (an inode cleared here
    claims nothing anyone else could lose a block to).  Phase 4 then fails
    every inode whose block map btree block is multiply claimed.  A bad
    data fork clears the inode, a bad attr fork is dropped."""
    involved: dict = {}                       # ino -> [(fork kind, agno, start, end)]
    meta: dict = {}                           # agno -> [(start, end, owner)]
    for agno, claims in kept.items():
        pos, last = 0, None
        hit = set()
        for i, (start, n, owner) in enumerate(claims):
            if start < pos:
                hit.add(i)
                hit.add(last)
            if start + n > pos:
                pos, last = start + n, i
        if not hit:
            continue
        # every claim that overlaps another (a long claim overlaps every
        # later one that starts inside it: it is ``last`` for each of them)
        for i in sorted(hit):
            start, n, owner = claims[i]
            if owner < 0:
                meta.setdefault(agno, []).append((start, start + n, owner))
            else:
                involved.setdefault(owner >> 2, []).append(
                    (owner & 3, agno, start, start + n))
    if not involved:
        return []
    used = _Marked()                                           # what is marked used
    for agno, m in meta.items():
        for s, e, owner in m:
            used.add(agno, s, e, owner)
    mult: dict = {}                                            # agno -> [(s, e)]
    failed = {}                                                # owner -> why
    order = {BMBT_DATA: 0, DATA: 1, BMBT_ATTR: 2, ATTR: 3}
    for ino in sorted(involved):
        regular = mode_of(ino) & C.S_IFMT == C.S_IFREG
        claims = sorted(involved[ino], key=lambda c: (order[c[0]], c[1], c[2]))
        for fork in ((BMBT_DATA, DATA), (BMBT_ATTR, ATTR)):
            bad = None
            marks = []
            for kind, agno, s, e in claims:
                if kind not in fork:
                    continue
                # its own blocks are not looked at: the block map phases
                # judge those (a directory is rebuilt from what reads as its
                # blocks)
                hits = [h for h in used.over(agno, s, e) if h[2] < 0 or h[2] >> 2 != ino]
                if kind in (BMBT_DATA, BMBT_ATTR):
                    if hits:
                        mult.setdefault(agno, []).append((s, e))
                    used.add(agno, s, e, (ino << 2) | kind)
                    continue
                for hs, he, owner in hits:
                    if owner < 0:
                        bad = (f"AG {agno}: its {_FORK[kind]} claims block {max(s, hs)}, "
                               f"which {owner_name(owner)} holds")
                        break
                    if reflink and regular:
                        mult.setdefault(agno, []).append((max(s, hs), min(e, he)))
                        continue
                    bad = (f"AG {agno}: its {_FORK[kind]} claims block {max(s, hs)}, which "
                           f"inode {owner >> 2} already uses")
                    break
                if bad:
                    break
                marks.append((agno, s, e, (ino << 2) | kind))
            if bad:
                failed[(ino << 2) | fork[1]] = bad
            else:
                for agno, s, e, owner in marks:
                    used.add(agno, s, e, owner)
    # phase 4: a block map btree block multiply claimed fails its inode
    for ino in sorted(involved):
        for kind, agno, s, e in involved[ino]:
            if kind in (BMBT_DATA, BMBT_ATTR) and any(
                    ms < e and s < me for ms, me in mult.get(agno, ())):
                failed.setdefault((ino << 2) | (DATA if kind == BMBT_DATA else ATTR),
                                  f"AG {agno}: its {_FORK[kind]} block {s} is claimed by "
                                  "another owner as well")
    return sorted(failed.items())


class _Marked:
    """Claims marked used, per AG, found by the blocks they overlap in the
    order they were marked (a file sharing thousands of extents made a scan
    of every mark per extent quadratic).  Short claims are kept sorted by
    start (one overlaps [s, e) only if it starts after s - SHORT), long ones
    in a list of their own."""
    SHORT = 256

    def __init__(self):
        self._ags: dict = {}            # agno -> (starts, short claims, long claims)
        self._seq = 0

    def add(self, agno: int, s: int, e: int, owner: int) -> None:
        starts, short, long_ = self._ags.get(agno) or self._ags.setdefault(agno, ([], [], []))
        self._seq += 1
        item = (self._seq, s, e, owner)
        if e - s > self.SHORT:
            long_.append(item)
            return
        k = bisect.bisect_right(starts, s)
        starts.insert(k, s)
        short.insert(k, item)

    def over(self, agno: int, s: int, e: int) -> list:
        """(start, end, owner) of each claim overlapping [s, e), oldest first."""
        a = self._ags.get(agno)
        if a is None:
            return []
        starts, short, long_ = a
        lo = bisect.bisect_right(starts, s - self.SHORT)
        hi = bisect.bisect_left(starts, e)
        hit = [c for c in short[lo:hi] if c[2] > s]
        hit += [c for c in long_ if c[1] < e and s < c[2]]
        hit.sort()
        return [c[1:] for c in hit]


def _shares_with_kept(kept: dict, ino: int, p) -> bool:
    """Whether ``ino``'s data shares a block with another file's data that
    the plan ``p`` keeps."""
    for claims in kept.values():
        mine = [(s, s + n) for s, n, o in claims if o >= 0 and o >> 2 == ino and o & 3 == DATA]
        if any(o >= 0 and o >> 2 != ino and o & 3 == DATA and not p.drops(o) and
               any(s < me and ms < s + n for ms, me in mine)
               for s, n, o in claims if mine):
            return True
    return False


_FORK = {DATA: "data fork", ATTR: "attr fork", BMBT_DATA: "data fork block map",
         BMBT_ATTR: "attr fork block map"}


def _chained(checker, agno: int) -> list:
    """Inodes of AG ``agno`` on its unlinked lists (each list followed until
    it leaves the AG's inode chunks or loops: what lies elsewhere is not an
    inode and is never written)."""
    sb = checker.sb
    tab = checker.tables.get(agno)
    out = []
    for agino in checker.unlinked.get(agno) or []:
        seen = set()
        while agino != C.NULLAGINO and agino not in seen and checker.verify_agino(agno, agino):
            seen.add(agino)
            ino = (agno << sb.agino_log) | agino
            if tab is None or tab.slot(ino) < 0:
                break
            out.append(ino)
            agino = checker.next_unlinked.get(ino, C.NULLAGINO)
    return out


SYMLINK_CRC_OFF = 12         # sl_magic, sl_offset, sl_bytes, then sl_crc


def _symlink_crc_only(checker, ino: int, findings) -> dict:
    """{daddr: length} of the remote symlink buffers of ``ino`` whose CRC
    is wrong, when xfs_repair keeps the link anyway (the findings are about
    the buffers' headers and CRCs only; each buffer's header names this
    inode and its place in the target; the target has di_size bytes, none
    of them NUL); else {}.  The kernel's verifier reports a bad CRC before
    anything else, and xfs_repair, told of a bad CRC, looks at the header's
    owner, offset and length only: a buffer with a bad CRC may also have a
    wrong magic, uuid or recorded address, which are rewritten with the
    CRC.  A buffer whose CRC is right must be right throughout (xfs_repair
    clears the link otherwise)."""
    if any(f.field not in ("crc", "magic", "uuid", "blkno") for f in findings):
        return {}
    fs = checker.fs
    sb = fs.sb
    bs = sb.blocksize
    hdr = C.XFS_SYMLINK_HDR_SIZE
    try:
        node = fs.inode(ino)
        length = node.size
        if not node.is_symlink or node.format not in (C.XFS_DINODE_FMT_EXTENTS,
                                                      C.XFS_DINODE_FMT_BTREE) or \
                not 0 < length < C.XFS_SYMLINK_MAXLEN:
            return {}
        need = -(-length // (bs - hdr))
        got, blk, bad = 0, 0, {}
        while got < length:
            ext = node.map_block(blk) if blk < need else None
            if ext is None:
                return {}
            n = min(ext[0] + ext[2], need) - blk
            daddr = fs.fsb_to_daddr(ext[1] + blk - ext[0])
            buf = fs.dev.pread(daddr << C.BBSHIFT, n * bs)
            magic, offset, nbytes = struct.unpack_from(">III", buf, 0)
            owner, blkno = struct.unpack_from(">QQ", buf, 32)
            want = min(n * bs - hdr, length - got)
            if offset != got or nbytes != want or owner != ino or \
                    0 in buf[hdr:hdr + nbytes]:
                return {}
            stored = struct.unpack_from("<I", buf, SYMLINK_CRC_OFF)[0]
            if parsers.xfs_cksum(bytes(buf), SYMLINK_CRC_OFF) != stored:
                bad[daddr] = n * bs
            elif magic != C.XFS_SYMLINK_MAGIC or blkno != daddr or \
                    buf[16:32] != sb.meta_uuid:
                return {}
            got += nbytes
            blk += n
    except Exception:       # noqa: BLE001 - a symlink that cannot be read is cleared
        return {}
    return bad


def _attr_block_fix(checker, p, f):
    """An attr leaf or node block whose CRC, address, uuid or owner is
    wrong but whose structure the kernel's verifier accepts: restamped in
    place (anything else drops the attr fork)."""
    if f.field not in ("crc", "blkno", "uuid", "owner") or f.offset is None:
        return None
    try:
        node = checker.fs.inode(f.ino)
        daddr, _pieces = node.read_fork_blocks(f.offset, 1, attr=True)
        buf = checker.fs.dev.pread(daddr << C.BBSHIFT, checker.sb.blocksize)
    except Exception:       # noqa: BLE001 - a block that cannot be found is not restamped
        return None
    magic = DA.magic(buf)
    if magic == C.XFS_ATTR3_LEAF_MAGIC:
        faults = L.leaf_faults(buf, checker.sb.blocksize)
    elif magic == C.XFS_DA3_NODE_MAGIC:
        faults = DA.node_faults(buf, max(checker.da_node_ents, checker.attr_node_ents))
    else:
        return None
    if faults:
        return None
    def fix(ch, p):
        p.attr_blocks[daddr] = f.ino
        ch.attr_blocks.add(f.offset)
    return fix


def _attr_hash_fix(checker, f):
    """An attr node entry whose hash is not the greatest of the block it
    names: set to it in place (xfs_repair's "correcting bad hashval"), the
    block's CRC written again."""
    if f.offset is None or f.index is None or f.expected is None:
        return None
    try:
        daddr, _pieces = checker.fs.inode(f.ino).read_fork_blocks(f.offset, 1, attr=True)
    except Exception:       # noqa: BLE001 - a block that cannot be found is not corrected
        return None

    def fix(ch, p):
        p.attr_hashes.append((daddr, f.ino, f.index, f.expected))
        ch.attr_hashes += 1
    return fix


def _why_not(f) -> str:
    if f.code == "INODE_FORMAT" and f.field == "di_mode":
        return ("reported, not repaired: the root inode is not a directory; a new root "
                "directory is the namespace phase's to make")
    return "reported, not repaired: this fault of an inode repair keeps is not known"


def _field_fix(f, verdict):
    """How a kept inode's finding is fixed: a function of (change, plan), or
    None."""
    code, field = f.code, f.field
    attr = f.fork == "attr"
    if code == "INODE_CORRUPT":
        if field == "di_crc":
            return lambda ch, p: setattr(ch, "rewrite", True)
        if field == "di_magic":
            return lambda ch, p: ch.fields.__setitem__("di_magic", C.XFS_DINODE_MAGIC)
        if field == "di_version":
            return lambda ch, p: ch.fields.__setitem__("di_version", 3)
        if field == "di_v3_pad":
            return lambda ch, p: ch.fields.__setitem__("di_big_nextents", 0)
        if field == "di_onlink":
            return lambda ch, p: ch.fields.__setitem__("di_onlink", 0)
        return None
    if code == "INODE_FLAGS" and "lacks the reflink flag" in f.message:
        # a file sharing blocks: xfs_repair sets the flag
        return lambda ch, p: setattr(ch, "set_reflink", True)
    if code == "INODE_FLAGS":
        return lambda ch, p: setattr(ch, "fix_flags", True)
    if code == "INODE_EXTSIZE":
        if field in ("di_cowextsize", "di_flags2"):
            return lambda ch, p: setattr(ch, "fix_cowextsize", True)
        return lambda ch, p: setattr(ch, "fix_extsize", True)
    if code == "INODE_TIMESTAMP" and field:
        return lambda ch, p: ch.nsec.append(field)
    if code == "INODE_NBLOCKS" and f.expected is not None:
        return lambda ch, p: ch.fields.__setitem__("di_nblocks", f.expected)
    if code == "INODE_NEXTENTS" and f.expected is not None:
        which = "attr" if field == "di_anextents" else "data"
        return lambda ch, p: ch.counts.__setitem__(which, f.expected)
    if code == "INODE_UNLINKED":
        return lambda ch, p: ch.fields.__setitem__("di_next_unlinked", C.NULLAGINO)
    if code == "INODE_FORMAT" and field == "di_aformat" and "without an attr fork" in f.message:
        return lambda ch, p: ch.fields.__setitem__("di_aformat", C.XFS_DINODE_FMT_EXTENTS)
    if code == "INODE_EXTENT" and field == "br_blockcount" and f.expected is not None:
        # a length run over the next extent: trimmed (check read it so)
        if f.structure == "bmbt" and f.agno is not None and f.block is not None:
            def fix(ch, p):
                p.leaf_extents.append((f.agno, f.block, f.index, f.expected))
                ch.leaf_extents += 1
            return fix
        return lambda ch, p: ch.extent_lengths.__setitem__((attr, f.index), f.expected)
    if code == "BMBT_KEY" and f.index is not None and f.expected is not None:
        if f.structure == "inode":
            return lambda ch, p: ch.root_keys.__setitem__((attr, f.index), f.expected)
        if f.agno is not None and f.block is not None:
            def fix(ch, p):
                p.node_keys.append((f.agno, f.block, f.index, f.expected))
                ch.node_keys += 1
            return fix
        return None
    if code == "BMBT_BLOCK" and field == "crc" and f.agno is not None and \
            f.block is not None:
        # a bmbt block whose only fault is its CRC (check keeps the inode):
        # xfs_repair rewrites the block
        def fix(ch, p):
            if (f.agno, f.block) not in p.bmbt_crc:
                p.bmbt_crc.add((f.agno, f.block))
                ch.bmbt_crc += 1
        return fix
    if code == "XATTR" and field in ("flags", "name") and f.index is not None and \
            f.offset is None and "shortform attribute" in f.message:
        # process_shortform_attr junks the one entry (bad flags, namespaces
        # or name, incomplete) and keeps the others
        return lambda ch, p: ch.sf_junk.add(f.index)
    if attr or code in ("XATTR", "XATTR_NODE", "XATTR_CRC", "XATTR_VERIFY", "INODE_FORMAT"):
        # process_inode_attr_fork: a bad attr fork is dropped
        if code == "INODE_FORMAT" and field != "di_aformat":
            return None
        return lambda ch, p: setattr(ch, "drop_attr", True)
    return None
