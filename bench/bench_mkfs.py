"""mkfs benchmark: fstool mkfs against mkfs.xfs -K on the same sparse file
sizes, in one run.  Reports wall time (best of --repeat) and the disk space
the image takes afterwards.

    python3 bench/bench_mkfs.py [--sizes 1t,16g] [--repeat 3]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time


def run(cmd, img, size):
    if os.path.exists(img):
        os.unlink(img)
    subprocess.run(["truncate", "-s", size, img], check=True)
    t0 = time.perf_counter()
    subprocess.run(cmd + [img], check=True, stdout=subprocess.DEVNULL)
    dt = time.perf_counter() - t0
    used = os.stat(img).st_blocks * 512
    os.unlink(img)
    return dt, used


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1t,16g")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    tools = {
        "fstool mkfs": [sys.executable, "-m", "fstool", "mkfs", "-q", "-f"],
        "mkfs.xfs -K": ["mkfs.xfs", "-q", "-f", "-K"],
    }
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d:
        img = os.path.join(d, "bench.img")
        print(f"{'size':>6s} {'tool':14s} {'seconds':>8s} {'disk MiB':>9s}")
        for size in a.sizes.split(","):
            res = {}
            for name, cmd in tools.items():
                best = min((run(cmd, img, size) for _ in range(a.repeat)),
                           key=lambda r: r[0])
                res[name] = best
                print(f"{size:>6s} {name:14s} {best[0]:8.3f} {best[1] / 2**20:9.1f}")
            ratio = res["fstool mkfs"][0] / res["mkfs.xfs -K"][0]
            print(f"{size:>6s} {'ratio':14s} {ratio:8.2f}x time of mkfs.xfs -K")


if __name__ == "__main__":
    main()
