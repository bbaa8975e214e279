"""Build the read-benchmark image: a kernel-written XFS image with 20,000+
files spread over directories of every form (shortform, block, leaf, node,
btree fork), file sizes 0..8 KiB plus a few large files.

    python3 bench/make_read_image.py OUT.img [--files 20000] [--seed 1]

Needs root and a kernel loop mount of XFS.
"""
import argparse
import os
import random
import subprocess
import tempfile


def build(out: str, nfiles: int, seed: int) -> None:
    rng = random.Random(seed)
    subprocess.run(["truncate", "-s", "2G", out], check=True)
    subprocess.run(["mkfs.xfs", "-q", "-f", "-m", "uuid=4a9ea7a4-7fb4-4d5c-9d0a-5b1d0a8e0001",
                    out], check=True)
    mnt = tempfile.mkdtemp(prefix="fstool-bench-")
    subprocess.run(["mount", "-o", "loop", out, mnt], check=True)
    try:
        # directory sizes covering every form; the rest fill dirs of 100
        sizes = [2, 8, 50, 200, 500, 1500, 6000]
        left = nfiles - sum(sizes)
        sizes += [100] * max(0, -(-left // 100))
        made = 0
        for d, count in enumerate(sizes):
            dpath = os.path.join(mnt, f"dir{d:04d}")
            os.mkdir(dpath)
            for i in range(count):
                size = rng.choice((0, rng.randrange(1, 8192)))
                with open(os.path.join(dpath, f"file-{i:06d}-{rng.randrange(1 << 30):08x}"),
                          "wb") as f:
                    f.write(rng.randbytes(size))
                made += 1
        for i in range(4):
            with open(os.path.join(mnt, f"large{i}"), "wb") as f:
                f.write(rng.randbytes(16 << 20))
    finally:
        subprocess.run(["umount", mnt], check=True)
        os.rmdir(mnt)
    print(f"{out}: {made} small files in {len(sizes)} directories, 4 x 16 MiB files")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    build(a.out, a.files, a.seed)
