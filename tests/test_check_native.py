"""fstool_native.checks, the check's fast paths: the compiled and the pure
backend agree, and wherever a fast path accepts a structure the check's
Python code, run on the same bytes, finds nothing and computes the same
figures; on damaged structures the findings are the same with the fast
path on or off."""
import random
import struct
from collections import defaultdict
from types import SimpleNamespace

import pytest

import fstool_native
from fstool.ops.check import dirs as dirs_mod
from fstool.ops.check import inodes as inodes_mod
from fstool.ops.check import spacemap as spacemap_mod
from fstool.ops.check import xattrs as xattrs_mod
from fstool.ops.check.dirs import DirChecks
from fstool.ops.check.inodes import InodePhase
from fstool.ops.check.spacemap import SpaceMapPhase
from fstool.ops.check.xattrs import XattrChecks

PURE = fstool_native.load(pure=True, name="checks")
NATIVE = fstool_native.load(name="checks")
PARSERS = fstool_native.load(pure=True)
BACKENDS = [PURE] + ([NATIVE] if fstool_native.is_native(NATIVE) else [])
needs_native = pytest.mark.skipif(not fstool_native.is_native(NATIVE),
                                  reason="native backend not built")
BS = 1024
HDR = 80


def attr_leaf(rng, n, remote_every=4):
    """A sound attr3 leaf block of BS bytes with ``n`` entries."""
    names = sorted({f"user.a{rng.randrange(10 ** 6)}".encode() for _ in range(n)},
                   key=PARSERS.da_hashname)
    buf = bytearray(BS)
    struct.pack_into(">H", buf, 8, 0x3BEE)
    pos = BS
    used = 0
    for i, name in enumerate(names):
        if i % remote_every == remote_every - 1:
            size = (11 + len(name) + 3) & ~3
            pos -= size
            struct.pack_into(">IIB", buf, pos, 5 + i, 3000, len(name))
            buf[pos + 9:pos + 9 + len(name)] = name
            flags = 0
        else:
            value = bytes(rng.randrange(1, 20))
            size = (3 + len(name) + len(value) + 3) & ~3
            pos -= size
            struct.pack_into(">HB", buf, pos, len(value), len(name))
            buf[pos + 3:pos + 3 + len(name)] = name
            flags = 1
        used += size
        struct.pack_into(">IHBx", buf, HDR + 8 * i, PARSERS.da_hashname(name), pos, flags)
    struct.pack_into(">HHHB", buf, 56, len(names), used, pos, 0)
    free = HDR + 8 * len(names)
    struct.pack_into(">HH", buf, 64, free & ~3, (pos - free) & ~3)
    return bytearray(buf)


class Stub(XattrChecks):
    """Just enough of a Checker to run the attr leaf entry check."""

    def __init__(self):
        self.sb = SimpleNamespace(blocksize=BS)
        self.found = []
        self.remote_calls = []
        self.has_pptr = False
        self.pptrs_seen = []

    def report(self, code, message, **where):
        self.found.append((code, message, sorted(where.items())))

    def _remote_value(self, node, valueblk, valuelen, i, ablk):
        self.remote_calls.append((valueblk, valuelen, i))
        return valueblk % 7 != 3         # some remote values fail


def run_leaf(monkeypatch, buf, last_hash, backend):
    """(result, findings, remote calls) of _attr_leaf with ``backend`` as the
    fast path (None: no fast path, the Python loop alone)."""
    if backend is None:
        fake = SimpleNamespace(attr_leaf_entries=lambda *a: None)
    else:
        fake = backend
    monkeypatch.setattr(xattrs_mod, "checks", fake)
    s = Stub()
    count = struct.unpack_from(">H", buf, 56)[0]
    got = s._attr_leaf(SimpleNamespace(ino=99), 1, bytes(buf), last_hash)
    assert count == 0 or got is None or len(got) == 2
    return got, s.found, s.remote_calls


def mutations(seed, n):
    rng = random.Random(seed)
    for k in range(n):
        buf = attr_leaf(rng, rng.randrange(1, 14), remote_every=rng.choice((2, 3, 100)))
        count = struct.unpack_from(">H", buf, 56)[0]
        for _ in range(rng.choice((0, 0, 1, 1, 2, 3))):
            r = rng.random()
            if r < 0.1 and count > 1:     # one name twice: an overlap
                i = rng.randrange(count - 1)
                buf[HDR + 8 * i + 8:HDR + 8 * i + 16] = buf[HDR + 8 * i:HDR + 8 * i + 8]
                continue
            if r < 0.25:         # move a name: overlaps, gaps, overruns
                at = HDR + 8 * rng.randrange(count) + 4
                v = struct.unpack_from(">H", buf, at)[0] + rng.choice((-8, -4, -1, 2, 4))
                struct.pack_into(">H", buf, at, v & 0xFFFF)
                continue
            at = rng.choice([rng.randrange(56, 76), rng.randrange(HDR, HDR + 8 * count),
                             rng.randrange(len(buf))])
            buf[at] ^= 1 << rng.randrange(8) if r < 0.8 else rng.randrange(256)
        yield buf, rng.choice((0, 0, 0x7FFFFFFF))


def test_attr_leaf_fast_path_keeps_the_findings(monkeypatch):
    """Sound and damaged leaf blocks: the same result, findings and remote
    value checks with the fast path (each backend) as without it."""
    accepted = rejected = 0
    for buf, last in mutations(1, 600):
        want = run_leaf(monkeypatch, buf, last, None)
        for mod in BACKENDS:
            assert run_leaf(monkeypatch, buf, last, mod) == want
        if PURE.attr_leaf_entries(bytes(buf), struct.unpack_from(">H", buf, 56)[0],
                                  last) is None:
            rejected += 1
        else:
            accepted += 1
            # accepted: only the header's totals can be wrong
            assert {dict(f[2])["field"] for f in want[1]} <= {"firstused", "usedbytes"}
    # both outcomes were exercised
    assert accepted > 100 and rejected > 100


def test_attr_leaf_fast_path_figures():
    """On a sound block: its hashes, first name and bytes used."""
    rng = random.Random(5)
    buf = bytes(attr_leaf(rng, 9, remote_every=3))
    count, usedbytes, firstused = struct.unpack_from(">HHH", buf, 56)
    hashes = [struct.unpack_from(">I", buf, HDR + 8 * i)[0] for i in range(count)]
    for mod in BACKENDS:
        lo, hi, firstb, used, remotes, pptrs = mod.attr_leaf_entries(buf, count, 0)
        assert pptrs == []
        assert (lo, hi, firstb, used) == (hashes[0], hashes[-1], firstused, usedbytes)
        assert [r[0] for r in remotes] == [2, 5, 8]
        assert mod.attr_leaf_entries(buf, count, hashes[0] + 1) is None
        assert mod.attr_leaf_verify_ok(buf)


def test_attr_leaf_verify_matches_the_python_verifier():
    """attr_leaf_verify_ok is true exactly when _attr_leaf_verify finds no
    fault, on sound and damaged blocks, in both backends."""
    stub = Stub()
    seen = set()
    for buf, _last in mutations(2, 600):
        want = stub._attr_leaf_verify(bytes(buf)) is None
        seen.add(want)
        for mod in BACKENDS:
            assert mod.attr_leaf_verify_ok(bytes(buf)) == want
    assert seen == {True, False}


@needs_native
def test_native_backend_is_compiled():
    assert fstool_native.is_native(NATIVE)


class InodeStub(InodePhase):
    """Just enough of a Checker to run the extent list check: 4 AGs of
    1,000 blocks (the last 600), AG block numbers 2^10."""

    def __init__(self):
        self.sb = SimpleNamespace(agblklog=10, agcount=4)
        self.agfl_block = 3
        self.ag_lengths = [1000, 1000, 1000, 600]
        self.max_file_offset = (1 << 40) - 1
        self.has_rmap = True
        self.claims = defaultdict(list)
        self.rmap_expect = defaultdict(list)
        self.found = []

    def report(self, code, message, **where):
        self.found.append((code, message, sorted(where.items())))


def extent_recs(rng):
    recs = []
    off = rng.randrange(0, 50)
    for _ in range(rng.randrange(0, 12)):
        agno = rng.randrange(4)
        n = rng.randrange(1, 40)
        recs.append((off, (agno << 10) + rng.randrange(4, 560), n, rng.random() < 0.1))
        off += n + rng.randrange(0, 5)
    for _ in range(rng.choice((0, 0, 1, 2))):       # damage one field of one record
        if not recs:
            break
        i = rng.randrange(len(recs))
        r = list(recs[i])
        k = rng.randrange(3)
        r[k] = rng.choice((0, r[k] + rng.randrange(-40, 40), r[k] ^ (1 << rng.randrange(52)),
                           (1 << 40) - rng.randrange(1, 5), (3 << 10) + 599))
        recs[i] = tuple(max(0, v) if isinstance(v, int) else v for v in r)
    return recs


def run_extents(monkeypatch, recs, attr, mode, last_end, first, backend):
    monkeypatch.setattr(inodes_mod, "checks", backend or
                        SimpleNamespace(extent_list=lambda *a: None))
    s = InodeStub()
    where = dict(ino=77, agno=0, block=1, structure="inode", fork="attr" if attr else "data")
    got = s._extent_list(recs, 77, {"mode": mode}, where, attr, last_end, first)
    return got, s.found, dict(s.claims), dict(s.rmap_expect)


def test_extent_list_fast_path_keeps_the_findings(monkeypatch):
    """Sound and damaged extent lists, data and attr forks of files and
    directories, first and later bmbt leaves: the same blocks, findings,
    claims and expected rmaps with the fast path (each backend) as without."""
    rng = random.Random(3)
    outcomes = set()
    for _ in range(1500):
        recs = extent_recs(rng)
        attr = rng.random() < 0.3
        mode = rng.choice((0o100644, 0o40755))
        first = rng.random() < 0.7
        last_end = 0 if first else rng.randrange(0, 60)
        want = run_extents(monkeypatch, recs, attr, mode, last_end, first, None)
        outcomes.add(want[0] is None)
        for mod in BACKENDS:
            assert run_extents(monkeypatch, recs, attr, mode, last_end, first, mod) == want
    assert outcomes == {True, False}


class DirStub(DirChecks):
    def __init__(self):
        self.found = []

    def report(self, code, message, **where):
        self.found.append((code, message, sorted(where.items())))


def bestfree_case(rng):
    """A data block header's bestfree table and the block's unused regions,
    right or wrong in one of the ways the rules name."""
    frees, pos = [], 64
    for _ in range(rng.randrange(0, 6)):
        pos += 8 * rng.randrange(0, 4)
        length = 8 * rng.randrange(1, 9)
        frees.append((length, pos))
        pos += length
    best = sorted(frees, key=lambda f: -f[0])[:3]
    slots = [(off, ln) for ln, off in best] + [(0, 0)] * (3 - len(best))
    r = rng.random()
    if r < 0.15 and slots[0][1]:
        slots[0], slots[1] = slots[1], slots[0]
    elif r < 0.3:
        slots[rng.randrange(3)] = (rng.randrange(0, 200, 8), rng.randrange(0, 72, 8))
    elif r < 0.4 and len(frees) > 1:        # two regions in a row
        ln, off = frees[0]
        frees[1] = (frees[1][0], off + ln)
    elif r < 0.5 and slots[2][1]:
        slots[2] = slots[1]
    buf = bytearray(128)
    struct.pack_into(">6H", buf, 48, *(v for s in slots for v in s))
    rng.shuffle(frees)
    return bytes(buf), frees


def run_bestfree(monkeypatch, buf, frees, backend):
    # without a fast path the Python loop still takes the per-region rule
    # (xfs_dir2_data_freefind_verify) from the module
    monkeypatch.setattr(dirs_mod, "checks", backend or SimpleNamespace(
        bestfree_ok=lambda *a: -1, bestfree_region_bad=PURE.bestfree_region_bad))
    s = DirStub()
    got = s._check_bestfree(SimpleNamespace(ino=5), 8, buf, frees)
    return got, s.found


def test_bestfree_fast_path_keeps_the_findings(monkeypatch):
    rng = random.Random(4)
    outcomes = set()
    for _ in range(2000):
        buf, frees = bestfree_case(rng)
        want = run_bestfree(monkeypatch, buf, frees, None)
        outcomes.add(bool(want[1]))
        for mod in BACKENDS:
            assert run_bestfree(monkeypatch, buf, frees, mod) == want
    assert outcomes == {True, False}


class SpaceStub(SpaceMapPhase):
    """Just enough of a Checker to run the space map sweep of one AG."""

    def __init__(self, length):
        self.fs = SimpleNamespace(ag_length=lambda agno: length)
        self.found = []

    def report(self, code, message, **where):
        self.found.append((code, message, sorted(where.items())))


def space_claims(rng):
    """An AG of 200-300 blocks tiled by claims of file data (inode 5-9,
    data or attr), metadata and free space, then now and then damaged: a
    gap, an overlap, shared file data, a zero or negative length, a huge
    number; sorted, as the phase sorts them."""
    length = rng.randrange(200, 300)
    claims = []
    pos = 0
    while pos < length:
        n = min(length - pos, rng.randrange(1, 30))
        owner = rng.choice((-3, -5, -7, -21, (rng.randrange(5, 10) << 2) | rng.randrange(4)))
        claims.append((pos, n, owner))
        pos += n
    for _ in range(rng.choice((0, 0, 1, 2))):
        i = rng.randrange(len(claims))
        start, n, owner = claims[i]
        r = rng.random()
        if r < 0.2:
            claims[i] = (start + 1, n, owner)                  # a gap, or an overlap
        elif r < 0.45:                                         # data shared with data
            claims.append((start, n, (rng.randrange(5, 10) << 2)))
            claims[i] = (start, n, (rng.randrange(5, 10) << 2))
        elif r < 0.6:
            claims.append((start, n, rng.choice((-3, -21, (7 << 2) | 2))))
        elif r < 0.7:
            claims[i] = (start, rng.choice((0, -1)), owner)
        elif r < 0.8:
            claims[i] = (start, n, owner | (1 << rng.choice((40, 63, 70))))
        elif r < 0.9:
            claims[i] = (start, rng.choice((1 << 50, 1 << 64)), owner)
        else:
            claims.pop(i)                                      # a gap, or a short AG
    claims.sort()
    return length, claims


def test_space_sweep_fast_path_keeps_the_findings(monkeypatch):
    """The sweep's fast path accepts an AG exactly when the sweep's Python
    loop finds nothing in it (reflink filesystems or not), and the shared
    data test agrees with its Python loop, on each backend."""
    rng = random.Random(5)
    outcomes = set()
    for _ in range(3000):
        length, claims = space_claims(rng)
        reflink = rng.random() < 0.5
        monkeypatch.setattr(spacemap_mod, "checks",
                            SimpleNamespace(space_sweep_ok=lambda *a: False))
        s = SpaceStub(length)
        s._sweep(0, claims, reflink)
        want_overlaps = spacemap_mod._data_overlaps_py(claims)
        outcomes.add((bool(s.found), want_overlaps))
        for mod in BACKENDS:
            ok = mod.space_sweep_ok(claims, length, reflink, spacemap_mod.DATA)
            if all(0 <= start < 1 << 48 and 0 <= n < 1 << 48 and abs(owner) < 1 << 48
                   for start, n, owner in claims):
                assert ok == (not s.found), (claims, length, reflink, s.found)
            else:           # unusual numbers may be left to the Python loop
                assert not (ok and s.found)
            got = mod.data_overlaps(claims, spacemap_mod.DATA)
            assert got is None or got == want_overlaps
            monkeypatch.setattr(spacemap_mod, "checks", mod)
            assert spacemap_mod._data_overlaps(claims) == want_overlaps
            fast = SpaceStub(length)
            fast._sweep(0, claims, reflink)
            assert fast.found == s.found
    assert outcomes == {(False, False), (False, True), (True, False), (True, True)}


def test_large_extent_counters_take_the_fast_path(tmp_path):
    """On a filesystem with large extent counters (mkfs.xfs's default since
    6.5) every plain file carries the NREXT64 flag and its extent count in
    di_big_nextents: the native inode scan takes them (it sent every inode
    of such images to the Python check), with the same findings."""
    import array

    import fstool
    from fstool._backend import parsers
    from fstool.ops.check import check
    from fixtures import images, modern
    if not modern.available():
        pytest.skip(modern.WHY)
    if not images.loop_available():
        pytest.skip("needs root and a kernel loop mount of XFS")
    img = modern.mkfs(tmp_path / "n.img", size="512m")
    with images.Mounted(img, nouuid=True) as mnt:
        for i in range(150):
            (mnt / f"f{i}").write_bytes(bytes([i]) * (i * 97))
    with fstool.open_image(str(img)) as fs:
        c = check(fs)
        assert not [f for f in c.findings if f.severity == "error"]
        agi = fs.agi(0)
        from fstool.fs import btree as B
        reader = B.BtreeReader(fs, B.inobt_type(True), agno=0, owner=0,
                               addr_to_daddr=lambda a: fs.agb_to_daddr(0, a))
        recs = list(reader.ag_records(agi["agi_root"], agi["agi_level"]))
        sb = fs.sb
        plain = others_total = 0
        for startino, holemask, _n, _f, free in recs:
            blk = startino >> sb.inopblog
            buf = fs.dev.pread(fs.agb_to_daddr(0, blk) << 9, 64 * sb.inodesize)
            itype, nlinks = array.array("B", bytes(64)), array.array("I", bytes(256))
            claims, others = parsers.scan_inode_chunk(
                buf, 0, sb.inodesize, startino, sb.meta_uuid, free, holemask,
                c.flags2_plain, True, sb.agblklog, sb.agcount, sb.agblocks,
                fs.ag_length(sb.agcount - 1), c.agfl_block, c.max_file_offset, itype,
                nlinks, 0)
            plain += sum(1 for t in itype if t == 8)
            others_total += sum(1 for i in others if not (free >> i) & 1)
        assert plain >= 140, (plain, others_total)
