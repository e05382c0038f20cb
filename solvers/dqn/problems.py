"""Problem distributions for the DQN: synthetic graphs and clusters (pre-training) and a held-out set.

Pre-training draws from :mod:`planmap.workloads` — GNMT- and ResNet-shaped layer graphs, random DAGs (20-80 nodes) and
layered (Inception-like) DAGs, inference and training (1F1B) — on the paper's cluster (a CPU and 2-8
accelerators through host memory) and on GPU hosts (NVLink inside, a network between; replication
allowed), with memory from "just fits" to roomy. The held-out set uses graphs the pre-training never
sees: BERT at operator granularity, Inception-v3, other seeds and sizes of the random graphs, and 2-host
clusters (the bench adds the exported example models).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from planmap.cluster import Topology
from planmap.problem import Problem
from planmap.workloads.graphs import layered_dag, paper_topology, random_dag
from planmap.workloads.pipelines import tight_memory, workload

__all__ = ["gpu_cluster", "sample_problem", "held_out", "PRETRAIN_SEEDS"]

PRETRAIN_SEEDS = range(0, 1000)  # seeds the pre-training draws from; held-out problems use others


def gpu_cluster(hosts: int, per_host: int, memory: float) -> Topology:
    """``hosts`` x ``per_host`` GPUs: fast links inside a host, a 10x slower network between hosts."""
    from planmap.spec.models import ClusterBody

    body = ClusterBody.model_validate({
        "deviceTypes": [{"name": "gpu", "kind": "gpu", "memory": int(memory), "memoryBandwidth": "2TB/s",
                         "peakFlops": [{"dtype": "f32", "rate": "100TFLOP/s"}]}],
        "hosts": [{"name": "node", "count": hosts, "devices": [{"name": "gpu", "type": "gpu", "count": per_host}]}],
        "links": {"intraHost": {"bandwidth": "300GB/s"}, "interHost": {"bandwidth": "25GB/s"},
                  "hostDevice": {"bandwidth": "32GB/s"}},
    })
    return Topology.from_spec(body)


def _graph(rng: np.random.Generator, training: bool, seed: int):
    kind = int(rng.integers(4))
    if kind == 0:
        return workload("gnmt-layers", training=training, seed=seed)
    if kind == 1:
        return workload("resnet50-layers", training=training, seed=seed)
    if kind == 2:
        return random_dag(int(rng.integers(20, 80)), seed=seed)
    return layered_dag(int(rng.integers(4, 16)), int(rng.integers(1, 4)), seed=seed, training=training)


def _problem(g, rng: np.random.Generator, training: bool, hosts: int | None = None, max_hosts: int = 2) -> Problem:
    kw: dict[str, Any] = dict(mode="training", schedule="1f1b", microbatches=int(rng.choice([2, 4, 8]))) if (
        training and g.backward.any()) else {}
    slack = float(rng.choice([1.1, 1.3, 2.0, 4.0]))
    if hosts is None and rng.random() < 0.5:
        k = int(rng.integers(2, 9))
        return Problem.from_graph(g, paper_topology(k, memory=tight_memory(g, k, slack=slack, **kw)), **kw)
    hosts = hosts or int(rng.integers(1, max_hosts + 1))
    per = int(rng.choice([2, 4, 8])) if hosts == 1 else int(rng.choice([2, 4]))
    mem = tight_memory(g, hosts * per, slack=slack * 2, **kw)
    return Problem.from_graph(g, gpu_cluster(hosts, per, mem), replication=True, **kw)


def sample_problem(rng: np.random.Generator) -> Problem:
    """One pre-training problem."""
    training = bool(rng.random() < 0.5)
    seed = int(rng.integers(len(PRETRAIN_SEEDS)))
    return _problem(_graph(rng, training, seed), rng, training)


def held_out(count: int = 30, seed: int = 12345) -> list[tuple[str, Callable[[], Problem]]]:
    """``count`` problems outside the pre-training distribution, as (name, builder): every third on 2 hosts
    (named ``-2host``), the others on one host (the paper's CPU + accelerators, or one GPU host), where the
    exact DP is exact and gives the reference."""
    rng = np.random.default_rng(seed)
    out: list[tuple[str, Callable[[], Problem]]] = []
    families = [("bert3-ops", lambda s, t: workload("bert3-ops", training=t, seed=s)),
                ("bert12-ops", lambda s, t: workload("bert12-ops", training=t, seed=s)),
                ("gnmt-sinks", lambda s, t: workload("gnmt-sinks-layers", training=t, seed=s)),
                ("random100", lambda s, t: random_dag(100, seed=s)),
                ("layered16x2", lambda s, t: layered_dag(16, 2, seed=s, training=t))]
    i = 0
    while len(out) < count:
        fam, build = families[i % len(families)]
        training = bool(i % 2) and fam != "random100"  # random DAGs have no backward pass
        s = 5000 + i
        hosts = 2 if i % 3 == 2 else None
        r = np.random.default_rng(int(rng.integers(1 << 30)))

        def make(build=build, s=s, training=training, hosts=hosts, r=r) -> Problem:
            g = build(s, training)
            return _problem(g, np.random.default_rng(r.integers(1 << 30)), training, hosts, max_hosts=1)

        out.append((f"{fam}{'-train' if training else ''}{'-2host' if hosts else ''}-s{s}", make))
        i += 1
    return out
