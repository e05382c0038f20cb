"""One vocabulary: the spec's enums are the problem's, strings are normalised, options come from a spec one way."""

from __future__ import annotations

import pytest

from planmap.problem import Problem, SolveOptions, relative_gap
from planmap.spec import models
from planmap.spec.models import SolverConfig
from planmap.vocabulary import Mode, ObjectiveKind, Schedule, ThroughputVariant
from planmap.workloads.graphs import paper_topology, profiled_graph


def test_spec_and_core_share_one_definition():
    assert models.ObjectiveKind is ObjectiveKind and models.Mode is Mode
    assert models.ThroughputVariant is ThroughputVariant and models.Schedule is Schedule


def test_problem_normalises_strings_to_members():
    g = profiled_graph([(0, 1)], cpu=[1, 1], acc=[1, 1], comm=0.5)
    p = Problem.from_graph(g, paper_topology(2), objective="latency", mode="training", schedule="1f1b",
                           variant="max-fw-plus-max-bw")
    assert p.objective is ObjectiveKind.LATENCY and p.mode is Mode.TRAINING
    assert p.schedule is Schedule.ONE_F_ONE_B and p.variant is ThroughputVariant.MAX_FW_PLUS_MAX_BW
    assert p.objective == "latency" and f"{p.schedule}" == "1f1b"  # StrEnum: compares and renders as its string
    assert p.cost.mode is Mode.TRAINING
    with pytest.raises(ValueError, match="latncy"):
        Problem.from_graph(g, paper_topology(2), objective="latncy")
    with pytest.raises(ValueError, match="gpipe or 1f1b"):
        Problem.from_graph(g, paper_topology(2), schedule="auto")


def test_solve_options_from_spec_with_overrides():
    cfg = SolverConfig(time_limit="5s", rel_gap=0.02, threads=3, seed=7, backend="cbc", options={"maxNodes": 1})
    o = SolveOptions.from_spec(cfg)
    assert (o.time_limit, o.rel_gap, o.threads, o.seed, o.backend, o.passthrough) == (
        5.0, 0.02, 3, 7, "cbc", {"maxNodes": 1})
    o = SolveOptions.from_spec(cfg, rel_gap=0.0, threads=None, time_limit=1.5)
    assert (o.time_limit, o.rel_gap, o.threads) == (1.5, 0.0, 3)  # None means "not given": the spec's value


def test_relative_gap_and_the_mip_layer_agree():
    from planmap.solvers import mip

    assert relative_gap(10.0, 9.0) == pytest.approx(0.1)
    assert mip._gap(10.0, 9.0, 1.0) == relative_gap(10.0, 9.0)
    assert mip._gap(9.0, 10.0, -1.0) == pytest.approx(1 / 9)  # a maximisation: the bound lies above
    assert mip._gap(None, 9.0, 1.0) is None
