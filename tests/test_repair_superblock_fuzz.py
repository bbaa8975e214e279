"""Repair never writes where an unverified geometry says (issue #31 item 6),
and never takes an image it does not handle for a damaged one (issue #36
item 2).

Every superblock field is fuzzed (fixtures/sbfuzz.py: one value per field,
drawn from a fixed seed, written with xfs_db) in the primary alone, and in
the primary and AG 1's secondary, on a small kernel-written image whose log
lies in AG 2.  fstool repair must end clean by xfs_repair -n of 6.10.1 and
6.1, write nothing outside what the undamaged geometry names (every write
it makes is logged by fstool.io.device and judged), and keep every file
xfs_repair's own repair of the same image keeps; where it refuses, it
must have written nothing and xfs_repair must fail too.  bench/
bench_repair.py ``superblock`` sweeps every way of drawing a value over
many seeds.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from fixtures import images, modern, sbfuzz
from fixtures.repair_images import copy_image

needs_oracles = pytest.mark.skipif(
    not images.loop_available() or not modern.available(),
    reason="needs root, a kernel loop mount of XFS, xfsprogs 6.1 and " + modern.WHY)

MKFS_ENV = dict(os.environ, TEST_DIR="1", TEST_DEV="1", QA_CHECK_FS="1")


def judged(case: dict, tmp_path: Path) -> None:
    problems = sbfuzz.judge(case, tmp_path)
    assert not problems, f"{sbfuzz.describe(case)}: " + "; ".join(problems)


@needs_oracles
@pytest.mark.parametrize("target", sbfuzz.TARGETS)
@pytest.mark.parametrize("field", [name for name, _code in sbfuzz.FIELDS])
def test_superblock_field_fuzzed(field, target, tmp_path):
    judged(sbfuzz.one_case(field, target), tmp_path)


def good(field: str) -> int:
    return int(sbfuzz.superblock(sbfuzz.base_image())[field], 0)


def findings(img: Path) -> tuple[int, list]:
    r = sbfuzz.fstool("check", "--json", img)
    return r.returncode, [json.loads(ln) for ln in r.stdout.splitlines() if ln.strip()]


@needs_oracles
def test_damaged_logstart_is_outvoted(tmp_path):
    """The issue's image: the primary's sb_logstart points 1000 blocks
    before the log, so that a log formatted there runs over AG 2's
    superblock, AGF and AGI.  Check reports the field the secondaries
    outvote and stops there, as xfs_repair -n does; repair -n writes
    nothing; repair rewrites the primary from the secondaries and writes
    nowhere else than the undamaged geometry names."""
    logstart = good("logstart")
    case = {"field": "logstart", "target": "primary", "mode": "given", "seed": 0,
            "value": str(logstart - 1000)}
    img = copy_image(sbfuzz.base_image(), tmp_path / "l.img")
    sbfuzz.damage(img, case)
    status, found = findings(img)
    assert status == 1
    assert [(f["code"], f["field"], f["expected"], f["found"]) for f in found] == \
        [("SB_PRIMARY", "sb_logstart", logstart, logstart - 1000)], found
    assert sbfuzz.run("xfs_repair", "-n", "-f", img).returncode == 1
    before = sbfuzz.digest(img)
    r = sbfuzz.fstool("repair", "-n", img)
    assert r.returncode == 1 and "primary superblock: rewritten" in r.stdout, r.stdout
    assert sbfuzz.digest(img) == before
    judged(case, tmp_path / "judged")


# a primary alone in saying what the secondaries deny: damage, restored
PRIMARY_ONLY = [
    ("logstart", "0"),                           # an external log
    ("versionnum", str(0xB4B4)),                 # version 4
    ("rblocks", "4096"),                         # a realtime section
    ("features_incompat", str(0x8000000B)),      # an unknown incompatible bit
    ("features_ro_compat", "0"),                 # finobt, reflink, inobtcount lost
    ("features_compat", "1"),                    # an unknown compatible bit
    ("rbmino", "128"),                           # the root directory
    ("rsumino", "131"),                          # a directory
    ("uquotino", "128"),                         # the root directory
    ("qflags", "48"),                            # v4 quota bits the kernel refuses
    ("versionnum", str(0xB4F5)),                 # quotas on, no quota inode
    ("shared_vn", "7"),
    ("dirblklog", "1"),                          # 8 KiB directory blocks
]


@needs_oracles
@pytest.mark.parametrize("field,value", PRIMARY_ONLY,
                         ids=[f"{f}={v}" for f, v in PRIMARY_ONLY])
def test_primary_alone_is_damaged(field, value, tmp_path):
    """What only the primary says is its damage: repaired (exit 1), every
    file of the undamaged image kept (xfs_repair, which takes the primary's
    directory block size, moves them all to lost+found), and judged like a
    fuzzed field."""
    _primary_alone({"field": field, "target": "primary", "mode": "given", "seed": 0,
                    "value": value}, tmp_path)


def _primary_alone(case: dict, tmp_path: Path) -> list:
    """The primary damaged as ``case`` says, checked (its findings
    returned), repaired, and every file kept."""
    img = copy_image(sbfuzz.base_image(), tmp_path / "p.img")
    sbfuzz.damage(img, case)
    status, found = findings(img)
    assert status == 1 and found, found
    r = sbfuzz.fstool("repair", img)
    assert r.returncode == 1, r.stdout + r.stderr
    assert sbfuzz.kernel_files(img) == sbfuzz.kernel_files(sbfuzz.base_image())
    judged(case, tmp_path / "judged")
    return found


@needs_oracles
def test_primary_alone_with_meta_uuid_is_outvoted(tmp_path):
    """META_UUID set in the primary alone (sb_meta_uuid zero): the UUID its
    metadata would carry is not the one the secondaries name, so it is
    outvoted and restored from them, every file kept.  (The bit itself is
    not voted on: a UUID change stopped between the superblocks leaves a
    primary that sets it and names the secondaries' metadata UUID, which
    stands, as it does in xfs_repair.)"""
    found = _primary_alone({"field": "features_incompat", "target": "primary",
                            "mode": "given", "seed": 0,
                            "value": str(good("features_incompat") | 0x4)}, tmp_path)
    assert [(f["code"], f["field"]) for f in found] == [("SB_PRIMARY", "sb_meta_uuid")], found


@needs_oracles
@pytest.mark.parametrize("target", sbfuzz.TARGETS)
def test_needsrepair_is_cleared(target, tmp_path):
    """An image marked as needing repair (an upgrade that did not finish):
    xfs_repair -n finds it corrupt and its repair clears the mark; check
    reports it and repair clears it (the writers refused to open such an
    image, repair too)."""
    incompat = good("features_incompat") | 0x10
    case = {"field": "features_incompat", "target": target, "mode": "given", "seed": 0,
            "value": str(incompat)}
    img = copy_image(sbfuzz.base_image(), tmp_path / "n.img")
    sbfuzz.damage(img, case)
    assert sbfuzz.run("xfs_repair", "-n", "-f", img).returncode == 1
    status, found = findings(img)
    assert status == 1 and [f["code"] for f in found] == ["SB_NEEDSREPAIR"], found
    judged(case, tmp_path / "judged")


@needs_oracles
@pytest.mark.parametrize("target", sbfuzz.TARGETS)
@pytest.mark.parametrize("value", ["192", "131"])
def test_root_field_elsewhere(value, target, tmp_path):
    """sb_rootino naming a free inode or another directory, in the primary
    or in it and a secondary (the field is no geometry: the primary's
    stands): the root is where mkfs puts it, as xfs_repair goes on with it,
    and the field is set back.  Repair used to make a new root directory
    in the named inode, move the real one to lost+found, then set the field
    back to the old root: xfs_repair 6.10.1 -n crashed on the result."""
    case = {"field": "rootino", "target": target, "mode": "given", "seed": 0, "value": value}
    img = copy_image(sbfuzz.base_image(), tmp_path / "r.img")
    sbfuzz.damage(img, case)
    r = sbfuzz.fstool("repair", img)
    assert r.returncode == 1 and "sb_rootino set to" in r.stdout, r.stdout + r.stderr
    assert "lost+found" not in r.stdout, r.stdout
    assert sbfuzz.kernel_files(img) == sbfuzz.kernel_files(sbfuzz.base_image())
    judged(case, tmp_path / "judged")


@needs_oracles
def test_two_ags_that_disagree_stop_repair(tmp_path):
    """Two AGs whose superblocks disagree on the log's place: neither can
    be trusted over the other (xfs_repair stops too, without -o
    force_geometry); repair exits 4 and writes nothing, check reports that
    the geometry cannot be verified."""
    img = tmp_path / "two.img"
    subprocess.run(["truncate", "-s", "64m", str(img)], check=True)
    subprocess.run(["mkfs.xfs", "-q", "-f", "-d", "agcount=2", str(img)], check=True,
                   capture_output=True, env=MKFS_ENV)
    start = int(sbfuzz.superblock(img)["logstart"])
    sbfuzz.xfs_db(img, "sb 0", f"write -d logstart {start + 8}", expert=True)
    assert sbfuzz.run("xfs_repair", "-n", "-f", img).returncode == 1
    status, found = findings(img)
    assert status == 1
    assert any(f["code"] == "SB_PRIMARY" and "cannot be verified" in f["message"]
               for f in found), found
    before = sbfuzz.digest(img)
    log = tmp_path / "writes.log"
    for args in (("-n",), ()):
        r = sbfuzz.fstool("repair", *args, img, env={"FSTOOL_WRITE_LOG": str(log)})
        assert r.returncode == 4, r.stdout + r.stderr
        assert "cannot be verified" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not log.exists() and sbfuzz.digest(img) == before


def _mkfs(img: Path, *args: str) -> Path:
    subprocess.run(["truncate", "-s", "64m", str(img)], check=True)
    subprocess.run(["mkfs.xfs", "-q", "-f", *args, str(img)], check=True, capture_output=True,
                   env=MKFS_ENV)
    return img


def _every_sb(img: Path, field: str, value: int) -> Path:
    """``field`` set to ``value`` in every superblock (the primary last)."""
    agcount = int(sbfuzz.superblock(img)["agcount"])
    cmds = []
    for agno in list(range(1, agcount)) + [0]:
        cmds += [f"sb {agno}", f"write -d {field} {value}"]
    sbfuzz.xfs_db(img, *cmds, expert=True)
    return img


def _unsupported(kind: str, tmp: Path) -> Path:
    img = tmp / f"{kind}.img"
    if kind == "v4":
        return _mkfs(img, "-m", "crc=0")
    if kind == "external-log":
        subprocess.run(["truncate", "-s", "16m", str(tmp / "log.dev")], check=True)
        return _mkfs(img, "-l", f"logdev={tmp / 'log.dev'},size=8m")
    if kind == "realtime":
        subprocess.run(["truncate", "-s", "16m", str(tmp / "rt.dev")], check=True)
        return _mkfs(img, "-r", f"rtdev={tmp / 'rt.dev'}")
    _mkfs(img, "-d", "agcount=4")
    f = sbfuzz.superblock(img)
    if kind == "unknown-incompat":
        return _every_sb(img, "features_incompat", int(f["features_incompat"], 0) | 1 << 31)
    if kind == "unknown-ro-compat":
        return _every_sb(img, "features_ro_compat", int(f["features_ro_compat"], 0) | 1 << 31)
    if kind == "unknown-compat":
        return _every_sb(img, "features_compat", 1 << 31)
    assert kind == "exchange"       # known, and handled (below)
    return _every_sb(img, "features_incompat", int(f["features_incompat"], 0) | 1 << 6)


UNSUPPORTED = ["v4", "realtime", "unknown-incompat", "unknown-ro-compat",
               "unknown-compat"]


@pytest.mark.skipif(not modern.available(), reason="needs xfsprogs 6.10.1 (scripts/install.sh)")
def test_exchange_range_image_is_an_image_like_any_other(tmp_path):
    """The exchange-range feature (which parent-pointer images carry) is
    known: repair -n finds a sound image with it clean, as xfs_repair
    6.10.1 does, and repair writes nothing to it."""
    img = _unsupported("exchange", tmp_path)
    assert modern.repair_n(img).returncode == 0
    before = sbfuzz.digest(img)
    for args in (("-n",), ()):
        r = sbfuzz.fstool("repair", *args, img)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert sbfuzz.digest(img) == before


def _refused_untouched(img, tmp_path, status: int, says: str) -> None:
    """repair -n and repair of ``img`` each stop in one line holding
    ``says`` with ``status``, having looked for no secondary and written
    nothing."""
    before = sbfuzz.digest(img)
    log = tmp_path / "writes.log"
    for args in (("-n",), ()):
        r = sbfuzz.fstool("repair", *args, img, env={"FSTOOL_WRITE_LOG": str(log)})
        assert r.returncode == status, r.stdout + r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and says in lines[0] and "Traceback" not in r.stderr, r.stderr
        assert "secondary" not in r.stderr
    assert not log.exists()
    assert sbfuzz.digest(img) == before


@pytest.mark.skipif(not images.xfsprogs_available(), reason="needs xfsprogs (mkfs.xfs, xfs_db)")
@pytest.mark.parametrize("kind", UNSUPPORTED)
def test_unsupported_image_is_refused(kind, tmp_path):
    """An image fstool does not handle is no damaged image: repair (and
    repair -n) says so in one line and exits 5, as every other command
    does, having looked for no secondary and written nothing."""
    img = _unsupported(kind, tmp_path)
    _refused_untouched(img, tmp_path, 5, "not supported")
    # check does not call it damaged either
    assert not any(f["code"] == "SB_PRIMARY" for f in findings(img)[1])


@pytest.mark.skipif(not images.xfsprogs_available(), reason="needs xfsprogs (mkfs.xfs, xfs_db)")
def test_external_log_without_logdev_is_no_damage(tmp_path):
    """A filesystem whose log is external, repaired without --logdev: one
    line saying to pass it, status 2, no secondary looked for and nothing
    written; with --logdev, repair -n finds it clean."""
    img = _unsupported("external-log", tmp_path)
    _refused_untouched(img, tmp_path, 2, "--logdev")
    r = sbfuzz.fstool("repair", "-n", "--logdev", tmp_path / "log.dev", img)
    assert r.returncode == 0, r.stdout + r.stderr


def test_write_log_records_every_write(tmp_path):
    """FSTOOL_WRITE_LOG: one line per write that reaches an image, with its
    offset, length and path (what the fuzz test judges)."""
    img = tmp_path / "w.img"
    log = tmp_path / "writes.log"
    r = sbfuzz.fstool("mkfs", "-q", "--size", "32m", img, env={"FSTOOL_WRITE_LOG": str(log)})
    assert r.returncode == 0, r.stderr
    rows = [ln.split(" ", 2) for ln in log.read_text().splitlines()]
    assert rows and all(p == str(img) and int(n) > 0 for _o, n, p in rows)
    assert any(int(o) == 0 for o, _n, _p in rows)           # the primary superblock
    size = img.stat().st_size
    assert all(int(o) + int(n) <= size for o, n, _p in rows)
