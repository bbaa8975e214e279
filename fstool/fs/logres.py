"""The smallest log the kernel accepts for a geometry: the largest
transaction reservation, as a log of three such transactions
(xfs_log_calc_minimum_size), computed the way mkfs.xfs 6.10.1 and the
kernel compute it.

Every figure below is a byte count of what one transaction may log: whole
buffers (each with a 128-byte log item overhead), inodes, and the blocks a
worst-case btree split touches.  The formulas are those of the kernel's
transaction reservations (xfs_trans_resv.c) in their "minimum log size"
form, which keeps the early reflink/rmap figures so that a new small
filesystem still mounts on older kernels.  A filesystem with parent pointers
(which no older kernel mounts) drops those figures: its minimum comes from
the reservations the kernel really uses, the namespace ones grown by the
attribute intents that carry the parent pointers (xfs_want_minlogsize_fixes).
"""
from __future__ import annotations

import dataclasses

from ..format import constants as C
from .btree import SBLOCK_HDR_LEN, LBLOCK_HDR_LEN, alloc_maxlevels, bmap_maxlevels, \
    rmap_maxlevels, worst_height


def space_to_height(node_min: int, leaf_blocks: int) -> int:
    """xfs_btree_space_to_height: the height of a btree that fills
    ``leaf_blocks`` blocks, nodes at ``node_min`` pointers under a root of 2."""
    if leaf_blocks < 1:
        return 0
    node_blocks, left, height = 2, leaf_blocks - 1, 1
    while node_blocks < left:
        left -= node_blocks
        node_blocks *= node_min
        height += 1
    return height

BUF_LOG_OVERHEAD = 128          # log op header + buffer log format, rounded to 128
OP_HEADER = 12                  # struct xlog_op_header
TRANS_HEADER = 16               # struct xfs_trans_header
INODE_LOG_FORMAT = 56           # struct xfs_inode_log_format
DQUOT_LOGRES = (24 + 104) * 6   # six dquots: log format + disk dquot each
DA_NODE_MAXDEPTH = 5
MAXNAMELEN = 256
OLD_REFLINK_RMAP_MAXLEVELS = 9
ICLOG_SIZE = 256 * 1024         # v2 logs: the largest log record
ICLOG_HEADER = (ICLOG_SIZE // (32 * 1024)) * C.BBSIZE
MIN_LOG_FACTOR = 3
INODE_BIG_CLUSTER_SIZE = 8192
ATTRI_LOG_FORMAT = 40           # struct xfs_attri_log_format
PARENT_REC = 12                 # struct xfs_parent_rec


def _iovec(n: int) -> int:
    """xlog_calc_iovec_len: a log region rounded up to 4 bytes."""
    return (n + 3) & ~3


# what the attribute intents of one parent pointer change add to a
# namespace transaction: the intent, the value and the name regions
PPTR_LINK = ATTRI_LOG_FORMAT + _iovec(PARENT_REC) + _iovec(MAXNAMELEN - 1)
PPTR_UNLINK = PPTR_LINK
PPTR_REPLACE = ATTRI_LOG_FORMAT + 2 * (_iovec(PARENT_REC) + _iovec(MAXNAMELEN - 1))


@dataclasses.dataclass(frozen=True)
class LogGeometry:
    """What the reservations depend on."""
    blocksize: int
    sectsize: int
    inodesize: int
    dirblocksize: int
    agblocks: int
    agblklog: int
    logsunit: int = 0           # bytes; 0 or 1 for none
    finobt: bool = True
    rmapbt: bool = False
    reflink: bool = True
    nrext64: bool = False
    parent: bool = False        # parent pointers: the corrected minimum


class _Resv:
    def __init__(self, g: LogGeometry):
        self.g = g
        bs = g.blocksize
        space = bs - SBLOCK_HDR_LEN
        self.alloc_maxlevels = alloc_maxlevels(bs, g.agblocks)
        # the early rmap+reflink figure is kept for the minimum log size,
        # but for parent pointers
        self.rmap_maxlevels = 0
        if g.rmapbt:
            if not g.reflink:
                self.rmap_maxlevels = rmap_maxlevels(bs, g.agblocks, False)
            elif g.parent:
                self.rmap_maxlevels = space_to_height(space // 44 // 2, g.agblocks)
            else:
                self.rmap_maxlevels = OLD_REFLINK_RMAP_MAXLEVELS
        self.refc_maxlevels = worst_height(space // 12 // 2, space // 8 // 2, g.agblocks)
        inopblog = (bs // g.inodesize).bit_length() - 1
        chunks = (1 << (g.agblklog + inopblog)) >> 6
        self.inobt_maxlevels = worst_height(space // 16 // 2, space // 8 // 2, chunks)
        self.bm_data = bmap_maxlevels(bs, g.nrext64, True)
        self.bm_attr = bmap_maxlevels(bs, g.nrext64, False)
        self.ialloc_blks = max(64, bs // g.inodesize) * g.inodesize // bs
        cluster = INODE_BIG_CLUSTER_SIZE * g.inodesize // 256
        self.inode_cluster_size = max(1, cluster // bs) * bs
        alloc_mxr = space // 8
        self.contig_extents = alloc_mxr - alloc_mxr // 2
        self.dir_fsbcount = g.dirblocksize // bs

    # -- building blocks -------------------------------------------------------
    @staticmethod
    def buf(n: int, size: int) -> int:
        return n * (size + BUF_LOG_OVERHEAD)

    def inode(self, n: int) -> int:
        return n * (4 * OP_HEADER + INODE_LOG_FORMAT + self.g.inodesize + 2 * LBLOCK_HDR_LEN)

    def allocfree(self, ops: int) -> int:
        blocks = ops * 2 * (2 * self.alloc_maxlevels - 1)
        if self.g.rmapbt:
            blocks += ops * (2 * self.rmap_maxlevels - 1)
        return blocks

    def refcount_blocks(self, ops: int) -> int:
        return ops * (2 * self.refc_maxlevels - 1)

    def bsz(self, n: int) -> int:
        return self.buf(n, self.g.blocksize)

    def sect(self, n: int) -> int:
        return self.buf(n, self.g.sectsize)

    def nextentadd(self, blocks: int, data: bool) -> int:
        per = self.contig_extents
        return (blocks + per - 1) // per * ((self.bm_data if data else self.bm_attr) - 1)

    def daenter(self, data: bool) -> tuple[int, int]:
        """(blocks, bmap blocks) a directory or attr btree insert may touch."""
        one = self.dir_fsbcount if data else 1
        dbs = DA_NODE_MAXDEPTH + (2 if data else 0)
        return one * dbs, dbs * self.nextentadd(one, data)

    def dirop_count(self) -> int:
        blocks, bmaps = self.daenter(True)
        return blocks + bmaps + 1

    def inobt(self) -> int:
        return self.bsz(self.inobt_maxlevels) + self.bsz(self.allocfree(1))

    def finobt(self) -> int:
        return self.inobt() if self.g.finobt else 0

    def inode_chunk(self, alloc: bool) -> int:
        res = self.bsz(self.allocfree(1))
        if alloc:                       # v5: inode buffers are ordered
            return res
        return res + self.buf(self.ialloc_blks, 0)

    def iunlink_remove(self) -> int:
        return self.sect(1) + 2 * self.inode_cluster_size

    def iunlink_add(self) -> int:
        return self.sect(1) + self.inode_cluster_size

    def icreate_alloc(self) -> int:
        return (self.sect(2) + self.g.sectsize + self.inode_chunk(True) + self.inobt()
                + self.finobt())

    def create_modify(self) -> int:
        return (self.inode(2) + self.sect(1) + self.g.blocksize + self.bsz(self.dirop_count())
                + self.finobt())

    # -- the reservations: (log bytes, log count) ------------------------------------
    def refcountbt(self, ops: int) -> int:
        """A refcount update in a transaction of its own (the runtime t4)."""
        if not self.g.reflink:
            return 0
        return self.sect(ops) + self.bsz(self.refcount_blocks(ops))

    def write(self) -> int:
        t1 = (self.inode(1) + self.bsz(self.bm_data) + self.sect(3)
              + self.bsz(self.allocfree(2)))
        t3 = self.sect(5) + self.bsz(self.allocfree(2))
        if self.g.parent:
            return DQUOT_LOGRES + max(t1, t3, self.refcountbt(1))
        if self.g.reflink:
            adj = self.bsz(self.refcount_blocks(2))
            t1 += adj
            t3 += adj
        return DQUOT_LOGRES + max(t1, t3)

    def itruncate(self) -> int:
        t1 = self.inode(1) + self.bsz(self.bm_data + 1)
        t2 = self.sect(9) + self.bsz(self.allocfree(4))
        if self.g.parent:
            return DQUOT_LOGRES + max(t1, t2, self.refcountbt(2))
        if self.g.reflink:
            t2 += self.bsz(self.refcount_blocks(4))
        return DQUOT_LOGRES + max(t1, t2)

    def attrrm(self) -> int:
        g = self.g
        return DQUOT_LOGRES + max(self.inode(1) + self.bsz(DA_NODE_MAXDEPTH)
                                  + g.blocksize * self.bm_attr + self.buf(self.bm_data, 0),
                                  self.sect(5) + self.bsz(self.allocfree(2)))

    def write_count(self) -> int:
        g = self.g
        if not g.parent:
            return 8 if g.reflink else 2
        # the runtime count: one more for the BUIs, the CUIs, the RUIs
        return 2 + int(g.reflink or g.rmapbt) + int(g.reflink) + int(g.rmapbt)

    def attrsetm(self) -> int:
        return DQUOT_LOGRES + self.inode(1) + self.sect(1) + self.bsz(DA_NODE_MAXDEPTH)

    def attrsetrt(self) -> int:
        return self.sect(1) + self.bsz(self.bm_attr)

    def all(self) -> dict:
        g = self.g
        write_count = self.write_count()
        # with parent pointers each namespace transaction may set or remove
        # one (t3), logs its attribute intents and rolls as often as that
        setm, rm = (self.attrsetm(), self.attrrm()) if g.parent else (0, 0)
        roll = 3 if g.parent else 0            # XFS_ATTRSET/ATTRRM_LOG_COUNT
        link_over, unlink_over = (PPTR_LINK, PPTR_UNLINK) if g.parent else (0, 0)
        rename_over = max(PPTR_REPLACE + PPTR_UNLINK + PPTR_LINK, 2 * PPTR_REPLACE) \
            if g.parent else 0
        icreate = DQUOT_LOGRES + link_over + max(self.icreate_alloc(), self.create_modify(),
                                                 setm)
        dirop = self.bsz(self.dirop_count())
        return {
            "write": (self.write(), write_count),
            "itruncate": (self.itruncate(), write_count),
            "qm_dqalloc": (self.write() + self.buf(1, g.blocksize - 1), write_count),
            "rename": (DQUOT_LOGRES + rename_over
                       + max(self.inode(5) + self.bsz(2 * self.dirop_count()),
                             self.sect(7) + self.bsz(self.allocfree(3)), setm, rm), 2 + roll),
            "link": (DQUOT_LOGRES + self.iunlink_remove() + link_over
                     + max(self.inode(2) + dirop, self.sect(3) + self.bsz(self.allocfree(1)),
                           setm), 2 + roll),
            "remove": (DQUOT_LOGRES + self.iunlink_add() + unlink_over
                       + max(self.inode(2) + dirop, self.sect(4) + self.bsz(self.allocfree(2)),
                             rm), 2 + roll),
            "create": (icreate, 2 + roll),
            "mkdir": (icreate, 3 + roll),
            "symlink": (icreate + self.buf(1, C.XFS_SYMLINK_MAXLEN), 3 + roll),
            "create_tmpfile": (DQUOT_LOGRES + self.icreate_alloc() + self.iunlink_add(), 2),
            "ifree": (DQUOT_LOGRES + self.inode(1) + self.sect(3) + self.iunlink_remove()
                      + self.inode_chunk(False) + self.inobt() + self.finobt(), 2),
            "addafork": (DQUOT_LOGRES + self.inode(1) + self.sect(2)
                         + self.buf(1, g.dirblocksize)
                         + self.bsz(self.nextentadd(self.dir_fsbcount, True) + 1)
                         + self.bsz(self.allocfree(1)), 2),
            "attrinval": (max(self.inode(1) + self.bsz(self.bm_attr),
                              self.sect(9) + self.bsz(self.allocfree(4))), 1),
            "attrsetm": (self.attrsetm(), 3),
            "attrrm": (self.attrrm(), 3),
            "growrtalloc": (self.sect(2) + self.bsz(self.bm_data) + self.inode(1)
                            + self.bsz(self.allocfree(1)), 2),
            "growdata": (self.sect(3) + self.bsz(self.allocfree(1)), 2),
            "ichange": (DQUOT_LOGRES + self.inode(1) + self.sect(1), 0),
            "growrtzero": (self.bsz(1), 0),
        }

    def attr_space(self) -> int:
        """The largest local xattr set, split into remote value blocks."""
        bs = self.g.blocksize
        size = (bs >> 1) + (bs >> 2) - MAXNAMELEN - 1
        blocks, bmaps = self.daenter(False)
        nblks = blocks + bmaps + -(-size // bs)
        # the kernel passes the byte count where blocks are meant, but for
        # parent pointers (the corrected minimum)
        nblks += self.nextentadd(-(-size // bs) if self.g.parent else size, False)
        return self.attrsetm() + self.attrsetrt() * nblks

    def max_reservation(self) -> tuple[int, int]:
        best, space = (0, 0), 0
        for logres, count in self.all().values():
            tmp = logres * count if count > 1 else logres
            if tmp > space:
                space, best = tmp, (logres, count)
        attr = self.attr_space()
        if attr > space:
            best = (attr, 3)
        return best


def unit_reservation(logres: int, logsunit: int) -> int:
    """A transaction's bytes in the log: its reservation plus op and record
    headers and the padding of its data and commit record
    (xfs_log_calc_unit_res)."""
    unit = logres + 2 * OP_HEADER + TRANS_HEADER
    space = ICLOG_SIZE - ICLOG_HEADER
    headers = -(-unit // space)
    unit += OP_HEADER * headers
    while not headers or -(-unit // space) > headers:
        unit += OP_HEADER
        headers += 1
    unit += ICLOG_HEADER * headers + ICLOG_HEADER
    unit += 2 * logsunit if logsunit > 1 else 2 * C.BBSIZE
    return unit


def min_log_blocks(g: LogGeometry) -> int:
    """The kernel's minimum log size in blocks for this geometry, before
    mkfs.xfs's floors (512 blocks, and 10 MiB from 1 GiB up)."""
    logres, count = _Resv(g).max_reservation()
    need = unit_reservation(logres, g.logsunit)
    if count > 1:
        need *= count
    bbs = -(-need // C.BBSIZE)
    if g.logsunit > 1:
        lsunit = g.logsunit // C.BBSIZE
        bbs = -(-bbs // lsunit) * lsunit + 2 * lsunit
    else:
        bbs += 2 * C.BBSIZE     # (sic: bytes added as basic blocks, as the kernel does)
    bbs *= MIN_LOG_FACTOR
    per_block = g.blocksize // C.BBSIZE
    return -(-bbs // per_block)
