"""fstool check against xfs_repair -n over the generated corruption corpus
(fixtures/corpus.py), and the readers over the same images.

    python3 bench/corpus_agreement.py [--geometries std,small,rmap]
        [--seeds 1,2,3,4] [--count 100] [--jobs 2] [--keep DIR] [--no-readers]
        [--json OUT] [--log LOG [--resume]] [--labels OLDLOG] [--report LOG]

For every case: the damaged image is made, labelled by xfs_repair -n (the
one of the xfsprogs that made the geometry: 6.10.1 for ``modern`` and
``modern1k``, fixtures/corpus_base.py's ``xfsprogs``), and
checked by ``fstool check --json``; then ``fstool ls -R -l``, ``fstool get /``
and ``fstool btree dump`` (every AG btree of every AG, every btree fork)
read it.  Prints the verdict agreement (clean or not), crashes (a traceback,
an internal error, or an exception the check caught and reported as
CHECK_ABORTED), hangs (a time limit hit), reader failures, findings
not located well enough for a repair (structure, AG, inode), and each
disagreement.  ``--keep DIR`` keeps the images of disagreements and crashes.
``--labels OLDLOG`` re-checks the cases of an earlier run with xfs_repair
-n's verdicts taken from its log (the reported xfs_repair time is then 0),
except cases fuzzed with xfs_db's "random" verb, whose damage is drawn
afresh each time and so labelled again.  Where check disagrees on a
geometry labelled by 6.1, xfs_repair 6.10.1 -n (when built) judges the
image too: it is stricter in places (an attribute block's CRC), and the
report counts the disagreements it settles in check's favour apart.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from multiprocessing import Pool
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fixtures import corpus  # noqa: E402

CHECK_TIMEOUT = 120
READ_TIMEOUT = 300
# extracted trees go to memory when it can hold them (and keep xattrs)
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") else None
TREES = ["bnobt", "cntbt", "inobt", "finobt", "refcountbt", "rmapbt"]


def fstool(*args, timeout):
    """(exit status or "timeout", stdout, stderr) of one fstool command."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        r = subprocess.run([sys.executable, "-m", "fstool", *args], capture_output=True,
                           text=True, errors="replace", timeout=timeout, env=env)
        return r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired:
        return "timeout", "", ""


def crashed(rc, err) -> bool:
    return rc == 70 or "Traceback" in err or "internal error" in err


def readers(img: Path, agcount: int, bmbt_inodes) -> list:
    """Failures of the read commands on ``img``: [(command, what)]."""
    scratch = Path(tempfile.mkdtemp(prefix="corpus-get-", dir=SCRATCH))
    status = scratch.with_suffix(".status")
    runs = [["ls", "-R", "-l", str(img), "/"],
            ["get", "--no-owners", str(img), "/", str(scratch / "get")]]
    for ag in range(agcount):
        for tree in TREES:
            runs.append(["btree", "dump", "--json", "--ag", str(ag), "--tree", tree, str(img)])
    for ino, attr in bmbt_inodes:
        runs.append(["btree", "dump", "--json", "--inode", str(ino), *(["--attr"] if attr else []),
                     str(img)])
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        subprocess.run([sys.executable, str(ROOT / "bench" / "corpus_readers.py"), str(img),
                        str(scratch), str(status), *map(json.dumps, runs)],
                       capture_output=True, timeout=READ_TIMEOUT, env=env)
        text = status.read_text()
        return [tuple(x) for x in json.loads(text)] if text.startswith("[[") or text == "[]" \
            else [(" ".join(json.loads(text)[:2]), "exited early")]
    except subprocess.TimeoutExpired:
        return [(" ".join(json.loads(status.read_text())[:2]), "hang")]
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(scratch)], capture_output=True)
        shutil.rmtree(scratch, ignore_errors=True)
        status.unlink(missing_ok=True)


AG_STRUCTURES = {"agf", "agi", "agfl", "bnobt", "cntbt", "inobt", "finobt", "refcountbt",
                 "rmapbt"}
FILE_STRUCTURES = {"inode", "bmbt", "dir", "attr", "symlink"}


def unlocated(f: dict) -> str | None:
    """Why a finding is not located precisely enough for a repair to act on
    it, or None: its structure must be one of the table's, an AG structure
    must name its AG, a file's structure its inode."""
    from fstool.ops.problems import STRUCTURES
    s = f.get("structure")
    if s not in STRUCTURES:
        return f"structure {s!r}"
    if s in AG_STRUCTURES and f.get("agno") is None:
        return "no AG"
    if s in FILE_STRUCTURES and f.get("ino") is None:
        return "no inode"
    return None


def ident(case) -> tuple:
    return case["geometry"], case["seed"], case["n"]


def read_log(path) -> list:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def run_case(job):
    case, opts = job
    tmp = Path(tempfile.mkdtemp(prefix="corpus-"))
    img = tmp / "case.img"
    try:
        if not corpus.make_case(img, case):
            return None
        t0 = time.perf_counter()
        # xfs_db's "random" verb draws afresh each time: those images differ
        # from the earlier run's, so xfs_repair -n labels them again
        known = None if case.get("verb") == "random" else \
            opts.get("labels", {}).get(ident(case))
        if known is not None:       # xfs_repair -n's verdict from an earlier run
            label, repair_says = known
        else:
            label, repair_says = corpus.label(img, messages=True, geometry=case["geometry"])
        t1 = time.perf_counter()
        rc, out, err = fstool("check", "--json", str(img), timeout=CHECK_TIMEOUT)
        t2 = time.perf_counter()
        found = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        codes = sorted({f["code"] for f in found})
        res = {"case": case, "label": label, "check": rc, "codes": codes,
               "repair_says": repair_says,
               "repair_s": t1 - t0, "check_s": t2 - t1,
               # an exception the check caught (CHECK_ABORTED) counts as a crash too
               "crash": (crashed(rc, err) and err.strip().splitlines()[-1][:300]) or
               next((f["message"][:300] for f in found if f["code"] == "CHECK_ABORTED"),
                    False),
               "unlocated": [(f["code"], why) for f in found
                             for why in [unlocated(f)] if why][:3]}
        if label != "timeout" and (label != 0) != (rc != 0):
            # on a 6.1 geometry: does xfs_repair 6.10.1 -n side with check?
            res["today_label"] = corpus.today_label(img, case["geometry"])
        if opts["readers"]:
            cat = corpus.catalog(case["geometry"])
            res["readers"] = readers(img, cat["agcount"], cat["bmbt_inodes"])
        if opts["keep"] and (res["crash"] or res.get("readers") or
                             (label != "timeout" and (label != 0) != (rc != 0))):
            keep = Path(opts["keep"])
            keep.mkdir(parents=True, exist_ok=True)
            name = f"{case['geometry']}-{case['seed']}-{case['n']:05d}.img"
            subprocess.run(["cp", "--sparse=always", str(img), str(keep / name)])
        return res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--geometries", default="std,small,rmap")
    ap.add_argument("--seeds", default="1,2,3,4")
    ap.add_argument("--count", type=int, default=100, help="cases per geometry and seed")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--keep")
    ap.add_argument("--no-readers", dest="readers", action="store_false")
    ap.add_argument("--json", dest="json_out")
    ap.add_argument("--log", help="append each case's result to LOG as a JSON line as it "
                    "finishes (a run stopped early still leaves what it did)")
    ap.add_argument("--resume", action="store_true",
                    help="with --log: skip the cases LOG already holds")
    ap.add_argument("--labels", metavar="LOG",
                    help="take xfs_repair -n's verdicts from an earlier run's LOG instead of "
                    "running it again (the cases are made the same way from their seed); "
                    "for re-checking the same corpus after fstool changed")
    ap.add_argument("--report", metavar="LOG",
                    help="print the report of the results in LOG (no case is run)")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="show what xfs_repair -n said about each disagreement")
    a = ap.parse_args()
    if a.report:
        report(read_log(a.report), None, None, a.verbose)
        return
    geometries = a.geometries.split(",")
    from fixtures import corpus_base
    for g in geometries:
        if corpus_base.unavailable(g):
            sys.exit(f"geometry {g}: {corpus_base.unavailable(g)}")
    for g in geometries:           # build base images and catalogs up front
        corpus.catalog(g)
    labels = {ident(r["case"]): (r["label"], r["repair_says"])
              for r in read_log(a.labels)} if a.labels else {}
    jobs = [(c, {"readers": a.readers, "keep": a.keep, "labels": labels})
            for g in geometries for s in map(int, a.seeds.split(","))
            for c in corpus.cases(g, s, a.count)]
    # geometries and seeds take turns, so a run stopped early has sampled them all
    jobs.sort(key=lambda j: (j[0]["n"], j[0]["seed"], j[0]["geometry"]))
    if a.resume and a.log and Path(a.log).exists():
        done = {ident(r["case"]) for r in read_log(a.log)}
        jobs = [j for j in jobs if ident(j[0]) not in done]
    t0 = time.perf_counter()
    log = open(a.log, "a") if a.log else None
    results = []
    with Pool(a.jobs) as pool:
        for r in pool.imap_unordered(run_case, jobs, chunksize=1):
            if r is None:
                continue
            results.append(r)
            if log:
                log.write(json.dumps(r) + "\n")
                log.flush()
    wall = time.perf_counter() - t0
    report(results, len(jobs), wall, a.verbose)
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(results, indent=1))


def report(results: list, drawn: int, wall: float | None, verbose: bool) -> None:
    labelled = [r for r in results if r["label"] != "timeout"]
    agree = [r for r in labelled if (r["label"] != 0) == (r["check"] != 0)]
    for r in results:           # logs from before CHECK_ABORTED counted as a crash
        if not r["crash"] and "CHECK_ABORTED" in r["codes"]:
            r["crash"] = "CHECK_ABORTED"
    crashes = [r for r in results if r["crash"]]
    hangs = [r for r in results if r["check"] == "timeout"]
    reader_bad = [r for r in results if r.get("readers")]
    vague = [r for r in results if r.get("unlocated")]
    print(f"{len(results)} images" + (f" ({drawn - len(results)} drawn cases changed nothing)"
                                      if drawn is not None else "")
          + (f", {wall:.0f} s" if wall is not None else ""))
    print(f"agreement: {len(agree)}/{len(labelled)} "
          f"({100.0 * len(agree) / max(1, len(labelled)):.2f}%)")
    today = [r for r in labelled if r not in agree and r.get("today_label") is not None
             and (r["today_label"] != 0) == (r["check"] != 0)]
    if today:
        print(f"  of the disagreements, xfs_repair 6.10.1 -n agrees with check on {len(today)} "
              f"(6.1 geometries: 6.10.1 is the stricter there)")
    print(f"crashes: {len(crashes)}  hangs: {len(hangs)}  "
          f"xfs_repair hangs: {len(results) - len(labelled)}  "
          f"reader failures: {len(reader_bad)}  images with unlocated findings: {len(vague)}")
    print(f"time: xfs_repair -n {sum(r['repair_s'] for r in results):.0f} s, "
          f"fstool check {sum(r['check_s'] for r in results):.0f} s")
    for r in sorted(results, key=lambda r: corpus.describe(r["case"])):
        c = r["case"]
        where = f"{c['geometry']} seed {c['seed']} #{c['n']}"
        if r["label"] != "timeout" and (r["label"] != 0) != (r["check"] != 0):
            print(f"  DISAGREE {where}: {corpus.describe(c)}: xfs_repair -n {r['label']}, "
                  f"fstool check {r['check']} {' '.join(r['codes'])}"
                  + (f" (xfs_repair 6.10.1 -n {r['today_label']})"
                     if r.get("today_label") is not None else ""))
            if verbose:
                for line in r["repair_says"][:6]:
                    print(f"      repair: {line}")
        if r["crash"] or r["check"] == "timeout":
            print(f"  CRASH {where}: {corpus.describe(c)}: {r['crash'] or 'hang'}")
        for code, why in r.get("unlocated") or ():
            print(f"  UNLOCATED {where}: {corpus.describe(c)}: {code}: {why}")
        for cmd, what in r.get("readers") or ():
            print(f"  READER {where}: {corpus.describe(c)}: {cmd}: {what}")


if __name__ == "__main__":
    main()
