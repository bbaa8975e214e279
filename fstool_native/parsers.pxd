# C-level declarations for parsers.py when Cython compiles it.
cdef unsigned int _T[2048]
# 64-bit constants of the leaf-entry mix, as C values so that arithmetic on
# them stays in C (a Python-level global would make every step a Python op)
cdef unsigned long long _MASK64, _MIX1, _MIX2
cdef unsigned int _M32
cdef unsigned long long _DIR_SIZE_MAX
# attr entry flags (the namespace bits, the parent namespace, incomplete)
cdef int _ATTR_NSP_MASK, _ATTR_PARENT, _ATTR_INCOMPLETE

# big-endian readers, shared with checks.py
cdef unsigned int _be16(unsigned char *p, Py_ssize_t off) noexcept
cdef unsigned int _be32(unsigned char *p, Py_ssize_t off) noexcept
# the binary search of hash_lower_bound, shared with writers.py
cdef Py_ssize_t _hash_lower(unsigned char *p, Py_ssize_t base, Py_ssize_t n,
                            unsigned int h) noexcept
# a CRC32c stored little-endian at off over [start, end), shared with checks.py
cdef bint _cksum_region_ok(unsigned char *p, Py_ssize_t start, Py_ssize_t end,
                           Py_ssize_t off) noexcept
# the bigtime epoch's offset in nanoseconds (parsers._timestamp_ns)
cdef long long _BIGTIME_OFF

from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING

# objects that cannot take part in a reference cycle are taken off the
# garbage collector's lists (see _untrack)
cdef extern from "Python.h":
    void PyObject_GC_UnTrack(void *op)

# os.stat_result made and filled directly (see _make_stat)
from cpython.object cimport PyTypeObject
from cpython.ref cimport Py_INCREF
cdef extern from "Python.h":
    object PyStructSequence_New(PyTypeObject *type)
    void PyStructSequence_SET_ITEM(object p, Py_ssize_t pos, object o)
ctypedef PyTypeObject *type_p
from posix.unistd cimport pread
from libc.string cimport memcpy

# the CPU's CRC-32C instruction, where there is one (crc32c_hw.h)
cdef extern from "crc32c_hw.h":
    int fstool_crc32c_hw_available()
    unsigned int fstool_crc32c_hw(unsigned int crc, const unsigned char *p, size_t n)
    void fstool_cksum3_hw(const unsigned char *p0, const unsigned char *p1,
                          const unsigned char *p2, size_t n, size_t off, unsigned int *out)

cdef int _HW_CRC

# the decoded core of an inode (parsers.InodeCore); fstool.fs.inode.Inode
# extends it in Python
cdef class InodeCore:
    cdef public object fs, raw, _core, _extents, _aextents
    cdef public unsigned long long ino, size, flags2
    cdef public unsigned int mode, nlink, uid, gid
    cdef public int format, forkoff, aformat

# log recovery (parsers.LogItem, LogReassembler, LiteItem, ItemReplayer)
cdef class LogItem:
    cdef public list regions
    cdef public Py_ssize_t total

cdef class LogReassembler:
    cdef public dict open
    cdef public Py_ssize_t unmounts, nbytes
    cdef public object new_trans, names
    cdef public unsigned int f_start, f_end, f_wascont, f_cont, f_commit, f_unmount
    cdef public Py_ssize_t th_size, max_regions
    cdef public unsigned int th_magic
    cdef _add(self, list entry, object region)
    cdef _add_cont(self, list entry, object data)

cdef class LiteItem:
    cdef public object type, map, ilf_u
    cdef public unsigned int type_code, flags, map_size, blf_type, fields, asize, dsize
    cdef public long long blkno, len, boffset
    cdef public unsigned long long ino
    cdef public bint cancel, inode_buf

cdef class ItemReplayer:
    cdef public int c_buf, c_inode, blf_hdr, datamap, blf_cancel, blf_inode_buf
    cdef public int blft_mask, blft_shift, ilf64, ilf32, owner, ilog_dev
    cdef public unsigned int dfork, ddata, dext, dbroot, afork, adata, aext, abroot
    cdef public Py_ssize_t ldi_size, ldi_v2, core_size, lblock_len
    cdef public bytes swap, uuid
    cdef public Py_ssize_t o_atime, o_mtime, o_ctime, o_crtime, o_next, o_crc, o_lsn
    cdef public Py_ssize_t o_flags2, o_version, o_mode, o_format, o_forkoff, o_bignext
    cdef public Py_ssize_t o_next_ext, o_anext, o_nblocks
    cdef public long long dev_bb, agcount
    cdef public Py_ssize_t isize, inodelog, agino_log, inopblog
    cdef public list ag_len
    cdef public unsigned long long bigtime, nrext64
    cdef object _lite(self, object regions)
    cdef object _inode(self, object buf, Py_ssize_t boff, LiteItem d, object regions,
                       unsigned long long lsn)

# the core of fstool.fs.osapi.ImageDirEntry (parsers.DirEntryCore)
cdef class DirEntryCore:
    cdef public object _fs, name, path, _ino, _node, _lstat, _stat
    cdef public unsigned int _ifmt

# the core of fstool.fs.osapi.FileReader (parsers.FileReaderCore)
cdef class FileReaderCore:
    cdef public object node, pos, name
    cdef public bint _open

# growable flat record arrays (check's claims and reverse mappings)
from cpython.array cimport array
from cpython cimport array as cpy_array
cdef object _push3(array arr, long long a, long long b, long long c)
cdef object _push4(array arr, unsigned long long a, unsigned long long b,
                   unsigned long long c, unsigned long long d)
cdef object _grow(array arr, Py_ssize_t n)
cdef object _trim(array arr, Py_ssize_t n)
# an inode table's slot of an inode (check's namespace kernels in checks.py)
cdef Py_ssize_t _find_slot(unsigned long long[:] starts, unsigned long long ino) noexcept
# a shortform directory's tally (sf_dir_tally), its arguments checked and
# typed by the caller (checks.ShortformRun)
cdef object _sf_tally(object raw, unsigned long long ino, object uuid, bint has_ftype,
                      Py_ssize_t dirblksize, Py_ssize_t data_first,
                      unsigned long long rootino, int agino_log, unsigned long long agcount,
                      unsigned long long agino_lo, unsigned long long[:] agino_hi,
                      unsigned long long[:] not_dirents, unsigned long long[:] starts,
                      unsigned char[:] itype, unsigned int[:] refs,
                      unsigned long long[:] ps, bint has_ps)

# the parent pointers and paths of many inodes (fstool path)
cdef class PathTable:
    cdef public unsigned long long root
    cdef public object gen_of, parents_of, errors, index
    cdef public list broken
    cdef public dict dirs, memo, prefixes
    cdef public array recs, pps
    cdef public bytearray names, out
    cdef public Py_ssize_t nused, count, pos
    cdef Py_ssize_t _put_name(self, unsigned char *p, Py_ssize_t start, Py_ssize_t n) except -1
    cdef object _add_record(self, unsigned long long ino, unsigned long long gen, bint isdir,
                            Py_ssize_t first, Py_ssize_t n)
    cpdef list add_chunk(self, const unsigned char[::1] chunk, Py_ssize_t base,
                         Py_ssize_t inodesize, unsigned long long first_ino,
                         unsigned long long free, unsigned long long holemask)
    cdef Py_ssize_t _add_sf(self, unsigned char *p, Py_ssize_t start, unsigned long long *P,
                            Py_ssize_t npp, unsigned char *N) except -1
    cdef object _gen(self, unsigned long long d)
    cdef int _reserve(self, Py_ssize_t n) except -1
    cdef int _flush(self, object write) except -1
    cdef int _line(self, unsigned long long ino, unsigned char *pre, Py_ssize_t nb,
                   unsigned char *p, Py_ssize_t a, Py_ssize_t n) except -1
# render's buffer size before it hands the text on; its digit tables
cdef Py_ssize_t _FLUSH_AT
cdef bytes _DIGITS2, _HEX

# mdrestore (parsers.md2_restore): extents written straight from the dump's mapping
from posix.uio cimport iovec, pwritev
from libc.errno cimport errno, EINTR, EIO
from libc.string cimport strerror
cdef unsigned long long _XME_DADDR_MASK
cdef int _XME_DEV_SHIFT, _IOV_MAX
cdef iovec _md_iov[1024]
cpdef tuple md2_restore(const unsigned char[::1] buf, Py_ssize_t start, Py_ssize_t pos,
                        Py_ssize_t size, int fd, int lfd, unsigned char[::1] primary,
                        Py_ssize_t big)
