"""File helpers: the one bounded reader of user input, atomic writes, and file hashes (plan inputs).

:func:`read_input` is how every user file (spec, cluster, plan, op-graph JSON, model artifact) is
read: regular files only (a FIFO would block forever, ``/dev/zero`` never ends, a directory is a
mistake), and at most a size cap per kind, checked with ``stat`` before reading and again while
reading (a file may grow). Each cap can be raised with an environment variable, which the message
names. :func:`sha256_input` hashes an input under the same rules.

:func:`write_atomic` writes through a temporary file in the target directory and a rename, so a
reader never sees a half-written file, even when the writer is interrupted.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from planmap.errors import InputError

__all__ = ["LIMITS", "InputLimitError", "INPUT_KINDS", "check_size", "max_bytes", "read_input", "sha256_input",
           "is_regular_file", "write_atomic", "sha256_file"]

_MiB = 1 << 20
# kind -> (default cap in bytes, environment variable that overrides it)
LIMITS: dict[str, tuple[int, str]] = {
    "spec": (8 * _MiB, "PLANMAP_MAX_SPEC_BYTES"),
    "cluster": (8 * _MiB, "PLANMAP_MAX_CLUSTER_BYTES"),
    "plan": (16 * _MiB, "PLANMAP_MAX_PLAN_BYTES"),
    "opgraph": (256 * _MiB, "PLANMAP_MAX_OPGRAPH_BYTES"),
    "artifact": (2048 * _MiB, "PLANMAP_MAX_ARTIFACT_BYTES"),
}
_CHUNK = _MiB
# a plan input's role -> the kind its file is read as
INPUT_KINDS = {"spec": "spec", "cluster": "cluster", "model": "artifact", "profile": "artifact",
               "checkpoint": "artifact"}


class InputLimitError(InputError):
    """A user file is not a regular file, is missing or unreadable, or exceeds its kind's size cap.

    ``code`` (``file-not-found``, ``not-a-file``, ``too-large``, ``unreadable``) and ``detail`` let
    the spec loader report it as a diagnostic; the message is ``path: error[code]: detail``.
    """

    def __init__(self, path: str | Path, code: str, detail: str):
        self.path, self.code, self.detail = str(path), code, detail
        super().__init__(f"{path}: error[{code}]: {detail}")


def max_bytes(kind: str) -> int:
    """The size cap of ``kind`` in bytes: the environment variable's value when set, else the default."""
    default, var = LIMITS[kind]
    raw = os.environ.get(var)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 1:
        raise InputError(f"{var}={raw!r} is not a positive number of bytes", code="limit")
    return value


def _too_large(path: str | Path, kind: str, cap: int, size: str) -> InputLimitError:
    return InputLimitError(path, "too-large", f"the {kind} file is {size} bytes, more than the {kind} cap of "
                                              f"{cap:,} bytes (raise it with {LIMITS[kind][1]}=BYTES)")


@contextlib.contextmanager
def _open_regular(path: str | Path, kind: str) -> Iterator[tuple[int, int]]:
    """``(fd, cap)`` of a regular file no larger than ``kind``'s cap; refuses anything else before reading.

    ``O_NONBLOCK`` makes opening a FIFO return at once (instead of waiting for a writer), so it can
    be refused like a device or a directory.
    """
    cap = max_bytes(kind)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        noun = "model" if kind in ("artifact", "opgraph") else kind
        raise InputLimitError(path, "file-not-found", f"{noun} file not found") from None
    except IsADirectoryError:
        raise InputLimitError(path, "not-a-file", f"this is a directory, not a {kind} file") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        raise InputLimitError(path, "unreadable", f"cannot open the {kind} file: "
                                                  f"{getattr(e, 'strerror', None) or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            what = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file")
            raise InputLimitError(path, "not-a-file", f"this is {what}; a {kind} must be a regular file")
        if st.st_size > cap:
            raise _too_large(path, kind, cap, f"{st.st_size:,}")
        os.set_blocking(fd, True)
        yield fd, cap
    finally:
        os.close(fd)


def _chunks(path: str | Path, kind: str) -> Iterator[bytes]:
    """The file's bytes in chunks, stopping with an error as soon as they exceed the cap."""
    with _open_regular(path, kind) as (fd, cap):
        total = 0
        while True:
            try:
                chunk = os.read(fd, _CHUNK)
            except OSError as e:
                raise InputLimitError(path, "unreadable", f"cannot read the {kind} file: {e.strerror or e}") from None
            if not chunk:
                return
            total += len(chunk)
            if total > cap:
                raise _too_large(path, kind, cap, f"more than {cap:,}")
            yield chunk


def check_size(path: str | Path, kind: str, size: int) -> None:
    """Raise the too-large error when ``size`` bytes already read exceed ``kind``'s cap."""
    cap = max_bytes(kind)
    if size > cap:
        raise _too_large(path, kind, cap, f"{size:,}")


def read_input(path: str | Path, kind: str) -> bytes:
    """The bytes of a user file of ``kind`` (a key of :data:`LIMITS`), read under its cap."""
    return b"".join(_chunks(path, kind))


def sha256_input(path: str | Path, kind: str) -> str:
    """SHA-256 (hex) of a user file of ``kind``, streamed under the same rules as :func:`read_input`."""
    h = hashlib.sha256()
    for chunk in _chunks(path, kind):
        h.update(chunk)
    return h.hexdigest()


def is_regular_file(path: str | Path) -> bool:
    """Whether ``path`` is an existing regular file; False (not an exception) for an over-long or odd name."""
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` through a temporary file and a rename: never a half-written file.

    An unusable destination (empty, a directory, under a file, read-only, a name the file system
    refuses) is an :class:`~planmap.errors.InputError` naming the path. The temporary name uses at
    most 64 characters of the target's, so any legal target name leaves room for it.
    """
    if str(path) == "":
        raise InputError("error[output]: the output path is empty")
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path}: error[output]: this is a directory; name a file to write")
    raw = data.encode() if isinstance(data, str) else data
    try:
        _write_replace(path, raw)
    except OSError as e:
        raise InputError(f"{path}: error[output]: cannot write the file: {e.strerror or e}") from None
    return path


def _write_replace(path: Path, raw: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:64]}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; a plan is an ordinary file
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def sha256_file(path: str | Path) -> str:
    """SHA-256 of the file's bytes (hex), read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
