"""Statistics benchmark: agstats, freesp and an inobt summary on a large
kernel-written image, against xfs_db's freesp in the same run.

    python3 bench/bench_stats.py [--inodes 10000000] [--image IMG]

Without --image, builds bench/results/check-<N>.img (see bench_check.py;
about 7 minutes and 5 GB of disk for 10,000,000 inodes).
"""
import argparse
import subprocess
import sys
import time

from bench_check import build
from common import bench_image


def timed(cmd):
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--inodes", type=int, default=10_000_000)
    ap.add_argument("--image")
    a = ap.parse_args()
    img = bench_image(a.image, f"check-{a.inodes}.img", lambda p: build(p, a.inodes))
    fst = [sys.executable, "-m", "fstool"]
    rows = [
        ("fstool agstats", fst + ["agstats", "--json", img]),
        ("fstool freesp", fst + ["freesp", img]),
        ("xfs_db freesp -s", ["xfs_db", "-r", "-f", "-c", "freesp -s", img]),
        ("fstool btree dump --summary (inobt, AG 0)",
         fst + ["btree", "dump", "--summary", "--json", img, "--ag", "0", "--tree", "inobt"]),
    ]
    for name, cmd in rows:
        print(f"{name:45s} {min(timed(cmd) for _ in range(3)):7.2f} s")


if __name__ == "__main__":
    main()
