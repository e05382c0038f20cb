"""The DQN planner on the classic sharding cases and unseen third-party transformers (no fine-tuning).

For each model (the example MLP / GPT artifacts, the classic sharding cases of tests/fixtures/sharding_cases/ —
where the cost model prefers data parallel or Megatron — and the HF BERT / T5 exports of
tests/fixtures/thirdparty/) on the h100-1x8 cluster (the model coarsened as ``auto`` does): the exact ``dp``
pipeline split, the whole-cluster planner ``cluster`` (stages × submeshes × sharding, with the SPMD baselines and
the (dp, fsdp, tp, pp) grid), the shipped agent's plan (its first action: a pipeline cut or an SPMD baseline) —
the beam's best before the improvement pass and the final plan — and the SPMD baselines data parallel and
Megatron ("does not fit": over a device's memory), all as objectives (seconds per microbatch) judged by
``evaluate``, relative to the exact split.

Run: ``python bench/dqn_cases.py [--models mlp,mlp_train,gpt,mlp_data_parallel,mlp_megatron,hf_bert,hf_t5]``
(prints a markdown table).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from planmap.evaluate import evaluate
from planmap.problem import Problem, SolveOptions

ROOT = Path(__file__).resolve().parent.parent


def problem(model: str) -> Problem:
    from planmap import frontend
    from planmap.cluster import Topology
    from planmap.spec.loader import load_cluster

    path = ROOT / "specs" / "models" / f"{model}.mlir"
    for where in ("thirdparty", "sharding_cases"):
        path = path if path.is_file() else ROOT / "tests" / "fixtures" / where / f"{model}.mlir"
    topo = Topology.from_spec(load_cluster(ROOT / "specs" / "clusters" / "h100-1x8.yaml").spec)
    original = frontend.load_model(path)
    return Problem.from_graph(frontend.coarsen(original, "auto"), topo, original=original,
                              mode="training" if model.endswith("_train") else "inference")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp,mlp_train,gpt,mlp_data_parallel,mlp_megatron,hf_bert,hf_t5")
    args = ap.parse_args()
    here = Path(__file__).resolve().parent  # bench/profile.py would shadow the stdlib's profile (torch imports it)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    from planmap.solvers import get
    from planmap.solvers.dqn import checkpoint
    from planmap.solvers.dqn.env import baseline_plan
    from planmap.solvers.dqn.solver import plan_with_agent
    from planmap.solvers.dqn.space import action_name

    agent, _ = checkpoint.load()
    print("| model | nodes | dp (exact split) | cluster / dp | dqn first action | dqn beam / dp | dqn / dp | "
          "data parallel / dp | megatron / dp | dqn s |\n|---|---|---|---|---|---|---|---|---|---|", flush=True)
    for model in args.models.split(","):
        p = problem(model)
        dp = evaluate(p, get("dp").solve(p, SolveOptions(time_limit=60))).objective
        cluster = evaluate(p, get("cluster").solve(p, SolveOptions(time_limit=120))).objective
        t0 = time.perf_counter()
        res, _ = plan_with_agent(agent, p, 32)
        wall = time.perf_counter() - t0
        base = {}
        for name in ("data-parallel", "megatron"):
            try:
                ev = evaluate(p, baseline_plan(p, name))
                base[name] = f"{ev.objective / dp:.3f}" + ("" if ev.feasible else " (does not fit)")
            except Exception as e:  # noqa: BLE001 - a baseline that cannot lay this model out is a table entry
                base[name] = f"— ({type(e).__name__})"
        stages = len(res.plan.stages) if res.plan is not None else 0
        print(f"| {model} | {p.num_nodes} | {dp * 1e3:.4g} ms | {cluster / dp:.3f} | "
              f"{action_name(res.actions[0])} ({stages} stages) | "
              f"{res.beam_objective / dp:.3f} | {res.objective / dp:.3f} | {base['data-parallel']} | "
              f"{base['megatron']} | {wall:.1f} |", flush=True)


if __name__ == "__main__":
    main()
