"""The sharding IP on real exports of an MLP training step (value_and_grad of a mean-squared loss):
data parallel when the batch dominates, tensor parallel when the weights dominate and must be split,
data parallel across hosts and tensor parallel inside them on a 2 × 2 mesh, parameters sharded when
they do not fit; every answer reproduced by evaluate_spmd and no worse than the data-parallel and
replicated layouts."""

from __future__ import annotations

import pytest

pytest.importorskip("pyomo")
pytest.importorskip("highspy")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import planmap.export  # noqa: E402
from planmap import frontend  # noqa: E402
from planmap.problem import Problem, SolveOptions, Status  # noqa: E402
from planmap.sharding import ShardingTables, evaluate_spmd, logical_meshes, propagate  # noqa: E402
from planmap.solvers.sharding.ip import solve_all, solve_mesh  # noqa: E402
from tests.sharding.graphs import topology  # noqa: E402

OPTS = SolveOptions(time_limit=120, rel_gap=1e-9)


def mlp_step(tmp_path, batch: int, hidden: int, layers: int = 3):
    """The exported training step of a ``layers``-deep square MLP (ReLU between layers)."""
    def loss(params, x, y):
        h = x
        for i, w in enumerate(params):
            with jax.named_scope(f"layer{i}"):
                h = h @ w
                if i < len(params) - 1:
                    h = jnp.maximum(h, 0.0)
        return jnp.mean((h - y) ** 2)

    f32 = jnp.float32
    params = [jax.ShapeDtypeStruct((hidden, hidden), f32) for _ in range(layers)]
    data = jax.ShapeDtypeStruct((batch, hidden), f32)
    path = planmap.export.jax(jax.value_and_grad(loss), params, data, data, path=tmp_path / "mlp.mlir")
    return frontend.load_model(path)


def tables_on(graph, cluster: str, devices, axes: int, capacity: float | None = None) -> ShardingTables:
    topo = topology(cluster)
    mesh = next(m for m in logical_meshes(topo, devices) if m.num_axes == axes)
    headroom = 0.0 if capacity is None else 1.0 - capacity / float(topo.memory[mesh.devices].min())
    return ShardingTables.build(graph, topo, mesh, mode="training", memory_headroom=headroom)


def data_parallel(t: ShardingTables) -> dict:
    """Data arguments' batch dim over every mesh axis, the rest propagated."""
    axes = tuple(a for a, s in enumerate(t.mesh.axis_sizes) if s > 1)
    return propagate(t, {a.value: (axes,) + ((),) * (a.type.rank - 1) for a in t.graph.args if a.role == "data"})


def checked(t: ShardingTables, **kw):
    """Solve, and check what every answer must satisfy: optimal, reproduced by evaluate_spmd, feasible,
    no worse than the data-parallel and replicated layouts (when those fit)."""
    ans = solve_mesh(t, OPTS, **kw)
    assert ans.status == Status.OPTIMAL and ans.origin == "ip"
    ev = evaluate_spmd(t, ans.specs)
    assert ev.feasible
    assert ev.step_time == pytest.approx(ans.incumbent, rel=1e-6)
    assert ans.objective == pytest.approx(ans.incumbent, rel=1e-6)
    assert ans.bound <= ans.objective * (1 + 1e-6)
    for layout in (data_parallel(t), propagate(t, {})):
        other = evaluate_spmd(t, layout)
        if other.feasible:
            assert ans.objective <= other.step_time * (1 + 1e-9)
    assert ans.rows > 0 and ans.columns > 0 and ans.build_time > 0 and ans.reductions
    return ans, ev


def weights(t: ShardingTables):
    return [a for a in t.graph.args if a.role == "param"]


def test_batch_dominated_step_is_data_parallel(tmp_path):
    g = mlp_step(tmp_path, batch=65536, hidden=512)
    t = tables_on(g, "h100-1x8", [0, 1, 2, 3], axes=1)
    ans, ev = checked(t)
    assert all(ans.specs[w.value] == ((), ()) for w in weights(t))
    forward = [i for i in range(t.num_ops) if t.graph.kind[i] == "stablehlo.dot_general" and not t.graph.backward[i]]
    assert len(forward) == 3 and all(ans.specs[t.unit_values(i)[0]] == ((0,), ()) for i in forward)
    # each weight gradient is reduced over the data axis once (all-reduce or reduce-scatter)
    grads = [c for c in ev.collectives if c[0] in ("all-reduce", "reduce-scatter") and c[2] == 512 * 512 * 4]
    assert sum(c[3] for c in grads) == 3
    # the follower merge keeps this optimum
    plain = solve_mesh(t, OPTS, merge_followers=False)
    assert plain.objective == pytest.approx(ans.objective, rel=1e-9)
    assert not any("followers" in r for r in plain.reductions) and any("followers" in r for r in ans.reductions)


def test_weight_dominated_step_splits_the_weights_megatron_style(tmp_path):
    g = mlp_step(tmp_path, batch=64, hidden=16384)
    t = tables_on(g, "h100-1x8", [0, 1, 2, 3], axes=1, capacity=6e9)  # replicated weights do not fit
    assert not evaluate_spmd(t, propagate(t, {})).feasible
    ans, ev = checked(t)
    specs = [ans.specs[w.value] for w in weights(t)]
    assert all(sorted(s) == [(), (0,)] for s in specs)  # each weight split on one dim over the axis
    assert {s.index((0,)) for s in specs} == {0, 1}  # column- and row-split weights
    weight_bytes = 16384 * 16384 * 4
    assert all(c[2] < weight_bytes / 16 for c in ev.collectives)  # only activations move, weights never do


def test_two_hosts_data_parallel_across_tensor_parallel_inside(tmp_path):
    g = mlp_step(tmp_path, batch=16384, hidden=4096)
    t = tables_on(g, "h100-2x8", [0, 1, 8, 9], axes=2, capacity=1e9)
    assert t.mesh.scope == ("inter", "intra")
    ans, ev = checked(t)
    x = next(a for a in t.graph.args if a.name == "x")
    assert 0 in ans.specs[x.value][0]  # the batch is split across hosts
    assert any(1 in dim for w in weights(t) for dim in ans.specs[w.value])  # weights split inside a host
    moved = [sum(c[2] * c[3] for c in ev.collectives if a in c[1]) for a in (0, 1)]
    assert moved[0] < moved[1]  # the slow axis carries less traffic


def test_parameters_that_do_not_fit_are_sharded(tmp_path):
    g = mlp_step(tmp_path, batch=256, hidden=4096)
    free = tables_on(g, "h100-1x8", [0, 1, 2, 3], axes=1)
    rep = evaluate_spmd(free, data_parallel(free))
    capacity = rep.memory - rep.memory_parts["params"] / 2  # half the replicated parameters do not fit
    t = tables_on(g, "h100-1x8", [0, 1, 2, 3], axes=1, capacity=capacity)
    assert not evaluate_spmd(t, data_parallel(t)).feasible
    ans, ev = checked(t)
    assert ev.memory <= t.capacity and ev.memory_parts["params"] < rep.memory_parts["params"]
    assert any(ans.specs[w.value] != ((), ()) for w in weights(t))


@pytest.mark.slow
def test_deterministic_and_solve_all_picks_the_best_mesh(tmp_path):
    g = mlp_step(tmp_path, batch=4096, hidden=1024, layers=2)
    topo = topology("h100-1x8")
    t = ShardingTables.build(g, topo, logical_meshes(topo, [0, 1, 2, 3])[0], mode="training")
    assert solve_mesh(t, OPTS).specs == solve_mesh(t, OPTS).specs
    problem = Problem.from_graph(g, topo, mode="training")
    res = solve_all(problem, SolveOptions(time_limit=120, rel_gap=1e-9))
    shapes = [m.shape for m in logical_meshes(topo)]
    assert sorted([a.mesh.shape for a in res.meshes] + [s for s, _ in res.skipped]) == sorted(shapes)
    best = min(a.objective for a in res.meshes)
    assert res.best.objective == best
    assert all(lb >= best * (1 - 1e-9) for _, lb in res.skipped)
    assert evaluate_spmd(res.best.tables, res.best.specs).step_time == pytest.approx(best, rel=1e-6)


def test_warm_start_is_accepted_and_never_beaten_by_a_worse_answer(tmp_path):
    g = mlp_step(tmp_path, batch=4096, hidden=1024, layers=2)
    t = tables_on(g, "h100-1x8", [0, 1, 2, 3], axes=1)
    dp = data_parallel(t)
    ans = solve_mesh(t, OPTS, warm_start=dp)
    assert ans.mip.warm_start == "accepted"
    assert ans.objective <= evaluate_spmd(t, dp).step_time * (1 + 1e-9)
    quick = solve_mesh(t, SolveOptions(time_limit=1e-3), warm_start=dp)  # stops before improving on the start
    assert quick.objective <= evaluate_spmd(t, dp).step_time * (1 + 1e-9)


def test_matrix_model_is_the_pyomo_model(tmp_path):
    """The matrices handed to HiGHS directly have the Pyomo model's rows, columns and optimum (memory rows
    binding: parameters must be split to fit)."""
    from planmap.solvers import mip
    from planmap.solvers.sharding.ip import _count
    from planmap.solvers.sharding.matrix import satisfies, solve_sparse, sparse_model, start_vector
    from planmap.solvers.sharding.model import build_model, model_data, read_choice
    from planmap.solvers.sharding.reduce import reduce_tables

    g = mlp_step(tmp_path, batch=32, hidden=256, layers=2)
    t = tables_on(g, "h100-1x8", [0, 1, 2, 3], axes=1, capacity=1.2e6)
    red = reduce_tables(t)
    data = model_data(red)
    assert data.memory_row
    model = build_model(red, data=data)
    sm = sparse_model(data)
    assert (sm.num_rows, sm.num_cols) == (_count(model, "Constraint"), _count(model, "Var"))
    ref = mip.solve_model(model, OPTS, scale=model.time_unit)
    res, col = solve_sparse(sm, OPTS)
    assert res.status == ref.status == Status.OPTIMAL
    assert res.incumbent == pytest.approx(ref.incumbent, rel=1e-7)
    # the Pyomo optimum, as a start vector, satisfies the matrices (same rows, not just the same optimum)
    assert satisfies(sm, start_vector(sm, read_choice(model)))
    assert satisfies(sm, col)


def test_repeated_layers_tied_give_one_layers_columns_and_a_stated_restriction(tmp_path):
    """Tying the layers of a 6-layer MLP step makes corresponding ops share one strategy and shrinks the IP;
    the tied optimum is a layout of the full space (never below the full optimum) and equals it when the
    best layout is the same in every layer (data parallel, batch-dominated)."""
    from planmap.solvers.sharding.reduce import layer_ties, reduce_tables

    g = mlp_step(tmp_path, batch=4096, hidden=256, layers=6)
    t = tables_on(g, "h100-1x8", [0, 1, 2, 3], axes=1)
    ties, repeats, blocks = layer_ties(t)
    assert repeats >= 1 and blocks >= 4 and ties
    free, tied = reduce_tables(t), reduce_tables(t, tie_layers=True)
    assert tied.num_groups < free.num_groups
    assert any("identical across the repeated layers" in n for n in tied.notes)
    full = solve_mesh(t, OPTS, reduced=free)
    one = solve_mesh(t, OPTS, reduced=tied)
    assert one.status == full.status == Status.OPTIMAL and one.columns < full.columns
    assert one.objective == pytest.approx(full.objective, rel=1e-9)
    assert "identical across the repeated layers" in one.certificate_text()
    for u, u0 in ties.items():
        if tied.group_of[u] == tied.group_of[u0]:
            assert one.strategies[u] == one.strategies[u0]
    # weight-dominated: the tied optimum is a feasible layout, never better than the full one
    t2 = tables_on(mlp_step(tmp_path, batch=32, hidden=512, layers=6), "h100-1x8", [0, 1, 2, 3], axes=1)
    a, b = solve_mesh(t2, OPTS), solve_mesh(t2, OPTS, reduced=reduce_tables(t2, tie_layers=True))
    assert b.objective >= a.objective * (1 - 1e-9)
    assert evaluate_spmd(t2, b.specs).step_time == pytest.approx(b.objective, rel=1e-12)
