"""The bodies of called private functions, kept beside the op graph for the memory model.

The op graph keeps a ``func.call`` as one node (costed from its callee, :mod:`planmap.frontend.stablehlo`),
which is what the solvers and the runtime's op numbering need. XLA inlines calls before it fuses and
schedules, so which values of a call it materialises, and when they die, depends on the callee's ops:
``log_softmax`` holds a max-reduction, an ``exp`` that its gradient reads again, a sum and a ``log``.
:func:`callee_bodies` records, per called function, its ops in order with their operands and result
types (nested calls inlined), and :mod:`planmap.program_memory` splices them in place of the call.

A body is a plain dict (it lives in ``OpGraph.meta["callees"]``; ``meta["calls"]`` maps each call op
id to its callee): ``kinds`` (op kind per body op), ``operands`` (per op, references: ``j <
num_args`` is the callee's argument ``j``, ``num_args + r`` the ``r``-th result of the body's ops in
order), ``outputs`` (per op, ``[shape, dtype, bytes]`` per result), ``returns`` (a reference per
callee result) and ``num_args``.
"""

from __future__ import annotations

from typing import Any

from planmap.frontend.tensors import TypeTable

__all__ = ["callee_bodies"]

_RETURNS = frozenset({"func.return", "stablehlo.return"})


def callee_bodies(funcs: dict[str, Any], names: set[str], types: TypeTable) -> dict[str, dict[str, Any]]:
    """``{callee name: body}`` (module docstring) of the functions ``names`` (``func.func`` ops by
    name in ``funcs``), nested calls inlined into their caller's body."""
    memo: dict[str, dict[str, Any]] = {}
    for name in sorted(names):
        _body(name, funcs, types, memo, ())
    return {name: memo[name] for name in sorted(names) if name in memo}


def _body(name: str, funcs: dict[str, Any], types: TypeTable, memo: dict[str, dict[str, Any]],
          active: tuple[str, ...]) -> dict[str, Any] | None:
    if name in memo:
        return memo[name]
    fn = funcs.get(name)
    if fn is None or name in active or len(fn.regions) == 0 or len(fn.regions[0].blocks) != 1:
        return None  # the front end reports these when it costs the call
    block = fn.regions[0].blocks[0]
    ref: dict[Any, int] = {a: j for j, a in enumerate(block.arguments)}
    body: dict[str, Any] = {"num_args": len(block.arguments), "kinds": [], "operands": [], "outputs": [],
                            "returns": []}
    count = len(block.arguments)
    for opv in block.operations:
        op = opv.operation
        ins = [ref[v] for v in op.operands]
        if op.name in _RETURNS:
            body["returns"] = ins
            continue
        if op.name == "func.call":
            inner = _body(op.attributes["callee"].value, funcs, types, memo, (*active, name))
            if inner is not None:
                start, count = count, _splice(body, inner, ins, count)
                for r, back in zip(op.results, inner["returns"], strict=True):
                    ref[r] = ins[back] if back < inner["num_args"] else start + back - inner["num_args"]
                continue
        outs = []
        for r in op.results:
            t = types(r.type)
            outs.append([list(t.type.shape), t.type.dtype, int(t.nbytes)])
            ref[r] = count
            count += 1
        body["kinds"].append(op.name)
        body["operands"].append(ins)
        body["outputs"].append(outs)
    memo[name] = body
    return body


def _splice(body: dict[str, Any], inner: dict[str, Any], ins: list[int], count: int) -> int:
    """Append ``inner``'s ops to ``body``, its arguments bound to ``ins``; returns the next free reference."""
    start, n_args = count, inner["num_args"]
    for kind, operands, outs in zip(inner["kinds"], inner["operands"], inner["outputs"], strict=True):
        body["kinds"].append(kind)
        body["operands"].append([ins[v] if v < n_args else start + v - n_args for v in operands])
        body["outputs"].append(outs)
        count += len(outs)
    return count
