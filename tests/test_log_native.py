"""fstool_native's log recovery code (op splitting, reassembly, buffer and
inode item fields and checks, inode items laid onto their buffers, icreate
clusters): the compiled and the pure-Python backends agree on the items of
kernel-written logs and on corrupted copies of them, and the inode
conversion agrees with a reference written from the LOG_DINODE layout."""
from __future__ import annotations

import random
import struct

import pytest

import fstool
import fstool_native
from fixtures import log_fixtures as LF
from fstool.format import constants as C
from fstool.format import log as L
from fstool.recovery import recover as R
from fstool.log.reassemble import _CONSTS, Transaction

PURE = fstool_native.load(pure=True)
NATIVE = fstool_native.load()
needs_native = pytest.mark.skipif(not fstool_native.is_native(NATIVE),
                                  reason="native backend not built")
HAVE = [n for n in ("dirty-default", "dirty-legacytime")
        if (LF.HERE / f"{n}.img.zst").exists()]
needs_fixtures = pytest.mark.skipif(not HAVE, reason="fixtures/logs/*.img.zst not built")


def outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except fstool_native.load(pure=True).LogItemError as e:
        return ("LogItemError", e.stage, str(e))
    except ValueError as e:
        return (type(e).__name__, getattr(e, "stage", None), str(e))


_BUF_KEYS = ("type", "type_code", "blkno", "len", "flags", "cancel", "inode_buf", "blf_type",
             "map", "map_size")
_INODE_KEYS = ("type", "type_code", "blkno", "len", "ino", "fields", "asize", "dsize",
               "boffset", "ilf_u")


def lite_fields(d):
    if d is None:
        return None
    return tuple(getattr(d, k) for k in (_BUF_KEYS if d.type == "BUF" else _INODE_KEYS))


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """name -> (image path, [(body, h_len, nops, lsn, blk)] of its records)."""
    d = tmp_path_factory.mktemp("lognative")
    out = {}
    for n in HAVE:
        img = LF.unpack(n, d / f"{n}.img")
        with fstool.open_image(img) as fs:
            recs = [(bytes(r.body), r.header["h_len"], r.header["h_num_logops"], r.lsn, r.blk)
                    for r in fs.log.records()]
        out[n] = (img, recs)
    return out


def reassemble(mod, recs):
    """Transactions of ``recs`` as plain data, or the first error."""
    r = mod.LogReassembler(Transaction, _CONSTS)
    got = []
    try:
        for body, h_len, nops, lsn, blk in recs:
            ops = mod.log_split_ops(body, h_len, nops)
            for t in r.feed(body, ops, lsn, blk):
                got.append((t.tid, t.lsn, t.commit_lsn, t.header,
                            [(list(it.regions), it.total) for it in t.items]))
    except ValueError as e:
        return ("error", str(e), got)
    return ("ok", got, r.unmounts, sorted(r.open))


@needs_native
@needs_fixtures
def test_split_and_reassembly_parity(logs):
    rng = random.Random(5)
    for name, (_img, recs) in logs.items():
        good = reassemble(NATIVE, recs)
        assert good[0] == "ok" and good[1], name
        assert good == reassemble(PURE, recs)
        for _ in range(60):
            bad = [list(r) for r in recs]
            i = rng.randrange(len(bad))
            body = bytearray(bad[i][0])
            for _ in range(rng.randrange(1, 4)):
                body[rng.randrange(min(len(body), bad[i][1] or 1))] = rng.randrange(256)
            bad[i][0] = bytes(body)
            if rng.random() < 0.2:
                bad[i][2] += rng.randrange(1, 5)
            assert reassemble(NATIVE, bad) == reassemble(PURE, bad)


def _items(recs):
    r = NATIVE.LogReassembler(Transaction, _CONSTS)
    for body, h_len, nops, lsn, blk in recs:
        for t in r.feed(body, NATIVE.log_split_ops(body, h_len, nops), lsn, blk):
            for it in t.items:
                if it.regions:
                    yield t, it


@needs_native
@needs_fixtures
def test_lite_parity_on_items_and_corrupted_items(logs):
    rng = random.Random(7)
    for name, (img, recs) in logs.items():
        with fstool.open_image(img) as fs:
            irs = (R.item_replayer(fs, NATIVE), R.item_replayer(fs, PURE))
        kinds = set()
        for _t, it in _items(recs):
            a, b = (outcome(ir.lite, it.regions) for ir in irs)
            assert a[0] == "ok", (name, a)
            assert lite_fields(a[1]) == lite_fields(b[1])
            if a[1] is not None:
                kinds.add(a[1].type)
            for _ in range(2):
                regions = list(it.regions)
                r0 = bytearray(regions[0])
                for _ in range(rng.randrange(1, 3)):
                    r0[rng.randrange(len(r0))] = rng.randrange(256)
                if rng.random() < 0.1:
                    r0 = r0[:rng.randrange(len(r0))]
                regions[0] = bytes(r0)
                if rng.random() < 0.2:
                    regions = regions[:1]
                a, b = (outcome(ir.lite, regions) for ir in irs)
                if a[0] == "ok":
                    assert b[0] == "ok" and lite_fields(a[1]) == lite_fields(b[1])
                else:
                    assert a == b
        assert kinds == {"BUF", "INODE"}, name


def reference_inode(core: bytes, disk: bytes, lsn: int, isize: int) -> bytes:
    """xfs_log_dinode_to_disk written from the LOG_DINODE layout: unpack the
    host-order core, swap legacy timestamp halves, keep di_next_unlinked,
    stamp di_lsn, pack big-endian, then the CRC (forks are left out)."""
    names = [n for n, _c in L.LOG_DINODE.fields]
    v = dict(zip(names, L.LOG_DINODE.struct.unpack(core + bytes(L.LOG_DINODE.size -
                                                                  len(core)))))
    if not v["di_flags2"] & C.XFS_DIFLAG2_BIGTIME:
        for k in ("di_atime", "di_mtime", "di_ctime", "di_crtime"):
            t = v[k]
            v[k] = ((t & 0xFFFFFFFF) << 32) | (t >> 32)
    v["di_next_unlinked"] = struct.unpack_from(">I", disk, 96)[0]
    v["di_lsn"] = lsn
    v["di_crc"] = 0
    be = struct.Struct(">" + "".join(c for _n, c in L.LOG_DINODE.fields))
    out = bytearray(disk[:isize])
    be.pack_into(out, 0, *[v[n] for n in names])
    out[100:104] = NATIVE.xfs_cksum(bytes(out), 100).to_bytes(4, "little")
    return bytes(out)


@needs_native
@needs_fixtures
def test_inode_items_parity_and_reference(logs):
    rng = random.Random(9)
    legacy = 0
    for name, (img, recs) in logs.items():
        with fstool.open_image(img) as fs:
            irs = (R.item_replayer(fs, NATIVE), R.item_replayer(fs, PURE))
            isize = fs.sb.inodesize
            n = 0
            for t, it in _items(recs):
                d = irs[0].lite(it.regions)
                if d is None or d.type != "INODE":
                    continue
                n += 1
                disk = fs.dev.pread(d.blkno << 9, d.len << 9)
                if disk[d.boffset:d.boffset + 2] != b"IN":
                    # a cluster an icreate of this log initialises
                    fresh = bytearray(len(disk))
                    irs[0].icreate_cluster(fresh, 1, d.ino - d.boffset // isize)
                    disk = bytes(fresh)
                res = []
                for ir in irs:
                    buf = bytearray(disk)
                    res.append((outcome(ir.inode, buf, d.boffset, ir.lite(it.regions),
                                        it.regions, t.lsn), bytes(buf)))
                assert res[0] == res[1]
                assert res[0][0] == ("ok", True), res[0][0]
                got = res[0][1][d.boffset:d.boffset + isize]
                if not d.fields & (L.XFS_ILOG_DFORK | L.XFS_ILOG_AFORK | L.XFS_ILOG_DEV):
                    ref = reference_inode(it.regions[1], disk[d.boffset:], t.lsn, isize)
                    assert got[:C.XFS_DINODE_CORE_SIZE] == ref[:C.XFS_DINODE_CORE_SIZE]
                assert NATIVE.xfs_cksum_ok(got, 100)
                core = L.LOG_DINODE.unpack(it.regions[1] + bytes(176 - len(it.regions[1])))
                legacy += not core["di_flags2"] & C.XFS_DIFLAG2_BIGTIME
                # a newer inode on disk is left alone
                newer = bytearray(disk)
                struct.pack_into(">Q", newer, d.boffset + 112, t.lsn + 1)
                for ir in irs:
                    b2 = bytearray(newer)
                    assert ir.inode(b2, d.boffset, ir.lite(it.regions), it.regions,
                                    t.lsn) is False
                    assert b2 == newer
                # corrupted cores and forks: same outcome and same buffer
                for _ in range(3):
                    regions = list(it.regions)
                    k = rng.randrange(1, len(regions))
                    r = bytearray(regions[k])
                    if r:
                        for _ in range(rng.randrange(1, 4)):
                            r[rng.randrange(len(r))] = rng.randrange(256)
                    regions[k] = bytes(r)
                    res = []
                    for ir in irs:
                        buf = bytearray(disk)
                        res.append((outcome(ir.inode, buf, d.boffset, ir.lite(it.regions),
                                            regions, t.lsn), bytes(buf)))
                    assert res[0] == res[1]
            assert n, name
    if "dirty-legacytime" in logs:
        assert legacy


@needs_native
@needs_fixtures
def test_icreate_cluster_parity_and_inodes_verify(logs):
    img = next(iter(logs.values()))[0]
    with fstool.open_image(img) as fs:
        irs = (R.item_replayer(fs, NATIVE), R.item_replayer(fs, PURE))
        isize, uuid = fs.sb.inodesize, fs.sb.meta_uuid
    bufs = []
    for ir in irs:
        buf = bytearray(b"\xa5" * 8192)
        ir.icreate_cluster(buf, 0x12345678, 4096)
        bufs.append(buf)
    assert bufs[0] == bufs[1]
    buf = bytes(bufs[0])
    for i in range(len(buf) // isize):
        ino = buf[i * isize:(i + 1) * isize]
        NATIVE.dinode_core(ino, 4096 + i, uuid)          # magic, version, CRC, number, uuid
        assert struct.unpack_from(">I", ino, 92)[0] == 0x12345678
        assert struct.unpack_from(">I", ino, 96)[0] == C.NULLAGINO
        assert ino[2:4] == bytes(2) and ino[5:92] == bytes(87)


@pytest.mark.parametrize("mod", [PURE] + ([NATIVE] if fstool_native.is_native(NATIVE)
                                          else []),
                         ids=lambda m: "native" if fstool_native.is_native(m) else "pure")
def test_stamp_cksum_in_place(mod):
    buf = bytearray(random.Random(3).randbytes(600))
    mod.stamp_cksum(buf, 100, 612 - 12, 200)
    assert NATIVE.xfs_cksum_ok(bytes(buf[100:600]), 100)
    with pytest.raises(ValueError):
        mod.stamp_cksum(buf, 0, 700, 10)
    with pytest.raises(ValueError):
        mod.stamp_cksum(buf, 0, 100, 98)


@needs_native
@needs_fixtures
def test_classify_order_parity(logs):
    """Pass 2's order (buffers, other items, inode-unlink buffers reversed,
    cancels reversed) and the lists pass 1 reads agree between backends."""
    for name, (img, recs) in logs.items():
        with fstool.open_image(img) as fs:
            irs = (R.item_replayer(fs, NATIVE), R.item_replayer(fs, PURE))
        r = NATIVE.LogReassembler(Transaction, _CONSTS)
        for body, h_len, nops, lsn, blk in recs:
            for t in r.feed_record(body, h_len, nops, lsn, blk):
                outs = []
                for ir in irs:
                    ordered, cancels, rest = ir.classify(t.items, lambda i, it: "other")
                    outs.append(([(i, lite_fields(d) if d != "other" else d)
                                  for i, _it, d in ordered],
                                 [i for i, _it, _d in cancels], [i for i, _it, _d in rest]))
                assert outs[0] == outs[1], name
                order = [i for i, _d in outs[0][0]]
                assert sorted(order) == [i for i, it in enumerate(t.items) if it.regions]
