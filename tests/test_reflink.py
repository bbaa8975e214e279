"""Shared blocks (reflink) on the write path, against the kernel.

The images are made the way users make them: mkfs.xfs 6.10.1 with its
defaults (rmapbt, reflink), files written by the kernel and copied with
FICLONE (what coreutils 9's cp does), an unwritten (fallocated) region
shared too.

* copy on write through FileIO: fsx-style operations (writes, truncates,
  punches, zero ranges, preallocation, clones) on files that share every
  block with a sibling; every read checked against a shadow, the siblings
  unchanged byte for byte, xfs_repair -n (6.10.1 and 6.1) clean, the rmapbt
  exactly the merged records of every owner;
* the same operations applied by the kernel to a twin image: the files are
  equal, and so is the sharing: which file blocks share one disk block
  (every block's group of (file, offset) mappings, where each tool placed
  new blocks aside), so copy on write unshares what the kernel unshares
  and clones share what the kernel's share; the refcount btree is what
  xfs_repair derives from the mappings (xfs_repair -n clean);
* cp through an fstool mount (copy_file_range) shares blocks, the copy of a
  1 GiB file taking a small fraction of the time a data copy takes, and
  fsx through the mount on a file sharing every block with a sibling leaves
  the sibling as it was;
* fstool cp, populate --reflink.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import fsx, images, modern, rmapcheck

REPO = Path(__file__).resolve().parent.parent
FICLONE = 0x40049409
BS = 4096

needs_kernel = pytest.mark.skipif(not images.loop_available(),
                                  reason="needs root and a kernel loop mount of XFS")
needs_modern = pytest.mark.skipif(not modern.available(), reason=modern.WHY)


def _clone(src: Path, dst: Path) -> None:
    with open(src, "rb") as s, open(dst, "wb") as d:
        fcntl.ioctl(d.fileno(), FICLONE, s.fileno())


def shared_image(path: Path, size: str = "600m", args=()) -> dict:
    """A kernel-written 6.10.1 image: ``a`` (random data, a fallocated tail),
    ``b`` a clone of ``a``, ``c`` a clone of ``b``, ``d`` unshared; returns
    their sizes."""
    modern.mkfs(path, *args, size=size)
    rng = os.urandom
    with images.Mounted(path, nouuid=True) as mnt:
        a = mnt / "a"
        with open(a, "wb") as f:
            f.write(rng(1_300_000))
            fsx.fallocate(f.fileno(), fsx.KEEP, 1_300_000, 200_000)
            f.truncate(1_400_000)
        _clone(a, mnt / "b")
        _clone(mnt / "b", mnt / "c")
        (mnt / "d").write_bytes(rng(300_000))
        return {n: (mnt / n).stat().st_size for n in "abcd"}


def contents(path: Path, names) -> dict:
    with images.Mounted(path, readonly=True, nouuid=True) as mnt:
        return {n: hashlib.sha256((mnt / n).read_bytes()).hexdigest() for n in names}


def refcount_records(img: Path) -> list:
    db = modern.tool("xfs_db")
    agcount = int(re.search(r"agcount = (\d+)", subprocess.run(
        [db, "-r", "-f", "-c", "sb 0", "-c", "p agcount", str(img)], capture_output=True,
        text=True, check=True).stdout).group(1))
    out = []
    for agno in range(agcount):
        text = subprocess.run([db, "-r", "-f", "-c", f"agf {agno}", "-c", "addr refcntroot",
                               "-c", "btdump", str(img)], capture_output=True, text=True,
                              check=True).stdout
        out += [(agno, *map(int, m.groups())) for m in
                re.finditer(r"^\d+:\[(\d+),(\d+),(\d+),(\d+)\]", text, re.M)]
    return out


def sharing(img: Path, names) -> set:
    """The groups of (file, block offset) that map one disk block, for
    every disk block two or more mappings share."""
    import fstool
    by_block: dict = {}
    with fstool.open_image(str(img)) as fs:
        for n in names:
            node = fs.inode(_ino(fs, "/" + n))
            for o, b, k, u in node.extents():
                if u:
                    continue
                for i in range(k):
                    by_block.setdefault(b + i, []).append((n, o + i))
    return {frozenset(v) for v in by_block.values() if len(v) > 1}


def judged(img: Path) -> None:
    """xfs_repair -n of both versions clean; the rmapbt exact."""
    r = modern.repair_n(img)
    assert r.returncode == 0, r.stdout[-1500:]
    r = subprocess.run(["xfs_repair", "-n", "-f", str(img)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-1500:]
    assert rmapcheck.strict_diff(img) == []


def _ino(fs, path: str) -> int:
    node = fs.lookup(path)
    return getattr(node, "ino", node)


@needs_kernel
@needs_modern
@pytest.mark.parametrize("seed", [1, 2])
def test_copy_on_write_against_shadow_and_the_kernels_twin(tmp_path, seed):
    from fstool.ns.fileio import FileIO
    from fstool.ns.writer import Writer
    base = tmp_path / "base.img"
    sizes = shared_image(base)
    before = contents(base, "bcd")
    ours, twin = tmp_path / "ours.img", tmp_path / "twin.img"
    shutil.copyfile(base, ours)
    shutil.copyfile(base, twin)
    # operations on a (shares every block with b and c), d, and clones
    # between them: a and d end up sharing with each other too
    ops = fsx.make_ops(seed, 700, files=2, max_size=3 << 20, clones=0.08,
                       sizes=[sizes["a"], sizes["d"]])
    with images.Mounted(base, readonly=True, nouuid=True) as mnt:
        shadow = [bytearray((mnt / "a").read_bytes()), bytearray((mnt / "d").read_bytes())]
    with Writer(ours) as w:
        io = FileIO(w)
        inos = [_ino(w.fs, "/a"), _ino(w.fs, "/d")]
        counts = fsx.run_fileio(io, inos, ops, shadow, check_every=100)
        for ino in inos:
            io.release(ino)
    assert counts.get("clone", 0) > 20 and counts["write"] > 100, counts
    judged(ours)
    with images.Mounted(twin, nouuid=True) as mnt:
        fsx.run_posix([str(mnt / "a"), str(mnt / "d")], ops)
    mine, theirs = contents(ours, "abcd"), contents(twin, "abcd")
    assert mine == theirs
    assert {n: mine[n] for n in "bc"} == {n: before[n] for n in "bc"}
    assert mine["a"] == hashlib.sha256(bytes(shadow[0])).hexdigest()
    got, want = sharing(ours, "abcd"), sharing(twin, "abcd")
    assert got == want, (len(got), len(want), sorted(map(sorted, got ^ want))[:4])


@needs_kernel
@needs_modern
def test_cow_with_one_kilobyte_blocks(tmp_path):
    """The same on 1 KiB blocks, rmapbt and refcount btrees of several
    levels."""
    from fstool.ns.fileio import FileIO
    from fstool.ns.writer import Writer
    img = tmp_path / "k.img"
    sizes = shared_image(img, args=("-b", "size=1024"))
    twin = tmp_path / "twin.img"
    shutil.copyfile(img, twin)
    ops = fsx.make_ops(5, 400, files=2, max_size=2 << 20, clones=0.1, bs=1024,
                       sizes=[sizes["a"], sizes["d"]])
    with images.Mounted(img, readonly=True, nouuid=True) as mnt:
        shadow = [bytearray((mnt / "a").read_bytes()), bytearray((mnt / "d").read_bytes())]
    with Writer(img) as w:
        io = FileIO(w)
        inos = [_ino(w.fs, "/a"), _ino(w.fs, "/d")]
        fsx.run_fileio(io, inos, ops, shadow, check_every=100, bs=1024)
        for ino in inos:
            io.release(ino)
    judged(img)
    with images.Mounted(twin, nouuid=True) as mnt:
        fsx.run_posix([str(mnt / "a"), str(mnt / "d")], ops, bs=1024)
    assert contents(img, "abcd") == contents(twin, "abcd")
    assert sharing(img, "abcd") == sharing(twin, "abcd")


@needs_kernel
@needs_modern
def test_unlink_and_truncate_give_references_back(tmp_path):
    """Removing every file that shares a block frees it; removing one of
    several keeps it: the free space ends where the kernel's twin ends."""
    img = tmp_path / "u.img"
    shared_image(img)
    twin = tmp_path / "twin.img"
    shutil.copyfile(img, twin)
    for args in (("rm", img, "/b"), ("rm", img, "/a"), ("rm", img, "/c")):
        r = subprocess.run([sys.executable, "-m", "fstool", *map(str, args)],
                           capture_output=True, text=True, cwd=REPO)
        assert r.returncode == 0, r.stderr
    judged(img)
    with images.Mounted(twin, nouuid=True) as mnt:
        for n in "bac":
            os.unlink(mnt / n)
    assert refcount_records(img) == refcount_records(twin) == []
    free = []
    for p in (img, twin):
        out = subprocess.run([modern.tool("xfs_db"), "-r", "-f", "-c", "sb 0", "-c",
                              "p fdblocks", str(p)], capture_output=True, text=True).stdout
        free.append(int(out.split("=")[1]))
    assert free[0] == free[1]


def _fstool(*args):
    return subprocess.run([sys.executable, "-m", "fstool", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO)


@needs_kernel
@needs_modern
def test_fstool_cp_shares_and_copies(tmp_path):
    img = tmp_path / "cp.img"
    shared_image(img)
    r = _fstool("cp", img, "/d", "/d2", "--json")
    assert r.returncode == 0, r.stderr
    r = _fstool("cp", img, "/d", "/d3", "--reflink=never")
    assert r.returncode == 0, r.stderr
    r = _fstool("cp", img, "/d", "/d2")
    assert r.returncode != 0 and "already exists" in r.stderr
    judged(img)
    c = contents(img, ("d", "d2", "d3"))
    assert c["d"] == c["d2"] == c["d3"]
    recs = refcount_records(img)
    # d's blocks are shared twice now (d, d2); d3 has blocks of its own
    assert sum(n for _ag, _s, n, refc, _cow in recs if refc == 2) >= 300_000 // BS
    plain = tmp_path / "plain.img"
    subprocess.run([sys.executable, "-m", "fstool", "mkfs", "-q", str(plain), "--size", "64m",
                    "-m", "reflink=0"], check=True)
    assert _fstool("put", plain, "/etc/hostname", "/h").returncode == 0
    r = _fstool("cp", plain, "/h", "/h2", "--reflink=always")
    assert r.returncode == 5 and "reflink" in r.stderr and "Traceback" not in r.stderr
    assert _fstool("cp", plain, "/h", "/h2").returncode == 0


@needs_kernel
@needs_modern
def test_populate_reflink_shares_equal_contents(tmp_path):
    src = tmp_path / "src"
    (src / "x").mkdir(parents=True)
    (src / "y").mkdir()
    blobs = [os.urandom(n) for n in (1, 4095, 4096, 4097, 70_000, 300_001)]
    for i, b in enumerate(blobs):
        (src / "x" / f"f{i}").write_bytes(b)
        (src / "y" / f"f{i}").write_bytes(b)
    (src / "y" / "other").write_bytes(os.urandom(5000))
    img = tmp_path / "p.img"
    modern.mkfs(img, size="512m")
    r = _fstool("populate", img, src, "--reflink", "--json")
    assert r.returncode == 0, r.stderr
    import json
    st = json.loads(r.stdout)
    assert st["shared_files"] == len(blobs)
    assert st["shared_bytes"] == sum(map(len, blobs))
    judged(img)
    with images.Mounted(img, readonly=True, nouuid=True) as mnt:
        for i, b in enumerate(blobs):
            assert (mnt / "x" / f"f{i}").read_bytes() == b == (mnt / "y" / f"f{i}").read_bytes()
    shared_blocks = sum(n for *_x, n, refc, _c in refcount_records(img) if refc == 2)
    assert shared_blocks == sum(-(-len(b) // BS) for b in blobs)


@needs_kernel
@needs_modern
def test_fsx_through_the_mount_on_a_shared_file(tmp_path):
    """fsx through an fstool mount on a file whose every block its siblings
    share (and cp of it through the mount, which shares by copy_file_range):
    every read as the shadow says, the siblings unchanged byte for byte,
    the image repair-clean with its rmapbt exact."""
    from fixtures import fsx_mount
    from fixtures.fusemount import FuseMounted, fuse_skip_reason
    why = fuse_skip_reason()
    if why:
        pytest.skip(why)
    img = tmp_path / "m.img"
    shared_image(img)
    before = contents(img, "bcd")
    with FuseMounted(img) as mnt:
        subprocess.run(["cp", str(mnt / "d"), str(mnt / "d2")], check=True)
        err = fsx_mount.run(str(mnt / "a"), 11, 3000, maxsize=2 << 20, keep=True)
        assert err is None, err
    judged(img)
    after = contents(img, ("b", "c", "d", "d2"))
    assert {n: after[n] for n in "bcd"} == before
    assert after["d2"] == before["d"]
    assert any({("d", 0), ("d2", 0)} <= g for g in sharing(img, ("d", "d2")))
