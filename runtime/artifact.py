"""The model artifact a plan was made for: read it in any of planmap's formats and describe @main.

The runtime never trusts a file's name: it parses the StableHLO with the MLIR bindings in jaxlib
and reads the entry function's signature from the IR. Every later step (splitting, annotating,
wrapping as ``jax.export.Exported``) starts again from :attr:`Artifact.text`, so one artifact
object can be cut in many ways without the in-place mutations MLIR passes make.

:func:`canonical_text` is what :func:`planmap.runtime.apply` compares: the module printed without
locations and without the module's name (which JAX derives from the Python function's name), so
two exports of the same computation compare equal even when they were made from differently
named functions or with different source locations.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from planmap.errors import InputError
from planmap.frontend.stablehlo import entry_ops
from planmap.graph import TensorType
from planmap.io import read_input

__all__ = ["Artifact", "make_context", "entry_function", "canonical_text"]


def make_context():
    """An MLIR context with func/stablehlo/chlo/sdy/mhlo registered — the front end's, so that the
    runtime parses artifacts exactly as the planner did — and loaded: the front end loads dialects as its
    parsers meet them, but the runtime builds attributes of dialects the artifact may not use yet (the
    ``sdy`` mesh and shardings), and building one of an unloaded dialect crashes the bindings."""
    from planmap.frontend.mlir import make_context as frontend_context

    ctx = frontend_context(allow_unregistered=False)
    ctx.load_all_available_dialects()
    return ctx


def entry_function(module, name: str = "main"):
    """The ``func.func @main`` op of ``module``."""
    for op in module.body.operations:
        if op.operation.name == "func.func" and op.attributes["sym_name"].value == name:
            return op
    raise InputError(f"the artifact has no entry function @{name}")


def _tensor_type(t) -> TensorType:
    from jax.extend.mlir import ir

    if not isinstance(t, ir.RankedTensorType):
        raise InputError(f"the runtime needs ranked tensor arguments and results, but the artifact has {t}")
    if any(d < 0 for d in t.shape):
        raise InputError(f"the runtime needs static shapes, but the artifact has {t}; export with concrete shapes")
    tensor = TensorType(tuple(int(d) for d in t.shape), str(t.element_type))
    _ = tensor.np_dtype  # the runtime allocates every argument and cut value: fail here when numpy cannot
    return tensor


def _loc_name(loc) -> str:
    s = str(loc)
    if s.startswith('loc("') and s.endswith('")'):
        return s[5:-2].replace('\\"', '"')
    return ""


def canonical_text(text: str) -> str:
    """``text`` without locations and without the module's name: equal for equal computations."""
    ctx = make_context()
    with ctx:
        from jax.extend.mlir import ir

        module = ir.Module.parse(text)
        if "sym_name" in module.operation.attributes:
            del module.operation.attributes["sym_name"]
        return str(module.operation.get_asm(enable_debug_info=False))


@dataclass(frozen=True, eq=False)
class Artifact:
    """A StableHLO module with entry ``@main``: its text, signature and top-level op count."""

    text: str
    in_types: tuple[TensorType, ...]
    out_types: tuple[TensorType, ...]
    arg_names: tuple[str, ...]
    result_names: tuple[str, ...]
    n_ops: int
    path: Path | None = None

    @classmethod
    def from_text(cls, text: str, path: Path | None = None) -> Artifact:
        ctx = make_context()
        with ctx:
            from jax.extend.mlir import ir

            try:
                module = ir.Module.parse(text)
            except Exception as e:  # MLIRError: the diagnostic's first line is the useful part
                where = path or "the artifact"
                raise InputError(f"{where}: not valid StableHLO ({str(e).splitlines()[0]})") from None
            return cls._describe(module, path)

    @classmethod
    def from_file(cls, path: str | Path) -> Artifact:
        """Read ``.mlir`` (text), ``.vhlo``/``.mlirbc`` (portable artifact or bytecode) or ``.jaxexport``."""
        path = Path(path)
        data = read_input(path, "artifact")
        suffix = path.suffix
        if suffix == ".jaxexport":
            from jax import export

            return cls.from_text(export.deserialize(bytearray(data)).mlir_module(), path)
        if suffix in (".vhlo", ".mlirbc"):
            return cls.from_text(_bytecode_to_text(data, path), path)
        try:
            return cls.from_text(data.decode("utf-8"), path)
        except UnicodeDecodeError:
            return cls.from_text(_bytecode_to_text(data, path), path)

    @classmethod
    def _describe(cls, module, path: Path | None) -> Artifact:
        from jax.extend.mlir import ir

        main = entry_function(module)
        ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        block = main.regions[0].blocks[0]
        arg_names = tuple(_loc_name(a.location) or f"arg{i}" for i, a in enumerate(block.arguments))
        res_names = []
        res_attrs = list(ir.ArrayAttr(main.attributes["res_attrs"])) if "res_attrs" in main.attributes else []
        for i in range(len(ftype.results)):
            name = f"result{i}"
            if i < len(res_attrs):
                d = ir.DictAttr(res_attrs[i])
                if "jax.result_info" in d:
                    name = ir.StringAttr(d["jax.result_info"]).value or name
            res_names.append(name)
        n_ops = sum(1 for _ in entry_ops(block))
        return cls(text=module.operation.get_asm(enable_debug_info=True),
                   in_types=tuple(_tensor_type(t) for t in ftype.inputs),
                   out_types=tuple(_tensor_type(t) for t in ftype.results), arg_names=arg_names,
                   result_names=tuple(res_names), n_ops=n_ops, path=path)

    def parse(self, ctx):
        """A fresh ``ir.Module`` of the artifact in ``ctx`` (callers may mutate it)."""
        from jax.extend.mlir import ir

        with ctx:
            return ir.Module.parse(self.text)

    @property
    def fingerprint(self) -> str:
        """sha256 of :func:`canonical_text`: equal for equal computations."""
        return hashlib.sha256(canonical_text(self.text).encode()).hexdigest()


def _bytecode_to_text(data: bytes, path: Path) -> str:
    from jax.extend.mlir import ir
    from jax.extend.mlir.dialects import stablehlo

    ctx = make_context()
    with ctx:
        try:
            return str(stablehlo.deserialize_portable_artifact(ctx, bytes(data)))
        except Exception:
            try:
                return str(ir.Module.parse(bytes(data)))
            except Exception as e:
                raise InputError(f"{path}: not a StableHLO portable artifact or MLIR bytecode "
                                 f"({str(e).splitlines()[0]})") from None
