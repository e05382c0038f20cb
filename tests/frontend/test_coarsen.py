"""Coarsening keeps a DAG in topological order, partitions the ops, and finds the repeated layers."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import planmap.export as E
from planmap.examples import models as M
from planmap.frontend import coarsen, load_model
from planmap.graph import OpGraph, TensorType

LEVELS = ["fuse", "layers", "auto"]


def check_coarse(original: OpGraph, coarse: OpGraph) -> None:
    """Invariants every coarse graph must satisfy (the OpGraph constructor checks topological order)."""
    assert sorted(coarse.members.tolist()) == list(range(original.n_original))
    assert coarse.n_original == original.n_original
    assert coarse.total_flops == pytest.approx(original.total_flops, rel=1e-12)
    assert coarse.state_bytes.sum() == original.state_bytes.sum()
    node_of = coarse.original_to_node
    fine_of = original.original_to_node
    # every dependency between ops is preserved, and goes forward
    s, d = original.node_edges
    for a, b in zip(s.tolist(), d.tolist(), strict=True):
        ca = node_of[original.members_of(a)[0]]
        cb = node_of[original.members_of(b)[0]]
        assert ca <= cb
    cs, cd = coarse.node_edges
    assert np.all(cs < cd)
    # a coarse edge exists only where some op edge crosses between the two groups
    crossing = {(int(node_of[original.members_of(a)[0]]), int(node_of[original.members_of(b)[0]]))
                for a, b in zip(s.tolist(), d.tolist(), strict=True)}
    assert set(zip(cs.tolist(), cd.tolist(), strict=True)) <= crossing
    assert len(fine_of) == original.n_original
    assert len(coarse.args) == len(original.args)


@pytest.mark.parametrize("name", ["mlp", "mlp_train", "gpt", "gpt_train", "cnn", "cnn_train"])
@pytest.mark.parametrize("level", LEVELS)
def test_coarsening_the_examples_keeps_the_invariants(models_dir, name, level):
    g = load_model(models_dir / f"{name}.mlir")
    c = coarsen(g, level)
    check_coarse(g, c)
    assert c.num_nodes < g.num_nodes / 3
    assert c.meta["coarsening"]["ops"] == g.num_nodes


def test_none_is_the_identity(models_dir):
    g = load_model(models_dir / "gpt.mlir")
    assert coarsen(g, "none") is g
    with pytest.raises(ValueError, match="coarsen level requires one of"):
        coarsen(g, "everything")


def test_gpt_layers_and_training_colocation(models_dir):
    g = load_model(models_dir / "gpt_train.mlir")
    c = coarsen(g, "layers")
    report = c.meta["coarsening"]
    assert (report["method"], report["repeated_layers"]) == ("names", 4)
    for layer in range(4):
        nodes = np.flatnonzero(c.layer == layer)
        assert sorted(c.backward[nodes].tolist()) == [False, True]  # one forward, one backward node
        assert len(set(c.colocation[nodes].tolist())) == 1 and c.colocation[nodes[0]] >= 0
        assert all(c.kind[i] == "planmap.layer" for i in nodes)
    classes = [int(c.colocation[np.flatnonzero(c.layer == k)[0]]) for k in range(4)]
    assert len(set(classes)) == 4
    fwd = np.flatnonzero((c.layer >= 0) & ~c.backward)
    bwd = np.flatnonzero((c.layer >= 0) & c.backward)
    assert fwd.max() < bwd.min()  # all forward layers come before all backward layers
    assert c.op_name[fwd[0]] == "jit(_gpt_loss)/jvp(layer0)"
    # the inference graph has no colocation constraints
    assert (coarsen(load_model(models_dir / "gpt.mlir"), "layers").colocation == -1).all()


def test_fused_nodes_keep_one_contraction_and_its_dim_roles(models_dir):
    g = load_model(models_dir / "gpt.mlir")
    c = coarsen(g, "fuse")
    dots = int(sum(k == "stablehlo.dot_general" for k in g.kind))
    with_dims = [i for i in range(c.num_nodes) if c.dims[i] is not None]
    assert len(with_dims) == dots  # each dot_general anchors its own fused node
    for i in with_dims:
        members = c.members_of(i)
        assert sum(g.kind[m] == "stablehlo.dot_general" for m in members) == 1
    # bytes of a fused node: external traffic only (never less than its heaviest member's)
    i = with_dims[0]
    assert c.bytes_accessed[i] <= g.bytes_accessed[c.members_of(i)].sum()


def _gpt(layers: int, *, named: bool = True):
    d, ff, vocab, seq, heads = 64, 128, 128, 16, 4
    params = jax.eval_shape(lambda: M._gpt_init(jax.random.PRNGKey(0), layers=layers, d=d, ff=ff, vocab=vocab,
                                                 seq=seq))
    tokens = jax.ShapeDtypeStruct((2, seq), jnp.int32)
    fwd = functools.partial(M._gpt_forward, heads=heads)
    if not named:  # the same network without jax.named_scope: no layer names in the locations
        def fwd(p, t):  # noqa: F811
            x = p["embed"]["wte"][t] + p["embed"]["wpe"][None, : t.shape[1]]
            for i in range(layers):
                lp = p["blocks"][f"layer{i}"]
                x = x + M._attention(M._layernorm(x, lp["ln1"]), lp["attn"], heads)
                h = jax.nn.gelu(M._layernorm(x, lp["ln2"]) @ lp["mlp"]["w1"] + lp["mlp"]["b1"])
                x = x + h @ lp["mlp"]["w2"] + lp["mlp"]["b2"]
            return M._layernorm(x, p["lnf"]) @ p["embed"]["wte"].T
    return fwd, params, tokens


def test_48_layer_gpt_reduction(tmp_path):
    fwd, params, tokens = _gpt(48)
    g = load_model(E.jax(fwd, params, tokens, path=tmp_path / "gpt48.mlir"))
    fused, layers = coarsen(g, "fuse"), coarsen(g, "layers")
    check_coarse(g, layers)
    assert fused.num_nodes == 6 * 48 + 2  # six matmuls per layer, the embedding lookup, the logits
    assert layers.meta["coarsening"]["repeated_layers"] == 48
    assert layers.num_nodes == 48 + 2  # the layers, embed, head
    assert coarsen(g, "auto").num_nodes == layers.num_nodes


def test_structural_fallback_finds_unnamed_layers(tmp_path):
    fwd, params, tokens = _gpt(6, named=False)
    g = load_model(E.jax(fwd, params, tokens, path=tmp_path / "plain.mlir"))
    assert g.meta["layer_names"] == []
    c = coarsen(g, "auto")
    check_coarse(g, c)
    report = c.meta["coarsening"]
    assert (report["method"], report["repeated_layers"]) == ("structure", 6)
    blocks = np.flatnonzero(c.layer >= 0)
    # equal blocks of work (the first also holds the hoisted constants and the embedding's cheap ops)
    assert c.flops[blocks] == pytest.approx(np.full(6, c.flops[blocks[-1]]), rel=0.01)
    assert len({len(c.members_of(i)) for i in blocks[1:]}) == 1
    assert sorted(c.layer[c.layer >= 0].tolist()) == list(range(6))


def test_without_repeats_auto_stays_fused(fixtures_dir):
    g = load_model(fixtures_dir / "torch_mlp.mlir")
    c = coarsen(g, "auto")
    check_coarse(g, c)
    assert c.meta["coarsening"]["level"] == "fuse"
    assert c.num_nodes == 4  # one node per Linear layer


def test_coarsening_a_coarse_graph_composes_members(models_dir):
    g = load_model(models_dir / "cnn_train.mlir")
    once = coarsen(g, "fuse")
    twice = coarsen(once, "layers")
    check_coarse(g, twice)
    assert twice.num_nodes <= once.num_nodes


# ------------------------------------------------------------------------- random graphs (property)
_CHEAP = ["stablehlo.add", "stablehlo.broadcast_in_dim", "stablehlo.constant", "stablehlo.reshape",
          "stablehlo.reduce"]
_HEAVY = ["stablehlo.dot_general", "stablehlo.convolution", "stablehlo.while"]


@st.composite
def random_graphs(draw) -> OpGraph:
    n = draw(st.integers(1, 40))
    kinds = [draw(st.sampled_from(_CHEAP + _HEAVY)) for _ in range(n)]
    scopes = ["", "jit(f)/embed/op", "jit(f)/head/op", "jit(f)/op"] + [
        f"jit(f)/{d}layer{k}{')' * d.count('(')}/op" for k in range(3) for d in ("", "transpose(jvp(")]
    names = [draw(st.sampled_from(scopes)) for _ in range(n)]
    n_args = draw(st.integers(0, 3))
    value_node = [-1] * n_args + list(range(n))
    t = TensorType((4,), "f32")
    edges = set()
    for dst in range(n):
        for _ in range(draw(st.integers(0, 3))):
            src = draw(st.integers(-n_args, dst - 1)) if dst + n_args > 0 else None
            if src is not None:
                edges.add((src + n_args if src < 0 else n_args + src, dst))
    ev = [e[0] for e in sorted(edges, key=lambda e: (e[1], e[0]))]
    ed = [e[1] for e in sorted(edges, key=lambda e: (e[1], e[0]))]
    from planmap.graph import Arg

    return OpGraph(name="random", kind=kinds, op_name=names,
                   flops=[draw(st.integers(0, 1000)) for _ in range(n)],
                   bytes_accessed=[draw(st.integers(0, 100)) for _ in range(n)], out_bytes=[16] * n,
                   state_bytes=[draw(st.integers(0, 5)) for _ in range(n)], dtype=["f32"] * n,
                   value_node=value_node, value_index=list(range(n_args)) + [0] * n, value_bytes=[16] * (n + n_args),
                   edge_value=ev, edge_dst=ed, args=[Arg(i, f"a{i}", t, "data", i) for i in range(n_args)],
                   results=[n_args + n - 1], outputs=[(t,)] * n, dims=[None] * n,
                   backward=["transpose(" in nm for nm in names])


@settings(max_examples=150, deadline=None)
@given(graph=random_graphs(), level=st.sampled_from(LEVELS))
def test_random_graphs_coarsen_to_valid_dags(graph, level):
    coarse = coarsen(graph, level)
    check_coarse(graph, coarse)


def test_a_layer_that_is_not_convex_is_left_fused_and_reported():
    # layer1 -> layer2 -> layer1: merging layer1's two nodes would create a cycle with layer2
    t = TensorType((4,), "f32")
    names = ["jit(f)/layer1/dot_general", "jit(f)/layer2/dot_general", "jit(f)/layer1/dot_general",
             "jit(f)/layer3/dot_general"]
    g = OpGraph(name="interleaved", kind=["stablehlo.dot_general"] * 4, op_name=names, flops=[1, 2, 3, 4],
                bytes_accessed=[1] * 4, out_bytes=[16] * 4, state_bytes=[0] * 4, dtype=["f32"] * 4,
                value_node=[0, 1, 2, 3], value_index=[0] * 4, value_bytes=[16] * 4, edge_value=[0, 1, 2],
                edge_dst=[1, 2, 3], outputs=[(t,)] * 4, dims=[None] * 4)
    c = coarsen(g, "layers")
    check_coarse(g, c)
    assert c.num_nodes == 4
    assert c.meta["coarsening"]["not_convex"] == ["layer1"]


def test_common_scope_is_the_shared_leading_components():
    from planmap.frontend.namestack import common_scope

    assert common_scope(["jit(f)/layer3/attn/dot", "jit(f)/layer3/mlp/add"]) == ["jit(f)", "layer3"]
    assert common_scope(["jit(f)/embed/gather"]) == ["jit(f)", "embed", "gather"]
    assert common_scope(["a/b", "c/d"]) == []
    assert common_scope([]) == []


@pytest.mark.parametrize("name", ["gpt_train", "cnn"])
def test_levels_computed_together_equal_each_level_alone(models_dir, name):
    """coarsen_levels fuses once for several levels; each graph equals the one coarsen builds alone."""
    from planmap.frontend.coarsening import coarsen_levels

    graph = load_model(models_dir / f"{name}.mlir")
    together = coarsen_levels(graph, ("layers", "none", "fuse"))
    for level in ("fuse", "layers", "none"):
        alone = coarsen(graph, level)
        a, b = together[level], alone
        assert a.kind == b.kind and a.op_name == b.op_name and a.meta == b.meta
        for col in ("flops", "bytes_accessed", "members", "members_indptr", "edge_dst", "edge_value",
                    "colocation", "layer", "backward"):
            assert np.array_equal(getattr(a, col), getattr(b, col)), col
    with pytest.raises(ValueError, match="at most one"):
        coarsen_levels(graph, ("layers", "auto"))
