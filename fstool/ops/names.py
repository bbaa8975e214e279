"""Names for human eyes: the one escape ``ls``, ``check``, ``repair`` and
populate's reports show names with.

A name is shown whole, as the directory holds it (a '/' a damaged or
crafted entry holds included), its UTF-8 text as text, and as backslash
escapes: a backslash (``\\\\``), newline, tab and carriage return (``\\n``,
``\\t``, ``\\r``), any other control character and every byte that is not
UTF-8 (``\\xNN``).  Messages quote it: ``'name'``, a quote in it as ``\\'``.

``--json`` keeps names byte-exact (:func:`json_exact`): a name that is
valid UTF-8 is a JSON string as it is; one that is not (held in Python as
text decoded with ``surrogateescape``) is given as the escaped text above,
and its bytes whole, base64, in a field beside it named with ``_b64``.
"""
from __future__ import annotations

import base64
import re

_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\\": "\\\\"}
# a character shown otherwise than as itself: a control character, a
# backslash, a byte that is not UTF-8 (surrogateescape)
_ESCAPED = re.compile("[\x00-\x1f\x7f\\\\\udc80-\udcff]")


def shown_name(name) -> str:
    """``name`` (bytes, or text decoded with surrogateescape) on one line."""
    if isinstance(name, (bytes, bytearray, memoryview)):
        name = bytes(name).decode("utf-8", "surrogateescape")
    if _ESCAPED.search(name) is None:
        return name             # the common case: shown as it is
    out = []
    for ch in name:
        o = ord(ch)
        if 0xDC80 <= o <= 0xDCFF:
            out.append(f"\\x{o - 0xDC00:02x}")
        elif ch in _NAMED:
            out.append(_NAMED[ch])
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        else:
            out.append(ch)
    return "".join(out)


def quoted_name(name) -> str:
    """``name`` as a message shows it: escaped and between single quotes."""
    return "'" + shown_name(name).replace("'", "\\'") + "'"


def _is_raw(text: str) -> bool:
    """Whether ``text`` holds bytes that are not UTF-8 (surrogateescape)."""
    return any(0xDC80 <= ord(ch) <= 0xDCFF for ch in text)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8", "surrogateescape")).decode("ascii")


def json_exact(obj):
    """``obj`` (dicts, lists, strings...) ready for ``json.dumps`` with its
    names byte-exact: every string holding bytes that are not UTF-8 becomes
    the escaped text :func:`shown_name` gives, and its raw bytes go, base64,
    into ``KEY_b64`` beside it (a dict's value), or into a list ``KEY_b64``
    of the same length (null for the strings that are UTF-8) beside a list.
    Strings that are UTF-8 are left as they are."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if isinstance(v, str) and _is_raw(v):
                out[k] = shown_name(v)
                out[f"{k}_b64"] = _b64(v)
            elif isinstance(v, (list, tuple)) and any(isinstance(x, str) and _is_raw(x)
                                                      for x in v):
                out[k] = [shown_name(x) if isinstance(x, str) and _is_raw(x) else json_exact(x)
                          for x in v]
                out[f"{k}_b64"] = [_b64(x) if isinstance(x, str) and _is_raw(x) else None
                                   for x in v]
            else:
                out[k] = json_exact(v)
        return out
    if isinstance(obj, (list, tuple)):
        return [json_exact(x) for x in obj]
    if isinstance(obj, str) and _is_raw(obj):
        return shown_name(obj)
    return obj
