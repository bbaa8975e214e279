"""Build hook: compile fstool_native's pure-Python-mode sources with Cython.

The same .py files are the pure-Python backend; when a C compiler or Cython
is missing the package still installs and runs on that backend.  The FUSE
request loop (fstool_native/fuseloop.pyx) is built only where pkg-config
finds libfuse3's development files; without it ``fstool mount`` uses pyfuse3.
"""
import os
import subprocess
import sys

from setuptools import Extension, setup

NATIVE_SOURCES = ["fstool_native/parsers.py", "fstool_native/writers.py",
                  "fstool_native/checks.py"]


def fuse3_flags():
    """(include dirs, library dirs, libraries) of libfuse3, or None."""
    try:
        out = subprocess.run(["pkg-config", "--cflags", "--libs", "fuse3"],
                             capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return None
    return ([f[2:] for f in out if f.startswith("-I")],
            [f[2:] for f in out if f.startswith("-L")],
            [f[2:] for f in out if f.startswith("-l")])


def native_extensions():
    if os.environ.get("FSTOOL_NO_NATIVE"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("fstool: Cython not available; installing the pure-Python backend only",
              file=sys.stderr)
        return []
    sources = list(NATIVE_SOURCES)
    fuse = fuse3_flags()
    if fuse is None:
        print("fstool: libfuse3 development files not found (pkg-config fuse3); "
              "fstool mount will use pyfuse3", file=sys.stderr)
    else:
        inc, libdirs, libs = fuse
        sources.append(Extension("fstool_native.fuseloop", ["fstool_native/fuseloop.pyx"],
                                 include_dirs=inc + ["fstool_native"],
                                 library_dirs=libdirs, libraries=libs))
    return cythonize(
        sources,
        language_level=3,
        compiler_directives={
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
        },
    )


def man_pages():
    """The manual pages (man/, generated from the click definitions by
    ``python -m fstool.cli.manpages``), installed into share/man/man1."""
    here = os.path.dirname(os.path.abspath(__file__))
    pages = sorted(os.path.join("man", f) for f in os.listdir(os.path.join(here, "man"))
                   if f.endswith(".1")) if os.path.isdir(os.path.join(here, "man")) else []
    return [("share/man/man1", pages)] if pages else []


setup(ext_modules=native_extensions(), data_files=man_pages())
