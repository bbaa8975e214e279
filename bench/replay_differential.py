"""fstool log replay against the kernel's log recovery, seed after seed.

    python bench/replay_differential.py [--seeds 50] [--ops 300] [--keep DIR]

For each seed and geometry (default, -m finobt=0, -m rmapbt=1, -b size=1024,
a workload that wraps the log several times, a 64 KiB log stripe unit) a kernel-written dirty image
is made (fixtures/dirty.py); copy A is replayed by a kernel mount and
umount, copy B by `fstool log replay`; both must pass xfs_repair -n and be
equal in every field the kernel shows, in the superblock/AGF/AGI counters
and in every AG btree's records.  Prints one line per case and a summary;
exits 1 when any case differs.  Needs root, xfsprogs and loop mounts.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fixtures import dirty  # noqa: E402
from fixtures.images import loop_available  # noqa: E402

from fixtures import modern  # noqa: E402

# name, mkfs arguments, log wraps, workload options (``mkfs``: the mkfs.xfs;
# the distribution's 6.1 unless 6.10.1 is named: today's defaults, with
# the rmapbt, reflink and large extent counters)
_NEW = {"mkfs": modern.tool("mkfs.xfs")}
GEOMETRIES = [
    ("default", (), 0, {}),
    ("finobt=0", ("-m", "finobt=0"), 0, {}),
    ("rmapbt=1", ("-m", "rmapbt=1"), 0, {}),
    ("bsize=1024", ("-b", "size=1024"), 0, {}),
    ("wrap", (), 3, {}),
    ("log-su=64k", ("-l", "su=65536"), 0, {}),
    ("6.10-defaults", (), 0, _NEW),
    ("6.10-bsize=1024", ("-b", "size=1024"), 0, _NEW),
    ("6.10-wrap", (), 3, _NEW),
]


def run_case(seed: int, name: str, mkfs, wrap: int, opts: dict, ops: int, work: Path):
    img = work / f"s{seed}-{name}.img"
    t0 = time.time()
    dirty.make_dirty(img, seed, mkfs, ops, wrap, **opts)
    made = time.time() - t0
    a = dirty.copy(img, work / "a.img")
    b = dirty.copy(img, work / "b.img")
    tk = dirty.kernel_replay(a)
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "fstool", "log", "replay", str(b)],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    tf = time.time() - t0
    if r.returncode:
        diffs = [f"fstool log replay exit {r.returncode}: {r.stderr.strip()[-400:]}"]
    else:
        diffs = dirty.compare(a, b)
    for p in (a, b):
        p.unlink()
    return diffs, made, tk, tf, img


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=50, help="cases in all (spread over geometries)")
    ap.add_argument("--first", type=int, default=1)
    ap.add_argument("--ops", type=int, default=300)
    ap.add_argument("--only", help="run only these geometries (comma-separated)")
    ap.add_argument("--keep", type=Path, help="keep the dirty images of failing cases here")
    a = ap.parse_args(argv)
    if not loop_available():
        print("skipped: needs root, xfsprogs and loop mounts")
        return 0
    geos = [g for g in GEOMETRIES if (not a.only or g[0] in a.only.split(","))
            and ("mkfs" not in g[3] or modern.available())]
    failed = 0
    with tempfile.TemporaryDirectory(prefix="fstool-diff-") as d:
        work = Path(d)
        for i in range(a.seeds):
            seed = a.first + i
            name, mkfs, wrap, opts = geos[i % len(geos)]
            diffs, made, tk, tf, img = run_case(seed, name, mkfs, wrap, opts, a.ops, work)
            status = "same" if not diffs else f"DIFFERS ({len(diffs)})"
            print(f"seed {seed:3d} {name:<11} {status:<14} kernel {tk:5.2f}s  fstool {tf:5.2f}s"
                  f"  (image made in {made:.0f}s)", flush=True)
            for line in diffs[:8]:
                print("    " + line[:300])
            if diffs:
                failed += 1
                if a.keep:
                    a.keep.mkdir(parents=True, exist_ok=True)
                    os.replace(img, a.keep / img.name)
            if img.exists():
                img.unlink()
    print(f"{a.seeds - failed} of {a.seeds} cases identical to the kernel's recovery")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
