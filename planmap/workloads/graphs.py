"""Profiled operator graphs built in code: hand-made examples for tests, random DAGs for benchmarks.

Profiled graphs carry measured times per device kind (here "cpu" and "accelerator", as in the
inputs of Tarnawski et al.) instead of FLOPs, and a transfer time per node output (their ``c_u``).
Each node has exactly one output value, so node ``i`` produces value ``i``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from planmap.graph import OpGraph

__all__ = ["profiled_graph", "random_dag", "layered_dag"]


def profiled_graph(
    edges: Sequence[tuple[int, int]],
    cpu: Sequence[float] | np.ndarray,
    acc: Sequence[float] | np.ndarray,
    comm: Sequence[float] | np.ndarray | float = 0.0,
    *,
    size: Sequence[float] | np.ndarray | float = 0.0,
    colocation: Sequence[int] | np.ndarray | None = None,
    backward: Sequence[bool] | np.ndarray | None = None,
    name: str = "synthetic",
    out_bytes: Sequence[int] | int = 0,
    layer: Sequence[int] | np.ndarray | None = None,
) -> OpGraph:
    """A profiled OpGraph: times in seconds per node (NaN in ``acc`` = not supported there), ``comm``
    the transfer time of each node's output, ``size`` bytes resident wherever the node runs.

    ``edges`` must go from lower to higher node ids (topological numbering); ``layer``: repeated-layer id
    per node (-1: none), what activation checkpointing recomputes.
    """
    n = len(cpu)
    e = np.asarray(list(edges), np.int64).reshape(-1, 2)
    comm_a = np.broadcast_to(np.asarray(comm, float), (n,)).copy()
    size_a = np.broadcast_to(np.asarray(size, float), (n,)).astype(np.int64)
    ob = np.broadcast_to(np.asarray(out_bytes, np.int64), (n,)).copy()
    return OpGraph(
        name=name,
        kind=("op",) * n,
        op_name=tuple(f"{name}/n{i}" for i in range(n)),
        flops=np.zeros(n),
        bytes_accessed=np.zeros(n),
        out_bytes=ob,
        state_bytes=size_a,
        dtype=("f32",) * n,
        value_node=np.arange(n),
        value_index=np.zeros(n),
        value_bytes=ob,
        value_time=comm_a,
        edge_value=e[:, 0] if len(e) else np.zeros(0, np.int64),
        edge_dst=e[:, 1] if len(e) else np.zeros(0, np.int64),
        measured={"cpu": np.asarray(cpu, float), "accelerator": np.asarray(acc, float)},
        colocation=None if colocation is None else np.asarray(colocation),
        backward=None if backward is None else np.asarray(backward, bool),
        layer=None if layer is None else np.asarray(layer),
    )


def random_dag(n: int, *, seed: int = 0, density: float = 0.3, max_back: int = 4, cpu_slowdown: float = 8.0,
               comm_scale: float = 0.3, unsupported: float = 0.0, size_scale: float = 1.0,
               name: str | None = None) -> OpGraph:
    """A random connected DAG: node i depends on i-1 (a backbone) and, with probability ``density``,
    on up to ``max_back`` earlier nodes (skip connections). Times are lognormal; CPU is slower by
    ``cpu_slowdown`` on average; ``unsupported`` is the share of nodes accelerators cannot run."""
    rng = np.random.default_rng(seed)
    edges = []
    for i in range(1, n):
        edges.append((i - 1, i))
        if i > 1 and rng.random() < density:
            k = int(rng.integers(1, min(max_back, i - 1) + 1))
            for j in rng.choice(np.arange(max(0, i - 1 - 4 * max_back), i - 1), size=min(k, i - 1), replace=False):
                edges.append((int(j), i))
    acc = rng.lognormal(0.0, 0.6, n)
    cpu = acc * rng.lognormal(np.log(cpu_slowdown), 0.5, n)
    acc[rng.random(n) < unsupported] = np.nan
    comm = rng.lognormal(np.log(comm_scale), 0.5, n)
    size = rng.lognormal(0, 0.5, n) * size_scale
    return profiled_graph(sorted(set(edges)), cpu, acc, comm, size=size * 1e6, name=name or f"random{n}s{seed}")


def layered_dag(layers: int, width: int, *, seed: int = 0, cpu_slowdown: float = 8.0, comm_scale: float = 0.3,
                training: bool = False, name: str | None = None) -> OpGraph:
    """A network of ``layers`` repeated blocks of ``width`` parallel branches joined at each block's end
    (BERT-, Inception-like). With ``training``, every forward node gets a backward twin (reverse
    topological order, same colocation class) like the paper's training graphs."""
    rng = np.random.default_rng(seed)
    edges, n = [], 0
    prev_join = None
    for _ in range(layers):
        branch_ends = []
        for _ in range(width):
            a = n
            n += 1
            if prev_join is not None:
                edges.append((prev_join, a))
            b = n
            n += 1
            edges.append((a, b))
            branch_ends.append(b)
        join = n
        n += 1
        edges += [(b, join) for b in branch_ends]
        prev_join = join
    acc = rng.lognormal(0, 0.6, n)
    cpu = acc * rng.lognormal(np.log(cpu_slowdown), 0.4, n)
    comm = rng.lognormal(np.log(comm_scale), 0.5, n)
    size = rng.lognormal(0, 0.5, n) * 1e6
    if not training:
        return profiled_graph(edges, cpu, acc, comm, size=size, name=name or f"layered{layers}x{width}")
    # backward twins: node i -> 2n-1-i, edges reversed; forward output of i feeds its twin (stash)
    N = 2 * n
    bedges = [(N - 1 - v, N - 1 - u) for u, v in edges] + [(i, N - 1 - i) for i in range(n)]
    bwd = lambda a: np.concatenate([a, a[::-1] * 2.0])  # noqa: E731 - backward ~2x forward
    coloc = np.concatenate([np.arange(n), np.arange(n)[::-1]])
    back = np.concatenate([np.zeros(n, bool), np.ones(n, bool)])
    return profiled_graph(sorted(set(edges + bedges)), bwd(cpu), bwd(acc), np.concatenate([comm, comm[::-1]]),
                          size=np.concatenate([size, np.zeros(n)]), colocation=coloc, backward=back,
                          name=name or f"layered{layers}x{width}-train")


def paper_topology(accelerators: int = 4, cpus: int = 1, *, memory: float | int = 16 * 2**30,
                   accelerator_kind: str = "accelerator"):
    """The cluster of Tarnawski et al.: ``cpus`` CPUs and ``accelerators`` accelerators of ``memory``
    bytes each, connected only through host memory (so a transfer is paid at every accelerator end)."""
    from planmap.cluster import Topology
    from planmap.spec.models import ClusterBody

    devices = [{"name": "acc", "type": "acc", "count": accelerators}]
    if cpus:
        devices.insert(0, {"name": "cpu", "type": "cpu", "count": cpus})
    body = ClusterBody.model_validate({
        "deviceTypes": [
            {"name": "cpu", "kind": "cpu", "memoryBandwidth": "100GB/s",
             "peakFlops": [{"dtype": "f32", "rate": "1TFLOP/s"}]},
            {"name": "acc", "kind": accelerator_kind, "memory": int(memory), "memoryBandwidth": "1TB/s",
             "peakFlops": [{"dtype": "f32", "rate": "100TFLOP/s"}]},
        ],
        "hosts": [{"name": "host", "devices": devices}],
        "links": {"hostDevice": {"bandwidth": "16GB/s"}},
    })
    return Topology.from_spec(body)
