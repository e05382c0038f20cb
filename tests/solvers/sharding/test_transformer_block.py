"""The sharding IP on an exported transformer block training step (16 heads, width 2048, MLP 8192, batch 2
of 64 tokens) on a 1-D 4-GPU mesh, where the weights dominate: attention is split by head (q, k and v
column-split, every per-head tensor split on its head dim) and the MLP column- then row-split — the
Megatron layout, found by the IP, not given."""

from __future__ import annotations

import pytest

pytest.importorskip("pyomo")
pytest.importorskip("highspy")

from planmap import frontend  # noqa: E402
from planmap.problem import Problem, SolveOptions, Status  # noqa: E402
from planmap.sharding import ShardingTables, evaluate_spmd, logical_meshes, propagate  # noqa: E402
from planmap.solvers.sharding.ip import solve_mesh  # noqa: E402
from tests.sharding.test_hlo_equality import four_gpus  # noqa: E402
from tests.sharding.test_hlo_transformer import export  # noqa: E402


def test_ip_splits_attention_by_head_and_the_mlp_column_then_row(tmp_path):
    b, s, d, f, h = 2, 64, 2048, 8192, 16
    g = frontend.load_model(export(tmp_path, True, (b, s, d, f)))
    topo = four_gpus(tmp_path)
    mesh = logical_meshes(topo)[0]
    assert mesh.axis_sizes == (4,)
    t = ShardingTables.from_problem(Problem.from_graph(g, topo, mode="training"), mesh)
    ans = solve_mesh(t, SolveOptions(time_limit=120, rel_gap=1e-6))
    assert ans.status == Status.OPTIMAL
    w = [ans.specs[a.value] for a in g.args if a.role == "param"]  # wq wk wv wo w1 w2
    col, row = ((), (0,)), ((0,), ())
    assert w[:3] == [col] * 3 and w[4:] == [col, row]
    per_head = [v for v, shape in enumerate(t.shapes) if shape == (b, s, h, d // h)]
    assert per_head and all(ans.specs[v][2] == (0,) for v in per_head)
    assert ans.objective < evaluate_spmd(t, propagate(t, {})).step_time  # the batch of 2 cannot split 4 ways
