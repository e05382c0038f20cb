"""Use-def structure of ``@main``'s top-level ops, in the plan's numbering.

A plan names ops by their position in the entry function's body, numbered as the front end numbers
them (:func:`planmap.frontend.stablehlo.entry_ops`: ``func.return`` excluded, constants included);
values are named here by :data:`Ref` = ``(op id, result number)``, with op id
``ARG`` (-1) for the entry function's arguments. Uses inside nested regions (``while`` bodies,
``case`` branches) count as uses by the top-level op that holds the region, because a stage runs a
region-holding op whole.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planmap.errors import PlanmapError
from planmap.frontend.stablehlo import entry_return, top_level_ops
from planmap.graph import TensorType
from planmap.runtime.artifact import Artifact, _tensor_type, entry_function, make_context

__all__ = ["ARG", "Ref", "EntryGraph"]

ARG = -1
Ref = tuple[int, int]


def _collect_uses(op, index: dict, block, out: list[Ref], seen: set[Ref]) -> None:
    from jax.extend.mlir import ir

    for v in op.operands:
        ref = None
        if isinstance(v, ir.OpResult):
            owner = index.get(v.owner.operation)
            if owner is not None:
                ref = (owner, v.result_number)
        elif isinstance(v, ir.BlockArgument) and v.owner == block:
            ref = (ARG, v.arg_number)
        if ref is not None and ref not in seen:
            seen.add(ref)
            out.append(ref)
    for region in op.regions:
        for b in region.blocks:
            for inner in b.operations:
                _collect_uses(inner.operation, index, block, out, seen)


@dataclass(frozen=True, eq=False)
class EntryGraph:
    """Which values each top-level op of ``@main`` uses, what it produces, and what ``@main`` returns."""

    op_kind: tuple[str, ...]
    operands: tuple[tuple[Ref, ...], ...]
    result_types: tuple[tuple[TensorType | None, ...], ...]
    has_regions: tuple[bool, ...]
    returns: tuple[Ref, ...]
    arg_types: tuple[TensorType, ...]

    @property
    def n_ops(self) -> int:
        return len(self.op_kind)

    @classmethod
    def from_artifact(cls, artifact: Artifact) -> EntryGraph:
        ctx = make_context()
        module = artifact.parse(ctx)
        with ctx:
            main = entry_function(module)
            block = main.regions[0].blocks[0]
            ops = top_level_ops(main)
            index = {op: i for i, op in enumerate(ops)}
            operands, results = [], []
            for op in ops:
                uses: list[Ref] = []
                _collect_uses(op, index, block, uses, set())
                operands.append(tuple(uses))
                results.append(tuple(_maybe_tensor(r.type) for r in op.results))
            returns: list[Ref] = []
            for v in entry_return(block).operands:
                from jax.extend.mlir import ir

                if isinstance(v, ir.OpResult):
                    returns.append((index[v.owner.operation], v.result_number))
                else:
                    returns.append((ARG, v.arg_number))
            return cls(op_kind=tuple(op.name for op in ops), operands=tuple(operands),
                       result_types=tuple(results), has_regions=tuple(len(op.regions) > 0 for op in ops),
                       returns=tuple(returns), arg_types=artifact.in_types)

    def type_of(self, ref: Ref) -> TensorType | None:
        op, r = ref
        return self.arg_types[r] if op == ARG else self.result_types[op][r]

    def tensor_type(self, ref: Ref) -> TensorType:
        """The type of a value that must be a tensor (a segment boundary, a sharded value)."""
        t = self.type_of(ref)
        if t is None:
            raise PlanmapError(f"value {ref} of the artifact is not a tensor")
        return t

    def depends_on(self, args: set[int] | frozenset[int]) -> np.ndarray:
        """Per op: whether it (transitively) uses one of the arguments ``args``."""
        dep = np.zeros(self.n_ops, bool)
        for i, uses in enumerate(self.operands):
            dep[i] = any((o == ARG and r in args) or (o != ARG and dep[o]) for o, r in uses)
        return dep

    def ref_depends_on(self, ref: Ref, args: set[int] | frozenset[int], dep: np.ndarray | None = None) -> bool:
        op, r = ref
        if op == ARG:
            return r in args
        return bool((self.depends_on(args) if dep is None else dep)[op])

    def consumers(self) -> list[list[int]]:
        """Per op: the ops that use one of its results (ascending)."""
        out: list[list[int]] = [[] for _ in range(self.n_ops)]
        for i, uses in enumerate(self.operands):
            for o in sorted({o for o, _ in uses if o != ARG}):
                out[o].append(i)
        return out


def _maybe_tensor(t) -> TensorType | None:
    from jax.extend.mlir import ir

    if isinstance(t, ir.RankedTensorType) and all(d >= 0 for d in t.shape):
        return _tensor_type(t)
    return None
