"""Parent pointers (the PARENT incompat feature, ``mkfs.xfs -n parent=1``).

Every directory entry naming a file has a twin on the file: an attribute in
the parent namespace (``XFS_ATTR_PARENT``, bit 3 of the attr entry flags)
whose name is the entry's name and whose value is an ``xfs_parent_rec``: the
directory's inode number (be64 ``p_ino``) and generation (be32 ``p_gen``),
12 bytes, always a local value.  Its hash is not the name's: it is the
directory name hash of the name xor the high and low 32 bits of ``p_ino``
(``parsers.parent_hashname``), so that links of one name from two
directories do not collide.
"""
from __future__ import annotations

from .._backend import parsers
from .constants import XFS_ATTR_NSP_ONDISK_MASK, XFS_ATTR_PARENT
from .structs import PARENT_REC

XFS_PARENT_REC_SIZE = PARENT_REC.size        # 12
# a parent pointer's name is a directory entry name
XFS_PARENT_NAME_MAX = 255
_REC = PARENT_REC.struct


def is_parent(flags: int) -> bool:
    """True for an attr entry (its on-disk flags) of the parent namespace."""
    return flags & XFS_ATTR_NSP_ONDISK_MASK == XFS_ATTR_PARENT


def pack_rec(p_ino: int, p_gen: int) -> bytes:
    """The 12-byte value of a parent pointer to directory ``p_ino``."""
    return _REC.pack(p_ino, p_gen)


def unpack_rec(value: bytes) -> tuple[int, int]:
    """(p_ino, p_gen) of a parent pointer's value; ValueError when it is not
    12 bytes."""
    if len(value) != XFS_PARENT_REC_SIZE:
        raise ValueError(f"parent pointer value is {len(value)} bytes, not "
                         f"{XFS_PARENT_REC_SIZE}")
    return _REC.unpack(value)


def attr_hash(flags: int, name: bytes, value) -> int:
    """xfs_attr_hashval: the name hash, or for a parent pointer
    (xfs_parent_hashattr) the parent hash when the value is a 12-byte
    record, else 0."""
    if flags & XFS_ATTR_PARENT:
        if value is None or len(value) != XFS_PARENT_REC_SIZE:
            return 0
        return parsers.parent_hashname(name, unpack_rec(value)[0])
    return parsers.da_hashname(name)
