"""Native (Cython-compiled) parsers for fstool, with the same source as the
pure-Python fallback.  Depends on nothing in fstool.

``load(pure=False)`` returns the compiled module when it was built, else the
source module; ``load(pure=True)`` always returns the source module, even
beside a compiled one, so both can be tested against each other.
"""
import importlib
import importlib.util
import os
import sys

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "parsers.py")
_PURE_NAME = "fstool_native._parsers_pure"


def _load_source():
    mod = sys.modules.get(_PURE_NAME)
    if mod is None:
        spec = importlib.util.spec_from_file_location(_PURE_NAME, _SOURCE)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        sys.modules[_PURE_NAME] = mod
    return mod


def is_native(module) -> bool:
    """True when ``module`` is the compiled extension."""
    f = getattr(module, "__file__", "") or ""
    return not f.endswith(".py")


def load(pure: bool = False):
    if pure:
        return _load_source()
    mod = importlib.import_module("fstool_native.parsers")
    return mod
