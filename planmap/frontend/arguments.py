"""Which entry-function arguments are data (the batch) and which are parameters (model state).

The spec's ``model.arguments`` (``ArgumentRoles``: lists of argument indices or globs on argument
names) decides when given. Otherwise the default reads JAX's argument names — ``jax.export`` records
each flattened argument's pytree path as its location (``params['blocks']['layer0']['attn']['wqkv']``,
``tokens``):

* an argument whose root name (before the first ``[`` or ``.``) is ``params``, ``parameters``,
  ``weights``, ``variables``, ``state``, ``states`` (torchax's name for a module's weights),
  ``opt_state``, ``model`` or contains ``param``/``weight`` is a **parameter**; any other named
  argument is **data** (``x``, ``tokens``, ``inputs[0][0]``);
* when the module has no usable argument names (none, or all alike: TensorFlow calls every argument
  ``XLA_Args``), the first argument is data and the rest are parameters — TensorFlow passes the
  function's inputs before the captured variables. Pass ``arguments`` for anything else.

Selectors are indices (negative ones count from the end) or globs on the names in which ``*`` and
``?`` are the only wildcards — brackets match themselves, since JAX names are full of them
(``params['embed']*``). With ``arguments``: an argument matched by ``data`` is data, by
``parameters`` a parameter (both is an error). When only one list is given, every other argument
takes the other role; when both are given, unmatched arguments fall back to the default above. A
selector that matches nothing is an error: it is almost always a typo.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from planmap.errors import InputError

__all__ = ["DATA", "PARAM", "default_roles", "assign_roles"]

DATA = "data"
PARAM = "param"
_PARAM_ROOTS = frozenset({"params", "param", "parameters", "weights", "variables", "state", "states", "opt_state",
                          "optimizer_state", "model", "model_params", "theta"})
_ROOT_RE = re.compile(r"^[^\[.]*")


def _root(name: str) -> str:
    m = _ROOT_RE.match(name)
    return (m.group(0) if m else name).strip().lower()


def default_roles(names: Sequence[str]) -> list[str]:
    """Roles from JAX argument names (see module docstring); unnamed modules: first is data."""
    if not any(names) or len(set(names)) < len(names):
        return [DATA if i == 0 else PARAM for i in range(len(names))]
    roles = []
    for name in names:
        root = _root(name)
        param = root in _PARAM_ROOTS or "param" in root or "weight" in root
        roles.append(PARAM if param else DATA)
    return roles


def _glob(selector: str) -> re.Pattern:
    """``*`` and ``?`` are wildcards; everything else, brackets included, matches itself."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in selector) + r"\Z",
                      re.S)


def _matches(selector: int | str, index: int, name: str) -> bool:
    if isinstance(selector, int):
        return selector == index
    return bool(_glob(selector).match(name)) or (selector.isdigit() and int(selector) == index)


def assign_roles(names: Sequence[str], arguments: Any | None, where: str) -> list[str]:
    """Role per argument. ``arguments`` is an ``ArgumentRoles`` (or a mapping with data/parameters)."""
    if arguments is None:
        return default_roles(names)
    if isinstance(arguments, dict):
        data_sel = list(arguments.get("data") or [])
        param_sel = list(arguments.get("parameters") or [])
    else:
        data_sel = list(arguments.data)
        param_sel = list(arguments.parameters)
    n = len(names)
    for sel in (*data_sel, *param_sel):
        if isinstance(sel, int) and not -n <= sel < n:
            raise InputError(f"{where}: argument index {sel} is out of range: @main has {n} arguments")
    data_sel = [s + n if isinstance(s, int) and s < 0 else s for s in data_sel]
    param_sel = [s + n if isinstance(s, int) and s < 0 else s for s in param_sel]
    for sel in (*data_sel, *param_sel):
        if not any(_matches(sel, i, nm) for i, nm in enumerate(names)):
            shown = ", ".join(repr(x) for x in names[:8] if x) or "(the arguments have no names)"
            raise InputError(f"{where}: argument selector {sel!r} matches no argument of the entry function "
                             f"(names: {shown}{', ...' if n > 8 else ''})")
    default = default_roles(names)
    roles = []
    for i, nm in enumerate(names):
        is_data = any(_matches(s, i, nm) for s in data_sel)
        is_param = any(_matches(s, i, nm) for s in param_sel)
        if is_data and is_param:
            raise InputError(f"{where}: argument {i} ({nm or 'unnamed'}) is selected both as data and as a "
                             f"parameter")
        if is_data or is_param:
            roles.append(DATA if is_data else PARAM)
        elif data_sel and not param_sel:  # only data listed: everything else is a parameter
            roles.append(PARAM)
        elif param_sel and not data_sel:  # only parameters listed: everything else is data
            roles.append(DATA)
        else:
            roles.append(default[i])
    return roles
