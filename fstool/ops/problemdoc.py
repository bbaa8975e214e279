"""docs/check-problems.md: the problem table with its repair column
(``python -m fstool.ops.problemdoc > docs/check-problems.md``)."""
from .problems import PROBLEMS
from .repair.actions import column


def markdown() -> str:
    lines = ["# fstool check: the problem table", "",
             "Every finding `fstool check` reports carries one of these codes "
             "(generated from `fstool/ops/problems.py`).  `--json` prints one object per "
             "finding with the code, severity, message and where it is: `structure`, "
             "`agno`, `block` (AG block), `ino`, `fork`, `offset` (file block in the fork), "
             "`field`, `index` (record or entry), and `expected`/`found` values.  The "
             "repair column says what `fstool repair` does about it "
             "(`fstool/ops/repair/actions.py`).", "",
             "| code | severity | structure | meaning | repair |",
             "| --- | --- | --- | --- | --- |"]
    for code, (sev, structure, text) in PROBLEMS.items():
        lines.append(f"| `{code}` | {sev} | {structure or 'the btree named'} | {text} | "
                     f"{column(code)} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
