"""The finobt seed experiment: fill one AG with N inodes, remove K at random,
then create K more, and time those creates with and without the free inode
btree (-m finobt=0: the allocator walks the inode btree outwards from the
parent looking for a chunk with a free inode).  Prints the cost per create
in slices of the K creates, to show whether it stays flat.

    python3 bench/bench_finobt.py [--inodes 1000000] [--churn 10000] [--upgraded]

``--upgraded`` adds a third run: the finobt=0 image, after the removals,
given a free inode btree by ``fstool repair --add-finobt`` before the
creates.
"""
import argparse
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fstool.ns.namespace import Meta, Namespace  # noqa: E402
from fstool.ns.writer import Writer  # noqa: E402
from fstool.ops import mkfs as M  # noqa: E402

UUID = "1f0b6c2a-3e4d-4f5a-8b7c-9d0e1f2a3b4c"


def run(img, finobt, inodes, churn, slices, upgrade=False):
    M.mkfs(img, M.Options(size=8 << 30, agcount=1, finobt=finobt, uuid=UUID,
                          timestamp_ns=0), force=True)
    meta = Meta(perm=0o644, atime_ns=0, mtime_ns=0, ctime_ns=0)
    dirs = 1000
    per = inodes // dirs
    names = []
    t0 = time.perf_counter()
    with Writer(img, timestamp_ns=0) as w:
        with w.transaction():
            ns = Namespace(w)
            root = w.sb.rootino
            for d in range(dirs):
                dino = ns.mkdir(root, b"d%04d" % d, Meta(perm=0o755))
                for i in range(per):
                    ns.create_file(dino, b"f%06d" % i, meta)
                    names.append((dino, b"f%06d" % i))
            ns.finish()
    fill = time.perf_counter() - t0
    rng = random.Random(7)
    victims = rng.sample(names, churn)
    with Writer(img, timestamp_ns=0) as w:
        # in batches: one transaction must fit the log
        for k in range(0, len(victims), 500):
            with w.transaction():
                ns = Namespace(w)
                for dino, name in victims[k:k + 500]:
                    ns.unlink(dino, name)
                ns.finish()
    if upgrade:
        from fstool.ops.repair import repair
        t = time.perf_counter()
        repair(img, add_finobt=True)
        print(f"repair --add-finobt: {time.perf_counter() - t:.2f} s")
    times = []
    with Writer(img, timestamp_ns=0) as w:
        with w.transaction():
            ns = Namespace(w)
            dino = ns.mkdir(w.sb.rootino, b"new", Meta(perm=0o755))
            ns.finish()
        step = churn // slices
        for s in range(slices):
            # a transaction per slice (one transaction must fit the log)
            with w.transaction():
                ns = Namespace(w)
                t = time.perf_counter()
                for i in range(step):
                    ns.create_file(dino, b"n%06d" % (s * step + i), meta)
                times.append((time.perf_counter() - t) / step)
                ns.finish()
    return fill, times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--inodes", type=int, default=1000000)
    ap.add_argument("--churn", type=int, default=10000)
    ap.add_argument("--slices", type=int, default=10)
    ap.add_argument("--upgraded", action="store_true",
                    help="also time the creates on a finobt=0 image after "
                         "'fstool repair --add-finobt'")
    a = ap.parse_args()
    res = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d:
        for finobt in (True, False) + (("upgraded",) if a.upgraded else ()):
            img = os.path.join(d, f"f{finobt}.img")
            res[finobt] = run(img, finobt is True, a.inodes, a.churn, a.slices,
                              upgrade=finobt == "upgraded")
            os.unlink(img)
    print(f"{a.inodes} inodes in one AG, {a.churn} removed at random, {a.churn} created")
    print(f"fill: finobt=1 {res[True][0]:.1f} s, finobt=0 {res[False][0]:.1f} s")
    print(f"{'slice':>5s} {'finobt=1 us/create':>19s} {'finobt=0 us/create':>19s}"
          + (f" {'upgraded us/create':>19s}" if "upgraded" in res else ""))
    for i, (x, y) in enumerate(zip(res[True][1], res[False][1])):
        up = f" {res['upgraded'][1][i] * 1e6:19.1f}" if "upgraded" in res else ""
        print(f"{i:5d} {x * 1e6:19.1f} {y * 1e6:19.1f}{up}")
    t1 = sum(res[True][1]) / len(res[True][1])
    t0 = sum(res[False][1]) / len(res[False][1])
    print(f"total for {a.churn} creates: finobt=1 {t1 * a.churn:.2f} s, finobt=0 "
          f"{t0 * a.churn:.2f} s, ratio {t0 / t1:.1f}x")
    if "upgraded" in res:
        tu = sum(res["upgraded"][1]) / len(res["upgraded"][1])
        print(f"upgraded by repair --add-finobt: {tu * a.churn:.2f} s")


if __name__ == "__main__":
    main()
