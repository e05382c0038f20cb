"""``planmap inspect`` and ``planmap export``: look at a model artifact, or make one from a JAX function,
a PyTorch module or a TensorFlow model."""

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


def _import_file(path: Path) -> Any:
    """Import a Python file as a module named after its stem (for ``path/to/model.py:attr``)."""
    import importlib.util

    if not path.is_file():
        raise ImportError(f"no such file {path}")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def _resolve(ref: str, what: str) -> Any:
    """``package.module:attr.sub`` or ``path/to/file.py:attr`` -> the object (the current directory is importable)."""
    module, _, attr = ref.partition(":")
    if not module or not attr:
        raise PlanmapError(f"{what} requires module:attribute such as 'mymodel:forward', but got {ref!r}")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        obj = _import_file(Path(module)) if module.endswith(".py") else importlib.import_module(module)
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


def _is_factory(obj: Any) -> bool:
    """A plain Python function that takes no required argument builds the model (``keras_mlp.py:model``);
    one that takes the inputs (``def forward(x)``), a ``tf.function`` or a Keras model is the model."""
    import inspect

    if not inspect.isfunction(obj):
        return False
    try:
        params = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):
        return False
    return all(p.default is not p.empty or p.kind is p.VAR_KEYWORD for p in params)


def _framework_model(framework: str, function: str) -> Any:
    """The object to export: a JAX function, a torch.nn.Module (or a zero-argument factory of one), or a
    TensorFlow function / Keras model (or factory) or a SavedModel directory."""
    if framework == "tf" and Path(function).is_dir():
        return function
    obj = _resolve(function, "FUNCTION")
    if framework == "torch":
        import torch

        if not isinstance(obj, torch.nn.Module) and callable(obj):
            obj = obj()
        if not isinstance(obj, torch.nn.Module):
            raise PlanmapError(f"{function!r} is not a torch.nn.Module nor a zero-argument function returning one")
    elif framework == "tf" and (isinstance(obj, type) or _is_factory(obj)):
        obj = obj()
    if not callable(obj):
        raise PlanmapError(f"{function!r} is not callable")
    return obj


def _example(framework: str, arg: str) -> Any:
    """One example argument: abstract for JAX, zeros of that shape for torch / TensorFlow, or @module:attr."""
    if arg.startswith("@"):
        obj = _resolve(arg[1:], "--arg")
        return _abstract(obj) if framework == "jax" else obj
    spec = parse_arg_spec(arg)
    if framework == "jax":
        return spec
    dtype = str(spec.dtype)
    if framework == "torch":
        import torch

        return torch.zeros(spec.shape, dtype=getattr(torch, "bool" if dtype == "bool" else dtype))
    import tensorflow as tf

    return tf.zeros(spec.shape, dtype=getattr(tf, dtype))


def export(
    function: str = typer.Argument(..., help="What to export, as module:attribute or path/to/file.py:attribute "
                                   "(e.g. mymodel:forward, planmap.examples.models:gpt.forward); for --from tf "
                                   "also a SavedModel directory.", show_default=False),
    framework: str = typer.Option("jax", "--from", help="Framework: jax (a function), torch (an nn.Module or a "
                                  "zero-argument factory; needs torchax) or tf (a tf.function, Keras model or "
                                  "factory, or SavedModel directory; needs tensorflow)."),
    args: list[str] = typer.Option(None, "--arg", "-a", help="One positional argument: DTYPE[DIMS] "
                                   "(f32[8,128], bf16[4,1024,768], i32[8,64], f32[] for a scalar; abstract for jax, "
                                   "zeros for torch/tf) or @module:attr naming a pytree of arrays/ShapeDtypeStructs "
                                   "or (jax) a zero-argument function that builds one (traced with jax.eval_shape: "
                                   "no memory is allocated). Repeat per argument."),
    args_from: str = typer.Option(None, "--args-from", help="module:attr of a zero-argument function returning "
                                  "the whole tuple of arguments (e.g. planmap.examples.models:gpt.abstract_args)."),
    output: Path = typer.Option(..., "--output", "-o", help="Artifact to write; the suffix picks the format: "
                                ".mlir (StableHLO text), .vhlo/.mlirbc (VHLO portable artifact; tf: MLIR "
                                "bytecode), .jaxexport (serialized jax.export.Exported; jax and torch)."),
    platform: list[str] = typer.Option(None, "--platform", help="Lowering platform(s) for jax, e.g. cpu, cuda, tpu.",
                                       show_default="the local backend"),
) -> None:
    """Export a JAX function, PyTorch module or TensorFlow model to a StableHLO artifact planmap can plan for.

    Examples:
      planmap export mymodel:forward --arg 'f32[8,784]' --arg @mymodel:init_params -o model.mlir
      planmap export planmap.examples.models:gpt.forward \\
          --args-from planmap.examples.models:gpt.abstract_args -o gpt.mlir
      planmap export --from torch examples/export/torch_mlp.py:model --arg 'f32[32,256]' -o torch_mlp.mlir
      planmap export --from tf examples/export/keras_mlp.py:model --arg 'f32[32,256]' -o tf_mlp.mlir
    """
    import planmap.export as pm_export

    if framework not in pm_export.FRAMEWORKS:
        raise PlanmapError(f"--from requires one of {', '.join(pm_export.FRAMEWORKS)}, but got {framework!r}")
    if args and args_from:
        raise PlanmapError("use either --arg (repeated) or --args-from, not both")
    if output.suffix not in pm_export.ARTIFACT_SUFFIXES:
        raise PlanmapError(f"--output requires one of the suffixes {', '.join(sorted(pm_export.ARTIFACT_SUFFIXES))}, "
                           f"but got {output.name!r}")
    try:
        fn = _framework_model(framework, function)
        if args_from:
            built = _resolve(args_from, "--args-from")
            built = built() if callable(built) else built
            example = tuple(_abstract(built)) if framework == "jax" else tuple(built)
        else:
            example = tuple(_example(framework, a) for a in (args or []))
        if framework == "jax":
            path = pm_export.jax(fn, *example, path=output, platforms=tuple(platform) if platform else None)
        else:
            path = getattr(pm_export, framework)(fn, *example, path=output)
    except ImportError as e:
        raise PlanmapError(f"--from {framework}: {e}") from None
    except (TypeError, ValueError) as e:  # a shape or arity mismatch while tracing the user's function
        raise PlanmapError(f"exporting {function} failed: {str(e).splitlines()[0]}") from None
    out.print(f"wrote {path} ({path.stat().st_size:,} bytes, {len(example)} argument(s))")


def register(app: typer.Typer) -> None:
    app.command()(inspect)
    app.command()(export)
