"""What the reverse-mapping btree costs fstool's writers, side by side.

Images made by fstool mkfs with xfsprogs 6.10.1's defaults (rmapbt=1,
reflink=1) against the same with -m rmapbt=0, the two taking turns round
after round (best wall time of each kept):

  populate-empty   fstool populate of N empty files in D directories
  populate-data    fstool populate of a tree of small files with data
                   (F files of 0-9 KiB in 100 directories)
  mount-creates    N/10 creates through fstool mount, round-robin over 100
                   directories, then sync

and, on the rmapbt image, a reflink copy against a data copy of a 1 GiB
file through fstool mount (``cp`` uses copy_file_range; the data copy is
``cp --reflink=never``).  Every image is checked by xfs_repair -n and its
rmapbt held to the merged records of every owner (fixtures/rmapcheck).

    python3 bench/bench_rmap.py [--files 200000] [--dirs 200] [--data-files 20000]
                                [--repeat 3] [--copy-mib 1024]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

from common import Best, byte_compile, run_child

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
FSTOOL = [sys.executable, "-m", "fstool"]


def mkfs(img, size, rmapbt):
    if os.path.exists(img):
        os.unlink(img)
    subprocess.run(FSTOOL + ["mkfs", "-q", img, "--size", size, "-m", f"rmapbt={rmapbt}"],
                   check=True, cwd=ROOT)


def empty_tree(root, files, dirs):
    per = files // dirs
    for d in range(dirs):
        sub = os.path.join(root, f"d{d:04d}")
        os.mkdir(sub)
        for i in range(per):
            os.close(os.open(os.path.join(sub, f"f{i:07d}"), os.O_CREAT | os.O_WRONLY, 0o644))


def data_tree(root, files):
    import random
    rng = random.Random(1)
    for d in range(100):
        sub = os.path.join(root, f"d{d:03d}")
        os.mkdir(sub)
        for i in range(files // 100):
            with open(os.path.join(sub, f"f{i:05d}"), "wb") as f:
                f.write(rng.randbytes(rng.randrange(0, 9000)))


def judge(img):
    from fixtures import rmapcheck
    r = subprocess.run(["xfs_repair", "-n", "-f", img], capture_output=True)
    diffs = rmapcheck.strict_diff(img)
    return r.returncode == 0 and not diffs


def mount_creates(img, files, dirs):
    """Wall seconds of ``files`` creates round-robin over ``dirs``
    directories through fstool mount, then sync."""
    from fixtures.fusemount import FuseMounted
    with FuseMounted(img) as mnt:
        for d in range(dirs):
            os.mkdir(os.path.join(mnt, f"c{d}"))
        os.sync()
        t0 = time.perf_counter()
        for i in range(files):
            os.close(os.open(os.path.join(mnt, f"c{i % dirs}", f"f{i}"),
                             os.O_CREAT | os.O_WRONLY, 0o644))
        os.sync()
        return time.perf_counter() - t0


def copies(img, mib):
    """(reflink copy, data copy) wall seconds of a ``mib`` MiB file through
    fstool mount."""
    from fixtures.fusemount import FuseMounted
    with FuseMounted(img) as mnt:
        src = os.path.join(mnt, "big")
        with open(src, "wb") as f:
            chunk = os.urandom(1 << 20)
            for _ in range(mib):
                f.write(chunk)
        os.sync()
        t0 = time.perf_counter()
        subprocess.run(["cp", src, os.path.join(mnt, "shared")], check=True)
        os.sync()
        t1 = time.perf_counter()
        subprocess.run(["cp", "--reflink=never", src, os.path.join(mnt, "copied")],
                       check=True)
        os.sync()
        t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=200000)
    ap.add_argument("--dirs", type=int, default=200)
    ap.add_argument("--data-files", type=int, default=20000)
    ap.add_argument("--size", default="4g")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--copy-mib", type=int, default=1024)
    a = ap.parse_args()
    byte_compile()
    best = Best()
    clean = {}
    with tempfile.TemporaryDirectory(prefix="fstool-rmap-") as d:
        empty, data = os.path.join(d, "empty"), os.path.join(d, "data")
        os.mkdir(empty)
        os.mkdir(data)
        empty_tree(empty, a.files, a.dirs)
        data_tree(data, a.data_files)
        img = os.path.join(d, "x.img")
        for rnd in range(a.repeat):
            for rmapbt in (1, 0):
                tag = f"rmapbt={rmapbt}"
                for name, src in (("populate-empty", empty), ("populate-data", data)):
                    mkfs(img, a.size, rmapbt)
                    wall, cpu, rss = run_child(FSTOOL + ["populate", "-q", img, src],
                                               cwd=ROOT)
                    best.add(f"{name} {tag}", wall, cpu, rss)
                    if rnd == 0:
                        clean[f"{name} {tag}"] = judge(img)
                mkfs(img, a.size, rmapbt)
                best.add(f"mount-creates {tag}", mount_creates(img, a.files // 10, 100))
                if rnd == 0:
                    clean[f"mount-creates {tag}"] = judge(img)
        mkfs(img, a.size, 1)
        shared, copied = copies(img, a.copy_mib)
        clean["copies"] = judge(img)
    print(f"{'':32} {'rmapbt=1':>10} {'rmapbt=0':>10} {'ratio':>7}")
    for name in ("populate-empty", "populate-data", "mount-creates"):
        w1, w0 = best.wall[f"{name} rmapbt=1"], best.wall[f"{name} rmapbt=0"]
        print(f"{name:32} {w1:10.2f} {w0:10.2f} {w1 / w0:7.2f}x")
    print(f"reflink copy of {a.copy_mib} MiB: {shared:.2f} s; data copy {copied:.2f} s "
          f"({shared / copied:.1%})")
    bad = [k for k, ok in clean.items() if not ok]
    print("images xfs_repair -n clean, rmapbt exact:", "yes" if not bad else f"NO: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
