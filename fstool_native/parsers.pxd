# C-level declarations for parsers.py when Cython compiles it.
cdef unsigned int _T[2048]
# 64-bit constants of the leaf-entry mix, as C values so that arithmetic on
# them stays in C (a Python-level global would make every step a Python op)
cdef unsigned long long _MASK64, _MIX1, _MIX2

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
