"""kill -9 of the mount process in the middle of a workload: the kernel
mounts the image (replaying fstool's log), xfs_repair -n finds nothing,
every file fsync'd before the kill is intact, and fstool's own log replay
gives the tree the kernel's replay gives.  (bench/crash_mount.py runs the
same at many more moments.)"""
from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest

from fixtures import images
from fixtures.fusemount import (FuseMounted, env, fstool_image, fuse_skip_reason, repair_clean,
                                run_ops)
from fixtures.mount_workload import check_journal


def crash_once(tmp_path, seed: int, delay: float) -> dict:
    img = fstool_image(tmp_path, "512m")
    journal = tmp_path / "synced.txt"
    m = FuseMounted(img)
    with m as mnt:
        work = subprocess.Popen([sys.executable, "-m", "fixtures.mount_workload", str(mnt),
                                 str(journal), str(seed)], cwd=images.REPO, env=env(),
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        time.sleep(delay)
        m.kill()
        ops = int(work.communicate(timeout=60)[0] or 0)
    copy = tmp_path / "copy.img"
    shutil.copyfile(img, copy)
    with images.Mounted(img) as mnt:           # the kernel replays fstool's log
        bad = check_journal(str(mnt), str(journal))
        tree = run_ops(mnt, "tree")
    repair_clean(img)
    r = subprocess.run([sys.executable, "-m", "fstool", "log", "replay", str(copy)],
                       capture_output=True, text=True, env=env())
    assert r.returncode == 0, r.stderr
    repair_clean(copy)
    with images.Mounted(copy) as mnt:
        assert run_ops(mnt, "tree") == tree, "fstool log replay and the kernel's differ"
    synced = len(journal.read_text().splitlines()) if journal.exists() else 0
    return {"ops": ops, "bad": bad, "synced": synced}


@pytest.mark.parametrize("seed,delay", [(1, 0.5), (2, 1.5), (3, 3.0)])
def test_kill_9_during_a_workload(tmp_path, seed, delay):
    why = fuse_skip_reason()
    if why:
        pytest.skip(f"needs FUSE: {why}")
    if not images.loop_available():
        pytest.skip("needs root, xfsprogs and a kernel loop mount of XFS (the reference)")
    res = crash_once(tmp_path, seed, delay)
    assert res["ops"] > 0
    if delay >= 1.5:
        assert res["synced"] > 0
    assert not res["bad"], res["bad"]


def test_four_processes_at_once(tmp_path):
    """Four workloads creating, writing, renaming and removing in the same
    directories at once; then a clean unmount: repair-clean, fsync'd files
    intact, and the kernel sees the tree the mount showed."""
    why = fuse_skip_reason()
    if why:
        pytest.skip(f"needs FUSE: {why}")
    if not images.loop_available():
        pytest.skip("needs root, xfsprogs and a kernel loop mount of XFS (the reference)")
    img = fstool_image(tmp_path, "512m")
    m = FuseMounted(img)
    with m as mnt:
        procs = [subprocess.Popen([sys.executable, "-m", "fixtures.mount_workload", str(mnt),
                                   str(tmp_path / f"synced{k}.txt"), str(k), "150"],
                                  cwd=images.REPO, env=env(), stdout=subprocess.PIPE,
                                  text=True) for k in range(4)]
        done = [int(p.communicate(timeout=300)[0]) for p in procs]
        seen = run_ops(mnt, "tree")
        for k in range(4):
            assert not check_journal(str(mnt), str(tmp_path / f"synced{k}.txt"))
    assert m.returncode == 0, m.stderr
    assert done == [150] * 4
    repair_clean(img)
    with images.Mounted(img) as mnt:
        assert run_ops(mnt, "tree") == seen
        for k in range(4):
            assert not check_journal(str(mnt), str(tmp_path / f"synced{k}.txt"))
