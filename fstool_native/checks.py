"""Hot loops of fstool check, in Cython's pure-Python mode (like parsers.py,
one file serves both backends).

Each function here is a *fast path*: it walks a structure the way the
check's Python code does and says whether that code would find anything
wrong with it.  When it would not, the check takes the figures computed here;
when it would (or the input is merely unusual), the function returns None
and the check runs its Python code, which words the findings.  So the
native code decides nothing the Python code would not: a structure is
either plainly sound here or looked at again there.

Inputs are ``bytes``; everything on disk is big-endian.  No function reads
outside its buffer.
"""
try:
    import cython
except ImportError:          # plain Python without Cython installed
    from fstool_native import _cython_shim as cython

# the name hash and the big-endian readers are parsers.py's (checks.pxd
# cimports the readers when compiled)
if cython.compiled:
    from fstool_native.parsers import da_hashname as _hashname
    from fstool_native.parsers import parent_hashname as _parent_hash
else:
    from fstool_native import load as _load
    _hashname = _load(pure=True).da_hashname
    _parent_hash = _load(pure=True).parent_hashname
    _be16 = _load(pure=True)._be16
    _be32 = _load(pure=True)._be32

ATTR_LOCAL, ATTR_INCOMPLETE = 1, 0x80
# the namespace bits, the parent namespace, the flags an entry may carry
ATTR_NSP_MASK, ATTR_PARENT, ATTR_ONDISK_MASK = 0x0E, 0x08, 0x8F
# the 32-bit mask as a C value (checks.pxd), so masked arithmetic stays in C
_M32 = 0xFFFFFFFF
ATTR3_LEAF_HDR_SIZE = 80
# larger block numbers and counts than any AG holds: the sweeps leave them
# to the Python code (so that their sums stay inside 64 bits)
_BIG = 1 << 48


@cython.cfunc
@cython.locals(p=cython.p_uchar, a=cython.Py_ssize_t, b=cython.Py_ssize_t,
               i=cython.Py_ssize_t, c=cython.uchar)
@cython.returns(cython.bint)
def _has_byte(p, a, b, c):
    """Whether p[a:b] holds the byte ``c``."""
    for i in range(a, b):
        if p[i] == c:
            return True
    return False


@cython.locals(p=cython.p_uchar, u=cython.p_uchar, bs=cython.Py_ssize_t,
               count=cython.Py_ssize_t, i=cython.Py_ssize_t, e=cython.Py_ssize_t,
               nameidx=cython.Py_ssize_t, namelen=cython.Py_ssize_t,
               valuelen=cython.ulonglong, valueblk=cython.uint, flags=cython.uint,
               h=cython.uint, last=cython.ulonglong, size=cython.Py_ssize_t,
               end=cython.Py_ssize_t, j=cython.Py_ssize_t, usedbs=cython.Py_ssize_t,
               firstb=cython.Py_ssize_t, first_h=cython.uint, name_at=cython.Py_ssize_t,
               ns=cython.uint, want=cython.uint, pptr_fs=cython.bint, v=cython.Py_ssize_t,
               ino=cython.ulonglong)
def attr_leaf_entries(buf, count, last_hash, pptr_fs=False):
    """The entry table of an attr leaf block (xfs_repair's
    process_leaf_attr_block): every entry complete, with known flags and one
    namespace, its name whole, legal for its namespace and hashing to its
    hash (a parent pointer's hash mixes in its parent's inode number),
    hashes in order from ``last_hash``, remote entries with a value block
    (never a parent pointer), parent pointers only where the filesystem has
    them (``pptr_fs``), names and values inside the block and not
    overlapping each other or the entry table.  ``count`` must be at least
    1 and the table must fit the block.

    Returns (lowest hash, greatest hash, lowest name offset, bytes used,
    [(entry, valueblk, valuelen)] of the remote entries, [(p_ino, p_gen,
    name)] of the parent pointers with a 12-byte value) when all of that
    holds, else None."""
    p = buf
    bs = len(buf)
    if count < 1 or ATTR3_LEAF_HDR_SIZE + 8 * count > bs:
        return None
    used = bytearray(bs)
    u = used
    for j in range(ATTR3_LEAF_HDR_SIZE + 8 * count):
        u[j] = 1
    last = last_hash
    usedbs = 0
    firstb = bs
    first_h = 0
    remotes = []
    pptrs = []
    for i in range(count):
        e = ATTR3_LEAF_HDR_SIZE + 8 * i
        h = _be32(p, e)
        nameidx = _be16(p, e + 4)
        flags = p[e + 6]
        valueblk = 0
        if nameidx > bs or flags & ATTR_INCOMPLETE or flags & ~ATTR_ONDISK_MASK:
            return None
        ns = flags & ATTR_NSP_MASK
        if ns & (ns - 1) or (ns == ATTR_PARENT and not pptr_fs):
            return None
        if flags & ATTR_LOCAL:
            if nameidx + 3 > bs:
                return None
            valuelen = _be16(p, nameidx)
            namelen = p[nameidx + 2]
            name_at = nameidx + 3
            size = (3 + namelen + valuelen + 3) & ~3
        else:
            if nameidx + 9 > bs:
                return None
            valueblk = _be32(p, nameidx)
            valuelen = _be32(p, nameidx + 4)
            namelen = p[nameidx + 8]
            name_at = nameidx + 9
            size = (11 + namelen + 3) & ~3
            if valueblk == 0 or ns == ATTR_PARENT:
                return None
        if namelen == 0 or name_at + namelen > bs or _has_byte(p, name_at, name_at + namelen, 0):
            return None
        if ns == ATTR_PARENT:
            if _has_byte(p, name_at, name_at + namelen, 0x2F):
                return None
            # xfs_parent_hashattr: 0 for a value that is not a parent record
            want = 0
            if valuelen == 12:
                v = name_at + namelen
                if v + 12 > bs:
                    return None
                ino = _be32(p, v)
                ino = (ino << 32) | _be32(p, v + 4)
                want = _parent_hash(buf[name_at:name_at + namelen], ino)
                pptrs.append((ino, _be32(p, v + 8), buf[name_at:name_at + namelen]))
        else:
            want = _hashname(buf[name_at:name_at + namelen])
        if h < last or h != want:
            return None
        if not flags & ATTR_LOCAL:
            remotes.append((i, valueblk, valuelen))
        end = nameidx + size
        if end > bs:
            return None
        for j in range(nameidx, end):
            if u[j]:
                return None
            u[j] = 1
        if i == 0:
            first_h = h
        last = h
        usedbs += size
        if nameidx < firstb:
            firstb = nameidx
    return first_h, last, firstb, usedbs, remotes, pptrs


@cython.locals(p=cython.p_uchar, bs=cython.Py_ssize_t, count=cython.Py_ssize_t,
               firstused=cython.Py_ssize_t, i=cython.Py_ssize_t, e=cython.Py_ssize_t,
               h=cython.uint, last=cython.uint, nameidx=cython.Py_ssize_t,
               flags=cython.uint, namelen=cython.Py_ssize_t, size=cython.Py_ssize_t,
               base=cython.Py_ssize_t, fsize=cython.Py_ssize_t)
def attr_leaf_verify_ok(buf):
    """True when the kernel's xfs_attr3_leaf_verify, past the block header,
    passes the attr leaf block ``buf``: first used byte inside the name area,
    the entry table before it, hashes in order, every entry's name index and
    name inside the block, remote entries with a value block, the free map
    inside the block and 4-byte aligned."""
    p = buf
    bs = len(buf)
    if bs < ATTR3_LEAF_HDR_SIZE:
        return False
    count = _be16(p, 56)
    firstused = _be16(p, 60)
    if firstused == 0:
        firstused = bs
    if firstused > bs or firstused < ATTR3_LEAF_HDR_SIZE:
        return False
    if ATTR3_LEAF_HDR_SIZE + 8 * count > firstused:
        return False
    last = 0
    for i in range(count):
        e = ATTR3_LEAF_HDR_SIZE + 8 * i
        h = _be32(p, e)
        nameidx = _be16(p, e + 4)
        flags = p[e + 6]
        if h < last:
            return False
        last = h
        if nameidx < firstused or nameidx >= bs:
            return False
        if flags & ATTR_LOCAL:
            if nameidx + 3 > bs:
                return False
            namelen = p[nameidx + 2]
            size = (3 + namelen + _be16(p, nameidx) + 3) & ~3
        else:
            if nameidx + 9 > bs:
                return False
            namelen = p[nameidx + 8]
            size = (11 + namelen + 3) & ~3
            if not flags & ATTR_INCOMPLETE and _be32(p, nameidx) == 0:
                return False
        if namelen == 0 or nameidx + size > bs:
            return False
    for i in range(3):
        base = _be16(p, 64 + 4 * i)
        fsize = _be16(p, 66 + 4 * i)
        if base > bs or base & 3 or fsize > bs or fsize & 3 or base + fsize > bs:
            return False
    return True


@cython.locals(i=cython.Py_ssize_t, startoff=cython.ulonglong, startblock=cython.ulonglong,
               count=cython.ulonglong, end=cython.ulonglong, prev_end=cython.ulonglong,
               agno=cython.ulonglong, agbno=cython.ulonglong, end_agbno=cython.ulonglong,
               mask=cython.ulonglong, agblklog=cython.int, agcount=cython.ulonglong,
               lowest=cython.ulonglong, length=cython.ulonglong, max_off=cython.ulonglong,
               total=cython.ulonglong, first=cython.bint, unwritten_ok=cython.bint)
def extent_list(recs, last_end, first, unwritten_ok, agblklog, agcount, lowest, ag_lengths,
                max_off):
    """A fork's extent records (startoff, startblock, blockcount, unwritten)
    as xfs_repair's process_bmbt_reclist wants them: in file order and not
    overlapping (from ``last_end`` unless ``first``), unwritten only where
    ``unwritten_ok``, not empty, inside one AG past its headers (block
    ``lowest``) and before the AG's end (``ag_lengths``), ending at or
    before file offset ``max_off``.

    Returns (blocks mapped, [(agno, agbno, blockcount)]) when every record
    is sound, else None."""
    mask = 1
    mask = (mask << agblklog) - 1
    prev_end = last_end
    total = 0
    claims = []
    i = 0
    for rec in recs:
        startoff = rec[0]
        startblock = rec[1]
        count = rec[2]
        if (i or not first) and startoff < prev_end:
            return None
        prev_end = startoff + count
        if rec[3] and not unwritten_ok:
            return None
        if count == 0:
            return None
        end = startblock + count - 1
        agno = (startblock >> agblklog) & _M32
        if agno != ((end >> agblklog) & _M32) or agno >= agcount:
            return None
        length = ag_lengths[agno]
        agbno = startblock & mask
        end_agbno = end & mask
        if not (lowest < agbno < length and lowest < end_agbno < length):
            return None
        if prev_end - 1 > max_off:
            return None
        total += count
        claims.append((agno, agbno, count))
        i += 1
    return total, claims


@cython.locals(agblklog=cython.int, mask=cython.ulonglong, startblock=cython.ulonglong,
               agno=cython.longlong, last=cython.longlong)
def claim_extents(recs, agblklog, claims, owner):
    """Claim the blocks of extent records ``extent_list`` found sound:
    (agbno, blockcount, owner) appended to ``claims[agno]`` in record
    order."""
    mask = 1
    mask = (mask << agblklog) - 1
    last = -1
    into = None
    for rec in recs:
        startblock = rec[1]
        agno = (startblock >> agblklog) & _M32
        if agno != last:
            into = claims[agno]
            last = agno
        into.append((startblock & mask, rec[2], owner))


@cython.locals(p=cython.p_uchar, i=cython.int, k=cython.int, seen=cython.int,
               off=cython.Py_ssize_t, length=cython.Py_ssize_t, prev_end=cython.Py_ssize_t,
               longest=cython.Py_ssize_t, o0=cython.Py_ssize_t, o1=cython.Py_ssize_t,
               o2=cython.Py_ssize_t, l0=cython.Py_ssize_t, l1=cython.Py_ssize_t,
               l2=cython.Py_ssize_t)
def bestfree_ok(buf, frees):
    """A directory data block's bestfree table (three (offset, length)
    slots at byte 48) against its unused regions ``frees`` [(length,
    offset)], as xfs_repair's process_dir2_data wants it: every listed
    region listed once, longest first, unused slots zero, no two regions in
    a row, no region left out that is longer than the shortest listed; and
    the kernel verifier's rules for each region (bestfree_region_bad).

    Returns the longest unused region's length (0 when there is none) when
    the table is right, else -1."""
    p = buf
    if len(buf) < 60:
        return -1
    o0 = _be16(p, 48)
    l0 = _be16(p, 50)
    o1 = _be16(p, 52)
    l1 = _be16(p, 54)
    o2 = _be16(p, 56)
    l2 = _be16(p, 58)
    seen = 0
    if l0 == 0:
        if o0:
            return -1
        seen |= 1
    if l1 == 0:
        if o1:
            return -1
        seen |= 2
    if l2 == 0:
        if o2:
            return -1
        seen |= 4
    if l0 < l1 or l1 < l2:
        return -1
    prev_end = -1
    longest = 0
    for length, off in sorted(frees, key=_by_offset):
        if prev_end == off:
            return -1
        prev_end = off + length
        if bestfree_region_bad(o0, l0, o1, l1, o2, l2, off, length):
            return -1
        if length > longest:
            longest = length
        # the first slot listing this region, as the Python check takes it
        k = 0 if (o0 == off and l0) else 1 if (o1 == off and l1) else \
            2 if (o2 == off and l2) else -1
        if k >= 0:
            if seen & (1 << k):
                return -1
            seen |= 1 << k
        elif length > l2:
            return -1
    if seen != 7:
        return -1
    return longest


def _by_offset(f):
    return f[1]


@cython.ccall
@cython.locals(o0=cython.Py_ssize_t, l0=cython.Py_ssize_t, o1=cython.Py_ssize_t,
               l1=cython.Py_ssize_t, o2=cython.Py_ssize_t, l2=cython.Py_ssize_t,
               off=cython.Py_ssize_t, length=cython.Py_ssize_t, k=cython.int,
               so=cython.Py_ssize_t, sl=cython.Py_ssize_t, seenzero=cython.bint,
               matched=cython.bint)
@cython.returns(cython.bint)
def bestfree_region_bad(o0, l0, o1, l1, o2, l2, off, length):
    """The kernel verifier's rules for one unused region (``off``,
    ``length``) against the three bestfree slots
    (xfs_dir2_data_freefind_verify): a used slot
    after an empty one, a slot naming the region with another length, a
    slot overlapping it, or one listed before it that is shorter."""
    seenzero = False
    matched = False
    for k in range(3):
        so = o0 if k == 0 else o1 if k == 1 else o2
        sl = l0 if k == 0 else l1 if k == 1 else l2
        if so == 0:
            if sl:
                return True
            seenzero = True
            continue
        if seenzero:
            return True
        if so == off:
            matched = True
            if sl != length:
                return True
        elif so > off:
            if off + length > so:
                return True
        elif so + sl > off:
            return True
        if not matched and sl < length:
            return True
    return False


@cython.locals(start=cython.longlong, n=cython.longlong, owner=cython.longlong,
               last=cython.longlong, pos=cython.longlong, length=cython.longlong,
               data=cython.longlong, reflink=cython.bint)
def space_sweep_ok(claims, length, reflink, data):
    """The space map sweep of one AG (fstool check's phase space_map):
    ``claims`` (start, blocks, owner), sorted, must tile blocks 0 to
    ``length`` exactly, each block claimed once, but that on a reflink
    filesystem file data (owner >= 0, owner & 3 == ``data``) may overlap
    file data.  True when they do; False when the sweep has something to
    report or the claims are unusual (negative or huge numbers)."""
    pos = 0
    last = -1
    try:
        for claim in claims:
            start = claim[0]
            n = claim[1]
            owner = claim[2]
            if start < 0 or n < 0 or start > _BIG or n > _BIG:
                return False
            if start > pos:
                return False              # blocks nothing claims
            if start < pos and not (reflink and owner >= 0 and last >= 0 and
                                    owner & 3 == data and last & 3 == data):
                return False              # claimed twice
            if start + n > pos:
                pos = start + n
                last = owner
    except OverflowError:
        return False
    return pos == length


@cython.locals(start=cython.longlong, n=cython.longlong, owner=cython.longlong,
               end=cython.longlong, data=cython.longlong)
def data_overlaps(claims, data):
    """Whether two file data claims (owner >= 0, owner & 3 == ``data``) of
    ``claims`` (start, blocks, owner), sorted, may overlap: a claim starts
    before the previous one ends, or has no length.  None when a number
    does not fit 64 bits (the caller looks for itself)."""
    end = -1
    try:
        for claim in claims:
            owner = claim[2]
            if owner >= 0 and owner & 3 == data:
                start = claim[0]
                n = claim[1]
                if n <= 0 or start < end:
                    return True
                if start > _BIG or n > _BIG:
                    return None
                end = start + n
    except OverflowError:
        return None
    return False
