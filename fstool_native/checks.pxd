# C-level declarations for checks.py when Cython compiles it.
cdef unsigned long long _M32
cdef long long _BIG
from fstool_native.parsers cimport _be16, _be32
