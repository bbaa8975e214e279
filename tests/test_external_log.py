"""Filesystems with an external log (mkfs.xfs -l logdev=LOG): --logdev.

Without --logdev, readers read the data device (no log needed) while
check, the log commands, writers and a v2 metadump say in one line to pass
it.  With it: check agrees with ``xfs_repair -n -l LOG`` (6.1 and 6.10.1);
a kernel-dirty log replayed by ``fstool log replay --logdev`` gives the
image the kernel's recovery gives; writes through fstool journal into the
log file and leave both files clean for xfs_repair -n -l and mountable by
the kernel; ``metadump --logdev`` writes a v2 dump with the log that
xfs_mdrestore 6.10.1 -l restores (byte for byte xfs_metadump 6.10.1's
with -o -a).

The images are mkfs.xfs'd (320 MB of data, a 64 MiB log, both sparse); the
kernel-written ones need root and loop devices (skipped otherwise)."""
from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys

import pytest

from fixtures import extlog, killpoints, modern
from fixtures.images import data_ranges, loop_available
from fixtures.oracles import fstool
from fstool.format import constants as C
from fstool.format.structs import SB
from fstool.fs.filesystem import Filesystem
from fstool.ops import resize_shrink as RS
from fstool.ops.resize import mkfs_geometry

needs_kernel = pytest.mark.skipif(not loop_available(),
                                  reason="needs root, xfsprogs and loop mounts")
needs_mkfs = pytest.mark.skipif(shutil.which("mkfs.xfs") is None, reason="needs mkfs.xfs")


def repair_n(img, log, tool="xfs_repair") -> subprocess.CompletedProcess:
    return subprocess.run([tool, "-n", "-f", "-l", str(log), str(img)], capture_output=True,
                          text=True)


def assert_repair_clean(img, log) -> None:
    tools = ["xfs_repair"] + ([modern.tool("xfs_repair")] if modern.available() else [])
    for tool in tools:
        r = repair_n(img, log, tool)
        assert r.returncode == 0, (tool, r.stdout[-1500:], r.stderr[-1500:])


def one_line_error(r, code: int) -> None:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--logdev" in lines[0] and "Traceback" not in r.stderr, \
        r.stderr


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A fresh mkfs.xfs (6.1) filesystem with its log in a file."""
    if shutil.which("mkfs.xfs") is None:
        pytest.skip("needs mkfs.xfs")
    d = tmp_path_factory.mktemp("extlog-made")
    return extlog.make(d / "fresh.img", d / "fresh.log")


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    """The kernel's tree in an external-log filesystem (clean unmount)."""
    if not loop_available():
        pytest.skip("needs root, xfsprogs and loop mounts")
    d = tmp_path_factory.mktemp("extlog-kernel")
    return extlog.kernel_made(d / "k.img", d / "k.log")


# -- without --logdev --------------------------------------------------------------
@needs_mkfs
def test_without_logdev_readers_read_and_the_rest_ask_for_it(made, tmp_path):
    img, log = extlog.copy(*made, tmp_path, "a")
    stamps = [os.stat(p).st_mtime_ns for p in (img, log)]
    r = fstool("ls", img, "/")
    assert r.stderr == ""                     # the log does not matter to ls
    r = fstool("info", img)
    assert "log      =external" in r.stdout
    one_line_error(fstool("check", img, check=False), 4)
    one_line_error(fstool("log", "info", img, check=False), 2)
    one_line_error(fstool("mkdir", img, "/d", check=False), 2)
    one_line_error(fstool("ls", "--replay-in-memory", img, "/", check=False), 2)
    one_line_error(fstool("metadump", "-v", "2", img, tmp_path / "d.md", check=False), 2)
    assert [os.stat(p).st_mtime_ns for p in (img, log)] == stamps    # nothing written


# -- check ------------------------------------------------------------------------------
@needs_mkfs
@pytest.mark.parametrize("release", ["6.1", "6.10.1"])
def test_check_of_fresh_image_agrees_with_xfs_repair(release, tmp_path):
    mkfs = "mkfs.xfs"
    if release == "6.10.1":
        if not modern.available():
            pytest.skip(modern.WHY)
        mkfs = modern.tool("mkfs.xfs")
    img, log = extlog.make(tmp_path / "f.img", tmp_path / "f.log", mkfs)
    assert fstool("check", "--logdev", log, img).returncode == 0
    assert_repair_clean(img, log)
    r = fstool("log", "info", "--json", "--logdev", log, img)
    assert '"start_daddr": 0' in r.stdout and '"sectors": 131072' in r.stdout


@needs_kernel
def test_check_of_kernel_tree(kernel):
    img, log = kernel
    assert fstool("check", "--logdev", log, img).returncode == 0
    assert_repair_clean(img, log)
    assert fstool("cat", img, "/etc/sub/hard").stdout == "x" * 97


# -- log replay against the kernel's recovery ---------------------------------------------
def _sb_without_lsn(raw: bytes) -> bytes:
    """The primary superblock sector but its LSN and CRC (the kernel's
    unmount logs the superblock once more; fstool's replay does not)."""
    out = bytearray(raw)
    off = SB.offset("sb_lsn")
    out[off:off + 8] = bytes(8)
    out[C.XFS_SB_CRC_OFF:C.XFS_SB_CRC_OFF + 4] = bytes(4)
    return bytes(out)


def differing_blocks(a, b) -> list:
    """Byte offsets of the 4 KiB blocks where two sparse images differ
    (the data ranges of either read; the primary superblock compared but
    its LSN and CRC)."""
    size = os.path.getsize(a)
    assert os.path.getsize(b) == size
    fa, fb = os.open(a, os.O_RDONLY), os.open(b, os.O_RDONLY)
    try:
        ss = struct.unpack(">H", os.pread(fa, 2, SB.offset("sb_sectsize")))[0]
        out = [] if _sb_without_lsn(os.pread(fa, ss, 0)) == \
            _sb_without_lsn(os.pread(fb, ss, 0)) else [0]
        for start, end in sorted(set(data_ranges(fa, size) + data_ranges(fb, size))):
            for o in range(start & ~4095, end, 4096):
                lo = ss if o == 0 else o            # the superblock sector: above
                if os.pread(fa, o + 4096 - lo, lo) != os.pread(fb, o + 4096 - lo, lo) \
                        and o not in out:
                    out.append(o)
        return out
    finally:
        os.close(fa)
        os.close(fb)


@needs_kernel
def test_replay_equals_kernel_recovery(kernel, tmp_path):
    img, log = extlog.copy(*kernel, tmp_path, "dirty")
    extlog.shut_down_dirty(img, log)
    r = fstool("check", "--logdev", log, img, check=False)
    assert r.returncode == 2 and "LOG_DIRTY" in r.stdout, r.stdout
    a = extlog.copy(img, log, tmp_path, "kernel")
    b = extlog.copy(img, log, tmp_path, "fstool")
    with extlog.Mounted(*a):
        pass                                  # the kernel replays at mount
    r = fstool("log", "replay", "--logdev", b[1], b[0])
    assert "replayed" in r.stdout
    assert fstool("check", "--logdev", b[1], b[0]).returncode == 0
    assert_repair_clean(*b)
    assert differing_blocks(a[0], b[0]) == []
    with extlog.Mounted(*b, readonly=True) as mnt:
        assert sorted(os.listdir(mnt / "late")) == sorted([f"g{i}" for i in range(30)]
                                                          + ["moved"])


# -- writing --------------------------------------------------------------------------------
@needs_kernel
def test_writes_journal_into_the_log_file(kernel, tmp_path):
    img, log = extlog.copy(*kernel, tmp_path, "w")
    before = open(log, "rb").read()
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f").write_bytes(b"populated")
    fstool("populate", "--logdev", log, img, src)
    fstool("mkdir", "--logdev", log, img, "/made")
    fstool("admin", "--logdev", log, img, "-L", "extlabel")
    assert open(log, "rb").read() != before           # the journal went to the log file
    assert fstool("check", "--logdev", log, img).returncode == 0
    assert '"state": "clean"' in fstool("log", "info", "--json", "--logdev", log, img).stdout
    assert_repair_clean(img, log)
    with extlog.Mounted(img, log) as mnt:
        assert (mnt / "d" / "f").read_bytes() == b"populated"
        assert (mnt / "made").is_dir()
        (mnt / "made" / "by-kernel").write_bytes(b"k")
    assert fstool("cat", img, "/made/by-kernel").stdout == "k"
    assert_repair_clean(img, log)


@needs_kernel
def test_admin_uuid_change_marks_the_log_file_clean_with_it(kernel, tmp_path):
    """A new UUID and the old one restored: the unmount records carrying
    the nil UUID and then the new one go to the log file, which reads as
    clean, xfs_repair -n finds nothing and the kernel (which refuses a log
    whose newest record carries another UUID) mounts it."""
    img, log = extlog.copy(*kernel, tmp_path, "u")
    for spec in ("generate", "restore"):
        before = open(log, "rb").read()
        r = fstool("admin", "--logdev", log, img, "-U", spec)
        assert "log marked clean with the new UUID" in r.stdout, r.stdout
        assert open(log, "rb").read() != before
        assert '"state": "clean"' in fstool("log", "info", "--json", "--logdev", log,
                                            img).stdout
        assert fstool("check", "--logdev", log, img).returncode == 0
        assert_repair_clean(img, log)
        with extlog.Mounted(img, log) as mnt:
            assert (mnt / "etc" / "file001").read_bytes() == b"x" * 97
        assert_repair_clean(img, log)


# -- metadump -------------------------------------------------------------------------------
@needs_kernel
def test_metadump_v2_carries_the_log(kernel, tmp_path):
    if not modern.available():
        pytest.skip(modern.WHY)
    img, log = kernel
    ours = tmp_path / "ours.md"
    r = fstool("metadump", "--json", "--logdev", log, img, ours)
    assert '"version": 2' in r.stdout
    rest, rlog = tmp_path / "r.img", tmp_path / "r.log"
    subprocess.run([modern.tool("xfs_mdrestore"), "-l", str(rlog), str(ours), str(rest)],
                   check=True, capture_output=True)
    assert os.path.getsize(rlog) == os.path.getsize(log)
    assert_repair_clean(rest, rlog)
    assert fstool("check", ours).returncode == 0        # the dump read in place, its log too
    # names kept, blocks whole: xfs_metadump's own bytes
    theirs, ours_oa = tmp_path / "theirs.md", tmp_path / "ours-oa.md"
    env = dict(os.environ, PATH=f"{os.path.dirname(modern.tool('xfs_db'))}:"
                                f"{os.environ['PATH']}")
    subprocess.run([modern.tool("xfs_metadump"), "-f", "-o", "-a", "-v", "2", "-l", str(log),
                    str(img), str(theirs)], check=True, capture_output=True, env=env)
    fstool("metadump", "-o", "-a", "--logdev", log, img, ours_oa)
    assert open(theirs, "rb").read() == open(ours_oa, "rb").read()
    # a v1 dump cannot hold it: left out with a warning
    r = fstool("metadump", "-v", "1", "--logdev", log, img, tmp_path / "v1.md")
    assert "v1 dump cannot hold it" in r.stderr


# -- a log device shorter than the log ----------------------------------------------------
@needs_mkfs
def test_log_device_shorter_than_the_log_is_said_in_one_line(made, tmp_path):
    img, log = extlog.copy(*made, tmp_path, "short")
    need = os.path.getsize(log)
    os.truncate(log, need // 2)
    stamps = [os.stat(p).st_mtime_ns for p in (img, log)]
    for args, code in ((("check",), 4), (("log", "zero", "-f"), 2), (("log", "replay"), 2),
                       (("log", "info"), 2), (("mkdir",), 2), (("repair",), 2)):
        extra = ["/d"] if args == ("mkdir",) else []
        r = fstool(*args, "--logdev", log, img, *extra, check=False)
        one_line_error(r, code)
        assert f"holds {need // 2} bytes" in r.stderr and f"needs {need}" in r.stderr, r.stderr
        assert "dirty" not in r.stderr and "replay" not in r.stderr, r.stderr
    assert [os.stat(p).st_mtime_ns for p in (img, log)] == stamps    # nothing written


# -- undo files ---------------------------------------------------------------------------
@needs_mkfs
def test_undo_file_is_refused_when_the_log_is_external(made, tmp_path):
    """An undo file holds the image's blocks only: what repair and resize
    write into the external log could not be put back, so --undo-file is
    refused up front (nothing written, no undo file made)."""
    img, log = extlog.copy(*made, tmp_path, "undo")
    stamps = [os.stat(p).st_mtime_ns for p in (img, log)]
    undo = tmp_path / "u.undo"
    for args in (("repair",), ("resize", "--size", "400m")):
        r = fstool(*args, "--undo-file", undo, "--logdev", log, img, check=False)
        one_line_error(r, 2)
        assert "--undo-file" in r.stderr and "external log" in r.stderr, r.stderr
        assert not undo.exists()
    assert [os.stat(p).st_mtime_ns for p in (img, log)] == stamps    # nothing written
    # -n writes nothing: the undo file is not needed, and not refused
    assert fstool("repair", "-n", "--undo-file", undo, "--logdev", log, img).returncode == 0


# -- resize -------------------------------------------------------------------------------
@needs_mkfs
def test_resize_never_takes_an_external_log_for_blocks_of_ag0(made, tmp_path):
    """sb_logstart 0 is an external log, not one at AG 0 block 0: the
    shrink's log placement and the grow's geometry say no AG holds it, and
    a grow then a shrink to the minimum leave both files clean for
    xfs_repair -n -l."""
    img, log = extlog.copy(*made, tmp_path, "rs")
    with Filesystem(str(img), logdev=str(log)) as fs:
        sb = fs.sb
        assert RS.log_extent(sb)[0] == RS.NO_LOG_AG
        # one AG cut below the log's length: an internal log at AG 0 block 0
        # would lie outside it
        assert not RS.log_outside(sb, sb.logblocks // 2, 1)
        geo = mkfs_geometry(sb, sb.dblocks, sb.agcount)
        assert not 0 <= geo.logagno < sb.agcount
    fstool("resize", "--logdev", log, img, "--size", "600m")
    assert_repair_clean(img, log)
    fstool("resize", "--logdev", log, img, "-M")
    assert_repair_clean(img, log)
    assert fstool("check", "--logdev", log, img).returncode == 0


# -- the guards cover the log too -----------------------------------------------------------
def busy_line(r) -> str:
    """The one line a refused writer prints (status 7, nothing else)."""
    assert r.returncode == 7, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


WRITERS = [("mkdir", "{img}", "/d"), ("admin", "{img}", "-L", "busy"),
           ("log", "zero", "-f", "{img}"), ("log", "replay", "{img}"), ("repair", "{img}"),
           ("resize", "{img}", "--size", "400m"), ("sparsify", "{img}")]


def _run_writers(img, log) -> list:
    out = []
    for args in WRITERS:
        args = [a.format(img=img) for a in args]
        cut = 2 if args[0] == "log" else 1
        out.append(fstool(*args[:cut], "--logdev", log, *args[cut:], check=False))
    return out


@needs_mkfs
def test_writers_refuse_a_log_another_fstool_holds(made, tmp_path):
    """Another fstool holding the external log (its writer's lock) keeps
    every writer out, though the image itself is free: status 7, one line
    naming the log, nothing written; let go, they write again."""
    from fstool.io.device import Device
    from fstool.io.lock import ImageLock
    img, log = extlog.copy(*made, tmp_path, "held")
    stamps = [os.stat(p).st_mtime_ns for p in (img, log)]
    dev = Device(str(log), whole=True)
    try:
        with ImageLock(dev, str(log), None):
            for r in _run_writers(img, log):
                line = busy_line(r)
                assert f"{log}: another fstool is using this external log" in line, line
        assert [os.stat(p).st_mtime_ns for p in (img, log)] == stamps
    finally:
        dev.close()
    assert fstool("mkdir", "--logdev", log, img, "/free").returncode == 0
    assert_repair_clean(img, log)


@needs_mkfs
def test_a_writer_holds_the_log_while_it_writes(made, tmp_path):
    """The lock a writer takes covers its external log: the API's writer
    on the image keeps a second image that names the same log out."""
    from fstool.errors import ImageBusy
    from fstool.io.logdev import pair
    from fstool.ns.writer import Writer
    img, log = extlog.copy(*made, tmp_path, "w1")
    other = tmp_path / "other.img"
    shutil.copy(img, other)
    pair(img, log)
    pair(other, log)
    try:
        with Writer(str(img)):
            with pytest.raises(ImageBusy, match="another fstool is using this external log"):
                Writer(str(other))
        with Writer(str(other)):               # let go with the first
            pass
    finally:
        pair(img, None)
        pair(other, None)


@needs_kernel
def test_writers_refuse_a_log_the_kernel_uses(made, tmp_path):
    """The log file attached to a loop device, and that device the log of
    a kernel mount (here of a copy of the image: the image itself is
    free), keeps every writer out: status 7, one line saying what holds
    the log; nothing written."""
    img, log = extlog.copy(*made, tmp_path, "k")
    twin, _ = extlog.copy(*made, tmp_path, "twin")
    stamps = [os.stat(p).st_mtime_ns for p in (img, log)]
    loop = subprocess.run(["losetup", "-f", "--show", str(log)], check=True,
                          capture_output=True, text=True).stdout.strip()
    try:
        line = busy_line(fstool("mkdir", "--logdev", log, img, "/d", check=False))
        assert f"{log} (the external log of {img}): is attached to {loop}" in line, line
    finally:
        subprocess.run(["losetup", "-d", loop], check=True)
    assert [os.stat(p).st_mtime_ns for p in (img, log)] == stamps
    with extlog.Mounted(twin, log) as mnt:
        stamps = [os.stat(p).st_mtime_ns for p in (img, log)]
        for r in _run_writers(img, log):
            line = busy_line(r)
            assert "is the log device of the filesystem mounted at " \
                   f"{mnt}" in line and "unmount it first" in line, line
        assert [os.stat(p).st_mtime_ns for p in (img, log)] == stamps


# -- killed after a write: each prefix recovers ------------------------------------------------
def _state(img) -> tuple:
    """The tree as fstool reads it (fixtures.crashwork.image_state) and the
    label: what a writer below changes.  The times a command takes from the
    clock (every ctime, a directory's mtime) are left out: the killed run
    and the whole one set them a moment apart."""
    from fixtures.crashwork import image_state
    with Filesystem(str(img)) as fs:
        label = fs.sb.fields["sb_fname"]
    tree = image_state(img)
    for rec in tree:
        rec.pop("ctime")
        if rec["mode"] & 0o170000 == 0o040000:
            rec.pop("mtime")
    return tree, label


def _inode_of(img, path) -> int:
    with Filesystem(str(img)) as fs:
        return fs.lookup(path).ino


def _writes(args, img, log, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fstool", args[0], "--logdev", str(log),
                           str(img), *map(str, args[1:])], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


KILLED = {
    # a journaled writer: a file's data, its inode, its directory entry
    "put": lambda tmp: ("put", tmp / "src.bin", "/etc/sub/put.bin"),
    # the label in every superblock, journaled
    "admin": lambda tmp: ("admin", "-L", "killed"),
    # repair of a link count (xfs_db set /etc/file002's to 7 first)
    "repair": lambda tmp: ("repair",),
}


@needs_kernel
@pytest.mark.parametrize("command", KILLED)
def test_killed_after_a_write_each_prefix_recovers(kernel, command, tmp_path):
    """A writer on an external-log image killed after its Nth write (the
    fault hook: FSTOOL_FAULT_AFTER_WRITES; the writes to the log file count
    with the image's): ``fstool log replay --logdev`` of one copy and the
    kernel's mount -o logdev= of another each give the state before the
    command or after it, and the one after is clean for xfs_repair -n -l
    (both releases); before a repair, the damage xfs_repair -n found.
    By default a sample of the writes (fixtures/killpoints.py), with
    FSTOOL_EVERY_WRITE=1 after each."""
    base = extlog.copy(*kernel, tmp_path, "base")
    (tmp_path / "src.bin").write_bytes(os.urandom(150_000))
    if command == "repair":
        ino = _inode_of(base[0], "/etc/file002")
        subprocess.run(["xfs_db", "-x", "-l", str(base[1]), "-c", f"inode {ino}",
                        "-c", "write core.nlinkv2 7", str(base[0])], check=True,
                        capture_output=True)
        assert repair_n(*base).returncode != 0
    args = KILLED[command](tmp_path)
    before = _state(base[0])
    done = extlog.copy(*base, tmp_path, "done")
    wlog = tmp_path / "writes.log"
    r = _writes(args, *done, env={"FSTOOL_WRITE_LOG": str(wlog)})
    assert r.returncode in (0, 1), r.stderr          # repair: 1, it mended something
    after = _state(done[0])
    assert after != before
    assert_repair_clean(*done)
    logged = [line.split()[2] for line in wlog.read_text().splitlines()]
    total = len(logged)
    assert any(p == str(done[1]) for p in logged), "nothing written to the log file"
    # nothing is committed before the first write to the log file: a kill
    # there leaves the state before; once a prefix gives the state after,
    # every longer one does
    first_log = logged.index(str(done[1])) + 1
    seen = []
    for n in killpoints.points(total, [first_log - 1], seed=command):
        a = extlog.copy(*base, tmp_path, "a")
        r = _writes(args, *a, env={"FSTOOL_FAULT_AFTER_WRITES": str(n)})
        assert r.returncode == -9, (n, r.returncode, r.stderr)
        b = extlog.copy(*a, tmp_path, "b")
        r = fstool("log", "replay", "--logdev", a[1], a[0], check=False)
        assert r.returncode == 0, (n, r.stdout, r.stderr)
        with extlog.Mounted(*b):
            pass                                    # the kernel replays at mount
        for img, log in (a, b):
            got = _state(img)
            assert got in (before, after), f"killed after write {n}: neither state"
            if got == after:
                assert_repair_clean(img, log)
            else:
                assert repair_n(img, log).returncode == repair_n(*base).returncode, n
            seen.append((n, got == after))
    assert all(not done_ for n, done_ in seen if n < first_log), seen
    assert all(done_ for n, done_ in seen if n == total), seen
    firsts = [n for n, done_ in seen if done_]
    assert all(done_ for n, done_ in seen if firsts and n >= min(firsts)), seen


# -- the log is paired with the image under any of its names -----------------------------------
@needs_mkfs
def test_a_writer_through_another_name_of_the_image_holds_its_log(made, tmp_path, monkeypatch):
    """--logdev pairs the log with the image itself, not with the name the
    image was given by: a writer opened on a symlink, a hard link, ./NAME
    or the absolute path of the image finds the log and holds it (another
    fstool taking the log through a symlink to it is refused)."""
    from fstool.errors import ImageBusy
    from fstool.io.device import Device
    from fstool.io.lock import ImageLock
    from fstool.io.logdev import pair, paired
    from fstool.ns.writer import Writer
    img, log = extlog.copy(*made, tmp_path, "named")
    os.symlink(img, tmp_path / "sym.img")
    os.link(img, tmp_path / "hard.img")
    os.symlink(log, tmp_path / "sym.log")
    monkeypatch.chdir(tmp_path)
    pair("named.img", str(log))
    try:
        for name in ("sym.img", "hard.img", "./named.img", str(img)):
            assert paired(name) == str(log), name
            with Writer(name):
                dev = Device(str(tmp_path / "sym.log"), whole=True)
                try:
                    with pytest.raises(ImageBusy, match="another fstool is using"):
                        with ImageLock(dev, "sym.log", None):
                            pass
                finally:
                    dev.close()
    finally:
        pair("named.img", None)
    assert paired("sym.img") is None


@needs_mkfs
def test_two_writers_through_two_names_of_the_log(made, tmp_path):
    """The mount (a writer for as long as it runs; its daemon works from /
    and names the image by its absolute path) given the image and its log
    by relative names, and a second writer given the same log through a
    symlink: the mount finds its log, and the second writer is refused
    (status 7, one line naming the log)."""
    from fixtures.fusemount import fuse_skip_reason
    why = fuse_skip_reason()
    if why:
        pytest.skip(f"needs FUSE: {why}")
    img, log = extlog.copy(*made, tmp_path, "m")
    other, _ = extlog.copy(*made, tmp_path, "o")
    os.symlink(log, tmp_path / "link.log")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run([sys.executable, "-m", "fstool", "mount", "--logdev",
                        os.path.relpath(log, tmp_path), "m.img",
                        str(mnt)], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(
                           os.path.abspath(__file__)))))
    assert r.returncode == 0, r.stderr
    try:
        (mnt / "made").mkdir()
        line = busy_line(fstool("mkdir", "--logdev", tmp_path / "link.log", other, "/d",
                                check=False))
        assert f"{tmp_path / 'link.log'}: another fstool is using this external log" in line
    finally:
        assert fstool("umount", mnt).returncode == 0
    assert_repair_clean(img, log)
