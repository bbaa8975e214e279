"""fstool sparsify gives an image's free space back to the host: after
files are removed the image file's allocated size drops to what the
filesystem uses, the image stays repair-clean and reads the same; --zero
writes zeros instead; busy images and dirty logs are refused."""
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fstool
from fixtures import images

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(shutil.which("xfs_repair") is None,
                                reason="xfsprogs (xfs_repair) not installed")


def run(*args):
    return subprocess.run([sys.executable, "-m", "fstool", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def tree_digest(img) -> dict:
    out = {}
    with fstool.open_image(img) as fs:
        for path, node in fs.walk("/"):
            out[path] = hashlib.sha256(fs.read(path)).hexdigest() if node.is_reg else \
                node.type_name
    return out


@pytest.fixture
def emptied(tmp_path):
    """An image that held 96 MiB more than it holds now: written, then the
    big files removed (the host still holds their blocks)."""
    img = tmp_path / "s.img"
    src = tmp_path / "src"
    (src / "keep").mkdir(parents=True)
    for i in range(4):
        (src / f"big{i}").write_bytes(os.urandom(24 << 20))
    (src / "keep" / "small").write_bytes(os.urandom(300_000))
    assert run("mkfs", "-q", "--size", "512m", img, "--populate", src).returncode == 0
    assert run("rm", img, "/big0", "/big1", "/big2", "/big3").returncode == 0
    assert os.stat(img).st_blocks * 512 > 96 << 20
    return img


def used_bytes(img) -> int:
    info = json.loads(run("info", "--json", img).stdout)
    return (info["blocks"] - info["fdblocks"]) * info["bsize"]


def test_sparsify_gives_free_space_back(emptied):
    before = tree_digest(emptied)
    r = run("sparsify", "--json", emptied)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    after = os.stat(emptied).st_blocks * 512
    assert rep["allocated_after"] == after and rep["allocated_before"] > 96 << 20
    # what the host keeps: no more than what the filesystem uses (its
    # metadata, the data still there, the log as far as it was written), and
    # at least the data still there
    assert 300_000 <= after <= used_bytes(emptied) * 1.01, (after, used_bytes(emptied))
    assert after < 8 << 20
    assert subprocess.run(["xfs_repair", "-n", "-f", str(emptied)],
                          capture_output=True).returncode == 0
    assert tree_digest(emptied) == before
    # again: nothing left to punch, nothing changes
    rep2 = json.loads(run("sparsify", "--json", emptied).stdout)
    assert rep2["bytes"] == 0 and rep2["allocated_after"] == after
    if images.loop_available():
        with images.Mounted(emptied, readonly=True, nouuid=True) as mnt:
            assert len((mnt / "keep" / "small").read_bytes()) == 300_000


def test_zero_writes_zeros_over_the_free_blocks(emptied):
    before = os.stat(emptied).st_blocks * 512
    r = run("sparsify", "--zero", "--json", emptied)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["bytes"] >= 96 << 20
    with fstool.open_image(emptied) as fs:
        from fstool.ops.sparsify import free_extents
        exts = list(free_extents(fs))
    with open(emptied, "rb") as f:
        for off, n in exts:
            f.seek(off)
            assert f.read(min(n, 1 << 20)).count(0) == min(n, 1 << 20)
    assert os.stat(emptied).st_blocks * 512 >= before - (1 << 20)      # nothing punched
    assert subprocess.run(["xfs_repair", "-n", "-f", str(emptied)],
                          capture_output=True).returncode == 0


def test_busy_and_dirty_images_are_refused(emptied, tmp_path):
    size = os.stat(emptied).st_blocks
    with open(emptied, "rb+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)          # as another fstool writing it
        r = run("sparsify", emptied)
    assert r.returncode == 7 and "another fstool" in r.stderr, r.stderr
    assert os.stat(emptied).st_blocks == size
    if not images.loop_available():
        pytest.skip("a dirty log needs a kernel loop mount of XFS")
    dirty = tmp_path / "dirty.img"
    assert run("mkfs", "-q", "--size", "512m", dirty).returncode == 0
    images.shut_down_dirty(dirty)
    r = run("sparsify", dirty)
    assert r.returncode == 7 and "log is dirty" in r.stderr, r.stderr
