"""Selects the parser backend: the compiled fstool_native module or its pure twin.

Both come from one source (fstool_native/parsers.py, compiled by Cython when
available).  Set FSTOOL_PURE_PYTHON=1 to force the pure-Python backend.
"""
import os

import fstool_native

FORCE_PURE = os.environ.get("FSTOOL_PURE_PYTHON", "") not in ("", "0")
parsers = fstool_native.load(pure=FORCE_PURE)
writers = fstool_native.load(pure=FORCE_PURE, name="writers")
checks = fstool_native.load(pure=FORCE_PURE, name="checks")
NAME = "native" if fstool_native.is_native(parsers) else "pure-python"
