# C-level declarations for parsers.py when Cython compiles it.
cdef unsigned int _T[2048]
# 64-bit constants of the leaf-entry mix, as C values so that arithmetic on
# them stays in C (a Python-level global would make every step a Python op)
cdef unsigned long long _MASK64, _MIX1, _MIX2
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

# the CPU's CRC-32C instruction, where there is one (crc32c_hw.h)
cdef extern from "crc32c_hw.h":
    int fstool_crc32c_hw_available()
    unsigned int fstool_crc32c_hw(unsigned int crc, const unsigned char *p, size_t n)

cdef int _HW_CRC

# the decoded core of an inode (parsers.InodeCore); fstool.fs.inode.Inode
# extends it in Python
cdef class InodeCore:
    cdef public object fs, raw, _core, _extents, _aextents
    cdef public unsigned long long ino, size, flags2
    cdef public unsigned int mode, nlink, uid, gid
    cdef public int format, forkoff, aformat

# the core of fstool.fs.osapi.ImageDirEntry (parsers.DirEntryCore)
cdef class DirEntryCore:
    cdef public object _fs, name, path, _ino, _node, _lstat, _stat
    cdef public unsigned int _ifmt

# the core of fstool.fs.osapi.FileReader (parsers.FileReaderCore)
cdef class FileReaderCore:
    cdef public object node, pos, name
    cdef public bint _open
