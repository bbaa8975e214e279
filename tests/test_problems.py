"""The problem registry (fstool/ops/problems.py): one row per code holding
its check text and its repair decision, the views derived from it, the
generated docs/check-problems.md, and the codes check and repair name."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from fstool.format import problem_codes as K
from fstool.ops.problemdoc import markdown
from fstool.ops.problems import (ACTIONS, ERROR, NONE, PROBLEMS, REGISTRY, ROWS, STRUCTURES,
                                 WARNING, Problem)
from fstool.ops.repair.actions import REPAIRS, column

REPO = Path(__file__).resolve().parent.parent
_CODE = re.compile(r"^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*_?$")


def row_faults(rows) -> list:
    """What is wrong with a registry: codes twice, a severity, structure or
    action that is not one, a missing repair decision, a text that says the
    opposite of its action."""
    faults, seen = [], set()
    for p in rows:
        if p.code in seen:
            faults.append(f"{p.code}: twice")
        seen.add(p.code)
        if p.severity not in (ERROR, WARNING):
            faults.append(f"{p.code}: severity {p.severity!r}")
        if p.structure is not None and p.structure not in STRUCTURES:
            faults.append(f"{p.code}: structure {p.structure!r}")
        if not p.check:
            faults.append(f"{p.code}: no check text")
        if p.action not in ACTIONS:
            faults.append(f"{p.code}: no repair decision (action {p.action!r})")
        elif not p.repair:
            faults.append(f"{p.code}: no repair text")
        elif (p.action == NONE) != p.repair.startswith(("reported, not repaired", "refused")):
            faults.append(f"{p.code}: action {p.action} but text {p.repair[:40]!r}")
    return faults


def unknown_codes(paths, codes) -> list:
    """Problem-code literals in ``paths`` that name no code of ``codes`` (a
    literal ending in ``_`` is a prefix, as in ``code.startswith("BMBT_")``)."""
    out = []
    for path in paths:
        tree = ast.parse(path.read_text())
        exported = {id(e) for n in ast.walk(tree) if isinstance(n, ast.Assign)
                    and any(getattr(t, "id", None) == "__all__" for t in n.targets)
                    for e in ast.walk(n.value)}
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in exported \
                    and "_" in n.value and _CODE.match(n.value):
                v = n.value
                if v not in codes and not (v.endswith("_") and any(c.startswith(v) for c in codes)):
                    out.append(f"{path.relative_to(REPO)}:{n.lineno}: {v}")
    return out


def _sources():
    ops = REPO / "fstool" / "ops"
    return sorted((ops / "check").glob("*.py")) + sorted((ops / "repair").glob("*.py"))


def test_every_row_holds_check_and_repair():
    assert len(REGISTRY) == len(ROWS) > 80
    assert row_faults(ROWS) == []


def test_row_faults_are_caught():
    """The registry test fails on a row without a repair decision, with an
    unknown action, or a code twice (so its pass means something)."""
    good = ROWS[0]
    assert row_faults([good._replace(action=None)])
    assert row_faults([good._replace(action="mend")])
    assert row_faults([good._replace(repair="")])
    assert row_faults([good._replace(action=NONE)])
    assert row_faults([good, good])
    assert row_faults([Problem("X_Y", "fatal", "nowhere", "", NONE, "refused")]) == [
        "X_Y: severity 'fatal'", "X_Y: structure 'nowhere'", "X_Y: no check text"]


def test_views_follow_the_registry():
    assert list(PROBLEMS) == list(REPAIRS) == [p.code for p in ROWS]
    for p in ROWS:
        assert PROBLEMS[p.code] == (p.severity, p.structure, p.check)
        assert REPAIRS[p.code] == (p.action, p.repair) and column(p.code) == p.repair


def test_check_and_repair_name_known_codes():
    """Every problem code check reports or repair decides on is a row."""
    paths = _sources()
    assert len(paths) > 20
    assert unknown_codes(paths, set(REGISTRY)) == []
    # and a code that is not a row is caught
    assert unknown_codes(paths, set(REGISTRY) - {"SPACE_OVERLAP"})


def test_every_code_has_its_row():
    """The codes of fstool.format.problem_codes and the registry's rows are
    the same, one row per code, in one order."""
    assert list(REGISTRY) == list(K.ALL) and len(K.ALL) == len(ROWS)
    assert all(getattr(K, code) == code for code in K.ALL)


def code_literals(paths) -> list:
    """String literals in ``paths`` that spell a problem code."""
    out = []
    for path in paths:
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in REGISTRY:
                out.append(f"{path.relative_to(REPO)}:{n.lineno}: {n.value}")
    return out


def test_layers_below_ops_name_codes_through_problem_codes():
    """A verifier below the check (fs, io, log, ns, ...) names a problem
    code by its constant in fstool.format.problem_codes, never as a string
    of its own (which nothing would hold to the registry)."""
    pkg = REPO / "fstool"
    paths = [p for layer in ("recovery", "ns", "alloc", "trans", "fs", "log", "io", "format")
             for p in sorted((pkg / layer).rglob("*.py")) if p.name != "problem_codes.py"]
    assert len(paths) > 50 and any(p.parent.name == "dirform" for p in paths)
    assert code_literals(paths) == []
    # and a literal code is caught
    assert code_literals([pkg / "format" / "problem_codes.py"])


def test_the_problem_doc_is_current():
    doc = (REPO / "docs" / "check-problems.md").read_text()
    assert doc == markdown()
    assert "| repair |" in doc and doc.count("\n| `") == len(ROWS)
