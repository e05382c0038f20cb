"""``Executable``: a plan applied to its artifact — compiled segments, a dispatch order, and a call.

Calling it runs one *step*: the data arguments carry the global batch (``microbatches`` times the
artifact's batch along dim 0), which is split into microbatches; every (microbatch, segment) call
is dispatched in the schedule's order (see :mod:`planmap.runtime.schedule`), values crossing
between stages move with ``jax.device_put``, and the microbatch results are combined per output
(see :mod:`planmap.runtime.layout`: batch outputs concatenated, data-dependent non-batch outputs
such as a mean loss and its gradients averaged, data-independent outputs taken once).

Dispatch is asynchronous: the call returns as soon as the work is queued, and independent stages
run concurrently on their devices. Except on CPU devices for calls with collectives: the CPU
client does not keep one execution order per device, so two in-flight calls of a multi-device
segment (two microbatches) can reach their all-reduces in opposite orders on different devices
and deadlock (seen with 8 fake devices on 2 cores); there, a multi-device call is waited for
before the next call is dispatched. Set ``profile = True`` to block after every call and record how
long each stage is busy per step (:meth:`Executable.stage_times`) — that serialises the pipeline,
so measure step time with ``profile`` off.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from planmap.errors import InputError, PlanmapError
from planmap.plan.document import PlanDocument
from planmap.runtime.artifact import Artifact
from planmap.runtime.compile import CompiledSegment, compile_segment
from planmap.runtime.devices import map_devices, stage_meshes
from planmap.runtime.ir_graph import ARG, EntryGraph, Ref
from planmap.runtime.layout import Layouts, combine_rules
from planmap.runtime.remat import remat_sets, split_for_remat, stage_remat, stash_bytes
from planmap.runtime.schedule import dispatch_order
from planmap.runtime.segments import form_segments, op_stages
from planmap.runtime.split import plan_cuts
from planmap.runtime.transfer import place

__all__ = ["Executable"]


class Executable:
    """A compiled plan. ``exe(*args)`` runs one step; arguments in the artifact's order.

    Data arguments carry the global batch: ``microbatches x batch`` rows along dim 0, split in order
    (microbatch m = rows ``[m*batch, (m+1)*batch)``). Returns a tuple with one array per artifact
    result, combined over the microbatches by ``combine[k]``: ``concat`` (batch outputs, along dim
    0 in microbatch order), ``mean`` (other data-dependent outputs: a mean loss and its gradients
    average to exactly the full-batch values), ``first`` (data-independent outputs).
    Attributes: ``plan`` (the document),
    ``artifact``, ``microbatches``, ``batch`` (the artifact's microbatch size), ``data_args``,
    ``combine`` (rule per output), ``input_shardings`` (where each argument is wanted: place
    parameters there once to avoid copies every step), ``compile_seconds``, ``profile``,
    ``stash_bytes`` (per stage position: bytes kept per microbatch for the stage's later calls).
    """

    def __init__(self, doc: PlanDocument, artifact: Artifact, *, devices: Sequence | None = None,
                 recompute: bool = True):
        if not doc.stages:
            raise InputError("the plan has no stages")
        self.plan = doc
        self.artifact = artifact
        self.graph = graph = EntryGraph.from_artifact(artifact)
        self.layouts = layouts = Layouts(doc, graph, op_stages(doc, graph.n_ops))
        self.microbatches = doc.schedule.microbatches
        self.batch = layouts.batch
        self.data_args = tuple(sorted(layouts.data_args))
        if self.microbatches > 1 and not self.data_args:
            raise InputError(f"the plan streams {self.microbatches} microbatches but declares no data_args "
                             "to split; regenerate the plan")
        meshes = stage_meshes(doc, map_devices(doc, devices), self.batch)
        again = stage_remat(doc)
        segments = split_for_remat(form_segments(doc, graph), again)
        cuts = plan_cuts(graph, [list(s.ops) for s in segments], recompute=recompute,
                         remat=remat_sets(segments, again))
        self.stash_bytes = stash_bytes(graph, segments, cuts)
        live = [(s, c) for s, c in zip(segments, cuts, strict=True) if c.outputs]
        t0 = time.perf_counter()
        self.segments: list[CompiledSegment] = [
            compile_segment(artifact, graph, c, s.stage, meshes[s.stage], layouts) for s, c in live]
        self.compile_seconds = time.perf_counter() - t0
        producer = {ref: g for g, seg in enumerate(self.segments) for ref in seg.cut.outputs}
        deps = [sorted({producer[r] for r in seg.cut.inputs if r[0] != ARG}) for seg in self.segments]
        self._order = dispatch_order(doc.schedule.kind, self.microbatches, [s.stage for s in self.segments], deps,
                                     [frozenset(m.mesh.devices.flat) for m in meshes])
        self.combine = combine_rules(layouts, doc.mode)
        self._uses: dict[Ref, int] = defaultdict(int)
        for seg in self.segments:
            for r in seg.cut.inputs:
                self._uses[r] += 1
        self._rule_of: dict[Ref, str] = {}
        for ref, rule in zip(graph.returns, self.combine, strict=True):
            if ref[0] != ARG:
                self._rule_of[ref] = rule
        first_use = {}
        for seg in self.segments:
            for k, r in enumerate(seg.cut.inputs):
                if r[0] == ARG and r[1] not in first_use:
                    first_use[r[1]] = seg.in_shardings[k]
        self.input_shardings = tuple(first_use.get(i) for i in range(len(artifact.in_types)))
        self._serial = {seg for seg in self.segments if seg.mesh.size > 1 and seg.mesh.platform == "cpu"}
        self.profile = False
        self._stage_samples: list[dict[int, float]] = []

    # ----------------------------------------------------------------------------- inspection
    @property
    def num_stages(self) -> int:
        return len(self.plan.stages)

    def stage_segments(self) -> dict[int, list[CompiledSegment]]:
        """Plan stage id -> its compiled segments."""
        out: dict[int, list[CompiledSegment]] = {st.id: [] for st in self.plan.stages}
        for seg in self.segments:
            out[self.plan.stages[seg.stage].id].append(seg)
        return out

    def stage_times(self) -> dict[int, float]:
        """Plan stage id -> median seconds the stage is busy per step (its calls and incoming transfers),
        over the steps run with ``profile = True``."""
        if not self._stage_samples:
            raise PlanmapError("no stage times recorded yet: set `exe.profile = True` and run a step first")
        return {st.id: statistics.median(s.get(k, 0.0) for s in self._stage_samples)
                for k, st in enumerate(self.plan.stages)}

    def expected_shape(self, i: int) -> tuple[int, ...]:
        """Shape argument ``i`` must have in a call (data arguments carry the global batch)."""
        shape = self.artifact.in_types[i].shape
        if i in self.layouts.data_args:
            return (shape[0] * self.microbatches,) + shape[1:]
        return shape

    # ----------------------------------------------------------------------------- running
    def __call__(self, *args):
        import jax

        args = self._check_args(args)
        placed: dict = {}
        values: dict[tuple[int, Ref], object] = {}
        remaining: dict[tuple[int, Ref], int] = {}
        collected: dict[Ref, list] = {}  # concat / first: the microbatch results; mean: [running sum]
        busy: dict[int, float] = defaultdict(float)
        for m, g in self._order:
            seg = self.segments[g]
            t0 = time.perf_counter() if self.profile else 0.0
            inputs = [self._input(ref, seg.in_shardings[k], m, args, placed, values)
                      for k, ref in enumerate(seg.cut.inputs)]
            outs = seg.fn(*inputs)
            if self.profile or seg in self._serial:
                jax.block_until_ready(outs)
                busy[seg.stage] += time.perf_counter() - t0
            for ref, v in zip(seg.cut.outputs, outs, strict=True):
                if ref in self._rule_of:
                    self._collect(collected, ref, m, v)
                if self._uses.get(ref, 0):
                    values[(m, ref)] = v
                    remaining[(m, ref)] = self._uses[ref]
            for ref in seg.cut.inputs:
                if ref[0] != ARG:
                    key = (m, ref)
                    remaining[key] -= 1
                    if remaining[key] == 0:
                        del values[key]
                        for pk in [k for k in placed if k[:2] == key]:
                            del placed[pk]
        if self.profile:
            self._stage_samples.append(dict(busy))
        return tuple(self._result(ref, args, collected) for ref in self.graph.returns)

    def _collect(self, collected: dict, ref: Ref, m: int, v) -> None:
        """Keep microbatch ``m``'s value of a returned ``ref`` the way its combine rule needs it.

        ``mean`` outputs are summed as they arrive, on the devices that produce them: gradient
        accumulation holds one running sum per gradient, not one gradient per microbatch."""
        rule = self._rule_of[ref]
        if rule == "mean":
            collected[ref] = [v] if ref not in collected else [collected[ref][0] + v]
        elif rule == "concat" or m == 0:
            collected.setdefault(ref, []).append(v)

    def _result(self, ref: Ref, args, collected: dict):
        import jax.numpy as jnp

        if ref[0] == ARG:
            x = args[ref[1]]
            return jnp.asarray(x) if isinstance(x, np.ndarray) else x
        rule, vs = self._rule_of[ref], collected[ref]
        if rule == "concat" and len(vs) > 1:
            return jnp.concatenate(vs, axis=0)
        if rule == "mean" and self.microbatches > 1:
            return (vs[0] / self.microbatches).astype(vs[0].dtype)
        return vs[0]

    def _input(self, ref: Ref, sharding, m: int, args, placed: dict, values: dict):
        op, r = ref
        if op == ARG:
            if r in self.layouts.data_args:
                key: tuple = ("arg", r, m, sharding)
                if key not in placed:
                    placed[key] = place(self._microbatch(args[r], m), sharding)
            else:
                key = ("arg", r, None, sharding)
                if key not in placed:
                    placed[key] = place(args[r], sharding)
            return placed[key]
        key = (m, ref, sharding)
        if key not in placed:
            placed[key] = place(values[(m, ref)], sharding)
        return placed[key]

    def _microbatch(self, x, m: int):
        if self.microbatches == 1:
            return x
        b = self.batch
        if b is None:
            raise PlanmapError("splitting a batch into microbatches requires the artifact's batch size")
        if isinstance(x, np.ndarray):
            return x[m * b:(m + 1) * b]
        import jax

        return jax.lax.slice_in_dim(x, m * b, (m + 1) * b, axis=0)

    def _check_args(self, args: tuple) -> list:
        import jax

        n = len(self.artifact.in_types)
        if len(args) != n:
            raise InputError(f"the artifact takes {n} arguments ({', '.join(self.artifact.arg_names[:3])}, ...), "
                             f"but got {len(args)}")
        out = []
        for i, x in enumerate(args):
            want_shape, want = self.expected_shape(i), self.artifact.in_types[i].np_dtype
            if not isinstance(x, jax.Array):
                x = np.asarray(x)
                if x.dtype != want and x.shape == want_shape:
                    x = x.astype(want)
            if tuple(x.shape) != want_shape:
                hint = (f" ({self.microbatches} microbatches x {self.batch} along dim 0)"
                        if i in self.layouts.data_args and self.microbatches > 1 else "")
                raise InputError(f"argument {i} ({self.artifact.arg_names[i]}) requires shape {want_shape}{hint}, "
                                 f"but got {tuple(x.shape)}")
            if x.dtype != want:
                raise InputError(f"argument {i} ({self.artifact.arg_names[i]}) requires dtype {want}, "
                                 f"but got {x.dtype}")
            out.append(x)
        return out
