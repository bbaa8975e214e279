#!/usr/bin/env python3
"""The mount's memory as files are created: the resident set of the
``fstool mount`` process after 10,000 creates and at points up to FILES.

    python3 bench/bench_mount_rss.py [--files 1000000] [--per-dir 1000] [--size 8g]
                                     [--at 10000,100000,250000,500000,1000000]
                                     [--baseline TREE]

Empty files (open O_CREAT|O_EXCL, close) PER_DIR to a directory, one
directory after another, on a fresh image made by ``fstool mkfs``; at
each point of AT the mount is synced (syncfs: the open group of creates
and the checkpoint written) and the server's VmRSS and CPU time read from
/proc.  The issue's target: the RSS after 1,000,000 creates within 1.5x
of the RSS after 10,000.  ``--baseline TREE``: the same run with the
fstool of another checkout (a built copy of main), after this one's.
Needs root (FUSE mounts).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_mount import Fstool, _make, cpu_seconds, rss_kib  # noqa: E402


def run(repo: str, work: str, args) -> list:
    """[(creates, RSS MiB, server CPU s, wall s)] at each point of AT."""
    class Tree(Fstool):
        name = "fstool"

    Tree.repo = repo
    t = Tree(work, args.size)
    t.mount()
    rows = []
    try:
        made = 0
        t0 = time.perf_counter()
        d = -1
        for point in args.at:
            while made < point:
                if made % args.per_dir == 0:
                    d += 1
                    top = os.path.join(t.mnt, f"d{d}")
                    os.mkdir(top)
                _make(os.path.join(top, f"f{made}"))
                made += 1
            subprocess.run(["sync", "-f", t.mnt], check=True)
            rows.append((made, rss_kib(t.pid) / 1024, cpu_seconds(t.pid),
                         time.perf_counter() - t0))
            print(f"  {repo}: {made:>9,} creates  RSS {rows[-1][1]:8.1f} MiB  "
                  f"server CPU {rows[-1][2]:7.1f} s  wall {rows[-1][3]:7.1f} s", flush=True)
    finally:
        t.umount()
        os.unlink(t.img)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=1_000_000)
    ap.add_argument("--per-dir", type=int, default=1000)
    ap.add_argument("--size", default="8g")
    ap.add_argument("--at", default=None,
                    help="comma-separated create counts to measure at (default: 10,000, "
                         "then 10%%, 25%%, 50%% and 100%% of FILES)")
    ap.add_argument("--baseline", default=None, help="another checkout, run after this one")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (FUSE mounts)")
    if args.at:
        args.at = sorted(int(x) for x in args.at.split(","))
    else:
        args.at = sorted({10_000, *(args.files * p // 100 for p in (10, 25, 50, 100))})
    trees = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    if args.baseline:
        trees.append(os.path.abspath(args.baseline))
    work = tempfile.mkdtemp(prefix="bench-rss-", dir=os.environ.get("BENCH_DIR"))
    try:
        results = {repo: run(repo, work, args) for repo in trees}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    for repo, rows in results.items():
        first = rows[0][1]
        print(repo)
        print(f"{'creates':>10} {'RSS MiB':>9} {'x first':>8} {'CPU s':>8} {'wall s':>8}")
        for made, rss, cpu, wall in rows:
            print(f"{made:>10,} {rss:>9.1f} {rss / first:>7.2f}x {cpu:>8.1f} {wall:>8.1f}")


if __name__ == "__main__":
    main()
