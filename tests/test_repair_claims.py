"""What repair drops, judged against xfs_repair: no file (and no xattr)
xfs_repair keeps is lost, and the image is repaired clean.

Generated cases (the kernel writes the files, xfs_db does the damage):

- an extent lengthened (a fuzzed blockcount) over another file's block map
  btree block and the files between: xfs_repair clears the file whose record
  is bad (here it runs into an inode chunk first), never the sound file
  whose bmbt block the bad extent covers;
- a hash key changed in the da-btree node of an attr fork of ~400
  xattrs: xfs_repair corrects the key from the child and keeps them all.

Every clear names the file it costs (``inode N: cleared (...); the file it
costs: /path``)."""
from __future__ import annotations

import os
import re
import functools
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import images, modern
from fixtures.oracles import xfs_db

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not images.loop_available(),
                                reason="needs root, xfsprogs and a kernel loop mount of XFS")

# std: no reflink, no rmapbt; rmap: 1 KiB blocks with the rmapbt (and
# reflink); big: 16 KiB directory blocks and 1 KiB inodes
GEOMETRIES = {"std": ("-m", "reflink=0,rmapbt=0"),
              "rmap": ("-b", "size=1024", "-m", "rmapbt=1"),
              "big": ("-n", "size=16384", "-i", "size=1024")}


def fstool(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fstool", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO, timeout=600)


db = functools.partial(xfs_db, check=True)


def root_entries(img: Path) -> dict:
    """name -> inode of the root directory's entries."""
    out = {}
    for line in db(img, "ls /").splitlines():
        p = line.split()
        if len(p) >= 6 and p[-2] not in (".", ".."):
            out[p[-2]] = int(p[1])
    return out


def repairs() -> list:
    """(name, command) of the xfs_repair versions to judge by."""
    out = [("6.1", ["xfs_repair"])]
    if modern.available():
        out.append(("6.10.1", [modern.tool("xfs_repair")]))
    return out


def repair_n_clean(img: Path) -> None:
    for name, cmd in repairs():
        r = subprocess.run(cmd + ["-n", "-f", str(img)], capture_output=True, text=True)
        assert r.returncode == 0, f"xfs_repair {name} -n: {r.stdout[-1500:]}"


def kept_by_all(base: Path, tmp_path: Path, survey) -> tuple:
    """Repair copies of ``base`` with each xfs_repair and with fstool;
    returns (what each xfs_repair keeps, what fstool keeps, fstool's
    output) by ``survey`` of the repaired image."""
    kept = {}
    for name, cmd in repairs():
        img = tmp_path / f"x{name}.img"
        subprocess.run(["cp", "--sparse=always", base, img], check=True)
        subprocess.run(cmd + ["-f", str(img)], capture_output=True, check=True)
        kept[name] = survey(img)
    img = tmp_path / "fstool.img"
    subprocess.run(["cp", "--sparse=always", base, img], check=True)
    r = fstool("repair", img)
    assert r.returncode == 1, r.stdout + r.stderr
    repair_n_clean(img)
    assert fstool("check", img).returncode == 0
    return kept, survey(img), r.stdout


def lengthened_over_bmbt(img: Path, mkfs_args, healthy_first: bool) -> tuple:
    """An image where one file's extent is lengthened over a sound file's
    (``Y``'s) bmbt block and what lies between; returns (damaged file's
    name, its inode)."""
    assert fstool("mkfs", "-q", img, "--size", "128m", *mkfs_args).returncode == 0
    with images.Mounted(img, nouuid=True) as m:
        if healthy_first:
            (m / "Y").write_bytes(b"")
        for i in range(60):
            (m / f"a{i}").write_bytes(os.urandom(4096))
            os.sync()
        (m / "X").write_bytes(os.urandom(3 * 4096))
        fd = os.open(m / "Y", os.O_WRONLY | os.O_CREAT)
        try:
            for b in range(0, 120, 2):      # one extent per block: a bmbt
                os.pwrite(fd, os.urandom(4096), b * 4096)
                os.fsync(fd)
        finally:
            os.close(fd)
        for i in range(3):
            (m / f"z{i}").write_bytes(os.urandom(3 * 4096))
    names = root_entries(img)
    ptrs = db(img, f"inode {names['Y']}", "print core.format u3.bmbt.ptrs")
    assert "btree" in ptrs, ptrs
    bmbt = int(re.search(r"= (?:1:)?(\d+)", ptrs.split("ptrs")[1]).group(1))
    # the extent that starts nearest below the bmbt block, of another file
    best = None
    for name, ino in names.items():
        if name == "Y":
            continue
        for m in re.finditer(r"startblock (\d+) \((\d+)/(\d+)\) count (\d+)",
                             db(img, f"inode {ino}", "bmap")):
            start = int(m.group(1))
            if start < bmbt and (best is None or start > best[0]):
                best = (start, name, ino)
    assert best is not None
    start, name, ino = best
    db(img, f"inode {ino}", f"write u3.bmx[0].blockcount {bmbt - start + 1}", write=True)
    return name, ino


@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("healthy_first", [True, False], ids=["sound-inode-first",
                                                              "damaged-inode-first"])
def test_extent_lengthened_over_a_bmbt_block(tmp_path, geometry, healthy_first):
    base = tmp_path / "base.img"
    damaged, ino = lengthened_over_bmbt(base, GEOMETRIES[geometry], healthy_first)
    kept, ours, out = kept_by_all(base, tmp_path, lambda img: set(root_entries(img)))
    for name, theirs in kept.items():
        assert theirs <= ours, f"lost against xfs_repair {name}: {sorted(theirs - ours)}"
    # the clear names the file it costs
    if damaged not in ours:
        assert re.search(rf"inode {ino}: cleared .*; the file it costs: /{damaged}\n", out), out


def attr_node_damaged(img: Path, mkfs_args, entry: int, value: str) -> int:
    """A file ``f`` with 400 xattrs (a node-form attr fork) whose da-btree
    node's entry ``entry`` has its hash set to ``value``; returns how many
    entries the node has."""
    assert fstool("mkfs", "-q", img, "--size", "128m", *mkfs_args).returncode == 0
    with images.Mounted(img, nouuid=True) as m:
        (m / "f").write_bytes(b"x")
        for i in range(400):
            os.setxattr(m / "f", f"user.attribute_name_{i:05d}", b"v" * 40)
        (m / "g").write_bytes(b"y")
    ino = root_entries(img)["f"]
    node = db(img, f"inode {ino}", "ablock 0", "print hdr.count hdr.level")
    count = int(re.search(r"hdr.count = (\d+)", node).group(1))
    assert "hdr.level = 1" in node, node
    db(img, f"inode {ino}", "ablock 0", f"write btree[{min(entry, count - 1)}].hashval {value}",
       write=True)
    return count


def xattr_count(img: Path) -> int:
    with images.Mounted(img, readonly=True, nouuid=True) as m:
        return len(os.listxattr(m / "f"))


@pytest.mark.parametrize("geometry", ["std", "rmap"])
@pytest.mark.parametrize("entry,value", [(0, "0"), (6, "0xffffffff"), (6, "0"),
                                         (99, "0xffffffff"), (99, "0")])
def test_attr_node_key_corrected_not_dropped(tmp_path, geometry, entry, value):
    base = tmp_path / "base.img"
    attr_node_damaged(base, GEOMETRIES[geometry], entry, value)
    kept, ours, out = kept_by_all(base, tmp_path, xattr_count)
    for name, theirs in kept.items():
        assert ours >= theirs, f"xattrs lost against xfs_repair {name}: {ours} < {theirs}"
    if ours == 0:
        assert re.search(r"fixed: attr fork dropped.*; the file whose xattrs it costs: /f\n", out), \
            out
