"""Predicted stage memory against what XLA allocates for the compiled stage program (issue 16 item 4).

:func:`planmap.program_memory.plan_program_bytes` of a stage of an example plan is compared with
``memory_analysis()`` (arguments + outputs + temporaries) of the programs the runtime compiles for
that stage (each of its segments on one CPU device, the largest counts); the full table for every
example is ``bench/memory.py`` -> ``bench/results/memory.md``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")

ROOT = Path(__file__).resolve().parents[2]


def _stage_ratio(name: str, k: int) -> float:
    """Predicted / XLA bytes of stage ``k`` of the example's golden plan, whole (unsharded) on one device:
    :func:`stage_program_bytes` without a layout against its programs compiled for one CPU device."""
    import jax

    from planmap.assemble import build_problem
    from planmap.plan import files
    from planmap.plan.build import to_solution
    from planmap.program_memory import stage_program_bytes
    from planmap.runtime.artifact import Artifact
    from planmap.runtime.ir_graph import EntryGraph
    from planmap.runtime.profile import _compiled_ops
    from planmap.segments import stage_programs
    from planmap.spec import load_spec

    spec = load_spec(ROOT / "specs" / f"{name}.yaml")
    problem = build_problem(spec)
    solution = to_solution(problem, files.load(ROOT / "plans" / f"{name}.plan.yaml").document)
    op_group = np.full(problem.original.num_nodes, -1, np.int64)
    for i, s in enumerate(np.asarray(solution.assignment).tolist()):
        op_group[problem.graph.members_of(i)] = s
    predicted = sum(stage_program_bytes(problem.original, op_group, k).values())
    artifact = Artifact.from_file(spec.model_path)
    graph = EntryGraph.from_artifact(artifact)
    xla = 0
    for ops in stage_programs(problem.original.pred, op_group, k):
        compiled, _ = _compiled_ops(artifact, graph, ops.tolist(), jax.devices()[0], f"stage{k}")
        m = compiled.memory_analysis()
        xla = max(xla, m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
                  - m.alias_size_in_bytes)
    return predicted / xla


@pytest.mark.parametrize("name, stage", [
    ("mlp-latency-cpu4acc", 0),  # weights, input, two kernel outputs
    ("gpt-8dev", 1),  # attention and MLP: fused elementwise chains, temporaries in output buffers
    ("gpt-train-8dev", 2),  # transformer backward: the stash as arguments, transposed weight-gradient copies
    ("cnn-train-mixed", 1),  # CNN backward: kernel-gradient convolutions copy both operands
    ("cnn-tpu", 2),  # the pooling reduce's library fusion swallows the last blocks: no temporaries
    pytest.param("gpt-train-8dev", 4, marks=pytest.mark.xfail(strict=True, reason=(
        "XLA:CPU's breadth-first scheduler runs the loss's label gather after the logits gradient, keeping the "
        "log-probabilities alive; the op-level graph cannot see that the gather's index output depends on the "
        "labels only (calls keep no bodies), so the model follows op order (0.77)"))),
])
def test_stage_program_within_ten_percent_of_xla(name, stage):
    assert _stage_ratio(name, stage) == pytest.approx(1.0, abs=0.1)


def _chain_graph(tmp_path, model, *shapes):
    import jax
    import jax.numpy as jnp

    from planmap.export import jax as export_jax
    from planmap.frontend import load_model

    specs = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]
    export_jax(model, *specs, path=tmp_path / "m.mlir")
    names = ["x"] + [f"w{i}" for i in range(1, len(shapes))]
    return load_model(tmp_path / "m.mlir", arguments={"data": ["x"], "parameters": names[1:]}), specs


def test_program_bytes_parts(tmp_path):
    """A two-stage chain cut after the first layer: stage 0 reads the data and its weight and sends
    its activation; stage 1 receives it, keeps the product as a temporary, returns the result."""
    import jax.numpy as jnp

    from planmap.program_memory import stage_program_bytes

    b, w = 16, 64
    act = b * w * 4
    g, _ = _chain_graph(tmp_path, lambda x, w1, w2: jnp.tanh(jnp.tanh(x @ w1) @ w2), (b, w), (w, w), (w, w))
    cut = list(g.kind).index("stablehlo.tanh") + 1
    group_of = (np.arange(g.num_nodes) >= cut).astype(np.int64)
    first, second = stage_program_bytes(g, group_of, 0), stage_program_bytes(g, group_of, 1)
    assert first == {"params": w * w * 4, "inputs": act, "outputs": act, "temp": act}
    assert second == {"params": w * w * 4, "inputs": act, "outputs": act, "temp": act}


def test_fused_elementwise_values_hold_no_buffer(tmp_path):
    """exp -> sin -> tanh feeding a product: XLA fuses the chain into one loop that writes only the
    product's operand, so one activation-sized temporary, as XLA reports, not three."""
    import jax
    import jax.numpy as jnp

    from planmap.program_memory import stage_program_bytes

    b, w = 64, 256

    def model(x, w1):
        return jnp.tanh(jnp.sin(jnp.exp(x))) @ w1

    g, specs = _chain_graph(tmp_path, model, (b, w), (w, w))
    predicted = stage_program_bytes(g, np.zeros(g.num_nodes, np.int64), 0)
    assert predicted["temp"] == b * w * 4
    m = jax.jit(model).lower(*specs).compile().memory_analysis()
    assert predicted["temp"] == pytest.approx(m.temp_size_in_bytes, rel=0.1)
    assert predicted["outputs"] == m.output_size_in_bytes


def test_a_reduction_fuses_the_convolutions_before_it(tmp_path):
    """conv -> relu -> conv -> residual add -> relu -> mean over space: XLA's CPU compiler runs the
    pooling reduction as a library fusion that takes in the convolutions and elementwise ops only it
    reads, so none of their results gets a buffer (temp is the pooled result only)."""
    import jax
    import jax.numpy as jnp

    from planmap.program_memory import stage_program_bytes

    def conv(x, w):
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def model(x, w1, w2):
        h = jax.nn.relu(conv(x, w1))
        return jnp.mean(jax.nn.relu(conv(h, w2) + x), axis=(1, 2))

    g, specs = _chain_graph(tmp_path, model, (4, 16, 16, 32), (3, 3, 32, 32), (3, 3, 32, 32))
    predicted = stage_program_bytes(g, np.zeros(g.num_nodes, np.int64), 0)
    m = jax.jit(model).lower(*specs).compile().memory_analysis()
    assert predicted["temp"] < 4 * 16 * 16 * 32 * 4  # less than one activation
    assert sum(predicted.values()) == pytest.approx(
        m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes, rel=0.1)
