"""The read hot paths in fstool_native (batch inode decoding, inline extent
maps, the single-extent read plan, directory listings): the compiled and the
pure backend agree on real inodes, intact and corrupted, and both agree with
the general Python paths they stand in for."""
import random
import struct

import pytest

import fstool
import fstool_native
from fixtures.dirdata import data_entry

PURE = fstool_native.load(pure=True)
NATIVE = fstool_native.load()
BACKENDS = [PURE] + ([NATIVE] if fstool_native.is_native(NATIVE) else [])
needs_native = pytest.mark.skipif(not fstool_native.is_native(NATIVE),
                                  reason="native backend not built")
FIELDS = ("ino", "mode", "format", "size", "nlink", "uid", "gid", "forkoff", "aformat",
          "flags2", "raw")


def _clusters(fs):
    """get_cluster over a dict that records what was asked for."""
    asked = {}

    def get(daddr, nblocks):
        buf = asked.get(daddr)
        if buf is None:
            buf = asked[daddr] = fs.dev.pread(daddr << 9, nblocks << fs.sb.blocklog)
        return buf
    return get, asked


def _decode(mod, fs, inos, get):
    out = []
    try:
        mod.load_inodes(mod.InodeCore, None, inos, get, fs.uuid, fs._geometry, out)
        err = None
    except ValueError as e:
        err = e.args
    return [tuple(getattr(n, f) for f in FIELDS) for n in out], err


@pytest.fixture(scope="module")
def tree(proto_img):
    with fstool.open_image(proto_img) as fs:
        inos = [node.ino for _p, node in fs.walk("/")]
    return proto_img, inos


@pytest.mark.parametrize("mod", BACKENDS, ids=lambda m: "native" if
                         fstool_native.is_native(m) else "pure")
def test_load_inodes_matches_the_inode_constructor(tree, mod):
    img, inos = tree
    with fstool.open_image(img) as fs:
        get, asked = _clusters(fs)
        got, err = _decode(mod, fs, inos, get)
        assert err is None and len(got) == len(inos)
        from fstool.fs.inode import Inode
        for ino, fields in zip(inos, got):
            agno, agbno, idx = fs.ino_location(ino)
            raw = fs.dev.pread((fs.agb_to_daddr(agno, agbno) << 9) + idx * fs.sb.inodesize,
                               fs.sb.inodesize)
            ref = Inode(fs, ino, raw)
            assert fields == tuple(getattr(ref, f) for f in FIELDS)
        # a cluster is read once for a run of neighbours
        assert len(asked) < len(inos) // 4


@needs_native
def test_load_inodes_parity_on_corrupted_clusters(tree):
    img, inos = tree
    rng = random.Random(16)
    with fstool.open_image(img) as fs:
        get, asked = _clusters(fs)
        _decode(NATIVE, fs, inos, get)
        clean = dict(asked)
        for trial in range(60):
            bad = {d: bytearray(b) for d, b in clean.items()}
            for _ in range(rng.randrange(1, 6)):
                d = rng.choice(list(bad))
                bad[d][rng.randrange(len(bad[d]))] ^= 1 << rng.randrange(8)
            frozen = {d: bytes(b) for d, b in bad.items()}
            pick = rng.sample(inos, min(len(inos), 40))
            if trial % 3 == 0:
                pick.append(rng.choice((0, 1 << 63, fs.sb.rootino + (1 << 40))))

            def get_bad(daddr, nblocks):
                return frozen[daddr] if daddr in frozen else get(daddr, nblocks)
            a = _decode(NATIVE, fs, pick, get_bad)
            b = _decode(PURE, fs, pick, get_bad)
            assert a == b
            if trial % 3 == 0:
                assert a[1] is not None and a[1][1] == "location"


def test_a_corrupt_inode_is_named_by_the_walk(proto_img, tmp_path):
    """The batch path reports which inode failed, after yielding the ones
    before it in its directory."""
    import shutil
    img = tmp_path / "c.img"
    shutil.copy(proto_img, img)
    with fstool.open_image(img) as fs:
        entries = list(fs.walk("/"))
        victim_path, victim = next((p, n) for p, n in entries[10:] if n.is_reg)
        agno, agbno, idx = fs.ino_location(victim.ino)
        off = (fs.agb_to_daddr(agno, agbno) << 9) + idx * fs.sb.inodesize
    with open(img, "r+b") as f:
        f.seek(off + 60)
        b = f.read(1)
        f.seek(off + 60)
        f.write(bytes([b[0] ^ 0x40]))        # in di_size: the CRC no longer matches
    with fstool.open_image(img) as fs:
        seen = []
        with pytest.raises(fstool.CorruptionError) as ei:
            for p, _n in fs.walk("/"):
                seen.append(p)
        assert ei.value.ino == victim.ino and ei.value.field == "di_crc"
        assert victim_path not in seen
        # everything walked before the victim came out
        assert seen == [p for p, _ in entries[:len(seen)]]
        assert len(seen) == [p for p, _ in entries].index(victim_path)
        with pytest.raises(fstool.CorruptionError):
            fs.inode(victim.ino)


def _random_inode(rng, nrecs, forkoff=0, nrext64=False):
    raw = bytearray(rng.randbytes(512))
    raw[5] = 2
    raw[82] = forkoff
    flags2 = rng.randrange(1 << 64) & ~0x10 | (0x10 if nrext64 else 0)
    struct.pack_into(">Q", raw, 120, flags2)
    if nrext64:
        struct.pack_into(">Q", raw, 24, nrecs)
    else:
        struct.pack_into(">I", raw, 76, nrecs)
    off = 0
    for i in range(nrecs):
        startoff, count = off + rng.randrange(0, 3), rng.randrange(1, 9)
        startblock = rng.randrange(1, 4 * (1 << 16))
        l0 = (rng.random() < 0.2) << 63 | startoff << 9 | startblock >> 43
        l1 = (startblock & ((1 << 43) - 1)) << 21 | count
        if 176 + 16 * i + 16 <= 512:
            struct.pack_into(">QQ", raw, 176 + 16 * i, l0, l1)
        off = startoff + count
    return raw


@needs_native
def test_inline_extents_and_single_extent_offset_parity():
    rng = random.Random(3)
    geo = (16, 1 << 16, 4, (1 << 16) - 100)       # agblklog, agblocks, agcount, last AG
    for trial in range(3000):
        raw = _random_inode(rng, rng.choice((0, 1, 1, 1, 2, 5, 21, 40)),
                            forkoff=rng.choice((0, 0, 0, 1, 15, 24, 42)),
                            nrext64=rng.random() < 0.3)
        if trial % 4 == 0:
            raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
        b = bytes(raw)
        for attr in (False, True):
            outs = []
            for mod in (NATIVE, PURE):
                try:
                    outs.append(mod.inline_extents(b, attr, *geo))
                except ValueError as e:
                    outs.append(str(e))
            assert outs[0] == outs[1]
        offset, size = rng.randrange(0, 9000), rng.randrange(0, 9000)
        pos = NATIVE.single_extent_offset(b, offset, size, geo + (12,))
        assert pos == PURE.single_extent_offset(b, offset, size, geo + (12,))
        # the fast plan agrees with the general extent map
        try:
            exts = PURE.inline_extents(b, False, *geo)
        except ValueError:
            exts = None
        if pos >= 0:
            assert exts is not None and len(exts) == 1
            startoff, startblock, count, unwritten = exts[0]
            assert startoff == 0 and not unwritten and offset + size <= count << 12
            assert pos == (((startblock >> 16) << 16) + (startblock & 0xFFFF)) * 4096 + offset
        elif exts is not None and len(exts) == 1 and b[5] == 2:
            startoff, _sb, count, unwritten = exts[0]
            assert startoff or unwritten or offset + size > count << 12


@pytest.mark.parametrize("mod", BACKENDS, ids=lambda m: "native" if
                         fstool_native.is_native(m) else "pure")
def test_listing_mode_is_the_entries_without_dots(mod):
    rng = random.Random(9)
    for trial in range(200):
        ft = trial % 2 == 0
        buf = bytearray(64)
        names = [b".", b".."] + [rng.choice((b".", b"..", b"...", b".a", b"a.", b"x" * 5,
                                              rng.randbytes(rng.randrange(1, 20))))
                                 for _ in range(rng.randrange(0, 12))]
        names = [n.replace(b"/", b"_").replace(b"\0", b"_") for n in names]
        for name in names:
            buf += data_entry(len(buf), rng.randrange(1 << 40), name,
                              rng.randrange(1, 8) if ft else None)
        b = bytes(buf)
        full = mod.dir2_data_entries(b, 64, len(b), ft)
        listing = mod.dir2_data_entries(b, 64, len(b), ft, True)
        assert listing == [(n, i, f) for _o, i, n, f in full if n not in (b".", b"..")]
        size = rng.randrange(6, 200)
        try:
            parent, sf = mod.dir2_sf_entries(b, 0, size, ft)
        except ValueError:
            with pytest.raises(ValueError):
                mod.dir2_sf_entries(b, 0, size, ft, True)
            continue
        assert mod.dir2_sf_entries(b, 0, size, ft, True) == \
            (parent, [(n, i, f) for _o, i, n, f in sf])


@needs_native
def test_listing_mode_parity_on_corrupted_buffers():
    rng = random.Random(12)
    for trial in range(500):
        b = bytearray(rng.randbytes(rng.randrange(8, 300)))
        b[64:66] = b"\x00\x00"
        ft = trial % 2 == 0
        end = rng.randrange(0, len(b) + 1)
        for fn, args in (("dir2_data_entries", (bytes(b), 64, end, ft, True)),
                         ("dir2_sf_entries", (bytes(b), 0, rng.randrange(0, 300), ft, True))):
            outs = []
            for mod in (NATIVE, PURE):
                try:
                    outs.append(getattr(mod, fn)(*args))
                except ValueError as e:
                    outs.append(("ValueError", str(e)))
            assert outs[0] == outs[1]


@pytest.mark.parametrize("mod", BACKENDS, ids=lambda m: "native" if
                         fstool_native.is_native(m) else "pure")
def test_stat_values_match_the_field_decoders(mod):
    """stat_values gives what the inode's fields decode to, times of both
    formats included (before 1970, past 2038, past 2262 with bigtime)."""
    from fstool.fs.inode import decode_timestamp
    rng = random.Random(21)
    for trial in range(2000):
        raw = bytearray(rng.randbytes(512))
        big = trial % 2 == 0
        flags2 = struct.unpack_from(">Q", raw, 120)[0] & ~0x8 | (0x8 if big else 0)
        struct.pack_into(">Q", raw, 120, flags2)
        if trial % 7 == 0:
            struct.pack_into(">Q", raw, 32, rng.choice((0, 2 ** 64 - 1, 2 ** 63, 2 ** 63 - 1)))
        v = mod.stat_values(bytes(raw), 1234, 99, 4096, 3)
        ns = [decode_timestamp(struct.unpack_from(">Q", raw, off)[0], big)
              for off in (32, 40, 48)]
        mode, nlink, uid, gid = (struct.unpack_from(">H", raw, 2)[0],
                                 *struct.unpack_from(">III", raw, 16)[:1],
                                 *struct.unpack_from(">II", raw, 8))
        assert v[:7] == (mode, 1234, 99, nlink, uid, gid, struct.unpack_from(">Q", raw, 56)[0])
        assert list(v[7:10]) == [t // 10**9 for t in ns]
        assert list(v[13:16]) == ns
        assert list(v[10:13]) == [t // 10**9 + (t % 10**9) * 1e-9 for t in ns]
        assert v[16:] == (4096, struct.unpack_from(">Q", raw, 64)[0] << 3, 0)
    with pytest.raises(ValueError):
        mod.stat_values(b"\0" * 100, 1, 1, 4096, 3)


@needs_native
def test_stat_values_and_hash_search_parity():
    import bisect
    rng = random.Random(22)
    for trial in range(500):
        raw = rng.randbytes(rng.choice((176, 256, 512)))
        assert NATIVE.stat_values(raw, 7, 8, 4096, 3) == PURE.stat_values(raw, 7, 8, 4096, 3)
        n = rng.randrange(0, 60)
        hashes = sorted(rng.randrange(1 << 32) for _ in range(n))
        if n and trial % 3 == 0:
            hashes = sorted(rng.choice(hashes[:3]) for _ in range(n))   # runs of equals
        buf = rng.randbytes(16) + b"".join(struct.pack(">II", h, rng.randrange(1 << 32))
                                           for h in hashes) + rng.randbytes(8)
        for h in [rng.randrange(1 << 32), 0, (1 << 32) - 1] + hashes[:3]:
            want = bisect.bisect_left(hashes, h)
            assert NATIVE.hash_lower_bound(buf, 16, n, h) == want
            assert PURE.hash_lower_bound(buf, 16, n, h) == want
        for mod in (NATIVE, PURE):
            with pytest.raises(ValueError):
                mod.hash_lower_bound(buf, 16, n + 2, 0)


def test_stat_result_without_the_tuple_shortcut(proto_img, monkeypatch):
    """Where os.stat_result does not take the 19 Linux fields as one tuple,
    the fields after the tenth go by name, with the same result."""
    from fstool.fs import inode as I
    with fstool.open_image(proto_img) as fs:
        nodes = [n for _p, n in fs.walk("/")]
        fast = [n.stat() for n in nodes]
        monkeypatch.setattr(I, "_STAT_FROM_TUPLE", False)
        slow = [n.stat() for n in nodes]
    assert fast == slow
    assert [s.st_rdev for s in fast if s.st_rdev] and \
        all(s.st_mtime_ns == n.mtime_ns for s, n in zip(fast, nodes))
