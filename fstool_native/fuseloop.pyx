# cython: language_level=3
"""A FUSE request loop in C over libfuse3's low-level API.

Two worker threads read requests from /dev/fuse with the GIL released;
holding one lock (so that no two handlers ever run at once), libfuse
decodes a request and calls one of the callbacks below, which call the
handler's method synchronously and reply.  The thread that called
``run`` keeps the timer and the signals.  The handler is any object with
the methods of ``fstool.mount.ops.MountOps`` (this module imports nothing
from fstool): node ids in; attributes (objects with ``ino gen mode nlink
uid gid rdev size blocks blksize atime_ns mtime_ns ctime_ns``), bytes or
ints out; errors as ``OSError`` with an errno, which becomes the reply.
Any other exception ends the loop and is raised from ``run`` (the request
gets EIO).  A handler with a ``later`` list and ``run_later()`` may leave
work for after an answer: the loop sets its ``answer_first``, and once a
request is answered, while still holding the lock, calls ``run_later()``
when the list is not empty (the kernel's caller goes on meanwhile).

Lookups of names known missing are answered here, with neither the lock
nor the interpreter taken, where the handler has ``names(node)`` (see
"names known" below); every other request, and a lookup that needs the
handler, takes both.

Reads and overwrites of regular files are answered here, without a call
into the handler, where the handler has ``fast_map(node)`` (see
``fstool.mount.volume.Volume.fast_map``): the file's map is kept (a few
dozen files) until the next call into the handler that may change
anything, reads are spliced from the image by it (zeros for holes and
unwritten records), an overwrite of written, unshared blocks inside the size is a
pwrite to the image, and getxattr of a file without xattrs is ENODATA.
The handler's ``overwritten([(node, time)], bytes)`` gets those writes'
times before any other call into it (the inode update the handler logs
as for its own overwrites), and ``write_hit(offset, length)``, where it
has one, each write (the crash tests' counter).

``Session(handler, options)`` parses the options (``-o`` mount and libfuse
options), ``mount(path)`` mounts, ``run(every, tick)`` serves until the
filesystem is unmounted or ``exit()`` is called (from a signal handler:
Python's handlers run while the loop waits), calling ``tick()`` every
``every`` seconds; ``close()`` unmounts when the kernel has not already
and frees the session.  One session per process.
"""
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.errno cimport errno, EINTR, EAGAIN, EIO, ENODATA, ENOMEM, ERANGE
from libc.stdint cimport uint64_t, uint32_t
from libc.stdlib cimport malloc, calloc, free
from libc.string cimport memset, strlen

import os as _os
import signal as _signal
import time as _time

cdef extern from "Python.h":
    int PyErr_CheckSignals() except -1

cdef extern from "fuseloop.h":
    ctypedef uint64_t fuse_ino_t
    ctypedef long off_t
    ctypedef unsigned int mode_t
    ctypedef unsigned int uid_t
    ctypedef unsigned int gid_t
    ctypedef unsigned long dev_t
    ctypedef unsigned long fsblkcnt_t
    ctypedef unsigned long fsfilcnt_t

    struct timespec:
        long tv_sec
        long tv_nsec

    struct stat:
        unsigned long st_ino
        unsigned int st_mode
        unsigned long st_nlink
        unsigned int st_uid
        unsigned int st_gid
        unsigned long st_rdev
        long st_size
        long st_blksize
        long st_blocks
        timespec st_atim
        timespec st_mtim
        timespec st_ctim

    struct statvfs:
        unsigned long f_bsize
        unsigned long f_frsize
        fsblkcnt_t f_blocks
        fsblkcnt_t f_bfree
        fsblkcnt_t f_bavail
        fsfilcnt_t f_files
        fsfilcnt_t f_ffree
        fsfilcnt_t f_favail
        unsigned long f_namemax

    struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd *fds, unsigned long nfds, int timeout) nogil
    enum: POLLIN

    ctypedef long ssize_t
    ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) nogil
    int clock_gettime(int clk, timespec *ts) nogil
    enum: CLOCK_REALTIME

    ctypedef struct fuse_req:
        pass
    ctypedef fuse_req *fuse_req_t
    struct fuse_session:
        pass

    struct fuse_args:
        int argc
        char **argv
        int allocated
    int fuse_opt_add_arg(fuse_args *args, const char *arg)
    void fuse_opt_free_args(fuse_args *args)

    struct fuse_entry_param:
        fuse_ino_t ino
        uint64_t generation
        stat attr
        double attr_timeout
        double entry_timeout

    struct fuse_file_info:
        int flags
        unsigned int direct_io
        unsigned int keep_cache
        uint64_t fh

    struct fuse_ctx:
        uid_t uid
        gid_t gid
        int pid

    struct fuse_forget_data:
        fuse_ino_t ino
        uint64_t nlookup

    struct fuse_conn_info:
        unsigned capable
        unsigned want
        unsigned max_write

    struct fuse_buf:
        size_t size
        int flags
        void *mem
        int fd
        off_t pos

    struct fuse_bufvec:
        size_t count
        size_t idx
        size_t off
        fuse_buf buf[1]

    enum:
        FUSE_CAP_READDIRPLUS
        FUSE_CAP_READDIRPLUS_AUTO
        FUSE_CAP_EXPORT_SUPPORT
        FUSE_CAP_WRITEBACK_CACHE
        FUSE_CAP_SPLICE_WRITE
        FUSE_CAP_AUTO_INVAL_DATA
        FUSE_BUF_IS_FD
        FUSE_BUF_FD_SEEK
        FUSE_BUF_FD_RETRY
        FUSE_SET_ATTR_MODE
        FUSE_SET_ATTR_UID
        FUSE_SET_ATTR_GID
        FUSE_SET_ATTR_SIZE
        FUSE_SET_ATTR_ATIME
        FUSE_SET_ATTR_MTIME
        FUSE_SET_ATTR_ATIME_NOW
        FUSE_SET_ATTR_MTIME_NOW

    struct fuse_lowlevel_ops:
        void (*init)(void *userdata, fuse_conn_info *conn) noexcept
        void (*lookup)(fuse_req_t req, fuse_ino_t parent, const char *name) noexcept
        void (*forget)(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) noexcept
        void (*getattr)(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi) noexcept
        void (*setattr)(fuse_req_t req, fuse_ino_t ino, stat *attr, int to_set,
                        fuse_file_info *fi) noexcept
        void (*readlink)(fuse_req_t req, fuse_ino_t ino) noexcept
        void (*mknod)(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      dev_t rdev) noexcept
        void (*mkdir)(fuse_req_t req, fuse_ino_t parent, const char *name,
                      mode_t mode) noexcept
        void (*unlink)(fuse_req_t req, fuse_ino_t parent, const char *name) noexcept
        void (*rmdir)(fuse_req_t req, fuse_ino_t parent, const char *name) noexcept
        void (*symlink)(fuse_req_t req, const char *link, fuse_ino_t parent,
                        const char *name) noexcept
        void (*rename)(fuse_req_t req, fuse_ino_t parent, const char *name,
                       fuse_ino_t newparent, const char *newname, unsigned int flags) noexcept
        void (*link)(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
                     const char *newname) noexcept
        void (*open)(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi) noexcept
        void (*read)(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                     fuse_file_info *fi) noexcept
        void (*write)(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
                      off_t off, fuse_file_info *fi) noexcept
        void (*flush)(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi) noexcept
        void (*release)(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi) noexcept
        void (*fsync)(fuse_req_t req, fuse_ino_t ino, int datasync,
                      fuse_file_info *fi) noexcept
        void (*opendir)(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi) noexcept
        void (*readdirplus)(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                            fuse_file_info *fi) noexcept
        void (*releasedir)(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi) noexcept
        void (*fsyncdir)(fuse_req_t req, fuse_ino_t ino, int datasync,
                         fuse_file_info *fi) noexcept
        void (*statfs)(fuse_req_t req, fuse_ino_t ino) noexcept
        void (*access)(fuse_req_t req, fuse_ino_t ino, int mask) noexcept
        void (*setxattr)(fuse_req_t req, fuse_ino_t ino, const char *name,
                         const char *value, size_t size, int flags) noexcept
        void (*getxattr)(fuse_req_t req, fuse_ino_t ino, const char *name,
                         size_t size) noexcept
        void (*listxattr)(fuse_req_t req, fuse_ino_t ino, size_t size) noexcept
        void (*removexattr)(fuse_req_t req, fuse_ino_t ino, const char *name) noexcept
        void (*create)(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                       fuse_file_info *fi) noexcept
        void (*forget_multi)(fuse_req_t req, size_t count,
                             fuse_forget_data *forgets) noexcept
        void (*fallocate)(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset,
                          off_t length, fuse_file_info *fi) noexcept
        void (*copy_file_range)(fuse_req_t req, fuse_ino_t ino_in, off_t off_in,
                                fuse_file_info *fi_in, fuse_ino_t ino_out, off_t off_out,
                                fuse_file_info *fi_out, size_t len, int flags) noexcept
        void (*lseek)(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
                      fuse_file_info *fi) noexcept

    int fuse_reply_err(fuse_req_t req, int err)
    void fuse_reply_none(fuse_req_t req)
    int fuse_reply_entry(fuse_req_t req, const fuse_entry_param *e) nogil
    int fuse_reply_create(fuse_req_t req, const fuse_entry_param *e,
                          const fuse_file_info *fi)
    int fuse_reply_attr(fuse_req_t req, const stat *attr, double attr_timeout)
    int fuse_reply_readlink(fuse_req_t req, const char *link)
    int fuse_reply_open(fuse_req_t req, const fuse_file_info *fi)
    int fuse_reply_write(fuse_req_t req, size_t count)
    int fuse_reply_buf(fuse_req_t req, const char *buf, size_t size)
    int fuse_reply_data(fuse_req_t req, fuse_bufvec *bufv, int flags)
    int fuse_reply_statfs(fuse_req_t req, const statvfs *stbuf)
    int fuse_reply_xattr(fuse_req_t req, size_t count)
    int fuse_reply_lseek(fuse_req_t req, off_t off)
    size_t fuse_add_direntry_plus(fuse_req_t req, char *buf, size_t bufsize,
                                  const char *name, const fuse_entry_param *e, off_t off)
    const fuse_ctx *fuse_req_ctx(fuse_req_t req)
    int fuse_lowlevel_notify_inval_inode(fuse_session *se, fuse_ino_t ino, off_t off,
                                         off_t len)

    fuse_session *fuse_session_new(fuse_args *args, const fuse_lowlevel_ops *op,
                                   size_t op_size, void *userdata)
    int fuse_session_mount(fuse_session *se, const char *mountpoint)
    void fuse_session_unmount(fuse_session *se)
    void fuse_session_destroy(fuse_session *se)
    void fuse_session_exit(fuse_session *se)
    int fuse_session_exited(fuse_session *se) nogil
    int fuse_session_receive_buf(fuse_session *se, fuse_buf *buf) nogil

    char fstool_fuse_error[512]
    void fstool_fuse_log_capture(int on)
    int fstool_v2_want
    int fstool_v2_on
    int fstool_kill_suidgid
    void fstool_peek(const char *mem, size_t size) nogil
    int fstool_use_own_io(fuse_session *se)
    void fuse_session_process_buf(fuse_session *se, const fuse_buf *buf) nogil


# -- the one session of the process --------------------------------------------------------
cdef object _handler = None              # the handler
cdef object _later = None          # its list of work left for after an answer
cdef bint _read_map = False        # it has read_map(fh, off, size)
cdef int _image_fd = -1            # the file read_map's offsets are in
cdef char *_zeros = NULL           # _zeros_max zero bytes, for holes
cdef size_t _zeros_max = 0         # the handler's zeros_max
cdef fuse_session *_se = NULL
cdef fuse_lowlevel_ops _ops
cdef double _entry_timeout = 1.0
cdef double _attr_timeout = 1.0
cdef bint _writeback_cache = False
cdef bint _mounted = False
cdef bint _gone = False            # the kernel ended the connection (unmounted)
cdef object _failure = None        # the exception that ended the loop
cdef bint _init_seen = False       # INIT answered, on_init not yet called
cdef object _on_init = None        # run()'s on_init


# -- the fast path: reads and overwrites of regular files answered here --------------------
# A file's map, as the handler's fast_map(node) gives it, is kept in a
# small table until the next call into Python that may change anything:
# every call into the handler goes through _py(changes), and one with
# ``changes`` moves _epoch on, which makes every kept map stale at once (the
# next READ or WRITE of the file asks for it again).  No change of a file's
# size, map or sharing can reach the image but through such a call (the
# handler's methods, the checkpoint timer, the work left for after an
# answer), so there is no invalidation to forget.  The times of the
# overwrites made here are handed to the handler (its overwritten()) before
# any call into it, so that what it logs and shows never lags.
DEF FAST_SLOTS = 64                # files whose maps are kept (direct-mapped by node)

cdef struct _Ext:
    long long start                # the file's byte offset
    long long length               # bytes
    long long at                   # the image's byte offset; -1: unwritten (zeros)

cdef struct _Fast:
    uint64_t node                  # 0: an empty slot
    uint64_t epoch                 # the _epoch the map was taken at
    bint ok                        # a map (False: the handler had none)
    bint may_write                 # overwrites may be made here
    bint no_xattrs                 # the file has none (getxattr: ENODATA)
    long long size                 # the file's size
    long long fixed_ns             # the time of every change (-1: the clock's)
    _Ext *ext                      # the records, in file order
    size_t n
    long long pending_ns           # the time of the last overwrite made here, not handed over
    uint64_t grown_epoch           # nonzero: at this _epoch, the map is stale only by
                                   # the handler's own writes since it was taken (see
                                   # _wrote): ``size`` and ``no_xattrs`` still hold

cdef _Fast _fast[FAST_SLOTS]
cdef bint _fast_on = False         # the handler has fast_map
cdef uint64_t _epoch = 1
cdef int _pending = 0              # slots with pending_ns
cdef long long _unreported = 0     # bytes written here, not yet handed over
cdef object _write_hit = None      # the handler's write_hit(offset, length), where it counts writes
cdef unsigned _blocklog = 0        # the handler's fast_geometry
cdef unsigned _agblklog = 0
cdef unsigned long long _agblocks = 0
cdef unsigned long long _agcount = 0
cdef long long _image_start = 0
cdef long long _image_bytes = 0


cdef int _handover() except -1:
    """The times and byte counts of the overwrites made here, to the
    handler's overwritten([(node, time)], bytes)."""
    global _pending, _unreported
    cdef int i
    times = []
    for i in range(FAST_SLOTS):
        if _fast[i].pending_ns:
            times.append((_fast[i].node, _fast[i].pending_ns))
            _fast[i].pending_ns = 0
    n = _unreported
    _pending = 0
    _unreported = 0
    _handler.overwritten(times, n)
    return 0


cdef object _py(bint changes):
    """The handler, for a call into it: the fast path's writes handed over
    first; ``changes``: the call may change a file (every kept map goes
    stale).  Every call into the handler goes through here."""
    global _epoch
    if _pending or _unreported:
        _handover()
    if changes:
        _epoch += 1
    return _handler


def _drop_maps():
    """Every kept map stale (the handler's, for a change the loop cannot
    see coming: its writes stopped)."""
    global _epoch
    _epoch += 1


cdef void _fast_clear() noexcept:
    global _pending, _unreported
    cdef int i
    for i in range(FAST_SLOTS):
        free(_fast[i].ext)
    memset(_fast, 0, sizeof(_fast))
    _pending = 0
    _unreported = 0


cdef _Fast *_fast_get(fuse_ino_t node) noexcept:
    """The kept map of ``node``, taken from the handler when stale or
    missing; NULL where the handler has none (the request goes to it)."""
    cdef _Fast *f
    cdef size_t i, n
    cdef unsigned long long o, p, c, agno, agbno
    cdef long long at
    if not _fast_on:
        return NULL
    f = &_fast[(node * 0x9E3779B97F4A7C15ULL) >> 58]
    if f.node == node and f.epoch == _epoch:
        return f if f.ok else NULL
    try:
        m = _py(False).fast_map(node)
    except BaseException:
        return NULL                     # the handler's own path says what is wrong
    free(f.ext)                         # (its pending time was handed over by _py)
    memset(f, 0, sizeof(_Fast))
    f.node = node
    f.epoch = _epoch
    if m is None:
        return NULL
    try:
        size, may_write, fixed_ns, no_xattrs, recs = m
        n = len(recs)
        f.ext = <_Ext *> malloc(n * sizeof(_Ext) if n else 1)
        if f.ext is NULL:
            return NULL
        for i in range(n):
            o, p, c, u = recs[i]
            f.ext[i].start = o << _blocklog
            f.ext[i].length = c << _blocklog
            if u:
                f.ext[i].at = -1
                continue
            # Filesystem.fsb_to_daddr; a record outside the filesystem or
            # the image is left to the handler's read to report
            agno = (p >> _agblklog) & 0xFFFFFFFF
            agbno = p & ((1ULL << _agblklog) - 1)
            if agno >= _agcount or agbno >= _agblocks:
                raise ValueError("a record outside the filesystem")
            at = <long long> ((agno * _agblocks + agbno) << _blocklog)
            if at + f.ext[i].length > _image_bytes:
                raise ValueError("a record past the end of the image")
            f.ext[i].at = at + _image_start
        f.n = n
        f.size = size
        f.may_write = may_write
        f.no_xattrs = no_xattrs
        f.fixed_ns = fixed_ns
    except BaseException:
        free(f.ext)
        f.ext = NULL
        f.n = 0
        return NULL
    f.ok = True
    return f


cdef size_t _first_ext(_Fast *f, long long off) noexcept nogil:
    """The index of the first record ending past ``off``."""
    cdef size_t lo = 0, hi = f.n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if f.ext[mid].start + f.ext[mid].length <= off:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline size_t _zeros_into(fuse_buf *out, size_t k, long long n) noexcept nogil:
    """Runs of at most _zeros_max zeros for ``n`` bytes from out[k] (counted
    only where ``out`` is NULL); returns the next k."""
    cdef long long z
    while n > 0:
        z = n if n < <long long> _zeros_max else <long long> _zeros_max
        if out is not NULL:
            memset(&out[k], 0, sizeof(fuse_buf))
            out[k].size = z
            out[k].mem = _zeros
        k += 1
        n -= z
    return k


cdef size_t _segments(_Fast *f, long long off, long long end, fuse_buf *out) noexcept nogil:
    """The pieces of the file's bytes [off, end): image ranges and runs of
    zeros (holes, unwritten records); filled into ``out`` unless NULL;
    returns how many."""
    cdef size_t k = 0, i = _first_ext(f, off)
    cdef long long pos = off, lo, hi
    cdef _Ext *e
    while i < f.n and f.ext[i].start < end:
        e = &f.ext[i]
        i += 1
        lo = e.start if e.start > pos else pos
        hi = e.start + e.length
        if hi > end:
            hi = end
        if lo > pos:                    # a hole before the record
            k = _zeros_into(out, k, lo - pos)
        if e.at >= 0:
            if out is not NULL:
                memset(&out[k], 0, sizeof(fuse_buf))
                out[k].size = hi - lo
                out[k].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK | FUSE_BUF_FD_RETRY
                out[k].fd = _image_fd
                out[k].pos = e.at + lo - e.start
            k += 1
        else:
            k = _zeros_into(out, k, hi - lo)
        pos = hi
    if pos < end:                       # a hole up to the end
        k = _zeros_into(out, k, end - pos)
    return k


cdef void _fast_read(fuse_req_t req, _Fast *f, size_t size, off_t off) noexcept:
    """A READ answered from the kept map: the image's pages spliced, zeros
    for holes and unwritten records (as _reply_segments).  No read-ahead
    of the image is asked for here: splicing from the image file in order
    already has the host kernel read ahead of it, and asking again
    (posix_fadvise WILLNEED, done under the loop's lock) doubled the
    server's CPU per MB of a cold read (docs/performance.md)."""
    cdef long long end
    cdef size_t n
    cdef fuse_bufvec *bv
    if off < 0 or off >= f.size:
        fuse_reply_buf(req, NULL, 0)
        return
    # (no sum past the largest offset)
    end = off + <long long> size if <long long> size < f.size - off else f.size
    n = _segments(f, off, end, NULL)
    bv = <fuse_bufvec *> malloc(sizeof(fuse_bufvec) + n * sizeof(fuse_buf))
    if bv is NULL:
        fuse_reply_err(req, ENOMEM)
        return
    memset(bv, 0, sizeof(fuse_bufvec))
    bv.count = n
    _segments(f, off, end, bv.buf)
    fuse_reply_data(req, bv, 0)
    free(bv)


cdef void _overwrote(_Fast *f, long long nbytes) noexcept:
    """``nbytes`` of ``f`` overwritten here: its time (mtime and ctime) to
    hand over, the bytes to report."""
    global _pending, _unreported
    cdef timespec ts
    cdef long long now
    if f.fixed_ns >= 0:
        now = f.fixed_ns
    else:
        clock_gettime(CLOCK_REALTIME, &ts)
        now = ts.tv_sec * 1000000000LL + ts.tv_nsec
    if not f.pending_ns:
        _pending += 1
    f.pending_ns = now
    _unreported += nbytes


cdef bint _fast_write(fuse_req_t req, _Fast *f, const char *buf, size_t size,
                      off_t off) noexcept:
    """An overwrite of written blocks inside the file's size, made and
    answered here: True; anything else (nothing done): False.  A write
    that fails part way (the image's pwrite, or the crash tests' fault
    hook) still changes the file's times when any of its bytes reached the
    image, as the kernel's write, which updates them first, does."""
    cdef long long end
    cdef long long pos, hi, at
    cdef size_t i, j
    cdef ssize_t k
    cdef int err = 0
    failure = None
    if not f.may_write or size == 0 or off < 0 or <long long> size > f.size - off:
        return False
    end = off + <long long> size
    # every byte of the range in written records that follow one another
    i = _first_ext(f, off)
    pos = off
    j = i
    while pos < end:
        if j >= f.n or f.ext[j].start > pos or f.ext[j].at < 0:
            return False
        pos = f.ext[j].start + f.ext[j].length
        j += 1
    pos = off
    while pos < end and not err and failure is None:
        hi = f.ext[i].start + f.ext[i].length
        if hi > end:
            hi = end
        at = f.ext[i].at + pos - f.ext[i].start
        while pos < hi:
            k = pwrite(_image_fd, buf + (pos - off), hi - pos, at)
            if k <= 0:
                err = errno if k < 0 and errno else EIO
                break
            pos += k
            if _write_hit is not None:
                # the crash tests' write counter (FSTOOL_FAULT_AFTER_WRITES)
                try:
                    _write_hit(at, k)
                except BaseException as exc:
                    failure = exc
                    break
            at += k
        i += 1
    if pos > off:
        _overwrote(f, pos - off)
    if err:
        fuse_reply_err(req, err)
    elif failure is not None:
        _error(req, failure)
    else:
        fuse_reply_write(req, size)
    return True


cdef void _fill_stat(stat *st, object a) except *:
    memset(st, 0, sizeof(stat))
    st.st_ino = _handler.node(a.ino)
    st.st_mode = a.mode
    st.st_nlink = a.nlink
    st.st_uid = a.uid
    st.st_gid = a.gid
    st.st_rdev = a.rdev
    st.st_size = a.size
    st.st_blksize = a.blksize
    st.st_blocks = a.blocks
    s, ns = divmod(a.atime_ns, 1000000000)
    st.st_atim.tv_sec = s
    st.st_atim.tv_nsec = ns
    s, ns = divmod(a.mtime_ns, 1000000000)
    st.st_mtim.tv_sec = s
    st.st_mtim.tv_nsec = ns
    s, ns = divmod(a.ctime_ns, 1000000000)
    st.st_ctim.tv_sec = s
    st.st_ctim.tv_nsec = ns


cdef void _fill_entry(fuse_entry_param *e, object a) except *:
    memset(e, 0, sizeof(fuse_entry_param))
    e.entry_timeout = _entry_timeout
    if a is None:                   # a negative entry, kept entry_timeout
        return
    _fill_stat(&e.attr, a)
    e.ino = e.attr.st_ino
    e.generation = a.gen
    e.attr_timeout = _attr_timeout


cdef void _error(fuse_req_t req, object exc) noexcept:
    """Reply to ``req`` with the errno of the exception being handled; one
    that is not an OSError ends the loop."""
    code = getattr(exc, "errno", None) if isinstance(exc, OSError) else None
    if not code:
        _fail(exc)
        code = EIO
    fuse_reply_err(req, code)


cdef void _call_and_ack(fuse_req_t req, str name, bint changes, tuple args) noexcept:
    """The handler's method ``name`` called with ``args`` (see ``_py`` for
    ``changes``), then an empty reply (error 0), or the error's."""
    try:
        getattr(_py(changes), name)(*args)
    except BaseException as exc:
        _error(req, exc)
        return
    fuse_reply_err(req, 0)


# -- names known: LOOKUPs of missing names answered here -----------------------------------
# Before every create the kernel looks the new name up (a miss).  The names
# of a directory are kept here, as 64-bit hashes, once a lookup in it has
# missed (the handler's names(node) lists them); a later lookup of a name
# whose hash is not among them is answered "no such name" without a call
# into the handler, and the create that follows tells the handler the name
# is known missing (no second search of the directory).
#
# What is kept is always a superset of the directory's names, never less:
# every request that can add a name (CREATE, MKNOD, MKDIR, SYMLINK, LINK,
# RENAME's new name) adds it here before the handler runs (kept even if the
# handler fails after making it), and nothing else adds names (the
# handler's work left for after an answer only finishes a create already
# added; the timer's checkpoint adds none).
# Removals (UNLINK, RMDIR, RENAME's old name) leave the hash in: a stale or
# colliding hash only sends the lookup to the handler, as without this
# table.  RMDIR drops every table all the same (the directory's node number
# may come back as another file's).  Only "." and "..", and names the
# handler would refuse (empty, longer than 255 bytes), always go to it.
DEF NAME_DIRS = 4096               # directories whose names are kept at most (a power of two)
DEF NAME_DIRS_MAX = 3072           # full: every table dropped, kept again as lookups miss
DEF NAMES_KEPT_MAX = 1 << 20       # names kept in all at most (8 bytes and a slot each)

cdef struct _Names:
    uint64_t node                  # 0: an empty slot
    uint64_t *h                    # the names' hashes, open addressing (0: an empty slot)
    size_t cap                     # slots of h, a power of two (0: the names are not kept)
    size_t n

cdef extern from *:
    """
    #include <pthread.h>
    static pthread_mutex_t fstool_names_mx = PTHREAD_MUTEX_INITIALIZER;
    static __thread int fstool_serial_held;
    """
    ctypedef struct pthread_mutex_t:
        pass
    pthread_mutex_t fstool_names_mx
    int pthread_mutex_lock(pthread_mutex_t *m) nogil
    int pthread_mutex_unlock(pthread_mutex_t *m) nogil
    int fstool_serial_held        # this thread holds the request lock (_serial)

cdef _Names _names[NAME_DIRS]      # fstool_names_mx held for any use
cdef size_t _names_dirs = 0        # slots in use
cdef size_t _names_total = 0       # hashes kept in all
cdef bint _names_on = False        # the handler has names(node)


cdef inline uint64_t _name_hash(const char *name, size_t n) noexcept nogil:
    """FNV-1a, never 0 (an empty slot)."""
    cdef uint64_t h = 0xcbf29ce484222325ULL
    cdef size_t i
    for i in range(n):
        h ^= <unsigned char> name[i]
        h *= 0x100000001b3ULL
    return h if h else 1


cdef void _names_drop() noexcept nogil:
    """Every directory's names forgotten."""
    pthread_mutex_lock(&fstool_names_mx)
    _names_drop_locked()
    pthread_mutex_unlock(&fstool_names_mx)


cdef void _names_drop_locked() noexcept nogil:
    global _names_dirs, _names_total
    cdef size_t i
    if not _names_dirs:
        return
    for i in range(NAME_DIRS):
        free(_names[i].h)
    memset(_names, 0, sizeof(_names))
    _names_dirs = 0
    _names_total = 0


cdef _Names *_names_of(uint64_t node, bint make) noexcept nogil:
    """The slot of directory ``node``; NULL when it has none (with ``make``,
    an empty one is taken for it)."""
    global _names_dirs
    cdef size_t i, k
    cdef _Names *d
    if make and _names_dirs >= NAME_DIRS_MAX:
        _names_drop_locked()
    i = <size_t> ((node * 0x9E3779B97F4A7C15ULL) >> 52)
    for k in range(NAME_DIRS):
        d = &_names[(i + k) & (NAME_DIRS - 1)]
        if d.node == node:
            return d
        if d.node == 0:
            if not make:
                return NULL
            d.node = node
            _names_dirs += 1
            return d
    return NULL


cdef bint _names_has(_Names *d, uint64_t h) noexcept nogil:
    cdef size_t m = d.cap - 1
    cdef size_t i = <size_t> (h * 0x9E3779B97F4A7C15ULL) & m
    while d.h[i]:
        if d.h[i] == h:
            return True
        i = (i + 1) & m
    return False


cdef bint _names_put(_Names *d, uint64_t h) noexcept nogil:
    """Add a hash (at most half the slots in use); False: no memory, or
    too many names kept in all (the caller drops every table)."""
    global _names_total
    cdef size_t i, k, m, cap
    cdef uint64_t *old
    cdef uint64_t *new
    if _names_has(d, h):
        return True
    if (d.n + 1) * 2 > d.cap:
        cap = d.cap * 2
        new = <uint64_t *> calloc(cap, sizeof(uint64_t))
        if new is NULL:
            return False
        old = d.h
        m = cap - 1
        for k in range(d.cap):
            if old[k]:
                i = <size_t> (old[k] * 0x9E3779B97F4A7C15ULL) & m
                while new[i]:
                    i = (i + 1) & m
                new[i] = old[k]
        free(old)
        d.h = new
        d.cap = cap
    m = d.cap - 1
    i = <size_t> (h * 0x9E3779B97F4A7C15ULL) & m
    while d.h[i]:
        i = (i + 1) & m
    d.h[i] = h
    d.n += 1
    _names_total += 1
    return _names_total <= NAMES_KEPT_MAX


cdef bint _names_plain(const char *name, size_t *n) noexcept nogil:
    """A name the kept table can answer for: not "." or "..", 1-255 bytes."""
    n[0] = strlen(name)
    if n[0] == 0 or n[0] > 255:
        return False
    return not (name[0] == b'.' and (n[0] == 1 or (n[0] == 2 and name[1] == b'.')))


cdef bint _known_missing(fuse_ino_t parent, const char *name) noexcept nogil:
    """``name`` is surely not in directory ``parent`` (any thread, with or
    without the interpreter or the request lock)."""
    cdef _Names *d
    cdef size_t n
    cdef uint64_t h
    cdef bint missing = False
    if not _names_on or not _names_plain(name, &n):
        return False
    h = _name_hash(name, n)
    pthread_mutex_lock(&fstool_names_mx)
    d = _names_of(parent, False)
    if d is not NULL and d.cap != 0:
        missing = not _names_has(d, h)
    pthread_mutex_unlock(&fstool_names_mx)
    return missing


cdef void _names_learn(fuse_ino_t parent) noexcept:
    """After a lookup in ``parent`` missed: its names, from the handler,
    kept (or that the handler keeps them from us, noted: it is not asked
    again until every table is dropped)."""
    cdef _Names *d
    cdef size_t cap = 16
    cdef Py_ssize_t count
    cdef bint kept
    if not _names_on:
        return
    pthread_mutex_lock(&fstool_names_mx)
    kept = _names_of(parent, False) is not NULL
    pthread_mutex_unlock(&fstool_names_mx)
    if kept:
        return
    try:
        names = _py(False).names(parent)
        hashes = [_name_hash(<bytes> n, len(<bytes> n)) for n in names] \
            if names is not None else None
    except BaseException as exc:
        _fail(exc)                  # names() never raises: a bug
        return
    # (only this thread changes the tables: it holds the request lock)
    pthread_mutex_lock(&fstool_names_mx)
    d = _names_of(parent, True)
    if d is not NULL and hashes is not None:
        count = len(hashes)
        if _names_total + count <= NAMES_KEPT_MAX:
            while cap < 2 * (<size_t> count + 1):
                cap *= 2
            d.h = <uint64_t *> calloc(cap, sizeof(uint64_t))
            if d.h is not NULL:
                d.cap = cap
                for h in hashes:
                    if not _names_put(d, h):
                        _names_drop_locked()
                        break
    pthread_mutex_unlock(&fstool_names_mx)


cdef void _names_add(fuse_ino_t parent, const char *name) noexcept:
    """``name`` made in ``parent`` (a request's handler has just made it)."""
    cdef _Names *d
    cdef uint64_t h
    if not _names_on:
        return
    h = _name_hash(name, strlen(name))
    pthread_mutex_lock(&fstool_names_mx)
    d = _names_of(parent, False)
    if d is not NULL and d.cap != 0 and not _names_put(d, h):
        _names_drop_locked()
    pthread_mutex_unlock(&fstool_names_mx)


# -- the callbacks (called by fuse_session_process_buf with the GIL held) --------------------
cdef void op_init(void *userdata, fuse_conn_info *conn) noexcept:
    global _init_seen
    _init_seen = True               # on_init once the kernel has the answer
    # readdirplus always (the walk takes names and attributes in one request)
    conn.want &= ~(<unsigned> FUSE_CAP_READDIRPLUS_AUTO)
    if conn.capable & FUSE_CAP_READDIRPLUS:
        conn.want |= FUSE_CAP_READDIRPLUS
    # lookups of "." and ".." (NFS export)
    if conn.capable & FUSE_CAP_EXPORT_SUPPORT:
        conn.want |= FUSE_CAP_EXPORT_SUPPORT
    # file data goes from the image to /dev/fuse by splice where it can
    # (read_map): no copy through the server's memory
    if conn.capable & FUSE_CAP_SPLICE_WRITE:
        conn.want |= FUSE_CAP_SPLICE_WRITE
    if _writeback_cache and conn.capable & FUSE_CAP_WRITEBACK_CACHE:
        conn.want |= FUSE_CAP_WRITEBACK_CACHE
    else:
        conn.want &= ~(<unsigned> FUSE_CAP_WRITEBACK_CACHE)
    # the kernel's cached pages of a file stay when its mtime moves: fstool
    # is the only writer and every change of data comes through the kernel,
    # which keeps its pages true itself (writes go through them, truncate,
    # fallocate and copy_file_range drop what they change).  With libfuse's
    # default (AUTO_INVAL_DATA) every write made the next read ask for the
    # attributes and, the mtime having moved, drop every cached page of the
    # file: a random read/write mix read the same pages again and again
    conn.want &= ~(<unsigned> FUSE_CAP_AUTO_INVAL_DATA)


cdef void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) noexcept nogil:
    # called without the interpreter and without the request lock (_serve)
    cdef fuse_entry_param e
    if _known_missing(parent, name):
        # a negative entry, as _fill_entry makes it for the handler's None
        memset(&e, 0, sizeof(fuse_entry_param))
        e.entry_timeout = _entry_timeout
        fuse_reply_entry(req, &e)
        return
    _lookup_py(req, parent, name)


cdef void _lookup_py(fuse_req_t req, fuse_ino_t parent, const char *name) noexcept with gil:
    """A LOOKUP the handler answers: holding the request lock, as every call
    into it."""
    global fstool_serial_held
    if fstool_serial_held:
        _lookup_locked(req, parent, name)
        return
    try:
        with _serial:
            fstool_serial_held = 1
            try:
                _lookup_locked(req, parent, name)
            finally:
                fstool_serial_held = 0
    except BaseException as exc:
        _fail(exc)


cdef void _lookup_locked(fuse_req_t req, fuse_ino_t parent, const char *name) noexcept:
    cdef fuse_entry_param e
    try:
        a = _py(False).lookup(parent, name)
        _fill_entry(&e, a)
    except BaseException as exc:
        _error(req, exc)
        return
    fuse_reply_entry(req, &e)
    if a is None:
        _names_learn(parent)


cdef void _forget_failed(object exc) noexcept:
    # a forget gets no reply, not even an error: the loop ends
    _fail(exc)


cdef void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) noexcept:
    cdef fuse_forget_data one
    one.ino = ino
    one.nlookup = nlookup
    op_forget_multi(req, 1, &one)


cdef void op_forget_multi(fuse_req_t req, size_t count, fuse_forget_data *f) noexcept:
    cdef size_t i
    try:
        for i in range(count):
            _py(False).forget(f[i].ino, f[i].nlookup)
    except BaseException as exc:
        _forget_failed(exc)
    fuse_reply_none(req)


cdef void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi) noexcept:
    cdef stat st
    try:
        _fill_stat(&st, _py(False).getattr(ino))
    except BaseException as exc:
        _error(req, exc)
        return
    fuse_reply_attr(req, &st, _attr_timeout)


cdef void op_setattr(fuse_req_t req, fuse_ino_t ino, stat *attr, int to_set,
                     fuse_file_info *fi) noexcept:
    cdef stat st
    cdef const fuse_ctx *ctx = fuse_req_ctx(req)
    try:
        kw = {}
        if to_set & FUSE_SET_ATTR_MODE:
            kw["mode"] = attr.st_mode
        if to_set & FUSE_SET_ATTR_UID:
            kw["uid"] = attr.st_uid
        if to_set & FUSE_SET_ATTR_GID:
            kw["gid"] = attr.st_gid
        if to_set & FUSE_SET_ATTR_SIZE:
            kw["size"] = attr.st_size
        if to_set & FUSE_SET_ATTR_ATIME:
            kw["atime_ns"] = attr.st_atim.tv_sec * 1000000000 + attr.st_atim.tv_nsec
        elif to_set & FUSE_SET_ATTR_ATIME_NOW:
            kw["atime_now"] = True
        if to_set & FUSE_SET_ATTR_MTIME:
            kw["mtime_ns"] = attr.st_mtim.tv_sec * 1000000000 + attr.st_mtim.tv_nsec
        elif to_set & FUSE_SET_ATTR_MTIME_NOW:
            kw["mtime_now"] = True
        if fstool_kill_suidgid:
            kw["kill_gid"] = ctx.gid
        kw["caller"] = (ctx.uid, ctx.gid, ctx.pid)
        _fill_stat(&st, _py(True).setattr(ino, **kw))
    except BaseException as exc:
        _error(req, exc)
        return
    fuse_reply_attr(req, &st, _attr_timeout)


cdef void op_readlink(fuse_req_t req, fuse_ino_t ino) noexcept:
    try:
        target = bytes(_py(False).readlink(ino))
    except BaseException as exc:
        _error(req, exc)
        return
    fuse_reply_readlink(req, target)


cdef inline void _reply_new(fuse_req_t req, object a) noexcept:
    cdef fuse_entry_param e
    try:
        _fill_entry(&e, a)
    except BaseException as exc:
        _error(req, exc)
        return
    fuse_reply_entry(req, &e)


cdef void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                   dev_t rdev) noexcept:
    cdef const fuse_ctx *ctx = fuse_req_ctx(req)
    _names_add(parent, name)   # first: kept even if the handler fails after making it
    try:
        a = _py(True).mknod(parent, name, mode, rdev, ctx.uid, ctx.gid)
    except BaseException as exc:
        _error(req, exc)
        return
    _reply_new(req, a)


cdef void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
                   mode_t mode) noexcept:
    cdef const fuse_ctx *ctx = fuse_req_ctx(req)
    _names_add(parent, name)   # first: kept even if the handler fails after making it
    try:
        a = _py(True).mkdir(parent, name, mode, ctx.uid, ctx.gid)
    except BaseException as exc:
        _error(req, exc)
        return
    _reply_new(req, a)


cdef void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
                     const char *name) noexcept:
    cdef const fuse_ctx *ctx = fuse_req_ctx(req)
    _names_add(parent, name)   # first: kept even if the handler fails after making it
    try:
        a = _py(True).symlink(parent, name, link, ctx.uid, ctx.gid)
    except BaseException as exc:
        _error(req, exc)
        return
    _reply_new(req, a)


cdef void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
                  const char *newname) noexcept:
    _names_add(newparent, newname)   # first: kept even if the handler fails after making it
    try:
        a = _py(True).link(ino, newparent, newname)
    except BaseException as exc:
        _error(req, exc)
        return
    _reply_new(req, a)


cdef void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name) noexcept:
    _call_and_ack(req, "unlink", True, (parent, name))


cdef void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name) noexcept:
    _names_drop()                   # the node number may come back as a file's
    _call_and_ack(req, "rmdir", True, (parent, name))


cdef void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
                    fuse_ino_t newparent, const char *newname, unsigned int flags) noexcept:
    _names_add(newparent, newname)   # first: kept even if the handler fails after making it
    try:
        _py(True).rename(parent, name, newparent, newname, flags)
    except BaseException as exc:
        _error(req, exc)
        return
    fuse_reply_err(req, 0)


cdef void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi) noexcept:
    try:
        if fstool_kill_suidgid:
            fi.fh = _py(True).open(ino, fi.flags, fuse_req_ctx(req).gid)
            _mode_news(ino)
        else:
            fi.fh = _py(True).open(ino, fi.flags)
    except BaseException as exc:
        _error(req, exc)
        return
    # fstool is the only writer: the page cache stays valid across opens
    fi.keep_cache = 1
    fuse_reply_open(req, fi)


cdef void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                    fuse_file_info *fi) noexcept:
    cdef fuse_entry_param e
    cdef const fuse_ctx *ctx = fuse_req_ctx(req)
    # known missing (see _known_missing): the handler need not look again
    cdef bint absent = _known_missing(parent, name)
    _names_add(parent, name)   # first: kept even if the handler fails after making it
    try:
        fh, a = _py(True).create(parent, name, mode, fi.flags, ctx.uid, ctx.gid, absent)
        _fill_entry(&e, a)
        fi.fh = fh
    except BaseException as exc:
        _error(req, exc)
        return
    fi.keep_cache = 1
    fuse_reply_create(req, &e, fi)


cdef void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                  fuse_file_info *fi) noexcept:
    cdef const unsigned char[::1] data
    cdef _Fast *f = _fast_get(ino)
    if f is not NULL:
        _fast_read(req, f, size, off)
        return
    if _read_map:
        try:
            segments = _py(False).read_map(fi.fh, off, size)
        except BaseException as exc:
            _error(req, exc)
            return
        if segments is not None:
            _reply_segments(req, segments)
            return
    try:
        data = _py(False).read(fi.fh, off, size)
    except BaseException as exc:
        _error(req, exc)
        return
    if data.shape[0] == 0:
        fuse_reply_buf(req, NULL, 0)
    else:
        fuse_reply_buf(req, <const char *> &data[0], data.shape[0])


cdef void _reply_segments(fuse_req_t req, list segments) noexcept:
    """The reply to a READ from ``segments``, (image offset, length) each, -1
    for zeros (at most the handler's zeros_max): libfuse splices the
    image's pages to the device where it can, else reads them into its own
    buffer."""
    cdef size_t n = len(segments)
    cdef size_t i = 0
    cdef fuse_bufvec *bv
    cdef long long pos
    cdef size_t length
    if n == 0:
        fuse_reply_buf(req, NULL, 0)
        return
    bv = <fuse_bufvec *> malloc(sizeof(fuse_bufvec) + (n - 1) * sizeof(fuse_buf))
    if bv is NULL:
        fuse_reply_err(req, ENOMEM)
        return
    memset(bv, 0, sizeof(fuse_bufvec) + (n - 1) * sizeof(fuse_buf))
    bv.count = n
    try:
        for pos, length in segments:
            bv.buf[i].size = length
            if pos >= 0:
                bv.buf[i].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK | FUSE_BUF_FD_RETRY
                bv.buf[i].fd = _image_fd
                bv.buf[i].pos = pos
            else:
                if length > _zeros_max:
                    raise ValueError("a run of zeros longer than zeros_max")
                bv.buf[i].mem = _zeros
            i += 1
    except BaseException as exc:
        free(bv)
        _error(req, exc)
        return
    # libfuse answers an error of its own reads itself.  The pages are
    # spliced, not moved: moving them into the kernel's cache of the mounted
    # file (SPLICE_MOVE) measured 650 MB/s against 2,450 for a file whose
    # data lies at 4 KiB, not larger, alignment in the image
    fuse_reply_data(req, bv, 0)
    free(bv)


cdef _Fast *_grown(fuse_ino_t node) noexcept:
    """The slot of ``node`` where its size and no_xattrs still hold after
    the handler's own writes of it (nothing else changed since), else NULL."""
    cdef _Fast *f = &_fast[(node * 0x9E3779B97F4A7C15ULL) >> 58]
    if _fast_on and f.node == node and f.grown_epoch == _epoch:
        return f
    return NULL


cdef void _wrote(fuse_ino_t node, uint64_t before, long long end) noexcept:
    """After the handler's write of ``node`` up to ``end``, which found the
    epoch at ``before`` with the slot's size and no_xattrs holding: where
    that write was the only change since (the epoch moved on by one), they
    still hold (a write only grows the size, to at least ``end``, and adds
    no xattr), so the next write past the end of the file goes straight to
    the handler and the kernel's security.capability question before it is
    answered here, without asking the handler for the map again."""
    cdef _Fast *f = &_fast[(node * 0x9E3779B97F4A7C15ULL) >> 58]
    if f.node != node or _epoch != before + 1 or \
            not (f.epoch == before and f.ok or f.grown_epoch == before):
        return
    if end > f.size:
        f.size = end
    f.grown_epoch = _epoch


cdef void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
                   off_t off, fuse_file_info *fi) noexcept:
    # (the fast path's files have nothing a write takes away: see fast_map)
    cdef bint kill = fstool_kill_suidgid
    cdef _Fast *f = _grown(ino)
    cdef uint64_t before
    cdef const fuse_ctx *ctx
    if f is NULL or off < f.size:
        # (a write from the end of the file on cannot be made here)
        f = _fast_get(ino)
        if f is not NULL and _fast_write(req, f, buf, size, off):
            return
    try:
        data = PyBytes_FromStringAndSize(buf, size)
        before = _epoch
        h = _py(True)
        if kill:
            ctx = fuse_req_ctx(req)
            n = h.write(fi.fh, off, data, ctx.gid, (ctx.uid, ctx.gid, ctx.pid))
        else:
            n = h.write(fi.fh, off, data)
        if kill:
            _mode_news(ino)
    except BaseException as exc:
        _error(req, exc)
        return
    _wrote(ino, before, off + <long long> n)
    fuse_reply_write(req, n)


cdef int _mode_news(fuse_ino_t ino) except -1:
    """After a write or an open that may have taken set-user-ID or
    set-group-ID away (FUSE_HANDLE_KILLPRIV_V2): where it did, the kernel's
    copy of the file's attributes is dropped (its answer carries none)."""
    if _handler.privileges_dropped():
        fuse_lowlevel_notify_inval_inode(_se, ino, -1, 0)
    return 0


cdef void op_flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi) noexcept:
    _call_and_ack(req, "flush", False, (fi.fh,))


cdef void op_access(fuse_req_t req, fuse_ino_t ino, int mask) noexcept:
    cdef const fuse_ctx *ctx = fuse_req_ctx(req)
    _call_and_ack(req, "access", False, (ino, mask, ctx.uid, ctx.gid))


cdef void op_release(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi) noexcept:
    _call_and_ack(req, "release", True, (fi.fh,))


cdef void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
                   fuse_file_info *fi) noexcept:
    _call_and_ack(req, "fsync", True, (fi.fh, bool(datasync)))


cdef void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                       fuse_file_info *fi) noexcept:
    cdef const fuse_ctx *ctx = fuse_req_ctx(req)
    try:
        _py(True).fallocate(fi.fh, mode, offset, length, (ctx.uid, ctx.gid, ctx.pid))
        _mode_news(ino)
    except BaseException as exc:
        _error(req, exc)
        return
    fuse_reply_err(req, 0)


cdef void op_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in,
                             fuse_file_info *fi_in, fuse_ino_t ino_out, off_t off_out,
                             fuse_file_info *fi_out, size_t length, int flags) noexcept:
    cdef const fuse_ctx *ctx = fuse_req_ctx(req)
    try:
        n = _py(True).copy_file_range(fi_in.fh, off_in, fi_out.fh, off_out, length, flags,
                                      (ctx.uid, ctx.gid, ctx.pid))
        _mode_news(ino_out)
    except BaseException as exc:
        _error(req, exc)
        return
    fuse_reply_write(req, n)


cdef void op_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
                   fuse_file_info *fi) noexcept:
    try:
        pos = _py(False).lseek(fi.fh, off, whence)
    except BaseException as exc:
        _error(req, exc)
        return
    fuse_reply_lseek(req, pos)


cdef void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi) noexcept:
    try:
        fi.fh = _py(False).opendir(ino)
    except BaseException as exc:
        _error(req, exc)
        return
    fuse_reply_open(req, fi)


cdef class _DirReply:
    """The readdirplus reply being filled: ``add(name, attr, next)`` is
    True while the entry fits."""
    cdef fuse_req_t req
    cdef char *buf
    cdef size_t size
    cdef size_t used

    def add(self, name, a, nxt):
        cdef fuse_entry_param e
        cdef size_t n
        _fill_entry(&e, a)
        n = fuse_add_direntry_plus(self.req, self.buf + self.used, self.size - self.used,
                                   name, &e, nxt)
        if n > self.size - self.used:
            return False
        self.used += n
        return True


cdef void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                         fuse_file_info *fi) noexcept:
    cdef _DirReply r
    try:
        r = _DirReply.__new__(_DirReply)
        r.req = req
        r.size = size
        r.used = 0
        r.buf = <char *> malloc(size if size else 1)
        if r.buf is NULL:
            raise MemoryError()
        try:
            _py(False).readdir(fi.fh, off, r.add)
        except BaseException:
            free(r.buf)
            raise
    except BaseException as exc:
        _error(req, exc)
        return
    fuse_reply_buf(req, r.buf, r.used)
    free(r.buf)


cdef void op_releasedir(fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi) noexcept:
    _call_and_ack(req, "releasedir", True, (fi.fh,))


cdef void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
                      fuse_file_info *fi) noexcept:
    _call_and_ack(req, "fsyncdir", True, (fi.fh, bool(datasync)))


cdef void op_statfs(fuse_req_t req, fuse_ino_t ino) noexcept:
    cdef statvfs st
    memset(&st, 0, sizeof(statvfs))
    try:
        s = _py(False).statfs()
        st.f_bsize = s["f_bsize"]
        st.f_frsize = s["f_frsize"]
        st.f_blocks = s["f_blocks"]
        st.f_bfree = s["f_bfree"]
        st.f_bavail = s["f_bavail"]
        st.f_files = s["f_files"]
        st.f_ffree = s["f_ffree"]
        st.f_favail = s["f_favail"]
        st.f_namemax = s["f_namemax"]
    except BaseException as exc:
        _error(req, exc)
        return
    fuse_reply_statfs(req, &st)


cdef void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                      size_t size, int flags) noexcept:
    _call_and_ack(req, "setxattr", True,
                  (ino, name, PyBytes_FromStringAndSize(value, size), flags))


cdef void _reply_sized(fuse_req_t req, bytes value, size_t size) noexcept:
    """getxattr/listxattr: the length when asked with size 0, the value
    when it fits, else ERANGE."""
    cdef size_t n = len(value)
    if size == 0:
        fuse_reply_xattr(req, n)
    elif n <= size:
        fuse_reply_buf(req, value, n)
    else:
        fuse_reply_err(req, ERANGE)


cdef void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
                      size_t size) noexcept:
    cdef _Fast *f
    if strlen(name) <= 255:
        # the kernel asks for security.capability before every write
        f = _grown(ino)
        if f is NULL:
            f = _fast_get(ino)
        if f is not NULL and f.no_xattrs:
            fuse_reply_err(req, ENODATA)
            return
    try:
        value = bytes(_py(False).getxattr(ino, name))
    except BaseException as exc:
        _error(req, exc)
        return
    _reply_sized(req, value, size)


cdef void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) noexcept:
    try:
        names = bytes(_py(False).listxattr(ino))
    except BaseException as exc:
        _error(req, exc)
        return
    _reply_sized(req, names, size)


cdef void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name) noexcept:
    _call_and_ack(req, "removexattr", True, (ino, name))


def _fuse_error(default):
    """libfuse's last error message, on one line, else ``default``."""
    msg = (<bytes> fstool_fuse_error).decode("utf-8", "replace").strip()
    if msg.startswith("fuse: "):
        msg = msg[6:]
    return " ".join(msg.split()) or default


# -- the session -------------------------------------------------------------------------------
# request-reading threads: with two, one is already reading the next
# request while the other answers, which halves the server's CPU time per
# request against a single thread (mostly its sleeps and wake-ups on
# /dev/fuse) and more than doubles the rate of small requests
WORKERS = 2
# the signal that breaks a worker out of its read of /dev/fuse at the end
WAKE_SIGNAL = _signal.SIGRTMIN + 7
cdef bint _stopping = False        # the workers are told to stop
cdef object _serial = None         # the request lock (run's)
DEF FUSE_LOOKUP = 1                # fuse_in_header's opcode of a LOOKUP
DEF IN_HEADER = 40                 # sizeof(struct fuse_in_header)


cdef inline bint _unlocked(fuse_buf *buf) noexcept nogil:
    """A request answered without the interpreter or the request lock
    first: a LOOKUP (op_lookup takes both only when it needs the handler)."""
    return not (buf.flags & FUSE_BUF_IS_FD) and buf.size >= IN_HEADER and \
        (<uint32_t *> buf.mem)[1] == FUSE_LOOKUP
cdef bint _ended = False            # fstool ended the session (exit(), a failure)


def _no_op(_sig, _frame):
    pass


def _serve(serial, int wfd):
    """A worker: read a request (the interpreter let go), then answer it
    holding ``serial``; until the session ends, the kernel ends the
    connection, reading fails or the loop is told to stop.  Every signal
    but WAKE_SIGNAL is left to the main thread."""
    global _gone, fstool_serial_held, fstool_kill_suidgid
    cdef fuse_buf buf
    cdef int res
    _signal.pthread_sigmask(_signal.SIG_BLOCK, set(_signal.valid_signals()) - {WAKE_SIGNAL})
    memset(&buf, 0, sizeof(fuse_buf))
    try:
        while not _stopping and not fuse_session_exited(_se):
            with nogil:
                res = fuse_session_receive_buf(_se, &buf)
                # lookups answered meanwhile while the other worker holds
                # the lock (its create, say), the interpreter not taken
                while res > 0 and _unlocked(&buf):
                    fuse_session_process_buf(_se, &buf)
                    if _stopping or fuse_session_exited(_se):
                        res = -EINTR
                        break
                    res = fuse_session_receive_buf(_se, &buf)
            if res == -EINTR or res == -EAGAIN:
                continue
            if res < 0:
                _fail(OSError(-res, "reading /dev/fuse"))
                break
            if res == 0:
                # the session ended: libfuse ends it itself only when the
                # kernel has ended the connection (unmounted)
                _gone = not _ended
                break
            with serial:
                fstool_serial_held = 1
                try:
                    fstool_kill_suidgid = 0      # (a spliced request is not peeked)
                    if not buf.flags & FUSE_BUF_IS_FD:
                        fstool_peek(<const char *> buf.mem, <size_t> res)
                    fuse_session_process_buf(_se, &buf)
                    if _init_seen:
                        _after_init()
                    if _later:
                        _py(True).run_later()
                finally:
                    fstool_serial_held = 0
    except BaseException as exc:
        _fail(exc)                  # raised by run()
    finally:
        free(buf.mem)
        try:
            _os.write(wfd, b"x")
        except OSError:
            pass


cdef int _after_init() except -1:
    """run()'s on_init, once INIT is answered: the kernel has set up the
    connection from the answer (what the server may change of it after,
    such as the mount's read-ahead, it would not undo)."""
    global _init_seen
    _init_seen = False
    if _on_init is not None:
        _on_init()
    return 0


cdef void _fail(object exc) noexcept:
    global _failure
    if _failure is None:
        _failure = exc
    _end()


cdef void _end() noexcept:
    global _ended
    _ended = True
    if _se is not NULL:
        fuse_session_exit(_se)


cdef void _end_fast() noexcept:
    """The fast path's last writes handed over, its maps dropped (the loop
    has stopped; the handler then writes its last checkpoint)."""
    global _fast_on
    if _handler is not None and (_pending or _unreported):
        try:
            _handover()
        except BaseException as exc:
            _fail(exc)
    _fast_clear()
    _fast_on = False


def _stop_workers(threads):
    """Have every worker stop after the request it is answering: each is
    sent WAKE_SIGNAL (its read returns EINTR) until it ends, again and
    again, as one may arrive just before the worker goes back to reading."""
    global _stopping
    _stopping = True
    for t in threads:
        while t.is_alive():
            if t.ident is not None:
                try:
                    _signal.pthread_kill(t.ident, WAKE_SIGNAL)
                except (ProcessLookupError, OSError):
                    pass
            t.join(0.05)


class Session:
    """See the module docstring."""

    def __init__(self, handler, options):
        global _handler, _se, _entry_timeout, _attr_timeout, _writeback_cache, _failure
        global _mounted, _gone, _ended, _later, _read_map, _image_fd, _zeros, _zeros_max
        global _fast_on, _write_hit, _names_on
        global _blocklog, _agblklog, _agblocks, _agcount, _image_start, _image_bytes
        cdef fuse_args args
        if _se is not NULL:
            raise RuntimeError("a FUSE session is already open in this process")
        _handler = handler
        _later = getattr(handler, "later", None)
        if _later is not None:
            handler.answer_first = True
        _fast_clear()
        _names_drop()
        # lookups of missing names answered here (see _known_missing)
        _names_on = hasattr(handler, "names")
        _read_map = hasattr(handler, "read_map")
        # reads and overwrites of regular files answered here (see _fast_get)
        _fast_on = _read_map and hasattr(handler, "fast_map")
        _write_hit = getattr(handler, "write_hit", None) if _fast_on else None
        if _fast_on:
            handler.drop_maps = _drop_maps
            _blocklog, _agblklog, _agblocks, _agcount, _image_start, _image_bytes = \
                handler.fast_geometry
        if _read_map:
            _image_fd = handler.image_fd
            if _zeros is NULL or _zeros_max != handler.zeros_max:
                free(_zeros)
                _zeros_max = handler.zeros_max
                _zeros = <char *> calloc(_zeros_max, 1)
                if _zeros is NULL:
                    raise MemoryError()
        _entry_timeout = handler.entry_timeout
        _attr_timeout = handler.attr_timeout
        _writeback_cache = bool(handler.writeback_cache)
        _failure = None
        _mounted = _gone = _ended = False
        memset(&_ops, 0, sizeof(fuse_lowlevel_ops))
        _ops.init = op_init
        _ops.lookup = op_lookup
        _ops.forget = op_forget
        _ops.forget_multi = op_forget_multi
        _ops.getattr = op_getattr
        _ops.setattr = op_setattr
        _ops.readlink = op_readlink
        _ops.mknod = op_mknod
        _ops.mkdir = op_mkdir
        _ops.unlink = op_unlink
        _ops.rmdir = op_rmdir
        _ops.symlink = op_symlink
        _ops.rename = op_rename
        _ops.link = op_link
        _ops.open = op_open
        _ops.read = op_read
        _ops.write = op_write
        _ops.flush = op_flush
        _ops.release = op_release
        _ops.access = op_access
        _ops.fsync = op_fsync
        _ops.fallocate = op_fallocate
        _ops.copy_file_range = op_copy_file_range
        _ops.lseek = op_lseek
        _ops.opendir = op_opendir
        _ops.readdirplus = op_readdirplus
        _ops.releasedir = op_releasedir
        _ops.fsyncdir = op_fsyncdir
        _ops.statfs = op_statfs
        _ops.setxattr = op_setxattr
        _ops.getxattr = op_getxattr
        _ops.listxattr = op_listxattr
        _ops.removexattr = op_removexattr
        _ops.create = op_create

        memset(&args, 0, sizeof(fuse_args))
        argv = [b"fstool"]
        for o in options:
            argv += [b"-o", o.encode() if isinstance(o, str) else bytes(o)]
        for a in argv:
            if fuse_opt_add_arg(&args, a) != 0:
                fuse_opt_free_args(&args)
                raise MemoryError()
        fstool_fuse_log_capture(1)
        _se = fuse_session_new(&args, &_ops, sizeof(fuse_lowlevel_ops), NULL)
        fstool_fuse_log_capture(0)
        fuse_opt_free_args(&args)
        if _se is NULL:
            _handler = _later = None
            raise RuntimeError(_fuse_error("fuse_session_new() failed"))

    def mount(self, mountpoint):
        global _mounted, fstool_v2_want
        cdef int res
        if isinstance(mountpoint, str):
            mountpoint = mountpoint.encode()
        fstool_fuse_log_capture(1)
        res = fuse_session_mount(_se, mountpoint)
        fstool_fuse_log_capture(0)
        if res != 0:
            raise RuntimeError(_fuse_error("fuse_session_mount() failed"))
        _mounted = True
        # FUSE_HANDLE_KILLPRIV_V2 where the handler keeps its promise
        # (kill_privileges) and the kernel offers it (see fuseloop.h)
        fstool_v2_want = bool(getattr(_handler, "kill_privileges", False))
        if fstool_v2_want:
            fstool_use_own_io(_se)

    @property
    def killpriv_v2(self):
        """FUSE_HANDLE_KILLPRIV_V2 was negotiated (known once INIT is answered)."""
        return bool(fstool_v2_on)

    def exit(self):
        """End the loop after the request at hand (signal handlers call it)."""
        _end()

    def run(self, double every=0, tick=None, int workers=WORKERS, on_init=None):
        """Serve until unmounted or ``exit()``; ``tick()`` every ``every``
        seconds (0: never); ``on_init()`` once the kernel's INIT is
        answered (holding the lock; an exception ends the loop).  ``workers`` threads read requests and answer
        them one at a time (never two handlers at once: a lock, which the
        tick takes too); this thread keeps the timer and the signals.
        Returns once every worker has stopped."""
        global _failure, _stopping, _on_init, _init_seen, _serial
        import threading
        cdef pollfd pfd
        cdef int res, timeout_ms
        cdef double now, due
        serial = _serial = threading.Lock()
        rfd, wfd = _os.pipe()
        # kept for good: a wake signal still on its way to a worker that is
        # ending must never meet the default action (the process killed)
        _signal.signal(WAKE_SIGNAL, _no_op)
        threads = [threading.Thread(target=_serve, args=(serial, wfd),
                                    name=f"fstool-fuse-{k}", daemon=True)
                   for k in range(max(1, workers))]
        pfd.fd = rfd
        pfd.events = POLLIN
        monotonic = _time.monotonic
        due = monotonic() + every if every > 0 else 0
        _on_init = on_init
        _init_seen = False
        try:
            _stopping = False
            for t in threads:
                t.start()
            while not fuse_session_exited(_se):
                # at most 1 s asleep: a signal taken by another thread (the
                # image's writeback thread) leaves this poll alone
                timeout_ms = 1000
                if due:
                    now = monotonic()
                    if now >= due:
                        with serial:
                            _py(True)
                            tick()
                        due = monotonic() + every
                        continue
                    if due - now < 1.0:
                        timeout_ms = <int> ((due - now) * 1000) + 1
                with nogil:
                    res = poll(&pfd, 1, timeout_ms)
                if res < 0:
                    if errno == EINTR:
                        PyErr_CheckSignals()      # runs the Python handlers
                        continue
                    raise OSError(errno, "poll")
                if res == 0:
                    PyErr_CheckSignals()
                    continue
                break                             # a worker has stopped
        finally:
            _stop_workers(threads)
            _on_init = None
            _os.close(rfd)
            _os.close(wfd)
            _end_fast()
        if _failure is not None:
            exc, _failure = _failure, None
            raise exc

    def close(self):
        """Unmount unless the kernel already has, and free the session."""
        global _se, _handler, _mounted, _later
        if _se is NULL:
            return
        if _mounted and not _gone:
            fuse_session_unmount(_se)
        fuse_session_destroy(_se)
        _se = NULL
        _end_fast()
        _names_drop()
        _handler = _later = None
        _mounted = False
