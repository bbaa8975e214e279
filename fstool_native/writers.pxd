# C-level declarations for writers.py when Cython compiles it.
cimport cython
from libc.stdlib cimport malloc, free
# big-endian readers, parsers.py's
from fstool_native.parsers cimport _be16, _be32, _hash_lower

cdef extern from "read_files.h":
    void fstool_read_files(int dirfd, const int *dirfds, char **names, const long long *sizes,
                           const long long *offs, unsigned char *buf, size_t n,
                           int *errs, int *fds) nogil

# lstat, readlink and the xattr question of scan_names for a whole directory
# (listxattrat(2) where the kernel has it, else llistxattr(2) on the full
# path built in pathbuf), with the interpreter let go
cdef extern from "stat_plain.h":
    struct fstool_plain:
        int plain, redo, err, terr
        unsigned int mode, uid, gid
        unsigned long long nlink, dev, ino, rdev
        long long atime_ns, mtime_ns, ctime_ns, size, blocks, xlen
        char *target
        long long tlen
    void fstool_stat_plain(int dirfd, char **names, size_t n, const char *dirpath,
                           size_t dirlen, char *pathbuf, long long small, int general,
                           fstool_plain *out) nogil
ctypedef fstool_plain *plain_p


@cython.locals(k=cython.Py_ssize_t, n=cython.Py_ssize_t, cnames=cython.pp_char,
               cdir=cython.p_char, cbuf=cython.p_char, dirlen=cython.size_t,
               longest=cython.Py_ssize_t, res=plain_p, o=fstool_plain, g=cython.int)
cpdef tuple scan_names(int dirfd, bytes dirpath, list names, long long small, bint general)
cpdef list stat_plain_files(int dirfd, bytes dirpath, list names, long long small=*)


@cython.locals(k=cython.Py_ssize_t, n=cython.Py_ssize_t, p=cython.p_uchar,
               cnames=cython.pp_char, csizes=cython.p_longlong, coffs=cython.p_longlong,
               errs=cython.p_int, cfds=cython.p_int, cdirs=cython.p_int)
cpdef tuple read_files(int dirfd, list names, list sizes, bytearray buf, list offsets,
                       list dirfds=*)
