"""A repair too large for the log is written in place with an undo file as
its crash guard (fstool.ops.repair: guard_path, recover_interrupted): killed
at any write, the image is repaired, or marked in progress (the kernel
refuses it) with the guard beside it, and the next repair first puts back
what the guard saved (byte for byte the image before that repair) and then
repairs it like the run that was not killed."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import images
from fixtures.repair_images import copy_image
from test_repair import REPO, digest, files_of, findings, fstool, kernel_tree, xfs_repair_n

# a corpus case (small geometry: 1 KiB blocks, a 3.4 MiB log): the image cut
# to a third.  Its repair rewrites more existing metadata than the 64 KiB
# one transaction may log here (FSTOOL_TEST_MAX_TX_BYTES: the repair now
# fits the image's own log, which the in-place path is for when it does not)
CASE = {"geometry": "small", "seed": 1, "n": 114, "kind": "truncate", "size": 58285056}
TX_LIMIT = "65536"


def _in_progress(img: Path) -> int:
    from fstool.format.structs import SB
    with open(img, "rb") as f:
        return f.read(512)[SB.offset("sb_inprogress")]


def _recover(img: Path, undo: Path | None = None) -> None:
    r = subprocess.run([sys.executable, "-c", "import sys; from fstool.ops.repair import "
                        "recover_interrupted as r; print(r(*sys.argv[1:]))", str(img),
                        *([str(undo)] if undo is not None else [])],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0 and r.stdout.strip() not in ("", "None"), r.stdout + r.stderr


@pytest.mark.skipif(not images.loop_available(),
                    reason="needs root, xfsprogs and a kernel loop mount of XFS")
def test_in_place_repair_killed_anywhere(tmp_path, monkeypatch):
    from fixtures import corpus
    from fixtures.repair_kill import count_writes, repair_killed_at
    from fstool.ops.repair import guard_path
    monkeypatch.setenv("FSTOOL_TEST_MAX_TX_BYTES", TX_LIMIT)
    dmg = tmp_path / "dmg.img"
    assert corpus.make_case(dmg, CASE)
    size = 167772160                     # what the superblock describes
    done = copy_image(dmg, tmp_path / "done.img")
    count = count_writes(done, extend_truncated=True)
    assert count["exit"] == 1, count
    assert not Path(guard_path(done)).exists()
    assert _in_progress(done) == 0 and xfs_repair_n(done) == 0 and findings(done) == []
    want = files_of(kernel_tree(done))
    untouched = digest(dmg)              # extended with zeros: the same blocks
    total = count["writes"]
    img = tmp_path / "k.img"
    marked = 0
    for n in sorted({1, 2, 3, total // 3, total // 2, total - 2, total - 1}):
        copy_image(dmg, img)
        r = repair_killed_at(img, n, "--extend-truncated")
        assert r.returncode == -9, f"write {n}: {r.returncode} {r.stderr}"
        assert img.stat().st_size == size
        if _in_progress(img):
            marked += 1
            assert Path(guard_path(img)).exists(), f"killed after write {n}"
            if marked == 1:
                # the kernel refuses an image marked in progress
                with pytest.raises(Exception):
                    with images.Mounted(img, readonly=True, nouuid=True):
                        pass
            kept = copy_image(img, tmp_path / "kept.img")
            Path(guard_path(kept)).write_bytes(Path(guard_path(img)).read_bytes())
            _recover(kept)
            assert digest(kept) == untouched, f"killed after write {n}: not rolled back"
            assert not Path(guard_path(kept)).exists()
        else:
            assert digest(img) in (untouched, digest(done)), f"killed after write {n}"
        r = fstool("repair", "--extend-truncated", img)
        assert r.returncode in (0, 1), r.stdout + r.stderr
        assert _in_progress(img) == 0 and not Path(guard_path(img)).exists()
        assert xfs_repair_n(img) == 0 and findings(img) == [], f"killed after write {n}"
        assert files_of(kernel_tree(img)) == want, f"killed after write {n}"
    assert marked >= 3, f"{marked} kills found the image marked in progress"


def test_no_roll_back_under_another_fstool(tmp_path):
    """An image marked in progress with an incomplete guard beside it, while
    another fstool holds the image (the repair writing it in place): a
    second repair refuses, and puts nothing back under it."""
    import fcntl
    import os

    from fstool.io.device import Device
    from fstool.io.undo import UndoRecorder
    from fstool.ops.repair import _mark_in_progress, guard_path
    img = tmp_path / "a.img"
    r = fstool("mkfs", img, "--size", "300m")
    assert r.returncode == 0, r.stderr
    dev = Device(img, writable=True)
    try:
        rec = UndoRecorder(dev, guard_path(img), [])
        dev.write_hook = rec
        _mark_in_progress(dev, 1)          # saved in the guard, then written
        dev.pwrite(1 << 20, b"\xab" * 4096)
        dev.fsync()
        rec.close()                        # left incomplete, as a kill leaves it
    finally:
        dev.close()
    before = digest(img)
    fd = os.open(img, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        r = fstool("repair", img)
        assert r.returncode == 7 and "another fstool" in r.stderr, r.stdout + r.stderr
        assert digest(img) == before and Path(guard_path(img)).exists()
    finally:
        os.close(fd)
    # once the other is gone, the next repair rolls the interrupted one back
    r = fstool("repair", img)
    assert r.returncode in (0, 1) and "rolled back" in r.stdout, r.stdout + r.stderr
    assert not Path(guard_path(img)).exists()
    assert fstool("check", img).returncode == 0


@pytest.mark.skipif(not images.loop_available(),
                    reason="needs root, xfsprogs and a kernel loop mount of XFS")
def test_in_place_retry_keeps_the_primary_restore_in_the_undo_file(tmp_path, monkeypatch):
    """A primary superblock restored before the plan (its CRC damaged), then a
    repair too large for the log (FSTOOL_TEST_MAX_TX_BYTES), which repair
    writes in place, with the user's --undo-file as its crash guard.  The
    logged attempt closed the undo file that held the old primary, and the
    in-place retry made it anew: undo then gave back the image with the
    primary restored, not the image repair was given.  The retry now goes
    on recording into it: undo gives back the damaged image byte for byte,
    and a run killed while marked in progress rolls back to it too."""
    from fixtures import corpus_base
    from fixtures.repair_kill import count_writes, repair_killed_at
    from fstool.ops.repair import guard_path
    from fstool.format.constants import XFS_SB_CRC_OFF as SB_CRC_OFF
    monkeypatch.setenv("FSTOOL_TEST_MAX_TX_BYTES", "4096")
    dmg = copy_image(corpus_base.base_image("small"), tmp_path / "dmg.img")
    with open(dmg, "r+b") as f:
        f.seek(SB_CRC_OFF)
        crc = f.read(1)
        f.seek(SB_CRC_OFF)
        f.write(bytes([crc[0] ^ 1]))
    damaged = digest(dmg)
    img = copy_image(dmg, tmp_path / "a.img")
    undo = tmp_path / "a.undo"
    r = fstool("repair", "--rebuild", "all", "--undo-file", undo, img)
    assert r.returncode == 1 and "primary superblock: rewritten" in r.stdout, \
        r.stdout + r.stderr
    assert not Path(guard_path(img)).exists() and _in_progress(img) == 0
    assert xfs_repair_n(img) == 0 and findings(img) == []
    repaired = digest(img)
    r = fstool("undo", img, undo)
    assert r.returncode == 0, r.stderr
    assert digest(img) == damaged
    # killed in the middle of the in-place writes: the next repair rolls
    # the whole run back (the old primary included), then repairs again
    total = count_writes(copy_image(dmg, tmp_path / "count.img"), rebuild=("all",),
                         undo_file=str(tmp_path / "count.undo"))["writes"]
    copy_image(dmg, img)
    r = repair_killed_at(img, total // 2, "--rebuild", "all", "--undo-file", str(undo))
    assert r.returncode == -9 and _in_progress(img) == 1, r.stderr
    _recover(img, undo)
    assert digest(img) == damaged
    r = fstool("repair", "--rebuild", "all", "--undo-file", undo, img)
    assert r.returncode == 1 and digest(img) == repaired, r.stdout + r.stderr

