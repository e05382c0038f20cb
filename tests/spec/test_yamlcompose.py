"""The lean composer (planmap/spec/yamlcompose.py) composes exactly what ruamel's composer does from the
same libyaml events: compared node by node over every spec, cluster and plan in the repository and
over mutated ones (the fuzzer's mutations), including anchors, aliases, merge keys and explicit tags."""

from __future__ import annotations

import random
import warnings
from pathlib import Path

import pytest
from ruamel.yaml.error import YAMLError
from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode

from planmap.spec.yamlcompose import compose_events
from planmap.spec.yamlpos import safe_yaml
from tests.reliability.fuzzing import HOSTILE, _mutate

pytest.importorskip("_ruamel_yaml")

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted([*ROOT.glob("specs/**/*.yaml"), *ROOT.glob("plans/*.plan.yaml")])
EXTRA = ["base: &b {x: 1, y: [1, 2.5, .inf, ~, true, 0x1f, 2026-12-01]}\nuse: {<<: *b, x: 2}\nseq: [*b, *b]\n",
         "a: !!str 12\nb: !!python/object:os.system x\nc: !custom {k: v}\nd: '' \ne: \"1\"\nf:\n",
         "", "# only a comment\n",
         "a: &x 1\nb: &x 2\nc: *x\n", "- [[[[1]]]]\n- {a: {b: {c: []}}}\n", "? [1, 2]\n: v\n"]


def _shape(node, seen=None, ends=True):
    """A comparable picture of a node graph: class, tag, value, marks, style, anchor; aliases by identity.
    ``ends``: with end marks and scalar styles (libyaml's and the pure scanner's differ there: '' or None
    for a plain scalar; planmap reads neither)."""
    seen = {} if seen is None else seen
    if id(node) in seen:
        return ("alias", seen[id(node)])
    seen[id(node)] = len(seen)
    marks = (node.start_mark.line, node.start_mark.column) + (
        (node.end_mark.line, node.end_mark.column) if ends else ())
    head = (type(node).__name__, str(node.tag), node.anchor, marks)
    if isinstance(node, ScalarNode):
        return (*head, node.value, node.style if ends else None)
    if isinstance(node, SequenceNode):
        return (*head, node.flow_style, [_shape(v, seen, ends) for v in node.value])
    assert isinstance(node, MappingNode)
    return (*head, node.flow_style, [(_shape(k, seen, ends), _shape(v, seen, ends)) for k, v in node.value])


def _both(text: str):
    """[ruamel's composer, the lean composer] on libyaml's events of ``text``: shapes or error class names."""
    out = []
    for lean in (False, True):
        yaml = safe_yaml(text)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                node = compose_events(yaml._parser, yaml.resolver) if lean else yaml.compose(text)
            out.append(None if node is None else _shape(node))
        except (YAMLError, ValueError, RecursionError) as e:
            out.append(type(e).__name__)
    return out


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_lean_composer_equals_ruamel_on_repository_documents(path):
    ours, theirs = _both(path.read_text(encoding="utf-8"))
    assert ours == theirs


@pytest.mark.parametrize("text", EXTRA)
def test_lean_composer_equals_ruamel_on_yaml_features(text):
    ours, theirs = _both(text)
    assert ours == theirs


def test_lean_composer_equals_ruamel_on_mutated_documents():
    rng = random.Random(18)
    seeds = [p.read_text(encoding="utf-8") for p in FILES[:12]]
    for _ in range(300):
        text = _mutate(rng.choice(seeds), rng, HOSTILE)
        if "%YAML" in text:
            continue
        theirs, ours = _both(text)
        if ours == "RecursionError":  # past MAX_NESTING: ruamel's composer decides (see the test below)
            continue
        assert ours == theirs, text


@pytest.mark.parametrize("depth", [99, 100, 101, 250, 600])
def test_deep_nesting_is_decided_by_ruamel_composer(depth):
    """Past MAX_NESTING levels the lean composer defers to ruamel's pure composer (which ends in
    RecursionError somewhere past 300 levels): the outcome of compose_yaml is the pure parser's."""
    from planmap.spec.yamlpos import compose_yaml

    text = "a: " + "[" * depth + "]" * depth + "\n"
    outcomes = []
    for compose in (compose_yaml, lambda t: (None, safe_yaml(t, pure=True).compose(t))):
        try:
            outcomes.append(_shape(compose(text)[1], ends=False))
        except RecursionError:
            outcomes.append("RecursionError")
    assert outcomes[0] == outcomes[1]
