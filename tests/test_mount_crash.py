"""kill -9 of the mount process in the middle of a workload: the kernel
mounts the image (replaying fstool's log), xfs_repair -n finds nothing,
every file fsync'd before the kill is intact, and fstool's own log replay
gives the tree the kernel's replay gives.  (bench/crash_mount.py runs the
same at many more moments.)"""
from __future__ import annotations

import subprocess
import sys

import pytest

from fixtures import images
from fixtures.fusemount import (FuseMounted, env, fstool_image, fuse_skip_reason, repair_clean,
                                run_ops)
from fixtures.mount_workload import check_journal, crash_once


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
