"""fstool metadump / mdrestore against xfs_metadump / xfs_mdrestore 6.10.1,
side by side on one image.

    python3 bench/bench_metadump.py IMAGE [--rounds 3] [--xfsprogs DIR]

Each round runs, one after the other: xfs_metadump -v 2 and fstool
metadump -v 2 (names obfuscated), the same with -o (whose dumps must be the
same bytes), then xfs_mdrestore and fstool mdrestore of the -o dump.  The
page cache is warmed by one uncounted run of each metadump first; the
table shows the median wall and CPU time of each over the rounds and the
load average before and after.  DIR is where xfsprogs 6.10.1 is installed
(default ~/.cache/xfsprogs-6.10).
"""
from __future__ import annotations

import argparse
import filecmp
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import Median, byte_compile, run_child  # noqa: E402

FSTOOL = [sys.executable, "-m", "fstool"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("image")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--xfsprogs", default=os.path.expanduser("~/.cache/xfsprogs-6.10"))
    a = ap.parse_args(argv)
    sbin = os.path.join(a.xfsprogs, "sbin")
    env = dict(os.environ, PATH=f"{sbin}:{os.environ['PATH']}")
    byte_compile()
    best = Median()
    with tempfile.TemporaryDirectory(prefix="bench-metadump-") as d:
        out = {k: os.path.join(d, k) for k in ("x.md", "f.md", "xo.md", "fo.md", "x.img",
                                                "f.img")}
        runs = [
            ("xfs_metadump -v 2", [os.path.join(sbin, "xfs_metadump"), "-v", "2", "-f",
                                   a.image, out["x.md"]]),
            ("fstool metadump -v 2", FSTOOL + ["metadump", "-v", "2", a.image, out["f.md"]]),
            ("xfs_metadump -v 2 -o", [os.path.join(sbin, "xfs_metadump"), "-v", "2", "-o",
                                      "-f", a.image, out["xo.md"]]),
            ("fstool metadump -v 2 -o", FSTOOL + ["metadump", "-v", "2", "-o", a.image,
                                                  out["fo.md"]]),
            ("xfs_mdrestore", [os.path.join(sbin, "xfs_mdrestore"), out["xo.md"],
                               out["x.img"]]),
            ("fstool mdrestore", FSTOOL + ["mdrestore", out["xo.md"], out["f.img"]]),
        ]
        for name, cmd in runs[:2]:
            run_child(cmd, env=env)         # warms the page cache: not counted
        load0 = os.getloadavg()
        for _ in range(a.rounds):
            for name, cmd in runs:
                wall, cpu, rss = run_child(cmd, env=env)
                best.add(name, wall, cpu, rss)
        same = filecmp.cmp(out["xo.md"], out["fo.md"], shallow=False)
        size = os.path.getsize(out["f.md"])
    load1 = os.getloadavg()
    print("| | median wall | median CPU | peak RSS |\n| --- | ---: | ---: | ---: |")
    for name, _cmd in runs:
        print(f"| `{name}` | {best.wall[name]:.2f} s | {best.cpu[name]:.2f} s | "
              f"{best.rss[name]:.0f} MiB |")
    print(f"\nload average (1, 5, 15 min) before {load0[0]:.2f} {load0[1]:.2f} "
          f"{load0[2]:.2f}, after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    print(f"dump size {size / 2**20:.1f} MiB; -o dumps identical: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
