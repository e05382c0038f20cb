"""Quantities written as strings with unit suffixes ("80GiB", "900GB/s", "989TFLOP/s", "2us").

Units are case-insensitive, with or without a space ("80gb", "989 tflops", "400Gbit/s"); the one
letter whose case matters is b: "Gb/s" is gigabits, "GB/s" gigabytes, and an all-lowercase "gb"
bytes (the full rule is in :func:`_unit`).

Specs are read by people, so sizes and rates are written the way vendors print them; inside
planmap every quantity is an integer of one base unit (bytes, bytes/s, FLOP/s, nanoseconds), so
that plans stay exact and deterministic. Parsing is strict: a bandwidth where a size is expected
is an error that names both, never a silent reinterpretation.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

__all__ = [
    "UnitError",
    "parse_bytes",
    "parse_bandwidth",
    "parse_flops",
    "parse_duration",
    "parse_fraction",
    "format_bytes",
    "format_duration",
    "format_rate",
]


class UnitError(ValueError):
    """A quantity could not be parsed; ``expected`` says what a valid one looks like."""

    def __init__(self, message: str, expected: str):
        super().__init__(message)
        self.expected = expected


_SI = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}

_NUMBER = r"(?P<num>[+-]?[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?)"
_QTY = re.compile(rf"^\s*{_NUMBER}\s*(?P<unit>[A-Za-zµ/%]*)\s*$")


@dataclass(frozen=True)
class _Kind:
    name: str
    example: str
    base: str


_SIZE = _Kind("size", '"80GiB", "16GB", "512MiB" or an integer number of bytes', "B")
_BANDWIDTH = _Kind("bandwidth", '"900GB/s", "400Gb/s" (bits) or "64GiB/s"', "B/s")
_FLOPS = _Kind("compute rate", '"989TFLOP/s", "67TFLOPS" or "2.5e12" FLOP/s', "FLOP/s")
_DURATION = _Kind("duration", '"2us", "1.5ms", "60s", "10min" or a number of seconds', "ns")

def _split(text: str | int | float, kind: _Kind) -> tuple[Decimal, str]:
    if isinstance(text, bool):
        raise UnitError(f"expected a {kind.name}, got a boolean", kind.example)
    if isinstance(text, int):
        return Decimal(text), ""
    if isinstance(text, float):
        if not math.isfinite(text):
            raise UnitError(f"{kind.name} must be finite", kind.example)
        return Decimal(repr(text)), ""
    if not isinstance(text, str):
        raise UnitError(f"expected a {kind.name} string, got {type(text).__name__}", kind.example)
    m = _QTY.match(text)
    if not m:
        raise UnitError(f"{text!r} is not a {kind.name}", kind.example)
    try:
        return Decimal(m.group("num")), m.group("unit")
    except InvalidOperation:  # pragma: no cover - the regex admits only valid numbers
        raise UnitError(f"{text!r} is not a number", kind.example) from None


def _wrong_kind(text: str, unit: str, kind: _Kind) -> UnitError:
    parsed = _unit(unit)
    other = {"B": _SIZE, "B/s": _BANDWIDTH, "FLOP/s": _FLOPS}.get(parsed[1]) if parsed else (
        _DURATION if unit.lower() in _TIME else None)
    if other is not None and other is not kind:
        return UnitError(f"{text!r} is a {other.name}, but a {kind.name} is required", kind.example)
    return UnitError(f"unknown {kind.name} unit {unit!r} in {text!r}", kind.example)


def _to_int(value: Decimal, text: object, kind: _Kind, *, allow_zero: bool) -> int:
    if value < 0:
        raise UnitError(f"{kind.name} must not be negative (got {text!r})", kind.example)
    if value == 0 and not allow_zero:
        raise UnitError(f"{kind.name} must be positive (got {text!r})", kind.example)
    if value > Decimal(2) ** 80:
        raise UnitError(f"{kind.name} {text!r} is implausibly large", kind.example)
    return int(value.to_integral_value())


# Unit suffixes, matched case-insensitively, longest first: (suffix, base unit, bits?). ``None`` for bits
# means "the letter's case decides" (see :func:`_unit`).
_SUFFIXES = (
    ("bytes/s", "B/s", False), ("byte/s", "B/s", False), ("bits/s", "B/s", True), ("bit/s", "B/s", True),
    ("flop/s", "FLOP/s", False), ("flops", "FLOP/s", False), ("flop", "FLOP/s", False),
    ("bps", "B/s", None), ("b/s", "B/s", None),
    ("bytes", "B", False), ("byte", "B", False), ("bits", "B", True), ("bit", "B", True), ("b", "B", None),
)


def _unit(unit: str) -> tuple[int, str, bool] | None:
    """``(prefix scale, base unit, in bits)`` of a unit string, or None if it is not a size, bandwidth or rate.

    The rule, for people who write units many ways: case does not matter (``80gb``, ``989 tflops``,
    ``400gbit/s``) except for one letter. ``bit``/``bits`` are bits and ``byte``/``B`` are bytes; a
    lowercase ``b`` is bits after an uppercase prefix (``Gb/s``, ``Mb``, ``Gib``) or in ``bps``
    (``Gbps``, ``gbps``), and bytes in an all-lowercase unit (``gb``, ``gb/s``, ``kb``) — whoever
    ignores case cannot mean the bit/byte distinction. Prefixes: SI (``k``/``M``/``G``/``T``/``P``/``E``,
    powers of 10) or IEC (``Ki``…``Ei``, powers of 2); ``m`` is mega, never milli.
    """
    low = unit.lower()
    for suffix, base, bits in _SUFFIXES:
        if not low.endswith(suffix):
            continue
        prefix = unit[: len(unit) - len(suffix)]
        scale = _IEC.get(prefix.capitalize()) if prefix[-1:].lower() == "i" else _SI.get(prefix.upper())
        if scale is None:
            return None
        if bits is None:
            letter = unit[len(prefix)]
            bits = letter == "b" and (suffix == "bps" or unit != low)
        return scale, base, bits
    return None


def _base_quantity(text: str | int | float, kind: _Kind, base: str, *, allow_zero: bool) -> tuple[int, bool]:
    """The value of ``text`` in bytes, bytes/s or FLOP/s, and whether it was written in bits."""
    value, unit = _split(text, kind)
    if unit == "":
        return _to_int(value, text, kind, allow_zero=allow_zero), False
    parsed = _unit(unit)
    if parsed is None or parsed[1] != base:
        raise _wrong_kind(str(text), unit, kind)
    scale, _, bits = parsed
    return _to_int(value * scale / (8 if bits else 1), text, kind, allow_zero=allow_zero), bits


def parse_bytes(text: str | int, *, allow_zero: bool = True) -> int:
    """ "80GiB" -> 85899345920. Bare numbers are bytes; SI prefixes are powers of 10, IEC of 2 (see :func:`_unit`)."""
    n, bits = _base_quantity(text, _SIZE, "B", allow_zero=allow_zero)
    if bits:
        raise UnitError(f"{text!r} is in bits; sizes are written in bytes (B)", _SIZE.example)
    return n


def parse_bandwidth(text: str | int) -> int:
    """ "900GB/s" -> 900e9 bytes/s; "400Gb/s", "400Gbit/s" and "400Gbps" are bits and divided by 8."""
    return _base_quantity(text, _BANDWIDTH, "B/s", allow_zero=False)[0]


def parse_flops(text: str | int | float) -> int:
    """ "989TFLOP/s" (also "989TFLOPS", "989 tflops") -> FLOP/s as an integer."""
    return _base_quantity(text, _FLOPS, "FLOP/s", allow_zero=False)[0]


_TIME = {"ns": 1, "us": 10**3, "µs": 10**3, "ms": 10**6, "s": 10**9, "sec": 10**9, "min": 60 * 10**9,
         "h": 3600 * 10**9}


def parse_duration(text: str | int | float, *, allow_zero: bool = True) -> int:
    """ "2us" -> 2000 (nanoseconds). Bare numbers are seconds (as in `--time-limit 60`)."""
    value, unit = _split(text, _DURATION)
    if unit == "":
        return _to_int(value * 10**9, text, _DURATION, allow_zero=allow_zero)
    scale = _TIME.get(unit) or _TIME.get(unit.lower())  # "µs" has no lowercase twin; "60S", "5MIN" do
    if scale is not None:
        return _to_int(value * scale, text, _DURATION, allow_zero=allow_zero)
    raise _wrong_kind(str(text), unit, _DURATION)


def parse_fraction(text: str | int | float) -> float:
    """ "10%" -> 0.1; 0.1 -> 0.1. Must lie in [0, 1)."""
    expected = '"10%" or a number in [0, 1)'
    if isinstance(text, bool):
        raise UnitError("expected a fraction, got a boolean", expected)
    if isinstance(text, str):
        s = text.strip()
        pct = s.endswith("%")
        try:
            v = float(s[:-1] if pct else s) / (100 if pct else 1)
        except ValueError:
            raise UnitError(f"{text!r} is not a fraction", expected) from None
    elif isinstance(text, int | float):
        v = float(text)
    else:
        raise UnitError(f"expected a fraction, got {type(text).__name__}", expected)
    if not (0.0 <= v < 1.0) or not math.isfinite(v):
        raise UnitError(f"fraction must lie in [0, 1) (got {text!r})", expected)
    return v


def _fmt(value: float, units: list[tuple[float, str]], fallback: str) -> str:
    for scale, suffix in units:
        if abs(value) >= scale:
            v = value / scale
            return f"{v:.3g}{suffix}" if v < 1000 else f"{v:.0f}{suffix}"
    return f"{value:.3g}{fallback}"


def format_bytes(n: float) -> str:
    """Human-readable IEC size: 85899345920 -> "80GiB"."""
    return _fmt(n, [(2**50, "PiB"), (2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")], "B")


def format_duration(seconds: float) -> str:
    """Human-readable duration from seconds: 0.0012 -> "1.2ms"."""
    if seconds == 0:
        return "0s"
    if abs(seconds) < 1e-6:
        return f"{seconds * 1e9:.3g}ns"
    return _fmt(seconds, [(1, "s"), (1e-3, "ms"), (1e-6, "us")], "ns")


def format_rate(value: float, unit: str) -> str:
    """Human-readable SI rate: (9.89e14, "FLOP/s") -> "989TFLOP/s"."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{prefix}{unit}"
    return f"{value:.3g}{unit}"
