"""populate's batch path for plain empty files (runs from DirSource, inodes
encoded a chunk at a time) must leave exactly the image the entry-by-entry
path leaves, on both backends."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import fstool_native
from fstool.format import constants as C
from fstool.fs.icore import _BIG_OFF, InodeEncoder
from fstool.ops.populate import populate
from fstool.ops.sources import DirSource, EmptyFiles, ProtoSource

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


@pytest.mark.parametrize("bigtime", [True, False])
def test_runs_leave_the_same_image(tmp_path, bigtime):
    src = tmp_path / "src"
    make_tree(src)
    # runs come only for plain empty files, and all of them are there
    runs = [e for e in DirSource(src).entries(runs=True) if type(e) is EmptyFiles]
    assert runs and sum(len(r.items) for r in runs) > 700
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
    if subprocess.run(["which", "xfs_repair"], capture_output=True).returncode == 0:
        r = subprocess.run(["xfs_repair", "-n", "-f", str(tmp_path / "0.img")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout[-2000:]


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
            if type(e) is EmptyFiles]
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


def test_stat_plain_files_backends_agree(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "empty").touch()
    (d / "full").write_bytes(b"x")
    (d / "linked").touch()
    os.link(d / "linked", d / "linked2")
    (d / "xattr").touch()
    os.setxattr(d / "xattr", "user.k", b"v")
    (d / "sub").mkdir()
    os.symlink("empty", d / "sym")
    os.mkfifo(d / "fifo")
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
