"""Names of equal hash where a directory's blocks meet (fixtures/collisions.py),
written by each of fstool's directory writers: populate (the bulk builder),
edits (the incremental writer, through Namespace and the CLI), the mount's
Volume, and repair's directory rebuild; xattr names the same way through
the attr builder.  Directories sit at each form's limits (a full block, the
first and last leaf form, one LEAFN block, two, several; a two-level
da-btree) on 4 KiB blocks, on 1 KiB blocks (directory blocks of four
filesystem blocks) and with 64 KiB directory blocks.  Every image is clean
for xfs_repair -n (6.1 and 6.10.1) and fstool check, and the kernel lists
exactly the names and finds each one by lookup."""
from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from fixtures import collisions as CL
from fixtures import images
from fixtures.oracles import fstool, repair_clean

needs_loop = pytest.mark.skipif(not images.loop_available(),
                                reason="needs root, xfsprogs and a kernel loop mount of XFS")
GEOMETRIES = {"4k": (), "1k-blocks": ("-b", "size=1024"), "64k-dirs": ("-n", "size=65536")}


def dirblksize(geometry) -> int:
    return 65536 if "size=65536" in geometry else 4096


def plan(geometry, src: CL.Names, which=None) -> dict:
    """{path: names} for the form-limit directories (``which`` of them),
    plus one of mixed name lengths over several leaves."""
    limits = CL.form_limits(dirblksize(geometry))
    dirs = {f"/{k}": src.many(n, lengths=(CL.LENGTH,)) for k, n in limits.items()
            if which is None or k in which}
    if which is None:
        dirs["/mixed"] = src.many(limits["leaves"] // 2)
    return dirs


# -- the repair writer: each writer returns write(dirs) -> image (fixtures.collisions) ---
def damage(img: Path, path: str) -> None:
    """Break the hash order of the directory's leaf (or its root node's
    first hash) with xfs_db, so that check finds it and repair rebuilds it."""
    lay = CL.layout(img, path)
    import fstool as F
    with F.open_image(str(img)) as fs:
        leaf_fsb = (1 << 35) >> fs.sb.blocklog          # XFS_DIR2_LEAF_OFFSET
    if lay["form"] == "block":
        cmds = ["dblock 0", "write -d bleaf[3].hashval 0"]
    elif lay["nodes"]:
        cmds = [f"dblock {leaf_fsb}", "write -d nbtree[0].hashval 1"]
    else:
        cmds = [f"dblock {leaf_fsb}", "write -d lents[3].hashval 0"]
    argv = ["xfs_db", "-x", "-f", "-c", f"path {path}"]
    for c in cmds:
        argv += ["-c", c]
    subprocess.run(argv + [str(img)], check=True, capture_output=True)


def repair_writer(tmp: Path, geometry):
    """Populate, break every directory, and let `fstool repair` rebuild them."""
    inner = CL.bulk_writer(tmp, geometry)

    def write(dirs):
        img = inner(dirs)
        for path in dirs:
            damage(img, path)
        assert fstool("check", img, check=False).returncode == 1
        r = fstool("repair", img, check=False)
        assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
        return img
    return write


# -- the oracles -------------------------------------------------------------------------


def verify(img: Path, dirs: dict, xattrs: dict | None = None) -> None:
    """Both xfs_repair -n clean, fstool check clean, and the kernel lists
    exactly the names of each directory and looks each one up (xattrs:
    lists and reads each name of each file)."""
    repair_clean(img)
    r = fstool("check", img, check=False)
    assert r.returncode == 0, r.stdout[-3000:]
    with images.Mounted(img, readonly=True, nouuid=True) as mnt:
        for path, names in dirs.items():
            d = os.fsencode(mnt / path.strip("/"))
            listed = os.listdir(d)
            assert len(listed) == len(names) and set(listed) == set(names), path
            fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
            try:
                for n in names:
                    assert stat.S_IFMT(os.stat(n, dir_fd=fd, follow_symlinks=False).st_mode)
            finally:
                os.close(fd)
        for path, want in (xattrs or {}).items():
            p = mnt / path.strip("/")
            assert sorted(os.listxattr(p)) == sorted(want)
            for name, value in want.items():
                assert os.getxattr(p, name) == value, name


def assert_straddled(lays: dict, kinds, last_moved: bool) -> None:
    """Every boundary of ``kinds`` has equal hashes on both sides (the bulk
    builder's last leaf boundary excepted with ``last_moved``: there the
    last leaf begins with the whole final run of equal hashes), and each
    kind has boundaries to show."""
    seen = set()
    for path, lay in lays.items():
        for b in CL.boundaries(lay):
            seen.add(b[0])
        gaps = CL.apart(lay, kinds)
        if last_moved:
            gaps = [g for g in gaps if not CL.last_leaf_gap(lay, g)]
        assert not gaps, (path, gaps[:3])
    assert set(kinds) <= seen, (kinds, seen)


def check_last_leaf(lays: dict) -> int:
    """For each multi-leaf directory, the last leaf starts with the final
    run of equal hashes: the leaf before it ends below.  Returns how many."""
    n = 0
    for path, lay in lays.items():
        leaves = lay["leaves"]
        if len(leaves) > 1:
            assert leaves[-2][-1][0] < leaves[-1][-1][0], path
            n += 1
    return n


@needs_loop
@pytest.mark.parametrize("geometry", GEOMETRIES.values(), ids=GEOMETRIES.keys())
def test_populate_collisions_at_every_boundary(tmp_path, geometry):
    """The bulk builder: colliding names straddle every data and leaf
    boundary but the last leaf boundary; colliding names put there too move
    the last leaf's start back to the run of equal hashes (xfs_repair 6.1
    rejects a last node whose children end in the same hash)."""
    src = CL.Names(seed=11)
    dirs = plan(geometry, src)
    write = CL.bulk_writer(tmp_path, geometry, host=not geometry)
    img, lays = CL.converge(dirs, src, write, exempt=CL.last_leaf_gap)
    assert_straddled(lays, ("data", "leaf"), last_moved=True)
    verify(img, dirs)
    # the last leaf boundaries too: the builder moves them
    for path, lay in lays.items():
        last = [g for g in CL.apart(lay, ("leaf",)) if CL.last_leaf_gap(lay, g)]
        CL.straddle(dirs[path], src, last, set())
    img = write(dirs)
    lays = {p: CL.layout(img, p) for p in dirs}
    assert check_last_leaf(lays) >= 3
    verify(img, dirs)


@needs_loop
@pytest.mark.parametrize("geometry", [GEOMETRIES["4k"], GEOMETRIES["1k-blocks"]],
                         ids=["4k", "1k-blocks"])
def test_edit_collisions_at_every_boundary(tmp_path, geometry):
    """The incremental writer (Namespace and the edit commands): leaves
    split as the kernel splits them, colliding names on both sides of
    every data and leaf boundary, the last included."""
    src = CL.Names(seed=12)
    dirs = plan(geometry, src, which=("leaf1", "leaf", "leafn", "leafn2", "leaves"))
    img, lays = CL.converge(dirs, src, CL.edit_writer(tmp_path, geometry), width=2)
    assert_straddled(lays, ("data", "leaf"), last_moved=False)
    verify(img, dirs)


@needs_loop
def test_mount_collisions_at_every_boundary(tmp_path):
    """The mount's Volume (grouped creates), 4 KiB blocks."""
    src = CL.Names(seed=13)
    dirs = plan((), src, which=("leaf", "leafn", "leafn2", "leaves"))
    img, lays = CL.converge(dirs, src, CL.mount_writer(tmp_path, ()), width=2)
    assert_straddled(lays, ("data", "leaf"), last_moved=False)
    verify(img, dirs)


@needs_loop
@pytest.mark.parametrize("geometry", [GEOMETRIES["4k"], GEOMETRIES["64k-dirs"]],
                         ids=["4k", "64k-dirs"])
def test_repair_rebuild_collisions_at_every_boundary(tmp_path, geometry):
    """Repair's directory rebuild (the bulk builder from the entries found),
    every directory broken first."""
    src = CL.Names(seed=14)
    dirs = plan(geometry, src, which=("block", "leaf", "leafn", "leafn2", "leaves"))
    img, lays = CL.converge(dirs, src, repair_writer(tmp_path, geometry),
                            exempt=CL.last_leaf_gap)
    assert_straddled(lays, ("data", "leaf"), last_moved=True)
    verify(img, dirs)


@needs_loop
@pytest.mark.slow
def test_two_level_node_collisions(tmp_path):
    """A directory of two node levels (more leaves than a node holds):
    colliding names at every leaf boundary, among them the boundaries
    between level-1 nodes."""
    img, dirs, lays = CL.two_level_dir(tmp_path, 15)
    assert_straddled(lays, ("leaf", "node"), last_moved=True)
    verify(img, dirs)


# -- xattr names -------------------------------------------------------------------------
@needs_loop
def test_xattr_collisions_at_every_boundary(tmp_path):
    """Attr forks on 1 KiB blocks (a few leaves, local or remote values; two
    node levels): colliding
    names at every leaf boundary, those between level-1 nodes too, but the
    last; colliding names put at the last boundary move the last leaf's
    start back (xfs_repair 6.1 rejects a last node whose children end in the
    same hash, as for directories)."""
    geometry = GEOMETRIES["1k-blocks"]
    src = CL.Names(seed=16)
    files = {"/two": src.many(8, lengths=(16,)), "/few": src.many(30, lengths=(20,)),
             "/remote": src.many(40, lengths=(24,)), "/deep": src.many(1600, lengths=(20,))}
    write = CL.xattr_writer(tmp_path, geometry)
    img, lays = CL.converge(files, src, write, kinds=("leaf", "node"),
                            exempt=CL.last_leaf_gap, read=CL.attr_layout)
    assert len(lays["/two"]["leaves"]) == 2 and len(lays["/deep"]["nodes"]) == 2
    assert_straddled(lays, ("leaf", "node"), last_moved=True)
    verify(img, {}, CL.xattrs_of(files))
    for path, lay in lays.items():
        last = [g for g in CL.apart(lay, ("leaf",)) if CL.last_leaf_gap(lay, g)]
        CL.straddle(files[path], src, last, set())
    img = write(files)
    lays = {p: CL.attr_layout(img, p) for p in files}
    assert check_last_leaf(lays) == 4
    verify(img, {}, CL.xattrs_of(files))


@needs_loop
def test_xattr_node_level_with_one_leaf_over(tmp_path):
    """One leaf more than a node holds (1 KiB blocks: 120 children a node):
    the last node of the level takes two children, not one.  xfs_repair
    (6.1 and 6.10.1 alike) moves its cursor to a level's next node only when
    a leaf after the last child of the one before needs it: a last node
    whose one child is the last leaf is never reached, and the node before
    it fails the right edge ("bad attribute forward block pointer")."""
    geometry = GEOMETRIES["1k-blocks"]
    per_node = (1024 - 64) // 8
    files = {"/over": CL.Names(seed=17).many(7 * per_node + 1, lengths=(16,))}
    img = CL.xattr_writer(tmp_path, geometry)(files)
    lay = CL.attr_layout(img, "/over")
    assert len(lay["leaves"]) == per_node + 1 and lay["nodes"][0] == [per_node - 1]
    verify(img, {}, CL.xattrs_of(files))
