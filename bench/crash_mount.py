#!/usr/bin/env python3
"""kill -9 of fstool mount at many moments of a seeded workload.

    python3 bench/crash_mount.py [--runs 24] [--max-delay 6]

Each run: a fresh image, fixtures/mount_workload.py in the mount, the mount
process killed with SIGKILL after a delay spread over (0.2, MAX-DELAY)
seconds; then the kernel mounts the image (replaying fstool's log), every
file fsync'd before the kill must be intact, xfs_repair -n must be clean,
and fstool log replay of a copy must give the kernel's tree.  Needs root.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from fixtures.mount_workload import crash_once  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=24)
    ap.add_argument("--max-delay", type=float, default=6.0)
    args = ap.parse_args()
    failed = 0
    for k in range(args.runs):
        delay = 0.2 + (args.max_delay - 0.2) * k / max(args.runs - 1, 1)
        with tempfile.TemporaryDirectory() as d:
            try:
                res = crash_once(Path(d), 100 + k, delay)
                ok = not res["bad"]
                what = f"{res['ops']} ops, {res['synced']} files fsync'd, " + \
                    ("all intact" if ok else f"damaged: {res['bad'][:3]}")
            except AssertionError as e:
                ok = False
                what = f"FAILED: {str(e)[:300]}"
        failed += not ok
        print(f"run {k + 1:2d} kill after {delay:4.1f} s: {what}", flush=True)
    print(f"{args.runs - failed} of {args.runs} runs recovered clean with every fsync'd "
          "file intact")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
