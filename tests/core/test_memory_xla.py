"""Predicted stage memory against what XLA allocates for the compiled stage program (issue 16 item 4).

The liveness model (:meth:`planmap.cost.CostModel.program_bytes`) of each stage of an example plan is
compared with ``memory_analysis()`` of the programs the runtime compiles for it; the full table for
every example is ``bench/memory.py`` -> ``bench/results/memory.md``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")

ROOT = Path(__file__).resolve().parents[2]


def _stage_ratios(name: str, plan: Path | None = None) -> list[float]:
    """Predicted / XLA bytes per stage of ``plan`` (default: the example's golden plan)."""
    import planmap.runtime as rt
    from planmap.assemble import build_problem
    from planmap.plan import files
    from planmap.plan.build import to_solution
    from planmap.spec import load_spec

    plan = plan or ROOT / "plans" / f"{name}.plan.yaml"
    problem = build_problem(load_spec(ROOT / "specs" / f"{name}.yaml"))
    solution = to_solution(problem, files.load(plan).document)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exe = rt.load(plan, unchecked=True)
    group_of = np.asarray(solution.assignment, np.int64)
    ratios = []
    for k in range(solution.num_stages):
        predicted = sum(problem.cost.program_bytes(group_of, k).values())
        xla = max(m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes
                  for m in (s.fn.memory_analysis() for s in exe.segments if s.stage == k))
        ratios.append(predicted / xla)
    return ratios


def test_mlp_stage_program_matches_xla():
    """The MLP's stage holds its weights, its input and a few kernel outputs: liveness is exact."""
    assert _stage_ratios("mlp-latency-cpu4acc") == pytest.approx([1.0], abs=0.1)


def test_cnn_stages_within_the_benched_band(tmp_path):
    """CNN stages of the single-device pipeline (the `dp` plan; the liveness model is per unsharded stage
    program): within the band bench/results/memory.md records (XLA fuses some of the values planmap counts,
    and materialises some inside planmap's fused nodes)."""
    from planmap.cli import main

    plan = tmp_path / "cnn-tpu.plan.yaml"
    assert main(["solve", str(ROOT / "specs" / "cnn-tpu.yaml"), "--solver", "dp", "-o", str(plan)]) == 0
    ratios = _stage_ratios("cnn-tpu", plan)
    assert len(ratios) == 8
    assert 0.7 <= min(ratios) and max(ratios) <= 1.7
    assert float(np.median(ratios)) == pytest.approx(1.0, abs=0.1)


def test_program_bytes_parts(tmp_path):
    """A two-stage chain cut after the first layer: stage 0 reads the data and its weight and sends
    its activation; stage 1 receives it, keeps the pre-activation as a temporary, returns the result."""
    import jax
    import jax.numpy as jnp

    from planmap.cost import CostModel
    from planmap.export import jax as export_jax
    from planmap.frontend import load_model
    from planmap.workloads.graphs import paper_topology

    b, w = 16, 64
    act = b * w * 4

    def model(x, w1, w2):
        return jnp.tanh(jnp.tanh(x @ w1) @ w2)

    spec = jax.ShapeDtypeStruct((b, w), jnp.float32), jax.ShapeDtypeStruct((w, w), jnp.float32)
    export_jax(model, spec[0], spec[1], spec[1], path=tmp_path / "m.mlir")
    g = load_model(tmp_path / "m.mlir", arguments={"data": ["x"], "parameters": ["w1", "w2"]})
    cost = CostModel.build(g, paper_topology(2, cpus=0))
    kinds = list(g.kind)
    cut = kinds.index("stablehlo.tanh") + 1
    group_of = (np.arange(g.num_nodes) >= cut).astype(np.int64)
    first, second = cost.program_bytes(group_of, 0), cost.program_bytes(group_of, 1)
    assert first == {"params": w * w * 4, "inputs": act, "outputs": act, "temp": act}
    assert second == {"params": w * w * 4, "inputs": act, "outputs": act, "temp": act}
