#!/usr/bin/env python3
"""``fstool mount`` with the time of each request it hands to Python.

    python3 bench/mount_op_profile.py OUT [--cprofile] mount -f IMAGE MOUNTPOINT

Runs the mount in the foreground (give ``-f``) with every public method
of ``fstool.mount.ops.MountOps`` wrapped: on unmount, ``OUT.ops`` lists
per method its calls, its thread CPU time in all and per call (the
outermost call only: a method that calls another is counted once), most
costly first; with ``--cprofile``, ``OUT.prof`` holds a cProfile of those
calls (read it with ``pstats``; it inflates every figure by about 3x).
The server's CPU per request can then be set against what the native
loop answers itself (the requests that never reach Python are not
listed).  The calls are serialised by one lock (the loop answers one
request at a time already).  Run it from the tree to measure
(PYTHONPATH or the current directory picks the package).
"""
import atexit
import collections
import cProfile
import functools
import sys
import threading
import time

from fstool.cli.main import main
from fstool.mount import ops as mount_ops

SKIP = {"checkpoint"}           # the timer's, not a request's


def instrument(out: str, profile: bool) -> None:
    prof = cProfile.Profile() if profile else None
    stats = collections.defaultdict(lambda: [0, 0.0])
    lock = threading.RLock()
    inner = threading.local()

    def wrap(name, f):
        @functools.wraps(f)
        def timed(*a, **k):
            with lock:
                if getattr(inner, "on", False):
                    return f(*a, **k)
                inner.on = True
                t = time.thread_time()
                if prof is not None:
                    prof.enable()
                try:
                    return f(*a, **k)
                finally:
                    if prof is not None:
                        prof.disable()
                    inner.on = False
                    s = stats[name]
                    s[0] += 1
                    s[1] += time.thread_time() - t
        return timed

    for name in dir(mount_ops.MountOps):
        v = getattr(mount_ops.MountOps, name)
        if not name.startswith("_") and name not in SKIP and callable(v):
            setattr(mount_ops.MountOps, name, wrap(name, v))

    def dump():
        with open(out + ".ops", "w") as f:
            for name, (n, t) in sorted(stats.items(), key=lambda x: -x[1][1]):
                f.write(f"{name:20s} {n:8d} {t * 1e3:10.1f} ms {t / n * 1e6:9.1f} us/call\n")
        if prof is not None:
            prof.dump_stats(out + ".prof")

    atexit.register(dump)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__.strip().splitlines()[2].strip())
    out = sys.argv[1]
    rest = sys.argv[2:]
    profile = rest[:1] == ["--cprofile"]
    if profile:
        rest = rest[1:]
    instrument(out, profile)
    sys.argv = ["fstool", *rest]
    main()
