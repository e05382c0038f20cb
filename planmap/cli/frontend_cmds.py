"""``planmap inspect`` and ``planmap export``: look at a model artifact, or make one from a JAX function."""

from __future__ import annotations

import importlib
import json
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from planmap.errors import PlanmapError

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

_FORMATS = ("auto", "stablehlo", "vhlo", "exported", "mlirbc", "opgraph")


def _flops(x: float) -> str:
    from planmap.units import format_rate

    return format_rate(x, "FLOP")


def inspect(
    model: Path = typer.Argument(..., help="Model artifact: StableHLO text, VHLO / MLIR bytecode, a serialized "
                                 "jax.export.Exported, or planmap.opgraph JSON.", show_default=False),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON document instead of tables."),
    fmt: str = typer.Option("auto", "--format", "-f", help=f"Artifact format: {', '.join(_FORMATS)}."),
    entry: str = typer.Option("main", "--entry", help="Entry function of the StableHLO module."),
    top: int = typer.Option(10, "--top", min=1, help="How many of the heaviest ops and layers to list."),
    loop_trip_count: int = typer.Option(1, "--loop-trip-count", min=1,
                                        help="Trip count assumed for while loops without a static bound."),
) -> None:
    """Summarise a model: op counts, FLOPs, bytes, heaviest ops and layers, coarsened size, unknown ops."""
    from planmap.frontend import load_model
    from planmap.frontend.costs import CostWarning
    from planmap.frontend.report import inspect_graph

    if fmt not in _FORMATS:
        raise PlanmapError(f"--format requires one of {', '.join(_FORMATS)}, but got {fmt!r}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CostWarning)
        graph = load_model(model, fmt, entry=entry, loop_trip_count=loop_trip_count)
    summary = inspect_graph(graph, top=top)
    if as_json:
        typer.echo(json.dumps(summary, indent=2, sort_keys=True, default=str))
        return
    for w in caught:
        if issubclass(w.category, CostWarning):
            err.print(f"[yellow]warning:[/] {escape(str(w.message))}")
    _print_summary(summary)


def _print_summary(s: dict[str, Any]) -> None:
    from planmap.units import format_bytes

    out.print(f"[bold]{escape(s['name'])}[/] ({s['format']}): {s['ops']:,} ops, {s['values']:,} values, "
              f"{s['edges']:,} edges; {_flops(s['flops'])}, {format_bytes(s['bytes_accessed'])} accessed")
    out.print(f"parameters {format_bytes(s['parameter_bytes'])} in "
              f"{sum(a['role'] == 'param' for a in s['arguments'])} argument(s); data "
              f"{format_bytes(s['data_bytes'])} in {sum(a['role'] != 'param' for a in s['arguments'])}; "
              f"peak live activations {format_bytes(s['activation_bytes'])}; "
              f"constants {format_bytes(s['constant_bytes'])}")
    if s["backward_ops"]:
        out.print(f"training step: {s['backward_ops']:,} backward ops")
    if s["measured_devices"]:
        out.print(f"measured times for: {', '.join(s['measured_devices'])}")
    t = Table(title="ops by kind", title_justify="left")
    t.add_column("kind")
    t.add_column("count", justify="right")
    for kind, n in s["op_counts"].items():
        t.add_row(escape(kind), f"{n:,}")
    out.print(t)
    t = Table(title=f"heaviest ops (of {_flops(s['flops'])})", title_justify="left")
    for col in ("node", "kind", "name", "dtype", "FLOPs", "share"):
        t.add_column(col, justify="right" if col in ("node", "FLOPs", "share") else "left",
                     overflow="fold" if col in ("kind", "name") else "ellipsis")
    for op in s["heaviest_ops"]:
        t.add_row(str(op["node"]), escape(op["kind"].removeprefix("stablehlo.")), escape(op["name"]), op["dtype"],
                  _flops(op["flops"]),
                  f"{op['share']:.1%}")
    out.print(t)
    if s["heaviest_layers"]:
        t = Table(title="heaviest layers", title_justify="left")
        for col in ("name", "layer", "direction", "ops", "FLOPs", "share"):
            t.add_column(col, justify="right" if col in ("ops", "FLOPs", "share", "layer") else "left",
                         overflow="fold" if col == "name" else "ellipsis")
        for ly in s["heaviest_layers"]:
            t.add_row(escape(ly["name"]), "-" if ly["layer"] < 0 else str(ly["layer"]),
                      "backward" if ly["backward"] else "forward", f"{ly['ops']:,}", _flops(ly["flops"]),
                      f"{ly['share']:.1%}")
        out.print(t)
    c = s["coarsened"]
    layers = c.get("layers", {})
    found = (f", {layers['repeated_layers']} repeated layers found by {layers['method']}"
             if layers.get("repeated_layers") else ", no repeated layers found")
    out.print(f"coarsened: {s['ops']:,} ops -> {c['fuse']['nodes']:,} fused nodes -> {layers.get('nodes', '-')} "
              f"layer nodes{found}")
    for loop in s["loops"]:
        how = "static bound" if loop["static"] else "assumed (--loop-trip-count)"
        out.print(f"while loop: {loop['trip_count']} trips ({how})")
    if s["unknown_op_kinds"]:
        listed = ", ".join(f"{k} ({v})" for k, v in s["unknown_op_kinds"].items())
        out.print(f"[yellow]op kinds without a cost formula (costed from bytes):[/] {escape(listed)}")
    if s["shardings"]:
        out.print(f"shardings in the artifact: {', '.join(sorted(s['shardings']))} (kept as information)")


# ----------------------------------------------------------------------------------------- export
_DTYPES = {"f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16", "i64": "int64",
           "i32": "int32", "i16": "int16", "i8": "int8", "u64": "uint64", "u32": "uint32", "u16": "uint16",
           "u8": "uint8", "ui64": "uint64", "ui32": "uint32", "ui16": "uint16", "ui8": "uint8", "i1": "bool",
           "pred": "bool", "bool": "bool", "c64": "complex64", "c128": "complex128",
           "f8e4m3fn": "float8_e4m3fn", "f8e5m2": "float8_e5m2"}
_SHAPE_RE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_]*)\s*\[\s*([0-9,\s]*)\]\s*$")


def parse_arg_spec(text: str) -> Any:
    """``'f32[8,128]'`` -> ``jax.ShapeDtypeStruct((8, 128), float32)``; ``'i32[]'`` is a scalar."""
    import jax
    import jax.numpy as jnp

    m = _SHAPE_RE.match(text)
    if not m:
        raise PlanmapError(f"--arg requires DTYPE[DIMS] such as 'f32[8,128]' or 'i32[]', or @module:attribute, "
                           f"but got {text!r}")
    name, dims = m.group(1), m.group(2)
    try:
        dtype = jnp.dtype(_DTYPES.get(name.lower(), name))
    except TypeError:
        raise PlanmapError(f"--arg {text!r}: unknown dtype {name!r}; use f32, bf16, f16, i32, i8, bool, ...") from None
    shape = tuple(int(d) for d in dims.replace(" ", "").split(",") if d)
    return jax.ShapeDtypeStruct(shape, dtype)


def _resolve(ref: str, what: str) -> Any:
    """``package.module:attr.sub`` -> the object (the current directory is importable)."""
    module, _, attr = ref.partition(":")
    if not module or not attr:
        raise PlanmapError(f"{what} requires module:attribute such as 'mymodel:forward', but got {ref!r}")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        obj = importlib.import_module(module)
    except ImportError as e:
        raise PlanmapError(f"{what}: cannot import module {module!r} ({e})") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise PlanmapError(f"{what}: {ref!r} has no attribute {part!r}") from None
    return obj


def _abstract(obj: Any) -> Any:
    """A pytree of ShapeDtypeStructs: arrays become specs; a callable is traced with eval_shape (no memory)."""
    import jax

    if callable(obj) and not hasattr(obj, "shape"):
        obj = jax.eval_shape(obj)
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), obj)


def export(
    function: str = typer.Argument(..., help="The JAX function, as module:attribute (e.g. mymodel:forward or "
                                   "planmap.examples.models:gpt.forward).", show_default=False),
    args: list[str] = typer.Option(None, "--arg", "-a", help="One positional argument, abstract: DTYPE[DIMS] "
                                   "(f32[8,128], bf16[4,1024,768], i32[8,64], f32[] for a scalar) or @module:attr "
                                   "naming a pytree of arrays/ShapeDtypeStructs or a zero-argument function that "
                                   "builds one (traced with jax.eval_shape: no memory is allocated). Repeat per "
                                   "argument."),
    args_from: str = typer.Option(None, "--args-from", help="module:attr of a zero-argument function returning "
                                  "the whole tuple of arguments (e.g. planmap.examples.models:gpt.abstract_args)."),
    output: Path = typer.Option(..., "--output", "-o", help="Artifact to write; the suffix picks the format: "
                                ".mlir (StableHLO text), .vhlo/.mlirbc (VHLO portable artifact), .jaxexport "
                                "(serialized jax.export.Exported)."),
    platform: list[str] = typer.Option(None, "--platform", help="Lowering platform(s), e.g. cpu, cuda, tpu "
                                       "[default: the local backend]."),
) -> None:
    """Export a JAX function to a StableHLO artifact from abstract argument shapes (no real arrays).

    Examples:
      planmap export mymodel:forward --arg 'f32[8,784]' --arg @mymodel:init_params -o model.mlir
      planmap export planmap.examples.models:gpt.forward \\
          --args-from planmap.examples.models:gpt.abstract_args -o gpt.mlir
    """
    import planmap.export as pm_export

    fn = _resolve(function, "FUNCTION")
    if not callable(fn):
        raise PlanmapError(f"{function!r} is not callable")
    if args and args_from:
        raise PlanmapError("use either --arg (repeated) or --args-from, not both")
    if args_from:
        built = _resolve(args_from, "--args-from")
        example = tuple(_abstract(built() if callable(built) else built))
    else:
        example = tuple(_abstract(_resolve(a[1:], "--arg")) if a.startswith("@") else parse_arg_spec(a)
                        for a in (args or []))
    if output.suffix not in pm_export.ARTIFACT_SUFFIXES:
        raise PlanmapError(f"--output requires one of the suffixes {', '.join(sorted(pm_export.ARTIFACT_SUFFIXES))}, "
                           f"but got {output.name!r}")
    try:
        path = pm_export.jax(fn, *example, path=output, platforms=tuple(platform) if platform else None)
    except (TypeError, ValueError) as e:  # a shape or arity mismatch while tracing the user's function
        raise PlanmapError(f"exporting {function} failed: {str(e).splitlines()[0]}") from None
    out.print(f"wrote {path} ({path.stat().st_size:,} bytes, {len(example)} argument(s))")


def register(app: typer.Typer) -> None:
    app.command()(inspect)
    app.command()(export)
