import numpy as np
import pytest

from planmap.sharding import (
    LogicalMesh,
    from_partition_spec,
    is_valid,
    logical_meshes,
    partition_spec,
    shards,
)
from tests.sharding.graphs import topology

INTRA = (2e-6, 1 / 450e9)
INTER = (5e-6, 1 / 50e9)


def test_one_host_of_8_factorises_every_way():
    meshes = logical_meshes(topology("h100-1x8"))
    assert [m.axis_sizes for m in meshes] == [(8,), (2, 4), (4, 2), (2, 2, 2)]
    for m in meshes:
        assert set(m.scope) == {"intra"}
        assert np.allclose(m.latency, INTRA[0]) and np.allclose(m.inv_bw, INTRA[1])
        assert m.devices.tolist() == list(range(8))


def test_two_hosts_keep_inner_axes_inside_a_host():
    meshes = logical_meshes(topology("h100-2x8"))
    assert [m.axis_sizes for m in meshes] == [(16,), (2, 8), (4, 4), (8, 2), (2, 2, 4), (2, 4, 2), (4, 2, 2)]
    by = {m.axis_sizes: m for m in meshes}
    assert by[(2, 8)].scope == ("inter", "intra")
    assert by[(2, 8)].latency == pytest.approx((INTER[0], INTRA[0]))
    assert by[(2, 8)].inv_bw[0] == pytest.approx(INTER[1]) and by[(2, 8)].inv_bw[1] == pytest.approx(INTRA[1])
    assert by[(16,)].scope == ("inter",) and by[(16,)].inv_bw[0] == pytest.approx(INTER[1])
    assert by[(4, 2, 2)].scope == ("inter", "intra", "intra")
    assert by[(2, 8)].groups(0).tolist()[0] == [0, 8]


def test_a_factorisation_that_straddles_hosts_is_refused():
    topo = topology("h100-2x8")
    devs = [d for d in range(16) if d % 8 < 6]  # 6 per host
    sizes = [m.axis_sizes for m in logical_meshes(topo, devs)]
    assert (4, 3) in sizes and (2, 6) in sizes and (3, 4) not in sizes and (12,) in sizes
    assert logical_meshes(topo, [0, 1, 2, 8]) == []  # 3 + 1 devices per host


def test_mixed_device_types_give_no_mesh_and_one_device_gives_size_one():
    topo = topology("a100-h100-mixed")
    assert len(np.unique(topo.device_type[topo.accelerators])) > 1
    assert logical_meshes(topo) == []
    one = logical_meshes(topology("h100-1x8"), [3])
    assert len(one) == 1 and one[0].axis_sizes == (1,) and one[0].devices.tolist() == [3]


@pytest.mark.parametrize("kind,fn", [("all-reduce", "allreduce_time"), ("all-gather", "allgather_time"),
                                     ("reduce-scatter", "reduce_scatter_time"), ("all-to-all", "alltoall_time")])
def test_collectives_equal_the_topology_on_the_same_groups(kind, fn):
    topo = topology("h100-2x8")
    for m in logical_meshes(topo):
        for a in range(m.num_axes):
            group = m.groups(a)[-1]
            for b in (0.0, 1e3, 3e6, 5e8):
                assert float(m.collective(kind, b, a)) == pytest.approx(getattr(topo, fn)(b, group), rel=1e-12)
    mesh = LogicalMesh.build(topo, (2, 8), range(16))
    b = np.array([1e3, 1e6])
    assert np.allclose(mesh.allreduce(b, (0, 1)), mesh.allreduce(b, 0) + mesh.allreduce(b, 1))


def test_specs_validity_and_partition_spec_round_trip():
    sizes = (2, 4)
    assert is_valid(((0,), (1,)), (8, 8), sizes) and not is_valid(((0,), (0,)), (8, 8), sizes)
    assert not is_valid(((1,), ()), (6, 8), sizes) and not is_valid(((1, 0),), (8,), sizes)
    assert shards(((0, 1), ()), sizes) == 8
    names = ("data", "tensor")
    ps = partition_spec(((0, 1), (), (1,)), names)
    assert ps == [["data", "tensor"], None, "tensor"]
    assert from_partition_spec(ps, names) == ((0, 1), (), (1,))
    with pytest.raises(ValueError, match="unknown mesh axis"):
        from_partition_spec(["pipe"], names)
