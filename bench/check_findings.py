"""fstool check's findings over a fixed set of damaged images, recorded and
compared: the guard for changes that must not change what check finds
(a speed-up, a move into native code).

    python3 bench/check_findings.py record DIR [--per-geometry 50] [--image IMG ...]
    python3 bench/check_findings.py compare DIR [--pure] [--limit N]

``record`` makes the damaged images (fixtures/corpus.py; the case draws of
seed 1 of every corpus geometry, taken round-robin over the kinds of
structure damaged: inode cores of every file type and fork format, bmbt,
directory and attr blocks, the AG headers and btrees, superblocks, and
truncations; a geometry whose xfsprogs is not built is left out) in DIR, adds the clean corpus bases and any ``--image`` given,
and writes ``fstool check --json`` of each (findings and exit status) to
DIR/findings.json (adding to what it holds).  ``compare`` runs the check of the tree this script is
in over the same images and lists every image whose findings differ;
``--pure`` runs it on the pure-Python backend.
"""
import argparse
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fixtures import corpus, corpus_base  # noqa: E402


def check(img: Path, pure: bool = False):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("FSTOOL_PURE_PYTHON", None)
    if pure:
        env["FSTOOL_PURE_PYTHON"] = "1"
    r = subprocess.run([sys.executable, "-m", "fstool", "check", "--json", str(img)],
                       capture_output=True, text=True, errors="replace", timeout=600, env=env)
    return {"exit": r.returncode, "findings": r.stdout.splitlines(),
            "stderr": r.stderr.strip().splitlines()[-1:] if r.stderr.strip() else []}


def pick(geometry: str, per: int) -> list:
    """``per`` cases of ``geometry``, round-robin over the kinds of target."""
    by_kind = defaultdict(list)
    for case in corpus.cases(geometry, 1, per * 8):
        kind = case.get("target", "truncate").split()[0]
        by_kind[kind].append(case)
    out = []
    while len(out) < per and any(by_kind.values()):
        for kind in sorted(by_kind):
            if by_kind[kind] and len(out) < per:
                out.append(by_kind[kind].pop(0))
    return out


def record(d: Path, per: int, extra: list) -> None:
    d.mkdir(parents=True, exist_ok=True)
    images = []
    for geometry in sorted(corpus_base.GEOMETRIES):
        if corpus_base.unavailable(geometry):
            print(f"geometry {geometry} left out: {corpus_base.unavailable(geometry)}")
            continue
        images.append(str(corpus_base.base_image(geometry)))
        for case in pick(geometry, per):
            img = d / f"{geometry}-{case['n']:04d}.img"
            if img.exists() or corpus.make_case(img, case):
                images.append(str(img))
    images += [str(Path(p).resolve()) for p in extra]
    out = d / "findings.json"
    results = json.loads(out.read_text()) if out.exists() else {}
    images = [img for img in images if img not in results]
    for i, img in enumerate(images):
        results[img] = check(Path(img))
        print(f"{i + 1}/{len(images)} {Path(img).name}: exit {results[img]['exit']}, "
              f"{len(results[img]['findings'])} findings", flush=True)
    out.write_text(json.dumps(results, indent=1))


def compare(d: Path, pure: bool, limit: int = 0) -> int:
    before = json.loads((d / "findings.json").read_text())
    if limit:
        before = dict(list(before.items())[:limit])
    differ = []
    for img, old in before.items():
        new = check(Path(img), pure)
        if new != old:
            differ.append(img)
            print(f"DIFFERS {img}: exit {old['exit']} -> {new['exit']}")
            for line in sorted(set(old["findings"]) ^ set(new["findings"])):
                print(("  - " if line in old["findings"] else "  + ") + line[:300])
    n_find = sum(len(v["findings"]) for v in before.values())
    print(f"{len(before) - len(differ)} of {len(before)} images identical "
          f"({n_find} findings recorded)")
    return 1 if differ else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("record", "compare"))
    ap.add_argument("dir")
    ap.add_argument("--per-geometry", type=int, default=50)
    ap.add_argument("--image", action="append", default=[])
    ap.add_argument("--pure", action="store_true")
    ap.add_argument("--limit", type=int, default=0, help="compare only the first N images")
    a = ap.parse_args()
    if a.mode == "record":
        record(Path(a.dir), a.per_geometry, a.image)
        return 0
    return compare(Path(a.dir), a.pure, a.limit)


if __name__ == "__main__":
    sys.exit(main())
