"""Reading JAX name stacks: which layer an op belongs to and whether it is in the backward pass.

JAX records ``jax.named_scope``/module names and the transformations an op went through in its
location, e.g. ``jit(step)/layer3/attn/dot_general`` (inference), ``jit(loss)/jvp(layer3)/attn/mul``
(forward pass of a value-and-grad step) and ``jit(loss)/transpose(jvp(layer3))/attn/mul`` (its
backward pass). Flax and Haiku module paths look the same (``Block_3``, ``layers_3``, ``h/3``).

* The first component (``jit(step)``) names the exported function and the last one names the
  primitive; the components in between are scopes. Transformation wrappers (``jvp(...)``,
  ``transpose(...)``, ``vmap(...)``, ``remat(...)``, ``jit(...)``) are peeled off each scope.
* An op is *backward* when a ``transpose(...)`` wrapper appears in its stack.
* Its *layer* is the scope path up to the first scope that ends in an index (``layer3``,
  ``stage1_block0``, ``Block_3``, ``h/3``). Ops in other scopes get the first scope as their
  *group* (``embed``, ``head``), and ops at the root get ``""`` (unlabelled).

TensorFlow exports of a plain ``tf.function`` carry flat op names numbered per op type in creation
order (``MatMul``, ``add``, ``Relu``, then ``MatMul_1``, ``add_1``, ``Relu_1``, ...): when no name
has scopes and several op types share each number, number ``k`` is read as layer ``layer{k}`` (no
suffix: ``layer0``). Keras models' scoped names (``sequential/dense_1/MatMul``) take the rule above.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

__all__ = ["StackInfo", "parse_stack", "Labels", "label_ops", "common_scope", "scopes"]

_WRAPPERS = frozenset({"jvp", "transpose", "vmap", "remat", "checkpoint", "jit", "pjit", "xla_call",
                       "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr", "shard_map", "pmap",
                       "xmap", "named_call", "core_call", "closed_call", "cond", "while", "scan"})
_WRAP_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\((.*)\)$", re.S)
_INDEXED_RE = re.compile(r"^(.*?[A-Za-z_.\-])(\d+)$")
# the trailing digits of a scope key; the look-behind starts a match only where a digit run starts, so a
# long digit run that is not at the end costs linear time, not quadratic (r"\d+$" retried at every digit)
_STEM_RE = re.compile(r"(?<!\d)\d+$")
_TF_NUMBERED_RE = re.compile(r"^([A-Za-z][A-Za-z0-9]*)(?:_(\d+))?$")


@dataclass(frozen=True)
class StackInfo:
    """What a name stack says about its op: ``group`` key, whether it is an indexed layer, backward."""

    group: str
    is_layer: bool
    backward: bool


_ROOT = StackInfo("", False, False)


def _split(name: str) -> list[str]:
    parts = name.split("/")
    if "(" not in name:
        return parts
    out: list[str] = []
    depth = 0
    for p in parts:
        if depth > 0:
            out[-1] += "/" + p
        else:
            out.append(p)
        depth += p.count("(") - p.count(")")
        depth = max(depth, 0)
    return out


def _unwrap(component: str) -> str:
    while True:
        m = _WRAP_RE.match(component)
        if not m or m.group(1) not in _WRAPPERS:
            return component
        component = m.group(2)


def scopes(name: str) -> list[str]:
    """The user scopes of an op's name stack, outermost first: the jitted function (``jit(f)``) dropped,
    transform wrappers unwrapped (``transpose(jvp(embed))`` is ``embed``), the op itself left out."""
    parts = (c for c in _split(name)[:-1] if not c.startswith(("jit(", "pjit(")))
    return [p for p in map(_unwrap, parts) if p and "(" not in p]


def parse_stack(name: str) -> StackInfo:
    """Group, layer-ness and direction of one op's name stack (see module docstring)."""
    if not name:
        return _ROOT
    backward = "transpose(" in name
    parts = _split(name)
    if len(parts) > 1 and _WRAP_RE.match(parts[0]):
        parts = parts[1:]
    scopes = [s for s in (_unwrap(p) for p in parts[:-1]) if s]
    for i, s in enumerate(scopes):
        if s.isdigit() and i > 0:
            return StackInfo("/".join(scopes[: i + 1]), True, backward)
        if _INDEXED_RE.match(s):
            return StackInfo("/".join(scopes[: i + 1]), True, backward)
    return StackInfo(scopes[0] if scopes else "", False, backward)


@dataclass(frozen=True)
class Labels:
    """Per-op labels from name stacks.

    ``group``: id of the op's scope group (-1 = unlabelled root op), ``group_names`` their keys;
    ``layer``: repeated-layer id (-1 = none; numbered in order of first appearance); ``backward``.
    A layer is a group whose key ends in an index and whose stem occurs with at least two indices.
    """

    group: np.ndarray
    group_names: tuple[str, ...]
    layer: np.ndarray
    layer_names: tuple[str, ...]
    backward: np.ndarray


def label_ops(names: tuple[str, ...] | list[str]) -> Labels:
    """Labels of every op from its location name.

    The group depends only on the scopes (all components but the last), and thousands of ops share
    a scope path, so parsing is cached per scope path; ``backward`` is a substring test per op.
    """
    names = _tf_numbered_layers(names) or names
    cache: dict[str, StackInfo] = {}
    whole: dict[str, StackInfo] = {}
    # labels are per distinct name (ops of one scope and primitive share a name): each op is a code into
    # the distinct names, in order of first appearance, so groups numbered over the distinct names get
    # the ids a pass over the ops would give them
    code_of: dict[str, int] = {}
    codes = np.fromiter((code_of.setdefault(nm, len(code_of)) for nm in names), np.int64, len(names))
    infos = [_stack_info(nm, cache, whole) for nm in code_of]
    group_ids: dict[str, int] = {}
    is_layer: list[bool] = []
    group_list = []
    for info in infos:
        g = -1
        if info.group:
            g = group_ids.get(info.group, -1)
            if g < 0:
                g = group_ids[info.group] = len(group_ids)
                is_layer.append(info.is_layer)
        group_list.append(g)
    group = np.array(group_list, np.int32)[codes] if infos else np.zeros(0, np.int32)
    backward = np.array([info.backward for info in infos], bool)[codes] if infos else np.zeros(0, bool)
    group_names = tuple(group_ids)
    # a layer needs a sibling: the same stem with another index (layer3 and layer4, h/0 and h/1)
    stems: dict[str, int] = {}
    for key, lay in zip(group_names, is_layer, strict=True):
        if lay:
            stems[_STEM_RE.sub("#", key)] = stems.get(_STEM_RE.sub("#", key), 0) + 1
    layer_of_group = np.full(len(group_names), -1, np.int32)
    layer_names: list[str] = []
    for g in _first_forward_order(group, backward, len(group_names)):
        key = group_names[g]
        if is_layer[g] and stems[_STEM_RE.sub("#", key)] >= 2:
            layer_of_group[g] = len(layer_names)
            layer_names.append(key)
    layer = np.full(len(codes), -1, np.int32)
    if len(group_names):
        layer = np.where(group >= 0, layer_of_group[np.maximum(group, 0)], -1).astype(np.int32)
    return Labels(group, group_names, layer, tuple(layer_names), backward)


def _stack_info(nm: str, cache: dict[str, StackInfo], whole: dict[str, StackInfo]) -> StackInfo:
    """:func:`parse_stack` of one op name, cached per scope path (``cache``) or per whole name (``whole``)."""
    cut = nm.rfind("/")
    last = nm[cut + 1:]
    if cut < 0 or ("(" in last and last.count("(") != last.count(")")):
        # no scopes, or a '/' inside parentheses: parse it whole (text without locations: all alike)
        info = whole.get(nm)
        if info is None:
            info = whole[nm] = parse_stack(nm)
        return info
    prefix = nm[:cut]
    info = cache.get(prefix)
    if info is None:
        info = cache[prefix] = parse_stack(prefix + "/_")
    if "transpose(" in nm and not info.backward:
        info = StackInfo(info.group, info.is_layer, True)
    return info


def _tf_numbered_layers(names) -> list[str] | None:
    """``layer{k}/<name>`` for TensorFlow's flat per-type numbered op names (see module docstring), or
    None when the names are not of that form: some name has scopes, or fewer than two numbers are
    shared by at least two op types."""
    distinct = dict.fromkeys(names)  # text without locations repeats one name
    if any("/" in nm or "(" in nm for nm in distinct):
        return None
    number: dict[str, int | None] = {}
    stems_of: dict[int, set[str]] = {}
    for nm in distinct:
        m = _TF_NUMBERED_RE.match(nm)
        k = number[nm] = int(m.group(2) or 0) if m else None
        if m and k is not None:
            stems_of.setdefault(k, set()).add(m.group(1))
    shared = {k for k, stems in stems_of.items() if len(stems) >= 2}
    if len(shared) < 2:
        return None
    return [f"layer{k}/{nm}" if (k := number[nm]) in shared else nm for nm in names]


def _first_forward_order(group: np.ndarray, backward: np.ndarray, n_groups: int) -> list[int]:
    """Group ids ordered by their first forward op (backward-only groups after, by first op)."""
    first = np.full(n_groups, np.iinfo(np.int64).max, np.int64)
    idx = np.arange(len(group))
    fwd = (group >= 0) & ~backward
    np.minimum.at(first, group[fwd], idx[fwd])
    anyop = np.full(n_groups, np.iinfo(np.int64).max, np.int64)
    sel = group >= 0
    np.minimum.at(anyop, group[sel], idx[sel])
    key = np.where(first < np.iinfo(np.int64).max, first, len(group) + anyop)
    return [int(g) for g in np.argsort(key, kind="stable")]


def common_scope(names) -> list[str]:
    """The leading ``/``-separated components that all ``names`` share (``[]`` for no names): the
    scope that names a group of ops, e.g. ``["jit(f)", "layer3"]`` for the ops of one layer."""
    common: list[str] | None = None
    for name in names:
        parts = name.split("/")
        if common is None:
            common = parts
            continue
        k = 0
        while k < min(len(common), len(parts)) and common[k] == parts[k]:
            k += 1
        common = common[:k]
    return common or []
