"""Golden plans: every example spec solves to exactly the committed plan (regenerate: `make goldens`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from planmap import plan as plan_mod
from planmap.assemble import build_problem
from planmap.problem import SolveOptions
from planmap.solve import solve
from planmap.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "specs").glob("*.yaml"))


def solve_to_text(spec_path: Path, plan_path: Path) -> str:
    spec = load_spec(spec_path)
    cfg = spec.spec.solver
    problem = build_problem(spec)
    result = solve(problem, cfg.name, SolveOptions(time_limit=cfg.time_limit / 1e9, rel_gap=cfg.rel_gap,
                                                   threads=cfg.threads, seed=cfg.seed, backend=cfg.backend,
                                                   passthrough=dict(cfg.options)))
    doc = plan_mod.make_plan(result.problem, result.solution, result.evaluation, spec=spec, plan_path=plan_path)
    return plan_mod.render(doc, plan_mod.header(spec_path, plan_path))


@pytest.mark.slow
@pytest.mark.parametrize("spec_path", SPECS, ids=[p.stem for p in SPECS])
def test_golden_plan(spec_path):
    golden = ROOT / "plans" / f"{spec_path.stem}.plan.yaml"
    assert golden.is_file(), f"no golden plan for {spec_path.name}: run `make goldens`"
    text = solve_to_text(spec_path, golden)
    assert text == golden.read_text(), f"{golden.name} is out of date: run `make goldens` and review the diff"
    assert plan_mod.check(golden).ok
