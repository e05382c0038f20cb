"""The collectives in a compiled (SPMD-partitioned) XLA program, read from its HLO text.

Used to compare what a plan predicts (:attr:`planmap.sharding.SpmdEvaluation.collectives`) with what
XLA emits for the sharded program: every ``all-reduce``, ``all-gather``, ``reduce-scatter``,
``all-to-all`` and ``collective-permute`` instruction (async ``-start`` forms count once, their
``-done`` halves not), with the per-device bytes of each tensor it produces. A combined collective
(XLA's all-reduce combiner puts several tensors in one tuple) counts once per tensor, and says how many
tensors it combined. An ``all-to-all`` in tuple form (one operand per peer, as XLA's CPU backend emits
it) is one exchange: it counts once, with the bytes of all its pieces.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

__all__ = ["HloCollective", "hlo_collectives", "summarise", "spmd_plan", "compiled_collectives", "KINDS"]

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
_BYTES = {"f64": 8, "s64": 8, "u64": 8, "c64": 8, "f32": 4, "s32": 4, "u32": 4, "f16": 2, "bf16": 2, "s16": 2,
          "u16": 2, "s8": 1, "u8": 1, "pred": 1, "f8e4m3fn": 1, "f8e5m2": 1, "c128": 16}
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(?P<type>\(.*?\)|[\w]+\[[\d,]*\](?:\{[^}]*\})?)\s+"
                    r"(?P<op>" + "|".join(KINDS) + r")(?P<start>-start)?\(")
_TENSOR = re.compile(r"(\w+)\[([\d,]*)\]")


@dataclass(frozen=True)
class HloCollective:
    """One tensor moved by a collective instruction: kind, element type, per-device shape and bytes,
    and how many tensors its instruction combined."""

    kind: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    combined: int


def hlo_collectives(text: str) -> list[HloCollective]:
    """The collectives of HLO ``text`` (``compiled.as_text()``), in program order."""
    out = []
    for line in text.splitlines():
        m = _INSTR.match(line)
        if m is None:
            continue
        tensors = [(dt, tuple(int(x) for x in dims.split(",") if x)) for dt, dims in _TENSOR.findall(m["type"])
                   if dt in _BYTES]
        if m["start"] and m["type"].startswith("(") and len(tensors) >= 2 and m["op"] != "all-reduce":
            tensors = tensors[len(tensors) // 2:]  # async start: (operands..., results...)
        if m["op"] == "all-to-all" and len(tensors) > 1 and len({dt for dt, _ in tensors}) == 1:
            # the tuple form sends one piece per peer: one exchange of one tensor of all the pieces' bytes
            tensors = [(tensors[0][0], (sum(_numel(shape) for _, shape in tensors),))]
        for dt, shape in tensors:
            n = _BYTES[dt]
            for d in shape:
                n *= d
            out.append(HloCollective(m["op"], dt, shape, n, len(tensors)))
    return out


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def summarise(items: list[HloCollective]) -> dict[tuple[str, int], int]:
    """``{(kind, bytes per device): count}``."""
    return dict(Counter((c.kind, c.nbytes) for c in items))


def spmd_plan(problem, solution, artifact, path):
    """Write an SPMD ``solution`` of ``problem`` as a plan for ``artifact`` at ``path`` (no spec needed:
    the plan names only the artifact), for running or compiling it; returns the path."""
    from planmap.plan.manual import stage, write_plan

    names = list(problem.topology.names)
    sh = solution.shardings
    devices = [names[d] for d in solution.stages[0].devices]
    n_ops = problem.original.num_nodes
    mesh = dict(sh.mesh_axes)

    def entries(spec):
        return [list(e) if isinstance(e, tuple) else e for e in spec]

    return write_plan(path, artifact, [stage(devices, [(0, n_ops)], mesh)], data_args=[
        a.index for a in problem.original.args if a.role == "data"], mesh=mesh, devices=devices,
        args={i: entries(s) for i, s in sh.args.items()}, values={k: entries(s) for k, s in sh.values.items()},
        mode=problem.mode, name=solution.certificate.solver)


def compiled_collectives(problem, solution, artifact, plan_dir) -> list[HloCollective]:
    """The collectives XLA emits for an SPMD ``solution`` compiled on the local (fake) devices."""
    from pathlib import Path

    import planmap.runtime as rt

    # the plan names no spec (see spmd_plan), so `planmap check` cannot verify it: load it unchecked
    exe = rt.load(spmd_plan(problem, solution, artifact, Path(plan_dir) / "spmd.plan.yaml"), unchecked=True)
    out: list[HloCollective] = []
    for seg in exe.segments:
        text = seg.fn.as_text()
        if text is None:
            raise RuntimeError(f"XLA gave no HLO text for the compiled segment of stage {seg.stage}")
        out += hlo_collectives(text)
    return out
