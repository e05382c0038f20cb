"""The plan-free reference: the original artifact, unsharded, on one device — and how far a plan's
results may differ from it.

The reference runs the whole artifact microbatch by microbatch on a single device and combines the
microbatch results with the executable's own rules (see :mod:`planmap.runtime.layout`), so it
checks the splitting, sharding, transfers and scheduling — not the combine rules, which the test
suite checks against full-batch JAX computations.

Tolerance: a sharded or pipelined run reorders floating-point sums (partial dot products
all-reduced, microbatch gradients averaged), so results match to rounding, not bit for bit. An
output passes when ``max|out - ref| <= atol + rtol * max|ref|`` with, per dtype:

======================  ========  ========
dtype                   rtol      atol
======================  ========  ========
float64                 1e-9      1e-12
float32 (default)       1e-4      1e-5
float16 / bfloat16      2e-2      1e-3
integers / bool         exact     exact
======================  ========  ========
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planmap.runtime.artifact import make_context
from planmap.runtime.wrap import to_exported

__all__ = ["TOLERANCES", "tolerance", "OutputError", "reference_outputs", "compare", "nonfinite_outputs",
           "input_independent_outputs"]

TOLERANCES = {"float64": (1e-9, 1e-12), "float32": (1e-4, 1e-5), "float16": (2e-2, 1e-3), "bfloat16": (2e-2, 1e-3)}


def tolerance(dtype: np.dtype) -> tuple[float, float]:
    """(rtol, atol) for outputs of ``dtype`` (exact for integers and bool)."""
    if np.dtype(dtype).kind in "iub":
        return 0.0, 0.0
    return TOLERANCES.get(np.dtype(dtype).name, TOLERANCES["float32"])


@dataclass(frozen=True)
class OutputError:
    """How one output compares with the reference."""

    name: str
    rule: str
    max_abs: float
    scale: float
    rtol: float
    atol: float

    @property
    def ok(self) -> bool:
        return self.max_abs <= self.atol + self.rtol * self.scale

    @property
    def rel(self) -> float:
        return self.max_abs / self.scale if self.scale > 0 else float(self.max_abs > 0)


def reference_outputs(executable, args) -> list[np.ndarray]:
    """The unsharded artifact on ``jax.devices()[0]``, per microbatch, combined like the executable."""
    import jax

    art = executable.artifact
    ctx = make_context()
    module = art.parse(ctx)
    exp = to_exported(module, ctx, art.in_types, art.out_types, nr_devices=1,
                      platform=jax.devices()[0].platform, name="reference")
    device = jax.devices()[0]
    run = jax.jit(exp.call)  # follows the committed single-device arguments
    m_count, b = executable.microbatches, executable.batch
    per_mb = []
    for m in range(m_count):
        mb_args = [np.asarray(a)[m * b:(m + 1) * b] if (i in executable.data_args and m_count > 1) else np.asarray(a)
                   for i, a in enumerate(args)]
        placed = [jax.device_put(a, device) for a in mb_args]
        per_mb.append([np.asarray(o) for o in run(*placed)])
    out = []
    for k, rule in enumerate(executable.combine):
        vs = [mb[k] for mb in per_mb]
        if len(vs) == 1 or rule == "first":
            out.append(vs[0])
        elif rule == "concat":
            out.append(np.concatenate(vs, axis=0))
        else:
            out.append((np.sum(np.stack(vs).astype(np.float64), axis=0) / len(vs)).astype(vs[0].dtype))
    return out


def compare(executable, outputs, references) -> list[OutputError]:
    """Per output: max absolute error against the reference and the tolerance it is judged by."""
    from planmap.runtime.distributed import gather

    errs = []
    for k, (o, r) in enumerate(zip(outputs, references, strict=True)):
        o = gather(o)
        r = np.asarray(r)
        rtol, atol = tolerance(r.dtype)
        diff = np.abs(o.astype(np.float64) - r.astype(np.float64))
        errs.append(OutputError(name=executable.artifact.result_names[k], rule=executable.combine[k],
                                max_abs=float(diff.max()) if diff.size else 0.0,
                                scale=float(np.abs(r.astype(np.float64)).max()) if r.size else 0.0,
                                rtol=rtol, atol=atol))
    return errs


def nonfinite_outputs(executable, references) -> list[str]:
    """Names of the reference's float outputs holding NaN or Inf: the single-device run itself is not
    finite on these inputs, so no comparison with it means anything."""
    names = executable.artifact.result_names
    return [names[k] for k, r in enumerate(references)
            if np.asarray(r).dtype.kind in "fc" and not np.isfinite(np.asarray(r)).all()]


def input_independent_outputs(executable, references) -> list[str]:
    """Names of per-sample outputs (combined by concatenation) whose rows are all alike, within the
    output's tolerance: different samples give the same result, so they do not depend on the inputs
    (saturated or dead activations) and a comparison checks little."""
    out = []
    for k, (r, rule) in enumerate(zip(references, executable.combine, strict=True)):
        r = np.asarray(r)
        if rule != "concat" or r.ndim == 0 or r.shape[0] < 2 or r.dtype.kind not in "fc":
            continue
        rows = r.reshape(r.shape[0], -1).astype(np.float64)
        rtol, atol = tolerance(r.dtype)
        spread = float(np.abs(rows - rows[:1]).max()) if rows.size else 0.0
        if spread <= atol + rtol * float(np.abs(rows).max(initial=0.0)):
            out.append(executable.artifact.result_names[k])
    return out
