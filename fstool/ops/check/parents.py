"""Parent pointers against directory entries, as xfs_repair 6.10.1's phase 6
compares them (repair/pptr.c): every entry (directory, name, child) but
'.' and '..' wants a parent pointer (directory, its generation, name) on
the child, and every parent pointer wants its entry.

The comparison is a sum: the inode phase takes each inode's parent
pointers off its slot of ``psums`` and the directory tally adds each
entry's to its target's (``parsers.pptr_mix``), so a clean filesystem ends
with every slot zero at no cost beyond the tally.  Only the inodes whose
slot is not zero are looked at here: their parent pointers read again, the
entries that name them found by listing the directories, and each
difference reported as xfs_repair words it (a missing pointer, a bad one,
one whose generation or name differs, garbage).  Functions of the check
context; repair's parent pointer phase lists entries with them too."""
from __future__ import annotations

from collections import Counter, defaultdict

from ..._backend import parsers
from ...errors import FsToolError
from ...format import constants as C
from ...format import parent as P
from ...format.structs import DINODE
from ...fs import attr as xattr
from ...fs import dir as xdir
from ...fs.inode import Inode
from ..names import quoted_name
from .dirs import verify_dir_ino

_DI_GEN = DINODE.field("di_gen")


def check_parent_pointers(ctx, tab) -> None:
    if tab.psums is None:
        return
    unread = set(ctx.pptr_unread)
    want = {tab.ino(s) for s in parsers.pptr_mismatches(tab.itype, tab.psums)} - unread
    if not want:
        return
    ondisk = {ino: _pptrs_of(ctx, ino) for ino in sorted(want)}
    entries = entries_naming(ctx, set(ondisk))
    gens: dict = {}
    for ino, got in ondisk.items():
        if got is None:
            continue
        expect = Counter()
        for d, name in entries.get(ino, ()):
            expect[(d, dir_gen(ctx, d, gens), name)] += 1
        _compare(ctx, ino, expect, Counter(got))


def _pptrs_of(ctx, ino: int):
    """The parent pointers with a 12-byte value of ``ino`` as
    [(p_ino, p_gen, name)], or None when they cannot be read."""
    try:
        node = ctx.fs.inode(ino)
        return [(p.ino, p.gen, p.name) for p in
                _records(xattr.iter_attrs(node, True, P.is_parent))]
    except FsToolError:
        return None


def entries_naming(ctx, inos: set, unread: set | None = None) -> dict:
    """child -> [(directory, name)] of every entry naming one of ``inos``
    (but '.' and '..'); the directories that cannot be read are added to
    ``unread``."""
    out = defaultdict(list)
    for d in ctx.dirs:
        try:
            node = Inode(ctx.fs, d, ctx.dir_raw[d]) if d in ctx.dir_raw \
                else ctx.fs.inode(d)
            for ents in xdir.entry_lists(node):
                for name, child, _ftype in ents:
                    if child in inos and name not in (b".", b".."):
                        out[child].append((d, bytes(name)))
        except FsToolError:
            if unread is not None:
                unread.add(d)
            continue
    return out


def dir_gen(ctx, d: int, gens: dict) -> int:
    """A directory's generation, from the inode as check read it (its
    CRC or other fields may be wrong: the generation is what counts)."""
    g = gens.get(d)
    if g is None:
        raw = ctx.dir_raw.get(d)
        if raw is None:
            try:
                agno, agbno, index = ctx.fs.ino_location(d)
                isz = ctx.sb.inodesize
                raw = ctx.fs.dev.pread((ctx.fs.agb_to_daddr(agno, agbno) << C.BBSHIFT)
                                       + index * isz, isz)
            except FsToolError:
                raw = b""
        g = gens[d] = _DI_GEN.get(raw) if len(raw) >= 96 else -1
    return g


def _compare(ctx, ino: int, expect: Counter, got: Counter) -> None:
    """Report how the parent pointers ``got`` of ``ino`` differ from
    those its entries ``expect``, matched on (directory, name) as
    xfs_repair matches them."""
    by_key = defaultdict(list)
    for (d, g, name), n in got.items():
        by_key[(d, name)].extend([g] * n)
    where = dict(ino=ino, structure="attr", fork="attr")
    for (d, g, name), n in sorted(expect.items()):
        have = by_key.get((d, name), [])
        for _ in range(n):
            if g in have:
                have.remove(g)
            elif have:
                old = have.pop(0)
                ctx.report("PARENT_BAD", f"inode {ino}: parent pointer {quoted_name(name)} "
                           f"in directory {d} has generation {old}, the directory's is "
                           f"{g}", field="p_gen", expected=g, found=old, **where)
            else:
                ctx.report("PARENT_MISSING", f"inode {ino}: entry {quoted_name(name)} of "
                           f"directory {d} has no parent pointer", found=d, **where)
    for (d, name), left in sorted(by_key.items()):
        for g in left:
            if not verify_dir_ino(ctx, d):
                ctx.report("PARENT_GARBAGE", f"inode {ino}: parent pointer "
                           f"{quoted_name(name)} names inode {d}, which cannot be a "
                           "directory", field="p_ino", found=d, **where)
            else:
                ctx.report("PARENT_BAD", f"inode {ino}: parent pointer "
                           f"{quoted_name(name)} (directory {d}, generation {g}) names "
                           "no directory entry", found=d, **where)


def _records(attrs):
    """Parent records of (flags, name, value) parent-namespace attributes
    whose value is 12 bytes (the others are garbage, reported already)."""
    for _flags, name, value in attrs:
        if value is not None and len(value) == P.XFS_PARENT_REC_SIZE:
            p_ino, p_gen = P.unpack_rec(value)
            yield xattr.Parent(p_ino, p_gen, bytes(name))
