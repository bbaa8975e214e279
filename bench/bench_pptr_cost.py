"""What parent pointers cost: populate and the mount's creates on a
``-n parent=1`` image against the same on an image without them, in one run.

    python3 bench/bench_pptr_cost.py [--tree DIR] [--files 20000] [--dirs 100]
                                     [--size 2g] [--repeat 3]

Each round, taking turns between the two kinds of image (both made by
``fstool mkfs --size SIZE``, the second with ``-n parent=1``):

- ``fstool populate IMG TREE`` into the fresh image (TREE: ``--tree``,
  default /usr/share/man), wall and CPU time;
- ``fstool mount`` of another fresh image, then FILES empty files created
  in DIRS directories, one directory after the other (``seq``) and round
  robin (``rr``) (bench/bench_mount.py's create patterns): creates per
  second, the sync included.

Prints the medians of each and the ratio with parent pointers to without
(the target: within 20%, i.e. populate time at most 1.2x, creates per
second at least 0.8x).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from bench_mount import creates, wait_mounted  # noqa: E402
from common import Median, byte_compile, run_child  # noqa: E402

KINDS = (("plain", []), ("parent=1", ["-n", "parent=1"]))


def fstool(*args):
    return [sys.executable, "-m", "fstool", *map(str, args)]


def mkfs(img: str, size: str, opts) -> None:
    subprocess.run(fstool("mkfs", "-q", "-f", *opts, "--size", size, img), check=True,
                   cwd=REPO)


def mount_creates(img: str, mnt: str, files: int, dirs: int, pattern: str) -> float:
    proc = subprocess.Popen(fstool("mount", "-f", img, mnt), cwd=REPO)
    try:
        wait_mounted(mnt)
        rate = creates(mnt, files, dirs, pattern)
    finally:
        subprocess.run(["fusermount3", "-u", mnt], check=True)
        proc.wait(600)
    if proc.returncode:
        raise RuntimeError(f"fstool mount exited {proc.returncode}")
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", default="/usr/share/man")
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--dirs", type=int, default=100)
    ap.add_argument("--size", default="2g")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    byte_compile()
    subprocess.run(["tar", "cf", "/dev/null", a.tree], check=True)    # the tree cached
    work = tempfile.mkdtemp(prefix="pptr-cost-")
    img, mnt = os.path.join(work, "i.img"), os.path.join(work, "mnt")
    os.mkdir(mnt)
    pop = Median()
    rates: dict = {}
    try:
        for _ in range(a.repeat):
            for kind, opts in KINDS:
                mkfs(img, a.size, opts)
                w, c, r = run_child(fstool("populate", img, a.tree), cwd=REPO)
                pop.add(kind, w, c, r)
                for pattern in ("seq", "rr"):
                    mkfs(img, a.size, opts)
                    rates.setdefault((kind, pattern), []).append(
                        mount_creates(img, mnt, a.files, a.dirs, pattern))
    finally:
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-u", mnt])
        if os.path.exists(img):
            os.unlink(img)
        os.rmdir(mnt)
        os.rmdir(work)
    load = os.getloadavg()[0]
    print(f"tree {a.tree}; {a.files} creates in {a.dirs} directories; {a.repeat} rounds; "
          f"load average {load:.1f}")
    for kind, _ in KINDS:
        print(f"populate {kind:9s} wall {statistics.median(pop.walls[kind]):6.2f} s  "
              f"CPU {statistics.median(pop.cpus[kind]):6.2f} s  {pop.rss[kind]:5.0f} MB RSS")
    pw = statistics.median(pop.walls["parent=1"]) / statistics.median(pop.walls["plain"])
    pc = statistics.median(pop.cpus["parent=1"]) / statistics.median(pop.cpus["plain"])
    print(f"populate parent=1 / plain: wall {pw:.2f}x, CPU {pc:.2f}x")
    for pattern in ("seq", "rr"):
        plain = statistics.median(rates[("plain", pattern)])
        pp = statistics.median(rates[("parent=1", pattern)])
        print(f"mount creates {pattern:3s}: plain {plain:7.0f}/s  parent=1 {pp:7.0f}/s  "
              f"ratio {pp / plain:.2f}x")


if __name__ == "__main__":
    main()
