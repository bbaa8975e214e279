"""Every write order fstool makes is safe: killed right after any one of its
writes to the image, a sequence of edits leaves an image that log recovery
brings to exactly the state before or after one of its steps, and that
xfs_repair -n then finds clean.  Also: a transaction that aborts leaves the
disk and every cache as they were, and the same input gives the same bytes
(log included).

The kill-after-every-write test kills after a sample of the writes by
default (fixtures/killpoints.py: the first and last, each step's end and
the write after it, every fourth of the rest); FSTOOL_EVERY_WRITE=1 kills
after every one.  On a parent-pointer image (the states then include every
inode's parent pointers, and xfs_repair 6.10.1 judges) it runs with
FSTOOL_CRASH_PPTR=1 (some minutes)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fstool
from fixtures import crashwork, images, killpoints, log_fixtures, modern

UUID = "2b1f0c5e-4a3d-4e8f-9b6a-7c5d4e3f2a1b"
needs_loop = pytest.mark.skipif(not images.loop_available(),
                                reason="needs root, xfsprogs and a kernel loop mount of XFS")
needs_xfsprogs = pytest.mark.skipif(not images.xfsprogs_available(),
                                    reason="xfsprogs (xfs_repair) not installed")


def _mkfs(img: Path, size="64m", args=()) -> None:
    subprocess.run([sys.executable, "-m", "fstool", "mkfs", "-q", str(img), "--size", size,
                    "--uuid", UUID, "--timestamp", "1700000000", *args], check=True)


# the default geometry, and one where inodes are allocated a whole 64 KiB
# block at a time in aligned chunks (sparse=0) and log records are padded
# to a 64 KiB stripe unit with an extended header (4 KiB log sectors)
GEOMETRIES = {"default": ("64m", ()),
              "64k-sect4k-sparse0": ("1g", ("-b", "size=65536", "-s", "size=4096",
                                              "-i", "sparse=0")),
              # parent pointers (and exchange-range): every name change of
              # the steps changes them in the same transaction, and the
              # states compared include them (a long run: FSTOOL_CRASH_PPTR=1)
              "pptr": ("64m", ("-n", "parent=1"))}
SLOW = {"pptr": "FSTOOL_CRASH_PPTR"}


def _run_work(img: Path, work: Path, env=None, states=None,
              marks=None) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "fixtures.crashwork", str(img), str(work)]
    if states:
        args += ["--states", str(states)]
    if marks:
        args += ["--marks", str(marks)]
    return subprocess.run(args, capture_output=True, text=True,
                          env={**os.environ, **(env or {})},
                          cwd=Path(__file__).resolve().parent.parent)


def _repair(img: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["xfs_repair", "-n", "-f", str(img)], capture_output=True, text=True)


@needs_loop
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_kill_after_every_write(tmp_path, geometry):
    if geometry in SLOW and not os.environ.get(SLOW[geometry]):
        pytest.skip(f"the {geometry} geometry takes minutes: set {SLOW[geometry]}=1")
    base = tmp_path / "base.img"
    size, args = GEOMETRIES[geometry]
    _mkfs(base, size, args)
    ref = tmp_path / "ref.img"
    shutil.copy(base, ref)
    r = _run_work(ref, tmp_path, states=tmp_path / "states.json", marks=tmp_path / "marks.json")
    assert r.returncode == 0, r.stderr
    total = int(r.stdout.split()[-1])
    states = json.loads((tmp_path / "states.json").read_text())
    marks = json.loads((tmp_path / "marks.json").read_text())
    assert total > 50 and len(states) == len(crashwork.steps(tmp_path)) + 1
    seen = []
    img = tmp_path / "crash.img"
    for n in killpoints.points(total, marks, seed=geometry):
        subprocess.run(["cp", "--sparse=always", str(base), str(img)], check=True)
        r = _run_work(img, tmp_path, env={"FSTOOL_FAULT_AFTER_WRITES": str(n)})
        assert r.returncode == -9, f"write {n}: not killed ({r.returncode}): {r.stderr}"
        with images.Mounted(img, nouuid=True):     # the kernel replays fstool's log
            pass
        problems = modern.repair_problems(img)
        assert not problems, f"killed after write {n}: " + "\n".join(problems)
        state = crashwork.image_state(img)
        assert state in states, f"killed after write {n}: the image matches no step"
        k = states.index(state)
        assert not seen or k >= seen[-1], f"write {n}: went back from step {seen[-1]} to {k}"
        seen.append(k)
    # every step's state was reached by some prefix, the last one by all writes
    assert seen[-1] == len(states) - 1 or seen[-1] == len(states) - 2
    assert set(range(1, len(states) - 1)) <= set(seen)


@needs_xfsprogs
def test_abort_leaves_disk_and_caches_unchanged(tmp_path):
    from fstool.errors import InvalidArgument
    from fstool.io import verify as V
    from fstool.ns.writer import Writer
    img = tmp_path / "a.img"
    _mkfs(img)
    before = img.read_bytes()
    ss = 512
    with Writer(img, timestamp_ns=0) as w:
        agf_daddr = ss // 512
        cached = bytes(w.fs.read_meta(agf_daddr, ss, V.AGF, agno=0, block=0))
        with pytest.raises(InvalidArgument):
            with w.transaction():
                buf = w.tx.read_buf(agf_daddr, ss, V.AGF, agno=0, block=0)
                buf.data[100:104] = b"\xde\xad\xbe\xef"
                # the normal read path sees the change inside the transaction
                assert w.fs.read_meta(agf_daddr, ss, V.AGF, agno=0, block=0)[100:104] == \
                    b"\xde\xad\xbe\xef"
                # so does a fresh decode of the AG header
                new = w.tx.get_buf(8 * 200, 4096, V.DIR3_DATA_ANY)
                new.data[:4] = b"XDD3"
                raise InvalidArgument("give up")
        assert bytes(w.fs.read_meta(agf_daddr, ss, V.AGF, agno=0, block=0)) == cached
        assert w.fs.cache.get((8 * 200, 4096)) is None
        assert not w.journal.dirty and not w.journal.new
    assert img.read_bytes() == before


@needs_xfsprogs
def test_same_input_same_bytes_log_included(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    imgs = []
    for k in range(2):
        img = tmp_path / f"r{k}.img"
        _mkfs(img)
        r = _run_work(img, work)
        assert r.returncode == 0, r.stderr
        imgs.append(img)
    assert imgs[0].read_bytes() == imgs[1].read_bytes()
    rep = subprocess.run(["xfs_logprint", "-t", str(imgs[0])], capture_output=True, text=True)
    assert "CLEAN" in rep.stdout


def _modes(img: Path) -> dict:
    import fstool
    with fstool.open_image(img) as fs:
        return {e.name.decode(): fs.inode(e.ino).mode & 0o7777 for e in fs.listdir("/w")}


@needs_loop
def test_log_wraps_and_recovers(tmp_path):
    """A small log (10 MiB) gone round three times by many checkpoints: the
    clean result reads back; killed late in the run, the kernel replays a
    wrapped log to exactly the state after some round."""
    base = tmp_path / "base.img"
    subprocess.run([sys.executable, "-m", "fstool", "mkfs", "-q", str(base), "--size", "64m",
                    "-b", "size=1024", "--uuid", UUID, "--timestamp", "1700000000"], check=True)
    img = tmp_path / "w.img"
    shutil.copy(base, img)
    args = [sys.executable, "-m", "fixtures.crashwork", str(img), str(tmp_path), "--wrap"]
    cwd = Path(__file__).resolve().parent.parent
    r = subprocess.run(args, capture_output=True, text=True, cwd=cwd)
    assert r.returncode == 0, r.stderr
    laps, total = map(int, r.stdout.split())
    assert laps >= 2
    lp = subprocess.run(["xfs_logprint", "-t", str(img)], capture_output=True, text=True)
    assert lp.returncode == 0 and "CLEAN" in lp.stdout
    assert _repair(img).returncode == 0
    assert _modes(img) == crashwork.wrap_expected(crashwork.WRAP_ROUNDS)
    rounds = []
    for frac in (0.55, 0.8, 0.97):
        n = int(total * frac)
        shutil.copy(base, img)
        r = subprocess.run(args, capture_output=True, text=True, cwd=cwd,
                           env={**os.environ, "FSTOOL_FAULT_AFTER_WRITES": str(n)})
        assert r.returncode == -9
        lp = subprocess.run(["xfs_logprint", "-t", str(img)], capture_output=True, text=True)
        assert lp.returncode == 0 and "DIRTY" in lp.stdout, lp.stdout[-500:]
        # xfs_logprint and fstool log print see the same records and
        # transactions in the log fstool left dirty
        live = log_fixtures.logprint_counts(img)
        with fstool.open_image(img) as fs:
            assert fs.log.dirty
            assert sum(1 for _ in fs.log.records()) == live["records"] > 0
            assert sum(1 for _ in fs.log.transactions()) == live["transactions"] > 0
        # fstool's replay of it gives what the kernel's gives
        mine = tmp_path / "mine.img"
        shutil.copy(img, mine)
        rr = subprocess.run([sys.executable, "-m", "fstool", "log", "replay", str(mine)],
                            capture_output=True, text=True, cwd=cwd)
        assert rr.returncode == 0, rr.stderr
        with images.Mounted(img, nouuid=True):
            pass
        assert _repair(img).returncode == 0, f"killed after write {n}"
        modes = _modes(img)
        assert _modes(mine) == modes
        assert _repair(mine).returncode == 0, f"fstool replay, killed after write {n}"
        k = next((k for k in range(crashwork.WRAP_ROUNDS + 1)
                  if crashwork.wrap_expected(k) == modes), None)
        assert k is not None, f"killed after write {n}: modes match no round"
        rounds.append(k)
    assert rounds == sorted(rounds) and rounds[-1] > crashwork.WRAP_ROUNDS // 2
