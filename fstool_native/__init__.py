"""Native (Cython-compiled) parsers and encoders for fstool, with the same
source as the pure-Python fallback.  Depends on nothing in fstool.

``load(pure=False)`` returns the compiled module when it was built, else the
source module; ``load(pure=True)`` always returns the source module, even
beside a compiled one, so both can be tested against each other.  ``name``
picks the module: ``"parsers"`` (the default), ``"writers"`` or ``"checks"``.
"""
import importlib
import importlib.util
import os
import sys

_DIR = os.path.dirname(os.path.abspath(__file__))


def _load_source(name="parsers"):
    pure_name = f"fstool_native._{name}_pure"
    mod = sys.modules.get(pure_name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(pure_name,
                                                      os.path.join(_DIR, name + ".py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        sys.modules[pure_name] = mod
    return mod


def is_native(module) -> bool:
    """True when ``module`` is the compiled extension."""
    f = getattr(module, "__file__", "") or ""
    return not f.endswith(".py")


def load(pure: bool = False, name: str = "parsers"):
    if name not in ("parsers", "writers", "checks"):
        raise ValueError(f"no native module {name!r}")
    if pure:
        return _load_source(name)
    mod = importlib.import_module("fstool_native." + name)
    return mod
