"""Run fstool check and xfs_repair -n over a corruption corpus and report
where their verdicts (clean or not) differ.

    python3 bench/corpus_agreement.py CORPUS_DIR

CORPUS_DIR comes from `python -m fixtures.corpus`.
"""
import json
import subprocess
import sys
import time
from pathlib import Path


def verdicts(img: Path) -> tuple[int, int, float, float]:
    t0 = time.perf_counter()
    rep = subprocess.run(["xfs_repair", "-n", "-f", str(img)], capture_output=True,
                         timeout=300).returncode
    t1 = time.perf_counter()
    ours = subprocess.run([sys.executable, "-m", "fstool", "check", "--json", str(img)],
                          capture_output=True, timeout=300)
    t2 = time.perf_counter()
    if b"Traceback" in ours.stderr:
        raise SystemExit(f"{img}: fstool check crashed:\n{ours.stderr.decode()}")
    return rep, ours.returncode, t1 - t0, t2 - t1


def main():
    corpus = Path(sys.argv[1])
    cases = json.loads((corpus / "cases.json").read_text())
    agree = 0
    rows = []
    for case in cases:
        rep, ours, _tr, _to = verdicts(corpus / case["image"])
        same = (rep != 0) == (ours != 0)
        agree += same
        if not same:
            rows.append((case, rep, ours))
    print(f"{agree}/{len(cases)} agree ({100.0 * agree / max(1, len(cases)):.1f}%)")
    for case, rep, ours in rows:
        print(f"  {' / '.join(case['select'])}: fuzz {case['crc']} {case['field']} "
              f"{case['verb']}: xfs_repair -n {rep}, fstool check {ours}")


if __name__ == "__main__":
    main()
