"""Loading untrusted artifacts in a child process, so that corrupt input cannot crash the caller.

Why: MLIR's bytecode reader (and StableHLO's VHLO deserializer) segfault or loop forever on some
corrupted inputs, and the Python bindings abort the process when a location or attribute holds bytes
that are not UTF-8 — our fuzz tests hit both within a few dozen mutations. A crash would take the
user's process (a notebook, a CI job, a long solve) down with it.

So :func:`load_isolated` starts ``python -c ...`` running :func:`main`, which parses the artifact and
builds the whole :class:`~planmap.graph.OpGraph` there, under a time limit and an address-space cap,
and sends it back pickled (with any cost warnings and user-facing errors). A signal or a timeout
becomes an :class:`~planmap.errors.InputError` naming the file. The parent never touches the bytes
with MLIR, so nothing is parsed twice. The pickle comes from our own code in a process we started,
with the user's privileges: it is as trusted as the caller.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any

from planmap.errors import InputError

__all__ = ["load_isolated", "main"]

_BASE_ADDRESS_SPACE = 8 << 30  # jaxlib maps a lot of virtual memory just by being imported
_SIGNALS = {6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 7: "SIGBUS", 8: "SIGFPE", 4: "SIGILL"}


def _plain_arguments(arguments: Any) -> dict | None:
    if arguments is None or isinstance(arguments, dict):
        return arguments
    return {"data": list(arguments.data), "parameters": list(arguments.parameters)}


def load_isolated(data: bytes, fmt: str, *, where: str, name: str, entry: str = "main", arguments: Any = None,
                  loop_trip_count: int = 1, timeout: float | None = None) -> Any:
    """Load ``data`` into an OpGraph in a child process (see module docstring).

    ``timeout`` defaults to 60 s plus 20 s per MB of artifact.
    """
    from planmap.frontend.costs import CostWarning

    if timeout is None:
        timeout = 60.0 + 20.0 * len(data) / 1e6
    request = pickle.dumps({"data": data, "fmt": fmt, "where": where, "name": name, "entry": entry,
                            "arguments": _plain_arguments(arguments), "loop_trip_count": loop_trip_count})
    root = str(Path(__file__).resolve().parents[2])
    code = f"import sys; sys.path.insert(0, {root!r}); from planmap.frontend.isolate import main; main()"
    try:
        proc = subprocess.run([sys.executable, "-c", code], input=request, capture_output=True, timeout=timeout,
                              env=dict(os.environ))
    except subprocess.TimeoutExpired:
        raise InputError(f"{where}: reading the model did not finish within {timeout:.0f} s; the file is probably "
                         f"corrupt (re-export it)") from None
    if proc.returncode != 0:
        sig = -proc.returncode if proc.returncode < 0 else proc.returncode - 128
        if proc.returncode < 0 or sig in _SIGNALS:
            raise InputError(f"{where}: the file is corrupt: the MLIR reader crashed on it "
                             f"({_SIGNALS.get(sig, f'signal {sig}')}); re-export it")
        tail = " | ".join(proc.stderr.decode("utf-8", "replace").strip().splitlines()[-3:])
        raise RuntimeError(f"planmap's isolated model reader failed to run (exit {proc.returncode}): {tail}")
    try:
        reply = pickle.loads(proc.stdout)
    except Exception as e:  # a reply cut short: report it as the bug it is
        raise RuntimeError(f"planmap's isolated model reader sent an unreadable reply ({e})") from None
    for message in reply.get("warnings", []):
        warnings.warn(CostWarning(message), stacklevel=3)
    if "input_error" in reply:
        raise InputError(reply["input_error"])
    if "bug" in reply:
        raise RuntimeError(f"planmap's isolated model reader failed on {where}:\n{reply['bug']}")
    return reply["graph"]


def _limit_memory(n_bytes: int) -> None:
    try:
        import resource

        limit = _BASE_ADDRESS_SPACE + 256 * n_bytes
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, ValueError, OSError):  # not POSIX, or not permitted: run without the cap
        pass


def main() -> None:
    """Child side: read a pickled request on stdin, write a pickled reply on stdout."""
    from planmap.frontend.costs import CostWarning

    reply_fd = os.dup(1)  # the reply channel; anything a library prints goes to stderr instead
    os.dup2(2, 1)
    request = pickle.loads(sys.stdin.buffer.read())
    _limit_memory(len(request["data"]))
    reply: dict[str, Any]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CostWarning)
        try:
            from planmap.frontend.mlir import parse_artifact
            from planmap.frontend.stablehlo import build_graph

            parsed = parse_artifact(request["data"], request["fmt"], where=request["where"])
            graph = build_graph(parsed, name=request["name"], entry=request["entry"],
                                arguments=request["arguments"], loop_trip_count=request["loop_trip_count"])
            reply = {"graph": graph}
        except InputError as e:
            reply = {"input_error": str(e)}
        except MemoryError:
            reply = {"input_error": f"{request['where']}: the file is corrupt: reading it needs more memory than "
                                    f"its size can justify; re-export it"}
        except Exception:  # a bug: hand the traceback to the parent
            reply = {"bug": traceback.format_exc()}
    reply["warnings"] = [str(w.message) for w in caught if issubclass(w.category, CostWarning)]
    with os.fdopen(reply_fd, "wb") as out:
        out.write(pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))
