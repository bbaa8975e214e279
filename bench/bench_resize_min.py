"""fstool resize -M against the smallest image mkfs + populate can make.

    python3 bench/bench_resize_min.py [--source /usr/share] [--size 4g]
        [--rounds 3] [--tmp DIR] [--base TREE] [--no-bisect] [--no-time]

1. Builds IMAGE: `fstool mkfs --size SIZE` + `fstool populate SOURCE`
   (once, in the scratch directory).
2. The bisection minimum: the smallest size (to 1 %, in MiB) at which
   `fstool mkfs --size S` + `fstool populate SOURCE` succeed (populate
   fails with no space below it).
3. `fstool resize -M` of a fresh copy of IMAGE: the size it reaches and
   the gap to the bisection minimum (the issue's bound: at most 5 %).
4. Side by side, medians of ROUNDS (wall and CPU, peak RSS): `resize -M`
   of a fresh copy of IMAGE, and the two-pass alternative, `mkfs.xfs` of
   the bisection minimum's size + `fstool populate SOURCE` into it.  With
   --base TREE (a built fstool checkout, such as main's), its `resize -M`
   runs in the same rounds.

The machine may be shared: compare the CPU columns.  Prints a JSON
summary last.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import Median, byte_compile, run_child  # noqa: E402

MIB = 1 << 20


def run(tree: str, args: list, **kw):
    """fstool ARGS run from the checkout ``tree``: (wall, cpu, rss)."""
    kw.setdefault("cwd", tree)
    return run_child([sys.executable, "-m", "fstool", *args], **kw)


def build(tree: str, path: str, size: str, source: str) -> bool:
    """mkfs --size + populate SOURCE into ``path``; False when populate
    runs out of space (or mkfs refuses the size)."""
    if os.path.exists(path):
        os.unlink(path)
    try:
        run(tree, ["mkfs", "--size", size, path])
        run(tree, ["populate", path, source], stderr=subprocess.DEVNULL)
    except subprocess.CalledProcessError:
        return False
    return True


def bisect(tree: str, scratch: str, source: str, lo_mib: int, hi_mib: int) -> int:
    """The smallest size in MiB (to 1 %) at which mkfs + populate of
    ``source`` succeed, between ``lo_mib`` (fails) and ``hi_mib`` (works)."""
    path = os.path.join(scratch, "bisect.img")
    while hi_mib - lo_mib > max(1, hi_mib // 100):
        mid = (lo_mib + hi_mib) // 2
        ok = build(tree, path, f"{mid}m", source)
        print(f"  mkfs + populate at {mid} MiB: {'ok' if ok else 'no space'}", flush=True)
        if ok:
            hi_mib = mid
        else:
            lo_mib = mid
    if os.path.exists(path):
        os.unlink(path)
    return hi_mib


def copy(src: str, dst: str) -> None:
    subprocess.run(["cp", "--sparse=always", src, dst], check=True)


def size_of(path: str) -> int:
    return os.stat(path).st_size


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default="/usr/share")
    ap.add_argument("--size", default="4g", help="the size of the image -M shrinks")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tmp", default=None, help="scratch directory (default: a new one in /tmp)")
    ap.add_argument("--base", default=None, help="another fstool checkout to time beside")
    ap.add_argument("--minimum", type=int, default=None,
                    help="the bisection minimum in MiB, if known (skips the bisection)")
    ap.add_argument("--no-time", action="store_true", help="skip the timed rounds")
    a = ap.parse_args(argv)
    byte_compile()
    if a.tmp:
        os.makedirs(a.tmp, exist_ok=True)
    scratch = tempfile.mkdtemp(dir=a.tmp, prefix="resize-min-")
    out: dict = {"source": a.source, "size": a.size}
    try:
        image = os.path.join(scratch, "full.img")
        if not build(ROOT, image, a.size, a.source):
            print(f"populate of {a.source} does not fit in {a.size}", file=sys.stderr)
            return 1
        # 2. the bisection minimum
        if a.minimum:
            low = a.minimum
        else:
            used = sum(os.path.getsize(os.path.join(d, f)) for d, _s, fs in os.walk(a.source)
                       for f in fs if os.path.isfile(os.path.join(d, f))
                       and not os.path.islink(os.path.join(d, f)))
            lo = max(16, used // MIB // 2)
            hi = size_of(image) // MIB
            low = bisect(ROOT, scratch, a.source, lo, hi)
        out["bisection_min"] = low * MIB
        # 3. what -M reaches
        work = os.path.join(scratch, "m.img")
        copy(image, work)
        run(ROOT, ["resize", work, "-M"])
        got = size_of(work)
        out["resize_M"] = got
        out["gap_percent"] = round(100 * (got / (low * MIB) - 1), 1)
        print(f"bisection minimum {low} MiB; resize -M reached {got / MIB:.0f} MiB "
              f"({out['gap_percent']:+.1f} %)", flush=True)
        # 4. side by side
        if not a.no_time:
            med = Median()
            two = os.path.join(scratch, "two.img")
            for _ in range(a.rounds):
                for name, tree in (("resize -M", ROOT), ("resize -M (base)", a.base)):
                    if tree is None:
                        continue
                    copy(image, work)
                    med.add(name, *run(tree, ["resize", work, "-M"]))
                with open(two, "wb") as f:
                    f.truncate(low * MIB)
                w1, c1, r1 = run_child(["mkfs.xfs", "-q", "-f", two])
                w2, c2, r2 = run(ROOT, ["populate", two, a.source])
                med.add("mkfs.xfs + populate", w1 + w2, c1 + c2, max(r1, r2))
                os.unlink(two)
            print(f"{'':24} {'wall s':>8} {'cpu s':>8} {'rss MiB':>8}")
            for name in med.walls:
                print(f"{name:24} {med.wall[name]:8.2f} {med.cpu[name]:8.2f} "
                      f"{med.rss[name]:8.0f}")
            out["times"] = {name: {"wall": med.wall[name], "cpu": med.cpu[name],
                                   "rss_mib": med.rss[name]} for name in med.walls}
        print(json.dumps(out))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
