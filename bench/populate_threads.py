"""Where populate's CPU runs: the whole process's CPU time and the writing
(main) thread's alone, for a populate of a host directory into a fresh
image, this checkout and optionally another one taking turns.

On a loaded machine a run's wall time says little, and the CPU time of the
whole process does not show work moved to another thread (the source's
walk, the reads of the files ahead): the main thread's CPU time is the part
no other thread can take, so it bounds the wall time an idle machine with
enough cores would give.  Each round also gives the CPU time of every
other thread by name (the walker, the reader of runs, the data thread
behind, the writeback starter), read as it ends.  Needs mkfs.xfs.

    python3 bench/populate_threads.py --tree /usr/share [--baseline DIR]
                                      [--repeat 4] [--size 1200m]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = """
import collections, json, sys, threading, time
# every other thread's CPU clock, read as it ends, summed by name
others = collections.defaultdict(float)
run = threading.Thread.run
def timed(self):
    try:
        run(self)
    finally:
        others[self.name] += time.thread_time()
threading.Thread.run = timed
from fstool.ops.populate import populate
w0, p0, m0 = time.perf_counter(), time.process_time(), time.thread_time()
populate(sys.argv[1], sys.argv[2])
main = time.thread_time() - m0
print(json.dumps({"wall": time.perf_counter() - w0, "cpu": time.process_time() - p0,
                  "main": main, "threads": dict(others)}))
"""


def one(repo: str, tree: str, size: str, workdir: str) -> dict:
    img = os.path.join(workdir, "threads.img")
    subprocess.run(["truncate", "-s", size, img], check=True)
    subprocess.run(["mkfs.xfs", "-q", "-f", img], check=True)
    try:
        out = subprocess.run([sys.executable, "-c", CHILD, img, tree], cwd=repo, check=True,
                             capture_output=True, text=True,
                             env=dict(os.environ, PYTHONPATH=repo)).stdout
    finally:
        os.remove(img)
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", required=True)
    ap.add_argument("--baseline", help="another fstool checkout, timed in turn")
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--size", default="1200m")
    args = ap.parse_args()
    repos = [("this checkout", os.path.dirname(HERE))]
    if args.baseline:
        repos.append(("baseline", os.path.abspath(args.baseline)))
    got = {name: [] for name, _ in repos}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as work:
        for r in range(args.repeat):
            for name, repo in repos:
                t = one(repo, args.tree, args.size, work)
                got[name].append(t)
                print(f"round {r + 1}: {name}: wall {t['wall']:.2f} s, CPU {t['cpu']:.2f} s, "
                      f"main thread {t['main']:.2f} s; "
                      + ", ".join(f"{k} {v:.2f} s" for k, v in sorted(t["threads"].items())),
                      flush=True)
    print(f"{args.tree}, medians of {args.repeat} (load average "
          f"{os.getloadavg()[0]:.1f} at the end)")
    for name, runs in got.items():
        med = {k: statistics.median(t[k] for t in runs) for k in ("wall", "cpu", "main")}
        print(f"{name:14} wall {med['wall']:6.2f} s  CPU {med['cpu']:5.2f} s  "
              f"main thread {med['main']:5.2f} s")


if __name__ == "__main__":
    main()
