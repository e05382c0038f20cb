"""Time each node of a coarsened graph on one local JAX device: the measurements of ``planmap profile``.

Each node's ops are cut out of the artifact as the runtime cuts a segment (cheap input-free values
recomputed inside, every other input an argument) and compiled for one device; all of them are
compiled first (so all are held at once: node programs and their inputs), warmed up, then timed in
rounds, each program once per round (wall clock around a blocking call), so that a load that
comes and goes on a shared machine touches every node alike; the median over the rounds is kept,
or the minimum (the time without interference). Calling an empty program costs something too
(dispatch, argument checks): it is timed in the same rounds and subtracted, so a node's time is
its kernels' time, as inside a stage program. The whole entry function compiled as one program can
be timed in the same rounds (``whole=True``): what the nodes cost in their real producer/consumer
context (see :mod:`planmap.profile`, the context factor). Inputs are zeros of each argument's type (valid
indices for gathers; the same arithmetic cost as random data on CPU and GPU, which do not skip
zeros).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from planmap.graph import OpGraph
from planmap.runtime.artifact import Artifact, make_context
from planmap.runtime.ir_graph import EntryGraph
from planmap.runtime.split import build_module, plan_cuts
from planmap.runtime.wrap import to_exported

__all__ = ["device_kind", "time_rounds", "whole_program", "node_programs", "time_nodes", "NodeTimes",
           "ops_program", "ProfilePrograms", "compile_programs", "time_programs"]

_KINDS = {"cpu": "cpu", "gpu": "gpu", "cuda": "gpu", "rocm": "gpu", "tpu": "tpu"}


def device_kind(device: Any) -> str:
    """The cluster device kind (cpu, gpu, tpu) of a JAX device."""
    return _KINDS.get(device.platform, device.platform)


def time_rounds(programs: list[tuple[Callable, tuple]], warmup: int, repeats: int,
                clock: Callable[[], float] = time.perf_counter) -> np.ndarray:
    """(repeats, P) seconds: every program called once per round, rounds one after another, so that
    a load that comes and goes on a shared machine touches all programs alike (each is warmed up
    ``warmup`` times first). ``clock``: wall time by default; ``time.process_time`` gives the CPU time
    of all the process's threads (the work, without the waits for a core)."""
    import jax

    for fn, args in programs:
        for _ in range(warmup):
            jax.block_until_ready(fn(*args))
    out = np.zeros((repeats, len(programs)))
    for r in range(repeats):
        for p, (fn, args) in enumerate(programs):
            t0 = clock()
            jax.block_until_ready(fn(*args))
            out[r, p] = clock() - t0
    return out


def _empty_program(device: Any) -> tuple[Callable, tuple]:
    """A program that does (almost) nothing: what calling any compiled program costs."""
    import jax
    import jax.numpy as jnp

    x = jax.device_put(np.zeros(1, np.float32), device)
    return jax.jit(lambda v: v + 1).lower(jax.ShapeDtypeStruct((1,), jnp.float32)).compile(), (x,)


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


def whole_program(artifact: Artifact, device: Any) -> tuple[Callable, tuple]:
    """The whole entry function compiled as one program on ``device``, with zero inputs."""
    graph = EntryGraph.from_artifact(artifact)
    return _compiled_ops(artifact, graph, list(range(graph.n_ops)), device, "profile_all")


def ops_program(artifact: Artifact, ops: list[int], device: Any) -> tuple[Callable, tuple] | None:
    """The entry function's ``ops`` cut as a runtime segment (a stage's program) and compiled on ``device``,
    with zero inputs; None when they produce nothing read."""
    graph = EntryGraph.from_artifact(artifact)
    return _compiled_ops(artifact, graph, sorted(ops), device, "profile_ops")


def node_programs(artifact: Artifact, coarse: OpGraph, device: Any) -> list[tuple[Callable, tuple] | None]:
    """Per node of ``coarse`` (a coarsening of ``artifact``'s entry function), its ops compiled as a
    runtime segment on ``device`` with zero inputs, or None when they produce nothing read."""
    graph = EntryGraph.from_artifact(artifact)
    if graph.n_ops != coarse.n_original:
        raise ValueError(f"the graph has {coarse.n_original} ops, the artifact {graph.n_ops}")
    return [_compiled_ops(artifact, graph, sorted(int(o) for o in coarse.members_of(i)), device, f"profile_node{i}")
            for i in range(coarse.num_nodes)]


class NodeTimes(NamedTuple):
    """Seconds per node (empty-call cost subtracted), that cost, and the whole program's seconds (empty-call
    cost subtracted; None when it was not timed)."""

    seconds: np.ndarray
    overhead: float
    program: float | None


class ProfilePrograms(NamedTuple):
    """What a profile times, compiled: the empty program, the whole entry function (None when not timed),
    and per node its program (None for a node that produces nothing read)."""

    empty: tuple[Callable, tuple]
    entry: tuple[Callable, tuple] | None
    nodes: list[tuple[Callable, tuple] | None]


def compile_programs(artifact: Artifact, coarse: OpGraph, device: Any, whole: bool = False) -> ProfilePrograms:
    """The programs :func:`time_programs` times for ``coarse``'s nodes (and the whole entry function)."""
    return ProfilePrograms(_empty_program(device), whole_program(artifact, device) if whole else None,
                           node_programs(artifact, coarse, device))


def time_programs(programs: ProfilePrograms, warmup: int = 2, repeats: int = 5, stat: str = "median") -> NodeTimes:
    """Node (and whole-program) times: the ``stat`` (median or min) over ``repeats`` rounds. The whole
    program is called twice per round, before the nodes and halfway through them, so that a burst of load
    over one part of a round does not set its time alone (on a shared machine a multi-threaded program
    waits for its pool threads to be scheduled)."""
    live = [p for p in programs.nodes if p is not None]
    program_at: list[int] = []
    if programs.entry is not None:
        half = len(live) // 2
        live = [programs.entry, *live[:half], programs.entry, *live[half:]]
        program_at = [1, 2 + half]
    times = time_rounds([programs.empty, *live], warmup, repeats)

    def pick(t: np.ndarray) -> np.ndarray:
        return t.min(axis=0) if stat == "min" else np.median(t, axis=0)

    per = pick(times)
    seconds = np.zeros(len(programs.nodes))
    seconds[[i for i, p in enumerate(programs.nodes) if p is not None]] = np.maximum(
        np.delete(per, program_at)[1:] - per[0], 0.0)
    program = None
    if program_at:
        program = max(float(pick(times[:, program_at].reshape(-1, 1))[0] - per[0]), 0.0)
    return NodeTimes(seconds, float(per[0]), program)


def time_nodes(artifact: Artifact, coarse: OpGraph, *, device: Any = None, warmup: int = 2, repeats: int = 5,
               stat: str = "median", whole: bool = False) -> NodeTimes:
    """The nodes of ``coarse`` (a coarsening of ``artifact``'s entry function), and with ``whole`` the entry
    function as one program, compiled and timed on ``device`` (default: the first local device), see
    :func:`time_programs`."""
    import jax

    device = device if device is not None else jax.local_devices()[0]
    return time_programs(compile_programs(artifact, coarse, device, whole), warmup, repeats, stat)
