"""Inputs for running a plan without the user's data: seeded random arrays, or arrays from a ``.npz``.

Random inputs must be *valid*, not just well-shaped: an integer argument is usually an index (token
ids into an embedding, class labels into log-probabilities), and an out-of-range index gathers
clamped garbage that hides real errors. :func:`index_bound` follows an integer argument through
shape and elementwise ops (into called functions and back out of them) to the ``gather`` ops it indexes, and bounds
it by the indexed dimension (the vocabulary, the number of classes). Float parameters are scaled
by ``1/sqrt(fan-in)`` so that activations stay in a range where errors are meaningful; a float
argument that reaches a square root, a logarithm or a batch norm's variance (:func:`input_domains`)
is drawn from ``[0.5, 1.5)``, so that random batch-norm statistics do not make the reference NaN.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from planmap.errors import InputError
from planmap.io import read_input
from planmap.runtime.artifact import Artifact, entry_function, make_context

__all__ = ["ArgDomain", "random_inputs", "load_inputs", "input_domains", "index_bound", "DEFAULT_INDEX_BOUND"]

DEFAULT_INDEX_BOUND = 4  # integer inputs that index nothing the analysis can see: keep them small

_PASS_THROUGH = frozenset({
    "stablehlo.convert", "stablehlo.broadcast_in_dim", "stablehlo.reshape", "stablehlo.add",
    "stablehlo.select", "stablehlo.concatenate", "stablehlo.transpose", "stablehlo.slice", "stablehlo.clamp",
})


# ops whose operand must be positive for a finite result (batch_norm_inference: its variance operand)
_POSITIVE_OPERAND = {"stablehlo.sqrt": 0, "stablehlo.rsqrt": 0, "stablehlo.log": 0, "stablehlo.batch_norm_inference": 4}


@dataclass(frozen=True)
class ArgDomain:
    """Where an argument's random values must lie: below ``index_bound`` (an index into a gather; None:
    not an index), and above zero when ``positive`` (it reaches a square root, a logarithm or a batch
    norm's variance through shape and additive ops, as a variance or a scale does)."""

    index_bound: int | None
    positive: bool


def input_domains(artifact: Artifact) -> list[ArgDomain]:
    """The :class:`ArgDomain` of every argument of ``artifact`` (one parse of the module)."""
    ctx = make_context()
    module = artifact.parse(ctx)
    with ctx:
        funcs = {op.attributes["sym_name"].value: op for op in module.body.operations
                 if op.operation.name == "func.func"}
        block = entry_function(module).regions[0].blocks[0]
        return [_domain(arg, funcs) for arg in block.arguments]


def index_bound(artifact: Artifact, arg: int) -> int | None:
    """The exclusive upper bound of valid values of integer argument ``arg`` (None: not an index)."""
    return input_domains(artifact)[arg].index_bound


def _domain(argument, funcs: dict) -> ArgDomain:
    """Follow one argument through pass-through ops and calls to the ops that constrain its values."""
    from jax.extend.mlir import ir
    from jax.extend.mlir.dialects import stablehlo

    # each entry: a value and the calls it was followed into (innermost last), so that a value a callee
    # returns continues at its call's result (jnp.take routes an index through a private @_where call)
    stack: list[tuple[Any, tuple]] = [(argument, ())]
    seen: set = set()
    bounds: list[int] = []
    positive = False
    while stack:
        value, calls = stack.pop()
        key = (value.get_name() + str(id(value.owner)), tuple(id(c) for c in calls))
        if key in seen:
            continue
        seen.add(key)
        for use in value.uses:
            op = use.owner
            op = op.operation if hasattr(op, "operation") else op
            name = op.name
            if name == "stablehlo.gather" and use.operand_number == 1:
                dn = stablehlo.GatherDimensionNumbers(op.attributes["dimension_numbers"])
                shape = ir.RankedTensorType(op.operands[0].type).shape
                bounds.extend(shape[d] for d in dn.start_index_map)
            elif _POSITIVE_OPERAND.get(name) == use.operand_number:
                positive = True
            elif name == "func.call":
                callee = funcs.get(ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
                if callee is not None:
                    stack.append((callee.regions[0].blocks[0].arguments[use.operand_number], calls + (op,)))
            elif name == "func.return" and calls:
                stack.append((calls[-1].results[use.operand_number], calls[:-1]))
            elif name in _PASS_THROUGH:
                stack.extend((result, calls) for result in op.results)
    return ArgDomain(min(bounds) if bounds else None, positive)


def _fan_in(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape[:-1])) if len(shape) >= 2 else 1


def random_inputs(executable, seed: int = 0) -> list[np.ndarray]:
    """Seeded random arguments for ``executable`` (data arguments with the global batch)."""
    rng = np.random.default_rng(seed)
    art = executable.artifact
    domains = input_domains(art)
    out = []
    for i, t in enumerate(art.in_types):
        shape = executable.expected_shape(i)
        dtype = t.np_dtype
        kind = dtype.kind
        if (kind == "f" or dtype.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2")) and domains[i].positive:
            out.append(rng.uniform(0.5, 1.5, shape).astype(dtype))  # variances, scales under a square root
        elif kind == "f" or dtype.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
            scale = 1.0 if i in executable.data_args else 1.0 / np.sqrt(_fan_in(shape))
            out.append((rng.standard_normal(shape) * scale).astype(dtype))
        elif kind in "iu":
            high = domains[i].index_bound or DEFAULT_INDEX_BOUND
            out.append(rng.integers(0, high, size=shape).astype(dtype))
        elif kind == "b":
            out.append(rng.random(shape) < 0.5)
        elif kind == "c":
            out.append((rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype))
        else:
            raise InputError(f"cannot make random values of {dtype} for argument {i}; pass --inputs")
    return out


def load_inputs(executable, path: str | Path) -> list[np.ndarray]:
    """Arguments from a ``.npz``: keys are argument names (``x``, ``params['w']``), ``argN`` or ``arr_N``."""
    path = Path(path)
    try:
        data = np.load(io.BytesIO(read_input(path, "artifact")), allow_pickle=False)
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot read the inputs ({e})") from None
    names = executable.artifact.arg_names
    out = []
    for i, name in enumerate(names):
        for key in (name, f"arg{i}", f"arr_{i}"):
            if key in data.files:
                out.append(data[key])
                break
        else:
            raise InputError(f"{path}: no array for argument {i} ({name}); name it {name!r} or 'arg{i}' "
                             f"(the file has {', '.join(data.files[:5]) or 'nothing'})")
    return out
