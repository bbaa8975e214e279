"""The write proofs of the workloads, on parent-pointer images (``fstool mkfs
-n parent=1``): the seeded namespace workload (directories grown through
every form and emptied again, renames within and across directories,
directory moves, xattrs beside the pointers), fsx through the mount, and
kill -9 of the mount in the middle of its workload (the kernel's recovery
and ``fstool log replay`` of a copy).  Each result: xfs_repair 6.10.1 -n
and ``fstool check`` clean, and the parent pointers the kernel reads
(xfs_io 6.10.1 on a read-only mount, fixtures.pptr.kernel_parents) equal
to what fstool reads from the same image.

Seeded, one or two cases each (tens of seconds in all); bench/crash_mount.py
and bench/fsx_mount.py run many more on either kind of image."""
from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest

import fstool as fsmod
from fixtures import images, modern, pptr
from fixtures import livedirs as L
from fixtures.fusemount import FuseMounted, env, fstool_image, fuse_skip_reason
from fixtures.mount_workload import crash_once

PARENT = ("-n", "parent=1")


@pytest.fixture(autouse=True)
def _needs_oracles():
    if not pptr.available():
        pytest.skip("needs root, a kernel loop mount of XFS and xfsprogs 6.10.1")


def proved(img) -> dict:
    """xfs_repair 6.10.1 -n and fstool check clean; the kernel's pointers
    equal fstool's; returns them."""
    r = modern.repair_n(img)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    r = subprocess.run([sys.executable, "-m", "fstool", "check", str(img)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-1000:]
    theirs = pptr.kernel_parents(img)
    with fsmod.open_image(img) as fs:
        ours = {ino: sorted((p.ino, p.gen, p.name) for p in fs.parents(ino)) for ino in theirs}
        root = fs.sb.rootino
    assert ours == theirs
    assert all(v for ino, v in theirs.items() if ino != root)
    return theirs


def test_seeded_namespace_workload(tmp_path):
    """Every directory form both ways (1 KiB blocks, 4 KiB directory
    blocks), renames that replace, cross-directory moves and xattrs, in
    batched transactions: every pointer follows its entry."""
    img = tmp_path / "w.img"
    subprocess.run([sys.executable, "-m", "fstool", "mkfs", "-q", "-b", "size=1024",
                    "-n", "parent=1,size=4096", "--size", "128m", str(img)], check=True)
    ops = L.workload(21, grow=500, churn=400, dirs=3, shrink_to=(5, 40, 0))
    assert {op[0] for op in ops} >= {"create", "mkdir", "rename", "unlink", "rmdir"}
    grown, shrink = L.split_at_mark(ops)
    L.run_fstool(img, grown, batch=17)
    # the directories at their largest (leaf and node form)
    assert sum(len(v) for v in proved(img).values()) > 500
    L.run_fstool(img, shrink, batch=17)
    proved(img)


def test_fsx_through_the_mount(tmp_path):
    why = fuse_skip_reason()
    if why:
        pytest.skip(f"needs FUSE: {why}")
    img = fstool_image(tmp_path, "64m", *PARENT)
    m = FuseMounted(img)
    with m as mnt:
        r = subprocess.run([sys.executable, "-m", "fixtures.fsx_mount", str(mnt / "f"), "7",
                            "800"], cwd=images.REPO, env=env(), capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        digest = hashlib.sha1((mnt / "f").read_bytes()).hexdigest()
    assert m.returncode == 0, m.stderr
    proved(img)
    with images.Mounted(img, readonly=True, nouuid=True) as k:
        assert hashlib.sha1((k / "f").read_bytes()).hexdigest() == digest


def test_kill_9_of_the_mount_during_a_workload(tmp_path):
    """crash_once (fixtures/mount_workload.py) judges the kernel's recovery
    and fstool's replay of a copy (same tree, xfs_repair clean, fsync'd
    files intact); here both results' pointers are proved too, and agree."""
    why = fuse_skip_reason()
    if why:
        pytest.skip(f"needs FUSE: {why}")
    res = crash_once(tmp_path, 4, 1.5, mkfs_args=PARENT)
    assert res["ops"] > 0 and not res["bad"], res
    kernel = proved(tmp_path / "fstool.img")
    assert proved(tmp_path / "copy.img") == kernel
