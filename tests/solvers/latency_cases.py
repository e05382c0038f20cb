"""Shared latency-IP test cases: random DAGs costed from bytes, and CPU + GPU clusters whose
transfer charges depend on the link (NVLink inside a host, a network between hosts)."""

from __future__ import annotations

import numpy as np

from planmap.cluster import Topology
from planmap.spec.models import ClusterBody
from planmap.synthetic import profiled_graph, random_dag


def bytes_graph(n: int, seed: int, colocation=None):
    """A random DAG whose transfers are costed from bytes (charges depend on the link)."""
    g = random_dag(n, seed=seed)
    rng = np.random.default_rng(seed + 100)
    out = (rng.lognormal(0, 0.7, n) * 1e6).astype(np.int64)
    return profiled_graph(list(zip(g.edge_src.tolist(), g.edge_dst.tolist(), strict=True)),
                          g.measured["cpu"] * 1e-3, g.measured["accelerator"] * 1e-3, np.nan,
                          size=g.state_bytes, out_bytes=out, colocation=colocation, name=f"bytes{n}s{seed}")


def gpu_cluster(memory: float, *, hosts: int = 1) -> Topology:
    """CPU + GPUs: NVLink inside a host (send and receive charges depend on the pair), or two hosts."""
    links = {"hostDevice": {"bandwidth": "1GB/s", "latency": "1ms"}}
    if hosts == 1:
        links["intraHost"] = {"bandwidth": "10GB/s", "latency": "0.1ms"}
    else:
        links["interHost"] = {"bandwidth": "0.5GB/s", "latency": "2ms"}
    return Topology.from_spec(ClusterBody.model_validate({
        "deviceTypes": [
            {"name": "cpu", "kind": "cpu", "memoryBandwidth": "100GB/s", "peakFlops": [{"dtype": "f32", "rate": "1TFLOP/s"}]},
            {"name": "gpu", "kind": "gpu", "memory": int(memory), "memoryBandwidth": "1TB/s",
             "peakFlops": [{"dtype": "f32", "rate": "100TFLOP/s"}]}],
        "hosts": [{"name": "h", "count": hosts, "devices": [{"name": "cpu", "type": "cpu"},
                                                            {"name": "gpu", "type": "gpu", "count": 2 if hosts == 1 else 1}]}],
        "links": links}))
