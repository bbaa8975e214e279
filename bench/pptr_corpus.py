"""fstool check and repair over the parent-pointer corruption corpus
(fixtures/corpus_pptr.py), judged by xfs_repair 6.10.1.

    python3 bench/pptr_corpus.py [--seeds 1,2] [--count 100] [--jobs 2]
                                 [--no-repair] [--log LOG] [--keep DIR]

For every case: the damaged image is made and labelled by xfs_repair
6.10.1 -n, and ``fstool check --json`` judges it: the verdicts agree when
both call it clean or both corrupt; a traceback, an internal error or a
CHECK_ABORTED finding is a crash.  Then (unless ``--no-repair``) every case
xfs_repair -n calls corrupt is repaired by ``fstool repair`` and by
xfs_repair 6.10.1 on copies, as bench/bench_repair.py's corpus mode judges
it: fstool's result must be clean by xfs_repair 6.10.1 -n and fstool check,
mount, and keep every file xfs_repair keeps.  Prints the agreement, the
crashes, the repair outcomes, and each disagreement.
"""
import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_repair import summarize  # noqa: E402
from corpus_agreement import CHECK_TIMEOUT, crashed, fstool  # noqa: E402
from fixtures import corpus_pptr, modern  # noqa: E402
from fixtures.corpus_repair import corpus_case  # noqa: E402


def check_case(case, keep):
    """(record) of fstool check against xfs_repair 6.10.1 -n on one case."""
    tmp = Path(tempfile.mkdtemp(prefix="pptr-corpus-"))
    img = tmp / "case.img"
    try:
        if not corpus_pptr.make_case(img, case):
            return None
        t0 = time.perf_counter()
        label, said = corpus_pptr.label(img, messages=True)
        t1 = time.perf_counter()
        rc, out, err = fstool("check", "--json", str(img), timeout=CHECK_TIMEOUT)
        t2 = time.perf_counter()
        found = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        rec = {"case": case, "describe": corpus_pptr.describe(case), "label": label,
               "check": rc, "codes": sorted({f["code"] for f in found}),
               "repair_says": said[:8], "repair_s": round(t1 - t0, 2),
               "check_s": round(t2 - t1, 2),
               "crash": (crashed(rc, err) and err.strip().splitlines()[-1][:300]) or
               next((f["message"][:300] for f in found if f["code"] == "CHECK_ABORTED"),
                    False)}
        if keep and (rec["crash"] or (label in (0, 1) and (label != 0) != (rc != 0))):
            Path(keep).mkdir(parents=True, exist_ok=True)
            dst = Path(keep) / f"pptr-{case['seed']}-{case['n']:05d}.img"
            img.rename(dst)
        return rec
    finally:
        img.unlink(missing_ok=True)
        tmp.rmdir()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--no-repair", action="store_true")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--log", help="one JSON line per case")
    ap.add_argument("--keep", help="keep the images of disagreements and crashes here")
    a = ap.parse_args()
    if not corpus_pptr.available():
        raise SystemExit("needs root, a kernel loop mount of XFS and xfsprogs 6.10.1")
    todo = [c for s in a.seeds.split(",") for c in corpus_pptr.cases(int(s), a.count)]
    with ThreadPoolExecutor(a.jobs) as ex:
        checked = [r for r in ex.map(lambda c: check_case(c, a.keep), todo) if r]
    judged = [r for r in checked if r["label"] in (0, 1)]
    agree = sum((r["label"] != 0) == (r["check"] != 0) for r in judged)
    crashes = [r for r in checked if r["crash"]]
    print(f"cases made                  {len(checked)}")
    print(f"corrupt by xfs_repair -n    {sum(r['label'] == 1 for r in checked)}")
    print(f"verdicts agree              {agree}/{len(judged)} "
          f"({100 * agree / max(1, len(judged)):.1f}%)")
    print(f"crashes                     {len(crashes)}")
    for r in judged:
        if (r["label"] != 0) != (r["check"] != 0):
            print(f"  DISAGREE {r['describe']}: xfs_repair {r['label']} {r['repair_says'][:3]}"
                  f" / fstool {r['check']} {r['codes']}")
    for r in crashes:
        print(f"  CRASH {r['describe']}: {r['crash']}")
    records = []
    if not a.no_repair:
        base = corpus_pptr.base_image()
        work = Path(tempfile.mkdtemp(prefix="pptr-repair-"))
        corrupt = [r["case"] for r in checked if r["label"] == 1]

        def one(case):
            return corpus_case(case, work / f"{case['seed']}-{case['n']}", a.timeout,
                               corpus=corpus_pptr, xfs_repair=modern.tool("xfs_repair"),
                               base_img=base)
        with ThreadPoolExecutor(a.jobs) as ex:
            records = [r for r in ex.map(one, corrupt)]
        work.rmdir()
        for r in records:
            if r["result"] != "repaired clean" or r.get("n_files_lost"):
                print(f"  {r['result'].upper()} {r['describe']}: "
                      f"{r.get('not_repaired') or r.get('after') or r.get('files_lost')}")
        summarize(records)
    if a.log:
        with open(a.log, "w") as f:
            for r in checked + records:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
