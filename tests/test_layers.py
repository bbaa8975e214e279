"""The import contract: each layer imports only the layers below it, and no
module reaches itself through its imports.

Every import statement is read from the source (``ast``), those inside
function bodies included, so an import hidden in a function cannot break a
rule unseen.  docs/architecture.md draws the same stack.
"""
from __future__ import annotations

import ast
import pathlib
from collections import defaultdict

import pytest

PKG = pathlib.Path(__file__).resolve().parent.parent / "fstool"

#: top to bottom; the layers of one row are siblings: neither imports the other
STACK = [
    ("entry",),             # fstool/__main__.py: python -m fstool
    ("cli",),
    ("fsspec",),
    ("api",),               # fstool/__init__.py: open_image and the public names
    ("mount", "ops"),
    ("recovery",),
    ("ns",),
    ("alloc",),
    ("trans",),
    ("fs",),
    ("log",),
    ("io",),
    ("format",),
    ("base",),              # errors, _backend, _version: importable from anywhere
]
RANK = {name: i for i, row in enumerate(STACK) for name in row}
BASE = {"errors", "_backend", "_version"}


def _modules() -> dict:
    out = {}
    for p in PKG.rglob("*.py"):
        rel = p.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def layer(mod: str) -> str:
    parts = mod.split(".")
    if len(parts) == 1:
        return "api"
    if parts[1] in BASE:
        return "base"
    if parts[1] == "__main__":
        return "entry"
    return parts[1]


def _resolve(name: str) -> str | None:
    """The fstool module ``name`` is, or is an attribute of."""
    while name:
        if name in MODULES:
            return name
        if "." not in name:
            return None
        name = name.rsplit(".", 1)[0]
    return None


def imports(mod: str, source: str | None = None) -> list:
    """(imported module, line, lazy) for every fstool import in ``mod``
    (read from its file, or from ``source``)."""
    path = MODULES.get(mod, PKG / "_probe.py")
    tree = ast.parse(path.read_text() if source is None else source, str(path))
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = []

    def visit(node, lazy: bool) -> None:
        for ch in ast.iter_child_nodes(node):
            inner = lazy or isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(ch, ast.Import):
                names = [a.name for a in ch.names]
            elif isinstance(ch, ast.ImportFrom):
                if ch.level:
                    base = pkg.split(".")[:len(pkg.split(".")) - ch.level + 1]
                    origin = ".".join(base + ([ch.module] if ch.module else []))
                else:
                    origin = ch.module or ""
                # "from pkg import sub" imports the submodule when there is one
                names = [f"{origin}.{a.name}" for a in ch.names
                         if f"{origin}.{a.name}" in MODULES] or [origin]
            else:
                visit(ch, inner)
                continue
            for n in names:
                target = _resolve(n) if n.startswith("fstool") else None
                if target and target != mod:
                    out.append((target, ch.lineno, lazy))
    visit(tree, False)
    return out


GRAPH = {mod: imports(mod) for mod in MODULES}


def test_every_layer_is_known():
    unknown = sorted({layer(m) for m in MODULES} - set(RANK))
    assert not unknown, f"packages missing from STACK: {unknown}"


def _violations(graph) -> list:
    bad = []
    for mod, targets in sorted(graph.items()):
        src = layer(mod)
        for target, line, lazy in targets:
            dst = layer(target)
            if dst == src or dst == "base":
                continue
            if RANK[dst] <= RANK[src]:
                how = "lazily " if lazy else ""
                bad.append(f"{mod}:{line} {how}imports {target} ({src} may not import {dst})")
    return bad


def test_imports_point_down():
    bad = _violations(GRAPH)
    assert not bad, "\n".join(bad)


def _cycles(graph) -> list:
    """Strongly connected groups of modules (more than one)."""
    edges = defaultdict(set)
    for mod, targets in graph.items():
        for target, _line, _lazy in targets:
            edges[mod].add(target)
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]

    def connect(v):
        work = [(v, iter(sorted(edges[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        group.append(w)
                        if w == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def _runtime_graph(graph) -> dict:
    """The edges an import really follows: importing ``a.b.c`` runs the
    package ``a.b``'s __init__.py first, unless the importer sits inside
    that package (then it is already being imported).  A package importing
    its own submodules is the package's face, not a cycle."""
    out = {}
    for m, ts in graph.items():
        edges = []
        for target, line, lazy in ts:
            parts = target.split(".")
            for i in range(2, len(parts) + 1):
                t = ".".join(parts[:i])
                if t in MODULES and not m.startswith(t + ".") and t != m:
                    edges.append((t, line, lazy))
        out[m] = edges
    return out


def test_no_import_cycles():
    cycles = _cycles(_runtime_graph(GRAPH))
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize("case", ["upward", "lazy-upward", "cycle"])
def test_the_contract_catches(case):
    """The checks fail on a graph that breaks them (so a pass means something)."""
    if case == "upward":
        graph = {"fstool.io.device": [("fstool.ns.namespace", 1, False)]}
        assert _violations(graph)
    elif case == "lazy-upward":
        graph = {"fstool.log.head": [("fstool.recovery.finish", 9, True)]}
        assert "lazily" in _violations(graph)[0]
    else:
        graph = {"fstool.ns.a": [("fstool.ns.b", 1, True)],
                 "fstool.ns.b": [("fstool.ns.a", 1, False)]}
        assert _cycles(graph) == [["fstool.ns.a", "fstool.ns.b"]]


def test_a_package_init_is_on_the_path():
    """Importing a submodule runs its package's __init__.py: a module that
    a package's __init__ reaches cannot import another submodule of it."""
    graph = {"fstool.ops.problems": [("fstool.ops.repair.actions", 10, True)],
             "fstool.ops.repair": [("fstool.ops.repair.actions", 3, False),
                                   ("fstool.ops.check", 4, False)],
             "fstool.ops.check": [("fstool.ops.problems", 5, False)],
             "fstool.ops.repair.actions": []}
    assert _cycles(_runtime_graph(graph)) == [
        ["fstool.ops.check", "fstool.ops.problems", "fstool.ops.repair"]]


def test_lazy_imports_are_seen():
    """A function-level import is in the graph, marked lazy."""
    src = "from ..fs import btree\n\ndef f():\n    from ..log import head  # lazy: probe\n"
    assert imports("fstool.ops.probe", src) == [
        ("fstool.fs.btree", 1, False), ("fstool.log.head", 4, True)]


def _function_imports(tree):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    yield sub


def _unexplained(path, root=PKG.parent) -> list:
    text = path.read_text()
    lines = text.splitlines()
    return [f"{path.relative_to(root)}:{n.lineno}: {lines[n.lineno - 1].strip()}"
            for n in _function_imports(ast.parse(text))
            if "# lazy: " not in lines[n.lineno - 1]]


def test_function_level_imports_say_why():
    """Imports sit at the top of their module; one inside a function is
    there for a reason (an import cycle it breaks, start-up time, an
    optional dependency), given on its line as ``# lazy: <reason>``."""
    bad = [row for p in sorted(MODULES.values()) for row in _unexplained(p)]
    assert not bad, "function-level imports without a reason:\n" + "\n".join(bad)


def test_an_unexplained_lazy_import_is_caught(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    import os\n\ndef g():\n    import io  # lazy: probe\n")
    assert _unexplained(probe, tmp_path) == ["probe.py:2: import os"]
