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
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import collisions as CL
from fixtures import images, modern

needs_loop = pytest.mark.skipif(not images.loop_available(),
                                reason="needs root, xfsprogs and a kernel loop mount of XFS")
T0 = 1_700_000_000_000_000_000
GEOMETRIES = {"4k": (), "1k-blocks": ("-b", "size=1024"), "64k-dirs": ("-n", "size=65536")}
LENGTH = 16                     # every name of the form-limit directories


def fstool(*args, check=True):
    r = subprocess.run([sys.executable, "-m", "fstool", *map(str, args)], capture_output=True,
                       text=True)
    if check and r.returncode:
        raise AssertionError(f"fstool {' '.join(map(str, args[:3]))} failed "
                             f"({r.returncode}): {r.stdout[-1500:]} {r.stderr[-1500:]}")
    return r


def dirblksize(geometry) -> int:
    return 65536 if "size=65536" in geometry else 4096


def form_limits(dbs: int, length: int = LENGTH) -> dict:
    """Entry counts of names of ``length`` bytes at each form's limit, from
    the placement the kernel's inserts give (writers.dir_place): the most a
    block holds, one more (leaf form), the most leaf form holds, one more
    (node form, one LEAFN block), one more than a LEAFN block holds (two),
    and four and a half LEAFN blocks' worth."""
    from fstool._backend import writers
    from fstool.ns.dirbuild import DATA_FIRST, HDR

    def form(n):
        return writers.dir_place([(b"x" * length, 1000, 1)] * n, dbs, True, HDR,
                                 DATA_FIRST)[0]

    order = {"block": 0, "leaf": 1, "node": 2}

    def last(kind, lo, hi):
        """The largest n in [lo, hi] whose form comes no later than ``kind``."""
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if order[form(mid)] <= order[kind]:
                lo = mid
            else:
                hi = mid - 1
        return lo
    per_leaf = (dbs - HDR) // 8
    block = last("block", 1, per_leaf)
    leaf = last("leaf", block, per_leaf)
    assert form(leaf + 1) == "node" and leaf + 1 + 2 <= per_leaf
    return {"block": block, "leaf1": block + 1, "leaf": leaf, "leafn": leaf + 1,
            "leafn2": per_leaf - 1, "leaves": 4 * per_leaf + per_leaf // 2}


def plan(geometry, src: CL.Names, which=None) -> dict:
    """{path: names} for the form-limit directories (``which`` of them),
    plus one of mixed name lengths over several leaves."""
    limits = form_limits(dirblksize(geometry))
    dirs = {f"/{k}": src.many(n, lengths=(LENGTH,)) for k, n in limits.items()
            if which is None or k in which}
    if which is None:
        dirs["/mixed"] = src.many(limits["leaves"] // 2)
    return dirs


# -- the writers: each returns write(dirs) -> image ------------------------------------
class Listing:
    """A populate source of empty files: {path: names}, each directory's
    names in the order given (Names hands them out in name order, the order
    a host directory is read in)."""

    def __init__(self, dirs: dict):
        self.dirs = dirs

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def entries(self, runs=True):
        from fstool.ops.sources import EmptyFiles, Entry
        for path, names in self.dirs.items():
            rel = path.strip("/")
            yield Entry(rel, "dir", 0o755, mtime_ns=T0, atime_ns=T0)
            yield EmptyFiles(rel, [(n, 0o644, 0, 0, T0, T0) for n in names])


def bulk_writer(tmp: Path, geometry, size="1g", host=False):
    """mkfs, then populate: from a host tree through the command line
    (``host``), else from a :class:`Listing` through ops.populate (the same
    builder; host directories of many thousand names are slow to make)."""
    src, img = tmp / "src", tmp / "bulk.img"
    made: dict = {}                     # the host tree as it stands

    def write(dirs):
        img.unlink(missing_ok=True)
        if not host:
            from fstool.ops.populate import populate
            fstool("mkfs", img, "--size", size, "-q", *geometry)
            populate(str(img), Listing(dirs), timestamp_ns=T0)
            return img
        for path, names in dirs.items():
            d = os.fsencode(src / path.strip("/"))
            if path not in made:
                os.makedirs(d)
                for n in names:
                    os.close(os.open(d + b"/" + n, os.O_CREAT | os.O_WRONLY, 0o644))
            else:
                for old, new in zip(made[path], names):
                    if old != new:
                        os.rename(d + b"/" + old, d + b"/" + new)
            made[path] = list(names)
        fstool("mkfs", img, "--size", size, "-q", *geometry, "--populate", src)
        return img
    return write


def fresh(img: Path, geometry, size="1g") -> Path:
    img.unlink(missing_ok=True)
    fstool("mkfs", img, "--size", size, "-q", *geometry)
    return img


def edit_writer(tmp: Path, geometry):
    """Namespace (the code of fstool's edit commands) for all but the last
    name of each directory, then `fstool put` (`fstool mkdir` for the
    first directory) for the last."""
    from fstool.ns.namespace import Meta, Namespace
    from fstool.ns.writer import Writer
    img = tmp / "edits.img"
    host = tmp / "host-file"
    host.write_bytes(b"x")

    def write(dirs):
        fresh(img, geometry)
        with Writer(img) as w:
            ns = Namespace(w)
            with w.transaction():
                inos = {p: ns.mkdir(w.sb.rootino, p.strip("/").encode(), Meta(perm=0o755))
                        for p in dirs}
            ns.committed()
            for path, names in dirs.items():
                for k in range(0, len(names) - 1, 2000):
                    with w.transaction():
                        for n in names[k:min(k + 2000, len(names) - 1)]:
                            ns.create_file(inos[path], n, Meta(perm=0o644))
                    ns.committed()
        for k, (path, names) in enumerate(dirs.items()):
            target = f"{path}/{names[-1].decode()}"
            if k == 0:
                fstool("mkdir", img, target, "--no-check")
            else:
                fstool("put", img, host, target, "--no-check")
        return img
    return write


def mount_writer(tmp: Path, geometry):
    """The mount's Volume, creates grouped as the mount groups them."""
    from fstool.mount.volume import Volume
    img = tmp / "mount.img"

    def write(dirs):
        fresh(img, geometry)
        v = Volume(img, timestamp_ns=T0)
        v.group = 64
        try:
            for path, names in dirs.items():
                d = v.mkdir(v.rootino, path.strip("/").encode(), 0o755).ino
                for n in names:
                    fh, _a = v.create(d, n, 0o100644, os.O_WRONLY)
                    v.release(fh)
        finally:
            v.close()
        return img
    return write


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
    inner = bulk_writer(tmp, geometry)

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
def repair_clean(img: Path) -> None:
    r = subprocess.run(["xfs_repair", "-n", "-f", str(img)], capture_output=True, text=True)
    assert r.returncode == 0, f"xfs_repair 6.1 -n:\n{r.stdout[-2500:]}{r.stderr[-2500:]}"
    if modern.available():
        r = modern.repair_n(img)
        assert r.returncode == 0, f"xfs_repair 6.10.1 -n:\n{r.stdout[-2500:]}{r.stderr[-2500:]}"


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
    write = bulk_writer(tmp_path, geometry, host=not geometry)
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
    img, lays = CL.converge(dirs, src, edit_writer(tmp_path, geometry), width=2)
    assert_straddled(lays, ("data", "leaf"), last_moved=False)
    verify(img, dirs)


@needs_loop
def test_mount_collisions_at_every_boundary(tmp_path):
    """The mount's Volume (grouped creates), 4 KiB blocks."""
    src = CL.Names(seed=13)
    dirs = plan((), src, which=("leaf", "leafn", "leafn2", "leaves"))
    img, lays = CL.converge(dirs, src, mount_writer(tmp_path, ()), width=2)
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
    src = CL.Names(seed=15)
    per_leaf = (4096 - 64) // 8
    dirs = {"/big": src.many(per_leaf * (per_leaf + 6), lengths=(16,))}
    img, lays = CL.converge(dirs, src, bulk_writer(tmp_path, (), size="3g"),
                            kinds=("leaf", "node"), exempt=CL.last_leaf_gap)
    assert len(lays["/big"]["nodes"]) == 2
    assert_straddled(lays, ("leaf", "node"), last_moved=True)
    verify(img, dirs)


# -- xattr names -------------------------------------------------------------------------
def _value(name: bytes) -> bytes:
    """A value by the name's length, so that a name made to collide in
    another's place (same length) keeps the entry size and every leaf
    holds the same count: 16 bytes, 100-byte values (seven entries to a
    1 KiB leaf); 20 bytes, 40-byte values; 24 bytes, 1500-byte values
    (stored remotely)."""
    return bytes([name[-1]]) * {16: 100, 20: 40, 24: 1500}[len(name)]


def xattrs_of(files: dict) -> dict:
    return {path: {"user." + n.decode(): _value(n) for n in names}
            for path, names in files.items()}


def xattr_writer(tmp: Path, geometry):
    """Each path a file whose xattrs are its names (the attr builder)."""
    from fstool.ns.namespace import Meta, Namespace
    from fstool.ns.writer import Writer
    img = tmp / "attrs.img"

    def write(files):
        fresh(img, geometry)
        with Writer(img) as w:
            ns = Namespace(w)
            with w.transaction():
                for path, want in xattrs_of(files).items():
                    ino = ns.create_file(w.sb.rootino, path.strip("/").encode(),
                                         Meta(perm=0o644))
                    ns.set_xattrs(ino, want)
            ns.committed()
        return img
    return write


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
    write = xattr_writer(tmp_path, geometry)
    img, lays = CL.converge(files, src, write, kinds=("leaf", "node"),
                            exempt=CL.last_leaf_gap, read=CL.attr_layout)
    assert len(lays["/two"]["leaves"]) == 2 and len(lays["/deep"]["nodes"]) == 2
    assert_straddled(lays, ("leaf", "node"), last_moved=True)
    verify(img, {}, xattrs_of(files))
    for path, lay in lays.items():
        last = [g for g in CL.apart(lay, ("leaf",)) if CL.last_leaf_gap(lay, g)]
        CL.straddle(files[path], src, last, set())
    img = write(files)
    lays = {p: CL.attr_layout(img, p) for p in files}
    assert check_last_leaf(lays) == 4
    verify(img, {}, xattrs_of(files))
