"""docs/check-problems.md: the problem registry, one row per code with its
repair column (``python -m fstool.ops.problemdoc > docs/check-problems.md``)."""
from .problems import ROWS


def markdown() -> str:
    lines = ["# fstool check: the problem table", "",
             "Every finding `fstool check` reports carries one of these codes "
             "(generated from the problem registry, `fstool/ops/problems.py`).  `--json` "
             "prints one object per finding with the code, severity, message and where it "
             "is: `structure`, `agno`, `block` (AG block), `ino`, `fork`, `offset` (file "
             "block in the fork), `field`, `index` (record or entry), and "
             "`expected`/`found` values.  The repair column says what `fstool repair` does "
             "about it (the same row's repair action; `fstool/ops/repair/actions.py` "
             "refines it by the structure a finding names).", "",
             "| code | severity | structure | meaning | repair |",
             "| --- | --- | --- | --- | --- |"]
    for p in ROWS:
        lines.append(f"| `{p.code}` | {p.severity} | {p.structure or 'the btree named'} | "
                     f"{p.check} | {p.repair} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
