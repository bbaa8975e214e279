"""kill -9 at random moments: every write fstool makes must leave an image
that log recovery brings to a consistent state.

    python3 bench/crash_random.py [--runs 100] [--seed 1] [--keep DIR]

Each run starts one fstool workload on a fresh copy of an image and kills it
with SIGKILL after a random delay (uniform over the workload's own run
time, measured once beforehand).  The workloads:

  populate-dir    populate from a host directory holding the fixture tree
                  (every file type and form), in batches of 300 entries
  populate-tar    the same tree from a tar archive
  populate-proto  an mkfs.xfs protofile tree
  edits           the fixed edit sequence of fixtures/crashwork.py
  bigdir          20,000 entries added to and removed from one directory

Then, on the killed image:

  (a) a copy is mounted and unmounted by the kernel, which replays fstool's
      log; xfs_repair -n must find it clean;
  (b) another copy is replayed by `fstool log replay` (when fstool has the
      command); both replays must give the same tree;
  (c) every entry present is equal to its source in every field (type,
      mode, owner, size, times, content, xattrs, symlink target, device
      number): a committed batch is all or nothing and a file is never
      visible with part of its contents; the edit sequence must be in the
      state after one of its steps.

Prints one line per run and a summary; exits 1 if any run fails.  Needs
root (loop mounts) and xfsprogs.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from fixtures import crashwork, images  # noqa: E402
from fixtures.tree import build_proto_tree, build_tree, protofile_for  # noqa: E402

UUID = "4d2c1b0a-9e8f-4a7b-8c6d-5e4f3a2b1c0d"
T = 1_700_000_000
PY = sys.executable

DRIVER = r"""
import sys
from fstool.ops.populate import populate
kind, image, source = sys.argv[1:4]
if kind == "bigdir":
    from fstool.ns.namespace import Meta, Namespace
    from fstool.ns.writer import Writer
    with Writer(image, timestamp_ns=1) as w:
        with w.transaction():
            ns = Namespace(w, 1)
            d = ns.mkdir(w.sb.rootino, b"big", Meta(perm=0o755))
            ns.finish()
        for step in range(10):
            with w.transaction():
                ns = Namespace(w, 1)
                for i in range(step * 2000, step * 2000 + 2000):
                    ns.create_file(d, b"entry-%06d" % i, Meta(perm=0o644))
                if step % 3 == 2:
                    for i in range(step * 2000 - 3000, step * 2000 - 1000, 2):
                        ns.unlink(d, b"entry-%06d" % i)
                ns.finish()
else:
    populate(image, source, "/", timestamp_ns=1, batch_entries=300, check=False)
"""


def sh(*args, **kw):
    return subprocess.run([str(a) for a in args], check=True, capture_output=True, **kw)


def mkfs(img: Path) -> None:
    sh(PY, "-m", "fstool", "mkfs", "-q", img, "--size", "1g", "--uuid", UUID,
       "--timestamp", T, cwd=HERE.parent)


def bigdir_expected(step_done: int) -> set:
    names = set()
    for step in range(step_done):
        names |= {f"entry-{i:06d}" for i in range(step * 2000, step * 2000 + 2000)}
        if step % 3 == 2:
            names -= {f"entry-{i:06d}" for i in range(step * 2000 - 3000, step * 2000 - 1000, 2)}
    return names


def source_records(root: Path) -> dict:
    """path -> fields a populated copy must have, from the host tree."""
    from fixtures.tree import tree_manifest, xattr_values
    xv = xattr_values(root)
    out = {}
    for r in tree_manifest(root):
        r = dict(r)
        r.pop("ino")
        r["xattrs"] = {k: v.hex() for k, v in sorted(xv.get(r["path"], {}).items())}
        out[r["path"]] = r
    return out


def image_records(img: Path) -> dict:
    import stat as pystat
    kinds = {pystat.S_IFREG: "file", pystat.S_IFDIR: "dir", pystat.S_IFLNK: "symlink",
             pystat.S_IFIFO: "fifo", pystat.S_IFCHR: "chardev", pystat.S_IFBLK: "blockdev",
             pystat.S_IFSOCK: "socket"}
    import hashlib
    import fstool
    out = {}
    with fstool.open_image(img) as fs:
        for path, node in fs.walk("/"):
            r = {"path": path, "type": kinds[node.mode & 0o170000], "mode": node.mode & 0o7777,
                 "uid": node.uid, "gid": node.gid, "size": node.size, "nlink": node.nlink,
                 "mtime_ns": node.mtime_ns,
                 "xattrs": {k: v.hex() for k, v in sorted(fs.xattrs(node).items())}}
            if r["type"] == "symlink":
                r["target"] = fs.readlink(node).decode("utf-8", "surrogateescape")
            if r["type"] in ("chardev", "blockdev"):
                r["rdev"] = list(node.rdev)
            if r["type"] == "file":
                r["sha256"] = hashlib.sha256(node.read()).hexdigest()
            out[path] = r
    return out


def judge_populate(got: dict, want: dict, times: str = "ns") -> list:
    """Problems: entries not in the source, or differing from it.  Times are
    compared to the nanosecond, to the microsecond (``times="us"``: a tar
    archive's pax times are decimal fractions) or not at all (a protofile
    carries none); the root is the image's own, not the source's."""
    bad = []
    for path, r in got.items():
        if path == "/":
            continue
        w = want.get(path)
        if w is None:
            bad.append(f"{path}: not in the source")
            continue
        if times == "us" and abs(r["mtime_ns"] - w["mtime_ns"]) > 1000:
            bad.append(f"{path}: mtime is {r['mtime_ns']}, the source has {w['mtime_ns']}")
        keys = ["type", "mode", "uid", "gid", "xattrs"] + (["mtime_ns"] if times == "ns" else [])
        if r["type"] != "dir":
            keys += ["size", "sha256", "target", "rdev"]
        for k in keys:
            if r.get(k) != w.get(k):
                bad.append(f"{path}: {k} is {r.get(k)!r}, the source has {w.get(k)!r}")
    return bad


def replay_with_fstool(img: Path):
    """``fstool log replay``: None when fstool has no such command."""
    r = subprocess.run([PY, "-m", "fstool", "log", "replay", str(img)], capture_output=True,
                       text=True, cwd=HERE.parent)
    if r.returncode == 2 and "No such command" in r.stderr:
        return None
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", help="keep failed images here")
    a = ap.parse_args()
    if not images.loop_available():
        print("needs root, xfsprogs and a kernel loop mount of XFS")
        return 2
    rng = random.Random(a.seed)
    work = Path(tempfile.mkdtemp(prefix="crash-random-", dir=os.environ.get("BENCH_DIR")))
    failures = 0
    try:
        # sources: the fixture tree needs XFS underneath for its xattrs
        host = work / "host.img"
        sh("truncate", "-s", "2G", host)
        sh("mkfs.xfs", "-q", "-f", host)
        with images.Mounted(host) as hm:
            tree = hm / "tree"
            tree.mkdir()
            build_tree(tree, "small")
            want_dir = source_records(tree)
            tarpath = work / "tree.tar"
            with tarfile.open(tarpath, "w", format=tarfile.PAX_FORMAT) as t:
                for p in sorted(tree.iterdir()):
                    t.add(p, arcname=p.name)
            ptree = work / "ptree"
            ptree.mkdir()
            build_proto_tree(ptree)
            proto = work / "tree.proto"
            proto.write_text(protofile_for(ptree, special=False))
            want_proto = source_records(ptree)
            base = work / "base.img"
            mkfs(base)
            ref = work / "ref.img"
            states = None
            # each workload's duration and, for the edits, its step states
            jobs = {
                "populate-dir": ([PY, "-c", DRIVER, "populate", None, str(tree)], want_dir),
                "populate-tar": ([PY, "-c", DRIVER, "populate", None, str(tarpath)], None),
                "populate-proto": ([PY, "-c", DRIVER, "populate", None, str(proto)],
                                   want_proto),
                "edits": ([PY, "-m", "fixtures.crashwork", None, str(work)], None),
                "bigdir": ([PY, "-c", DRIVER, "bigdir", None, "-"], None),
            }
            durations = {}
            for name, (cmd, _want) in jobs.items():
                shutil.copy(base, ref)
                argv = [c if c is not None else str(ref) for c in cmd]
                if name == "edits":
                    argv += ["--states", str(work / "states.json")]
                t0 = time.perf_counter()
                subprocess.run(argv, check=True, capture_output=True, cwd=HERE.parent)
                durations[name] = time.perf_counter() - t0
                if name == "populate-tar":
                    jobs[name] = (cmd, source_records(tree))
            states = json.loads((work / "states.json").read_text())
            names = list(jobs)
            img = work / "crash.img"
            for run in range(a.runs):
                name = names[run % len(names)]
                cmd, want = jobs[name]
                delay = rng.uniform(0.05, durations[name] * 0.98)
                shutil.copy(base, img)
                argv = [c if c is not None else str(img) for c in cmd]
                p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     cwd=HERE.parent)
                time.sleep(delay)
                p.send_signal(signal.SIGKILL)
                p.wait()
                problems = []
                a_img, b_img = work / "a.img", work / "b.img"
                shutil.copy(img, a_img)
                shutil.copy(img, b_img)
                with images.Mounted(a_img, nouuid=True):
                    pass
                rep = subprocess.run(["xfs_repair", "-n", "-f", str(a_img)], capture_output=True,
                                     text=True)
                if rep.returncode:
                    problems.append("xfs_repair -n after the kernel's replay: "
                                    + rep.stdout.strip().splitlines()[-1])
                got = image_records(a_img)
                rb = replay_with_fstool(b_img)
                if rb is not None:
                    if rb.returncode:
                        problems.append(f"fstool log replay failed: {rb.stderr.strip()}")
                    elif image_records(b_img) != got:
                        problems.append("fstool log replay and the kernel give different trees")
                if name.startswith("populate"):
                    times = {"populate-proto": None, "populate-tar": "us"}.get(name, "ns")
                    problems += judge_populate(got, want, times)[:5]
                elif name == "edits":
                    if crashwork.image_state(a_img) not in states:
                        problems.append("the image matches no step of the edit sequence")
                else:
                    present = {p.rsplit("/", 1)[1] for p in got if p.startswith("/big/")}
                    if not any(present == bigdir_expected(k) for k in range(11)):
                        problems.append("/big holds no committed step's entries")
                status = "ok" if not problems else "FAIL"
                print(f"{run:3d} {name:15s} killed after {delay:5.2f}s  {len(got):6d} entries"
                      f"  {status}{': ' + '; '.join(problems) if problems else ''}", flush=True)
                if problems:
                    failures += 1
                    if a.keep:
                        os.makedirs(a.keep, exist_ok=True)
                        shutil.copy(img, Path(a.keep) / f"run{run}-{name}.img")
        print(f"{a.runs} runs, {failures} failed")
        return 1 if failures else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
