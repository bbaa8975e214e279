"""Building inode forks on the write path: file data, block maps, planned
metadata blocks (directories, xattrs, symlinks) and the attr fork offset.

Everything here allocates through a :class:`~fstool.ns.writer.Writer`'s
allocators inside its open transaction.  Metadata blocks are buffers of the
transaction (new ones are written in place before the checkpoint that
refers to them); file data is written straight to the image, into blocks the
transaction allocated, which the image only refers to once it commits.
"""
from __future__ import annotations

import bisect
import os
import stat

from ..alloc import rmap as R
from ..alloc.space import MAXEXTLEN
from ..errors import FsToolError, ImageError
from ..format import constants as C
from ..fs import btree_write as BW
from ..fs.btree import pack_bmbt_rec
from ..io import verify as V
from .forkplan import ForkPlan

BMBT_REC = 16
IO_CHUNK = 1 << 20
SMALL_COPY = 64 << 10   # file data up to this size is read and written, not copied by the kernel
MINABTPTRS = 2          # an attr fork btree root holds at least this many pointers
MINDBTPTRS = 3          # ... and a data fork btree root this many


def bmdr_space(nptrs: int) -> int:
    """Bytes of an in-inode btree root with ``nptrs`` keys and pointers."""
    return 4 + nptrs * 16


def pack_extents(extents) -> bytes:
    """(startoff, fsbno, length) extents as packed bmbt records."""
    return b"".join(pack_bmbt_rec(o, b, n) for o, b, n in extents)


def merge_extents(extents) -> list:
    """Join logically and physically contiguous (startoff, fsbno, len) runs,
    keeping each under the record's length limit."""
    out = []
    for o, b, n in sorted(extents):
        if out:
            po, pb, pn = out[-1]
            if po + pn == o and pb + pn == b and pn + n <= MAXEXTLEN:
                out[-1] = (po, pb, pn + n)
                continue
        out.append((o, b, n))
    return out


class Fork:
    """What one fork of an inode ends up as."""
    __slots__ = ("fmt", "literal", "nextents", "blocks")

    def __init__(self, fmt: int, literal: bytes = b"", nextents: int = 0, blocks: int = 0):
        self.fmt = fmt
        self.literal = literal
        self.nextents = nextents
        self.blocks = blocks          # fs blocks owned: mapped blocks plus bmbt blocks


def map_fork(w, ino: int, extents: list, space: int, *, attr: bool = False,
             reuse: list | None = None) -> Fork:
    """Record an extent list in a fork of ``space`` bytes: inline extent
    records when they fit, else a bmbt whose root lives in the inode (its
    blocks taken first from ``reuse``, a list the call empties as it goes:
    the blocks of the tree it replaces)."""
    extents = merge_extents(extents)
    mapped = sum(n for _o, _b, n in extents)
    if len(extents) * BMBT_REC <= space:
        return Fork(C.XFS_DINODE_FMT_EXTENTS, pack_extents(extents), len(extents), mapped)
    store = BmbtStore(w, extents[0][1], reuse, owner=R.bmbt(ino, attr))
    root, _height, blocks = BW.bulk_load_bmbt([(o, b, n, 0) for o, b, n in extents],
                                              ino=ino, uuid=w.uuid,
                                              blocksize=w.sb.blocksize, root_space=space,
                                              store=store)
    return Fork(C.XFS_DINODE_FMT_BTREE, root, len(extents), mapped + len(blocks))


def put_data_fork(d: dict, buf: bytearray, fork: Fork, space: int, size: int) -> None:
    """Lay a new data ``fork`` into an inode: its literal bytes into the raw
    inode ``buf`` (a literal area of ``space`` bytes, the rest zeroed), its
    format and extent count and the ``size`` into the unpacked core ``d``."""
    c = C.XFS_DINODE_CORE_SIZE
    buf[c:c + space] = bytes(space)
    buf[c:c + len(fork.literal)] = fork.literal
    d["di_format"] = fork.fmt
    if d["di_flags2"] & C.XFS_DIFLAG2_NREXT64:
        d["di_big_nextents"] = fork.nextents
    else:
        d["di_nextents"] = fork.nextents
    d["di_size"] = size


class BmbtStore:
    """Blocks of a file's bmbt, through the open transaction (new ones
    allocated near the file, owned by ``owner``: the fork's bmbt)."""

    def __init__(self, w, near: int, reuse: list | None = None, *, owner: R.Owner):
        self.w = w
        self.blocksize = w.sb.blocksize
        self.near = near
        self.reuse = reuse
        self.reused = set()
        self.owner = owner

    def daddr(self, addr: int) -> int:
        return self.w.fs.fsb_to_daddr(addr)

    def alloc(self, near: int | None = None) -> int:
        if self.reuse:
            addr = self.reuse.pop(0)
            self.reused.add(addr)
            return addr
        fsbno, _n = self.w.space.alloc_blocks(self.near if near is None else near, 1, 1,
                                               owner=self.owner)
        self.near = fsbno + 1
        return fsbno

    def new(self, addr: int) -> bytearray:
        if addr in self.reused:
            # a block of the tree being replaced: changed in place, so that an
            # abort puts the old tree back
            data = self.w.tx.read_buf(self.daddr(addr), self.blocksize, V.BMBT).data
            data[:] = bytes(len(data))
            return data
        return self.w.tx.get_buf(self.daddr(addr), self.blocksize, V.BMBT).data

    def read(self, addr: int) -> bytearray:
        return self.w.tx.read_buf(self.daddr(addr), self.blocksize, V.BMBT).data

    def dirty(self, addr: int) -> None:
        """Changes are found by comparing with the image's copy: nothing to do."""

    def free(self, addr: int) -> None:
        self.w.space.free_extent(addr, 1, owner=self.owner)


def _old_block(old_map: list, lblk: int, nblocks: int):
    """The physical block holding logical blocks [lblk, lblk+nblocks) in an
    old extent list, when one extent covers them all; else None."""
    i = bisect.bisect_right(old_map, (lblk, 1 << 64)) - 1
    if i < 0:
        return None
    o, b, n = old_map[i][:3]
    if o <= lblk and lblk + nblocks <= o + n:
        return b + (lblk - o)
    return None


def place_plan(w, plan: ForkPlan, near_fsb: int, reuse: list | None = None, *,
               owner: R.Owner):
    """Allocate blocks for every planned block (runs of consecutive logical
    blocks together), put the finished buffers into the transaction, and
    return the extents (startoff, fsbno, length).  ``owner`` is the fork the
    blocks belong to, at file offset 0 (``rmap.fork(ino, 0, attr)``).

    With ``reuse`` (the fork's old extent list), a planned block whose
    logical range the old fork mapped keeps that physical block: the
    committed image still uses it, so it is changed (and logged) rather
    than written anew.  Returns (extents, set of reused fsbnos) in that
    case."""
    tx = w.tx
    fs = w.fs
    bs = w.sb.blocksize
    blocks = sorted(plan.blocks, key=lambda b: b.lblk)
    extents = []
    reused = set()
    if reuse:
        old_map = sorted((o, b, n) for o, b, n, *_ in reuse)
        fresh = []
        for blk in blocks:
            fsbno = _old_block(old_map, blk.lblk, blk.nblocks)
            if fsbno is None:
                fresh.append(blk)
                continue
            daddr = fs.fsb_to_daddr(fsbno)
            buf = tx.read_buf(daddr, blk.nblocks * bs, blk.bt)
            buf.data[:] = blk.finish(daddr)
            extents.append((blk.lblk, fsbno, blk.nblocks))
            reused.update(range(fsbno, fsbno + blk.nblocks))
        blocks = fresh
    i = 0
    target = near_fsb
    while i < len(blocks):
        j = i
        unit = blocks[i].nblocks
        while j + 1 < len(blocks) and blocks[j + 1].lblk == blocks[j].lblk + blocks[j].nblocks \
                and blocks[j + 1].nblocks == unit:
            j += 1
        run = blocks[i:j + 1]
        total = sum(b.nblocks for b in run)
        lblk = run[0].lblk
        pos = 0
        pieces = w.space.alloc_run(target, total, unit,
                                   owner=owner.at(lblk) if owner is not None else None)
        for fsbno, n in pieces:
            extents.append((lblk + pos, fsbno, n))
            pos += n
            target = fsbno + n
        # each planned block is a whole unit inside one piece
        k = 0
        for fsbno, n in pieces:
            for off in range(0, n, unit):
                b = run[k]
                daddr = fs.fsb_to_daddr(fsbno + off)
                buf = tx.get_buf(daddr, unit * bs, b.bt)
                buf.data[:] = b.finish(daddr)
                k += 1
        i = j + 1
    return (extents, reused) if reuse is not None else extents


class DataPool:
    """Blocks allocated ahead for the data of small files: a file of at most
    ``TAKE_MAX`` blocks takes the next blocks of a run allocated near it,
    up to ``POOL_BLOCKS`` at a time, one run per AG, so that a directory of
    small files costs one allocation per run rather than one per file (each
    a walk and an edit of both free-space btrees).  What a transaction has
    not used goes back to free space by :meth:`release`: ``Namespace.finish``
    calls it (so that the directories it then encodes may use those blocks),
    and the transaction's commit does in any case."""
    POOL_BLOCKS = 1024
    TAKE_MAX = 64

    def __init__(self, w):
        self.w = w
        self.tx = None
        self.runs: dict = {}          # agno -> [next fsbno, blocks left]

    def take(self, target: int, count: int, owner: R.Owner | None = None):
        """[(fsbno, count)] for ``count`` blocks near ``target`` (mapped to
        ``owner`` in the rmapbt), or None when the file is too large for the
        pool."""
        if count > self.TAKE_MAX:
            return None
        w = self.w
        if self.tx is not w.tx:           # a new transaction: nothing held
            self.tx, self.runs = w.tx, {}
            # whatever commits the transaction, the unused blocks go back
            # first (before the writer's own hook applies the frees)
            w.tx.precommit.insert(0, self._release_at_commit)
        # a run serves the files whose target lies in one AG, wherever it
        # was found: when that AG is full it comes from another, and the
        # next file near the same target must take from it too, not
        # allocate a run of its own (each replaced run's rest is busy until
        # the commit: a run per file ran a near-full image out of space)
        key = target >> w.sb.agblklog
        runs = self.runs
        run = runs.get(key)
        if run is None or run[1] < count:
            # the run belongs to no one until files take it
            fsbno, n = w.space.alloc_blocks(target, count, max(count, self.POOL_BLOCKS),
                                            owner=None)
            # the run this one replaces goes back
            old = runs.pop(key, None)
            if old is not None and old[1]:
                w.space.free_extent(old[0], old[1], owner=None)
            run = runs[key] = [fsbno, n]
        fsbno = run[0]
        run[0] += count
        run[1] -= count
        if owner is not None:
            w.space.map_later(fsbno, count, owner)
        return [(fsbno, count)]

    def _release_at_commit(self, _tx) -> None:
        self.release()

    def release(self) -> None:
        """Give back the blocks the open transaction took and did not use."""
        w = self.w
        if self.tx is w.tx:
            for fsbno, n in self.runs.values():
                if n:
                    w.space.free_extent(fsbno, n, owner=None)
        self.tx, self.runs = None, {}


def write_data(w, ino: int, near_fsb: int, stream, size: int, data_ranges=None,
               pool=None) -> list:
    """Copy the content of file ``ino`` into newly allocated blocks and
    return its extents.  Holes (``data_ranges`` lists where data is) get no blocks; a
    small file's blocks come from ``pool`` (a DataPool) when one is given.
    A stream over a host file is copied by the kernel (``Device.copy_from``:
    shared blocks, copy_file_range, or read and write); any other stream is
    read and written here."""
    if size <= 0:
        return []
    bs = w.sb.blocksize
    blog = w.sb.blocklog
    if data_ranges is None:
        spans = [(0, (size + bs - 1) >> blog)]
    else:
        spans = []
        for off, length in sorted(data_ranges):
            if length <= 0:
                continue
            a, b = off >> blog, min((off + length + bs - 1) >> blog, (size + bs - 1) >> blog)
            if spans and a <= spans[-1][1]:
                spans[-1] = (spans[-1][0], max(spans[-1][1], b))
            elif b > a:
                spans.append((a, b))
    extents = []
    target = near_fsb
    dev = w.dev
    fd = _host_fd(stream)
    daddr = w.fs.fsb_to_daddr
    for a, b in spans:
        pieces = place_blocks(w, target, b - a, pool, owner=R.data(ino, a))
        if fd is None and data_ranges is not None:
            stream.seek(a << blog)
        lblk = a
        for fsbno, n in pieces:
            extents.append((lblk, fsbno, n))
            off = daddr(fsbno) << C.BBSHIFT
            if fd is not None:
                copy_blocks(dev, fd, lblk << blog, off, n << blog, size, bs)
            else:
                _write_blocks(dev, stream, off, n << blog)
            lblk += n
            target = fsbno + n
    return extents


def place_blocks(w, target: int, count: int, pool=None, *, owner: R.Owner) -> list:
    """[(fsbno, n)] for ``count`` new data blocks of ``owner`` (a data fork
    at the first block's offset) near ``target``: from ``pool`` (a
    DataPool) when it takes files that small, else a run of free space."""
    pieces = pool.take(target, count, owner) if pool is not None else None
    if pieces is None:
        pieces = w.space.alloc_run(target, count, owner=owner)
    return pieces


def _host_fd(stream):
    """The descriptor of a stream over a regular host file, read from
    offset 0 (what a source's ``open`` gives), else None."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):      # io.UnsupportedOperation too
        return None
    try:
        return fd if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except (OSError, TypeError):
        return None


def copy_blocks(dev, fd: int, src: int, off: int, length: int, size: int, bs: int) -> None:
    """Blocks [off, off+length) of the image from bytes [src, ...) of the
    host file: whole blocks by the kernel (a range of up to SMALL_COPY bytes
    is read and written in one go instead: cheaper than the kernel's copy
    or a shared-blocks request for so little), the last partial block read
    and padded with zeros (mapped blocks hold whatever was there before),
    and zeros where the source has meanwhile shrunk."""
    avail = max(0, min(length, size - src))
    whole = avail & ~(bs - 1) if avail > SMALL_COPY else 0
    done = dev.copy_from(fd, src, off, whole) if whole else 0
    if done == length:
        return
    tail = os.pread(fd, avail - done, src + done) if done == whole and avail > done else b""
    pad = length - done - len(tail)
    if pad <= IO_CHUNK:
        dev.pwrite_data(off + done, tail, pad)
        return
    if tail:
        dev.pwrite_data(off + done, tail, -len(tail) % bs)
        done += len(tail) + (-len(tail) % bs)
    dev.zero_range(off + done, length - done)


class CopyFailed(FsToolError):
    """A file that could not be copied into the image, named in full (the
    error may be raised after the caller has moved on to other files)."""
    located = True


def copy_named(dev, fd: int, src: int, off: int, length: int, size: int, bs: int,
               name: str, own: bool = False) -> bool:
    """:func:`copy_blocks`, its error raised as :class:`CopyFailed` naming
    the file (``name``).  Made by the device's thread behind when it takes
    the copy (``Device.can_copy_behind``), with the descriptor duplicated
    for it, or with ``own`` handed over to it: its error is then raised by
    the device's next operation.  True when ``fd`` was handed over (the
    device closes it; the caller must not), False when the caller keeps it."""
    if dev.can_copy_behind(fd):
        dev.copy_behind(_copy_named, fd, (src, off, length, size, bs, name), length, own)
        return own
    _copy_named(dev, fd, src, off, length, size, bs, name)
    return False


def _copy_named(dev, fd: int, src: int, off: int, length: int, size: int, bs: int,
                name: str) -> None:
    try:
        copy_blocks(dev, fd, src, off, length, size, bs)
    except ImageError:
        raise               # the image's device failed, not this file
    except OSError as exc:
        raise CopyFailed(f"{name}: cannot copy: {exc.strerror or exc}") from None


def _write_blocks(dev, stream, off: int, left: int) -> None:
    """Blocks from a stream read here, in pieces of IO_CHUNK."""
    while left:
        data = stream.read(min(left, IO_CHUNK))
        if not data:
            break
        dev.pwrite_data(off, data)
        off += len(data)
        left -= len(data)
    # the tail of the last block (and anything the source no longer holds)
    # reads as zeros: write them, since the blocks are mapped
    while left:
        n = min(left, IO_CHUNK)
        dev.pwrite_data(off, b"", n)
        off += n
        left -= n


def default_attroffset(inodesize: int) -> int:
    """Bytes the kernel gives the data fork when it must guess."""
    literal = inodesize - C.XFS_DINODE_CORE_SIZE
    if inodesize == 256:
        return literal - bmdr_space(MINABTPTRS)
    return bmdr_space(6 * MINABTPTRS)


def _bytesfit(literal: int, data_fmt: int, data_bytes: int, forkoff: int, need: int) -> int:
    """The attr fork offset (8-byte units) that lets ``need`` bytes of
    shortform attributes sit beside the data fork, or 0 when they cannot."""
    offset = (literal - need) >> 3
    if data_fmt == C.XFS_DINODE_FMT_DEV:
        return 1 if offset >= 1 else 0
    if forkoff and need <= literal - forkoff * 8:
        return forkoff
    dsize = data_bytes
    if data_fmt == C.XFS_DINODE_FMT_EXTENTS and not forkoff and \
            data_bytes > default_attroffset(literal + C.XFS_DINODE_CORE_SIZE):
        dsize = bmdr_space(MINDBTPTRS)
    if data_fmt == C.XFS_DINODE_FMT_BTREE and forkoff:
        return forkoff if offset >= forkoff else 0
    minforkoff = (max(dsize, bmdr_space(MINDBTPTRS)) + 7) >> 3
    maxforkoff = (literal - bmdr_space(MINABTPTRS)) >> 3
    if offset >= maxforkoff:
        return maxforkoff
    if offset >= minforkoff:
        return offset
    return 0


SF_ATTR_HDR = 4
SF_VALUE_MAX = 255      # names and values this long never stay in shortform


def attr_forkoff(inodesize: int, data_fmt: int, data_bytes: int, attrs) -> tuple[int, bool]:
    """(forkoff, shortform) for attributes added one by one, in order, to an
    inode whose data fork holds ``data_bytes`` in ``data_fmt``: the offset
    the kernel would settle on and whether they stay in shortform."""
    literal = inodesize - C.XFS_DINODE_CORE_SIZE
    forkoff = 0
    total = SF_ATTR_HDR
    for _flags, name, value in attrs:
        ent = 3 + len(name) + len(value)
        total += ent
        if len(value) >= SF_VALUE_MAX or len(name) >= SF_VALUE_MAX:
            fit = 0
        else:
            fit = _bytesfit(literal, data_fmt, data_bytes, forkoff, total)
        if not fit:
            if not forkoff:
                forkoff = _bytesfit(literal, data_fmt, data_bytes, 0, SF_ATTR_HDR + ent) or \
                    default_attroffset(inodesize) >> 3
            return forkoff, False
        forkoff = fit
    return forkoff, True
