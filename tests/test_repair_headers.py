"""fstool repair on damaged AG headers: an AGF or AGI whose naming fields
(magic, version, sequence number, length, uuid), CRC or whole sector are
wrong is written anew, its trees rebuilt; judged by xfs_repair -n, fstool
check and a kernel mount showing every file as it was."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from fixtures import images
from fixtures.repair_images import copy_image
import test_repair
from test_repair import (digest, findings, fstool, kernel_tree, repair_clean_and_idempotent,
                         xfs_db, xfs_repair_n)

churn = test_repair.churn       # the kernel-written image the repair tests damage

needs_loop = pytest.mark.skipif(not images.loop_available(),
                                reason="needs root, xfsprogs and a kernel loop mount of XFS")


def overwrite_sector(img: Path, agno: int, sector: int, data: bytes) -> None:
    """Write ``data`` over header sector ``sector`` (1 AGF, 2 AGI) of AG ``agno``."""
    geo = xfs_db(img, "sb 0", "print agblocks blocksize sectsize")
    vals = dict(line.split(" = ") for line in geo.splitlines())
    ss = int(vals["sectsize"])
    off = agno * int(vals["agblocks"]) * int(vals["blocksize"]) + sector * ss
    with open(img, "r+b") as f:
        f.seek(off)
        f.write(data[:ss].ljust(ss, b"\0"))


def repair_and_judge(img: Path, tree: list, tmp_path: Path, dry_run=(1,)) -> None:
    """The damaged ``img`` through -n (no byte changed), a repair saved in
    an undo file, then the oracles: xfs_repair -n and check clean, a second
    repair a no-op, the kernel showing ``tree``; undo gives the damage back."""
    damaged = digest(img)
    r = fstool("repair", "-n", img)
    assert r.returncode in dry_run and "would change" in r.stdout, r.stdout + r.stderr
    assert digest(img) == damaged
    undo = tmp_path / "r.undo"
    repair_clean_and_idempotent(img, "--undo-file", undo)
    assert kernel_tree(img) == tree
    r = fstool("undo", img, undo)
    assert r.returncode == 0, r.stdout + r.stderr
    assert digest(img) == damaged


# (name, xfs_db commands or (AG, sector, bytes)): one damage each
HEADER_DAMAGE = [
    ("agf-magic", ["agf 1", "write -d magicnum 0x12345678"]),
    ("agf-version", ["agf 2", "write -d versionnum 7"]),
    ("agf-seqno", ["agf 0", "write -d seqno 9"]),
    ("agf-length", ["agf 3", "write -d length 100"]),
    ("agf-uuid", ["agf 1", "write -d uuid 11111111-2222-3333-4444-555555555555"]),
    ("agf-crc", ["agf 2", "write -c crc 0x1234"]),
    ("agf-roots-zeroed", ["agf 1", "write -d magicnum 0", "write -d bnoroot 0",
                          "write -d cntroot 0"]),
    ("agf-random-sector", (1, 1, random.Random(7).randbytes(512))),
    ("agf-zero-sector", (3, 1, bytes(512))),
    ("agi-magic", ["agi 1", "write -d magicnum 0x12345678"]),
    ("agi-seqno", ["agi 2", "write -d seqno 9"]),
    ("agi-length", ["agi 0", "write -d length 100"]),
    ("agi-crc", ["agi 3", "write -c crc 0x1234"]),
    ("agi-root-lost", ["agi 1", "write -d magicnum 0", "write -d root 0"]),
]


@needs_loop
@pytest.mark.parametrize("name,damage", HEADER_DAMAGE, ids=[d[0] for d in HEADER_DAMAGE])
def test_repair_ag_header(churn, tmp_path, name, damage):
    img = copy_image(churn["img"], tmp_path / "h.img")
    if isinstance(damage, tuple):
        overwrite_sector(img, *damage)
    else:
        xfs_db(img, *damage, expert=True)
    assert xfs_repair_n(img) == 1, "the damage is not damage"
    r = fstool("check", "--json", img)
    assert r.returncode == 1
    assert '"AGF_HEADER"' in r.stdout or '"AGI_HEADER"' in r.stdout
    repair_and_judge(img, churn["tree"], tmp_path)


# (name, xfs_db commands on the primary superblock)
PRIMARY_DAMAGE = [
    ("sb-magic", ["sb 0", "write -d magicnum 0"]),
    ("sb-blocksize", ["sb 0", "write -d blocksize 1234"]),
    ("sb-agcount", ["sb 0", "write -d agcount 9"]),
    ("sb-agblocks", ["sb 0", "write -d agblocks 77"]),
    ("sb-crc", ["sb 0", "write -c crc 0x11"]),
    ("sb-stripe-unit", ["sb 0", "write -d unit 8"]),
    ("sb-rootino", ["sb 0", "write -d rootino 999"]),
    ("sb-rbmino", ["sb 0", "write -d rbmino 5000"]),
]


@needs_loop
@pytest.mark.parametrize("name,cmds", PRIMARY_DAMAGE, ids=[d[0] for d in PRIMARY_DAMAGE])
def test_repair_primary_superblock(churn, tmp_path, name, cmds):
    """A primary superblock that cannot be trusted is restored from the
    secondaries (its root and realtime inode fields set where mkfs puts
    them); undo gives the damaged image back."""
    img = copy_image(churn["img"], tmp_path / "p.img")
    xfs_db(img, *cmds, expert=True)
    assert xfs_repair_n(img) == 1, "the damage is not damage"
    # -n cannot tell what the restore will leave (the rest is checked after
    # it): it may say problems would remain
    repair_and_judge(img, churn["tree"], tmp_path, dry_run=(1, 4))


def test_repair_without_any_good_superblock(tmp_path):
    """No valid superblock anywhere (every copy's magic gone), and a file
    that is no filesystem at all: a one-line error, exit 4, nothing written."""
    img = tmp_path / "n.img"
    r = fstool("mkfs", "-q", "--size", "32m", img)
    assert r.returncode == 0, r.stderr
    geo = xfs_db(img, "sb 0", "print agblocks agcount blocksize")
    vals = dict(line.split(" = ") for line in geo.splitlines())
    agsize = int(vals["agblocks"]) * int(vals["blocksize"])
    with open(img, "r+b") as f:
        for agno in range(int(vals["agcount"])):
            f.seek(agno * agsize)
            f.write(b"\0\0\0\0")
    other = tmp_path / "random.img"
    other.write_bytes(random.Random(3).randbytes(1 << 20))
    for path in (img, other):
        before = digest(path)
        r = fstool("repair", path)
        assert r.returncode == 4, r.stdout + r.stderr
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "superblock" in r.stderr
        assert digest(path) == before


# (name, xfs_db commands): metadata stamped with an LSN the log has not reached
LSN_DAMAGE = [
    ("agf-lsn", ["agf 1", "write -d lsn 0x0000100000000010"]),
    ("bnobt-block-lsn", ["agf 2", "addr bnoroot", "write -d lsn 0x0000200000000010"]),
    ("agi-lsn-past-every-cycle", ["agi 3", "write -d lsn 0x7fffffff00000010"]),
    ("dir-block-lsn", ["path /d3", "dblock 0", "write -d dhdr.hdr.lsn 0x0000300000000010"]),
]


@needs_loop
@pytest.mark.parametrize("name,cmds", LSN_DAMAGE, ids=[d[0] for d in LSN_DAMAGE])
def test_repair_lsn_ahead(churn, tmp_path, name, cmds):
    """The log is formatted anew past the highest LSN (an LSN no cycle can
    pass is rewritten with its AG); the kernel mounts the result and undo
    gives the damaged image back."""
    img = copy_image(churn["img"], tmp_path / "l.img")
    xfs_db(img, *cmds, expert=True)
    assert xfs_repair_n(img) == 1, "the damage is not damage"
    r = fstool("check", "--json", img)
    assert r.returncode == 1 and '"LSN_AHEAD"' in r.stdout
    repair_and_judge(img, churn["tree"], tmp_path)


@needs_loop
@pytest.mark.parametrize("agno", [0, 2])
def test_superblock_lsn_is_not_looked_at(churn, tmp_path, agno):
    """xfs_repair -n does not count a superblock's sb_lsn (primary or
    secondary) among the metadata LSNs; nor does check's status.  The
    primary's is a warning (the kernel refuses to mount a superblock
    stamped ahead of the log), which repair mends: the kernel mounts the
    result."""
    img = copy_image(churn["img"], tmp_path / "s.img")
    xfs_db(img, f"sb {agno}", "write -d lsn 0x0000100000000010", expert=True)
    assert xfs_repair_n(img) == 0
    assert fstool("check", img).returncode == 0
    codes = [f["code"] for f in findings(img)]
    assert codes == (["SB_LSN_AHEAD"] if agno == 0 else []), codes
    if agno == 0:
        r = fstool("repair", img)
        assert r.returncode == 1, r.stdout + r.stderr
        assert xfs_repair_n(img) == 0 and findings(img) == []
        with images.Mounted(img, readonly=True, nouuid=True):
            pass
