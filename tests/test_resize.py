"""fstool resize against the kernel.

Growing:

* the headers fstool writes equal what the kernel writes when xfs_growfs
  grows a loop mount of the same image (every superblock, AGF, AGI, AGFL
  and AG btree root, field by field as xfs_db prints them; LSNs and CRCs
  aside, and the secondaries' summary counters, which the kernel takes
  from its in-core counters net of its in-memory reservations), for
  mkfs.xfs 6.10.1's and 6.1's defaults, 1 KiB blocks without finobt and
  4 KiB sectors without sparse inodes, a last AG extended and AGs added;
* kernel-written trees (the fixture tree, the corpus's rmapbt/reflink
  image) grown: both xfs_repair versions clean, the kernel mounts the same
  tree, writes into the new AGs and unmounts clean;
* killed after every write, a grow leaves the old or the new geometry
  with the whole tree once the kernel has replayed the log, and resize run
  again finishes it (xfs_repair -n clean);
* --undo-file gives the image back byte for byte.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fixtures import corpus_base, images, modern
from fixtures.oracles import fstool, repair_clean
from fixtures.tree import comparable, tree_manifest, xattr_values

MiB = 1 << 20
needs_loop = pytest.mark.skipif(not images.loop_available(),
                                reason="needs root, xfsprogs and a kernel loop mount of XFS")
needs_modern = pytest.mark.skipif(not modern.available(), reason=modern.WHY)
needs_growfs = pytest.mark.skipif(shutil.which("xfs_growfs") is None,
                                  reason="xfs_growfs (xfsprogs) not installed")


def _sb(img, *fields) -> list:
    out = subprocess.run(["xfs_db", "-r", "-c", "sb 0", "-c", "p " + " ".join(fields),
                          str(img)], capture_output=True, text=True, check=True).stdout
    return [int(line.split("=")[1]) for line in out.splitlines()]


def headers(img) -> list:
    """Every AG header and AG btree root of ``img`` as xfs_db prints them,
    one (structure, field line) each; LSNs and CRCs left out, and the
    secondary superblocks' summary counters."""
    (agcount,) = _sb(img, "agcount")
    out = []
    db = [modern.tool("xfs_db"), "-r", "-f"]
    for agno in range(agcount):
        cmds = []
        for s in ("sb", "agf", "agi", "agfl"):
            cmds += ["-c", f"{s} {agno}", "-c", "p"]
        text = subprocess.run(db + cmds + [str(img)], capture_output=True, text=True).stdout
        fields = dict(line.split(" = ", 1) for line in text.splitlines() if " = " in line)
        cmds = []
        for hdr, ptr in (("agf", "bnoroot"), ("agf", "cntroot"), ("agi", "root"),
                         ("agi", "free_root"), ("agf", "rmaproot"), ("agf", "refcntroot")):
            if fields.get(ptr, "").strip() not in ("", "0", "null"):   # trees the image has
                cmds += ["-c", f"{hdr} {agno}", "-c", f"addr {ptr}", "-c", "p"]
        text += subprocess.run(db + cmds + [str(img)], capture_output=True, text=True).stdout
        for line in text.splitlines():
            name = line.split(" = ")[0]
            if name in ("lsn", "crc") or (agno and name in ("icount", "ifree", "fdblocks")):
                continue
            out.append((agno, line))
    return out


def kernel_grow(src: Path, dst: Path, size: int) -> None:
    """``src`` copied to ``dst`` and grown to ``size`` bytes by xfs_growfs
    on a loop mount."""
    subprocess.run(["cp", "--sparse=always", str(src), str(dst)], check=True)
    os.truncate(dst, size)
    (bs,) = _sb(src, "blocksize")
    with images.Mounted(dst, nouuid=True) as mnt:
        subprocess.run(["xfs_growfs", "-D", str(size // bs), str(mnt)], check=True,
                       capture_output=True)


GEOMETRIES = {
    "6.10": ("modern", []),
    "6.1": ("system", []),
    "1k-nofinobt": ("modern", ["-b", "size=1024", "-m", "finobt=0"]),
    "sect4k-sparse0": ("modern", ["-s", "size=4096", "-i", "sparse=0"]),
}


@needs_loop
@needs_modern
@needs_growfs
# each geometry once, the two sizes in turn: 310 MiB extends the short
# last AG and adds none, 700 MiB extends it and adds AGs
@pytest.mark.parametrize("geometry,size_mib", [(g, (700, 310)[i % 2])
                                               for i, g in enumerate(GEOMETRIES)])
def test_grow_writes_the_kernels_headers(tmp_path, geometry, size_mib):
    which, args = GEOMETRIES[geometry]
    base = tmp_path / "base.img"
    base.write_bytes(b"")
    os.truncate(base, 300 * MiB)
    mkfs = modern.tool("mkfs.xfs") if which == "modern" else "mkfs.xfs"
    # 80 MiB AGs: the last of the 300 MiB is shorter than the others
    subprocess.run([mkfs, "-q", "-f", "-d", "agsize=80m", *args, str(base)], check=True,
                   capture_output=True)
    ours = tmp_path / "ours.img"
    shutil.copy(base, ours)
    fstool("resize", ours, "--size", f"{size_mib}m")
    theirs = tmp_path / "theirs.img"
    kernel_grow(base, theirs, size_mib * MiB)
    a, b = headers(ours), headers(theirs)
    assert len(a) > 100
    diff = [(x, y) for x, y in zip(a, b) if x != y]
    assert not diff and len(a) == len(b), diff[:10]
    assert ours.stat().st_size == size_mib * MiB
    repair_clean(ours)


def _tree(img: Path) -> tuple:
    with images.Mounted(img, readonly=True, nouuid=True) as mnt:
        return comparable(tree_manifest(mnt)), xattr_values(mnt)


def _kernel_writes(img: Path, count: int = 24) -> None:
    """The kernel creates directories (spread over the AGs by its rotor)
    with a file each, reads them back and unmounts."""
    with images.Mounted(img, nouuid=True) as mnt:
        for i in range(count):
            d = mnt / f"new{i}"
            d.mkdir()
            (d / "data").write_bytes(bytes([i]) * (1 << 20))
        subprocess.run(["sync"], check=True)
        for i in range(count):
            assert (mnt / f"new{i}" / "data").read_bytes() == bytes([i]) * (1 << 20)


def _judge_grown(img: Path, before: tuple, dblocks: int, agcount: int) -> None:
    assert _sb(img, "dblocks", "agcount") == [dblocks, agcount]
    repair_clean(img)
    assert fstool("check", img).returncode == 0
    assert _tree(img) == before
    _kernel_writes(img)
    repair_clean(img)


@needs_loop
def test_grow_kernel_written_tree(tmp_path):
    src = images.kernel_image("small")
    img = tmp_path / "k.img"
    subprocess.run(["cp", "--sparse=always", str(src), str(img)], check=True)
    before = _tree(img)
    dblocks0, agcount0, agblocks = _sb(img, "dblocks", "agcount", "agblocks")
    # past the last AG's end: that AG extended and three more added
    size = (dblocks0 + 3 * agblocks + 5000) * 4096
    fstool("resize", img, "--size", size)
    _judge_grown(img, before, dblocks0 + 3 * agblocks + 5000, agcount0 + 4)


@needs_loop
@needs_modern
def test_grow_rmapbt_reflink_image(tmp_path):
    src = corpus_base.base_image("rmap")
    img = tmp_path / "r.img"
    subprocess.run(["cp", "--sparse=always", str(src), str(img)], check=True)
    before = _tree(img)
    dblocks0, agcount0 = _sb(img, "dblocks", "agcount")
    fstool("resize", img, "--size", f"{dblocks0 * 4096 + 300 * MiB}")
    (dblocks,) = _sb(img, "dblocks")
    assert dblocks > dblocks0
    _judge_grown(img, before, dblocks, _sb(img, "agcount")[0])
    from fixtures import rmapcheck
    assert not rmapcheck.strict_diff(img)


def test_grow_undo_gives_the_image_back(tmp_path):
    img = tmp_path / "u.img"
    fstool("mkfs", "-q", img, "--size", "64m")
    before = img.read_bytes()
    undo = tmp_path / "u.undo"
    fstool("resize", img, "--size", "150m", "--undo-file", undo)
    assert img.stat().st_size == 150 * MiB
    fstool("undo", img, undo)
    assert img.read_bytes() == before


def test_resize_bad_sizes_are_one_line_errors(tmp_path):
    img = tmp_path / "e.img"
    fstool("mkfs", "-q", img, "--size", "64m")
    before = img.read_bytes()
    for args, status in ((["--size", "lots"], 2), (["--size", "-5m"], 2), ([], 2),
                         (["--size", "32m"], 1)):
        r = fstool("resize", img, *args, check=False)
        assert r.returncode == status, (args, r.returncode, r.stderr)
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, \
            r.stderr
    assert "shrinking is not supported" in r.stderr
    assert img.read_bytes() == before


# -- crashes ------------------------------------------------------------------------------

def _small_tree(root: Path) -> None:
    root.mkdir()
    for i in range(20):
        (root / f"f{i}").write_bytes(bytes([i]) * (i * 3000))
    (root / "d").mkdir()
    for i in range(40):
        (root / "d" / f"g{i}").write_text("x" * i)
    os.symlink("f3", root / "link")


@needs_loop
def test_grow_killed_after_every_write(tmp_path):
    base = tmp_path / "base.img"
    src = tmp_path / "src"
    _small_tree(src)
    fstool("mkfs", "-q", base, "--size", "64m")
    fstool("populate", base, src)
    before = _tree(base)
    old = _sb(base, "dblocks", "agcount")
    img = tmp_path / "c.img"
    seen = set()
    n = 1
    while True:
        subprocess.run(["cp", "--sparse=always", str(base), str(img)], check=True)
        r = fstool("resize", img, "--size", "128m", check=False,
                   env={"FSTOOL_FAULT_AFTER_WRITES": str(n)})
        if r.returncode == 0:
            break
        assert r.returncode == -9, f"write {n}: {r.stderr}"
        with images.Mounted(img):          # the kernel replays the log
            pass
        geo = _sb(img, "dblocks", "agcount")
        assert geo in (old, [32768, 8]), f"write {n}: geometry {geo}"
        seen.add(tuple(geo))
        assert _tree(img) == before, f"write {n}: the tree differs"
        fstool("resize", img, "--size", "128m")
        assert _sb(img, "dblocks", "agcount") == [32768, 8]
        repair_clean(img)
        n += 1
    assert n > 30 and len(seen) == 2
