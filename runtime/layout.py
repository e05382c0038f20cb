"""How each value is laid out on its stage's mesh, and how outputs combine over microbatches.

Layouts (PartitionSpecs on a stage mesh), in order of precedence:

1. the plan's ``shardings`` — argument specs for entry arguments, ``values`` specs for op results
   (constraints inside the producing segment, input layout in consuming segments) — restricted to
   the axes the stage's mesh has (a pipeline stage on a ``model`` sub-mesh ignores ``data``; a spec
   none of whose axes the mesh has counts as no spec). In a plan of several stages each spec is
   written in the axis names of the stage that *owns* the value (an op result: its producer's stage;
   an argument: its first consumer's stage). Another stage with a mesh of its own holds the value
   in that spec restricted by name to its axes (:func:`planmap.sharding.owner.held_spec`: names it
   lacks dropped, a dim whose axes no longer divide it whole), replicated included — exactly the
   layout the planner costs. A stage on the plan mesh or a replicated stage reads the spec as a
   hint: it takes it when it fits its own mesh (the value then crosses with a plain copy) and
   otherwise falls back to rule 2 — a spec that does not divide a tensor is an error only in the
   owner's stage;
2. the *batch rule* on meshes with a ``data`` axis (replicated stages, data-parallel SPMD plans
   that leave an argument unspecified): a value that depends on a data argument and whose dim 0 is
   the microbatch size is split over ``data`` along dim 0 (when it divides evenly);
3. otherwise arguments are replicated, and segment results are left to the partitioner.

Any layout computes the same values — sharding is placement, not semantics — so the batch rule
only has to be a good guess, never an exact analysis.

Combining outputs over the ``M`` microbatches of a step (``microbatches > 1``), per artifact result:

* ``concat`` — a *batch output* (depends on a data argument and dim 0 equals the microbatch size,
  and in training mode is not shaped like the parameter whose gradient it would be): the M
  microbatch results concatenated along dim 0, in microbatch order.
* ``mean`` — any other output that depends on a data argument (a mean loss, its gradients, a
  metric): the average of the M microbatch results. For a loss that is a *mean* over the batch this
  is exactly the full-batch loss and gradient; for a *sum* over the batch multiply by M.
* ``first`` — outputs that do not depend on the data (identical for every microbatch): microbatch 0's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from planmap.errors import InputError
from planmap.plan.document import PlanDocument
from planmap.runtime.annotate import Spec, is_replicated, normalize_spec, restrict_spec
from planmap.runtime.ir_graph import ARG, EntryGraph, Ref
from planmap.sharding.owner import argument_owners, held_spec

__all__ = ["Layouts", "batch_size", "combine_rules", "COMBINE_RULES"]

COMBINE_RULES = ("concat", "mean", "first")


def _spec_of(entry_spec: list) -> tuple:
    return tuple(tuple(x) if isinstance(x, list) else x for x in entry_spec)


def batch_size(graph: EntryGraph, data_args: Sequence[int]) -> int | None:
    """The microbatch size: dim 0 shared by all data arguments (None if there are none)."""
    sizes = set()
    for i in data_args:
        if not 0 <= i < len(graph.arg_types):
            raise InputError(f"the plan's data_args name argument {i}, but @main has {len(graph.arg_types)} arguments")
        t = graph.arg_types[i]
        if t.rank == 0:
            raise InputError(f"data argument {i} is a scalar; data arguments are split along dim 0")
        sizes.add(t.shape[0])
    if len(sizes) > 1:
        raise InputError(f"the data arguments {list(data_args)} disagree on the batch size (dim 0): {sorted(sizes)}")
    return sizes.pop() if sizes else None


class Layouts:
    """Layout decisions for one plan over one artifact (see the module docstring)."""

    def __init__(self, doc: PlanDocument, graph: EntryGraph, op_stage: np.ndarray | None = None):
        self.graph = graph
        self._op_stage = op_stage
        self._own_mesh = [st.mesh is not None for st in doc.stages]
        self._arg_stage: dict[int, int] | None = None
        self.data_args = frozenset(doc.data_args)
        self.batch = batch_size(graph, doc.data_args)
        self._data_dep = graph.depends_on(self.data_args)
        self.arg_specs: dict[int, Spec] = {}
        for e in doc.shardings.args:
            if e.arg is None or not 0 <= e.arg < len(graph.arg_types):
                raise InputError(f"the plan shards argument {e.arg}, but @main has {len(graph.arg_types)} arguments")
            self.arg_specs[e.arg] = normalize_spec(_spec_of(e.spec), graph.arg_types[e.arg].rank, f"argument {e.arg}")
        self.value_specs: dict[Ref, Spec] = {}
        for e in doc.shardings.values:
            if e.op is None or not 0 <= e.op < graph.n_ops or not 0 <= e.result < len(graph.result_types[e.op]):
                raise InputError(f"the plan constrains op {e.op} result {e.result}, which @main does not have "
                                 f"({graph.n_ops} ops)")
            t = graph.result_types[e.op][e.result]
            if t is None:
                raise InputError(f"the plan constrains op {e.op} result {e.result}, which is not a tensor")
            self.value_specs[(e.op, e.result)] = normalize_spec(_spec_of(e.spec), t.rank,
                                                                f"op {e.op} result {e.result}")

    def batched(self, ref: Ref) -> bool:
        """Depends on a data argument and dim 0 is the microbatch size."""
        t = self.graph.type_of(ref)
        if t is None or t.rank == 0 or self.batch is None or t.shape[0] != self.batch:
            return False
        return self.graph.ref_depends_on(ref, self.data_args, self._data_dep)

    def _batch_rule(self, ref: Ref, axes: dict[str, int]) -> Spec | None:
        r = axes.get("data", 1)
        if r > 1 and self.batch is not None and self.batched(ref) and self.batch % r == 0:
            return ("data",) + (None,) * (self.graph.tensor_type(ref).rank - 1)
        return None

    def owner(self, ref: Ref) -> int | None:
        """The stage whose axis names ``ref``'s spec is written in (:mod:`planmap.sharding.owner`); None
        without stage information."""
        if self._op_stage is None:
            return None
        if ref[0] != ARG:
            return int(self._op_stage[ref[0]])
        if self._arg_stage is None:
            reads = ((op, a) for op, operands in enumerate(self.graph.operands) for o, a in operands if o == ARG)
            self._arg_stage = argument_owners(self._op_stage, reads)
        return self._arg_stage.get(ref[1])

    def _explicit(self, ref: Ref, axes: dict[str, int], stage: int | None = None) -> Spec | None:
        """The plan's spec for ``ref`` on this mesh; None when there is none or none of its axes exist here
        (a stage on a sub-mesh without the plan's axes then falls back to the batch rule), or when
        ``stage`` is not the value's owner and the spec does not fit this mesh (module docstring). A stage
        with a mesh of its own holds a value it does not own exactly as the planner costs it
        (:func:`planmap.sharding.owner.held_spec`), replicated included."""
        spec = self.arg_specs.get(ref[1]) if ref[0] == ARG else self.value_specs.get(ref)
        if spec is None:
            return None
        shape = self.graph.tensor_type(ref).shape
        owner = self.owner(ref)
        foreign = stage is not None and owner is not None and owner != stage
        if foreign and stage is not None and self._own_mesh[stage]:
            named = [() if e is None else (e,) if isinstance(e, str) else tuple(e) for e in spec]
            held = held_spec(named, list(axes), list(axes.values()), shape)
            return tuple(None if not d else d[0] if len(d) == 1 else d for d in held)
        restricted = restrict_spec(spec, list(axes))
        if is_replicated(restricted) and not is_replicated(spec):
            return None
        if foreign:
            return restricted if self._divides(restricted, shape, axes) is None else None
        self._check_divides(restricted, shape, axes, ref)
        return restricted

    def input_spec(self, ref: Ref, axes: dict[str, int], stage: int | None = None) -> Spec:
        """Layout of a segment input on a mesh with ``axes`` (name -> size) of plan stage ``stage``."""
        explicit = self._explicit(ref, axes, stage)
        if explicit is not None:
            return explicit
        return self._batch_rule(ref, axes) or (None,) * self.graph.tensor_type(ref).rank

    def output_spec(self, ref: Ref, axes: dict[str, int], stage: int | None = None) -> Spec | None:
        """Layout of a segment result; None leaves it to the partitioner."""
        return self._explicit(ref, axes, stage) or self._batch_rule(ref, axes)

    def constraint(self, ref: Ref, axes: dict[str, int], stage: int | None = None) -> Spec | None:
        """A sharding constraint to insert after ``ref``'s op (only where the plan asks for one; in
        another stage than the op's own — a recomputed op — only where the spec fits)."""
        return self._explicit(ref, axes, stage) if ref in self.value_specs else None

    @staticmethod
    def _divides(spec: Spec, shape: tuple[int, ...], axes: dict[str, int]) -> tuple[int, int] | None:
        """The first (dim, shards) that ``spec`` does not split evenly; None when every dim divides."""
        for dim, entry in enumerate(spec):
            if entry is None:
                continue
            n = int(np.prod([axes[a] for a in ((entry,) if isinstance(entry, str) else entry)]))
            if shape[dim] % n:
                return dim, n
        return None

    def _check_divides(self, spec: Spec, shape: tuple[int, ...], axes: dict[str, int], ref: Ref) -> None:
        bad = self._divides(spec, shape, axes)
        if bad is not None:
            dim, n = bad
            what = f"argument {ref[1]}" if ref[0] == ARG else f"op {ref[0]} result {ref[1]}"
            raise InputError(f"the sharding {list(spec)} of {what} requires dim {dim} (size {shape[dim]}) "
                             f"to divide into {n} shards, but it does not")


def combine_rules(layouts: Layouts, mode: str) -> tuple[str, ...]:
    """The combine rule of each artifact result (see the module docstring)."""
    g = layouts.graph
    param_types = [t for i, t in enumerate(g.arg_types) if i not in layouts.data_args]
    rules = []
    for k, ref in enumerate(g.returns):
        data = g.ref_depends_on(ref, layouts.data_args, layouts._data_dep)
        grad_like = mode == "training" and 1 <= k <= len(param_types) and g.type_of(ref) == param_types[k - 1]
        if layouts.batched(ref) and not grad_like:
            rules.append("concat")
        elif data:
            rules.append("mean")
        else:
            rules.append("first")
    return tuple(rules)
