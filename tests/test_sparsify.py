"""fstool sparsify: the image file's free space given back to the host.

After a populate and an rm --no-punch, the host still stores the deleted data; after
sparsify it stores what the filesystem uses (within 1%), the image passes
xfs_repair -n, and the files kept read back unchanged.  --zero leaves every
free extent reading as zeros.  Busy images, dirty logs and damaged
free-space btrees are refused with nothing written.  A sparsify killed
after any of its writes (fixtures/killpoints.py's sample; every write with
FSTOOL_EVERY_WRITE=1) leaves an image xfs_repair -n finds clean with every
file as it was, and a second run finishes the job.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest
from fixtures import images, killpoints
from fixtures.fusemount import FuseMounted, fuse_skip_reason, leave_log_dirty
from fixtures.oracles import fstool, repair_clean

MiB = 1 << 20


def _tree(root):
    rnd = random.Random(5)
    (root / "d").mkdir(parents=True)
    for name, size in (("big1", 40 * MiB), ("d/big2", 12 * MiB), ("d/mid", 300_000),
                       ("small", 4095), ("edge", 4096)):
        (root / name).write_bytes(rnd.randbytes(size))
    os.symlink("d/mid", root / "link")


def _populated(tmp_path, size="256m"):
    src = tmp_path / "src"
    _tree(src)
    img = tmp_path / "s.img"
    fstool("mkfs", "-q", img, "--size", size)
    fstool("populate", img, src)
    return img, src


def _allocated(path) -> int:
    return os.stat(path).st_blocks * 512


def test_sparsify_gives_the_free_space_back(tmp_path):
    img, src = _populated(tmp_path)
    fstool("rm", "--no-punch", img, "/big1")
    before = _allocated(img)
    r = json.loads(fstool("sparsify", "--json", img).stdout)
    after = _allocated(img)
    assert r["written"] and r["ranges"] > 0 and r["host_before"] == before
    assert r["host_after"] == after
    # the deleted 40 MiB went back to the host; what is left is what the
    # filesystem uses (the log's unwritten part may be holes already)
    assert before - after >= 40 * MiB
    assert after <= r["used_bytes"] * 1.01
    assert after >= 12 * MiB + 300_000
    repair_clean(img)
    out = tmp_path / "out"
    fstool("get", img, "/", out)
    for name in ("d/big2", "d/mid", "small", "edge"):
        assert (out / name).read_bytes() == (src / name).read_bytes(), name
    # nothing left to give back: a second run changes no byte the host holds
    again = json.loads(fstool("sparsify", "--json", img).stdout)
    assert again["host_after"] == after
    if images.loop_available():
        # the kernel reads the sparsified image as fstool does, writes to it
        # and leaves it clean
        with images.Mounted(img, nouuid=True) as mnt:
            for name in ("d/big2", "d/mid", "small", "edge"):
                assert (mnt / name).read_bytes() == (src / name).read_bytes(), name
            assert os.readlink(mnt / "link") == "d/mid"
            (mnt / "after").write_bytes(b"k" * 70_000)
        repair_clean(img)


def test_sparsify_zero_writes_zeros_over_free_space(tmp_path):
    img, _src = _populated(tmp_path, "128m")
    fstool("rm", "--no-punch", img, "/big1")
    ranges = json.loads(fstool("sparsify", "-n", "--json", img).stdout)
    assert ranges["ranges"] > 0 and not ranges["written"]
    fstool("sparsify", "--zero", img)
    code = ("import sys\n"
            "from fstool.fs.filesystem import Filesystem\n"
            "from fstool.ops.sparsify import free_ranges\n"
            "fs = Filesystem(sys.argv[1])\n"
            "bad = [o for o, n in free_ranges(fs) if fs.dev.pread(o, n).count(0) != n]\n"
            "print(len(bad))\n")
    r = subprocess.run([sys.executable, "-c", code, str(img)], capture_output=True, text=True,
                       check=True)
    assert r.stdout.strip() == "0"
    repair_clean(img)


def test_dry_run_writes_nothing(tmp_path):
    img, _src = _populated(tmp_path, "128m")
    fstool("rm", "--no-punch", img, "/big1")
    before = img.read_bytes()
    alloc = _allocated(img)
    out = fstool("sparsify", "-n", img).stdout
    assert out.startswith("would punch ")
    assert img.read_bytes() == before and _allocated(img) == alloc


def test_a_dirty_log_is_refused(tmp_path):
    img = tmp_path / "dirty.img"
    fstool("mkfs", "-q", img, "--size", "64m")
    leave_log_dirty(img)
    before = img.read_bytes()
    r = fstool("sparsify", img, check=False)
    assert r.returncode == 7 and "dirty" in r.stderr and len(r.stderr.splitlines()) == 1
    assert img.read_bytes() == before


def test_a_damaged_free_space_btree_is_refused(tmp_path):
    """A bnobt that names blocks in use would lose them: check refuses it."""
    img, _src = _populated(tmp_path, "128m")
    # AG 0's bnobt root (block 1 with 4 KiB blocks and 512-byte sectors):
    # its first record's length made to cover the blocks after it
    code = ("import sys, struct\n"
            "from fstool.fs.filesystem import Filesystem\n"
            "fs = Filesystem(sys.argv[1])\n"
            "agf = fs.agf(0)\n"
            "print(agf['agf_roots'][0] * fs.sb.blocksize, fs.sb.blocksize)\n")
    off, bs = map(int, subprocess.run([sys.executable, "-c", code, str(img)],
                                      capture_output=True, text=True,
                                      check=True).stdout.split())
    with open(img, "r+b") as f:
        f.seek(off + 56 + 4)                    # first record's blockcount
        f.write((1 << 20).to_bytes(4, "big"))
    before = img.read_bytes()
    r = fstool("sparsify", img, check=False)
    assert r.returncode == 7, r.stderr
    assert "check finds" in r.stderr and len(r.stderr.splitlines()) == 1
    assert img.read_bytes() == before


@pytest.mark.skipif(not images.loop_available(), reason="needs root and a kernel loop mount")
def test_a_mounted_image_is_refused(tmp_path):
    img, _src = _populated(tmp_path, "128m")
    with images.Mounted(img, nouuid=True):
        r = fstool("sparsify", img, check=False)
    assert r.returncode == 7 and ("mounted" in r.stderr or "busy" in r.stderr), r.stderr


@pytest.mark.parametrize("mode", ["punch", "zero"])
def test_sparsify_killed_after_any_write(tmp_path, mode):
    """Free space in many pieces (every other small file deleted without a
    punch), sparsify killed with SIGKILL after its Nth write: the image is
    as sound as before and holds the same files, and a rerun completes."""
    src = tmp_path / "src"
    src.mkdir()
    rnd = random.Random(9)
    for i in range(24):
        (src / f"f{i:02}").write_bytes(rnd.randbytes(20_000 + 4096 * i))
    img = tmp_path / "k.img"
    fstool("mkfs", "-q", img, "--size", "64m")
    fstool("populate", img, src)
    fstool("rm", "--no-punch", img, *[f"/f{i:02}" for i in range(0, 24, 2)])
    args = ["sparsify", "--zero", img] if mode == "zero" else ["sparsify", img]
    counted = tmp_path / "writes.log"
    probe = tmp_path / "probe.img"
    subprocess.run(["cp", "--sparse=always", str(img), str(probe)], check=True)
    fstool(*args[:-1], probe, env={"FSTOOL_WRITE_LOG": str(counted)})
    total = len(counted.read_text().splitlines())
    assert total >= 12          # one write per free extent at least
    pts = killpoints.points(total, seed=f"sparsify-{mode}")
    if mode == "zero" and not killpoints.EVERY:
        pts = sorted({pts[0], pts[len(pts) // 2], pts[-1]})    # the punch run covers the rest
    for n in pts:
        work = tmp_path / "w.img"
        subprocess.run(["cp", "--sparse=always", str(img), str(work)], check=True)
        r = fstool(*args[:-1], work, check=False, env={"FSTOOL_FAULT_AFTER_WRITES": str(n)})
        assert r.returncode == -9, (n, r.returncode, r.stderr)
        repair_clean(work)
        out = tmp_path / f"out{n}"
        fstool("get", work, "/", out)
        for i in range(1, 24, 2):
            assert (out / f"f{i:02}").read_bytes() == (src / f"f{i:02}").read_bytes(), (n, i)
        assert not (out / "f00").exists()
        fstool(*args[:-1], work)             # the lock went with the process
    repair_clean(work)


# -- writers punch what they free ---------------------------------------------------------

def test_rm_punches_the_blocks_it_frees(tmp_path):
    img, src = _populated(tmp_path)
    before = _allocated(img)
    fstool("rm", img, "/big1")
    after_rm = _allocated(img)
    # (less what the rm's log records newly take)
    assert before - after_rm >= 40 * MiB - 256 * 1024
    fstool("rm", "--no-punch", img, "/d/big2")
    assert _allocated(img) >= after_rm - 64 * 1024          # kept, as asked
    repair_clean(img)
    out = tmp_path / "out"
    fstool("get", img, "/", out)
    assert (out / "d/mid").read_bytes() == (src / "d/mid").read_bytes()
    assert not (out / "big1").exists() and not (out / "d/big2").exists()


def test_the_mount_punches_on_free_with_discard(tmp_path):
    why = fuse_skip_reason()
    if why:
        pytest.skip(f"needs FUSE: {why}")
    img, src = _populated(tmp_path)
    results = {}
    for opts in ((), ("-o", "discard")):
        work = tmp_path / f"m{len(opts)}.img"
        subprocess.run(["cp", "--sparse=always", str(img), str(work)], check=True)
        before = _allocated(work)
        with FuseMounted(work, *opts) as mnt:
            os.remove(mnt / "big1")
            os.sync()
        results[opts] = before - _allocated(work)
        repair_clean(work)
    assert results[()] < 1 * MiB                 # without -o discard the host keeps it
    assert results[("-o", "discard")] >= 40 * MiB - 256 * 1024
