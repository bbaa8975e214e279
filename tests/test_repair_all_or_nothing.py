"""Repair is all or nothing: when problems remain that it cannot mend it
writes nothing (the image byte for byte as it was, what the steps before
the plan wrote put back), says so in one line and exits 4; ``--partial``
writes what it can (docs/commands/repair.md, "All or nothing").

The damage: a directory block stamped with an LSN past every cycle a log
can be formatted at (reported, not repaired), with a wrong AGF counter
(repaired) beside it."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fixtures import images
from fixtures.repair_images import copy_image
from test_repair import churn, digest, findings, fstool, xfs_db, xfs_repair_n  # noqa: F401

needs_loop = pytest.mark.skipif(not images.loop_available(),
                                reason="needs root, xfsprogs and a kernel loop mount of XFS")

UNREPAIRABLE = ["path /d3", "dblock 0", "write -d dhdr.hdr.lsn 0x7fffffff00000010"]
REPAIRABLE = ["agf 1", "write -d freeblks 3"]
# inside the 320 MiB churn image's internal log (AG 3, from byte 268.4M)
CUT = 300000000


def damaged(churn, tmp_path: Path, *extra) -> Path:
    img = copy_image(churn["img"], tmp_path / "d.img")
    xfs_db(img, *UNREPAIRABLE, *REPAIRABLE, *extra, expert=True)
    assert xfs_repair_n(img) == 1
    return img


def refused(img: Path, tmp_path: Path, *args) -> str:
    """``fstool repair [args] img`` exits 4 with one line on stderr naming
    LSN_AHEAD and that nothing was written, writes nothing to the image
    (FSTOOL_WRITE_LOG) and leaves no scratch undo file; returns stdout."""
    scratch = tmp_path / "tmpdir"
    scratch.mkdir(exist_ok=True)
    log = tmp_path / "writes.log"
    log.unlink(missing_ok=True)
    r = fstool("repair", *args, img, env={"FSTOOL_WRITE_LOG": str(log), "TMPDIR": str(scratch)})
    assert r.returncode == 4, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "LSN_AHEAD" in lines[0] and "nothing was written" in lines[0], \
        r.stderr
    assert "would change with --partial:" in r.stdout, r.stdout
    assert list(scratch.iterdir()) == []
    return log.read_text() if log.exists() else ""


@needs_loop
def test_unrepairable_writes_nothing_and_partial_writes_the_rest(churn, tmp_path):
    img = damaged(churn, tmp_path)
    before = digest(img)
    assert refused(img, tmp_path) == ""
    assert digest(img) == before
    r = fstool("repair", "-n", img)
    assert r.returncode == 4 and "nothing would be written" in r.stderr, r.stdout + r.stderr
    r = fstool("repair", "--json", img)
    out = json.loads(r.stdout)
    assert r.returncode == 4 and out["refused"] and not out["written"], out
    assert out["changes"] == [] and any("AG 1" in c for c in out["withheld"]), out
    assert [f["code"] for f in out["not_repaired"]] == ["LSN_AHEAD"], out
    assert digest(img) == before
    # --partial: what can be repaired is, the rest is left and said
    r = fstool("repair", "--partial", img)
    assert r.returncode == 4 and "nothing was written" not in r.stderr, r.stdout + r.stderr
    assert digest(img) != before
    assert {f["code"] for f in findings(img)} == {"LSN_AHEAD"}


@needs_loop
def test_restored_primary_is_put_back(churn, tmp_path):
    """The primary superblock's restore, written before the plan, is put
    back; an --undo-file given is finished and gives back the same bytes."""
    img = damaged(churn, tmp_path, "sb 0", "write -d magicnum 0")
    before = digest(img)
    writes = refused(img, tmp_path)
    assert writes.split()[:2] == ["0", "512"] and len(writes.splitlines()) == 2, writes
    assert digest(img) == before
    undo = tmp_path / "r.undo"
    refused(img, tmp_path, "--undo-file", undo)
    assert digest(img) == before
    r = fstool("undo", img, undo)
    assert r.returncode == 0, r.stdout + r.stderr
    assert digest(img) == before


@needs_loop
def test_cut_image_is_cut_back(churn, tmp_path):
    """--extend-truncated on an image cut through its log: the extension
    and the log's format (when the cut log reads dirty) are taken back,
    the file cut back to its size."""
    img = damaged(churn, tmp_path)
    os.truncate(img, CUT)
    before = digest(img)
    refused(img, tmp_path, "--extend-truncated")
    assert img.stat().st_size == CUT and digest(img) == before


@needs_loop
def test_killed_refusal_leaves_image_untouched_or_primary_restored(churn, tmp_path,
                                                                   monkeypatch):
    """Killed after each of its writes (the primary's restore, then putting
    it back), a repair that refuses leaves the image as it was or with the
    primary restored and the rest as it was (the documented window); a
    second repair of that refuses too and writes nothing.  (A killed run
    leaves its scratch undo file behind: TMPDIR is the test's.)"""
    from fixtures.repair_kill import count_writes, repair_killed_at
    (tmp_path / "killed-tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "killed-tmp"))
    img = damaged(churn, tmp_path, "sb 0", "write -d magicnum 0")
    before = digest(img)
    count = count_writes(copy_image(img, tmp_path / "count.img"))
    assert count["exit"] == 4 and count["writes"] == 2, count
    restored = None
    for n in range(1, count["writes"] + 1):
        k = copy_image(img, tmp_path / "k.img")
        r = repair_killed_at(k, n)
        assert r.returncode == -9, f"write {n}: {r.returncode} {r.stderr}"
        if digest(k) == before:
            continue
        restored = digest(k)
        # only the primary changed: the secondaries' copy, the rest as it was
        with open(k, "rb") as a, open(img, "rb") as b:
            a.seek(512)
            b.seek(512)
            assert a.read() == b.read(), f"killed after write {n}"
        refused(k, tmp_path)
        assert digest(k) == restored
    assert restored is not None, "no kill fell between the restore and its undoing"
