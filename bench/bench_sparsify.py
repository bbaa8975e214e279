"""fstool sparsify on a large image: the time to give freed space back.

    python3 bench/bench_sparsify.py IMAGE [--remove PATH ...] [--rounds 3]

IMAGE (e.g. a kernel-written copy of /usr in a 12 GiB image) is copied
(sparse) to a scratch file; the paths given with --remove are deleted
with `fstool rm -r --no-punch` (default: nothing), so that the image file holds freed
but allocated space, as it does after real use; then `fstool sparsify` (which checks the
image first) and `fstool sparsify --no-check` are timed, each on a fresh
copy, medians of the rounds.  Prints the host's allocated size before and
after and the filesystem's used bytes.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import byte_compile, run_child  # noqa: E402

FSTOOL = [sys.executable, "-m", "fstool"]


def _copy(src: str, dst: str) -> None:
    subprocess.run(["cp", "--sparse=always", src, dst], check=True)


def _alloc(path: str) -> int:
    return os.stat(path).st_blocks * 512


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("image")
    ap.add_argument("--remove", action="append", default=[],
                    help="a path inside the image to delete first (repeatable)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tmp", default=None, help="scratch directory (default: beside IMAGE)")
    a = ap.parse_args(argv)
    byte_compile()
    tmp = tempfile.mkdtemp(dir=a.tmp or os.path.dirname(os.path.abspath(a.image)),
                           prefix="sparsify-bench-")
    try:
        base = os.path.join(tmp, "base.img")
        _copy(a.image, base)
        for path in a.remove:
            subprocess.run(FSTOOL + ["rm", "-r", "--no-punch", base, path], check=True,
                           stdout=subprocess.DEVNULL)
        before = _alloc(base)
        times = {"sparsify": [], "sparsify --no-check": []}
        after = used = None
        for _ in range(a.rounds):
            for name, extra in (("sparsify", []), ("sparsify --no-check", ["--no-check"])):
                img = os.path.join(tmp, "run.img")
                _copy(base, img)
                out = os.path.join(tmp, "out.json")
                with open(out, "w") as f:
                    wall, _cpu, _rss = run_child(FSTOOL + ["sparsify", "--json", *extra, img],
                                                 stdout=f)
                with open(out) as f:
                    r = json.load(f)
                times[name].append(wall)
                after, used = r["host_after"], r["used_bytes"]
                os.unlink(img)
        print(f"image {a.image}: {os.path.getsize(a.image) / (1 << 30):.1f} GiB, "
              f"removed {a.remove or 'nothing'}")
        print(f"host allocated: {before / (1 << 20):.1f} MiB before, "
              f"{after / (1 << 20):.1f} MiB after; the filesystem uses "
              f"{used / (1 << 20):.1f} MiB")
        for name, ts in times.items():
            print(f"fstool {name}: median {statistics.median(ts):.2f} s "
                  f"({', '.join(f'{t:.2f}' for t in ts)})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
