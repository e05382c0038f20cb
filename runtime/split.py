"""Cut ``@main`` into one module per segment: crossing values become results and arguments.

A segment is a set of top-level ops that runs as one compiled call on one stage's devices. Its
module is the artifact with every other op erased: a value the segment uses but does not compute
becomes a new argument, a value it computes that another segment (or ``@main``'s return) needs
becomes a result. Private functions are kept (``symbol-dce`` drops the unused ones).

Cheap values are recomputed instead of sent: constants, iotas and shape-only ops
(``broadcast_in_dim``, ``reshape``, ``convert``) whose inputs are themselves cheap or are entry
arguments. A bias broadcast to the batch is a large tensor made from a small one; sending the bias
(an argument every stage can receive) and broadcasting again costs nothing, sending the broadcast
costs its bytes on a link.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planmap.frontend.recompute import RECOMPUTED_OPS
from planmap.frontend.stablehlo import entry_return, top_level_ops
from planmap.runtime.artifact import Artifact, entry_function
from planmap.runtime.ir_graph import ARG, EntryGraph, Ref

__all__ = ["CHEAP_OPS", "SegmentCut", "recomputable", "plan_cuts", "build_module"]

CHEAP_OPS = RECOMPUTED_OPS  # one definition with the cost model (planmap.frontend.recompute)


@dataclass(frozen=True)
class SegmentCut:
    """What a segment computes and exchanges. ``inputs``: entry arguments (ascending) first, then
    crossing values (ascending); ``outputs``: values of its own ops that others need (ascending)."""

    ops: tuple[int, ...]
    recompute: tuple[int, ...]
    inputs: tuple[Ref, ...]
    outputs: tuple[Ref, ...]

    @property
    def kept(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.ops) | set(self.recompute)))


def recomputable(graph: EntryGraph) -> np.ndarray:
    """Per op: cheap, region-free, and computed from entry arguments and other recomputable ops only."""
    out = np.zeros(graph.n_ops, bool)
    for i in range(graph.n_ops):
        out[i] = (graph.op_kind[i] in CHEAP_OPS and not graph.has_regions[i]
                  and all(o == ARG or out[o] for o, _ in graph.operands[i]))
    return out


def _ancestors(graph: EntryGraph, op: int, copied, acc: set[int]) -> None:
    stack = [op]
    while stack:
        i = stack.pop()
        if i in acc:
            continue
        acc.add(i)
        stack.extend(o for o, _ in graph.operands[i] if o != ARG and copied(o))


def plan_cuts(graph: EntryGraph, segments: list[list[int]], *, recompute: bool = True,
              remat: list[frozenset[int]] | None = None) -> list[SegmentCut]:
    """The cut of each segment (op ids per segment; together they cover every op exactly once).

    ``remat[s]``: ops of other segments that segment ``s`` runs again instead of receiving their results
    (activation checkpointing, :mod:`planmap.runtime.remat`), like the cheap ops and with them."""
    cheap = recomputable(graph) if recompute else np.zeros(graph.n_ops, bool)
    kept_sets: list[tuple[set[int], set[int]]] = []
    inputs: list[tuple[Ref, ...]] = []
    for s, seg in enumerate(segments):
        own = set(seg)
        again = remat[s] if remat else frozenset()

        def copied(o: int, again=again) -> bool:
            return bool(cheap[o]) or o in again

        extra: set[int] = set()
        for i in seg:
            for o, _ in graph.operands[i]:
                if o != ARG and o not in own and copied(o):
                    _ancestors(graph, o, copied, extra)
        extra -= own
        kept = own | extra
        ins: set[Ref] = set()
        for i in kept:
            ins.update(ref for ref in graph.operands[i] if ref[0] == ARG or ref[0] not in kept)
        kept_sets.append((own, extra))
        inputs.append(tuple(sorted(r for r in ins if r[0] == ARG)) + tuple(sorted(r for r in ins if r[0] != ARG)))
    needed: set[Ref] = {r for ins in inputs for r in ins if r[0] != ARG} | {r for r in graph.returns if r[0] != ARG}
    cuts = []
    for (own, extra), cut_inputs in zip(kept_sets, inputs, strict=True):
        outs = tuple(sorted(r for r in needed if r[0] in own))
        cuts.append(SegmentCut(ops=tuple(sorted(own)), recompute=tuple(sorted(extra)), inputs=cut_inputs,
                               outputs=outs))
    return cuts


def build_module(artifact: Artifact, cut: SegmentCut, ctx):
    """The segment's module in ``ctx`` and its kept ops by op id (for annotation).

    The module's ``@main`` takes ``cut.inputs`` and returns ``cut.outputs``, in that order.
    """
    from jax.extend.mlir import ir, passmanager
    from jax.extend.mlir.dialects import func

    module = artifact.parse(ctx)
    with ctx, ir.Location.unknown():
        main = entry_function(module)
        block = main.regions[0].blocks[0]
        ops = top_level_ops(main)
        kept = set(cut.kept)
        n_args = len(block.arguments)
        kept_args = {r for o, r in cut.inputs if o == ARG}
        for o, r in cut.inputs:
            if o == ARG:
                continue
            value = ops[o].results[r]
            value.replace_all_uses_with(block.add_argument(value.type, ir.Location.unknown()))
        out_values = [ops[o].results[r] for o, r in cut.outputs]  # outputs are results of own ops
        entry_return(block).erase()
        with ir.InsertionPoint(block):
            func.ReturnOp(out_values)
        for i in reversed(range(len(ops))):
            if i not in kept:
                ops[i].erase()
        for i in reversed(range(n_args)):
            if i not in kept_args:
                block.erase_argument(i)
        main.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get([a.type for a in block.arguments], [v.type for v in out_values]))
        for name in ("arg_attrs", "res_attrs"):
            if name in main.attributes:
                del main.attributes[name]
        passmanager.PassManager.parse("builtin.module(symbol-dce)").run(module.operation)
        module.operation.verify()
        handles = {i: ops[i] for i in sorted(kept)}
    return module, handles
