"""The few names of Cython's pure-Python mode that parsers.py uses, as no-ops,
for running the pure backend where Cython is not installed."""
compiled = False
uint = int
ulonglong = int
bint = bool
int = int
Py_ssize_t = int
p_uchar = bytes


def cfunc(f):
    return f


def locals(**_types):
    return lambda f: f


def returns(_type):
    return lambda f: f
