"""The cost model and the cluster's collectives against numbers computed by hand.

Cluster: two hosts, each a CPU and two GPUs; GPUs of a host share an NVLink (intraHost), hosts a
network (interHost), and host memory is reached over PCIe (hostDevice). Device order:
0 cpu(host0), 1-2 gpus(host0), 3 cpu(host1), 4-5 gpus(host1).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from planmap.cluster import Topology
from planmap.cost import CostModel
from planmap.graph import OpGraph
from planmap.spec.models import ClusterBody

B = 10**6  # bytes of the value moved in the transfer tests
HD = 1e-6 + B / 10e9  # PCIe: 1us + B / 10 GB/s
NV = B / 100e9  # NVLink: no latency, 100 GB/s
NET = 10e-6 + B / 1e9  # network: 10us + B / 1 GB/s


def cluster() -> Topology:
    return Topology.from_spec(ClusterBody.model_validate({
        "deviceTypes": [
            {"name": "cpu", "kind": "cpu", "memoryBandwidth": "100GB/s", "efficiency": 1.0,
             "peakFlops": [{"dtype": "f32", "rate": "1TFLOP/s"}]},
            {"name": "gpu", "kind": "gpu", "memory": "80GB", "memoryBandwidth": "1TB/s", "efficiency": 0.5,
             "opOverhead": "2us", "peakFlops": [{"dtype": "f32", "rate": "100TFLOP/s"},
                                                {"dtype": "bf16", "rate": "400TFLOP/s"}]},
        ],
        "hosts": [{"name": "node", "count": 2, "devices": [{"name": "cpu", "type": "cpu"},
                                                           {"name": "gpu", "type": "gpu", "count": 2}],
                   "intraHost": {"bandwidth": "100GB/s"}}],
        "links": {"hostDevice": {"bandwidth": "10GB/s", "latency": "1us"},
                  "interHost": {"bandwidth": "1GB/s", "latency": "10us"}},
    }))


def graph(*, measured=None, value_time=(math.nan,) * 3, backward=None, dtype=("f32", "bf16", "f32")) -> OpGraph:
    """Nodes 0 -> 1 -> 2 and 0 -> 2; node 0's value v0 is read twice by node 2 (two operands)."""
    e = np.array([(0, 1), (0, 2), (0, 2), (1, 2)])
    return OpGraph(name="hand", kind=("op",) * 3, op_name=("a", "b", "c"), flops=np.array([2e12, 4e12, 0.0]),
                   bytes_accessed=np.array([1e9, 1e9, 4e9]), out_bytes=np.array([B, 2 * B, 0]),
                   state_bytes=np.zeros(3, np.int64), dtype=dtype, value_node=np.arange(3),
                   value_index=np.zeros(3), value_bytes=np.array([B, 2 * B, 0]), value_time=np.array(value_time),
                   edge_value=e[:, 0], edge_dst=e[:, 1], measured=measured or {},
                   backward=None if backward is None else np.array(backward))


def test_roofline_per_dtype_and_device_type_with_kernel_launches():
    cost = CostModel.build(graph(), cluster(), kernels=np.array([1, 3, 1]))
    gpu = [max(2e12 / 100e12, 1e9 / 1e12) / 0.5 + 2e-6,  # f32: flops bound
           max(4e12 / 400e12, 1e9 / 1e12) / 0.5 + 3 * 2e-6,  # bf16 at its own peak; three kernels
           max(0.0, 4e9 / 1e12) / 0.5 + 2e-6]  # memory bound
    cpu = [max(2e12 / 1e12, 1e9 / 100e9), max(4e12 / 1e12, 1e9 / 100e9), 4e9 / 100e9]  # bf16: the only peak
    assert cost.compute[:, 1] == pytest.approx(gpu) and cost.compute[:, 0] == pytest.approx(cpu)
    assert cost.device_compute[:, 4] == pytest.approx(gpu) and cost.device_compute[:, 3] == pytest.approx(cpu)


def test_measured_times_override_the_roofline():
    measured = {"gpu": np.array([1.0, np.nan, 3.0]), "cpu": np.array([5.0, 6.0, 7.0])}
    cost = CostModel.build(graph(measured=measured), cluster())
    assert cost.compute[:, 1].tolist() == [1.0, math.inf, 3.0] and cost.compute[:, 0].tolist() == [5.0, 6.0, 7.0]
    assert cost.supported[:, 1].tolist() == [True, False, True]


@pytest.mark.parametrize("src, dst, send, recv", [
    (1, 2, 0.0, NV),  # NVLink: the receiver pulls
    (1, 0, HD, 0.0),  # GPU -> its host's CPU: the GPU pays PCIe, the CPU nothing
    (0, 1, 0.0, HD),  # CPU -> GPU: the GPU pays PCIe
    (0, 0, 0.0, 0.0),
    (1, 4, 0.0, NET),  # across hosts: the receiver pays the network
    (1, 3, NET, 0.0),  # ... unless it is a CPU: the sending GPU does
    (0, 3, 0.0, NET),  # CPU to CPU across hosts: the receiving CPU
])
def test_send_and_receive_charges_per_link_kind(src, dst, send, recv):
    cost = CostModel.build(graph(), cluster())
    assert float(cost.send_cost(0, src, dst)) == pytest.approx(send)
    assert float(cost.recv_cost(0, src, dst)) == pytest.approx(recv)


def test_measured_transfer_time_replaces_the_estimate_where_paid():
    cost = CostModel.build(graph(value_time=(0.5, math.nan, math.nan)), cluster())
    assert cost.recv_cost([0, 1], 1, 4).tolist() == pytest.approx([0.5, 10e-6 + 2 * B / 1e9])
    assert float(cost.send_cost(0, 1, 4)) == 0.0  # not paid: no charge, measured or not
    assert float(cost.host_io_cost(1)) == pytest.approx(1e-6 + 2 * B / 10e9)


def test_working_set_counts_each_distinct_input_once():
    cost = CostModel.build(graph(), cluster())
    # node 2 reads v0 twice (once counted) and v1; node 1 reads v0; plus each node's own output
    assert cost.working_set.tolist() == [B, 2 * B + B, 0 + B + 2 * B]


def test_stash_bytes_in_training():
    g = graph(backward=[False, False, True])  # v0 and v1 are kept from the forward pass for node 2
    assert CostModel.build(g, cluster(), mode="training").stash_bytes.tolist() == [B, 2 * B, 0]
    assert CostModel.build(g, cluster()).stash_bytes.tolist() == [0, 0, 0]
    assert CostModel.build(g, cluster(), mode="training", optimizer="adam").param_factor == 4.0


def test_collectives_ring_tree_allgather_alltoall():
    topo = cluster()
    n = 8e6
    # two GPUs on NVLink: ring 2(p-1)/p n ibw = n/100e9; tree 2 log2(2) n ibw = 2n/100e9 -> ring
    assert topo.allreduce_time(n, [1, 2]) == pytest.approx(n / 100e9)
    # four GPUs over two hosts: the slowest ring hop is the network (10us, 1 GB/s)
    ring = 2 * 3 / 4 * n / 1e9 + 2 * 3 * 10e-6
    tree = 2 * 2 * (10e-6 + n / 1e9)
    assert topo.allreduce_time(n, [1, 2, 4, 5]) == pytest.approx(min(ring, tree)) == pytest.approx(ring)
    # tiny messages: the tree's fewer latencies win
    small = 8.0
    assert topo.allreduce_time(small, [1, 2, 4, 5]) == pytest.approx(2 * 2 * (10e-6 + small / 1e9))
    assert topo.allgather_time(n, [1, 2, 4, 5]) == pytest.approx(3 / 4 * n / 1e9 + 3 * 10e-6)
    assert topo.reduce_scatter_time(n, [1, 2, 4, 5]) == topo.allgather_time(n, [1, 2, 4, 5])
    assert topo.alltoall_time(n, [1, 2]) == pytest.approx(1 / 2 * n / 100e9)
    assert topo.allreduce_time(n, [1]) == topo.allgather_time(0, [1, 2]) == topo.alltoall_time(n, []) == 0.0
