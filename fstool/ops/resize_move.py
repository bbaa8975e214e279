"""Moving blocks out of the part of a filesystem a shrink cuts off (see
:mod:`fstool.ops.resize_shrink` for what can move and
:mod:`fstool.ops.resize` for the order of a shrink).

Every move is part of one transaction of the session's journal (a few
dozen moves each), and allocates only in the part kept (the part cut
off is fenced off from the allocator for the whole session):

* a regular file's data extent (:func:`move_out`, at most :data:`CHUNK`
  extents a transaction): the new blocks are written first, where
  nothing lived (the checkpoint flushes the device before its commit
  record), then the transaction maps them in place of the old ones in
  the file's block map (and the rmapbt) and frees the old;
* a run of reflinked files' blocks (:func:`move_shared`, at most
  :data:`SHARED_CHUNK` blocks a transaction): copied as file data is,
  then one transaction remaps every file mapping them (each file's map
  and rmapbt records), takes the old blocks' references out of the
  refcount btree and gives the new blocks as many, and frees the old
  blocks: each block moves once and stays shared;
* a directory's, symlink's or attr fork's blocks (:func:`move_metadata`,
  at most :data:`CHUNK` blocks a transaction): each block is copied into a
  new buffer of the transaction at its new address, the address it
  records of itself rewritten (the directory and da-btree headers, the
  remote value and symlink headers), the fork's extent record changed
  from the old blocks to the new (an unmap and a map, as the kernel's
  bmap remap does; its rmapbt records follow), the old blocks freed.  The
  da-btrees need nothing else: they address their blocks by offset in
  the fork, which does not change;
* a bmbt block, once the fork's extents are moved: copied into a new
  block with its own address rewritten, the pointer in its parent (the
  inode's root or a node block) and those of its left and right siblings
  changed, the old block freed (the rmapbt follows: the new block is the
  fork's bmbt block).

* an inode whose chunk lies in the cut (:func:`move_inodes`, last, since
  the moves above name inodes by number; at most :data:`INODE_CHUNK` a
  transaction): a new
  inode in the part kept gets its core and forks, the owner its blocks
  record and the rmapbt's owners follow, every directory entry naming it
  is pointed at it (a directory's own '.' and its subdirectories' '..'
  too; on a parent-pointer filesystem, a directory's children's pointers
  to it, whose hash covers its number: each taken out and put back), the
  old inode is freed and its chunk with its last inode.

New buffers are written in place before the transaction's checkpoint
commits (the journal's ordered buffers); a kill before that commit leaves
the old blocks mapped and the new ones free, after it the new ones mapped
and the old ones free.
"""
from __future__ import annotations

import struct

from ..errors import FsToolError
from ..format import constants as C
from ..format.structs import DINODE
from ..io import verify as V
from ..alloc import rmap as R
from ..alloc.inodes import present_mask
from ..ns.bmap import ForkMap, owned_extents
from ..ns.dirops import Dir
from ..ns.fileio import FileIO
from ..ns.namespace import Namespace
from ..ns.writer import Writer
from ..trans.busy import coalesce
from . import resize_shrink as RS
from .stats import ag_tree, iter_allocated_inodes

#: blocks moved in one transaction at most (fork blocks, bmbt blocks),
#: and data extents
CHUNK = 64
#: blocks of reflinked files moved in one transaction at most
SHARED_CHUNK = 256
#: inodes moved in one transaction at most
INODE_CHUNK = 64
_CORE = C.XFS_DINODE_CORE_SIZE


class MoveError(FsToolError):
    """A block that cannot be moved (the reason is the message)."""


def fence(w, dblocks: int, agcount: int) -> None:
    """Nothing of the session ``w`` is allocated in the part a cut to
    ``dblocks`` blocks in ``agcount`` AGs takes."""
    sb, space = w.sb, w.space
    last = agcount - 1
    for agno in range(last, sb.agcount):
        start = dblocks - last * sb.agblocks if agno == last else 0
        space.reserved[("shrink", agno)] = (agno, start, w.fs.ag_length(agno))


def unfence(w) -> None:
    for key in [k for k in w.space.reserved if k[0] == "shrink"]:
        del w.space.reserved[key]


def move_out(path, dblocks: int, agcount: int, extents: list, *, undo=None,
             changes: list) -> None:
    """Move the data ``extents`` (:func:`~fstool.ops.resize_shrink.past`
    records of kind DATA) into the part of the filesystem a shrink to
    ``dblocks`` blocks in ``agcount`` AGs keeps, at most :data:`CHUNK`
    extents a transaction, which maps each one's new blocks (written
    first, where nothing lived, and flushed by the checkpoint before its
    commit record) in place of the old and frees those.  A kill leaves
    each extent where it was or where it went, never both."""
    with Writer(path, keeps_parents=True) as w:
        if undo is not None:
            undo(w.dev)
        io = FileIO(w)
        fence(w, dblocks, agcount)
        w.space.kernel_freelist = True
        moved = 0
        for k in range(0, len(extents), CHUNK):
            with w.transaction():
                moved += _move_data_chunk(w, io, extents[k:k + CHUNK])
        unfence(w)
        w.journal.sync()
        changes.append(f"{len(extents)} data extent(s) moved ({moved} blocks)")


#: bytes copied in one read and write at most
COPY_BYTES = 8 << 20


def _move_data_chunk(w, io: FileIO, extents: list) -> int:
    """One transaction's data extents moved: their new blocks allocated
    together (as few extents as the free space allows, in the part kept),
    the data copied in as few reads and writes as the runs allow (the
    checkpoint that commits the transaction flushes the copies before its
    commit record; the old blocks stay busy until then), each file's
    extents remapped in one change of its inode, the old blocks freed.
    Returns the blocks moved."""
    space, fs, dev = w.space, w.fs, w.dev
    bs = w.sb.blocksize
    runs = space.alloc_run(space.fsb(0, 0), sum(m[2] for m in extents), 1, owner=None)
    per_ino: dict = {}
    copies: list = []           # [old fsbno, new fsbno, blocks], runs joined
    ri, used = 0, 0
    for agno, agbno, n, ino, off, unwritten, _kind in extents:
        old = space.fsb(agno, agbno)
        pieces, pos = [], 0
        while pos < n:
            fsbno, got = runs[ri]
            take = min(got - used, n - pos)
            new = fsbno + used
            pieces.append((off + pos, new, take))
            if not unwritten:
                c = copies[-1] if copies else None
                if c is not None and c[0] + c[2] == old + pos and c[1] + c[2] == new:
                    c[2] += take
                else:
                    copies.append([old + pos, new, take])
            pos += take
            used += take
            if used == got:
                ri, used = ri + 1, 0
        per_ino.setdefault(ino, []).append((off, n, pieces, unwritten))
        space.free_extent(old, n, owner=None)
    step = max(1, COPY_BYTES // bs)
    for src, dst, n in copies:
        for x in range(0, n, step):
            k = min(step, n - x)
            dev.pwrite(fs.fsb_to_daddr(dst + x) << C.BBSHIFT,
                       dev.pread(fs.fsb_to_daddr(src + x) << C.BBSHIFT, k * bs))
    for ino, moves in per_ino.items():
        io.move_extents(ino, moves)
    return sum(m[2] for m in extents)


# -- reflinked files' data -----------------------------------------------------------

def _shared_runs(sb, cut: RS.Cut, owners: list) -> list:
    """(agno, start, end) runs of AG blocks in the cut that ``owners``
    (past() records) map, at most :data:`SHARED_CHUNK` blocks each."""
    per_ag: dict = {}
    for agno, agbno, n, *_rest in owners:
        lo = agbno if agno > cut.last else max(agbno, cut.newlen)
        if agbno + n > lo:
            per_ag.setdefault(agno, []).append((lo, agbno + n))
    out = []
    for agno, ranges in sorted(per_ag.items()):
        for a, b in coalesce(ranges):
            for x in range(a, b, SHARED_CHUNK):
                out.append((agno, x, min(b, x + SHARED_CHUNK)))
    return out


def _move_shared_run(w, io: FileIO, agno: int, a: int, b: int, owners: list) -> None:
    """One transaction: AG blocks [a, b) of reflinked files copied to new
    blocks in the part kept, every file mapping them (``owners``: past()
    records) remapped there, their reference counts moved with them, the
    old blocks freed."""
    space, fs = w.space, w.fs
    bs = w.sb.blocksize
    old = space.fsb(agno, a)
    pieces = space.alloc_run(space.fsb(0, 0), b - a, 1, owner=None)
    # new place of old block x: (fsbno, blocks from there in the same piece)
    starts, pos = [], a
    for fsbno, got in pieces:
        starts.append((pos, fsbno, got))
        w.dev.pwrite(fs.fsb_to_daddr(fsbno) << C.BBSHIFT,
                     w.dev.pread(fs.fsb_to_daddr(space.fsb(agno, pos)) << C.BBSHIFT, got * bs))
        pos += got

    def new_pieces(lo: int, hi: int):
        for s0, fsbno, got in starts:
            x, y = max(lo, s0), min(hi, s0 + got)
            if x < y:
                yield x, fsbno + (x - s0), y - x

    for oagno, agbno, n, ino, off, unwritten, _kind in owners:
        if oagno != agno:
            continue
        lo, hi = max(agbno, a), min(agbno + n, b)
        if lo >= hi:
            continue
        io.unmap_extent(ino, off + (lo - agbno), hi - lo)
        for x, fsbno, k in new_pieces(lo, hi):
            io.map_extent(ino, off + (x - agbno), fsbno, k, unwritten)
    # each shared block's references go with it
    if w.reflink:
        refc = w.ag(agno).refc
        for s0, ln, count in refc.shared(a, b - a):
            for _ in range(count - 1):
                if refc.adjust(s0, ln, -1):
                    raise MoveError(f"AG {agno} blocks {s0} to {s0 + ln - 1}: the refcount "
                                    "btree lost their last reference on the way")
            for _x, fsbno, k in new_pieces(s0, s0 + ln):
                for _ in range(count - 1):
                    space.share(fsbno, k)
    space.free_extent(old, b - a, owner=None)


def move_shared(path, dblocks: int, agcount: int, owners: list, *, undo=None,
                changes: list) -> None:
    """Move the reflinked files' data among ``owners`` (past() records of
    kind SHARED: one for each file mapping an extent) that lies in the
    part a shrink to ``dblocks`` blocks in ``agcount`` AGs cuts off: each
    block once, at most :data:`SHARED_CHUNK` a transaction, every file
    mapping it remapped to its new place and its reference count moved
    (the refcount btree records of the old blocks go, those of the new
    come; the rmapbt follows each file's map)."""
    with Writer(path, keeps_parents=True) as w:
        if undo is not None:
            undo(w.dev)
        io = FileIO(w)
        cut = RS.Cut(w.sb, dblocks, agcount)
        fence(w, dblocks, agcount)
        w.space.kernel_freelist = True
        moved = 0
        for agno, a, b in _shared_runs(w.sb, cut, owners):
            with w.transaction():
                _move_shared_run(w, io, agno, a, b, owners)
            moved += b - a
        unfence(w)
        w.journal.sync()
        changes.append(f"{moved} block(s) of reflinked files moved "
                       f"({len({m[3] for m in owners})} file(s) remapped)")


# -- directory, symlink and attr fork blocks, bmbt blocks ------------------------------

def _fork(w, ino: int, attr: bool):
    """(raw inode, its unpacked core, the fork's offset in the literal
    area, a :class:`ForkMap` of the fork changed by the open transaction)."""
    raw = w.inodes.raw_inode(ino)
    d = DINODE.unpack(raw)
    lit = w.sb.inodesize - _CORE
    forkoff = d["di_forkoff"] * 8
    big = bool(d["di_flags2"] & C.XFS_DIFLAG2_NREXT64)
    if attr:
        start, space, fmt = forkoff, lit - forkoff, d["di_aformat"]
        nextents = d["di_nextents"] if big else d["di_anextents"]
    else:
        start, space, fmt = 0, forkoff or lit, d["di_format"]
        nextents = d["di_big_nextents"] if big else d["di_nextents"]
    shared = not attr and bool(d["di_flags2"] & C.XFS_DIFLAG2_REFLINK)
    fm = ForkMap(w.fs, ino, fmt, raw[_CORE + start:_CORE + start + space], space, nextents,
                 w=w, near=w.space.fsb(0, 0), shared=shared, attr=attr)
    return bytearray(raw), d, start, fm


def _put_fork(w, ino: int, attr: bool, raw: bytearray, d: dict, start: int, fm: ForkMap,
              nblocks: int = 0) -> None:
    """The changed fork back into the inode (format, extent count, block
    count moved by ``nblocks`` and the bmbt blocks the map added)."""
    fmt, lit = fm.finish()
    raw[_CORE + start:_CORE + start + fm.space] = lit
    big = bool(d["di_flags2"] & C.XFS_DIFLAG2_NREXT64)
    if attr:
        d["di_aformat"] = fmt
        d["di_nextents" if big else "di_anextents"] = fm.nextents
    else:
        d["di_format"] = fmt
        d["di_big_nextents" if big else "di_nextents"] = fm.nextents
    d["di_nblocks"] += nblocks + fm.bmbt_delta
    fm.bmbt_delta = 0
    packed = DINODE.pack(d)
    raw[:len(packed)] = packed
    w.inodes.put_inode(ino, w.enc.seal(bytes(raw)))


_DIR_TYPES = (V.DIR3_DATA_ANY, V.DIR3_FREE, V.DA3_NODE_OR_LEAF)
_ATTR_TYPES = (V.ATTR3_NODE_OR_LEAF, V.ATTR3_RMT)


def _head(w, daddr: int) -> bytes:
    """The first bytes of the block at ``daddr`` as the session sees it:
    from a cached buffer holding it (changed by an earlier transaction and
    not written back yet, such as an attr block a moved directory's
    children's parent pointers changed), else from the device."""
    for buf in w.fs.cache.overlapping(daddr, 1):
        if buf.stale:
            continue
        pos = 0
        for d, n in buf.extents():
            if d <= daddr < d + (n >> C.BBSHIFT):
                off = pos + ((daddr - d) << C.BBSHIFT)
                return bytes(buf.data[off:off + 16])
            pos += n
    return w.dev.pread(daddr << C.BBSHIFT, 16)


def _buf_type(head: bytes, kind: int, ino: int, fsbno: int) -> V.BufType:
    """The buffer type of a fork block from its first bytes."""
    types = _ATTR_TYPES if kind == RS.ATTR else _DIR_TYPES + (V.SYMLINK,)
    for bt in types:
        if bt.magic_of(head) in bt.magics:
            return bt
    raise MoveError(f"inode {ino}: block {fsbno} of its {'attr' if kind == RS.ATTR else 'data'}"
                    " fork is no directory, xattr or symlink block; it cannot be moved")


def _headers(bt: V.BufType, data, blocksize: int):
    """The offsets of a buffer's headers: one, or every header of a remote
    value or symlink buffer."""
    if not bt.per_block:
        yield 0
        return
    (magic,) = bt.magics
    off = 0
    while off < len(data):
        span = blocksize
        if struct.unpack_from(">I", data, off)[0] == magic:
            yield off
            nbytes = struct.unpack_from(">I", data, off + 8)[0]
            span = max(blocksize, -(-(56 + nbytes) // blocksize) * blocksize)
        off += span


def _readdress(bt: V.BufType, data: bytearray, daddr: int, blocksize: int) -> None:
    """Rewrite the address a block records of itself (every header of a
    remote value or symlink buffer) for its new place at ``daddr``."""
    for off in _headers(bt, data, blocksize):
        struct.pack_into(">Q", data, off + bt.blkno_off, daddr + (off >> C.BBSHIFT))


def _fork_ranges(w, ino: int, attr: bool, cut) -> list:
    """[(startoff, length)] of the fork's records lying (in part) in the cut."""
    fs = w.fs
    node = fs.inode(ino)
    return [(o, n) for o, b, n, *_u in node.extents(attr=attr) if cut(b, n)]


def _move_chunk(w, ino: int, kind: int, off: int, n: int) -> int:
    """One transaction's worth: fork blocks [off, off + n) of inode ``ino``
    (all in one record) copied to new blocks, remapped, the old freed."""
    fs, space, tx = w.fs, w.space, w.tx
    attr = kind == RS.ATTR
    raw, d, start, fm = _fork(w, ino, attr)
    rec = fm.lookup(off)
    if rec is None or rec[0] + rec[2] < off + n:
        raise MoveError(f"inode {ino}: fork blocks {off} to {off + n - 1} are not one extent")
    old = rec[1] + (off - rec[0])
    bs = w.sb.blocksize
    symlink = not attr and (d["di_mode"] & 0o170000) == C.S_IFLNK
    # a directory block spans dirblkfsbs blocks; a symlink's one header
    # covers its whole extent
    unit = n if symlink else (1 if attr else w.sb.dirblkfsbs)
    pieces = space.alloc_run(space.fsb(0, 0), n, unit, owner=None)
    src = old
    pos = 0
    for fsbno, got in pieces:
        for k in range(0, got, unit):
            daddr = fs.fsb_to_daddr(src)
            head = _head(w, daddr)
            bt = _buf_type(head, kind, ino, src)
            ob = tx.read_buf(daddr, unit * bs, bt, ino=ino)
            nd = fs.fsb_to_daddr(fsbno + k)
            nb = tx.get_buf(nd, unit * bs, bt)
            nb.data[:] = ob.data
            _readdress(bt, nb.data, nd, bs)
            src += unit
        pos += got
    fm.remove(off, off + n)
    space.free_extent(old, n, owner=None)
    at = off
    for fsbno, got in pieces:
        fm.add((at, fsbno, got, rec[3]))
        at += got
    _put_fork(w, ino, attr, raw, d, start, fm)
    return n


def _move_bmbt(w, ino: int, attr: bool, cut) -> int:
    """Up to :data:`CHUNK` bmbt blocks of a fork that lie in the cut moved
    (one transaction); how many."""
    raw, d, start, fm = _fork(w, ino, attr)
    if fm.tree is None:
        return 0
    # the root is in the inode
    n = _move_tree_blocks(fm.tree, cut, CHUNK, w.space.fsb(0, 0), root=False)
    if n:
        _put_fork(w, ino, attr, raw, d, start, fm)
    return n


def move_metadata(path, dblocks: int, agcount: int, blocks: list, *, undo=None,
                  changes: list) -> None:
    """Move the directory, symlink, attr fork and bmbt blocks among
    ``blocks`` (:func:`~fstool.ops.resize_shrink.past` records) into the
    part a shrink to ``dblocks`` blocks in ``agcount`` AGs keeps (see the
    module docstring)."""
    with Writer(path, keeps_parents=True) as w:
        if undo is not None:
            undo(w.dev)
        cut = RS.Cut(w.sb, dblocks, agcount)
        fence(w, dblocks, agcount)
        w.space.kernel_freelist = True
        forks = sorted({(m[3], m[6]) for m in blocks if m[6] in (RS.FORK, RS.ATTR)})
        trees = sorted({(m[3], m[6] == RS.ABMBT) for m in blocks
                        if m[6] in (RS.BMBT, RS.ABMBT)})
        nfork = nbmbt = 0
        for ino, kind in forks:
            for off, n in _fork_ranges(w, ino, kind == RS.ATTR, cut):
                unit = w.sb.dirblkfsbs if kind == RS.FORK else 1
                step = max(unit, CHUNK - CHUNK % unit)
                for a in range(off, off + n, step):
                    with w.transaction():
                        nfork += _move_chunk(w, ino, kind, a, min(step, off + n - a))
                # a symlink's extent moves whole (its header covers it)
        for ino, attr in trees:
            while True:
                with w.transaction():
                    got = _move_bmbt(w, ino, attr, cut)
                if not got:
                    break
                nbmbt += got
        unfence(w)
        w.journal.sync()
        if nfork:
            changes.append(f"{nfork} directory, symlink and xattr block(s) moved")
        if nbmbt:
            changes.append(f"{nbmbt} bmbt block(s) moved")


# -- the AG's own btrees -------------------------------------------------------------------

#: passes over an AG's btrees at most, each a transaction or two
AG_BTREE_PASSES = 64


def _move_tree_blocks(tree, cut, budget: int, near: int, root: bool = True) -> int:
    """Up to ``budget`` blocks of a btree for which ``cut(addr)`` holds
    moved to blocks its store allocates near ``near``
    (:meth:`~fstool.fs.btree_write._Engine.move_blocks` for those below
    the root; with ``root``, an AG btree's root block too: copied with its
    own address rewritten, the tree's root named anew, which the AG
    header takes).  How many moved."""
    left = [budget]

    def moves(addr: int) -> bool:
        if left[0] and cut(addr):
            left[0] -= 1
            return True
        return False

    n = tree.move_blocks(moves, near)
    store = tree.store
    if root and left[0] and cut(tree.root):
        old = tree.root
        new = store.alloc(near)
        buf = store.new(new)
        buf[:] = store.read(old)
        struct.pack_into(">Q", buf, tree.bt.buftype.blkno_off, store.daddr(new))
        store.dirty(new)
        store.free(old)
        tree.root = new
        n += 1
    if n:
        # a leaf remembered by address may have moved
        tree._note_leaf(None)
    return n


def _list_below(ag, start: int) -> int:
    """How many blocks the AG's free list hands out, first to last, before
    one at or past AG block ``start``."""
    slots, f = ag.agfl_slots, ag.agf
    for i in range(f["agf_flcount"]):
        if slots[(f["agf_flfirst"] + i) % len(slots)] >= start:
            return i
    return f["agf_flcount"]


def move_ag_btrees(w, agno: int, start: int) -> int:
    """Every block of AG ``agno``'s own btrees at or past AG block
    ``start`` moved below it, in transactions of the session ``w`` (whose
    allocator must already be fenced off the part past ``start``): the
    inode and refcount btrees take new blocks from the free space, the
    free-space btrees and the rmapbt from the free list (emptied of its
    blocks past ``start`` and refilled before it first, so that each of
    its blocks handed out lies below; a moved block goes onto the list
    and back to the free space the next time).  A block moves as
    :func:`_move_tree_blocks` moves it, in a logged transaction: a kill
    leaves it where it was or where it went.  How many blocks moved."""
    def cut(addr: int) -> bool:
        return addr >= start

    moved = 0
    for _ in range(AG_BTREE_PASSES):
        with w.transaction():
            ag = w.ag(agno)
            w.space.release_freelist(ag, start)
            # allocated from the free space, which the fence keeps below
            n = 0
            for tree in (ag.ino, ag.fino, ag.refc.tree if ag.refc else None):
                if tree is not None:
                    n += _move_tree_blocks(tree, cut, CHUNK, w.space.fsb(0, 0))
            ag.sync_roots()
        with w.transaction():
            ag = w.ag(agno)
            w.space.release_freelist(ag, start)
            # from the free list: as many as it holds, all below ``start``
            budget = _list_below(ag, start)
            for tree in (ag.bno, ag.cnt, ag.rmap.tree if ag.rmap else None):
                if tree is not None and budget > 0:
                    got = _move_tree_blocks(tree, cut, budget, 0)
                    budget -= got
                    n += got
            ag.sync_roots()
        moved += n
        if not n:
            return moved
    raise MoveError(f"AG {agno}: its btree blocks past block {start} could not all be "
                    f"moved below it in {AG_BTREE_PASSES} passes")


# -- inodes ------------------------------------------------------------------------------


def _entries(fs, inos: set) -> dict:
    """ino -> [(directory, name, ftype)]: every entry naming one of ``inos``."""
    out: dict = {}
    for ip in iter_allocated_inodes(fs):
        if ip.is_dir:
            for e in fs.listdir(ip):
                if e.ino in inos:
                    out.setdefault(e.ino, []).append((ip.ino, e.name, e.ftype))
    return out


def _owned_buffers(w, node, attr: bool):
    """(daddr, length, buffer type) of the fork's blocks that record their
    owner: bmbt blocks, attr fork blocks, a symlink's or a directory's
    blocks."""
    fs, bs = w.fs, w.sb.blocksize
    kind = RS.ATTR if attr else RS.FORK
    for fsbno, n, who, _u in owned_extents(node, attr):
        if who.flags & R.BMBT_BLOCK:
            yield fs.fsb_to_daddr(fsbno), bs, V.BMBT
        elif attr:
            for k in range(n):
                daddr = fs.fsb_to_daddr(fsbno + k)
                head = _head(w, daddr)
                yield daddr, bs, _buf_type(head, kind, node.ino, fsbno + k)
        elif node.is_symlink:
            daddr = fs.fsb_to_daddr(fsbno)
            yield daddr, n * bs, _buf_type(_head(w, daddr), kind,
                                           node.ino, fsbno)
        elif node.is_dir:
            unit = w.sb.dirblkfsbs
            for k in range(0, n, unit):
                daddr = fs.fsb_to_daddr(fsbno + k)
                yield daddr, unit * bs, _buf_type(_head(w, daddr), kind,
                                                  node.ino, fsbno + k)


def _move_inode(w, old: int, entries: list, repoints: dict) -> int:
    """In the open transaction: inode ``old`` copied to a new inode in the
    part kept (its core and forks; the owner its blocks record and the
    rmapbt follow), every entry naming it pointed at the new one (put off
    in ``repoints`` until :func:`_flush_repoints`; a directory's '.' and
    its subdirectories' '..' at once, and on a parent-pointer filesystem
    its children's pointers), the old inode freed (its chunk with it once
    the chunk has no inode left).  Returns the new number.  A directory
    is moved with ``repoints`` flushed (its entries read as they are)."""
    fs, space = w.fs, w.space
    node = fs.inode(old)
    parent = entries[0][0] if entries else w.sb.rootino
    new = w.inodes.alloc_inode(parent, False)
    raw = bytearray(w.inodes.raw_inode(old))
    DINODE.put(raw, "di_ino", new)
    w.inodes.put_inode(new, w.enc.seal(bytes(raw)))
    reflink = bool(node.flags2 & C.XFS_DIFLAG2_REFLINK)
    for attr in (False, True):
        for daddr, length, bt in _owned_buffers(w, node, attr):
            data = w.tx.read_buf(daddr, length, bt).data
            for off in _headers(bt, data, w.sb.blocksize):
                struct.pack_into(bt.owner_fmt, data, off + bt.owner_off, new)
        if w.rmap_on:
            for fsbno, n, who, unwritten in owned_extents(node, attr):
                if reflink and not attr and not who.flags & R.BMBT_BLOCK:
                    space.rmap_fsb("unmap_shared", fsbno, n, who, unwritten)
                    space.rmap_fsb("map_shared", fsbno, n,
                                   R.Owner(new, who.offset, who.flags), unwritten)
                else:
                    space.rmap_reown(fsbno, n, who, new, unwritten)
    for d, name, ftype in entries:
        repoints.setdefault(d, []).append((name, new, ftype))
    if node.is_dir:
        # its own '.' (block forms keep one), its subdirectories' '..'
        if node.format != C.XFS_DINODE_FMT_LOCAL:
            _repoint(w, new, b".", new, C.XFS_DIR3_FT_DIR)
        children: dict = {}
        for e in fs.listdir(new):
            children.setdefault(e.ino, []).append(e.name)
            if e.ftype == C.XFS_DIR3_FT_DIR:
                _repoint(w, e.ino, b"..", new, C.XFS_DIR3_FT_DIR)
        if w.sb.has_incompat(C.XFS_SB_FEAT_INCOMPAT_PARENT):
            # every child's pointer of each of its names here names the
            # directory by number (and its generation, which stays)
            ns = Namespace(w)
            for child, names in children.items():
                ns.renumber_parent(child, names, old, new, node.gen)
    w.inodes.free_inode(old)
    return new


def _repoint(w, d: int, name: bytes, ino: int, ftype: int) -> None:
    """Entry ``name`` of directory ``d`` names inode ``ino``; the
    directory's times stay as they were."""
    _repoint_all(w, d, [(name, ino, ftype)])


def _repoint_all(w, d: int, items: list) -> None:
    """Each (name, ino, ftype) of ``items``: entry ``name`` of directory
    ``d`` names inode ``ino``, in one change of the directory; its times
    stay as they were."""
    st = w.fs.inode(d).stat()
    dd = Dir(w, d, st.st_ctime_ns)
    for name, ino, ftype in items:
        dd.replace(name, ino, ftype)
    dd.save(mtime_ns=st.st_mtime_ns)


def _flush_repoints(w, repoints: dict) -> None:
    """The entries :func:`_move_inode` put off, one change of each
    directory."""
    for d, items in repoints.items():
        _repoint_all(w, d, items)
    repoints.clear()


def move_inodes(path, dblocks: int, agcount: int, chunks: list, *, undo=None,
                changes: list) -> None:
    """Move every inode of the ``chunks`` (past() records of kind INODES)
    to a new number in the part a shrink to ``dblocks`` blocks in
    ``agcount`` AGs keeps, at most :data:`INODE_CHUNK` a transaction
    (:func:`_move_inode`; a
    quota inode's with the superblock field naming it)."""
    with Writer(path, keeps_parents=True) as w:
        if undo is not None:
            undo(w.dev)
        sb = w.sb
        fence(w, dblocks, agcount)
        w.space.kernel_freelist = True
        last = agcount - 1
        # new inodes never in the AG being cut short when chunks leave it
        w.inodes.ag_limit = last if any(m[0] == last for m in chunks) else agcount
        starts = {(m[0], m[3]) for m in chunks}
        inos = set()
        for agno in {m[0] for m in chunks}:
            reader, root, height = ag_tree(w.fs, agno, "inobt")
            for startino, holemask, _c, _f, free in reader.ag_records(root, height):
                if (agno, startino) in starts:
                    used = present_mask(holemask) & ~free
                    inos.update((agno << sb.agino_log) | (startino + i)
                                for i in range(64) if used >> i & 1)
        where = _entries(w.fs, inos)
        quota = RS.quota_fields(sb)
        renamed: dict = {}
        order = sorted(inos)
        repoints: dict = {}
        for k in range(0, len(order), INODE_CHUNK):
            with w.transaction():
                for ino in order[k:k + INODE_CHUNK]:
                    if w.fs.inode(ino).is_dir:
                        _flush_repoints(w, repoints)
                    # entries in directories moved already are under their
                    # new numbers
                    names = [(renamed.get(d, d), name, ft)
                             for d, name, ft in where.get(ino, [])]
                    renamed[ino] = new = _move_inode(w, ino, names, repoints)
                    if ino in quota:
                        # a quota inode: the superblock names the new one
                        w.tx.precommit.append(
                            lambda tx, f=quota[ino], new=new: RS.log_sb(tx, sb, lambda fs: (
                                fs.__setitem__(f, new), RS.incore_quota(fs))))
                _flush_repoints(w, repoints)
        w.inodes.ag_limit = None
        unfence(w)
        w.journal.sync()
        changes.append(f"{len(inos)} inode(s) moved to new numbers "
                       f"({len(starts)} chunk(s) freed)")

