#!/usr/bin/env python3
"""fstool's own work per create, without FUSE: what the mount's requests
for one ``open(O_CREAT|O_EXCL)`` + ``close`` ask of the Volume (negative
lookup, create, release; with ``--getattr`` also the getattr of the
directory that the kernel asks for when it checks permissions itself,
``default_permissions``), CPU time per create, checkpoints included.

    python3 bench/bench_volume_creates.py [--files 20000] [--dirs 100]
        [--every 5.0] [--profile N] [--size 2g] [--getattr] [--group N]
        [--mkfs "-n parent=1"]

``--group N``: creates per transaction (the mount's group commit; 1: one
transaction each; default: what the mount uses).  ``--every`` writes a checkpoint every that many seconds of the run, as the
mount's timer does (0: only the last at close).  ``--profile N`` prints
cProfile's top N functions by own time.  Run it with PYTHONPATH set to the
tree to measure (else this script's own tree is measured).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if not os.environ.get("PYTHONPATH"):
    # PYTHONPATH names the tree to measure (another checkout's, to compare)
    sys.path.insert(0, os.path.dirname(HERE))


def run(img: str, files: int, dirs: int, every: float, getattr_dir: bool = False,
        group: int | None = None) -> dict:
    from fstool.mount.volume import Volume
    vol = Volume(img)
    try:
        from fstool.mount.ops import GROUP_COMMIT
    except ImportError:             # a tree from before group commit
        GROUP_COMMIT = 1
    vol.group = GROUP_COMMIT if group is None else group
    root = vol.rootino
    names = [f"d{d:03d}".encode() for d in range(dirs)]
    per = files // dirs
    fnames = [f"file-{i:06d}".encode() for i in range(per)]
    checkpoints = 0
    c0 = time.process_time()
    t0 = time.perf_counter()
    last = t0
    dinos = []
    for n in names:
        vol.find(root, n)
        dinos.append(vol.mkdir(root, n, 0o755).ino)
        vol.getattr(root)
    for dino in dinos:
        for n in fnames:
            vol.find(dino, n)
            fh, _a = vol.create(dino, n, 0o100644, os.O_WRONLY)
            vol.release(fh)
            if getattr_dir:
                vol.getattr(dino)
            if every:
                now = time.perf_counter()
                if now - last >= every:
                    vol.sync()
                    checkpoints += 1
                    last = now
    vol.sync()
    cpu = time.process_time() - c0
    wall = time.perf_counter() - t0
    vol.close()
    return {"us/create": cpu / files * 1e6, "creates/s (wall)": files / wall,
            "checkpoints": checkpoints + 1}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--dirs", type=int, default=100)
    ap.add_argument("--every", type=float, default=5.0)
    ap.add_argument("--size", default="2g")
    ap.add_argument("--mkfs", default="",
                    help="more options of fstool mkfs (\"-n parent=1\": parent pointers)")
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    ap.add_argument("--getattr", action="store_true",
                    help="also the directory's getattr after each create (default_permissions)")
    ap.add_argument("--group", type=int, default=None,
                    help="creates per transaction (default: the mount's)")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench-vol-", dir=os.environ.get("BENCH_DIR"))
    img = os.path.join(work, "v.img")
    try:
        subprocess.run(["truncate", "-s", a.size, img], check=True)
        subprocess.run([sys.executable, "-m", "fstool", "mkfs", "-f", *a.mkfs.split(), img],
                       check=True,
                       stdout=subprocess.DEVNULL)
        if a.profile:
            import cProfile
            import pstats
            p = cProfile.Profile()
            p.enable()
            out = run(img, a.files, a.dirs, a.every, a.getattr, a.group)
            p.disable()
            pstats.Stats(p).sort_stats(os.environ.get("SORT", "tottime")).print_stats(a.profile)
        else:
            out = run(img, a.files, a.dirs, a.every, a.getattr, a.group)
        import fstool
        print(os.path.dirname(os.path.dirname(fstool.__file__)),
              {k: round(v, 1) if isinstance(v, float) else v for k, v in out.items()})
        r = subprocess.run(["xfs_repair", "-n", "-f", img], capture_output=True)
        print("xfs_repair -n:", "clean" if r.returncode == 0 else f"exit {r.returncode}")
    finally:
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
