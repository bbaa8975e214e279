"""fstool resize shrinking past directory, symlink, xattr, bmbt and
reflinked files' blocks and inode chunks.

The image (built by the kernel, see :func:`_metadata_image`) has every
directory in AG 0, files of every kind (hard links, symlinks, xattrs, a
bmbt, a fifo) whose inodes are in the last AG, and directory blocks
(block, leaf and node forms, a node directory in btree format), xattr
blocks (leaf, node and remote values, an attr fork in btree format), a
remote symlink, bmbt blocks and blocks shared by reflinked files in the
last AGs, behind the space a filler file held while they were written.
Cut to its minimum (-M):

* the blocks of each kind lay past the new size before, and the minimum
  counting only file data as movable is larger than that size: the move
  was needed;
* both xfs_repair versions and fstool check are clean, the rmapbt is
  what the files map (fixtures.rmapcheck), the kernel mounts the same
  tree (content, modes, owners, times, xattrs, hard links, symlinks;
  inode numbers aside: the far files have new ones), writes and unmounts
  clean;
* shared blocks move once: the files sharing them still share them (the
  same blocks, as many extra references in the refcount btrees) and the
  kernel copies on write over them;
* killed after writes (four by default, FSTOOL_EVERY_WRITE=1 for every write),
  the kernel replays the log to the old or the new geometry with the
  whole tree, and resize -M run again ends where an uninterrupted one
  ends, repair-clean.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import images, killpoints, modern, pptr, rmapcheck
from fixtures.oracles import fstool, repair_clean
from fixtures.tree import comparable, tree_manifest, xattr_values
from fstool._backend import parsers
from fstool.fs.filesystem import Filesystem
from fstool.ops import resize_shrink as RS
from fstool.recovery import finish
from fstool.ops.stats import ag_tree

MiB = 1 << 20
needs_loop = pytest.mark.skipif(not images.loop_available(),
                                reason="needs root, xfsprogs and a kernel loop mount of XFS")


def _judge(img: Path, before: tuple, parent: bool = False) -> None:
    """Both xfs_repair versions (6.10.1 alone for parent pointers, which
    6.1 does not know), fstool check and rmapcheck clean, the kernel shows
    ``before``."""
    if parent:
        r = subprocess.run([modern.tool("xfs_repair"), "-n", "-f", str(img)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-1000:]
    else:
        repair_clean(img)
    assert fstool("check", img).returncode == 0
    assert not rmapcheck.strict_diff(img)
    assert _tree(img) == before


FICLONE = 0x40049409
FICLONERANGE = 0x4020940D


def _clone(src: Path, dst: Path, ranges=None) -> None:
    """FICLONE ``src`` into ``dst``, or FICLONERANGE its (src offset,
    length, dst offset) ``ranges``."""
    with open(src, "rb") as s, open(dst, "r+b") as d:
        if ranges is None:
            fcntl.ioctl(d.fileno(), FICLONE, s.fileno())
        for soff, length, doff in ranges or ():
            fcntl.ioctl(d.fileno(), FICLONERANGE,
                        struct.pack("=qQQQ", s.fileno(), soff, length, doff))


def _fill(mnt: Path) -> None:
    """/filler takes all but 12 MiB of the free space (the kernel fills
    the AGs in order: what is left lies at the end)."""
    st = os.statvfs(mnt)
    fd = os.open(mnt / "filler", os.O_CREAT | os.O_WRONLY)
    os.posix_fallocate(fd, 0, st.f_bavail * st.f_bsize - 12 * MiB)
    os.close(fd)


def _far_inodes(x: Path, m: Path) -> None:
    """Files of every kind made in directory ``x`` (its inodes in its AG),
    then renamed into ``m`` and its directory small: a file with data,
    one with three names, symlinks (remote and inline), xattrs (leaf and
    remote), a sparse file (a bmbt), a fifo, an empty file; then ``x``
    itself, holding 150 names, a subdirectory and a file, renamed to
    small/far-dir."""
    (x / "plain").write_bytes(os.urandom(200000))
    (x / "linked").write_bytes(b"three names")
    os.symlink("s" * 700, x / "longlink")
    os.symlink("short", x / "shortlink")
    (x / "attrs").write_bytes(b"x")
    for i in range(30):
        os.setxattr(x / "attrs", f"user.a{i}", os.urandom(300))
    os.setxattr(x / "attrs", "user.big", os.urandom(9000))
    fd = os.open(x / "sparse", os.O_CREAT | os.O_WRONLY)
    for i in range(100):
        os.pwrite(fd, os.urandom(4096), i * 8192)
    os.close(fd)
    os.mkfifo(x / "fifo")
    (x / "empty").write_bytes(b"")
    for name in os.listdir(x):
        os.rename(x / name, m / f"far-{name}")
    os.link(m / "far-linked", m / "small" / "far-linked-2")
    os.link(m / "far-linked", m / "far-linked-3")
    # the directory itself moves, in leaf form with a subdirectory and a
    # file of its own
    for i in range(150):
        os.link(m / "far-plain", x / f"plain-link-{i:03d}")
    (x / "sub").mkdir()
    (x / "sub" / "inside").write_bytes(b"in a subdirectory")
    (x / "own").write_bytes(b"mine")
    os.rename(x, m / "small" / "far-dir")


def _metadata_image(img: Path, *mkfs_args: str) -> None:
    """128 MiB in 4 AGs (fstool mkfs: rmapbt and reflink on); every
    directory in AG 0, files made in the last AG and named in AG 0's
    directories (:func:`_far_inodes`), the blocks of directories, xattrs,
    a symlink, two bmbts and reflinked files (:func:`_reflinked`) written
    by the kernel in the free space a filler file left at the end, then the
    filler removed."""
    fstool("mkfs", "-q", img, "--size", "128m", *mkfs_args)
    with Filesystem(img) as fs:
        agino_log = fs.sb.agino_log
    with images.Mounted(img, nouuid=True) as m:
        # the kernel's rotor puts each new directory in the next AG: the
        # three kept land in AG 0 (the others go later)
        for d in ("small", "big", "node"):
            (m / d).mkdir()
            for k in range(3):
                (m / f"x{d}{k}").mkdir()
        for name in [f"f{i}" for i in range(9)] + [f"r{i}" for i in range(5)]:
            (m / name).write_bytes(b"")
        # free inodes in the root's chunk for the symlink made later
        for i in range(40):
            (m / f"spare{i}").write_bytes(b"")
        _fill(m)
        for i in range(40):
            os.unlink(m / f"spare{i}")
        subprocess.run(["sync"], check=True)
        # inodes in the last AG whose names are in AG 0's directories
        dummies = [m / f"x{d}{k}" for d in ("small", "big", "node") for k in range(3)]
        far = max(dummies, key=lambda p: os.stat(p).st_ino >> agino_log)
        _far_inodes(far, m)
        for d in dummies:
            if d != far:
                d.rmdir()
        # entries are hard links: no new inodes
        for i in range(30):
            os.link(m / "f0", m / "small" / f"entry-{i:04d}")
        for i in range(200):
            os.link(m / "f2", m / "big" / f"e{i}")
        # a node-form directory and a sparse file written in turns: both
        # fragmented, the directory's fork a btree
        fd = os.open(m / "f6", os.O_WRONLY)
        for i in range(3000):
            os.link(m / "f1", m / "node" / f"a-long-directory-entry-name-{i:06d}")
            if i % 40 == 0:
                os.pwrite(fd, os.urandom(4096), i // 40 * 8192)
                os.fsync(fd)
        os.close(fd)
        os.setxattr(m / "f3", "user.small", b"v" * 40)
        for i in range(60):
            os.setxattr(m / "f4", f"user.many{i:03d}", b"w" * 50)
        # remote values of two files in turns: their attr forks btrees
        for i in range(40):
            for f in ("f5", "f3"):
                os.setxattr(m / f, f"user.remote{i:02d}", os.urandom(5000))
        fd = os.open(m / "f7", os.O_WRONLY)
        os.posix_fallocate(fd, 0, MiB)                  # unwritten
        os.pwrite(fd, os.urandom(300000), 300000)
        os.close(fd)
        os.symlink("t" * 900, m / "longlink")
        fd = os.open(m / "f8", os.O_WRONLY)            # 300 extents: a two-level bmbt
        for i in range(300):
            os.pwrite(fd, os.urandom(4096), i * 8192)
        os.close(fd)
        _reflinked(m)
        subprocess.run(["sync"], check=True)
        os.unlink(m / "filler")


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    if not images.loop_available():
        pytest.skip("needs root, xfsprogs and a kernel loop mount of XFS")
    img = tmp_path_factory.mktemp("move") / "base.img"
    _metadata_image(img)
    return img


def _copy(src: Path, dst: Path) -> Path:
    subprocess.run(["cp", "--sparse=always", str(src), str(dst)], check=True)
    return dst


def _tree(img: Path) -> tuple:
    with images.Mounted(img, readonly=True, nouuid=True) as mnt:
        return comparable(tree_manifest(mnt)), xattr_values(mnt)


def _geometry(img: Path) -> tuple:
    with Filesystem(img) as fs:
        return fs.sb.dblocks, fs.sb.agcount


def _kinds_past(img: Path, dblocks: int, agcount: int) -> set:
    """The kinds of blocks (resize_shrink.FORK ...) lying past ``dblocks``."""
    with Filesystem(img) as fs:
        return {m[6] for m in RS.past(fs.sb, RS.movable(fs), dblocks, agcount)}


def _data_only_minimum(img: Path) -> int:
    """The minimum when only regular files' data can move (as before
    directory, xattr and bmbt blocks could)."""
    with Filesystem(img) as fs:
        mv = {agno: [m for m in recs if m[5] == RS.DATA]
              for agno, recs in RS.movable(fs).items()}
        return RS.minimum_blocks(fs, mv)


@needs_loop
def test_shrink_moves_directory_xattr_symlink_and_bmbt_blocks(base, tmp_path):
    img = _copy(base, tmp_path / "m.img")
    before = _tree(img)
    old = _data_only_minimum(img)
    r = fstool("resize", img, "-M")
    assert "directory, symlink and xattr block(s) moved" in r.stdout, r.stdout
    assert "bmbt block(s) moved" in r.stdout, r.stdout
    assert "inode(s) moved to new numbers" in r.stdout, r.stdout
    dblocks, agcount = _geometry(img)
    assert dblocks < old, (dblocks, old)
    assert {RS.FORK, RS.ATTR, RS.BMBT, RS.ABMBT, RS.SHARED, RS.INODES} <= \
        _kinds_past(base, dblocks, agcount)
    assert img.stat().st_size == dblocks * 4096
    _judge(img, before)
    with images.Mounted(img, nouuid=True) as mnt:
        for i in range(200):
            os.link(mnt / "f0", mnt / "node" / f"added-{i}")
        os.setxattr(mnt / "f5", "user.added", os.urandom(6000))
        (mnt / "new").write_bytes(os.urandom(2 * MiB))
    repair_clean(img)


@pytest.fixture(scope="module")
def pbase(tmp_path_factory) -> Path:
    """The image of :func:`base` with parent pointers."""
    if not images.loop_available():
        pytest.skip("needs root, xfsprogs and a kernel loop mount of XFS")
    if not modern.available():
        pytest.skip(modern.WHY)
    img = tmp_path_factory.mktemp("pmove") / "pbase.img"
    _metadata_image(img, "-n", "parent=1")
    return img


def _reference(base: Path, tmp_path: Path) -> tuple:
    """(geometry, writes, geometry after) of an uninterrupted -M of a copy
    of ``base``."""
    ref = _copy(base, tmp_path / "ref.img")
    wlog = tmp_path / "writes.log"
    fstool("resize", ref, "-M", env={"FSTOOL_WRITE_LOG": str(wlog)})
    return _geometry(base), len(wlog.read_text().splitlines()), _geometry(ref)


def _killed(base: Path, img: Path, n: int) -> tuple:
    """-M of ``base`` copied to ``img`` killed after write ``n``, the log
    replayed by a kernel mount: the geometry it leaves."""
    _copy(base, img)
    r = fstool("resize", img, "-M", check=False, env={"FSTOOL_FAULT_AFTER_WRITES": str(n)})
    assert r.returncode == -9, f"write {n}: {r.returncode} {r.stderr}"
    with images.Mounted(img, nouuid=True):      # the kernel replays the log
        pass
    return _geometry(img)


@needs_loop
@pytest.mark.parametrize("which", ["base", "pbase"], ids=["plain", "parent"])
def test_shrink_moving_metadata_killed_after_writes(request, tmp_path, which):
    """Killed after four writes of a shrink that moves directory, xattr,
    symlink, bmbt and reflinked blocks and inodes (FSTOOL_EVERY_WRITE=1:
    after every one): the kernel's log replay gives the old or the new
    geometry and the whole tree; resize -M run again finishes, repair
    clean.  With parent pointers, two writes among the inodes' moves (the
    last phase, a directory's with its children's pointers in it), and
    the kernel's pointers after its replay are the tree's."""
    base = request.getfixturevalue(which)
    parent = which == "pbase"
    before = _tree(base)
    if parent:
        pointers = pptr.named_parents(base)
    old, total, new = _reference(base, tmp_path)
    with Filesystem(base) as fs:
        between = (new[1] * fs.sb.agblocks, new[1])     # AGs dropped, the last not cut yet
    img = tmp_path / "c.img"
    seen = set()
    # by default four writes: a third of the way (moving file data), two
    # thirds (directory, xattr and bmbt blocks), and two among the last
    # checkpoints before the cut (moving inodes); FSTOOL_EVERY_WRITE=1:
    # every write
    points = killpoints.points(total) if killpoints.EVERY else \
        [total - 30, total - 12] if parent else \
        [total // 3, 2 * total // 3, total - 24, total - 12]
    for n in points:
        geo = _killed(base, img, n)
        assert geo in (old, between, new), f"write {n}: geometry {geo}"
        seen.add(geo)
        assert _tree(img) == before, f"write {n}: the tree differs"
        if parent:
            assert pptr.named_parents(img) == pointers, f"write {n}: the pointers differ"
        fstool("resize", img, "-M")
        assert _geometry(img) == new, f"write {n}"
        repair_clean(img)
    assert total > 20 and (parent or old in seen), (total, seen)


def _reflinked(m: Path) -> None:
    """Reflinked files written by the kernel under ``m`` (r0 ... r4 made
    already): r0 cloned whole into r1 and r2, two ranges of it into r3 at
    other offsets (blocks shared three and four times), r1 partly
    overwritten (its own copy-on-write blocks), r4 with unwritten blocks of
    its own and a range of r0."""
    (m / "r0").write_bytes(os.urandom(3 * MiB))
    _clone(m / "r0", m / "r1")
    _clone(m / "r0", m / "r2")
    _clone(m / "r0", m / "r3", [(MiB, MiB, 0), (512 << 10, MiB, 4 * MiB)])
    with open(m / "r1", "r+b") as f:
        f.seek(100 * 4096)
        f.write(os.urandom(20 * 4096))
        os.fsync(f.fileno())
    with open(m / "r4", "r+b") as f:
        os.posix_fallocate(f.fileno(), 0, MiB)
    _clone(m / "r0", m / "r4", [(0, 64 << 10, 2 * MiB)])


def _sharing(img: Path) -> tuple:
    """(blocks shared beyond their first reference, summed from every
    refcount btree record; each file's physical block list by name)."""
    with Filesystem(img) as fs:
        extra = 0
        for agno in range(fs.sb.agcount):
            reader, root, height = ag_tree(fs, agno, "refcountbt")
            extra += sum(n * (c - 1) for _s, n, c in reader.ag_records(root, height))
        maps = {}
        for i in range(5):
            ip = fs.lookup(f"/r{i}")
            maps[f"r{i}"] = [b + k for _o, b, n, _u in ip.extents() for k in range(n)]
        return extra, maps


@needs_loop
def test_shrink_moves_shared_extents_once(base, tmp_path):
    """Blocks of reflinked files past the cut move once: every file
    mapping them is remapped to the same new blocks and their reference
    counts move with them (the refcount btrees count as many extra
    references, r0 and its whole clone r2 map the same blocks); repair,
    check, rmapcheck and the kernel's tree as for the other moves."""
    img = _copy(base, tmp_path / "r.img")
    before = _tree(img)
    extra0, maps0 = _sharing(img)
    assert extra0 > 256
    r = fstool("resize", img, "-M")
    assert "block(s) of reflinked files moved" in r.stdout, r.stdout
    dblocks, agcount = _geometry(img)
    assert dblocks < agcount * 8192 and agcount == 2
    extra, maps = _sharing(img)
    assert extra == extra0
    assert maps["r0"] == maps["r2"] != maps0["r2"]
    assert all(b < dblocks for m in maps.values() for b in m)
    _judge(img, before)
    with images.Mounted(img, nouuid=True) as mnt:     # copy-on-write over moved blocks
        with open(mnt / "r2", "r+b") as f:
            f.write(b"changed")
        assert (mnt / "r0").read_bytes() != (mnt / "r2").read_bytes()
    repair_clean(img)


@needs_loop
@pytest.mark.parametrize("mkfs_args", [("-b", "size=1024", "-n", "size=8192"),
                                       ("-n", "parent=1")], ids=["1k-dir8k", "parent"])
def test_shrink_moves_metadata_other_geometries(request, tmp_path, mkfs_args):
    """The same image with 1 KiB blocks and 8 KiB directory blocks (a
    directory block spans eight: moved whole), and with parent pointers
    (every file's attr fork holds them: moved as xattrs are).  On both,
    the directory small/far-dir lay in the part cut off and got a new
    inode number; with parent pointers, the kernel's pointers (xfs_io
    6.10.1 ``parent`` through each inode's handle) name every file's
    directories as before, by their new numbers: far-dir's children
    (150 names of one file, a subdirectory, a file) point at its new
    number."""
    parent = "parent=1" in mkfs_args
    if parent and not modern.available():
        pytest.skip(modern.WHY)
    img = tmp_path / "g.img"
    if parent:
        _copy(request.getfixturevalue("pbase"), img)
    else:
        _metadata_image(img, *mkfs_args)
    before = _tree(img)
    if parent:
        pointers = pptr.named_parents(img)
    with Filesystem(img) as fs:
        far_dir = fs.lookup("/small/far-dir").ino
        inopblog, agino_log, agblklog = fs.sb.inopblog, fs.sb.agino_log, fs.sb.agblklog
    old = _data_only_minimum(img)
    r = fstool("resize", img, "-M")
    assert "directory, symlink and xattr block(s) moved" in r.stdout, r.stdout
    dblocks, agcount = _geometry(img)
    assert dblocks < old
    # the directory's inode lay in the part cut off: it moved
    block = ((far_dir >> agino_log) << agblklog) | ((far_dir & ((1 << agino_log) - 1))
                                                   >> inopblog)
    with Filesystem(img) as fs:
        assert RS.Cut(fs.sb, dblocks, agcount)(block)
        assert fs.lookup("/small/far-dir").ino != far_dir
    _judge(img, before, parent)
    if parent:
        assert pptr.named_parents(img) == pointers


# -- what a mount frees ----------------------------------------------------------------

@contextlib.contextmanager
def _filled_mount(img: Path):
    """``img`` made by fstool mkfs (128 MiB, 4 AGs) and mounted by the
    kernel, with a directory in each AG (the rotor), a kept file and the
    space before the last AG taken by :func:`_fill`'s filler; yields (the
    mount point, the directory in the last AG, the superblock's UUID)."""
    fstool("mkfs", "-q", img, "--size", "128m")
    with Filesystem(img) as fs:
        agino_log, uuid = fs.sb.agino_log, fs.sb.fields["sb_uuid"]
    with images.Mounted(img, nouuid=True) as m:
        dirs = [m / f"d{k}" for k in range(4)]      # the rotor: one in each AG
        for d in dirs:
            d.mkdir()
        (m / "kept").write_bytes(os.urandom(100000))
        _fill(m)
        yield m, max(dirs, key=lambda p: os.stat(p).st_ino >> agino_log), uuid


def _leftovers_image(img: Path, tmp: Path) -> None:
    """128 MiB in 4 AGs (fstool mkfs) holding, in its last AGs, what a
    crash leaves for the mount to free, under a clean log: the kernel
    writes a reflinked file with a 1 MiB CoW extent size hint and
    overwrites one block of it (the rest of the staging extent stays in
    the refcount btree's CoW domain), and a file deleted while still open
    (on its AG's unlinked list); the filesystem is frozen and the image
    copied then (a snapshot), and the copy's log, whose covering record
    would be replayed, is thrown away (fstool log zero, as xfs_repair -L
    would): everything was written in place by the freeze."""
    base = tmp / "live.img"
    with _filled_mount(base) as (m, far, _uuid):
        (far / "a").write_bytes(os.urandom(2 * MiB))
        (far / "b").write_bytes(b"")
        subprocess.run(["xfs_io", "-c", "cowextsize 1m", str(far / "b")], check=True)
        _clone(far / "a", far / "b")
        subprocess.run(["sync"], check=True)
        fd = os.open(far / "b", os.O_WRONLY)
        gone = os.open(far / "gone", os.O_CREAT | os.O_RDWR)
        try:
            os.pwrite(fd, b"x" * 4096, 10 * 4096)
            os.fsync(fd)
            os.write(gone, os.urandom(300000))
            os.fsync(gone)
            os.unlink(far / "gone")
            os.unlink(m / "filler")
            subprocess.run(["fsfreeze", "-f", str(m)], check=True)
            try:
                _copy(base, img)
            finally:
                subprocess.run(["fsfreeze", "-u", str(m)], check=True)
        finally:
            os.close(fd)
            os.close(gone)
    base.unlink()
    fstool("log", "zero", "-f", img)


@needs_loop
def test_shrink_frees_what_a_mount_frees(tmp_path):
    """An inode on an AGI unlinked list and CoW staging extents under a
    clean log (:func:`_leftovers_image`), in the AGs a shrink to the
    minimum drops: fstool check reports them (as xfs_repair -n does); -n
    refuses in one line; resize frees them first, as the kernel's mount
    and log recovery free them (the inode with its blocks, the staging
    extents from the refcount btree and the rmapbt), then cuts the AGs
    they were in: repair-clean (both versions), check and rmapcheck
    clean, the kernel shows the same tree."""
    img = tmp_path / "l.img"
    _leftovers_image(img, tmp_path)
    found = fstool("check", img, check=False).stdout
    assert "REFCOUNT_COW" in found and "AGI_UNLINKED" in found, found
    with Filesystem(img) as fs:
        cow = finish.cow_leftovers(fs)
        unlinked = finish.unlinked_inodes(fs)
        agcount0 = fs.sb.agcount
    assert cow and unlinked
    before = _tree(img)
    r = fstool("resize", "-n", img, "-M", check=False)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "run without -n" in r.stderr, r.stderr
    out = fstool("resize", img, "-M").stdout
    assert "1 inode(s) on the AGI unlinked lists" in out, out
    assert f"{len(cow)} CoW staging extent(s) freed first" in out, out
    dblocks, agcount = _geometry(img)
    # they lay in the AGs dropped
    assert agcount < agcount0
    assert all(agno >= agcount for agno, *_r in cow + unlinked), (cow, unlinked, agcount)
    _judge(img, before)


# -- quota inodes ------------------------------------------------------------------------

_DQ_TYPES = {"sb_uquotino": 1, "sb_gquotino": 4, "sb_pquotino": 2}   # XFS_DQTYPE_*
_DQBLK = 136                            # struct xfs_dqblk; its CRC at 108, uuid at 120


def _dquot_blocks(uuid: bytes, dqtype: int, blocks: int, blocksize: int = 4096) -> bytes:
    """``blocks`` blocks of a quota file as the kernel formats them
    (xfs_qm_init_dquot_blk): one xfs_dqblk per id from 0, each with the
    dquot magic, version 1, its type and id, the filesystem's UUID and its
    CRC; some usage and limits set."""
    per = blocksize // _DQBLK
    out = bytearray(blocks * blocksize)
    for b in range(blocks):
        for i in range(per):
            off, dqid = b * blocksize + i * _DQBLK, b * per + i
            struct.pack_into(">HBBIQQQQQQ", out, off, 0x4451, 1, dqtype, dqid,
                             1000 * dqid, 500 * dqid, 0, 0, 3 * dqid, dqid)
            out[off + 120:off + 136] = uuid
            parsers.stamp_cksum(out, off, off + _DQBLK, off + 108)
    return bytes(out)


def _quota_image(img: Path) -> dict:
    """128 MiB in 4 AGs (fstool mkfs) whose superblock names a user, a
    group and a project quota inode in the last AGs: three regular files
    written by the kernel there (after a filler took the space before),
    holding dquot blocks (:func:`_dquot_blocks`), then made quota inodes
    as the kernel keeps them (one link, no directory entry, a size of 0:
    xfs_db 6.10.1 raises the link count, sets the size and removes the
    name; every superblock names them).  The kernel here has no quota support, so it could not make
    them itself.  Returns {superblock field: (inode, content)}."""
    out = {}
    with _filled_mount(img) as (m, far, uuid):
        for n, (field, dqtype) in enumerate(_DQ_TYPES.items()):
            data = _dquot_blocks(uuid, dqtype, n + 1)
            (far / field).write_bytes(data)
            out[field] = (os.stat(far / field).st_ino, data)
        subprocess.run(["sync"], check=True)
        os.unlink(m / "filler")
    with Filesystem(img) as fs:
        dir_ino = fs.lookup("/" + far.name).ino
    # one xfs_db each: raw inode writes and an unlink's inode cache must
    # not see each other's stale copies of an inode cluster
    for field, (ino, _d) in out.items():
        modern.db(img, f"inode {ino}", "write core.nlinkv2 2", "write core.size 0",
                  write=True)
        modern.db(img, f"inode {dir_ino}", f"unlink {field}", write=True)
    # the primary (mkfs's secondaries name no quota inode)
    modern.db(img, "sb 0", *[f"write {f[3:]} {ino}" for f, (ino, _d) in out.items()],
              write=True)
    return out


@needs_loop
def test_shrink_moves_quota_inodes(tmp_path):
    """The quota inodes lie in the AGs a shrink to the minimum drops: they
    move to new numbers and the superblock names those (its secondaries
    too), their dquot blocks as they were; both xfs_repair versions (which
    read every dquot of a quota inode: CRC, UUID, id), fstool check and
    rmapcheck clean, the kernel mounts the same tree."""
    if not modern.available():
        pytest.skip(modern.WHY)
    img = tmp_path / "q.img"
    quota = _quota_image(img)
    repair_clean(img)
    assert fstool("check", img).returncode == 0
    before = _tree(img)
    fstool("resize", img, "-M")
    dblocks, agcount = _geometry(img)
    _judge(img, before)
    with Filesystem(img) as fs:
        cut = RS.Cut(fs.sb, dblocks, agcount)
        sb = fs.sb
        for field, (old, data) in quota.items():
            new = sb.fields[field]
            # the old inode lay in the part cut off; the new one is inside
            assert cut((old >> sb.agino_log) << sb.agblklog), (field, old)
            assert new != old and not cut((new >> sb.agino_log) << sb.agblklog | (
                (new & ((1 << sb.agino_log) - 1)) >> sb.inopblog)), (field, new)
            assert _mapped(fs, new) == data
            node = fs.inode(new)
            assert node.is_reg and node.nlink == 1
        for agno in range(1, agcount):
            assert _xfs_db_field(img, agno, quota) == {f: sb.fields[f] for f in quota}


def _mapped(fs, ino: int) -> bytes:
    """The blocks the data fork of ``ino`` maps, in file order."""
    bs = fs.sb.blocksize
    return b"".join(fs.dev.pread(fs.fsb_to_daddr(b) << 9, n * bs)
                    for _o, b, n, _u in sorted(fs.inode(ino).extents()))


def _xfs_db_field(img: Path, agno: int, fields) -> dict:
    """The quota inode fields of AG ``agno``'s superblock, as xfs_db reads them."""
    out = modern.db(img, f"sb {agno}", *[f"print {f[3:]}" for f in fields])
    got = dict(line.split(" = ") for line in out.strip().splitlines())
    return {f: int(got[f[3:]]) for f in fields}


if __name__ == "__main__":          # build the image alone: python tests/test_resize_move.py IMG
    _metadata_image(Path(sys.argv[1]), *sys.argv[2:])


# -- the AG's own btree blocks ----------------------------------------------------


def _many_files(src: Path, sizes=(100, 3000, 5000, 9000), big: int = 20_000_000) -> None:
    """3,200 files of ``sizes`` bytes in 8 directories and one of ``big``
    bytes: populated into 64 MiB in 2 AGs, enough records that the AGs'
    btrees split, their new blocks taken from the free list, which
    populate refills from the end of a free extent, so at the AGs' ends."""
    import random
    rnd = random.Random(37)
    for d in range(8):
        (src / f"d{d}").mkdir(parents=True)
        for i in range(400):
            (src / f"d{d}" / f"f{i}").write_bytes(rnd.randbytes(rnd.choice(sizes)))
    if big:
        (src / "big").write_bytes(rnd.randbytes(big))


@pytest.fixture(scope="module")
def tbase(tmp_path_factory) -> Path:
    """fstool mkfs (64 MiB, 2 AGs) + populate of :func:`_many_files`."""
    tmp = tmp_path_factory.mktemp("agbt")
    _many_files(tmp / "src")
    img = tmp / "base.img"
    fstool("mkfs", "-q", img, "--size", "64m", "-d", "agcount=2")
    fstool("populate", img, tmp / "src")
    return img


def _tail_btree_blocks(img: Path, dblocks: int) -> list:
    """The blocks of the last AG's own btrees past a cut to ``dblocks``."""
    with Filesystem(img) as fs:
        last = fs.sb.agcount - 1
        return [b for b in RS.ag_btree_blocks(fs, last)
                if b >= dblocks - last * fs.sb.agblocks]


@needs_loop
def test_shrink_moves_the_last_ags_own_btree_blocks(tbase, tmp_path):
    """Blocks of the last AG's free-space, reverse-mapping and inode
    btrees lie at its end (populate's free list refills took them there):
    -M moves them below the cut (before, -M left the image as it was:
    'size unchanged'), repair-clean, the kernel shows the same tree."""
    img = _copy(tbase, tmp_path / "m.img")
    before = _tree(img)
    old = _geometry(img)
    r = fstool("resize", img, "-M")
    assert "btrees moved below block" in r.stdout, r.stdout
    dblocks, agcount = _geometry(img)
    assert dblocks < old[0] and agcount == 2, (dblocks, old)
    assert _tail_btree_blocks(tbase, dblocks), "nothing of the btrees lay past the cut"
    assert img.stat().st_size == dblocks * 4096
    _judge(img, before)


@needs_loop
def test_shrink_moving_ag_btrees_killed_after_writes(tbase, tmp_path):
    """Killed after writes among the last 50 of -M (the AG btrees' blocks
    moved, then the cut: two by default, one in each, FSTOOL_EVERY_WRITE=1
    every one of them): the kernel's log replay gives the old or the new geometry
    and the whole tree; resize -M run again ends where an uninterrupted
    one ends (give or take a few blocks: the interrupted run left the
    trees and free list shaped otherwise), repair clean."""
    before = _tree(tbase)
    old, total, new = _reference(tbase, tmp_path)
    img = tmp_path / "c.img"
    points = range(total - 50, total + 1) if killpoints.EVERY else \
        [total - 28, total - 8]
    for n in points:
        geo = _killed(tbase, img, n)
        assert geo in (old, new), f"write {n}: geometry {geo}"
        assert _tree(img) == before, f"write {n}: the tree differs"
        fstool("resize", img, "-M")
        got = _geometry(img)
        assert got[1] == new[1] and abs(got[0] - new[0]) <= new[0] // 100, \
            f"write {n}: {got}, uninterrupted {new}"
        repair_clean(img)


# -- the log to the front of the last AG -------------------------------------------


def _log_at(img: Path) -> tuple:
    with Filesystem(img) as fs:
        return RS.log_extent(fs.sb)[:2]


@pytest.fixture(scope="module")
def lbase(tmp_path_factory) -> Path:
    """512 MiB in 4 AGs (the log in AG 2) populated with 61 MB of files."""
    tmp = tmp_path_factory.mktemp("logfront")
    _many_files(tmp / "src", sizes=(3000, 9000, 20000, 40000), big=0)
    img = tmp / "l.img"
    fstool("mkfs", "-q", img, "--size", "512m")
    fstool("populate", img, tmp / "src")
    return img


@needs_loop
def test_shrink_puts_the_log_where_the_moves_made_room(lbase, tmp_path):
    """-M of :func:`lbase` keeps 2 AGs, and no free extent of AG 1 holds
    the log as it stands before block N (its files fill its front).  The
    log goes to AG 1's front once the files there moved to AG 0 (before,
    it went to block N and AG 1 was cut after it), repair-clean, the
    kernel shows the same tree."""
    img = _copy(lbase, tmp_path / "l.img")
    with Filesystem(img) as fs:
        assert RS.log_extent(fs.sb)[0] == 2
        n = RS._log_spot(fs, 1, fs.ag_length(1))
        # where the log went before, and the least AG 1 was cut to then
        old_end = fs.sb.agblocks + n + fs.sb.logblocks
    before = _tree(img)
    r = fstool("resize", img, "-M")
    out = r.stdout
    assert out.index("inode(s) moved") < out.index("log moved"), out
    dblocks, agcount = _geometry(img)
    agno, agbno = _log_at(img)
    assert agcount == 2 and agno == 1 and agbno < n, (agno, agbno, n)
    assert dblocks < old_end, (dblocks, old_end)
    _judge(img, before)


@needs_loop
def test_shrink_moving_the_log_to_the_front_killed(lbase, tmp_path):
    """-M of :func:`lbase` killed just after the new log's first write
    (its blocks being formatted, the files moved out before it) and a few
    writes later (its transaction): the kernel mounts the old geometry
    with the whole tree, and -M run again ends as an uninterrupted one,
    repair-clean."""
    before = _tree(lbase)
    old, _total, new = _reference(lbase, tmp_path)
    ref = tmp_path / "ref.img"
    with Filesystem(ref) as fs:
        at = fs.fsb_to_daddr(fs.sb.logstart) << 9
    writes = [int(line.split()[0]) for line in (tmp_path / "writes.log").read_text().splitlines()]
    first = writes.index(at) + 1
    img = tmp_path / "c.img"
    for n in (first, first + 6):
        assert _killed(lbase, img, n) == old, f"write {n}"
        assert _tree(img) == before, f"write {n}: the tree differs"
        fstool("resize", img, "-M")
        assert _geometry(img) == new, f"write {n}"
        repair_clean(img)
