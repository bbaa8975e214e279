"""Replay of kernel-written logs that stop between an intent and its done
item: the parent pointer changes' ATTRIs (pptr_set, pptr_remove,
pptr_replace) and an exchange-range XMI half done with the BUIs of its step
in flight (fixtures/pptr_recover.py; pptr-intents from fixtures/pptr_log.py
holds an XMI and a BUI too).  ``fstool log replay`` finishes them in its
closing transaction; on a copy the kernel's mount recovers, the tree is the
same: every name, every stat field the kernel shows (sizes, blocks, times),
contents, xattrs, and the parent pointers xfs_io 6.10.1 reads through
bulkstat handles; xfs_repair 6.10.1 -n finds nothing on fstool's result."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import dirty, modern, pptr, pptr_log
from fixtures import log_fixtures as LF
from fixtures.images import loop_available
from fstool.format import log as L
from fstool.recovery import finish

REPO = Path(__file__).resolve().parent.parent
#: fixture -> the unfinished intents (type, op or flags) it is known to hold
FIXTURES = ["pptr-attri-set", "pptr-attri-remove", "pptr-attri-replace", "pptr-xmi",
            pptr_log.NAME]


def run(*args):
    return subprocess.run([sys.executable, "-m", "fstool", *map(str, args)],
                          capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))


def _have(name: str) -> bool:
    return (LF.HERE / f"{name}.img.zst").exists()


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    d = tmp_path_factory.mktemp("pptr-recover")
    cache = {}

    def get(name: str) -> Path:
        if not _have(name):
            pytest.skip(f"fixtures/logs/{name} not built")
        if name not in cache:
            cache[name] = LF.unpack(name, d / f"{name}.img")
        return cache[name]
    return get


def _copy(src: Path, dst: Path) -> Path:
    subprocess.run(["cp", "--sparse=always", str(src), str(dst)], check=True)
    return dst


def _left(img: Path) -> list:
    """The fixture's unfinished intents, as fixtures.pptr_recover lists them."""
    from fixtures import pptr_recover
    return pptr_recover.summary(pptr_recover.unfinished(img))


@pytest.mark.parametrize("name", FIXTURES)
def test_replay_finishes_the_logged_intents(unpacked, name, tmp_path):
    """Every unfinished ATTRI and XMI is finished (not refused), each with
    its done item in the checkpoint replay logs, and the result checks
    clean."""
    src = unpacked(name)
    left = _left(src)
    meta = json.loads((LF.HERE / f"{name}.json").read_text())
    if "unfinished" in meta:
        assert left == meta["unfinished"]
    kinds = [d["type"] for d in left]
    assert "ATTRI" in kinds or "XMI" in kinds
    xmi = [d for d in left if d["type"] == "XMI"]
    if name == "pptr-xmi":
        # resumed from the middle: some blocks exchanged, some left
        assert xmi and xmi[0]["startoff1"] > 0 and xmi[0]["blockcount"] > 0
    img = _copy(src, tmp_path / "b.img")
    r = run("log", "replay", "--json", img)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    fin = rep["finished"]
    assert fin["attr_intents"] == kinds.count("ATTRI")
    assert fin["exchange_intents"] == kinds.count("XMI")
    assert rep["logged_post_replay"]["efds"] >= len(left)
    r = run("check", img)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.skipif(not loop_available(), reason="needs root and loop mounts")
@pytest.mark.skipif(not modern.available(), reason="xfsprogs 6.10.1 not built")
@pytest.mark.parametrize("name", FIXTURES)
def test_replay_equals_the_kernels_recovery(unpacked, name, tmp_path):
    """Copy A: the kernel's mount recovers; copy B: fstool log replay.  The
    same tree, the same parent pointers; xfs_repair 6.10.1 -n clean on B."""
    src = unpacked(name)
    a = _copy(src, tmp_path / "a.img")
    b = _copy(src, tmp_path / "b.img")
    dirty.kernel_replay(a)
    r = run("log", "replay", b)
    assert r.returncode == 0, r.stderr
    va, vb = dirty.kernel_view(a), dirty.kernel_view(b)
    diffs = [p for p in sorted(set(va) | set(vb)) if va.get(p) != vb.get(p)]
    assert not diffs, [(p, va.get(p), vb.get(p)) for p in diffs[:3]]
    assert pptr.kernel_parents(a) == pptr.kernel_parents(b)
    rep = modern.repair_n(b)
    assert rep.returncode == 0, (rep.stdout + rep.stderr)[-1500:]


def _attri(op_flags: int, flt: int, **kw) -> dict:
    d = {"type": "ATTRI", "type_code": L.XFS_LI_ATTRI, "id": 0x77, "ino": 131, "igen": 1,
         "op": L.ATTRI_OP_NAMES.get(op_flags & 0xFF, "?"), "op_flags": op_flags,
         "filter": flt, "filter_names": str(flt), "name_len": 3, "new_name_len": 0,
         "value_len": 12, "new_value_len": 0, "name": "abc", "value": bytes(12)}
    d.update(kw)
    return d


def _xmi(flags: int) -> dict:
    return {"type": "XMI", "type_code": L.XFS_LI_XMI, "id": 0x78, "inode1": 131,
            "inode2": 132, "igen1": 1, "igen2": 1, "startoff1": 0, "startoff2": 0,
            "blockcount": 4, "flags": flags, "isize1": 0, "isize2": 0}


@pytest.mark.parametrize("item, why", [
    (_attri(L.XFS_ATTRI_OP_FLAGS_PPTR_SET | 0x400, 8), "unknown attr operation flags 0x404"),
    (_attri(9, 0), "unknown attr operation flags 0x9"),
    (_attri(L.XFS_ATTRI_OP_FLAGS_SET, 0x10), "unknown attr filter flags 0x10"),
    (_attri(L.XFS_ATTRI_OP_FLAGS_PPTR_SET, 0), "pptr_set in namespace 0"),
    (_attri(L.XFS_ATTRI_OP_FLAGS_PPTR_REMOVE, 8, value=bytes(5)),
     "a parent pointer value that is not a parent record"),
    (_xmi(L.XFS_EXCHMAPS_ATTR_FORK), "an attr fork exchange"),
    (_xmi(1 << 9), "unknown exchange flags 0x200"),
])
def test_intents_not_finished_exactly_are_refused(item, why):
    """What fstool cannot finish as the kernel would is refused before
    anything is written, naming the intent and why."""
    with pytest.raises(finish.IntentRefused) as e:
        finish.check_intents({(item["type_code"], item["id"]): (1, item, 42)})
    msg = str(e.value)
    assert why in msg and f"{item['type']} intent 0x{item['id']:x}" in msg
    assert "nothing was written" in msg and "\n" not in msg


@pytest.mark.parametrize("name", ["pptr-xmi", "pptr-attri-replace"])
def test_replay_cut_short_then_run_again_gives_the_same_image(unpacked, name, tmp_path):
    """A replay killed after some of its writes, while it finishes the
    intents or after, then run again, leaves the image one uninterrupted
    replay leaves, byte for byte (the finishing work is logged before it is
    written in place).  One cut by default (just before the unmount record,
    the finishing checkpoint logged and written); FSTOOL_REPLAY_CUTS=1 tries
    five, from the first write on."""
    from fstool.io.device import writes_so_far
    from fstool.ops.logops import replay
    from test_log_replay import digest
    src = unpacked(name)
    ref = _copy(src, tmp_path / "ref.img")
    w0 = writes_so_far()
    replay(ref)
    total = writes_so_far() - w0
    want = digest(ref)
    ref.unlink()
    assert total > 5
    cuts = {total - 1}
    if os.environ.get("FSTOOL_REPLAY_CUTS"):
        cuts |= {1, total // 3, total // 2, total - 2}
    for n in sorted(cuts):
        img = _copy(src, tmp_path / "cut.img")
        k = subprocess.run([sys.executable, "-m", "fstool", "log", "replay", str(img)],
                           capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=str(REPO),
                                    FSTOOL_FAULT_AFTER_WRITES=str(n)))
        assert k.returncode != 0, f"fault after {n} writes did not stop the replay"
        r = run("log", "replay", img)
        assert r.returncode == 0, r.stderr
        assert digest(img) == want, f"cut after {n} of {total} writes"
        img.unlink()



def _append_intent(img: Path, regions: list) -> None:
    """A checkpoint holding one intent item, appended at the log's head
    (fstool's own log writer)."""
    import fstool
    from fstool.io.device import Device
    from fstool.trans.logwriter import LogWriter
    with fstool.open_image(img, replay_in_memory=True) as fs:
        ld, st = fs.log.device, fs.log.state
    out = Device(img, writable=True)
    try:
        LogWriter(out, ld, head_block=st.head, head_cycle=st.curr_cycle,
                  prev_block=st.head_rec, tail_lsn=st.tail_lsn).write_checkpoint(
            0x1234, [regions], st.tail_lsn)
    finally:
        out.close()


_USER_XATTR_SET = [L.ATTRI_LOG_FORMAT.pack({
    "alfi_type": L.XFS_LI_ATTRI, "alfi_size": 3, "alfi_igen": 0, "alfi_id": 0xABC,
    "alfi_ino": 132, "alfi_op_flags": L.XFS_ATTRI_OP_FLAGS_SET, "alfi_name_len": 1,
    "alfi_value_len": 8, "alfi_attr_filter": 0}), b"k\0\0\0", b"v" * 8]
_XMI_OTHER_GEN = [L.XMI_LOG_FORMAT.pack({
    "xmi_type": L.XFS_LI_XMI, "xmi_size": 1, "__pad": 0, "xmi_id": 0xABC,
    "xmi_inode1": 131, "xmi_inode2": 132, "xmi_igen1": 7, "xmi_igen2": 7,
    "xmi_startoff1": 0, "xmi_startoff2": 0, "xmi_blockcount": 1, "xmi_flags": 0,
    "xmi_isize1": 0, "xmi_isize2": 0})]


@pytest.mark.parametrize("regions, said", [
    (_USER_XATTR_SET, "ATTRI intent 0xabc (set of xattr 'k' on inode 132) has no done item "
                      "and fstool cannot finish it (an xattr change logged on a filesystem "
                      "without the logged xattrs log feature)"),
    (_XMI_OTHER_GEN, "(it names inode 131 generation 0x7, which is generation"),
], ids=["user-xattr-attri", "xmi-other-generation"])
def test_intents_the_kernel_refuses_are_refused_with_nothing_written(
        unpacked, tmp_path, regions, said):
    """An ATTRI setting a user xattr where the superblock lacks the
    logged-xattrs log feature (xfs_attri_validate), an XMI naming files of
    another generation (xlog_recover_iget_handle), appended to a
    kernel-written parent-pointer log: the kernel's mount fails on them, and
    fstool refuses them in one line, having written nothing (the generation
    is checked on the image as replayed in memory)."""
    from test_log_replay import digest
    img = _copy(unpacked("pptr-attri-set"), tmp_path / "u.img")
    _append_intent(img, regions)
    before = digest(img)
    r = run("log", "replay", img)
    assert r.returncode == 4, r.stdout + r.stderr
    assert said in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "nothing was written" in r.stderr
    assert digest(img) == before
    if loop_available():
        with pytest.raises(subprocess.CalledProcessError):
            dirty.kernel_replay(img)
