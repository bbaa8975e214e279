"""fstool path --all against find -inum on the kernel's mount, one image.

    python3 bench/bench_path.py [--inodes 200000] [--image IMG] [--repeat 3]

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

Prints the best wall time of each and the ratio.
"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

from common import Best, bench_image, byte_compile, run_child  # noqa: E402
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
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    byte_compile()
    img = bench_image(a.image, f"path-pptr-{a.inodes}.img", lambda p: build(p, a.inodes))
    subprocess.run(["cat", img], stdout=subprocess.DEVNULL)
    mnt = tempfile.mkdtemp()
    subprocess.run(["mount", "-o", "loop,ro,nouuid", img, mnt], check=True)
    try:
        last = os.path.join(mnt, f"d{a.inodes // 1000 - 1:05d}", "f00999")
        ino = os.lstat(last).st_ino
    finally:
        subprocess.run(["umount", mnt], check=True)
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, ".."))
    best = Best()
    lines = 0
    for _ in range(a.repeat):
        with open(os.devnull, "w") as null:
            w, c, r = run_child([sys.executable, "-m", "fstool", "path", "--all", img],
                                stdout=null, env=env)
        best.add("fstool path --all", w, c, r)
        subprocess.run(["mount", "-o", "loop,ro,nouuid", img, mnt], check=True)
        try:
            w, c, r = run_child(["find", mnt, "-inum", str(ino)])
            best.add("find -inum (fresh mount)", w, c, r)
            w, c, r = run_child(["find", mnt, "-inum", str(ino)])
            best.add("find -inum (warm)", w, c, r)
        finally:
            subprocess.run(["umount", mnt], check=True)
    os.rmdir(mnt)
    out = subprocess.run([sys.executable, "-m", "fstool", "path", "--all", img],
                         capture_output=True, text=True, env=env).stdout
    lines = out.count("\n")
    for name in best.wall:
        print(f"{name:26s} {best.wall[name]:7.3f} s  CPU {best.cpu[name]:6.3f} s  "
              f"{best.rss[name]:6.0f} MB RSS")
    f = best.wall["fstool path --all"]
    print(f"fstool path --all printed {lines} paths")
    print(f"fstool path --all / find -inum (fresh mount): {f / best.wall['find -inum (fresh mount)']:.2f}x")
    print(f"fstool path --all / find -inum (warm): {f / best.wall['find -inum (warm)']:.2f}x")


if __name__ == "__main__":
    main()
