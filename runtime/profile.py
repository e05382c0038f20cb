"""Time each node of a coarsened graph on one local JAX device: the measurements of ``planmap profile``.

Each node's ops are cut out of the artifact as the runtime cuts a segment (cheap input-free values
recomputed inside, every other input an argument), compiled for one device, called ``warmup`` times,
then timed ``repeats`` times (wall clock around a blocking call; the median is kept). Calling an
empty program costs something too (dispatch, argument checks): that is measured the same way and
subtracted, so a node's time is its kernels' time, as inside a stage program. Inputs are zeros of
each argument's type (valid indices for gathers; the same arithmetic cost as random data on CPU and
GPU, which do not skip zeros).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from planmap.graph import OpGraph
from planmap.runtime.artifact import Artifact, make_context
from planmap.runtime.ir_graph import EntryGraph
from planmap.runtime.split import build_module, plan_cuts
from planmap.runtime.wrap import to_exported

__all__ = ["device_kind", "time_call", "time_nodes", "time_program"]

_KINDS = {"cpu": "cpu", "gpu": "gpu", "cuda": "gpu", "rocm": "gpu", "tpu": "tpu"}


def device_kind(device: Any) -> str:
    """The cluster device kind (cpu, gpu, tpu) of a JAX device."""
    return _KINDS.get(device.platform, device.platform)


def time_call(fn: Callable, args: tuple, warmup: int, repeats: int) -> float:
    """Median wall-clock seconds of ``fn(*args)`` to completion, after ``warmup`` calls."""
    import jax

    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _call_overhead(device: Any, warmup: int, repeats: int) -> float:
    import jax
    import jax.numpy as jnp

    x = jax.device_put(np.zeros(1, np.float32), device)
    fn = jax.jit(lambda v: v + 1).lower(jax.ShapeDtypeStruct((1,), jnp.float32)).compile()
    return time_call(fn, (x,), warmup, repeats)


def _compiled_ops(artifact: Artifact, graph: EntryGraph, ops: list[int], device: Any, name: str):
    """(compiled program of ``ops`` cut as a runtime segment, zero inputs on ``device``), or None when
    the ops produce nothing another op or the entry's return reads."""
    import jax

    rest = np.setdiff1d(np.arange(graph.n_ops), ops).tolist()
    cut = plan_cuts(graph, [ops, rest] if rest else [ops])[0]
    if not ops or not cut.outputs:
        return None
    ctx = make_context()
    module, _ = build_module(artifact, cut, ctx)
    in_types = [graph.tensor_type(r) for r in cut.inputs]
    out_types = [graph.tensor_type(r) for r in cut.outputs]
    exported = to_exported(module, ctx, in_types, out_types, nr_devices=1, platform=device.platform, name=name)
    compiled = jax.jit(exported.call).lower(*[jax.ShapeDtypeStruct(t.shape, t.np_dtype) for t in in_types]).compile()
    return compiled, tuple(jax.device_put(np.zeros(t.shape, t.np_dtype), device) for t in in_types)


def time_program(artifact: Artifact, *, device: Any = None, warmup: int = 2, repeats: int = 5) -> float:
    """Median seconds of the whole entry function as one program on ``device`` (the call overhead
    included: it is what one step pays)."""
    import jax

    device = device if device is not None else jax.local_devices()[0]
    graph = EntryGraph.from_artifact(artifact)
    compiled, args = _compiled_ops(artifact, graph, list(range(graph.n_ops)), device, "profile_all")
    return time_call(compiled, args, warmup, repeats)


def time_nodes(artifact: Artifact, coarse: OpGraph, *, device: Any = None, warmup: int = 2, repeats: int = 5,
               progress: Callable[[int, int], None] | None = None) -> tuple[np.ndarray, float]:
    """(seconds per node of ``coarse``, call overhead subtracted) on ``device`` (default: the first
    local device). ``coarse`` must be a coarsening of ``artifact``'s entry function."""
    import jax

    device = device if device is not None else jax.local_devices()[0]
    graph = EntryGraph.from_artifact(artifact)
    if graph.n_ops != coarse.n_original:
        raise ValueError(f"the graph has {coarse.n_original} ops, the artifact {graph.n_ops}")
    overhead = _call_overhead(device, warmup, repeats)
    seconds = np.zeros(coarse.num_nodes)
    for i in range(coarse.num_nodes):
        prog = _compiled_ops(artifact, graph, sorted(int(o) for o in coarse.members_of(i)), device,
                             f"profile_node{i}")
        if prog is not None:
            seconds[i] = max(0.0, time_call(prog[0], prog[1], warmup, repeats) - overhead)
        if progress is not None:
            progress(i + 1, coarse.num_nodes)
    return seconds, overhead
