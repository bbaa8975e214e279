#!/usr/bin/env python3
"""fsx-style random operations through an fstool mount, long runs.

    python3 bench/fsx_mount.py [--ops 100000] [--seeds 1] [--maxsize 1048576]

Each seed: a fresh 256 MiB image, fixtures/fsx_mount.py for OPS operations on one
file (writes, reads, truncates, mmap reads, fsyncs, reopens, every read
checked against a shadow copy), unmount, then xfs_repair -n and, as root,
the kernel's view of the file compared with the mount's.
"""
from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from fixtures import images  # noqa: E402
from fixtures.fusemount import FuseMounted, env, fstool_image  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=100000)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--first", type=int, default=1)
    ap.add_argument("--maxsize", type=int, default=1 << 20)
    args = ap.parse_args()
    failed = 0
    for seed in range(args.first, args.first + args.seeds):
        with tempfile.TemporaryDirectory() as d:
            img = fstool_image(Path(d), "256m")
            t = time.perf_counter()
            m = FuseMounted(img)
            with m as mnt:
                r = subprocess.run([sys.executable, "-m", "fixtures.fsx_mount", str(mnt / "f"),
                                    str(seed), str(args.ops), str(args.maxsize)],
                                   cwd=REPO, env=env(), capture_output=True, text=True)
                digest = hashlib.sha1((mnt / "f").read_bytes()).hexdigest()
            took = time.perf_counter() - t
            rep = subprocess.run(["xfs_repair", "-n", "-f", str(img)], capture_output=True)
            same = "-"
            if images.loop_available():
                with images.Mounted(img, readonly=True) as k:
                    same = hashlib.sha1((k / "f").read_bytes()).hexdigest() == digest
            ok = r.returncode == 0 and rep.returncode == 0 and same is not False \
                and m.returncode == 0
            failed += not ok
            print(f"seed {seed}: {r.stdout.strip()} in {took:.0f} s, fstool exit "
                  f"{m.returncode}, xfs_repair -n exit {rep.returncode}, kernel reads the "
                  f"same: {same}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
