"""A lower bound on every plan of the ``cluster`` solver's space: what its certificate proves.

**The space** (stated in the certificate's remarks): for each microbatch count ``M`` tried and each device
order of :func:`~.space.device_order` the solver lays stages out in, every pipeline of ``S ≥ 1`` stages where
stage ``k`` runs a contiguous range ``[i_k, i_{k+1})`` of the layer groups (:func:`~.space.layer_groups`,
covering them all in order) on a submesh of :func:`~.space.submeshes` (submeshes at increasing offsets of
the order, disjoint, devices may stay unused), with *any* complete layout of the stage's tables
(:func:`planmap.sharding.stage.stage_tables`) on any logical mesh of :func:`~.space.stage_meshes` of its
submesh — a superset of the layouts the stage IP (:mod:`.refine`) and the group baselines (:mod:`.costs`) can
return — under the problem's schedule, and that fits memory. A plan is scored as the solver ranks plans: its
time per microbatch ``step / M`` under :func:`planmap.evaluate.evaluate`.

**The bound** (:func:`space_bound`): a table ``lb[i, j, s]`` no slower than any layout of groups ``[i, j)`` on
submesh ``s``, and the exact stage DP (:func:`~.dp.stage_dp`, step formula) on it, for each ``M`` and order.

**Proof.** Take a plan of the space with stages ``k = 1..S`` and evaluated stage times ``T_k`` (seconds per
microbatch). ``evaluate`` gives it the step ``(M + S − 1) · max_k T_k`` (a one-stage SPMD plan: ``M · T_1``,
the same formula at ``S = 1``; the objective variant "max forward + max backward" is no less than
``max_k T_k``). Each ``T_k ≥ lb[range_k, sub_k]``:

* a sharded stage (:mod:`planmap.evaluate_stages`, or the SPMD evaluator for one stage) costs
  ``Σ_ops (compute + collectives + reshards of the op's strategy) + transfers between stages``, every term
  ``≥ 0``; each op the stage runs as one of its own ops pays at least ``min over its strategies of
  compute + collectives`` (:func:`_op_floor`). Op costs depend on the op and the mesh only (the fused op costs
  of :func:`planmap.sharding.tables.fused_op_costs` are per original op), and every op a group's own tables
  run as its own is run as its own by any range holding the group (:func:`~planmap.sharding.stage.stage_ops`
  keeps a superset), so the range's floor is the sum of its groups' floors; the mesh is any of the submesh's,
  so ``lb`` takes the least over them;
* a plan whose stages are all single devices is the plain pipeline evaluator's: a stage costs its coarse
  nodes' compute on its device plus transfers, so for one device ``lb`` is the lesser of that node sum and
  the op floor.

A plan that fits memory has, on every device of stage ``k``, at least the weights its ops read, each held in
``bytes / devices`` at least (whatever the spec; gradients, optimizer state, activations and working sets
only add), so ``lb`` is ``inf`` only where even that exceeds the least capacity of the submesh: no plan of the
space is cut. Hence ``step / M ≥ (M + S − 1) / M · max_k lb_k``, which the DP minimises exactly over the same
ranges, submeshes and stage counts (:mod:`.dp`): its optimum over ``M`` and the orders is a lower bound on the
score of every plan of the space. The solver reports ``min(bound, best candidate judged)``, valid for the space
together with the candidates (baselines and grid points) it judged outside it.

What the bound leaves out (so the gap is an upper bound on the true one): reshards between ops, transfers
between stages, and gradient reductions expressed as reshards (:mod:`planmap.sharding.spmd`) are taken as free.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from planmap.frontend.recompute import recomputed_nodes
from planmap.problem import Problem
from planmap.sharding import LogicalMesh
from planmap.sharding.stage import stage_map, stage_tables

from .costs import mesh_class
from .dp import stage_dp
from .space import LayerGroups, Submesh, stage_meshes, submeshes

__all__ = ["SpaceBound", "BoundTable", "space_bound"]

SLACK = 1e-9  # relative: the bound is shaded by this much against floating-point sums in another order


@dataclass(frozen=True)
class SpaceBound:
    """``score``: seconds per microbatch (step / M) no plan of the space beats (inf: no plan fits);
    ``per_m``: the same per microbatch count; ``states``: DP states; ``seconds``: wall time of the bound."""

    score: float
    per_m: dict[int, float] = field(default_factory=dict)
    states: int = 0
    seconds: float = 0.0


def _op_floor(problem: Problem, ops: np.ndarray, mesh: LogicalMesh) -> float:
    """Seconds per microbatch no layout of the stage of original ops ``ops`` on ``mesh`` beats for those of its
    ops it runs as its own (not recomputed copies): each at its cheapest strategy, reshards free."""
    t = stage_tables(problem, ops, mesh)
    smap = stage_map(t.graph)
    if smap is None:  # stage_tables always builds a stage sub-graph
        raise TypeError("stage tables without a stage map")
    recomputed = recomputed_nodes(problem.original)
    received = set(smap.received.tolist())
    total = 0.0
    for i in np.flatnonzero(smap.own & ~recomputed[smap.ops]).tolist():
        cost = t.compute[i] + t.comm[i]
        for e in range(int(t.edge_ptr[i]), int(t.edge_ptr[i + 1])):
            if int(t.edge_value[e]) not in received:  # its producer's spec is free: the cheapest move
                cost = cost + t.edge_matrix[e].min(axis=0)[t.in_index[i][int(t.edge_pos[e])]]
        for v in t.unit_values(i):
            if v in t.grad_edge:  # the gradient ends in its parameter's spec, whichever that is
                cost = cost + t.edge_matrix[t.grad_edge[v]].min(axis=1)[t.out_index[i]]
        total += float(np.min(cost))
    return total


class BoundTable:
    """Per-group time floors (cached per group signature × mesh class) and the DP's bound table."""

    def __init__(self, problem: Problem, groups: LayerGroups) -> None:
        self.problem, self.groups = problem, groups
        self._floor: dict[tuple, float] = {}
        G, D = groups.num_groups, problem.topology.num_devices
        node_time = np.zeros((G, D))
        np.add.at(node_time, groups.node_group, problem.cost.device_compute)
        self.node_time = node_time  # (G, D): the plain pipeline's compute of each group on each device
        self.weights = self._weights()

    def _weights(self) -> np.ndarray:
        """(G+1, G+1) bytes of the distinct parameters the ops of groups [i, j) read."""
        original, groups = self.problem.original, self.groups
        G = groups.num_groups
        params = np.asarray(original.param_values, np.int64)
        op_group = np.full(original.num_nodes, -1, np.int64)
        for g, ops in enumerate(groups.ops):
            op_group[ops] = g
        col = np.full(original.num_values, -1, np.int64)
        col[params] = np.arange(len(params))
        reads = np.zeros((G, len(params)), bool)
        e_v, e_d = np.asarray(original.edge_value), np.asarray(original.edge_dst)
        hit = (col[e_v] >= 0) & (op_group[e_d] >= 0)
        reads[op_group[e_d[hit]], col[e_v[hit]]] = True
        nbytes = np.asarray(original.value_bytes, float)[params]
        out = np.zeros((G + 1, G + 1))
        for i in range(G):
            seen = np.zeros(len(params), bool)
            for j in range(i, G):
                seen |= reads[j]
                out[i, j + 1] = float(nbytes[seen].sum())
        return out

    def group_floor(self, g: int, mesh: LogicalMesh) -> float:
        """:func:`_op_floor` of group ``g`` on ``mesh``, cached by (signature, mesh class)."""
        key = (self.groups.signature[g], mesh_class(self.problem, mesh))
        hit = self._floor.get(key)
        if hit is None:
            hit = self._floor[key] = _op_floor(self.problem, self.groups.ops[g], mesh)
        return hit

    def table(self, subs: Sequence[Submesh], rows: int = 1) -> np.ndarray:
        """(rows, G+1, G+1, S) seconds per microbatch no stage of groups [i, j) on ``subs[s]`` beats (module
        doc), ``inf`` where not a range or where the weights alone do not fit; the same in every row (the stash,
        which the rows of :func:`~.costs.inflight_rows` differ in, is not counted), so the DP needs one."""
        G, S = self.groups.num_groups, len(subs)
        ii, jj = np.meshgrid(np.arange(G + 1), np.arange(G + 1), indexing="ij")
        valid = ii < jj
        out = np.full((G + 1, G + 1, S), np.inf)
        for s, sub in enumerate(subs):
            best = np.full((G + 1, G + 1), np.inf)
            for mesh in stage_meshes(self.problem, sub):
                cum = np.concatenate([[0.0], np.cumsum([self.group_floor(g, mesh) for g in range(G)])])
                best = np.minimum(best, np.where(valid, cum[jj] - cum[ii], np.inf))
            if sub.size == 1:
                cum = np.concatenate([[0.0], np.cumsum(self.node_time[:, sub.devices[0]])])
                best = np.minimum(best, np.where(valid, cum[jj] - cum[ii], np.inf))
            cap = float(self.problem.capacity[list(sub.devices)].min())
            fits = self.weights / sub.size <= cap * (1 + 1e-12)
            out[:, :, s] = np.where(valid & fits, best * (1 - SLACK), np.inf)
        return np.broadcast_to(out, (rows, *out.shape)).copy()


def space_bound(problem: Problem, groups: LayerGroups, choices: Sequence[int],
                orders: Sequence[np.ndarray]) -> SpaceBound:
    """The least time per microbatch (step / M) of any plan of the space (module doc) at the microbatch counts
    ``choices`` and device ``orders``: the stage DP's optimum on :meth:`BoundTable.table`."""
    t0 = time.perf_counter()
    bounds = BoundTable(problem, groups)
    per_m: dict[int, float] = {}
    states = 0
    for order in orders:
        subs = submeshes(problem, order)
        offsets, sizes = np.array([s.offset for s in subs]), np.array([s.size for s in subs])
        for m in choices:
            table = bounds.table(subs, 1)  # one row: the rows (microbatches in flight) differ in the stash only
            res = stage_dp(table, offsets, sizes, len(order), m, formula="step")
            score = np.inf if res is None else res.step_time / max(m, 1)
            states += 0 if res is None else res.states
            per_m[m] = min(per_m.get(m, np.inf), score)
    score = min(per_m.values(), default=np.inf)
    return SpaceBound(float(score), per_m, states, time.perf_counter() - t0)
