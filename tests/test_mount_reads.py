"""The mount's reads: the kernel's read-ahead of the mount raised once INIT
is answered (fstool.mount.run.set_read_ahead)."""
from __future__ import annotations

import os

import pytest

from fixtures.fusemount import FuseMounted, fstool_image, fuse_skip_reason
from fstool.io.lock import mount_device
from fstool.mount import run



def _skip_without_fuse() -> None:
    why = fuse_skip_reason()
    if why:
        pytest.skip(f"needs FUSE: {why}")


def test_the_mounts_read_ahead_is_raised(tmp_path):
    """Once mounted (INIT answered), the kernel's read-ahead of the mount's
    files is READ_AHEAD_KB (FUSE's own is 128 KiB); needs root (sysfs)."""
    _skip_without_fuse()
    if os.geteuid() != 0:
        pytest.skip("needs root (the mount's read_ahead_kb in sysfs)")
    img = fstool_image(tmp_path, "64m")
    m = FuseMounted(img)
    with m as mnt:
        dev = mount_device(os.path.realpath(mnt))
        assert dev is not None
        with open(f"/sys/class/bdi/{dev}/read_ahead_kb") as f:
            assert int(f.read()) == run.READ_AHEAD_KB
    assert m.returncode == 0, m.stderr


def test_mount_device_names_the_mount():
    """mount_device: the device number of a mount point (here /, as
    os.stat says), None where nothing is mounted."""
    st = os.stat("/")
    assert mount_device("/") == f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    assert mount_device("/no/such/mount/point") is None
