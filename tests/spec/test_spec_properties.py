"""Property tests: any mutation of a valid spec gives a valid spec or a clean SpecError — never a crash."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from planmap.spec import LoadedSpec, SpecError, load_document, load_spec

SPECS = sorted((Path(__file__).resolve().parents[2] / "specs").glob("*.yaml"))


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    d = tmp_path_factory.mktemp("specs")
    src = SPECS[0].parent
    shutil.copytree(src / "clusters", d / "clusters")
    shutil.copytree(src / "models", d / "models")
    return d


def _check(path: Path) -> None:
    try:
        doc = load_spec(path)
    except SpecError as e:
        assert e.diagnostics, "a SpecError must carry at least one diagnostic"
        for d in e.diagnostics:
            assert d.line >= 1 and d.col >= 1 and d.code and str(d).startswith(f"{d.file}:{d.line}:{d.col}: ")
    else:
        assert isinstance(doc, LoadedSpec)


text_edits = st.one_of(
    st.tuples(st.just("delete"), st.integers(0, 4000), st.integers(1, 40)),
    st.tuples(st.just("insert"), st.integers(0, 4000), st.text(st.sampled_from(" :-[]{}&*!|>'\"\n\t#%@`,?x1"),
                                                               min_size=1, max_size=8)),
    st.tuples(st.just("truncate"), st.integers(0, 4000), st.just(0)),
    st.tuples(st.just("dupline"), st.integers(0, 200), st.just(0)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=st.sampled_from(SPECS), edits=st.lists(text_edits, min_size=1, max_size=3))
def test_text_mutations(sandbox, spec, edits):
    text = spec.read_text()
    for op, a, b in edits:
        a = a % (len(text) + 1)
        if op == "delete":
            text = text[:a] + text[a + b:]
        elif op == "insert":
            text = text[:a] + b + text[a:]
        elif op == "truncate":
            text = text[:a]
        else:
            lines = text.splitlines(keepends=True)
            if lines:
                i = a % len(lines)
                lines.insert(i, lines[i])
            text = "".join(lines)
    path = sandbox / "mutated.yaml"
    path.write_text(text)
    _check(path)


scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True),
                    st.text(max_size=12), st.sampled_from(["80GiB", "1TB/s", "auto", "-1", "1e400", "gpu", ""]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.sampled_from(["name", "kind", "count", "spec", "x", "devices", "source"]), inner, max_size=3), max_leaves=6)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=st.sampled_from(SPECS), pick=st.integers(0, 10**6), value=values, delete=st.booleans())
def test_tree_mutations(sandbox, spec, pick, value, delete):
    yaml = YAML(typ="safe", pure=True)
    data = yaml.load(spec.read_text())
    paths = [p for p in _paths(data) if p]
    target = paths[pick % len(paths)]
    parent = data
    for k in target[:-1]:
        parent = parent[k]
    if delete:
        del parent[target[-1]]
    else:
        parent[target[-1]] = value
    buf = io.StringIO()
    yaml.dump(data, buf)
    path = sandbox / "mutated.yaml"
    path.write_text(buf.getvalue())
    _check(path)


def test_every_example_spec_validates():
    for path in SPECS + sorted((SPECS[0].parent / "clusters").glob("*.yaml")):
        load_document(path)
