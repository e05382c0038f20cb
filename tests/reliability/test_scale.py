"""Limits that hold on large inputs (issue 18, item 6), checked by counts and exact results, never by
timings: coarsening merges by size, and the cluster's transfer matrices are built without a D² loop
yet equal, bit for bit, the per-pair rules of :mod:`planmap.cluster`."""

from __future__ import annotations

import numpy as np

from planmap.cluster import Topology, _charge
from planmap.frontend.partition import Partition
from planmap.spec.models import ClusterBody


def test_chain_fusion_reuses_the_larger_member_list():
    """Absorbing a growing chain into each next op copies the one new op, not the whole group, and keeps
    the members in the order of the plain algorithm (the absorbing group's first)."""
    n = 2_000
    part = Partition(n, np.arange(n - 1), np.arange(1, n))
    g = 0
    for nxt in range(1, n):
        big = part.members[g]
        part.absorb(g, nxt)
        if nxt > 1:  # from the second merge on, the absorbed group is the larger one
            assert part.members[nxt] is big  # its list was kept: O(smaller) work per merge
        g = nxt
    assert list(part.members[g]) == list(range(n - 1, -1, -1))  # each absorbing op first, as before
    assignment, order = part.assignment()
    assert order == [n - 1] and (assignment == 0).all()


def test_merging_a_small_group_into_a_large_one_appends():
    part = Partition(4, np.array([0, 1, 2]), np.array([1, 2, 3]))
    part.absorb(1, 2)  # members of 2: [2, 1]
    part.absorb(0, 2)  # a singleton into a pair: appended
    assert list(part.members[2]) == [2, 1, 0]


def _reference(topo: Topology, intra, hd, net) -> dict[str, np.ndarray]:
    """The per-pair rules as a plain loop (small clusters only)."""
    n, cpu, host = topo.num_devices, topo.is_cpu, topo.device_host
    out = {k: np.zeros((n, n)) for k in ("send_lat", "send_ibw", "recv_lat", "recv_ibw", "path_lat", "path_ibw")}
    out |= {"send_paid": np.zeros((n, n), bool), "recv_paid": np.zeros((n, n), bool)}
    for a in range(n):
        for b in range(n):
            if a == b or (host[a] == host[b] and cpu[a] and cpu[b]):
                continue
            if host[a] != host[b]:
                out["path_lat"][a, b], out["path_ibw"][a, b] = net
                side = "recv" if (not cpu[b] or cpu[a]) else "send"
                out[f"{side}_lat"][a, b], out[f"{side}_ibw"][a, b] = net
                out[f"{side}_paid"][a, b] = True
            elif not cpu[a] and not cpu[b] and intra[host[a]] is not None:
                out["recv_lat"][a, b], out["recv_ibw"][a, b] = _charge(intra[host[a]])
                out["path_lat"][a, b], out["path_ibw"][a, b] = _charge(intra[host[a]])
                out["recv_paid"][a, b] = True
            else:
                for side, dev in (("send", a), ("recv", b)):
                    if not cpu[dev]:
                        out[f"{side}_lat"][a, b], out[f"{side}_ibw"][a, b] = hd
                        out[f"{side}_paid"][a, b] = True
                hops = 1 if (cpu[a] or cpu[b]) else 2
                out["path_lat"][a, b], out["path_ibw"][a, b] = hd[0] * hops, hd[1] * hops
    return out


def test_transfer_matrices_equal_the_per_pair_rules():
    body = ClusterBody.model_validate({
        "deviceTypes": [
            {"name": "g", "kind": "gpu", "memory": "8GiB", "memoryBandwidth": "1TB/s",
             "peakFlops": [{"dtype": "f32", "rate": "10TFLOP/s"}]},
            {"name": "c", "kind": "cpu", "memoryBandwidth": "100GB/s",
             "peakFlops": [{"dtype": "f32", "rate": "1TFLOP/s"}]}],
        "hosts": [
            {"name": "a", "count": 2, "devices": [{"name": "cpu", "type": "c", "count": 2},
                                                  {"name": "gpu", "type": "g", "count": 3}]},
            {"name": "b", "intraHost": {"bandwidth": "100GB/s", "latency": "3us"},
             "devices": [{"name": "cpu", "type": "c"}, {"name": "gpu", "type": "g", "count": 2}]},
            {"name": "d", "devices": [{"name": "gpu", "type": "g", "count": 2}]}],
        "links": {"interHost": {"bandwidth": "400Gb/s", "latency": "5us"},
                  "hostDevice": {"bandwidth": "64GB/s", "latency": "5us"}},
    })
    topo = Topology.from_spec(body)
    intra = [None, None, body.hosts[1].intra_host, None]
    want = _reference(topo, intra, _charge(body.links.host_device), _charge(body.links.inter_host))
    for name, ref in want.items():
        got = getattr(topo, name)
        assert got.dtype == ref.dtype and got.tobytes() == ref.tobytes(), name
