"""Read benchmark: fstool (three walkers, native and pure-Python) against
libfsxfs (C) and dissect.xfs (pure Python) on the same image, in one run.

    python3 bench/bench_read.py [--image IMG | --kernel] [--repeat 5]

The default image is the one issue 16 measures: 22,000 files in 40
directories of 500 and one of 2,000, about 90 MB, made by ``mkfs.xfs -p``
(bench/make_proto_read_image.py, no root needed), kept as
bench/results/proto-read.img.  ``--kernel`` uses instead the kernel-written
image of every directory form (bench/make_read_image.py, root and a loop
mount), bench/results/read.img.

Each reader runs in its own process, imports included; the readers take
turns, round after round, and the best of --repeat rounds is kept (wall
time and, separately, CPU time), after one warm-up pass so every reader sees
a warm page cache.  Prints a table with the ratios to libfsxfs and the peak
memory, and the targets of issue 16: at least 1.2x libfsxfs for listing and
reading through the public walk, with at most libfsxfs's memory + 10 MB.
"""
import argparse
import json
import os
import subprocess
import sys

from common import HERE, bench_image

READERS = [("fstool walk (user API)", "fstool-walk", {}),
           ("fstool scandir/open", "fstool-scandir", {}),
           ("fstool listdir/inode", "fstool", {}),
           ("fstool walk, pure-python", "fstool-walk", {"FSTOOL_PURE_PYTHON": "1"}),
           ("libfsxfs", "libfsxfs", {}),
           ("dissect.xfs", "dissect.xfs", {})]
REF = "libfsxfs"


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
    ap.add_argument("--kernel", action="store_true",
                    help="the kernel-written image of every directory form")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--skip-slow", action="store_true",
                    help="leave out the pure-Python readers")
    a = ap.parse_args()
    if a.kernel:
        img = bench_image(a.image, "read.img", lambda p: subprocess.run(
            [sys.executable, os.path.join(HERE, "make_read_image.py"), p], check=True))
    else:
        img = bench_image(a.image, "proto-read.img", lambda p: subprocess.run(
            [sys.executable, os.path.join(HERE, "make_proto_read_image.py"), p], check=True))
    readers = [r for r in READERS if not (a.skip_slow and (
        r[1] == "dissect.xfs" or r[2].get("FSTOOL_PURE_PYTHON")))]
    subprocess.run(["cat", img], stdout=subprocess.DEVNULL, check=True)   # warm the cache
    best: dict = {}
    for _round in range(a.repeat):
        for label, reader, env in readers:
            for mode in ("list", "read"):
                key = (label, mode)
                if "error" in best.get(key, {}):
                    continue
                r, err = run(reader, mode, img, env)
                if r is None:
                    best[key] = {"error": err}
                    continue
                b = best.setdefault(key, dict(r))
                b["seconds"] = min(b["seconds"], r["seconds"])
                b["cpu"] = min(b["cpu"], r["cpu"])
                b["rss_mb"] = max(b["rss_mb"], r["rss_mb"])
    ref = {m: best[(REF, m)] for m in ("list", "read")}
    print(f"image: {img}  ({ref['list'].get('entries')} entries, "
          f"{ref['read'].get('bytes', 0) / 1e6:.1f} MB in {ref['read'].get('files')} files); "
          f"best of {a.repeat} rounds")
    print(f"{'reader':26s} {'entries/s':>10s} {'x wall':>7s} {'x cpu':>6s} {'files/s':>9s} "
          f"{'MB/s':>6s} {'x wall':>7s} {'x cpu':>6s} {'RSS MB':>7s}")
    for label, _reader, _env in readers:
        lr, rr = best[(label, "list")], best[(label, "read")]
        if "error" in lr or "error" in rr:
            print(f"{label:26s} error: {lr.get('error') or rr.get('error')}")
            continue
        eps = lr["entries"] / lr["seconds"]
        fps = rr["files"] / rr["seconds"]
        mbs = rr["bytes"] / rr["seconds"] / 1e6
        lw = ref["list"]["seconds"] / lr["seconds"]
        lc = ref["list"]["cpu"] / max(lr["cpu"], 1e-9)
        rw = ref["read"]["seconds"] / rr["seconds"]
        rc = ref["read"]["cpu"] / max(rr["cpu"], 1e-9)
        rss = max(lr["rss_mb"], rr["rss_mb"])
        print(f"{label:26s} {eps:10,.0f} {lw:7.2f} {lc:6.2f} {fps:9,.0f} {mbs:6.1f} {rw:7.2f} "
              f"{rc:6.2f} {rss:7.1f}")
        best[(label, "summary")] = (lw, rw, rss)
    ref_rss = max(ref["list"]["rss_mb"], ref["read"]["rss_mb"])
    walk = best.get(("fstool walk (user API)", "summary"))
    if walk:
        lw, rw, rss = walk
        ok = lw >= 1.2 and rw >= 1.2 and rss <= ref_rss + 10
        print(f"target (issue 16): walk >= 1.2x libfsxfs listing and reading, RSS <= "
              f"{ref_rss:.1f} + 10 MB: listing {lw:.2f}x, reading {rw:.2f}x, RSS {rss:.1f} MB "
              f"-> {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
