"""ZeRO as a decision: a training step whose replicated Adam state does not fit gets ZeRO-1 from the sharding
solver — the data-parallel baseline takes the lowest stage that fits (same collectives and time), and the IP,
run again with stage-1 memory rows, finds a layout faster than any that fits without ZeRO; the plan file
writes the stage (absent = 0) and reads it back, evaluate costs it, explain shows it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("pyomo")
pytest.importorskip("highspy")

from planmap import plan as plan_mod  # noqa: E402
from planmap.evaluate import evaluate  # noqa: E402
from planmap.plan.document import parse  # noqa: E402
from planmap.problem import Problem, SolveOptions, Status  # noqa: E402
from planmap.sharding.solution import layout_of, solution_mesh  # noqa: E402
from planmap.sharding.spmd import evaluate_spmd  # noqa: E402
from planmap.sharding.summary import spmd_lines  # noqa: E402
from planmap.solvers.sharding.baselines import data_parallel  # noqa: E402
from planmap.solvers.sharding.ip import solve_all  # noqa: E402
from planmap.solvers.sharding.solver import Sharding  # noqa: E402
from tests.sharding.test_hlo_equality import four_gpus, mlp_step  # noqa: E402


def test_only_zero_fits_and_the_solver_chooses_it(tmp_path):
    artifact = mlp_step(tmp_path / "mlp.mlir", 3, 8192, 2048)  # batch-dominated: data parallel is fastest
    topo = four_gpus(tmp_path)
    free = Problem.from_graph(load(artifact), topo, mode="training", optimizer="adam")
    sol, ev = data_parallel(free)
    assert sol.shardings.zero == 0 and ev.feasible
    tables, specs = layout_of(free, sol)
    z1 = evaluate_spmd(tables, specs, zero=1)
    # ZeRO-1 fits; the replicated optimizer state does not, nor any layout that keeps it (the weights must split)
    capacity = z1.memory + 0.1 * (ev.spmd.memory - z1.memory)
    tight = Problem.from_graph(load(artifact), topo, mode="training", optimizer="adam",
                               memory_headroom=1.0 - capacity / float(topo.memory[0]))
    dp, dp_ev = data_parallel(tight)
    assert dp.shardings.zero == 1 and dp_ev.feasible
    assert dp_ev.objective == pytest.approx(ev.objective, rel=1e-12)  # ZeRO-1 moves what the all-reduce moved
    assert not evaluate(tight, sol).feasible  # stage 0: does not fit

    best = Sharding().solve(tight, SolveOptions(time_limit=60, rel_gap=1e-6))
    best_ev = evaluate(tight, best)
    assert best.shardings.zero == 1 and best_ev.feasible and best.certificate.status == Status.OPTIMAL
    # faster than data parallel with ZeRO-1 and than every layout that fits without ZeRO (the IP at stage 0)
    stage0 = solve_all(tight, SolveOptions(time_limit=60, rel_gap=1e-6)).best
    assert stage0 is not None and stage0.evaluation.feasible
    assert best_ev.objective < min(dp_ev.objective, stage0.objective / tight.microbatches)

    path = tmp_path / "z.plan.yaml"
    spec = SimpleNamespace(path=artifact, cluster_path=None, model_path=artifact)
    text = plan_mod.render(plan_mod.make_plan(tight, best, best_ev, spec=spec, plan_path=path), [])
    assert "  zero: 1\n" in text
    back = plan_mod.to_solution(tight, parse(text, str(path)))
    assert back.shardings == best.shardings and evaluate(tight, back).feasible
    stage0 = text.replace("  zero: 1\n", "")  # plans without the field (format 1.2 and before) are stage 0
    assert plan_mod.to_solution(tight, parse(stage0, str(path))).shardings.zero == 0
    names = tuple(n for n, _ in best.shardings.mesh_axes)
    lines = spmd_lines(solution_mesh(tight, best), names, best_ev.spmd, zero=best.shardings.zero)
    assert lines[-1].startswith("ZeRO-1: optimizer state sharded")


def load(artifact):
    from planmap import frontend

    return frontend.load_model(artifact)
