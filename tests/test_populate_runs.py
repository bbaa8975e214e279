"""populate's batch path for plain files (runs of empty and small files from
DirSource, their data read a slice at a time, inodes encoded a chunk at a
time; runs of empty files from a protofile) must leave exactly the image
the entry-by-entry path leaves, on both backends."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import fstool_native
from fstool.format import constants as C
from fstool.fs.icore import _BIG_OFF, InodeEncoder
from fstool.ops.populate import populate
from fstool.ops.sources import DirSource, EmptyFiles, ProtoSource
from fixtures import modern

UUID = "0b5a3f1c-9d2e-4c7a-8e61-3f2a1b0c9d8e"
needs_xfsprogs = pytest.mark.skipif(subprocess.run(["which", "xfs_repair"],
                                                   capture_output=True).returncode != 0,
                                    reason="xfsprogs (xfs_repair) not installed")


class OneByOne:
    """A source (a DirSource of ``root`` unless given) seen only through
    iteration: no runs, every file an Entry."""

    def __init__(self, root, src=None):
        self.src = src if src is not None else DirSource(root)

    def __iter__(self):
        return iter(self.src)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def make_tree(root: Path) -> None:
    root.mkdir()
    for d, n in (("a", 3), ("b", 150), ("c", 700)):
        sub = root / d
        sub.mkdir()
        for i in range(n):
            p = sub / f"f{i:05d}"
            p.touch()
            os.chmod(p, (0o644, 0o600, 0o4755, 0o000)[i % 4])
            os.utime(p, ns=(1_600_000_000_000_000_000 + i * 7919,
                            -(2**31) * 10**9 if i % 97 == 5 else 1_500_000_000_123_456_789 + i))
            if i % 61 == 7:
                os.chown(p, 1000 + i, 2000 + i)
            if i % 89 == 3:
                with open(p, "wb") as f:
                    f.write(b"data")
            if i % 113 == 9:
                os.link(p, sub / f"f{i:05d}.link")
            if i % 127 == 11:
                os.setxattr(p, "user.k", b"v")
            if i % 13 == 4:
                # data around block boundaries and the small-file limit
                # (65,536 bytes; larger files are copied the general way)
                n = (1, 511, 4095, 4096, 4097, 8193, 65535, 65536, 65537, 200_000)[i // 13 % 10]
                with open(p, "wb") as f:
                    f.write(bytes((i * 7 + j) % 251 for j in range(min(n, 300))) * (n // 300) +
                            b"z" * (n % 300))
                os.utime(p, ns=(1_600_000_000_000_000_000 + i, 1_500_000_000_000_000_000 + i))
            if i % 211 == 17:
                # small but sparse: not a run, its hole kept
                with open(p, "wb") as f:
                    f.seek(40_000)
                    f.write(b"end")
    # files beside the destination's existing entries (its directory is
    # changed in place, entry by entry)
    (root / "top-small").write_bytes(b"s" * 5000)
    (root / "top-large").write_bytes(bytes(range(256)) * 1000)
    (root / "top-empty").touch()
    (root / "c" / "deeper").mkdir()
    (root / "c" / "deeper" / "e").touch()


def mkfs(img: Path, bigtime: bool) -> None:
    if bigtime:
        subprocess.run([sys.executable, "-m", "fstool", "mkfs", str(img), "--size", "256m",
                        "--uuid", UUID, "-q"], check=True)
    else:       # fstool mkfs always sets bigtime
        subprocess.run(["truncate", "-s", "320m", str(img)], check=True)
        subprocess.run(["mkfs.xfs", "-q", "-f", "-m", f"uuid={UUID},bigtime=0", str(img)],
                       check=True)


class FailingReads:
    """writers with read_files reporting every ``every``-th file of a slice
    as unreadable (after reading or opening it), as if it had gone or been
    made unreadable between the walk's lstat and the read."""

    def __init__(self, real, every: int):
        self.real = real
        self.every = every

    def __getattr__(self, name):
        return getattr(self.real, name)

    def read_files(self, dirfd, names, sizes, buf, offsets, dirfds=None):
        bad, fds = self.real.read_files(dirfd, names, sizes, buf, offsets, dirfds)
        failed = set(range(1, len(names), self.every))
        for k in failed:
            if fds[k] >= 0:
                os.close(fds[k])
                fds[k] = -1
        return sorted(set(bad) | {(k, 13) for k in failed}), fds


@pytest.mark.parametrize("bigtime,failing,inline", [
    (True, False, None), (False, False, None), (True, True, None),
    # every slice read on the reader's thread, or every one in its turn, or
    # the small first slices handed over two runs at a time
    (True, False, "never"), (True, True, "always"), (True, True, "pairs"),
    (True, False, "pairs"),
    # every larger file copied by the device's thread behind (on this host
    # it may share blocks instead, which is never done behind)
    (True, False, "behind")])
def test_runs_leave_the_same_image(tmp_path, monkeypatch, bigtime, failing, inline):
    src = tmp_path / "src"
    make_tree(src)
    # runs come for plain files of any size without holes, and all of them
    # are there
    runs = [e for e in DirSource(src).entries(runs=True) if isinstance(e, EmptyFiles)]
    assert runs and sum(len(r.items) for r in runs) > 700
    sizes = {it[6] for r in runs for it in r.items}
    assert {0, 1, 4096, 4097, 65536, 65537, 200_000} <= sizes and 40_003 not in sizes
    import fstool.ops.populate as P
    if failing:
        monkeypatch.setattr(P, "writers", FailingReads(P.writers, 3))
    groups = []
    if inline == "pairs":
        monkeypatch.setattr(P, "GROUP_RUNS", 2)
        real_group = P.RunReader._read_group
        monkeypatch.setattr(P.RunReader, "_read_group",
                            staticmethod(lambda jobs: groups.append(len(jobs)) or
                                         real_group(jobs)))
    elif inline == "behind":
        groups = force_copies_behind(monkeypatch)
    elif inline is not None:
        monkeypatch.setattr(P, "RUN_INLINE", -1 if inline == "never" else 1 << 40)
        monkeypatch.setattr(P, "RUN_INLINE_OPEN", -1 if inline == "never" else 1 << 20)
        if inline == "always":      # no run read ahead of its turn
            monkeypatch.setattr(P.RunReader, "start", lambda self, run: (0, 0))
    if not bigtime and subprocess.run(["which", "mkfs.xfs"], capture_output=True).returncode:
        pytest.skip("mkfs.xfs not installed")
    empty = tmp_path / "empty.img"
    mkfs(empty, bigtime)
    imgs = []
    for k, source in enumerate((src, OneByOne(src))):
        img = tmp_path / f"{k}.img"
        img.write_bytes(empty.read_bytes())
        populate(img, source, timestamp_ns=1_700_000_000 * 10**9)
        # a second pass over the same tree replaces every name
        populate(img, source, "/again", timestamp_ns=1_700_000_000 * 10**9)
        populate(img, source, "/again", timestamp_ns=1_700_000_000 * 10**9)
        imgs.append(img.read_bytes())
    assert imgs[0] == imgs[1]
    if inline == "pairs":
        # small first slices were read two runs to a hand-over
        assert 2 in groups
    if inline == "behind":
        # the runs' copies were made behind (the one-by-one path's are not)
        assert "fstool-data" in groups
    if subprocess.run(["which", "xfs_repair"], capture_output=True).returncode == 0:
        r = subprocess.run(["xfs_repair", "-n", "-f", str(tmp_path / "0.img")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout[-2000:]


def test_many_small_directories_stay_within_the_open_file_limit(tmp_path):
    """Each run read ahead holds its directory open: those count against the
    read-ahead's file bound, so a tree of many directories with a small file
    each populates under a low limit on open files."""
    src = tmp_path / "src"
    for i in range(600):
        (src / f"d{i:03d}").mkdir(parents=True)
        (src / f"d{i:03d}" / "f").write_bytes(b"x" * (i % 50 + 1))
    img = tmp_path / "a.img"
    mkfs(img, True)
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256)); "
            "from fstool.ops.populate import populate; "
            "st = populate(sys.argv[1], sys.argv[2]); print(st.files)")
    r = subprocess.run([sys.executable, "-c", code, str(img), str(src)],
                       capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert r.returncode == 0 and r.stdout.split() == ["600"], r.stderr[-2000:]


def force_copies_behind(monkeypatch) -> list:
    """Every copy of a larger file given to the device's thread behind, as
    where the source lies on another filesystem than the image; the list
    returned gets the name of the thread that made each copy."""
    from fstool.io.device import Device
    from fstool.ns import files as F
    monkeypatch.setattr(Device, "can_copy_behind", lambda self, fd: self._behind is not None)
    threads = []
    real = F.copy_blocks

    def noted(*args):
        import threading
        threads.append(threading.current_thread().name)
        return real(*args)
    monkeypatch.setattr(F, "copy_blocks", noted)
    return threads


@pytest.mark.parametrize("behind", [False, True])
def test_a_copy_failing_in_a_run_names_the_file_and_keeps_the_image(tmp_path, monkeypatch,
                                                                   behind):
    """A larger file of a run that cannot be copied (read error half way)
    ends populate with the file named, and the image as it was; also when
    the copy is made by the device's thread behind populate (the error is
    met after populate has gone on to the next files, whose copies are then
    not made)."""
    import errno

    from fstool.errors import FsToolError
    from fstool.ns import files as F
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    for i in range(5):
        (src / "sub" / f"f{i}").write_bytes(os.urandom(300_000))
    (src / "sub" / "g").write_bytes(b"small")
    img = tmp_path / "a.img"
    mkfs(img, True)
    before = img.read_bytes()
    if behind:
        force_copies_behind(monkeypatch)
    threads = []

    def failing(*args):
        import threading
        threads.append(threading.current_thread().name)
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(F, "copy_blocks", failing)
    with pytest.raises(FsToolError, match=r"^sub: f0: cannot copy: Input/output error$"):
        populate(img, DirSource(src))
    # f0's copy only: none after it was made
    assert threads == ["fstool-data" if behind else "MainThread"]
    assert img.read_bytes() == before


def write_protofile(tmp: Path, comment: bool) -> Path:
    """A protofile whose empty files come in runs broken by everything that
    ends one: another kind of entry, a file with data, a subdirectory (the
    run after it belongs to the parent again), a name given twice, new
    modes and owners."""
    (tmp / "empty").touch()
    (tmp / "data").write_bytes(b"some data")
    lines = ["/dev/null", "0 0", "d--755 0 0", "a d--755 0 0"]
    for i in range(300):
        mode = ("---644", "-u-755", "--g600", "---000")[i % 4]
        owner = "0 0" if i % 7 else f"{1000 + i} {2000 + i}"
        lines.append(f"  f{i:04d} {mode} {owner} empty")
        if i == 40:
            lines.append("  withdata ---644 0 0 data")
        if i == 90:
            lines += ["  sub d--750 3 4", "    inner ---644 0 0 empty", "    $"]
        if i in (10, 120):
            # again, in the same run and in a later one: replaced
            lines.append(f"  f{i - 1:04d} ---600 5 5 empty")
        if i == 150:
            lines.append("  lnk l--777 0 0 f0001")
        if i == 200:
            lines.append("  caf\u00e9-\u00fcber ---644 0 0 empty")
        if comment and i == 250:
            lines.append("# a comment line")
    lines += ["  $", "top ---644 0 0 empty", "$"]
    proto = tmp / "proto"
    proto.write_text("\n".join(lines) + "\n")
    return proto


@pytest.mark.parametrize("comment", [False, True])
def test_protofile_runs_leave_the_same_image(tmp_path, comment):
    """A protofile read with runs of empty files gives the image that the
    same protofile read entry by entry gives."""
    proto = write_protofile(tmp_path, comment)
    now = 1_700_000_000 * 10**9
    runs = [e for e in ProtoSource(proto, now_ns=now, ).entries(runs=True)
            if isinstance(e, EmptyFiles)]
    assert sum(len(r.items) for r in runs) > 250
    assert {r.path for r in runs} == {"a", "a/sub", ""}
    empty = tmp_path / "empty.img"
    mkfs(empty, True)
    imgs = []
    for k in range(2):
        src = ProtoSource(proto, now_ns=now)
        img = tmp_path / f"{k}.img"
        img.write_bytes(empty.read_bytes())
        populate(img, src if k == 0 else OneByOne(None, src), timestamp_ns=now)
        imgs.append(img.read_bytes())
    assert imgs[0] == imgs[1]
    import fstool
    with fstool.open_image(tmp_path / "0.img") as fs:
        assert len(fs.listdir("/a")) == 300 + 4
        assert fs.stat("/a/caf\u00e9-\u00fcber").st_size == 0
        for again in ("/a/f0009", "/a/f0119"):
            assert fs.stat(again).st_uid == 5 and fs.stat(again).st_mode & 0o7777 == 0o600
        assert fs.stat("/a/f0007").st_uid == 1007 and fs.stat("/a/f0007").st_gid == 2007
        assert fs.stat("/a/sub/inner").st_size == 0 and fs.stat("/top").st_size == 0
        assert fs.open("/a/withdata").read() == b"some data"
    if subprocess.run(["which", "xfs_repair"], capture_output=True).returncode == 0:
        r = subprocess.run(["xfs_repair", "-n", "-f", str(tmp_path / "0.img")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout[-2000:]


@pytest.mark.parametrize("pure", [False, True])
def test_fill_simple_inodes_equals_template_encoding(pure):
    writers = fstool_native.load(pure=pure, name="writers")
    parsers = fstool_native.load(pure=pure)
    uuid = bytes(range(16))
    enc = InodeEncoder(512, uuid, bigtime=True, nrext64=False)
    tpl = enc.simple_template(C.S_IFREG)
    base = 4096
    inos = [base + i for i in (0, 3, 4, 63)]
    items = [(b"n", 0o644, 0, 0, 0, 0), (b"n", 0o7777, 2**32 - 1, 7, -(2**31) * 10**9, 1),
             (b"n", 0o600, 5, 6, -_BIG_OFF - 1, 0),            # before the format's range
             (b"n", 0o755, 1, 2, 2**62, 10**18)]
    buf = bytearray(64 * 512)
    ct = 1_700_000_000 * 10**9
    k = writers.fill_simple_inodes(buf, tpl, base, inos, items, 0, 4, C.S_IFREG, ct, _BIG_OFF,
                                   C.XFS_DINODE_CRC_OFF, parsers.xfs_cksum)
    assert k == 2
    k = writers.fill_simple_inodes(buf, tpl, base, inos, items, 3, 4, C.S_IFREG, ct, _BIG_OFF,
                                   C.XFS_DINODE_CRC_OFF, parsers.xfs_cksum)
    assert k == 4
    for ino, it in zip(inos, items):
        if it is items[2]:
            continue
        _n, perm, uid, gid, at, mt = it
        off = (ino - base) * 512
        assert bytes(buf[off:off + 512]) == \
            enc.simple(ino, C.S_IFREG | perm, uid, gid, at, mt, ct, ct)
    with pytest.raises(ValueError):
        writers.fill_simple_inodes(buf, tpl, base, [base + 64], items, 0, 1, C.S_IFREG, ct,
                                   _BIG_OFF, C.XFS_DINODE_CRC_OFF, parsers.xfs_cksum)


@pytest.mark.parametrize("pure", [False, True])
@pytest.mark.parametrize("nrext64", [False, True])
def test_fill_simple_inodes_with_extents_equals_the_encoder(pure, nrext64):
    """Inodes given an extent-format data fork are the general encoder's."""
    from fstool.fs.icore import InodeSpec
    from fstool.ns.files import pack_extents
    writers = fstool_native.load(pure=pure, name="writers")
    parsers = fstool_native.load(pure=pure)
    enc = InodeEncoder(512, bytes(range(16)), bigtime=True, nrext64=nrext64)
    tpl = enc.simple_template(C.S_IFREG)
    base = 8192
    inos = [base + 1, base + 2, base + 5]
    items = [(b"a", 0o644, 1, 2, 10**18, 2 * 10**18, 5000),
             (b"b", 0o600, 0, 0, 5, 6, 0),
             (b"c", 0o755, 9, 9, 7, 8, 65536)]
    forks = [(5000, 2, 1, pack_extents([(0, 123456, 2)])), (0, 0, 0, b""),
             (65536, 16, 3, pack_extents([(0, 77, 5), (5, 99, 10), (15, 1 << 40, 1)]))]
    ct = 1_700_000_000 * 10**9
    buf = bytearray(64 * 512)
    assert writers.fill_simple_inodes(buf, tpl, base, inos, items, 0, 3, C.S_IFREG, ct,
                                      _BIG_OFF, C.XFS_DINODE_CRC_OFF, parsers.xfs_cksum, forks,
                                      nrext64) == 3
    for ino, it, (size, nblocks, nextents, recs) in zip(inos, items, forks):
        off = (ino - base) * 512
        assert bytes(buf[off:off + 512]) == enc.encode(ino, InodeSpec(
            mode=C.S_IFREG | it[1], uid=it[2], gid=it[3], atime_ns=it[4], mtime_ns=it[5],
            ctime_ns=ct, crtime_ns=ct, size=size, nblocks=nblocks, nextents=nextents,
            data=recs))
    with pytest.raises(ValueError):         # records that do not fill the count
        writers.fill_simple_inodes(buf, tpl, base, inos, items, 0, 1, C.S_IFREG, ct, _BIG_OFF,
                                   C.XFS_DINODE_CRC_OFF, parsers.xfs_cksum,
                                   [(1, 1, 2, forks[0][3])], nrext64)
    with pytest.raises(ValueError):         # more records than the inode holds
        writers.fill_simple_inodes(buf, tpl, base, inos, items, 0, 1, C.S_IFREG, ct, _BIG_OFF,
                                   C.XFS_DINODE_CRC_OFF, parsers.xfs_cksum,
                                   [(1, 1, 40, bytes(640))], nrext64)


def test_read_files_backends_agree(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    files = {b"one": b"1", b"block": bytes(range(256)) * 16, b"odd": b"o" * 5000,
             b"empty": b"", b"limit": b"L" * 65536, b"large": b"G" * 300_000}
    for name, data in files.items():
        (d / os.fsdecode(name)).write_bytes(data)
    (d / "sub").mkdir()
    os.symlink("one", d / "sym")
    os.mkfifo(d / "fifo")
    # names to read with the sizes lstat gave (one "grown", one "shrunk"
    # since); offset -1: to be opened and left open
    names = [b"one", b"block", b"missing", b"odd", b"sub", b"sym", b"empty", b"limit",
             b"large", b"fifo", b"sub"] + [b"one"] * 70 + [b"odd"]
    sizes = [1, 4096, 9, 3000, 10, 1, 0, 65536, 2 << 20, 5, 5] + [1] * 70 + [6000]
    opened = {8, 9, 10}
    offsets = []
    at = 0
    for k, n in enumerate(sizes):
        if k in opened:
            offsets.append(-1)
            continue
        offsets.append(at)
        at += (n + 4095) & ~4095
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        got = []
        for pure in (False, True):
            buf = bytearray(at)
            bad, fds = fstool_native.load(pure=pure, name="writers").read_files(
                fd, names, sizes, buf, offsets)
            kept = [k for k, f in enumerate(fds) if f >= 0]
            contents = [os.pread(fds[k], 10, 0) for k in kept]
            for k in kept:
                os.close(fds[k])
            got.append((bad, kept, contents, bytes(buf)))
        with pytest.raises(ValueError):
            fstool_native.load(name="writers").read_files(fd, [b"one"], [1], bytearray(0), [0])
    finally:
        os.close(fd)
    assert got[0] == got[1]
    bad, kept, contents, buf = got[0]
    # missing, a directory, a symlink; a FIFO and a directory are not kept open
    assert [k for k, _e in bad] == [2, 4, 5, 9, 10]
    assert kept == [8] and contents == [b"G" * 10]
    for k, (name, n) in enumerate(zip(names, sizes)):
        if k in (2, 4, 5) or k in opened:
            continue
        want = files[name][:n]
        assert buf[offsets[k]:offsets[k] + n] == want + bytes(n - len(want))



@pytest.mark.parametrize("pure", [False, True])
def test_read_files_of_several_directories(tmp_path, pure):
    """With ``dirfds``, each file is named relative to its own directory:
    the same name in two directories gives each one's bytes, a missing
    name or a bad descriptor fails that file alone."""
    dirs = []
    for k in range(3):
        d = tmp_path / f"d{k}"
        d.mkdir()
        (d / "f").write_bytes(bytes([65 + k]) * (100 + k))
        dirs.append(os.open(d, os.O_RDONLY | os.O_DIRECTORY))
    (tmp_path / "d1" / "big").write_bytes(b"B" * 100_000)
    writers = fstool_native.load(pure=pure, name="writers")
    try:
        names = [b"f", b"f", b"f", b"gone", b"big", b"f"]
        fds_of = [dirs[0], dirs[1], dirs[2], dirs[0], dirs[1], -1]
        sizes = [100, 101, 102, 5, 4096, 100]
        offsets = [0, 4096, 8192, 12288, -1, 16384]
        buf = bytearray(20480)
        bad, fds = writers.read_files(-1, names, sizes, buf, offsets, fds_of)
        assert [k for k, _e in bad] == [3, 5]
        assert fds[4] >= 0 and os.pread(fds[4], 3, 0) == b"BBB"
        os.close(fds[4])
        assert [bytes(buf[o:o + 102]) for o in (0, 4096, 8192)] == \
            [b"A" * 100 + bytes(2), b"B" * 101 + bytes(1), b"C" * 102]
        with pytest.raises(ValueError):
            writers.read_files(-1, names, sizes, buf, offsets, fds_of[:2])
    finally:
        for fd in dirs:
            os.close(fd)

def _mixed_dir(tmp_path, full: bytes):
    """A directory of one entry of each kind the scans tell apart."""
    d = tmp_path / "d"
    d.mkdir()
    (d / "empty").touch()
    (d / "full").write_bytes(full)
    (d / "linked").touch()
    os.link(d / "linked", d / "linked2")
    (d / "xattr").touch()
    os.setxattr(d / "xattr", "user.k", b"v")
    (d / "sub").mkdir()
    os.symlink("empty", d / "sym")
    os.mkfifo(d / "fifo")
    return d


def test_stat_plain_files_backends_agree(tmp_path):
    d = _mixed_dir(tmp_path, b"x")
    (d / "old").touch()
    os.utime(d / "old", ns=(-(2**31) * 10**9 + 5, 1))
    names = sorted(os.listdir(os.fsencode(d))) + [b"missing", b"nul\0name"]
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        got = [fstool_native.load(pure=pure, name="writers")
               .stat_plain_files(fd, os.fsencode(d), names) for pure in (False, True)]
    finally:
        os.close(fd)
    assert got[0] == got[1]
    plain = {it[0] for it in got[0] if it is not None}
    assert plain == {b"empty", b"old"}
    st = os.lstat(d / "old")
    assert (b"old", st.st_mode & 0o7777, st.st_uid, st.st_gid, st.st_atime_ns,
            st.st_mtime_ns) in got[0]
    # with a small-file limit: files up to it without holes, sizes appended
    (d / "limit").write_bytes(b"y" * 100)
    (d / "over").write_bytes(b"y" * 101)
    with open(d / "holes", "wb") as f:
        f.seek(50_000)
        f.write(b"z")
    names = sorted(os.listdir(os.fsencode(d))) + [b"missing", b"nul\0name"]
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        got = [fstool_native.load(pure=pure, name="writers")
               .stat_plain_files(fd, os.fsencode(d), names, limit)
               for limit in (100, 60_000) for pure in (False, True)]
    finally:
        os.close(fd)
    assert got[0] == got[1] and got[2] == got[3]
    sized = {it[0]: it[6] for it in got[0] if it is not None}
    assert sized == {b"empty": 0, b"old": 0, b"full": 1, b"limit": 100}
    assert {it[0] for it in got[2] if it is not None} == {b"empty", b"old", b"full", b"limit",
                                                         b"over"}


def test_scan_names_backends_agree(tmp_path):
    """scan_names, compiled (one call with the interpreter let go) and pure,
    describe every entry of a directory alike: plain files apart, the rest
    with their lstat fields, symlink targets and whether they have xattrs;
    an lstat that fails as its errno, a name with a NUL byte left to the
    caller."""
    import errno
    d = _mixed_dir(tmp_path, b"x" * 10)
    os.symlink("t" * 3000, d / "longsym")
    names = sorted(os.listdir(os.fsencode(d))) + [b"missing", b"nul\0name"]
    # the symlinks' access times are set apart from their change times, so
    # that reading them does not move them (relatime)
    for s in ("sym", "longsym"):
        os.utime(d / s, ns=(T_LATER, T_LATER - 10**9), follow_symlinks=False)
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        got = {(small, general, pure): fstool_native.load(pure=pure, name="writers")
               .scan_names(fd, os.fsencode(d), names, small, general)
               for small in (-1, 0, 100) for general in (False, True)
               for pure in (False, True)}
    finally:
        os.close(fd)
    for small in (-1, 0, 100):
        for general in (False, True):
            assert got[small, general, False] == got[small, general, True]
    plain, other = got[100, True, False]
    by = dict(zip(names, zip(plain, other)))
    assert {n for n, (p, _o) in by.items() if p is not None} == {b"empty", b"full"}
    assert by[b"full"][0][6] == 10
    assert all(p is None for p in got[-1, True, False][0])
    assert got[100, False, False][1] == [None] * len(names)
    assert by[b"missing"] == (None, errno.ENOENT)
    assert by[b"nul\0name"] == (None, None)
    for name in (b"sym", b"longsym", b"fifo", b"sub", b"linked", b"xattr"):
        st = os.lstat(d / os.fsdecode(name))
        o = by[name][1]
        assert o[:12] == (st.st_mode, st.st_nlink, st.st_uid, st.st_gid, st.st_size,
                          st.st_blocks, st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns,
                          st.st_dev, st.st_ino, st.st_rdev)
        assert o[12] == (len(b"user.k") + 1 if name == b"xattr" else 0)
        assert o[13:] == ((os.readlink(d / os.fsdecode(name)).encode(), 0)
                          if name.endswith(b"sym") else (None, 0))


T_LATER = 1_900_000_000 * 10**9


@pytest.mark.parametrize("dbs", [4096, 8192, 65536])
def test_dir_place_backends_agree(dbs):
    import random
    r = random.Random(dbs)
    w_native = fstool_native.load(name="writers")
    w_pure = fstool_native.load(pure=True, name="writers")
    for n in (0, 1, 30, 150, 3000, 20000):
        ents = [(b"x" * r.choice((1, 2, 7, 8, 20, 100, 255)), 1000 + i, 1) for i in range(n)]
        got = w_native.dir_place(ents, dbs, True, 64, 96)
        assert got == w_pure.dir_place(ents, dbs, True, 64, 96)
        form, where, used = got
        assert len(where) == n and form in ("block", "leaf", "node")
        assert all(u <= dbs for u in used)


def test_place_pooled_and_slice_bounds_backends_agree():
    """The compiled and the pure writers hand out a pool run's blocks, pack
    the forks and merge the writes alike, and cut slices alike; and the
    forks are the records fs.btree packs."""
    import random
    from fstool.fs.btree import pack_bmbt_rec
    r = random.Random(31)
    w_native = fstool_native.load(name="writers")
    w_pure = fstool_native.load(pure=True, name="writers")
    if not fstool_native.is_native(w_native):
        pytest.skip("the native build is absent")
    for _trial in range(40):
        n = r.randint(1, 300)
        sizes = [r.choice((0, 1, 4095, 4096, 4097, 65536, 65537, 300_000, 1 << 20))
                 for _ in range(n)]
        items = [(b"f%d" % k, 0o644, 0, 0, 0, 0, s) for k, s in enumerate(sizes)]
        args = (items, r.randint(0, n - 1), 4095, 65536, r.choice((1 << 16, 8 << 20)),
                r.choice((1, 64)), 2 << 20)
        bounds = w_native.slice_bounds(*args)
        assert bounds == w_pure.slice_bounds(*args)
        a, b, _o, offsets, _want, _nopen = bounds
        fds = [-1 if off >= 0 else 7 for off in offsets]
        # a run near the end of AG 3 of 2^20-block AGs (agblocks 1,000,000)
        start = (3 << 20) + r.choice((10, 999_000, 999_990))
        got = []
        for w in (w_native, w_pure):
            run = [start, 1500]
            forks, writes, places = [], [[0, 0, 0]], []
            stop = w.place_pooled(items[a:b], offsets, fds, 0, b - a, run, 64, 12, 20,
                                  1_000_000, forks, writes, places)
            got.append((stop, run, forks, writes, places))
        assert got[0] == got[1]
        stop, run, forks, writes, places = got[0]
        for k, fsbno, nblk in places:
            assert forks[k] == (items[a + k][6], nblk, 1, pack_bmbt_rec(0, fsbno, nblk))
        assert run[0] == start + sum(p[2] for p in places)
        assert (run[0] & ((1 << 20) - 1)) <= 1_000_000
        if stop < b - a:
            it = items[a + stop]
            nblk = (it[6] + 4095) >> 12
            assert fds[stop] != -1 or nblk > 64 or nblk > 1500 - sum(p[2] for p in places) \
                or (start & ((1 << 20) - 1)) + sum(p[2] for p in places) + nblk > 1_000_000


def test_sf_dir_fork_backends_agree_and_decode():
    """The shortform directory encoder (writers.sf_dir_fork, used by the
    bulk directory builder): both backends give the same bytes, which the
    read side decodes to the parent and the entries given, with offsets
    rising from DATA_FIRST by each entry's data size; None exactly when the
    fork would take more than the room given."""
    import random
    from fstool.fs.dirform.data import entsize
    from fstool.ns.dirbuild import DATA_FIRST
    parsers = fstool_native.load(pure=True)
    backends = [fstool_native.load(pure=True, name="writers"),
                fstool_native.load(name="writers")]
    rng = random.Random(29)
    fits = 0
    for _ in range(3000):
        wide = rng.random() < 0.2
        entries = [(bytes(rng.randrange(33, 127) for _ in range(rng.randrange(1, 40)))
                    .replace(b"/", b"_"),
                    rng.randrange(1, 1 << (40 if wide and rng.random() < 0.4 else 32)),
                    rng.randrange(8)) for _ in range(rng.randrange(0, 30))]
        parent = rng.randrange(1, 1 << (40 if rng.random() < 0.1 else 32))
        room = rng.randrange(0, 500)
        out = {w.sf_dir_fork(entries, parent, True, room, DATA_FIRST) for w in backends}
        assert len(out) == 1
        sf = out.pop()
        isz = 8 if parent >> 32 or any(e[1] >> 32 for e in entries) else 4
        size = 2 + isz + sum(3 + len(n) + 1 + isz for n, _i, _f in entries)
        assert (sf is None) == (size > room)
        if sf is None:
            continue
        fits += 1
        assert len(sf) == size
        got_parent, got = parsers.dir2_sf_entries(sf, 0, len(sf), True)
        assert got_parent == parent
        off = DATA_FIRST
        want = []
        for name, ino, ft in entries:
            want.append((off, ino, name, ft))
            off += entsize(len(name))
        assert got == want
    assert fits > 500


def test_populate_image_is_the_same_on_both_backends(tmp_path):
    """populate of a tree with directories of every form, symlinks and files
    writes the same image bytes on the pure-Python backend as on the native
    one."""
    src = tmp_path / "src"
    for d in range(12):
        sub = src / f"d{d:02d}"
        sub.mkdir(parents=True)
        for k in range(d * d * 3):
            (sub / f"entry-with-a-longer-name-{k:04d}").write_bytes(bytes([k % 251]) * (k % 5))
        for k in range(d):
            (sub / f"link{k}").symlink_to("x" * (k * 40 + 1))
            (sub / f"sub{k}").mkdir()
    empty = tmp_path / "empty.img"
    subprocess.run([sys.executable, "-m", "fstool", "mkfs", "-q", "--uuid",
                    "0b6b7e3c-5c36-4c1a-9a3e-3f7c55c7e001", str(empty), "--size", "64m"],
                   check=True)
    imgs = []
    for pure in ("1", "0"):
        img = tmp_path / f"{pure}.img"
        img.write_bytes(empty.read_bytes())
        subprocess.run([sys.executable, "-c",
                        "import sys\nfrom fstool.ops.populate import populate\n"
                        "populate(sys.argv[1], sys.argv[2], timestamp_ns=1_700_000_000 * 10**9)",
                        str(img), str(src)], check=True,
                       env={**os.environ, "FSTOOL_PURE_PYTHON": pure})
        imgs.append(img.read_bytes())
    assert imgs[0] == imgs[1]
    if subprocess.run(["which", "xfs_repair"], capture_output=True).returncode == 0:
        r = subprocess.run(["xfs_repair", "-n", "-f", str(tmp_path / "0.img")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout[-2000:]


@pytest.mark.parametrize("pure", [False, True])
def test_fill_simple_inodes_with_local_data_equals_the_encoder(pure):
    """Symlinks given a local data fork are the general encoder's, for
    targets of every length up to the inode's literal area; one byte more
    is refused."""
    from fstool.fs.icore import InodeSpec
    writers = fstool_native.load(pure=pure, name="writers")
    parsers = fstool_native.load(pure=pure)
    isize = 512
    lit = isize - C.XFS_DINODE_CORE_SIZE
    enc = InodeEncoder(isize, bytes(range(16)), bigtime=True, nrext64=False)
    tpl = enc.simple_template(C.S_IFLNK)
    base = 8192
    ct = 1_700_000_000 * 10**9
    for length in range(1, lit + 1):
        target = bytes((length + i) % 255 + 1 for i in range(length))
        inos = [base + length % 64]
        items = [(b"l", 0o777, length, 7, 10**18 + length, 2 * 10**18)]
        buf = bytearray(64 * isize)
        assert writers.fill_simple_inodes(buf, tpl, base, inos, items, 0, 1, C.S_IFLNK, ct,
                                          _BIG_OFF, C.XFS_DINODE_CRC_OFF, parsers.xfs_cksum,
                                          lits=[target]) == 1
        off = (inos[0] - base) * isize
        assert bytes(buf[off:off + isize]) == enc.encode(inos[0], InodeSpec(
            mode=C.S_IFLNK | 0o777, uid=length, gid=7, atime_ns=items[0][4],
            mtime_ns=items[0][5], ctime_ns=ct, crtime_ns=ct, size=length,
            fmt=C.XFS_DINODE_FMT_LOCAL, data=target)), length
    with pytest.raises(ValueError):
        writers.fill_simple_inodes(bytearray(64 * isize), tpl, base, [base], items, 0, 1,
                                   C.S_IFLNK, ct, _BIG_OFF, C.XFS_DINODE_CRC_OFF,
                                   parsers.xfs_cksum, lits=[b"x" * (lit + 1)])



@pytest.mark.parametrize("pure", [False, True])
def test_fill_simple_inodes_of_directories_equals_the_encoder(pure):
    """Shortform directories (a local data fork and a link count each) are
    the general encoder's, on both backends."""
    from fstool.fs.icore import InodeSpec
    writers = fstool_native.load(pure=pure, name="writers")
    parsers = fstool_native.load(pure=pure)
    isize = 512
    enc = InodeEncoder(isize, bytes(range(16)), bigtime=True, nrext64=False)
    tpl = enc.simple_template(C.S_IFDIR)
    base = 8192
    ct = 1_700_000_000 * 10**9
    inos = [base + k for k in range(0, 64, 3)]
    items = [(None, (0o755, 0o700, 0o1777)[k % 3], k, 2 * k, 10**18 + k, 2 * 10**18 - k)
             for k in range(len(inos))]
    lits = [bytes([k % 5, 0]) + bytes(range(4)) + b"n" * (3 * k) for k in range(len(inos))]
    nlinks = [2 + k * 1000 for k in range(len(inos))]
    buf = bytearray(64 * isize)
    assert writers.fill_simple_inodes(buf, tpl, base, inos, items, 0, len(inos), C.S_IFDIR,
                                      ct, _BIG_OFF, C.XFS_DINODE_CRC_OFF, parsers.xfs_cksum,
                                      lits=lits, nlinks=nlinks) == len(inos)
    for k, ino in enumerate(inos):
        off = (ino - base) * isize
        it = items[k]
        assert bytes(buf[off:off + isize]) == enc.encode(ino, InodeSpec(
            mode=C.S_IFDIR | it[1], nlink=nlinks[k], uid=it[2], gid=it[3], atime_ns=it[4],
            mtime_ns=it[5], ctime_ns=ct, crtime_ns=ct, size=len(lits[k]),
            fmt=C.XFS_DINODE_FMT_LOCAL, data=lits[k])), k


def _symlinks_batched_and_not(tmp_path, monkeypatch, empty, src):
    """``src`` populated three times (at /, then twice at /again) into two
    copies of the image ``empty``: first with runs of symlinks batched,
    then with every symlink made one at a time.  Returns the targets the
    first copy made in batches and whether both copies are byte-identical
    (tmp_path/0.img is the batched one)."""
    import fstool.ns.namespace as NS  # lazy: only these tests spy on it
    import fstool.ops.populate as P  # lazy: as above
    batched = []
    real = NS.Namespace.create_symlinks

    def spy(self, parent, items, targets, ctime_ns):
        batched.extend(targets)
        return real(self, parent, items, targets, ctime_ns)
    monkeypatch.setattr(NS.Namespace, "create_symlinks", spy)
    imgs = []
    for k in range(2):
        if k == 1:
            monkeypatch.setattr(P.SymlinkRun, "take", lambda self, e, here: False)
        img = tmp_path / f"{k}.img"
        img.write_bytes(empty.read_bytes())
        for dest in ("/", "/again", "/again"):
            populate(img, src, dest, timestamp_ns=1_700_000_000 * 10**9)
        imgs.append(img.read_bytes())
        if k == 0:
            first = list(batched)
    return first, imgs[0] == imgs[1]


@pytest.mark.parametrize("bigtime", [True, False])
def test_symlink_runs_leave_the_same_image(tmp_path, monkeypatch, bigtime):
    """Runs of symlinks whose targets the inode holds are made in one batch
    (Namespace.create_symlinks) and leave the image symlink after symlink
    leaves: targets of every length up to the literal area and past it,
    between files and directories, and again over names already there."""
    if not bigtime and subprocess.run(["which", "mkfs.xfs"], capture_output=True).returncode:
        pytest.skip("mkfs.xfs not installed")
    src = tmp_path / "src"
    (src / "a" / "sub").mkdir(parents=True)
    (src / "b").mkdir()
    lit = 512 - C.XFS_DINODE_CORE_SIZE
    for n in range(1, lit + 3):
        (src / "a" / f"l{n:03d}").symlink_to("t" * n)
        if n % 50 == 0:
            (src / "a" / f"l{n:03d}f").write_bytes(b"x" * n)
    for n in range(40):
        (src / "b" / f"z{n:02d}").symlink_to(f"../a/l{n + 1:03d}")
    empty = tmp_path / "empty.img"
    mkfs(empty, bigtime)
    batched, same = _symlinks_batched_and_not(tmp_path, monkeypatch, empty, src)
    # every inline target of the first two passes, none longer
    assert sorted(map(len, batched)) == sorted([n for n in range(1, lit + 1)] * 2 +
                                               [len(f"../a/l{n + 1:03d}")
                                                for n in range(40)] * 2)
    assert same
    if subprocess.run(["which", "xfs_repair"], capture_output=True).returncode == 0:
        r = subprocess.run(["xfs_repair", "-n", "-f", str(tmp_path / "0.img")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout[-2000:]


@pytest.mark.parametrize("bigtime", [True, False])
def test_symlink_runs_with_parent_pointers_leave_the_same_image(tmp_path, monkeypatch,
                                                                bigtime):
    """On a filesystem with parent pointers, runs of symlinks are made in
    one batch too (each inode written with its target and its pointer in
    a shortform attr fork) and leave the image symlink after symlink
    leaves: names of 1-255 bytes, targets short and long, so that some
    pointers fit beside their target and some do not (those go the
    general way, in their turn), again over names already there."""
    if not modern.available():
        pytest.skip("xfsprogs 6.10.1 is not built (parent pointers)")
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    lit = 512 - C.XFS_DINODE_CORE_SIZE
    (src / "a" / "x").symlink_to("t")
    for k, nl in enumerate((4, 9, 60, 130, 200, 255)):
        for tl in (1, 40, 120, 200, 260, 290, 300, 320, lit):
            (src / "a" / (f"{k}{tl:03d}" + "n" * nl)[:nl]).symlink_to("t" * tl)
        (src / "a" / f"f{k}").write_bytes(b"x" * k)
    empty = tmp_path / "empty.img"
    modern.mkfs(empty, "-n", "parent=1", "-m", f"uuid={UUID},bigtime={int(bigtime)}",
                size="320m")
    batched, same = _symlinks_batched_and_not(tmp_path, monkeypatch, empty, src)
    # short targets went in batches, the longest did not
    assert batched and max(map(len, batched)) < lit
    assert 1 in map(len, batched)
    assert same
    r = modern.repair_n(tmp_path / "0.img")
    assert r.returncode == 0, r.stdout[-2000:]


@pytest.mark.parametrize("fail_at", [2, 3])
def test_a_data_write_failing_behind_leaves_no_file_with_wrong_data(tmp_path, monkeypatch,
                                                                     fail_at):
    """File data is written by the device's thread behind the building one;
    when one of those writes fails, batches that map the data may already
    be committed in memory.  The error must stop every later write (it
    used to be raised once, after which the checkpoint of those batches
    was written with the log clean: files read back with wrong data and
    check found nothing).  Whatever the image then holds (after replaying
    its log if dirty) is sound and every file in it has its own data."""
    from fstool.io.device import Device
    from fstool.fs.filesystem import Filesystem
    from fstool.errors import FsToolError
    src = tmp_path / "src"
    for d in range(6):
        (src / f"d{d}").mkdir(parents=True)
        for i in range(150):
            (src / f"d{d}" / f"f{i}").write_bytes(bytes([65 + (d * 7 + i) % 26]) * 12288)
    img = tmp_path / "a.img"
    mkfs(img, True)
    real = Device._write_batch
    calls = [0]

    def failing(self, writes):
        calls[0] += 1
        if calls[0] == fail_at:
            raise OSError(5, "Input/output error")
        return real(self, writes)
    monkeypatch.setattr(Device, "_write_batch", failing)
    with pytest.raises((FsToolError, OSError)):
        populate(img, src, batch_entries=150)
    monkeypatch.setattr(Device, "_write_batch", real)
    assert calls[0] >= fail_at
    subprocess.run([sys.executable, "-m", "fstool", "log", "replay", str(img)],
                   capture_output=True)
    fs = Filesystem(str(img))
    try:
        for d in range(6):
            try:
                names = [e.name.decode() for e in fs.listdir(fs.lookup(f"/d{d}"))]
            except FsToolError:
                continue
            for name in names:
                i = int(name[1:])
                assert bytes(fs.read(f"/d{d}/{name}")) == \
                    bytes([65 + (d * 7 + i) % 26]) * 12288, f"d{d}/{name}"
    finally:
        fs.close()
    if subprocess.run(["which", "xfs_repair"], capture_output=True).returncode == 0:
        r = subprocess.run(["xfs_repair", "-n", "-f", str(img)], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout[-2000:]


def _failing_data_writes(monkeypatch, fail_at: int, plain: bool, after=None) -> list:
    """The device's thread behind fails its ``fail_at``-th write of file
    data (with ``after``, a list, the first one made once ``after`` holds
    something), as a write to the image fails (the device's ImageError), or
    with a plain OSError when ``plain``; returns ``[writes made, the one
    that failed]``."""
    from fstool.errors import ImageError
    from fstool.io.device import Device
    real = getattr(Device._write_all, "real", Device._write_all)
    calls = [0, 0]

    def failing(self, offset, data):
        if threading.current_thread().name != "fstool-data":
            return real(self, offset, data)
        calls[0] += 1
        if not calls[1] and (calls[0] == fail_at or after):
            calls[1] = calls[0]
            if plain:
                raise OSError(5, "Input/output error")
            raise ImageError(f"{self.path}: write failed at offset {offset}: "
                             "Input/output error")
        return real(self, offset, data)
    failing.real = real
    monkeypatch.setattr(Device, "_write_all", failing)
    return calls


def _dirs_of_files(src: Path, dirs: int, files: int, size: int) -> Path:
    """``src`` with directories d0... of files f0... of ``size`` bytes each."""
    for d in range(dirs):
        (src / f"d{d}").mkdir(parents=True)
        for i in range(files):
            (src / f"d{d}" / f"f{i}").write_bytes(bytes([65 + i % 26]) * size)
    return src


@pytest.mark.parametrize("plain,runs", [(False, False), (True, False), (False, True)])
def test_a_device_error_with_keep_going_is_not_an_entrys(tmp_path, monkeypatch, plain, runs):
    """With --keep-going, an entry that cannot be read is skipped and the run
    goes on; a failed write of file data to the image is not that: it is met
    by the next device operation, inside whichever entry comes next, and
    then by every one after it.  It used to be reported as that entry's
    error and every later entry skipped with it (or, met in a run of files,
    named as the run's directory's); the run now ends at once with the
    device's error and what the image holds."""
    from fstool.errors import FsToolError
    from fstool.ns.writer import Writer
    # copied as they come; the tail of each, short of a block, written behind
    src = _dirs_of_files(tmp_path / "src", 4, 10, 300_000)
    img = tmp_path / "a.img"
    mkfs(img, True)
    # the first hand-over after the first commit fails
    commits: list = []
    real_commit = Writer.commit

    def commit(self):
        real_commit(self)
        commits.append(1)
    monkeypatch.setattr(Writer, "commit", commit)
    calls = _failing_data_writes(monkeypatch, 0, plain, after=commits)
    skipped: list = []
    with pytest.raises(FsToolError) as got:
        populate(img, DirSource(src) if runs else OneByOne(src), keep_going=True,
                 report=skipped.append, batch_entries=8)
    assert calls[1]
    assert skipped == []
    msg = str(got.value)
    assert "Input/output error" in msg and "file data could not be written" in msg, msg
    # not named as an entry's error
    assert not msg.startswith("d"), msg


def test_a_device_error_met_at_the_last_checkpoint_says_what_the_image_holds(tmp_path,
                                                                            monkeypatch):
    """File data handed to the device's thread is written at the latest when
    the last checkpoint is, at the end of the run, after the batch loop: a
    write failing there is raised by the writer's close.  Its message says
    what the image then holds, as it does when the error is met inside the
    loop (it used to be the device's error alone)."""
    from fstool.errors import FsToolError
    src = _dirs_of_files(tmp_path / "src", 3, 20, 5000)
    img = tmp_path / "a.img"
    mkfs(img, True)
    trial = tmp_path / "trial.img"
    trial.write_bytes(img.read_bytes())
    # the run's last write behind: made for the last checkpoint
    calls = _failing_data_writes(monkeypatch, 0, False)
    populate(trial, src, batch_entries=20)
    last = calls[0]
    calls = _failing_data_writes(monkeypatch, last, False)
    with pytest.raises(FsToolError) as got:
        populate(img, src, batch_entries=20)
    assert calls[1] == last
    msg = str(got.value)
    assert msg.startswith(f"{img}: write failed at offset "), msg
    assert "file data could not be written: the image holds what the last checkpoint" \
        in msg, msg
