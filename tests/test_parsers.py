"""The compiled and the pure-Python parsers (one source) agree, on known
vectors and on random and corrupted buffers."""
import random
import shutil
import struct
import subprocess
from array import array

import pytest

import fstool
import fstool_native
from fixtures import modern, pptr
from fixtures.dirdata import data_entry
from fstool.ops.stats import ag_tree

PURE = fstool_native.load(pure=True)
NATIVE = fstool_native.load()
BACKENDS = [PURE] + ([NATIVE] if fstool_native.is_native(NATIVE) else [])
needs_native = pytest.mark.skipif(not fstool_native.is_native(NATIVE),
                                  reason="native backend not built")


def outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except ValueError:
        return ("ValueError", None)


@pytest.mark.parametrize("mod", BACKENDS, ids=lambda m: "native" if
                         fstool_native.is_native(m) else "pure")
def test_crc32c_check_value(mod):
    assert mod.crc32c(b"123456789") == 0xE3069283
    assert mod.crc32c(b"") == 0
    # continuing a CRC equals computing it in one go
    assert mod.crc32c(b"6789", mod.crc32c(b"12345")) == 0xE3069283


@pytest.mark.parametrize("mod", BACKENDS, ids=lambda m: "native" if
                         fstool_native.is_native(m) else "pure")
def test_xfs_cksum_zeroes_the_field(mod):
    rng = random.Random(7)
    buf = bytearray(rng.randbytes(512))
    crc = mod.xfs_cksum(bytes(buf), 100)
    buf[100:104] = b"\0\0\0\0"
    assert crc == mod.crc32c(bytes(buf))
    buf[100:104] = struct.pack("<I", crc)
    assert mod.xfs_cksum_ok(bytes(buf), 100)
    buf[300] ^= 1
    assert not mod.xfs_cksum_ok(bytes(buf), 100)
    with pytest.raises(ValueError):
        mod.xfs_cksum(b"abc", 0)


@needs_native
def test_crc_parity_random():
    rng = random.Random(1)
    for size in (0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 511, 512, 4095, 4096, 4097, 65536):
        data = rng.randbytes(size)
        assert NATIVE.crc32c(data) == PURE.crc32c(data), size
        for off in {0, size // 2, max(0, size - 4)}:
            if off + 4 <= size:
                assert NATIVE.xfs_cksum(data, off) == PURE.xfs_cksum(data, off)


def _dir_block(rng, n, ftype=True):
    """A synthetic directory data region with entries and free gaps."""
    buf = bytearray(64)
    for i in range(n):
        if rng.random() < 0.2:
            length = 8 * rng.randrange(1, 5)
            pos = len(buf)
            gap = bytearray(length)
            gap[0:4] = struct.pack(">HH", 0xFFFF, length)
            gap[-2:] = struct.pack(">H", pos)
            buf += gap
        name = rng.randbytes(rng.randrange(1, 40)).replace(b"/", b"x").replace(b"\0", b"y")
        buf += data_entry(len(buf), rng.randrange(1 << 40), name,
                          rng.randrange(1, 8) if ftype else None)
    return bytes(buf)


@pytest.mark.parametrize("mod", BACKENDS, ids=lambda m: "native" if
                         fstool_native.is_native(m) else "pure")
def test_dir_entries_parse(mod):
    rng = random.Random(3)
    block = _dir_block(rng, 50)
    ents = mod.dir2_data_entries(block, 64, len(block), True)
    assert len(ents) == 50
    for off, ino, name, ftype in ents:
        assert struct.unpack_from(">Q", block, off)[0] == ino
        assert block[off + 9:off + 9 + len(name)] == name
        assert 1 <= ftype <= 7


@needs_native
def test_parser_parity_on_corrupted_buffers():
    rng = random.Random(11)
    for trial in range(400):
        ftype = trial % 2 == 0
        block = bytearray(_dir_block(rng, rng.randrange(1, 30), ftype))
        for _ in range(rng.randrange(0, 4)):
            block[rng.randrange(len(block))] = rng.randrange(256)
        end = len(block) - rng.choice((0, 0, 1, 5))
        b = bytes(block)
        assert outcome(NATIVE.dir2_data_entries, b, 64, end, ftype) == \
            outcome(PURE.dir2_data_entries, b, 64, end, ftype)
        # the directory tally, with an inode table around some of the targets
        near = struct.unpack_from(">Q", b, 64)[0]
        inos = [near + rng.randrange(-70, 70) for _ in range(rng.randrange(0, 5))]
        table = _table(rng, [i for i in inos if i >= 0])
        assert _tally(NATIVE, b, end, ftype, table) == _tally(PURE, b, end, ftype, table)
        for ino in [i for i in inos if i >= 0] + [0, 2 ** 64 - 1]:
            assert NATIVE.find_slot(table[0], ino) == PURE.find_slot(table[0], ino)
            ft = rng.randrange(0, 10)
            outs = []
            for mod in (NATIVE, PURE):
                refs = array("I", bytes(4 * len(table[1])))
                outs.append((mod.tally_entry(table[0], table[1], refs, ino, ft, ftype), refs))
            assert outs[0] == outs[1]
        n = rng.randrange(0, 600)
        assert outcome(NATIVE.leaf_tally, b, 64, n) == outcome(PURE.leaf_tally, b, 64, n)
        size = rng.randrange(0, 200)
        assert outcome(NATIVE.dir2_sf_entries, b, 0, size, ftype) == \
            outcome(PURE.dir2_sf_entries, b, 0, size, ftype)
        n = rng.randrange(0, 10)
        off = rng.randrange(0, 64)
        for fn in ("decode_bmbt_recs", "alloc_recs", "rmap_recs"):
            assert outcome(getattr(NATIVE, fn), b, off, n) == \
                outcome(getattr(PURE, fn), b, off, n)
        for sparse in (True, False):
            assert outcome(NATIVE.inobt_recs, b, off, n, sparse) == \
                outcome(PURE.inobt_recs, b, off, n, sparse)
        name = b[:rng.randrange(0, 20)]
        assert NATIVE.da_hashname(name) == PURE.da_hashname(name)
        assert outcome(NATIVE.dinode_core, b[:176] if len(b) >= 176 else b, 0, bytes(16)) == \
            outcome(PURE.dinode_core, b[:176] if len(b) >= 176 else b, 0, bytes(16))


@pytest.mark.parametrize("mod", BACKENDS, ids=lambda m: "native" if
                         fstool_native.is_native(m) else "pure")
def test_rmap_recs_as_struct_reads_them(mod):
    """rmap_recs gives the reverse-mapping records as big-endian
    (startblock, blockcount, owner, offset) tuples, as struct reads them,
    and refuses a count that runs past the buffer."""
    rng = random.Random(17)
    for _ in range(200):
        buf = rng.randbytes(rng.randrange(0, 600))
        off = rng.randrange(0, 64)
        n = rng.randrange(0, 20)
        if off + 24 * n > len(buf):
            with pytest.raises(ValueError):
                mod.rmap_recs(buf, off, n)
            continue
        assert mod.rmap_recs(buf, off, n) == \
            list(struct.iter_unpack(">IIQQ", buf[off:off + 24 * n]))


@pytest.mark.parametrize("mod", BACKENDS, ids=lambda m: "native" if
                         fstool_native.is_native(m) else "pure")
def test_bmbt_record_bits(mod):
    # startoff 0x123456789, startblock 0xABCDEF01234, blockcount 0x1FFFFF, unwritten
    startoff, startblock, count = 0x123456789, 0xABCDEF01234, 0x1FFFFF
    l0 = (1 << 63) | (startoff << 9) | (startblock >> 43)
    l1 = ((startblock & ((1 << 43) - 1)) << 21) | count
    rec = struct.pack(">QQ", l0, l1)
    assert mod.decode_bmbt_recs(rec, 0, 1) == [(startoff, startblock, count, 1)]
    with pytest.raises(ValueError):
        mod.decode_bmbt_recs(rec, 0, 2)


@pytest.mark.skipif(shutil.which("xfs_db") is None, reason="xfs_db not installed")
@pytest.mark.parametrize("mod", BACKENDS, ids=lambda m: "native" if
                         fstool_native.is_native(m) else "pure")
def test_da_hashname_matches_xfs_db(mod, tmp_path):
    img = tmp_path / "h.img"
    subprocess.run(["truncate", "-s", "320M", str(img)], check=True)
    subprocess.run(["mkfs.xfs", "-q", str(img)], check=True)
    names = ["a", "ab", "abc", "abcd", "abcde", "lost+found", "x" * 255, "entry-000123"]
    args = ["xfs_db", "-r", "-f"]
    for n in names:
        args += ["-c", f"hash {n}"]
    out = subprocess.run(args + [str(img)], capture_output=True, text=True, check=True).stdout
    theirs = [int(v, 16) for v in out.split()]
    assert [mod.da_hashname(n.encode()) for n in names] == theirs


@needs_native
def test_parent_hashname_parity():
    rng = random.Random(29)
    for _ in range(2000):
        name = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 256)))
        ino = rng.choice((0, 1, 128, 2 ** 32 - 1, 2 ** 32, 2 ** 64 - 1, rng.randrange(2 ** 64)))
        assert NATIVE.parent_hashname(name, ino) == PURE.parent_hashname(name, ino)


@pytest.mark.parametrize("mod", BACKENDS, ids=lambda m: "native" if
                         fstool_native.is_native(m) else "pure")
def test_parent_hashname_matches_xfs_db_6_10(mod, tmp_path):
    if not modern.available():
        pytest.skip(modern.WHY)
    img = modern.mkfs(tmp_path / "p.img", "-n", "parent=1", size="320M")
    cases = [("a", 128), ("abcd", 131), ("lost+found", 2 ** 32 + 7), ("x" * 255, 2 ** 40 + 99),
             ("entry-000123", 0xDEADBEEF12345678)]
    theirs = [int(v, 16) for v in
              modern.db(img, *(f"hash -p {ino} {n}" for n, ino in cases)).split()]
    mine = [mod.parent_hashname(n.encode(), ino) for n, ino in cases]
    assert mine == theirs
    # the parent pointer hash is not the name hash
    assert mine != [mod.da_hashname(n.encode()) for n, _ in cases]


def test_backend_selection_env(monkeypatch):
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", "import fstool; print(fstool.backend())"],
                         capture_output=True, text=True, env={"FSTOOL_PURE_PYTHON": "1",
                                                              "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "pure-python"


@needs_native
def test_scan_inode_chunk_parity(kernel_img):
    """Real inode chunks, intact and with bytes flipped: the native and the
    pure scanner sort every inode the same way."""
    rng = random.Random(5)
    with fstool.open_image(kernel_img) as fs:
        sb = fs.sb
        reader, root, height = ag_tree(fs, 0, "inobt")
        recs = list(reader.ag_records(root, height))[:20]
        for startino, holemask, _n, _f, free in recs:
            nblocks = max(1, (64 * sb.inodesize) >> sb.blocklog)
            chunk = fs.dev.pread(fs.agb_to_daddr(0, startino >> sb.inopblog) << 9,
                                 nblocks << sb.blocklog)
            for trial in range(3):
                buf = bytearray(chunk)
                for _ in range(trial * 5):
                    buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
                args = (bytes(buf), 0, sb.inodesize, startino, sb.meta_uuid, free, holemask,
                        0xA, True, sb.agblklog, sb.agcount, sb.agblocks, fs.ag_length(3),
                        0, (1 << 51) - 1)
                tables = []
                for mod in (NATIVE, PURE):
                    itype, nlinks = bytearray(128), array("I", bytes(4 * 128))
                    claims = [array("q") for _ in range(sb.agcount)]
                    expect = [array("Q") for _ in range(sb.agcount)]
                    out = mod.scan_inode_chunk(*args, itype, nlinks, 64, sb.rootino, claims,
                                               expect)
                    tables.append((out, itype, nlinks, claims, expect))
                assert tables[0] == tables[1]
            itype, nlinks = bytearray(64), array("I", bytes(256))
            geo = (sb.agblklog, sb.agcount, sb.agblocks, fs.ag_length(3), 0, (1 << 51) - 1)
            claims = [array("q") for _ in range(sb.agcount)]
            others, _dirs = NATIVE.scan_inode_chunk(
                chunk, 0, sb.inodesize, startino, sb.meta_uuid, free, holemask, 0xA, True,
                *geo, itype, nlinks, 0, sb.rootino, claims, None)
            plain = [i for i in range(64) if itype[i]]
            assert plain and not set(plain) & set(others)
            assert all(nlinks[i] >= 1 for i in plain)
            # free inodes as the kernel leaves them need no second look
            assert not [i for i in others if free >> i & 1]
            # the plain inodes' extents, claimed (agbno, length, ino << 2)
            owners = [rec[2] for ag in claims for rec in zip(*[iter(ag)] * 3)]
            assert all(owner & 3 == 0 and (owner >> 2) - startino in plain
                       for owner in owners)
            with pytest.raises(ValueError):      # a slot past the table
                NATIVE.scan_inode_chunk(chunk, 0, sb.inodesize, startino, sb.meta_uuid,
                                        free, holemask, 0xA, True, *geo, itype, nlinks, 1,
                                        sb.rootino, claims, None)


def test_shim_covers_every_cython_name_the_source_uses():
    """Without Cython installed the source runs on a shim; a name the source
    uses but the shim lacks breaks the pure backend on such machines."""
    import os
    import re

    from fstool_native import _cython_shim
    for name in ("parsers.py", "writers.py", "checks.py"):
        src = open(os.path.join(os.path.dirname(fstool_native.__file__), name)).read()
        used = set(re.findall(r"\bcython\.(\w+)", src))
        missing = sorted(n for n in used if not hasattr(_cython_shim, n))
        assert used and not missing, f"shim lacks {missing} ({name})"


def _table(rng, inos):
    """An inode table (see fstool_native nlink_scan) holding ``inos`` with
    random types and link counts."""
    starts = sorted({ino & ~63 for ino in inos})
    itype = bytearray(64 * len(starts))
    nlinks = array("I", bytes(4 * len(itype)))
    for ino in inos:
        slot = starts.index(ino & ~63) * 64 + (ino & 63)
        itype[slot] = rng.choice((8, 4, 2, 6, 1, 12, 10))
        nlinks[slot] = rng.randrange(0, 3)
    return array("Q", starts), itype, nlinks


def _tally(mod, block, end, ftype, table):
    starts, itype, _nlinks = table
    refs = array("I", bytes(4 * len(itype)))
    return outcome(mod.dir_data_tally, block, 64, end, ftype, 4096, starts, itype, refs,
                   1 << 60), refs


@pytest.mark.parametrize("mod", BACKENDS, ids=lambda m: "native" if
                         fstool_native.is_native(m) else "pure")
def test_dir_tally_counts_and_sums(mod):
    """The tally counts each entry's target once, flags the odd ones, and its
    sum equals leaf_tally's over a leaf that indexes exactly these entries."""
    rng = random.Random(8)
    block = _dir_block(rng, 40)
    ents = PURE.dir2_data_entries(block, 64, len(block), True)
    inos = [ino for _o, ino, _n, _f in ents]
    table = _table(rng, inos[:30])            # the last ten point nowhere
    (status, (frees, dsum, odd, error)), refs = _tally(mod, block, len(block), True, table)
    assert status == "ok" and error is None
    starts, itype, nlinks = table
    counted = {mod.find_slot(starts, ino) for ino in inos[:30]}
    assert sum(refs) == 30 - sum(1 for n, *_ in odd if n in (b".", b".."))
    assert all(refs[s] >= 1 for s in counted if s >= 0)
    missing = {c for _n, c, _f, flags in odd if flags & 1}
    assert missing == set(inos[30:]) - set(inos[:30])
    leaf = b"".join(struct.pack(">II", mod.da_hashname(n), (4096 + o) >> 3)
                    for o, _i, n, _f in sorted(ents, key=lambda e: mod.da_hashname(e[2])))
    leaf += struct.pack(">II", 0x1234, 0)       # a stale entry
    ordered, stale, lsum = mod.leaf_tally(leaf, 0, len(ents) + 1)
    assert (stale, lsum) == (1, dsum)
    bad = bytearray(leaf)
    bad[4:8] = struct.pack(">I", struct.unpack_from(">I", leaf, 4)[0] + 1)
    assert mod.leaf_tally(bytes(bad), 0, len(ents) + 1)[2] != dsum
    # link counts: every directory, every count that differs from refs
    flagged = set(mod.nlink_scan(itype, nlinks, refs))
    for s in range(len(itype)):
        want = itype[s] and (itype[s] == 4 or refs[s] == 0 or nlinks[s] != refs[s])
        assert (s in flagged) == bool(want)


@pytest.mark.parametrize("mod", BACKENDS, ids=lambda m: "native" if
                         fstool_native.is_native(m) else "pure")
def test_dir_tally_flags_bad_names_and_self(mod):
    """An entry whose name holds '/' or NUL is flagged 16, one that names the
    directory itself 32 (besides what it is otherwise)."""
    rng = random.Random(9)
    block = bytearray(_dir_block(rng, 6))
    ents = PURE.dir2_data_entries(bytes(block), 64, len(block), True)
    o1, n1, i2 = ents[2][0], ents[2][2], ents[3][1]
    block[o1 + 9] = ord("/")                   # first byte of the third name
    table = _table(rng, [ino for _o, ino, _n, _f in ents])
    starts, itype, _nl = table
    refs = array("I", bytes(4 * len(itype)))
    _frees, _sum, odd, error = mod.dir_data_tally(bytes(block), 64, len(block), True, 4096,
                                                  starts, itype, refs, i2)
    assert error is None
    flags = {c: f for _n, c, _ft, f in odd}
    names = {n: f for n, _c, _ft, f in odd}
    assert names[b"/" + n1[1:]] & 16
    assert flags[i2] & 32
    assert not any(f & 48 for n, c, _ft, f in odd if n != b"/" + n1[1:] and c != i2)


def test_rmap_high_key_parity_and_meaning():
    """The greatest high key of rmapbt records and node keys: both backends
    agree with each other and with the codec's key-by-key computation, on
    random entries and on runs past the buffer."""
    from fstool.fs import btree as B
    rng = random.Random(29)
    codec = B.RMAP_CODEC
    for trial in range(300):
        n = rng.randrange(0, 40)
        recs = []
        for _ in range(n):
            owner = rng.choice((2 ** 64 - rng.randrange(3, 10), rng.randrange(1 << 40)))
            flags = rng.choice((0, 1 << 63, 1 << 62, 1 << 61, (1 << 61) | (1 << 63)))
            recs.append((rng.randrange(1 << 32), rng.randrange(0, 1 << 20), owner,
                         rng.randrange(1 << 54) | flags))
        leaf = b"".join(codec.pack_rec(r) for r in recs)
        nodes = b"".join(codec.rec_key_bytes(codec.pack_rec(r), 0) for r in recs)
        for buf, is_leaf in ((leaf, True), (nodes, False)):
            got = NATIVE.rmap_high_key(buf, 0, n, is_leaf)
            assert got == PURE.rmap_high_key(buf, 0, n, is_leaf)
            if n and all(r[1] for r in recs):
                keys = [codec.rec_key_bytes(codec.pack_rec(r), 0) for r in recs]
                want = codec.block_key(keys)[20:]
                assert struct.pack(">IQQ", *got) == want
            short = buf[:max(len(buf) - 1, 0)]
            if n:
                assert outcome(NATIVE.rmap_high_key, short, 0, n, is_leaf) == \
                    outcome(PURE.rmap_high_key, short, 0, n, is_leaf) == ("ValueError", None)


@needs_native
def test_parent_pointer_scans_parity():
    """Inode chunks of a parent-pointer image, intact and with bytes
    flipped: PathTable.add_chunk (what it keeps, what it leaves to the
    caller, the paths it renders), and scan_inode_chunk counting parent
    pointers, agree between the backends; the intact chunks' shortform forks are
    taken natively."""
    if not pptr.available():
        pytest.skip("needs root, a kernel loop mount of XFS and xfsprogs 6.10.1")
    rng = random.Random(29)
    plain_with_attrs = plain_dirs = 0
    with fstool.open_image(pptr.pptr_image()) as fs:
        sb = fs.sb
        for agno in range(sb.agcount):
            reader, root, height = ag_tree(fs, agno, "inobt")
            for startino, holemask, _n, _f, free in list(reader.ag_records(root, height))[:8]:
                nblocks = max(1, (64 * sb.inodesize) >> sb.blocklog)
                chunk = fs.dev.pread(fs.agb_to_daddr(agno, startino >> sb.inopblog) << 9,
                                     nblocks << sb.blocklog)
                first = (agno << sb.agino_log) | startino
                for trial in range(4):
                    buf = bytearray(chunk)
                    for _ in range(trial * 6):
                        buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
                    b = bytes(buf)
                    tables = []
                    for mod in (NATIVE, PURE):
                        t = mod.PathTable(sb.rootino)
                        others = t.add_chunk(b, 0, sb.inodesize, first, free, holemask)
                        text, broken = t.render()
                        tables.append((others, list(t.recs), list(t.pps),
                                       bytes(t.names[:t.nused]), text, broken))
                    assert tables[0] == tables[1]
                    outs = []
                    for mod in (NATIVE, PURE):
                        itype, nlinks = bytearray(64), array("I", bytes(256))
                        psums = array("Q", bytes(512))
                        claims = [array("q") for _ in range(sb.agcount)]
                        expect = [array("Q") for _ in range(sb.agcount)]
                        out = mod.scan_inode_chunk(
                            b, 0, sb.inodesize, first, sb.meta_uuid, free, holemask, 0x1A,
                            True, sb.agblklog, sb.agcount, sb.agblocks,
                            fs.ag_length(sb.agcount - 1), 0, (1 << 51) - 1, itype, nlinks, 0,
                            sb.rootino, claims, expect, psums, True)
                        outs.append((out, itype, nlinks, psums, claims, expect))
                    assert outs[0] == outs[1]
                    if trial == 0:
                        plain_with_attrs += sum(1 for v in outs[0][3] if v)
                        # directories with parent pointers are taken too
                        plain_dirs += len(outs[0][0][1])
    assert plain_with_attrs > 50 and plain_dirs > 5


@pytest.mark.parametrize("mod", BACKENDS, ids=lambda m: "native" if
                         fstool_native.is_native(m) else "pure")
def test_parent_pointer_sums_cancel(mod):
    """An entry counted by the tally and the same parent pointer cancel;
    another name, directory or generation does not."""
    starts, itype = array("Q", [64]), bytearray(64)
    itype[5] = 8
    refs, psums = array("I", bytes(256)), array("Q", bytes(512))
    assert mod.tally_entry(starts, itype, refs, 69, 1, True, psums, 128, 7, b"name") == 0
    assert psums[5] == mod.pptr_mix(b"name", 128, 7) != 0
    assert mod.pptr_mismatches(itype, psums) == [5]
    psums[5] = (psums[5] - mod.pptr_mix(b"name", 128, 7)) % (1 << 64)
    assert mod.pptr_mismatches(itype, psums) == []
    assert len({mod.pptr_mix(b"name", 128, 7), mod.pptr_mix(b"namf", 128, 7),
                mod.pptr_mix(b"name", 129, 7), mod.pptr_mix(b"name", 128, 8)}) == 4
    # an entry whose target is not in use counts nothing
    assert mod.tally_entry(starts, itype, refs, 70, 1, True, psums, 128, 7, b"x") & 1
    assert mod.pptr_mismatches(itype, psums) == []


def _sf_dir_inode(rng, ino, uuid, children, isize=512):
    """A v3 directory inode of ``isize`` bytes holding a shortform directory
    of entries naming ``children`` (4-byte inode numbers, file types), its
    CRC right."""
    body = bytearray([len(children), 0]) + struct.pack(">I", ino - 5)
    off = 0x60
    for k, child in enumerate(children):
        name = f"n{k}-{rng.randrange(1000)}".encode()
        body += bytes([len(name)]) + struct.pack(">H", off) + name + bytes([1]) + \
            struct.pack(">I", child)
        off += (8 + 1 + len(name) + 1 + 2 + 7) & ~7
    raw = bytearray(isize)
    struct.pack_into(">HHBB", raw, 0, 0x494E, 0o40755, 3, 1)
    struct.pack_into(">Q", raw, 56, len(body))
    raw[83] = 2
    struct.pack_into(">Q", raw, 152, ino)
    raw[160:176] = uuid
    raw[176:176 + len(body)] = body
    raw[100:104] = struct.pack("<I", PURE.xfs_cksum(bytes(raw), 100))
    return raw


@needs_native
def test_sf_dir_tally_parity():
    """Shortform directory inodes, sound and with bytes changed (the CRC
    made right again, mostly): both backends return the same and count the
    same entries into the inode table; a directory they take is counted
    whole, one they refuse not at all."""
    rng = random.Random(31)
    uuid = bytes(range(16))
    inos = [1000 + i for i in range(0, 400, 3)]
    starts, itype, _nlinks = _table(rng, inos)
    geo = (True, 4096, 0x60, 128, 16, 4, 96, array("Q", [60000] * 4), array("Q", [130]))
    took = refused = 0
    for trial in range(3000):
        ino = rng.choice(inos)
        children = [rng.choice(inos + [5, 70000, 1 << 20]) for _ in range(rng.randrange(0, 12))]
        raw = _sf_dir_inode(rng, ino, uuid, children)
        for _ in range(rng.choice((0, 0, 1, 2))):
            at = rng.choice((rng.randrange(176, 176 + 60), rng.randrange(0, 176), 56 + 7, 82,
                             176, 177))
            raw[at] = rng.choice((0, 1, 0x2F, rng.randrange(256), raw[at] ^ 1))
            if rng.random() < 0.9:
                raw[100:104] = struct.pack("<I", PURE.xfs_cksum(bytes(raw), 100))
        struct.pack_into(">I", raw, 92, rng.randrange(1 << 32))      # di_gen
        raw[100:104] = struct.pack("<I", PURE.xfs_cksum(bytes(raw), 100))
        pptr = trial % 2 == 0
        outs = []
        for mod in (NATIVE, PURE):
            refs = array("I", bytes(4 * len(itype)))
            psums = array("Q", bytes(8 * len(itype))) if pptr else None
            outs.append((mod.sf_dir_tally(bytes(raw), ino, uuid, *geo, starts, itype, refs,
                                          psums), list(refs), psums))
        assert outs[0] == outs[1], trial
        got, refs, psums = outs[0]
        if got is None:
            refused += 1
            assert not any(refs) and not (pptr and any(psums))
        else:
            took += 1
            size = struct.unpack_from(">Q", raw, 56)[0]
            parent, ents = PURE.dir2_sf_entries(bytes(raw), 176, size, True, True)
            assert got[0] == parent
            used = [c for _n, c, _f in ents if NATIVE.find_slot(starts, c) >= 0 and
                    itype[NATIVE.find_slot(starts, c)]]
            assert sum(refs) == len(used)
            assert [(n, c) for n, c, _f, flags in got[1] if flags & 1] == \
                [(n, c) for n, c, _f in ents if c not in used]
            if pptr:
                # each entry counted adds its parent pointer (this directory,
                # its generation, the name) to the slot of the inode it names
                gen = struct.unpack_from(">I", raw, 92)[0]
                want = array("Q", bytes(8 * len(itype)))
                for n, c, _f in ents:
                    if c in used:
                        s = NATIVE.find_slot(starts, c)
                        want[s] = (want[s] + PURE.pptr_mix(n, ino, gen)) % (1 << 64)
                assert psums == want
    assert took > 300 and refused > 300
    with pytest.raises(ValueError):             # a table shorter than its chunks
        NATIVE.sf_dir_tally(bytes(raw), ino, uuid, *geo, starts, itype[:-64],
                            array("I", bytes(4 * len(itype))))


def _escape_cases():
    """Names with every kind of byte shown_name treats apart: plain text,
    UTF-8 of 2 to 4 bytes, the forms a strict decoder refuses (overlong,
    surrogates, above U+10FFFF, cut short, stray continuation bytes),
    control characters, backslashes; then random bytes."""
    fixed = [b"plain", "café-é€😀".encode(), b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80",
             b"\xe0\xa0\x80", b"\xed\x9f\xbf", b"\xed\xa0\x80", b"\xee\x80\x80",
             b"\xf0\x8f\xbf\xbf", b"\xf0\x90\x80\x80", b"\xf4\x8f\xbf\xbf", b"\xf4\x90\x80\x80",
             b"\xf5\x80\x80\x80", b"\xe2\x82", b"a\xe2\x82/b", b"\x80\xbf", b"\xff\xfe",
             b"\n\t\r\\\x00\x1f\x7f\x20~", "\u0085\u2028".encode(), b"x\xf0\x9f\x98"]
    rng = random.Random(2929)
    alphabet = b"ab/\\\n\t\x01\x7f\x80\xbf\xc2\xc3\xe0\xe2\xed\xf0\xf4\xf5\xff\xa0\x9f\x90"
    rand = [bytes(rng.choice(alphabet) for _ in range(rng.randrange(1, 12)))
            for _ in range(3000)]
    return fixed + rand


@pytest.mark.parametrize("mod", BACKENDS, ids=lambda m: "native" if
                         fstool_native.is_native(m) else "pure")
def test_path_table_escapes_names_as_shown_name(mod):
    """fstool path --all's buffer shows a name as ops/names.py's
    shown_name does (its UTF-8 encoding), byte for byte."""
    from fstool.ops.names import shown_name
    t = mod.PathTable(128)
    for name in _escape_cases():
        assert t.escaped(name) == shown_name(name).encode("utf-8"), name


def _walk_table(mod):
    """A made-up table (added out of inode order): hard links, a directory
    naming itself, a stale generation, a pointer to a file, a cycle."""
    t = mod.PathTable(128)
    d, f = 0o40755, 0o100644
    t.add(131, f, 7, [(129, 1, b"f"), (130, 1, b"g")])
    t.add(128, d, 1, [])
    t.add(129, d, 1, [(128, 1, b"a")])
    t.add(130, d, 1, [(129, 1, b"b"), (130, 1, b"self")])
    t.add(132, f, 1, [(129, 99, b"s"), (128, 1, b"t\n")])
    t.add(133, f, 1, [(131, 7, b"x")])
    t.add(134, d, 1, [(135, 1, b"c")])
    t.add(135, d, 1, [(134, 1, b"d")])
    t.add(136, f, 1, [(134, 1, b"in-cycle"), (129, 1, b"\xff")])
    t.add(137, f, 1, [(129, 1, b"skipped")])
    return t


@pytest.mark.parametrize("mod", BACKENDS, ids=lambda m: "native" if
                         fstool_native.is_native(m) else "pure")
def test_path_table_walk(mod):
    """Paths and broken pointers of the made-up table, as the kernel's
    getparents walk gives them: a cycle gives nothing and is no error."""
    t = _walk_table(mod)
    text, broken = t.render((137,))
    assert text.decode().splitlines() == [
        "128 /", "129 /a", "130 /a/b", "131 /a/f", "131 /a/b/g", "132 /t\\n", "136 /a/\\xff"]
    assert broken == [(132, 132, (129, 99, b"s"), "directory 129 has generation 1, not 99"),
                      (133, 133, (131, 7, b"x"), "inode 131 is not a directory in use")]
    assert t.order() is not None
    fresh = _walk_table(mod)
    assert [fresh.paths(i) for i in (128, 130, 131, 134)] == [
        [b"/"], [b"/a/b"], [b"/a/f", b"/a/b/g"], []]
    assert [fresh.paths_at(k) for k in range(3)] == [[b"/a/f", b"/a/b/g"], [b"/"], [b"/a"]]
