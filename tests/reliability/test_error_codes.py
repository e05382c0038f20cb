"""Error codes (docs/errors.md) against the source: every documented code is produced somewhere, and
every code the source produces — at a raise site, in a spec diagnostic, as a class default — is
documented. Read statically (ast), so a code on a path no test reaches is still checked."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("planmap", "solvers", "runtime")
# calls whose argument at this position is an error code: diagnostics, pydantic custom errors, spec failures
CODE_ARGUMENT = {"Diagnostic": 3, "_diag": 1, "_fail": 0, "PydanticCustomError": 0, "InputLimitError": 1}
_ERROR_TEXT = re.compile(r"error\[([a-z-]+)\]")


def _documented() -> set[str]:
    text = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    return set(re.findall(r"^\| `([a-z-]+)` \|", text, re.M))


def _trees() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(encoding="utf-8"), str(p))) for pkg in PACKAGES
            for p in sorted((ROOT / pkg).rglob("*.py"))]


def _call_name(call: ast.Call) -> str:
    f = call.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr if not isinstance(f.value, ast.Name) or f.value.id == "self" else f"{f.value.id}.{f.attr}"
    return ""


def _error_classes(trees) -> dict[str, str]:
    """``{class name: its code}`` for PlanmapError and every subclass (a class without ``code`` inherits)."""
    bases: dict[str, list[str]] = {}
    own: dict[str, str] = {}
    for _, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [b.id for b in node.bases if isinstance(b, ast.Name)]
                for stmt in node.body:
                    if (isinstance(stmt, ast.Assign) and [getattr(t, "id", "") for t in stmt.targets] == ["code"]
                            and isinstance(stmt.value, ast.Constant)):
                        own[node.name] = stmt.value.value
    classes = {"PlanmapError": own["PlanmapError"]}
    changed = True
    while changed:
        changed = False
        for name, bs in bases.items():
            parent = next((b for b in bs if b in classes), None)
            if name not in classes and parent is not None:
                classes[name] = own.get(name, classes[parent])
                changed = True
    return classes


def _produced(trees) -> dict[str, list[str]]:
    """``{code: [where, …]}`` of every code the source produces."""
    classes = _error_classes(trees)
    out: dict[str, list[str]] = {}

    def add(code: str, where: str) -> None:
        out.setdefault(code, []).append(where)

    for path, tree in trees:
        rel = path.relative_to(ROOT)
        for node in ast.walk(tree):
            where = f"{rel}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for code in _ERROR_TEXT.findall(node.value):
                    add(code, where)
            elif isinstance(node, ast.Call):
                name = _call_name(node)
                pos = CODE_ARGUMENT.get(name)
                if pos is not None and len(node.args) > pos and isinstance(node.args[pos], ast.Constant):
                    add(node.args[pos].value, where)
                for kw in node.keywords:
                    if kw.arg == "code" and isinstance(kw.value, ast.Constant):
                        add(kw.value.value, where)
                if name in classes and not any(kw.arg == "code" for kw in node.keywords):
                    add(classes[name], where)  # the class's own code
    for name, code in classes.items():
        add(code, f"class {name}")
    return out


@pytest.fixture(scope="module")
def produced():
    return _produced(_trees())


def test_every_code_the_source_produces_is_documented(produced):
    missing = {code: where[:3] for code, where in produced.items() if code not in _documented()}
    assert not missing, f"codes without a row in docs/errors.md: {missing}"


def test_every_documented_code_is_produced_somewhere(produced):
    unused = sorted(_documented() - set(produced))
    assert not unused, f"documented codes no source produces: {unused}"


def test_an_explicit_code_overrides_the_class_default():
    from planmap.errors import InputError, render_error

    assert render_error(InputError("a.json: not UTF-8", code="encoding")) == "a.json: error[encoding]: not UTF-8"
    assert InputError("a.json: broken").code == "input"
