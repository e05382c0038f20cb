"""Predicted collectives equal the compiled HLO's on an exported transformer block (attention with 4 heads,
a tanh MLP, residuals) on 4 of 8 fake CPU devices, for the Megatron layout (heads split in attention,
column/row-split MLP) and FSDP.

Every op result's layout is pinned in the plan (:func:`planmap.sharding.solution.pinned_layout`), so XLA
partitions the program the plan was costed with. Two differences remain on FSDP, both XLA's and both
checked exactly rather than with a tolerance:

* XLA's CPU backend lowers a reduce-scatter as an all-reduce of the same tensor followed by a local slice
  (its reduce-scatter-forming pass runs on GPU only): a predicted reduce-scatter of ``b`` bytes is a
  compiled all-reduce of ``b`` bytes.
* XLA's common-subexpression pass merges identical reshards: a value gathered into one layout for two
  consumers (a weight in the forward and backward pass, an activation read by two backward matmuls) is
  gathered once; the cost model charges every use. :func:`planmap.sharding.spmd.reshards_per_layout`
  counts each (value, layout) once and equals the compiled gathers."""

from __future__ import annotations

from collections import Counter

import jax
import jax.numpy as jnp
import pytest

import planmap.export
from planmap import frontend
from planmap.problem import Problem
from planmap.runtime.collectives import compiled_collectives, summarise
from planmap.sharding.solution import layout_of
from planmap.sharding.spmd import evaluate_spmd, reshards_per_layout
from planmap.solvers.sharding.baselines import fsdp, megatron
from tests.sharding.test_hlo_equality import four_gpus, predicted

if len(jax.devices()) < 4:
    pytest.skip("needs 4 devices: XLA_FLAGS=--xla_force_host_platform_device_count=8", allow_module_level=True)

B, S, D, H, F = 8, 16, 64, 4, 256


def block(params, x):
    """One pre-norm-free transformer block: multi-head self-attention and a tanh MLP, with residuals (the
    head count is the first weight's column count over the head size)."""
    wq, wk, wv, wo, w1, w2 = params
    b, s, d = x.shape
    h = HEADS[d]

    def heads(t):
        return t.reshape(b, s, h, d // h)

    q, k, v = heads(x @ wq), heads(x @ wk), heads(x @ wv)
    a = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / (d // h) ** 0.5, axis=-1)
    x = x + jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(b, s, d) @ wo
    return x + jnp.tanh(x @ w1) @ w2


HEADS = {D: H, 2048: 16}  # model width -> heads


def export(tmp_path, train: bool, dims: tuple[int, int, int, int] = (B, S, D, F)):
    """The block's forward pass or its training step (value and grad of a mean-squared loss), exported."""
    b, s, d, f = dims
    f32 = jnp.float32
    params = [jax.ShapeDtypeStruct(shape, f32) for shape in [(d, d)] * 4 + [(d, f), (f, d)]]
    xs = jax.ShapeDtypeStruct((b, s, d), f32)
    path = tmp_path / "block.mlir"
    if train:
        step = jax.value_and_grad(lambda params, x, y: jnp.mean((block(params, x) - y) ** 2))
        return planmap.export.jax(step, params, xs, xs, path=path)
    return planmap.export.jax(block, params, xs, path=path)


def problem_of(tmp_path, train: bool):
    artifact = export(tmp_path, train)
    mode = "training" if train else "inference"
    return artifact, Problem.from_graph(frontend.load_model(artifact), four_gpus(tmp_path), mode=mode)


def tensor_axis(sol) -> int:
    return [n for n, _ in sol.shardings.mesh_axes].index("tensor")


@pytest.mark.filterwarnings("ignore:.*UNCHECKED plan")
@pytest.mark.parametrize("train", [False, True], ids=["forward", "training"])
def test_megatron_block_splits_heads_and_the_mlp_and_its_collectives_equal_the_hlo(tmp_path, train):
    artifact, problem = problem_of(tmp_path, train)
    sol, ev = megatron(problem)
    tables, specs = layout_of(problem, sol)
    g, ax = problem.original, tensor_axis(sol)
    w = {a.index: specs[a.value] for a in g.args if a.role == "param"}
    col, row = ((), (ax,)), ((ax,), ())
    assert [w[i] for i in range(6)] == [col, col, col, row, col, row]  # wq wk wv | wo, w1 | w2
    split_heads = [v for v, shape in enumerate(tables.shapes) if shape == (B, S, H, D // H)]
    assert split_heads and all(specs[v][2] == (ax,) for v in split_heads)  # q, k, v split by head
    hlo = summarise(compiled_collectives(problem, sol, artifact, tmp_path))
    activation = B * S * D * 4 // (dict(sol.shardings.mesh_axes).get("data", 1))
    # forward: one all-reduce after attention's output projection and one after the MLP; training adds the
    # input gradient of the MLP's column-split w1 (the block's own input needs none)
    assert predicted(ev) == {("all-reduce", activation): 3 if train else 2}
    assert hlo == predicted(ev)


@pytest.mark.filterwarnings("ignore:.*UNCHECKED plan")
def test_fsdp_block_collectives_equal_the_hlo_up_to_cpu_reduce_scatter_and_cse(tmp_path):
    artifact, problem = problem_of(tmp_path, True)
    sol, ev = fsdp(problem)
    tables, specs = layout_of(problem, sol)
    assert dict(sol.shardings.mesh_axes) == {"fsdp": 4}
    assert all(any(specs[a.value]) for a in problem.original.args if a.role == "param")  # every weight split
    hlo = summarise(compiled_collectives(problem, sol, artifact, tmp_path))
    spmd = evaluate_spmd(tables, specs)
    assert list(spmd.choice) == list(ev.spmd.choice)
    once = reshards_per_layout(tables, specs, spmd.choice)
    gathers = {b: c for (k, b), c in once.items() if k == "all-gather"}
    assert {b: c for (k, b), c in hlo.items() if k == "all-gather"} == gathers
    assert sum(c for (k, _), c in predicted(ev).items() if k == "all-gather") > sum(gathers.values())  # per use
    on_cpu = Counter()
    for (kind, b), c in predicted(ev).items():
        if kind != "all-gather":
            on_cpu[("all-reduce" if kind == "reduce-scatter" else kind, b)] += c
    assert {k: c for k, c in hlo.items() if k[0] != "all-gather"} == dict(on_cpu)
