"""Extended attributes in every form (shortform, leaf, node, remote values)
and symlink targets (inline and remote)."""
from __future__ import annotations

import struct
from typing import Iterator

from .._backend import parsers
from ..errors import CorruptionError
from ..format import constants as C
from ..io import verify as V
from . import dabtree

_NAMESPACE = {0: "user.", C.XFS_ATTR_ROOT: "trusted.", C.XFS_ATTR_SECURE: "security."}


def get(node, full: str) -> bytes | None:
    """The value of xattr ``full`` ("user.x"), or None (see :func:`lookup`)."""
    for flags, prefix in _NAMESPACE.items():
        if full.startswith(prefix):
            return lookup(node, flags, full[len(prefix):].encode("utf-8", "surrogateescape"))
    return None


def full_name(flags: int, name: bytes) -> str | None:
    """"user.x" style name, or None for namespaces not shown to users
    (parent pointers)."""
    prefix = _NAMESPACE.get(flags & C.XFS_ATTR_NSP_ONDISK_MASK)
    if prefix is None:
        return None
    return prefix + name.decode("utf-8", "surrogateescape")


def iter_xattrs(node, values: bool = True) -> Iterator[tuple[str, bytes | None]]:
    """(full name, value) of every complete attribute; value is None when
    ``values`` is false (remote values are then not read)."""
    if not node.forkoff:
        return
    fmt = node.aformat
    if fmt == C.XFS_DINODE_FMT_LOCAL:
        yield from _shortform(node, values)
    elif fmt in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE):
        if not node.extents(attr=True):
            return
        yield from _leaves(node, values)
    else:
        raise CorruptionError("inode", f"attr fork format {fmt} is not valid", ino=node.ino,
                              field="di_aformat")


def _shortform(node, values: bool):
    fork = node.fork_bytes(attr=True)
    if len(fork) < 4:
        raise CorruptionError("shortform xattrs", "attr fork too small", ino=node.ino)
    totsize, count = struct.unpack_from(">HB", fork, 0)
    if totsize > len(fork) or totsize < 4:
        raise CorruptionError("shortform xattrs", f"totsize {totsize} does not fit the fork "
                              f"({len(fork)} bytes)", ino=node.ino, field="totsize")
    pos = 4
    for _ in range(count):
        if pos + 3 > totsize:
            raise CorruptionError("shortform xattrs", "entry overruns totsize", ino=node.ino)
        namelen, valuelen, flags = fork[pos], fork[pos + 1], fork[pos + 2]
        end = pos + 3 + namelen + valuelen
        if end > totsize:
            raise CorruptionError("shortform xattrs", "entry overruns totsize", ino=node.ino)
        name = full_name(flags, fork[pos + 3:pos + 3 + namelen])
        if name is not None and not flags & C.XFS_ATTR_INCOMPLETE:
            yield name, (fork[pos + 3 + namelen:end] if values else None)
        pos = end


def _read_attr_block(node, ablk: int) -> bytes:
    sb = node.fs.sb
    daddr, pieces = node.read_fork_blocks(ablk, 1, attr=True)
    return node.fs.read_meta(daddr, sb.blocksize, V.ATTR3_NODE_OR_LEAF, owner=node.ino,
                             ino=node.ino, block=ablk, pieces=pieces)


def _leaves(node, values: bool):
    """Every leaf of the attr fork, left to right (da-btree walk from attr
    block 0)."""
    def read(ablk):
        return _read_attr_block(node, ablk)
    for ablk, buf in dabtree.leaves(read, 0, what="xattr node block", ino=node.ino):
        magic = dabtree.magic(buf)
        if magic != C.XFS_ATTR3_LEAF_MAGIC:
            raise CorruptionError("xattr leaf block", f"magic 0x{magic:x} in the leaf chain",
                                  ino=node.ino, block=ablk, field="magic")
        yield from _leaf_entries(node, buf, ablk, values)


def _leaf_entries(node, buf, ablk, values):
    count = _leaf_count(node, buf, ablk)
    for i in range(count):
        got = _leaf_entry(node, buf, ablk, count, i, values)
        if got is not None:
            name = full_name(got[1], got[2])
            if name is not None:
                yield name, got[3]


def _leaf_count(node, buf, ablk) -> int:
    count = dabtree.count(buf)
    if C.XFS_ATTR3_LEAF_HDR_SIZE + 8 * count > len(buf):
        raise CorruptionError("xattr leaf block", f"count {count} overruns the block",
                              ino=node.ino, block=ablk, field="count")
    return count


def _leaf_entry(node, buf, ablk, count, i, values):
    """(hash, flags, name, value) of leaf entry ``i`` (value None unless
    ``values``); None for an incomplete one."""
    size = len(buf)
    base = C.XFS_ATTR3_LEAF_HDR_SIZE
    h, nameidx, flags = struct.unpack_from(">IHB", buf, base + 8 * i)
    if flags & C.XFS_ATTR_INCOMPLETE:
        return None
    if nameidx < base + 8 * count or nameidx >= size:
        raise CorruptionError("xattr leaf block", f"entry {i} name index {nameidx} is "
                              "outside the name area", ino=node.ino, block=ablk,
                              field="nameidx")
    if flags & C.XFS_ATTR_LOCAL:
        if nameidx + 3 > size:
            raise CorruptionError("xattr leaf block", "local entry overruns the block",
                                  ino=node.ino, block=ablk)
        valuelen, namelen = struct.unpack_from(">HB", buf, nameidx)
        nstart = nameidx + 3
        if nstart + namelen + valuelen > size:
            raise CorruptionError("xattr leaf block", "local entry overruns the block",
                                  ino=node.ino, block=ablk)
        return h, flags, bytes(buf[nstart:nstart + namelen]), \
            (bytes(buf[nstart + namelen:nstart + namelen + valuelen]) if values else None)
    if nameidx + 9 > size:
        raise CorruptionError("xattr leaf block", "remote entry overruns the block",
                              ino=node.ino, block=ablk)
    valueblk, valuelen, namelen = struct.unpack_from(">IIB", buf, nameidx)
    nstart = nameidx + 9
    if nstart + namelen > size:
        raise CorruptionError("xattr leaf block", "remote entry overruns the block",
                              ino=node.ino, block=ablk)
    return h, flags, bytes(buf[nstart:nstart + namelen]), \
        (_remote_value(node, valueblk, valuelen) if values else None)


def lookup(node, flags: int, name: bytes) -> bytes | None:
    """The value of the xattr ``name`` in namespace ``flags`` (the on-disk
    XFS_ATTR_ROOT/SECURE bits), or None: the shortform fork scanned, a leaf
    or da-btree walked by the name's hash (O(log n) blocks)."""
    if not node.forkoff:
        return None
    fmt = node.aformat
    if fmt == C.XFS_DINODE_FMT_LOCAL:
        fork = node.fork_bytes(attr=True)
        count = fork[2] if len(fork) >= 4 else 0
        pos = 4
        for _ in range(count):
            namelen, valuelen, eflags = fork[pos], fork[pos + 1], fork[pos + 2]
            end = pos + 3 + namelen + valuelen
            if end > len(fork):
                raise CorruptionError("shortform xattrs", "entry overruns totsize", ino=node.ino)
            if (eflags & C.XFS_ATTR_NSP_ONDISK_MASK) == flags and \
                    not eflags & C.XFS_ATTR_INCOMPLETE and fork[pos + 3:pos + 3 + namelen] == name:
                return bytes(fork[pos + 3 + namelen:end])
            pos = end
        return None
    if fmt not in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE) or \
            not node.extents(attr=True):
        return None
    h = parsers.da_hashname(name)

    def read(ablk):
        return _read_attr_block(node, ablk)
    path = dabtree.descend(read, 0, h, what="xattr node block", ino=node.ino)
    while True:
        ablk, buf, i = path[-1]
        magic = dabtree.magic(buf)
        if magic != C.XFS_ATTR3_LEAF_MAGIC:
            raise CorruptionError("xattr leaf block", f"magic 0x{magic:x} under a node",
                                  ino=node.ino, block=ablk, field="magic")
        count = _leaf_count(node, buf, ablk)
        while i < count and dabtree.hash_at(buf, i, C.XFS_ATTR3_LEAF_HDR_SIZE) == h:
            got = _leaf_entry(node, buf, ablk, count, i, False)
            if got is not None and got[2] == name and \
                    (got[1] & C.XFS_ATTR_NSP_ONDISK_MASK) == flags:
                return _leaf_entry(node, buf, ablk, count, i, True)[3]
            i += 1
        if i < count or not dabtree.next_leaf(read, path):
            return None


def _remote_value(node, valueblk: int, valuelen: int) -> bytes:
    """A remote value: each fs block carries a 56-byte XARM header and up to
    blocksize-56 bytes of the value."""
    if valuelen > 65536:
        raise CorruptionError("xattr leaf block", f"remote value length {valuelen} exceeds "
                              "64 KiB", ino=node.ino, field="valuelen")
    return _read_headed_blocks(node, valueblk, valuelen, V.ATTR3_RMT, attr=True)


def _read_headed_blocks(node, fileblock: int, length: int, bt, attr: bool) -> bytes:
    """Data spread over fork blocks that each start with a v5 remote header
    (remote xattr values)."""
    fs = node.fs
    per_block = fs.sb.blocksize - C.XFS_ATTR3_RMT_HDR_SIZE
    out = bytearray()
    blk = fileblock
    while len(out) < length:
        daddr, pieces = node.read_fork_blocks(blk, 1, attr=attr)
        buf = fs.read_meta(daddr, fs.sb.blocksize, bt, owner=node.ino, ino=node.ino,
                           block=blk, pieces=pieces)
        offset, nbytes = struct.unpack_from(">II", buf, 4)
        want = min(per_block, length - len(out))
        if offset != len(out) or nbytes != want:
            raise CorruptionError(bt.name, f"header says offset {offset}, {nbytes} bytes; "
                                  f"expected offset {len(out)}, {want} bytes",
                                  ino=node.ino, block=blk, field="offset")
        out += buf[C.XFS_ATTR3_RMT_HDR_SIZE:C.XFS_ATTR3_RMT_HDR_SIZE + nbytes]
        blk += 1
    return bytes(out)


def read_symlink(node) -> bytes:
    """The target of a symlink inode, inline or remote."""
    if not node.is_symlink:
        raise CorruptionError("symlink", "not a symlink", ino=node.ino, field="di_mode")
    if node.size <= 0 or node.size > C.XFS_SYMLINK_MAXLEN:
        raise CorruptionError("symlink", f"length {node.size} is not valid", ino=node.ino,
                              field="di_size")
    if node.format == C.XFS_DINODE_FMT_LOCAL:
        fork = node.fork_bytes()
        if node.size > len(fork):
            raise CorruptionError("symlink", "inline target larger than its fork",
                                  ino=node.ino, field="di_size")
        return fork[:node.size]
    if node.format not in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE):
        raise CorruptionError("symlink", f"data fork format {node.format} is not valid",
                              ino=node.ino, field="di_format")
    return _read_remote_symlink(node)


def _read_remote_symlink(node) -> bytes:
    """A remote symlink target: one header per extent (the kernel writes
    each mapped extent as one buffer), the data following it."""
    fs = node.fs
    bs = fs.sb.blocksize
    length = node.size
    need = -(-length // (bs - C.XFS_SYMLINK_HDR_SIZE))
    out = bytearray()
    blk = 0
    while len(out) < length:
        if blk >= need:
            raise CorruptionError("symlink", "target runs past its blocks", ino=node.ino,
                                  field="di_size")
        ext = node.map_block(blk)
        if ext is None:
            raise CorruptionError("symlink", f"block {blk} is a hole", ino=node.ino,
                                  field="extents")
        n = min(ext[0] + ext[2], need) - blk
        daddr = fs.fsb_to_daddr(ext[1] + blk - ext[0])
        buf = fs.read_meta(daddr, n * bs, V.SYMLINK, owner=node.ino, ino=node.ino, block=blk)
        offset, nbytes = struct.unpack_from(">II", buf, 4)
        want = min(n * bs - C.XFS_SYMLINK_HDR_SIZE, length - len(out))
        if offset != len(out) or nbytes != want:
            raise CorruptionError("symlink block", f"header says offset {offset}, {nbytes} "
                                  f"bytes; expected offset {len(out)}, {want} bytes",
                                  ino=node.ino, block=blk, field="offset")
        out += buf[C.XFS_SYMLINK_HDR_SIZE:C.XFS_SYMLINK_HDR_SIZE + nbytes]
        blk += n
    return bytes(out)
