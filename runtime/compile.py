"""Compile one segment: cut its module, annotate its layouts, wrap it, and compile it on its mesh.

Compilation happens ahead of time (``jit(...).lower(...).compile()``), when the executable is
loaded: a step then never waits for XLA, and the compile time is measurable on its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from planmap.runtime.annotate import Spec, annotate_module
from planmap.runtime.artifact import Artifact, make_context
from planmap.runtime.devices import StageMesh
from planmap.runtime.ir_graph import EntryGraph
from planmap.runtime.layout import Layouts
from planmap.runtime.split import SegmentCut, build_module
from planmap.runtime.wrap import to_exported

if TYPE_CHECKING:  # jax is imported lazily
    from jax.stages import Compiled

__all__ = ["CompiledSegment", "compile_segment"]


@dataclass(eq=False)
class CompiledSegment:
    """A segment ready to call: ``fn(*inputs)`` with inputs laid out as ``in_shardings``."""

    stage: int
    cut: SegmentCut
    mesh: StageMesh
    in_specs: tuple[Spec, ...]
    in_shardings: tuple
    out_shardings: tuple
    fn: Compiled
    compile_seconds: float
    module_text: str

    @property
    def device_ids(self) -> frozenset:
        return frozenset(d.id for d in self.mesh.mesh.devices.flat)


def compile_segment(artifact: Artifact, graph: EntryGraph, cut: SegmentCut, stage: int, mesh: StageMesh,
                    layouts: Layouts) -> CompiledSegment:
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    t0 = time.perf_counter()
    ctx = make_context()
    module, handles = build_module(artifact, cut, ctx)
    axes = dict(mesh.axes)
    in_specs = tuple(layouts.input_spec(r, axes, stage) for r in cut.inputs)
    out_specs = tuple(layouts.output_spec(r, axes, stage) for r in cut.outputs)
    if mesh.size > 1:
        constraints = []
        for op in cut.kept:
            for r in range(len(graph.result_types[op])):
                spec = layouts.constraint((op, r), axes, stage)
                if spec is not None:
                    constraints.append((handles[op], r, spec))
        annotate_module(module, ctx, mesh.axes, arg_specs=dict(enumerate(in_specs)),
                        result_specs={i: s for i, s in enumerate(out_specs) if s is not None},
                        constraints=constraints)
    else:
        out_specs = tuple(None for _ in out_specs)
    abstract = mesh.mesh.abstract_mesh
    in_types = [graph.tensor_type(r) for r in cut.inputs]
    out_types = [graph.tensor_type(r) for r in cut.outputs]
    exported = to_exported(
        module, ctx, in_types, out_types, nr_devices=mesh.size, platform=mesh.platform,
        in_shardings=[NamedSharding(abstract, P(*s)) for s in in_specs],
        out_shardings=[None if s is None else NamedSharding(abstract, P(*s)) for s in out_specs],
        name=f"stage{stage}_ops{cut.ops[0]}_{cut.ops[-1]}")
    in_shardings = tuple(NamedSharding(mesh.mesh, P(*s)) for s in in_specs)
    out_shardings = tuple(None if s is None else NamedSharding(mesh.mesh, P(*s)) for s in out_specs)
    jitted = jax.jit(exported.call, in_shardings=in_shardings, out_shardings=out_shardings)
    compiled = jitted.lower(*[jax.ShapeDtypeStruct(t.shape, t.np_dtype, sharding=s)
                              for t, s in zip(in_types, in_shardings, strict=True)]).compile()
    return CompiledSegment(stage=stage, cut=cut, mesh=mesh, in_specs=in_specs, in_shardings=in_shardings,
                           out_shardings=tuple(compiled.output_shardings), fn=compiled,
                           compile_seconds=time.perf_counter() - t0, module_text=str(module))
