"""fstool_native.checks, the check's fast paths: the compiled and the pure
backend agree, and wherever a fast path accepts a structure the check's
Python code, run on the same bytes, finds nothing and computes the same
figures; on damaged structures the findings are the same with the fast
path on or off."""
import array
import random
import struct
from collections import defaultdict
from types import SimpleNamespace

import pytest

import fstool_native
from fixtures import pptr
from fstool.fs import attrleaf
from fstool.ops.check import btrees as btrees_mod
from fstool.fs.dirform import data as dirdata_mod
from fstool.ops.check import dirs as dirs_mod
from fstool.ops.check import inodes as inodes_mod
from fstool.ops.check import namespace as ns_mod
from fstool.ops.check import spacemap as spacemap_mod
from fstool.ops.check import xattrs as xattrs_mod
from fstool.ops.check.records import Claims, RecordMap, Rmaps, flat_claims

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


class Stub:
    """Just enough of a check context to run the attr leaf entry check
    (its remote values read by ``remote_value``, put in place of the
    module's)."""

    def __init__(self):
        self.sb = SimpleNamespace(blocksize=BS, has_incompat=lambda bit: False)
        self.found = []
        self.remote_calls = []
        self.has_pptr = False
        self.pptrs_seen = []

    def report(self, code, message, **where):
        self.found.append((code, message, sorted(where.items())))

    def remote_value(self, node, valueblk, valuelen, i, ablk):
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
    monkeypatch.setattr(xattrs_mod, "_remote_value", Stub.remote_value)
    count = struct.unpack_from(">H", buf, 56)[0]
    got = xattrs_mod._attr_leaf(s, SimpleNamespace(ino=99), 1, bytes(buf), last_hash)
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
    """attr_leaf_verify_ok is true exactly when fstool.fs.attrleaf's
    leaf_faults finds no fault, on sound and damaged blocks, in both
    backends."""
    seen = set()
    for buf, _last in mutations(2, 600):
        want = not attrleaf.leaf_faults(bytes(buf), BS)
        seen.add(want)
        for mod in BACKENDS:
            assert mod.attr_leaf_verify_ok(bytes(buf)) == want
    assert seen == {True, False}


@needs_native
def test_native_backend_is_compiled():
    assert fstool_native.is_native(NATIVE)


class InodeStub:
    """Just enough of a check context to run the extent list check: 4 AGs of
    1,000 blocks (the last 600), AG block numbers 2^10."""

    def __init__(self):
        self.sb = SimpleNamespace(agblklog=10, agcount=4)
        self.agfl_block = 3
        self.ag_lengths = [1000, 1000, 1000, 600]
        self.max_file_offset = (1 << 40) - 1
        self.has_rmap = True
        self.claims = defaultdict(list)
        self.rmap_expect = defaultdict(list)
        self.reflink = True
        self.unwritten = defaultdict(list)
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
    got = inodes_mod._extent_list(s, recs, 77, {"mode": mode}, where, attr, last_end, first)
    return got, s.found, dict(s.claims), dict(s.rmap_expect), dict(s.unwritten)


def test_extent_list_fast_path_keeps_the_findings(monkeypatch):
    """Sound and damaged extent lists, data and attr forks of files and
    directories, first and later bmbt leaves: the same blocks, findings,
    claims, expected rmaps and unwritten extents with the fast path (each
    backend) as without."""
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


class DirStub:
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
    monkeypatch.setattr(dirdata_mod, "checks", backend or SimpleNamespace(
        bestfree_ok=lambda *a: -1, bestfree_region_bad=PURE.bestfree_region_bad))
    s = DirStub()
    got = dirs_mod._check_bestfree(s, SimpleNamespace(ino=5), 8, buf, frees)
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


class SpaceStub:
    """Just enough of a check context to run the space map sweep of one AG."""

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
        spacemap_mod._sweep(s, 0, claims, reflink)
        want_overlaps = spacemap_mod._data_overlaps_py(claims)
        outcomes.add((bool(s.found), want_overlaps))
        flat = flat_claims(claims)
        for mod in BACKENDS:
            if flat is None:            # a number past 64 bits: the Python loop's
                continue
            ok = mod.space_sweep_ok(flat, length, reflink, spacemap_mod.DATA)
            if all(0 <= start < 1 << 48 and 0 <= n < 1 << 48 and abs(owner) < 1 << 48
                   for start, n, owner in claims):
                assert ok == (not s.found), (claims, length, reflink, s.found)
            else:           # unusual numbers may be left to the Python loop
                assert not (ok and s.found)
            got = mod.data_overlaps(flat, spacemap_mod.DATA)
            assert got is None or got == want_overlaps
            monkeypatch.setattr(spacemap_mod, "checks", mod)
            assert spacemap_mod._data_overlaps(claims) == want_overlaps
            fast = SpaceStub(length)
            spacemap_mod._sweep(fast, 0, claims, reflink)
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
            others, _dirs = parsers.scan_inode_chunk(
                buf, 0, sb.inodesize, startino, sb.meta_uuid, free, holemask,
                c.flags2_plain, True, sb.agblklog, sb.agcount, sb.agblocks,
                fs.ag_length(sb.agcount - 1), c.agfl_block, c.max_file_offset, itype,
                nlinks, 0, sb.rootino, [array.array("q") for _ in range(sb.agcount)], None)
            plain += sum(1 for t in itype if t == 8)
            others_total += sum(1 for i in others if not (free >> i) & 1)
        assert plain >= 140, (plain, others_total)


# -- the native inode scan ---------------------------------------------------------
# (offset, width) of the inode core fields the inode check looks at
_CORE_FIELDS = {"mode": (2, 2), "format": (5, 1), "onlink": (6, 2), "nlink": (16, 4),
                "pad": (24, 8), "atime_ns": (36, 4), "crtime_ns": (148, 4), "size": (56, 8),
                "nblocks": (64, 8), "extsize": (72, 4), "nextents": (76, 4),
                "anextents": (80, 2), "forkoff": (82, 1), "aformat": (83, 1),
                "flags": (90, 2), "next_unlinked": (96, 4), "flags2": (120, 8),
                "cowextsize": (128, 4), "ino": (152, 8)}


def mutate_inode(rng, raw: bytearray, isize: int) -> None:
    """Change one field of an inode in use (or a byte of its literal area),
    to a value its checks care about."""
    name = rng.choice(list(_CORE_FIELDS) + ["literal", "literal", "size", "size", "type",
                                            "type", "unwritten", "attr"])
    if name == "attr" and raw[82]:
        # a byte of the attr fork (a shortform one's header, flags, names,
        # parent pointer records)
        start = 176 + raw[82] * 8
        at = start + rng.randrange(max(1, min(80, isize - start)))
        raw[at] = rng.choice((0, raw[at] ^ (1 << rng.randrange(8)), ord("/"), 0xFF,
                              raw[at] + 1 & 0xFF))
        return
    if name in ("literal", "attr"):
        size = int.from_bytes(raw[56:64], "big")
        at = 176 + rng.randrange(max(1, min(64, size, isize - 176)))
        raw[at] = rng.choice((0, raw[at] ^ (1 << rng.randrange(8)), ord("/"), 0xFF))
        return
    if name == "unwritten":             # the first extent record's flag
        raw[176] ^= 0x80
        return
    if name == "type":
        mode = int.from_bytes(raw[2:4], "big")
        t = rng.choice((0o010000, 0o020000, 0o040000, 0o060000, 0o100000, 0o120000,
                        0o140000, 0o170000, 0))
        raw[2:4] = ((mode & 0o7777) | t).to_bytes(2, "big")
        return
    off, width = _CORE_FIELDS[name]
    old = int.from_bytes(raw[off:off + width], "big")
    top = (1 << 8 * width) - 1
    new = rng.choice((0, 1, top, old + 1, max(0, old - 1), old ^ (1 << rng.randrange(8 * width)),
                      rng.randrange(top + 1)))
    if name == "size":
        lit = isize - 176
        new = rng.choice((0, 1, 300, 1023, 1024, lit - 8, lit, lit + 1, 1 << 63,
                          0x800000000, 0x800000001, old + 1, max(0, old - 1)))
    if name == "forkoff":
        new = rng.choice((new, 0, (isize - 176) >> 3, 10))
    raw[off:off + width] = (new & top).to_bytes(width, "big")


class _SlowScan:
    """The parsers module with a scan that sends every inode to the Python
    check."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    @staticmethod
    def scan_inode_chunk(chunk, base, isize, first, uuid, free, holemask, *rest, **kw):
        return [i for i in range(64) if not holemask >> (i // 4) & 1], []


def _inode_phase(monkeypatch, fs, state, chunks, scanner):
    """The check's state after its inode phase over ``fs`` from ``state``
    (a Checker's attributes after the phases before it) with the inode chunk
    buffers ``chunks`` ({(agno, k): (buffer, offset)}; the chunks left out
    are not looked at) and ``scanner`` as the inode phase's parsers
    module."""
    import copy

    from fstool.ops.check import Checker
    monkeypatch.setattr(inodes_mod, "parsers", scanner)
    c = Checker(fs)
    c.__dict__.update(copy.deepcopy(state))
    monkeypatch.setattr(inodes_mod, "_chunk_buffers",
                        lambda ctx, agno, recs: ((k, *chunks[agno, k]) for k in range(len(recs))
                                                 if (agno, k) in chunks))
    c.run_phase(c.phase("inodes"))
    tab = {a: (bytes(t.itype), list(t.nlinks), t.psums and list(t.psums))
           for a, t in c.tables.items()}
    return ([f.as_dict() for f in c.findings], {a: sorted(v) for a, v in c.claims.items()},
            {a: sorted(v) for a, v in c.rmap_expect.items()}, tab, c.dirs, c.dir_raw,
            c.next_unlinked)


@pytest.fixture(params=["kernel", "pptr"])
def scan_img(request):
    """The kernel-written fixture tree, and the kernel-written parent-pointer
    image (fixtures/pptr.py: parent pointers in every attr fork form)."""
    if request.param == "kernel":
        return request.getfixturevalue("kernel_img"), 200
    if not pptr.available():
        pytest.skip("needs root, a kernel loop mount of XFS and xfsprogs 6.10.1")
    return pptr.pptr_image(), 80


def test_inode_scan_fast_path_keeps_the_findings(monkeypatch, scan_img):
    """The kernel-written fixture tree's inode chunks (files, directories of
    every form, symlinks inline and remote, devices, xattrs), as they are and
    with one or two fields of some inodes changed (the CRC mostly made right
    again, so that the change reaches the checks): the inode phase with the
    native scan (each backend) finds, claims and records exactly what it
    does when every inode goes to the Python check; on a parent-pointer
    image, it takes off each inode's slot of the parent pointer sums the
    same."""
    from fstool._backend import parsers
    from fstool.fs.filesystem import Filesystem
    from fstool.ops.check import Checker
    scanners = [PARSERS] + ([fstool_native.load()] if fstool_native.is_native(
        fstool_native.load()) else [])
    rng = random.Random(7)
    found = 0
    img, trials = scan_img
    with Filesystem(img) as fs:
        sb = fs.sb
        c = Checker(fs)
        for name in ("superblocks", "ag_headers", "free_space", "inode_btrees", "refcounts"):
            c.run_phase(c.phase(name))
        state = {k: v for k, v in c.__dict__.items() if k not in ("fs", "sb", "progress")}
        clean = {(agno, k): (bytes(buf), base) for agno in c.tables
                 for k, buf, base in inodes_mod._chunk_buffers(c, agno, c.chunks[agno])}
        isize = sb.inodesize
        # (file type, fork format) -> [(chunk, offset of an inode in use)]
        by_type = {}
        for key, (buf, base) in clean.items():
            for i in range(64):
                at = base + i * isize
                if at + isize <= len(buf) and buf[at + 2:at + 4] != b"\0\0":
                    by_type.setdefault((buf[at + 2] >> 4, buf[at + 5]), []).append((key, at))
        assert {(4, 1), (4, 2), (8, 2), (10, 1)} <= set(by_type)
        root = next((key, base + i * isize) for key, (buf, base) in clean.items()
                    for i in range(64) if (key[0] << sb.agino_log) +
                    c.chunks[key[0]][key[1]][0] + i == sb.rootino)
        for trial in range(trials):
            chunks = {key: (bytearray(buf), base) for key, (buf, base) in clean.items()}
            touched = set()
            for _ in range(0 if trial == 0 else rng.randrange(1, 8)):
                key, at = rng.choice(by_type[rng.choice(sorted(by_type))]) \
                    if rng.random() < 0.9 else root
                touched.add(key)
                buf = chunks[key][0]
                raw = buf[at:at + isize]
                if (key, at) == root and rng.random() < 0.5:
                    # the root inode made a plain socket (only a directory
                    # may be the root)
                    raw[2:4] = (0o140755).to_bytes(2, "big")
                    raw[5] = raw[82] = 0
                    raw[56:72] = bytes(16)          # size, nblocks
                    raw[76:80] = bytes(4)           # nextents
                for _ in range(rng.choice((1, 1, 2))):
                    mutate_inode(rng, raw, isize)
                if rng.random() < 0.9:
                    raw[100:104] = parsers.xfs_cksum(bytes(raw), 100).to_bytes(4, "little")
                buf[at:at + isize] = raw
            chunks = {key: (bytes(buf), base) for key, (buf, base) in chunks.items()
                      if trial == 0 or key in touched}
            want = _inode_phase(monkeypatch, fs, state, chunks, _SlowScan(parsers))
            for scanner in scanners:
                assert _inode_phase(monkeypatch, fs, state, chunks, scanner) == want, trial
            found += len(want[0]) > 0
        assert found > trials * 3 // 4       # the changes were found, mostly
        # the scan takes the tree's directories and inline symlinks itself
        kinds = set()
        for (agno, k), (buf, base) in clean.items():
            itype, nlinks = bytearray(64), array.array("I", bytes(256))
            rec = c.chunks[agno][k]
            _others, dirs = parsers.scan_inode_chunk(
                buf, base, isize, (agno << sb.agino_log) | rec[0], sb.meta_uuid, rec[4],
                rec[1], c.flags2_plain, sb.has_incompat(8), sb.agblklog, sb.agcount,
                sb.agblocks, fs.ag_length(sb.agcount - 1), c.agfl_block, c.max_file_offset,
                itype, nlinks, 0, sb.rootino, [array.array("q") for _ in range(sb.agcount)],
                [array.array("Q") for _ in range(sb.agcount)],
                array.array("Q", bytes(512)) if c.has_pptr else None, c.has_pptr)
            kinds.update(itype)
            assert dirs == [i for i in range(64) if itype[i] == 4]
        assert {4, 8, 10} <= kinds


# -- shortform directories -----------------------------------------------------------
def _sf_entries(raw: bytes, ftype: int = 1):
    """(offset in the inode, name length, inode number width) of each entry
    of a shortform directory, as far as they can be walked."""
    count, i8 = raw[176], raw[177]
    width = 8 if i8 else 4
    pos, out = 176 + 2 + width, []
    for _ in range(count):
        if pos + 3 > len(raw) or not raw[pos]:
            break
        out.append((pos, raw[pos], width))
        pos += 3 + raw[pos] + ftype + width
    return out


def mutate_sf_dir(rng, raw: bytearray, ino: int, targets: list, meta: int) -> None:
    """Change one thing of a shortform directory: its header, an entry's
    offset, name, file type or inode number, or the inode's size or fork
    offset."""
    ents = [e for e in _sf_entries(bytes(raw)) if e[0] + 3 + e[1] + 1 + e[2] <= len(raw)]
    what = rng.choice(("count", "i8", "parent", "inumber", "inumber", "offset", "name",
                       "name", "ftype", "size", "forkoff", "byte"))
    if what in ("offset", "name", "ftype", "inumber") and not ents:
        what = "byte"
    if what == "count":
        raw[176] = (raw[176] + rng.choice((-1, 1, 5))) & 0xFF
    elif what == "i8":
        raw[177] ^= 1
    elif what == "parent":
        v = rng.choice((rng.choice(targets), ino, 0, 0xFFFFFFFF, meta))
        raw[178:182] = (v & 0xFFFFFFFF).to_bytes(4, "big")
    elif what == "byte":
        at = 176 + rng.randrange(int.from_bytes(raw[56:64], "big") + 2)
        raw[at] = rng.choice((0, ord("/"), rng.randrange(256), raw[at] ^ 1))
    elif what == "size":
        old = int.from_bytes(raw[56:64], "big")
        raw[56:64] = rng.choice((old + 1, old - 1, 5, 400, 0)).to_bytes(8, "big")
    elif what == "forkoff":
        raw[82] = rng.choice((0, 1, 5, 42))
    else:
        pos, namelen, width = rng.choice(ents)
        if what == "offset":
            raw[pos + 1:pos + 3] = rng.choice((0, 8, 0xFFFF)).to_bytes(2, "big")
        elif what == "name":
            other = rng.choice(ents)
            if other[1] == namelen and rng.random() < 0.5:      # a name twice
                raw[pos + 3:pos + 3 + namelen] = raw[other[0] + 3:other[0] + 3 + namelen]
            else:
                raw[pos + 3 + rng.randrange(namelen)] = rng.choice((0, ord("/"), ord("x")))
        elif what == "ftype":
            raw[pos + 3 + namelen] = rng.randrange(9)
        else:
            at = pos + 3 + namelen + 1
            v = rng.choice((rng.choice(targets), rng.choice(targets), ino, 0, 0xFFFFFFFF,
                            1 << 31, meta))
            raw[at:at + width] = (v & ((1 << 8 * width) - 1)).to_bytes(width, "big")


def _namespace_phase(monkeypatch, fs, state, dir_raw, fast: bool):
    """The namespace phase's findings and inode table from ``state`` (a
    Checker's attributes after the inode phase) with the directories'
    inodes ``dir_raw``, with or without the shortform fast path."""
    import copy

    from fstool.ops.check import Checker
    c = Checker(fs)
    c.__dict__.update(copy.deepcopy(state))
    c.dir_raw = dict(dir_raw)
    if not fast:
        # every shortform directory refused by the native loop: the Python
        # check looks at each
        from types import SimpleNamespace

        cur = ns_mod.checks
        slow = SimpleNamespace(**{k: getattr(cur, k) for k in dir(cur) if not k.startswith("__")})
        slow.ShortformRun = lambda *a: SimpleNamespace(run=lambda dirs, k, *b: (k, None))
        monkeypatch.setattr(ns_mod, "checks", slow)
        c.run_phase(c.phase("namespace"))
        monkeypatch.setattr(ns_mod, "checks", cur)
    else:
        c.run_phase(c.phase("namespace"))
    return ([f.as_dict() for f in c.findings], bytes(c.table.itype), list(c.table.refs))


def test_shortform_dir_fast_path_keeps_the_findings(monkeypatch, kernel_img):
    """The fixture tree's shortform directories, as they are and with their
    headers, entries, sizes and fork offsets changed (the CRC mostly made
    right again): the namespace phase with the native shortform check (each
    backend) finds and counts exactly what it does with the Python check
    alone."""
    from fstool._backend import parsers
    from fstool.fs.filesystem import Filesystem
    from fstool.ops.check import FIRST, PER_AG, Checker
    from fstool.ops.check import namespace as ns_mod
    backends = [PARSERS] + ([fstool_native.load()] if fstool_native.is_native(
        fstool_native.load()) else [])
    rng = random.Random(8)
    with Filesystem(kernel_img) as fs:
        c = Checker(fs)
        for phase in c.phases(FIRST, PER_AG):
            c.run_phase(phase)
        state = {k: v for k, v in c.__dict__.items() if k not in ("fs", "sb", "progress")}
        clean = dict(c.dir_raw)
        sf = sorted(ino for ino, raw in clean.items() if raw[5] == 1)
        assert len(sf) > 5
        # inode numbers to point entries at: directories, files, free inodes,
        # the realtime bitmap (a metadata inode)
        targets = sorted(clean) + \
            [c.tables[0].ino(s) for s in range(64 * len(c.tables[0].starts))][:200:7]
        meta = fs.sb.fields["sb_rbmino"]
        found = 0
        for trial in range(60):
            dir_raw = dict(clean)
            for _ in range(0 if trial == 0 else rng.randrange(1, 8)):
                ino = rng.choice(sf)
                raw = bytearray(dir_raw[ino])
                mutate_sf_dir(rng, raw, ino, targets, meta)
                if rng.random() < 0.9:
                    raw[100:104] = parsers.xfs_cksum(bytes(raw), 100).to_bytes(4, "little")
                dir_raw[ino] = bytes(raw)
            want = _namespace_phase(monkeypatch, fs, state, dir_raw, False)
            for mod in backends:
                # the directory loop (checks.ShortformRun) of the backend
                monkeypatch.setattr(ns_mod, "checks", PURE if mod is PARSERS else
                                    fstool_native.load(name="checks"))
                assert _namespace_phase(monkeypatch, fs, state, dir_raw, True) == want, trial
            monkeypatch.setattr(ns_mod, "checks", fstool_native.load(name="checks"))
            found += len(want[0]) > len(state["findings"])
            if trial == 0:
                assert want[0] == [f.as_dict() for f in state["findings"]]
        assert found > 45
        # the fast path takes the sound ones
        probe = Checker(fs)
        probe.__dict__.update(state)
        from fstool.ops.check.table import InodeTable
        tab = InodeTable.concat(state["tables"][a] for a in sorted(state["tables"]))
        args = ns_mod._shortform_args(probe, tab)
        accepted = sum(parsers.sf_dir_tally(clean[ino], ino, *args) is not None for ino in sf)
        assert accepted == len(sf)


# -- flat record arrays ------------------------------------------------------------------
def test_sort_records_sorts_as_tuples():
    """Flat records sort as Python sorts the tuples: field by field, signed
    for q arrays, unsigned for Q, with equal fields and one-field records."""
    rng = random.Random(11)
    for _ in range(400):
        width = rng.randrange(1, 6)
        signed = rng.random() < 0.5
        lo, hi = (-(1 << 63), (1 << 63) - 1) if signed else (0, (1 << 64) - 1)
        pool = [lo, hi, 0, 1] + [rng.randrange(lo, hi) for _ in range(3)]
        recs = [tuple(rng.choice(pool) if rng.random() < 0.7 else rng.randrange(lo, hi)
                      for _ in range(width)) for _ in range(rng.randrange(0, 40))]
        for mod in BACKENDS:
            arr = array.array("q" if signed else "Q", [v for r in recs for v in r])
            mod.sort_records(arr, width)
            assert list(zip(*[iter(arr)] * width)) == sorted(recs)
    with pytest.raises(ValueError):
        PURE.sort_records(array.array("q", [1, 2]), 3)


def test_sort_records_takes_the_runs_there_are():
    """Records already in order, or in long ascending runs with a few out
    of place (as the rmapbt's records and the mappings gathered inode by
    inode come), sort as the tuples sort: the natural merge sort's runs,
    an odd number of them, equal records across a run's boundary."""
    rng = random.Random(12)
    for _ in range(60):
        width = rng.randrange(1, 5)
        n = rng.randrange(2, 3000)
        recs = sorted(tuple(rng.randrange(0, 50) for _ in range(width)) for _ in range(n))
        for _ in range(rng.choice((0, 1, 2, 7, 40))):
            i, j = rng.randrange(n), rng.randrange(n)
            recs[i], recs[j] = recs[j], recs[i]
        if rng.random() < 0.3:
            cut = rng.randrange(n)
            recs = recs[cut:] + recs[:cut]
        for mod in BACKENDS:
            arr = array.array("Q", [v for r in recs for v in r])
            mod.sort_records(arr, width)
            assert list(zip(*[iter(arr)] * width)) == sorted(recs)


def test_record_lists_read_as_lists_of_tuples():
    """Claims and Rmaps take and give the tuples a list would, fall back to
    a list where a number does not fit their arrays, and sort as the list
    of tuples sorts (Rmaps in the rmapbt's unsigned order)."""
    c = Claims()
    for rec in [(5, 2, -3), (1, 4, 28), (1, 4, -7)]:
        c.append(rec)
    assert list(c) == [(5, 2, -3), (1, 4, 28), (1, 4, -7)] and len(c) == 3
    c.sort()
    assert list(c) == [(1, 4, -7), (1, 4, 28), (5, 2, -3)] and c.flat() is not None
    c.append((1 << 70, 1, 4))                      # a damaged geometry's number
    assert c.flat() is None and list(c)[-1] == (1 << 70, 1, 4) and len(c) == 4
    r = Rmaps()
    recs = [(9, 1, 77, 5, 0), (9, 1, -5, 0, 0), (3, 2, 77, 8, 1 << 61), (3, 2, 77, 1, 1 << 62)]
    for rec in recs:
        r.append(rec)
    assert list(r) == recs and r.flat() is not None
    r.sort()
    assert list(r) == sorted(recs, key=lambda x: (x[0], x[1], x[2] & ((1 << 64) - 1),
                                                  x[3] | x[4]))
    r.append((1, 1, 2, 1 << 62, 0))                # an offset reaching the flags
    assert r.flat() is None and list(r)[-1] == (1, 1, 2, 1 << 62, 0)


def rmap_case(rng):
    """An AG's claims (metadata and file data), the fork mappings check
    expects and the rmapbt's records: the merged records, or those with one
    changed, dropped, split or doubled."""
    claims, maps, pos = [], [], 0
    for _ in range(rng.randrange(1, 30)):
        n = rng.randrange(1, 9)
        owner = rng.choice((-3, -4, -5, -6, -7, -8, -21, 20, 24, 28))
        claims.append((pos, n, owner))
        if owner >= 0:
            fl = rng.choice((0, 0, 0, 1 << 61, 1 << 62, 1 << 63))
            off = 0 if fl & (1 << 62) else rng.choice((0, pos, pos + 1, 3))
            maps.append((pos, n, owner >> 2, off, fl))
            if rng.random() < 0.05:                # the same mapping twice
                maps.append((pos, n, owner >> 2, off, fl))
        pos += n + rng.choice((0, 0, 1))
    merged = spacemap_mod.rmap_records(claims, maps)
    disk = [list(r) for r in merged]
    r = rng.random()
    if disk and r < 0.4:
        i = rng.randrange(len(disk))
        k = rng.randrange(5)
        if r < 0.1:
            del disk[i]
        elif r < 0.2:
            disk.append(list(disk[i]))
        elif r < 0.3 and disk[i][1] > 1:           # split in two
            s, n, o, off, fl = disk[i]
            disk[i] = [s, 1, o, off, fl]
            disk.append([s + 1, n - 1, o, off + (0 if o < 0 or fl & (1 << 62) else 1), fl])
        else:
            disk[i][k] = [disk[i][k] + 1, disk[i][k] ^ (1 << 61)][k == 4]
    return claims, maps, [tuple(d) for d in disk], merged


def test_rmaps_match_is_the_python_comparison():
    """The reverse-mapping comparison's fast path says the rmapbt holds
    exactly the merged records only when the Python comparison says so, and
    says so whenever it does but for mappings the merge could take in
    either order (doubled ones)."""
    rng = random.Random(12)
    owners = spacemap_mod._RMAP_OWNER_PAIRS
    outcomes = set()
    for _ in range(2000):
        claims, maps, disk, merged = rmap_case(rng)
        have = Rmaps()
        for rec in disk:
            have.append(rec)
        expect = Rmaps()
        for rec in maps:
            expect.append(rec)
        want = sorted(have) == sorted(merged)
        doubled = len(set(maps)) < len(maps)
        outcomes.add(want)
        for mod in BACKENDS:
            got = mod.rmaps_match(flat_claims(claims), expect.flat(), have.flat(), owners)
            assert got == want or (doubled and not got), (claims, maps, disk)
    assert outcomes == {True, False}


class RmapStub:
    """Just enough of a check context to run the rmapbt leaf check over
    leaves given as lists of records: an AG of 1,000 blocks, 16-bit AG
    inode numbers, 4 AGs (its tree walk and header count check put in
    place of the module's by ``stub_rmap``)."""

    def __init__(self, leaves, reflink):
        self.sb = SimpleNamespace(agino_log=16, inopblog=4, agcount=4, agblocks=1000,
                                  has_ro_compat=lambda f: reflink)
        self.fs = SimpleNamespace(ag_length=lambda agno: 1000)
        self.rmaps = RecordMap(Rmaps)
        self.found = []
        self.leaves = leaves

    def walk_ag_tree(self, agno, name, kind, root, levels, owner, on_leaf, *_keys):
        for addr, recs in enumerate(self.leaves):
            on_leaf(SimpleNamespace(addr=addr + 10, recs=recs), False)
        return len(self.leaves)

    def expect(self, *args):
        pass

    def report(self, code, message, **where):
        self.found.append((code, message, sorted(where.items())))


def stub_rmap(monkeypatch):
    monkeypatch.setattr(btrees_mod, "walk_ag_tree", RmapStub.walk_ag_tree)
    monkeypatch.setattr(btrees_mod, "_expect", RmapStub.expect)


def rmap_leaves(rng):
    """rmapbt leaves of sound records in key order, now and then one
    damaged: flags, lengths, owners, offsets, order."""
    recs, s = [], 0
    for _ in range(rng.randrange(0, 60)):
        s += rng.randrange(0, 3)
        n = rng.randrange(1, 20)
        if rng.random() < 0.4:
            owner, off = rng.choice((-3, -5, -6, -7, -8)) & ((1 << 64) - 1), 0
        else:
            owner = (rng.randrange(4) << 16) | rng.randrange(1 << 14)
            off = rng.randrange(100) | rng.choice((0, 0, 1 << 61, 1 << 62, 1 << 63))
        recs.append([s, n, owner, off])
    for _ in range(rng.choice((0, 0, 1, 2, 3))):
        if not recs:
            break
        r = rng.choice(recs)
        k = rng.randrange(4)
        r[k] = rng.choice((0, r[k] + 1, max(0, r[k] - 1), 999, 1000,
                           r[k] ^ (1 << rng.randrange(64)), (1 << 64) - 9, (1 << 64) - 2,
                           3 << 61, 1 << 55))
    recs.sort(key=lambda r: (r[0], r[2], r[3]))
    if recs and rng.random() < 0.2:                # out of order
        i = rng.randrange(len(recs))
        recs.insert(rng.randrange(len(recs)), recs.pop(i))
    recs = [tuple(r) for r in recs]
    leaves, i = [], 0
    while i < len(recs):
        k = rng.randrange(1, 20)
        leaves.append(recs[i:i + k])
        i += k
    return leaves


def test_rmap_leaf_fast_path_keeps_the_findings(monkeypatch):
    """The rmapbt leaves' records: the same findings and records with the
    native common-case test (each backend) as when every record goes to the
    record-by-record checks."""
    rng = random.Random(13)
    stub_rmap(monkeypatch)
    outcomes = set()
    for _ in range(1500):
        leaves = rmap_leaves(rng)
        reflink = rng.random() < 0.5
        monkeypatch.setattr(btrees_mod, "checks", SimpleNamespace(
            rmap_leaf_take=lambda leaf, i, out, *a: (i, a[-1])))
        slow = RmapStub(leaves, reflink)
        btrees_mod._rmap_tree(slow, 0, {"agf_roots": [0, 0, 1], "agf_levels": [0, 0, 1]})
        outcomes.add(bool(slow.found))
        for mod in BACKENDS:
            monkeypatch.setattr(btrees_mod, "checks", mod)
            fast = RmapStub(leaves, reflink)
            btrees_mod._rmap_tree(fast, 0, {"agf_roots": [0, 0, 1], "agf_levels": [0, 0, 1]})
            assert fast.found == slow.found, leaves
            assert list(fast.rmaps[0]) == list(slow.rmaps[0])
    assert outcomes == {True, False}


def test_rmap_keys_fast_path_keeps_the_findings(monkeypatch):
    """The rmapbt key check of a leaf against the high key its parent holds
    for it: the same findings with the greatest key computed natively (each
    backend) as by the Python code alone."""
    rng = random.Random(17)
    stub_rmap(monkeypatch)
    outcomes = set()
    for _ in range(1500):
        for recs in rmap_leaves(rng):
            tops = [(s + n - 1, o, f & ~(1 << 61)) for s, n, o, f in recs]
            base = max(tops, default=(0, 0, 0))
            hs, ho, hf = (max(0, v + rng.choice((-1, 0, 0, 1))) for v in base)
            key = struct.pack(">IQQIQQ", 0, 0, 0, hs & 0xFFFFFFFF, ho & ((1 << 64) - 1),
                              hf & ((1 << 64) - 1))
            blk = SimpleNamespace(addr=10, level=0, recs=recs, keys=[])
            stub = RmapStub([recs], True)
            monkeypatch.setattr(btrees_mod, "checks", SimpleNamespace(
                rmap_leaf_top=lambda r: None))
            btrees_mod._rmap_keys(stub, 0)[1](blk, key)
            want = stub.found
            outcomes.add(bool(want))
            for mod in BACKENDS:
                monkeypatch.setattr(btrees_mod, "checks", mod)
                stub = RmapStub([recs], True)
                btrees_mod._rmap_keys(stub, 0)[1](blk, key)
                assert stub.found == want, (recs, key)
    assert outcomes == {True, False}


def _python_reach(edges, root):
    children = defaultdict(list)
    for a, b in zip(edges[::2], edges[1::2]):
        children[a].append(b)
    seen, stack = {root}, [root]
    while stack:
        for c in children[stack.pop()]:
            if c not in seen:
                seen.add(c)
                stack.append(c)
    return seen


def test_namespace_kernels_agree():
    """The namespace phase's kernels on random tables and directory graphs:
    both backends give the same results and leave the same arrays;
    reachability is the search over the links; the link count doubts are
    every slot whose count or reach is wrong; the '..' doubts every
    directory whose '..' is not its parent."""
    rng = random.Random(19)
    for _ in range(300):
        nchunks = rng.randrange(1, 6)
        starts = array.array("Q", sorted(rng.sample(range(0, 5000, 64), nchunks)))
        n = 64 * nchunks
        ino = [starts[s >> 6] + (s & 63) for s in range(n)]
        itype = bytearray(rng.choice((0, 4, 4, 8, 8, 10)) for _ in range(n))
        dirs = [s for s in range(n) if itype[s] == 4] or [0]
        itype[dirs[0]] = 4
        odds = []
        for d in dirs:
            odd = []
            for _ in range(rng.randrange(0, 6)):
                c = rng.choice(dirs) if rng.random() < 0.8 else rng.randrange(n)
                flags = 4 if rng.random() < 0.7 else rng.choice((1, 2, 6, 8, 16, 20, 32))
                odd.append((b"n%d" % c, ino[c] if rng.random() < 0.95 else 99999, 2, flags))
            odds.append((ino[d], odd))
        results = []
        for mod in BACKENDS:
            subdirs = array.array("I", bytes(4 * n))
            parent = array.array("Q", bytes(8 * n))
            edges = array.array("q")
            rest = [mod.dir_links(odd, d, starts, subdirs, parent, edges) for d, odd in odds]
            root = rng.choice(dirs) if not results else results[0][-1]
            reach = mod.reach_slots(edges, root, n)
            assert {s for s in range(n) if reach[s]} == _python_reach(list(edges), root)
            nlinks = array.array("I", (rng.randrange(4) for _ in range(n)))
            refs = array.array("I", (rng.randrange(3) for _ in range(n)))
            if results:
                nlinks, refs = results[0][-3], results[0][-2]
            doubts = mod.link_doubts(itype, nlinks, refs, subdirs, reach, root)
            for s in range(n):
                if not itype[s]:
                    wrong = False
                elif itype[s] == 4:
                    want = 2 + subdirs[s] if refs[s] else 0
                    wrong = s == root or not reach[s] or nlinks[s] != want
                else:
                    wrong = refs[s] == 0 or nlinks[s] != refs[s]
                assert (s in doubts) == wrong
            keys = array.array("Q", (ino[d] for d in dirs))
            vals = array.array("Q", (rng.choice(ino) for _ in dirs))
            if results:
                vals = results[0][-4]
            dd = mod.dotdot_doubts(keys, vals, starts, parent)
            assert dd == [i for i, d in enumerate(dirs)
                          if parent[d] and parent[d] != vals[i]]
            unreached = mod.unreached_dirs(array.array("Q", (ino[d] for d in dirs)), starts,
                                           reach)
            assert unreached == [ino[d] for d in dirs if not reach[d]]
            results.append((rest, list(subdirs), list(parent), list(edges), bytes(reach),
                            doubts, dd, unreached, vals, nlinks, refs, root))
        assert all(r[:8] == results[0][:8] for r in results)
        # what dir_links drops are the plain directory links whose target had no parent
        for (d, odd), rest in zip(odds, results[0][0]):
            assert all(e in odd for e in rest)
            assert all(e[3] == 4 for e in odd if e not in rest)


def test_namespace_link_fast_path_keeps_the_findings(monkeypatch, kernel_img):
    """The fixture tree's shortform directories with entries pointed at
    other directories, files and free inodes (directories linked twice,
    cut off, wrong link counts): the namespace phase finds and counts
    exactly the same with the plain directory links counted natively (each
    backend) as with every link counted by the Python code."""
    from fstool._backend import parsers
    from fstool.fs.filesystem import Filesystem
    from fstool.ops.check import FIRST, PER_AG, Checker
    from fstool.ops.check import namespace as ns_mod
    rng = random.Random(23)
    with Filesystem(kernel_img) as fs:
        c = Checker(fs)
        for phase in c.phases(FIRST, PER_AG):
            c.run_phase(phase)
        state = {k: v for k, v in c.__dict__.items() if k not in ("fs", "sb", "progress")}
        clean = dict(c.dir_raw)
        sf = sorted(ino for ino, raw in clean.items() if raw[5] == 1)
        targets = sorted(clean) + \
            [c.tables[0].ino(s) for s in range(64 * len(c.tables[0].starts))][:200:7]
        meta = fs.sb.fields["sb_rbmino"]
        codes = set()
        for trial in range(25):
            dir_raw = dict(clean)
            for _ in range(0 if trial == 0 else rng.randrange(1, 8)):
                ino = rng.choice(sf)
                raw = bytearray(dir_raw[ino])
                mutate_sf_dir(rng, raw, ino, targets, meta)
                raw[100:104] = parsers.xfs_cksum(bytes(raw), 100).to_bytes(4, "little")
                dir_raw[ino] = bytes(raw)
            slow = SimpleNamespace(**{k: getattr(PURE, k) for k in dir(PURE)
                                      if not k.startswith("__")})
            slow.dir_links = lambda odd, *a: odd
            monkeypatch.setattr(ns_mod, "checks", slow)
            want = _namespace_phase(monkeypatch, fs, state, dir_raw, True)
            codes.update(f["code"] for f in want[0])
            for mod in BACKENDS:
                monkeypatch.setattr(ns_mod, "checks", mod)
                assert _namespace_phase(monkeypatch, fs, state, dir_raw, True) == want, trial
        assert {"DIR_MULTIPLE_PARENTS", "NLINK"} <= codes, codes


def test_dir_block_runs_cover_every_directory_block(kernel_img):
    """checks.dir_block_runs (what check asks the kernel to read ahead):
    each backend gives the same ascending, disjoint runs, and they hold
    every block of every directory whose data fork is in extents form (the
    map as the read model decodes it), and nothing from the other
    inodes."""
    from fstool.fs.filesystem import Filesystem
    from fstool.ops.check import FIRST, PER_AG, Checker
    native = fstool_native.load(name="checks")
    with Filesystem(kernel_img) as fs:
        c = Checker(fs)
        for phase in c.phases(FIRST, PER_AG):
            c.run_phase(phase)
        sb = fs.sb
        raws = list(c.dir_raw.values())
        args = (sb.agblklog, sb.agblocks, sb.agcount, 4)
        runs = PURE.dir_block_runs(raws, *args)
        assert native.dir_block_runs(raws, *args) == runs
        assert all(a < b for a, b in runs)
        assert all(runs[i][1] + 4 <= runs[i + 1][0] for i in range(len(runs) - 1))
        want = 0
        for ino, raw in c.dir_raw.items():
            if raw[5] != 2:
                continue
            for _off, fsb, n, _unw in fs.inode(ino).extents():
                lin = (fsb >> sb.agblklog) * sb.agblocks + (fsb & ((1 << sb.agblklog) - 1))
                assert any(a <= lin and lin + n <= b for a, b in runs), (ino, fsb)
                want += 1
        assert want > 3
        # the same inodes with their format byte changed: no directory in
        # extents form, nothing to read
        others = [raw[:5] + b"\x01" + raw[6:] for raw in raws]
        assert PURE.dir_block_runs(others, *args) == [] == native.dir_block_runs(others, *args)


def _mutate_block_dir(rng, buf: bytearray) -> None:
    """One change to a block-form directory's block: an entry byte, the
    bestfree table, a leaf entry's hash or address, the tail's count or
    stale count, a header field (magic, blkno, uuid, owner) or its LSN."""
    n = len(buf)
    count = int.from_bytes(buf[n - 8:n - 4], "big")
    start = n - 8 - 8 * count
    what = rng.choice(("entry", "entry", "bestfree", "hash", "addr", "count", "stale",
                       "header", "lsn"))
    if what == "entry" and start > 64:
        at = rng.randrange(64, start)
        buf[at] = rng.choice((0, 0xFF, ord("/"), buf[at] ^ 1, rng.randrange(256)))
    elif what == "bestfree":
        at = rng.randrange(48, 60)
        buf[at] = rng.choice((0, buf[at] ^ 8, rng.randrange(256)))
    elif what in ("hash", "addr") and count:
        at = start + 8 * rng.randrange(count) + (0 if what == "hash" else 4)
        v = int.from_bytes(buf[at:at + 4], "big")
        v = rng.choice((0, v + 1, v - 1, 0xFFFFFFFF)) & 0xFFFFFFFF
        buf[at:at + 4] = v.to_bytes(4, "big")
    elif what in ("count", "stale"):
        at = n - 8 if what == "count" else n - 4
        v = int.from_bytes(buf[at:at + 4], "big")
        buf[at:at + 4] = (rng.choice((0, v + 1, max(v - 1, 0), 600, 1 << 30))
                          ).to_bytes(4, "big")
    elif what == "lsn":
        buf[16:24] = rng.choice(((1 << 40) | 5, 0, 1 << 62)).to_bytes(8, "big")
    else:
        at = rng.choice((0, 8, 24, 40)) + rng.randrange(4)
        buf[at] ^= 1 << rng.randrange(8)


def test_block_dir_fast_path_keeps_the_findings(monkeypatch, kernel_img, tmp_path):
    """The fixture tree's block-form directories, as they are and with their
    blocks changed (entries, bestfree table, leaf hashes and addresses, the
    tail's counts, header fields, the LSN; the CRC mostly made right
    again): the namespace phase checking them without their Inode
    (dirs.check_block_dir with each backend's v5_hdr_sound and
    block_dir_tally) finds and counts exactly what check_dir finds, and
    takes every sound one."""
    import os
    import subprocess

    from fstool._backend import parsers
    from fstool.fs.dirform import BLOCK, form
    from fstool.fs.filesystem import Filesystem
    from fstool.fs.inode import Inode
    from fstool.ops.check import FIRST, PER_AG, Checker
    img = tmp_path / "k.img"
    # (the fixture image is sparse: 1 GiB long, about 80 MB written)
    subprocess.run(["cp", "--sparse=always", str(kernel_img), str(img)], check=True)
    rng = random.Random(38)
    taken = []
    real = dirs_mod.check_block_dir

    def counted(*a):
        ok = real(*a)
        taken.append(ok)
        return ok
    with Filesystem(str(img)) as fs:
        c = Checker(fs)
        for phase in c.phases(FIRST, PER_AG):
            c.run_phase(phase)
        state = {k: v for k, v in c.__dict__.items() if k not in ("fs", "sb", "progress")}
        clean = dict(c.dir_raw)
        blocks = {}
        for ino, raw in clean.items():
            node = Inode(fs, ino, raw)
            if raw[5] == 2 and form(node) == BLOCK:
                blocks[ino] = node.read_fork_blocks(0, fs.sb.dirblkfsbs)[0] << 9
        assert len(blocks) >= 2
        fd = os.open(img, os.O_RDWR)
        try:
            codes = set()
            for trial in range(25):
                changed = {}
                for ino in rng.sample(sorted(blocks), 0 if trial == 0 else rng.randrange(1, 3)):
                    at = blocks[ino]
                    old = os.pread(fd, fs.sb.dirblksize, at)
                    buf = bytearray(old)
                    _mutate_block_dir(rng, buf)
                    if rng.random() < 0.9:
                        buf[4:8] = parsers.xfs_cksum(bytes(buf), 4).to_bytes(4, "little")
                    changed.setdefault(at, old)
                    os.pwrite(fd, bytes(buf), at)
                monkeypatch.setattr(ns_mod, "check_block_dir", lambda *a: False)
                want = _namespace_phase(monkeypatch, fs, state, clean, True)
                codes.update(f["code"] for f in want[0])
                monkeypatch.setattr(ns_mod, "check_block_dir", counted)
                for mod in BACKENDS:
                    monkeypatch.setattr(dirs_mod, "checks", mod)
                    del taken[:]
                    assert _namespace_phase(monkeypatch, fs, state, clean, True) == want, trial
                    if trial == 0:
                        # the sound ones all taken, and nothing found in them
                        assert taken.count(True) == len(blocks)
                        assert want[0] == [f.as_dict() for f in state["findings"]]
                for at, old in changed.items():
                    os.pwrite(fd, old, at)
        finally:
            os.close(fd)
    assert {"DIR_CORRUPT", "DIR_LEAF", "DIR_BESTFREE", "LSN_AHEAD"} <= codes, codes
