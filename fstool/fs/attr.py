"""Extended attributes in every form (shortform, leaf, node, remote values),
parent pointers (the attributes of the parent namespace) and symlink
targets (inline and remote)."""
from __future__ import annotations

from typing import Iterator, NamedTuple

from ..errors import CorruptionError
from ..format import constants as C
from ..format import parent as P
from ..io import verify as V
from . import attrleaf as L, dabtree

_NAMESPACE = {0: "user.", C.XFS_ATTR_ROOT: "trusted.", C.XFS_ATTR_SECURE: "security."}


class Parent(NamedTuple):
    """One parent pointer: the directory ``ino`` (of generation ``gen``)
    names the file ``name``."""
    ino: int
    gen: int
    name: bytes


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


def _user_visible(flags: int) -> bool:
    """The user, trusted and security namespaces (not parent pointers)."""
    return flags & C.XFS_ATTR_NSP_ONDISK_MASK in _NAMESPACE


def iter_xattrs(node, values: bool = True) -> Iterator[tuple[str, bytes | None]]:
    """(full name, value) of every complete attribute of the namespaces
    users see (parent pointers are left out); value is None when ``values``
    is false (remote values are then not read)."""
    for flags, name, value in iter_attrs(node, values, _user_visible):
        yield full_name(flags, name), value


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
    if len(fork) < L.SF_HDR:
        raise CorruptionError("shortform xattrs", "attr fork too small", ino=node.ino)
    totsize, count = L.sf_header(fork)
    if totsize > len(fork) or totsize < L.SF_HDR:
        raise CorruptionError("shortform xattrs", f"totsize {totsize} does not fit the fork "
                              f"({len(fork)} bytes)", ino=node.ino, field="totsize")
    pos = L.SF_HDR
    for _ in range(count):
        if pos + L.SF_ENTRY > totsize:
            raise CorruptionError("shortform xattrs", "entry overruns totsize", ino=node.ino)
        namelen, valuelen, flags = L.sf_entry(fork, pos)
        name = pos + L.SF_ENTRY
        end = name + namelen + valuelen
        if end > totsize:
            raise CorruptionError("shortform xattrs", "entry overruns totsize", ino=node.ino)
        if not flags & C.XFS_ATTR_INCOMPLETE and (keep is None or keep(flags)):
            yield (flags, fork[name:name + namelen],
                   fork[name + namelen:end] if values else None)
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
    """(attr block, its bytes) of every leaf of an attr fork in blocks, left
    to right (da-btree walk from attr block 0)."""
    def read(ablk):
        return _read_attr_block(node, ablk)
    for ablk, buf in dabtree.leaves(read, 0, what="xattr node block", ino=node.ino):
        magic = dabtree.magic(buf)
        if magic != C.XFS_ATTR3_LEAF_MAGIC:
            raise CorruptionError("xattr leaf block", f"magic 0x{magic:x} in the leaf chain",
                                  ino=node.ino, block=ablk, field="magic")
        yield ablk, buf


def _leaf_entries(node, buf, ablk, values, keep):
    count = _leaf_count(node, buf, ablk)
    for i in range(count):
        if keep is not None and not keep(L.entry_flags(buf, i)):
            continue
        got = _leaf_entry(node, buf, ablk, count, i, values)
        if got is not None:
            yield got[1], got[2], got[3]


def _leaf_count(node, buf, ablk) -> int:
    count = dabtree.count(buf)
    if L.HDR + L.ENTRY * count > len(buf):
        raise CorruptionError("xattr leaf block", f"count {count} overruns the block",
                              ino=node.ino, block=ablk, field="count")
    return count


def _leaf_entry(node, buf, ablk, count, i, values):
    """(hash, flags, name, value) of leaf entry ``i`` (value None unless
    ``values``); None for an incomplete one."""
    size = len(buf)
    h, nameidx, flags = L.entry(buf, i)
    if flags & C.XFS_ATTR_INCOMPLETE:
        return None
    if nameidx < L.HDR + L.ENTRY * count or nameidx >= size:
        raise CorruptionError("xattr leaf block", f"entry {i} name index {nameidx} is "
                              "outside the name area", ino=node.ino, block=ablk,
                              field="nameidx")
    if flags & C.XFS_ATTR_LOCAL:
        if nameidx + L.LOCAL > size:
            raise CorruptionError("xattr leaf block", "local entry overruns the block",
                                  ino=node.ino, block=ablk)
        valuelen, namelen = L.local_name(buf, nameidx)
        nstart = nameidx + L.LOCAL
        if nstart + namelen + valuelen > size:
            raise CorruptionError("xattr leaf block", "local entry overruns the block",
                                  ino=node.ino, block=ablk)
        return h, flags, bytes(buf[nstart:nstart + namelen]), \
            (bytes(buf[nstart + namelen:nstart + namelen + valuelen]) if values else None)
    if nameidx + L.REMOTE > size:
        raise CorruptionError("xattr leaf block", "remote entry overruns the block",
                              ino=node.ino, block=ablk)
    valueblk, valuelen, namelen = L.remote_name(buf, nameidx)
    nstart = nameidx + L.REMOTE
    if nstart + namelen > size:
        raise CorruptionError("xattr leaf block", "remote entry overruns the block",
                              ino=node.ino, block=ablk)
    return h, flags, bytes(buf[nstart:nstart + namelen]), \
        (_remote_value(node, valueblk, valuelen) if values else None)


def lookup(node, flags: int, name: bytes, value: bytes | None = None) -> bytes | None:
    """The value of the xattr ``name`` in namespace ``flags`` (the on-disk
    XFS_ATTR_ROOT/SECURE/PARENT bits), or None: the shortform fork scanned,
    a leaf or da-btree walked by the attribute's hash (O(log n) blocks).  A
    parent pointer is looked up by its name and ``value`` (its record: the
    hash mixes in the parent's inode number, and one name may link the file
    from two directories)."""
    parent = P.is_parent(flags)
    if not node.forkoff:
        return None
    fmt = node.aformat
    if fmt == C.XFS_DINODE_FMT_LOCAL:
        fork = node.fork_bytes(attr=True)
        count = L.sf_count(fork) if len(fork) >= L.SF_HDR else 0
        pos = L.SF_HDR
        for _ in range(count):
            namelen, valuelen, eflags = L.sf_entry(fork, pos)
            nstart = pos + L.SF_ENTRY
            end = nstart + namelen + valuelen
            if end > len(fork):
                raise CorruptionError("shortform xattrs", "entry overruns totsize", ino=node.ino)
            if (eflags & C.XFS_ATTR_NSP_ONDISK_MASK) == flags and \
                    not eflags & C.XFS_ATTR_INCOMPLETE and \
                    fork[nstart:nstart + namelen] == name and \
                    (not parent or fork[nstart + namelen:end] == value):
                return bytes(fork[nstart + namelen:end])
            pos = end
        return None
    if fmt not in (C.XFS_DINODE_FMT_EXTENTS, C.XFS_DINODE_FMT_BTREE) or \
            not node.extents(attr=True):
        return None
    h = P.attr_hash(flags, name, value)

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
        while i < count and dabtree.hash_at(buf, i, L.HDR) == h:
            got = _leaf_entry(node, buf, ablk, count, i, parent)
            if got is not None and got[2] == name and \
                    (got[1] & C.XFS_ATTR_NSP_ONDISK_MASK) == flags and \
                    (not parent or got[3] == value):
                return got[3] if parent else _leaf_entry(node, buf, ablk, count, i, True)[3]
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
    per_block = fs.sb.blocksize - L.RMT_HDR
    out = bytearray()
    blk = fileblock
    while len(out) < length:
        daddr, pieces = node.read_fork_blocks(blk, 1, attr=attr)
        buf = fs.read_meta(daddr, fs.sb.blocksize, bt, owner=node.ino, ino=node.ino,
                           block=blk, pieces=pieces)
        offset, nbytes = L.rmt_part(buf)
        want = min(per_block, length - len(out))
        if offset != len(out) or nbytes != want:
            raise CorruptionError(bt.name, f"header says offset {offset}, {nbytes} bytes; "
                                  f"expected offset {len(out)}, {want} bytes",
                                  ino=node.ino, block=blk, field="offset")
        out += buf[L.RMT_HDR:L.RMT_HDR + nbytes]
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
        offset, nbytes = L.rmt_part(buf)
        want = min(n * bs - C.XFS_SYMLINK_HDR_SIZE, length - len(out))
        if offset != len(out) or nbytes != want:
            raise CorruptionError("symlink block", f"header says offset {offset}, {nbytes} "
                                  f"bytes; expected offset {len(out)}, {want} bytes",
                                  ino=node.ino, block=blk, field="offset")
        out += buf[C.XFS_SYMLINK_HDR_SIZE:C.XFS_SYMLINK_HDR_SIZE + nbytes]
        blk += n
    return bytes(out)
