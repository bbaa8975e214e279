"""Directories in every v5 form, read: listing and lookup over the form
modules of fstool.fs.dirform.

Iteration walks the data blocks in order; lookup is hashed: the name's
da-hash is searched in the block tail, the leaf block, or down the da-btree
to the leaf holding it, and only the data entries with that hash are read.
"""
from __future__ import annotations

from typing import Iterator

from .._backend import parsers
from ..errors import CorruptionError
from ..io import verify as V
from .dirform import BLOCK, LEAF, SHORTFORM, block, data, form, leaf, node as nodeform, sf

__all__ = ["form", "entry_lists", "iter_entries", "lookup", "parent"]


def entry_lists(node) -> Iterator[list]:
    """The entries of a directory, but ``.`` and ``..``, as lists of
    (name, ino, ftype): one list per data block (shortform: one list)."""
    kind = form(node)
    if kind == SHORTFORM:
        yield sf.decode(node, True)[1]
        return
    if kind == BLOCK:
        buf = data.read_block(node, 0, V.DIR3_BLOCK)
        blocks = ((buf, block.leaf_bounds(buf, node.ino)[0]),)
    else:
        blocks = ((data.read_block(node, fsb, V.DIR3_DATA), None)
                  for fsb in data.block_fsbs(node))
    for buf, end in blocks:
        yield data.decode(node, buf, len(buf) if end is None else end, True)


def iter_entries(node) -> Iterator[tuple[bytes, int, int]]:
    """(name, ino, ftype) for every entry but ``.`` and ``..``."""
    for ents in entry_lists(node):
        yield from ents


def lookup(node, name: bytes) -> int | None:
    """Inode number of ``name`` in directory ``node``, or None."""
    if name == b".":
        return node.ino
    kind = form(node)
    if kind == SHORTFORM:
        parent_, ents = sf.decode(node)
        if name == b"..":
            return parent_
        for _off, ino, ename, _ft in ents:
            if ename == name:
                return ino
        return None
    hashval = parsers.da_hashname(name)
    if kind == BLOCK:
        buf = data.read_block(node, 0, V.DIR3_BLOCK)
        start, count, _stale = block.leaf_bounds(buf, node.ino)
        return leaf.scan(node, buf, start, count, hashval, name, True, buf)[0]
    if kind == LEAF:
        buf = data.read_block(node, leaf.leaf_fsb(node.fs.sb.blocklog), V.DIR3_LEAF)
        count = leaf.leaf1_count(buf, node.ino)
        return leaf.scan(node, buf, leaf.LEAF_HDR, count, hashval, name, False)[0]
    return nodeform.lookup(node, hashval, name)


def parent(node) -> int:
    """Inode number of the directory's parent (``..``)."""
    if form(node) == SHORTFORM:
        return sf.decode(node)[0]
    ino = lookup(node, b"..")
    if ino is None:
        raise CorruptionError("directory", "no '..' entry", ino=node.ino)
    return ino
