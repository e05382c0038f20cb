"""Structural checks every throughput and latency evaluation shares: which stages are contiguous, the
order of stages under the graph's edges, and whether nodes run where they may (supported devices,
pins, colocation classes). Split from :mod:`planmap.evaluate` so that the evaluator's branches
(pipelines and placements, whole-cluster plans in :mod:`planmap.evaluate_stages`) use one definition.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from planmap.graph import topological_order
from planmap.problem import Problem, Solution

__all__ = ["nonconvex_units", "quotient_order", "flatten_groups", "placement_checks"]


def nonconvex_units(graph, unit: np.ndarray, mask: np.ndarray | None = None) -> list[int]:
    """Units (stage or group ids per node) whose node set is not convex: some path leaves and re-enters.

    With ``mask``, only the subgraph induced by the masked nodes counts (training: the forward graph).
    """
    n = graph.num_nodes
    if n == 0:
        return []
    pindptr, pids = graph.pred
    sindptr, sids = graph.succ
    unit_l = unit.tolist()
    bit = [1 << u for u in unit_l]
    if mask is not None:
        bit = [b if m else 0 for b, m in zip(bit, mask.tolist(), strict=True)]
    down = [0] * n  # units with a path into v (through at least one edge)
    for v in range(n):
        m = 0
        if bit[v] or mask is None:
            for u in pids[pindptr[v]: pindptr[v + 1]].tolist():
                m |= down[u] | bit[u]
        down[v] = m
    bad = 0
    up = [0] * n
    for v in range(n - 1, -1, -1):
        m = 0
        if bit[v] or mask is None:
            for w in sids[sindptr[v]: sindptr[v + 1]].tolist():
                m |= up[w] | bit[w]
        up[v] = m
        bad |= (down[v] & m) & ~bit[v]
    return [u for u in range(bad.bit_length()) if bad >> u & 1]


def quotient_order(graph, unit: np.ndarray, num_units: int, extra: Sequence[tuple[int, int]] = (),
                   mask: np.ndarray | None = None) -> list[int] | None:
    """A topological order of units under the node edges (plus ``extra`` unit edges); None on a cycle.

    With ``mask``, only edges between masked nodes count (training: the forward graph)."""
    s, d = graph.node_edges
    us, ud = unit[s], unit[d]
    keep = us != ud
    if mask is not None:
        keep &= mask[s] & mask[d]
    pairs = set(zip(us[keep].tolist(), ud[keep].tolist(), strict=True)) | set(extra)
    return topological_order(num_units, sorted(pairs))


def flatten_groups(groups: Sequence[tuple[int, ...]]) -> tuple[np.ndarray, np.ndarray]:
    """``(devices, group index)`` of every (group, distinct device) pair, in group order: no G x D matrix."""
    distinct = [tuple(dict.fromkeys(devs)) for devs in groups]
    lens = np.fromiter((len(devs) for devs in distinct), np.int64, len(distinct))
    flat = np.fromiter((d for devs in distinct for d in devs), np.int64, int(lens.sum()))
    return flat, np.repeat(np.arange(len(groups)), lens)


def placement_checks(problem: Problem, solution: Solution, group_of: np.ndarray, members: tuple[np.ndarray, np.ndarray],
                   violations: list[str]) -> None:
    """Append the violations of where nodes run: a node on a device it cannot run on (unsupported or
    pinned elsewhere), a colocation class split across device groups."""
    g, topo = problem.graph, problem.topology
    names = topo.names
    # every node where it may run (all devices of its group)
    flat, owner = members
    starts = np.concatenate([[0], np.cumsum(np.bincount(owner))])
    size = starts[1:] - starts[:-1]
    node = np.repeat(np.arange(len(group_of)), size[group_of])  # one row per (node, device of its group)
    at = np.arange(len(node)) - np.repeat(np.cumsum(size[group_of]) - size[group_of], size[group_of])
    dev = flat[starts[group_of][node] + at]
    bad = np.unique(node[~problem.allowed[node, dev]])
    if len(bad):
        i = int(bad[0])
        violations.append(f"{len(bad)} node(s) placed where they cannot run (unsupported or pinned elsewhere), "
                          f"e.g. {g.op_name[i]!r} on {', '.join(names[d] for d in flat[owner == group_of[i]])}")
    cls = g.colocation
    has = cls >= 0
    if has.any():
        c, grp = cls[has], group_of[has]
        order = np.lexsort((grp, c))
        c, grp = c[order], grp[order]
        split = np.flatnonzero((c[1:] == c[:-1]) & (grp[1:] != grp[:-1]))
        if len(split):
            violations.append(f"{len(np.unique(c[split]))} colocation class(es) split across devices, "
                              f"e.g. class {int(c[split[0]])}")
