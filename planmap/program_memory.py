"""The memory of a stage's compiled program, as XLA allocates it: arguments, outputs and temporaries.

A stage runs as one or more compiled programs (segments: the stage's ops when no path leaves the
stage and comes back, else each run of consecutive op ids, :func:`planmap.segments.stage_programs`,
the runtime's rule; a training stage is usually one forward and one backward program). For each program XLA's
``memory_analysis()`` reports the bytes of its arguments, its outputs and its temporaries (a heap
simulation over the values it materialises, in schedule order). This module predicts the same three
terms per segment, on the op-level graph (the coarse nodes the solvers see hide which values are
materialised), and the stage's footprint is the largest segment (segments run one after another):

- **arguments**: every value the segment reads and does not compute (parameters, data, values other
  segments send), once each, whatever the number of readers;
- **outputs**: values of its own ops that another segment reads (or the model returns). Cheap ops
  (:mod:`planmap.frontend.recompute`) are rebuilt by each segment that reads them, so they are never
  outputs nor arguments;
- **temporaries**: what XLA's buffer assigner needs for the other values it materialises
  (:func:`_buffers`). XLA fuses elementwise and shape ops (and the cheap recomputed ops, and calls of
  pointwise functions) into their consumers, so such a value has no buffer of its own unless a kernel
  that cannot fuse it reads it (``dot_general``, ``convolution`` and the other :data:`KERNEL_OPS` take
  materialised operands, :func:`kernels`; a gather fuses its operands, and a transpose only dots read
  is folded into them) or it leaves the segment; a fused value keeps the buffers it is computed from
  alive until its own last reader runs. XLA duplicates a cheap producer into each of its consumers but
  not an expensive one (``exp``, ``log``, ``tanh``, ...: :data:`EXPENSIVE_OPS`), whose value is a
  buffer when two ops read it or a broadcast does (:func:`_shared_expensive`). A reduction runs as a
  library fusion that takes in the convolutions, dots and elementwise ops only it reads
  (:func:`_library_fusions`): their values have no buffer (a CNN's pooling swallows the blocks before
  it), and what it reads from outside is a buffer (a layer norm's centred input, a broadcast scale).
  A temporary lives from its op's step to its last reader's, in the order XLA:CPU's default
  breadth-first scheduler runs the fused units (:mod:`planmap.fused_schedule`), and goes into an
  output buffer it fits and does not overlap in time, or else into one heap (:func:`_temp_bytes`); the
  transposed copies XLA's CPU layout assignment adds for weight gradients are temporaries too
  (:func:`_layout_copies`).

XLA inlines calls before it fuses and schedules: the bodies of calls that hold a kernel (``log_softmax``,
``take_along_axis`` and their gradients; the front end records them, :mod:`planmap.frontend.callees`) are
spliced in (:mod:`planmap.inlined`) before the walk, so the loss's ``exp``, sums, ``log``, gather and one-hot
scatter are ops of their own.

Per device, each value's bytes are divided by its shards under the stage's layout
(:func:`value_shards`), and a dot whose planned result spec XLA's SPMD partitioner cannot reach from
its operands' layouts adds the operand it all-gathers (:func:`reshard_buffers`);
:func:`plan_program_bytes` does all of this for every stage of a solution.

What this does not follow (``bench/results/memory.md`` gives the numbers):

- Ties in XLA's queue are broken by the order of each instruction's users, which XLA's fusion passes
  set; the model breaks them in op-id order (cnn-train-mixed stage 5: XLA runs a block's input-gradient
  convolution before its kernel-gradient one, the model the other way round; stages 4 and 5 read 1.09
  and 1.07, 1.06 and 1.00 in op order, which puts the GPT loss at 0.85).
- Other reshards of a sharded program (a collective-permute, gathers of small values) are not added:
  the model divides each value by its shards under the stage's layout.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from planmap.frontend.recompute import recomputed_nodes
from planmap.fused_schedule import fifo_times, last_reads, read_sources
from planmap.graph import DimRoles, OpGraph
from planmap.inlined import Inlined, carry_over, inline_calls
from planmap.segments import stage_programs

__all__ = ["KERNEL_OPS", "EXPENSIVE_OPS", "kernels", "segment_bytes", "stage_program_bytes", "value_shards",
           "plan_program_bytes"]

# Ops XLA runs as kernels of their own (library calls, reductions, data movement with index math):
# their results are buffers, and their operands are materialised before they run.
KERNEL_OPS = frozenset({
    "stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution", "stablehlo.reduce",
    "stablehlo.reduce_window", "stablehlo.select_and_scatter", "stablehlo.gather", "stablehlo.scatter",
    "stablehlo.sort", "stablehlo.custom_call", "stablehlo.while", "stablehlo.case", "stablehlo.if",
    "stablehlo.fft", "stablehlo.triangular_solve", "stablehlo.cholesky", "stablehlo.dynamic_update_slice",
    "stablehlo.all_reduce", "stablehlo.all_gather", "stablehlo.reduce_scatter", "stablehlo.all_to_all",
    "stablehlo.collective_permute", "stablehlo.rng_bit_generator",
})
_CALLS = frozenset({"func.call", "stablehlo.composite"})
# Kernels XLA fuses elementwise producers into (a loop fusion that reads only the gathered elements):
# their operands need no buffer of their own.
_FUSES_OPERANDS = frozenset({"stablehlo.gather"})
_POINTWISE_FLOPS = 2.0  # FLOPs per result element up to which a call without a dim map is elementwise


def kernels(graph: OpGraph) -> np.ndarray:
    """(n,) bool: ops whose results XLA materialises and whose operands it materialises before they
    run: :data:`KERNEL_OPS` (but a reduce over dims of size 1, which XLA's simplifier makes a reshape),
    and calls that hold more than elementwise code. XLA inlines calls, so a call of a pointwise function
    (``relu``, ``where``) fuses like the elementwise ops it holds. Calls whose bodies hold a kernel are
    spliced in before this is asked (:func:`stage_program_bytes`); a call left as one node (no body
    recorded, or none with a kernel) counts as elementwise when the front end gave it an elementwise
    dim map, or when it does at most two FLOPs per result element (a select or a mask broadcast)."""
    maps = graph.dim_maps
    out = np.fromiter((k in KERNEL_OPS for k in graph.kind), bool, graph.num_nodes)
    if graph.operands is not None:  # a reduce over size-1 dims is a reshape
        for i in (i for i, k in enumerate(graph.kind) if k == "stablehlo.reduce"):
            n_in = len(graph.operands[i]) // 2
            res = np.flatnonzero(graph.value_node == i)
            out[i] = n_in == 0 or len(res) != n_in or bool(
                (graph.value_bytes[list(graph.operands[i][:n_in])] != graph.value_bytes[res]).any())
    for i in (i for i, k in enumerate(graph.kind) if k in _CALLS):
        if maps is not None and maps[i] is not None:
            continue
        elems = sum(float(np.prod(t.shape)) for t in graph.outputs[i]) if graph.outputs is not None else 0.0
        out[i] = graph.flops[i] > _POINTWISE_FLOPS * max(elems, 1.0)
    return out


def _recomputed_closure(graph: OpGraph, own: np.ndarray, cheap: np.ndarray) -> np.ndarray:
    """(n,) bool: ``own`` plus the cheap ops its ops read, transitively (rebuilt in the segment)."""
    kept = own.copy()
    indptr, preds = graph.pred
    for i in np.flatnonzero(own)[::-1]:
        stack = [int(p) for p in preds[indptr[i]: indptr[i + 1]] if cheap[p] and not kept[p]]
        while stack:
            j = stack.pop()
            if kept[j]:
                continue
            kept[j] = True
            stack.extend(int(p) for p in preds[indptr[j]: indptr[j + 1]] if cheap[p] and not kept[p])
    return kept


def segment_bytes(graph: OpGraph, own: np.ndarray, *, cheap: np.ndarray | None = None,
                  split: np.ndarray | None = None, at_ops: dict[int, float] | None = None) -> dict[str, float]:
    """``params``, ``inputs``, ``outputs`` and ``temp`` bytes of the program of the ops ``own`` ((n,)
    bool, an op-level graph); ``split`` (values,) divides each value's bytes (its shards per device);
    ``at_ops`` ({op id: bytes}) adds temporaries live while an op runs (:func:`reshard_buffers`)."""
    g = graph
    cheap = recomputed_nodes(g) if cheap is None else cheap
    kept = _recomputed_closure(g, own, cheap)
    nbytes = g.value_bytes.astype(float) / (1.0 if split is None else split)
    src, val, dst = g.edge_src.astype(np.int64), g.edge_value.astype(np.int64), g.edge_dst.astype(np.int64)
    into = kept[dst]
    made_here = np.zeros(g.num_values, bool)
    prod = g.value_node.astype(np.int64)
    made_here[prod >= 0] = kept[prod[prod >= 0]]
    read = np.unique(val[into & ~made_here[val]])
    is_param = np.zeros(g.num_values, bool)
    is_param[g.param_values] = True
    leaves = np.zeros(g.num_values, bool)
    away = (src >= 0) & own[np.maximum(src, 0)] & ~kept[dst] & ~cheap[np.maximum(src, 0)]
    leaves[val[away]] = True
    leaves[np.asarray(g.results, np.int64)] = True
    leaves &= made_here & ~cheap[np.maximum(prod, 0)]
    kernel = kernels(g)
    mat, inner = _buffers(g, kept, leaves, kernel)
    sources = read_sources(g, kept, mat)
    time = fifo_times(g, kept, mat, sources)
    last = last_reads(g, kept, mat, sources, time)
    temps = np.flatnonzero(mat & ~leaves)
    extra = _layout_copies(g, kept & ~inner, kernel, nbytes)
    extra += [(i, i, b) for i, b in (at_ops or {}).items() if kept[i]]
    extra = [(int(min(time[a], time[b])), int(max(time[a], time[b])), size) for a, b, size in extra]
    temp = _temp_bytes(g, temps, np.flatnonzero(leaves), last, nbytes, extra, time)
    return {"params": float(nbytes[read[is_param[read]]].sum()), "inputs": float(nbytes[read[~is_param[read]]].sum()),
            "outputs": float(nbytes[leaves].sum()), "temp": temp}


def _buffers(g: OpGraph, kept: np.ndarray, leaves: np.ndarray, kernel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values,) bool: the values of the program ``kept`` XLA writes to buffers, and (n,) bool: its ops
    inside a reduction's library fusion (:func:`_library_fusions`). A value is a buffer when it leaves
    the program (``leaves``), a kernel makes it (:func:`kernels`), a kernel outside a library fusion reads
    it (but a gather fuses its operands, and a transpose only dots read is folded into them:
    :func:`_folded_transposes`), it is expensive and read twice or broadcast (:func:`_shared_expensive`),
    or a library fusion reads it from outside."""
    src, val, dst = g.edge_src.astype(np.int64), g.edge_value.astype(np.int64), g.edge_dst.astype(np.int64)
    into = kept[dst]
    prod = g.value_node.astype(np.int64)
    made_here = np.zeros(g.num_values, bool)
    made_here[prod >= 0] = kept[prod[prod >= 0]]
    region = _library_fusions(g, kept, kernel, leaves)
    inner = (region >= 0) & (region != np.arange(g.num_nodes))  # absorbed into a reduction's library fusion
    mat = made_here & ((kernel & ~inner)[np.maximum(prod, 0)] | leaves)
    rsrc = region[np.maximum(src, 0)]
    fused_in = (rsrc == region[dst]) & (region[dst] >= 0) & (src >= 0)
    takes = kernel & ~np.fromiter((k in _FUSES_OPERANDS for k in g.kind), bool, g.num_nodes)
    operand = into & takes[dst] & ~inner[dst] & made_here[val] & ~fused_in
    folded = _folded_transposes(g, kept, leaves)
    mat[val[operand & ~folded[val]]] = True
    below = [int(g.operands[prod[v]][0]) for v in np.unique(val[operand & folded[val]])] if g.operands else []
    mat[[u for u in below if made_here[u]]] = True
    mat |= _shared_expensive(g, kept & ~inner, into, made_here)
    mat[val[into & (region[dst] >= 0) & ((src < 0) | (rsrc != region[dst])) & made_here[val]]] = True
    return mat, inner


# Elementwise ops XLA's fusion pass counts as expensive (``InstructionFusion::IsExpensive``: transcendental
# functions; float division is cheap): it does not duplicate them into several consumers.
EXPENSIVE_OPS = frozenset("stablehlo." + k for k in (
    "exponential", "exponential_minus_one", "log", "log_plus_one", "logistic", "tanh", "tan", "sine", "cosine",
    "sqrt", "rsqrt", "cbrt", "power", "atan2"))


def _shared_expensive(g: OpGraph, kept: np.ndarray, into: np.ndarray, made_here: np.ndarray) -> np.ndarray:
    """(values,) bool: results of :data:`EXPENSIVE_OPS` that two or more ops of the program read, or that
    a broadcast reads. XLA fuses an elementwise producer into each of its consumers, duplicating it,
    unless the producer is expensive: then it stays a fusion of its own and writes a buffer that every
    consumer reads (an MLP's ``tanh`` read by the forward's product and by the backward's derivative);
    nor does it fuse an expensive producer into a consumer that reuses its elements (a broadcast: the
    ``log`` of a softmax's sum, a layer norm's ``rsqrt``)."""
    expensive = np.fromiter((k in EXPENSIVE_OPS for k in g.kind), bool, g.num_nodes) & kept
    val, dst = g.edge_value.astype(np.int64), g.edge_dst.astype(np.int64)
    prod = g.value_node.astype(np.int64)
    pairs = np.unique(np.stack([val, dst])[:, into & made_here[val] & expensive[np.maximum(prod[val], 0)]], axis=1)
    values, counts = np.unique(pairs[0], return_counts=True)
    out = np.zeros(g.num_values, bool)
    out[values[counts > 1]] = True
    grows = np.fromiter((k in _BROADCASTS for k in g.kind), bool, g.num_nodes)
    grows[grows] = g.out_bytes[grows] > np.asarray([g.value_bytes[int(g.operands[i][0])] if g.operands else 0
                                                   for i in np.flatnonzero(grows)], np.int64)
    out[pairs[0][grows[pairs[1]]]] = True
    return out


def _folded_transposes(g: OpGraph, kept: np.ndarray, leaves: np.ndarray) -> np.ndarray:
    """(values,) bool: results of ``transpose`` ops that only dots of the program read. XLA folds such a
    transpose into the dot's dimension numbers (``TransposeFolding``): no buffer, the dot reads the
    transpose's operand (a weight's transpose for ``x @ W.T``)."""
    out = np.zeros(g.num_values, bool)
    if g.operands is None:
        return out
    readers: dict[int, set[str]] = {}
    for v, d in zip(g.edge_value.tolist(), g.edge_dst.tolist(), strict=True):
        readers.setdefault(v, set()).add(g.kind[d])
    for i in (i for i, k in enumerate(g.kind) if k == "stablehlo.transpose" and kept[i]):
        v = int(np.flatnonzero(g.value_node == i)[0])
        out[v] = not leaves[v] and readers.get(v, set()) == {"stablehlo.dot_general"}
    return out


_BROADCASTS = frozenset({"stablehlo.broadcast_in_dim", "stablehlo.broadcast"})


_LIBRARY_OPS = frozenset({"stablehlo.convolution", "stablehlo.dot_general", "stablehlo.dot"})


def _library_fusions(g: OpGraph, kept: np.ndarray, kernel: np.ndarray, leaves: np.ndarray) -> np.ndarray:
    """(n,) the ``stablehlo.reduce`` whose library fusion each op joins (-1: none; a reduce is its own).

    XLA's CPU compiler hands reductions to a kernel library (YNNPACK) as custom fusions and grows
    each one up through its producers, later reductions first: an op joins when it is elementwise or
    a shape op, a convolution or a dot, and every reader of its results is already in the fusion (a
    value that another op or segment reads stays outside). The library runs the fused graph with its
    own scratch, which ``memory_analysis()`` does not count, so the values inside have no buffer: a
    CNN head's pooling reduce swallows the convolutions, ReLUs and residual adds of the blocks before
    it when nothing else reads them (an inference stage whose last op is the pooling)."""
    region = np.full(g.num_nodes, -1, np.int64)
    readers: dict[int, set[int]] = {}
    for v, d in zip(g.edge_value.tolist(), g.edge_dst.tolist(), strict=True):
        readers.setdefault(int(v), set()).add(int(d))
    outs: dict[int, list[int]] = {}
    for v, n in enumerate(g.value_node.tolist()):
        if n >= 0:
            outs.setdefault(int(n), []).append(v)
    fusable = kept & (~kernel | np.fromiter((k in _LIBRARY_OPS for k in g.kind), bool, g.num_nodes))
    roots = [int(i) for i in np.flatnonzero(kept) if g.kind[i] == "stablehlo.reduce"]
    for r in sorted(roots, reverse=True):
        if region[r] >= 0:
            continue
        region[r] = r
        grown = True
        while grown:
            grown = False
            for p in {int(q) for i in np.flatnonzero(region == r) for q in g.predecessors(int(i))}:
                vals = outs.get(p, [])
                if (region[p] < 0 and fusable[p] and vals and not leaves[vals].any()
                        and all(region[d] == r for v in vals for d in readers.get(v, ()))):
                    region[p] = r
                    grown = True
    return region


def _shape(g: OpGraph, v: int) -> tuple[int, ...]:
    n = int(g.value_node[v])
    if n < 0:
        return tuple(g.args[int(g.value_index[v])].type.shape)
    return tuple(g.outputs[n][int(g.value_index[v])].shape) if g.outputs is not None else ()


def _conv_layouts(d: DimRoles, rank: int) -> tuple[bool, bool, bool]:
    """Whether a convolution's input, kernel and result are in the layouts XLA's CPU convolution
    takes (``b01f`` input and result, ``01io`` kernel): the gradient of a kernel convolves the input
    with its batch and feature dims swapped, so both operands and the result are transposed."""
    spatial = tuple(range(1, rank - 1))
    lhs = d.lhs_batch == (0,) and d.lhs_spatial == spatial and d.lhs_contracting == (rank - 1,)
    rhs = d.rhs_spatial == tuple(range(rank - 2)) and d.rhs_contracting == (rank - 2,) and d.rhs_free == (rank - 1,)
    out = d.out_batch == (0,) and d.out_spatial == spatial and d.out_rhs_free == (rank - 1,)
    return lhs, rhs, out


def _layout_copies(g: OpGraph, kept: np.ndarray, kernel: np.ndarray,
                   nbytes: np.ndarray) -> list[tuple[int, int, float]]:
    """``(first op, last op, bytes)`` of the transposed copies XLA's CPU layout assignment makes:

    - a ``dot_general`` contracting the leading dims of both operands (a weight gradient ``dY^T X``
      over the batch) reads its left operand with the contraction dims minor;
    - a ``convolution`` reads its operands in :func:`_conv_layouts` and writes its result so (a
      kernel gradient: both operands and the result are copied; an input gradient: the kernel).

    An operand copy is not needed when the operand is a fused value read by this op only (the fusion
    writes that layout). It lives from the operand's op (the segment's first op for an argument:
    XLA schedules copies of parameters first) to the op; a result copy lives at the op only."""
    if g.operands is None or g.dims is None:
        return []
    first = int(np.flatnonzero(kept)[0]) if kept.any() else 0
    out = []
    for i in np.flatnonzero(kept):
        d, kind = g.dims[i], g.kind[i]
        if d is None or kind not in ("stablehlo.dot_general", "stablehlo.convolution"):
            continue
        ops = [int(v) for v in g.operands[i][:2]]
        if kind == "stablehlo.convolution":
            lhs, rhs, res = _conv_layouts(d, len(_shape(g, ops[0])))
            copies = [v for v, ok in zip(ops, (lhs, rhs), strict=True) if not ok]
            if not res:
                out.append((int(i), int(i), float(sum(nbytes[np.flatnonzero(g.value_node == i)]))))
        else:
            lead = all(tuple(c) == tuple(range(len(b), len(b) + len(c)))
                       for b, c in ((d.lhs_batch, d.lhs_contracting), (d.rhs_batch, d.rhs_contracting)))
            copies = [ops[0]] if lead and d.lhs_contracting and len(_shape(g, ops[0])) > len(d.lhs_contracting) else []
        for v in copies:
            made = int(g.value_node[v])
            inside = made >= 0 and kept[made]
            if inside and not kernel[made] and np.count_nonzero(g.edge_value == v) == 1:
                continue
            out.append((made if inside else first, int(i), float(nbytes[v])))
    return out


def _temp_bytes(g: OpGraph, temps: np.ndarray, outs: np.ndarray, last: np.ndarray, nbytes: np.ndarray,
                extra: list[tuple[int, int, float]], time: np.ndarray) -> float:
    """XLA's temporary bytes: its buffer assigner takes values largest first and puts a temporary in
    the smallest output buffer that is large enough and holds nothing live at the same time (an output
    is live from its op to the end; a temporary from its op to its last reader); the temporaries left
    over share one heap whose size is the most of them alive at once. Times are steps (``time``: each
    op's)."""
    start = time[np.maximum(g.value_node.astype(np.int64), 0)]
    end = np.maximum(last, start)
    rooms = sorted(((float(nbytes[v]), int(v)) for v in outs), reverse=True)
    held: list[list[tuple[int, int]]] = [[(int(start[v]), g.num_nodes)] for _, v in rooms]
    rest = []
    for v in sorted(temps.tolist(), key=lambda v: (-nbytes[v], start[v] - end[v], v)):
        a, b = int(start[v]), int(end[v])
        for r in range(len(rooms) - 1, -1, -1):
            if rooms[r][0] >= nbytes[v] and all(b < lo or a > hi for lo, hi in held[r]):
                held[r].append((a, b))
                break
        else:
            rest.append(v)
    if not rest and not extra:
        return 0.0
    rest_a = np.asarray(rest, np.int64)
    delta = np.zeros(g.num_nodes + 1)
    np.add.at(delta, start[rest_a], nbytes[rest_a])
    np.add.at(delta, end[rest_a] + 1, -nbytes[rest_a])
    for a, b, size in extra:
        delta[a] += size
        delta[b + 1] -= size
    return float(np.cumsum(delta).max())


def _inlined(graph: OpGraph, cheap: np.ndarray, split: np.ndarray | None, at_ops: dict[int, float] | None
             ) -> tuple[Inlined, np.ndarray, np.ndarray | None, dict[int, float] | None] | None:
    """``graph`` with the bodies of its calls that hold a kernel (:data:`KERNEL_OPS`) spliced in (XLA inlines
    them before it fuses), with ``cheap``, ``split`` and ``at_ops`` carried over (:func:`carry_over`); None
    when there is no such call (or the front end kept no bodies)."""
    if graph.operands is None:  # a coarsened graph: its meta's call ids are the original graph's
        return None
    bodies, callee = graph.meta.get("callees", {}), graph.meta.get("calls", {})
    calls = {int(i) for i, c in callee.items() if not KERNEL_OPS.isdisjoint(bodies.get(c, {}).get("kinds", ()))}
    if not calls:
        return None
    flat = inline_calls(graph, calls)
    return (flat, *carry_over(graph, flat, cheap, split, at_ops))


def stage_program_bytes(graph: OpGraph, op_group: np.ndarray, k: int, *, split: np.ndarray | None = None,
                        at_ops: dict[int, float] | None = None) -> dict[str, float]:
    """The largest program of group ``k`` (by total bytes) on an op-level graph: its ``params``,
    ``inputs``, ``outputs``, ``temp``, per device when ``split`` gives each value's shard count;
    ``at_ops``: :func:`segment_bytes`'s."""
    cheap = recomputed_nodes(graph)
    best = {"params": 0.0, "inputs": 0.0, "outputs": 0.0, "temp": 0.0}
    flat = _inlined(graph, cheap, split, at_ops)
    for ops in stage_programs(graph.pred, np.asarray(op_group), k):
        own = np.zeros(graph.num_nodes, bool)
        own[ops] = True
        own &= ~cheap
        if flat is not None:
            part = segment_bytes(flat[0].graph, own[flat[0].node_of] & ~flat[1], cheap=flat[1], split=flat[2],
                                 at_ops=flat[3])
        else:
            part = segment_bytes(graph, own, cheap=cheap, split=split, at_ops=at_ops)
        if sum(part.values()) > sum(best.values()):
            best = part
    return best


def _layouts(problem: Any, solution: Any) -> list[Any] | None:
    """The stages' complete layouts (:func:`planmap.sharding.stage_layout.stage_layouts`), None for a
    plan without shardings or of one-device stages only."""
    from planmap.sharding.stage_layout import stage_layouts

    if solution.shardings is None or all(len(st.devices) == 1 for st in solution.stages):
        return None
    return stage_layouts(problem, solution)


def value_shards(problem: Any, solution: Any, layouts: list[Any] | None = None) -> list[np.ndarray | None]:
    """Per stage of ``solution``, (values,) how many shards each value of the op-level graph is cut into
    on one device of the stage (1 = whole), from the stage's complete layout; None for a stage without
    a layout (one device, or a plan without shardings). ``layouts``: :func:`_layouts`, when computed."""
    from planmap.sharding.specs import shards

    layouts = _layouts(problem, solution) if layouts is None else layouts
    if layouts is None:
        return [None] * solution.num_stages
    out: list[np.ndarray | None] = []
    for st in layouts:
        sizes = st.mesh.axis_sizes
        split = np.ones(problem.original.num_values)
        for w, spec in st.layout.items():
            split[int(st.map.values[w])] = float(shards(spec, sizes))
        out.append(split if (split > 1).any() else None)
    return out


_DOT_HANDLED = frozenset({"stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution"})


def _gathered(st: Any, i: int, s: int) -> float:
    """Bytes per device of the buffers XLA's SPMD partitioner adds to run sub op ``i`` of the stage layout
    ``st`` under strategy ``s`` (:func:`reshard_buffers`)."""
    from planmap.sharding.specs import from_assignment, shards

    t, sizes = st.tables, st.mesh.axis_sizes
    sset, g = t.sets[i], t.graph
    out, scatter = sset.out[s], sset.scatter[s]
    total = 0.0
    for d in sorted(set(out[scatter].tolist())):
        held = [a for a in range(len(out)) if out[a] == d and not scatter[a] and sizes[a] > 1]
        scat = [a for a in range(len(out)) if out[a] == d and scatter[a] and sizes[a] > 1]
        if not held or not scat or min(scat) > max(held):
            continue
        for k, v in enumerate(g.operands[i]):
            req = sset.inputs[k][s]
            if not any(req[a] >= 0 for a in held):
                continue
            rest = from_assignment([-1 if a in held else int(x) for a, x in enumerate(req)], len(t.shapes[v]))
            size = float(g.value_bytes[v]) / shards(rest, sizes)
            leading = all(int(req[a]) == 0 for a in held)
            total += size if leading else 2.0 * size
        whole = from_assignment([-1 if x == d else int(x) for x in out], len(g.outputs[i][0].shape))
        total += float(g.out_bytes[i]) / shards(whole, sizes)
    return total


def reshard_buffers(problem: Any, solution: Any, layouts: list[Any] | None = None) -> list[dict[int, float]]:
    """Per stage, ``{original op id: bytes per device}`` of the buffers XLA's SPMD partitioner adds to run
    a dot or a convolution whose planned result spec it cannot reach from its operands' layouts.

    A dim split over several mesh axes is tiled in mesh-axis order (the first axis major). A strategy
    that reduce-scatters partial sums over axis ``s`` into a result dim another axis ``k`` already splits
    (an operand's non-contracted dim split over ``k``) yields the order ``(k, s)``: each device's block
    is scattered further. When the plan's spec orders them ``(s, k)`` (``s`` before ``k`` on the mesh),
    XLA's dot handler does not reach it from the operands: it all-gathers the operand over ``k``,
    computes the partial sums of the whole dim, all-reduces them and slices (gpt-train-2host stage 1,
    mesh (tensor, tensor1): the MLP weight gradients gather the hidden activation to f32[32,128,512]).
    The gathered operand is a buffer; gathered along a dim other than the first, XLA:CPU's all-gather
    writes that dim major and the consumer reads a row-major copy of it (a second buffer as large);
    the whole-dim partial sums are a buffer too. Reductions are partitioned on the local blocks and
    all-reduced instead (no gather), so only the ops XLA's dot handler partitions count."""
    from planmap.sharding.spmd import evaluate_spmd

    layouts = _layouts(problem, solution) if layouts is None else layouts
    if layouts is None:
        return [{} for _ in range(solution.num_stages)]
    out: list[dict[int, float]] = []
    for st in layouts:
        choice = evaluate_spmd(st.tables, st.layout).choice
        g = st.tables.graph
        extra = {int(st.map.ops[i]): b for i in range(st.tables.num_ops)
                 if g.kind[i] in _DOT_HANDLED and (b := _gathered(st, i, int(choice[i]))) > 0}
        out.append(extra)
    return out


def plan_program_bytes(problem: Any, solution: Any) -> list[dict[str, float]]:
    """Per stage of ``solution``: :func:`stage_program_bytes` on one of its devices, on the problem's
    op-level graph (``problem.original``), each value divided by its shards under the stage's layout,
    with the buffers XLA's SPMD partitioner adds to reshard (:func:`reshard_buffers`)."""
    g = problem.graph
    op_group = np.full(problem.original.num_nodes, -1, np.int64)
    for i, k in enumerate(np.asarray(solution.assignment).tolist()):
        op_group[g.members_of(i)] = k
    layouts = _layouts(problem, solution)
    splits = value_shards(problem, solution, layouts)
    at_ops = reshard_buffers(problem, solution, layouts)
    return [stage_program_bytes(problem.original, op_group, k, split=splits[k], at_ops=at_ops[k])
            for k in range(solution.num_stages)]
