"""Build hook: compile fstool_native's pure-Python-mode sources with Cython.

The same .py files are the pure-Python backend; when a C compiler or Cython
is missing the package still installs and runs on that backend.
"""
import os
import sys

from setuptools import setup

NATIVE_SOURCES = ["fstool_native/parsers.py", "fstool_native/writers.py",
                  "fstool_native/checks.py"]


def native_extensions():
    if os.environ.get("FSTOOL_NO_NATIVE"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("fstool: Cython not available; installing the pure-Python backend only",
              file=sys.stderr)
        return []
    return cythonize(
        NATIVE_SOURCES,
        language_level=3,
        compiler_directives={
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
        },
    )


setup(ext_modules=native_extensions())
