"""Hot-path encoders for the write path, in Cython's pure-Python mode.

Like parsers.py, this one file is both backends: setup.py compiles it with
Cython, and imported as plain Python it is the pure-Python backend.

Buffers written into are ``bytearray``; everything on disk is big-endian
unless noted.  Checksums are computed by the ``cksum`` function passed in
(``parsers.xfs_cksum`` of the same backend), so the CRC code has one home.
"""
try:
    import cython
except ImportError:          # plain Python without Cython installed
    from fstool_native import _cython_shim as cython

# the big-endian readers and the leaf's hash search are parsers.py's
# (writers.pxd cimports them when compiled)
if not cython.compiled:
    from fstool_native import load as _load
    _be16 = _load(pure=True)._be16
    _be32 = _load(pure=True)._be32
    _hash_lower = _load(pure=True)._hash_lower

_U64 = 0xFFFFFFFFFFFFFFFF


@cython.cfunc
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, v=cython.uint)
def _put32(p, off, v):
    p[off] = (v >> 24) & 0xFF
    p[off + 1] = (v >> 16) & 0xFF
    p[off + 2] = (v >> 8) & 0xFF
    p[off + 3] = v & 0xFF


@cython.cfunc
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, v=cython.ulonglong)
def _put64(p, off, v):
    _put32(p, off, v >> 32)
    _put32(p, off + 4, v & 0xFFFFFFFF)


@cython.cfunc
@cython.locals(p=cython.p_uchar, q=cython.p_uchar, off=cython.Py_ssize_t,
               n=cython.Py_ssize_t, i=cython.Py_ssize_t)
def _copy_in(p, off, q, n):
    """The first ``n`` bytes of ``q`` into ``p`` at ``off``."""
    if cython.compiled:
        for i in range(n):
            p[off + i] = q[i]
    else:
        p[off:off + n] = q[:n]


@cython.cfunc
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, isize=cython.Py_ssize_t,
               crc_off=cython.Py_ssize_t, crc=cython.uint)
def _stamp_crc(p, off, isize, crc_off, cksum):
    """The inode at ``off`` of ``p`` sealed: its CRC (``cksum``, the
    backend's xfs_cksum) stored little-endian at ``crc_off``."""
    crc = cksum(p[off:off + isize], crc_off)
    p[off + crc_off] = crc & 0xFF
    p[off + crc_off + 1] = (crc >> 8) & 0xFF
    p[off + crc_off + 2] = (crc >> 16) & 0xFF
    p[off + crc_off + 3] = (crc >> 24) & 0xFF


@cython.locals(p=cython.p_uchar, t=cython.p_uchar, isize=cython.Py_ssize_t,
               start=cython.Py_ssize_t, end=cython.Py_ssize_t, k=cython.Py_ssize_t,
               off=cython.Py_ssize_t, i=cython.Py_ssize_t, crc_off=cython.Py_ssize_t,
               slot=cython.Py_ssize_t, crc=cython.uint, mode=cython.uint,
               at=cython.ulonglong, mt=cython.ulonglong, ct=cython.ulonglong)
def fill_simple_inodes(buf, tpl, base_ino, inos, items, start, end, ifmt, ctime,
                       epoch, crc_off, cksum, forks=None, nrext64=False, attrs=None,
                       lits=None, nlinks=None) -> int:
    """Write inodes ``inos[start:end]`` (all in the chunk whose first inode
    is ``base_ino``, held in ``buf``) from the template ``tpl``: mode
    ``ifmt | perm``, owners and times from ``items[k]`` = ``(name, perm,
    uid, gid, atime_ns, mtime_ns, ...)``, change and creation time ``ctime``.
    Times are stored as bigtime values, ``ns + epoch``.  With ``forks``,
    ``forks[k]`` = ``(size, nblocks, nextents, records)`` gives inode k an
    extent-format data fork: its size, blocks, extent count (in
    di_big_nextents when ``nrext64``) and the packed bmbt records, which
    must fit the literal area.  With ``attrs``, ``attrs[k]`` = ``(forkoff,
    literal)`` gives inode k a shortform attr fork at ``forkoff`` (8-byte
    units) holding ``literal``.  With ``lits``, ``lits[k]`` (bytes) gives
    inode k a local-format data fork holding it (a symlink's target, a
    shortform directory), its length as di_size.  With ``nlinks``,
    ``nlinks[k]`` is inode k's link count (else the template's).  Returns the index of the first inode whose
    times do not fit the format (the caller encodes it the slow way and goes
    on after it), or ``end``."""
    isize = len(tpl)
    ctime = ctime + epoch
    if not 0 <= ctime <= _U64:
        return start
    ct = ctime
    p = buf
    t = tpl
    for k in range(start, end):
        ino = inos[k]
        it = items[k]
        perm = it[1]
        uid = it[2]
        gid = it[3]
        atime = it[4] + epoch
        mtime = it[5] + epoch
        if not (0 <= atime <= _U64 and 0 <= mtime <= _U64):
            return k
        at = atime
        mt = mtime
        slot = ino - base_ino
        if slot < 0 or (slot + 1) * isize > len(buf):
            raise ValueError("inode outside its chunk buffer")
        off = slot * isize
        _copy_in(p, off, t, isize)   # the inode template
        mode = ifmt | perm
        p[off + 2] = (mode >> 8) & 0xFF
        p[off + 3] = mode & 0xFF
        _put32(p, off + 8, uid)
        _put32(p, off + 12, gid)
        _put64(p, off + 32, at)
        _put64(p, off + 40, mt)
        _put64(p, off + 48, ct)
        _put64(p, off + 144, ct)
        _put64(p, off + 152, ino)
        if forks is not None:
            _put_fork(p, off, isize, forks[k], nrext64)
        if lits is not None:
            _put_local(p, off, isize, lits[k])
        if attrs is not None:
            _put_sf_attr(p, off, isize, attrs[k])
        if nlinks is not None:
            _put32(p, off + 16, nlinks[k])
        _stamp_crc(p, off, isize, crc_off, cksum)
    return end



@cython.locals(p=cython.p_uchar, t=cython.p_uchar, isize=cython.Py_ssize_t,
               off=cython.Py_ssize_t, i=cython.Py_ssize_t, slot=cython.Py_ssize_t,
               crc_off=cython.Py_ssize_t, n=cython.Py_ssize_t, crc=cython.uint)
def fill_free_inodes(buf, tpl, base_ino, mask, crc_off, cksum) -> int:
    """Write a free inode at each slot ``i`` of ``buf`` whose bit is set in
    ``mask`` (an int): the template ``tpl`` (a free inode as a new chunk
    holds it) with its number ``base_ino + i`` and a fresh CRC (``cksum``
    is ``parsers.xfs_cksum`` of the same backend).  Returns how many."""
    isize = len(tpl)
    p = buf
    t = tpl
    n = 0
    while mask:
        low = mask & -mask
        mask ^= low
        slot = low.bit_length() - 1
        if (slot + 1) * isize > len(buf):
            raise ValueError("inode outside its cluster buffer")
        off = slot * isize
        _copy_in(p, off, t, isize)   # the inode template
        _put64(p, off + 152, base_ino + slot)
        _stamp_crc(p, off, isize, crc_off, cksum)
        n += 1
    return n

@cython.cfunc
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, isize=cython.Py_ssize_t,
               nl=cython.Py_ssize_t, size=cython.ulonglong, nblocks=cython.ulonglong,
               nextents=cython.ulonglong, big=cython.bint)
def _put_fork(p, off, isize, fork, big):
    """An extent-format data fork into the inode at ``off``: di_size,
    di_nblocks, the extent count and the records after the 176-byte core."""
    size = fork[0]
    nblocks = fork[1]
    nextents = fork[2]
    recs = fork[3]
    nl = len(recs)
    if 176 + nl > isize or nl != cython.cast(cython.Py_ssize_t, nextents) * 16:
        raise ValueError("extent records do not fit the inode")
    _put64(p, off + 56, size)
    _put64(p, off + 64, nblocks)
    if big:
        _put64(p, off + 24, nextents)
    else:
        _put32(p, off + 76, nextents)
    _copy_in(p, off + 176, recs, nl)


@cython.cfunc
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, isize=cython.Py_ssize_t,
               nl=cython.Py_ssize_t)
def _put_local(p, off, isize, lit):
    """A local-format data fork into the inode at ``off``: di_format,
    di_size (the literal's length) and the literal after the core."""
    nl = len(lit)
    if 176 + nl > isize:
        raise ValueError("the local data fork does not fit the inode")
    p[off + 5] = 1
    _put64(p, off + 56, nl)
    _copy_in(p, off + 176, lit, nl)


@cython.cfunc
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, isize=cython.Py_ssize_t,
               forkoff=cython.Py_ssize_t, nl=cython.Py_ssize_t)
def _put_sf_attr(p, off, isize, attr):
    """A shortform attr fork into the inode at ``off``: ``attr`` =
    ``(forkoff, literal)``; di_forkoff, di_aformat (local) and the literal
    at the fork offset."""
    forkoff = attr[0]
    lit = attr[1]
    nl = len(lit)
    if forkoff <= 0 or forkoff > 255 or 176 + forkoff * 8 + nl > isize:
        raise ValueError("the attr fork does not fit the inode")
    p[off + 82] = forkoff
    p[off + 83] = 1
    _copy_in(p, off + 176 + forkoff * 8, lit, nl)


@cython.locals(p=cython.p_uchar, k=cython.Py_ssize_t, n=cython.Py_ssize_t,
               off=cython.Py_ssize_t, nl=cython.Py_ssize_t, size=cython.Py_ssize_t,
               dbs=cython.Py_ssize_t, tag=cython.uint, ino=cython.ulonglong, ft=cython.uint)
def fill_dir_entries(space, entries, addrs, dirblksize, has_ftype) -> None:
    """Write directory data entries into ``space`` (the data blocks one after
    another, ``dirblksize`` bytes each): ``entries[k]`` = ``(name, ino,
    ftype)`` goes at byte ``addrs[k]``, with its tag (offset in its block)
    in its last two bytes."""
    n = len(entries)
    if len(addrs) != n:
        raise ValueError("one address per entry")
    dbs = dirblksize
    p = space
    for k in range(n):
        name, ino_obj, ft_obj = entries[k]
        off = addrs[k]
        nl = len(name)
        size = (8 + 1 + nl + (1 if has_ftype else 0) + 2 + 7) & ~7
        if off < 0 or nl < 1 or nl > 255 or off % dbs + size > dbs or \
                off + size > len(space):
            raise ValueError("directory entry outside its block")
        ino = ino_obj
        _put64(p, off, ino)
        p[off + 8] = nl
        _copy_in(p, off + 9, name, nl)
        if has_ftype:
            ft = ft_obj
            p[off + 9 + nl] = ft & 0xFF
        tag = off % dbs
        p[off + size - 2] = (tag >> 8) & 0xFF
        p[off + size - 1] = tag & 0xFF



@cython.locals(p=cython.p_uchar, n=cython.Py_ssize_t, k=cython.Py_ssize_t,
               i8=cython.Py_ssize_t, isz=cython.Py_ssize_t, ft=cython.Py_ssize_t,
               nl=cython.Py_ssize_t, names=cython.Py_ssize_t, size=cython.Py_ssize_t,
               pos=cython.Py_ssize_t, off=cython.Py_ssize_t, lim=cython.Py_ssize_t,
               first=cython.Py_ssize_t, par=cython.ulonglong, ino=cython.ulonglong)
def sf_dir_fork(entries, parent, has_ftype, limit, data_first):
    """The shortform data fork of a directory holding ``entries`` [(name,
    ino, ftype)] in that order, with '..' naming ``parent``, as
    fstool.ns.dirbuild writes it: count, i8count (the inode numbers, the
    parent's included, that need 8 bytes; when any does, every number takes
    8 bytes), the parent, then per entry its name length, its offset in the
    data block it would have (from ``data_first``, each entry taking its
    data entry's size), the name, the file type (with ``has_ftype``) and
    the inode number.  None when it takes more than ``limit`` bytes."""
    n = len(entries)
    lim = limit
    if 9 * n > lim:             # an entry takes at least 9 bytes
        return None
    par = parent
    i8 = 1 if par > 0xFFFFFFFF else 0
    names = 0
    for k in range(n):
        e = entries[k]
        ino = e[1]
        if ino > 0xFFFFFFFF:
            i8 += 1
        names += len(e[0])
    isz = 8 if i8 else 4
    ft = 1 if has_ftype else 0
    size = 2 + isz + n * (3 + ft + isz) + names
    if size > lim:
        return None
    if n > 255 or i8 > 255:
        raise ValueError("a shortform directory holds at most 255 entries")
    out = bytearray(size)
    p = out
    p[0] = n
    p[1] = i8
    if isz == 8:
        _put64(p, 2, par)
    else:
        _put32(p, 2, par)
    pos = 2 + isz
    off = data_first
    for k in range(n):
        e = entries[k]
        name = e[0]
        nl = len(name)
        ino = e[1]
        if off > 0xFFFF:
            raise ValueError("shortform entry offset past 64 KiB")
        p[pos] = nl
        p[pos + 1] = (off >> 8) & 0xFF
        p[pos + 2] = off & 0xFF
        _copy_in(p, pos + 3, name, nl)
        pos += 3 + nl
        if ft:
            p[pos] = e[2]
            pos += 1
        if isz == 8:
            _put64(p, pos, ino)
        else:
            _put32(p, pos, ino)
        pos += isz
        off += (8 + 1 + nl + ft + 2 + 7) & ~7
    return bytes(out)


_S_IFMT = 0o170000
_S_IFREG = 0o100000
_S_IFLNK = 0o120000


def _scan_names_py(dirfd, dirpath, names, small, general):
    """The pure-Python twin of the compiled loop in scan_names."""
    import os
    plain = []
    other = []
    for name in names:
        if b"\0" in name:              # no file name: left to the caller
            plain.append(None)
            other.append(None)
            continue
        try:
            st = os.lstat(name, dir_fd=dirfd)
        except OSError as e:
            plain.append(None)
            other.append(e.errno if general else None)
            continue
        size = st.st_size
        xlen = None
        if st.st_mode & _S_IFMT == _S_IFREG and st.st_nlink == 1 and size <= small and \
                st.st_blocks * 512 >= size:
            xlen = _xattr_names_len(dirpath + b"/" + name)
            if xlen <= 0:
                item = (name, st.st_mode & 0o7777, st.st_uid, st.st_gid, st.st_atime_ns,
                        st.st_mtime_ns)
                plain.append(item + (size,) if small else item)
                other.append(None)
                continue
        plain.append(None)
        if not general:
            other.append(None)
            continue
        target, terr = None, 0
        if st.st_mode & _S_IFMT == _S_IFLNK:
            try:
                target = os.readlink(name, dir_fd=dirfd)
            except OSError as e:
                terr = e.errno
        if xlen is None:
            xlen = _xattr_names_len(dirpath + b"/" + name)
        other.append((st.st_mode, st.st_nlink, st.st_uid, st.st_gid, size, st.st_blocks,
                      st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns, st.st_dev, st.st_ino,
                      st.st_rdev, xlen, target, terr))
    return plain, other


def _xattr_names_len(path):
    """Bytes of the xattr names of ``path`` (not following a symlink), as
    listxattr(2) counts them; -1 when they cannot be listed."""
    import os
    try:
        return sum(len(os.fsencode(n)) + 1 for n in os.listxattr(path, follow_symlinks=False))
    except OSError:
        return -1


def stat_plain_files(dirfd, dirpath, names, small=0):
    """For each name of directory ``dirpath`` (open as ``dirfd``): a plain
    empty file (regular, size 0, one link, no xattrs) as ``(name, perm, uid,
    gid, atime_ns, mtime_ns)`` from lstat; with ``small``, any plain file
    of up to ``small`` bytes with no holes (as many bytes allocated as its
    size), as the same with its size appended; else None, also when lstat
    fails (the caller looks at those again the general way).  Compiled, the xattr
    question is put by listxattrat(2) relative to ``dirfd`` where the kernel
    has it, which spares a walk of the whole path per file."""
    return scan_names(dirfd, dirpath, names, small, False)[0]


def scan_names(dirfd, dirpath, names, small, general):
    """``(plain, other)``: ``plain`` as :func:`stat_plain_files` gives it;
    with ``general``, ``other[k]`` describes each name that is not a plain
    file: the errno of an lstat that failed, or ``(mode, nlink, uid, gid,
    size, blocks, atime_ns, mtime_ns, ctime_ns, dev, ino, rdev, xlen,
    target, terr)`` from lstat, ``xlen`` the bytes of its xattr names (0:
    none; -1: they cannot be listed), for a symlink ``target`` its target
    (bytes) or ``terr`` the errno of the readlink that failed; None where
    the caller must look again itself (a name with a NUL byte, a time the
    compiled loop cannot hold, a target that changed as it was read), and
    for every name without ``general``.  Compiled, every system call is
    made with the interpreter let go, once for the whole list."""
    if not cython.compiled:
        return _scan_names_py(dirfd, dirpath, names, small, general)
    # fstool_stat_plain (stat_plain.h), malloc and free come from
    # writers.pxd
    n = len(names)
    plain = [None] * n
    other = [None] * n
    if n == 0:
        return plain, other
    longest = 0
    for k in range(n):
        if len(names[k]) > longest:
            longest = len(names[k])
    dirlen = len(dirpath)
    cdir = dirpath
    pathbuf = bytearray(dirlen + longest + 2)      # for llistxattr's full path
    cbuf = pathbuf
    cnames = cython.cast(cython.pp_char, malloc(n * cython.sizeof(cython.p_char)))
    res = cython.cast(plain_p, malloc(n * cython.sizeof(fstool_plain)))
    if res:
        for k in range(n):
            res[k].target = cython.NULL
    try:
        if not cnames or not res:
            raise MemoryError()
        for k in range(n):
            if b"\0" in names[k]:
                cnames[k] = cython.NULL
            else:
                cnames[k] = names[k]          # the list keeps the bytes alive
        g = 1 if general else 0
        with cython.nogil:
            fstool_stat_plain(dirfd, cnames, n, cdir, dirlen, cbuf, small, g, res)
        for k in range(n):
            o = res[k]
            if o.plain:
                if small:
                    plain[k] = (names[k], o.mode & 0o7777, o.uid, o.gid, o.atime_ns,
                                o.mtime_ns, o.size)
                else:
                    plain[k] = (names[k], o.mode & 0o7777, o.uid, o.gid, o.atime_ns,
                                o.mtime_ns)
            elif not general or o.redo:
                continue
            elif o.err:
                other[k] = o.err
            else:
                other[k] = (o.mode, o.nlink, o.uid, o.gid, o.size, o.blocks, o.atime_ns,
                            o.mtime_ns, o.ctime_ns, o.dev, o.ino, o.rdev, o.xlen,
                            o.target[:o.tlen] if o.target and not o.terr else None, o.terr)
    finally:
        if res:
            for k in range(n):
                free(res[k].target)
        free(cnames)
        free(res)
    return plain, other


_READ_WINDOW = 64          # files opened, and asked for, before they are read (as
                           # FSTOOL_READ_WINDOW in read_files.h, the compiled loop)


def _read_files_py(dirfd, names, sizes, buf, offsets, dirfds=None):
    """The pure-Python twin of the compiled loop in read_files."""
    import os
    import stat
    bad = []
    fds = [-1] * len(names)
    n = len(names)
    view = memoryview(buf)
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    for w0 in range(0, n, _READ_WINDOW):
        w1 = min(n, w0 + _READ_WINDOW)
        win = []
        for k in range(w0, w1):
            if not sizes[k]:
                win.append(-1)
                continue
            try:
                fd = os.open(names[k], flags,
                             dir_fd=dirfd if dirfds is None else dirfds[k])
            except OSError as e:
                win.append(-1)
                bad.append((k, e.errno))
                continue
            try:
                os.posix_fadvise(fd, 0, sizes[k], os.POSIX_FADV_WILLNEED)
            except OSError:
                pass
            win.append(fd)
        for k in range(w0, w1):
            fd = win[k - w0]
            if fd < 0:
                continue
            if offsets[k] < 0:
                try:
                    if stat.S_ISREG(os.fstat(fd).st_mode):
                        fds[k] = fd
                        continue
                    bad.append((k, 22))              # EINVAL: not a regular file
                except OSError as e:
                    bad.append((k, e.errno))
                os.close(fd)
                continue
            try:
                done, want, off = 0, sizes[k], offsets[k]
                while done < want:
                    got = os.preadv(fd, [view[off + done:off + want]], done)
                    if got <= 0:
                        break
                    done += got
            except OSError as e:
                bad.append((k, e.errno))
            finally:
                os.close(fd)
    bad.sort()
    return bad, fds


def read_files(dirfd, names, sizes, buf, offsets, dirfds=None):
    """Read, or open, files ``names`` of the directory open as ``dirfd`` (not
    following symlinks).  Where ``offsets[k]`` >= 0, file k's first
    ``sizes[k]`` bytes go to ``buf`` at that offset (a file now shorter
    leaves zeros after its end; one now longer is read to ``sizes[k]``; one
    of size 0 is not opened).  Where ``offsets[k]`` < 0, file k is opened and
    left open for the caller, the kernel asked to read its first
    ``sizes[k]`` bytes.  Files are opened a window at a time and the kernel
    asked to read them all (posix_fadvise WILLNEED) before the first is
    read, so a source not in the page cache is read many files at once.
    Returns ``(bad, fds)``: ``[(k, errno)]`` for the files that could not be
    opened or read (or are no longer regular files), in order, their bytes
    in ``buf`` unspecified; and the descriptors left open, -1 for the
    others (the caller closes them).  With ``dirfds``, file k is named
    relative to ``dirfds[k]`` instead (files of several directories in one
    call)."""
    if len(sizes) != len(names) or len(offsets) != len(names) or \
            dirfds is not None and len(dirfds) != len(names):
        raise ValueError("one size and one offset per name")
    for k in range(len(names)):
        if sizes[k] < 0 or offsets[k] >= 0 and offsets[k] + sizes[k] > len(buf) or \
                b"\0" in names[k]:
            raise ValueError("file outside the buffer, or a name with a NUL byte")
    if not cython.compiled:
        return _read_files_py(dirfd, names, sizes, buf, offsets, dirfds)
    # fstool_read_files (read_files.h), malloc and free come from writers.pxd;
    # the whole run is read with the interpreter let go, once
    n = len(names)
    bad = []
    fds = [-1] * n
    if n == 0:
        return bad, fds
    cnames = cython.cast(cython.pp_char, malloc(n * cython.sizeof(cython.p_char)))
    csizes = cython.cast(cython.p_longlong, malloc(n * cython.sizeof(cython.longlong)))
    coffs = cython.cast(cython.p_longlong, malloc(n * cython.sizeof(cython.longlong)))
    errs = cython.cast(cython.p_int, malloc(n * cython.sizeof(cython.int)))
    cfds = cython.cast(cython.p_int, malloc(n * cython.sizeof(cython.int)))
    cdirs = cython.NULL
    try:
        if not cnames or not csizes or not coffs or not errs or not cfds:
            raise MemoryError()
        if dirfds is not None:
            cdirs = cython.cast(cython.p_int, malloc(n * cython.sizeof(cython.int)))
            if not cdirs:
                raise MemoryError()
            for k in range(n):
                cdirs[k] = dirfds[k]
        for k in range(n):
            cnames[k] = names[k]          # the list keeps the bytes alive
            csizes[k] = sizes[k]
            coffs[k] = offsets[k]
        p = buf
        with cython.nogil:
            fstool_read_files(dirfd, cdirs, cnames, csizes, coffs, p, n, errs, cfds)
        for k in range(n):
            if errs[k]:
                bad.append((k, errs[k]))
            fds[k] = cfds[k]
    finally:
        free(cnames)
        free(csizes)
        free(coffs)
        free(errs)
        free(cfds)
        free(cdirs)
    return bad, fds


@cython.locals(n=cython.Py_ssize_t, i=cython.Py_ssize_t, j=cython.Py_ssize_t,
               dbs=cython.Py_ssize_t, hdr=cython.Py_ssize_t, sz=cython.Py_ssize_t,
               used0=cython.Py_ssize_t, count=cython.Py_ssize_t, blk=cython.Py_ssize_t,
               b=cython.Py_ssize_t, k=cython.Py_ssize_t, nopen=cython.Py_ssize_t,
               leaf_cap=cython.Py_ssize_t, need=cython.Py_ssize_t, u=cython.Py_ssize_t,
               extra=cython.Py_ssize_t, is_leaf=cython.bint, is_node=cython.bint)
def dir_place(entries, dirblksize, has_ftype, hdr, data_first) -> tuple:
    """Where the kernel's inserts, in order, leave each entry of a
    directory (v5 headers of ``hdr`` bytes, entries after "." and ".." from
    ``data_first``): returns the form ("block", "leaf" or "node"), each
    entry's byte address in the data space (block times ``dirblksize`` plus
    offset) and the bytes used from the start of each data block.

    Block form while the entries, the hash leaf (8 bytes an entry, "." and
    ".." included) and its 8-byte tail fit one block; after that, each new
    entry goes into the first block with room, else a new block; the single
    leaf block (entries plus a 2-byte best-free per data block) overflowing
    makes the form node."""
    dbs = dirblksize
    n = len(entries)
    extra = 1 if has_ftype else 0
    where = [0] * n
    used = [data_first]                 # bytes used from the start of each block
    count = 2                           # leaf entries, with . and ..
    is_leaf = False
    is_node = False
    used0 = data_first
    i = 0
    while i < n:
        sz = (8 + 1 + len(entries[i][0]) + extra + 2 + 7) & ~7
        if used0 + sz + 8 * (count + 1) + 8 <= dbs:
            where[i] = used0
            used0 += sz
            count += 1
            i += 1
        else:
            is_leaf = True
            break
    used[0] = used0
    open_blocks = [0] if dbs - used0 >= 16 else []
    leaf_cap = dbs - hdr - 4
    for j in range(i, n):
        sz = (8 + 1 + len(entries[j][0]) + extra + 2 + 7) & ~7
        blk = -1
        nopen = len(open_blocks)
        for k in range(nopen):
            b = open_blocks[k]
            if dbs - used[b] >= sz:
                blk = b
                break
        if is_leaf and not is_node:
            need = 8 * (count + 1) + 2 * (len(used) + (1 if blk < 0 else 0))
            if need > leaf_cap:
                is_node = True
        if blk < 0:
            used.append(hdr)
            blk = len(used) - 1
            open_blocks.append(blk)
        u = used[blk]
        where[j] = blk * dbs + u
        u += sz
        used[blk] = u
        count += 1
        if dbs - u < 16:
            open_blocks.remove(blk)
    if is_leaf and not is_node and count * 8 + 2 * len(used) + hdr + 4 > dbs:
        is_node = True
    return ("node" if is_node else "leaf" if is_leaf else "block"), where, used


@cython.locals(a=cython.Py_ssize_t, b=cython.Py_ssize_t, n=cython.Py_ssize_t,
               size=cython.longlong, o=cython.longlong, m=cython.longlong,
               nopen=cython.Py_ssize_t, small=cython.longlong, data=cython.longlong,
               most_open=cython.Py_ssize_t, head=cython.longlong)
def slice_bounds(items, start, mask, small_copy, run_data, run_open, read_head) -> tuple:
    """The slice of a run of plain files (``items[k][6]`` their sizes) from
    ``start``: files while the data read so far is under ``run_data`` bytes
    and the files opened under ``run_open``; a file of up to ``small_copy``
    bytes is read at the next offset aligned by ``mask`` (block size - 1), a
    larger one opened with ``min(size, read_head)`` bytes asked for.
    Returns ``(start, end, bytes, offsets, sizes to read or ask for, files
    opened)``, offset -1 for a file to open."""
    a = start
    b = a
    n = len(items)
    m = mask
    small = small_copy
    data = run_data
    most_open = run_open
    head = read_head
    offsets = []
    want = []
    o = 0
    nopen = 0
    while b < n and o < data and nopen < most_open:
        size = items[b][6]
        if size > small:
            offsets.append(-1)
            want.append(size if size < head else head)
            nopen += 1
        else:
            offsets.append(o)
            want.append(size)
            o += (size + m) & ~m
        b += 1
    return a, b, o, offsets, want, nopen


@cython.locals(k=cython.Py_ssize_t, stop=cython.Py_ssize_t, size=cython.longlong,
               nblk=cython.longlong, fsbno=cython.ulonglong, left=cython.longlong,
               most=cython.longlong, bmask=cython.longlong, blg=cython.int,
               aglog=cython.int, agmask=cython.ulonglong, agblks=cython.ulonglong,
               off=cython.longlong, src=cython.longlong, end=cython.longlong,
               p=cython.p_uchar)
def place_pooled(items, offsets, fds, start, stop, run, take_max, blocklog, agblklog,
                 agblocks, forks, writes, places) -> int:
    """The data pool's run ``run`` = ``[next fsbno, blocks left]`` handing
    blocks to files ``start`` to ``stop`` of a slice, as ``DataPool.take``
    would one file after another while the run holds each: file k is
    ``items[k]`` (its size at index 6), its data in the slice's buffer at
    ``offsets[k]`` (``fds[k]`` -1) or, empty, no blocks at all.  Each file
    placed appends its fork ``(size, blocks, extents, packed record)`` to
    ``forks``, ``(k, fsbno, blocks)`` to ``places`` (unless None) and its
    data's write ``[image byte offset, start, end in the buffer]`` to
    ``writes``, merged with the last one where both follow on.  Stops at the
    first file that is copied from an open file, needs more than
    ``take_max`` or the blocks left, or would lie outside its AG; returns
    its index (``stop`` when all were placed); ``run`` is updated."""
    fsbno = run[0]
    left = run[1]
    most = take_max
    blg = blocklog
    bmask = (1 << blg) - 1
    aglog = agblklog
    agmask = (1 << aglog) - 1
    agblks = agblocks
    k = start
    while k < stop:
        if fds[k] != -1:
            break
        size = items[k][6]
        nblk = (size + bmask) >> blg
        if nblk == 0:
            forks.append((0, 0, 0, b""))
            k += 1
            continue
        if nblk > most or nblk > left or (fsbno & agmask) + nblk > agblks:
            break
        off = (((fsbno >> aglog) * agblks + (fsbno & agmask)) << blg)
        src = offsets[k]
        end = src + (nblk << blg)
        if writes:
            last = writes[len(writes) - 1]
            if last[2] == src and last[0] + (src - last[1]) == off:
                last[2] = end
            else:
                writes.append([off, src, end])
        else:
            writes.append([off, src, end])
        rec = bytearray(16)
        p = rec
        # the packed bmbt record of one extent at file block 0, not unwritten
        _put64(p, 0, fsbno >> 43)
        _put64(p, 8, ((fsbno & 0x7FFFFFFFFFF) << 21) | nblk)
        forks.append((size, nblk, 1, bytes(rec)))
        if places is not None:
            places.append((k, fsbno, nblk))
        fsbno += nblk
        left -= nblk
        k += 1
    run[0] = fsbno
    run[1] = left
    return k


@cython.locals(p=cython.p_uchar, q=cython.p_uchar, isize=cython.Py_ssize_t,
               n=cython.Py_ssize_t, off=cython.Py_ssize_t, i=cython.Py_ssize_t,
               same=cython.bint, lsn_off=cython.Py_ssize_t, crc_off=cython.Py_ssize_t,
               stamped=cython.Py_ssize_t, crc=cython.uint)
def stamp_inodes(buf, clean, isize, lsn, lsn_off, crc_off, cksum) -> int:
    """The write verifier of an inode cluster buffer: every inode in ``buf``
    (magic "IN") that differs from the same bytes of ``clean`` (every inode
    when ``clean`` is None) gets ``di_lsn = lsn`` and a fresh CRC (``cksum``
    is ``parsers.xfs_cksum`` of the same backend).  Returns how many."""
    n = len(buf)
    p = buf
    stamped = 0
    for off in range(0, n - isize + 1, isize):
        if p[off] != 0x49 or p[off + 1] != 0x4E:
            continue
        if clean is not None:
            q = clean
            same = True
            for i in range(isize):
                if p[off + i] != q[off + i]:
                    same = False
                    break
            if same:
                continue
        _put64(p, off + lsn_off, lsn)
        crc = cksum(buf[off:off + isize], crc_off)
        p[off + crc_off] = crc & 0xFF
        p[off + crc_off + 1] = (crc >> 8) & 0xFF
        p[off + crc_off + 2] = (crc >> 16) & 0xFF
        p[off + crc_off + 3] = (crc >> 24) & 0xFF
        stamped += 1
    return stamped


# -- one entry into a directory data block (fstool.ns.dirops' insert) ---------------------------
#
# A v5 data block: a 64-byte header whose bestfree table (three (offset,
# length) pairs of 16 bits at byte 48, longest first) lists the longest
# unused regions, then entries and unused regions back to back up to the
# data end (the block's end, or the leaf array of a single-block
# directory).  An unused region starts with 0xFFFF and its length and ends
# with its own offset; an entry is the inode number (64 bits), the name's
# length, the name, the file type and its own offset, rounded up to 8 bytes.
# The bestfree table is kept as xfs_dir2_data_use_free keeps it, in the
# block itself: these functions are fstool.ns.dirdata's use_free and
# freescan, and the common single-block insert of dirops.Dir.

_DBF = 48                       # the bestfree table
_DHDR = 64                      # the first entry
_DFREE = 0xFFFF                 # an unused region's first 16 bits
_XDB3 = 0x58444233              # a single-block directory's magic


@cython.cfunc
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, v=cython.Py_ssize_t)
def _p16(p, off, v):
    p[off] = (v >> 8) & 0xFF
    p[off + 1] = v & 0xFF


@cython.cfunc
@cython.locals(namelen=cython.Py_ssize_t)
@cython.returns(cython.Py_ssize_t)
def _entsize(namelen):
    """An entry's bytes on an ftype filesystem."""
    return (9 + namelen + 1 + 2 + 7) & ~7


@cython.cfunc
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, length=cython.Py_ssize_t)
def _put_unused(p, off, length):
    _p16(p, off, _DFREE)
    _p16(p, off + 2, length)
    _p16(p, off + length - 2, off)


@cython.cfunc
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, length=cython.Py_ssize_t,
               i=cython.Py_ssize_t, o=cython.Py_ssize_t)
@cython.returns(cython.Py_ssize_t)
def _bf_find(p, off, length):
    """The bestfree slot of the unused region at ``off`` (of ``length``
    bytes now), or -1 (dirdata.freefind)."""
    if length < _be16(p, _DBF + 10):
        return -1
    for i in range(3):
        o = _be16(p, _DBF + 4 * i)
        if not o:
            return -1
        if o == off:
            return i
    return -1


@cython.cfunc
@cython.locals(p=cython.p_uchar, i=cython.Py_ssize_t, j=cython.Py_ssize_t)
def _bf_remove(p, i):
    for j in range(_DBF + 4 * i, _DBF + 8):
        p[j] = p[j + 4]
    for j in range(_DBF + 8, _DBF + 12):
        p[j] = 0


@cython.cfunc
@cython.locals(p=cython.p_uchar, off=cython.Py_ssize_t, length=cython.Py_ssize_t,
               i=cython.Py_ssize_t, j=cython.Py_ssize_t)
@cython.returns(cython.Py_ssize_t)
def _bf_insert(p, off, length):
    """A region into the table, longest first, ties after the ones there:
    its slot, or -1 (dirdata.freeinsert)."""
    for i in range(3):
        if length > _be16(p, _DBF + 4 * i + 2):
            j = _DBF + 11
            while j >= _DBF + 4 * i + 4:
                p[j] = p[j - 4]
                j -= 1
            _p16(p, _DBF + 4 * i, off)
            _p16(p, _DBF + 4 * i + 2, length)
            return i
    return -1


@cython.locals(p=cython.p_uchar, n=cython.Py_ssize_t, end=cython.Py_ssize_t,
               off=cython.Py_ssize_t, size=cython.Py_ssize_t, j=cython.Py_ssize_t)
def dir_freescan(buf) -> None:
    """The bestfree table rebuilt from the block's unused regions
    (dirdata.freescan); ValueError where a region or entry overruns."""
    p = buf
    n = len(buf)
    end = n
    if n >= 8 and _be32(p, 0) == _XDB3:
        end = n - 8 - 8 * _be32(p, n - 8)
    if end > n or end < _DHDR:
        raise ValueError("directory block: leaf entries overrun the data")
    for j in range(_DBF, _DBF + 12):
        p[j] = 0
    off = _DHDR
    while off < end:
        if off + 4 > end:
            raise ValueError(f"directory block: a region at {off} overruns the data end {end}")
        if _be16(p, off) == _DFREE:
            size = _be16(p, off + 2)
            if size < 8 or size & 7 or off + size > end:
                raise ValueError(f"unused region at {off} of length {size}")
            _bf_insert(p, off, size)
        else:
            if off + 9 > end:
                raise ValueError(f"entry at {off} overruns the data end {end}")
            size = _entsize(p[off + 8])
            if off + size > end:
                raise ValueError(f"entry at {off} overruns the data end {end}")
        off += size


@cython.locals(p=cython.p_uchar, dupoff=cython.Py_ssize_t, off=cython.Py_ssize_t,
               length=cython.Py_ssize_t, oldlen=cython.Py_ssize_t, i=cython.Py_ssize_t,
               n1=cython.Py_ssize_t, n2=cython.Py_ssize_t, front=cython.bint,
               back=cython.bint, scan=cython.bint)
def dir_use_free(buf, dupoff, off, length) -> bool:
    """Take [off, off+length) out of the unused region at ``dupoff``
    (xfs_dir2_data_use_free), the bestfree table kept incrementally;
    whether the kernel would rescan the block now (the caller does)."""
    p = buf
    if dupoff < _DHDR or dupoff + 4 > len(buf) or _be16(p, dupoff) != _DFREE:
        raise ValueError(f"no unused region at {dupoff} covers {off}+{length}")
    oldlen = _be16(p, dupoff + 2)
    if off < dupoff or off + length > dupoff + oldlen or dupoff + oldlen > len(buf):
        raise ValueError(f"no unused region at {dupoff} covers {off}+{length}")
    i = _bf_find(p, dupoff, oldlen)
    front = dupoff == off
    back = dupoff + oldlen == off + length
    scan = False
    if front and back:
        if i >= 0:
            scan = _be16(p, _DBF + 8) != 0
            if not scan:
                _bf_remove(p, i)
    elif front:
        _put_unused(p, off + length, oldlen - length)
        if i >= 0:
            _bf_remove(p, i)
            scan = _bf_insert(p, off + length, oldlen - length) == 2
    elif back:
        _put_unused(p, dupoff, off - dupoff)
        if i >= 0:
            _bf_remove(p, i)
            scan = _bf_insert(p, dupoff, off - dupoff) == 2
    else:
        n1 = off - dupoff
        n2 = oldlen - length - n1
        _put_unused(p, dupoff, n1)
        _put_unused(p, off + length, n2)
        if i >= 0:
            scan = _be16(p, _DBF + 10) != 0
            if not scan:
                _bf_remove(p, i)
                _bf_insert(p, dupoff, n1)
                _bf_insert(p, off + length, n2)
    return scan


@cython.locals(p=cython.p_uchar, q=cython.p_uchar, off=cython.Py_ssize_t,
               namelen=cython.Py_ssize_t, size=cython.Py_ssize_t, j=cython.Py_ssize_t,
               ino=cython.ulonglong)
def dir_put_entry(buf, off, inumber, name, ftype) -> None:
    """A new entry at the start of the unused region at ``off``, as
    xfs_dir2_data_use_free and the entry's fill leave the block (the
    bestfree rescan, when due, once the entry is there)."""
    namelen = len(name)
    size = _entsize(namelen)
    scan = dir_use_free(buf, off, off, size)
    p = buf
    q = name
    ino = inumber
    _put64(p, off, ino)
    p[off + 8] = namelen
    _copy_in(p, off + 9, q, namelen)
    p[off + 9 + namelen] = ftype
    for j in range(off + 10 + namelen, off + size - 2):
        p[j] = 0
    _p16(p, off + size - 2, off)
    if scan:
        dir_freescan(buf)


@cython.locals(p=cython.p_uchar, n=cython.Py_ssize_t, count=cython.Py_ssize_t,
               blp=cython.Py_ssize_t, length=cython.Py_ssize_t, d=cython.Py_ssize_t,
               fl=cython.Py_ssize_t, dup=cython.Py_ssize_t, lo=cython.Py_ssize_t,
               j=cython.Py_ssize_t, h=cython.uint, scan=cython.bint)
def dir_block_add(buf, name, inumber, ftype, hashval) -> bool:
    """The common insert into a single-block directory (XDB3), as
    xfs_dir2_block_addname makes it when no leaf entry is stale and the
    unused region before the leaf array gives the new leaf slot: the leaf
    array grows down by one slot, the entry goes into the longest unused
    region that takes it.  False, the block unchanged, for every other
    case (stale entries, no room: the caller's general path)."""
    p = buf
    n = len(buf)
    count = _be32(p, n - 8)
    if _be32(p, n - 4):
        return False                    # stale leaf entries
    blp = n - 8 - 8 * count
    if blp - 2 < _DHDR:
        raise ValueError("directory block: leaf entries overrun the data")
    length = _entsize(len(name))
    d = _be16(p, blp - 2)
    if d < _DHDR or d + 4 > blp or _be16(p, d) != _DFREE:
        return False                    # no unused region ends at the leaf array
    fl = _be16(p, d + 2)
    dup = _be16(p, _DBF)
    if dup != d:
        if _be16(p, _DBF + 2) < length:
            return False
    elif fl < length + 8:
        if _be16(p, _DBF + 6) < length:
            return False
        dup = _be16(p, _DBF + 4)
    h = hashval
    lo = _hash_lower(p, blp, count, h)
    scan = dir_use_free(buf, d, d + fl - 8, 8)
    _put32(p, n - 8, count + 1)
    if scan:
        dir_freescan(buf)
    for j in range(blp - 8, blp - 8 + 8 * lo):
        p[j] = p[j + 8]
    _put32(p, blp - 8 + 8 * lo, h)
    _put32(p, blp - 4 + 8 * lo, dup >> 3)
    dir_put_entry(buf, dup, inumber, name, ftype)
    return True
