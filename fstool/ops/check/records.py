"""Check's per-AG record lists kept flat: the block claims [(start, length,
owner)] and the reverse mappings [(start, length, owner, offset, flags)]
(those check expects and those the rmapbt holds) as one array of 64-bit
numbers each, 24 or 32 bytes a record where a list of tuples took some 150
(an image of 100,000 extents kept three such lists).  They read and grow like
lists of tuples (iteration yields the tuples, ``append`` takes one); the
native fast paths (``fstool_native.checks``) read and fill the arrays."""
from __future__ import annotations

from array import array
from itertools import chain

from ..._backend import checks

_U64 = (1 << 64) - 1
# the rmapbt's offset field: the file offset below, the flags above
RMAP_FLAGS = (1 << 63) | (1 << 62) | (1 << 61)


class Claims:
    """One AG's block claims (start, length, owner), owner signed: a flat
    array of signed 64-bit numbers, three a claim.  A claim holding a number
    that does not fit (only a damaged geometry could make one) turns the
    list into a plain list of tuples, which everything reading it takes."""

    __slots__ = ("data",)
    WIDTH = 3

    def __init__(self, data=None):
        self.data = array("q") if data is None else data

    def append(self, rec) -> None:
        data = self.data
        if type(data) is array:
            n = len(data)
            try:
                data.extend(rec)
                return
            except OverflowError:
                del data[n:]
                self.data = data = list(self)
        data.append(tuple(rec))

    def extend(self, recs) -> None:
        if type(recs) is type(self) and type(recs.data) is array and type(self.data) is array:
            self.data.extend(recs.data)
            return
        for rec in recs:
            self.append(rec)

    def sort(self) -> None:
        if type(self.data) is array:
            checks.sort_records(self.data, self.WIDTH)
        else:
            self.data.sort(key=self._list_key)

    # the order of a list of tuples that matches the flat array's
    _list_key = None

    def flat(self):
        """The flat array, or None when the claims are a list of tuples."""
        return self.data if type(self.data) is array else None

    def __iter__(self):
        data = self.data
        if type(data) is array:
            it = iter(data)
            return zip(it, it, it)
        return iter(data)

    def __len__(self) -> int:
        data = self.data
        return len(data) // self.WIDTH if type(data) is array else len(data)

    def __bool__(self) -> bool:
        return len(self.data) > 0

    def __eq__(self, other) -> bool:
        if isinstance(other, Claims):
            other = list(other)
        return list(self) == other

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self)!r})"

    def __reduce__(self):
        return type(self), (self.data,)


class Rmaps(Claims):
    """One AG's reverse mappings (start, length, owner, offset, flags),
    owner signed, flags the rmapbt's offset flags (attr fork, bmbt block,
    unwritten): kept as the rmapbt's records are, four unsigned 64-bit
    numbers (start, length, owner, offset | flags)."""

    __slots__ = ()
    WIDTH = 4

    def __init__(self, data=None):
        self.data = array("Q") if data is None else data

    def append(self, rec) -> None:
        s, n, o, off, fl = rec
        data = self.data
        if type(data) is array and not off & RMAP_FLAGS and not fl & ~RMAP_FLAGS and \
                -(1 << 63) <= o < (1 << 63):
            nlen = len(data)
            try:
                data.extend((s, n, o & _U64, off | fl))
                return
            except OverflowError:
                del data[nlen:]
        if type(data) is array:
            self.data = data = list(self)
        data.append((s, n, o, off, fl))

    @staticmethod
    def _list_key(r):
        return (r[0], r[1], r[2] & _U64, r[3] | r[4])

    def __iter__(self):
        data = self.data
        if type(data) is not array:
            return iter(data)
        it = iter(data)
        return ((s, n, o - (1 << 64) if o >> 63 else o, off & ~RMAP_FLAGS, off & RMAP_FLAGS)
                for s, n, o, off in zip(it, it, it, it))


class RecordMap(dict):
    """agno -> the AG's records (a ``Claims`` or ``Rmaps``), made on first
    use like a defaultdict's lists."""

    def __init__(self, kind, *args):
        super().__init__(*args)
        self.kind = kind

    def __missing__(self, agno):
        recs = self[agno] = self.kind()
        return recs

    def flat(self, agcount: int) -> list:
        """Every AG's flat array, by AG number (made for the AGs that have
        none), for the native code that fills them; None when one of them
        is a list of tuples."""
        out = [self[agno].flat() for agno in range(agcount)]
        return None if None in out else out

    def __reduce__(self):
        return type(self), (self.kind, dict(self))


def flat_claims(claims):
    """``claims`` (a Claims or any list of (start, length, owner)) as a flat
    signed array, or None when a number does not fit one."""
    if isinstance(claims, Claims):
        return claims.flat()
    try:
        return array("q", chain.from_iterable(claims))
    except OverflowError:
        return None
