"""fstool mkfs against mkfs.xfs 6.1, xfs_repair and the kernel."""
import hashlib
import os
import re
import shutil
import subprocess
import sys

import pytest

from fixtures import images

pytestmark = pytest.mark.skipif(shutil.which("mkfs.xfs") is None,
                                reason="xfsprogs (mkfs.xfs, xfs_db, xfs_repair) not installed")

UUID = "0badc0de-1234-4bcd-8ef0-0123456789ab"
# (size, options) that mkfs.xfs 6.1 accepts too; every AG header and the root
# inode must then print the same in xfs_db
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
    ("1g", ["-d", "agcount=1"]),
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
    ("1t", []),
    ("4t", []),
    ("15t", []),
]
COMPARE_SKIP = re.compile(r"time|crc|^v3\.change_count|^core\.gen")


def run(*args, **kw):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)


def fstool(*args):
    return run(sys.executable, "-m", "fstool", *args)


def repair(img):
    """xfs_repair -n; a single-AG filesystem has no secondary superblock to
    check the geometry against, so repair wants to be told to trust it."""
    agcount = int(run("xfs_db", "-r", "-f", "-c", "sb 0", "-c", "print agcount",
                      img).stdout.split("=")[1])
    force = ["-o", "force_geometry"] if agcount == 1 else []
    return run("xfs_repair", "-n", "-f", *force, img)


def xfs_db_print(img, cmd):
    out = run("xfs_db", "-r", "-f", "-c", cmd, "-c", "print", img, check=True).stdout
    return [line for line in out.splitlines() if not COMPARE_SKIP.search(line)]


def make_both(tmp_path, size, args):
    theirs, ours = tmp_path / "mkfs.xfs.img", tmp_path / "fstool.img"
    run("truncate", "-s", size, theirs, check=True)
    res = run("mkfs.xfs", "-q", "-f", "-K", "-m", f"uuid={UUID}", *args, theirs)
    if res.returncode:
        pytest.skip(f"mkfs.xfs refuses {args}: {res.stderr.strip().splitlines()[0]}")
    res = fstool("mkfs", "-q", ours, "--size", size, "--uuid", UUID, *args)
    assert res.returncode == 0, res.stderr
    return theirs, ours


@pytest.mark.parametrize("size,args", MATRIX, ids=[f"{s}{''.join(a)}" for s, a in MATRIX])
def test_matches_mkfs_xfs(tmp_path, size, args):
    theirs, ours = make_both(tmp_path, size, args)
    # fstool's own image is sparse: only metadata was written
    assert os.stat(ours).st_blocks * 512 < 100 << 20
    if not size.endswith("t") or size == "1t":
        # xfs_repair -n takes minutes on multi-TiB images: headers only there
        rep = repair(ours)
        assert rep.returncode == 0, rep.stdout[-2000:] + rep.stderr[-2000:]
    agcount = int(xfs_db_print(theirs, "sb 0")[[l.split()[0] for l in
                  xfs_db_print(theirs, "sb 0")].index("agcount")].split("=")[1])
    ags = sorted({0, 1 % agcount, agcount // 2, agcount - 1})
    cmds = [f"{hdr} {ag}" for ag in ags for hdr in ("sb", "agf", "agi", "agfl")]
    rootino = int(next(l for l in xfs_db_print(theirs, "sb 0")
                       if l.startswith("rootino")).split("=")[1])
    cmds += [f"inode {rootino + i}" for i in (0, 1, 2, 3)]
    for c in cmds:
        assert xfs_db_print(ours, c) == xfs_db_print(theirs, c), c
    # the log's first record (its stripe unit, extended headers) byte for byte
    assert _log_head(ours) == _log_head(theirs)
    # free space and inode btrees hold the same records
    for ag in ags:
        for hdr, root in (("agf", "bnoroot"), ("agf", "cntroot"), ("agi", "root")):
            a = run("xfs_db", "-r", "-f", "-c", f"{hdr} {ag}", "-c", f"addr {root}", "-c",
                    "print recs", theirs).stdout
            b = run("xfs_db", "-r", "-f", "-c", f"{hdr} {ag}", "-c", f"addr {root}", "-c",
                    "print recs", ours).stdout
            assert a == b, (hdr, ag, root)
    # -N prints what mkfs.xfs -N prints, and info reads it back the same way
    want = run("mkfs.xfs", "-N", "-f", "-m", f"uuid={UUID}", *args, theirs).stdout
    got = fstool("mkfs", "-N", "-f", theirs, "--uuid", UUID, *args).stdout
    assert got.splitlines() == want.splitlines()
    info = fstool("info", ours).stdout.splitlines()
    assert info[0].split("isize=")[1] == want.splitlines()[0].split("isize=")[1]
    assert info[1:10] == want.splitlines()[1:10]


def _log_head(img) -> bytes:
    sb = {l.split(" = ")[0]: int(l.split(" = ")[1]) for l in xfs_db_print(img, "sb 0")
          if l.split(" = ")[0] in ("logstart", "blocksize", "agblocks", "agblklog")}
    agno, agbno = sb["logstart"] >> sb["agblklog"], sb["logstart"] & ((1 << sb["agblklog"]) - 1)
    with open(img, "rb") as f:
        return os.pread(f.fileno(), 2 * sb["blocksize"],
                        (agno * sb["agblocks"] + agbno) * sb["blocksize"])


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
                ("16m", ["-m", "finobt=0,reflink=0", "-i", "sparse=0"]),
                ("256m", ["-b", "size=65536"]), ("512m", []), ("512m", ["-b", "size=1024"]),
                ("512m", ["-b", "size=65536"]),
                ("512m", ["-m", "finobt=0,reflink=0", "-i", "sparse=0"]),
                ("512m", ["-s", "size=4096"]),
                ("512m", ["-b", "size=65536", "-s", "size=4096"])]


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
    rep = repair(img)
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
])
def test_invalid_options(tmp_path, args, needle):
    img = tmp_path / "bad.img"
    res = fstool("mkfs", img, *args)
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
