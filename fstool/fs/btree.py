"""One descriptor per XFS btree, and the read walk every tool shares.

A :class:`BtreeType` describes a tree completely: its buffer type (magic,
CRC, owner and LSN offsets for the verifiers), its block format (short
pointers for the per-AG trees: bnobt, cntbt, inobt, finobt, refcountbt,
rmapbt; long pointers for the bmbt, rooted in an inode fork), and its
record and key codec (packing, ordering, the low key of a block).  The same
descriptor drives reading (:class:`BtreeReader` here: check, dump, stats,
extent maps), changing and bulk loading (:mod:`fstool.fs.btree_write`:
the write path, repair, mkfs).

The read walk is a depth-first descent that checks levels, record counts
and cycles, so a damaged tree produces a CorruptionError rather than a hang.
"""
from __future__ import annotations

import struct
from typing import Callable, Iterator, NamedTuple, Sequence

from .._backend import parsers
from ..errors import CorruptionError, FsToolError, InvalidArgument
from ..format import constants as C
from ..io import verify as V

NULLAGBLOCK = C.NULLAGBLOCK
NULLFSBLOCK = C.NULLFSBLOCK
SBLOCK_HDR_LEN = C.XFS_BTREE_SBLOCK_CRC_LEN       # 56
LBLOCK_HDR_LEN = C.XFS_BTREE_LBLOCK_CRC_LEN       # 72

# v5 short-form header: magic, level, numrecs, leftsib, rightsib, blkno, lsn,
# uuid, owner, crc
_SHDR = struct.Struct(">IHHIIQQ16sII")
# v5 long-form header: ... 64-bit siblings, blkno, lsn, uuid, 64-bit owner, crc, pad
_LHDR = struct.Struct(">IHHQQQQ16sQII")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_BMREC = struct.Struct(">QQ")


# --------------------------------------------------------------------------
# Record codecs
# --------------------------------------------------------------------------

class Codec:
    """Packing and ordering of one tree's records and keys.

    ``key(rec)`` is the comparison key.  ``pack_key``/``unpack_key`` handle
    the on-disk key fields in disk order (``BtreeType.key_names``): for the
    free-space trees that is ``(startblock, blockcount)`` for both bnobt
    and cntbt, although the bnobt orders by startblock alone and the cntbt by
    ``(blockcount, startblock)``.  The node key for a child is built from the
    child's first record (``rec_key_bytes``), so a bnobt key carries that
    record's length exactly as the kernel writes it.
    """
    name: str
    rec_len: int
    key_len: int
    # an overlapping tree (the rmapbt) keys each child by its lowest low key
    # and its highest high key (:meth:`block_key`)
    overlapping = False

    def __init__(self, name: str, rec_fmt: str, key_fmt: str):
        self.name = name
        self._rec = struct.Struct(rec_fmt)
        self._dkey = struct.Struct(key_fmt)
        self.rec_len = self._rec.size
        self.key_len = self._dkey.size
        # comparison key of the packed record / node key at an offset
        self.rec_key_at = self._rec_key_at
        self.node_key_at = self._node_key_at

    # -- interface -------------------------------------------------------
    def key(self, rec) -> tuple:
        raise NotImplementedError

    def pack_rec(self, rec) -> bytes:
        return self._rec.pack(*rec)

    def unpack_rec(self, buf, off: int) -> tuple:
        return self._rec.unpack_from(buf, off)

    def unpack_recs(self, buf, off: int, n: int) -> list:
        rl = self.rec_len
        return list(self._rec.iter_unpack(bytes(buf[off:off + n * rl])))

    def pack_recs(self, recs: Sequence) -> bytes:
        pack = self.pack_rec
        return b"".join([pack(r) for r in recs])

    def pack_key(self, key) -> bytes:
        return self._dkey.pack(*key)

    def unpack_key(self, buf, off: int) -> tuple:
        return self._dkey.unpack_from(buf, off)

    def rec_key_bytes(self, buf, off: int) -> bytes:
        """On-disk node key for a child whose first record is at ``off``."""
        return bytes(buf[off:off + self.key_len])

    def _rec_key_at(self, buf, off):
        raise NotImplementedError

    def _node_key_at(self, buf, off):
        raise NotImplementedError


class _BnoCodec(Codec):
    def __init__(self):
        super().__init__("bnobt", ">II", ">II")
        self.rec_key_at = self.node_key_at = struct.Struct(">I").unpack_from

    def key(self, rec):
        return (rec[0],)


class _CntCodec(Codec):
    def __init__(self):
        super().__init__("cntbt", ">II", ">II")
        unpack = self._rec.unpack_from

        def swapped(buf, off):
            start, count = unpack(buf, off)
            return (count, start)
        self.rec_key_at = self.node_key_at = swapped

    def key(self, rec):
        return (rec[1], rec[0])


class _InoCodec(Codec):
    """inobt/finobt.  Sparse-inode records keep holemask and count; the full
    (pre-sparse) format has a 32-bit freecount there and 64-inode chunks."""

    def __init__(self, sparse: bool):
        super().__init__("inobt", ">IHBBQ" if sparse else ">IIQ", ">I")
        self.sparse = sparse
        self.rec_key_at = self.node_key_at = self._dkey.unpack_from

    def key(self, rec):
        return (rec[0],)

    def pack_rec(self, rec):
        if self.sparse:
            return self._rec.pack(*rec)
        if rec[1] or rec[2] != 64:
            raise InvalidArgument(f"inobt: chunk {rec[0]} has holes, which need the "
                                  "sparse-inode record format")
        return self._rec.pack(rec[0], rec[3], rec[4])

    def unpack_rec(self, buf, off):
        if self.sparse:
            return self._rec.unpack_from(buf, off)
        startino, freecount, free = self._rec.unpack_from(buf, off)
        return (startino, 0, 64, freecount, free)

    def unpack_recs(self, buf, off, n):
        raw = self._rec.iter_unpack(bytes(buf[off:off + 16 * n]))
        if self.sparse:
            return list(raw)
        return [(s, 0, 64, f, m) for s, f, m in raw]


def worst_height(leaf_min: int, node_min: int, records: int) -> int:
    """The height a btree may need for ``records`` with every block only
    half full (xfs_btree_compute_maxlevels)."""
    level = 1
    blocks = -(-records // leaf_min)
    while blocks > 1:
        blocks = -(-blocks // node_min)
        level += 1
    return level


def alloc_maxlevels(blocksize: int, agblocks: int) -> int:
    """The free-space btrees' worst height in an AG (m_alloc_maxlevels):
    8-byte records, 12-byte keys and pointers, half full."""
    space = blocksize - SBLOCK_HDR_LEN
    return worst_height(space // 8 // 2, space // 12 // 2, (agblocks + 1) // 2)


def rmap_maxlevels(blocksize: int, agblocks: int, reflink: bool) -> int:
    """The rmapbt's worst height (m_rmap_maxlevels): 24-byte records,
    2 x 20-byte keys and a 4-byte pointer; with reflink as many levels as
    the format allows."""
    if reflink:
        return C.XFS_BTREE_MAXLEVELS
    space = blocksize - SBLOCK_HDR_LEN
    return worst_height(space // 24 // 2, space // 44 // 2, agblocks)


def agfl_prefill(release: str, blocksize: int, agblocks: int, rmapbt: bool,
                 reflink: bool) -> int:
    """The blocks mkfs.xfs puts on a new AGFL (xfs_alloc_min_freelist for
    one-level trees): enough for a split of the free-space btrees and the
    rmapbt.  Since xfsprogs 6.5 a tree counts 2 * new height - 2 blocks, so
    trees that can never grow past one level (64 KiB blocks in a small AG)
    need none."""
    levels = [alloc_maxlevels(blocksize, agblocks)] * 2
    if rmapbt:
        levels.append(rmap_maxlevels(blocksize, agblocks, reflink))
    if release == "6.1":
        return sum(min(2, top) for top in levels)
    return sum(min(2, top) * 2 - 2 for top in levels)


def bmap_maxlevels(blocksize: int, nrext64: bool, data: bool) -> int:
    """A fork's bmbt worst height (m_bm_maxlevels): as many extents as the
    inode's extent counter holds, 16-byte records and half-full blocks under
    a root in the inode (3 pointers in the data fork, 2 in the attr fork)."""
    maxleaf = ((1 << 48) - 1 if nrext64 else (1 << 31) - 1) if data else \
        ((1 << 32) - 1 if nrext64 else (1 << 15) - 1)
    maxroot = 3 if data else 2
    half = (blocksize - LBLOCK_HDR_LEN) // 16 // 2
    blocks = -(-maxleaf // half)
    level = 1
    while blocks > 1:
        blocks = 1 if blocks <= maxroot else -(-blocks // half)
        level += 1
    return level


def pack_bmbt_rec(startoff: int, startblock: int, blockcount: int, unwritten: int = 0) -> bytes:
    """The 128-bit packed extent: bit 127 unwritten, 126..73 file offset,
    72..21 start block, 20..0 length."""
    if (startoff >> 54 or startblock >> 52 or blockcount >> 21 or blockcount == 0
            or unwritten not in (0, 1)):
        raise InvalidArgument(f"extent ({startoff}, {startblock}, {blockcount}, "
                              f"{unwritten}) does not fit a bmbt record")
    l0 = (unwritten << 63) | (startoff << 9) | (startblock >> 43)
    l1 = ((startblock & 0x7FFFFFFFFFF) << 21) | blockcount
    return _BMREC.pack(l0, l1)


class _BmbtCodec(Codec):
    """bmbt: packed extents, keyed by file offset."""

    def __init__(self):
        super().__init__("bmbt", ">QQ", ">Q")
        self.node_key_at = self._dkey.unpack_from

        def rec_key_at(buf, off):
            return ((_U64.unpack_from(buf, off)[0] >> 9) & 0x3FFFFFFFFFFFFF,)
        self.rec_key_at = rec_key_at

    def key(self, rec):
        return (rec[0],)

    def pack_rec(self, rec):
        return pack_bmbt_rec(*rec)

    def unpack_rec(self, buf, off):
        l0, l1 = _BMREC.unpack_from(buf, off)
        return ((l0 >> 9) & 0x3FFFFFFFFFFFFF, ((l0 & 0x1FF) << 43) | (l1 >> 21),
                l1 & 0x1FFFFF, l0 >> 63)

    def unpack_recs(self, buf, off, n):
        return parsers.decode_bmbt_recs(buf, off, n)

    def rec_key_bytes(self, buf, off):
        return _U64.pack(self.rec_key_at(buf, off)[0])




class _RefcountCodec(Codec):
    def __init__(self):
        super().__init__("refcountbt", ">III", ">I")
        self.rec_key_at = self.node_key_at = self._dkey.unpack_from

    def key(self, rec):
        return (rec[0],)


class _RmapCodec(Codec):
    """rmapbt: (startblock, blockcount, owner, offset) keyed by (startblock,
    owner, offset), the offset with its attr-fork and bmbt-block bits but
    not the unwritten one (a record's attribute, not part of its key), as
    the kernel compares keys.  The tree overlaps, so
    a node holds a low and a high key per child (40 bytes, ``key_len``);
    ordering uses the low key; ``rec_key_bytes`` gives the low and high
    key of the one record at ``off``."""

    def __init__(self):
        super().__init__("rmapbt", ">IIQQ", ">IQQIQQ")
        unpack = self._rec.unpack_from
        mask = ~C.XFS_RMAP_OFF_UNWRITTEN

        def rec_key(buf, off):
            s, _n, o, f = unpack(buf, off)
            return (s, o, f & mask)
        self.rec_key_at = rec_key
        low = struct.Struct(">IQQ").unpack_from

        def node_key(buf, off):
            s, o, f = low(buf, off)
            return (s, o, f & mask)
        self.node_key_at = node_key

    def key(self, rec):
        return (rec[0], rec[2], rec[3] & ~C.XFS_RMAP_OFF_UNWRITTEN)

    overlapping = True
    _HIGH = struct.Struct(">IQQ")

    def rec_key_bytes(self, buf, off):
        s, n, o, f = self._rec.unpack_from(buf, off)
        # the unwritten flag is an attribute of the record, not of its key
        f &= ~C.XFS_RMAP_OFF_UNWRITTEN
        # the high key: the last block; the last file offset for a fork
        # mapping (not for bmbt blocks, nor non-inode owners)
        last = f if o >> 63 or f >> 62 & 1 else f + n - 1
        return self._dkey.pack(s, o, f, s + n - 1, o, last)

    def block_key(self, keys) -> bytes:
        """The key of a block whose records or children have ``keys``: the
        first low key and the greatest high key (startblock, owner, offset
        compared unsigned, as xfs_btree_get_*_keys_overlapped do)."""
        mask = ~C.XFS_RMAP_OFF_UNWRITTEN
        unpack = self._HIGH.unpack_from

        def high(k):
            s, o, f = unpack(k, 20)
            return (s, o, f & mask)
        top = max(keys, key=high)
        return bytes(keys[0][:20]) + bytes(top[20:40])

    def entries_key(self, buf, off: int, n: int, leaf: bool) -> bytes:
        """:meth:`block_key` of the ``n`` records (``leaf``) or node keys of a
        block, read in place (the greatest high key found natively)."""
        low = self.rec_key_bytes(buf, off)[:20] if leaf else bytes(buf[off:off + 20])
        return low + self._HIGH.pack(*parsers.rmap_high_key(buf, off, n, leaf))


# --------------------------------------------------------------------------
# Block formats
# --------------------------------------------------------------------------

class BlockForm:
    """Short (per-AG, 32-bit pointers) or long (bmbt, 64-bit) block format."""

    def __init__(self, long_ptrs: bool):
        self.long = long_ptrs
        self.hdr = LBLOCK_HDR_LEN if long_ptrs else SBLOCK_HDR_LEN
        self.ptr = _U64 if long_ptrs else _U32
        self.ptr_len = self.ptr.size
        self.null = NULLFSBLOCK if long_ptrs else NULLAGBLOCK
        self.sibs = struct.Struct(">QQ" if long_ptrs else ">II")
        self.right_off = 16 if long_ptrs else 12
        self.crc_off = (C.XFS_BTREE_LBLOCK_CRC_OFF if long_ptrs
                        else C.XFS_BTREE_SBLOCK_CRC_OFF)

    def init_header(self, buf, magic, level, numrecs, left, right, daddr, uuid, owner):
        if self.long:
            _LHDR.pack_into(buf, 0, magic, level, numrecs, left, right, daddr, 0, uuid,
                            owner, 0, 0)
        else:
            _SHDR.pack_into(buf, 0, magic, level, numrecs, left, right, daddr, 0, uuid,
                            owner, 0)


SHORT = BlockForm(False)
LONG = BlockForm(True)


# --------------------------------------------------------------------------
# Descriptors
# --------------------------------------------------------------------------

class BtreeType(NamedTuple):
    name: str
    buftype: V.BufType
    magic: int
    long_ptrs: bool
    codec: Codec
    # decode(buf, offset, count) -> list of record tuples (bulk, native)
    decode: Callable
    rec_names: tuple          # field names of a record, as xfs_db prints them
    key_fmt: str              # struct format of one key
    key_names: tuple

    @property
    def rec_len(self) -> int:
        return self.codec.rec_len

    @property
    def key_len(self) -> int:
        return self.codec.key_len

    @property
    def form(self) -> BlockForm:
        return LONG if self.long_ptrs else SHORT

    @property
    def hdr_len(self) -> int:
        return LBLOCK_HDR_LEN if self.long_ptrs else SBLOCK_HDR_LEN

    @property
    def ptr_len(self) -> int:
        return 8 if self.long_ptrs else 4

    def maxrecs(self, blocksize: int, leaf: bool) -> int:
        """Entries that fit one block (the kernel's get_maxrecs)."""
        space = blocksize - self.hdr_len
        return space // self.rec_len if leaf else space // (self.key_len + self.ptr_len)


def _decode_inobt_sparse(buf, off, n):
    return parsers.inobt_recs(buf, off, n, True)


def _decode_inobt_full(buf, off, n):
    return parsers.inobt_recs(buf, off, n, False)


def _decode_refcount(buf, off, n):
    return list(struct.iter_unpack(">III", bytes(buf[off:off + 12 * n])))


def _decode_rmap(buf, off, n):
    return parsers.rmap_recs(buf, off, n)


BNO_CODEC = _BnoCodec()
CNT_CODEC = _CntCodec()
INO_CODEC = _InoCodec(sparse=True)           # inobt and finobt, sparse inodes
INO_CODEC_SPARSE = INO_CODEC
INO_CODEC_FULL = _InoCodec(sparse=False)     # inobt and finobt without sparse inodes
BMBT_CODEC = _BmbtCodec()
REFCOUNT_CODEC = _RefcountCodec()
RMAP_CODEC = _RmapCodec()

_ALLOC = (("startblock", "blockcount"), ">II", ("startblock", "blockcount"))
_INO = (("startino", "holemask", "count", "freecount", "free"), ">I", ("startino",))
BNOBT = BtreeType("bnobt", V.BNOBT, C.XFS_ABTB_CRC_MAGIC, False, BNO_CODEC,
                  parsers.alloc_recs, *_ALLOC)
CNTBT = BtreeType("cntbt", V.CNTBT, C.XFS_ABTC_CRC_MAGIC, False, CNT_CODEC,
                  parsers.alloc_recs, *_ALLOC)
INOBT_SPARSE = BtreeType("inobt", V.INOBT, C.XFS_IBT_CRC_MAGIC, False, INO_CODEC_SPARSE,
                         _decode_inobt_sparse, *_INO)
INOBT_FULL = BtreeType("inobt", V.INOBT, C.XFS_IBT_CRC_MAGIC, False, INO_CODEC_FULL,
                       _decode_inobt_full, *_INO)
FINOBT_SPARSE = BtreeType("finobt", V.FINOBT, C.XFS_FIBT_CRC_MAGIC, False, INO_CODEC_SPARSE,
                          _decode_inobt_sparse, *_INO)
FINOBT_FULL = BtreeType("finobt", V.FINOBT, C.XFS_FIBT_CRC_MAGIC, False, INO_CODEC_FULL,
                        _decode_inobt_full, *_INO)
REFCOUNTBT = BtreeType("refcountbt", V.REFCBT, C.XFS_REFC_CRC_MAGIC, False, REFCOUNT_CODEC,
                       _decode_refcount, ("startblock", "blockcount", "refcount"), ">I",
                       ("startblock",))
# the rmapbt overlaps: a node holds a low and a high key per child
RMAPBT = BtreeType("rmapbt", V.RMAPBT, C.XFS_RMAP_CRC_MAGIC, False, RMAP_CODEC, _decode_rmap,
                   ("startblock", "blockcount", "owner", "offset"), ">IQQIQQ",
                   ("startblock", "owner", "offset", "high_startblock", "high_owner",
                    "high_offset"))
BMBT = BtreeType("bmbt", V.BMBT, C.XFS_BMAP_CRC_MAGIC, True, BMBT_CODEC,
                 parsers.decode_bmbt_recs,
                 ("startoff", "startblock", "blockcount", "extentflag"), ">Q", ("startoff",))


def inobt_type(sparse: bool, free: bool = False) -> BtreeType:
    if free:
        return FINOBT_SPARSE if sparse else FINOBT_FULL
    return INOBT_SPARSE if sparse else INOBT_FULL


def init_block(bt: BtreeType, buf, level: int, numrecs: int, daddr: int, uuid: bytes,
               owner: int, left: int | None = None, right: int | None = None) -> None:
    """Write a v5 block header for ``bt`` (LSN and CRC are the write
    verifier's)."""
    form = bt.form
    form.init_header(buf, bt.magic, level, numrecs, form.null if left is None else left,
                     form.null if right is None else right, daddr, uuid, owner)


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
        maxr = bt.maxrecs(self.blocksize, level == 0)
        if numrecs > maxr:
            raise CorruptionError(bt.buftype.name, f"{numrecs} records, at most {maxr} fit",
                                  field="bb_numrecs", **where)
        return self._decode(buf, daddr, addr, level, numrecs, maxr)

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
             root_keys: list | None = None, scan: Callable | None = None) -> Iterator[list]:
        """Every block below the root pointers, one row per level from the
        top down, each row in key order, as (block, key) pairs, key being
        the raw key its parent holds for it (``root_keys[i]`` for the root
        pointers, or None).  Never raises: ``on_problem(addr, level, field,
        detail)`` hears of every block that fails scan_block, of pointers
        reached twice (field "ptr", not followed again) and of a tree
        deeper than the format allows; blocks that cannot be decoded are
        left out of their row.  ``scan(addr, level)`` reads a block
        (:meth:`scan_block` unless given)."""
        scan = scan or self.scan_block
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
                blk, problems = scan(addr, level)
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
        down, each in key order (siblings left to right): :meth:`walk`, with
        blocks read through the filesystem's verified cache (so a write
        session sees its own changes) and the first problem raised as a
        CorruptionError."""
        def fail(addr, level, field, detail):
            raise CorruptionError(self.bt.buftype.name, detail, agno=self.agno, block=addr,
                                  field=field, ino=self.owner if self.bt.long_ptrs else None)
        def strict(addr, level):
            return self.read_block(addr, level), ()
        for row in self.walk(root_ptrs, root_level, fail, scan=strict):
            yield [blk for blk, _key in row]

    def records(self, root_ptrs: list, root_level: int) -> Iterator:
        for blk in self.blocks(root_ptrs, root_level):
            if blk.level == 0:
                yield from blk.recs

    def ag_records(self, root: int, levels: int) -> Iterator:
        """Records of an AG btree given the root block and the tree height."""
        return self.records([root], levels)
