"""The few names of Cython's pure-Python mode that parsers.py uses, as no-ops,
for running the pure backend where Cython is not installed."""
compiled = False


class _CType(type):
    """A C type: ``T[:]`` (a typed memoryview in compiled code) is T again."""
    def __getitem__(cls, _item):
        return cls


def _ctype(name, base):
    return _CType(name, (base,), {})


uint = _ctype("uint", int)
ulonglong = _ctype("ulonglong", int)
longlong = _ctype("longlong", int)
uchar = _ctype("uchar", int)
bint = _ctype("bint", int)
int = _ctype("int", int)
Py_ssize_t = _ctype("Py_ssize_t", int)
p_uchar = bytes
p_char = bytes
p_void = object
p_int = object
p_longlong = object
p_ulonglong = object
pp_char = object
NULL = None


class _NoGil:
    """``with cython.nogil:`` (only in compiled branches)."""
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


nogil = _NoGil()


def address(x):
    return x


def sizeof(_type):
    return 8


def cast(_type, x):
    return x


def cfunc(f):
    return f


def ccall(f):
    return f


def locals(**_types):
    return lambda f: f


def returns(_type):
    return lambda f: f


def exceptval(*_a, **_k):
    return lambda f: f


def inline(f):
    return f
