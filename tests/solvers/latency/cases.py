"""Shared latency-IP test cases: latency problems, every placement of a small one, random DAGs
costed from bytes, and CPU + GPU clusters whose transfer charges depend on the link (NVLink inside a
host, a network between hosts)."""

from __future__ import annotations

import itertools

import numpy as np

from planmap.cluster import Topology
from planmap.problem import Certificate, Problem, Solution, Stage, Status
from planmap.spec.models import ClusterBody
from planmap.workloads.graphs import profiled_graph, random_dag

CERT = Certificate(Status.HEURISTIC, "enumeration")


def placement(calls: list[tuple[int, list[int]]], n: int) -> Solution:
    """The placement with one stage per ``(device, nodes)`` entry, in that order."""
    a = np.zeros(n, np.int32)
    for k, (_, nodes) in enumerate(calls):
        a[nodes] = k
    return Solution(a, tuple(Stage((d,)) for d, _ in calls), CERT)


def problem(g, topo, q=1, **kw) -> Problem:
    """A latency problem with at most ``q`` subgraphs per accelerator (contiguous when ``q`` = 1)."""
    return Problem.from_graph(g, topo, objective="latency", max_subgraphs=q, contiguous=q == 1, **kw)


def placements(p: Problem):
    """Every placement of nodes on units (CPU devices, and q ordered subgraph slots per accelerator:
    both orders of two subgraphs are different labelings; an empty slot before a used one is skipped,
    as the same placement relabelled)."""
    topo, q = p.topology, p.max_subgraphs
    units = [(d, 0) for d in range(topo.num_devices) if topo.is_cpu[d]]
    units += [(d, k) for d in range(topo.num_devices) if not topo.is_cpu[d] for k in range(q)]
    choices = [[u for u, (d, _) in enumerate(units) if p.allowed[v, d]] for v in range(p.num_nodes)]
    for lab in itertools.product(*choices):
        used = sorted(set(lab))
        if any(k > 0 and units.index((d, k - 1)) not in used for d, k in (units[u] for u in used)):
            continue
        idx = {u: i for i, u in enumerate(used)}
        yield Solution(np.array([idx[u] for u in lab]), tuple(Stage((units[u][0],)) for u in used), CERT)


def optimum(p: Problem) -> float:
    """The least feasible latency over every placement (:func:`placements`) under ``evaluate``; inf if none."""
    from planmap.evaluate import evaluate

    return min((ev.objective for ev in (evaluate(p, sol) for sol in placements(p)) if ev.feasible), default=np.inf)


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
            {"name": "cpu", "kind": "cpu", "memoryBandwidth": "100GB/s",
             "peakFlops": [{"dtype": "f32", "rate": "1TFLOP/s"}]},
            {"name": "gpu", "kind": "gpu", "memory": int(memory), "memoryBandwidth": "1TB/s",
             "peakFlops": [{"dtype": "f32", "rate": "100TFLOP/s"}]}],
        "hosts": [{"name": "h", "count": hosts, "devices": [{"name": "cpu", "type": "cpu"},
                                                            {"name": "gpu", "type": "gpu",
                                                             "count": 2 if hosts == 1 else 1}]}],
        "links": links}))
