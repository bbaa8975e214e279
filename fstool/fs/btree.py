"""One read engine for every XFS btree, driven by a small descriptor per tree.

Short-pointer trees (bnobt, cntbt, inobt, finobt, refcountbt, rmapbt) live in
one AG and point with 32-bit AG block numbers; the bmbt points with 64-bit
filesystem block numbers and roots in an inode fork.  The walk is a
depth-first descent that checks levels, record counts and cycles, so a
damaged tree produces a CorruptionError rather than a hang.
"""
from __future__ import annotations

import struct
from typing import Callable, Iterator, NamedTuple

from .._backend import parsers
from ..errors import CorruptionError, FsToolError
from ..format import constants as C
from ..io import verify as V


class BtreeType(NamedTuple):
    name: str
    buftype: V.BufType
    long_ptrs: bool
    rec_len: int
    key_len: int
    # decode(buf, offset, count) -> list of record tuples
    decode: Callable
    rec_names: tuple          # field names of a record, as xfs_db prints them
    key_fmt: str              # struct format of one key
    key_names: tuple

    @property
    def hdr_len(self) -> int:
        return C.XFS_BTREE_LBLOCK_CRC_LEN if self.long_ptrs else C.XFS_BTREE_SBLOCK_CRC_LEN

    @property
    def ptr_len(self) -> int:
        return 8 if self.long_ptrs else 4

    def maxrecs(self, blocksize: int, leaf: bool) -> int:
        space = blocksize - self.hdr_len
        return space // self.rec_len if leaf else space // (self.key_len + self.ptr_len)


def _decode_inobt_sparse(buf, off, n):
    return parsers.inobt_recs(buf, off, n, True)


def _decode_inobt_full(buf, off, n):
    return parsers.inobt_recs(buf, off, n, False)


def _decode_refcount(buf, off, n):
    return list(struct.iter_unpack(">III", bytes(buf[off:off + 12 * n])))


def _decode_rmap(buf, off, n):
    return list(struct.iter_unpack(">IIQQ", bytes(buf[off:off + 24 * n])))


_ALLOC = (("startblock", "blockcount"), ">II", ("startblock", "blockcount"))
_INO = (("startino", "holemask", "count", "freecount", "free"), ">I", ("startino",))
BNOBT = BtreeType("bnobt", V.BNOBT, False, 8, 8, parsers.alloc_recs, *_ALLOC)
CNTBT = BtreeType("cntbt", V.CNTBT, False, 8, 8, parsers.alloc_recs, *_ALLOC)
INOBT_SPARSE = BtreeType("inobt", V.INOBT, False, 16, 4, _decode_inobt_sparse, *_INO)
INOBT_FULL = BtreeType("inobt", V.INOBT, False, 16, 4, _decode_inobt_full, *_INO)
FINOBT_SPARSE = BtreeType("finobt", V.FINOBT, False, 16, 4, _decode_inobt_sparse, *_INO)
FINOBT_FULL = BtreeType("finobt", V.FINOBT, False, 16, 4, _decode_inobt_full, *_INO)
REFCOUNTBT = BtreeType("refcountbt", V.REFCBT, False, 12, 4, _decode_refcount,
                       ("startblock", "blockcount", "refcount"), ">I", ("startblock",))
# the rmapbt overlaps: a node holds a low and a high key per child
RMAPBT = BtreeType("rmapbt", V.RMAPBT, False, 24, 40, _decode_rmap,
                   ("startblock", "blockcount", "owner", "offset"), ">IQQIQQ",
                   ("startblock", "owner", "offset", "high_startblock", "high_owner",
                    "high_offset"))
BMBT = BtreeType("bmbt", V.BMBT, True, 16, 8, parsers.decode_bmbt_recs,
                 ("startoff", "startblock", "blockcount", "extentflag"), ">Q", ("startoff",))


class BtreeBlock(NamedTuple):
    """One decoded btree block, as the dump and check tools want to see it."""
    daddr: int
    addr: int                # agbno (short trees) or fsbno (bmbt)
    level: int
    numrecs: int
    leftsib: int
    rightsib: int
    keys: list
    ptrs: list
    recs: list
    lsn: int = 0             # set by scan_block (checkers compare it with the log)


class BtreeReader:
    """Walks one btree.  ``addr_to_daddr`` maps a block pointer to a daddr and
    raises CorruptionError when the pointer lies outside its AG/filesystem."""

    def __init__(self, fs, bt: BtreeType, *, agno: int | None, owner: int,
                 addr_to_daddr: Callable[[int], int]):
        self.fs = fs
        self.bt = bt
        self.agno = agno
        self.owner = owner
        self.addr_to_daddr = addr_to_daddr
        self.blocksize = fs.sb.blocksize

    def read_block(self, addr: int, expect_level: int | None) -> BtreeBlock:
        bt = self.bt
        daddr = self.addr_to_daddr(addr)
        ino = self.owner if bt.long_ptrs else None
        buf = self.fs.read_meta(daddr, self.blocksize, bt.buftype, owner=self.owner,
                                agno=self.agno, block=addr, ino=ino)
        level, numrecs = struct.unpack_from(">HH", buf, 4)
        where = dict(agno=self.agno, block=addr, ino=ino)
        if expect_level is not None and level != expect_level:
            raise CorruptionError(bt.buftype.name, f"level {level}, expected {expect_level}",
                                  field="bb_level", **where)
        leaf = level == 0
        maxr = bt.maxrecs(self.blocksize, leaf)
        if numrecs > maxr:
            raise CorruptionError(bt.buftype.name, f"{numrecs} records, at most {maxr} fit",
                                  field="bb_numrecs", **where)
        if bt.long_ptrs:
            left, right = struct.unpack_from(">QQ", buf, 8)
        else:
            left, right = struct.unpack_from(">II", buf, 8)
        hdr = bt.hdr_len
        if leaf:
            return BtreeBlock(daddr, addr, level, numrecs, left, right, [], [],
                              bt.decode(buf, hdr, numrecs))
        keys = bytes(buf[hdr:hdr + numrecs * bt.key_len])
        pfmt = ">Q" if bt.long_ptrs else ">I"
        poff = hdr + maxr * bt.key_len
        ptrs = [v for (v,) in struct.iter_unpack(pfmt, bytes(buf[poff:poff + numrecs * bt.ptr_len]))]
        return BtreeBlock(daddr, addr, level, numrecs, left, right,
                          [keys[i:i + bt.key_len] for i in range(0, len(keys), bt.key_len)],
                          ptrs, [])

    def scan_block(self, addr: int, expect_level: int | None = None):
        """Read and decode one block without raising, the way a checker
        wants it: (block or None, problems), problems being (field, detail)
        for every way the block fails its verifier (magic, CRC, uuid,
        self-address, owner), the level it is expected at or its record
        count.  The block is decoded despite a bad checksum or identity (as
        xfs_repair salvages it), at the expected level when one is given,
        with the record count clamped to what fits; it is None only when it
        cannot be read or is not a block of this tree (wrong magic)."""
        bt = self.bt
        try:
            daddr = self.addr_to_daddr(addr)
        except CorruptionError as e:
            return None, [("ptr", e.detail)]
        try:
            buf = self.fs.dev.pread(daddr << C.BBSHIFT, self.blocksize)
        except FsToolError as e:
            return None, [("ptr", str(e))]
        problems = []
        bufty = bt.buftype
        (magic,) = struct.unpack_from(bufty.magic_fmt, buf, bufty.magic_off)
        if magic not in bufty.magics:
            return None, [("magic", f"bad magic 0x{magic:x}")]
        if not parsers.xfs_cksum_ok(buf, bufty.crc_off):
            problems.append(("crc", "CRC mismatch"))
        if buf[bufty.uuid_off:bufty.uuid_off + 16] != self.fs.uuid:
            problems.append(("uuid", "uuid does not match the filesystem"))
        (blkno,) = struct.unpack_from(">Q", buf, bufty.blkno_off)
        if blkno != daddr:
            problems.append(("blkno", f"records daddr {blkno}, read from {daddr}"))
        (owner,) = struct.unpack_from(bufty.owner_fmt, buf, bufty.owner_off)
        if owner != self.owner:
            problems.append(("owner", f"owner is {owner}, expected {self.owner}"))
        level, numrecs = struct.unpack_from(">HH", buf, 4)
        if expect_level is not None and level != expect_level:
            problems.append(("bb_level", f"level {level}, expected {expect_level}"))
            level = expect_level
        maxr = bt.maxrecs(self.blocksize, level == 0)
        if numrecs > maxr:
            problems.append(("bb_numrecs", f"{numrecs} records, at most {maxr} fit"))
            numrecs = maxr
        return self._decode(buf, daddr, addr, level, numrecs, maxr), problems

    def _decode(self, buf, daddr: int, addr: int, level: int, numrecs: int,
                maxr: int) -> BtreeBlock:
        bt = self.bt
        if bt.long_ptrs:
            left, right, lsn = struct.unpack_from(">QQ8xQ", buf, 8)
        else:
            left, right, lsn = struct.unpack_from(">II8xQ", buf, 8)
        hdr = bt.hdr_len
        if level == 0:
            return BtreeBlock(daddr, addr, level, numrecs, left, right, [], [],
                              bt.decode(buf, hdr, numrecs), lsn)
        kl = bt.key_len
        keys = [bytes(buf[hdr + i * kl:hdr + (i + 1) * kl]) for i in range(numrecs)]
        poff = hdr + maxr * kl
        pfmt = ">Q" if bt.long_ptrs else ">I"
        ptrs = [v for (v,) in struct.iter_unpack(pfmt, bytes(
            buf[poff:poff + numrecs * bt.ptr_len]))]
        return BtreeBlock(daddr, addr, level, numrecs, left, right, keys, ptrs, [], lsn)

    def walk(self, root_ptrs: list, root_level: int, on_problem: Callable,
             root_keys: list | None = None) -> Iterator[list]:
        """Every block below the root pointers, one row per level from the
        top down, each row in key order, as (block, key) pairs, key being
        the raw key its parent holds for it (``root_keys[i]`` for the root
        pointers, or None).  Never raises: ``on_problem(addr, level, field,
        detail)`` hears of every block that fails scan_block, of pointers
        reached twice (field "ptr", not followed again) and of a tree
        deeper than the format allows; blocks that cannot be decoded are
        left out of their row."""
        if not 1 <= root_level <= C.XFS_BTREE_MAXLEVELS:
            on_problem(None, root_level, "level", f"tree height {root_level} is not valid")
            return
        seen = set()
        keys = list(root_keys) if root_keys is not None else [None] * len(root_ptrs)
        todo = list(zip(root_ptrs, keys))
        level = root_level - 1
        while todo and level >= 0:
            row = []
            for addr, key in todo:
                if addr in seen:
                    on_problem(addr, level, "ptr", "block reached twice (cycle or cross-link)")
                    continue
                seen.add(addr)
                blk, problems = self.scan_block(addr, level)
                for field, detail in problems:
                    on_problem(addr, level, field, detail)
                if blk is not None:
                    row.append((blk, key))
            yield row
            todo = [(p, k) for blk, _ in row for p, k in zip(blk.ptrs, blk.keys)]
            level -= 1

    def blocks(self, root_ptrs: list, root_level: int) -> Iterator[BtreeBlock]:
        """Depth-first over every block below the given root pointers."""
        if root_level > C.XFS_BTREE_MAXLEVELS:
            raise CorruptionError(self.bt.buftype.name, f"tree height {root_level} is too large",
                                  agno=self.agno, field="level")
        seen = set()
        stack = [(p, root_level - 1) for p in reversed(root_ptrs)]
        while stack:
            addr, level = stack.pop()
            if addr in seen:
                raise CorruptionError(self.bt.buftype.name, "block reached twice (cycle or "
                                      "cross-link)", agno=self.agno, block=addr)
            seen.add(addr)
            blk = self.read_block(addr, level)
            yield blk
            if blk.level:
                stack.extend((p, blk.level - 1) for p in reversed(blk.ptrs))

    def levels(self, root_ptrs: list, root_level: int) -> Iterator[list]:
        """The blocks below the root pointers, one list per level from the top
        down, each in key order (siblings left to right)."""
        seen = set()
        ptrs = list(root_ptrs)
        level = root_level - 1
        while ptrs:
            if level < 0 or root_level > C.XFS_BTREE_MAXLEVELS:
                raise CorruptionError(self.bt.buftype.name, "tree deeper than its root says",
                                      agno=self.agno, field="level")
            row = []
            for addr in ptrs:
                if addr in seen:
                    raise CorruptionError(self.bt.buftype.name, "block reached twice (cycle "
                                          "or cross-link)", agno=self.agno, block=addr)
                seen.add(addr)
                row.append(self.read_block(addr, level))
            yield row
            ptrs = [p for blk in row for p in blk.ptrs]
            level -= 1

    def records(self, root_ptrs: list, root_level: int) -> Iterator:
        for blk in self.blocks(root_ptrs, root_level):
            if blk.level == 0:
                yield from blk.recs

    def ag_records(self, root: int, levels: int) -> Iterator:
        """Records of an AG btree given the root block and the tree height."""
        return self.records([root], levels)
