"""Read benchmark: fstool (native and pure-Python) against libfsxfs (C) and
dissect.xfs (pure Python) on the same image, in one run.

    python3 bench/bench_read.py [--image IMG] [--repeat 3]

Without --image it builds bench/results/read.img with make_read_image.py
(root + loop mount).  Each reader runs in its own process; the best of
--repeat runs is reported, after one warm-up pass so every reader sees a warm
page cache.  Prints a table and the ratios to libfsxfs.
"""
import argparse
import json
import os
import subprocess
import sys

from common import HERE, bench_image
READERS = [("fstool native", "fstool", {}),
           ("fstool pure-python", "fstool", {"FSTOOL_PURE_PYTHON": "1"}),
           ("libfsxfs", "libfsxfs", {}),
           ("dissect.xfs", "dissect.xfs", {})]


def run(reader, mode, img, extra_env):
    env = dict(os.environ, **extra_env)
    out = subprocess.run([sys.executable, os.path.join(HERE, "read_walkers.py"), reader, mode,
                          img], env=env, capture_output=True, text=True)
    if out.returncode:
        return None, out.stderr.strip().splitlines()[-1] if out.stderr else "failed"
    return json.loads(out.stdout), None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--image")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    img = bench_image(a.image, "read.img", lambda p: subprocess.run(
        [sys.executable, os.path.join(HERE, "make_read_image.py"), p], check=True))
    subprocess.run(["cat", img], stdout=subprocess.DEVNULL, check=True)   # warm the cache
    results = {}
    for label, reader, env in READERS:
        for mode in ("list", "read"):
            best = None
            for _ in range(a.repeat):
                r, err = run(reader, mode, img, env)
                if r is None:
                    best = {"error": err}
                    break
                if best is None or r["seconds"] < best["seconds"]:
                    best = r
            results[(label, mode)] = best
    ref_list = results[("libfsxfs", "list")]
    ref_read = results[("libfsxfs", "read")]
    print(f"{'reader':22s} {'entries/s':>11s} {'x libfsxfs':>10s} {'files/s':>9s} "
          f"{'MB/s':>7s} {'x libfsxfs':>10s} {'RSS MB':>7s}")
    for label, _reader, _env in READERS:
        lr, rr = results[(label, "list")], results[(label, "read")]
        if "error" in lr or "error" in rr:
            print(f"{label:22s} error: {lr.get('error') or rr.get('error')}")
            continue
        eps = lr["entries"] / lr["seconds"]
        fps = rr["files"] / rr["seconds"]
        mbs = rr["bytes"] / rr["seconds"] / 1e6
        ratio_l = eps / (ref_list["entries"] / ref_list["seconds"]) if "error" not in ref_list else 0
        ratio_r = fps / (ref_read["files"] / ref_read["seconds"]) if "error" not in ref_read else 0
        print(f"{label:22s} {eps:11,.0f} {ratio_l:10.2f} {fps:9,.0f} {mbs:7.1f} {ratio_r:10.2f} "
              f"{rr['rss_mb']:7.0f}")
    print(f"image: {img} ({results[('libfsxfs', 'list')].get('entries')} entries)")


if __name__ == "__main__":
    main()
