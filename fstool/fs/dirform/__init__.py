"""Directories by form, one module each: the shortform fork (:mod:`sf`), the
data blocks every extent-form directory has (:mod:`data`), the single-block
directory's tail (:mod:`block`), the leaf blocks (:mod:`leaf`, leaf1 and
leafn), the node form's da-btree (:mod:`node`) and its free index
(:mod:`free`).  Each holds its form's layout accessors (over the layouts of
fstool.format.structs), its decode and its verifier, which returns every
fault it finds: the reader (fstool.fs.dir) raises the first, check
(fstool.ops.check.dirs) reports them all and repair reads leniently through
the same decode.

This module names the forms (:data:`FORMS`) and tells which one a
directory inode is in (:func:`form`), for every caller.
"""
from __future__ import annotations

from ...errors import CorruptionError
from ...format import constants as C

SHORTFORM, BLOCK, LEAF, NODE = "shortform", "block", "leaf", "node"
FORMS = (SHORTFORM, BLOCK, LEAF, NODE)
NAME_MAX = 255                      # bytes of a name (MAXNAMELEN less its NUL)


def name_ok(name: bytes) -> bool:
    """xfs_dir2_namecheck: 1 to NAME_MAX bytes, no '/' or NUL."""
    return 0 < len(name) <= NAME_MAX and b"/" not in name and b"\0" not in name


def form_of(eof: int, dirblkfsbs: int, blocklog: int) -> str:
    """The form of an extent-form directory whose mapped blocks end at file
    block ``eof``: block when its data ends at one directory block, leaf
    when the only block past the data space is the leaf, else node."""
    if eof == dirblkfsbs:
        return BLOCK
    if eof == (C.XFS_DIR2_LEAF_OFFSET >> blocklog) + dirblkfsbs:
        return LEAF
    return NODE


def form(node) -> str:
    """The on-disk form of directory inode ``node`` (one of FORMS), the
    kernel's way: shortform for a local fork, else by where its mapped
    blocks end; a CorruptionError when it has none."""
    if node.format == C.XFS_DINODE_FMT_LOCAL:
        return SHORTFORM
    if node.format not in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE):
        raise CorruptionError("directory", f"data fork format {node.format} is not valid "
                              "for a directory", ino=node.ino, field="di_format")
    sb = node.fs.sb
    exts = node.extents()
    if not exts:
        raise CorruptionError("directory", "no data blocks", ino=node.ino, field="extents")
    kind = form_of(exts[-1][0] + exts[-1][2], sb.dirblkfsbs, sb.blocklog)
    if kind == BLOCK and node.size != sb.dirblksize:
        raise CorruptionError("directory", f"block-form size {node.size}, expected "
                              f"{sb.dirblksize}", ino=node.ino, field="di_size")
    return kind
