"""Selects the parser backend: the compiled fstool_native module or its pure twin.

Both come from one source (fstool_native/parsers.py, compiled by Cython when
available).  Set FSTOOL_PURE_PYTHON=1 to force the pure-Python backend.
"""
import os

import fstool_native

FORCE_PURE = os.environ.get("FSTOOL_PURE_PYTHON", "") not in ("", "0")
parsers = fstool_native.load(pure=FORCE_PURE)
NAME = "native" if fstool_native.is_native(parsers) else "pure-python"


def __getattr__(name: str):
    """``writers`` and ``checks``, loaded on first use: a command that only
    reads needs neither, and loading them is part of its start-up."""
    if name in ("writers", "checks"):
        mod = globals()[name] = fstool_native.load(pure=FORCE_PURE, name=name)
        return mod
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
