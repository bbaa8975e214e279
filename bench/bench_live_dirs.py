"""Incremental directory changes: the cost of one change in a large
directory against a small one, next to the kernel's, and long kernel-twin
workloads.

    python3 bench/bench_live_dirs.py cost [--big 100000] [--ops 2000]
    python3 bench/bench_live_dirs.py twin [--seeds 20] [--first 100]

``cost``: an image whose directory /big holds --big entries and /small 10
(filled by populate's bulk path); then --ops creates, lookups and removes
in each through fstool's Namespace, one transaction per operation as the
FUSE mount does, and the same through the kernel on a loop-mounted copy
(open(O_CREAT), stat, unlink; no fsync).  Prints microseconds per
operation and the big/small ratio for each.

``twin``: seeded workloads (fixtures/livedirs.workload) through fstool on
one image and the kernel on its twin; each must be repair-clean, read the
same through the kernel, and have the same directory blocks.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fixtures import livedirs as L            # noqa: E402
from fixtures.images import Mounted           # noqa: E402


def build(img: Path, big: int) -> None:
    from fstool.ns.namespace import Meta, Namespace
    from fstool.ns.writer import Writer
    subprocess.run(["truncate", "-s", "0", str(img)], check=True)
    subprocess.run(["truncate", "-s", "4G", str(img)], check=True)
    subprocess.run(["mkfs.xfs", "-q", "-f", str(img)], check=True)
    with Writer(img) as w:
        now = w.now_ns()
        with w.transaction():
            ns = Namespace(w, now, bulk=True)
            root = w.sb.rootino
            b = ns.mkdir(root, b"big", Meta(perm=0o755))
            s = ns.mkdir(root, b"small", Meta(perm=0o755))
            ns.finish()
        ns.committed()
        for lo in range(0, big, 20000):
            with w.transaction():
                items = [(b"entry-%08d" % k, 0o644, 0, 0, now, now)
                         for k in range(lo, min(big, lo + 20000))]
                ns.create_empty_files(b, items, now)
                ns.finish()
            ns.committed()
        with w.transaction():
            ns.create_empty_files(s, [(b"entry-%08d" % k, 0o644, 0, 0, now, now)
                                      for k in range(10)], now)
            ns.finish()


def fstool_cost(img: Path, ops: int) -> dict:
    from fstool.ns.namespace import Meta, Namespace
    from fstool.ns.writer import Writer
    out = {}
    with Writer(img) as w:
        ns = Namespace(w)
        for dname in ("small", "big"):
            d = ns.lookup("/" + dname)
            names = [b"new-%s-%06d" % (dname.encode(), k) for k in range(ops)]
            for what in ("create", "lookup", "remove"):
                t = time.perf_counter()
                for name in names:
                    with w.transaction():
                        ns.now = w.now_ns()
                        if what == "create":
                            ns.create_file(d, name, Meta())
                        elif what == "lookup":
                            assert ns.lookup_child(d, name) is not None
                        else:
                            ns.unlink(d, name)
                    ns.committed()
                out[(dname, what)] = (time.perf_counter() - t) / ops * 1e6
    return out


def kernel_cost(img: Path, ops: int) -> dict:
    out = {}
    with Mounted(img) as m:
        for dname in ("small", "big"):
            names = [os.path.join(m, dname, "new-%s-%06d" % (dname, k)) for k in range(ops)]
            for what in ("create", "lookup", "remove"):
                t = time.perf_counter()
                for p in names:
                    if what == "create":
                        os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
                    elif what == "lookup":
                        os.lstat(p)
                    else:
                        os.unlink(p)
                out[(dname, what)] = (time.perf_counter() - t) / ops * 1e6
    return out


def cost(args) -> None:
    work = Path(tempfile.mkdtemp(prefix="livedirs-"))
    try:
        img = work / "a.img"
        t = time.perf_counter()
        build(img, args.big)
        print(f"built /big with {args.big} entries in {time.perf_counter() - t:.1f} s")
        twin = work / "b.img"
        shutil.copyfile(img, twin)
        mine = fstool_cost(img, args.ops)
        r = subprocess.run(["xfs_repair", "-n", str(img)], capture_output=True)
        print("xfs_repair -n after fstool:", "clean" if r.returncode == 0 else "PROBLEMS")
        kern = kernel_cost(twin, args.ops)
        print(f"{'':8} {'':6} {'fstool us/op':>13} {'kernel us/op':>13}")
        for what in ("create", "lookup", "remove"):
            for dname in ("small", "big"):
                print(f"{what:8} {dname:6} {mine[(dname, what)]:13.0f} "
                      f"{kern[(dname, what)]:13.1f}")
            print(f"{what:8} {'big/small':6} {mine[('big', what)] / mine[('small', what)]:13.2f} "
                  f"{kern[('big', what)] / kern[('small', what)]:13.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def twin(args) -> None:
    work = Path(tempfile.mkdtemp(prefix="livedirs-"))
    bad = 0
    try:
        for seed in range(args.first, args.first + args.seeds):
            a, b = work / "a.img", work / "b.img"
            L.make_image(a)
            shutil.copyfile(a, b)
            ops = L.workload(seed, grow=args.grow, churn=args.churn, dirs=3)
            t = time.perf_counter()
            L.run_fstool(a, ops)
            tf = time.perf_counter() - t
            t = time.perf_counter()
            with Mounted(b) as m:
                L.run_kernel(m, ops)
            tk = time.perf_counter() - t
            clean = subprocess.run(["xfs_repair", "-n", str(a)],
                                   capture_output=True).returncode == 0
            mine = L.fstool_view(a)
            with Mounted(a, readonly=True) as m:
                seen = L.kernel_view(m)
            with Mounted(b, readonly=True) as m:
                other = L.kernel_view(m)
            same_blocks = all(L.dir_layout(a, f"/d{k}") == L.dir_layout(b, f"/d{k}")
                              for k in range(3))
            ok = clean and mine == seen and same_blocks and \
                {d: [e[0] for e in v] for d, v in seen["dirs"].items()} == \
                {d: [e[0] for e in v] for d, v in other["dirs"].items()}
            bad += not ok
            print(f"seed {seed}: {len(ops)} ops, fstool {tf:.1f} s, kernel {tk:.2f} s, "
                  f"repair {'clean' if clean else 'PROBLEMS'}, kernel view "
                  f"{'same' if mine == seen else 'DIFFERENT'}, blocks "
                  f"{'same' if same_blocks else 'DIFFERENT'}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.seeds - bad} of {args.seeds} seeds agree with the kernel")
    sys.exit(1 if bad else 0)


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="mode", required=True)
    c = sub.add_parser("cost")
    c.add_argument("--big", type=int, default=100000)
    c.add_argument("--ops", type=int, default=2000)
    t = sub.add_parser("twin")
    t.add_argument("--seeds", type=int, default=20)
    t.add_argument("--first", type=int, default=100)
    t.add_argument("--grow", type=int, default=1800)
    t.add_argument("--churn", type=int, default=1500)
    args = ap.parse_args()
    cost(args) if args.mode == "cost" else twin(args)


if __name__ == "__main__":
    main()
