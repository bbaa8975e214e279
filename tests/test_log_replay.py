"""Log print and replay: committed kernel-written dirty images (no kernel
needed), damaged logs, bad input, idempotence and crash safety, and (where
loop mounts work) a differential run against the kernel's own recovery."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import fstool
from fixtures import log_fixtures as LF
from fstool.format import log as L

REPO = Path(__file__).resolve().parent.parent
NAMES = [n for n, *_ in LF.FIXTURES if (LF.HERE / f"{n}.img.zst").exists()]
needs_fixtures = pytest.mark.skipif(not NAMES, reason="fixtures/logs/*.img.zst not built")


def stamp_crc(buf: bytearray, crc_off: int) -> bytearray:
    """Re-stamp a block's CRC after a test edits it by hand."""
    from fstool._backend import parsers
    buf[crc_off:crc_off + 4] = struct.pack("<I", parsers.xfs_cksum(bytes(buf), crc_off))
    return buf


def run(*args, env=None):
    e = dict(os.environ, PYTHONPATH=str(REPO))
    if env:
        e.update(env)
    return subprocess.run([sys.executable, "-m", "fstool", *map(str, args)],
                          capture_output=True, text=True, env=e)


def expected(name: str) -> dict:
    return json.loads((LF.HERE / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    d = tmp_path_factory.mktemp("logfix")
    return {n: LF.unpack(n, d / f"{n}.img") for n in NAMES}


def fresh(unpacked, name, tmp_path) -> Path:
    dst = tmp_path / f"{name}.img"
    subprocess.run(["cp", "--sparse=always", str(unpacked[name]), str(dst)], check=True)
    return dst


def digest(path: Path) -> str:
    """SHA-256 of the file's contents: every non-zero 4 KiB block with its
    offset (holes and written zeros hash alike; only data regions are read)."""
    from fstool.io.sparse import data_ranges_of
    h = hashlib.sha256()
    zero = bytes(4096)
    with open(path, "rb") as f:
        ranges = data_ranges_of(f.fileno()) or [(0, os.fstat(f.fileno()).st_size)]
        for start, length in ranges:
            f.seek(start)
            pos = start
            while pos < start + length:
                chunk = f.read(min(1 << 22, start + length - pos))
                if not chunk:
                    break
                for o in range(0, len(chunk), 4096):
                    blk = chunk[o:o + 4096]
                    if blk != zero[:len(blk)]:
                        h.update((pos + o).to_bytes(8, "little"))
                        h.update(blk)
                pos += len(chunk)
    return h.hexdigest()


# -- replay of kernel-written logs, checked against the kernel's result ---------------
@needs_fixtures
@pytest.mark.parametrize("name", NAMES)
def test_replay_matches_kernel_recovery(unpacked, name, tmp_path):
    img = fresh(unpacked, name, tmp_path)
    exp = expected(name)
    with fstool.open_image(img) as fs:
        assert fs.log.dirty
    r = run("log", "replay", img)
    assert r.returncode == 0, r.stderr
    with fstool.open_image(img) as fs:
        assert not fs.log.dirty
        view = LF.fstool_view(fs)
        assert LF.fstool_counters(fs) == exp["counters"]
        assert LF.fstool_records(fs) == exp["btrees"]
    assert set(view) == set(exp["tree"])
    bad = [p for p in view if view[p] != exp["tree"][p]]
    assert not bad, (bad[:3], [(view[p], exp["tree"][p]) for p in bad[:2]])


@needs_fixtures
def test_pure_python_backend_replays_alike(unpacked, tmp_path):
    """FSTOOL_PURE_PYTHON=1 runs fstool_native's recovery code as Python: the
    replayed image is the same, byte for byte."""
    name = "dirty-legacytime" if "dirty-legacytime" in NAMES else NAMES[0]
    a = fresh(unpacked, name, tmp_path / "a") if (tmp_path / "a").mkdir() is None else None
    b = fresh(unpacked, name, tmp_path / "b") if (tmp_path / "b").mkdir() is None else None
    r = run("log", "replay", a)
    assert r.returncode == 0, r.stderr
    r = run("log", "replay", b, env={"FSTOOL_PURE_PYTHON": "1"})
    assert r.returncode == 0, r.stderr
    assert run("--version", env={"FSTOOL_PURE_PYTHON": "1"}).stdout.count("pure-python")
    assert digest(a) == digest(b)


@needs_fixtures
def test_replay_twice_is_idempotent(unpacked, tmp_path):
    name = "dirty-default"
    img = fresh(unpacked, name, tmp_path)
    assert run("log", "replay", img).returncode == 0
    once = digest(img)
    r = run("log", "replay", img)
    assert r.returncode == 0 and "nothing to replay" in r.stdout
    assert digest(img) == once


@needs_fixtures
def test_replay_interrupted_then_rerun_gives_same_image(unpacked, tmp_path):
    name = "dirty-default"
    ref = fresh(unpacked, name, tmp_path)
    assert run("log", "replay", ref).returncode == 0
    want = digest(ref)
    ref.unlink()
    # count the writes one replay makes, then die after some of them
    from fstool.io.device import writes_so_far
    from fstool.ops.logops import replay
    probe = fresh(unpacked, name, tmp_path)
    w0 = writes_so_far()
    replay(probe)
    total = writes_so_far() - w0
    probe.unlink()
    assert total > 5
    for n in sorted({1, 2, total // 3, total // 2, total - 2, total - 1}):
        img = fresh(unpacked, name, tmp_path)
        k = run("log", "replay", img, env={"FSTOOL_FAULT_AFTER_WRITES": str(n)})
        assert k.returncode != 0, f"fault after {n} writes did not stop the replay"
        r = run("log", "replay", img)
        assert r.returncode == 0, r.stderr
        assert digest(img) == want, f"interrupted after {n} writes"
        img.unlink()


@needs_fixtures
def test_dry_run_writes_nothing(unpacked, tmp_path):
    name = NAMES[0]
    img = fresh(unpacked, name, tmp_path)
    before = digest(img)
    r = run("log", "replay", "-n", img)
    assert r.returncode in (0, 4), r.stderr
    if r.returncode == 0:
        assert "would replay" in r.stdout and "blocks that would be written" in r.stdout
    assert digest(img) == before


# -- print, and the comparison with xfs_logprint ----------------------------------------
@needs_fixtures
@pytest.mark.parametrize("name", NAMES)
def test_print_counts_match_xfs_logprint(unpacked, name):
    exp = expected(name)["logprint"]
    img = unpacked[name]
    with fstool.open_image(img) as fs:
        nrec = sum(1 for _ in fs.log.records())
        ntrans = sum(1 for _ in fs.log.transactions())
    assert nrec == exp["records"]
    assert ntrans == exp["transactions"]
    r = run("log", "print", "--transactions", "--json", img)
    assert r.returncode == 0
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(lines) == exp["transactions"]
    assert all(t["items"] for t in lines)


@needs_fixtures
@pytest.mark.skipif(not shutil.which("xfs_logprint"), reason="xfs_logprint not installed")
def test_print_counts_match_live_xfs_logprint(unpacked):
    name = NAMES[0]
    live = LF.logprint_counts(unpacked[name])
    with fstool.open_image(unpacked[name]) as fs:
        assert sum(1 for _ in fs.log.records()) == live["records"]
        assert sum(1 for _ in fs.log.transactions()) == live["transactions"]


@needs_fixtures
def test_log_info_json(unpacked):
    r = run("log", "info", "--json", unpacked[NAMES[0]])
    d = json.loads(r.stdout)
    assert d["state"] == "dirty" and d["unreplayed_sectors"] > 0
    assert d["head_block"] != d["tail_block"]


# -- reading commands on a dirty image -----------------------------------------------------
@needs_fixtures
def test_reading_commands_warn_and_replay_in_memory(unpacked, tmp_path):
    name = "dirty-default"
    img = unpacked[name]
    before = digest(img)
    exp = expected(name)["tree"]
    r = run("ls", "-R", img, "/")
    assert "log is dirty" in r.stderr and "BEFORE replay" in r.stderr
    r = run("ls", "-R", "--replay-in-memory", img, "/")
    assert r.returncode == 0, r.stderr
    shown = {ln if ln.startswith("/") else "/" + ln for ln in r.stdout.splitlines()} | {"/"}
    assert shown == set(exp)
    assert "log is dirty" not in r.stderr
    assert digest(img) == before
    r = run("check", img)
    assert r.returncode == 2 and "fstool log replay" in r.stderr


# -- damaged logs ----------------------------------------------------------------------------
def _records(img: Path):
    with fstool.open_image(img) as fs:
        ld = fs.log.device
        st = fs.log.state
        recs = [(r.blk, r.hblks, r.header["h_len"]) for r in fs.log.records()]
        return ld.start_daddr, st, recs


def _rewrite_record(img: Path, start: int, blk: int, hblks: int, h_len: int, change):
    """Unpack one record, let ``change(body)`` edit it, repack with a good CRC."""
    bb = L.record_blocks(h_len)
    with open(img, "r+b") as f:
        f.seek((start + blk) * 512)
        raw = bytearray(f.read((hblks + bb) * 512))
        hdr, body = raw[:hblks * 512], raw[hblks * 512:]
        cyc = L.REC_HEADER.unpack(hdr)["h_cycle"]
        L.unstamp_cycles(hdr, body, h_len)
        change(hdr, body)
        L.stamp_cycles(hdr, body, cyc)
        L.set_rec_crc(hdr, body, L.REC_HEADER.unpack(hdr)["h_len"])
        f.seek((start + blk) * 512)
        f.write(hdr + body)


@needs_fixtures
def test_crc_broken_mid_log_is_refused(unpacked, tmp_path):
    img = fresh(unpacked, "dirty-default", tmp_path)
    start, st, recs = _records(img)
    assert len(recs) > 12
    blk, hblks, h_len = recs[len(recs) // 3]
    with open(img, "r+b") as f:
        f.seek((start + blk + hblks) * 512 + 100)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
    before = digest(img)
    r = run("log", "replay", img)
    assert r.returncode == 4          # damaged log, r.stderr
    assert f"log block {blk}" in r.stderr and "CRC" in r.stderr
    assert digest(img) == before


@needs_fixtures
def test_torn_head_is_trimmed(unpacked, tmp_path):
    """A CRC failure in the newest record is a torn write: the head moves
    back to the record before it, as the kernel does, and replay goes on."""
    img = fresh(unpacked, "dirty-default", tmp_path)
    start, st, recs = _records(img)
    blk, hblks, h_len = recs[-1]
    with open(img, "r+b") as f:
        f.seek((start + blk + hblks) * 512 + 8)
        f.write(b"\xa5" * 64)
    with fstool.open_image(img) as fs:
        new = fs.log.state
    assert new.head == blk and new.torn_at == blk
    r = run("log", "replay", img)
    assert r.returncode == 0, r.stderr
    with fstool.open_image(img) as fs:
        assert not fs.log.dirty


@needs_fixtures
def test_zeroed_sectors_at_head(unpacked, tmp_path):
    img = fresh(unpacked, "dirty-default", tmp_path)
    start, st, recs = _records(img)
    blk, hblks, h_len = recs[-1]
    with open(img, "r+b") as f:
        f.seek((start + blk) * 512)
        f.write(bytes((hblks + L.record_blocks(h_len)) * 512))
    with fstool.open_image(img) as fs:
        assert fs.log.state.head == blk
    assert run("log", "replay", img).returncode == 0


@needs_fixtures
@pytest.mark.parametrize("damage", ["impossible_length", "op_past_record", "block_outside",
                                    "inode_outside", "log_outside_device"])
def test_damaged_log_exit_6_nothing_written(unpacked, tmp_path, damage):
    img = fresh(unpacked, "dirty-default", tmp_path)
    start, st, recs = _records(img)
    blk, hblks, h_len = recs[1]
    if damage == "impossible_length":
        def change(hdr, body):
            struct.pack_into(">I", hdr, 12, 1 << 30)
        _rewrite_record(img, start, blk, hblks, h_len, change)
    elif damage == "op_past_record":
        def change(hdr, body):
            struct.pack_into(">I", body, 4, h_len * 4)       # first op's oh_len
        _rewrite_record(img, start, blk, hblks, h_len, change)
    elif damage in ("block_outside", "inode_outside"):
        want = L.XFS_LI_BUF if damage == "block_outside" else L.XFS_LI_INODE
        hit = []
        for b, hb, hl in recs:
            def change(hdr, body, b=b):
                if hit:
                    return
                h = L.REC_HEADER.unpack(hdr)
                dp, n = 0, h["h_num_logops"]
                while dp + 12 <= hl and n:
                    _tid, oplen, _c, flags, _r = struct.unpack_from(">IIBBH", body, dp)
                    d = dp + 12
                    if oplen >= 24 and struct.unpack_from("<H", body, d)[0] == want:
                        if want == L.XFS_LI_BUF:
                            struct.pack_into("<q", body, d + 8, 1 << 40)
                        else:
                            struct.pack_into("<Q", body, d + 16, 1 << 60)
                        hit.append(b)
                        return
                    dp = d + oplen
                    n -= 1
            _rewrite_record(img, start, b, hb, hl, change)
            if hit:
                break
        assert hit
    else:
        from fstool.format.structs import SB
        with open(img, "r+b") as f:
            raw = bytearray(f.read(512))
            f2 = SB.unpack(raw)
            f2["sb_logstart"] = f2["sb_dblocks"] - 10
            raw[:SB.size] = SB.pack(f2)
            stamp_crc(raw, 224)
            f.seek(0)
            f.write(raw)
    before = digest(img)
    r = run("log", "replay", img)
    assert r.returncode == 4, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1
    if damage != "log_outside_device":
        assert "record at log block" in r.stderr
    if damage in ("block_outside", "inode_outside"):
        assert "item" in r.stderr
    assert digest(img) == before


@needs_fixtures
def test_zero_needs_force_and_leaves_clean_log(unpacked, tmp_path):
    img = fresh(unpacked, NAMES[0], tmp_path)
    r = run("log", "zero", img)
    assert r.returncode != 0 and "--force" in r.stderr
    r = run("log", "zero", "--force", img)
    assert r.returncode == 0 and "lost" in r.stderr
    with fstool.open_image(img) as fs:
        assert not fs.log.dirty
    if shutil.which("xfs_repair"):
        rr = subprocess.run(["xfs_repair", "-n", "-f", str(img)], capture_output=True)
        assert rr.returncode in (0, 1)          # clean log; lost changes may show
        assert b"cannot find log head" not in rr.stdout + rr.stderr


# -- against the kernel, where loop mounts work ------------------------------------------------
def _loop():
    from fixtures.images import loop_available
    return loop_available()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for loop mounts")
@pytest.mark.parametrize("seed,mkfs,opts", [(7, (), {}), (8, ("-m", "finobt=0"), {}),
                                            (9, ("-l", "su=65536"), {}),
                                            (10, (), {"modern": True}),
                                            (11, ("-b", "size=1024"), {"modern": True})],
                         ids=["default", "finobt0", "logsu64k", "6.10", "6.10-bs1024"])
def test_differential_against_kernel(tmp_path, seed, mkfs, opts):
    """A kernel-dirty image replayed by the kernel and by fstool: the same
    image.  With xfsprogs 6.10.1's defaults (rmapbt, reflink) the work after
    replay (a file deleted while open, CoW staging extents) keeps the rmapbt
    as the kernel's does."""
    if not _loop():
        pytest.skip("no loop mounts / xfsprogs here")
    from fixtures import dirty, modern
    if opts.pop("modern", False):
        if not modern.available():
            pytest.skip(modern.WHY)
        opts["mkfs"] = modern.tool("mkfs.xfs")
    img = tmp_path / "d.img"
    dirty.make_dirty(img, seed, mkfs, 120, tree=False, **opts)
    a = dirty.copy(img, tmp_path / "a.img")
    b = dirty.copy(img, tmp_path / "b.img")
    dirty.kernel_replay(a)
    r = run("log", "replay", b)
    assert r.returncode == 0, r.stderr
    assert dirty.compare(a, b) == []


# -- the v5 ordering rule and cancelled buffers ---------------------------------------------
@needs_fixtures
def test_newer_block_on_disk_is_not_overwritten(unpacked, tmp_path):
    """A block whose on-disk LSN is at least a transaction's is not replayed
    over (v5 rule); an inode newer than the transaction is not either."""
    from fstool.format.structs import AGF
    name = "dirty-default"
    img = fresh(unpacked, name, tmp_path)
    with fstool.open_image(img) as fs:
        st = fs.log.state
        logged = {d["blkno"] for _t, items in fs.log.transactions() for d in items
                  if d["type"] == "BUF"}
        ss = fs.sb.sectsize
        agf_daddr = ss // 512
        assert agf_daddr in logged            # AG 0's AGF is in the log
    future = st.head_lsn          # as new as the newest transaction
    assert future
    with open(img, "r+b") as f:
        f.seek(agf_daddr * 512)
        raw = bytearray(f.read(ss))
        d = AGF.unpack(raw)
        d["agf_lsn"] = future
        d["agf_spare64"] = [0x5EED] + d["agf_spare64"][1:]
        raw[:AGF.size] = AGF.pack(d)
        stamp_crc(raw, 216)
        f.seek(agf_daddr * 512)
        f.write(raw)
    assert run("log", "replay", img).returncode == 0
    with fstool.open_image(img) as fs:
        agf = fs.agf(0)
        assert agf["agf_spare64"][0] == 0x5EED and agf["agf_lsn"] >= future


@needs_fixtures
def test_cancelled_buffers_are_not_replayed(unpacked):
    """Buffers whose last log item is a cancel (freed metadata) are never
    written by replay."""
    from fstool.recovery.recover import Recovery
    hits = 0
    for name in NAMES:
        with fstool.open_image(unpacked[name]) as fs:
            last = {}
            for _t, items in fs.log.transactions():
                for d in items:
                    if d["type"] == "BUF":
                        last[(d["blkno"], d["len"])] = d["cancel"]
            dead = {k[0] for k, cancel in last.items() if cancel}
            if not dead:
                continue
            hits += 1
            r = Recovery(fs, fs.log.device, fs.log.state, dry_run=True)
            r.early_writes = False
            r.run()
            written = {b.daddr for b in r.bufs.values() if b.dirty}
            assert not dead & written
            assert r.stats.cancelled > 0
    assert hits, "no fixture has a cancelled buffer"


@needs_fixtures
@pytest.mark.parametrize("kind", ["ATTRI", "XMI"])
def test_unfinishable_intent_refused(unpacked, tmp_path, kind):
    """An intent fstool cannot finish exactly as the kernel would (an ATTRI
    with an operation flag it does not know, an XMI on a filesystem without
    the exchange-range feature), committed without its done item, is
    refused with one line and nothing written (a transaction holding it is
    appended at the head with fstool's own log writer)."""
    from fstool.io.device import Device
    from fstool.trans.logwriter import LogWriter
    img = fresh(unpacked, "dirty-default", tmp_path)
    with fstool.open_image(img) as fs:
        ld, st = fs.log.device, fs.log.state
        if kind == "ATTRI":
            body = [L.ATTRI_LOG_FORMAT.pack({"alfi_type": L.XFS_LI_ATTRI, "alfi_size": 2,
                                             "alfi_igen": 1, "alfi_id": 0xABC,
                                             "alfi_ino": 128, "alfi_op_flags": 0x101,
                                             "alfi_name_len": 4, "alfi_value_len": 0,
                                             "alfi_attr_filter": 0}), b"name"]
        else:
            body = [L.XMI_LOG_FORMAT.pack({"xmi_type": L.XFS_LI_XMI, "xmi_size": 1,
                                           "__pad": 0, "xmi_id": 0xABC, "xmi_inode1": 131,
                                           "xmi_inode2": 132, "xmi_igen1": 1,
                                           "xmi_igen2": 1, "xmi_startoff1": 0,
                                           "xmi_startoff2": 0, "xmi_blockcount": 1,
                                           "xmi_flags": 0, "xmi_isize1": 0,
                                           "xmi_isize2": 0})]
    out = Device(img, writable=True)
    try:
        lw = LogWriter(out, ld, head_block=st.head, head_cycle=st.curr_cycle,
                       prev_block=st.head_rec, tail_lsn=st.tail_lsn)
        lw.write_checkpoint(0x1234, [body], st.tail_lsn)
    finally:
        out.close()
    r = run("log", "print", "-t", img)
    assert kind in r.stdout
    before = digest(img)
    r = run("log", "replay", img)
    assert r.returncode == 4, r.stderr
    assert f"{kind} intent 0xabc" in r.stderr and "nothing was written" in r.stderr
    assert ("(set of xattr 'name' on inode 128)" if kind == "ATTRI" else
            "(exchange of 1 blocks at offsets 0/0 between inodes 131 and 132)") in r.stderr
    assert ("unknown attr operation flags 0x101" if kind == "ATTRI" else
            "without the exchange-range feature") in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert digest(img) == before


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for loop mounts")
@needs_fixtures
def test_kernel_replays_the_transaction_fstool_logged(unpacked, tmp_path):
    """Stopped right after its post-replay transaction reached the log, a
    replay leaves a log the kernel recovers to the same image fstool's
    whole replay gives: fstool's log records are the kernel's format."""
    if not _loop():
        pytest.skip("no loop mounts / xfsprogs here")
    from fixtures import dirty
    from fstool.ops.logops import replay
    name = "dirty-default"
    full = fresh(unpacked, name, tmp_path)
    rep = replay(full)
    post = rep.get("logged_post_replay")
    assert post, "this fixture leaves no post-replay work"
    cut = tmp_path / "cut.img"
    subprocess.run(["cp", "--sparse=always", str(unpacked[name]), str(cut)], check=True)
    n = post["writes"]            # every write up to its commit record
    k = run("log", "replay", cut, env={"FSTOOL_FAULT_AFTER_WRITES": str(n)})
    assert k.returncode != 0
    with fstool.open_image(cut) as fs:
        assert fs.log.dirty
        last = list(fs.log.transactions())[-1][1]
        assert len(last) == post["buffers"] + post["efds"]
    dirty.kernel_replay(cut)
    assert dirty.compare(cut, full) == []


@needs_fixtures
def test_replay_two_fsyncs_order_blocks_before_the_unmount_record(unpacked, tmp_path,
                                                                    monkeypatch):
    """Where nothing is left to do after replay, the replayed blocks, the
    counters and the cleared stale log blocks are written and made durable
    by one fsync, then the unmount record alone, then a second fsync; every
    run of blocks written at a group's end has its writeback started."""
    from fstool.io.device import Device
    from fstool.ops.logops import replay
    name = "dirty-default"
    full = fresh(unpacked, name, tmp_path)
    post = replay(full).get("logged_post_replay")
    assert post, "this fixture leaves no post-replay work"
    # stopped right after its own post-replay checkpoint reached the log: the
    # next replay finds nothing left for the writer (the no-writer path)
    cut = tmp_path / "cut.img"
    subprocess.run(["cp", "--sparse=always", str(unpacked[name]), str(cut)], check=True)
    assert run("log", "replay", cut,
               env={"FSTOOL_FAULT_AFTER_WRITES": str(post["writes"])}).returncode != 0
    with fstool.open_image(cut) as fs:
        st = fs.log.state
        assert st.dirty
        head_off = (fs.log.device.start_daddr + st.head) * 512
    events = []
    orig = {k: getattr(Device, k) for k in ("pwrite", "pwritev", "fsync", "start_writeback")}

    def rec(kind):
        def f(self, *a):
            if kind == "pwrite":
                events.append(("write", a[0], len(a[1])))
            elif kind == "pwritev":
                events.append(("run", a[0], sum(len(b) for b in a[1])))
            elif kind == "start_writeback":
                events.append(("writeback", a[0], a[1]))
            elif self.writable:
                events.append(("fsync",))
            return orig[kind](self, *a)
        return f
    for k in orig:
        monkeypatch.setattr(Device, k, rec(k))
    # every group's end writes, as a large log's do (this one is small)
    from fstool.recovery.recover import Recovery
    monkeypatch.setattr(Recovery, "WRITE_BEHIND_BYTES", 0)
    rep = replay(cut)
    assert rep["replayed"] and "logged_post_replay" not in rep
    kinds = [e[0] for e in events]
    assert kinds.count("fsync") == 2 and kinds[-1] == "fsync", kinds
    first = kinds.index("fsync")
    assert events[first + 1:-1] == [("write", head_off, 512)] or \
        [e[:2] for e in events[first + 1:-1]] == [("write", head_off)], events[first:]
    runs = [i for i, e in enumerate(events[:first]) if e[0] == "run"]
    assert runs
    for i in runs:
        assert events[i + 1] == ("writeback",) + events[i][1:], events[i:i + 2]
    with fstool.open_image(cut) as fs:
        assert not fs.log.dirty
    want = digest(full)
    assert digest(cut) == want
    # cut short anywhere on that path (the last write is the unmount
    # record), a replay run again ends the same
    writes = len([e for e in events if e[0] != "fsync" and e[0] != "writeback"])
    assert writes > 3
    again = tmp_path / "again.img"
    for n in (1, writes // 2, writes - 1):
        subprocess.run(["cp", "--sparse=always", str(unpacked[name]), str(again)], check=True)
        run("log", "replay", again, env={"FSTOOL_FAULT_AFTER_WRITES": str(post["writes"])})
        k = run("log", "replay", again, env={"FSTOOL_FAULT_AFTER_WRITES": str(n)})
        assert k.returncode != 0, f"fault after {n} writes did not stop the replay"
        r = run("log", "replay", again)
        assert r.returncode == 0, r.stderr
        assert digest(again) == want, f"interrupted after {n} writes"
