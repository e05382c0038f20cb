"""Issues 12 and 13 on third-party exports: HF transformers from PyTorch and Keras CNNs from TensorFlow.

tests/fixtures/thirdparty/ holds tiny HF BERT, GPT-2 (forward and training step) and T5 models and a ResNet- and a
MobileNetV2-style Keras CNN (with batch norm), exported by planmap's own torch / TF paths with every weight an argument
(PROVENANCE.md), their specs on 1 host × 8 H100, and the plans ``planmap solve`` wrote for them
(``plans/<spec>.sharding.plan.yaml``: ``<spec>.sharding.yaml``, ``solver: sharding``; ``plans/<spec>.plan.yaml``:
``auto``, the whole-cluster planner). Each committed plan must be current (its inputs' hashes; ``planmap check`` of
every derived field for one model), never worse under ``evaluate`` (time per microbatch) than one device, pure data
parallel and the Megatron layout built here by the baseline builders, and the sharding plan must run on 8 fake CPU
devices and match one device (``run --verify``, random inputs: the CNNs' batch-norm variances are drawn positive by
planmap.runtime.inputs). Regenerate the plans with tools/export_thirdparty_fixtures.py's ``--plans``.

Cost: about 60 s for the file on an idle 2-core machine (the Megatron baselines and the compiles of ``run --verify``
dominate; each verify takes 3-13 s).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planmap.errors import PlanmapError
from planmap.evaluate import evaluate
from planmap.problem import SolveOptions

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "thirdparty"
MODELS = ("hf-bert", "hf-gpt2", "hf-gpt2-train", "hf-t5", "keras-resnet", "keras-mobilenet")
TOL = 1 + 1e-9


@pytest.fixture(scope="module")
def judged():
    """Per model (built on first use): the problem and each baseline's time per microbatch under evaluate."""
    from planmap.assemble import build_problem
    from planmap.solvers.heuristics.even import SingleDevice
    from planmap.solvers.sharding.baselines import data_parallel, megatron
    from planmap.spec import load_spec

    cache: dict[str, tuple] = {}

    def get(name: str):
        if name not in cache:
            p = build_problem(load_spec(FIXTURES / f"{name}.yaml"))
            builders = {"single": lambda: SingleDevice().solve(p, SolveOptions()),
                        "data-parallel": lambda: data_parallel(p)[0], "megatron": lambda: megatron(p)[0]}
            times = {}
            for other, build in builders.items():
                try:
                    sol = build()
                except PlanmapError:  # not applicable
                    continue
                ev = evaluate(p, sol)
                if ev.feasible:
                    times[other] = ev.step_time / sol.microbatches
            cache[name] = (p, times)
        return cache[name]

    return get


def _plan_time(problem, path: Path) -> float:
    from planmap.plan.build import to_solution
    from planmap.plan.files import load as load_file

    sol = to_solution(problem, load_file(path, verify_inputs=True).document)  # refuses a stale plan
    ev = evaluate(problem, sol)
    assert ev.feasible, ev.violations
    return ev.step_time / sol.microbatches


def test_committed_plans_pass_planmap_check():
    from planmap import plan as plan_mod

    for suffix in (".sharding.plan.yaml", ".plan.yaml"):
        report = plan_mod.check(FIXTURES / "plans" / f"keras-resnet{suffix}")
        assert report.ok, report


@pytest.mark.parametrize("name", MODELS)
def test_sharding_and_cluster_plans_never_worse_than_the_baselines(name, judged):
    problem, baselines = judged(name)
    assert {"single", "data-parallel", "megatron"} <= set(baselines), baselines  # all apply on 1 x 8 H100
    for suffix in (".sharding.plan.yaml", ".plan.yaml"):
        mine = _plan_time(problem, FIXTURES / "plans" / f"{name}{suffix}")
        for other, t in baselines.items():
            assert mine <= t * TOL, (name, suffix, other, mine, t)


@pytest.mark.parametrize("name", MODELS)
def test_sharding_plan_runs_and_verifies_on_eight_devices(name, capsys):
    from planmap.cli import main

    plan = FIXTURES / "plans" / f"{name}.sharding.plan.yaml"
    assert main(["run", str(plan), "--steps", "1", "--verify"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "max error:" in out and "NO" not in out
