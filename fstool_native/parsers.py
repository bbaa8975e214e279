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
    """Continue a (pre-inverted) CRC register over p[start:end]."""
    if not cython.compiled:
        return _crc_update_words(p, start, end, c)
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


@cython.locals(p=cython.p_uchar, n=cython.Py_ssize_t, off=cython.Py_ssize_t, c=cython.uint)
def xfs_cksum(buf, crc_offset) -> int:
    """CRC-32C of ``buf`` with the 4-byte CRC field at ``crc_offset`` taken as
    zero: the value XFS stores (little-endian) in that field."""
    p = buf
    n = len(buf)
    off = crc_offset
    if off < 0 or off + 4 > n:
        raise ValueError("checksum field outside the buffer")
    c = _crc_update(p, 0, off, 0xFFFFFFFF)
    # four zero bytes stand in for the checksum field
    c = _T[c & 0xFF] ^ (c >> 8)
    c = _T[c & 0xFF] ^ (c >> 8)
    c = _T[c & 0xFF] ^ (c >> 8)
    c = _T[c & 0xFF] ^ (c >> 8)
    c = _crc_update(p, off + 4, n, c)
    return c ^ 0xFFFFFFFF


@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, stored=cython.uint)
def xfs_cksum_ok(buf, crc_offset) -> bool:
    """True when the CRC stored at ``crc_offset`` matches the buffer."""
    p = buf
    off = crc_offset
    if off < 0 or off + 4 > len(buf):
        raise ValueError("checksum field outside the buffer")
    stored = p[off] | (p[off + 1] << 8) | (p[off + 2] << 16) | (p[off + 3] << 24)
    return xfs_cksum(buf, crc_offset) == stored


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


@cython.locals(p=cython.p_uchar, pos=cython.Py_ssize_t, stop=cython.Py_ssize_t,
               ft=cython.int, namelen=cython.Py_ssize_t, size=cython.Py_ssize_t,
               length=cython.Py_ssize_t, ftype=cython.int)
def dir2_data_entries(buf, start, end, has_ftype) -> list:
    """Entries of a directory data region buf[start:end] as tuples
    (offset, inumber, name, ftype), skipping unused (free) regions.

    An entry is inumber(8) namelen(1) name [ftype(1)] padding tag(2), 8-byte
    aligned; a free region starts with 0xFFFF and its length, and ends with a
    tag; every tag holds the offset of its own entry."""
    p = buf
    pos = start
    stop = end
    ft = 1 if has_ftype else 0
    if pos < 0 or stop > len(buf) or pos > stop:
        raise ValueError("directory data region outside the buffer")
    out = []
    while pos < stop:
        if stop - pos < 8:
            raise ValueError(f"truncated entry at offset {pos}")
        if _be16(p, pos) == 0xFFFF:
            length = _be16(p, pos + 2)
            if length < 8 or length & 7 or pos + length > stop:
                raise ValueError(f"bad free region length {length} at offset {pos}")
            if _be16(p, pos + length - 2) != pos:
                raise ValueError(f"bad free region tag at offset {pos}")
            pos += length
            continue
        namelen = p[pos + 8]
        if namelen == 0:
            raise ValueError(f"zero-length name at offset {pos}")
        size = (8 + 1 + namelen + ft + 2 + 7) & ~7
        if pos + size > stop:
            raise ValueError(f"entry at offset {pos} runs past the data region")
        if _be16(p, pos + size - 2) != pos:
            raise ValueError(f"bad entry tag at offset {pos}")
        ftype = p[pos + 9 + namelen] if ft else 0
        out.append((pos, _be64(p, pos), p[pos + 9:pos + 9 + namelen], ftype))
        pos += size
    return out


@cython.locals(p=cython.p_uchar, base=cython.Py_ssize_t, stop=cython.Py_ssize_t,
               pos=cython.Py_ssize_t, count=cython.int, width=cython.int, i=cython.int,
               namelen=cython.Py_ssize_t, ft=cython.int, ftype=cython.int,
               ino=cython.ulonglong, parent=cython.ulonglong)
def dir2_sf_entries(buf, offset, size, has_ftype) -> tuple:
    """A shortform directory at buf[offset:offset+size]: (parent inode,
    [(offset cookie, inumber, name, ftype), ...]).

    Header: count(1) i8count(1) parent(4 or 8); entries: namelen(1)
    offset(2) name [ftype(1)] inumber(4 or 8).  Inode numbers are 8 bytes
    wide when i8count is non-zero."""
    p = buf
    base = offset
    stop = offset + size
    ft = 1 if has_ftype else 0
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
        out.append((_be16(p, pos + 1), ino, p[pos + 3:pos + 3 + namelen], ftype))
        pos += 3 + namelen + ft + width
    return parent, out


@cython.cfunc
@cython.locals(x=cython.uint, n=cython.int)
@cython.returns(cython.uint)
def _rol32(x, n):
    return ((x << n) | (x >> (32 - n))) & 0xFFFFFFFF


@cython.locals(p=cython.p_uchar, n=cython.Py_ssize_t, i=cython.Py_ssize_t, h=cython.uint)
def da_hashname(name) -> int:
    """The XFS directory/xattr name hash: four bytes at a time, each step
    mixing the bytes at shifts 21/14/7/0 into the previous hash rotated left
    by 28; a 1-3 byte tail mixes in the same way with a shorter rotation."""
    p = name
    n = len(name)
    h = 0
    i = 0
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


@cython.locals(p=cython.p_uchar, u=cython.p_uchar, n=cython.Py_ssize_t, i=cython.int,
               magic=cython.uint)
def dinode_core(buf, ino, uuid) -> tuple:
    """Verify a v3 inode (magic, version, CRC, inode number, uuid) and return
    the fields every caller needs: (mode, format, size, nlink, uid, gid,
    forkoff, aformat, flags2).  Failures raise ValueError("field|reason")."""
    p = buf
    u = uuid
    n = len(buf)
    if n < 176 or len(uuid) != 16:
        raise ValueError("di_magic|inode buffer too small")
    magic = _be16(p, 0)
    if magic != 0x494E:
        raise ValueError(f"di_magic|bad magic 0x{magic:04x}")
    if p[4] != 3:
        raise ValueError(f"di_version|version {p[4]}, expected 3")
    if not xfs_cksum_ok(buf, 100):
        raise ValueError("di_crc|CRC mismatch")
    if _be64(p, 152) != ino:
        raise ValueError(f"di_ino|records number {_be64(p, 152)}")
    for i in range(16):
        if p[160 + i] != u[i]:
            raise ValueError("di_uuid|uuid does not match the filesystem")
    return (_be16(p, 2), p[5], _be64(p, 56), _be32(p, 16), _be32(p, 8), _be32(p, 12),
            p[82], p[83], _be64(p, 120))


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
        agno = startblock >> agblklog
        agbno = startblock & mask
        if agno >= agcount:
            return i, f"block {startblock} lies in AG {agno}, beyond the last AG"
        limit = last_ag_blocks if agno == agcount - 1 else agblocks
        if agbno + count > limit:
            return i, (f"extent at block {startblock} (AG {agno} block {agbno}), {count} "
                       "blocks, runs past the end of its AG")
    return None


@cython.locals(p=cython.p_uchar, u=cython.p_uchar, i=cython.int, k=cython.int,
               off=cython.Py_ssize_t, isize=cython.Py_ssize_t, mode=cython.uint,
               fmt=cython.int, forkoff=cython.int, aformat=cython.int,
               flags2=cython.ulonglong, next=cython.ulonglong, anext=cython.ulonglong,
               nblocks=cython.ulonglong, owned=cython.ulonglong, size=cython.ulonglong,
               dsize=cython.Py_ssize_t, e=cython.Py_ssize_t, l0=cython.ulonglong,
               l1=cython.ulonglong, startoff=cython.ulonglong, startblock=cython.ulonglong,
               count=cython.ulonglong, prev_end=cython.ulonglong, agno=cython.ulonglong,
               agbno=cython.ulonglong, limit=cython.ulonglong, ok=cython.bint,
               mask=cython.ulonglong, ifmt=cython.uint, ino=cython.ulonglong)
def scan_inode_chunk(chunk, base, inodesize, first_ino, uuid, free, holemask, flags2_ok,
                     agblklog, agcount, agblocks, last_ag_blocks):
    """Check the plain inodes of one 64-inode chunk in one call.

    An allocated inode is plain when it verifies, is a regular file, device,
    fifo or socket with an extents- or device-format data fork whose extents
    are sorted, inside their AGs and add up to di_nblocks, and has no
    attribute fork or an empty one in extents format.  Returns (plain, claims,
    others): plain is [(ino, mode, nlink)], claims [(agno, agbno, length, ino)]
    for their extents, others the indexes of every inode (allocated or free)
    that needs the full check in Python."""
    p = chunk
    u = uuid
    isize = inodesize
    plain = []
    claims = []
    others = []
    mask = (1 << agblklog) - 1
    for i in range(64):
        if (holemask >> (i // 4)) & 1:
            continue
        off = base + i * isize
        if off + isize > len(chunk):
            others.append(i)
            continue
        ino = first_ino + i
        mode = _be16(p, off + 2)
        if (free >> i) & 1:
            # free: fine unless it claims to be in use
            if _be16(p, off) == 0x494E and mode != 0:
                others.append(i)
            continue
        ok = (_be16(p, off) == 0x494E and p[off + 4] == 3 and mode != 0 and
              _be64(p, off + 152) == ino)
        if ok:
            for k in range(16):
                if p[off + 160 + k] != u[k]:
                    ok = False
                    break
        if ok:
            ok = xfs_cksum_ok(chunk[off:off + isize], 100)
        if not ok:
            others.append(i)
            continue
        ifmt = mode & 0o170000
        fmt = p[off + 5]
        forkoff = p[off + 82]
        aformat = p[off + 83]
        flags2 = _be64(p, off + 120)
        size = _be64(p, off + 56)
        nblocks = _be64(p, off + 64)
        if flags2 & 0x10:
            next = _be64(p, off + 24)
            anext = _be32(p, off + 76)
        else:
            next = _be32(p, off + 76)
            anext = _be16(p, off + 80)
        if flags2 & ~flags2_ok or size >> 63 or anext or \
                (forkoff and aformat != 2):
            others.append(i)
            continue
        if ifmt == 0o100000:
            if fmt != 2:
                others.append(i)
                continue
        elif ifmt in (0o020000, 0o060000, 0o010000, 0o140000):
            if fmt != 0 or next or (flags2 & 0x2):
                others.append(i)
                continue
        else:
            others.append(i)
            continue
        dsize = forkoff * 8 if forkoff else isize - 176
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
                    agbno + count > limit:
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
                           ino))
        plain.append((ino, mode, _be32(p, off + 16)))
    return plain, claims, others
