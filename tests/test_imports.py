"""The installed package's import graph keeps the layering the design asks for.

Every ``import`` / ``from ... import`` of every module of the installed ``planmap`` package is read
statically (function-level and lazy imports included, relative imports resolved), with the files
of ``solvers/`` and ``runtime/`` under the names they import as (``planmap.solvers.*``,
``planmap.runtime.*``). The graph must have no cycle; the core (``planmap.*`` outside the solvers,
the runtime and the CLI) must not import the solvers or the runtime; solvers and runtime must not
import each other. Imports done by name through :mod:`importlib` (the registry's) are not edges.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

SOLVERS, RUNTIME, CLI, WORKLOADS = "planmap.solvers", "planmap.runtime", "planmap.cli", "planmap.workloads"

# Core modules that reach the solvers today, each with why; everything else in the core must not.
CORE_ALLOWED = {
    ("planmap.solve", SOLVERS): "the solve driver looks solvers up in the registry by name, lazily",
}
# Solver modules that run other solvers by name through the registry (so a missing extra only skips
# one); every other solver module imports solvers it needs directly, or none.
REGISTRY_USERS = {
    "planmap.solvers.latency.baselines": "the latency IP's warm start is the best installed baseline",
    "planmap.solvers.heuristics.local_search": "local search starts from the best installed start solver",
    "planmap.solvers.ip": "the ip dispatcher imports its IP under the registry's missing-module rule",
}


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def module_files() -> dict[str, Path]:
    """Module name -> source file for every module of the installed planmap package."""
    out: dict[str, Path] = {}
    for package in ("planmap", SOLVERS, RUNTIME):
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations, f"{package} is not installed"
        base = Path(next(iter(spec.submodule_search_locations)))
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base).with_suffix("").parts
            if rel[-1] == "__init__":
                rel = rel[:-1]
            if rel and rel[0] in ("solvers", "runtime") and package == "planmap":
                continue  # an in-tree copy would shadow the mapped packages; never the case when installed
            name = ".".join((package, *rel))
            if all((base.joinpath(*rel[:i]) / "__init__.py").exists() for i in range(len(rel))):
                out[name] = path
    return out


def imports_of(name: str, path: Path, modules: set[str]) -> set[str]:
    """The planmap modules ``name`` (file ``path``) imports anywhere in its body."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            # ``from pkg import mod`` imports the module pkg.mod; ``from mod import name`` the module
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in modules:  # ``import a.b.c`` of a non-module c: the deepest module
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    names = set(files)
    return {name: imports_of(name, path, names) for name, path in files.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (or a self-import), each as a
    cycle through its members (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    comps: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1 or v in graph.get(v, ()):
                        comps.append(_cycle_through(graph, set(comp)))
    return comps


def _cycle_through(graph: dict[str, set[str]], comp: set[str]) -> list[str]:
    """One cycle inside a strongly connected component, from its smallest name back to it."""
    start = min(comp)
    prev = {start: None}
    frontier = [start]
    while frontier:  # breadth-first inside the component until an edge returns to the start
        nxt = []
        for v in frontier:
            for w in sorted(graph.get(v, ())):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return [*reversed(path), start]
                if w in comp and w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError("a strongly connected component without a cycle")


def layering_violations(graph: dict[str, set[str]]) -> list[str]:
    """Edges the dependency direction forbids, except :data:`CORE_ALLOWED`."""
    bad = []
    for src, targets in sorted(graph.items()):
        for dst in sorted(targets):
            core = _under(src, "planmap") and not any(_under(src, p) for p in (SOLVERS, RUNTIME, CLI, WORKLOADS))
            if core and _under(dst, WORKLOADS):
                bad.append(f"core {src} imports the benchmark workloads {dst}")
            for layer in (SOLVERS, RUNTIME):
                if core and _under(dst, layer) and (src, layer) not in CORE_ALLOWED:
                    bad.append(f"core {src} imports {dst}")
            if _under(src, SOLVERS) and _under(dst, RUNTIME) or _under(src, RUNTIME) and _under(dst, SOLVERS):
                bad.append(f"{src} imports {dst}")
            if _under(src, SOLVERS) and dst == SOLVERS and src not in REGISTRY_USERS:
                bad.append(f"{src} imports the solver registry")
            top_level = src.count(".") == 2 and _under(src, SOLVERS)  # the shared layer and the ip dispatcher
            if top_level and _under(dst, SOLVERS) and dst.count(".") > 2:
                bad.append(f"shared {src} imports {dst} of a subpackage")
    return bad


def test_the_graph_covers_the_mapped_packages():
    graph = import_graph()
    assert {"planmap.solve", SOLVERS, RUNTIME, CLI} <= set(graph)
    assert SOLVERS in graph["planmap.solve"]  # a lazy import inside a function is an edge
    assert all(not _under(m, "solvers") and not _under(m, "runtime") for m in graph)


def test_no_import_cycles():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_dependency_direction():
    graph = import_graph()
    bad = layering_violations(graph)
    assert not bad, "imports against the dependency direction:\n" + "\n".join(bad)
    stale = [k for k in CORE_ALLOWED if not any(_under(d, k[1]) for d in graph.get(k[0], ()))]
    stale += [m for m in REGISTRY_USERS if SOLVERS not in graph.get(m, ())]
    assert not stale, f"allow-list entries no longer needed: {stale}"


def test_cycle_finder_on_a_small_graph():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}, "f": {"d"}}
    assert sorted(find_cycles(graph)) == [["a", "b", "c", "a"], ["e", "e"]]
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_layering_check_flags_each_direction():
    graph = {"planmap.plan.build": {"planmap.solvers.ip"}, "planmap.solve": {SOLVERS},
             "planmap.solvers.greedy": {"planmap.runtime.api"}, "planmap.runtime.api": {"planmap.solvers"},
             "planmap.cli.plan_cmds": {SOLVERS, RUNTIME}, "planmap.solvers.repair": {"planmap.solvers.heuristics.even"},
             "planmap.solvers.latency.data": {SOLVERS, "planmap.solvers.mip"},
             "planmap.solvers.heuristics.local_search": {SOLVERS, "planmap.solvers.repair"},
             "planmap.assemble": {"planmap.workloads.nets"}, "planmap.workloads.nets": {"planmap.graph"}}
    assert layering_violations(graph) == ["core planmap.assemble imports the benchmark workloads "
                                          "planmap.workloads.nets",
                                          "core planmap.plan.build imports planmap.solvers.ip",
                                          "planmap.runtime.api imports planmap.solvers",
                                          "planmap.solvers.greedy imports planmap.runtime.api",
                                          "planmap.solvers.latency.data imports the solver registry",
                                          "shared planmap.solvers.repair imports planmap.solvers.heuristics.even "
                                          "of a subpackage"]


def test_relative_and_lazy_imports_resolve(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("from . import x\nfrom .y import f\ndef g():\n    from ..z import h\n    import q.r.s\n")
    mods = {"p.s.x", "p.s.y", "p.z", "q.r", "p.s.m"}
    assert imports_of("p.s.m", src, mods) == {"p.s.x", "p.s.y", "p.z", "q.r"}
