"""Helpers the Pyomo model builders share (latency IP, throughput IP, sharding IP): the model
preamble and the linear-expression and index shapes every builder writes its rows with.

Pyomo is imported on first use, so importing a builder module stays cheap.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["by_second", "lin", "new_model"]


def new_model(name: str, time_unit: float, data: Any):
    """An empty ``pyo.ConcreteModel`` called ``name`` carrying the seconds per model time unit
    (``model.time_unit``, read back by the solve step) and the prepared data it is built from
    (``model.data``, read back by warm start and extraction)."""
    import pyomo.environ as pyo

    m = pyo.ConcreteModel(name=name)
    m.time_unit = time_unit
    m.data = data
    return m


def lin(coefs: Iterable[float], vars_: Iterable[Any], const: float = 0.0):
    """``const + sum(coefs[i] * vars_[i])`` built directly as a Pyomo ``LinearExpression`` (no
    operator overloading: the builders write hundreds of thousands of rows)."""
    from pyomo.core.expr.numeric_expr import LinearExpression

    return LinearExpression(constant=const, linear_coefs=list(coefs), linear_vars=list(vars_))


def by_second(pairs: Iterable[tuple[int, int]], count: int) -> list[list[int]]:
    """For each ``k`` in ``0..count-1``, the first items of the ``(item, k)`` pairs, in order: e.g. the
    values each device (or slot) may receive, from the (value, device) index of a receive variable."""
    out: list[list[int]] = [[] for _ in range(count)]
    for j, k in pairs:
        out[k].append(j)
    return out
