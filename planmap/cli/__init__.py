"""The ``planmap`` command line: thin Typer commands over library functions.

Exit statuses follow Terraform's detailed style (:mod:`planmap.cli.exits`): 0 up to date / no
differences, 2 stale / different, 1 error. User errors (:class:`planmap.errors.PlanmapError`) print
their message and exit 1 without a traceback (``--debug`` re-raises them); usage errors (an unknown
option, a missing argument) print Click's message and exit 1 too, not Click's 2, so that 2 always
means "stale or different". Each command group lives in its own module with a
``register(app)`` function, so the CLI stays one concept per module and imports heavy
dependencies (jax, pyomo) only when a command that needs them runs.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys

import typer

# XLA's C++ INFO logs (one line per device) are noise on a terminal; an explicit setting wins.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from planmap import __version__  # noqa: E402
from planmap.cli.exits import EPILOG, ERROR  # noqa: E402
from planmap.cli.signals import SignalGuard, Terminated  # noqa: E402
from planmap.errors import PlanmapError, render_error  # noqa: E402

__all__ = ["app", "main", "state"]

# Command modules, registered in this order (help lists commands in registration order).
_COMMAND_MODULES = (
    "planmap.cli.spec_cmds",
    "planmap.cli.frontend_cmds",
    "planmap.cli.plan_cmds",
    "planmap.cli.review_cmds",
    "planmap.cli.run_cmds",
    "planmap.cli.agent_cmds",
    "planmap.cli.profile_cmds",
)


class _State:
    debug: bool = False
    signals: SignalGuard | None = None  # the running command's guard (set by main)


state = _State()

app = typer.Typer(
    name="planmap",
    help="Plan how a model is spread over devices, as a reviewed, versioned file.",
    epilog=EPILOG,
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish, PowerShell
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"planmap {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for user errors too."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    state.debug = debug or bool(os.environ.get("PLANMAP_DEBUG"))


for _name in _COMMAND_MODULES:
    importlib.import_module(_name).register(app)
for _command in app.registered_commands:  # every command's --help ends with the exit statuses
    _command.epilog = _command.epilog or EPILOG


@functools.cache
def _click_command():
    """The Click command of ``app``, built once per process. Typer builds it on every call (inspecting
    every command's signature, about 20 ms), which in-process callers — tests, the fuzzer — would pay per
    call; with pretty exceptions off, calling the built command is what ``app(...)`` does."""
    return typer.main.get_command(app)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns the exit status (128 + signal number after a signal)."""
    guard = SignalGuard()
    try:
        with guard:
            state.signals = guard
            rv = _click_command()(args=argv, standalone_mode=False)
    except PlanmapError as e:
        if state.debug:
            raise
        from rich.console import Console
        from rich.markup import escape

        # "path[:line:col]: error[code]: message", the code the message names or its class's
        Console(stderr=True, highlight=False, soft_wrap=True).print(escape(render_error(e)))
        return ERROR
    except (typer.Exit, typer.Abort, KeyboardInterrupt) as e:  # typer turns a KeyboardInterrupt into Exit(130)
        cause = e if isinstance(e, KeyboardInterrupt) else e.__cause__
        if isinstance(cause, KeyboardInterrupt):
            # the guard knows the signal even when a library re-raised it as a plain KeyboardInterrupt
            status = cause.exit_status if isinstance(cause, Terminated) else guard.exit_status()
            print(f"interrupted (exit status {status})", file=sys.stderr)
            return status
        if isinstance(e, typer.Exit):
            return e.exit_code
        print("aborted", file=sys.stderr)
        return ERROR
    except typer.exceptions.TyperException as e:  # usage errors: bad option, missing argument
        show = getattr(e, "show", None)
        if show is None:
            raise
        show()
        return ERROR  # Click's usage status is 2, which here means "stale or different"
    finally:
        state.signals = None
    if guard.received is not None:  # typer returned Exit(130) for the KeyboardInterrupt the signal raised
        print(f"interrupted (exit status {guard.exit_status()})", file=sys.stderr)
        return guard.exit_status()
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
