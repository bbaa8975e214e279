#!/usr/bin/env python3
"""Streaming reads through fstool mount and fuse2fs, alternating, many rounds.

    python3 bench/bench_mount_read.py [--rounds 5] [--mib 256] [--size 2g]

bench_mount.py reads once per server, and one read of a file after
dropping the caches spreads from 500 to 2,500 MB/s between runs of the
same code on this machine (the virtual disk).  Here each round mounts a
fresh image for each server in turn, writes MIB MiB (1 MiB writes, then
fsync), and reads it back twice with 1 MiB reads: cold (after dropping
every cache) and with the image file in the host's page cache (the
mounted file's pages alone dropped, posix_fadvise DONTNEED): the first is
what a user sees, the second the server's own cost per byte.  Prints
every round and the medians.  Needs root, fuse2fs and FUSE.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_mount as B  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--size", default="2g")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (drop_caches)")
    if not shutil.which("fuse2fs"):
        sys.exit("fuse2fs is not installed (apt-get install fuse2fs)")
    work = tempfile.mkdtemp(prefix="bench-mount-read-", dir=os.environ.get("BENCH_DIR"))
    got: dict = {}
    try:
        for r in range(args.rounds):
            for cls in (B.Fstool, B.Fuse2fs):
                sub = os.path.join(work, f"{cls.name}-{r}")
                os.mkdir(sub)
                t = cls(sub, args.size)
                t.mount()
                try:
                    path = os.path.join(t.mnt, "big")
                    B.stream_write(path, args.mib)
                    cold = B.stream_read(path)
                    subprocess.run(["cat", t.img], stdout=subprocess.DEVNULL, check=True)
                    warm = B.stream_read(path, cold=False)
                finally:
                    t.umount()
                shutil.rmtree(sub, ignore_errors=True)
                got.setdefault(cls.name, []).append((cold, warm))
                print(f"round {r + 1} {cls.name:8} cold {cold:8,.0f} MB/s   image cached "
                      f"{warm:8,.0f} MB/s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: (statistics.median(c for c, _w in v), statistics.median(w for _c, w in v))
           for k, v in got.items()}
    for k, (c, w) in med.items():
        print(f"median   {k:8} cold {c:8,.0f} MB/s   image cached {w:8,.0f} MB/s")
    if "fstool" in med and "fuse2fs" in med:
        f, e = med["fstool"], med["fuse2fs"]
        print(f"fstool / fuse2fs: cold {f[0] / e[0]:.2f}x, image cached {f[1] / e[1]:.2f}x")


if __name__ == "__main__":
    main()
