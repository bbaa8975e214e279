"""Hot-path parsers for XFS metadata, in Cython's pure-Python mode.

This one file is both backends: setup.py compiles it with Cython into the
native extension (the type declarations below become C types, loops become C
loops), and imported as plain Python it is the pure-Python backend.  There is
no second copy of the logic.

Inputs are ``bytes`` (or ``bytearray``); everything on disk is big-endian
unless noted.  Malformed input raises ValueError with a short reason: no
function reads outside its buffer or loops without bound.
"""
try:
    import cython
except ImportError:          # plain Python without Cython installed
    from fstool_native import _cython_shim as cython

from struct import iter_unpack as _iter_words

# CRC-32C (Castagnoli), reflected polynomial 0x82F63B78, as eight 256-entry
# tables for slicing-by-8.  parsers.pxd declares _T as a C array when compiled.
_T = [0] * 2048


def _init_tables():
    for i in range(256):
        c = i
        for _k in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        _T[i] = c
    for i in range(256):
        c = _T[i]
        for k in range(1, 8):
            c = _T[c & 0xFF] ^ (c >> 8)
            _T[k * 256 + i] = c


_init_tables()

# compiled: whether the CPU's CRC-32C instruction is there to use (crc32c_hw.h);
# FSTOOL_NO_HW_CRC=1 keeps the table-driven loop, for comparing the two
_HW_CRC = 0
if cython.compiled:
    import os as _os
    if _os.environ.get("FSTOOL_NO_HW_CRC", "") in ("", "0"):
        _HW_CRC = fstool_crc32c_hw_available()


_SLICES = []


@cython.locals(k=cython.int, i=cython.int)
def _slice_tables():
    """The eight CRC tables as Python lists (the pure path's view of _T)."""
    if not _SLICES:
        for k in range(8):
            _SLICES.append([_T[k * 256 + i] for i in range(256)])
    return _SLICES


def _crc_update_words(data, start, end, c):
    """Pure-Python twin of the loop in _crc_update (same result): the same
    slicing-by-8 step, fed 8 bytes at a time by struct instead of byte by
    byte, which is what makes it affordable when interpreted (~30 us per
    512-byte inode; larger tables lose to cache misses)."""
    t0, t1, t2, t3, t4, t5, t6, t7 = _slice_tables()
    mid = start + ((end - start) & ~7)
    if mid > start:
        for lo, hi in _iter_words("<II", data[start:mid]):
            c ^= lo
            c = (t7[c & 0xFF] ^ t6[(c >> 8) & 0xFF] ^ t5[(c >> 16) & 0xFF] ^ t4[c >> 24] ^
                 t3[hi & 0xFF] ^ t2[(hi >> 8) & 0xFF] ^ t1[(hi >> 16) & 0xFF] ^ t0[hi >> 24])
    for b in data[mid:end]:
        c = t0[(c ^ b) & 0xFF] ^ (c >> 8)
    return c


@cython.cfunc
@cython.locals(p=cython.p_uchar, start=cython.Py_ssize_t, end=cython.Py_ssize_t,
               c=cython.uint, i=cython.Py_ssize_t)
@cython.returns(cython.uint)
def _crc_update(p, start, end, c):
    """Continue a (pre-inverted) CRC register over p[start:end]: by the CPU's
    instruction when compiled on a CPU that has it, else slicing-by-8."""
    if not cython.compiled:
        return _crc_update_words(p, start, end, c)
    if _HW_CRC:
        return fstool_crc32c_hw(c, p + start, end - start)
    i = start
    while i + 8 <= end:
        c ^= p[i] | (p[i + 1] << 8) | (p[i + 2] << 16) | (p[i + 3] << 24)
        c = (_T[1792 + (c & 0xFF)] ^ _T[1536 + ((c >> 8) & 0xFF)] ^
             _T[1280 + ((c >> 16) & 0xFF)] ^ _T[1024 + (c >> 24)] ^
             _T[768 + p[i + 4]] ^ _T[512 + p[i + 5]] ^ _T[256 + p[i + 6]] ^ _T[p[i + 7]])
        i += 8
    while i < end:
        c = _T[(c ^ p[i]) & 0xFF] ^ (c >> 8)
        i += 1
    return c


@cython.cfunc
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t)
@cython.returns(cython.uint)
def _be16(p, off):
    return (p[off] << 8) | p[off + 1]


@cython.cfunc
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t)
@cython.returns(cython.uint)
def _be32(p, off):
    return (p[off] << 24) | (p[off + 1] << 16) | (p[off + 2] << 8) | p[off + 3]


@cython.cfunc
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, hi=cython.ulonglong,
               lo=cython.ulonglong)
@cython.returns(cython.ulonglong)
def _be64(p, off):
    hi = _be32(p, off)
    lo = _be32(p, off + 4)
    return (hi << 32) | lo


def _check_records(buf, off, n, size, what):
    if off < 0 or n < 0 or off + size * n > len(buf):
        raise ValueError(f"{what} run past the buffer")


# The bmbt record: two big-endian words.  l0 bit 63 is the unwritten flag,
# l0 bits 62..9 the file offset, l0 bits 8..0 with l1 bits 63..21 the start
# block, l1 bits 20..0 the length.
@cython.cfunc
@cython.locals(l0=cython.ulonglong)
@cython.returns(cython.ulonglong)
def _rec_startoff(l0):
    return (l0 >> 9) & 0x3FFFFFFFFFFFFF


@cython.cfunc
@cython.locals(l0=cython.ulonglong, l1=cython.ulonglong)
@cython.returns(cython.ulonglong)
def _rec_startblock(l0, l1):
    return ((l0 & 0x1FF) << 43) | (l1 >> 21)


@cython.cfunc
@cython.locals(l1=cython.ulonglong)
@cython.returns(cython.ulonglong)
def _rec_blockcount(l1):
    return l1 & 0x1FFFFF


@cython.locals(p=cython.p_uchar, c=cython.uint)
def crc32c(data, crc: cython.uint = 0) -> int:
    """CRC-32C of ``data``, continuing from a previous result ``crc``."""
    p = data
    c = _crc_update(p, 0, len(data), crc ^ 0xFFFFFFFF)
    return c ^ 0xFFFFFFFF


@cython.cfunc
@cython.locals(p=cython.p_uchar, start=cython.Py_ssize_t, end=cython.Py_ssize_t,
               off=cython.Py_ssize_t, c=cython.uint)
@cython.returns(cython.uint)
def _cksum_region(p, start, end, off):
    """XFS checksum of p[start:end] with the 4-byte field at p[off] (inside
    the region) taken as zero."""
    c = _crc_update(p, start, off, 0xFFFFFFFF)
    # four zero bytes stand in for the checksum field
    c = _T[c & 0xFF] ^ (c >> 8)
    c = _T[c & 0xFF] ^ (c >> 8)
    c = _T[c & 0xFF] ^ (c >> 8)
    c = _T[c & 0xFF] ^ (c >> 8)
    c = _crc_update(p, off + 4, end, c)
    return c ^ 0xFFFFFFFF


@cython.cfunc
@cython.locals(p=cython.p_uchar, start=cython.Py_ssize_t, end=cython.Py_ssize_t,
               off=cython.Py_ssize_t, stored=cython.uint)
@cython.returns(cython.bint)
def _cksum_region_ok(p, start, end, off):
    stored = p[off] | (p[off + 1] << 8) | (p[off + 2] << 16) | (p[off + 3] << 24)
    return _cksum_region(p, start, end, off) == stored


@cython.locals(p=cython.p_uchar, n=cython.Py_ssize_t, off=cython.Py_ssize_t)
def xfs_cksum(buf, crc_offset) -> int:
    """CRC-32C of ``buf`` with the 4-byte CRC field at ``crc_offset`` taken as
    zero: the value XFS stores (little-endian) in that field."""
    p = buf
    n = len(buf)
    off = crc_offset
    if off < 0 or off + 4 > n:
        raise ValueError("checksum field outside the buffer")
    return _cksum_region(p, 0, n, off)


@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t)
def xfs_cksum_ok(buf, crc_offset) -> bool:
    """True when the CRC stored at ``crc_offset`` matches the buffer."""
    p = buf
    off = crc_offset
    if off < 0 or off + 4 > len(buf):
        raise ValueError("checksum field outside the buffer")
    return bool(_cksum_region_ok(p, 0, len(buf), off))


@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, n=cython.Py_ssize_t,
               i=cython.Py_ssize_t, l0=cython.ulonglong, l1=cython.ulonglong)
def decode_bmbt_recs(buf, offset, count) -> list:
    """``count`` 16-byte bmbt records at ``offset`` as tuples
    (startoff, startblock, blockcount, unwritten)."""
    p = buf
    off = offset
    n = count
    _check_records(buf, off, n, 16, "bmbt records")
    out = []
    for i in range(n):
        l0 = _be64(p, off)
        l1 = _be64(p, off + 8)
        out.append((_rec_startoff(l0), _rec_startblock(l0, l1), _rec_blockcount(l1),
                    l0 >> 63))
        off += 16
    return out


@cython.cfunc
@cython.locals(p=cython.p_uchar, pos=cython.Py_ssize_t, stop=cython.Py_ssize_t,
               ft=cython.int, namelen=cython.Py_ssize_t, size=cython.Py_ssize_t,
               length=cython.Py_ssize_t)
@cython.returns(cython.Py_ssize_t)
def _data_step(p, pos, stop, ft):
    """Size of the directory data entry at p[pos], or minus the size of the
    unused region there, after checking it fits before ``stop`` and its tag.

    An entry is inumber(8) namelen(1) name [ftype(1)] padding tag(2), 8-byte
    aligned; an unused region starts with 0xFFFF and its length, and ends
    with a tag; every tag holds the offset of its own entry."""
    if stop - pos < 8:
        raise ValueError(f"truncated entry at offset {pos}")
    if _be16(p, pos) == 0xFFFF:
        length = _be16(p, pos + 2)
        if length < 8 or length & 7 or pos + length > stop:
            raise ValueError(f"bad free region length {length} at offset {pos}")
        if _be16(p, pos + length - 2) != pos:
            raise ValueError(f"bad free region tag at offset {pos}")
        return -length
    namelen = p[pos + 8]
    if namelen == 0:
        raise ValueError(f"zero-length name at offset {pos}")
    size = (8 + 1 + namelen + ft + 2 + 7) & ~7
    if pos + size > stop:
        raise ValueError(f"entry at offset {pos} runs past the data region")
    if _be16(p, pos + size - 2) != pos:
        raise ValueError(f"bad entry tag at offset {pos}")
    return size


@cython.locals(p=cython.p_uchar, pos=cython.Py_ssize_t, stop=cython.Py_ssize_t,
               ft=cython.int, namelen=cython.Py_ssize_t, size=cython.Py_ssize_t,
               ftype=cython.int, names=cython.bint)
def dir2_data_entries(buf, start, end, has_ftype, listing=False) -> list:
    """Entries of a directory data region buf[start:end] as tuples
    (offset, inumber, name, ftype), skipping unused (free) regions.  With
    ``listing``, the tuples are (name, inumber, ftype) and the entries named
    ``.`` and ``..`` are left out."""
    p = buf
    pos = start
    stop = end
    ft = 1 if has_ftype else 0
    names = listing
    if pos < 0 or stop > len(buf) or pos > stop:
        raise ValueError("directory data region outside the buffer")
    out = []
    while pos < stop:
        size = _data_step(p, pos, stop, ft)
        if size < 0:
            pos -= size
            continue
        namelen = p[pos + 8]
        ftype = p[pos + 9 + namelen] if ft else 0
        if not names:
            out.append((pos, _be64(p, pos), p[pos + 9:pos + 9 + namelen], ftype))
        elif not (p[pos + 9] == 46 and (namelen == 1 or (namelen == 2 and
                                                          p[pos + 10] == 46))):
            out.append((p[pos + 9:pos + 9 + namelen], _be64(p, pos), ftype))
        pos += size
    return out


@cython.locals(p=cython.p_uchar, base=cython.Py_ssize_t, stop=cython.Py_ssize_t,
               pos=cython.Py_ssize_t, count=cython.int, width=cython.int, i=cython.int,
               namelen=cython.Py_ssize_t, ft=cython.int, ftype=cython.int,
               ino=cython.ulonglong, parent=cython.ulonglong, names=cython.bint)
def dir2_sf_entries(buf, offset, size, has_ftype, listing=False) -> tuple:
    """A shortform directory at buf[offset:offset+size]: (parent inode,
    [(offset cookie, inumber, name, ftype), ...]); with ``listing`` the
    tuples are (name, inumber, ftype).

    Header: count(1) i8count(1) parent(4 or 8); entries: namelen(1)
    offset(2) name [ftype(1)] inumber(4 or 8).  Inode numbers are 8 bytes
    wide when i8count is non-zero."""
    p = buf
    base = offset
    stop = offset + size
    ft = 1 if has_ftype else 0
    names = listing
    if base < 0 or size < 6 or stop > len(buf):
        raise ValueError("shortform directory outside the buffer")
    count = p[base]
    width = 8 if p[base + 1] else 4
    if base + 2 + width > stop:
        raise ValueError("shortform header runs past its size")
    parent = _be64(p, base + 2) if width == 8 else _be32(p, base + 2)
    pos = base + 2 + width
    out = []
    for i in range(count):
        if pos + 3 > stop:
            raise ValueError(f"entry {i} runs past the shortform size")
        namelen = p[pos]
        if namelen == 0:
            raise ValueError(f"entry {i} has a zero-length name")
        if pos + 3 + namelen + ft + width > stop:
            raise ValueError(f"entry {i} runs past the shortform size")
        ftype = p[pos + 3 + namelen] if ft else 0
        if width == 8:
            ino = _be64(p, pos + 3 + namelen + ft)
        else:
            ino = _be32(p, pos + 3 + namelen + ft)
        if names:
            out.append((p[pos + 3:pos + 3 + namelen], ino, ftype))
        else:
            out.append((_be16(p, pos + 1), ino, p[pos + 3:pos + 3 + namelen], ftype))
        pos += 3 + namelen + ft + width
    return parent, out


@cython.locals(p=cython.p_uchar, base=cython.Py_ssize_t, n=cython.Py_ssize_t,
               lo=cython.Py_ssize_t, hi=cython.Py_ssize_t, mid=cython.Py_ssize_t,
               h=cython.uint)
def hash_lower_bound(buf, start, count, hashval) -> int:
    """Index of the first of ``count`` (hashval, address) pairs at
    buf[start:] (a leaf's entries or a da-btree node's keys, 8 bytes each,
    sorted by hash) whose hash is at least ``hashval``; ``count`` when none."""
    p = buf
    base = start
    n = count
    h = hashval
    if base < 0 or n < 0 or base + 8 * n > len(buf):
        raise ValueError("hash array runs past the buffer")
    lo = 0
    hi = n
    while lo < hi:
        mid = (lo + hi) // 2
        if _be32(p, base + 8 * mid) < h:
            lo = mid + 1
        else:
            hi = mid
    return lo


@cython.cfunc
@cython.locals(x=cython.uint, n=cython.int)
@cython.returns(cython.uint)
def _rol32(x, n):
    return ((x << n) | (x >> (32 - n))) & 0xFFFFFFFF


@cython.cfunc
@cython.locals(p=cython.p_uchar, start=cython.Py_ssize_t, n=cython.Py_ssize_t,
               i=cython.Py_ssize_t, h=cython.uint)
@cython.returns(cython.uint)
def _hash_at(p, start, n):
    """The XFS directory/xattr name hash of p[start:start + n]: four bytes at
    a time, each step mixing the bytes at shifts 21/14/7/0 into the previous
    hash rotated left by 28; a 1-3 byte tail mixes in the same way with a
    shorter rotation."""
    h = 0
    i = start
    n += start
    while n - i >= 4:
        h = ((p[i] << 21) ^ (p[i + 1] << 14) ^ (p[i + 2] << 7) ^ p[i + 3] ^
             _rol32(h, 28)) & 0xFFFFFFFF
        i += 4
    if n - i == 3:
        h = ((p[i] << 14) ^ (p[i + 1] << 7) ^ p[i + 2] ^ _rol32(h, 21)) & 0xFFFFFFFF
    elif n - i == 2:
        h = ((p[i] << 7) ^ p[i + 1] ^ _rol32(h, 14)) & 0xFFFFFFFF
    elif n - i == 1:
        h = (p[i] ^ _rol32(h, 7)) & 0xFFFFFFFF
    return h


@cython.locals(p=cython.p_uchar)
def da_hashname(name) -> int:
    """The XFS directory/xattr name hash of ``name``."""
    p = name
    return _hash_at(p, 0, len(name))


@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, n=cython.Py_ssize_t,
               i=cython.Py_ssize_t)
def inobt_recs(buf, offset, count, sparse) -> list:
    """``count`` 16-byte inobt/finobt records as tuples
    (startino, holemask, count, freecount, free mask).  Without sparse
    inodes the second word is a 32-bit freecount and a chunk is 64 inodes."""
    p = buf
    off = offset
    n = count
    _check_records(buf, off, n, 16, "inobt records")
    out = []
    for i in range(n):
        if sparse:
            out.append((_be32(p, off), _be16(p, off + 4), p[off + 6], p[off + 7],
                        _be64(p, off + 8)))
        else:
            out.append((_be32(p, off), 0, 64, _be32(p, off + 4), _be64(p, off + 8)))
        off += 16
    return out


@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, n=cython.Py_ssize_t,
               i=cython.Py_ssize_t)
def alloc_recs(buf, offset, count) -> list:
    """``count`` free-space records (startblock, blockcount)."""
    p = buf
    off = offset
    n = count
    _check_records(buf, off, n, 8, "free space records")
    out = []
    for i in range(n):
        out.append((_be32(p, off), _be32(p, off + 4)))
        off += 8
    return out


@cython.cfunc
@cython.locals(p=cython.p_uchar, u=cython.p_uchar, off=cython.Py_ssize_t,
               isize=cython.Py_ssize_t, ino=cython.ulonglong, i=cython.int,
               magic=cython.uint)
def _dinode_check(p, off, isize, ino, u):
    """Verify the v3 inode at p[off:off+isize] (magic, version, CRC, inode
    number, uuid); failures raise ValueError("field|reason")."""
    magic = _be16(p, off)
    if magic != 0x494E:
        raise ValueError(f"di_magic|bad magic 0x{magic:04x}")
    if p[off + 4] != 3:
        raise ValueError(f"di_version|version {p[off + 4]}, expected 3")
    if not _cksum_region_ok(p, off, off + isize, off + 100):
        raise ValueError("di_crc|CRC mismatch")
    if _be64(p, off + 152) != ino:
        raise ValueError(f"di_ino|records number {_be64(p, off + 152)}")
    for i in range(16):
        if p[off + 160 + i] != u[i]:
            raise ValueError("di_uuid|uuid does not match the filesystem")


@cython.locals(p=cython.p_uchar, u=cython.p_uchar, n=cython.Py_ssize_t)
def dinode_core(buf, ino, uuid) -> tuple:
    """Verify a v3 inode (magic, version, CRC, inode number, uuid) and return
    the fields every caller needs: (mode, format, size, nlink, uid, gid,
    forkoff, aformat, flags2).  Failures raise ValueError("field|reason")."""
    p = buf
    u = uuid
    n = len(buf)
    if n < 176 or len(uuid) != 16:
        raise ValueError("di_magic|inode buffer too small")
    _dinode_check(p, 0, n, ino, u)
    return (_be16(p, 2), p[5], _be64(p, 56), _be32(p, 16), _be32(p, 8), _be32(p, 12),
            p[82], p[83], _be64(p, 120))


class InodeCore:
    """The decoded core of one verified inode: what every caller reads
    (``fstool.fs.inode.Inode`` extends it with the rest).  Compiled, the
    fields are C fields (parsers.pxd) and :func:`load_inodes` fills them
    without Python-level calls."""
    __slots__ = ("fs", "ino", "raw", "mode", "format", "size", "nlink", "uid", "gid",
                 "forkoff", "aformat", "flags2", "_core", "_extents", "_aextents")


@cython.locals(p=cython.p_uchar, u=cython.p_uchar, i=cython.Py_ssize_t, n=cython.Py_ssize_t,
               ino=cython.ulonglong, agno=cython.ulonglong, agino=cython.ulonglong,
               agbno=cython.ulonglong, cstart=cython.ulonglong, nblocks=cython.ulonglong,
               daddr=cython.ulonglong, last=cython.ulonglong, have=cython.bint,
               off=cython.Py_ssize_t, isize=cython.Py_ssize_t, blen=cython.Py_ssize_t,
               agcount=cython.ulonglong, agblocks=cython.ulonglong,
               last_ag_blocks=cython.ulonglong, aglen=cython.ulonglong,
               inopblog=cython.int, agino_log=cython.int, cluster_blocks=cython.ulonglong,
               bb_per_fsb_log=cython.int, inodelog=cython.int, forkoff=cython.int,
               agino_mask=cython.ulonglong, slot_mask=cython.ulonglong, node=InodeCore)
def load_inodes(cls, fs, inos, get_cluster, uuid, geometry, out) -> None:
    """Read, verify and decode the inodes ``inos`` into new ``cls`` objects
    (a subclass of InodeCore) appended to ``out``.

    ``geometry`` is (agcount, agblocks, last AG's blocks, inopblog,
    agino_log, blocks per inode cluster, blocklog - 9, inodelog).
    ``get_cluster(daddr, nblocks)`` returns the inode cluster starting at
    ``daddr`` (512-byte units) of ``nblocks`` filesystem blocks; it is called
    again only when the next inode lies in another cluster.  The first inode
    that fails raises ValueError(index, field, reason), ``field`` being
    "location" for a number outside the filesystem; the ones before it are
    already in ``out``."""
    (agcount, agblocks, last_ag_blocks, inopblog, agino_log, cluster_blocks,
     bb_per_fsb_log, inodelog) = geometry
    u = uuid
    if len(uuid) != 16:
        raise ValueError(0, "di_uuid", "the filesystem uuid is not 16 bytes")
    isize = 1
    isize = isize << inodelog
    agino_mask = 1
    agino_mask = (agino_mask << agino_log) - 1
    slot_mask = 1
    slot_mask = (slot_mask << inopblog) - 1
    have = False
    last = 0
    buf = None
    p = b""
    blen = 0
    n = len(inos)
    for i in range(n):
        ino = inos[i]
        agno = ino >> agino_log
        agino = ino & agino_mask
        agbno = agino >> inopblog
        aglen = last_ag_blocks if agno == agcount - 1 else agblocks
        if agno >= agcount or agbno == 0 or agbno >= aglen:
            raise ValueError(i, "location", f"{ino} lies outside the filesystem")
        cstart = agbno - agbno % cluster_blocks
        nblocks = min(cluster_blocks, aglen - cstart)
        daddr = (agno * agblocks + cstart) << bb_per_fsb_log
        if not have or daddr != last:
            buf = get_cluster(daddr, nblocks)
            p = buf
            blen = len(buf)
            last = daddr
            have = True
        off = (((agbno - cstart) << inopblog) + (agino & slot_mask)) << inodelog
        if off + isize > blen:
            raise ValueError(i, "location", f"{ino} lies beyond its inode cluster")
        try:
            _dinode_check(p, off, isize, ino, u)
        except ValueError as e:
            field, _sep, reason = str(e).partition("|")
            raise ValueError(i, field, reason) from None
        forkoff = p[off + 82]
        if forkoff and 176 + forkoff * 8 >= isize:
            raise ValueError(i, "di_forkoff", f"attr fork offset {forkoff} beyond the inode")
        node = InodeCore.__new__(cls)
        node.fs = fs
        node.ino = ino
        node.raw = buf[off:off + isize]
        node.mode = _be16(p, off + 2)
        node.format = p[off + 5]
        node.size = _be64(p, off + 56)
        node.nlink = _be32(p, off + 16)
        node.uid = _be32(p, off + 8)
        node.gid = _be32(p, off + 12)
        node.forkoff = forkoff
        node.aformat = p[off + 83]
        node.flags2 = _be64(p, off + 120)
        node._core = None
        node._extents = None
        node._aextents = None
        out.append(node)


@cython.locals(i=cython.Py_ssize_t, n=cython.Py_ssize_t, prev_end=cython.ulonglong,
               startoff=cython.ulonglong, startblock=cython.ulonglong,
               count=cython.ulonglong, agno=cython.ulonglong, agbno=cython.ulonglong,
               mask=cython.ulonglong, limit=cython.ulonglong)
def check_extents(exts, agblklog, agblocks, agcount, last_ag_blocks):
    """None when an extent list is sorted, non-overlapping, non-empty and
    every extent lies inside one AG; else (index, reason)."""
    n = len(exts)
    prev_end = 0
    mask = (1 << agblklog) - 1
    for i in range(n):
        startoff, startblock, count = exts[i][0], exts[i][1], exts[i][2]
        if count == 0:
            return i, "zero-length extent"
        if i and startoff < prev_end:
            return i, "extents out of order or overlapping"
        prev_end = startoff + count
        # the AG number is 32 bits wide (XFS_FSB_TO_AGNO): higher bits drop
        agno = (startblock >> agblklog) & 0xFFFFFFFF
        agbno = startblock & mask
        if agno >= agcount:
            return i, f"block {startblock} lies in AG {agno}, beyond the last AG"
        limit = last_ag_blocks if agno == agcount - 1 else agblocks
        if agbno + count > limit:
            return i, (f"extent at block {startblock} (AG {agno} block {agbno}), {count} "
                       "blocks, runs past the end of its AG")
    return None


@cython.cfunc
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, n=cython.Py_ssize_t,
               i=cython.Py_ssize_t)
@cython.returns(cython.bint)
def _zero(p, off, n):
    for i in range(n):
        if p[off + i]:
            return False
    return True


@cython.cfunc
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t)
@cython.returns(cython.bint)
def _legacy_times_ok(p, off):
    """The nanosecond words of atime, mtime, ctime and crtime are below a
    second (legacy timestamps)."""
    return (_be32(p, off + 36) < 1000000000 and _be32(p, off + 44) < 1000000000 and
            _be32(p, off + 52) < 1000000000 and _be32(p, off + 148) < 1000000000)


@cython.cfunc
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, big=cython.bint,
               raw=cython.ulonglong, sec=cython.longlong, sraw=cython.longlong)
def _timestamp_ns(p, off, big):
    """An inode timestamp as nanoseconds since the epoch (a Python int: the
    bigtime range passes 2**63): bigtime counts nanoseconds from 1901-12-13
    (2**31 s before the epoch); the old format is signed seconds and
    nanoseconds, 32 bits each."""
    raw = _be64(p, off)
    if big:
        if raw < 9223372036854775808:
            sraw = raw
            return sraw - 2147483648000000000
        return raw - 2147483648000000000
    sec = raw >> 32
    if sec >= 2147483648:
        sec -= 4294967296
    return sec * 1000000000 + (raw & 0xFFFFFFFF)


@cython.cfunc
@cython.locals(ns=cython.longlong, q=cython.longlong)
@cython.returns(cython.longlong)
def _floor_sec(ns):
    """ns // 10**9 rounded down, as Python's // does (C's / truncates)."""
    q = ns // 1000000000
    if q * 1000000000 > ns:
        q -= 1
    return q


@cython.locals(p=cython.p_uchar, big=cython.bint, bb_shift=cython.int,
               la=cython.longlong, lm=cython.longlong, lc=cython.longlong,
               sa=cython.longlong, sm=cython.longlong, sc=cython.longlong)
def stat_values(raw, ino, st_dev, blksize, bb_shift) -> tuple:
    """The inode ``raw`` as the 19 values of an ``os.stat_result`` on Linux:
    mode, ino, dev, nlink, uid, gid, size, the three times in whole seconds
    (floored), as floats (seconds + nanoseconds * 1e-9, as os.stat makes
    them) and in nanoseconds, blksize, blocks (di_nblocks in 512-byte units,
    2**``bb_shift`` per filesystem block) and rdev, left 0 here (the caller
    encodes device numbers)."""
    p = raw
    if len(raw) < 176:
        raise ValueError("inode buffer too small")
    big = (_be64(p, 120) & 0x8) != 0
    nblocks = _be64(p, 64)          # a Python int: the shift must not wrap
    if not big or (_be64(p, 32) < 9223372036854775808 and
                   _be64(p, 40) < 9223372036854775808 and
                   _be64(p, 48) < 9223372036854775808):
        # every time fits 64 bits: C arithmetic
        la = _timestamp_ns(p, 32, big)
        lm = _timestamp_ns(p, 40, big)
        lc = _timestamp_ns(p, 48, big)
        sa = _floor_sec(la)
        sm = _floor_sec(lm)
        sc = _floor_sec(lc)
        return (_be16(p, 2), ino, st_dev, _be32(p, 16), _be32(p, 8), _be32(p, 12),
                _be64(p, 56), sa, sm, sc, sa + (la - sa * 1000000000) * 1e-9,
                sm + (lm - sm * 1000000000) * 1e-9, sc + (lc - sc * 1000000000) * 1e-9,
                la, lm, lc, blksize, nblocks << bb_shift, 0)
    a = _timestamp_ns(p, 32, big)
    m = _timestamp_ns(p, 40, big)
    c = _timestamp_ns(p, 48, big)
    a_s = a // 1000000000
    m_s = m // 1000000000
    c_s = c // 1000000000
    return (_be16(p, 2), ino, st_dev, _be32(p, 16), _be32(p, 8), _be32(p, 12), _be64(p, 56),
            a_s, m_s, c_s, float(a_s) + (a - a_s * 1000000000) * 1e-9,
            float(m_s) + (m - m_s * 1000000000) * 1e-9,
            float(c_s) + (c - c_s * 1000000000) * 1e-9, a, m, c,
            blksize, nblocks << bb_shift, 0)


@cython.locals(p=cython.p_uchar, offset=cython.longlong, size=cython.longlong,
               flags2=cython.ulonglong, forkoff=cython.Py_ssize_t, nrecs=cython.ulonglong,
               l0=cython.ulonglong, l1=cython.ulonglong, startblock=cython.ulonglong,
               count=cython.ulonglong, agno=cython.ulonglong, agbno=cython.ulonglong,
               agblklog=cython.int, agblocks=cython.ulonglong, agcount=cython.ulonglong,
               last_ag_blocks=cython.ulonglong, blocklog=cython.int, limit=cython.ulonglong,
               mask=cython.ulonglong, end=cython.ulonglong)
def single_extent_offset(raw, offset, size, geometry) -> int:
    """Byte offset in the image of file bytes [offset, offset+size) when the
    inode ``raw`` has an extents-format data fork of exactly one written
    extent that starts at file block 0, covers the range and lies inside its
    AG; else -1 (the caller takes the general path, which reports what is
    wrong).  ``geometry`` is (agblklog, agblocks, agcount, last AG's
    blocks, blocklog)."""
    p = raw
    agblklog, agblocks, agcount, last_ag_blocks, blocklog = geometry
    if len(raw) < 192 or p[5] != 2 or offset < 0 or size < 0:
        return -1
    flags2 = _be64(p, 120)
    nrecs = _be64(p, 24) if flags2 & 0x10 else _be32(p, 76)
    forkoff = p[82] * 8
    if nrecs != 1 or (forkoff and forkoff < 16):
        return -1
    l0 = _be64(p, 176)
    l1 = _be64(p, 184)
    if l0 >> 63 or _rec_startoff(l0):
        return -1
    startblock = _rec_startblock(l0, l1)
    count = _rec_blockcount(l1)
    end = offset + size
    if count == 0 or end > count << blocklog:
        return -1
    mask = 1
    mask = (mask << agblklog) - 1
    agno = (startblock >> agblklog) & 0xFFFFFFFF
    agbno = startblock & mask
    if agno >= agcount:
        return -1
    limit = last_ag_blocks if agno == agcount - 1 else agblocks
    if agbno + count > limit:
        return -1
    return ((agno * agblocks + agbno) << blocklog) + offset


@cython.locals(p=cython.p_uchar, n=cython.Py_ssize_t, flags2=cython.ulonglong,
               forkoff=cython.Py_ssize_t, nrecs=cython.ulonglong, off=cython.Py_ssize_t,
               size=cython.Py_ssize_t, a=cython.bint, room=cython.ulonglong)
def inline_extents(raw, attr, agblklog, agblocks, agcount, last_ag_blocks) -> list:
    """The extent list of an extents-format fork of the inode ``raw`` (the
    attr fork when ``attr``): the count from di_nextents or di_anextents
    (their 64-bit layout when di_flags2 has NREXT64), the fork's place from
    di_forkoff, each extent checked as :func:`check_extents` does.  Failures
    raise ValueError("field|reason"), field "extents" for a bad extent."""
    p = raw
    n = len(raw)
    a = attr
    if n < 176:
        raise ValueError("di_magic|inode buffer too small")
    flags2 = _be64(p, 120)
    forkoff = p[82] * 8
    if a:
        nrecs = (_be32(p, 76) if flags2 & 0x10 else _be16(p, 80)) if forkoff else 0
        off = 176 + forkoff
        size = n - off if forkoff else 0
    else:
        nrecs = _be64(p, 24) if flags2 & 0x10 else _be32(p, 76)
        off = 176
        size = forkoff if forkoff else n - 176
    room = size if size > 0 else 0
    if size < 0 or nrecs > room // 16:
        raise ValueError(f"{'di_anextents' if a else 'di_nextents'}|{nrecs} extents do not "
                         f"fit the {'attr' if a else 'data'} fork")
    exts = decode_bmbt_recs(raw, off, nrecs)
    bad = check_extents(exts, agblklog, agblocks, agcount, last_ag_blocks)
    if bad is not None:
        raise ValueError(f"extents|{'attr' if a else 'data'} fork extent {bad[0]}: {bad[1]}")
    return exts


@cython.locals(p=cython.p_uchar, u=cython.p_uchar, i=cython.int, k=cython.int,
               off=cython.Py_ssize_t, isize=cython.Py_ssize_t, mode=cython.uint,
               fmt=cython.int, forkoff=cython.int, aformat=cython.int,
               flags2=cython.ulonglong, next=cython.ulonglong, anext=cython.ulonglong,
               nblocks=cython.ulonglong, owned=cython.ulonglong, size=cython.ulonglong,
               dsize=cython.Py_ssize_t, e=cython.Py_ssize_t, l0=cython.ulonglong,
               l1=cython.ulonglong, startoff=cython.ulonglong, startblock=cython.ulonglong,
               count=cython.ulonglong, prev_end=cython.ulonglong, agno=cython.ulonglong,
               agbno=cython.ulonglong, limit=cython.ulonglong, ok=cython.bint,
               mask=cython.ulonglong, ifmt=cython.uint, ino=cython.ulonglong,
               itype=cython.uchar[:], nlinks=cython.uint[:], slot=cython.Py_ssize_t,
               free=cython.ulonglong, holemask=cython.uint, first_ino=cython.ulonglong,
               base=cython.Py_ssize_t, flags2_ok=cython.ulonglong, agblklog=cython.int,
               agcount=cython.ulonglong, agblocks=cython.ulonglong,
               last_ag_blocks=cython.ulonglong, clen=cython.Py_ssize_t,
               agfl_block=cython.ulonglong, max_off=cython.ulonglong, litino=cython.int,
               bigtime_fs=cython.bint, is_reg=cython.bint)
def scan_inode_chunk(chunk, base, inodesize, first_ino, uuid, free, holemask, flags2_ok,
                     bigtime_fs, agblklog, agcount, agblocks, last_ag_blocks, agfl_block,
                     max_file_offset, itype, nlinks, slot):
    """Check the plain inodes of one 64-inode chunk in one call.

    Every inode must verify (magic, version 3, CRC, its own number, the
    filesystem uuid).  A free inode is plain when it is as the kernel leaves
    a freed one: no mode, no blocks or extents, no attr fork, no flags, hints
    or unlinked pointer.  An inode in use is plain when it is a regular file
    with an extents-format data fork, or a device, fifo or socket, with
    nothing unusual: no flags but those in ``flags2_ok`` (reflink only on a
    file), no extent size hints, no unlinked pointer, zero padding and
    di_onlink, legal timestamps (when not bigtime), an empty attr fork, size
    zero for the special files, and extents sorted, non-empty, inside one AG
    past its headers (block > ``agfl_block``), below ``max_file_offset``
    and adding up to di_nblocks.  A plain inode's file type (mode >> 12) and
    link count go to ``itype[slot + i]`` and ``nlinks[slot + i]`` (an inode
    table, see nlink_scan).  Returns (claims, others): claims [(agno, agbno,
    length, owner, offset)] for the plain inodes' extents, owner being ino
    << 2 and offset the file offset with bit 61 set for unwritten extents;
    others the indexes of every inode (allocated or free) that needs the
    full check in Python."""
    p = chunk
    u = uuid
    isize = inodesize
    litino = isize - 176
    claims = []
    others = []
    mask = 1
    mask = (mask << agblklog) - 1
    max_off = max_file_offset
    if slot < 0 or slot + 64 > len(itype) or slot + 64 > len(nlinks):
        raise ValueError("inode table slot out of range")
    if len(uuid) != 16:
        raise ValueError("uuid must be 16 bytes")
    clen = len(chunk)
    for i in range(64):
        if (holemask >> (i // 4)) & 1:
            continue
        off = base + i * isize
        if off < 0 or off + isize > clen or isize < 176:
            others.append(i)
            continue
        ino = first_ino + i
        mode = _be16(p, off + 2)
        ok = (_be16(p, off) == 0x494E and p[off + 4] == 3 and _be64(p, off + 152) == ino and
              _be32(p, off + 96) == 0xFFFFFFFF and _zero(p, off + 24, 8) and
              _be16(p, off + 6) == 0 and _be16(p, off + 90) == 0 and
              _be32(p, off + 72) == 0 and _be32(p, off + 128) == 0)
        if ok:
            for k in range(16):
                if p[off + 160 + k] != u[k]:
                    ok = False
                    break
        if ok:
            ok = _cksum_region_ok(p, off, off + isize, off + 100)
        if not ok:
            others.append(i)
            continue
        flags2 = _be64(p, off + 120)
        size = _be64(p, off + 56)
        nblocks = _be64(p, off + 64)
        next = _be32(p, off + 76)
        anext = _be16(p, off + 80)
        forkoff = p[off + 82]
        aformat = p[off + 83]
        fmt = p[off + 5]
        if (free >> i) & 1:
            # free: plain when the kernel's verifier has nothing to say
            if mode != 0 or nblocks or next or anext or forkoff or size >> 63 or \
                    (aformat != 0 and aformat != 2) or \
                    flags2 & ~(flags2_ok & 0x8):
                others.append(i)
            continue
        if mode == 0 or size >> 63 or anext or aformat != 2 or \
                flags2 & ~flags2_ok or \
                (not (flags2 & 0x8) and not _legacy_times_ok(p, off)):
            others.append(i)
            continue
        ifmt = mode & 0o170000
        is_reg = ifmt == 0o100000
        if is_reg:
            if fmt != 2 or (forkoff and forkoff >= litino >> 3):
                others.append(i)
                continue
        elif ifmt in (0o020000, 0o060000, 0o010000, 0o140000):
            if fmt != 0 or next or nblocks or size or (flags2 & 0x2) or \
                    (forkoff and forkoff != 1):
                others.append(i)
                continue
        else:
            others.append(i)
            continue
        dsize = forkoff * 8 if forkoff else litino
        if next * 16 > dsize:
            others.append(i)
            continue
        owned = 0
        prev_end = 0
        for e in range(next):
            l0 = _be64(p, off + 176 + 16 * e)
            l1 = _be64(p, off + 176 + 16 * e + 8)
            startoff = _rec_startoff(l0)
            startblock = _rec_startblock(l0, l1)
            count = _rec_blockcount(l1)
            agno = startblock >> agblklog
            agbno = startblock & mask
            limit = last_ag_blocks if agno == agcount - 1 else agblocks
            if count == 0 or (e and startoff < prev_end) or agno >= agcount or \
                    agbno <= agfl_block or agbno + count > limit or \
                    startoff + count - 1 > max_off:
                ok = False
                break
            prev_end = startoff + count
            owned += count
        if not ok or owned != nblocks:
            others.append(i)
            continue
        for e in range(next):
            l0 = _be64(p, off + 176 + 16 * e)
            l1 = _be64(p, off + 176 + 16 * e + 8)
            startblock = _rec_startblock(l0, l1)
            claims.append((startblock >> agblklog, startblock & mask, _rec_blockcount(l1),
                           ino << 2, _rec_startoff(l0) | ((l0 >> 63) << 61)))
        itype[slot + i] = ifmt >> 12
        nlinks[slot + i] = _be32(p, off + 16)
    return claims, others


# -- the inode table and the namespace tally --------------------------------------
# check keeps what it learns of every inode in flat arrays indexed by a slot:
# the inode chunks, sorted by first inode number, are numbered 0, 1, ... and
# the inode at index i of chunk k has slot 64 * k + i.  ``starts`` holds the
# chunks' first inode numbers; ``itype`` the file type (mode >> 12, 0 for an
# inode not in use), ``nlinks`` the link count, ``refs`` the directory
# entries counted so far.

_MASK64 = 0xFFFFFFFFFFFFFFFF
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


@cython.cfunc
@cython.locals(ftype=cython.int)
@cython.returns(cython.int)
def _ftype_ifmt(ftype):
    """The file type (mode >> 12) a directory entry's ftype stands for, or 0."""
    if ftype == 1:
        return 8        # regular file
    if ftype == 2:
        return 4        # directory
    if ftype == 3:
        return 2        # character device
    if ftype == 4:
        return 6        # block device
    if ftype == 5:
        return 1        # fifo
    if ftype == 6:
        return 12       # socket
    if ftype == 7:
        return 10       # symlink
    return 0


@cython.cfunc
@cython.locals(starts=cython.ulonglong[:], ino=cython.ulonglong, lo=cython.Py_ssize_t,
               hi=cython.Py_ssize_t, mid=cython.Py_ssize_t)
@cython.returns(cython.Py_ssize_t)
def _find_slot(starts, ino):
    """Slot of inode ``ino`` in the table, or -1 when no chunk holds it."""
    lo = 0
    hi = len(starts)
    while lo < hi:
        mid = (lo + hi) >> 1
        if starts[mid] <= ino:
            lo = mid + 1
        else:
            hi = mid
    if lo == 0 or ino - starts[lo - 1] >= 64:
        return -1
    return (lo - 1) * 64 + (ino - starts[lo - 1])


def find_slot(starts, ino) -> int:
    """Slot of inode ``ino`` in an inode table (see above), or -1."""
    return _find_slot(starts, ino)


@cython.cfunc
@cython.locals(starts=cython.ulonglong[:], itype=cython.uchar[:], refs=cython.uint[:],
               child=cython.ulonglong, ftype=cython.int, ft=cython.int,
               slot=cython.Py_ssize_t, t=cython.int, flags=cython.int)
@cython.returns(cython.int)
def _tally_one(starts, itype, refs, child, ftype, ft):
    """Count one directory entry naming ``child`` into the table: flags 1
    when the target is not in use (nothing counted), 2 when the entry's
    ftype (if ``ft``) disagrees with the target's type, 4 when the target is
    a directory; 0 for an ordinary entry."""
    slot = _find_slot(starts, child)
    t = itype[slot] if slot >= 0 else 0
    if t == 0:
        return 1
    refs[slot] += 1
    flags = 0
    if ft and _ftype_ifmt(ftype) != t:
        flags = 2
    if t == 4:
        flags |= 4
    return flags


@cython.locals(starts=cython.ulonglong[:], itype=cython.uchar[:], refs=cython.uint[:],
               child=cython.ulonglong, ftype=cython.int)
def tally_entry(starts, itype, refs, child, ftype, has_ftype) -> int:
    """_tally_one for an entry already decoded (a shortform directory's)."""
    if len(itype) != len(refs):
        raise ValueError("inode table arrays differ in length")
    return _tally_one(starts, itype, refs, child, ftype, 1 if has_ftype else 0)


@cython.cfunc
@cython.locals(h=cython.ulonglong, addr=cython.ulonglong, x=cython.ulonglong)
@cython.returns(cython.ulonglong)
def _leaf_mix(h, addr):
    """A 64-bit mix of one (hash, address) leaf entry; sums of these over the
    data entries and over the leaf entries agree when both hold the same
    entries."""
    x = ((h << 32) | addr) & _MASK64
    x = ((x ^ (x >> 30)) * _MIX1) & _MASK64
    x = ((x ^ (x >> 27)) * _MIX2) & _MASK64
    return x ^ (x >> 31)


@cython.locals(p=cython.p_uchar, pos=cython.Py_ssize_t, stop=cython.Py_ssize_t,
               ft=cython.int, namelen=cython.Py_ssize_t, size=cython.Py_ssize_t,
               ftype=cython.int, child=cython.ulonglong, flags=cython.int,
               leafsum=cython.ulonglong, addr_base=cython.ulonglong,
               starts=cython.ulonglong[:], itype=cython.uchar[:], refs=cython.uint[:],
               dir_ino=cython.ulonglong, j=cython.Py_ssize_t, c=cython.uchar)
def dir_data_tally(buf, start, end, has_ftype, addr_base, starts, itype, refs,
                   dir_ino) -> tuple:
    """Walk one directory data region buf[start:end] (laid out as in
    dir2_data_entries, whose checks it repeats) and count its entries into
    the inode table: ``refs[slot] += 1`` for the target of every entry but
    ``.`` and ``..``.

    Returns (frees, leafsum, odd, error).  frees is [(length, offset)] of the unused
    regions; leafsum the sum of _leaf_mix(hash, address) over every entry
    (address in 8-byte units from ``addr_base``, a byte offset in the
    directory), to compare with leaf_tally; odd is [(name, child, ftype,
    flags)] for the entries Python must look at: flags 1 the target is not in
    use, 2 ftype disagrees with the target's type, 4 the target is a
    directory, 8 the entry is ``.`` or ``..`` (not counted).  error is None,
    or why the walk stopped at a malformed entry: what came before it is
    counted and returned, so that it is not counted twice."""
    p = buf
    pos = start
    stop = end
    ft = 1 if has_ftype else 0
    if pos < 0 or stop > len(buf) or pos > stop:
        raise ValueError("directory data region outside the buffer")
    if len(itype) != len(refs):
        raise ValueError("inode table arrays differ in length")
    frees = []
    odd = []
    leafsum = 0
    while pos < stop:
        try:
            size = _data_step(p, pos, stop, ft)
        except ValueError as e:
            return frees, leafsum, odd, str(e)
        if size < 0:
            frees.append((-size, pos))
            pos -= size
            continue
        namelen = p[pos + 8]
        ftype = p[pos + 9 + namelen] if ft else 0
        child = _be64(p, pos)
        leafsum = (leafsum + _leaf_mix(_hash_at(p, pos + 9, namelen),
                                       (addr_base + pos) >> 3)) & _MASK64
        if p[pos + 9] == 0x2E and (namelen == 1 or (namelen == 2 and p[pos + 10] == 0x2E)):
            odd.append((p[pos + 9:pos + 9 + namelen], child, ftype, 8))
            pos += size
            continue
        flags = _tally_one(starts, itype, refs, child, ftype, ft)
        for j in range(namelen):
            c = p[pos + 9 + j]
            if c == 0x2F or c == 0:
                flags |= 16
                break
        if child == dir_ino:
            flags |= 32
        if flags:
            odd.append((p[pos + 9:pos + 9 + namelen], child, ftype, flags))
        pos += size
    return frees, leafsum, odd, None


@cython.locals(p=cython.p_uchar, start=cython.Py_ssize_t, count=cython.Py_ssize_t,
               i=cython.Py_ssize_t, h=cython.ulonglong, prev=cython.ulonglong,
               addr=cython.ulonglong, nstale=cython.Py_ssize_t, ordered=cython.bint,
               leafsum=cython.ulonglong)
def leaf_tally(buf, start, count) -> tuple:
    """(ordered, stale, leafsum) of a directory leaf array of ``count``
    (hash, address) entries at ``start``: whether the hashes ascend, how
    many entries are stale (null address), and the sum of _leaf_mix over
    the others (see dir_data_tally)."""
    p = buf
    if start < 0 or count < 0 or start + 8 * count > len(buf):
        raise ValueError("leaf entries run past the buffer")
    ordered = True
    nstale = 0
    leafsum = 0
    prev = 0
    for i in range(count):
        h = _be32(p, start + 8 * i)
        addr = _be32(p, start + 8 * i + 4)
        if h < prev:
            ordered = False
        prev = h
        if addr == 0:
            nstale += 1
        else:
            leafsum = (leafsum + _leaf_mix(h, addr)) & _MASK64
    return ordered, nstale, leafsum


@cython.locals(i=cython.Py_ssize_t, n=cython.Py_ssize_t, t=cython.int,
               itype=cython.uchar[:], nlinks=cython.uint[:], refs=cython.uint[:])
def nlink_scan(itype, nlinks, refs) -> list:
    """Slots that need a look after the directory tally: every directory,
    and every other inode in use whose link count differs from the entries
    counted for it (including those no entry reaches)."""
    n = len(itype)
    if len(nlinks) != n or len(refs) != n:
        raise ValueError("inode table arrays differ in length")
    out = []
    for i in range(n):
        t = itype[i]
        if t == 0:
            continue
        if t == 4 or refs[i] == 0 or nlinks[i] != refs[i]:
            out.append(i)
    return out
