"""Reading model artifacts into MLIR modules: format detection, an MLIR context, parsing.

Formats (``ModelFormat`` of the spec):

* ``stablehlo`` — StableHLO text (``.mlir``), e.g. ``Exported.mlir_module()`` or ``jit(f).lower().as_text()``;
* ``vhlo`` — a VHLO portable artifact (MLIR bytecode whose producer is ``StableHLO_v…``), e.g.
  ``Exported.mlir_module_serialized``;
* ``mlirbc`` — plain MLIR bytecode, e.g. TensorFlow's ``stage='stablehlo_serialized'``;
* ``exported`` — a serialized ``jax.export.Exported`` (a flatbuffer wrapping a VHLO artifact);
* ``opgraph`` — planmap's profiled-graph JSON (handled by :mod:`planmap.frontend.profiled`).

``auto`` detects the format from the content (bytecode magic, UTF-8 text, JSON, flatbuffer), never
from the file name, so a mis-named file still loads.

Parsing here happens in the calling process. Corrupt input can crash it — MLIR's bytecode reader
segfaults or loops on some bit-flipped artifacts, and the Python bindings abort on strings that are
not UTF-8 — so :func:`planmap.frontend.load_model` runs untrusted input through
:mod:`planmap.frontend.isolate` (a child process) and calls this module directly only for input
that cannot trigger those failures (see :func:`needs_isolation`).
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planmap.errors import InputError

__all__ = [
    "FORMATS",
    "BYTECODE_MAGIC",
    "ParsedModule",
    "make_context",
    "read_bytes",
    "detect_format",
    "needs_isolation",
    "parse_artifact",
    "loads_json",
]

FORMATS = ("stablehlo", "vhlo", "exported", "mlirbc", "opgraph")
BYTECODE_MAGIC = b"ML\xefR"
_MAX_MESSAGE = 600
# an MLIR string escape of a byte >= 0x80: the only way StableHLO text (valid UTF-8 as a whole) can put
# bytes that are not UTF-8 into a string attribute or location, on which the bindings abort
_HIGH_ESCAPE = re.compile(rb"\\[89a-fA-F][0-9a-fA-F]")


def make_context(*, allow_unregistered: bool = True) -> Any:
    """An ``ir.Context`` with func, stablehlo, chlo, sdy and mhlo registered.

    A bare ``ir.Context()`` cannot even parse ``func.func``. ``jax.extend.mlir`` re-exports these
    very jaxlib modules; importing them from jaxlib directly keeps ``import jax`` (half a second)
    out of the isolation child. Unregistered dialects are allowed so an artifact with a foreign op
    still loads (the op is costed by its bytes and named in a warning) instead of failing outright.
    The registry's dialects are loaded on demand by the parsers (text, bytecode, VHLO), not all up
    front: ``load_all_available_dialects`` cost ~15 ms per context, more than parsing a small model.
    """
    from jaxlib.mlir import ir
    from jaxlib.mlir._mlir_libs import _jax_mlir_ext
    from jaxlib.mlir.dialects import chlo, mhlo, sdy, stablehlo

    ctx = ir.Context()
    registry = ir.DialectRegistry()
    _jax_mlir_ext.register_dialects(registry)
    ctx.append_dialect_registry(registry)
    stablehlo.register_dialect(ctx, load=False)
    chlo.register_dialect(ctx, load=False)
    sdy.register_dialect(ctx, load=False)
    mhlo.register_mhlo_dialect(ctx, load=False)
    ctx.allow_unregistered_dialects = allow_unregistered
    return ctx


def read_bytes(path: str | Path, kind: str = "artifact") -> bytes:
    """The file's bytes through :func:`planmap.io.read_input` (regular file, the kind's size cap)."""
    from planmap.io import read_input

    return read_input(Path(path), kind)


def _is_text(data: bytes) -> str | None:
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _bytecode_kind(data: bytes) -> str:
    """``vhlo`` when the bytecode producer is StableHLO's portable-artifact writer, else ``mlirbc``."""
    return "vhlo" if b"StableHLO_v" in data[4:64] else "mlirbc"


def detect_format(data: bytes, where: str = "<bytes>") -> str:
    """The artifact format of ``data`` (one of :data:`FORMATS`), from its content.

    Raises :class:`InputError` when the content is none of them.
    """
    if not data:
        raise InputError(f"{where}: the file is empty, expected a model artifact")
    if data.startswith(BYTECODE_MAGIC):
        return _bytecode_kind(data)
    text = _is_text(data)
    if text is not None:
        head = text.lstrip("\ufeff \t\r\n")
        return "opgraph" if head[:1] in ("{", "[") else "stablehlo"
    if _exported_or_none(data) is not None:
        return "exported"
    raise InputError(f"{where}: not a model artifact planmap can read (expected StableHLO text, "
                     f"MLIR bytecode or a VHLO artifact, a serialized jax.export.Exported, or "
                     f"planmap.opgraph JSON)")


def _exported_or_none(data: bytes) -> Any:
    """A ``jax.export.Exported`` if ``data`` deserializes as one, else None (pure-Python flatbuffers)."""
    if len(data) < 16:
        return None
    root = int.from_bytes(data[:4], "little")
    if root < 4 or root + 4 > len(data):  # flatbuffer root-table offset must lie inside the buffer
        return None
    try:
        from jax import export as jexport

        exp = jexport.deserialize(bytearray(data))
        blob = bytes(exp.mlir_module_serialized)
    except Exception:  # any failure means "not an Exported": corrupt input is expected here
        return None
    return exp if blob.startswith(BYTECODE_MAGIC) else None


@dataclass
class ParsedModule:
    """A parsed module and where it came from. ``info`` has format-specific extras (Exported fields)."""

    module: Any
    context: Any
    format: str
    where: str
    info: dict[str, Any] = field(default_factory=dict)


def needs_isolation(data: bytes, fmt: str) -> bool:
    """Whether parsing ``data`` (detected format ``fmt``) in-process could crash the process.

    Bytecode (VHLO, plain, inside an Exported) can: its reader trusts length fields. StableHLO text
    is parsed by MLIR's fuzzed text parser and is valid UTF-8 as a whole; only a hex escape of a high
    byte can smuggle a non-UTF-8 string into the module.
    """
    return fmt != "stablehlo" or bool(_HIGH_ESCAPE.search(data))


def parse_artifact(data: bytes, fmt: str = "auto", *, where: str = "<bytes>") -> ParsedModule:
    """Parse ``data`` (format ``fmt`` or ``auto``) into a StableHLO module, in this process.

    Trusted input only (see the module docstring); :func:`planmap.frontend.load_model` decides.
    """
    detected = detect_format(data, where)
    if fmt not in ("auto", *FORMATS):
        raise InputError(f"{where}: unknown model format {fmt!r}; expected auto or one of {', '.join(FORMATS)}")
    if fmt != "auto" and fmt != detected and {fmt, detected} != {"vhlo", "mlirbc"}:
        raise InputError(f"{where}: declared format {fmt!r}, but the file is {_DESCRIBE[detected]}; "
                         f"use format: {detected} (or auto)")
    if detected == "opgraph":
        raise InputError(f"{where}: is a planmap.opgraph JSON document, not an MLIR module")
    info: dict[str, Any] = {}
    if detected == "exported":
        exp = _exported_or_none(data)
        info = _exported_info(exp)
        data = bytes(exp.mlir_module_serialized)
        reader = _bytecode_kind(data)
    elif detected == "stablehlo":
        reader = "text"
    else:
        reader = detected
    ctx = make_context()
    module = _parse_in_process(data, reader, ctx, where)
    return ParsedModule(module, ctx, detected, where, info)


_DESCRIBE = {
    "stablehlo": "StableHLO text",
    "vhlo": "a VHLO portable artifact (MLIR bytecode)",
    "mlirbc": "MLIR bytecode",
    "exported": "a serialized jax.export.Exported",
    "opgraph": "JSON (a profiled op graph)",
}


def _exported_info(exp: Any) -> dict[str, Any]:
    info: dict[str, Any] = {"fun_name": str(exp.fun_name), "platforms": [str(p) for p in exp.platforms],
                            "nr_devices": int(exp.nr_devices)}
    with contextlib.suppress(Exception):  # informational only
        info["in_shardings"] = [None if s is None else str(s) for s in exp.in_shardings_hlo]
    return info


def _parse_in_process(data: bytes, reader: str, ctx: Any, where: str) -> Any:
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    try:
        with ctx:
            if reader == "text":
                return ir.Module.parse(data.decode("utf-8"))
            if reader == "vhlo":
                return stablehlo.deserialize_portable_artifact(ctx, data)
            return ir.Module.parse(data)
    except Exception as e:  # the bindings raise plain Exception/ValueError with the diagnostics
        raise InputError(f"{where}: cannot parse the {_READER[reader]}: {first_lines(str(e))}") from None


_READER = {"text": "StableHLO text", "vhlo": "VHLO artifact", "mlirbc": "MLIR bytecode"}


def first_lines(message: str) -> str:
    """The first lines of an MLIR diagnostic, joined and capped: enough to see what is wrong."""
    lines = [ln.strip() for ln in message.strip().splitlines() if ln.strip()]
    text = "; ".join(lines[:4])
    return text if len(text) <= _MAX_MESSAGE else text[:_MAX_MESSAGE] + " …"


def loads_json(data: bytes, where: str) -> Any:
    """JSON from bytes, or an :class:`InputError` naming the file and position."""
    try:
        return json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as e:
        raise InputError(f"{where}: not UTF-8 JSON ({e.reason} at byte {e.start})", code="encoding") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{where}:{e.lineno}:{e.colno}: error[json]: invalid JSON: {e.msg}") from None
    except ValueError as e:  # an integer of more than 4,300 digits
        raise InputError(f"{where}: error[json]: {str(e).split(';')[0]}") from None
    except RecursionError:
        raise InputError(f"{where}: error[json]: the JSON nests too deeply") from None
