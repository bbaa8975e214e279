# C-level declarations for writers.py when Cython compiles it.
cimport cython
from posix.stat cimport struct_stat, fstatat
from posix.fcntl cimport AT_SYMLINK_NOFOLLOW
from libc.stdlib cimport malloc, free

cdef extern from "read_files.h":
    void fstool_read_files(int dirfd, char **names, const long long *sizes,
                           const long long *offs, unsigned char *buf, size_t n,
                           int *errs, int *fds) nogil

# has a directory entry xattrs: listxattrat(2) where the kernel has it, else
# llistxattr(2) on the full path built in buf
cdef extern from "xattr_at.h":
    ssize_t fstool_xattr_names_len(int dirfd, const char *name, const char *dirpath,
                                   size_t dirlen, char *buf)


@cython.locals(st=struct_stat, k=cython.Py_ssize_t, n=cython.Py_ssize_t, rc=cython.int,
               xl=cython.Py_ssize_t, cname=cython.p_char, cdir=cython.p_char,
               cbuf=cython.p_char, dirlen=cython.size_t, longest=cython.Py_ssize_t,
               fmt=cython.uint, asec=cython.longlong, msec=cython.longlong)
cpdef list stat_plain_files(int dirfd, bytes dirpath, list names, long long small=*)


@cython.locals(k=cython.Py_ssize_t, n=cython.Py_ssize_t, p=cython.p_uchar,
               cnames=cython.pp_char, csizes=cython.p_longlong, coffs=cython.p_longlong,
               errs=cython.p_int, cfds=cython.p_int)
cpdef tuple read_files(int dirfd, list names, list sizes, bytearray buf, list offsets)
