"""fstool path --all against find -inum on the kernel's mount, one image.

    python3 bench/bench_path.py [--inodes 200000] [--image IMG] [--repeat 7]
                                [--base TREE] [--python PY]...

Builds (the first time) bench/results/path-pptr-<N>.img: mkfs.xfs 6.10.1
-n parent=1, the kernel creating N empty files, 1,000 to a directory, with
every tenth file hard-linked into a second directory.  Then, taking turns
for ``--repeat`` rounds:

- ``fstool path --all IMG``: every path of every inode, from the parent
  pointers (output to /dev/null);
- ``find MNT -inum INO`` for one inode (the last file made), on a fresh
  read-only loop mount of the same image (mounted anew each round, so the
  kernel's dentry and inode caches start empty; the image file's pages stay
  in the host's page cache for both tools);
- the same find again on the mount it has just walked (warm caches).

With ``--base TREE``, another fstool tree (main's, built) takes its turn
too; with ``--python PY`` (more than once), fstool runs under each of those
interpreters (say, a fresh venv's beside this machine's), each its own row.
Prints the median wall and CPU time (user + system of the child) and the
peak RSS of each, the load average before and after, and the ratios.
"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

from common import bench_image, byte_compile, run_child  # noqa: E402
from fixtures import modern  # noqa: E402


def build(path: str, inodes: int) -> None:
    tmp = path + ".tmp"
    subprocess.run(["truncate", "-s", "0", tmp], check=True)
    subprocess.run(["truncate", "-s", f"{max(4, inodes * 4096 // (1 << 30) + 4)}G", tmp],
                   check=True)
    subprocess.run([modern.tool("mkfs.xfs"), "-q", "-f", "-n", "parent=1", tmp], check=True)
    mnt = tempfile.mkdtemp()
    subprocess.run(["mount", "-o", "loop,nouuid", tmp, mnt], check=True)
    try:
        per = 1000
        for d in range(inodes // per):
            dpath = os.path.join(mnt, f"d{d:05d}")
            os.mkdir(dpath)
            links = os.path.join(mnt, f"links{d:05d}")
            os.mkdir(links)
            for i in range(per):
                p = os.path.join(dpath, f"f{i:05d}")
                os.close(os.open(p, os.O_CREAT | os.O_WRONLY))
                if i % 10 == 0:
                    os.link(p, os.path.join(links, f"l{i:05d}"))
    finally:
        subprocess.run(["umount", mnt], check=True)
        os.rmdir(mnt)
    os.rename(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inodes", type=int, default=200000)
    ap.add_argument("--image")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--base", help="another fstool tree to compare with")
    ap.add_argument("--python", action="append",
                    help="interpreter to run fstool with (default: this one)")
    a = ap.parse_args()
    byte_compile()
    pythons = a.python or [sys.executable]
    trees = [("fstool path --all", os.path.join(HERE, ".."))]
    if a.base:
        import compileall
        compileall.compile_dir(os.path.join(a.base, "fstool"), quiet=1)
        trees.append(("fstool path --all (base)", a.base))
    runs = [(name if len(pythons) == 1 else f"{name} [{py}]", tree, py)
            for name, tree in trees for py in pythons]
    img = bench_image(a.image, f"path-pptr-{a.inodes}.img", lambda p: build(p, a.inodes))
    subprocess.run(["cat", img], stdout=subprocess.DEVNULL)
    mnt = tempfile.mkdtemp()
    subprocess.run(["mount", "-o", "loop,ro,nouuid", img, mnt], check=True)
    try:
        last = os.path.join(mnt, f"d{a.inodes // 1000 - 1:05d}", "f00999")
        ino = os.lstat(last).st_ino
    finally:
        subprocess.run(["umount", mnt], check=True)
    import statistics
    res: dict = {}

    def add(name, got):
        res.setdefault(name, []).append(got)
    load0 = os.getloadavg()
    for _ in range(a.repeat):
        for name, tree, py in runs:
            with open(os.devnull, "w") as null:
                add(name, run_child([py, "-m", "fstool", "path", "--all", img], stdout=null,
                                    cwd=tree, env=dict(os.environ, PYTHONPATH=tree)))
        subprocess.run(["mount", "-o", "loop,ro,nouuid", img, mnt], check=True)
        try:
            add("find -inum (fresh mount)", run_child(["find", mnt, "-inum", str(ino)]))
            add("find -inum (warm)", run_child(["find", mnt, "-inum", str(ino)]))
        finally:
            subprocess.run(["umount", mnt], check=True)
    load1 = os.getloadavg()
    os.rmdir(mnt)
    out = subprocess.run([sys.executable, "-m", "fstool", "path", "--all", img],
                         capture_output=True, text=True, cwd=trees[0][1],
                         env=dict(os.environ, PYTHONPATH=trees[0][1])).stdout
    print(f"load average {load0[0]:.1f} before, {load1[0]:.1f} after; medians of {a.repeat}")
    print("| | median wall | median CPU | peak RSS |\n| --- | ---: | ---: | ---: |")
    med = {}
    for name, rows in res.items():
        wall, cpu, rss = zip(*rows)
        med[name] = (statistics.median(wall), statistics.median(cpu))
        print(f"| {name} | {med[name][0]:.3f} s | {med[name][1]:.3f} s | {max(rss):.0f} MB |")
    print(f"fstool path --all printed {out.count(chr(10))} paths")
    fresh = med["find -inum (fresh mount)"]
    for name, _tree, _py in runs:
        print(f"{name} / find -inum (fresh mount): wall {med[name][0] / fresh[0]:.2f}x, "
              f"CPU {med[name][1] / fresh[1]:.2f}x")

if __name__ == "__main__":
    main()
