"""fstool resize against the kernel.

Shrinking (tests below the growing ones):

* ``fstool info --json`` reports the minimum size; a size below it is a
  one-line error naming it (and the inodes in the way), nothing written;
* a kernel-written tree cut to its minimum (-M): both xfs_repair versions
  clean, the kernel mounts the same tree, writes and unmounts clean;
* grown then shrunk back to the original size, the rmapbt/reflink corpus
  image gives the same tree, every shared extent still shared (the
  refcount btrees' records unchanged);
* killed after every write, a shrink that drops AGs and cuts the new last
  AG leaves the old geometry, the new one or (between its two steps) the
  whole AGs in between, with the whole tree once the kernel has replayed
  the log, and resize run again finishes it;
* --undo-file gives the image back byte for byte, its cut-off tail too.

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
  again finishes it (xfs_repair -n clean) -- by default after a sample of
  the writes (fixtures/killpoints.py), with FSTOOL_EVERY_WRITE=1 after each;
* --undo-file gives the image back byte for byte.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fixtures import corpus_base, images, killpoints, modern, pptr
from fixtures.oracles import fstool, repair_clean
from fixtures.tree import comparable, tree_manifest, xattr_values
from fstool.fs.filesystem import Filesystem

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


def _judge_grown(img: Path, before: tuple, dblocks: int, agcount: int,
                 writes: int = 24) -> None:
    """The geometry, both xfs_repair versions and fstool check clean, the
    same tree, the kernel writes ``writes`` MiB and unmounts clean."""
    assert _sb(img, "dblocks", "agcount") == [dblocks, agcount]
    repair_clean(img)
    assert fstool("check", img).returncode == 0
    assert _tree(img) == before
    _kernel_writes(img, writes)
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
                         (["--size", "64m", "-M"], 2), (["--size", "64m", "--slack", "5"], 2),
                         (["-M", "--slack", "100"], 2), (["--size", "12m"], 1)):
        r = fstool("resize", img, *args, check=False)
        assert r.returncode == status, (args, r.returncode, r.stderr)
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, \
            r.stderr
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
    subprocess.run(["cp", "--sparse=always", str(base), str(img)], check=True)
    wlog = tmp_path / "writes.log"
    fstool("resize", img, "--size", "128m", env={"FSTOOL_WRITE_LOG": str(wlog)})
    total = len(wlog.read_text().splitlines())
    for n in killpoints.points(total, seed="grow"):
        subprocess.run(["cp", "--sparse=always", str(base), str(img)], check=True)
        r = fstool("resize", img, "--size", "128m", check=False,
                   env={"FSTOOL_FAULT_AFTER_WRITES": str(n)})
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
    assert total > 30 and len(seen) == 2


# -- shrinking ------------------------------------------------------------------------

def _min_blocks(img) -> int:
    import json
    return json.loads(fstool("info", "--json", img).stdout)["min_blocks"]


def _refcounts(img) -> list:
    """Every refcount btree record of every AG (what stays shared)."""
    out = []
    (agcount,) = _sb(img, "agcount")
    for agno in range(agcount):
        text = subprocess.run(["xfs_db", "-r", "-c", f"agf {agno}", "-c", "addr refcntroot",
                               "-c", "p recs", str(img)], capture_output=True,
                              text=True).stdout
        out.append(text.strip())
    return out


def test_shrink_below_the_minimum_is_refused(tmp_path):
    img = tmp_path / "m.img"
    src = tmp_path / "src"
    _small_tree(src)
    fstool("mkfs", "-q", img, "--size", "256m")
    fstool("populate", img, src)
    low = _min_blocks(img)
    dblocks, agblocks = _sb(img, "dblocks", "agblocks")
    assert low < dblocks
    before = img.read_bytes()
    r = fstool("resize", "-n", img, "--size", f"{low}b")
    assert f"would shrink from {dblocks} to {low} blocks" in r.stdout, r.stdout
    assert img.read_bytes() == before
    r = fstool("resize", img, "--size", f"{low - 1}b", check=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"the smallest size is {low * 4096} bytes" in r.stderr, r.stderr
    assert img.read_bytes() == before
    fstool("resize", img, "--size", f"{low}b")
    assert _sb(img, "dblocks")[0] == low
    repair_clean(img)


@needs_loop
def test_shrink_drops_an_ag_holding_parent_pointer_directories(tmp_path):
    """Directories' inodes move on a filesystem with parent pointers: the
    kernel's rotor puts one directory in each AG (each with a file and a
    subdirectory); cutting off the last AG moves the one there, its
    children's pointers renamed to its new number.  xfs_repair 6.10.1 and
    fstool check clean, and the kernel's pointers (xfs_io 6.10.1) name
    every file's directories as before."""
    if not modern.available():
        pytest.skip(modern.WHY)
    img = tmp_path / "k.img"
    fstool("mkfs", "-q", img, "--size", "128m", "-n", "parent=1")
    with images.Mounted(img, nouuid=True) as mnt:
        for i in range(4):                  # one directory in each AG
            (mnt / f"d{i}").mkdir()
            (mnt / f"d{i}" / "f").write_bytes(b"x" * 5000)
            os.link(mnt / f"d{i}" / "f", mnt / f"d{i}" / "g")
            (mnt / f"d{i}" / "sub").mkdir()
    agcount, agblocks, agblklog, inopblog = _sb(img, "agcount", "agblocks", "agblklog",
                                                "inopblog")
    before = pptr.named_parents(img)
    with Filesystem(img) as fs:
        dirs = [fs.lookup(f"/d{i}{sub}").ino for i in range(4) for sub in ("", "/sub")]
    assert any(ino >> (agblklog + inopblog) == agcount - 1 for ino in dirs)
    fstool("resize", img, "--size", f"{(agcount - 1) * agblocks}b")
    assert _sb(img, "agcount")[0] == agcount - 1
    r = modern.repair_n(img)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert fstool("check", img).returncode == 0
    assert pptr.named_parents(img) == before


def test_damaged_unlinked_list_is_refused(tmp_path):
    """An AGI unlinked bucket naming a free inode (xfs_db writes it) is no
    list resize frees as a mount would: refused in one line naming fstool
    repair, for -n too, nothing written."""
    img = tmp_path / "u.img"
    fstool("mkfs", "-q", img, "--size", "64m")
    agino = 190                             # in the root's chunk, free
    subprocess.run(["xfs_db", "-x", "-c", "agi 0", "-c",
                    f"write unlinked[{agino % 64}] {agino}", str(img)],
                   check=True, capture_output=True)
    before = img.read_bytes()
    for args in (("-n",), ()):
        r = fstool("resize", *args, img, "--size", "48m", check=False)
        assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert f"chains inode {agino}, which is free" in r.stderr, r.stderr
        assert "fstool repair" in r.stderr and "Traceback" not in r.stderr
        assert img.read_bytes() == before


def _spread_tree(root: Path) -> None:
    """600 files of 1 to 40 KiB in 30 directories (populate spreads the
    directories over the AGs)."""
    for d in range(30):
        (root / f"d{d:02d}").mkdir(parents=True)
        for i in range(20):
            (root / f"d{d:02d}" / f"f{i}").write_bytes(bytes([d]) * (1024 * (1 + (d + i) % 40)))


def test_the_minimum_is_one_shrink(tmp_path):
    """On a populated image (populate refills an AG's free list from the
    end of a free extent: its blocks lie at the AG's end; the log in the
    middle AG has to move): the minimum fstool info reports is a size one
    --size shrink reaches (the free list's blocks past the cut go back to
    the free space first), -M cuts to the same size, repair-clean; the AGs
    cut short do not keep their whole length for a few free-list blocks."""
    src = tmp_path / "src"
    _spread_tree(src)
    img, again = tmp_path / "a.img", tmp_path / "b.img"
    fstool("mkfs", "-q", img, "--size", "512m")
    fstool("populate", img, src)
    shutil.copy(img, again)
    low = _min_blocks(img)
    agblocks, dblocks = _sb(img, "agblocks", "dblocks")
    assert low % agblocks and low < dblocks
    fstool("resize", img, "--size", f"{low}b")
    assert _sb(img, "dblocks")[0] == low
    repair_clean(img)
    assert fstool("check", img).returncode == 0
    fstool("resize", again, "-M")
    assert _sb(again, "dblocks")[0] == low
    repair_clean(again)


def test_shrink_minimum_keeps_the_slack(tmp_path):
    img = tmp_path / "s.img"
    fstool("mkfs", "-q", img, "--size", "512m")
    dblocks0, fdblocks0 = _sb(img, "dblocks", "fdblocks")
    low = _min_blocks(img)
    used = dblocks0 - fdblocks0
    # a slack that puts the size halfway between the minimum and now
    slack = round(100 * (1 - used / ((low + dblocks0) / 2)), 2)
    fstool("resize", img, "-M", "--slack", str(slack))
    dblocks, fdblocks = _sb(img, "dblocks", "fdblocks")
    assert low < dblocks < dblocks0
    assert fdblocks >= slack / 100 * dblocks, (dblocks, fdblocks, slack)
    assert fdblocks < slack / 100 * dblocks + 128, (dblocks, fdblocks, slack)
    repair_clean(img)
    fstool("resize", img, "-M")
    assert _sb(img, "dblocks")[0] == low
    assert img.stat().st_size == low * 4096
    repair_clean(img)


def test_shrink_undo_gives_the_image_back(tmp_path):
    img = tmp_path / "u.img"
    fstool("mkfs", "-q", img, "--size", "256m")
    with open(img, "r+b") as f:            # old bytes in free space past the cut
        f.seek(250 * MiB)
        f.write(b"kept" * 1000)
    before = img.read_bytes()
    undo = tmp_path / "u.undo"
    fstool("resize", img, "-M", "--undo-file", undo)
    assert img.stat().st_size < 256 * MiB
    fstool("undo", img, undo)
    assert img.read_bytes() == before


@needs_loop
def test_shrink_kernel_written_tree_to_its_minimum(tmp_path):
    src = images.kernel_image("small")
    img = tmp_path / "k.img"
    subprocess.run(["cp", "--sparse=always", str(src), str(img)], check=True)
    before = _tree(img)
    low = _min_blocks(img)
    dblocks0, agblocks = _sb(img, "dblocks", "agblocks")
    assert low < dblocks0
    fstool("resize", img, "-M")
    assert img.stat().st_size == low * 4096
    _judge_grown(img, before, low, _sb(img, "agcount")[0], 8)


@needs_loop
@needs_modern
def test_grow_then_shrink_back(tmp_path):
    src = corpus_base.base_image("rmap")
    img = tmp_path / "g.img"
    subprocess.run(["cp", "--sparse=always", str(src), str(img)], check=True)
    before = _tree(img)
    shared = _refcounts(img)
    geo0 = _sb(img, "dblocks", "agcount")
    size0 = img.stat().st_size
    fstool("resize", img, "--size", f"{geo0[0] * 4096 + 300 * MiB}")
    assert _sb(img, "agcount")[0] > geo0[1]
    fstool("resize", img, "--size", f"{geo0[0]}b")
    assert _sb(img, "dblocks", "agcount") == geo0
    assert img.stat().st_size == size0
    repair_clean(img)
    assert fstool("check", img).returncode == 0
    assert _refcounts(img) == shared
    assert _tree(img) == before
    from fixtures import rmapcheck
    assert not rmapcheck.strict_diff(img)
    _kernel_writes(img, 4)
    repair_clean(img)


@needs_loop
@needs_modern
def test_shrink_moves_data_of_an_rmapbt_reflink_image(tmp_path):
    src = corpus_base.base_image("rmap")
    img = tmp_path / "m.img"
    subprocess.run(["cp", "--sparse=always", str(src), str(img)], check=True)
    before = _tree(img)
    shared = _refcounts(img)
    dblocks0 = _sb(img, "dblocks")[0]
    low = _min_blocks(img)
    undo = tmp_path / "m.undo"
    r = fstool("resize", img, "-M", "--undo-file", undo)
    assert "data extent(s) moved" in r.stdout, r.stdout
    (dblocks,) = _sb(img, "dblocks")
    assert dblocks < dblocks0 and dblocks <= low + 64, (dblocks, low)
    repair_clean(img)
    back = tmp_path / "back.img"
    subprocess.run(["cp", "--sparse=always", str(img), str(back)], check=True)
    fstool("undo", back, undo)
    assert back.read_bytes() == src.read_bytes()
    assert fstool("check", img).returncode == 0
    assert _refcounts(img) == shared
    from fixtures import rmapcheck
    assert not rmapcheck.strict_diff(img)
    assert _tree(img) == before
    _kernel_writes(img, 4)
    repair_clean(img)


def _spread_image(path: Path, tmp_path: Path) -> None:
    """128 MiB, 4 AGs: a tree fstool populated, then files the kernel
    wrote into directories it spread over AGs 1 and 2 (the log's); AG 3
    empty."""
    src = tmp_path / "src"
    _small_tree(src)
    fstool("mkfs", "-q", path, "--size", "128m")
    fstool("populate", path, src)
    with images.Mounted(path, nouuid=True) as mnt:
        for d in ("d1", "d2", "d3"):
            (mnt / d).mkdir()
            for i in range(4):
                (mnt / d / f"f{i}").write_bytes(os.urandom(200_000 + i * 4096))


def _root_files_image(path: Path) -> None:
    """512 MiB made by mkfs.xfs (the log in AG 2 of 4), files the kernel
    wrote in the root directory (inodes and data in AG 0)."""
    path.write_bytes(b"")
    os.truncate(path, 512 * MiB)
    subprocess.run(["mkfs.xfs", "-q", "-f", str(path)], check=True, capture_output=True)
    with images.Mounted(path, nouuid=True) as mnt:
        _small_tree(mnt / "t")
        (mnt / "big").write_bytes(os.urandom(3 * MiB))


def _killed_runs(base: Path, tmp_path: Path, says: tuple) -> None:
    """resize -M of ``base`` killed after writes (see the test below)."""
    before = _tree(base)
    old = _sb(base, "dblocks", "agcount")
    ref = tmp_path / "ref.img"
    subprocess.run(["cp", "--sparse=always", str(base), str(ref)], check=True)
    wlog = tmp_path / "writes.log"
    r = fstool("resize", ref, "-M", env={"FSTOOL_WRITE_LOG": str(wlog)})
    assert all(x in r.stdout for x in says), r.stdout
    total = len(wlog.read_text().splitlines())
    new = _sb(ref, "dblocks", "agcount")
    between = [new[1] * _sb(ref, "agblocks")[0], new[1]]
    assert new[0] < between[0] and new[1] < old[1]
    # the last dozen writes (dropping AGs, cutting the last) each, the rest
    # sampled (FSTOOL_EVERY_WRITE=1: every write)
    points = killpoints.points(total, marks=range(max(1, total - 11), total),
                               share=max(4, total // 16), seed="shrink")
    img = tmp_path / "c.img"
    seen = set()
    for n in points:
        subprocess.run(["cp", "--sparse=always", str(base), str(img)], check=True)
        r = fstool("resize", img, "-M", check=False,
                   env={"FSTOOL_FAULT_AFTER_WRITES": str(n)})
        assert r.returncode == -9, f"write {n}: {r.returncode} {r.stderr}"
        with images.Mounted(img, nouuid=True):      # the kernel replays the log
            pass
        geo = _sb(img, "dblocks", "agcount")
        assert geo in (old, between, new), f"write {n}: geometry {geo}"
        seen.add(tuple(geo))
        assert _tree(img) == before, f"write {n}: the tree differs"
        fstool("resize", img, "-M")
        assert _sb(img, "dblocks", "agcount") == new, f"write {n}"
        assert img.stat().st_size == new[0] * 4096
        repair_clean(img)
    assert total > 10 and seen == {tuple(old), tuple(between), tuple(new)}, (total, seen)


@needs_loop
def test_shrink_killed_after_every_write(tmp_path):
    """Killed after writes of a shrink that moves data extents, drops an
    AG and cuts the new last one: each prefix, its log replayed by the
    kernel, holds the old geometry, the new one or the whole AGs between
    (step A done), and the whole tree; resize -M run again ends where an
    uninterrupted one ends.  By default about sixteen writes spread over
    the run (every fourth at least) and the last twelve (where the
    geometry changes); FSTOOL_EVERY_WRITE=1 kills after every one."""
    base = tmp_path / "base.img"
    _spread_image(base, tmp_path)
    _killed_runs(base, tmp_path, ("data extent(s) moved", "dropped"))


def _files(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_shrink_failing_at_a_write_leaves_a_whole_image(tmp_path):
    """A write of a shrink that fails (an I/O error, the process going on:
    FSTOOL_FAULT_ERRNO) leaves an image both xfs_repair versions pass at
    once, without a rerun -- between dropping AGs (the primary superblock,
    unlogged) and cutting the new last AG, xfs_repair refused the two AGs
    left ("Only two AGs detected and they do not match") -- and resize -M
    run again ends where an uninterrupted one ends, every file's bytes
    kept.  By default the writes from step A (dropping the AGs) on, every
    fourth; FSTOOL_EVERY_WRITE=1 fails each write of the run in turn."""
    src = tmp_path / "src"
    for d in range(6):
        (src / f"d{d}").mkdir(parents=True)
        for i in range(1, 5):
            (src / f"d{d}" / f"f{i}").write_bytes(os.urandom(100_000 * i))
    base = tmp_path / "base.img"
    fstool("mkfs", "-q", base, "--size", "128m")
    fstool("populate", base, src)
    ref = tmp_path / "ref.img"
    shutil.copyfile(base, ref)
    wlog = tmp_path / "writes.log"
    r = fstool("resize", ref, "-M", env={"FSTOOL_WRITE_LOG": str(wlog)})
    assert "dropped" in r.stdout and " cut from " in r.stdout, r.stdout
    new = _sb(ref, "dblocks", "agcount")
    total = len(wlog.read_text().splitlines())
    # the last dozen writes hold step A (one superblock sector, the AGs
    # kept's secondary), step B (its log write and checkpoint) and the
    # final secondaries' rewrite
    points = (range(1, total + 1) if killpoints.EVERY else range(total - 11, total + 1, 4))
    img = tmp_path / "e.img"
    for n in points:
        shutil.copyfile(base, img)
        r = fstool("resize", img, "-M", check=False,
                   env={"FSTOOL_FAULT_AFTER_WRITES": str(n), "FSTOOL_FAULT_ERRNO": "EIO"})
        assert r.returncode == 1 and "Input/output error" in r.stderr, (n, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        problems = modern.repair_problems(img)
        assert not problems, f"write {n} failed: " + "\n".join(problems)
        fstool("resize", img, "-M")
        assert _sb(img, "dblocks", "agcount") == new, f"write {n}"
        assert img.stat().st_size == new[0] * 4096
    repair_clean(img)
    out = tmp_path / "out"
    fstool("get", img, "/", out)
    assert _files(out) == _files(src)


@needs_loop
def test_shrink_moves_the_log(tmp_path):
    """mkfs.xfs puts the log in the middle AG: -M moves it into the part
    kept (not AG 0, where it would move the root inode's expected place),
    drops the AGs past it: both xfs_repair versions clean, the kernel
    mounts the same tree, writes and unmounts clean."""
    img = tmp_path / "l.img"
    _root_files_image(img)
    before = _tree(img)
    logstart0, agblocks = _sb(img, "logstart", "agblocks")
    assert logstart0 // agblocks == 2
    r = fstool("resize", img, "-M")
    assert "log moved" in r.stdout, r.stdout
    dblocks, agcount, logstart = _sb(img, "dblocks", "agcount", "logstart")
    assert agcount == 2 and logstart // agblocks == 1 and dblocks < 2 * agblocks
    _judge_grown(img, before, dblocks, agcount, 4)


@needs_loop
def test_shrink_moving_the_log_killed_after_every_write(tmp_path):
    """The kill harness over a shrink that moves the log (see
    test_shrink_killed_after_every_write; FSTOOL_EVERY_WRITE=1 for every
    write)."""
    base = tmp_path / "base.img"
    _root_files_image(base)
    _killed_runs(base, tmp_path, ("log moved", "dropped"))


def _sha256(path) -> str:
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(8 * MiB), b""):
            h.update(chunk)
    return h.hexdigest()


@pytest.mark.parametrize("args", [("--size", "600m"), ("-M",)], ids=["grow", "shrink"])
def test_undo_gives_back_the_dirty_log_replayed_first(args, tmp_path):
    """A kernel-dirty image (fixtures/logs: the kernel shut down with a
    file deleted while open): resize replays the log and frees the
    unlinked inode before it resizes; the undo file holds what that
    replay overwrote too, so undo gives back the dirty image byte for
    byte."""
    from fixtures import log_fixtures as LF
    if not (LF.HERE / "dirty-default.img.zst").exists():
        pytest.skip("fixtures/logs/dirty-default.img.zst not built")
    img = LF.unpack("dirty-default", tmp_path / "d.img")
    before = _sha256(img)
    assert "LOG_DIRTY" in fstool("check", img, check=False).stdout
    undo = tmp_path / "u.undo"
    r = fstool("resize", img, *args, "--undo-file", undo)
    assert "dirty log was replayed first" in r.stdout, r.stdout
    assert fstool("check", img).returncode == 0
    fstool("undo", img, undo)
    assert _sha256(img) == before
