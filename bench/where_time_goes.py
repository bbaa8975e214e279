"""Where a command's wall time goes: on a CPU, waiting for one (runnable
but not running: a busy machine), or blocked in the kernel, and where.

    python3 bench/where_time_goes.py [--interval 0.01] -- CMD [ARGS...]

Samples the child's state (/proc/PID/stat), its kernel wait point
(/proc/PID/wchan) and, when it is blocked, its kernel stack
(/proc/PID/stack, needs root) every ``interval`` seconds; at the end prints
the child's scheduler figures (/proc/PID/schedstat: time on a CPU and time
waiting for one, read just before it exits), the share of samples in each
state scaled to the wall time, the most frequent blocking stacks, and its
I/O counters (/proc/PID/io).  Only the child process itself is watched (its
main thread), not its other threads or children.  Used for the populate
figures in docs/performance.md (issue 16).
"""
import argparse
import collections
import subprocess
import sys
import time


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--interval", type=float, default=0.01)
    ap.add_argument("--top", type=int, default=8, help="blocking stacks to print")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("give the command to run after --")
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd)
    states = collections.Counter()
    stacks = collections.Counter()
    sched = io = ""
    while p.poll() is None:
        stat = _read(f"/proc/{p.pid}/stat")
        if stat:
            state = stat.rsplit(")", 1)[1].split()[0]
            states[state] += 1
            sched = _read(f"/proc/{p.pid}/schedstat") or sched
            io = _read(f"/proc/{p.pid}/io") or io
            if state == "D":
                frames = [ln.split()[1].split("+")[0] for ln in
                          _read(f"/proc/{p.pid}/stack").splitlines() if ln.strip()]
                key = " < ".join(frames[:6]) or _read(f"/proc/{p.pid}/wchan") or "?"
                stacks[key] += 1
        time.sleep(a.interval)
    wall = time.perf_counter() - t0
    n = sum(states.values()) or 1
    print(f"exit {p.returncode}, wall {wall:.2f} s", file=sys.stderr)
    if sched:
        run_ns, wait_ns, _slices = (int(x) for x in sched.split())
        print(f"on a CPU {run_ns / 1e9:.2f} s, waiting for a CPU {wait_ns / 1e9:.2f} s "
              "(schedstat)", file=sys.stderr)
    names = {"R": "running or runnable", "D": "blocked (D)", "S": "sleeping (S)"}
    for s, k in states.most_common():
        print(f"  {names.get(s, s):22s} {k / n * wall:7.2f} s", file=sys.stderr)
    for key, k in stacks.most_common(a.top):
        print(f"  D {k / n * wall:6.2f} s  {key}", file=sys.stderr)
    for ln in io.splitlines():
        if ln.split(":")[0] in ("rchar", "wchar", "read_bytes", "write_bytes"):
            print(f"  {ln}", file=sys.stderr)
    sys.exit(p.returncode)


if __name__ == "__main__":
    main()
