"""Input-free cheap values (splat constants and their broadcasts) are recomputed per stage, not sent.

The model mimics a PyTorch export: four layers share large splat constants (``dense<c>`` of the
activation's shape) made once at the top of ``@main``, so a pipeline's later stages read values that
the first stage "produces". The runtime rebuilds them in each stage; the cost model must agree.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from planmap.evaluate import evaluate

jax = pytest.importorskip("jax")
jnp = jax.numpy

ROOT = Path(__file__).resolve().parents[2]
BATCH, WIDTH, LAYERS = 64, 512, 4


def _model(x, ws):
    scale = np.full((BATCH, WIDTH), 0.5, np.float32)  # splat constants shared by every layer
    shift = np.full((BATCH, WIDTH), 0.25, np.float32)
    iota = jax.lax.broadcasted_iota(jnp.int32, (BATCH, WIDTH), 1).astype(jnp.float32)  # iota -> convert
    for w in ws:
        x = jnp.tanh(x @ w) * scale + shift + iota
    return x


@pytest.fixture(scope="module")
def problem(tmp_path_factory):
    from planmap.assemble import build_problem
    from planmap.export import jax as export_jax
    from planmap.spec import load_spec

    tmp = tmp_path_factory.mktemp("recompute")
    args = (jax.ShapeDtypeStruct((BATCH, WIDTH), jnp.float32),
            [jax.ShapeDtypeStruct((WIDTH, WIDTH), jnp.float32)] * LAYERS)
    export_jax(_model, *args, path=tmp / "m.mlir")
    (tmp / "spec.yaml").write_text(f"""\
apiVersion: planmap.dev/v1alpha1
kind: PlanSpec
metadata: {{name: consts}}
spec:
  model: {{source: m.mlir, mode: inference, microbatches: 4, arguments: {{data: [x], parameters: ["ws*"]}}}}
  cluster: {ROOT / 'specs' / 'clusters' / 'h100-1x8.yaml'}
  objective: {{kind: throughput}}
  constraints: {{placement: contiguous, coarsening: fuse}}
""")
    return build_problem(load_spec(tmp / "spec.yaml"))


def test_shared_splat_constants_are_not_transfers(problem):
    from planmap.problem import SolveOptions
    from planmap.solve import solve

    g = problem.graph
    result = solve(problem, "even", SolveOptions(time_limit=30))
    ev = evaluate(problem, result.solution)
    assert result.solution.num_stages >= 2
    activation = BATCH * WIDTH * 4
    boundaries = result.solution.num_stages - 1
    # one activation per stage boundary crosses; the three shared constants never do
    assert ev.bytes_moved == activation * boundaries
    assert g.state_bytes.sum() < activation  # splat constants hold no resident bytes


def test_runtime_and_cost_model_share_one_rule():
    from planmap.frontend.recompute import RECOMPUTED_OPS
    from planmap.runtime.split import CHEAP_OPS

    assert CHEAP_OPS is RECOMPUTED_OPS


def test_replicated_stage_keeps_each_replicas_launch_floor(problem):
    """Every replica launches all of its kernels: splitting a microbatch over r devices divides the
    roofline part only, so r replicas never beat one device's launch time."""
    from dataclasses import replace

    from planmap.problem import Certificate, Solution, Stage

    p = replace(problem, replication=True)
    n = p.graph.num_nodes
    floor = p.cost.device_launch[:, 0].sum()
    whole = p.cost.device_compute[:, 0].sum()
    assert 0 < floor < whole
    times = []
    for r in (1, 2, 4, 8):
        ev = evaluate(p, Solution(np.zeros(n, np.int64), (Stage(tuple(range(r))),), Certificate("heuristic", "hand")))
        assert ev.feasible, ev.violations
        assert ev.objective == pytest.approx((whole - floor) / r + floor)
        times.append(ev.objective)
    assert times == sorted(times, reverse=True) and times[-1] >= floor


@pytest.mark.parametrize("replicas", [1, 8])
def test_spmd_launches_are_counted_as_the_pipeline_counts_them(problem, replicas):
    """An SPMD layout pays each fused node's kernel launches once per device, undivided, exactly the
    pipeline model's launch floor; only the roofline part shrinks with the per-device batch."""
    from planmap.kernels import kernel_counts
    from planmap.sharding import LogicalMesh, evaluate_spmd, propagate, tables_for
    from planmap.sharding.tables import fused_op_costs

    floor = problem.cost.device_launch[:, 0].sum()
    whole = problem.cost.device_compute[:, 0].sum()
    roof, launch = fused_op_costs(problem, 0, kernel_counts(problem.original, problem.original))
    assert launch.sum() == pytest.approx(floor) and roof.sum() + launch.sum() == pytest.approx(whole)
    t = tables_for(problem, LogicalMesh.build(problem.topology, (replicas,), range(replicas)))
    x = next(a.value for a in t.graph.args if a.role == "data")
    ev = evaluate_spmd(t, propagate(t, {x: ((0,), ())} if replicas > 1 else {}))
    divided = sum(roof[i] / t.sets[i].divisor[ev.choice[i]] for i in range(t.num_ops))
    assert ev.compute == pytest.approx(divided + floor)
    if replicas == 1:
        assert ev.compute == pytest.approx(whole)
    else:  # never below the replicated pipeline stage's time: that divides every op's roofline
        assert (whole - floor) / replicas + floor <= ev.compute * (1 + 1e-9) and ev.compute < whole
