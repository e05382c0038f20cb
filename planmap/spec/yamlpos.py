"""Safe YAML reading that remembers where every key and value came from.

ruamel.yaml composes the document into a node graph (with marks); planmap then builds plain
Python data from that graph itself, so that it can (1) record the line/column of every key and
value by path, (2) bound alias expansion (a "billion laughs" file is rejected, not expanded),
(3) reject duplicate keys and non-string keys, and (4) never run arbitrary YAML tags.

Scanning and parsing (most of the time of a pure-Python YAML read) run in libyaml's C parser when
``ruamel.yaml.clib`` is installed (:func:`safe_yaml`): it hands ruamel's own Python composer the same
events, so nodes, marks, tags and everything above are unchanged. Only libyaml's *parser* is used: its
composer (like PyYAML's ``CSafeLoader``) recurses in C and crashes the process on a deeply nested file,
where the Python composer raises ``RecursionError``. A file libyaml rejects is parsed again in Python,
so error messages and positions are the pure parser's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.composer import ComposerError
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from planmap.spec.diagnostics import Diagnostic
from planmap.spec.yamlcompose import compose_events

MAX_BYTES = 8 * 2**20
MAX_NODES = 100_000
MAX_DEPTH = 64

Path_ = tuple[str | int, ...]

_MERGE_TAG = "tag:yaml.org,2002:merge"
_SCALAR_TAGS = {
    "tag:yaml.org,2002:str", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
}


@dataclass
class Positions:
    """1-based (line, column) of values and keys, by path from the document root."""

    values: dict[Path_, tuple[int, int]] = field(default_factory=dict)
    keys: dict[Path_, tuple[int, int]] = field(default_factory=dict)
    containers: set[Path_] = field(default_factory=set)

    def of_subject(self, path: Path_) -> tuple[int, int]:
        """Where to report a problem with the value at ``path``: its key when it is a mapping or list
        (the line a reader looks for), else the scalar itself."""
        if path in self.containers:
            return self.of_key(path)
        return self.of_value(path)

    def of_value(self, path: Path_) -> tuple[int, int]:
        """Position of the value at ``path``, else of its nearest ancestor."""
        for i in range(len(path), -1, -1):
            p = tuple(path[:i])
            if p in self.values:
                return self.values[p]
        return (1, 1)

    def of_key(self, path: Path_) -> tuple[int, int]:
        """Position of the key naming ``path`` (the value's position for list items)."""
        if path in self.keys:
            return self.keys[path]
        return self.of_value(path)

    def of_missing(self, path: Path_) -> tuple[int, int]:
        """Where to report a missing ``path``: the key of the nearest ancestor that exists."""
        for i in range(len(path) - 1, -1, -1):
            p = tuple(path[:i])
            if p in self.keys:
                return self.keys[p]
            if p in self.values:
                return self.values[p]
        return (1, 1)


class _Stop(Exception):
    def __init__(self, diag: Diagnostic):
        self.diag = diag


def safe_yaml(text: str, *, pure: bool = False) -> YAML:
    """A safe ruamel loader for ``text`` whose events come from libyaml (when installed, ``pure`` is false
    and the text has no ``%YAML`` directive, which the pure scanner's version handling owns)."""
    yaml = YAML(typ="safe", pure=True)
    if pure or "%YAML" in text:
        return yaml
    try:
        from _ruamel_yaml import CParser  # type: ignore[import-not-found]  # C extension, no stubs
    except ImportError:  # no C extension (another Python implementation): the pure parser
        return yaml
    yaml._parser = CParser(text)  # type: ignore[attr-defined]  # read by ruamel's composer through YAML.parser
    return yaml


def _compose(yaml: YAML, text: str) -> Node | None:
    """The root node of ``text``: libyaml's events through the lean composer (:mod:`planmap.spec.yamlcompose`)
    when :func:`safe_yaml` attached libyaml's parser, else ruamel's own parser and composer."""
    parser = getattr(yaml, "_parser", None)
    if parser is not None and type(parser).__name__ == "CParser":
        return compose_events(parser, yaml.resolver)
    return yaml.compose(text)


def compose_yaml(text: str) -> tuple[YAML, Node | None]:
    """``(loader, root node)`` of the single document in ``text`` (see :func:`safe_yaml`). When libyaml's
    scanner or parser rejects the text (or it nests past the recursion limit), the pure parser runs again,
    so the error raised is the pure parser's; a composer error (an undefined alias, a second document) is
    the same from either and is raised as is."""
    try:
        yaml = safe_yaml(text)
        return yaml, _compose(yaml, text)
    except ComposerError:
        raise
    except (YAMLError, RecursionError, ValueError):
        yaml = safe_yaml(text, pure=True)
        return yaml, yaml.compose(text)


def load_yaml(text: str) -> Any:
    """The Python data of the single document in ``text`` (safe tags only; parse errors as :func:`compose_yaml`).

    Construction errors (a duplicate key, an unhashable key) are raised from the composed nodes, which
    are the same whichever parser read them."""
    yaml, node = compose_yaml(text)
    return None if node is None else yaml.constructor.construct_document(node)


def _pos(node: Node) -> tuple[int, int]:
    return (node.start_mark.line + 1, node.start_mark.column + 1)


class _Builder:
    def __init__(self, file: str, yaml: YAML):
        self.file = file
        self.count = 0
        self.pos = Positions()
        self.errors: list[Diagnostic] = []
        self._constructor = yaml.constructor

    def _diag(self, node: Node, code: str, message: str, got=None, expected=None) -> Diagnostic:
        line, col = _pos(node)
        return Diagnostic(self.file, line, col, code, message, got, expected)

    def _surrogate(self, node: Node) -> Diagnostic:
        return self._diag(node, "encoding", "the string contains a lone surrogate (an escape such as \\udc80 "
                          "that is not a character)", expected="text that UTF-8 can encode")

    def build(self, node: Node, path: Path_, depth: int) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise _Stop(self._diag(node, "alias-limit", f"the document expands to more than {MAX_NODES:,} "
                                   "nodes (aliases nested too deeply?)", expected="a spec without alias bombs"))
        if depth > MAX_DEPTH:
            raise _Stop(self._diag(node, "alias-limit", f"the document nests deeper than {MAX_DEPTH} levels"))
        self.pos.values.setdefault(path, _pos(node))
        if isinstance(node, MappingNode):
            self.pos.containers.add(path)
            return self._mapping(node, path, depth)
        if isinstance(node, SequenceNode):
            self.pos.containers.add(path)
            return [self.build(item, path + (i,), depth + 1) for i, item in enumerate(node.value)]
        if isinstance(node, ScalarNode):
            if node.tag not in _SCALAR_TAGS:
                self.errors.append(self._diag(node, "yaml-tag", f"YAML tag {node.tag!r} is not allowed",
                                              expected="plain scalars, lists and mappings"))
                return node.value
            value = self._constructor.construct_object(node, deep=True)
            if isinstance(value, str) and _has_surrogate(value):
                self.errors.append(self._surrogate(node))
                return ""
            return value
        raise _Stop(self._diag(node, "yaml-syntax", f"unsupported YAML node {type(node).__name__}"))

    def _pairs(self, node: MappingNode, depth: int):
        """Key/value node pairs with '<<' merge keys expanded (explicit keys win)."""
        own, merged = [], []
        for knode, vnode in node.value:
            if knode.tag == _MERGE_TAG:
                sources = vnode.value if isinstance(vnode, SequenceNode) else [vnode]
                for src in sources:
                    if not isinstance(src, MappingNode):
                        self.errors.append(self._diag(src, "yaml-syntax", "'<<' must merge a mapping"))
                        continue
                    self.count += 1
                    merged.extend(self._pairs(src, depth + 1))
            else:
                own.append((knode, vnode))
        own_keys = {k.value for k, _ in own if isinstance(k, ScalarNode)}
        return own + [(k, v) for k, v in merged if not (isinstance(k, ScalarNode) and k.value in own_keys)]

    def _mapping(self, node: MappingNode, path: Path_, depth: int) -> dict:
        out: dict[str, Any] = {}
        for knode, vnode in self._pairs(node, depth):
            if not isinstance(knode, ScalarNode) or knode.tag != "tag:yaml.org,2002:str":
                got = knode.value if isinstance(knode, ScalarNode) else type(knode).__name__
                self.errors.append(self._diag(knode, "type", "mapping keys must be strings", got=got,
                                              expected="a field name"))
                continue
            key = knode.value
            if _has_surrogate(key):
                self.errors.append(self._surrogate(knode))
                continue
            if key in out:
                self.errors.append(self._diag(knode, "duplicate-key", f"key {key!r} appears twice in this mapping",
                                              got=key, expected="each key once"))
                continue
            self.pos.keys[path + (key,)] = _pos(knode)
            out[key] = self.build(vnode, path + (key,), depth + 1)
        return out


def _has_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate (possible through YAML escapes; no encoder accepts it)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _decode(data: bytes, file: str) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        head = data[: e.start]
        line = head.count(b"\n") + 1
        col = e.start - (head.rfind(b"\n") + 1) + 1
        raise _Stop(Diagnostic(file, line, col, "encoding", f"the file is not valid UTF-8 (byte 0x{data[e.start]:02x} "
                               f"at offset {e.start})", expected="a UTF-8 text file")) from None


def read_yaml(data: bytes, file: str) -> tuple[Any, Positions, list[Diagnostic]]:
    """Parse one YAML document from ``data``; return (value, positions, diagnostics).

    On a fatal problem (syntax, encoding, alias bomb) the value is None and diagnostics say why.
    """
    if len(data) > MAX_BYTES:
        return None, Positions(), [Diagnostic(file, 1, 1, "too-large", f"the file is {len(data):,} bytes",
                                              expected=f"at most {MAX_BYTES:,} bytes")]
    try:
        text = _decode(data, file)
        if "\x00" in text:
            i = text.index("\x00")
            line = text.count("\n", 0, i) + 1
            raise _Stop(Diagnostic(file, line, i - text.rfind("\n", 0, i), "encoding",
                                   "the file contains a NUL character", expected="a text file"))
        try:
            yaml, node = compose_yaml(text)
        except MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
            problem = (e.problem or e.context or "invalid YAML").strip()
            if "more than one document" in str(e) or "expected a single document" in str(e):
                problem = "the file holds more than one YAML document"
            raise _Stop(Diagnostic(file, line, col, "yaml-syntax", problem)) from None
        except (YAMLError, RecursionError, ValueError) as e:
            raise _Stop(Diagnostic(file, 1, 1, "yaml-syntax", str(e).strip().splitlines()[0][:200])) from None
        if node is None:
            raise _Stop(Diagnostic(file, 1, 1, "empty", "the file holds no YAML document",
                                   expected="a PlanSpec or Cluster document"))
        builder = _Builder(file, yaml)
        try:
            value = builder.build(node, (), 0)
        except RecursionError:
            raise _Stop(Diagnostic(file, 1, 1, "alias-limit", "the document nests too deeply")) from None
        except (YAMLError, ValueError, TypeError) as e:
            raise _Stop(Diagnostic(file, 1, 1, "yaml-syntax", str(e).strip().splitlines()[0][:200])) from None
        if value is None and not builder.errors:  # e.g. a lone anchor or `~`: a document that is null
            raise _Stop(Diagnostic(file, node.start_mark.line + 1, node.start_mark.column + 1, "empty",
                                   "the document is null", expected="a PlanSpec or Cluster document"))
        return value, builder.pos, builder.errors
    except _Stop as stop:
        return None, Positions(), [stop.diag]
