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


@cython.locals(p=cython.p_uchar, t=cython.p_uchar, isize=cython.Py_ssize_t,
               start=cython.Py_ssize_t, end=cython.Py_ssize_t, k=cython.Py_ssize_t,
               off=cython.Py_ssize_t, i=cython.Py_ssize_t, crc_off=cython.Py_ssize_t,
               slot=cython.Py_ssize_t, crc=cython.uint, mode=cython.uint,
               at=cython.ulonglong, mt=cython.ulonglong, ct=cython.ulonglong)
def fill_simple_inodes(buf, tpl, base_ino, inos, items, start, end, ifmt, ctime,
                       epoch, crc_off, cksum) -> int:
    """Write inodes ``inos[start:end]`` (all in the chunk whose first inode
    is ``base_ino``, held in ``buf``) from the template ``tpl``: mode
    ``ifmt | perm``, owners and times from ``items[k]`` = ``(name, perm,
    uid, gid, atime_ns, mtime_ns)``, change and creation time ``ctime``.
    Times are stored as bigtime values, ``ns + epoch``.  Returns the index of
    the first inode whose times do not fit the format (the caller encodes it
    the slow way and goes on after it), or ``end``."""
    isize = len(tpl)
    ctime = ctime + epoch
    if not 0 <= ctime <= _U64:
        return start
    ct = ctime
    p = buf
    t = tpl
    for k in range(start, end):
        ino = inos[k]
        _name, perm, uid, gid, atime, mtime = items[k]
        atime = atime + epoch
        mtime = mtime + epoch
        if not (0 <= atime <= _U64 and 0 <= mtime <= _U64):
            return k
        at = atime
        mt = mtime
        slot = ino - base_ino
        if slot < 0 or (slot + 1) * isize > len(buf):
            raise ValueError("inode outside its chunk buffer")
        off = slot * isize
        if cython.compiled:
            for i in range(isize):
                p[off + i] = t[i]
        else:
            p[off:off + isize] = t
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
        crc = cksum(p[off:off + isize], crc_off)
        p[off + crc_off] = crc & 0xFF
        p[off + crc_off + 1] = (crc >> 8) & 0xFF
        p[off + crc_off + 2] = (crc >> 16) & 0xFF
        p[off + crc_off + 3] = (crc >> 24) & 0xFF
    return end


@cython.locals(p=cython.p_uchar, q=cython.p_uchar, k=cython.Py_ssize_t,
               n=cython.Py_ssize_t, off=cython.Py_ssize_t, nl=cython.Py_ssize_t,
               i=cython.Py_ssize_t, size=cython.Py_ssize_t, dbs=cython.Py_ssize_t,
               tag=cython.uint, ino=cython.ulonglong, ft=cython.uint)
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
        q = name
        if cython.compiled:
            for i in range(nl):
                p[off + 9 + i] = q[i]
        else:
            p[off + 9:off + 9 + nl] = q
        if has_ftype:
            ft = ft_obj
            p[off + 9 + nl] = ft & 0xFF
        tag = off % dbs
        p[off + size - 2] = (tag >> 8) & 0xFF
        p[off + size - 1] = tag & 0xFF


_NS_SAFE = 9_000_000_000             # seconds whose nanosecond count fits 63 bits
_S_IFMT = 0o170000
_S_IFREG = 0o100000


def _stat_plain_files_py(dirfd, dirpath, names):
    """The pure-Python twin of the compiled loop in stat_plain_files."""
    import os
    out = []
    for name in names:
        if b"\0" in name:              # no file name: left to the caller
            out.append(None)
            continue
        try:
            st = os.lstat(name, dir_fd=dirfd)
        except OSError:
            out.append(None)
            continue
        if st.st_mode & _S_IFMT != _S_IFREG or st.st_size or st.st_nlink != 1:
            out.append(None)
            continue
        try:
            if os.listxattr(dirpath + b"/" + name, follow_symlinks=False):
                out.append(None)
                continue
        except OSError:
            pass        # as the general path: unreadable xattrs count as none
        out.append((name, st.st_mode & 0o7777, st.st_uid, st.st_gid, st.st_atime_ns,
                    st.st_mtime_ns))
    return out


def stat_plain_files(dirfd, dirpath, names):
    """For each name of directory ``dirpath`` (open as ``dirfd``): a plain
    empty file (regular, size 0, one link, no xattrs) as ``(name, perm, uid,
    gid, atime_ns, mtime_ns)`` from lstat; else None, also when lstat
    fails (the caller looks at those again the general way)."""
    if not cython.compiled:
        return _stat_plain_files_py(dirfd, dirpath, names)
    # st, fstatat, llistxattr and AT_SYMLINK_NOFOLLOW come from writers.pxd
    out = []
    n = len(names)
    for k in range(n):
        name = names[k]
        if b"\0" in name:              # no file name: left to the caller
            out.append(None)
            continue
        cname = name
        rc = fstatat(dirfd, cname, cython.address(st), AT_SYMLINK_NOFOLLOW)
        fmt = st.st_mode & _S_IFMT
        if rc != 0 or fmt != _S_IFREG or st.st_size != 0 or st.st_nlink != 1:
            out.append(None)
            continue
        path = dirpath + b"/" + name
        cpath = path
        xl = llistxattr(cpath, cython.NULL, 0)
        if xl > 0:
            out.append(None)
            continue
        asec = st.st_atim.tv_sec
        msec = st.st_mtim.tv_sec
        if not (-_NS_SAFE < asec < _NS_SAFE and -_NS_SAFE < msec < _NS_SAFE):
            out.append(None)
            continue
        out.append((name, st.st_mode & 0o7777, st.st_uid, st.st_gid,
                    asec * 1000000000 + st.st_atim.tv_nsec,
                    msec * 1000000000 + st.st_mtim.tv_nsec))
    return out


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
