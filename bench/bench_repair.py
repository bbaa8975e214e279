"""repair benchmark, side by side with xfs_repair in one run.

    python3 bench/bench_repair.py finobt [--inodes 1000000] [--image IMG] [--churn N]
                                         [--repeat 1]
    python3 bench/bench_repair.py damaged [--inodes 1000000] [--churn 7] [--repeat 1]
    python3 bench/bench_repair.py corpus [--geometry std[,small,rmap]] [--seed 1[-3]]
                                         [--count 200] [--kind fuzz,flip,truncate]
                                         [--jobs 2] [--timeout 900] [--work DIR]
                                         [--log CASES.jsonl] [--summary]
    python3 bench/bench_repair.py superblock [--seed 1[-20]] [--field F[,G]]
                                             [--target primary,primary+secondary]
                                             [--mode random,bitflip,nudge] [--work DIR]
                                             [--log CASES.jsonl]

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
``xfs_repair``, on copies (xfs_repair, here and below, is the one of the
xfsprogs that made the geometry: 6.10.1 for ``modern`` and ``modern1k``).
For fstool's result: xfs_repair -n and fstool check must exit 0 and the
kernel must mount it; the files the kernel shows
(path, type, size, contents) are compared with those in xfs_repair's
result (a file xfs_repair moved to lost+found, named by its inode number,
counts as kept when fstool kept that inode elsewhere: fixtures.repair_images.
files_missing).  Prints cases, repaired clean, not repaired (exit 4, with the
findings repair does not handle), missed by check (exit 0 on an image
xfs_repair -n calls corrupt), with those two the cases whose image was
changed all the same (must be 0: an image fstool does not repair is left
byte for byte as it was, bar the zeros --extend-truncated appends), made
worse (an exit 1 whose
result is not clean: must be 0) and files lost against xfs_repair (must be 0).  Owner,
group and mtime of the files both keep are compared too (cases where they
differ are counted).  With ``--log`` every case's record (its result, the
findings left, the files lost, timings) is one JSON line, and cases already
in the log are not run again; ``--summary`` only summarizes a log.

``superblock``: every superblock field set, in the primary alone and in
the primary and AG 1's secondary, to a value drawn each way
fixtures/sbfuzz.py draws one (all bits random, one bit flipped, nudged by
a little) from each seed, then judged as tests/test_repair_superblock_fuzz.py
judges its one value per field (sbfuzz.judge: fstool's repair clean by
xfs_repair -n 6.10.1 and 6.1, every write inside what the undamaged
geometry names, no file lost against xfs_repair's repair; a refusal only
where xfs_repair fails too, with nothing written).  Prints each case with
a problem as it comes, then the count of cases and of those with problems.
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
from fixtures.corpus_repair import corpus_case  # noqa: E402


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


def bench_corpus(a):
    """Run the cases of every (geometry, seed) asked for, ``--jobs`` at a
    time, one JSON line per case to ``--log`` (cases already there are not
    run again), then print the summary."""
    import json
    from concurrent.futures import ThreadPoolExecutor
    from fixtures import corpus
    workdir = Path(a.work or (HERE / "results"))
    workdir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-repair-", dir=workdir))
    log = Path(a.log) if a.log else None
    done = {}
    if log and log.exists():
        for line in log.read_text().splitlines():
            r = json.loads(line)
            c = r["case"]
            done[(c["geometry"], c["seed"], c["n"])] = r
    todo = []
    for geo in a.geometry.split(","):
        for seed in a.seeds():
            for case in corpus.cases(geo, seed, a.count):
                if a.kind and case["kind"] not in a.kind.split(","):
                    continue
                if (geo, seed, case["n"]) not in done:
                    todo.append(case)
    records = list(done.values())

    def one(case):
        return corpus_case(case, work / f"{case['geometry']}-{case['seed']}-{case['n']}",
                           a.timeout)
    try:
        with ThreadPoolExecutor(a.jobs) as ex:
            for rec in ex.map(one, todo):
                records.append(rec)
                if log:
                    with open(log, "a") as f:
                        f.write(json.dumps(rec) + "\n")
                if rec["result"] in ("made worse", "crash", "hang") or rec.get("n_files_lost"):
                    what = rec.get("stderr", "") or rec.get("after", "") or rec["files_lost"][:3]
                    print(f"{rec['result'].upper()} {rec['describe']}: {what}", flush=True)
    finally:
        for p in sorted(work.rglob("*"), reverse=True):
            p.rmdir() if p.is_dir() else p.unlink()
        work.rmdir()
    summarize(records)


def bench_superblock(a):
    """Every (field, target, mode) case of every seed, judged by
    fixtures/sbfuzz.judge; one JSON line per case to ``--log`` (cases
    already there are not run again)."""
    import json
    from fixtures import sbfuzz
    workdir = Path(a.work or (HERE / "results"))
    workdir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-sb-", dir=workdir))
    log = Path(a.log) if a.log else None
    key = ("field", "target", "mode", "seed")
    done = set()
    if log and log.exists():
        done = {tuple(json.loads(x)[k] for k in key) for x in log.read_text().splitlines()}
    fields = set(a.field.split(",")) if a.field else None
    n = bad = 0
    try:
        for seed in a.seeds():
            for case in sbfuzz.cases(seed, a.mode.split(","), a.target.split(",")):
                if (fields and case["field"] not in fields) or \
                        tuple(case[k] for k in key) in done:
                    continue
                problems = sbfuzz.judge(case, work)
                n += 1
                bad += bool(problems)
                if problems:
                    print(f"{sbfuzz.describe(case)}: {'; '.join(problems)}", flush=True)
                if log:
                    with open(log, "a") as f:
                        f.write(json.dumps(dict(case, problems=problems)) + "\n")
    finally:
        for p in sorted(work.rglob("*"), reverse=True):
            p.rmdir() if p.is_dir() else p.unlink()
        work.rmdir()
    print(f"{n} cases, {bad} with problems")


def summarize(records):
    stats = {"cases (damage made)": 0, "corrupt by xfs_repair -n": 0, "repaired clean": 0,
             "not repaired": 0, "missed by check": 0,
             "not repaired or missed, image changed all the same": 0,
             "made worse": 0, "crashes": 0,
             "hangs": 0,
             "files lost": 0, "cases losing files": 0, "cases with metadata differing": 0,
             "files xfs_repair lost that fstool kept": 0}
    why = {}
    for r in records:
        res = r["result"]
        if res == "no damage":
            continue
        stats["cases (damage made)"] += 1
        if res == "clean":
            continue
        stats["corrupt by xfs_repair -n"] += 1
        key = {"crash": "crashes", "hang": "hangs"}.get(res, res)
        stats[key] += 1
        stats["not repaired or missed, image changed all the same"] += bool(r.get("changed"))
        if res == "not repaired":
            for c in r.get("not_repaired") or [r.get("stderr", "")[:60] or "(none)"]:
                why[c] = why.get(c, 0) + 1
        if res == "repaired clean":
            stats["files lost"] += r["n_files_lost"]
            stats["cases losing files"] += bool(r["n_files_lost"])
            stats["cases with metadata differing"] += bool(r["metadata_differs"])
            stats["files xfs_repair lost that fstool kept"] += r["kept_more"]
    for k, v in stats.items():
        print(f"{k:40s} {v}")
    print("not repaired, by finding left (a case may have several):")
    for c, n in sorted(why.items(), key=lambda kv: -kv[1]):
        print(f"  {c:50s} {n}")


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
    c.add_argument("--geometry", default="std",
                   help="one or several, comma-separated (std,small,rmap)")
    c.add_argument("--seed", default="1", help="a seed, several comma-separated, or A-B")
    c.add_argument("--count", type=int, default=200, help="cases drawn per geometry and seed")
    c.add_argument("--kind", help="only these kinds (fuzz,flip,truncate); all by default")
    c.add_argument("--jobs", "-j", type=int, default=1, help="cases run at once")
    c.add_argument("--timeout", type=int, default=900,
                   help="seconds a repair may take before it counts as a hang")
    c.add_argument("--work", help="directory for the images (default bench/results)")
    c.add_argument("--log", help="JSON lines, one per case; cases already in it are kept")
    c.add_argument("--summary", action="store_true", help="only summarize --log")
    s = sub.add_parser("superblock")
    s.add_argument("--seed", default="1", help="a seed, several comma-separated, or A-B")
    s.add_argument("--field", help="only these superblock fields (xfs_db names)")
    s.add_argument("--target", default="primary,primary+secondary")
    s.add_argument("--mode", default="random,bitflip,nudge")
    s.add_argument("--work", help="directory for the images (default bench/results)")
    s.add_argument("--log", help="JSON lines, one per case; cases already in it are kept")
    a = ap.parse_args()

    def seeds():
        out = []
        for part in getattr(a, "seed", "1").split(","):
            lo, _, hi = part.partition("-")
            out += range(int(lo), int(hi or lo) + 1)
        return out
    a.seeds = seeds
    if a.what == "corpus" and a.summary:
        import json
        summarize([json.loads(x) for x in Path(a.log).read_text().splitlines()])
        return
    os.makedirs(HERE / "results", exist_ok=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "fstool"),
                    str(REPO / "fstool_native")], check=True, stdout=subprocess.DEVNULL)
    {"finobt": bench_finobt, "damaged": bench_damaged, "corpus": bench_corpus,
     "superblock": bench_superblock}[a.what](a)


if __name__ == "__main__":
    main()
