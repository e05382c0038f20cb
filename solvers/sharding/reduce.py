"""The sharding IP's decision space after reductions: groups of units that choose one strategy together.

The IP of :mod:`.model` does not read :class:`~planmap.sharding.ShardingTables` directly but a
:class:`Reduced` view of it, in which

* **followers are merged** (a *stated* restriction): an op with a DimMap and no reduction slot whose
  non-scalar operands all come from one producer unit, each mapped bijectively onto the result (its
  dims of size > 1 one-to-one onto the result's) — elementwise ops, converts, transposes, reshapes
  that only add or drop size-1 dims — runs in its producer's
  layout: its operands arrive as the producer holds them, its result is their image. Its strategy is
  then a function of the producer's, and it joins the producer's *group* (chains merge transitively).
  A follower whose producer has some layout it cannot follow (divisibility) stays free;
* edges inside a group become part of the group's cost; parallel edges between two groups are summed
  into one matrix; identical rows and columns of a matrix are merged; and an edge whose matrix is
  *additive* (``M[p, q] = a[p] + b[q]``: one side has a single layout, e.g. a unit op or an argument
  of one valid spec, or the cost does not depend on the pairing) is folded into the two groups'
  costs. These keep the optimum exactly: a group with one strategy is then a constant.

* **repeated layers are tied** (a *stated* restriction, ``tie_layers=True``): the front end's tandem
  repeats (:func:`planmap.frontend.repeats.tandem_blocks`) of op signatures (kind and strategy set, i.e.
  shapes and dim maps) give blocks of identical layers; a group whose units
  correspond one-to-one to those of its counterpart in the first block (same strategy sets) joins it,
  and arguments consumed at corresponding places (the layers' weights) are tied with them. The answer
  is then optimal over layouts identical across the repeated layers, and the IP has one layer's columns.

Each group holds, per group strategy ``s``, the strategy of every member (``choice``), and its cost
(compute + comm of the members + folded edges), additive memory and working set (the members'
largest). Edges hold a compact matrix over distinct rows × columns and the row (column) of each
strategy of the producer (consumer) group.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from planmap.sharding import ShardingTables, reshard_matrix

__all__ = ["Reduced", "reduce_tables", "followers", "layer_ties"]

FOLD_TOL = 1e-12  # relative tolerance for an additive (foldable) edge matrix


@dataclass(frozen=True, eq=False)
class Reduced:
    """Groups of units deciding together, their costs and the edges between them (see module doc).

    ``members[g]``: unit ids (the leader first); ``choice[g]`` (members, K_g): each member's strategy
    under each group strategy; ``cost``/``memory``/``working[g]`` (K_g,) seconds per microbatch /
    bytes per device; ``edge_src``/``edge_dst`` groups of each edge, ``edge_matrix`` (P, Q) seconds,
    ``edge_row`` (K_src,) / ``edge_col`` (K_dst,) the matrix row/column of each group strategy;
    ``notes``: the reductions applied."""

    tables: ShardingTables
    group_of: np.ndarray
    members: tuple[np.ndarray, ...]
    choice: tuple[np.ndarray, ...]
    cost: tuple[np.ndarray, ...]
    memory: tuple[np.ndarray, ...]
    working: tuple[np.ndarray, ...]
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_matrix: tuple[np.ndarray, ...]
    edge_row: tuple[np.ndarray, ...]
    edge_col: tuple[np.ndarray, ...]
    notes: tuple[str, ...]

    @property
    def num_groups(self) -> int:
        return len(self.members)

    @property
    def counts(self) -> np.ndarray:
        return np.array([len(c) for c in self.cost], np.int64)

    def unit_strategies(self, group_choice) -> np.ndarray:
        """(units,) strategy of every unit given one strategy index per group."""
        out = np.zeros(self.tables.num_units, np.int64)
        for g, s in enumerate(group_choice):
            out[self.members[g]] = self.choice[g][:, int(s)]
        return out

    def group_strategies(self, unit_choice) -> np.ndarray | None:
        """(groups,) the group strategy reproducing ``unit_choice`` for every member, or None when
        some group has no such strategy (the layout breaks a stated reduction)."""
        out = np.zeros(self.num_groups, np.int64)
        uc = np.asarray(unit_choice, np.int64)
        for g, (mem, ch) in enumerate(zip(self.members, self.choice, strict=True)):
            hit = np.flatnonzero(np.all(ch == uc[mem][:, None], axis=0))
            if len(hit) == 0:
                return None
            out[g] = hit[0]
        return out


# ---------------------------------------------------------------------------------------- followers
def _bijective(dims: tuple[int, ...], op_shape: tuple[int, ...], res_shape: tuple[int, ...]) -> bool:
    """Operand dims of size > 1 map one-to-one onto the result dims of size > 1 (size-1 dims never split)."""
    mapped = [d for d, n in zip(dims, op_shape, strict=True) if n > 1]
    return -1 not in mapped and len(set(mapped)) == len(mapped) and set(mapped) == {
        d for d, n in enumerate(res_shape) if n > 1}


def _follow_map(t: ShardingTables, i: int, src: int, ks: list[int]) -> np.ndarray | None:
    """(P_src,) the strategy of op ``i`` in each of its producer's out layouts (operands ``ks`` arrive as
    held, no reduction slot; the cheapest such strategy), or None if some layout has none."""
    outs = t.out_specs[src]
    no_slot: np.ndarray = ~np.any(t.sets[i].slot, axis=1)  # (Q,) strategies that split no reduction slot
    cand = no_slot[None, :].repeat(len(outs), 0)
    for k in ks:
        same = np.all(outs[:, None, :] == t.in_specs[i][k][None, :, :], axis=2)  # (P, Q_k)
        cand &= same[:, t.in_index[i][k]]
    if not cand.any(axis=1).all():
        return None
    cost = t.compute[i] + t.comm[i]
    return np.argmin(np.where(cand, cost[None, :], np.inf), axis=1)


def followers(t: ShardingTables) -> dict[int, tuple[int, np.ndarray]]:
    """``{op: (producer unit, follow map)}`` of every follower op (see module doc)."""
    g = t.graph
    out: dict[int, tuple[int, np.ndarray]] = {}
    maps = g.dim_maps
    if maps is None:
        return out
    for i in range(t.num_ops):
        dm = maps[i]
        vals = t.unit_values(i)
        if dm is None or not vals or not dm.operands or any(j >= 0 for slot in dm.reduced for j in slot):
            continue
        res = t.shapes[vals[0]]
        ks = [k for k, v in enumerate(t.operands[i]) if len(t.shapes[v]) > 0]
        srcs = {int(t.value_unit[t.operands[i][k]]) for k in ks}
        if len(res) == 0 or len(srcs) != 1 or not all(
                _bijective(dm.operands[k], t.shapes[t.operands[i][k]], res) for k in ks):
            continue
        src = srcs.pop()
        fmap = _follow_map(t, i, src, ks)
        if fmap is not None:
            out[i] = (src, fmap)
    return out


# ------------------------------------------------------------------------------------------- groups
def _groups(t: ShardingTables, follow: dict[int, tuple[int, np.ndarray]]):
    """Group of each unit, members and choice matrices (followers join their producer's group)."""
    n_units = t.num_units
    group_of = np.full(n_units, -1, np.int64)
    members: list[list[int]] = []
    choice: list[list[np.ndarray]] = []
    # arguments first so a follower of an argument finds its group; ops are in topological order
    order = list(range(t.num_ops, n_units)) + list(range(t.num_ops))
    for u in order:
        src = follow[u][0] if u in follow else -1
        if src >= 0 and group_of[src] >= 0:
            fmap = follow[u][1]
            g = int(group_of[src])
            pos = members[g].index(src)
            choice[g].append(fmap[t.out_index[src][choice[g][pos]]])
            members[g].append(u)
        else:
            g = len(members)
            members.append([u])
            choice.append([np.arange(t.sets[u].size, dtype=np.int64)])
        group_of[u] = g
    return group_of, [np.asarray(m, np.int64) for m in members], [np.stack(c) for c in choice]


# ------------------------------------------------------------------------------------- repeated layers
def layer_ties(t: ShardingTables) -> tuple[dict[int, int], int, int]:
    """``({unit: its counterpart in the first block}, repeats, blocks)`` of the tandem repeats of ``t``'s ops;
    arguments consumed at corresponding places (same operand position, same strategy set) are tied too."""
    from planmap.frontend.repeats import tandem_blocks

    ids: dict[tuple, int] = {}
    sig = [ids.setdefault((t.graph.kind[i], id(t.sets[i])), len(ids)) for i in range(t.num_ops)]
    ties: dict[int, int] = {}
    repeats = tandem_blocks(sig)
    for blocks in repeats:
        s0 = blocks[0][0]
        for start, end in blocks[1:]:
            for j in range(end - start):
                u, u0 = start + j, s0 + j
                if t.sets[u] is not t.sets[u0]:
                    continue
                ties[u] = u0
                for v, v0 in zip(t.operands[u], t.operands[u0], strict=True):
                    a, a0 = int(t.value_unit[v]), int(t.value_unit[v0])
                    if a >= t.num_ops and a0 >= t.num_ops and a != a0 and t.sets[a] is t.sets[a0]:
                        ties.setdefault(a, ties.get(a0, a0))
    return ties, len(repeats), sum(len(b) for b in repeats)


def _tie(ties: dict[int, int], group_of: np.ndarray, members: list[np.ndarray], choice: list[np.ndarray]):
    """Merge each group into its first-block counterpart's when their units correspond one-to-one."""
    cls = np.arange(len(members))
    for gi, mem in enumerate(members):
        anchor = ties.get(int(mem[0]))
        if anchor is None:
            continue
        g0 = int(cls[group_of[anchor]])
        first = members[g0]
        if g0 != gi and len(first) == len(mem) and all(
                ties.get(int(u)) == int(u0) for u, u0 in zip(mem, first, strict=True)):
            cls[gi] = g0
    keep = np.flatnonzero(cls == np.arange(len(members)))
    new_id = np.full(len(members), -1, np.int64)
    new_id[keep] = np.arange(len(keep))
    merged_m = {int(g): [members[g]] for g in keep}
    merged_c = {int(g): [choice[g]] for g in keep}
    for gi in np.flatnonzero(cls != np.arange(len(members))).tolist():
        merged_m[int(cls[gi])].append(members[gi])
        merged_c[int(cls[gi])].append(choice[gi])
    out_members = [np.concatenate(merged_m[int(g)]) for g in keep]
    out_choice = [np.concatenate(merged_c[int(g)]) for g in keep]
    return new_id[cls[group_of]], out_members, out_choice, len(members) - len(keep)


def _dedup_rows(mat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct rows in first-seen order, row of each original row); hashing bytes beats np.unique(axis=0)."""
    seen: dict[bytes, int] = {}
    inv = np.fromiter((seen.setdefault(r.tobytes(), len(seen)) for r in np.ascontiguousarray(mat)), np.int64,
                      count=len(mat))
    first = np.zeros(len(seen), np.int64)
    first[inv[::-1]] = np.arange(len(mat) - 1, -1, -1)
    return mat[first], inv


def _compact(mat: np.ndarray, row: np.ndarray, col: np.ndarray):
    """Drop unused rows/columns and merge identical ones (an exact rewrite of the same costs)."""
    used_r, row = np.unique(row, return_inverse=True)
    used_c, col = np.unique(col, return_inverse=True)
    mat = mat[np.ix_(used_r, used_c)]
    mat, inv_r = _dedup_rows(mat)
    matT, inv_c = _dedup_rows(mat.T)
    return np.ascontiguousarray(matT.T), inv_r[row.reshape(-1)], inv_c[col.reshape(-1)]


def _additive(mat: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(a, b)`` with ``mat[p, q] == a[p] + b[q]`` (to FOLD_TOL), or None."""
    a = mat[:, 0]
    b = mat[0, :] - mat[0, 0]
    resid = np.abs(mat - a[:, None] - b[None, :])
    if resid.max(initial=0.0) <= FOLD_TOL * max(1e-30, float(np.abs(mat).max(initial=0.0))):
        return a, b
    return None


def reduce_tables(t: ShardingTables, *, merge_followers: bool = True, split_axes: bool = True,
                  tie_layers: bool = False) -> Reduced:
    """The reduced decision space of ``t`` (see the module doc); ``merge_followers=False`` keeps every unit
    its own group (only the exact rewrites apply); ``split_axes=False`` keeps every edge matrix whole;
    ``tie_layers=True`` gives corresponding groups of repeated layers one strategy."""
    follow = followers(t) if merge_followers else {}
    group_of, members, choice = _groups(t, follow)
    notes = []
    if tie_layers:
        ties, repeats, blocks = layer_ties(t)
        group_of, members, choice, tied = _tie(ties, group_of, members, choice)
        if tied:
            notes.append(f"repeated layers tied ({repeats} repeats, {blocks} blocks, {tied} groups take their "
                         "first-block counterpart's strategy): optimal over layouts identical across the "
                         "repeated layers")
    G = len(members)
    cost = [sum(t.compute[u][ch] + t.comm[u][ch] for u, ch in zip(mem, cho, strict=True))
            for mem, cho in zip(members, choice, strict=True)]
    memory = [sum(t.memory[u][ch] for u, ch in zip(mem, cho, strict=True)) for mem, cho in zip(members, choice,
                                                                                                strict=True)]
    working = [np.max([t.working[u][ch] for u, ch in zip(mem, cho, strict=True)], axis=0)
               for mem, cho in zip(members, choice, strict=True)]
    pos_in = {int(u): (g, j) for g, mem in enumerate(members) for j, u in enumerate(mem.tolist())}
    buckets: dict[tuple[int, int], list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = defaultdict(list)
    internal = 0
    axis_cache: dict = {}
    for e in range(t.num_edges):
        src, dst, k = int(t.edge_src[e]), int(t.edge_dst[e]), int(t.edge_pos[e])
        gs, js = pos_in[src]
        gd, jd = pos_in[dst]
        row = t.out_index[src][choice[gs][js]]
        col = t.in_index[dst][k][choice[gd][jd]]
        if gs == gd:
            cost[gs] = cost[gs] + t.edge_matrix[e][row, col]
            internal += 1
        else:
            buckets[(gs, gd)] += (_axis_parts(t, e, row, col, axis_cache) if split_axes
                                  else [(t.edge_matrix[e], row, col)])
    es, ed, em, er, ec = [], [], [], [], []
    folded = 0
    for (gs, gd), parts in sorted(buckets.items()):
        for mat, row, col in _merge_parallel([_compact(*p) for p in parts]):
            add = _additive(mat)
            if add is not None:
                cost[gs] = cost[gs] + add[0][row]
                cost[gd] = cost[gd] + add[1][col]
                folded += 1
                continue
            es.append(gs)
            ed.append(gd)
            em.append(mat)
            er.append(row)
            ec.append(col)
    if follow:
        notes.insert(0, f"followers merged ({len(follow)} ops run in their producer's layout)")
    const = sum(1 for c in cost if len(c) == 1)
    notes.append(f"{const} of {G} groups have one strategy (constants); {internal} edges inside groups, "
                 f"{folded} additive edges folded into costs, {len(em)} edges modelled")
    ro = _ro
    return Reduced(t, ro(group_of), tuple(ro(m) for m in members), tuple(ro(c) for c in choice),
                   tuple(ro(np.asarray(c, float)) for c in cost), tuple(ro(np.asarray(m, float)) for m in memory),
                   tuple(ro(np.asarray(w, float)) for w in working), ro(np.asarray(es, np.int64)),
                   ro(np.asarray(ed, np.int64)), tuple(ro(m) for m in em), tuple(ro(r) for r in er),
                   tuple(ro(c) for c in ec), tuple(notes))


def _merge_two(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]):
    """One matrix for several edges between the same two groups: rows (columns) are the distinct
    combinations of the edges' rows (columns); entries the summed costs."""
    rows = np.stack([r for _, r, _ in parts])  # (edges, K_src)
    cols = np.stack([c for _, _, c in parts])
    urow, row = np.unique(rows, axis=1, return_inverse=True)
    ucol, col = np.unique(cols, axis=1, return_inverse=True)
    mats = [m[np.ix_(urow[j], ucol[j])] for j, (m, _, _) in enumerate(parts)]
    mat = sum(mats[1:], start=mats[0])
    return _compact(mat, row.reshape(-1), col.reshape(-1))


def _merge_parallel(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> list:
    """Parallel edges (or axis parts) between two groups, merged pairwise whenever the merged matrix is
    no larger than the two it replaces (same or nested row and column partitions). Parts with the same
    row and column maps (tied layers' copies of one edge) are summed first."""
    same: dict[tuple[bytes, bytes], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for mat, row, col in parts:
        key = (row.tobytes(), col.tobytes())
        have = same.get(key)
        same[key] = (mat, row, col) if have is None else (have[0] + mat, row, col)
    out: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for part in same.values():
        for j, have in enumerate(out):
            if _pairs(have[1], part[1]) * _pairs(have[2], part[2]) <= have[0].size + part[0].size:
                out[j] = _merge_two([have, part])
                break
        else:
            out.append(part)
    return out


def _pairs(a: np.ndarray, b: np.ndarray) -> int:
    """Number of distinct (a, b) pairs of two index maps."""
    return len(np.unique(a * (int(b.max(initial=0)) + 1) + b))


def _axis_parts(t: ShardingTables, e: int, row: np.ndarray, col: np.ndarray, cache: dict) -> list:
    """Edge ``e`` as one part per mesh axis when its matrix is a sum of per-axis terms that each depend on
    the producer's dim on that axis only (what :mod:`planmap.sharding.reshard` charges: an all-gather or
    all-to-all per axis whose bytes depend on the required spec) and that is smaller; else whole.
    Exact at integer points: with one-hot marginals each part's entries are fixed."""
    mat = t.edge_matrix[e]
    A = t.mesh.num_axes
    if A < 2 or mat.size < 16:
        return [(mat, row, col)]
    src, dst, k = int(t.edge_src[e]), int(t.edge_dst[e]), int(t.edge_pos[e])
    outs, req = t.out_specs[src], t.in_specs[dst][k]
    parts, total = [], np.zeros(mat.shape)
    for a in range(A):
        dims, rmap = np.unique(outs[:, a], return_inverse=True)
        single = np.full((len(dims), A), -1, np.int64)
        single[:, a] = dims
        nbytes = float(t.graph.value_bytes[int(t.edge_value[e])])
        key = (a, nbytes, dims.tobytes(), req.shape, req.tobytes())
        h = cache.get(key)
        if h is None:
            h = cache.setdefault(key, reshard_matrix(single, req, nbytes, t.mesh))
        total += h[rmap.reshape(-1)]
        parts.append((h, rmap.reshape(-1)[row], col))
    if not np.allclose(total, mat, rtol=1e-9, atol=0.0) or sum(h.size for h, _, _ in parts) * 2 > mat.size:
        return [(mat, row, col)]
    return parts


def _ro(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    a.setflags(write=False)
    return a
