"""Shardings already present in an artifact (Shardy ``sdy`` or GSPMD ``mhlo.sharding``), kept as information.

A module exported from a sharded ``jax.jit`` carries ``sdy.mesh`` symbols, ``sdy.sharding`` argument
and result attributes and ``sdy.sharding_constraint`` ops. planmap plans its own shardings, but a user
comparing a plan with what the model author intended wants to see these, so the front end records
them verbatim (MLIR attribute syntax) in ``OpGraph.meta["shardings"]``. They never change costs.
"""

from __future__ import annotations

from typing import Any

__all__ = ["collect_shardings", "SHARDING_ATTRS"]

SHARDING_ATTRS = ("sdy.sharding", "mhlo.sharding")


def _dict_entries(array_attr: Any) -> list[dict[str, str]]:
    from jaxlib.mlir import ir

    out = []
    for d in array_attr:
        entry: dict[str, str] = {}
        d = ir.DictAttr(d) if not isinstance(d, ir.DictAttr) else d
        for key in SHARDING_ATTRS:
            if key in d:
                entry[key] = _text(d[key])
        out.append(entry)
    return out


def _text(attr: Any) -> str:
    from jaxlib.mlir import ir

    return attr.value if isinstance(attr, ir.StringAttr) else str(attr)


def collect_shardings(module: Any, entry_op: Any, constraint_ops: list[tuple[int, Any]]) -> dict[str, Any]:
    """Meshes, argument/result shardings and sharding constraints; empty dict when there are none.

    ``constraint_ops`` are ``(node id, op)`` pairs of the entry function's ``sdy.sharding_constraint``s.
    """
    out: dict[str, Any] = {}
    meshes = {}
    for op in module.body.operations:
        op = op.operation
        if op.name == "sdy.mesh":
            meshes[_text(op.attributes["sym_name"])] = str(op.attributes["mesh"])
    if meshes:
        out["meshes"] = meshes
    attrs = entry_op.attributes
    for key, field in (("arg_attrs", "arguments"), ("res_attrs", "results")):
        if key in attrs:
            entries = _dict_entries(attrs[key])
            found = {i: e for i, e in enumerate(entries) if e}
            if found:
                out[field] = {str(i): (e.get("sdy.sharding") or e.get("mhlo.sharding")) for i, e in found.items()}
    constraints = {}
    for node, op in constraint_ops:
        if "sharding" in op.attributes:
            constraints[str(node)] = str(op.attributes["sharding"])
    if constraints:
        out["constraints"] = constraints
    return out
