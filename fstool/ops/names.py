"""Names for human eyes: the one escape ``ls``, ``check``, ``repair`` and
populate's reports show names with.

A name is shown whole, as the directory holds it (a '/' a damaged or
crafted entry holds included), its UTF-8 text as text, and as backslash
escapes: a backslash (``\\\\``), newline, tab and carriage return (``\\n``,
``\\t``, ``\\r``), any other control character and every byte that is not
UTF-8 (``\\xNN``).  Messages quote it: ``'name'``, a quote in it as ``\\'``.
"""
from __future__ import annotations

_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\\": "\\\\"}


def shown_name(name) -> str:
    """``name`` (bytes, or text decoded with surrogateescape) on one line."""
    if isinstance(name, (bytes, bytearray, memoryview)):
        name = bytes(name).decode("utf-8", "surrogateescape")
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
