"""check benchmark: fstool check against xfs_repair -n on the same
kernel-written image, in one run: wall time and peak RSS.

    python3 bench/bench_check.py [--inodes 200000] [--image IMG] [--repeat 3]

Without --image, builds bench/results/check-<N>.img by letting the kernel
create N empty files in N/1000 directories (root and a loop mount needed).
"""
import argparse
import os
import subprocess
import sys
import tempfile

from common import bench_image


def build(path: str, inodes: int) -> None:
    # inodes may take 25% of the space (imaxpct): leave room for 512-byte inodes
    size = max(8, inodes * 2048 // (1 << 30) + 8)
    tmp = path + ".tmp"
    subprocess.run(["truncate", "-s", "0", tmp], check=True)
    subprocess.run(["truncate", "-s", f"{size}G", tmp], check=True)
    subprocess.run(["mkfs.xfs", "-q", "-f", tmp], check=True)
    mnt = tempfile.mkdtemp()
    subprocess.run(["mount", "-o", "loop", tmp, mnt], check=True)
    try:
        per = 1000
        for d in range(inodes // per):
            dpath = os.path.join(mnt, f"d{d:05d}")
            os.mkdir(dpath)
            for i in range(per):
                os.close(os.open(os.path.join(dpath, f"f{i:05d}"), os.O_CREAT | os.O_WRONLY))
    finally:
        subprocess.run(["umount", mnt], check=True)
        os.rmdir(mnt)
    os.rename(tmp, path)


def measure(cmd):
    """Wall seconds and peak RSS (MB) of one child process."""
    wrapper = ("import resource,subprocess,sys,time;t=time.perf_counter();"
               "r=subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL,"
               "stderr=subprocess.DEVNULL).returncode;"
               "print(time.perf_counter()-t,"
               "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024,r)")
    out = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True,
                         text=True, check=True).stdout.split()
    return float(out[0]), float(out[1]), int(out[2])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--inodes", type=int, default=200000)
    ap.add_argument("--image")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    img = bench_image(a.image, f"check-{a.inodes}.img", lambda p: build(p, a.inodes))
    subprocess.run(["cat", img], stdout=subprocess.DEVNULL)
    tools = {"xfs_repair -n": ["xfs_repair", "-n", "-f", img],
             "fstool check": [sys.executable, "-m", "fstool", "check", img],
             "fstool check -j2": [sys.executable, "-m", "fstool", "check", "-j", "2", img]}
    res = {}
    for name, cmd in tools.items():
        runs = [measure(cmd) for _ in range(a.repeat)]
        best = min(runs)
        res[name] = best
        print(f"{name:16s} {best[0]:7.2f} s  {best[1]:7.0f} MB RSS  exit {best[2]}")
    r = res["fstool check"]
    x = res["xfs_repair -n"]
    print(f"ratio: {r[0] / x[0]:.2f}x the time, {r[1] / x[1]:.2f}x the memory of "
          "xfs_repair -n")


if __name__ == "__main__":
    main()
