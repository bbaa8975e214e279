"""One definition per on-disk header, usable both fast and for printing.

A :class:`Layout` is a list of ``(field_name, code)`` pairs in on-disk order.
``code`` is a :mod:`struct` code for one value (``"I"``, ``"Q"``,
``"16s"``) or an array (``"64I"``).  From that single list we derive

* a precompiled :class:`struct.Struct` for hot paths (``unpack`` gives a dict),
* a :mod:`construct` ``Struct`` for field-by-field printing and JSON,

so the two views can never drift apart.  Field names are the kernel's.

One field at a time, :meth:`Layout.field` gives a :class:`Field` (its
offset and a struct for it alone): the one table of offsets for code that
reads or patches single fields of a raw structure in place.
"""
from __future__ import annotations

import struct

_KINDS = "BbHhIiQqs"


def _code(code: str) -> tuple[int, str] | None:
    """(count, kind) of a field's code, a kind letter after an optional
    count ("16s", "Q", "4I"); None for anything else.  (Not a regular
    expression: ``re`` is not loaded by the commands that start fast.)"""
    digits = code[:-1]
    if not code or code[-1] not in _KINDS or digits and not (digits.isascii() and
                                                             digits.isdigit()):
        return None
    return int(digits or 0), code[-1]


class Field:
    """One field of a layout: where it starts in the structure, its size and
    a struct for its value (an array field's values come as a tuple)."""
    __slots__ = ("name", "offset", "size", "struct", "_one")

    def __init__(self, name: str, offset: int, code: str, endian: str):
        self.name = name
        self.offset = offset
        self.struct = struct.Struct(endian + code)
        self.size = self.struct.size
        count, kind = _code(code)
        self._one = not count or kind == "s"

    def get(self, buf, base: int = 0):
        """The field's value in the structure at ``base`` of ``buf``."""
        v = self.struct.unpack_from(buf, base + self.offset)
        return v[0] if self._one else v

    def put(self, buf, value, base: int = 0) -> None:
        """Set the field of the structure at ``base`` of ``buf``."""
        if self._one:
            self.struct.pack_into(buf, base + self.offset, value)
        else:
            self.struct.pack_into(buf, base + self.offset, *value)

    def raw(self, buf, base: int = 0) -> bytes:
        """The field's bytes as they are."""
        start = base + self.offset
        return bytes(buf[start:start + self.size])


class Layout:
    __slots__ = ("name", "fields", "struct", "size", "_construct", "_arrays", "_offsets",
                 "endian", "_pack_all", "_fields")

    def __init__(self, name: str, fields: list[tuple[str, str]], endian: str = ">"):
        """``endian`` is ``">"`` (big-endian, every on-disk metadata
        structure) or ``"<"`` (little-endian: the log items the kernel logs
        in host order, read as an x86-64 or arm64 kernel wrote them)."""
        if endian not in (">", "<"):
            raise ValueError(f"bad endianness {endian!r} for {name}")
        self.name = name
        self.fields = fields
        self.endian = endian
        fmt = [endian]
        self._arrays: list[tuple[str, int]] = []   # (name, count); count 0 means scalar
        self._offsets: dict[str, int] = {}
        offset = 0
        for fname, code in fields:
            got = _code(code)
            if got is None:
                raise ValueError(f"bad layout code {code!r} for {name}.{fname}")
            count, kind = got
            self._offsets[fname] = offset
            fmt.append(code)
            if kind == "s":
                size = count or 1
                self._arrays.append((fname, 0))
                offset += size
            else:
                self._arrays.append((fname, count))
                offset += struct.calcsize(endian + kind) * max(count, 1)
        self.struct = struct.Struct("".join(fmt))
        self.size = self.struct.size
        assert self.size == offset, (name, self.size, offset)
        self._construct = None
        self._pack_all = None       # compiled on the first pack: readers never pack
        self._fields: dict = {}     # name -> Field, made on first use

    def _compile_pack_all(self):
        """``pack`` of a dict that holds every field (the common case: a
        header decoded by ``unpack`` and changed): one generated call of
        the precompiled struct, no per-field loop.  A missing field raises
        KeyError or TypeError (``pack`` then fills it in with zero)."""
        args = ", ".join(f"*v[{fname!r}]" if count else f"v[{fname!r}]"
                         for fname, count in self._arrays)
        ns: dict = {}
        exec(f"def pack_all(v, _pack):\n    return _pack({args})\n", ns)
        fn, spack = ns["pack_all"], self.struct.pack
        return lambda values: fn(values, spack)

    @property
    def construct(self):
        """The construct Struct for this layout (built on first use: importing
        construct costs ~30 ms, which commands that only read should not pay)."""
        if self._construct is None:
            import construct as cs  # lazy: start-up (~30 ms), only printing needs it
            if self.endian == ">":
                scalar = {"B": cs.Int8ub, "b": cs.Int8sb, "H": cs.Int16ub, "h": cs.Int16sb,
                          "I": cs.Int32ub, "i": cs.Int32sb, "Q": cs.Int64ub, "q": cs.Int64sb}
            else:
                scalar = {"B": cs.Int8ul, "b": cs.Int8sl, "H": cs.Int16ul, "h": cs.Int16sl,
                          "I": cs.Int32ul, "i": cs.Int32sl, "Q": cs.Int64ul, "q": cs.Int64sl}
            subcons = []
            for fname, code in self.fields:
                count, kind = _code(code)
                if kind == "s":
                    subcons.append(fname / cs.Bytes(count or 1))
                elif count:
                    subcons.append(fname / cs.Array(count, scalar[kind]))
                else:
                    subcons.append(fname / scalar[kind])
            self._construct = cs.Struct(*subcons)
        return self._construct

    def offset(self, field: str) -> int:
        return self._offsets[field]

    def field(self, name: str) -> Field:
        """The :class:`Field` ``name``: its offset and its own struct."""
        f = self._fields.get(name)
        if f is None:
            f = self._fields[name] = Field(name, self._offsets[name], dict(self.fields)[name],
                                           self.endian)
        return f

    def get(self, buf, name: str, base: int = 0):
        """Field ``name`` of the structure at ``base`` of ``buf``."""
        f = self._fields.get(name) or self.field(name)
        return f.get(buf, base)

    def put(self, buf, name: str, value, base: int = 0) -> None:
        """Set field ``name`` of the structure at ``base`` of ``buf``."""
        f = self._fields.get(name) or self.field(name)
        f.put(buf, value, base)

    def indexes(self) -> dict:
        """{field: where it comes in the values ``struct.unpack`` gives} (a
        layout without arrays: one value per field)."""
        assert not any(count for _f, count in self._arrays), self.name
        return {fname: i for i, (fname, _code) in enumerate(self.fields)}

    def unpack(self, buf, offset: int = 0) -> dict:
        """Decode into a dict of field -> value (arrays as lists)."""
        if len(buf) - offset < self.size:
            raise ValueError(f"{self.name}: need {self.size} bytes, have {len(buf) - offset}")
        values = self.struct.unpack_from(buf, offset)
        out = {}
        i = 0
        for fname, count in self._arrays:
            if count:
                out[fname] = list(values[i:i + count])
                i += count
            else:
                out[fname] = values[i]
                i += 1
        return out

    def pack(self, values: dict) -> bytes:
        """Encode a dict of field -> value (arrays as lists); fields left out
        are zero."""
        if self._pack_all is None:
            self._pack_all = self._compile_pack_all()
        try:
            return self._pack_all(values)
        except (KeyError, TypeError, struct.error):
            pass            # a field left out or None: the loop below says zero
        flat = []
        for fname, count in self._arrays:
            v = values.get(fname)
            if count:
                flat.extend(v if v is not None else [0] * count)
            else:
                flat.append(v if v is not None else (b"" if self._is_bytes(fname) else 0))
        return self.struct.pack(*flat)

    def _is_bytes(self, fname: str) -> bool:
        return dict(self.fields)[fname].endswith("s")

    def parse_container(self, buf, offset: int = 0):
        """Decode with construct (slower; for printing)."""
        return self.construct.parse(bytes(buf[offset:offset + self.size]))
