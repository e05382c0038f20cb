"""The sharding tables on the example exports (front-end DimMaps), on the meshes of the 1x8 cluster."""

import numpy as np
import pytest

from planmap import frontend
from planmap.sharding import ShardingTables, compress, evaluate_spmd, logical_meshes, propagate
from tests.sharding.graphs import ROOT, topology


@pytest.fixture(scope="module")
def mlp_train():
    return frontend.load_model(ROOT / "specs" / "models" / "mlp_train.mlir")


def test_data_parallel_layout_of_the_mlp_training_step(mlp_train):
    g, topo = mlp_train, topology("h100-1x8")
    mesh = logical_meshes(topo)[0]  # (8,)
    t = ShardingTables.build(g, topo, mesh, mode="training")
    assert t.summary()["op_max"] <= 6 and t.num_edges >= len([v for o in g.operands for v in o])
    data = {a.value: ((0,),) + ((),) * (a.type.rank - 1) for a in g.args if a.role == "data"}
    specs = propagate(t, data)
    assert propagate(t, compress(t, specs)) == specs
    dp, rep = evaluate_spmd(t, specs), evaluate_spmd(t, propagate(t, {}))
    assert dp.feasible and 0 < dp.step_time
    assert dp.memory_parts["data"] == pytest.approx(sum(g.value_bytes[v] for v in data) / 8)
    # every parameter gradient of a batch-split step is reduced over the data axis (all-reduce or reduce-scatter)
    assert dp.count("all-reduce") + dp.count("reduce-scatter") >= 1
    assert rep.memory_parts["data"] == sum(g.value_bytes[v] for v in data)


def test_tables_on_every_mesh_have_replicated_first_and_finite_costs(mlp_train):
    topo = topology("h100-1x8")
    for mesh in logical_meshes(topo):
        t = ShardingTables.build(mlp_train, topo, mesh, mode="training")
        for u in range(t.num_units):
            assert not (t.sets[u].out[0] >= 0).any()  # strategy 0 is replicated
            assert np.isfinite(t.compute[u]).all() and np.isfinite(t.comm[u]).all()
        assert all(np.isfinite(m).all() for m in t.edge_matrix)
