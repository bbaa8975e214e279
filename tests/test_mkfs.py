"""fstool mkfs against mkfs.xfs 6.1, xfs_repair and the kernel."""
import difflib
import hashlib
import os
import re
import shutil
import subprocess
import sys

import pytest

from fixtures import images, modern

pytestmark = pytest.mark.skipif(shutil.which("mkfs.xfs") is None,
                                reason="xfsprogs (mkfs.xfs, xfs_db, xfs_repair) not installed")

UUID = "0badc0de-1234-4bcd-8ef0-0123456789ab"
# mkfs.xfs 6.1 makes filesystems under 300 MiB for fstests only
FSTESTS_ENV = dict(os.environ, TEST_DIR="/nonexistent", TEST_DEV="/nonexistent",
                   QA_CHECK_FS="1")
# (size, options) that mkfs.xfs 6.1 accepts too (below 300 MiB with the
# fstests variables); every AG header, btree record and the root inodes must
# then print the same in xfs_db.  fstool is given -c options=lts_6.1.
MATRIX = [
    ("300m", []),
    ("512m", []),
    ("1g", []),
    ("2g", []),
    ("1g", ["-b", "size=1024"]),
    ("1g", ["-b", "size=65536"]),
    ("1g", ["-b", "size=65536", "-i", "size=2048"]),
    ("1g", ["-i", "size=2048"]),
    ("1g", ["-i", "size=1024"]),
    ("1g", ["-d", "agcount=2"]),
    ("1g", ["-d", "agcount=7"]),
    ("16g", ["-d", "agcount=64"]),
    ("1g", ["-d", "agsize=100m"]),
    ("1g", ["-m", "finobt=0"]),
    ("1g", ["-m", "reflink=0"]),
    ("1g", ["-m", "finobt=0,reflink=0"]),
    ("1g", ["-i", "sparse=0"]),
    ("1g", ["-n", "size=65536"]),
    ("1g", ["-l", "size=128m"]),
    ("1g", ["-d", "agcount=3", "-b", "size=2048", "-i", "size=1024"]),
    ("1g", ["-i", "nrext64=1"]),
    ("1g", ["-s", "size=4096"]),
    ("1g", ["-s", "size=2048"]),
    ("1g", ["-b", "size=65536", "-s", "size=4096"]),
    ("1g", ["-L", "mylabel"]),
    ("1g", ["-m", "rmapbt=1"]),
    ("1g", ["-m", "rmapbt=1,reflink=0"]),
    ("1g", ["-m", "bigtime=0,inobtcount=0"]),
    ("20m", []),
    ("64m", ["-b", "size=1024"]),
    ("200m", ["-m", "rmapbt=1"]),
    ("1t", []),
    ("4t", []),
    ("15t", []),
]
# the older profiles against mkfs.xfs 6.1 told the same features
PROFILES_61 = [("lts_4.19", ["-m", "bigtime=0,inobtcount=0,reflink=0"]),
               ("lts_5.4", ["-m", "bigtime=0,inobtcount=0"]),
               ("lts_5.10", ["-m", "bigtime=0,inobtcount=0"]),
               ("lts_5.15", [])]
COMPARE_SKIP = re.compile(r"time|crc|^v3\.change_count|^core\.gen|^Parameters parsed")
MODERN_DB = modern.tool("xfs_db")


def run(*args, **kw):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)


def fstool(*args):
    return run(sys.executable, "-m", "fstool", *args)


def repair(img, tool="xfs_repair"):
    """xfs_repair -n; a single-AG filesystem has no secondary superblock to
    check the geometry against, so repair wants to be told to trust it."""
    agcount = int(run("xfs_db", "-r", "-f", "-c", "sb 0", "-c", "print agcount",
                      img).stdout.split("=")[1])
    force = ["-o", "force_geometry"] if agcount == 1 else []
    return run(tool, "-n", "-f", *force, img)


def xfs_db_print(img, cmd, db="xfs_db"):
    out = run(db, "-r", "-f", "-c", cmd, "-c", "print", img, check=True).stdout
    return [line for line in out.splitlines() if not COMPARE_SKIP.search(line)]


def make_both(tmp_path, size, theirs_args, ours_args, tool="mkfs.xfs", env=None):
    theirs, ours = tmp_path / "mkfs.xfs.img", tmp_path / "fstool.img"
    run("truncate", "-s", size, theirs, check=True)
    res = run(tool, "-q", "-f", "-K", "-m", f"uuid={UUID}", *theirs_args, theirs, env=env)
    if res.returncode:
        pytest.skip(f"mkfs.xfs refuses {theirs_args}: {res.stderr.strip().splitlines()[0]}")
    res = fstool("mkfs", "-q", ours, "--size", size, "--uuid", UUID, *ours_args)
    assert res.returncode == 0, res.stderr
    return theirs, ours


def _sb_value(img, field, db="xfs_db"):
    return int(next(l for l in xfs_db_print(img, "sb 0", db)
                    if l.startswith(field + " =")).split("=")[1], 0)


def _db_all(img, db, ags, rootino, trees) -> list:
    """Every header of ``ags``, the root inodes and the records of every
    btree root, in one xfs_db run."""
    cmds = []
    for ag in ags:
        for hdr in ("sb", "agf", "agi", "agfl"):
            cmds += ["-c", f"{hdr} {ag}", "-c", "print"]
        for hdr, root in trees:
            cmds += ["-c", f"{hdr} {ag}", "-c", f"addr {root}", "-c", "print"]
    for i in range(4):
        cmds += ["-c", f"inode {rootino + i}", "-c", "print"]
    out = run(db, "-r", "-f", *cmds, img).stdout
    return [line for line in out.splitlines() if not COMPARE_SKIP.search(line)]


def compare_images(theirs, ours, db="xfs_db"):
    """Both images print the same in ``db`` for every superblock, AGF, AGI
    and AGFL of the first, second, middle and last AG, every btree root's
    records (each is one block in a new filesystem) and the root inodes; and
    the log's first record is the same bytes."""
    agcount = _sb_value(theirs, "agcount", db)
    ags = sorted({0, 1 % agcount, agcount // 2, agcount - 1})
    trees = [("agf", "bnoroot"), ("agf", "cntroot"), ("agi", "root")]
    ro = _sb_value(theirs, "features_ro_compat", db)
    for bit, tree in ((0x1, ("agi", "free_root")), (0x2, ("agf", "rmaproot")),
                      (0x4, ("agf", "refcntroot"))):
        if ro & bit:
            trees.append(tree)
    rootino = _sb_value(theirs, "rootino", db)
    want = _db_all(theirs, db, ags, rootino, trees)
    got = _db_all(ours, db, ags, rootino, trees)
    assert got == want, "\n".join(difflib.unified_diff(want, got, "mkfs.xfs", "fstool",
                                                       lineterm="", n=8))
    assert len(want) > 100 * len(ags)
    # the log's first record (its stripe unit, extended headers) byte for byte
    assert _log_head(ours) == _log_head(theirs)


def _log_head(img) -> bytes:
    sb = {l.split(" = ")[0]: int(l.split(" = ")[1]) for l in xfs_db_print(img, "sb 0")
          if l.split(" = ")[0] in ("logstart", "blocksize", "agblocks", "agblklog")}
    agno, agbno = sb["logstart"] >> sb["agblklog"], sb["logstart"] & ((1 << sb["agblklog"]) - 1)
    with open(img, "rb") as f:
        return os.pread(f.fileno(), 2 * sb["blocksize"],
                        (agno * sb["agblocks"] + agbno) * sb["blocksize"])


@pytest.mark.parametrize("size,args", MATRIX, ids=[f"{s}{''.join(a)}" for s, a in MATRIX])
def test_matches_mkfs_xfs(tmp_path, size, args):
    """-c options=lts_6.1 makes what mkfs.xfs 6.1 makes."""
    ours_args = ["-c", "options=lts_6.1", *args]
    theirs, ours = make_both(tmp_path, size, args, ours_args, env=FSTESTS_ENV)
    # fstool's own image is sparse: only metadata was written
    assert os.stat(ours).st_blocks * 512 < 100 << 20
    if not size.endswith("t") or size == "1t":
        # xfs_repair -n takes minutes on multi-TiB images: headers only there
        rep = repair(ours)
        assert rep.returncode == 0, rep.stdout[-2000:] + rep.stderr[-2000:]
    compare_images(theirs, ours)
    # -N prints what mkfs.xfs -N prints, and info reads it back the same way
    want = run("mkfs.xfs", "-N", "-f", "-m", f"uuid={UUID}", *args, theirs,
               env=FSTESTS_ENV).stdout
    got = fstool("mkfs", "-N", "-f", theirs, "--uuid", UUID, *ours_args).stdout
    assert got.splitlines() == want.splitlines()
    info = fstool("info", ours).stdout.splitlines()
    assert info[0].split("isize=")[1] == want.splitlines()[0].split("isize=")[1]
    assert info[1:10] == want.splitlines()[1:10]


@pytest.mark.parametrize("profile,args", PROFILES_61, ids=[p for p, _a in PROFILES_61])
def test_old_profiles_match_mkfs_xfs_61(tmp_path, profile, args):
    theirs, ours = make_both(tmp_path, "1g", args, ["-c", f"options={profile}"])
    rep = repair(ours)
    assert rep.returncode == 0, rep.stdout[-2000:]
    compare_images(theirs, ours)


# (size, options) against mkfs.xfs 6.10.1 (with --unsupported below
# 300 MiB): fstool is given -c options=lts_6.6 and the options, mkfs.xfs the
# same profile file with the options that are its keys written into it (it
# refuses an option given in both places).
MODERN = [
    ("1g", []),
    ("300m", []),
    ("2g", []),
    ("1g", ["-b", "size=1024"]),
    ("1g", ["-d", "agcount=3", "-b", "size=2048", "-i", "size=1024"]),
    ("1g", ["-b", "size=65536"]),
    ("1g", ["-b", "size=65536", "-i", "size=2048"]),
    ("1g", ["-i", "size=2048"]),
    ("1g", ["-d", "agcount=2"]),
    ("1g", ["-d", "agcount=7"]),
    ("16g", ["-d", "agcount=64"]),
    ("1g", ["-m", "reflink=0"]),
    ("1g", ["-m", "finobt=0"]),
    ("1g", ["-m", "finobt=0,reflink=0"]),
    ("1g", ["-m", "rmapbt=0"]),
    ("1g", ["-m", "rmapbt=0", "-b", "size=65536"]),
    ("1g", ["-i", "sparse=0"]),
    ("1g", ["-i", "nrext64=0"]),
    ("1g", ["-m", "bigtime=0,inobtcount=0"]),
    ("1g", ["-n", "size=65536"]),
    ("1g", ["-l", "size=128m"]),
    ("1g", ["-s", "size=4096"]),
    ("1g", ["-b", "size=65536", "-s", "size=4096"]),
    ("16m", []),
    ("32m", ["-b", "size=1024"]),
    ("100m", ["-m", "reflink=0"]),
    ("200m", ["-b", "size=8192"]),
    ("1t", []),
    ("15t", []),
    # parent pointers (and the exchange-range they bring): the kernel's
    # corrected minimum log size
    ("1g", ["-n", "parent=1"]),
    ("16m", ["-n", "parent=1"]),
    ("32m", ["-n", "parent=1", "-b", "size=1024"]),
    ("16m", ["-n", "parent=1", "-m", "reflink=0"]),
    ("16m", ["-n", "parent=1", "-m", "rmapbt=0"]),
    ("100m", ["-n", "parent=1", "-i", "size=2048"]),
    ("200m", ["-n", "parent=1", "-b", "size=8192"]),
    ("300m", ["-n", "parent=1", "-b", "size=65536"]),
    ("1g", ["-n", "parent=1", "-i", "exchange=0"]),
    ("1g", ["-i", "exchange=1"]),
    ("1g", ["-m", "autofsck=repair"]),
    ("1g", ["-m", "autofsck=check", "-n", "parent=0"]),
]


def _modern_args(tmp_path, size, args):
    """mkfs.xfs 6.10.1's arguments for fstool's -c options=lts_6.6 ARGS."""
    from fstool.ops.mkfs_config import SECTIONS, parse
    conf = modern.prefix() / "share" / "xfsprogs" / "mkfs" / "lts_6.6.conf"
    sections = parse(conf.read_text(), str(conf))
    by_flag = {flag: name for name, flag in SECTIONS.items()}
    rest = []
    for flag, value in zip(args[::2], args[1::2]):
        keep = []
        for item in value.split(","):
            key, _, val = item.partition("=")
            section = sections.get(by_flag.get(flag), {})
            if key in section:
                section[key] = val
            else:
                keep.append(item)
        if keep:
            rest += [flag, ",".join(keep)]
    if sections["metadata"]["finobt"] == "0" and "inobtcount=" not in "".join(args):
        sections["metadata"]["inobtcount"] = "0"     # as fstool lets finobt=0 win
    path = tmp_path / "profile.conf"
    path.write_text("".join(f"[{name}]\n" + "".join(f"{k}={v}\n" for k, v in kv.items())
                            for name, kv in sections.items()))
    small = ["--unsupported"] if size[-1] == "m" and int(size[:-1]) < 300 else []
    return small + ["-c", f"options={path}"] + rest


@pytest.mark.skipif(not modern.available(), reason=modern.WHY)
@pytest.mark.parametrize("size,args", MODERN, ids=[f"{s}{''.join(a)}" for s, a in MODERN])
def test_matches_mkfs_xfs_6_10(tmp_path, size, args):
    """-c options=lts_6.6 makes what mkfs.xfs 6.10.1 makes with that
    profile: the rmapbt and its records, large extent counts, the AGFL and
    log sizes of 6.10.1, the root directory's autofsck property."""
    theirs_args = _modern_args(tmp_path, size, args)
    ours_args = ["-c", "options=lts_6.6", *args]
    theirs, ours = make_both(tmp_path, size, theirs_args, ours_args, tool=modern.tool("mkfs.xfs"))
    if not size.endswith("t") or size == "1t":
        rep = repair(ours, modern.tool("xfs_repair"))
        assert rep.returncode == 0, rep.stdout[-2000:] + rep.stderr[-2000:]
        # xfs_repair 6.1 expects the root inode after its own AGFL fill, which
        # 6.10.1 makes smaller where a btree cannot grow (64 KiB blocks): it
        # must judge fstool's image as it judges mkfs.xfs 6.10.1's
        assert repair(ours).returncode == repair(theirs).returncode
    compare_images(theirs, ours, MODERN_DB)
    noise = re.compile(r"^Parameters parsed|^Filesystems formatted with --unsupported")
    want = run(modern.tool("mkfs.xfs"), "-N", "-f", "-m", f"uuid={UUID}", *theirs_args,
               theirs).stdout
    got = fstool("mkfs", "-N", "-f", theirs, "--uuid", UUID, *ours_args).stdout
    assert got.splitlines() == [l for l in want.splitlines() if not noise.search(l)]


DEFAULTS = [("1g", []), ("512m", ["-m", "reflink=0"]), ("1g", ["-b", "size=65536"]),
            ("16m", []), ("1t", []), ("1g", ["-n", "parent=1"]),
            ("16m", ["-n", "parent=1", "-b", "size=1024"]), ("1g", ["-i", "exchange=1"])]


@pytest.mark.skipif(not modern.available(), reason=modern.WHY)
@pytest.mark.parametrize("size,args", DEFAULTS, ids=[f"{s}{''.join(a)}" for s, a in DEFAULTS])
def test_defaults_are_mkfs_xfs_6_10(tmp_path, size, args):
    """Without -c, fstool mkfs makes what mkfs.xfs 6.10.1 makes by default
    (rmapbt, reflink, nrext64, no autofsck property)."""
    small = ["--unsupported"] if size == "16m" else []
    theirs, ours = make_both(tmp_path, size, small + args, args, tool=modern.tool("mkfs.xfs"))
    if size != "1t":
        rep = repair(ours, modern.tool("xfs_repair"))
        assert rep.returncode == 0, rep.stdout[-2000:]
    compare_images(theirs, ours, MODERN_DB)
    want = run(modern.tool("mkfs.xfs"), "-N", "-f", *small, *args, theirs).stdout
    got = fstool("mkfs", "-N", "-f", theirs, *args).stdout
    assert got.splitlines() == [l for l in want.splitlines() if "--unsupported" not in l]


@pytest.mark.skipif(not modern.available(), reason=modern.WHY)
def test_profiles_are_xfsprogs(tmp_path):
    """The profiles fstool ships hold the sections, keys and values of the
    files xfsprogs 6.10.1 ships."""
    from fstool.ops.mkfs_config import PROFILES, load, parse
    for name in PROFILES:
        conf = modern.prefix() / "share" / "xfsprogs" / "mkfs" / f"{name}.conf"
        assert load(name).sections == parse(conf.read_text(), str(conf)), name


SMALL = ["16m", "20m", "32m", "64m", "100m", "200m"]


@pytest.mark.parametrize("size", SMALL)
def test_small_images_are_clean(tmp_path, size):
    img = tmp_path / "small.img"
    res = fstool("mkfs", "-q", img, "--size", size)
    assert res.returncode == 0, res.stderr
    rep = repair(img)
    assert rep.returncode == 0, rep.stdout[-2000:]
    # the reader reads it back
    ls = fstool("ls", img, "/")
    assert ls.returncode == 0 and ls.stdout == ""


KERNEL_CASES = [("16m", []), ("16m", ["-b", "size=1024"]),
                # (with the rmapbt's per-AG reservation 16 MiB holds fewer inodes)
                ("16m", ["-c", "options=lts_6.1", "-m", "finobt=0,reflink=0", "-i",
                         "sparse=0"]),
                ("256m", ["-c", "options=lts_6.1", "-b", "size=65536"]), ("512m", []),
                ("512m", ["-b", "size=1024"]),
                ("512m", ["-b", "size=65536"]),
                ("512m", ["-m", "finobt=0,reflink=0", "-i", "sparse=0"]),
                ("512m", ["-s", "size=4096"]),
                ("512m", ["-b", "size=65536", "-s", "size=4096"]),
                ("512m", ["-c", "options=lts_6.6"]),
                ("512m", ["-c", "options=lts_6.6", "-m", "reflink=0"]),
                ("16m", ["-c", "options=lts_6.6", "-b", "size=1024"]),
                ("1g", ["-c", "options=lts_6.6", "-b", "size=65536"]),
                ("512m", ["-c", "options=lts_4.19"]),
                ("16m", ["-n", "parent=1"]), ("512m", ["-n", "parent=1", "-b", "size=1024"]),
                ("512m", ["-i", "exchange=1"])]


@pytest.mark.parametrize("size,args", KERNEL_CASES,
                         ids=[f"{s}{''.join(a)}" for s, a in KERNEL_CASES])
def test_kernel_mounts_and_writes(tmp_path, size, args):
    if not images.loop_available():
        pytest.skip("needs root and a kernel loop mount of XFS")
    img = tmp_path / "k.img"
    res = fstool("mkfs", "-q", img, "--size", size, *args)
    assert res.returncode == 0, res.stderr
    small = size == "16m"
    with images.Mounted(img) as mnt:
        for d in range(20):
            (mnt / f"d{d}").mkdir()
            for i in range(150):
                (mnt / f"d{d}" / f"f{i}").write_bytes(b"x" * (0 if small else i * 37 % 5000))
    # the defaults and lts_6.6 are mkfs.xfs 6.10.1's, whose repair judges them
    tool = "xfs_repair"
    if not any(a.startswith("options=lts_") and a != "options=lts_6.6" for a in args):
        if not modern.available():
            pytest.skip(modern.WHY)
        tool = modern.tool("xfs_repair")
    rep = repair(img, tool)
    assert rep.returncode == 0, rep.stdout[-2000:]
    # and fstool reads what the kernel wrote
    ls = fstool("ls", "-R", img, "/d7")
    assert len(ls.stdout.splitlines()) == 150


def test_reproducible(tmp_path):
    env = dict(os.environ, SOURCE_DATE_EPOCH="1700000000")
    digests = []
    for n in (1, 2):
        img = tmp_path / f"r{n}.img"
        subprocess.run([sys.executable, "-m", "fstool", "mkfs", "-q", str(img), "--size",
                        "64m", "--uuid", UUID], check=True, env=env)
        h = hashlib.sha256()
        with open(img, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        digests.append(h.hexdigest())
    assert digests[0] == digests[1]
    # a different timestamp gives a different image
    img = tmp_path / "r3.img"
    subprocess.run([sys.executable, "-m", "fstool", "mkfs", "-q", str(img), "--size", "64m",
                    "--uuid", UUID, "--timestamp", "1700000001"], check=True)
    with open(img, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() != digests[0]


def test_reproducible_over_an_old_file(tmp_path):
    """mkfs -f --populate over an existing file full of old bytes gives the
    image the same build gives in a new file: the old contents are punched
    out first, so none of them stays in free space.  With -K they stay
    (mkfs.xfs -K), and the image differs."""
    env = dict(os.environ, SOURCE_DATE_EPOCH="1700000000")
    src = tmp_path / "src"
    src.mkdir()
    for i in range(40):
        (src / f"f{i}").write_bytes(b"data %d\n" % i * (50 * i + 1))

    def build(img, *extra):
        subprocess.run([sys.executable, "-m", "fstool", "mkfs", "-q", "-f", str(img), "--size",
                        "64m", "--uuid", UUID, *extra, "--populate", str(src)], check=True,
                       env=env)
        return hashlib.sha256(img.read_bytes()).hexdigest()

    fresh = build(tmp_path / "new.img")
    old = tmp_path / "old.img"
    old.write_bytes(b"\xa5" * (64 << 20))
    assert build(old) == fresh
    assert b"\xa5" * 512 not in old.read_bytes()
    old.write_bytes(b"\xa5" * (64 << 20))
    assert build(old, "-K") != fresh
    assert b"\xa5" * 512 in old.read_bytes()


@pytest.mark.parametrize("args,needle", [
    (["--size", "8m"], "too small"),
    (["--size", "16m", "-b", "size=65536"], "too small for 65536-byte blocks"),
    (["--size", "1g", "-b", "size=3000"], "power of two"),
    (["--size", "1g", "-i", "size=256"], "minimum inode size"),
    (["--size", "1g", "-b", "size=1024", "-i", "size=1024"], "too large"),
    (["--size", "1g", "-n", "size=2048"], "directory block size"),
    (["--size", "1g", "-d", "agcount=1000"], "too small"),
    (["--size", "1g", "-d", "agcount=2,agsize=100m"], "not both"),
    (["--size", "1g", "-l", "size=1m"], "too small"),
    (["--size", "1g", "-m", "crc=0"], "v5"),
    (["--size", "1g", "-m", "bogus=1"], "unknown suboption"),
    (["--size", "1g", "-L", "a-label-too-long"], "12 bytes"),
    (["--size", "1g", "--uuid", "nope"], "not a uuid"),
    (["--size", "1g", "-n", "parent=2"], "parent=2: use 0 or 1"),
    (["--size", "1g", "-c", "options=lts_6.1", "-n", "parent=1"],
     "not part of the mkfs.xfs 6.1 profiles"),
    (["--size", "1g", "-c", "options=lts_6.1", "-i", "exchange=1"],
     "not part of the mkfs.xfs 6.1 profiles"),
    (["--size", "1g", "-m", "finobt=0,inobtcount=1"], "need the free inode btree"),
    (["--size", "1g", "-c", "options=lts_9.9"], "no such configuration file"),
])
def test_invalid_options(tmp_path, args, needle):
    img = tmp_path / "bad.img"
    res = fstool("mkfs", img, *args)
    assert res.returncode != 0
    assert "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert needle in res.stderr, res.stderr
    assert not img.exists()


def test_config_file_and_command_line(tmp_path):
    """A configuration file sets what it names; the command line wins over it."""
    conf = tmp_path / "my.conf"
    conf.write_text("# a comment\n; another\n[Block]\nsize = 2048\n\n[metadata]\n"
                    "reflink=0\nrmapbt=1\n[inode]\nsize=1024\n")
    img = tmp_path / "c.img"
    res = fstool("mkfs", "-N", img, "--size", "1g", "-c", f"options={conf}", "-i", "size=512")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "bsize=2048" in out and "isize=512" in out
    assert "rmapbt=1" in out and "reflink=0" in out
    res = fstool("mkfs", "-N", img, "--size", "1g", "-c", f"options={conf}", "-m", "reflink=1")
    assert "reflink=1" in res.stdout and "rmapbt=1" in res.stdout


@pytest.mark.parametrize("text,needle", [
    ("[bogus]\nx=1\n", "unknown section [bogus]"),
    ("[metadata]\nwhat=1\n", "[metadata] what: not an option"),
    ("[data]\nsu=64k\n", "[data] su: not an option"),
    ("[realtime]\nextsize=4096\n", "realtime sections are not supported"),
    ("size=4096\n", "outside any section"),
    ("[block]\nsize\n", "line 2: unrecognised input"),
    ("[block]\nsize=1024\nsize=2048\n", "size is given twice in [block]"),
    ("[metadata]\ncrc=0\n", "v5"),
    ("[naming]\nparent=yes\n", "parent=yes: use 0 or 1"),
])
def test_config_file_errors(tmp_path, text, needle):
    conf = tmp_path / "bad.conf"
    conf.write_text(text)
    img = tmp_path / "bad.img"
    res = fstool("mkfs", img, "--size", "1g", "-c", f"options={conf}")
    assert res.returncode != 0
    assert "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert needle in res.stderr, res.stderr
    assert not img.exists()


def test_refuses_existing_filesystem_and_mounted(tmp_path):
    img = tmp_path / "e.img"
    assert fstool("mkfs", "-q", img, "--size", "64m").returncode == 0
    res = fstool("mkfs", "-q", img)
    assert res.returncode == 1 and "already contains an XFS filesystem" in res.stderr
    assert fstool("mkfs", "-q", "-f", img).returncode == 0
    if images.loop_available():
        with images.Mounted(img):
            res = fstool("mkfs", "-q", "-f", img)
            assert res.returncode == 7 and "mounted" in res.stderr


@pytest.mark.parametrize("profile", ["lts_6.1", "lts_6.6"])
def test_check_knows_both_agfl_fills(tmp_path, profile):
    """With 64 KiB blocks the root inode sits where each release's AGFL fill
    puts it; fstool check takes either as mkfs's place."""
    img = tmp_path / "c.img"
    res = fstool("mkfs", "-q", img, "--size", "1g", "-b", "size=65536", "-c",
                 f"options={profile}")
    assert res.returncode == 0, res.stderr
    res = fstool("check", img)
    assert res.returncode == 0, res.stdout[-2000:]
    assert "SB_ROOTINO" not in res.stdout
