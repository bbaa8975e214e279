"""fsx-style random reads, writes, truncates, mmap reads, fsyncs and
reopens through the mount against a shadow copy (fixtures/fsx_mount.py); then the
image is repair-clean and the kernel reads the same content.
(bench/fsx_mount.py runs 100,000 operations and more seeds.)"""
from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest

from fixtures import images
from fixtures.fusemount import FuseMounted, env, fstool_image, fuse_skip_reason, kernel_reads


@pytest.mark.parametrize("seed", [1])
def test_fsx_against_a_shadow_copy(tmp_path, seed):
    why = fuse_skip_reason()
    if why:
        pytest.skip(f"needs FUSE: {why}")
    img = fstool_image(tmp_path, "64m")
    m = FuseMounted(img)
    with m as mnt:
        r = subprocess.run([sys.executable, "-m", "fixtures.fsx_mount", str(mnt / "f"), str(seed),
                            "1500"], cwd=images.REPO, env=env(), capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        digest = hashlib.sha1((mnt / "f").read_bytes()).hexdigest()
    assert m.returncode == 0, m.stderr
    seen = kernel_reads(img, ["f"])
    if seen is not None:
        assert hashlib.sha1(seen["f"]).hexdigest() == digest
