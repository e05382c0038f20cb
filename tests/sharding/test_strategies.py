import numpy as np
import pytest

from planmap.sharding import LogicalMesh, ShardingTables, reshard_collectives, reshard_matrix, to_assignment
from planmap.sharding.reshard import ReshardCache
from tests.sharding.graphs import mlp, topology

B, D, H = 64, 128, 256


@pytest.fixture(scope="module")
def tables():
    topo = topology("h100-1x8")
    return ShardingTables.build(mlp(B, D, H), topo, LogicalMesh.build(topo, (4,), range(4)))


def _by_specs(t, u):
    return {(t.strategy(u, s).out, t.strategy(u, s).inputs): t.strategy(u, s) for s in range(t.sets[u].size)}


def test_dot_general_on_a_1d_mesh_of_4(tables):
    t, mesh = tables, tables.mesh
    st = _by_specs(t, 0)  # x[B,D] @ W1[D,H]
    assert len(st) == t.sets[0].size == 6  # replicated, batch, column, row, 2 reduce-scatters
    rep = st[(((), ()), (((), ()), ((), ())))]
    dp = st[(((0,), ()), (((0,), ()), ((), ())))]
    col = st[(((), (0,)), (((), ()), ((), (0,))))]
    row = st[(((), ()), (((), (0,)), ((0,), ())))]
    rs = st[(((0,), ()), (((), (0,)), ((0,), ())))]
    launch = t.topology.overhead[0]
    assert dp.comm == col.comm == 0 and dp.collectives == col.collectives == ()
    assert dp.compute == pytest.approx((rep.compute - launch) / 4 + launch)
    out_bytes = B * H * 4
    assert row.collectives == (("all-reduce", (0,), out_bytes),)
    assert row.comm == pytest.approx(t.topology.allreduce_time(out_bytes, [0, 1, 2, 3]))
    assert rs.collectives == (("reduce-scatter", (0,), out_bytes),)
    assert rs.comm == pytest.approx(t.topology.reduce_scatter_time(out_bytes, [0, 1, 2, 3]))
    assert rs.comm < row.comm and rs.compute == row.compute == dp.compute
    assert float(mesh.allreduce(out_bytes, 0)) == pytest.approx(row.comm)


def test_indivisible_dims_are_not_split_and_units_stay_replicated():
    topo = topology("h100-1x8")
    g = mlp(6, D, H)  # batch 6 is not divisible by 4
    t = ShardingTables.build(g, topo, LogicalMesh.build(topo, (4,), range(4)))
    outs = {t.strategy(0, s).out for s in range(t.sets[0].size)}
    assert ((0,), ()) not in outs and ((), (0,)) in outs
    from dataclasses import replace
    unit = replace(g, dim_maps=(None,) + g.dim_maps[1:])
    tu = ShardingTables.build(unit, topo, LogicalMesh.build(topo, (4,), range(4)))
    assert tu.sets[0].size == 1 and tu.strategy(0, 0).inputs == (((), ()), ((), ()))


def test_reshard_costs_axis_by_axis():
    topo = topology("h100-1x8")
    mesh = LogicalMesh.build(topo, (2, 4), range(8))
    nbytes = 1 << 20
    rep, d0, d1, d0_01 = ((), ()), ((1,), ()), ((), (1,)), ((0, 1), ())
    specs = np.array([to_assignment(s, 2) for s in (rep, d0, d1, d0_01)])
    m = reshard_matrix(specs, specs, nbytes, mesh)
    assert np.all(np.diag(m) == 0)
    assert m[0, 1] == 0 and m[0, 3] == 0  # slicing is free
    assert m[1, 0] == pytest.approx(topo.allgather_time(nbytes, [0, 1, 2, 3]))
    assert m[1, 2] == pytest.approx(topo.alltoall_time(nbytes / 4, [0, 1, 2, 3]))
    assert m[3, 1] == pytest.approx(float(mesh.allgather(nbytes / 4, 0)))  # drop axis 0 only
    assert reshard_collectives(specs[1], specs[2], nbytes, mesh) == (("all-to-all", (1,), nbytes / 4),)
    assert reshard_collectives(specs[0], specs[2], nbytes, mesh) == ()
    cache = ReshardCache(mesh)
    a = cache.matrix((8, 8), nbytes, specs, specs)
    assert cache.matrix((8, 8), nbytes, specs.copy(), specs.copy()) is a and cache.hits == 1 and len(cache) == 1


def test_edge_cost_expands_the_distinct_matrix(tables):
    t = tables
    for e in range(t.num_edges):
        full = t.edge_cost(e)
        src, dst, k = int(t.edge_src[e]), int(t.edge_dst[e]), int(t.edge_pos[e])
        assert full.shape == (t.sets[src].size, t.sets[dst].size)
        for s in range(t.sets[src].size):
            for r in range(t.sets[dst].size):
                same = np.array_equal(t.sets[src].out[s], t.sets[dst].inputs[k][r])
                assert (full[s, r] == 0) or not same
