"""repair benchmark, side by side with xfs_repair in one run.

    python3 bench/bench_repair.py finobt [--inodes 1000000] [--image IMG] [--churn N]
                                         [--repeat 1]
    python3 bench/bench_repair.py damaged [--inodes 1000000] [--churn 7] [--repeat 1]
    python3 bench/bench_repair.py corpus [--geometry std] [--seed 1] [--count 200]

``finobt``: ``fstool repair --rebuild finobt`` and ``xfs_repair`` on two
copies of the same kernel-written image (bench_check.py's: N empty files,
1,000 to a directory; built the first time; with ``--churn N`` a copy in
which the kernel deleted every Nth file), wall time and peak RSS, then
the finobt records of both results against the kernel's (xfs_db btdump).

``damaged``: the same image (with ``--churn``), damaged with xfs_db in
several structures at once (a finobt record, a bnobt record, AGI and
superblock counters, an inode's link count and another's block count),
repaired by ``fstool repair`` and by ``xfs_repair`` on copies: wall time,
CPU time and peak RSS, then xfs_repair -n on both results.

``corpus``: every case of the check corpus (fixtures/corpus.py) that
xfs_repair -n calls corrupt is repaired twice, by ``fstool repair`` and by
``xfs_repair``, on copies.  For fstool's result: xfs_repair -n and fstool
check must exit 0 and the kernel must mount it; the files the kernel shows
(path, type, size, contents) are compared with those in xfs_repair's
result (a file xfs_repair moved to lost+found, named by its inode number,
counts as kept when fstool kept that inode elsewhere: fixtures.repair_images.
files_missing).  Prints cases, repaired clean, not repaired (exit 4, with the
findings repair does not handle), made worse (an exit 1 whose result is not
clean: must be 0) and files lost against xfs_repair (must be 0).
"""
import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

from bench_check import build  # noqa: E402
from common import bench_image  # noqa: E402


def measure(cmd):
    """(wall seconds, peak RSS MB, exit status, CPU seconds) of one child
    process (CPU time counts too: on a busy machine wall time is mostly
    waiting for a core)."""
    wrapper = ("import resource,subprocess,sys,time;t=time.perf_counter();"
               "r=subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL,"
               "stderr=subprocess.DEVNULL).returncode;"
               "u=resource.getrusage(resource.RUSAGE_CHILDREN);"
               "print(time.perf_counter()-t,u.ru_maxrss/1024,r,u.ru_utime+u.ru_stime)")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True,
                         text=True, check=True, env=env).stdout.split()
    return float(out[0]), float(out[1]), int(out[2]), float(out[3])


def cp(src, dst, settle=False):
    subprocess.run(["cp", "--sparse=always", str(src), str(dst)], check=True)
    if settle:
        # the copy's dirty pages are written now, not in the timed run's
        # flushes
        os.sync()
        subprocess.run(["cat", str(dst)], stdout=subprocess.DEVNULL)


def churn(base, path, every):
    """A copy of ``base`` where the kernel deleted every ``every``-th file
    (the finobt then has a record in nearly every chunk)."""
    tmp = path + ".tmp"
    cp(base, tmp)
    mnt = tempfile.mkdtemp()
    subprocess.run(["mount", "-o", "loop", tmp, mnt], check=True)
    try:
        k = 0
        for d in sorted(os.listdir(mnt)):
            for f in sorted(os.listdir(os.path.join(mnt, d))):
                if k % every == 0:
                    os.unlink(os.path.join(mnt, d, f))
                k += 1
    finally:
        subprocess.run(["umount", mnt], check=True)
        os.rmdir(mnt)
    os.rename(tmp, path)


def finobt_records(img, agcount):
    out = []
    for ag in range(agcount):
        r = subprocess.run(["xfs_db", "-r", "-c", f"agi {ag}", "-c", "addr free_root", "-c",
                            "btdump", str(img)], capture_output=True, text=True)
        out += [ln.split(":", 1)[1].strip() for ln in r.stdout.splitlines()
                if ln[:1].isdigit() and ":[" in ln and ln.count(",") == 4]
    return out


def agcount(img):
    r = subprocess.run(["xfs_db", "-r", "-c", "sb 0", "-c", "print agcount", str(img)],
                       capture_output=True, text=True, check=True)
    return int(r.stdout.split("=")[1])


def source_image(a):
    """The kernel-written image of ``--inodes`` files (with ``--churn N``:
    the copy in which the kernel deleted every Nth), built the first time."""
    img = bench_image(a.image, f"check-{a.inodes}.img", lambda p: build(p, a.inodes))
    if a.churn:
        img = bench_image(None, f"check-{a.inodes}-churn{a.churn}.img",
                          lambda p: churn(img, p, a.churn))
    return img


def side_by_side(src, runs, repeat) -> dict:
    """Each (name, path, command) of ``runs`` on a fresh, settled copy of
    ``src``, best of ``repeat``: {name: (wall, RSS, exit, CPU)}, printed;
    then each run's ratios to the first one's (xfs_repair's)."""
    res = {}
    for name, path, cmd in runs:
        times = []
        for _ in range(repeat):
            cp(src, path, settle=True)
            times.append(measure(cmd))
        best = min(times)
        res[name] = best
        print(f"{name:36s} {best[0]:7.2f} s  {best[3]:7.2f} s CPU  {best[1]:7.0f} MB RSS  "
              f"exit {best[2]}")
    ref, x = runs[0][0], res[runs[0][0]]
    for name, _p, _c in runs[1:]:
        f = res[name]
        print(f"{name}: {f[0] / x[0]:.2f}x the wall time, {f[3] / x[3]:.2f}x the CPU time, "
              f"{f[1] / x[1]:.2f}x the memory of {ref}")
    return res


def repair_n_after(results) -> None:
    for name, path in results:
        rc = subprocess.run(["xfs_repair", "-n", "-f", str(path)],
                            capture_output=True).returncode
        print(f"xfs_repair -n after {name}: exit {rc}")


def bench_finobt(a):
    img = source_image(a)
    work = Path(tempfile.mkdtemp(prefix="bench-repair-", dir=HERE / "results"))
    try:
        ours, theirs = work / "fstool.img", work / "xfs_repair.img"
        n_ag = agcount(img)
        kernel = finobt_records(img, n_ag)
        cmd = [sys.executable, "-m", "fstool", "repair", "--rebuild", "finobt"]
        side_by_side(img, [("xfs_repair", theirs, ["xfs_repair", "-f", str(theirs)]),
                           ("fstool repair --rebuild finobt", ours, cmd + [str(ours)]),
                           ("fstool repair --rebuild finobt -j2", ours,
                            cmd + ["-j", "2", str(ours)])], a.repeat)
        print(f"finobt records: kernel {len(kernel)}, fstool equal: "
              f"{finobt_records(ours, n_ag) == kernel}, xfs_repair equal: "
              f"{finobt_records(theirs, n_ag) == kernel}")
        repair_n_after((("fstool", ours), ("xfs_repair", theirs)))
    finally:
        for p in work.iterdir():
            p.unlink()
        work.rmdir()


# (xfs_db commands): the damage of ``damaged``; inodes named by path
DAMAGE = [
    ["agi 1", "addr free_root", "write -d recs[2].free 0"],
    ["agf 0", "addr bnoroot", "write -d recs[1].blockcount 7"],
    ["agi 2", "write -d freecount 3"],
    ["sb 0", "write -d icount 99"],
    ["path /d00005/f00003", "write -d core.nlinkv2 7"],
    ["path /d00009/f00004", "write -d core.nblocks 9"],
]


def damaged(base, path):
    cp(base, path)
    for cmds in DAMAGE:
        args = ["xfs_db", "-x"]
        for c in cmds:
            args += ["-c", c]
        subprocess.run(args + [str(path)], check=True, capture_output=True)
    rc = subprocess.run(["xfs_repair", "-n", "-f", str(path)], capture_output=True).returncode
    if rc != 1:
        raise SystemExit(f"xfs_repair -n exits {rc} on the damaged image: not damaged")


def bench_damaged(a):
    img = source_image(a)
    work = Path(tempfile.mkdtemp(prefix="bench-repair-", dir=HERE / "results"))
    try:
        dmg = work / "damaged.img"
        damaged(img, dmg)
        ours, theirs = work / "fstool.img", work / "xfs_repair.img"
        side_by_side(dmg, [("xfs_repair", theirs, ["xfs_repair", "-f", str(theirs)]),
                           ("fstool repair", ours,
                            [sys.executable, "-m", "fstool", "repair", str(ours)])], a.repeat)
        repair_n_after((("fstool", ours), ("xfs_repair", theirs)))
    finally:
        for p in work.iterdir():
            p.unlink()
        work.rmdir()


def kernel_files(img):
    """{path: (mode, size, sha256, inode)} as the kernel shows the image
    (fixtures.repair_images.tree_files), or None when it does not mount."""
    from fixtures.repair_images import tree_files
    mnt = tempfile.mkdtemp(prefix="bench-repair-mnt-")
    r = subprocess.run(["mount", "-o", "loop,ro,nouuid", str(img), mnt], capture_output=True)
    if r.returncode:
        os.rmdir(mnt)
        return None
    try:
        return tree_files(mnt)
    finally:
        subprocess.run(["umount", mnt], capture_output=True)
        os.rmdir(mnt)


def bench_corpus(a):
    from fixtures import corpus
    from fixtures.repair_images import files_missing
    work = Path(tempfile.mkdtemp(prefix="bench-repair-", dir=HERE / "results"))
    stats = {"cases": 0, "corrupt": 0, "repaired clean": 0, "not repaired": 0,
             "made worse": 0, "crashes": 0, "files lost": 0, "cases losing files": 0,
             "files xfs_repair lost that fstool kept": 0}
    why = {}
    try:
        for case in corpus.cases(a.geometry, a.seed, a.count):
            dmg = work / "dmg.img"
            if not corpus.make_case(dmg, case):
                continue
            stats["cases"] += 1
            if corpus.label(dmg) != 1:
                dmg.unlink()
                continue
            stats["corrupt"] += 1
            ours, theirs = work / "ours.img", work / "theirs.img"
            cp(dmg, ours)
            cp(dmg, theirs)
            r = subprocess.run([sys.executable, "-m", "fstool", "repair", "--json", str(ours)],
                               capture_output=True, text=True, cwd=REPO)
            subprocess.run(["xfs_repair", "-f", str(theirs)], capture_output=True)
            if r.returncode not in (0, 1, 4) or "Traceback" in r.stderr:
                stats["crashes"] += 1
                print(f"CRASH {corpus.describe(case)}: {r.returncode} {r.stderr[-300:]}")
            elif r.returncode == 4:
                stats["not repaired"] += 1
                import json
                try:
                    left = json.loads(r.stdout).get("not_repaired", [])
                    codes = sorted({f["code"] for f in left})
                except ValueError:
                    codes = [r.stderr.strip()[:60]]
                for c in codes or ["(none)"]:
                    why[c] = why.get(c, 0) + 1
            else:
                clean = subprocess.run(["xfs_repair", "-n", "-f", str(ours)],
                                       capture_output=True).returncode == 0 and \
                    subprocess.run([sys.executable, "-m", "fstool", "check", str(ours)],
                                   capture_output=True, cwd=REPO).returncode == 0
                mine = kernel_files(ours) if clean else None
                if mine is None:
                    stats["made worse"] += 1
                    print(f"NOT CLEAN after exit {r.returncode}: {corpus.describe(case)}")
                else:
                    stats["repaired clean"] += 1
                    ref = kernel_files(theirs) or {}
                    lost = files_missing(mine, ref)
                    stats["files xfs_repair lost that fstool kept"] += len(set(mine) - set(ref))
                    if lost:
                        stats["files lost"] += len(lost)
                        stats["cases losing files"] += 1
                        print(f"LOST {len(lost)} files: {corpus.describe(case)}: {lost[:3]}")
            for p in (dmg, ours, theirs):
                p.unlink(missing_ok=True)
    finally:
        for p in work.iterdir():
            p.unlink()
        work.rmdir()
    for k, v in stats.items():
        print(f"{k:40s} {v}")
    print("not repaired, by finding left:")
    for c, n in sorted(why.items(), key=lambda kv: -kv[1]):
        print(f"  {c:30s} {n}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    f = sub.add_parser("finobt")
    f.add_argument("--inodes", type=int, default=1000000)
    f.add_argument("--image")
    f.add_argument("--repeat", type=int, default=1)
    f.add_argument("--churn", type=int, default=0,
                   help="first let the kernel delete every Nth file (finobt with holes)")
    d = sub.add_parser("damaged")
    d.add_argument("--inodes", type=int, default=1000000)
    d.add_argument("--image")
    d.add_argument("--repeat", type=int, default=1)
    d.add_argument("--churn", type=int, default=7)
    c = sub.add_parser("corpus")
    c.add_argument("--geometry", default="std")
    c.add_argument("--seed", type=int, default=1)
    c.add_argument("--count", type=int, default=200)
    a = ap.parse_args()
    os.makedirs(HERE / "results", exist_ok=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "fstool"),
                    str(REPO / "fstool_native")], check=True, stdout=subprocess.DEVNULL)
    {"finobt": bench_finobt, "damaged": bench_damaged, "corpus": bench_corpus}[a.what](a)


if __name__ == "__main__":
    main()
