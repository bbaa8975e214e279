"""fstool log replay against the kernel's mount and umount, side by side.

    sudo python bench/bench_replay.py [--files 120000] [--runs 3]

Makes a kernel-written image whose unreplayed log is large (many creates
and small writes in a burst, then ``xfs_io -x -c 'shutdown -f'``), then
times, on fresh copies, (a) a kernel loop mount and umount (its log
recovery) and (b) ``fstool log replay``, and reports the ratio and fstool's
peak RSS.  Checks that both copies end equal (fixtures/dirty.compare).
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fixtures import dirty  # noqa: E402
from fixtures.images import UUID, loop_available  # noqa: E402


def make_image(path: Path, files: int) -> None:
    subprocess.run(["truncate", "-s", "0", str(path)], check=True)
    subprocess.run(["truncate", "-s", "2G", str(path)], check=True)
    subprocess.run(["mkfs.xfs", "-q", "-f", "-m", f"uuid={UUID}", str(path)], check=True,
                   capture_output=True)
    with dirty.NoUuidMounted(path) as mnt:
        per = 1000
        for d in range(files // per):
            sub = mnt / f"d{d:04d}"
            sub.mkdir()
            for i in range(per):
                with open(sub / f"f{i:05d}", "wb") as f:
                    if i % 4 == 0:
                        f.write(b"x" * 100)
            if d % 10 == 9:
                os.setxattr(sub, "user.tag", b"v" * 200)
        subprocess.run(["xfs_io", "-x", "-c", "shutdown -f", str(mnt)], check=True)


def fstool_replay(img: Path) -> tuple[float, int]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "fstool", "log", "replay", str(img)],
                       capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(f"fstool log replay failed: {r.stderr}")
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return dt, max(rss, before)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=120000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--image", type=Path, help="reuse this dirty image")
    a = ap.parse_args(argv)
    if not loop_available():
        print("skipped: needs root, xfsprogs and loop mounts")
        return 0
    with tempfile.TemporaryDirectory(prefix="fstool-bench-replay-") as d:
        d = Path(d)
        img = a.image or d / "dirty.img"
        if not a.image:
            make_image(img, a.files)
        info = subprocess.run([sys.executable, "-m", "fstool", "log", "info", "--json",
                               str(img)], capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))
        import json
        li = json.loads(info.stdout)
        tr = subprocess.run([sys.executable, "-m", "fstool", "log", "replay", "-n", "--json",
                             str(img)], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
        rep = json.loads(tr.stdout)
        print(f"unreplayed log: {li['unreplayed_bytes'] / 1e6:.1f} MB, {rep['records']} records, "
              f"{rep['transactions']} checkpoints, {rep['items']} items")
        tk, tf, rss = [], [], 0
        for _ in range(a.runs):
            ca = dirty.copy(img, d / "a.img")
            subprocess.run(["sync"], check=True)
            tk.append(dirty.kernel_replay(ca))
            cb = dirty.copy(img, d / "b.img")
            subprocess.run(["sync"], check=True)
            t, r = fstool_replay(cb)
            tf.append(t)
            rss = max(rss, r)
        kb, fb = min(tk), min(tf)
        print(f"kernel mount+umount: {kb:.2f} s (best of {a.runs}: "
              f"{', '.join(f'{x:.2f}' for x in tk)})")
        print(f"fstool log replay:   {fb:.2f} s (best of {a.runs}: "
              f"{', '.join(f'{x:.2f}' for x in tf)})")
        print(f"ratio fstool/kernel: {fb / kb:.2f}   fstool peak RSS: {rss / 1024:.0f} MB")
        diffs = dirty.compare(d / "a.img", d / "b.img")
        print("copies equal" if not diffs else f"copies DIFFER: {diffs[:5]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
