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
    from fstool_native.parsers import dir_data_tally as _dir_data_tally
    from fstool_native.parsers import leaf_tally as _leaf_tally
    from fstool_native.parsers import parent_hashname as _parent_hash
else:
    from fstool_native import load as _load
    _hashname = _load(pure=True).da_hashname
    _parent_hash = _load(pure=True).parent_hashname
    _dir_data_tally = _load(pure=True).dir_data_tally
    _leaf_tally = _load(pure=True).leaf_tally
    _be16 = _load(pure=True)._be16
    _be32 = _load(pure=True)._be32
    _find_slot = _load(pure=True)._find_slot
    _sf_tally = _load(pure=True)._sf_tally
    _cksum_region_ok = _load(pure=True)._cksum_region_ok

ATTR_LOCAL, ATTR_INCOMPLETE = 1, 0x80
# the namespace bits, the parent namespace, the flags an entry may carry
ATTR_NSP_MASK, ATTR_PARENT, ATTR_ONDISK_MASK = 0x0E, 0x08, 0x8F
# the 32-bit mask as a C value (checks.pxd), so masked arithmetic stays in C
_M32 = 0xFFFFFFFF
ATTR3_LEAF_HDR_SIZE = 80
# larger block numbers and counts than any AG holds: the sweeps leave them
# to the Python code (so that their sums stay inside 64 bits)
_BIG = 1 << 48
# the rmapbt offset field's flags: attr fork, bmbt block, unwritten
_FLAGS = 0xE000000000000000
_BMBT = 0x4000000000000000
_U64 = 0xFFFFFFFFFFFFFFFF
_UNWRITTEN = 0x2000000000000000
_RMAP_OFF_MASK = (1 << 54) - 1
if not cython.compiled:
    from array import array


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


@cython.locals(p=cython.p_uchar, u=cython.p_uchar, n=cython.Py_ssize_t, k=cython.int,
               mo=cython.Py_ssize_t, co=cython.Py_ssize_t, uo=cython.Py_ssize_t,
               bo=cython.Py_ssize_t, oo=cython.Py_ssize_t, hi=cython.ulonglong,
               lo=cython.ulonglong)
def v5_hdr_sound(buf, magic_off, magic, crc_off, uuid_off, uuid, blkno_off, daddr,
                 owner_off, owner):
    """Whether fstool.io.verify.verify passes ``buf`` as a block with the
    32-bit ``magic`` at ``magic_off``, its CRC at ``crc_off``, the
    filesystem ``uuid`` at ``uuid_off``, its own address ``daddr`` (in
    512-byte units) at ``blkno_off`` and the 64-bit ``owner`` at
    ``owner_off`` (a directory block's header): False for anything it
    would raise for (the caller then lets verify say what)."""
    p = buf
    n = len(buf)
    mo = magic_off
    co = crc_off
    uo = uuid_off
    bo = blkno_off
    oo = owner_off
    if len(uuid) != 16 or mo < 0 or co < 0 or uo < 0 or bo < 0 or oo < 0 or \
            mo + 4 > n or co + 4 > n or uo + 16 > n or bo + 8 > n or oo + 8 > n:
        return False
    if _be32(p, mo) != magic or not _cksum_region_ok(p, 0, n, co):
        return False
    u = uuid
    for k in range(16):
        if p[uo + k] != u[k]:
            return False
    hi = _be32(p, bo)
    lo = _be32(p, bo + 4)
    if ((hi << 32) | lo) != daddr:
        return False
    hi = _be32(p, oo)
    lo = _be32(p, oo + 4)
    return ((hi << 32) | lo) == owner


@cython.locals(p=cython.p_uchar, n=cython.Py_ssize_t, count=cython.Py_ssize_t,
               stale=cython.Py_ssize_t, start=cython.Py_ssize_t, sound=cython.bint)
def block_dir_tally(buf, hdr, has_ftype, starts, itype, refs, ino, psums, gen):
    """A block-form directory's one block ``buf`` (read and verified; its
    data entries from byte ``hdr``) counted and checked in one call as
    fstool check's Python code does it (ops/check/dirs.py): None, nothing
    counted, when the tail's leaf count overruns the block; else (sound,
    (frees, leaf sum, odd entries, why) as dir_data_tally gives them, or
    as the check takes its ValueError, the leaf's start, count and stale
    count).  ``sound``: the data entries well formed, the bestfree table
    right (bestfree_ok), the leaf's hashes in order, its stale count right
    and its entries summing to the data entries' sum (leaf_tally): nothing
    for the Python code to report but the odd entries."""
    p = buf
    n = len(buf)
    if n < hdr + 8:
        return None
    count = _be32(p, n - 8)
    stale = _be32(p, n - 4)
    start = n - 8 - 8 * count
    if start < hdr:
        return None
    try:
        tally = _dir_data_tally(buf, hdr, start, has_ftype, 0, starts, itype, refs, ino,
                                psums, gen)
    except ValueError as e:
        tally = ([], 0, [], str(e))
    sound = tally[3] is None and bestfree_ok(buf, tally[0]) >= 0
    if sound:
        try:
            ordered, nstale, lsum = _leaf_tally(buf, start, count)
        except ValueError:
            sound = False
        else:
            sound = ordered and nstale == stale and lsum == tally[1]
    return sound, tally, start, count, stale


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


# -- flat record arrays (fstool/ops/check/records.py) ----------------------------
@cython.locals(arr=array, width=cython.Py_ssize_t, n=cython.Py_ssize_t, signed=cython.int,
               rc=cython.int)
def sort_records(arr, width):
    """Sort the records of ``width`` numbers held flat in the array ``arr``
    (typecode q or Q) as Python sorts them as tuples: field by field,
    signed for q, unsigned for Q."""
    if width < 1 or len(arr) % width:
        raise ValueError("the array does not hold whole records")
    if arr.typecode not in ("q", "Q"):
        raise ValueError("records are 64-bit numbers")
    if not cython.compiled:
        it = iter(arr)
        recs = sorted(zip(*[it] * width))
        arr[:] = type(arr)(arr.typecode, [v for r in recs for v in r])
        return
    n = len(arr) // width
    signed = 1 if arr.typecode == "q" else 0
    with cython.nogil:
        rc = fstool_sort_records(cython.cast(cython.p_ulonglong, arr.data.as_voidptr), n,
                                 width, signed)
    if rc:
        raise MemoryError()


@cython.locals(claims=array, i=cython.Py_ssize_t, m=cython.Py_ssize_t,
               start=cython.longlong, n=cython.longlong, owner=cython.longlong,
               last=cython.longlong, pos=cython.longlong, length=cython.longlong,
               data=cython.longlong, reflink=cython.bint, p=cython.p_longlong)
def space_sweep_ok(claims, length, reflink, data):
    """The space map sweep of one AG (fstool check's phase space_map):
    ``claims`` (start, blocks, owner), sorted and flat (an array of signed
    64-bit numbers, three a claim), must tile blocks 0 to ``length``
    exactly, each block claimed once, but that on a reflink filesystem file
    data (owner >= 0, owner & 3 == ``data``) may overlap file data.  True
    when they do; False when the sweep has something to report or the
    claims are unusual (negative or huge numbers)."""
    if claims.typecode != "q" or len(claims) % 3:
        raise ValueError("claims are flat (start, length, owner) triples")
    m = len(claims) // 3
    pos = 0
    last = -1
    if cython.compiled:
        p = cython.cast(cython.p_longlong, claims.data.as_voidptr)
    else:
        p = claims
    for i in range(m):
        start = p[3 * i]
        n = p[3 * i + 1]
        owner = p[3 * i + 2]
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
    return pos == length


@cython.locals(claims=array, i=cython.Py_ssize_t, m=cython.Py_ssize_t,
               start=cython.longlong, n=cython.longlong, owner=cython.longlong,
               end=cython.longlong, data=cython.longlong, p=cython.p_longlong)
def data_overlaps(claims, data):
    """Whether two file data claims (owner >= 0, owner & 3 == ``data``) of
    ``claims`` (sorted and flat, as space_sweep_ok takes them) may overlap:
    a claim starts before the previous one ends, or has no length.  None
    when a number is too large for the test (the caller looks for
    itself)."""
    if claims.typecode != "q" or len(claims) % 3:
        raise ValueError("claims are flat (start, length, owner) triples")
    m = len(claims) // 3
    end = -1
    if cython.compiled:
        p = cython.cast(cython.p_longlong, claims.data.as_voidptr)
    else:
        p = claims
    for i in range(m):
        owner = p[3 * i + 2]
        if owner >= 0 and owner & 3 == data:
            start = p[3 * i]
            n = p[3 * i + 1]
            if n <= 0 or start < end:
                return True
            if start > _BIG or n > _BIG:
                return None
            end = start + n
    return False


@cython.locals(claims=array, expect=array, disk=array, owners=array, got=array,
               i=cython.Py_ssize_t, j=cython.Py_ssize_t, m=cython.Py_ssize_t,
               k=cython.Py_ssize_t, o=cython.longlong, pc=cython.p_longlong,
               pg=cython.p_ulonglong, pd=cython.p_ulonglong, pe=cython.p_ulonglong,
               po=cython.p_longlong, no=cython.Py_ssize_t, out=cython.Py_ssize_t,
               s=cython.ulonglong, n=cython.ulonglong, ow=cython.ulonglong,
               off=cython.ulonglong, fl=cython.ulonglong, rc=cython.int)
def rmaps_match(claims, expect, disk, owners):
    """Whether an AG's rmapbt records ``disk`` are exactly the reverse
    mappings check expects of it (spacemap.rmap_records): the metadata
    claims of ``claims`` (flat signed (start, length, owner) triples) whose
    owner ``owners`` maps (flat signed (check's owner, the rmapbt's owner)
    pairs) and the fork mappings ``expect``, merged where xfs_repair merges
    them (one owner and flags, adjacent blocks, and for file data adjacent
    file offsets).  ``expect`` and ``disk`` are flat unsigned (start,
    length, owner, offset | flags) quadruples.  Comparing as multisets, as
    sorted lists of the records.  False
    too when two mappings of one owner and flags start at one block and
    offset (merging them depends on their order: the caller looks)."""
    if claims.typecode != "q" or len(claims) % 3 or owners.typecode != "q" or \
            len(owners) % 2 or expect.typecode != "Q" or len(expect) % 4 or \
            disk.typecode != "Q" or len(disk) % 4:
        raise ValueError("flat record arrays expected")
    # the metadata owners' claims as rmaps, then every fork mapping, keyed by
    # (owner, flags, start, offset) for merging
    got = array("Q")
    m = len(claims) // 3
    no = len(owners) // 2
    if not cython.compiled:
        table = dict(zip(owners[0::2], owners[1::2]))
        recs = [(o2 & _U64, 0, s2, 0, n2) for s2, n2, o1 in zip(claims[0::3], claims[1::3],
                                                                claims[2::3])
                for o2 in (table.get(o1),) if o2 is not None]
        recs += [(o1, f & _FLAGS, s2, f & ~_FLAGS, n2) for s2, n2, o1, f in
                 zip(expect[0::4], expect[1::4], expect[2::4], expect[3::4])]
        recs.sort()
        if any(a[:4] == b[:4] for a, b in zip(recs, recs[1:])):
            return False
        merged = []
        for o1, fl1, s2, off1, n2 in recs:
            if merged:
                ps, pn, po, poff = merged[-1]
                inode_data = not o1 >> 63 and not fl1 & _BMBT
                if po == o1 and poff & _FLAGS == fl1 and ps + pn == s2 and \
                        (not inode_data or (poff & ~_FLAGS) + pn == off1):
                    merged[-1] = (ps, pn + n2, po, poff)
                    continue
            merged.append((s2, n2, o1, off1 | fl1))
        merged.sort()
        it = iter(disk)
        return merged == sorted(zip(it, it, it, it))
    pc = cython.cast(cython.p_longlong, claims.data.as_voidptr)
    po = cython.cast(cython.p_longlong, owners.data.as_voidptr)
    cpy_array.resize(got, 5 * (m + len(expect) // 4))
    pg = cython.cast(cython.p_ulonglong, got.data.as_voidptr)
    k = 0
    for i in range(m):
        o = pc[3 * i + 2]
        for j in range(no):
            if po[2 * j] == o:
                pg[5 * k] = cython.cast(cython.ulonglong, po[2 * j + 1])
                pg[5 * k + 1] = 0
                pg[5 * k + 2] = pc[3 * i]
                pg[5 * k + 3] = 0
                pg[5 * k + 4] = pc[3 * i + 1]
                k += 1
                break
    pe = cython.cast(cython.p_ulonglong, expect.data.as_voidptr)
    for i in range(len(expect) // 4):
        pg[5 * k] = pe[4 * i + 2]
        pg[5 * k + 1] = pe[4 * i + 3] & _FLAGS
        pg[5 * k + 2] = pe[4 * i]
        pg[5 * k + 3] = pe[4 * i + 3] & ~_FLAGS
        pg[5 * k + 4] = pe[4 * i + 1]
        k += 1
    with cython.nogil:
        rc = fstool_sort_records(pg, k, 5, 0)
    if rc:
        raise MemoryError()
    # two mappings of one owner and flags at one block and offset: the merge
    # would depend on their order (the Python comparison looks)
    for i in range(1, k):
        if pg[5 * i] == pg[5 * i - 5] and pg[5 * i + 1] == pg[5 * i - 4] and \
                pg[5 * i + 2] == pg[5 * i - 3] and pg[5 * i + 3] == pg[5 * i - 2]:
            return False
    # merged in place, as (start, length, owner, offset | flags)
    out = 0
    for i in range(k):
        ow = pg[5 * i]
        fl = pg[5 * i + 1]
        s = pg[5 * i + 2]
        off = pg[5 * i + 3]
        n = pg[5 * i + 4]
        if out:
            j = 4 * (out - 1)
            if pg[j + 2] == ow and (pg[j + 3] & _FLAGS) == fl and pg[j] + pg[j + 1] == s and \
                    (ow >> 63 or fl & _BMBT or (pg[j + 3] & ~_FLAGS) + pg[j + 1] == off):
                pg[j + 1] += n
                continue
        j = 4 * out
        pg[j] = s
        pg[j + 1] = n
        pg[j + 2] = ow
        pg[j + 3] = off | fl
        out += 1
    if out * 4 != len(disk):
        return False
    disk = cpy_array.copy(disk)
    pd = cython.cast(cython.p_ulonglong, disk.data.as_voidptr)
    with cython.nogil:
        rc = fstool_sort_records(pg, out, 4, 0)
        if rc == 0:
            rc = fstool_sort_records(pd, out, 4, 0)
    if rc:
        raise MemoryError()
    for i in range(4 * out):
        if pg[i] != pd[i]:
            return False
    return True


@cython.locals(i=cython.Py_ssize_t, nrec=cython.Py_ssize_t, s=cython.ulonglong,
               n=cython.ulonglong, owner=cython.ulonglong, off=cython.ulonglong,
               flags=cython.ulonglong, o=cython.longlong, length=cython.ulonglong,
               agino_log=cython.int, inopblog=cython.int, agcount=cython.ulonglong,
               agblocks=cython.ulonglong, reflink=cython.bint, has_last=cython.bint,
               ls=cython.ulonglong, lo=cython.ulonglong, loff=cython.ulonglong,
               later=cython.bint, ok=cython.bint, taken=cython.bint)
def rmap_leaf_take(recs, i, out, length, agino_log, inopblog, agcount, agblocks, reflink,
                   last):
    """The rmapbt leaf check's common case (fstool/ops/check/btrees.py):
    from record ``i`` of ``recs`` (startblock, blockcount, owner, offset,
    as the leaf holds them) on, every record that passes every rule at once
    (valid flags, a length inside the AG's ``length`` blocks, an inode
    owner inside the geometry or a metadata owner without flags or offset,
    after the record before it in key order: (startblock, owner, offset) on
    a reflink filesystem, the startblock alone otherwise) goes to ``out``
    (a flat unsigned array, four numbers a record, as records.Rmaps keeps
    them).  ``last`` is the previous record's key or None.  Returns (the
    index of the first record the test doubts, or len(recs); the key of the
    last record taken, or ``last``)."""
    nrec = len(recs)
    has_last = last is not None
    taken = False
    ls = lo = loff = 0
    if has_last:
        ls = last[0]
        if reflink:
            lo = last[1]
            loff = last[2]
    while i < nrec:
        rec = recs[i]
        s = rec[0]
        n = rec[1]
        owner = rec[2]
        off = rec[3]
        flags = off & _FLAGS
        if owner >> 63:         # a metadata owner, negative as a signed number
            o = -cython.cast(cython.longlong, (~owner) & _U64) - 1
        else:
            o = cython.cast(cython.longlong, owner)
        if off & ~(_RMAP_OFF_MASK | flags) or (flags & _BMBT and flags & _UNWRITTEN) or \
                n == 0 or s >= length or n > length - s:
            break
        if o >= 0:
            ok = (owner >> agino_log) < agcount and \
                ((owner & ((cython.cast(cython.ulonglong, 1) << agino_log) - 1)) >>
                 inopblog) < agblocks
        else:
            ok = -9 < o <= -3 and not off
        if not ok:
            break
        if has_last:
            if reflink:
                later = s > ls or (s == ls and (owner > lo or (owner == lo and off > loff)))
            else:
                later = s > ls
            if not later:
                break
        if cython.compiled:
            _push4(out, s, n, owner, off)
        else:
            out.extend((s, n, owner, off))
        has_last = taken = True
        ls = s
        lo = owner
        loff = off
        i += 1
    if taken and reflink:
        last = (ls, lo, loff)
    elif taken:
        last = (ls,)
    return i, last



@cython.locals(i=cython.Py_ssize_t, nrec=cython.Py_ssize_t, s=cython.ulonglong,
               n=cython.ulonglong, o=cython.ulonglong, f=cython.ulonglong,
               ts=cython.ulonglong, to=cython.ulonglong, tf=cython.ulonglong,
               have=cython.bint)
def rmap_leaf_top(recs):
    """The greatest high key among the decoded rmapbt leaf records ``recs``
    (startblock, blockcount, owner, offset), as the rmapbt key check
    computes it (fstool/ops/check/btrees.py): (last block, owner, offset
    with the unwritten bit cleared, for a fork mapping of a file its last
    file offset), compared as unsigned tuples.  None for no records, or
    when a record has no length or its last block or offset leaves 64 bits
    (the Python code looks)."""
    nrec = len(recs)
    have = False
    ts = to = tf = 0
    for i in range(nrec):
        rec = recs[i]
        s = rec[0]
        n = rec[1]
        o = rec[2]
        f = rec[3]
        if n == 0 or s > _U64 - n:
            return None
        s = s + n - 1
        f = f & ~_UNWRITTEN
        if not (o >> 63) and not (f & _BMBT):
            if f > _U64 - (n - 1):
                return None
            f = f + n - 1
        if not have or s > ts or (s == ts and (o > to or (o == to and f > tf))):
            ts = s
            to = o
            tf = f
            have = True
    if not have:
        return None
    return (ts, to, tf)


# -- the namespace phase: directory links, reachability, link counts ---------------
# (fstool/ops/check/namespace.py).  The inode table's arrays are indexed by
# slot (fstool/ops/check/table.py): ``subdirs`` (unsigned 32-bit) counts a
# directory's subdirectory entries, ``parent`` (unsigned 64-bit) holds the
# directory that last linked a directory (0 for none yet), ``edges`` (signed
# 64-bit) the (directory slot, subdirectory slot) pairs of those links.
_T_DIR = 4      # dir_data_tally's flag: the entry names a directory
_NO_SUMS = array("Q")       # no parent pointer sums (ShortformRun)


@cython.cfunc
@cython.locals(arr=array, a=cython.longlong, b=cython.longlong, n=cython.Py_ssize_t,
               q=cython.p_longlong)
def _push2(arr, a, b):
    """Append the pair (a, b) to a flat array of signed 64-bit numbers."""
    if not cython.compiled:
        arr.extend((a, b))
        return
    n = len(arr)
    cpy_array.resize_smart(arr, n + 2)
    q = cython.cast(cython.p_longlong, arr.data.as_voidptr)
    q[n] = a
    q[n + 1] = b


@cython.cfunc
@cython.locals(out=list, i=cython.Py_ssize_t, n=cython.Py_ssize_t, ino=cython.ulonglong,
               starts=cython.ulonglong[:], subdirs=cython.uint[:], parent=cython.ulonglong[:],
               edges=array, ps=cython.Py_ssize_t, cs=cython.Py_ssize_t,
               child=cython.ulonglong)
def _dir_links(odd, ino, starts, subdirs, parent, edges):
    """dir_links with its arrays typed (ShortformRun calls it so)."""
    n = len(odd)
    if n == 0:
        return odd
    ps = _find_slot(starts, ino)
    if ps < 0:
        return odd
    out = []
    for i in range(n):
        e = odd[i]
        if e[3] == _T_DIR:
            child = e[1]
            cs = _find_slot(starts, child)
            if cs >= 0 and parent[cs] == 0:
                subdirs[ps] += 1
                parent[cs] = ino
                _push2(edges, ps, cs)
                continue
        out.append(e)
    return out


def dir_links(odd, ino, starts, subdirs, parent, edges):
    """The common entries among a directory's ``odd`` ones (name, child,
    ftype, flags as dir_data_tally gives them): those flagged as naming a
    directory and nothing else, whose directory no entry has linked yet,
    are counted (the directory ``ino`` gains a subdirectory, the child its
    parent, ``edges`` the link) and dropped; the others come back, in
    order, for the Python code to look at."""
    if not odd:
        return odd
    return _dir_links(odd, ino, starts, subdirs, parent, edges)


@cython.locals(p=cython.p_uchar, n=cython.Py_ssize_t, hi=cython.ulonglong,
               lo=cython.ulonglong, flags2=cython.ulonglong, size=cython.Py_ssize_t,
               nrecs=cython.ulonglong, i=cython.Py_ssize_t, o=cython.Py_ssize_t,
               l0=cython.ulonglong, l1=cython.ulonglong, fsb=cython.ulonglong,
               cnt=cython.ulonglong, agno=cython.ulonglong, agbno=cython.ulonglong,
               mask=cython.ulonglong, alog=cython.int, ablocks=cython.ulonglong,
               acount=cython.ulonglong, g=cython.longlong, blocks=array, m=cython.Py_ssize_t,
               start=cython.longlong, end=cython.longlong, b=cython.longlong,
               c=cython.longlong)
def dir_block_runs(raws, agblklog, agblocks, agcount, gap):
    """The blocks of the directories among the raw inodes ``raws`` whose
    data fork is in extents form, as ascending ``(first, end)`` runs of
    linear block numbers (AG number times ``agblocks`` plus the AG block),
    blocks less than ``gap`` blocks apart joined: what fstool check asks the
    kernel to read ahead.  An inode whose extent count does not fit its
    fork adds nothing, nor does an extent outside the filesystem."""
    blocks = array("q")
    alog = agblklog
    ablocks = agblocks
    acount = agcount
    g = gap
    mask = (1 << alog) - 1
    for raw in raws:
        n = len(raw)
        if n < 176:
            continue
        p = raw
        if p[5] != 2:
            continue
        hi = _be32(p, 120)
        lo = _be32(p, 124)
        flags2 = (hi << 32) | lo
        if flags2 & 0x10:           # NREXT64: di_big_nextents
            hi = _be32(p, 24)
            lo = _be32(p, 28)
            nrecs = (hi << 32) | lo
        else:
            nrecs = _be32(p, 76)
        size = p[82] * 8 if p[82] else n - 176
        if size <= 0 or nrecs > size // 16:
            continue
        for i in range(nrecs):
            o = 176 + 16 * i
            hi = _be32(p, o)
            lo = _be32(p, o + 4)
            l0 = (hi << 32) | lo
            hi = _be32(p, o + 8)
            lo = _be32(p, o + 12)
            l1 = (hi << 32) | lo
            fsb = ((l0 & 0x1FF) << 43) | (l1 >> 21)
            cnt = l1 & 0x1FFFFF
            agno = fsb >> alog
            agbno = fsb & mask
            if agno >= acount or agbno >= ablocks or cnt == 0:
                continue
            _push2(blocks, agno * ablocks + agbno, cnt)
    runs = []
    m = len(blocks) // 2
    if m == 0:
        return runs
    sort_records(blocks, 2)
    start = blocks[0]
    end = start + blocks[1]
    for i in range(1, m):
        b = blocks[2 * i]
        c = blocks[2 * i + 1]
        if b >= end + g:
            runs.append((start, end))
            start = b
            end = b + c
        elif b + c > end:
            end = b + c
    runs.append((start, end))
    return runs


class ShortformRun:
    """The namespace phase's loop over the sound shortform directories:
    ``ShortformRun(tally_args, root, subdirs, parent, edges)`` takes what
    ``parsers.sf_dir_tally(raw, ino, *tally_args)`` takes after the raw
    inode and its number, the root directory's number and the namespace
    arrays; compiled, the arrays are typed once here, not once a call."""
    __slots__ = ("uuid", "has_ftype", "dirblksize", "data_first", "rootino", "agino_log",
                 "agcount", "agino_lo", "agino_hi", "not_dirents", "starts", "itype", "refs",
                 "ps", "has_ps", "root", "subdirs", "parent", "edges")

    def __init__(self, tally_args, root, subdirs, parent, edges):
        (uuid, has_ftype, dirblksize, data_first, rootino, agino_log, agcount, agino_lo,
         agino_hi, not_dirents, starts, itype, refs, psums) = tally_args
        if len(uuid) != 16 or len(itype) < 64 * len(starts) or len(refs) < len(itype):
            raise ValueError("inode table arrays too short")
        if psums is not None and len(psums) != len(refs):
            raise ValueError("inode table arrays differ in length")
        if edges.typecode != "q":
            raise ValueError("edges are signed 64-bit numbers")
        self.uuid = uuid
        self.has_ftype = has_ftype
        self.dirblksize = dirblksize
        self.data_first = data_first
        self.rootino = rootino
        self.agino_log = agino_log
        self.agcount = agcount
        self.agino_lo = agino_lo
        self.agino_hi = agino_hi
        self.not_dirents = not_dirents
        self.starts = starts
        self.itype = itype
        self.refs = refs
        self.has_ps = psums is not None
        self.ps = psums if psums is not None else _NO_SUMS
        self.root = root
        self.subdirs = subdirs
        self.parent = parent
        self.edges = edges

    @cython.locals(n=cython.Py_ssize_t, k=cython.Py_ssize_t, ino=cython.ulonglong,
                   root=cython.ulonglong, dir_raw=dict)
    def run(self, dirs, k, dir_raw, dotdot):
        """The loop over ``dirs`` from index ``k`` for as long as each is a
        sound shortform directory with nothing to report: its raw inode
        taken out of ``dir_raw``, its entries counted as sf_dir_tally counts
        them, its plain subdirectory links as dir_links counts them, its
        '..' noted in ``dotdot``.  Stops at the first directory that needs
        the Python code and returns ``(index, pending)``: ``pending`` is
        None when that directory is untouched (not shortform, or refused by
        the tally), else ``(parent, rest)``: it was counted, and ``rest``
        (dir_links' remainder, or its '..' being wrong) is left to look at
        (dir_links gives ``rest`` back unchanged when called on it again).
        ``index`` is len(dirs) when every directory was done here."""
        root = self.root
        n = len(dirs)
        while k < n:
            ino = dirs[k]
            raw = dir_raw.get(ino)
            if raw is None or len(raw) < 6 or raw[5] != 1:
                return k, None
            fast = _sf_tally(raw, ino, self.uuid, self.has_ftype, self.dirblksize,
                             self.data_first, self.rootino, self.agino_log, self.agcount,
                             self.agino_lo, self.agino_hi, self.not_dirents, self.starts,
                             self.itype, self.refs, self.ps, self.has_ps)
            if fast is None:
                return k, None
            del dir_raw[ino]
            dd = fast[0]
            rest = fast[1]
            if rest:
                rest = _dir_links(rest, ino, self.starts, self.subdirs, self.parent,
                                  self.edges)
            if rest or dd is None or (dd == ino and ino != root) or \
                    (ino == root and dd != root):
                return k, (dd, rest)
            dotdot[ino] = dd
            k += 1
        return k, None


@cython.locals(edges=array, nslots=cython.Py_ssize_t, root=cython.Py_ssize_t,
               m=cython.Py_ssize_t, i=cython.Py_ssize_t, a=cython.Py_ssize_t,
               b=cython.Py_ssize_t, top=cython.Py_ssize_t, s=cython.Py_ssize_t,
               k=cython.Py_ssize_t, pe=cython.p_longlong, first=cython.longlong[:],
               to=cython.longlong[:], stack=cython.longlong[:], seen=cython.uchar[:])
def reach_slots(edges, root, nslots):
    """A bytearray of ``nslots``: 1 for the slots the directory in slot
    ``root`` reaches through ``edges`` (flat (directory, subdirectory) slot
    pairs), itself included; all 0 when ``root`` is not a slot."""
    if edges.typecode != "q" or len(edges) % 2:
        raise ValueError("edges are flat (directory, subdirectory) slot pairs")
    out = bytearray(nslots)
    if root < 0 or root >= nslots:
        return out
    m = len(edges) // 2
    if cython.compiled:
        pe = cython.cast(cython.p_longlong, edges.data.as_voidptr)
    else:
        pe = edges
    for i in range(2 * m):
        if pe[i] < 0 or pe[i] >= nslots:
            raise ValueError("an edge names a slot outside the table")
    # the edges grouped by directory (counting sort): first[a] .. first[a+1]
    # index the subdirectories of slot a in ``to``
    first = array("q", bytes(8 * (nslots + 1)))
    to = array("q", bytes(8 * max(m, 1)))
    for i in range(m):
        first[pe[2 * i] + 1] += 1
    for a in range(nslots):
        first[a + 1] += first[a]
    for i in range(m):
        a = pe[2 * i]
        to[first[a]] = pe[2 * i + 1]
        first[a] += 1
    for a in range(nslots, 0, -1):
        first[a] = first[a - 1]
    first[0] = 0
    seen = out
    stack = array("q", bytes(8 * (m + 1)))
    seen[root] = 1
    stack[0] = root
    top = 1
    while top:
        top -= 1
        s = stack[top]
        for k in range(first[s], first[s + 1]):
            b = to[k]
            if not seen[b]:
                seen[b] = 1
                stack[top] = b
                top += 1
    return out


@cython.locals(dirs=cython.ulonglong[:], starts=cython.ulonglong[:], reach=cython.uchar[:],
               i=cython.Py_ssize_t, s=cython.Py_ssize_t, out=list)
def unreached_dirs(dirs, starts, reach):
    """The directories of ``dirs`` (an unsigned 64-bit array of inode
    numbers) whose slot ``reach`` (as reach_slots gives it) does not mark,
    in order."""
    out = []
    for i in range(len(dirs)):
        s = _find_slot(starts, dirs[i])
        if s < 0 or not reach[s]:
            out.append(dirs[i])
    return out


@cython.locals(itype=cython.uchar[:], nlinks=cython.uint[:], refs=cython.uint[:],
               subdirs=cython.uint[:], reach=cython.uchar[:], n=cython.Py_ssize_t,
               i=cython.Py_ssize_t, root=cython.Py_ssize_t, t=cython.int,
               want=cython.ulonglong, out=list)
def link_doubts(itype, nlinks, refs, subdirs, reach, root):
    """The slots the link count check must look at: the root's, every
    directory not reached or whose link count is not 2 and its
    subdirectories (0 when no entry names it), every other inode in use
    whose link count differs from the entries naming it or that no entry
    names.  (The inodes named only from directories the root does not reach
    the caller adds.)"""
    n = len(itype)
    if len(nlinks) != n or len(refs) != n or len(subdirs) != n or len(reach) != n:
        raise ValueError("inode table arrays differ in length")
    out = []
    for i in range(n):
        t = itype[i]
        if t == 0:
            continue
        if i == root:
            out.append(i)
        elif t == 4:
            want = 2 + cython.cast(cython.ulonglong, subdirs[i]) if refs[i] else 0
            if not reach[i] or nlinks[i] != want:
                out.append(i)
        elif refs[i] == 0 or nlinks[i] != refs[i]:
            out.append(i)
    return out


@cython.locals(keys=cython.ulonglong[:], vals=cython.ulonglong[:],
               starts=cython.ulonglong[:], parent=cython.ulonglong[:], i=cython.Py_ssize_t,
               s=cython.Py_ssize_t, out=list)
def dotdot_doubts(keys, vals, starts, parent):
    """The indices i at which directory ``keys[i]``'s '..' (``vals[i]``)
    is not the directory that links it (``parent`` at its slot, when one
    does), in order."""
    if len(keys) != len(vals):
        raise ValueError("keys and values differ in length")
    out = []
    for i in range(len(keys)):
        s = _find_slot(starts, keys[i])
        if s >= 0 and parent[s] != 0 and parent[s] != vals[i]:
            out.append(i)
    return out
