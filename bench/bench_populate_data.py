"""populate benchmark with file data: a tree of at least 2 GB in 50,000
files (a spread of sizes from empty to 128 MiB, some sparse), copied
(1) by the kernel: a loop mount of a fresh image, ``cp -a``, sync, umount;
(2) by ``fstool populate`` into the same fresh image;
in one run, taking turns round after round, best wall and best CPU time of
each kept.  Every image fstool writes must pass xfs_repair -n, and the first
one is compared with the source tree file by file (content, sizes, holes
kept as holes: allocated blocks no more than the source's).  Needs root
(loop mount).

    python3 bench/bench_populate_data.py [--files 50000] [--gb 2.2] [--repeat 3]
                                         [--baseline DIR] [--reflink-host]

``--baseline DIR`` also times ``fstool populate`` from another checkout (its
PYTHONPATH), for a before/after figure in the same run.  The tree is made
once from a fixed seed under BENCH_DIR (default: a temporary directory),
kept with ``--keep``.  With ``--reflink-host`` the tree and the images live
on a fresh XFS (reflink on, loop-mounted from a file under BENCH_DIR), the
host where fstool shares the source's blocks instead of copying them; the
kernel's image lives there too.
"""
import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

from common import Best, byte_compile, kernel_copy, run_child

UUID = str(uuid.uuid4())      # per run: the kernel mounts one filesystem per uuid
FSTOOL = [sys.executable, "-m", "fstool"]
MiB = 1 << 20


def plan_tree(files: int, total: int, seed: int = 16):
    """(relative path, size, data ranges or None) for every file: most
    small, many medium, some large, a few sparse; sizes scaled so that the
    data adds up to about ``total`` bytes."""
    r = random.Random(seed)
    out = []
    ndirs = max(1, files // 100)
    large = max(4, files // 6250)              # 64-128 MiB each
    sparse = max(8, files // 1000)             # 256 MiB apparent, a few MiB of data
    for i in range(files):
        d = f"d{i % ndirs:04d}/s{(i // ndirs) % 4}"
        if i < large:
            out.append((f"{d}/large{i:03d}.bin", r.randint(64, 128) * MiB + r.randint(0, 4095),
                        None))
        elif i < large + sparse:
            size = 256 * MiB + r.randint(0, 4095)
            ranges = sorted(r.sample(range(0, 255), 4))
            out.append((f"{d}/sparse{i:04d}.img", size,
                        [(k * MiB + r.choice((0, 512, 4096)), r.choice((4096, 65536, MiB)))
                         for k in ranges]))
        else:
            x = r.random()
            if x < 0.05:
                size = 0
            elif x < 0.60:
                size = r.randint(1, 8192)
            elif x < 0.90:
                size = r.randint(8192, 128 << 10)
            else:
                size = r.randint(128 << 10, 1 << 20)
            out.append((f"{d}/f{i:06d}", size, None))
    # scale the ordinary files so that the data reaches the total
    fixed = sum(s for p, s, rg in out if rg is None and ("large" in p))
    fixed += sum(n for p, s, rg in out if rg for _o, n in rg)
    rest = sum(s for p, s, rg in out if rg is None and "large" not in p)
    k = max(0.05, (total - fixed) / max(1, rest))
    return [(p, int(s * k) if rg is None and "large" not in p else s, rg)
            for p, s, rg in out]


def make_tree(root: str, plan) -> tuple[int, int]:
    """Write the planned files (content from one seeded random block); returns
    (files, bytes of data)."""
    block = random.Random(7).randbytes(4 * MiB)
    total = 0
    for k, (rel, size, ranges) in enumerate(plan):
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        try:
            if ranges is None:
                off = 0
                while off < size:
                    n = min(size - off, len(block) - (k % 4096))
                    os.write(fd, block[k % 4096:k % 4096 + n])
                    off += n
                total += size
            else:
                os.ftruncate(fd, size)
                for o, n in ranges:
                    os.pwrite(fd, block[o % MiB:o % MiB + n], o)
                    total += n
        finally:
            os.close(fd)
        if k % 97 == 3:
            os.chmod(path, 0o600)
    return len(plan), total


def mkfs_xfs(img: str, size: str) -> None:
    if os.path.exists(img):
        os.unlink(img)
    subprocess.run(["truncate", "-s", size, img], check=True)
    subprocess.run(["mkfs.xfs", "-q", "-f", "-m", f"uuid={UUID}", img], check=True)


def compare(img: str, src: str) -> list:
    """Differences between the image and the source tree: content, size,
    and data blocks beyond what the source allocates (a hole written)."""
    import fstool
    bad = []
    with fstool.open_image(img) as fs:
        for dirpath, _dirs, names in os.walk(src):
            rel = os.path.relpath(dirpath, src)
            for name in names:
                host = os.path.join(dirpath, name)
                ipath = "/" + (name if rel == "." else f"{rel}/{name}")
                st = os.lstat(host)
                node = fs.lookup(ipath)
                if node.size != st.st_size:
                    bad.append(f"{ipath}: size {node.size} != {st.st_size}")
                    continue
                with open(host, "rb") as f:
                    pos = 0
                    while True:
                        want = f.read(8 * MiB)
                        if not want:
                            break
                        if node.read(pos, len(want)) != want:
                            bad.append(f"{ipath}: content differs near {pos}")
                            break
                        pos += len(want)
                blocks = node.stat().st_blocks
                if blocks > st.st_blocks + 8:
                    bad.append(f"{ipath}: {blocks} blocks in the image, {st.st_blocks} on the host")
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=50000)
    ap.add_argument("--gb", type=float, default=2.2, help="data in the tree, GB")
    ap.add_argument("--size", default="8g", help="image size")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", help="another fstool checkout to time beside this one")
    ap.add_argument("--keep", action="store_true", help="keep the tree (BENCH_DIR/data-tree)")
    ap.add_argument("--reflink-host", action="store_true",
                    help="tree and images on a loop-mounted XFS with reflink")
    a = ap.parse_args()
    byte_compile()
    best = Best()
    unclean = []
    loads = [os.getloadavg()[0]]
    where = os.environ.get("BENCH_DIR")
    tmp = tempfile.mkdtemp(dir=where)
    host = None
    try:
        if a.reflink_host:
            host = os.path.join(tmp, "host")
            os.mkdir(host)
            host_img = os.path.join(tmp, "host.img")
            subprocess.run(["truncate", "-s", f"{int(a.gb * 3) + 24}g", host_img], check=True)
            subprocess.run(["mkfs.xfs", "-q", "-f", "-m", "reflink=1", host_img], check=True)
            subprocess.run(["mount", "-o", "loop", host_img, host], check=True)
            tmp_in = host
        else:
            tmp_in = tmp
        src = os.path.join(where, "data-tree") if where and a.keep and not host else \
            os.path.join(tmp_in, "src")
        if not os.path.isdir(src):
            os.makedirs(src)
            t0 = time.perf_counter()
            n, total = make_tree(src, plan_tree(a.files, int(a.gb * 1e9)))
            print(f"made the tree: {n} files, {total / 1e9:.2f} GB of data "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
        du = subprocess.run(["du", "-sb", "--apparent-size", src], capture_output=True,
                            text=True).stdout.split()[0]
        used = subprocess.run(["du", "-sB1", src], capture_output=True, text=True).stdout.split()[0]
        nfiles = sum(len(f) for _d, _s, f in os.walk(src))
        img = os.path.join(tmp_in, "d.img")
        mnt = os.path.join(tmp, "mnt")
        os.mkdir(mnt)
        runs = [("kernel (cp -a + sync)", None), ("fstool populate", os.path.dirname(
            os.path.dirname(os.path.abspath(__file__))))]
        if a.baseline:
            runs.append((f"fstool populate ({os.path.basename(a.baseline.rstrip('/'))})",
                         a.baseline))
        for rnd in range(a.repeat):
            for name, tree in runs:
                mkfs_xfs(img, a.size)
                if tree is None:
                    best.add(name, *kernel_copy(img, src, mnt))
                    continue
                env = {**os.environ, "PYTHONPATH": tree}
                best.add(name, *run_child(FSTOOL + ["populate", "-q", img, src], env=env))
                if rnd == 0:
                    r = subprocess.run(["xfs_repair", "-n", "-f", img], capture_output=True)
                    if r.returncode:
                        unclean.append(f"{name} (xfs_repair -n exit {r.returncode})")
                    if tree == runs[1][1]:
                        diffs = compare(img, src)
                        if diffs:
                            unclean.append(f"{name}: {len(diffs)} files differ, e.g. {diffs[0]}")
            loads.append(os.getloadavg()[0])
            print(f"round {rnd + 1}: " + ", ".join(f"{k} {v:.1f} s" for k, v in best.wall.items())
                  + f" (best so far; load average {loads[-1]:.1f})", flush=True)
    finally:
        if host is not None:
            subprocess.run(["umount", host])
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{nfiles} files, {int(du) / 1e9:.2f} GB apparent, {int(used) / 1e9:.2f} GB allocated "
          f"on the host ({'XFS with reflink, loop-mounted' if host else 'the host filesystem'}); "
          f"best of {a.repeat} rounds; load average {min(loads):.1f}-{max(loads):.1f}")
    print(f"{'tool':34s} {'wall s':>7s} {'CPU s':>7s} {'MB/s':>7s} {'peak RSS':>9s}")
    for name, _t in runs:
        rss = f"{best.rss[name]:6.0f} MiB" if name in best.rss else ""
        print(f"{name:34s} {best.wall[name]:7.2f} {best.cpu[name]:7.2f} "
              f"{int(used) / 1e6 / best.wall[name]:7.0f} {rss:>9s}")
    k = runs[0][0]
    for name, _t in runs[1:]:
        print(f"{name} vs kernel: {best.wall[k] / best.wall[name]:.2f}x wall (target 3x)")
    print("images fstool wrote: " + ("pass xfs_repair -n and match the tree" if not unclean
                                     else "PROBLEMS: " + "; ".join(unclean)))


if __name__ == "__main__":
    main()
