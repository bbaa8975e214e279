"""fstool mdrestore against xfs_mdrestore 6.10.1, and against another fstool
tree (main's, `git archive` and built), side by side on one dump.

    python3 bench/bench_mdrestore.py DUMP [--base TREE] [--rounds 12] [--xfsprogs DIR]

Each round restores DUMP with this tree's fstool, the --base tree's (when
given) and xfs_mdrestore, one after the other, into files beside the dump's
in a temporary directory; the table shows the median wall and CPU time
(user + system of the child, from wait4) and the peak RSS over the rounds,
and the load average before and after.  Every fstool runs on the real
interpreter (sys.executable), not through a shim.
"""
from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import byte_compile  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dump")
    ap.add_argument("--base", help="another fstool tree to compare with")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--xfsprogs", default=os.path.expanduser("~/.cache/xfsprogs-6.10"))
    a = ap.parse_args(argv)
    byte_compile()
    if a.base:
        compileall.compile_dir(os.path.join(a.base, "fstool"), quiet=1)
    dump = os.path.abspath(a.dump)
    with tempfile.TemporaryDirectory(prefix="bench-mdrestore-") as d:
        runs = [("fstool mdrestore", HERE,
                 [sys.executable, "-m", "fstool", "mdrestore", dump, f"{d}/f.img"])]
        if a.base:
            runs.append(("fstool mdrestore (base)", a.base,
                         [sys.executable, "-m", "fstool", "mdrestore", dump, f"{d}/b.img"]))
        runs.append(("xfs_mdrestore 6.10.1", d,
                     [os.path.join(a.xfsprogs, "sbin", "xfs_mdrestore"), dump, f"{d}/x.img"]))
        res: dict = {name: [] for name, *_ in runs}
        load0 = os.getloadavg()
        for _ in range(a.rounds):
            for name, cwd, cmd in runs:
                t0 = time.perf_counter()
                # /usr/bin/time for the peak RSS: wait4's counts the fork
                # of this interpreter before the exec
                p = subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", f"{d}/rss", *cmd],
                                     cwd=cwd, stdout=subprocess.DEVNULL)
                _pid, status, ru = os.wait4(p.pid, 0)
                if status:
                    raise SystemExit(f"{name} failed ({status})")
                with open(f"{d}/rss") as f:
                    rss = int(f.read().split()[-1])
                res[name].append((time.perf_counter() - t0, ru.ru_utime + ru.ru_stime, rss))
        load1 = os.getloadavg()
    print(f"load average {load0[0]:.1f} before, {load1[0]:.1f} after; medians of {a.rounds}")
    print("| | median wall | median CPU | peak RSS |\n| --- | ---: | ---: | ---: |")
    for name, rows in res.items():
        wall, cpu, rss = zip(*rows)
        print(f"| `{name}` | {statistics.median(wall):.2f} s | {statistics.median(cpu):.3f} s "
              f"| {max(rss) // 1024} MiB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
