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

import os as _os
from struct import iter_unpack as _iter_words

if not cython.compiled:
    # compiled, parsers.pxd cimports the array type
    from array import array

# the 32-bit mask as a C value (parsers.pxd): a literal this large would be
# a Python int to Cython, and every masked step a Python operation
_M32 = 0xFFFFFFFF
# the largest directory size (XFS_DIR2_SPACE_SIZE, 32 GiB), as a C value
_DIR_SIZE_MAX = 0x800000000

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
@cython.exceptval(check=False)
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
@cython.exceptval(check=False)
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t)
@cython.returns(cython.uint)
def _be16(p, off):
    return (p[off] << 8) | p[off + 1]


@cython.cfunc
@cython.exceptval(check=False)
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t)
@cython.returns(cython.uint)
def _be32(p, off):
    return (p[off] << 24) | (p[off + 1] << 16) | (p[off + 2] << 8) | p[off + 3]


@cython.cfunc
@cython.exceptval(check=False)
@cython.inline
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
@cython.exceptval(check=False)
@cython.inline
@cython.locals(l0=cython.ulonglong)
@cython.returns(cython.ulonglong)
def _rec_startoff(l0):
    return (l0 >> 9) & 0x3FFFFFFFFFFFFF


@cython.cfunc
@cython.exceptval(check=False)
@cython.inline
@cython.locals(l0=cython.ulonglong, l1=cython.ulonglong)
@cython.returns(cython.ulonglong)
def _rec_startblock(l0, l1):
    return ((l0 & 0x1FF) << 43) | (l1 >> 21)


@cython.cfunc
@cython.exceptval(check=False)
@cython.inline
@cython.locals(l1=cython.ulonglong)
@cython.returns(cython.ulonglong)
def _rec_blockcount(l1):
    return l1 & 0x1FFFFF


@cython.locals(p=cython.p_uchar, c=cython.uint)
def crc32c(data, crc: cython.uint = 0) -> int:
    """CRC-32C of ``data``, continuing from a previous result ``crc``."""
    p = data
    c = _crc_update(p, 0, len(data), crc ^ _M32)
    return c ^ _M32


@cython.cfunc
@cython.exceptval(check=False)
@cython.locals(p=cython.p_uchar, start=cython.Py_ssize_t, end=cython.Py_ssize_t,
               off=cython.Py_ssize_t, c=cython.uint)
@cython.returns(cython.uint)
def _cksum_region(p, start, end, off):
    """XFS checksum of p[start:end] with the 4-byte field at p[off] (inside
    the region) taken as zero."""
    c = _crc_update(p, start, off, _M32)
    # four zero bytes stand in for the checksum field
    c = _T[c & 0xFF] ^ (c >> 8)
    c = _T[c & 0xFF] ^ (c >> 8)
    c = _T[c & 0xFF] ^ (c >> 8)
    c = _T[c & 0xFF] ^ (c >> 8)
    c = _crc_update(p, off + 4, end, c)
    return c ^ _M32


@cython.cfunc
@cython.exceptval(check=False)
@cython.locals(p=cython.p_uchar, start=cython.Py_ssize_t, end=cython.Py_ssize_t,
               off=cython.Py_ssize_t, stored=cython.uint)
@cython.returns(cython.bint)
def _cksum_region_ok(p, start, end, off):
    stored = p[off] | (p[off + 1] << 8) | (p[off + 2] << 16) | (p[off + 3] << 24)
    return _cksum_region(p, start, end, off) == stored


@cython.cfunc
@cython.exceptval(check=False)
@cython.locals(p=cython.p_uchar, base=cython.Py_ssize_t, size=cython.Py_ssize_t,
               off=cython.Py_ssize_t, want=cython.ulonglong, ok=cython.ulonglong,
               i=cython.int, m=cython.int, k=cython.int, j=cython.int, idx=cython.int[64],
               got=cython.uint[3], at=cython.Py_ssize_t, one=cython.ulonglong)
@cython.returns(cython.ulonglong)
def _cksums_ok(p, base, size, off, want):
    """Of the regions p[base + i * size:][:size] for each bit i of
    ``want`` (up to 64), a mask of those whose XFS checksum (at ``off``
    in each) is right; with the CPU's instruction three regions at a time."""
    ok = 0
    one = 1
    if cython.compiled and _HW_CRC:
        m = 0
        for i in range(64):
            if (want >> i) & 1:
                idx[m] = i
                m += 1
        k = 0
        while k + 3 <= m:
            fstool_cksum3_hw(p + base + idx[k] * size, p + base + idx[k + 1] * size,
                             p + base + idx[k + 2] * size, size, off, got)
            for j in range(3):
                at = base + idx[k + j] * size + off
                if got[j] == (p[at] | (p[at + 1] << 8) | (p[at + 2] << 16) |
                              (cython.cast(cython.uint, p[at + 3]) << 24)):
                    ok |= one << idx[k + j]
            k += 3
        while k < m:
            at = base + idx[k] * size
            if _cksum_region_ok(p, at, at + size, at + off):
                ok |= one << idx[k]
            k += 1
        return ok
    for i in range(64):
        at = base + i * size
        if (want >> i) & 1 and _cksum_region_ok(p, at, at + size, at + off):
            ok |= one << i
    return ok


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
            out.append((pos, _be64(p, pos), _bytes_at(p, pos + 9, pos + 9 + namelen), ftype))
        elif not (p[pos + 9] == 46 and (namelen == 1 or (namelen == 2 and
                                                          p[pos + 10] == 46))):
            out.append((_bytes_at(p, pos + 9, pos + 9 + namelen), _be64(p, pos), ftype))
        pos += size
    return out


@cython.cfunc
@cython.locals(p=cython.p_uchar, a=cython.Py_ssize_t, b=cython.Py_ssize_t)
def _bytes_at(p, a, b):
    """p[a:b] as bytes, as the compiled slice of a pointer gives it (the pure
    slice of a bytearray buffer would be a bytearray)."""
    if cython.compiled:
        return p[a:b]
    return bytes(p[a:b])


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
            out.append((_bytes_at(p, pos + 3, pos + 3 + namelen), ino, ftype))
        else:
            out.append((_be16(p, pos + 1), ino, _bytes_at(p, pos + 3, pos + 3 + namelen),
                        ftype))
        pos += 3 + namelen + ft + width
    return parent, out


@cython.locals(p=cython.p_uchar, base=cython.Py_ssize_t, n=cython.Py_ssize_t)
def hash_lower_bound(buf, start, count, hashval) -> int:
    """Index of the first of ``count`` (hashval, address) pairs at
    buf[start:] (a leaf's entries or a da-btree node's keys, 8 bytes each,
    sorted by hash) whose hash is at least ``hashval``; ``count`` when none."""
    p = buf
    base = start
    n = count
    if base < 0 or n < 0 or base + 8 * n > len(buf):
        raise ValueError("hash array runs past the buffer")
    return _hash_lower(p, base, n, hashval)


@cython.cfunc
@cython.exceptval(check=False)
@cython.locals(p=cython.p_uchar, base=cython.Py_ssize_t, n=cython.Py_ssize_t,
               h=cython.uint, lo=cython.Py_ssize_t, hi=cython.Py_ssize_t,
               mid=cython.Py_ssize_t)
@cython.returns(cython.Py_ssize_t)
def _hash_lower(p, base, n, h):
    """hash_lower_bound within bounds the caller has checked (shared with
    writers.py)."""
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
@cython.exceptval(check=False)
@cython.locals(x=cython.uint, n=cython.int)
@cython.returns(cython.uint)
def _rol32(x, n):
    return ((x << n) | (x >> (32 - n))) & _M32


@cython.cfunc
@cython.exceptval(check=False)
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
             _rol32(h, 28)) & _M32
        i += 4
    if n - i == 3:
        h = ((p[i] << 14) ^ (p[i + 1] << 7) ^ p[i + 2] ^ _rol32(h, 21)) & _M32
    elif n - i == 2:
        h = ((p[i] << 7) ^ p[i + 1] ^ _rol32(h, 14)) & _M32
    elif n - i == 1:
        h = (p[i] ^ _rol32(h, 7)) & _M32
    return h


@cython.locals(p=cython.p_uchar)
def da_hashname(name) -> int:
    """The XFS directory/xattr name hash of ``name``."""
    p = name
    return _hash_at(p, 0, len(name))


@cython.locals(p=cython.p_uchar, ino=cython.ulonglong)
def parent_hashname(name, parent_ino) -> int:
    """The hash of a parent-pointer attribute (xfs_parent_hashval): the
    directory name hash of ``name`` xor the high and low 32 bits of the
    parent directory's inode number."""
    p = name
    ino = parent_ino
    return _hash_at(p, 0, len(name)) ^ (ino >> 32) ^ (ino & _M32)


# attr entry flags: the namespace bits and the incomplete bit
_ATTR_NSP_MASK = 0x0E
_ATTR_PARENT = 0x08
_ATTR_INCOMPLETE = 0x80


# -- paths of inodes from their parent pointers (fstool path) ---------------------------------
#
# PathTable holds the parent pointers of many inodes in flat arrays (read a
# whole inode chunk at a time by add_chunk, or given one inode at a time by
# add) and works out paths from them: each directory's paths once, kept by
# directory.  render() writes "INO PATH" lines of every inode it holds, the
# paths' names escaped as fstool shows names (ops/names.py's shown_name),
# into one buffer.  With gen_of and parents_of it reads through them
# instead (a few inodes, read from the filesystem one by one).

@cython.cfunc
@cython.locals(p=cython.p_uchar, i=cython.Py_ssize_t, end=cython.Py_ssize_t, c=cython.uint,
               c1=cython.uint, n=cython.Py_ssize_t, lo=cython.uint, hi=cython.uint,
               k=cython.Py_ssize_t)
@cython.returns(cython.Py_ssize_t)
def _utf8_len(p, i, end):
    """The length of the well-formed UTF-8 sequence at p[i] (lead byte
    0x80 or above) ending at or before ``end``, or 0 when there is none (as
    Python's strict UTF-8 decoder decides: no overlong forms, no surrogates,
    nothing above U+10FFFF)."""
    c = p[i]
    if 0xC2 <= c <= 0xDF:
        n = 2
    elif 0xE0 <= c <= 0xEF:
        n = 3
    elif 0xF0 <= c <= 0xF4:
        n = 4
    else:
        return 0
    if i + n > end:
        return 0
    c1 = p[i + 1]
    lo = 0x80
    hi = 0xBF
    if c == 0xE0:
        lo = 0xA0
    elif c == 0xED:
        hi = 0x9F
    elif c == 0xF0:
        lo = 0x90
    elif c == 0xF4:
        hi = 0x8F
    if c1 < lo or c1 > hi:
        return 0
    for k in range(i + 2, i + n):
        if p[k] < 0x80 or p[k] > 0xBF:
            return 0
    return n


@cython.cfunc
@cython.exceptval(check=False)
@cython.locals(q=cython.p_uchar, at=cython.Py_ssize_t, p=cython.p_uchar,
               start=cython.Py_ssize_t, n=cython.Py_ssize_t)
@cython.returns(cython.int)
def _copy_into(q, at, p, start, n):
    """q[at:at+n] = p[start:start+n] (q a bytearray that has the room)."""
    if cython.compiled:
        memcpy(q + at, p + start, n)
    else:
        q[at:at + n] = p[start:start + n]
    return 0


@cython.cfunc
@cython.locals(p=cython.p_uchar, start=cython.Py_ssize_t, size=cython.Py_ssize_t,
               totsize=cython.Py_ssize_t, count=cython.Py_ssize_t, pos=cython.Py_ssize_t,
               i=cython.Py_ssize_t)
@cython.returns(cython.bint)
def _sf_sound(p, start, size):
    """Whether the shortform attr fork at p[start:start+size] has a header
    and entries that fit its size (its totsize), and every complete entry
    of the parent namespace a 12-byte value: what fs.attr reads without
    an error."""
    if size < 4:
        return False
    totsize = _be16(p, start)
    count = p[start + 2]
    if totsize < 4 or totsize > size:
        return False
    pos = start + 4
    for i in range(count):
        if pos + 3 > start + totsize or pos + 3 + p[pos] + p[pos + 1] > start + totsize:
            return False
        if (p[pos + 2] & _ATTR_NSP_MASK) == _ATTR_PARENT and \
                not p[pos + 2] & _ATTR_INCOMPLETE and p[pos + 1] != 12:
            return False
        pos += 3 + p[pos] + p[pos + 1]
    return True


class PathTable:
    """The parent pointers of many inodes, and their paths.

    ``add_chunk`` and ``add`` fill the table; ``paths_at(k)`` (the k-th
    inode added), ``paths(ino)`` and ``render`` give paths.  A parent
    pointer is followed when it names an in-use directory of the generation
    it records; one that does not is put in ``broken`` as (inode, (p_ino,
    p_gen, name), why) and leads nowhere; a chain that comes back to an
    inode on it is given up.  ``gen_of(ino)`` (a directory's generation, or
    None) and ``parents_of(ino)`` ([(p_ino, p_gen, name)], raising
    ``errors`` when the inode cannot be read) answer for inodes the table
    does not hold."""

    def __init__(self, root, gen_of=None, parents_of=None, errors=Exception):
        self.root = root
        self.gen_of = gen_of
        self.parents_of = parents_of
        self.errors = errors
        self.broken = []
        self.dirs = {}                  # directory -> its record
        self.index = None               # inode -> its record, when asked for
        self.memo = {root: [b"/"]}      # directory -> its paths
        self.prefixes = {}              # directory -> (its paths escaped, its generation)
        self.recs = array("Q")          # per inode: ino, gen | dir << 32, first pointer, count
        self.pps = array("Q")           # per pointer: p_ino, p_gen, name offset, name length
        self.names = bytearray()
        self.nused = 0
        self.count = 0
        self.out = bytearray()
        self.pos = 0

    # -- filling -----------------------------------------------------------------------------

    @cython.locals(at=cython.Py_ssize_t)
    def _put_name(self, p, start, n):
        """Keep p[start:start+n] in ``names``; its offset there."""
        at = self.nused
        if at + n > len(self.names):
            self.names.extend(bytes(max(n, len(self.names), 4096)))
        _copy_into(self.names, at, p, start, n)
        self.nused = at + n
        return at

    def _add_record(self, ino, gen, isdir, first, n):
        self.index = None
        if isdir:
            self.dirs[ino] = self.count
        _push4(self.recs, ino, gen | (cython.cast(cython.ulonglong, isdir) << 32), first, n)
        self.count += 1
        return 0

    def add(self, ino, mode, gen, parents):
        """Add inode ``ino`` (mode, generation) and its parent pointers
        [(p_ino, p_gen, name)]."""
        first = len(self.pps) // 4
        for d, g, name in parents:
            _push4(self.pps, d, g, self._put_name(name, 0, len(name)), len(name))
        self._add_record(ino, gen, (mode & 0xF000) == 0x4000, first, len(parents))

    @cython.locals(p=cython.p_uchar, isize=cython.Py_ssize_t,
                   i=cython.Py_ssize_t, off=cython.Py_ssize_t, ino=cython.ulonglong,
                   mode=cython.uint, forkoff=cython.Py_ssize_t, aformat=cython.uint,
                   litino=cython.Py_ssize_t, clen=cython.Py_ssize_t, fork=cython.Py_ssize_t,
                   first=cython.Py_ssize_t, n=cython.Py_ssize_t,
                   inbuf=cython.ulonglong, crc_ok=cython.ulonglong, nrec=cython.Py_ssize_t,
                   npp=cython.Py_ssize_t, R=cython.p_ulonglong, P=cython.p_ulonglong,
                   N=cython.p_uchar, isdir=cython.ulonglong, per=cython.Py_ssize_t)
    def add_chunk(self, chunk, base, inodesize, first_ino, free, holemask) -> list:
        """Add the in-use inodes of one 64-inode chunk (first inode at
        chunk[base:], inobt free mask and holemask) that verify (magic,
        version 3, their own number, CRC) and have no attr fork or a sound
        shortform one; returns the numbers of the other in-use ones (attr
        forks in blocks, anything that does not verify), for the caller to
        read and ``add``.  ``chunk``: bytes, a bytearray or a read-only
        mapping."""
        if cython.compiled:
            clen = len(chunk)
            p = cython.cast(cython.p_uchar, cython.address(chunk[0])) if clen else cython.NULL
        else:
            p = chunk
            clen = len(chunk)
        isize = inodesize
        litino = isize - 176
        others = []
        # the in-use inodes that lie in the buffer, and of those the ones
        # whose CRC is right
        inbuf = 0
        for i in range(64):
            off = base + i * isize
            if not ((holemask >> (i // 4)) & 1 or (free >> i) & 1) and \
                    off >= 0 and off + isize <= clen and isize >= 176:
                inbuf |= cython.cast(cython.ulonglong, 1) << i
        crc_ok = _cksums_ok(p, base, isize, 100, inbuf)
        # room for the chunk's 64 records, the most parent pointers their
        # forks can hold (an entry takes 15 bytes or more) and their names;
        # written in place, the arrays cut to what was used at the end
        per = litino // 15 + 1 if litino > 0 else 1
        nrec = self.count
        npp = len(self.pps) // 4
        _grow(self.recs, 4 * (nrec + 64))
        _grow(self.pps, 4 * (npp + 64 * per))
        if self.nused + 64 * isize > len(self.names):
            self.names.extend(bytes(max(64 * isize, len(self.names))))
        if cython.compiled:
            R = cython.cast(cython.p_ulonglong, self.recs.data.as_voidptr)
            P = cython.cast(cython.p_ulonglong, self.pps.data.as_voidptr)
            N = self.names
        else:
            R = self.recs
            P = self.pps
            N = self.names
        self.index = None
        for i in range(64):
            if (holemask >> (i // 4)) & 1 or (free >> i) & 1:
                continue
            off = base + i * isize
            ino = first_ino + i
            if not (inbuf >> i) & 1:
                others.append(ino)
                continue
            if _be16(p, off) != 0x494E or p[off + 4] != 3 or _be64(p, off + 152) != ino or \
                    not (crc_ok >> i) & 1:
                others.append(ino)
                continue
            mode = _be16(p, off + 2)
            if mode == 0:
                continue
            forkoff = p[off + 82] * 8
            aformat = p[off + 83]
            first = npp
            if forkoff:
                fork = off + 176 + forkoff
                if aformat != 1 or forkoff >= litino or \
                        not _sf_sound(p, fork, litino - forkoff):
                    others.append(ino)
                    continue
                npp = self._add_sf(p, fork, P, npp, N)
            isdir = (mode & 0xF000) == 0x4000
            if isdir:
                self.dirs[ino] = nrec
            R[4 * nrec] = ino
            R[4 * nrec + 1] = _be32(p, off + 92) | (isdir << 32)
            R[4 * nrec + 2] = first
            R[4 * nrec + 3] = npp - first
            nrec += 1
        self.count = nrec
        _trim(self.recs, 4 * nrec)
        _trim(self.pps, 4 * npp)
        return others

    @cython.locals(pos=cython.Py_ssize_t, count=cython.Py_ssize_t, i=cython.Py_ssize_t,
                   namelen=cython.Py_ssize_t, valuelen=cython.Py_ssize_t, flags=cython.uint,
                   v=cython.Py_ssize_t, at=cython.Py_ssize_t)
    def _add_sf(self, p, start, P, npp, N):
        """Write at P[4 * npp:] the parent pointers of the shortform attr
        fork at p[start:] (checked by _sf_sound): its complete entries of
        the parent namespace whose value is a 12-byte xfs_parent_rec, their
        names kept in N (``names``, room made by the caller).  The number
        of pointers then written in all."""
        count = p[start + 2]
        pos = start + 4
        at = self.nused
        for i in range(count):
            namelen = p[pos]
            valuelen = p[pos + 1]
            flags = p[pos + 2]
            if (flags & _ATTR_NSP_MASK) == _ATTR_PARENT and not flags & _ATTR_INCOMPLETE and \
                    valuelen == 12:
                v = pos + 3 + namelen
                P[4 * npp] = _be64(p, v)
                P[4 * npp + 1] = _be32(p, v + 8)
                P[4 * npp + 2] = at
                P[4 * npp + 3] = namelen
                _copy_into(N, at, p, pos + 3, namelen)
                at += namelen
                npp += 1
            pos += 3 + namelen + valuelen
        self.nused = at
        return npp

    # -- walking -----------------------------------------------------------------------------

    def _plist(self, k):
        """The parent pointers of record ``k``: [(p_ino, p_gen, name)]."""
        r = self.recs
        pps = self.pps
        out = []
        for j in range(r[4 * k + 2], r[4 * k + 2] + r[4 * k + 3]):
            off = pps[4 * j + 2]
            out.append((pps[4 * j], pps[4 * j + 1], bytes(self.names[off:off + pps[4 * j + 3]])))
        return out

    @cython.locals(R=cython.p_ulonglong, k=cython.Py_ssize_t)
    def _gen(self, d):
        """The generation of directory ``d``, or None when it is not one in use."""
        got = self.dirs.get(d)
        if got is not None:
            k = got
            if cython.compiled:
                R = cython.cast(cython.p_ulonglong, self.recs.data.as_voidptr)
            else:
                R = self.recs
            return R[4 * k + 1] & 0xFFFFFFFF
        if self.gen_of is not None:
            return self.gen_of(d)
        return None

    def _parents(self, ino):
        k = self.dirs.get(ino)
        if k is not None:
            return self._plist(k)
        if self.parents_of is not None:
            return self.parents_of(ino)
        if self.index is None:          # every inode held, by number (built when first asked)
            self.index = {self.recs[4 * i]: i for i in range(self.count)}
        k = self.index.get(ino)
        if k is None:
            raise self.errors(f"inode {ino} is not an inode in use")
        return self._plist(k)

    def paths(self, ino) -> list:
        """Every path of ``ino`` (bytes, from '/'), in parent pointer order;
        the root's is '/'."""
        if ino == self.root:
            return [b"/"]
        return self._paths(ino, self._parents(ino), ())[0]

    def paths_at(self, k) -> list:
        """Every path of the k-th inode added."""
        ino = self.recs[4 * k]
        if ino == self.root:
            return [b"/"]
        return self._paths(ino, self._plist(k), ())[0]

    def _paths(self, ino, parents, chain):
        """(paths, whether a cycle cut some of them short)."""
        out = []
        cut = False
        chain = chain + (ino,)
        for p in parents:
            base, c = self._dir_paths(ino, p, chain)
            cut |= c
            name = p[2]
            for b in base:
                out.append((b if b != b"/" else b"") + b"/" + name)
        return out, cut

    def _dir_paths(self, child, p, chain):
        d = p[0]
        if d in chain:
            return [], True                 # a cycle: given up
        gen = self._gen(d)
        if gen is None:
            self.broken.append((child, p, f"inode {d} is not a directory in use"))
            return [], False
        if gen != p[1]:
            self.broken.append((child, p, f"directory {d} has generation {gen}, not {p[1]}"))
            return [], False
        known = self.memo.get(d)
        if known is not None:
            return known, False
        try:
            parents = self._parents(d)
        except self.errors as e:
            self.broken.append((child, p, f"directory {d}: {e}"))
            return [], False
        got, cut = self._paths(d, parents, chain)
        if not cut:                         # what a cycle cut short depends on the chain
            self.memo[d] = got
        return got, cut

    # -- output ------------------------------------------------------------------------------

    def _reserve(self, n):
        if self.pos + n > len(self.out):
            self.out.extend(bytes(max(n, len(self.out), 1 << 16)))
        return 0

    def _flush(self, write):
        """Hand the text so far to ``write`` (a view of it, valid for the
        call) and start the buffer again."""
        view = memoryview(self.out)[:self.pos]
        try:
            write(view)
        finally:
            view.release()
        self.pos = 0
        return 0

    @cython.locals(q=cython.p_uchar, pos=cython.Py_ssize_t)
    def escaped(self, name) -> bytes:
        """``name`` (bytes) as render shows it."""
        at = self.pos
        self._reserve(4 * len(name))
        q = self.out
        pos = _w_esc(q, at, name, 0, len(name), _HEX)
        got = bytes(self.out[at:pos])
        return got

    def _dir_info(self, d):
        """(its paths escaped, each ending in '/'; its generation) of
        directory ``d`` once its paths are known and it is one in use; else
        None."""
        known = self.memo.get(d)
        if known is None:
            return None
        gen = self._gen(d)
        if gen is None:
            return None
        info = ([b"/" if b == b"/" else self.escaped(b) + b"/" for b in known], gen)
        self.prefixes[d] = info
        return info

    @cython.locals(k=cython.Py_ssize_t, n=cython.Py_ssize_t, R=cython.p_ulonglong)
    def order(self):
        """The records in inode order: None when they were added in that
        order (one inode chunk after another), else their indices sorted."""
        n = self.count
        if cython.compiled:
            R = cython.cast(cython.p_ulonglong, self.recs.data.as_voidptr)
        else:
            R = self.recs
        for k in range(1, n):
            if R[4 * k] <= R[4 * (k - 1)]:
                return sorted(range(n), key=lambda x: self.recs[4 * x])
        return None

    @cython.locals(q=cython.p_uchar, pos=cython.Py_ssize_t)
    def _line(self, ino, pre, nb, p, a, n):
        """Append "INO ", pre[:nb], p[a:a+n] escaped and a newline."""
        self._reserve(23 + nb + 4 * n)
        q = self.out
        pos = _w_uint(q, self.pos, ino, _DIGITS2)
        q[pos] = 0x20
        _copy_into(q, pos + 1, pre, 0, nb)
        pos = _w_esc(q, pos + 1 + nb, p, a, n, _HEX)
        q[pos] = 0x0A
        self.pos = pos + 1
        return 0

    @cython.locals(k=cython.Py_ssize_t, t=cython.Py_ssize_t, j=cython.Py_ssize_t,
                   first=cython.Py_ssize_t, end=cython.Py_ssize_t, ino=cython.ulonglong,
                   d=cython.ulonglong, last=cython.ulonglong,
                   lastgen=cython.ulonglong, root=cython.ulonglong, s=cython.Py_ssize_t,
                   R=cython.p_ulonglong, P=cython.p_ulonglong, S=cython.p_ulonglong,
                   skips=array, fast=cython.bint,
                   nskip=cython.Py_ssize_t, skipped=cython.bint, nb=cython.Py_ssize_t,
                   have=cython.bint, flush_at=cython.Py_ssize_t, N=cython.p_uchar, b=bytes,
                   pre=list, lastpre=list)
    def render(self, skip=(), write=None) -> tuple:
        """(text, broken): "INO PATH" lines (UTF-8) of every inode held
        but those in ``skip``, in inode order, and the pointers that lead
        nowhere as (the inode whose paths were being found, inode, (p_ino,
        p_gen, name), why).  With ``write``, the text is handed to it in
        pieces of about a megabyte, each ending at a line's end (a view of
        the buffer, valid for the call), and the text returned is empty."""
        n = self.count
        if cython.compiled:
            R = cython.cast(cython.p_ulonglong, self.recs.data.as_voidptr)
        else:
            R = self.recs
        order = self.order()
        skips = array("Q", skip)
        nskip = len(skips)
        if cython.compiled:
            S = cython.cast(cython.p_ulonglong, skips.data.as_voidptr)
        else:
            S = skips
        tagged = []
        root = self.root
        N = self.names
        last = 0
        have = False
        lastpre = None
        lastgen = 0
        flush_at = _FLUSH_AT if write is not None else -1
        self.pos = 0
        for t in range(n):
            if flush_at >= 0 and self.pos >= flush_at:
                self._flush(write)
            k = t if order is None else order[t]
            ino = R[4 * k]
            skipped = False
            for s in range(nskip):
                if S[s] == ino:
                    skipped = True
            if skipped:
                continue
            if ino == root:
                self._line(ino, b"/", 1, b"", 0, 0)
                continue
            first = R[4 * k + 2]
            end = first + R[4 * k + 3]
            if cython.compiled:
                P = cython.cast(cython.p_ulonglong, self.pps.data.as_voidptr)
            else:
                P = self.pps
            # the common case at once: every pointer names a directory of
            # the generation it records whose paths are known
            fast = True
            for j in range(first, end):
                d = P[4 * j]
                if not have or d != last:
                    info = self.prefixes.get(d)
                    if info is None:
                        info = self._dir_info(d)
                        if info is None:
                            fast = False
                            break
                    last = d
                    have = True
                    lastpre = info[0]
                    lastgen = info[1]
                if d == ino or lastgen != P[4 * j + 1]:
                    fast = False
                    break
            if fast:
                for j in range(first, end):
                    pre = self.prefixes[P[4 * j]][0] if P[4 * j] != last else lastpre
                    for b in pre:
                        self._line(ino, b, len(b), N, P[4 * j + 2], P[4 * j + 3])
                continue
            nb = len(self.broken)
            for path in self._paths(ino, self._plist(k), ())[0]:
                self._line(ino, b"", 0, path, 0, len(path))
            for br in self.broken[nb:]:
                tagged.append((ino,) + br)
        if write is not None:
            if self.pos:
                self._flush(write)
            return b"", tagged
        return bytes(memoryview(self.out)[:self.pos]), tagged


# render hands its text on once this much of it is in the buffer
_FLUSH_AT = 1 << 20
# the two digits of 0..99, and the hexadecimal digits (_w_uint, _w_esc)
_DIGITS2 = b"".join(b"%02d" % i for i in range(100))
_HEX = b"0123456789abcdef"


@cython.cfunc
@cython.exceptval(check=False)
@cython.locals(q=cython.p_uchar, pos=cython.Py_ssize_t, v=cython.ulonglong,
               dg=cython.p_uchar, t=cython.ulonglong, n=cython.Py_ssize_t,
               i=cython.Py_ssize_t, r=cython.Py_ssize_t)
@cython.returns(cython.Py_ssize_t)
def _w_uint(q, pos, v, dg):
    """Write ``v`` in decimal at q[pos] (room for 20 digits); the position
    after it.  Two digits a step, from the table ``dg`` (_DIGITS2)."""
    n = 1
    t = v
    while t >= 10:
        t //= 10
        n += 1
    i = pos + n
    while v >= 100:
        r = v % 100
        v //= 100
        i -= 2
        q[i] = dg[2 * r]
        q[i + 1] = dg[2 * r + 1]
    if v >= 10:
        q[i - 2] = dg[2 * v]
        q[i - 1] = dg[2 * v + 1]
    else:
        q[i - 1] = 0x30 + v
    return pos + n


@cython.cfunc
@cython.exceptval(check=False)
@cython.locals(q=cython.p_uchar, pos=cython.Py_ssize_t, p=cython.p_uchar,
               a=cython.Py_ssize_t, n=cython.Py_ssize_t, h=cython.p_uchar,
               i=cython.Py_ssize_t, end=cython.Py_ssize_t, c=cython.uint, k=cython.Py_ssize_t)
@cython.returns(cython.Py_ssize_t)
def _w_esc(q, pos, p, a, n, h):
    """Write p[a:a+n] at q[pos] as shown_name shows it (room for 4 * n
    bytes); the position after it.  UTF-8 text as it is; a backslash,
    newline, tab and carriage return as \\\\, \\n, \\t, \\r; other control
    characters and bytes that are not UTF-8 as \\xNN (hexadecimal digits
    from ``h``, _HEX)."""
    i = a
    end = a + n
    while i < end:
        c = p[i]
        if 0x20 <= c < 0x7F and c != 0x5C:
            q[pos] = c
            pos += 1
            i += 1
            continue
        if c >= 0x80:
            k = _utf8_len(p, i, end)
            if k:
                _copy_into(q, pos, p, i, k)
                pos += k
                i += k
                continue
        q[pos] = 0x5C
        if c == 0x0A:
            q[pos + 1] = 0x6E
            pos += 2
        elif c == 0x09:
            q[pos + 1] = 0x74
            pos += 2
        elif c == 0x0D:
            q[pos + 1] = 0x72
            pos += 2
        elif c == 0x5C:
            q[pos + 1] = 0x5C
            pos += 2
        else:
            q[pos + 1] = 0x78
            q[pos + 2] = h[c >> 4]
            q[pos + 3] = h[c & 15]
            pos += 4
        i += 1
    return pos


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


@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, n=cython.Py_ssize_t,
               i=cython.Py_ssize_t)
def rmap_recs(buf, offset, count) -> list:
    """``count`` reverse-mapping records (startblock, blockcount, owner,
    offset with its fork, bmbt and unwritten bits)."""
    p = buf
    off = offset
    n = count
    _check_records(buf, off, n, 24, "reverse mapping records")
    out = []
    for i in range(n):
        out.append((_be32(p, off), _be32(p, off + 4), _be64(p, off + 8), _be64(p, off + 16)))
        off += 24
    return out


@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, n=cython.Py_ssize_t,
               i=cython.Py_ssize_t, size=cython.Py_ssize_t, s=cython.ulonglong,
               c=cython.ulonglong, o=cython.ulonglong, f=cython.ulonglong,
               bs=cython.ulonglong, bo=cython.ulonglong, bf=cython.ulonglong,
               unw=cython.ulonglong, have=cython.bint, leaf_=cython.bint)
def rmap_high_key(buf, offset, count, leaf) -> tuple:
    """The greatest high key (startblock, owner, offset with its fork and
    bmbt bits, the unwritten bit cleared) among ``count`` rmapbt entries at
    ``offset``: leaf records (24 bytes; a record's high key is its last
    block, and for a fork mapping its last file offset) or node keys (40
    bytes, the high key at +20).  Keys compare as unsigned (startblock,
    owner, offset), as the kernel's overlapping btree does.  None for no
    entries."""
    p = buf
    off = offset
    n = count
    leaf_ = leaf
    size = 24 if leaf_ else 40
    _check_records(buf, off, n, size, "rmapbt entries")
    unw = cython.cast(cython.ulonglong, 1) << 61
    bs = bo = bf = 0
    have = False
    for i in range(n):
        if leaf_:
            s = _be32(p, off)
            c = _be32(p, off + 4)
            o = _be64(p, off + 8)
            f = _be64(p, off + 16) & ~unw
            if c:
                s = s + c - 1
                if not (o >> 63) and not ((f >> 62) & 1):
                    f = f + c - 1
        else:
            s = _be32(p, off + 20)
            o = _be64(p, off + 24)
            f = _be64(p, off + 32) & ~unw
        if not have or s > bs or (s == bs and (o > bo or (o == bo and f > bf))):
            bs, bo, bf = s, o, f
            have = True
        off += size
    if not have:
        return None
    return (bs, bo, bf)


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


class FileReaderCore:
    """What every read of ``fstool.fs.osapi.FileReader`` (a file opened in
    the image) goes through: the inode ``node``, the position, open or
    closed, the ``with`` protocol and ``read``, which reads a range held in
    one written extent in one native call (single_extent_read) and asks the
    inode (``node.read(offset, size)``) for anything else.  Compiled, a C
    type: opening, reading and closing a small file cost no Python frame."""
    __slots__ = ("node", "pos", "name", "_open")

    def __init__(self, node, name=None):
        self.node = node
        self.pos = 0
        self.name = name if name is not None else f"inode {node.ino}"
        self._open = True
        _untrack(self)      # it holds an inode and a name, which do not lead back

    @property
    def closed(self):
        return not self._open

    def close(self):
        self._open = False

    def __enter__(self):
        if not self._open:
            raise ValueError("I/O operation on closed file.")
        return self

    def __exit__(self, *exc):
        self._open = False

    def tell(self):
        if not self._open:
            raise ValueError("I/O operation on closed file.")
        return self.pos

    @cython.locals(node=InodeCore)
    def read(self, size=-1):
        if not self._open:
            raise ValueError("I/O operation on closed file.")
        node = self.node
        pos = self.pos
        left = node.size - pos
        n = left if size is None or size < 0 or size > left else size
        if n <= 0:
            return b""
        data = _single_extent_read(node.raw, pos, n, node.fs._read_ctx) \
            if node.format == 2 else None
        if data is None:
            data = node.read(pos, n)
        self.pos = pos + len(data)
        return data


@cython.cfunc
@cython.locals(node=InodeCore, ifmt=cython.uint)
def _node_stat(node):
    """An inode's os.stat_result: natively, except for devices (their
    number is decoded by the inode's own ``stat``)."""
    ifmt = node.mode & 0o170000
    if ifmt == 0o020000 or ifmt == 0o060000:
        return node.stat()
    return _inode_stat(node.raw, node.ino, node.fs._stat_ctx, 0)


class DirEntryCore:
    """What ``fstool.fs.osapi.ImageDirEntry`` (an entry scandir yields) is
    made of, with its hot methods: ``name``, ``path``, ``inode()``,
    ``stat()``, ``is_dir()``, ``is_file()``, ``is_symlink()``.  ``_fs`` is the
    filesystem (``inode(ino)`` and ``stat(path)`` are asked of it), ``_node``
    the inode scandir decoded (or None), ``_ifmt`` the file type the entry
    gives (0: unknown, asked of the inode).  Made a batch at a time by
    :func:`dir_entries`; compiled, a C type."""
    __slots__ = ("_fs", "name", "path", "_ino", "_ifmt", "_node", "_lstat", "_stat")

    def __init__(self, fs, name, path, ino, ftype, node=None):
        _fill_entry(self, fs, name, path, ino, ftype, node)

    def inode(self):
        return self._ino

    def stat(self, *, follow_symlinks=True):
        """``os.stat_result`` of the entry (of its target when it is a symlink
        and ``follow_symlinks``), read on the first call and kept."""
        lst = self._lstat
        if lst is None:
            node = self._node
            if node is None:
                node = self._fs.inode(self._ino)
            lst = self._lstat = _node_stat(node)
        if not follow_symlinks or lst.st_mode & 0o170000 != 0o120000:
            return lst
        if self._stat is None:
            self._stat = self._fs.stat(self.path)
        return self._stat

    def _type(self):
        if self._ifmt == 0:          # no file type in the entry: ask the inode
            self._ifmt = self.stat(follow_symlinks=False).st_mode & 0o170000
        return self._ifmt

    def _is(self, ifmt, follow_symlinks):
        t = self._type()
        if t == 0o120000 and follow_symlinks:
            try:
                return self.stat().st_mode & 0o170000 == ifmt
            except OSError:             # dangling or looping link
                return False
        return t == ifmt

    def is_dir(self, *, follow_symlinks=True):
        return self._is(0o040000, follow_symlinks)

    def is_file(self, *, follow_symlinks=True):
        return self._is(0o100000, follow_symlinks)

    def is_symlink(self):
        return self._type() == 0o120000

    def __fspath__(self):
        return self.path


@cython.cfunc
@cython.locals(e=DirEntryCore)
def _fill_entry(e, fs, name, path, ino, ftype, node):
    """Every field of a new DirEntryCore."""
    e._fs = fs
    e.name = name
    e.path = path
    e._ino = ino
    e._ifmt = _ftype_ifmt(ftype) << 12
    e._node = node
    e._lstat = None
    e._stat = None


@cython.locals(i=cython.Py_ssize_t, n=cython.Py_ssize_t, e=DirEntryCore)
def dir_entries(cls, fs, part, nodes, prefix, as_bytes, dino, dentries, listed) -> list:
    """Entries of a directory as ``cls`` objects (a subclass of
    DirEntryCore): ``part`` holds (name, inode number, ftype), ``nodes`` the
    inodes decoded for them (None where one failed), each path is ``prefix
    + name`` (the name decoded as UTF-8 with surrogateescape unless
    ``as_bytes``).  Each name is noted in ``dentries`` ((dino, name) ->
    inode, or its number), each path with an inode in ``listed``."""
    out = []
    n = len(part)
    for i in range(n):
        name, ino, ftype = part[i]
        child = nodes[i]
        nm = name if as_bytes else name.decode("utf-8", "surrogateescape")
        path = prefix + nm
        e = DirEntryCore.__new__(cls)
        # an entry holds the filesystem, strings, its inode and stat: nothing
        # of that refers back to it
        _untrack(e)
        _fill_entry(e, fs, nm, path, ino, ftype, child)
        if child is None:
            dentries[(dino, name)] = ino
        else:
            dentries[(dino, name)] = child
            listed[path] = child
        out.append(e)
    return out


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


# nanoseconds from the bigtime epoch (1901-12-13) to the Unix epoch, a C
# value when compiled (parsers.pxd): a literal this large would make the
# arithmetic on it Python arithmetic
_BIGTIME_OFF = 2147483648000000000


@cython.cfunc
@cython.exceptval(check=False)
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, n=cython.Py_ssize_t,
               i=cython.Py_ssize_t)
@cython.returns(cython.bint)
def _zero(p, off, n):
    for i in range(n):
        if p[off + i]:
            return False
    return True


@cython.cfunc
@cython.exceptval(check=False)
@cython.locals(p=cython.p_uchar, a=cython.Py_ssize_t, b=cython.Py_ssize_t,
               i=cython.Py_ssize_t)
@cython.returns(cython.bint)
def _no_nul(p, a, b):
    for i in range(a, b):
        if p[i] == 0:
            return False
    return True


@cython.cfunc
@cython.exceptval(check=False)
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t)
@cython.returns(cython.bint)
def _legacy_times_ok(p, off):
    """The nanosecond words of atime, mtime, ctime and crtime are below a
    second (legacy timestamps)."""
    return (_be32(p, off + 36) < 1000000000 and _be32(p, off + 44) < 1000000000 and
            _be32(p, off + 52) < 1000000000 and _be32(p, off + 148) < 1000000000)


@cython.cfunc
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, big=cython.bint,
               raw=cython.ulonglong)
def _timestamp_ns(p, off, big):
    """An inode timestamp as nanoseconds since the epoch (a Python int: the
    bigtime range passes 2**63): bigtime counts nanoseconds from 1901-12-13
    (2**31 s before the epoch); the old format is signed seconds and
    nanoseconds, 32 bits each."""
    raw = _be64(p, off)
    if big and raw >> 63:
        return raw - _BIGTIME_OFF          # unsigned: exact, past 2**63
    return _timestamp_ll(p, off, big)


@cython.cfunc
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, big=cython.bint,
               raw=cython.ulonglong, sec=cython.longlong, sraw=cython.longlong)
@cython.returns(cython.longlong)
def _timestamp_ll(p, off, big):
    """_timestamp_ns in C arithmetic, for a bigtime value below 2**63 or any
    old-format time."""
    raw = _be64(p, off)
    if big:
        sraw = raw
        return sraw - _BIGTIME_OFF
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


def stat_values(raw, ino, st_dev, blksize, bb_shift, rdev=0) -> tuple:
    """The inode ``raw`` as the 19 values of an ``os.stat_result`` on Linux:
    mode, ino, dev, nlink, uid, gid, size, the three times in whole seconds
    (floored), as floats (seconds + nanoseconds * 1e-9, as os.stat makes
    them) and in nanoseconds, blksize, blocks (di_nblocks in 512-byte units,
    2**``bb_shift`` per filesystem block) and ``rdev`` (the caller encodes
    device numbers)."""
    return _stat_values(raw, ino, st_dev, blksize, bb_shift, rdev)


# os.stat_result takes its 19 Linux fields as one tuple (fastest); elsewhere
# the fields after the first ten go by name
_STAT_EXTRA = ("st_atime", "st_mtime", "st_ctime", "st_atime_ns", "st_mtime_ns",
               "st_ctime_ns", "st_blksize", "st_blocks", "st_rdev")
_stat_result = _os.stat_result
try:
    _probe = _os.stat_result(tuple(range(19)))
    _STAT_FROM_TUPLE = [getattr(_probe, f) for f in _STAT_EXTRA] == list(range(10, 19))
except (TypeError, AttributeError):
    _STAT_FROM_TUPLE = False


def inode_stat(raw, ino, ctx, rdev=0):
    """The inode ``raw`` as an ``os.stat_result`` (see stat_values); ``ctx``
    is (st_dev, st_blksize, blocklog - 9)."""
    return _inode_stat(raw, ino, ctx, rdev)


@cython.cfunc
def _untrack(o):
    """Take ``o`` off the garbage collector's lists (compiled only): for
    objects made by the thousand that hold nothing which could lead back to
    them (numbers, strings, an inode), so that the collector does not scan
    them again and again while a tree is walked."""
    if cython.compiled:
        PyObject_GC_UnTrack(cython.cast(cython.p_void, o))


@cython.cfunc
def _inode_stat(raw, ino, ctx, rdev):
    r = _make_stat(_stat_values(raw, ino, ctx[0], ctx[1], ctx[2], rdev))
    _untrack(r)          # numbers only
    return r


# os.stat_result of 19 fields, filled directly from C when compiled
_STAT_FIELDS = getattr(_os.stat_result, "n_fields", 0)


@cython.cfunc
@cython.locals(i=cython.Py_ssize_t)
def _make_stat(v):
    """os.stat_result of the 19 values ``v``: compiled, a new one filled item
    by item (no argument parsing); else from the tuple, or by field names
    where the type does not take the tuple."""
    if not _STAT_FROM_TUPLE:
        return _stat_result(v[:10], dict(zip(_STAT_EXTRA, v[10:])))
    if cython.compiled and _STAT_FIELDS == 19:
        r = PyStructSequence_New(cython.cast(type_p, _stat_result))
        for i in range(19):
            x = v[i]
            Py_INCREF(x)                   # the item takes this reference
            PyStructSequence_SET_ITEM(r, i, x)
        return r
    return _stat_result(v)


@cython.cfunc
@cython.locals(p=cython.p_uchar, big=cython.bint, bb_shift=cython.int,
               la=cython.longlong, lm=cython.longlong, lc=cython.longlong,
               sa=cython.longlong, sm=cython.longlong, sc=cython.longlong)
def _stat_values(raw, ino, st_dev, blksize, bb_shift, rdev):
    p = raw
    if len(raw) < 176:
        raise ValueError("inode buffer too small")
    big = (_be64(p, 120) & 0x8) != 0
    nblocks = _be64(p, 64)          # a Python int: the shift must not wrap
    if not big or not ((_be64(p, 32) | _be64(p, 40) | _be64(p, 48)) >> 63):
        # every time fits 64 bits: C arithmetic
        la = _timestamp_ll(p, 32, big)
        lm = _timestamp_ll(p, 40, big)
        lc = _timestamp_ll(p, 48, big)
        sa = _floor_sec(la)
        sm = _floor_sec(lm)
        sc = _floor_sec(lc)
        return (_be16(p, 2), ino, st_dev, _be32(p, 16), _be32(p, 8), _be32(p, 12),
                _be64(p, 56), sa, sm, sc, sa + (la - sa * 1000000000) * 1e-9,
                sm + (lm - sm * 1000000000) * 1e-9, sc + (lc - sc * 1000000000) * 1e-9,
                la, lm, lc, blksize, nblocks << bb_shift, rdev)
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
            blksize, nblocks << bb_shift, rdev)


@cython.cfunc
@cython.locals(p=cython.p_uchar, offset=cython.longlong, size=cython.longlong,
               flags2=cython.ulonglong, forkoff=cython.Py_ssize_t, nrecs=cython.ulonglong,
               l0=cython.ulonglong, l1=cython.ulonglong, startblock=cython.ulonglong,
               count=cython.ulonglong, agno=cython.ulonglong, agbno=cython.ulonglong,
               agblklog=cython.int, agblocks=cython.ulonglong, agcount=cython.ulonglong,
               last_ag_blocks=cython.ulonglong, blocklog=cython.int, limit=cython.ulonglong,
               mask=cython.ulonglong, end=cython.ulonglong)
@cython.returns(cython.longlong)
def _single_extent_pos(raw, offset, size, geometry):
    """single_extent_offset's work, callable from C (``geometry`` may go on
    after its five values)."""
    p = raw
    agblklog = geometry[0]
    agblocks = geometry[1]
    agcount = geometry[2]
    last_ag_blocks = geometry[3]
    blocklog = geometry[4]
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


def single_extent_offset(raw, offset, size, geometry) -> int:
    """Byte offset in the image of file bytes [offset, offset+size) when the
    inode ``raw`` has an extents-format data fork of exactly one written
    extent that starts at file block 0, covers the range and lies inside its
    AG; else -1 (the caller takes the general path, which reports what is
    wrong).  ``geometry`` is (agblklog, agblocks, agcount, last AG's
    blocks, blocklog)."""
    return _single_extent_pos(raw, offset, size, geometry)


def single_extent_read(raw, offset, size, ctx):
    """File bytes [offset, offset+size) of the inode ``raw`` read from the
    image in one call when one written extent holds them (see
    single_extent_offset); else None, and None too when the read fails or
    comes up short: the caller takes the general path, which reports what
    is wrong.  ``ctx`` is single_extent_offset's geometry followed by the
    image's descriptor, its size in bytes and a read-ahead state (see
    read_ahead_state) or None."""
    return _single_extent_read(raw, offset, size, ctx)


# read-ahead of small files' data: a read of at most RA_SMALL bytes that
# starts less than RA_GAP bytes after the previous one ended reads RA_WINDOW
# bytes from there, and reads that fall inside that window are served from
# it (files written one after the other lie one after the other)
RA_SMALL = 64 << 10
RA_GAP = 64 << 10
RA_WINDOW = 256 << 10


def read_ahead_state() -> list:
    """A fresh read-ahead state for single_extent_read: [where the last read
    ended, (window start, window bytes) or None].  The window and its start
    go together in one tuple, so that a reader in another thread never sees
    one without the other."""
    return [-(1 << 62), None]


@cython.cfunc
@cython.locals(pos=cython.longlong, start=cython.longlong, last=cython.longlong,
               n=cython.longlong, limit=cython.longlong)
def _single_extent_read(raw, offset, size, ctx):
    pos = _single_extent_pos(raw, offset, size, ctx)
    fd = ctx[5]
    limit = ctx[6]
    if pos < 0 or pos + size > limit or fd < 0:
        return None
    ra = ctx[7]
    if ra is None or size > RA_SMALL:
        return _pread_exact(fd, pos, size)
    last = ra[0]
    ra[0] = pos + size
    held = ra[1]
    if held is not None:
        start = held[0]
        window = held[1]
        if start <= pos and pos + size <= start + len(window):
            return window[pos - start:pos - start + size]
    if not (last <= pos < last + RA_GAP):
        return _pread_exact(fd, pos, size)
    # reading on from where the last read ended: a window from here
    n = limit - pos
    if n > RA_WINDOW:
        n = RA_WINDOW
    window = _pread_exact(fd, pos, n)
    if window is None:
        ra[1] = None
        return _pread_exact(fd, pos, size)
    ra[1] = (pos, window)
    return window[:size]


@cython.cfunc
@cython.locals(pos=cython.longlong, n=cython.Py_ssize_t, done=cython.Py_ssize_t,
               got=cython.Py_ssize_t, cfd=cython.int, buf=cython.p_char)
def _pread_exact(fd, pos, n):
    """``n`` bytes of descriptor ``fd`` at ``pos``, or None when the read
    fails or comes up short."""
    if not cython.compiled:
        try:
            data = _os.pread(fd, n, pos)
        except OSError:
            return None
        return data if len(data) == n else None
    out = PyBytes_FromStringAndSize(cython.NULL, n)
    buf = PyBytes_AS_STRING(out)
    cfd = fd
    done = 0
    while done < n:
        with cython.nogil:
            got = pread(cfd, buf + done, n - done, pos + done)
        if got <= 0:
            return None
        done += got
    return out


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


@cython.cfunc
@cython.locals(arr=array, a=cython.longlong, b=cython.longlong, c=cython.longlong,
               n=cython.Py_ssize_t, q=cython.p_longlong)
def _push3(arr, a, b, c):
    """Append the record (a, b, c) to a flat array of signed 64-bit
    numbers."""
    if not cython.compiled:
        arr.extend((a, b, c))
        return
    n = len(arr)
    cpy_array.resize_smart(arr, n + 3)
    q = cython.cast(cython.p_longlong, arr.data.as_voidptr)
    q[n] = a
    q[n + 1] = b
    q[n + 2] = c


@cython.cfunc
@cython.locals(arr=array, a=cython.ulonglong, b=cython.ulonglong, c=cython.ulonglong,
               d=cython.ulonglong, n=cython.Py_ssize_t, q=cython.p_ulonglong)
def _push4(arr, a, b, c, d):
    """Append the record (a, b, c, d) to a flat array of unsigned 64-bit
    numbers."""
    if not cython.compiled:
        arr.extend((a, b, c, d))
        return
    n = len(arr)
    cpy_array.resize_smart(arr, n + 4)
    q = cython.cast(cython.p_ulonglong, arr.data.as_voidptr)
    q[n] = a
    q[n + 1] = b
    q[n + 2] = c
    q[n + 3] = d


@cython.cfunc
@cython.locals(arr=array, n=cython.Py_ssize_t)
def _grow(arr, n):
    """Make the flat array ``arr`` at least ``n`` numbers long (new ones
    unset), for writing in place."""
    if len(arr) < n:
        if cython.compiled:
            cpy_array.resize_smart(arr, n)
        else:
            arr.extend([0] * (n - len(arr)))
    return 0


@cython.cfunc
@cython.locals(arr=array, n=cython.Py_ssize_t)
def _trim(arr, n):
    """Cut the flat array ``arr`` to its first ``n`` numbers."""
    if cython.compiled:
        cpy_array.resize_smart(arr, n)
    else:
        del arr[n:]
    return 0


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
               bigtime_fs=cython.bint, is_reg=cython.bint, rootino=cython.ulonglong,
               is_dir=cython.bint, owner=cython.longlong, ps=cython.ulonglong[:],
               pptr=cython.bint, big=cython.bint)
def scan_inode_chunk(chunk, base, inodesize, first_ino, uuid, free, holemask, flags2_ok,
                     bigtime_fs, agblklog, agcount, agblocks, last_ag_blocks, agfl_block,
                     max_file_offset, itype, nlinks, slot, rootino, claims, expect,
                     psums=None, pptr_fs=False):
    """Check the plain inodes of one 64-inode chunk in one call.

    Every inode must verify (magic, version 3, CRC, its own number, the
    filesystem uuid).  A free inode is plain when it is as the kernel leaves
    a freed one: no mode, no blocks or extents, no attr fork, no flags, hints
    or unlinked pointer.  An inode in use is plain when it is a regular file
    with an extents-format data fork, a directory with a local or extents
    data fork, a symlink with its target in the inode, or a device, fifo or
    socket, with nothing unusual: no flags but those in ``flags2_ok``
    (reflink only on a file), no extent size hints, no unlinked pointer,
    zero padding and di_onlink, legal timestamps (when not bigtime), an
    empty attr fork or, given ``psums`` (a slot per table slot, where the
    parent pointers of the inodes found plain are counted, see
    _sf_attr_plain; ``pptr_fs``: the filesystem has parent pointers), a
    sound shortform one, size zero for the special files, a directory's
    size inside the fork when local and past it (up to the leaf space) when
    not, a symlink's target of 1 to 1023 bytes inside the fork and without
    a NUL, only a directory as the root inode ``rootino``, and extents
    sorted, non-empty, inside one AG past its headers (block >
    ``agfl_block``), not unwritten but in a file (and not at all on a
    reflink filesystem, ``flags2_ok`` holding the reflink flag), below
    ``max_file_offset`` and adding up to di_nblocks.  A plain inode's file
    type (mode >> 12) and link count go to ``itype[slot + i]`` and
    ``nlinks[slot + i]`` (an inode table, see nlink_scan), and their extents
    to the flat record arrays of their AG (fstool/ops/check/records.py):
    (agbno, length, ino << 2) to ``claims[agno]`` (signed 64-bit numbers)
    and, unless ``expect`` is None, (agbno, length, ino, file offset with
    bit 61 set for an unwritten extent) to ``expect[agno]`` (unsigned).
    Returns (others, dirs): the indexes of every inode (allocated or free)
    that needs the full check in Python, and those of the plain
    directories."""
    p = chunk
    u = uuid
    isize = inodesize
    litino = isize - 176
    others = []
    dirs = []
    mask = 1
    mask = (mask << agblklog) - 1
    max_off = max_file_offset
    if slot < 0 or slot + 64 > len(itype) or slot + 64 > len(nlinks):
        raise ValueError("inode table slot out of range")
    if len(uuid) != 16:
        raise ValueError("uuid must be 16 bytes")
    if len(claims) < agcount or (expect is not None and len(expect) < agcount):
        raise ValueError("a record array for every AG")
    pptr = pptr_fs
    if psums is None:
        ps = _NO_SUMS
    else:
        ps = psums
        if slot + 64 > len(psums):
            raise ValueError("inode table slot out of range")
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
        flags2 = _be64(p, off + 120)
        # NREXT64 (di_flags2 bit 4) moves the extent counts: the data fork's
        # to the 64 bits at 24 (else padding), the attr fork's to the 32 at
        # 76, and leaves the 16 at 80 as padding
        big = (flags2 & 0x10) != 0
        ok = (_be16(p, off) == 0x494E and p[off + 4] == 3 and _be64(p, off + 152) == ino and
              _be32(p, off + 96) == _M32 and (big or _zero(p, off + 24, 8)) and
              _be16(p, off + 6) == 0 and _be16(p, off + 90) == 0 and
              _be32(p, off + 72) == 0 and _be32(p, off + 128) == 0 and
              not (big and _be16(p, off + 80)))
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
        size = _be64(p, off + 56)
        nblocks = _be64(p, off + 64)
        if big:
            next = _be64(p, off + 24)
            anext = _be32(p, off + 76)
        else:
            next = _be32(p, off + 76)
            anext = _be16(p, off + 80)
        forkoff = p[off + 82]
        aformat = p[off + 83]
        fmt = p[off + 5]
        if (free >> i) & 1:
            # free: plain when the kernel's verifier has nothing to say
            if mode != 0 or nblocks or next or anext or forkoff or size >> 63 or \
                    (aformat != 0 and aformat != 2) or \
                    flags2 & ~(flags2_ok & 0x18):
                others.append(i)
            continue
        if mode == 0 or size >> 63 or anext or ino >> 61 or \
                (aformat != 2 and not (aformat == 1 and forkoff and psums is not None)) or \
                flags2 & ~flags2_ok or \
                (not (flags2 & 0x8) and not _legacy_times_ok(p, off)):
            others.append(i)
            continue
        ifmt = mode & 0o170000
        is_reg = ifmt == 0o100000
        is_dir = ifmt == 0o040000
        dsize = forkoff * 8 if forkoff else litino
        if ino == rootino and not is_dir:
            others.append(i)
            continue
        if is_reg or is_dir:
            if forkoff and forkoff >= litino >> 3:
                others.append(i)
                continue
            if is_reg:
                if fmt != 2:
                    others.append(i)
                    continue
            elif (flags2 & 0x2) or size > _DIR_SIZE_MAX or \
                    (fmt == 1 and (next or nblocks)) or (fmt == 2 and size <= dsize) or \
                    (fmt != 1 and fmt != 2):
                others.append(i)
                continue
        elif ifmt == 0o120000:
            # a symlink whose target is in the inode: nothing to map
            if fmt != 1 or next or nblocks or (flags2 & 0x2) or size == 0 or \
                    size >= 1024 or size > dsize or \
                    (forkoff and forkoff >= litino >> 3) or \
                    not _no_nul(p, off + 176, off + 176 + size):
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
        if next > dsize // 16:
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
                    startoff + count - 1 > max_off or \
                    (l0 >> 63 and (not is_reg or flags2_ok & 0x2)):
                # an unwritten extent on a reflink filesystem: the full check
                # records it, to count it out of the shared blocks
                ok = False
                break
            prev_end = startoff + count
            owned += count
        if not ok or owned != nblocks:
            others.append(i)
            continue
        # last: a sound shortform attr fork counts its parent pointers
        if aformat == 1 and not _sf_attr_plain(p, off + 176 + forkoff * 8,
                                               litino - forkoff * 8, pptr, ps, slot + i):
            others.append(i)
            continue
        owner = ino << 2
        for e in range(next):
            l0 = _be64(p, off + 176 + 16 * e)
            l1 = _be64(p, off + 176 + 16 * e + 8)
            startblock = _rec_startblock(l0, l1)
            agno = startblock >> agblklog
            _push3(claims[agno], startblock & mask, _rec_blockcount(l1), owner)
            if expect is not None:
                _push4(expect[agno], startblock & mask, _rec_blockcount(l1), ino,
                       _rec_startoff(l0) | ((l0 >> 63) << 61))
        itype[slot + i] = ifmt >> 12
        nlinks[slot + i] = _be32(p, off + 16)
        if is_dir:
            dirs.append(i)
    return others, dirs


# -- the inode table and the namespace tally --------------------------------------
# check keeps what it learns of every inode in flat arrays indexed by a slot:
# the inode chunks, sorted by first inode number, are numbered 0, 1, ... and
# the inode at index i of chunk k has slot 64 * k + i.  ``starts`` holds the
# chunks' first inode numbers; ``itype`` the file type (mode >> 12, 0 for an
# inode not in use), ``nlinks`` the link count, ``refs`` the directory
# entries counted so far.

_MASK64 = 0xFFFFFFFFFFFFFFFF
_NO_SUMS = array("Q")
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


@cython.cfunc
@cython.exceptval(check=False)
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
@cython.exceptval(check=False)
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
@cython.exceptval(check=False)
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
               child=cython.ulonglong, ftype=cython.int, ps=cython.ulonglong[:],
               flags=cython.int, p=cython.p_uchar, slot=cython.Py_ssize_t,
               d=cython.ulonglong, g=cython.ulonglong)
def tally_entry(starts, itype, refs, child, ftype, has_ftype, psums=None, dir_ino=0,
                dir_gen=0, name=b"") -> int:
    """_tally_one for an entry already decoded (a shortform directory's);
    given ``psums``, an entry counted adds its parent pointer's mix
    (directory ``dir_ino`` of generation ``dir_gen``, ``name``) to its
    target's slot."""
    if len(itype) != len(refs):
        raise ValueError("inode table arrays differ in length")
    flags = _tally_one(starts, itype, refs, child, ftype, 1 if has_ftype else 0)
    if psums is not None and not flags & 1:
        if len(psums) != len(refs):
            raise ValueError("inode table arrays differ in length")
        ps = psums
        p = name
        d = dir_ino
        g = dir_gen
        slot = _find_slot(starts, child)
        ps[slot] = (ps[slot] + _pptr_mix(p, 0, len(name), d, g)) & _MASK64
    return flags


@cython.cfunc
@cython.exceptval(check=False)
@cython.locals(ino=cython.ulonglong, agino_log=cython.int, agcount=cython.ulonglong,
               agino_lo=cython.ulonglong, agino_hi=cython.ulonglong[:],
               not_dirents=cython.ulonglong[:], agno=cython.ulonglong,
               agino=cython.ulonglong, i=cython.Py_ssize_t)
@cython.returns(cython.bint)
def _dir_ino_ok(ino, agino_log, agcount, agino_lo, agino_hi, not_dirents):
    """libxfs_verify_dir_ino as check's verify_dir_ino takes it: an inode
    number inside its AG's inode range (agino_lo to agino_hi[agno]) and not
    one of ``not_dirents`` (the superblock's metadata inodes)."""
    agno = ino >> agino_log
    if agno >= agcount:
        return False
    agino = ino & ((cython.cast(cython.ulonglong, 1) << agino_log) - 1)
    if agino < agino_lo or agino > agino_hi[agno]:
        return False
    for i in range(len(not_dirents)):
        if not_dirents[i] == ino:
            return False
    return True


@cython.cfunc
@cython.exceptval(check=False)
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, width=cython.Py_ssize_t)
@cython.returns(cython.ulonglong)
def _be_ino(p, off, width):
    """A shortform directory's inode number: 4 or 8 bytes."""
    return _be64(p, off) if width == 8 else _be32(p, off)


@cython.cfunc
@cython.locals(p=cython.p_uchar, u=cython.p_uchar, n=cython.Py_ssize_t, ino=cython.ulonglong,
               has_ftype=cython.bint, ft=cython.Py_ssize_t, dirblksize=cython.Py_ssize_t,
               data_first=cython.Py_ssize_t, rootino=cython.ulonglong, agino_log=cython.int,
               agcount=cython.ulonglong, agino_lo=cython.ulonglong,
               agino_hi=cython.ulonglong[:], not_dirents=cython.ulonglong[:],
               starts=cython.ulonglong[:], itype=cython.uchar[:], refs=cython.uint[:],
               forkoff=cython.Py_ssize_t, dsize=cython.Py_ssize_t, size=cython.ulonglong,
               f=cython.Py_ssize_t, count=cython.Py_ssize_t, i8count=cython.Py_ssize_t,
               width=cython.Py_ssize_t, parent=cython.ulonglong, nmax=cython.Py_ssize_t,
               pos=cython.Py_ssize_t, offset=cython.Py_ssize_t, i8=cython.Py_ssize_t,
               found=cython.Py_ssize_t, namelen=cython.Py_ssize_t, esize=cython.Py_ssize_t,
               a=cython.Py_ssize_t, j=cython.Py_ssize_t, q=cython.Py_ssize_t,
               c=cython.uchar, child=cython.ulonglong, flags=cython.int, k=cython.int,
               ftype=cython.int, ps=cython.ulonglong[:], gen=cython.ulonglong,
               slot=cython.Py_ssize_t, has_ps=cython.bint)
def _sf_tally(raw, ino, uuid, has_ftype, dirblksize, data_first, rootino, agino_log,
              agcount, agino_lo, agino_hi, not_dirents, starts, itype, refs, ps, has_ps):
    """sf_dir_tally once its arguments are checked (the table arrays long
    enough, ``ps`` the parent pointer sums when ``has_ps``), for callers
    holding them typed already (checks.ShortformRun)."""
    p = raw
    u = uuid
    n = len(raw)
    if n < 176 or _be16(p, 0) != 0x494E or p[4] != 3 or p[5] != 1 or \
            _be64(p, 152) != ino:
        return None
    for k in range(16):
        if p[160 + k] != u[k]:
            return None
    if not _cksum_region_ok(p, 0, n, 100):
        return None
    forkoff = p[82]
    if forkoff and 176 + forkoff * 8 >= n:
        return None
    dsize = forkoff * 8 if forkoff else n - 176
    size = _be64(p, 56)
    if size > dsize or size < 6:
        return None
    f = 176
    ft = 1 if has_ftype else 0
    count = p[f]
    i8count = p[f + 1]
    width = 8 if i8count else 4
    if 2 + width > size:
        return None
    parent = _be_ino(p, f + 2, width)
    nmax = count
    if count * (4 + ft + width) + 2 + width > dsize or count == 0:
        nmax = 0xFF
    pos = 2 + width
    offset = data_first
    i8 = 1 if parent > 0xFFFFFFFF else 0
    found = 0
    while found < nmax and size > pos:
        if pos + 3 > dsize:
            return None
        namelen = p[f + pos]
        esize = 3 + namelen + ft + width
        if namelen == 0 or pos + esize > size:
            return None
        a = f + pos + 3
        for j in range(namelen):
            c = p[a + j]
            if c == 0 or c == 0x2F:
                return None
        # a name seen before: the entries before this one, compared
        q = 2 + width
        while q < pos:
            if p[f + q] == namelen:
                j = 0
                while j < namelen and p[f + q + 3 + j] == p[a + j]:
                    j += 1
                if j == namelen:
                    return None
            q += 3 + p[f + q] + ft + width
        if _be16(p, f + pos + 1) < offset:
            return None
        offset = _be16(p, f + pos + 1) + ((8 + 1 + namelen + ft + 2 + 7) & ~7)
        child = _be_ino(p, a + namelen + ft, width)
        if child > 0xFFFFFFFF:
            i8 += 1
        if child == ino or not _dir_ino_ok(child, agino_log, agcount, agino_lo, agino_hi,
                                           not_dirents):
            return None
        pos += esize
        found += 1
    if count != found or i8count != i8 or pos != size or \
            offset + (count + 2) * 8 + 8 > dirblksize:
        return None
    if not _dir_ino_ok(parent, agino_log, agcount, agino_lo, agino_hi, not_dirents) or \
            (ino == rootino and parent != ino) or (parent == ino and ino != rootino):
        return None
    # sound: every entry counted
    odd = []
    gen = _be32(p, 92)
    pos = 2 + width
    while pos < size:
        namelen = p[f + pos]
        a = f + pos + 3
        ftype = p[a + namelen] if ft else 0
        child = _be_ino(p, a + namelen + ft, width)
        flags = _tally_one(starts, itype, refs, child, ftype, ft)
        if has_ps and not flags & 1:
            slot = _find_slot(starts, child)
            ps[slot] = (ps[slot] + _pptr_mix(p, a, namelen, ino, gen)) & _MASK64
        if flags:
            odd.append((_bytes_at(p, a, a + namelen), child, ftype, flags))
        pos += 3 + namelen + ft + width
    return parent, odd


def sf_dir_tally(raw, ino, uuid, has_ftype, dirblksize, data_first, rootino, agino_log,
                 agcount, agino_lo, agino_hi, not_dirents, starts, itype, refs, psums=None):
    """A shortform directory (the raw inode ``raw`` of directory ``ino``)
    checked as fstool check's check.dirs._shortform checks it, its entries
    counted into the inode table (see tally_entry) only when that check
    would find nothing: the inode verifies (magic, version 3, CRC, its
    number, ``uuid``) and its data fork is local; the size fits the fork;
    the header, each entry and the count agree with the size; names are
    legal and unique; entry offsets ascend from ``data_first`` and leave a
    ``dirblksize`` block room for the leaf; the i8count is right; the parent
    and every entry name a valid inode number (``_dir_ino_ok``), no entry the
    directory itself, the parent the directory only for the root
    ``rootino``, and the root's parent itself.

    Given ``psums`` (parent pointers, see _pptr_mix), each entry counted
    adds the mix of (``ino``, the directory's generation, its name) to its
    target's slot, as tally_entry does.

    Returns (parent, odd) with odd [(name, child, ftype, flags)] for the
    entries tally_entry flags, or None (nothing counted) when the Python
    check must look."""
    if len(uuid) != 16 or len(itype) < 64 * len(starts) or len(refs) < len(itype):
        raise ValueError("inode table arrays too short")
    if psums is not None and len(psums) != len(refs):
        raise ValueError("inode table arrays differ in length")
    return _sf_tally(raw, ino, uuid, has_ftype, dirblksize, data_first, rootino, agino_log,
                     agcount, agino_lo, agino_hi, not_dirents, starts, itype, refs,
                     _NO_SUMS if psums is None else psums, psums is not None)


@cython.cfunc
@cython.exceptval(check=False)
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


# -- parent pointers against directory entries -------------------------------------
# Every directory entry check counts adds a mix of (directory, its
# generation, name) to its target's slot of ``psums``; every parent pointer
# of an inode subtracts the mix of (p_ino, p_gen, name) from the inode's
# slot.  A slot left non-zero is an inode whose parent pointers differ from
# the entries naming it; the Python code then finds which.

@cython.cfunc
@cython.exceptval(check=False)
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, n=cython.Py_ssize_t,
               ino=cython.ulonglong, gen=cython.ulonglong, x=cython.ulonglong,
               a=cython.ulonglong, c=cython.ulonglong)
@cython.returns(cython.ulonglong)
def _pptr_mix(p, off, n, ino, gen):
    """A 64-bit mix of (directory ``ino``, generation ``gen``, the name
    p[off:off+n]): the name enters through its directory hash, its CRC-32C
    and its length."""
    c = _crc_update(p, off, off + n, _M32) ^ _M32
    a = (c << 32) | _hash_at(p, off, n)
    x = (a ^ ((ino * _MIX1) & _MASK64) ^ ((((gen << 8) | n) * _MIX2) & _MASK64)) & _MASK64
    x = ((x ^ (x >> 30)) * _MIX1) & _MASK64
    x = ((x ^ (x >> 27)) * _MIX2) & _MASK64
    return x ^ (x >> 31)


@cython.locals(p=cython.p_uchar, i=cython.ulonglong, g=cython.ulonglong)
def pptr_mix(name, ino, gen) -> int:
    """_pptr_mix of one (directory, generation, name)."""
    p = name
    i = ino
    g = gen
    return _pptr_mix(p, 0, len(name), i, g)


@cython.locals(psums=cython.ulonglong[:], itype=cython.uchar[:], i=cython.Py_ssize_t)
def pptr_mismatches(itype, psums) -> list:
    """Slots of inodes in use whose parent pointers and the entries naming
    them did not cancel out in ``psums``."""
    if len(itype) != len(psums):
        raise ValueError("inode table arrays differ in length")
    out = []
    for i in range(len(itype)):
        if itype[i] and psums[i]:
            out.append(i)
    return out


@cython.cfunc
@cython.exceptval(check=False)
@cython.locals(p=cython.p_uchar, start=cython.Py_ssize_t, size=cython.Py_ssize_t,
               pptr_fs=cython.bint, psums=cython.ulonglong[:], slot=cython.Py_ssize_t,
               totsize=cython.Py_ssize_t, count=cython.Py_ssize_t, pos=cython.Py_ssize_t,
               i=cython.Py_ssize_t, namelen=cython.Py_ssize_t, valuelen=cython.Py_ssize_t,
               flags=cython.uint, ns=cython.uint, j=cython.Py_ssize_t, c=cython.uchar,
               end=cython.Py_ssize_t, acc=cython.ulonglong, v=cython.Py_ssize_t)
@cython.returns(cython.bint)
def _sf_attr_plain(p, start, size, pptr_fs, psums, slot):
    """Whether the shortform attr fork p[start:start+size] is one check's
    Python code would find nothing wrong with (totsize inside the fork; every
    entry whole, with a legal name for its namespace, namespace bits only
    (one namespace); parent pointers only where the filesystem has them,
    each a 12-byte record under a directory-entry name; count and totsize
    matching the entries).  When it is, its parent pointers' mixes are
    subtracted from psums[slot]."""
    totsize = _be16(p, start)
    count = p[start + 2]
    if totsize > size or totsize < 4:
        return False
    if count == 0:
        return totsize == 4
    pos = start + 4
    end = start + totsize
    acc = 0
    for i in range(count):
        if pos + 3 > end:
            return False
        namelen = p[pos]
        valuelen = p[pos + 1]
        flags = p[pos + 2]
        if namelen == 0 or pos + 3 + namelen + valuelen > end:
            return False
        # namespace bits only (the kernel's shortform verifier: no local or
        # incomplete bit in shortform)
        if flags & ~_ATTR_NSP_MASK:
            return False
        ns = flags & _ATTR_NSP_MASK
        if ns & (ns - 1):
            return False
        for j in range(pos + 3, pos + 3 + namelen):
            c = p[j]
            if c == 0 or (c == 0x2F and ns == _ATTR_PARENT):
                return False
        if ns == _ATTR_PARENT:
            if not pptr_fs or valuelen != 12:
                return False
            v = pos + 3 + namelen
            acc = (acc + _pptr_mix(p, pos + 3, namelen, _be64(p, v), _be32(p, v + 8))) & \
                _MASK64
        pos += 3 + namelen + valuelen
    if pos != end:
        return False
    if acc:
        psums[slot] = (psums[slot] - acc) & _MASK64
    return True


@cython.locals(p=cython.p_uchar, pos=cython.Py_ssize_t, stop=cython.Py_ssize_t,
               ft=cython.int, namelen=cython.Py_ssize_t, size=cython.Py_ssize_t,
               ftype=cython.int, child=cython.ulonglong, flags=cython.int,
               leafsum=cython.ulonglong, addr_base=cython.ulonglong,
               starts=cython.ulonglong[:], itype=cython.uchar[:], refs=cython.uint[:],
               dir_ino=cython.ulonglong, j=cython.Py_ssize_t, c=cython.uchar,
               ps=cython.ulonglong[:], pptr=cython.bint, gen=cython.ulonglong,
               slot=cython.Py_ssize_t)
def dir_data_tally(buf, start, end, has_ftype, addr_base, starts, itype, refs,
                   dir_ino, psums=None, dir_gen=0) -> tuple:
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
    counted and returned, so that it is not counted twice.  Given ``psums``
    (parent pointers, see _pptr_mix), each entry counted adds the mix of
    (``dir_ino``, ``dir_gen``, its name) to its target's slot."""
    p = buf
    pos = start
    stop = end
    ft = 1 if has_ftype else 0
    if pos < 0 or stop > len(buf) or pos > stop:
        raise ValueError("directory data region outside the buffer")
    if len(itype) != len(refs):
        raise ValueError("inode table arrays differ in length")
    pptr = psums is not None
    if pptr:
        if len(psums) != len(refs):
            raise ValueError("inode table arrays differ in length")
        ps = psums
    else:
        ps = _NO_SUMS
    gen = dir_gen
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
        if pptr and not flags & 1:
            slot = _find_slot(starts, child)
            ps[slot] = (ps[slot] + _pptr_mix(p, pos + 9, namelen, dir_ino, gen)) & _MASK64
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


# -- log recovery ---------------------------------------------------------------------
# The per-record and per-item work of fstool.log's recovery: cutting ops out
# of a record, reassembling them into transactions and items, the few fields
# replay needs from buffer and inode items with their checks, an inode item
# laid onto its buffer, and icreate's inode clusters.  On-disk layouts and
# constants come from the caller (fstool.format.log), not from here.

@cython.cfunc
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, v=cython.uint)
def _put_le32(p, off, v):
    p[off] = v & 0xFF
    p[off + 1] = (v >> 8) & 0xFF
    p[off + 2] = (v >> 16) & 0xFF
    p[off + 3] = (v >> 24) & 0xFF


@cython.cfunc
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, v=cython.ulonglong, k=cython.int)
def _put_be64(p, off, v):
    for k in range(8):
        p[off + 7 - k] = v & 0xFF
        v >>= 8


@cython.cfunc
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t)
@cython.returns(cython.uint)
def _le16(p, off):
    return p[off] | (p[off + 1] << 8)


@cython.cfunc
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t)
@cython.returns(cython.uint)
def _le32(p, off):
    return p[off] | (p[off + 1] << 8) | (p[off + 2] << 16) | (p[off + 3] << 24)


@cython.cfunc
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, lo=cython.ulonglong,
               hi=cython.ulonglong)
@cython.returns(cython.ulonglong)
def _le64(p, off):
    lo = _le32(p, off)
    hi = _le32(p, off + 4)
    return lo | (hi << 32)


@cython.cfunc
@cython.locals(v=cython.ulonglong, bits=cython.int, mask=cython.ulonglong,
               r=cython.longlong)
@cython.returns(cython.longlong)
def _signed(v, bits):
    """``v``, a ``bits``-wide two's-complement value (1 to 64 bits), as a
    signed number."""
    mask = 0xFFFFFFFFFFFFFFFF >> (64 - bits)
    if v >> (bits - 1):
        r = (v ^ mask) & mask
        return -r - 1
    r = v
    return r


@cython.cfunc
@cython.locals(v=cython.int)
@cython.returns(cython.int)
def _s8(v):
    return v - 256 if v >= 128 else v


@cython.locals(p=cython.p_uchar, start=cython.Py_ssize_t, end=cython.Py_ssize_t,
               off=cython.Py_ssize_t)
def stamp_cksum(buf, start, end, crc_offset) -> None:
    """Store in ``buf`` (a bytearray) the XFS checksum of buf[start:end]
    whose CRC field is at ``crc_offset`` (little-endian, as XFS keeps it)."""
    if start < 0 or end > len(buf) or not start <= crc_offset <= end - 4:
        raise ValueError("checksum field outside the buffer")
    p = buf
    off = crc_offset
    _put_le32(p, off, _cksum_region(p, start, end, off))


@cython.cfunc
@cython.locals(p=cython.p_uchar, end=cython.Py_ssize_t, n=cython.Py_ssize_t,
               dp=cython.Py_ssize_t, a=cython.Py_ssize_t, oplen=cython.Py_ssize_t,
               client=cython.uint, k=cython.Py_ssize_t)
@cython.returns(cython.Py_ssize_t)
def _walk_ops(p, end, n, out):
    """Check the op headers of a record body p[0:end] (at most ``n`` ops),
    as xlog_recover_process_data does; append (tid, flags, clientid, start,
    end) of each to ``out`` unless it is None.  Returns the op count."""
    dp = 0
    k = 0
    while dp < end and n > 0:
        if dp + 12 > end:
            raise ValueError(f"op header {k} at byte {dp} runs past the record "
                             f"({end} bytes)")
        oplen = _be32(p, dp + 4)
        client = p[dp + 8]
        a = dp + 12
        dp = a + oplen
        if client != 0x69 and client != 0xAA:
            raise ValueError(f"op {k} at byte {a - 12}: bad client id 0x{client:x}")
        if dp > end:
            raise ValueError(f"op {k} at byte {a - 12}: length {oplen} runs past the end "
                             f"of the record ({end} bytes)")
        if out is not None:
            out.append((_be32(p, a - 12), p[a - 3], client, a, dp))
        n -= 1
        k += 1
    return k


@cython.locals(p=cython.p_uchar, end=cython.Py_ssize_t)
def log_split_ops(body, h_len, num_ops) -> list:
    """The ops of a log record body, as xlog_recover_process_data cuts them:
    (tid, flags, clientid, start, end) of each op's data.  ``h_len`` bytes
    of ``body`` hold at most ``num_ops`` ops.  Damage raises ValueError."""
    end = h_len
    if end > len(body) or end < 0:
        raise ValueError(f"record length {h_len} past its {len(body)}-byte body")
    p = body
    ops = []
    _walk_ops(p, end, num_ops, ops)
    return ops


@cython.locals(h=cython.p_uchar, p=cython.p_uchar, nsect=cython.Py_ssize_t,
               i=cython.Py_ssize_t, slot=cython.Py_ssize_t, k=cython.int,
               have=cython.Py_ssize_t, per=cython.Py_ssize_t, off0=cython.Py_ssize_t)
def log_unstamp_cycles(hdr, body, nsect, cycle_data_off, per_sector) -> None:
    """xlog_unpack_data: put back the first word of each of the ``nsect``
    body sectors (a bytearray) from the cycle data of the header sectors
    ``hdr``: ``per_sector`` words in the first header from byte
    ``cycle_data_off``, then in each extended header from byte 4."""
    have = len(hdr) >> 9
    per = per_sector
    off0 = cycle_data_off
    if nsect * 512 > len(body) or nsect < 0:
        raise ValueError(f"{nsect} sectors past a {len(body)}-byte record body")
    h = hdr
    p = body
    for i in range(nsect):
        if i // per >= have:
            raise ValueError(f"record body sector {i} has no header sector holding "
                             "its cycle data")
        if i < per:
            slot = off0 + 4 * i
        else:
            slot = (i // per) * 512 + 4 + 4 * (i % per)
        for k in range(4):
            p[(i << 9) + k] = h[slot + k]


class LogItem:
    """One log item of a transaction: its regions (bytes) and the region
    count its first region announces (``total``)."""
    __slots__ = ("regions", "total")

    def __init__(self, regions=None, total=0):
        self.regions = [] if regions is None else regions
        self.total = total

    @property
    def type(self):
        r = self.regions[0] if self.regions else b""
        return (r[0] | (r[1] << 8)) if len(r) >= 2 else 0

    def __repr__(self):
        return f"LogItem(regions={len(self.regions)}, total={self.total})"

    def __eq__(self, other):
        return isinstance(other, LogItem) and other.regions == self.regions and \
            other.total == self.total


class LogReassembler:
    """Transactions reassembled from the ops of records fed in log order
    (the kernel's xlog_recover_process_data and xlog_recover_process_ophdr
    with its helpers).  ``new_trans(tid, lsn, blk)`` makes a transaction
    object with ``header`` (bytes), ``items`` (a list), ``commit_lsn`` and
    ``commit_blk``; ``consts`` gives the op flags and limits: (START, END,
    WAS_CONT, CONTINUE, COMMIT, UNMOUNT, transaction header size,
    transaction header magic, regions per item limit, item names).
    ``nbytes`` counts the region bytes kept so far."""
    __slots__ = ("open", "unmounts", "nbytes", "new_trans", "f_start", "f_end", "f_wascont",
                 "f_cont", "f_commit", "f_unmount", "th_size", "th_magic", "max_regions",
                 "names")

    def __init__(self, new_trans, consts):
        self.open = {}
        self.unmounts = 0
        self.nbytes = 0
        self.new_trans = new_trans
        (self.f_start, self.f_end, self.f_wascont, self.f_cont, self.f_commit,
         self.f_unmount, self.th_size, self.th_magic, self.max_regions, self.names) = consts

    @cython.locals(p=cython.p_uchar, end=cython.Py_ssize_t, dp=cython.Py_ssize_t,
                   a=cython.Py_ssize_t, b=cython.Py_ssize_t, oflags=cython.uint,
                   flags=cython.uint, i=cython.Py_ssize_t, nops=cython.Py_ssize_t,
                   done=list, opened=dict, entry=list, tid=cython.uint)
    def feed_record(self, body, h_len, num_ops, lsn, blk) -> list:
        """Cut a record body's ops (checked first, as ``log_split_ops``
        does) and feed them; returns the transactions its COMMIT ops
        complete.  Damage raises ValueError naming the op (and the
        transaction)."""
        end = h_len
        if end > len(body) or end < 0:
            raise ValueError(f"record length {h_len} past its {len(body)}-byte body")
        p = body
        nops = _walk_ops(p, end, num_ops, None)
        done = []
        opened = self.open
        dp = 0
        for i in range(nops):
            tid = _be32(p, dp)
            b = dp + 12 + _be32(p, dp + 4)
            oflags = p[dp + 9]
            a = dp + 12
            dp = b
            entry = opened.get(tid)
            if entry is None:
                if oflags & self.f_start:
                    t = self.new_trans(tid, lsn, blk)
                    opened[tid] = [t, t.items]
                continue            # (or slack before a transaction starts)
            flags = oflags & ~self.f_end
            if flags & self.f_wascont:
                flags &= ~self.f_cont
            try:
                if flags == 0 or flags == self.f_cont:
                    if b > a:
                        self._add(entry, _bytes_at(p, a, b))
                elif flags == self.f_wascont:
                    self._add_cont(entry, _bytes_at(p, a, b))
                elif flags == self.f_commit:
                    del opened[tid]
                    t = entry[0]
                    t.commit_lsn = lsn
                    t.commit_blk = blk
                    done.append(t)
                elif flags == self.f_unmount:
                    del opened[tid]
                    self.unmounts += 1
                else:
                    raise ValueError(f"bad op flags 0x{oflags:x}")
            except ValueError as e:
                raise ValueError(f"op {i} (transaction 0x{tid:08x}): {e}") from None
        return done

    def feed(self, body, ops, lsn, blk) -> list:
        """Feed ops already cut (``log_split_ops``); as feed_record."""
        return self.feed_record(body, ops[len(ops) - 1][4] if ops else 0, len(ops), lsn, blk)

    @cython.locals(entry=list, items=list, item=LogItem, n=cython.Py_ssize_t,
                   size=cython.uint, k=cython.Py_ssize_t)
    def _add(self, entry, region):
        items = entry[1]
        n = len(region)
        k = len(items)
        if k:
            item = items[k - 1]
            if item.total and len(item.regions) < item.total:
                item.regions.append(region)
                self.nbytes += n
                return
        t = entry[0]
        if not k and len(t.header) < self.th_size:
            if len(t.header) == 0:
                if n < 4 or _le32(region, 0) != self.th_magic:
                    raise ValueError("bad transaction header magic")
            if n > self.th_size:
                raise ValueError(f"transaction header of {n} bytes")
            t.header = region
            return
        item = items[k - 1] if k else None
        if item is None or (item.total and len(item.regions) == item.total):
            # made without calling the class (a plain allocation when
            # compiled: this runs once per log item)
            item = LogItem.__new__(LogItem)
            item.regions = []
            item.total = 0
            items.append(item)
        if item.total == 0:
            if n < 4:
                raise ValueError(f"item's first region of {n} bytes")
            size = _le16(region, 2)
            if size == 0 or size > self.max_regions:
                raise ValueError(f"bad number of regions ({size}) in log item "
                                 f"{self.names.get(_le16(region, 0), '?')}")
            item.total = size
        if len(item.regions) >= item.total:
            raise ValueError(f"log item region count {len(item.regions)} overflows "
                             f"its size {item.total}")
        item.regions.append(region)
        self.nbytes += n

    @cython.locals(entry=list, item=LogItem, k=cython.Py_ssize_t)
    def _add_cont(self, entry, data):
        t = entry[0]
        items = entry[1]
        if not items:
            # the transaction header was split across records
            if len(t.header) + len(data) > self.th_size:
                raise ValueError("transaction header continued past its size")
            t.header = t.header + data
            return
        item = items[len(items) - 1]
        if not item.regions:
            raise ValueError("continuation of an empty item")
        k = len(item.regions) - 1
        item.regions[k] = item.regions[k] + data
        self.nbytes += len(data)


class LiteItem:
    """A buffer or inode item as replay needs it (indexable like the dicts
    the full decoder returns)."""
    __slots__ = ("type", "type_code", "blkno", "len", "flags", "cancel", "inode_buf",
                 "blf_type", "map", "map_size", "ino", "fields", "asize", "dsize",
                 "boffset", "ilf_u")

    def __getitem__(self, key):
        return getattr(self, key)


class LogItemError(ValueError):
    """A log item replay refuses.  ``stage``: 0 its format cannot be read,
    1 it fails a check, 2 it holds work fstool does not replay."""

    def __init__(self, stage, msg):
        super().__init__(msg)
        self.stage = stage


class ItemReplayer:
    """Buffer and inode items: their fields with the checks that need only
    the item and the geometry (``lite``), and an inode item laid onto its
    inode cluster buffer (``inode``); icreate's cluster initialisation
    (``icreate_cluster``).

    ``consts``: (BUF code, INODE code, blf header size, datamap words,
    BLF_CANCEL, BLF_INODE_BUF, BLFT mask, BLFT shift, inode log format sizes
    (64, 32-bit), ILOG_DOWNER|AOWNER, ILOG_DEV, ILOG_DFORK, ILOG_DDATA,
    ILOG_DEXT, ILOG_DBROOT, ILOG_AFORK, ILOG_ADATA, ILOG_AEXT, ILOG_ABROOT,
    log dinode size, v2 log dinode size, dinode core size, long btree
    block header size).
    ``swap``: one byte per log dinode byte, the field width (1, 2, 4, 8) at
    each field's first byte of a field stored byte-swapped, 0 elsewhere.
    ``offs``: log dinode offsets (atime, mtime, ctime, crtime,
    next_unlinked, crc, lsn, flags2, version, mode, format, forkoff,
    big_nextents, nextents, anextents, nblocks).
    ``geo``: (sectors in the filesystem, inode size, inodelog, agino_log,
    inopblog, agcount, AG lengths (list), BIGTIME, NREXT64, uuid)."""
    __slots__ = ("c_buf", "c_inode", "blf_hdr", "datamap", "blf_cancel", "blf_inode_buf",
                 "blft_mask", "blft_shift", "ilf64", "ilf32", "owner", "ilog_dev",
                 "dfork", "ddata", "dext", "dbroot", "afork", "adata", "aext", "abroot",
                 "ldi_size", "ldi_v2", "core_size", "lblock_len", "swap", "o_atime",
                 "o_mtime", "o_ctime", "o_crtime", "o_next", "o_crc", "o_lsn", "o_flags2",
                 "o_version", "o_mode", "o_format", "o_forkoff", "o_bignext", "o_next_ext",
                 "o_anext", "o_nblocks", "dev_bb", "isize", "inodelog", "agino_log",
                 "inopblog", "agcount", "ag_len", "bigtime", "nrext64", "uuid")

    def __init__(self, consts, swap, offs, geo):
        (self.c_buf, self.c_inode, self.blf_hdr, self.datamap, self.blf_cancel,
         self.blf_inode_buf, self.blft_mask, self.blft_shift, self.ilf64, self.ilf32,
         self.owner, self.ilog_dev, self.dfork, self.ddata, self.dext, self.dbroot,
         self.afork, self.adata, self.aext, self.abroot, self.ldi_size, self.ldi_v2,
         self.core_size, self.lblock_len) = consts
        self.swap = bytes(swap)
        if len(self.swap) != self.ldi_size:
            raise ValueError("swap map of the wrong size")
        (self.o_atime, self.o_mtime, self.o_ctime, self.o_crtime, self.o_next, self.o_crc,
         self.o_lsn, self.o_flags2, self.o_version, self.o_mode, self.o_format,
         self.o_forkoff, self.o_bignext, self.o_next_ext, self.o_anext,
         self.o_nblocks) = offs
        (self.dev_bb, self.isize, self.inodelog, self.agino_log, self.inopblog,
         self.agcount, ag_len, self.bigtime, self.nrext64, uuid) = geo
        self.ag_len = list(ag_len)
        self.uuid = bytes(uuid)
        if len(self.uuid) != 16:
            raise ValueError("uuid of the wrong size")

    def lite(self, regions):
        """The item's replay fields as a LiteItem, checked, or None when the
        item is neither a buffer nor an inode."""
        return self._lite(regions)

    @cython.locals(p=cython.p_uchar, n=cython.Py_ssize_t, code=cython.uint,
                   nwords=cython.Py_ssize_t, i=cython.Py_ssize_t, d=LiteItem,
                   flags=cython.uint, ino=cython.ulonglong, agno=cython.ulonglong,
                   agbno=cython.ulonglong, base=cython.Py_ssize_t, core=cython.Py_ssize_t,
                   one=cython.ulonglong)
    def _lite(self, regions):
        r0 = regions[0]
        n = len(r0)
        p = r0
        code = _le16(p, 0) if n >= 4 else 0
        d = LiteItem.__new__(LiteItem)
        if code == self.c_buf:
            if n < self.blf_hdr or (n - self.blf_hdr) % 4:
                raise LogItemError(0, f"buffer item format of {n} bytes")
            flags = _le16(p, 4)
            nwords = min((n - self.blf_hdr) // 4, self.datamap)
            d.type = "BUF"
            d.type_code = code
            d.flags = flags
            d.len = _le16(p, 6)
            d.blkno = _signed(_le64(p, 8), 64)
            d.map_size = _le32(p, 16)
            d.map = tuple([_le32(p, self.blf_hdr + 4 * i) for i in range(nwords)])
            d.cancel = bool(flags & self.blf_cancel)
            d.inode_buf = bool(flags & self.blf_inode_buf)
            d.blf_type = (flags & self.blft_mask) >> self.blft_shift
            if d.map_size > nwords:
                raise LogItemError(1, f"dirty map of {d.map_size} words")
            if not d.cancel and (d.blkno < 0 or d.len <= 0 or d.blkno + d.len > self.dev_bb):
                raise LogItemError(1, f"block range daddr {d.blkno} length {d.len} lies "
                                      f"outside the filesystem ({self.dev_bb} sectors)")
            return d
        if code != self.c_inode:
            return None
        if n == self.ilf64:
            base = 16
        elif n == self.ilf32:
            base = 12
        else:
            raise LogItemError(0, f"inode log format of {n} bytes")
        d.type = "INODE"
        d.type_code = code
        d.fields = _le32(p, 4)
        d.asize = _le16(p, 8)
        d.dsize = _le16(p, 10)
        d.ino = _le64(p, base)
        # the device number, the one use of ilf_u, only where it is logged
        d.ilf_u = bytes(r0[base + 8:base + 24]) if d.fields & self.ilog_dev else None
        d.blkno = _signed(_le64(p, base + 24), 64)
        d.len = _signed(_le32(p, base + 32), 32)
        d.boffset = _signed(_le32(p, base + 36), 32)
        if d.blkno < 0 or d.len <= 0 or d.blkno + d.len > self.dev_bb:
            raise LogItemError(1, f"block range daddr {d.blkno} length {d.len} lies outside "
                                  f"the filesystem ({self.dev_bb} sectors)")
        if d.fields & self.owner:
            # refused here, before anything is written, even where the
            # kernel would find the inode newer and skip the change
            raise LogItemError(2, "btree owner changes (logged by swapext) are not "
                                  "replayed by fstool")
        ino = d.ino
        agno = ino >> self.agino_log
        one = 1
        agbno = (ino & ((one << self.agino_log) - 1)) >> self.inopblog
        if agno >= self.agcount or agbno == 0 or agbno >= self.ag_len[agno]:
            raise LogItemError(1, f"inode {ino} does not exist in this filesystem")
        if d.boffset < 0 or d.boffset + self.isize > d.len << 9:
            raise LogItemError(1, f"inode offset {d.boffset} lies outside its "
                                  f"{d.len}-sector buffer")
        if len(regions) < 2:
            raise LogItemError(1, "inode item without its core")
        core = len(regions[1])
        if core > self.ldi_size or core < self.ldi_v2:
            raise LogItemError(1, f"logged inode core of {core} bytes")
        return d

    def inode(self, buf, boff, d, regions, lsn):
        """xlog_recover_inode_commit_pass2 once the buffer is read: lay the
        logged inode (``regions``, LiteItem ``d``) onto ``buf`` (a bytearray)
        at ``boff``.  Returns False when the inode on disk is newer than
        ``lsn`` (nothing changed), True when replayed.  Damage raises
        LogItemError (nothing changed)."""
        if not isinstance(d, LiteItem):
            raise TypeError("inode() needs the LiteItem of an inode item")
        return self._inode(buf, boff, d, regions, lsn)

    @cython.locals(i=cython.Py_ssize_t, n=cython.Py_ssize_t, entry=tuple, it=LogItem,
                   lt=LiteItem)
    def classify(self, items, decode_other):
        """The items of a transaction (LogItem) as (index, item, decoded)
        entries: all of them in the order pass 2 replays them (buffers,
        other items, inode-unlink buffers, cancels:
        xlog_recover_reorder_trans), the cancelled buffers, and the items
        other than buffers and inodes in log order.  Buffers and inodes are
        decoded by ``lite``; ``decode_other(index, item)`` decodes the
        rest.  A LogItemError carries the item's ``index``."""
        bufs, others, ibufs, cancels, rest = [], [], [], [], []
        n = len(items)
        for i in range(n):
            it = items[i]
            if not it.regions:
                continue
            try:
                d = self._lite(it.regions)
            except LogItemError as e:
                e.index = i
                raise
            if d is None:
                entry = (i, it, decode_other(i, it))
                others.append(entry)
                rest.append(entry)
                continue
            entry = (i, it, d)
            lt = d
            if lt.type_code == self.c_buf:
                if lt.cancel:
                    cancels.append(entry)
                elif lt.inode_buf:
                    ibufs.append(entry)
                else:
                    bufs.append(entry)
            else:
                others.append(entry)
        ibufs.reverse()
        cancels.reverse()
        return bufs + others + ibufs + cancels, cancels, rest

    @cython.locals(i=cython.Py_ssize_t, n=cython.Py_ssize_t, entry=tuple, d=LiteItem,
                   nrep=cython.Py_ssize_t, nskip=cython.Py_ssize_t, it=LogItem)
    def inode_run(self, ordered, start, bufs, cancel, lsn):
        """Replay the inode items of ``ordered`` from index ``start`` while
        their buffer is in ``bufs`` (daddr -> an object with ``data``, a
        bytearray of the item's length, and ``dirty``) and not in
        ``cancel``.  Returns (index where it stopped, inodes replayed,
        inodes skipped as older than the disk).  A LogItemError carries the
        entry's ``index``."""
        n = len(ordered)
        nrep = 0
        nskip = 0
        i = start
        while i < n:
            entry = ordered[i]
            obj = entry[2]
            if not isinstance(obj, LiteItem):
                break
            d = obj
            if d.type_code != self.c_inode:
                break
            if cancel and (d.blkno, d.len) in cancel:
                break
            b = bufs.get(d.blkno)
            if b is None:
                break
            data = b.data
            if len(data) != d.len << 9:
                break
            it = entry[1]
            try:
                r = self._inode(data, d.boffset, d, it.regions, lsn)
            except LogItemError as e:
                e.index = i
                raise
            if r:
                b.dirty = True
                nrep += 1
            else:
                nskip += 1
            i += 1
        return i, nrep, nskip

    @cython.locals(p=cython.p_uchar, q=cython.p_uchar, w=cython.p_uchar,
                   o=cython.Py_ssize_t, n=cython.Py_ssize_t, i=cython.Py_ssize_t,
                   k=cython.Py_ssize_t, s=cython.int, t=cython.ulonglong,
                   fields=cython.uint, mode=cython.uint, fmt=cython.int,
                   forkoff=cython.Py_ssize_t, flags2=cython.ulonglong,
                   nex=cython.ulonglong, nblocks=cython.ulonglong, disk_lsn=cython.ulonglong,
                   nregions=cython.Py_ssize_t, ri=cython.Py_ssize_t, room=cython.Py_ssize_t,
                   ptr=cython.Py_ssize_t, dsize=cython.Py_ssize_t, asize=cython.Py_ssize_t,
                   flag=cython.uint, which=cython.int, lsn_v=cython.ulonglong,
                   nu0=cython.uint, nu1=cython.uint, nu2=cython.uint, nu3=cython.uint)
    def _inode(self, buf, boff, d, regions, lsn):
        o = boff
        if o < 0 or o + self.isize > len(buf):
            raise LogItemError(1, f"inode offset {boff} lies outside the buffer")
        p = buf
        if _be16(p, o) != 0x494E:
            raise LogItemError(1, f"bad inode magic in the buffer at daddr {d.blkno} "
                                  f"offset {boff}")
        core = regions[1]
        n = len(core)
        if n > self.ldi_size:
            raise LogItemError(1, f"logged inode core of {n} bytes")
        if n < self.ldi_v2:
            raise LogItemError(1, f"logged inode core of {n} bytes")
        q = core
        if (_le16(q, 0) if n >= 2 else 0) != 0x494E:
            raise LogItemError(1, f"bad magic 0x{(_le16(q, 0) if n >= 2 else 0):x} in the "
                                  "logged inode")
        s = _s8(q[self.o_version])
        if s < 3:
            raise LogItemError(1, f"logged inode {d.ino} is version {s} (v5 filesystems "
                                  "log version 3 inodes)")
        lsn_v = lsn
        if p[o + 4] >= 3:
            disk_lsn = _be64(p, o + self.o_lsn)
            if disk_lsn and disk_lsn != 0xFFFFFFFFFFFFFFFF and disk_lsn > lsn_v:
                return False
        mode = _le16(q, self.o_mode)
        fmt = _s8(q[self.o_format])
        if (mode & 0o170000) == 0o100000 and fmt not in (2, 3):
            raise LogItemError(1, f"regular file inode {d.ino} in fork format {fmt}")
        if (mode & 0o170000) == 0o040000 and fmt not in (1, 2, 3):
            raise LogItemError(1, f"directory inode {d.ino} in fork format {fmt}")
        forkoff = q[self.o_forkoff]
        if forkoff > self.isize:
            raise LogItemError(1, f"fork offset {forkoff} past the inode size")
        flags2 = _le64(q, self.o_flags2) if n >= self.o_flags2 + 8 else 0
        if flags2 & self.nrext64:
            nex = (_le64(q, self.o_bignext) if n >= self.o_bignext + 8 else 0) + \
                _le32(q, self.o_next_ext)
        else:
            nex = _le32(q, self.o_next_ext) + _le16(q, self.o_anext)
        nblocks = _le64(q, self.o_nblocks)
        if nex > nblocks:
            raise LogItemError(1, f"inode {d.ino}: {nex} extents but {nblocks} blocks")
        # check the forks before changing anything
        fields = d.fields
        nregions = len(regions)
        forkoff <<= 3
        dsize = forkoff if forkoff else self.isize - self.core_size
        asize = self.isize - self.core_size - forkoff
        ri = 2
        for which in range(2 if nregions > 2 else 0):
            flag = fields & (self.dfork if which == 0 else self.afork)
            if not flag:
                continue
            kind = "data" if which == 0 else "attr"
            room = dsize if which == 0 else asize
            if ri >= nregions:
                raise LogItemError(1, f"{kind} fork flagged but not logged")
            src = regions[ri]
            ri += 1
            if flag == (self.ddata if which == 0 else self.adata) or \
                    flag == (self.dext if which == 0 else self.aext):
                if len(src) > room:
                    raise LogItemError(1, f"{kind} fork of {len(src)} bytes does not fit "
                                          f"{room}")
            elif flag == (self.dbroot if which == 0 else self.abroot):
                self._bmdr_check(src, room)
            else:
                raise LogItemError(1, f"invalid {kind} fork flags 0x{flag:x}")
        # xfs_log_dinode_to_disk: the host-order core into the big-endian
        # on-disk one (same fields, same places); legacy timestamps are two
        # host-order 32-bit halves, seconds low; di_next_unlinked stays as
        # it is on disk; di_lsn is the transaction's; the CRC comes last
        nu0 = p[o + self.o_next]
        nu1 = p[o + self.o_next + 1]
        nu2 = p[o + self.o_next + 2]
        nu3 = p[o + self.o_next + 3]
        w = self.swap
        i = 0
        while i < self.ldi_size:
            s = w[i]
            if s == 0:
                p[o + i] = q[i] if i < n else 0
                i += 1
                continue
            if i + s <= n:
                for k in range(s):
                    p[o + i + k] = q[i + s - 1 - k]
            else:
                for k in range(s):
                    p[o + i + k] = 0
            i += s
        if not flags2 & self.bigtime:
            for k in range(4):
                i = (self.o_atime, self.o_mtime, self.o_ctime, self.o_crtime)[k]
                if i + 8 <= n:
                    t = _le64(q, i)
                    _put_be64(p, o + i, ((t & 0xFFFFFFFF) << 32) | (t >> 32))
        p[o + self.o_next] = nu0
        p[o + self.o_next + 1] = nu1
        p[o + self.o_next + 2] = nu2
        p[o + self.o_next + 3] = nu3
        _put_be64(p, o + self.o_lsn, lsn_v)
        if fields & self.ilog_dev:
            u = d.ilf_u
            for k in range(4):
                p[o + 176 + k] = u[3 - k]
        ptr = o + self.core_size
        ri = 2
        for which in range(2 if nregions > 2 else 0):
            flag = fields & (self.dfork if which == 0 else self.afork)
            if not flag:
                continue
            room = dsize if which == 0 else asize
            src = regions[ri]
            ri += 1
            at = ptr if which == 0 else ptr + forkoff
            if flag == (self.dbroot if which == 0 else self.abroot):
                buf[at:at + room] = self._bmbt_to_bmdr(src, room)
            else:
                buf[at:at + len(src)] = src
        _put_le32(p, o + self.o_crc, _cksum_region(p, o, o + self.isize, o + self.o_crc))
        return True

    @cython.locals(q=cython.p_uchar, numrecs=cython.Py_ssize_t, rmax=cython.Py_ssize_t,
                   dmax=cython.Py_ssize_t)
    def _bmdr_check(self, src, dlen):
        if len(src) < self.lblock_len:
            raise LogItemError(1, f"btree root of {len(src)} bytes")
        q = src
        numrecs = _be16(q, 6)
        rmax = (len(src) - self.lblock_len) // 16
        dmax = (dlen - 4) // 16
        if numrecs > dmax or numrecs > rmax:
            raise LogItemError(1, f"btree root with {numrecs} records does not fit the fork")

    @cython.locals(hdr=cython.Py_ssize_t, numrecs=cython.Py_ssize_t, rmax=cython.Py_ssize_t,
                   dmax=cython.Py_ssize_t, rp=cython.Py_ssize_t, dp=cython.Py_ssize_t)
    def _bmbt_to_bmdr(self, src, dlen):
        """xfs_bmbt_to_bmdr: the in-core root (a long btree block with the
        v5 header) as the on-disk fork root (level, numrecs, keys, ptrs)."""
        self._bmdr_check(src, dlen)
        hdr = self.lblock_len
        numrecs = _be16(src, 6)
        rmax = (len(src) - hdr) // 16
        dmax = (dlen - 4) // 16
        out = bytearray(dlen)
        out[0:4] = src[4:8]
        out[4:4 + 8 * numrecs] = src[hdr:hdr + 8 * numrecs]
        rp = hdr + rmax * 8
        dp = 4 + dmax * 8
        out[dp:dp + 8 * numrecs] = src[rp:rp + 8 * numrecs]
        return bytes(out)

    @cython.locals(p=cython.p_uchar, n=cython.Py_ssize_t, o=cython.Py_ssize_t,
                   i=cython.Py_ssize_t, k=cython.Py_ssize_t, ino=cython.ulonglong,
                   gen=cython.uint, isz=cython.Py_ssize_t, u=cython.p_uchar)
    def icreate_cluster(self, buf, gen, ino0):
        """xfs_ialloc_inode_init for one cluster buffer (a bytearray): every
        inode zeroed, then magic, version 3, generation, an empty unlinked
        pointer, its number, the filesystem uuid and its CRC."""
        isz = self.isize
        n = len(buf) // isz
        p = buf
        if cython.compiled:
            for i in range(len(buf)):
                p[i] = 0
        else:
            buf[:] = bytes(len(buf))
        u = self.uuid
        ino = ino0
        for i in range(n):
            o = i * isz
            p[o] = 0x49
            p[o + 1] = 0x4E
            p[o + 4] = 3
            p[o + 92] = (gen >> 24) & 0xFF
            p[o + 93] = (gen >> 16) & 0xFF
            p[o + 94] = (gen >> 8) & 0xFF
            p[o + 95] = gen & 0xFF
            for k in range(4):
                p[o + self.o_next + k] = 0xFF
            _put_be64(p, o + 152, ino + i)
            for k in range(16):
                p[o + 160 + k] = u[k]
            _put_le32(p, o + self.o_crc, _cksum_region(p, o, o + isz, o + self.o_crc))


# -- metadump: the inodes of a cluster that need no walk ---------------------------------

@cython.cfunc
@cython.locals(p=cython.p_uchar, a=cython.Py_ssize_t, b=cython.Py_ssize_t,
               k=cython.Py_ssize_t)
def _clear(buf, p, a, b):
    """Zero buf[a:b] (p is buf's bytes)."""
    if b <= a:
        return
    if cython.compiled:
        for k in range(a, b):
            p[k] = 0
    else:
        buf[a:b] = bytes(b - a)


@cython.locals(p=cython.p_uchar, first=cython.Py_ssize_t, count=cython.Py_ssize_t,
               isize=cython.Py_ssize_t, lit=cython.Py_ssize_t, i=cython.Py_ssize_t,
               o=cython.Py_ssize_t, core=cython.Py_ssize_t, dsize=cython.Py_ssize_t,
               asize=cython.Py_ssize_t, forkoff=cython.Py_ssize_t, used=cython.ulonglong,
               nex=cython.ulonglong, anex=cython.ulonglong, big=cython.bint,
               ok=cython.bint, ok_n=cython.bint, free=cython.ulonglong, mode=cython.uint,
               zero=cython.bint, check=cython.bint)
def metadump_plain_inodes(buf, first, count, isize, zero, check, free) -> int:
    """The inodes of an inode cluster (a bytearray) that xfs_metadump only
    zeroes, done in place, in order, from slot ``first`` for at most
    ``count`` slots: a free inode (bit i of ``free``: its literal area
    zeroed) and a regular file whose data fork is an extent list, with no
    attr fork or an empty extent-list one (each fork zeroed past its
    extents).  With ``zero`` the unused bytes are zeroed and a CRC that was
    right is made right again; ``check`` says whether to look at the CRC
    at all (obfuscating or zeroing).  Returns the slot of the first inode
    that needs the whole walk (``first + count`` when there is none)."""
    p = buf
    lit = isize - 176
    if first < 0 or count < 0 or (first + count) * isize > len(buf):
        raise ValueError("inode slots outside the buffer")
    for i in range(first, first + count):
        o = i * isize
        core = 176 if p[o + 4] == 3 else 100
        forkoff = p[o + 82] * 8
        if not (free >> (i - first)) & 1:
            mode = _be16(p, o + 2) & 0xF000
            if mode != 0x8000 or p[o + 5] != 2 or forkoff >= lit:
                return i
            big = p[o + 4] >= 3 and (p[o + 127] & 0x10) != 0
            if forkoff:
                if p[o + 83] != 2:
                    return i
                anex = _be32(p, o + 76) if big else _be16(p, o + 80)
                if anex:
                    return i
            ok = check and _cksum_region_ok(p, o, o + isize, o + 100)
            if zero:
                dsize = forkoff if forkoff else lit
                asize = lit - forkoff if forkoff else 0
                if big:
                    nex = _be64(p, o + 24)
                    ok_n = (nex >> 48) == 0
                else:
                    nex = _be32(p, o + 76)
                    ok_n = (nex >> 31) == 0
                used = (nex * 16) & _M32
                if ok_n and (used >> 31) == 0 and used <= dsize:
                    _clear(buf, p, o + core + used, o + core + dsize)
                if asize > 0:
                    _clear(buf, p, o + core + dsize, o + core + dsize + asize)
                if ok:
                    _put_le32(p, o + 100, _cksum_region(p, o, o + isize, o + 100))
            continue
        ok = check and _cksum_region_ok(p, o, o + isize, o + 100)
        if zero:
            _clear(buf, p, o + core, o + core + lit)
            if ok:
                _put_le32(p, o + 100, _cksum_region(p, o, o + isize, o + 100))
    return first + count


@cython.locals(p=cython.p_uchar, dirbs=cython.Py_ssize_t, end=cython.Py_ssize_t,
               pos=cython.Py_ssize_t, length=cython.Py_ssize_t, namelen=cython.Py_ssize_t,
               ft=cython.Py_ssize_t, z0=cython.Py_ssize_t, z1=cython.Py_ssize_t,
               want=cython.uint, zero=cython.bint, names=cython.bint)
def metadump_dir_data(buf, is_block, dirbs, ftype, zero, names) -> list:
    """A directory data (or single-block) block of ``dirbs`` bytes (a
    bytearray) as xfs_metadump walks it: entry by entry while each one's
    length and tag hold, zeroing (with ``zero``) the inside of free regions
    and each entry's bytes past its name and file type.  Returns (offset,
    inode number, name length) of the entries walked when ``names``, for
    their names to be obfuscated."""
    p = buf
    out = []
    if dirbs > len(buf) or dirbs < 64:
        raise ValueError("directory block larger than its buffer")
    if is_block:
        want = 0x58444233                # XDB3
        end = dirbs - 8 - 8 * _be32(p, dirbs - 8)
    else:
        want = 0x58444433                # XDD3
        end = dirbs
    if _be32(p, 0) != want:
        return out
    pos = 64
    ft = 1 if ftype else 0
    while pos < end:
        if _be16(p, pos) == 0xFFFF:
            length = _be16(p, pos + 2)
            if pos + length > end or length == 0 or length & 7:
                return out
            if _be16(p, pos + length - 2) != pos:
                return out
            if zero and length > 6:
                _clear(buf, p, pos + 4, pos + length - 2)
            pos += length
            if pos >= end:
                return out
        namelen = p[pos + 8]
        length = (8 + 1 + namelen + ft + 2 + 7) & ~7
        if pos + length > end:
            return out
        if _be16(p, pos + length - 2) != pos:
            return out
        if names:
            out.append((pos, _be64(p, pos), namelen))
        if zero:
            z0 = pos + 9 + namelen + 1
            z1 = pos + length - 2
            _clear(buf, p, z0, z1)
        pos += length
    return out


@cython.cfunc
@cython.locals(c=cython.uint)
@cython.returns(cython.bint)
def _ci_upper(c):
    """Whether the ascii-ci hash folds byte ``c`` (A-Z and the Latin-1
    capitals, as xfs_ascii_ci_need_xfrm)."""
    return (0x41 <= c <= 0x5A) or (0xC0 <= c <= 0xD6) or (0xD8 <= c <= 0xDE)


@cython.locals(p=cython.p_uchar, n=cython.Py_ssize_t, i=cython.Py_ssize_t,
               h=cython.uint, c=cython.uint)
def da_hashname_ci(name) -> int:
    """The directory name hash of an ascii-ci filesystem: the name hash of
    ``name`` with its capitals folded to lower case (byte by byte)."""
    p = name
    n = len(name)
    h = 0
    for i in range(n):
        c = p[i]
        if _ci_upper(c):
            c += 0x20
        h = (c ^ _rol32(h, 7)) & _M32
    return h


@cython.locals(p=cython.p_uchar, q=cython.p_uchar, n=cython.Py_ssize_t,
               i=cython.Py_ssize_t, h=cython.uint, c=cython.uint, high=cython.uint,
               shift=cython.int, want=cython.uint, ci=cython.bint)
def metadump_name(prefix, want, ci) -> object:
    """``prefix`` followed by the five bytes that give the whole the name
    hash ``want`` (folding capitals with ``ci``), as xfs_metadump solves
    them: each a 7-bit piece of the hash left to reach, a NUL or a '/'
    turned into a valid byte by flipping its low bit and the high bit of
    the byte after (of the first of the five for the last).  None with
    ``ci`` when a solved byte is a capital (folding would change the hash:
    the caller takes another prefix)."""
    p = prefix
    n = len(prefix)
    h = 0
    for i in range(n):
        c = p[i]
        if ci and _ci_upper(c):
            c += 0x20
        h = (c ^ _rol32(h, 7)) & _M32
    h = _rol32(h, 3) ^ want
    out = bytearray(n + 5)
    q = out
    for i in range(n):
        q[i] = p[i]
    high = 0
    i = n
    for shift in range(28, -1, -7):
        c = ((h >> shift) & 0x7F) ^ high
        if c == 0 or c == 0x2F:
            c ^= 1
            high = 0x80
        else:
            high = 0
        if ci and _ci_upper(c):
            return None
        q[i] = c
        i += 1
    if high:
        q[n] ^= 0x10
        if ci and _ci_upper(q[n]):
            return None
    return bytes(out)


# -- mdrestore: a v2 metadump's extents written out ------------------------------------------

# an extent's address in a v2 metadump: the device in bits 54-55 (0: data,
# 1: the external log), the 512-byte sector below (format/metadump.py)
_XME_DEV_SHIFT = 54
_XME_DADDR_MASK = (1 << 54) - 1
# the most buffers one pwritev takes (IOV_MAX)
_IOV_MAX = 1024


@cython.cfunc
@cython.locals(fd=cython.int, cnt=cython.int, at=cython.ulonglong, n=cython.ulonglong,
               done=cython.Py_ssize_t, i=cython.int, got=cython.Py_ssize_t)
@cython.returns(cython.int)
@cython.exceptval(-1)
def _write_run(fd, iov, cnt, at, n):
    """Write the ``cnt`` buffers gathered for one run (``_md_iov`` when
    compiled, else the list ``iov``), ``n`` bytes in all, at ``at``; a
    short write goes on from where it stopped."""
    if not cython.compiled:
        done = _os.pwritev(fd, iov, at)
        if done < n:
            rest = memoryview(b"".join(iov))[done:]
            while rest:
                rest = rest[_os.pwrite(fd, rest, at + n - len(rest)):]
        return 0
    done = 0
    i = 0
    while True:
        got = pwritev(fd, cython.address(_md_iov[i]), cnt - i, at + done)
        if got < 0:
            if errno == EINTR:
                continue
            raise OSError(errno, strerror(errno))
        done += got
        if done >= n:
            return 0
        if got == 0:
            raise OSError(EIO, strerror(EIO))
        # past the buffers written whole, into the one written in part
        while got >= cython.cast(cython.Py_ssize_t, _md_iov[i].iov_len):
            got -= _md_iov[i].iov_len
            i += 1
        _md_iov[i].iov_base = cython.cast(cython.p_void,
                                          cython.cast(cython.p_uchar, _md_iov[i].iov_base) + got)
        _md_iov[i].iov_len -= got


@cython.locals(p=cython.p_uchar, blen=cython.Py_ssize_t, start=cython.Py_ssize_t,
               pos=cython.Py_ssize_t, size=cython.Py_ssize_t, fd=cython.int, lfd=cython.int,
               big=cython.Py_ssize_t, sectsize=cython.Py_ssize_t, addr=cython.ulonglong,
               nsect=cython.ulonglong, dev=cython.ulonglong, target=cython.int,
               data=cython.Py_ssize_t, n=cython.Py_ssize_t, at=cython.ulonglong,
               sectors=cython.ulonglong, run_fd=cython.int, run_at=cython.ulonglong,
               run_end=cython.ulonglong, cnt=cython.int, k=cython.Py_ssize_t,
               end=cython.Py_ssize_t, q=cython.p_uchar)
def md2_restore(buf, start, pos, size, fd, lfd, primary, big) -> tuple:
    """Write the extents of a v2 metadump that ``buf`` holds (the dump's
    bytes from file offset ``start``; the dump is ``size`` bytes), from the
    extent header at file offset ``pos``, each at its place: on ``fd``
    (the data device) or ``lfd`` (the external log; -1: none), extents that
    follow one another on their device in one pwritev.  What an extent of
    the data device holds of its first len(primary) bytes (the primary
    superblock's sector) is copied into the bytearray ``primary`` too.

    Stops at the first extent whose header or bytes run past ``buf`` or
    the dump, that is larger than ``big`` bytes, whose device is not one of
    the two or that is the log's with no ``lfd``: the caller deals with it
    (maps more of the dump, copies it, or says what is wrong).  Returns
    (the file offset of that extent's header, or ``size``; the sectors
    written)."""
    blen = len(buf)
    end = start + blen
    if size < end:
        end = size
    sectsize = len(primary)
    sectors = 0
    run_fd = -1
    run_at = 0
    run_end = 0
    cnt = 0
    if cython.compiled:
        p = cython.cast(cython.p_uchar, cython.address(buf[0])) if blen else cython.NULL
        q = cython.address(primary[0]) if sectsize else cython.NULL
    else:
        p = buf
        q = None
        iov = []
    while pos + 12 <= end:
        k = pos - start
        addr = _be64(p, k)
        nsect = _be32(p, k + 8)
        dev = (addr >> _XME_DEV_SHIFT) & 3       # bits 56-63 are reserved
        if dev > 1:
            break
        target = lfd if dev else fd
        n = nsect * 512
        data = pos + 12
        if target < 0 or n > big or data + n > end:
            break
        at = (addr & _XME_DADDR_MASK) * 512
        if not dev and at < sectsize:
            if cython.compiled:
                memcpy(q + at, p + k + 12, min(n, sectsize - at))
            else:
                primary[at:at + min(n, sectsize - at)] = buf[k + 12:k + 12 + min(n, sectsize - at)]
        if not (cnt and at == run_end and target == run_fd and cnt < _IOV_MAX):
            if cnt:
                _write_run(run_fd, iov if not cython.compiled else None, cnt, run_at,
                           run_end - run_at)
            cnt = 0
            run_fd = target
            run_at = at
            run_end = at
            if not cython.compiled:
                iov = []
        if cython.compiled:
            _md_iov[cnt].iov_base = cython.cast(cython.p_void, p + k + 12)
            _md_iov[cnt].iov_len = n
        else:
            iov.append(buf[k + 12:k + 12 + n])
        cnt += 1
        run_end += n
        sectors += nsect
        pos = data + n
    if cnt:
        _write_run(run_fd, iov if not cython.compiled else None, cnt, run_at, run_end - run_at)
    return pos, sectors
