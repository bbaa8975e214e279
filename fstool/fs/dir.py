"""Directories in every v5 form: shortform, block, leaf and node.

Iteration walks the data blocks in order; lookup is hashed: the name's
da-hash is searched in the block tail, the leaf block, or down the da-btree
to the leaf holding it, and only the data entries with that hash are read.
"""
from __future__ import annotations

from typing import Iterator

from .._backend import parsers
from ..errors import CorruptionError
from ..format import constants as C
from ..io import verify as V
from . import dabtree, dirblock as B

_DOT = (b".", b"..")


def _form(node) -> str:
    if node.format == C.XFS_DINODE_FMT_LOCAL:
        return "shortform"
    if node.format not in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE):
        raise CorruptionError("directory", f"data fork format {node.format} is not valid "
                              "for a directory", ino=node.ino, field="di_format")
    sb = node.fs.sb
    exts = node.extents()
    if not exts:
        raise CorruptionError("directory", "no data blocks", ino=node.ino, field="extents")
    eof = exts[-1][0] + exts[-1][2]
    if eof << sb.blocklog == sb.dirblksize:
        if node.size != sb.dirblksize:
            raise CorruptionError("directory", f"block-form size {node.size}, expected "
                                  f"{sb.dirblksize}", ino=node.ino, field="di_size")
        return "block"
    leaf_fsb = C.XFS_DIR2_LEAF_OFFSET >> sb.blocklog
    if eof == leaf_fsb + sb.dirblkfsbs:
        return "leaf"
    return "node"


def form(node) -> str:
    """The directory's on-disk form: shortform, block, leaf or node."""
    return _form(node)


def _shortform(node, listing: bool = False):
    fork = node.fork_bytes()
    if node.size > len(fork) or node.size < B.SF_MIN:
        raise CorruptionError("shortform directory", f"size {node.size} does not fit the "
                              f"inode fork ({len(fork)} bytes)", ino=node.ino, field="di_size")
    try:
        return parsers.dir2_sf_entries(fork, 0, node.size, node.fs.sb.has_ftype, listing)
    except ValueError as e:
        raise CorruptionError("shortform directory", str(e), ino=node.ino) from None


def _read_dirblock(node, fsb: int, bt) -> bytes:
    sb = node.fs.sb
    daddr, pieces = node.read_fork_blocks(fsb, sb.dirblkfsbs)
    return node.fs.read_meta(daddr, sb.dirblksize, bt, owner=node.ino, ino=node.ino,
                             block=fsb, pieces=pieces)


def _block_tail(node, buf) -> tuple[int, int]:
    """(start of the leaf array, entry count) of a single-block directory."""
    count = B.block_tail(buf)[0]
    start = B.block_leaf_start(buf, count)
    if start < B.HDR:
        raise CorruptionError("directory block", f"tail count {count} overruns the block",
                              ino=node.ino, field="count")
    return start, count


def _data_entries(node, buf, end: int, listing: bool = False):
    try:
        return parsers.dir2_data_entries(buf, B.HDR, end,
                                         node.fs.sb.has_ftype, listing)
    except ValueError as e:
        raise CorruptionError("directory data block", str(e), ino=node.ino) from None


def _data_block_fsbs(node) -> Iterator[int]:
    """File offsets (fs blocks) of every directory data block, in order."""
    sb = node.fs.sb
    leaf_fsb = C.XFS_DIR2_LEAF_OFFSET >> sb.blocklog
    step = sb.dirblkfsbs
    for startoff, _sb, count, _u in node.extents():
        if startoff >= leaf_fsb:
            break
        first = -(-startoff // step) * step
        for fsb in range(first, min(startoff + count, leaf_fsb), step):
            yield fsb


def entry_lists(node) -> Iterator[list]:
    """The entries of a directory, but ``.`` and ``..``, as lists of
    (name, ino, ftype): one list per data block (shortform: one list)."""
    kind = _form(node)
    if kind == "shortform":
        yield _shortform(node, True)[1]
        return
    if kind == "block":
        buf = _read_dirblock(node, 0, V.DIR3_BLOCK)
        blocks = ((buf, _block_tail(node, buf)[0]),)
    else:
        blocks = ((_read_dirblock(node, fsb, V.DIR3_DATA), None)
                  for fsb in _data_block_fsbs(node))
    for buf, end in blocks:
        yield _data_entries(node, buf, len(buf) if end is None else end, True)


def iter_entries(node) -> Iterator[tuple[bytes, int, int]]:
    """(name, ino, ftype) for every entry but ``.`` and ``..``."""
    for ents in entry_lists(node):
        yield from ents


def _entry_at(node, addr: int, block_form: bool, blockbuf=None):
    """(ino, name) of the data entry at a leaf address (8-byte units)."""
    sb = node.fs.sb
    byte = addr << C.XFS_DIR2_DATA_ALIGN_LOG
    db, off = divmod(byte, sb.dirblksize)
    if block_form:
        if db:
            raise CorruptionError("directory block", f"leaf address {addr} beyond the block",
                                  ino=node.ino, field="address")
        buf = blockbuf
    else:
        buf = _read_dirblock(node, db * sb.dirblkfsbs, V.DIR3_DATA)
    if off < B.HDR or off + B.ENTRY + B.TAG > len(buf):
        raise CorruptionError("directory leaf", f"address {addr} points outside a data block",
                              ino=node.ino, field="address")
    ino, namelen = B.entry_head(buf, off)
    if off + B.ENTRY + namelen > len(buf):
        raise CorruptionError("directory data block", f"entry at {off} overruns the block",
                              ino=node.ino, field="namelen")
    return ino, B.entry_name(buf, off, namelen)


def _scan_leaf(node, buf, start, count, hashval, name, block_form, blockbuf=None):
    """Look for ``name`` among entries with ``hashval``; returns (ino or None,
    ran_off_end) where ran_off_end means equal hashes may continue in the
    next leaf block."""
    i = dabtree.lower_bound(buf, count, hashval, start, what="directory leaf")
    while i < count:
        h, addr = B.leaf_entry(buf, start, i)
        if h != hashval:
            return None, False
        if addr != C.XFS_DIR2_NULL_DATAPTR:
            ino, ename = _entry_at(node, addr, block_form, blockbuf)
            if ename == name:
                return ino, False
        i += 1
    return None, True


def lookup(node, name: bytes) -> int | None:
    """Inode number of ``name`` in directory ``node``, or None."""
    if name == b".":
        return node.ino
    kind = _form(node)
    if kind == "shortform":
        parent, ents = _shortform(node)
        if name == b"..":
            return parent
        for _off, ino, ename, _ft in ents:
            if ename == name:
                return ino
        return None
    hashval = parsers.da_hashname(name)
    if kind == "block":
        buf = _read_dirblock(node, 0, V.DIR3_BLOCK)
        start, count = _block_tail(node, buf)
        return _scan_leaf(node, buf, start, count, hashval, name, True, buf)[0]
    sb = node.fs.sb
    leaf_fsb = C.XFS_DIR2_LEAF_OFFSET >> sb.blocklog
    if kind == "leaf":
        buf = _read_dirblock(node, leaf_fsb, V.DIR3_LEAF)
        count = B.leaf_count(buf)
        if B.LEAF_HDR + B.LEAF_ENT * count > len(buf):
            raise CorruptionError("directory leaf block", f"count {count} overruns the block",
                                  ino=node.ino, field="count")
        return _scan_leaf(node, buf, B.LEAF_HDR, count, hashval, name, False)[0]
    return _node_lookup(node, leaf_fsb, hashval, name)


def _node_lookup(node, root_fsb: int, hashval: int, name: bytes) -> int | None:
    def read(fsb):
        return _read_dirblock(node, fsb, V.DA3_NODE_OR_LEAF)
    path = dabtree.descend(read, root_fsb, hashval, what="directory node block", ino=node.ino)
    # equal hashes may span several leaf blocks
    while True:
        fsb, buf, _i = path[-1]
        magic = dabtree.magic(buf)
        if magic != C.XFS_DIR3_LEAFN_MAGIC:
            raise CorruptionError("directory leaf block", f"magic 0x{magic:x} where a leafn "
                                  "block is expected", ino=node.ino, block=fsb, field="magic")
        count = dabtree.count(buf)
        ino, more = _scan_leaf(node, buf, B.LEAF_HDR, count, hashval, name, False)
        if ino is not None or not more or not dabtree.next_leaf(read, path):
            return ino


def parent(node) -> int:
    """Inode number of the directory's parent (``..``)."""
    if _form(node) == "shortform":
        return _shortform(node)[0]
    ino = lookup(node, b"..")
    if ino is None:
        raise CorruptionError("directory", "no '..' entry", ino=node.ino)
    return ino
