# C-level declarations for writers.py when Cython compiles it.
cimport cython
from posix.stat cimport struct_stat, fstatat
from posix.fcntl cimport AT_SYMLINK_NOFOLLOW

cdef extern from "<sys/xattr.h>" nogil:
    ssize_t llistxattr(const char *path, char *buf, size_t size)


@cython.locals(st=struct_stat, k=cython.Py_ssize_t, n=cython.Py_ssize_t, rc=cython.int,
               xl=cython.Py_ssize_t, cname=cython.p_char, cpath=cython.p_char,
               fmt=cython.uint, asec=cython.longlong, msec=cython.longlong)
cpdef list stat_plain_files(int dirfd, bytes dirpath, list names)
