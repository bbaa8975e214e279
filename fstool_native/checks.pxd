# C-level declarations for checks.py when Cython compiles it.
cdef unsigned long long _M32
