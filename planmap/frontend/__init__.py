"""Front ends: a model artifact (StableHLO from JAX, TensorFlow or PyTorch; a profiled graph) -> OpGraph.

``load_model(path)`` reads any supported artifact (the format is detected from the content) into an
:class:`~planmap.graph.OpGraph` with exact per-op costs; ``coarsen(graph)`` shrinks it for the solvers
(cheap ops fused into their neighbours, repeated layers grouped) while keeping the mapping back to
every original op. Submodules import jax/jaxlib lazily, so importing this package is cheap — the
isolation child (:mod:`planmap.frontend.isolate`) relies on that.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from planmap.errors import InputError
from planmap.io import check_size

if TYPE_CHECKING:
    from planmap.graph import OpGraph

__all__ = ["load_model", "coarsen", "load_profiled", "from_tarnawski", "CostWarning"]


def load_model(path: str | Path, format: str = "auto", *, arguments: Any = None, entry: str = "main",
               loop_trip_count: int = 1, isolate: str = "auto", parse_timeout: float | None = None) -> OpGraph:
    """Load a model artifact into an OpGraph (one node per op of the entry function).

    ``format``: auto | stablehlo | vhlo | exported | mlirbc | opgraph (a ``ModelFormat`` works too).
    ``arguments``: the spec's ``ArgumentRoles`` (or ``{"data": [...], "parameters": [...]}``) saying
    which entry arguments are data and which parameters; default: from JAX argument names, see
    :mod:`planmap.frontend.arguments`. ``loop_trip_count``: trip count assumed for ``while`` loops
    without a static bound.

    ``isolate``: ``auto`` reads bytecode (and text with escaped non-UTF-8 bytes) in a child process,
    which absorbs the crashes corrupt input can cause (:mod:`planmap.frontend.isolate`), and plain
    StableHLO text in this process; ``always`` isolates every artifact; ``never`` trusts the file
    (a corrupt one may crash the process). ``parse_timeout`` bounds the child, in seconds.

    Raises :class:`planmap.errors.InputError` (naming the file) for a missing, unreadable, corrupt,
    truncated or non-StableHLO file; an op kind without a cost formula only gives a
    :class:`CostWarning`.
    """
    from planmap.frontend import mlir

    if isolate not in ("auto", "always", "never"):
        raise ValueError(f"isolate requires 'auto', 'always' or 'never', but got {isolate!r}")
    p = Path(path)
    fmt = str(getattr(format, "value", format))
    if fmt not in ("auto", *mlir.FORMATS):
        raise InputError(f"{p}: unknown model format {fmt!r}; expected auto or one of {', '.join(mlir.FORMATS)}")
    data = mlir.read_bytes(p, "opgraph" if fmt == "opgraph" or p.suffix == ".json" else "artifact")
    detected = mlir.detect_format(data, str(p))
    if detected == "opgraph" and fmt in ("auto", "opgraph"):
        check_size(p, "opgraph", len(data))  # an op-graph without the .json suffix has the smaller cap too
        from planmap.frontend.profiled import loads

        return loads(data, where=str(p), name=p.stem)
    if isolate == "always" or (isolate == "auto" and mlir.needs_isolation(data, detected)):
        from planmap.frontend.isolate import load_isolated

        return load_isolated(data, fmt, where=str(p), name=p.stem, entry=entry, arguments=arguments,
                             loop_trip_count=loop_trip_count, timeout=parse_timeout)
    from planmap.frontend.stablehlo import build_graph

    parsed = mlir.parse_artifact(data, fmt, where=str(p))
    return build_graph(parsed, name=p.stem, entry=entry, arguments=arguments, loop_trip_count=loop_trip_count)


def coarsen(graph: OpGraph, level: str = "auto") -> OpGraph:
    """A smaller OpGraph for the solvers: ``none`` | ``fuse`` | ``layers`` | ``auto`` (see :mod:`.coarsening`)."""
    from planmap.frontend.coarsening import coarsen as _coarsen

    return _coarsen(graph, str(getattr(level, "value", level)))


def load_profiled(path: str | Path) -> OpGraph:
    """Load a ``planmap.opgraph/v1`` JSON file (or a Tarnawski et al. JSON file) into an OpGraph."""
    from planmap.frontend.profiled import load

    return load(path)


def from_tarnawski(doc: dict, name: str = "tarnawski") -> OpGraph:
    """OpGraph from a Tarnawski et al. input document (already parsed JSON)."""
    from planmap.frontend.profiled import from_tarnawski as _from

    return _from(doc, name=name)


def __getattr__(attr: str) -> Any:
    if attr == "CostWarning":
        from planmap.frontend.costs import CostWarning

        return CostWarning
    raise AttributeError(f"module 'planmap.frontend' has no attribute {attr!r}")
