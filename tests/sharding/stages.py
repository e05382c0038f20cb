"""The whole-cluster test case: the GPT training step of specs/gpt-train-8dev.yaml split into two stages."""

from __future__ import annotations

import numpy as np

from tests.sharding.graphs import ROOT


def gpt_train_problem():
    """The problem of specs/gpt-train-8dev.yaml (GPT training step, 1x8 H100, 1F1B, 4 microbatches)."""
    from planmap.assemble import build_problem
    from planmap.spec import load_spec

    return build_problem(load_spec(ROOT / "specs" / "gpt-train-8dev.yaml"))


def two_stages(problem) -> tuple[np.ndarray, np.ndarray]:
    """Original op ids of a 2-stage split of the coarse graph: embedding and layers 0-1 (forward and
    backward) | layers 2-3, head and loss."""
    g = problem.graph
    first = [i for i in range(g.num_nodes) if g.layer[i] in (0, 1) or "embed" in g.op_name[i]]
    second = sorted(set(range(g.num_nodes)) - set(first))
    a, b = (np.sort(np.concatenate([g.members_of(i) for i in nodes])) for nodes in (first, second))
    return a, b


def split_assignment(problem) -> np.ndarray:
    """The coarse nodes' stages of :func:`two_stages`."""
    s0, _ = two_stages(problem)
    g = problem.graph
    return np.array([0 if np.isin(g.members_of(i), s0).all() else 1 for i in range(g.num_nodes)], np.int32)


def megatron_stages(problem, schedule: str = "1f1b"):
    """Embedding + layers 0-1 on devices 0-3, layers 2-3 + head on 4-7, each (data 2, tensor 2) Megatron."""
    from planmap.problem import Certificate, Status
    from planmap.sharding import LogicalMesh, propagate
    from planmap.sharding.stage import stage_tables
    from planmap.sharding.stage_layout import stages_solution
    from planmap.solvers.sharding.baselines import megatron_overrides

    layouts = []
    for ops, devs in zip(two_stages(problem), ([0, 1, 2, 3], [4, 5, 6, 7]), strict=True):
        t = stage_tables(problem, ops, LogicalMesh.build(problem.topology, (2, 2), devs))
        layouts.append((t, propagate(t, megatron_overrides(t, 1, 0))))
    return stages_solution(problem, split_assignment(problem), layouts, Certificate(Status.HEURISTIC, "test"),
                           schedule=schedule)
