"""``load_spec``: YAML file -> validated, frozen :class:`PlanSpec`, or every mistake at its line.

Pipeline: bytes -> :func:`read_yaml` (positions, bounded aliases) -> header checks (apiVersion,
kind) -> a referenced Cluster document is loaded the same way (its errors point into *its* file)
-> pydantic validation -> each pydantic error rewritten as a :class:`Diagnostic` whose wording a
user can act on, at the position of the key or value it concerns.
"""

from __future__ import annotations

import difflib
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from planmap.io import InputLimitError, is_regular_file, read_input
from planmap.spec.diagnostics import Diagnostic, SpecError
from planmap.spec.models import API_VERSION, Cluster, PlanSpec
from planmap.spec.yamlpos import Positions, read_yaml

M = TypeVar("M", bound=BaseModel)

__all__ = ["load_spec", "load_cluster", "load_document", "LoadedSpec", "KINDS"]

KINDS: dict[str, type[BaseModel]] = {"PlanSpec": PlanSpec, "Cluster": Cluster}


class LoadedSpec:
    """A validated PlanSpec together with where it (and its cluster) came from.

    Behaves like the :class:`PlanSpec` (attribute access is forwarded), plus ``path``,
    ``cluster_path`` (None when inline) and ``model_path`` (absolute), which plans hash.
    ``sources`` maps the spec's and the cluster's path to ``(bytes, parsed value)`` as loaded, so
    that a plan hashes the very documents that were solved without reading and parsing them again.
    """

    __slots__ = ("document", "path", "cluster_path", "sources")

    def __init__(self, document: PlanSpec, path: Path, cluster_path: Path | None,
                 sources: dict[Path, tuple[bytes, Any]] | None = None):
        self.document = document
        self.path = path
        self.cluster_path = cluster_path
        self.sources = sources or {}

    def __getattr__(self, name: str):
        return getattr(self.document, name)

    @property
    def model_path(self) -> Path:
        return (self.path.parent / self.document.spec.model.source).resolve()

    @property
    def profile_path(self) -> Path | None:
        """The ``cost.profile`` file (absolute), or None."""
        ref = self.document.spec.cost.profile
        return None if ref is None else (self.path.parent / ref).resolve()

    def __repr__(self) -> str:
        return f"LoadedSpec({self.document.metadata.name!r}, path={str(self.path)!r})"


# ------------------------------------------------------------------------------ error wording
_TYPE_WORDS = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number", "bool_type": "true or false",
    "bool_parsing": "true or false", "string_type": "a string", "dict_type": "a mapping",
    "model_type": "a mapping", "model_attributes_type": "a mapping", "list_type": "a list",
    "none_required": "nothing", "finite_number": "a finite number",
}
_BOUND_WORDS = {
    "greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<=",
}


def _field_model(root: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The model class that validates the mapping at ``loc`` (aliases), for suggestions."""
    cls: Any = root
    for part in loc:
        cls = _unwrap(cls)
        if isinstance(part, int):
            args = typing.get_args(cls)
            cls = args[0] if args else None
            continue
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
            return None
        field = next((f for n, f in cls.model_fields.items() if (f.alias or n) == part or n == part), None)
        if field is None:
            return None
        cls = field.annotation
    cls = _unwrap(cls)
    return cls if isinstance(cls, type) and issubclass(cls, BaseModel) else None


def _unwrap(cls: Any) -> Any:
    """Strip Optional / Annotated wrappers down to the model or container type."""
    for _ in range(5):
        origin = typing.get_origin(cls)
        if origin is typing.Annotated:
            cls = typing.get_args(cls)[0]
        elif origin in (typing.Union, types.UnionType):
            non_none = [a for a in typing.get_args(cls) if a is not type(None)]
            models = [a for a in non_none if isinstance(a, type) and issubclass(a, BaseModel)]
            cls = models[0] if models else non_none[0]
        else:
            break
    return cls


def _aliases(model: type[BaseModel]) -> list[str]:
    return [f.alias or n for n, f in model.model_fields.items()]


def _clean_loc(loc: tuple) -> tuple:
    """Drop pydantic's union-branch and function markers from a location."""
    out = []
    for part in loc:
        if isinstance(part, str) and (part.startswith("function-") or part in ("int", "str", "literal['auto']",
                                                                                  "bool", "float")):
            continue
        out.append(part)
    return tuple(out)


def _translate(err: ErrorDetails, root: type[BaseModel], pos: Positions, file: str, prefix: tuple) -> Diagnostic | None:
    typ = err["type"]
    ctx = err.get("ctx") or {}
    loc = prefix + _clean_loc(err["loc"]) + tuple(ctx.get("at") or ())
    value = err.get("input")
    got, expected, code = None, None, "value"
    if typ == "missing":
        line, col = pos.of_missing(loc)
        field = loc[-1]
        model = _field_model(root, loc[:-1])
        info = model.model_fields.get(_by_alias(model, field)) if model else None
        desc = info.description if info else None
        return Diagnostic(file, line, col, "missing-field", f"missing required field {field!r}",
                          expected=(desc.split(".")[0] if desc else None))
    if typ == "extra_forbidden":
        line, col = pos.of_key(loc)
        field = loc[-1]
        model = _field_model(root, loc[:-1])
        allowed = _aliases(model) if model else []
        close = difflib.get_close_matches(str(field), allowed, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return Diagnostic(file, line, col, "unknown-field", f"unknown field {field!r}{hint}", got=field,
                          expected=("one of " + ", ".join(repr(a) for a in allowed)) if allowed else None)
    line, col = pos.of_subject(loc)
    where = _dotted(loc[len(prefix):])
    if typ in _TYPE_WORDS:
        code, expected = "type", _TYPE_WORDS[typ]
        msg = f"{where}: wrong type"
        got = value if not isinstance(value, dict | list) else value
    elif typ in ("literal_error", "enum"):
        expected = "one of " + str(ctx.get("expected", "")).replace(" or ", ", ")
        msg, got = f"{where}: invalid value", value
    elif typ in _BOUND_WORDS:
        bound = next(v for k, v in ctx.items() if k in ("gt", "ge", "lt", "le"))
        msg, got, expected = f"{where}: out of range", value, f"a value {_BOUND_WORDS[typ]} {bound}"
    elif typ in ("too_short", "too_long"):
        msg = f"{where}: " + ("needs at least " + str(ctx.get("min_length")) + " item(s)" if typ == "too_short"
                              else "has too many items")
        got = f"{ctx.get('actual_length')} item(s)"
    elif typ in ("string_pattern_mismatch", "string_too_short", "string_too_long"):
        msg, got = f"{where}: invalid name", value
        expected = "letters, digits, '-', '_', '.' (1-64 characters)" if "pattern" in typ else "a non-empty string"
    elif typ == "unit":
        code, msg = "unit", f"{where}: {ctx.get('message')}"
        got, expected = None, ctx.get("expected")
    elif typ == "range":
        code, msg, got, expected = "range", f"{where}: {ctx.get('message') or err['msg']}", None, ctx.get("expected")
    elif typ in ("duplicate-name", "reference", "file-not-found", "value", "missing-field", "option"):
        code, msg = typ, f"{where}: " + err["msg"]
        got, expected = ctx.get("got"), ctx.get("expected")
        if typ == "missing-field":
            got = None
    elif typ == "union_tag_invalid" or typ.startswith("union"):
        msg, got = f"{where}: {err['msg']}", value
    else:
        msg, got = f"{where}: {err['msg']}", value
    if isinstance(got, dict | list):
        got = "a mapping" if isinstance(got, dict) else "a list"
    return Diagnostic(file, line, col, code, msg, got=got, expected=expected)


def _dotted(loc: tuple) -> str:
    """('spec', 'hosts', 0, 'name') -> 'spec.hosts[0].name'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "document"


def _by_alias(model: type[BaseModel], alias: str) -> str:
    for n, f in model.model_fields.items():
        if (f.alias or n) == alias:
            return n
    return alias


# ------------------------------------------------------------------------------------ loading
def _read(path: Path, kind: str, sources: dict[Path, tuple[bytes, Any]] | None = None
          ) -> tuple[Any, Positions, list[Diagnostic]]:
    """Parse a spec or cluster file read through the bounded reader (regular file, size cap); a file read
    without diagnostics is recorded in ``sources`` (see :class:`LoadedSpec`)."""
    file = str(path)
    try:
        raw = read_input(path, kind)
    except InputLimitError as e:
        return None, Positions(), [Diagnostic(file, 1, 1, e.code, e.detail)]
    data, pos, diags = read_yaml(raw, file)
    if sources is not None and not diags:
        sources[path] = (raw, data)
    return data, pos, diags


def _header(data: Any, pos: Positions, file: str, want: str | None) -> list[Diagnostic]:
    if not isinstance(data, dict):
        line, col = pos.of_value(())
        return [Diagnostic(file, line, col, "type", "the document must be a mapping", got=data,
                           expected="apiVersion, kind, metadata and spec")]
    diags = []
    api = data.get("apiVersion")
    if "apiVersion" in data and api != API_VERSION:
        line, col = pos.of_value(("apiVersion",))
        diags.append(Diagnostic(file, line, col, "api-version", "unsupported apiVersion", got=api,
                                expected=repr(API_VERSION)))
    kind = data.get("kind")
    allowed = [want] if want else list(KINDS)
    if "kind" in data and kind not in allowed:
        line, col = pos.of_value(("kind",))
        close = difflib.get_close_matches(str(kind), allowed, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        diags.append(Diagnostic(file, line, col, "kind", f"unsupported kind{hint}", got=kind,
                                expected=" or ".join(repr(k) for k in allowed)))
    return diags


def _validate(model: type[M], data: Any, pos: Positions, file: str, context: dict,
              skip: tuple[tuple, ...] = ()) -> tuple[M | None, list[Diagnostic]]:
    try:
        return model.model_validate(data, context=context), []
    except ValidationError as e:
        diags = []
        for err in e.errors(include_url=False):
            full = _clean_loc(err["loc"]) + tuple((err.get("ctx") or {}).get("at") or ())
            if any(full[: len(p)] == p for p in skip):
                continue
            d = _translate(err, model, pos, file, ())
            if d is not None:
                diags.append(d)
        return None, _dedupe(diags)


def _dedupe(diags: list[Diagnostic]) -> list[Diagnostic]:
    seen, out = set(), []
    for d in diags:
        key = (d.file, d.line, d.col, d.code, d.message)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


def load_cluster(path: str | Path, sources: dict[Path, tuple[bytes, Any]] | None = None) -> Cluster:
    """Load and validate a ``kind: Cluster`` document; raise :class:`SpecError` with every mistake."""
    path = Path(path)
    data, pos, diags = _read(path, "cluster", sources)
    if data is None:
        raise SpecError(diags)
    diags += _header(data, pos, str(path), "Cluster")
    if diags:
        raise SpecError(diags)
    doc, errs = _validate(Cluster, data, pos, str(path), {"base_dir": path.parent})
    if errs or doc is None:
        raise SpecError(errs)
    return doc


def load_spec(path: str | Path) -> LoadedSpec:
    """Load and validate a ``kind: PlanSpec`` document (and the Cluster document it references).

    Raises :class:`SpecError` listing every mistake of the spec and of the referenced cluster file.
    """
    path = Path(path)
    sources: dict[Path, tuple[bytes, Any]] = {}
    return _load_spec(path, *_read(path, "spec", sources), sources)


def _load_spec(path: Path, data: Any, pos: Positions, diags: list[Diagnostic],
               sources: dict[Path, tuple[bytes, Any]]) -> LoadedSpec:
    """:func:`load_spec` of a spec file already read and parsed (``data``, ``pos``, ``diags`` of :func:`_read`)."""
    if data is None:
        raise SpecError(diags)
    diags = diags + _header(data, pos, str(path), "PlanSpec")
    if any(d.code in ("kind", "type") for d in diags):
        raise SpecError(diags)
    cluster_path = None
    skip: tuple[tuple[str, ...], ...] = ()
    body = data.get("spec")
    if isinstance(body, dict) and isinstance(body.get("cluster"), str):
        ref = body["cluster"]
        cluster_path = path.parent / ref
        if not is_regular_file(cluster_path):
            line, col = pos.of_value(("spec", "cluster"))
            diags.append(Diagnostic(str(path), line, col, "file-not-found", f"cluster file {ref!r} does not exist",
                                    got=ref, expected="a path to a Cluster document, relative to this file"))
            skip = _CLUSTER_DEPENDENT
        else:
            try:
                cluster = load_cluster(cluster_path, sources)
                data = {**data, "spec": {**body, "cluster": cluster.spec}}
            except SpecError as e:
                diags.extend(e.diagnostics)
                skip = _CLUSTER_DEPENDENT
        if skip:  # validate the rest of the spec with a placeholder cluster, errors under it already reported
            data = {**data, "spec": {**body, "cluster": _PLACEHOLDER}}
    doc, errs = _validate(PlanSpec, data, pos, str(path), {"base_dir": path.parent}, skip=skip)
    diags += errs
    if diags or doc is None:
        raise SpecError(diags)
    return LoadedSpec(doc, path, cluster_path, sources)


# When the referenced cluster is broken, errors under these paths are consequences, not news.
_CLUSTER_DEPENDENT = (("spec", "cluster"), ("spec", "constraints", "pins"))
_PLACEHOLDER = {
    "deviceTypes": [{"name": "placeholder", "kind": "cpu", "memoryBandwidth": "1GB/s", "peakFlops": [
        {"dtype": "f32", "rate": "1GFLOP/s"}]}],
    "hosts": [{"name": "placeholder", "devices": [{"name": "cpu", "type": "placeholder"}]}],
}


def load_document(path: str | Path) -> LoadedSpec | Cluster:
    """Load a PlanSpec or a Cluster, whichever the file's ``kind`` says."""
    path = Path(path)
    sources: dict[Path, tuple[bytes, Any]] = {}
    data, pos, read_diags = _read(path, "spec", sources)
    if data is None:
        raise SpecError(read_diags)
    diags = _header(data, pos, str(path), None)
    if diags:
        raise SpecError(diags)
    if data.get("kind") == "Cluster":
        return load_cluster(path)  # read again: a cluster file has its own size cap
    return _load_spec(path, data, pos, read_diags, sources)  # the spec as read here: parsed once
