"""The per-axis explanation of an SPMD layout: links, time per axis, compute vs communication, memory."""

import pytest

from planmap.sharding import LogicalMesh, ShardingTables, evaluate_spmd, propagate
from planmap.sharding.summary import axis_summaries, spmd_lines
from tests.sharding.graphs import mlp, topology


def test_axes_say_where_their_links_run_and_their_times_add_up_to_the_communication():
    topo = topology("h100-2x8")
    mesh = LogicalMesh.build(topo, (2, 2), [0, 1, 8, 9])  # outer axis across the two hosts, inner inside one
    t = ShardingTables.build(mlp(256, 1024, 512, train=True), topo, mesh, mode="training", optimizer="sgd")
    ev = evaluate_spmd(t, propagate(t, {0: ((0,), ()), 1: ((), (1,)), 2: ((1,), ()), 3: ((0,), ())}))
    data, tensor = axis_summaries(mesh, ("data", "tensor"), ev)
    assert (data.scope, tensor.scope) == ("inter", "intra") and data.bandwidth < tensor.bandwidth
    assert data.collectives > 0 and tensor.collectives > 0
    assert data.comm + tensor.comm == pytest.approx(ev.comm + ev.reshard, rel=1e-9)
    lines = spmd_lines(mesh, ("data", "tensor"), ev)
    assert lines[0] == "mesh: data=2 across hosts, tensor=2 inside a host"
    assert "compute" in lines[-2] and "communication" in lines[-2]
    assert lines[-1].startswith("memory per device") and "params" in lines[-1] and "DOES NOT FIT" not in lines[-1]
