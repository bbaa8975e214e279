"""Extended attributes in every form (shortform, leaf, node, remote values),
parent pointers (the attributes of the parent namespace) and symlink
targets (inline and remote)."""
from __future__ import annotations

import struct
from typing import Iterator, NamedTuple

from ..errors import CorruptionError
from ..format import constants as C
from ..format import parent as P
from ..io import verify as V

_NAMESPACE = {0: "user.", C.XFS_ATTR_ROOT: "trusted.", C.XFS_ATTR_SECURE: "security."}


class Parent(NamedTuple):
    """One parent pointer: the directory ``ino`` (of generation ``gen``)
    names the file ``name``."""
    ino: int
    gen: int
    name: bytes


def _full_name(flags: int, name: bytes) -> str:
    """"user.x" style name of an attribute of a user-visible namespace."""
    return _NAMESPACE[flags & C.XFS_ATTR_NSP_ONDISK_MASK] + \
        name.decode("utf-8", "surrogateescape")


def _user_visible(flags: int) -> bool:
    """The user, trusted and security namespaces (not parent pointers)."""
    return flags & C.XFS_ATTR_NSP_ONDISK_MASK in _NAMESPACE


def iter_xattrs(node, values: bool = True) -> Iterator[tuple[str, bytes | None]]:
    """(full name, value) of every complete attribute of the namespaces
    users see (parent pointers are left out); value is None when ``values``
    is false (remote values are then not read)."""
    for flags, name, value in iter_attrs(node, values, _user_visible):
        yield _full_name(flags, name), value


def iter_parents(node) -> Iterator[Parent]:
    """The parent pointers of ``node``, in the order the attr fork holds
    them.  A parent pointer whose value is not a 12-byte record raises
    CorruptionError."""
    for _flags, name, value in iter_attrs(node, True, P.is_parent):
        try:
            p_ino, p_gen = P.unpack_rec(value)
        except ValueError as e:
            raise CorruptionError("parent pointer", f"{name!r}: {e}", ino=node.ino,
                                  field="valuelen") from None
        yield Parent(p_ino, p_gen, bytes(name))


def iter_attrs(node, values: bool = True, keep=None) -> Iterator[tuple[int, bytes,
                                                                         bytes | None]]:
    """(on-disk flags, name, value) of every complete attribute of every
    namespace, or of those whose flags ``keep(flags)`` accepts; value is
    None when ``values`` is false (remote values are then not read)."""
    if not node.forkoff:
        return
    fmt = node.aformat
    if fmt == C.XFS_DINODE_FMT_LOCAL:
        yield from _shortform(node, values, keep)
    elif fmt in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE):
        if not node.extents(attr=True):
            return
        yield from _leaves(node, values, keep)
    else:
        raise CorruptionError("inode", f"attr fork format {fmt} is not valid", ino=node.ino,
                              field="di_aformat")


def _shortform(node, values: bool, keep):
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
        if not flags & C.XFS_ATTR_INCOMPLETE and (keep is None or keep(flags)):
            yield (flags, fork[pos + 3:pos + 3 + namelen],
                   fork[pos + 3 + namelen:end] if values else None)
        pos = end


def _read_attr_block(node, ablk: int) -> bytes:
    sb = node.fs.sb
    daddr, pieces = node.read_fork_blocks(ablk, 1, attr=True)
    return node.fs.read_meta(daddr, sb.blocksize, V.ATTR3_NODE_OR_LEAF, owner=node.ino,
                             ino=node.ino, block=ablk, pieces=pieces)


def _leaves(node, values: bool, keep):
    for ablk, buf in leaf_blocks(node):
        yield from _leaf_entries(node, buf, ablk, values, keep)


def leaf_blocks(node):
    """(attr block, its bytes) of every leaf of an attr fork in blocks:
    from block 0 down the leftmost path to the first leaf, then along the
    forw chain."""
    ablk = 0
    seen = {0}
    buf = _read_attr_block(node, 0)
    for _depth in range(C.XFS_DA_NODE_MAXDEPTH + 1):
        magic = struct.unpack_from(">H", buf, 8)[0]
        if magic == C.XFS_ATTR3_LEAF_MAGIC:
            break
        count = struct.unpack_from(">H", buf, 56)[0]
        if count == 0 or C.XFS_DA3_NODE_HDR_SIZE + 8 * count > len(buf):
            raise CorruptionError("xattr node block", f"count {count} is not valid",
                                  ino=node.ino, block=ablk, field="count")
        ablk = struct.unpack_from(">I", buf, C.XFS_DA3_NODE_HDR_SIZE + 4)[0]
        if ablk in seen:
            raise CorruptionError("xattr node block", "da-btree cycle", ino=node.ino,
                                  block=ablk)
        seen.add(ablk)
        buf = _read_attr_block(node, ablk)
    else:
        raise CorruptionError("xattr node block", "da-btree too deep", ino=node.ino)
    while True:
        magic = struct.unpack_from(">H", buf, 8)[0]
        if magic != C.XFS_ATTR3_LEAF_MAGIC:
            raise CorruptionError("xattr leaf block", f"magic 0x{magic:x} in the leaf chain",
                                  ino=node.ino, block=ablk, field="magic")
        yield ablk, buf
        forw = struct.unpack_from(">I", buf, 0)[0]
        if forw == 0:
            return
        if forw in seen:
            raise CorruptionError("xattr leaf block", "forward link cycle", ino=node.ino,
                                  block=forw)
        seen.add(forw)
        ablk = forw
        buf = _read_attr_block(node, ablk)


def _leaf_entries(node, buf, ablk, values, keep):
    size = len(buf)
    count = struct.unpack_from(">H", buf, 56)[0]
    base = C.XFS_ATTR3_LEAF_HDR_SIZE
    if base + 8 * count > size:
        raise CorruptionError("xattr leaf block", f"count {count} overruns the block",
                              ino=node.ino, block=ablk, field="count")
    for i in range(count):
        _hash, nameidx, flags = struct.unpack_from(">IHB", buf, base + 8 * i)
        if flags & C.XFS_ATTR_INCOMPLETE or (keep is not None and not keep(flags)):
            continue
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
            yield (flags, buf[nstart:nstart + namelen],
                   buf[nstart + namelen:nstart + namelen + valuelen] if values else None)
        else:
            if nameidx + 9 > size:
                raise CorruptionError("xattr leaf block", "remote entry overruns the block",
                                      ino=node.ino, block=ablk)
            valueblk, valuelen, namelen = struct.unpack_from(">IIB", buf, nameidx)
            nstart = nameidx + 9
            if nstart + namelen > size:
                raise CorruptionError("xattr leaf block", "remote entry overruns the block",
                                      ino=node.ino, block=ablk)
            yield (flags, buf[nstart:nstart + namelen],
                   _remote_value(node, valueblk, valuelen) if values else None)


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
