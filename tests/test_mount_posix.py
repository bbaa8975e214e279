"""fstool mount against the kernel's XFS: the same POSIX scenarios
(fixtures/posix_ops.py) run in a kernel loop mount and in an fstool mount,
outcome by outcome (errnos, link counts, modes, sizes, contents, listings,
xattrs); then the image fstool wrote is repair-clean and the kernel shows
the same tree in it."""
from __future__ import annotations

import json
import subprocess

import pytest

from fixtures import images, modern
from fixtures.fusemount import (FuseMounted, fstool_image, fuse_skip_reason, repair_clean,
                                run_ops)


def _skip():
    why = fuse_skip_reason()
    if why:
        pytest.skip(f"needs FUSE: {why}")
    if not images.loop_available():
        pytest.skip("needs root, xfsprogs and a kernel loop mount of XFS (the reference)")


def kernel_run(tmp_path, size: str, what: str):
    img = tmp_path / "kernel.img"
    subprocess.run(["truncate", "-s", size, str(img)], check=True)
    # the mkfs.xfs whose defaults fstool mkfs follows (6.10.1: the rmapbt,
    # reflink), where built
    mkfs = modern.tool("mkfs.xfs") if modern.available() else "mkfs.xfs"
    subprocess.run([mkfs, "-q", "-f", str(img)], check=True, capture_output=True)
    with images.Mounted(img) as mnt:
        return run_ops(mnt, what), run_ops(mnt, "tree")


def fstool_run(tmp_path, size: str, what: str, *mount_args):
    img = fstool_image(tmp_path, size)
    m = FuseMounted(img, *mount_args)
    with m as mnt:
        got = run_ops(mnt, what)
        tree = run_ops(mnt, "tree")
    assert m.returncode == 0, m.stderr
    return img, got, tree


def assert_same(kernel: list, fstool: list) -> None:
    kd = dict((k, tuple(map(json.dumps, v))) for k, v in kernel)
    diffs = [f"{step}: kernel {kd.get(step)} fstool {tuple(map(json.dumps, res))}"
             for step, res in fstool if kd.get(step) != tuple(map(json.dumps, res))]
    assert [s for s, _ in kernel] == [s for s, _ in fstool]
    assert not diffs, "\n".join(diffs)


def kernel_tree(img) -> list:
    with images.Mounted(img) as mnt:
        return run_ops(mnt, "tree")


SCENARIOS = {
    # every operation as root: after unmount the kernel also sees the tree
    "main": ("512m", ()),
    # default_permissions: an unprivileged user meets the kernel's EACCES and
    # EPERM (private directories, read-only files, chmod/chown/utimes of
    # others' files, sticky directories, trusted xattrs)
    "user": ("512m", ("-o", "allow_other")),
    # filling the filesystem gives ENOSPC at write(); space comes back
    "enospc": ("320m", ()),
    # fallocate's modes and lseek SEEK_DATA/SEEK_HOLE (the native request
    # loop passes them on; pyfuse3 3.5 cannot)
    "falloc": ("512m", ()),
}


@pytest.mark.parametrize("what", sorted(SCENARIOS))
def test_scenario_matches_the_kernel(tmp_path, what):
    """Results and errnos as the kernel's XFS gives them, the same tree;
    after unmount the image is repair-clean."""
    _skip()
    if what == "falloc":
        pytest.importorskip("fstool_native.fuseloop", reason="the native request loop is "
                            "not built (fallocate and lseek need it)")
    size, mount_args = SCENARIOS[what]
    want, want_tree = kernel_run(tmp_path, size, what)
    img, got, got_tree = fstool_run(tmp_path, size, what, *mount_args)
    assert_same(want, got)
    assert got_tree == want_tree
    repair_clean(img)
    if what == "main":
        assert kernel_tree(img) == want_tree
