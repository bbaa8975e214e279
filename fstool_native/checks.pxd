# C-level declarations for checks.py when Cython compiles it.
cdef unsigned long long _M32
cdef long long _BIG
from fstool_native.parsers cimport _be16, _be32, _push4, _find_slot, _sf_tally, \
    _cksum_region_ok
from cpython.array cimport array
from cpython cimport array as cpy_array

# record sorting (records.h)
cdef extern from "records.h":
    int fstool_sort_records(unsigned long long *p, size_t n, size_t w, int is_signed) nogil
cdef unsigned long long _FLAGS, _BMBT, _U64, _UNWRITTEN, _RMAP_OFF_MASK

# the namespace phase's loop over the sound shortform directories
cdef class ShortformRun:
    cdef object uuid, edges
    cdef bint has_ftype, has_ps
    cdef Py_ssize_t dirblksize, data_first
    cdef unsigned long long rootino, agcount, agino_lo, root
    cdef int agino_log
    cdef unsigned long long[:] agino_hi, not_dirents, starts, ps, parent
    cdef unsigned char[:] itype
    cdef unsigned int[:] refs, subdirs
