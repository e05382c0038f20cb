"""The OpGraph contract: node i is the i-th op of @main, values and edges are the SSA use-def graph."""

from __future__ import annotations

import re

import numpy as np
import pytest

from planmap.frontend import load_model

EXAMPLES = ["mlp", "mlp_train", "gpt", "gpt_train", "cnn", "cnn_train"]


def _main_ops(text: str) -> list[str]:
    """Op names of @main's top-level body, read from the text with a regex (independent of the walker)."""
    body = text[text.index("func.func public @main"):]
    body = body[: body.index("\n  }")]
    kinds = []
    depth = 0
    for line in body.splitlines()[1:]:
        s = line.strip()
        if depth == 0:
            m = re.match(r'^(?:%\S+ = )?"?([a-z_]+\.[a-z_]+|call|return)\b', s)
            if m:
                kind = m.group(1)
                kinds.append({"call": "func.call", "return": "func.return"}.get(kind, kind))
        depth += s.count("{") - s.count("}")  # regions open and close on their own lines
    return kinds


@pytest.mark.parametrize("name", EXAMPLES)
def test_node_i_is_the_ith_op_of_main(models_dir, name):
    path = models_dir / f"{name}.mlir"
    g = load_model(path)
    kinds = [k for k in _main_ops(path.read_text()) if k != "func.return"]
    assert list(g.kind) == kinds


@pytest.mark.parametrize("name", EXAMPLES)
def test_values_edges_and_arguments_are_consistent(models_dir, name):
    g = load_model(models_dir / f"{name}.mlir")
    n_args = len(g.args)
    assert list(g.value_node[:n_args]) == [-1] * n_args and list(g.value_index[:n_args]) == list(range(n_args))
    assert [a.value for a in g.args] == list(range(n_args))
    # each node's results are consecutive values numbered 0..k-1, with their types' bytes
    for v in range(n_args, g.num_values):
        node, idx = int(g.value_node[v]), int(g.value_index[v])
        t = g.outputs[node][idx]
        assert g.value_bytes[v] == int(np.prod(t.shape, dtype=np.int64)) * (1 if t.dtype == "i1" else
                                                                             int(re.sub(r"\D", "", t.dtype)) // 8)
    assert np.all(g.out_bytes == np.bincount(g.value_node[n_args:], weights=g.value_bytes[n_args:],
                                             minlength=g.num_nodes))
    # edges: distinct (value, consumer) pairs, producers before consumers (topological order)
    pairs = set(zip(g.edge_value.tolist(), g.edge_dst.tolist(), strict=True))
    assert len(pairs) == g.num_edges
    assert np.all(g.edge_src < g.edge_dst)
    # every result of @main is a value; every parameter is used somewhere
    assert len(g.results) >= 1 and np.all(g.results < g.num_values)
    used = set(g.edge_value.tolist()) | set(g.results.tolist())
    assert all(a.value in used for a in g.args)


@pytest.mark.parametrize("name, data", [("mlp", ["x"]), ("mlp_train", ["args[0]", "args[1]"]),
                                        ("gpt_train", ["tokens", "targets"]), ("cnn", ["images"])])
def test_argument_roles_default_from_jax_names(models_dir, name, data):
    g = load_model(models_dir / f"{name}.mlir")
    assert [a.name for a in g.args if a.role == "data"] == data
    params = [a for a in g.args if a.role == "param"]
    assert params and all(a.name.startswith("params[") for a in params)
    assert g.summary()["param_bytes"] == sum(int(g.value_bytes[a.value]) for a in params)


def test_argument_roles_from_the_spec(models_dir):
    from planmap.spec.models import ArgumentRoles

    g = load_model(models_dir / "mlp.mlir", arguments=ArgumentRoles(data=["x", "params['layer0']*"]))
    roles = {a.name: a.role for a in g.args}
    assert roles["x"] == roles["params['layer0']['w']"] == roles["params['layer0']['b']"] == "data"
    assert roles["params['layer1']['w']"] == "param"  # only data given: the rest are parameters


def test_names_layers_and_backward_flags(models_dir):
    g = load_model(models_dir / "gpt_train.mlir")
    assert g.meta["layer_names"] == ["layer0", "layer1", "layer2", "layer3"]
    for i, name in enumerate(g.op_name):
        assert bool(g.backward[i]) == ("transpose(" in name)
        m = re.search(r"(layer\d)\)*/", name)
        assert g.layer[i] == (int(m.group(1)[-1]) if m else -1)
    fwd = load_model(models_dir / "gpt.mlir")
    assert not fwd.backward.any()
    assert fwd.op_name[int(np.argmax(fwd.flops))].startswith("jit(_gpt_forward)/")
