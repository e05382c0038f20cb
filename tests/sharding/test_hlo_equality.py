"""Predicted collectives equal the compiled HLO's on the classic layouts of an exported N-layer MLP
training step on a 1-D 4-device mesh, compiled by XLA on fake CPU devices (XLA_FLAGS device count 8).

* Data parallel: weights replicated, every weight gradient all-reduced once (in its parameter's layout,
  not reduce-scattered), the mean loss all-reduced once (partial sums, not its operand gathered).
* Megatron: weights alternately column- and row-split; the activations are all-reduced after every
  row-parallel layer forward and before every column-parallel layer but the first backward (the step
  needs no input gradient), and nothing else moves: weights and their gradients stay split."""

from __future__ import annotations

from collections import Counter

import jax
import jax.numpy as jnp
import pytest

import planmap.export
from planmap import frontend
from planmap.cluster import Topology
from planmap.problem import Problem
from planmap.runtime.collectives import compiled_collectives, summarise
from planmap.solvers.sharding.baselines import data_parallel, megatron
from planmap.spec.loader import load_cluster
from tests.sharding.graphs import ROOT

if len(jax.devices()) < 4:
    pytest.skip("needs 4 devices: XLA_FLAGS=--xla_force_host_platform_device_count=8", allow_module_level=True)


def four_gpus(tmp_path) -> Topology:
    """The h100-1x8 host with 4 GPUs (the 1-D 4-device mesh of the classic cases)."""
    text = (ROOT / "specs" / "clusters" / "h100-1x8.yaml").read_text()
    path = tmp_path / "h100-1x4.yaml"
    path.write_text(text.replace("count: 8", "count: 4").replace("name: h100-1x8", "name: h100-1x4"))
    return Topology.from_spec(load_cluster(path).spec)


def mlp_step(path, layers: int, batch: int, hidden: int):
    """Exported value-and-grad step of a square ``layers``-deep tanh MLP with a mean-squared loss."""
    def loss(params, x, y):
        for i, w in enumerate(params):
            x = x @ w
            if i < len(params) - 1:
                x = jnp.tanh(x)
        return jnp.mean((x - y) ** 2)

    f32 = jnp.float32
    params = [jax.ShapeDtypeStruct((hidden, hidden), f32) for _ in range(layers)]
    data = jax.ShapeDtypeStruct((batch, hidden), f32)
    return planmap.export.jax(jax.value_and_grad(loss), params, data, data, path=path)


def predicted(ev) -> dict[tuple[str, int], int]:
    out: Counter = Counter()
    for kind, _, nbytes, count in ev.spmd.collectives:
        out[(kind, nbytes)] += count
    return dict(out)


@pytest.mark.filterwarnings("ignore:.*UNCHECKED plan")
@pytest.mark.parametrize("layers", [3])
def test_data_parallel_training_step_collectives_equal_the_compiled_hlo(tmp_path, layers):
    batch, hidden = 256, 256
    artifact = mlp_step(tmp_path / "mlp.mlir", layers, batch, hidden)
    problem = Problem.from_graph(frontend.load_model(artifact), four_gpus(tmp_path), mode="training")
    sol, ev = data_parallel(problem)
    assert dict(sol.shardings.mesh_axes) == {"data": 4} and all(
        problem.original.args[i].role == "data" for i in sol.shardings.args)  # weights replicated
    hlo = summarise(compiled_collectives(problem, sol, artifact, tmp_path))
    grads = hidden * hidden * 4
    assert predicted(ev) == {("all-reduce", 4): 1, ("all-reduce", grads): layers}
    assert hlo == predicted(ev)


@pytest.mark.filterwarnings("ignore:.*UNCHECKED plan")
def test_megatron_training_step_collectives_equal_the_compiled_hlo(tmp_path):
    layers, batch, hidden = 4, 256, 256
    artifact = mlp_step(tmp_path / "mlp.mlir", layers, batch, hidden)
    problem = Problem.from_graph(frontend.load_model(artifact), four_gpus(tmp_path), mode="training")
    sol, ev = megatron(problem)
    assert dict(sol.shardings.mesh_axes) == {"tensor": 4}
    assert [sol.shardings.args.get(i) for i in range(layers)] == [(None, "tensor"), ("tensor", None)] * (layers // 2)
    hlo = summarise(compiled_collectives(problem, sol, artifact, tmp_path))
    activation = batch * hidden * 4
    assert predicted(ev) == {("all-reduce", activation): layers // 2 + layers // 2 - 1}
    assert hlo == predicted(ev)
