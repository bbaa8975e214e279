# C-level declarations for parsers.py when Cython compiles it.
cdef unsigned int _T[2048]
