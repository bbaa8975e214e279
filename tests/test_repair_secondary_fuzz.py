"""Every field of a secondary superblock, checked as xfs_repair checks it
and repaired from the primary (issue #37 item 2).

Each field xfs_db prints for ``sb 2`` is fuzzed in AG 2's secondary alone
(xfs_db ``fuzz -d``: the CRC made again, so the field itself is what is
wrong), one way per field, drawn in turn from a fixed list.  fstool check
must give xfs_repair -n's verdict (6.1 and 6.10.1: damage or none), and
fstool repair must leave an image both call clean, its primary untouched.
The suite runs the feature and geometry words and every eighth field;
FSTOOL_EVERY_FIELD=1 runs every field (about 9 minutes).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import images, modern
from fixtures.oracles import xfs_db

REPO = Path(__file__).resolve().parent.parent
AGNO = 2
VERBS = ("firstbit", "lastbit", "middlebit", "ones", "zeroes", "add", "sub")
pytestmark = pytest.mark.skipif(not images.xfsprogs_available(),
                                reason="xfsprogs (xfs_repair, xfs_db) not installed")


def fstool(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fstool", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO, timeout=300)


db = xfs_db


def repairs_n(img: Path) -> dict:
    out = {"6.1": subprocess.run(["xfs_repair", "-n", "-f", str(img)],
                                 capture_output=True, text=True)}
    if modern.available():
        out["6.10.1"] = modern.repair_n(img)
    return out


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    img = tmp_path_factory.mktemp("secondary") / "base.img"
    assert fstool("mkfs", "-q", img, "--size", "128m").returncode == 0
    src = img.parent / "src"
    src.mkdir()
    for i in range(20):
        (src / f"f{i}").write_bytes(bytes([i]) * 5000)
    assert fstool("populate", img, src).returncode == 0
    return img


def fields() -> list:
    """The fields of the secondary, with the way each is fuzzed."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        img = Path(d) / "f.img"
        if fstool("mkfs", "-q", img, "--size", "128m").returncode:
            return []
        names = [line.split(" = ")[0] for line in db(img, f"sb {AGNO}", "print").splitlines()
                 if " = " in line]
    every = [(f, VERBS[i % len(VERBS)]) for i, f in enumerate(n for n in names if n != "crc")]
    if os.environ.get("FSTOOL_EVERY_FIELD") == "1":
        return every
    # the suite's share: the fields a repair once got wrong, the geometry
    # and feature words, and every eighth field besides (each field takes
    # three xfs_repair runs; FSTOOL_EVERY_FIELD=1 runs them all)
    keep = {"features_log_incompat", "features2", "bad_features2", "features_incompat",
            "features_ro_compat", "features_compat", "dblocks", "agcount", "agblocks",
            "logstart", "rootino", "uuid", "meta_uuid"}
    return [fv for i, fv in enumerate(every) if fv[0] in keep or i % 8 == 0]


@pytest.mark.parametrize("field,first", fields() if images.xfsprogs_available() else [])
def test_secondary_field_fuzzed(base, tmp_path, field, first):
    img = tmp_path / "s.img"
    before = db(base, f"sb {AGNO}", f"print {field}")
    primary = db(base, "sb 0", "print")
    # the first way (from the field's own) that changes the field
    for verb in VERBS[VERBS.index(first):] + VERBS[:VERBS.index(first)]:
        subprocess.run(["cp", "--sparse=always", base, img], check=True)
        db(img, f"sb {AGNO}", f"fuzz -d {field} {verb}", write=True)
        after = db(img, f"sb {AGNO}", f"print {field}")
        if after != before:
            break
    assert after != before, f"no fuzz changes {field}"
    theirs = {name: r.returncode for name, r in repairs_n(img).items()}
    ours = fstool("check", img)
    for name, rc in theirs.items():
        assert (rc != 0) == (ours.returncode == 1), \
            f"{after.strip()}: xfs_repair {name} -n exits {rc}, fstool check " \
            f"{ours.returncode}: {ours.stdout[-800:]}"
    # what xfs_repair's own repair leaves in the field
    xr = tmp_path / "x.img"
    subprocess.run(["cp", "--sparse=always", img, xr], check=True)
    subprocess.run(["xfs_repair", "-f", str(xr)], capture_output=True)
    r = fstool("repair", img)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    for name, rr in repairs_n(img).items():
        assert rr.returncode == 0, f"{after.strip()}: after repair xfs_repair {name} -n: " \
                                   f"{rr.stdout[-800:]}"
    assert fstool("check", img).returncode == 0
    # the primary stays as it was; the secondary's field is what
    # xfs_repair makes it (the primary's where it mends it, as it was where
    # it does not look), counters aside (xfs_repair copies the primary's)
    assert db(img, "sb 0", "print") == primary
    if field not in ("icount", "ifree", "fdblocks", "frextents", "lsn", "inprogress"):
        assert db(img, f"sb {AGNO}", f"print {field}") == db(xr, f"sb {AGNO}", f"print {field}")
