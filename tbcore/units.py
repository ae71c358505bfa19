"""Parsing of human quantities into SI numbers: seconds, bits per second, bytes, fractions.

The spellings follow tc(8) and netem where they are unambiguous (``200ms``, ``333mbit``,
``14%``) and refuse the ones that are not: tc reads ``mbps`` as megabytes per second, which
nearly every reader takes for megabits, so ``bps`` forms are rejected with a hint.
Decimal prefixes are powers of ten (1 MB = 10^6 bytes), binary ones powers of two
(1 MiB = 2^20 bytes), as in shared docs/models.md.
"""

from __future__ import annotations

import math
import re

from tbcore.errors import SpecError

_NUMBER = r"(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
_QUANTITY = re.compile(rf"^\s*{_NUMBER}\s*(?P<unit>[A-Za-zµ%/]*)\s*$", re.ASCII)
"""ASCII digits only (``re.ASCII``): ``\\d`` would take full-width ``２００`` for 200."""
_WHOLE = re.compile(r"^\s*[+-]?[0-9]+\s*$", re.ASCII)
_PLAIN_NUMBER = re.compile(rf"^\s*{_NUMBER}\s*$", re.ASCII)
"""A decimal number, ASCII digits: not ``float()``'s ``nan``, ``inf``, ``1_000`` or ``٥``."""

MIN_RATE_BPS = 1e3
"""1 kbit/s: below it one 1500-byte packet takes 12 s to serialise, longer than any RTT
or timeout the testbed allows; ``0.5bit`` or ``1e-30bit`` is a typo, not a path."""
MAX_RATE_BPS = 100e9
"""100 Gbit/s: beyond any interface, emulator or stack on one host (the userspace emulator
tops out near 0.35 Gbit/s, kernel TCP on loopback near 50 Gbit/s)."""
MAX_DURATION_S = 86_400.0
"""A day: no delay, processing time, timeout or interval the testbed runs is longer (the
link's own RTT is bounded tighter in netem.linkspec); ``1e300s`` would overflow timers."""
MAX_SIZE_BYTES = 2**40
"""1 TiB: larger than any body, window, buffer or queue on one host; ``1e30b`` is a typo
(and would overflow the C ints of setsockopt)."""

DURATION_UNITS_S: dict[str, float] = {
    "s": 1.0,
    "sec": 1.0,
    "ms": 1e-3,
    "msec": 1e-3,
    "us": 1e-6,
    "usec": 1e-6,
    "µs": 1e-6,
    "ns": 1e-9,
    "nsec": 1e-9,
}

RATE_UNITS_BPS: dict[str, float] = {
    "bit": 1.0,
    "kbit": 1e3,
    "mbit": 1e6,
    "gbit": 1e9,
    "tbit": 1e12,
    "kibit": 2.0**10,
    "mibit": 2.0**20,
    "gibit": 2.0**30,
}

SIZE_UNITS_BYTES: dict[str, int] = {
    "": 1,
    "b": 1,
    "byte": 1,
    "bytes": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
}

PACKET_UNITS = frozenset({"p", "pkt", "pkts", "packet", "packets"})


def _split(field: str, text: str) -> tuple[float, str]:
    if not isinstance(text, str):
        raise SpecError(field, f"expected a string, got {type(text).__name__}")
    match = _QUANTITY.match(text)
    if match is None:
        raise SpecError(field, f"{text!r} is not a number with an optional unit")
    value = float(match.group("num"))
    if not math.isfinite(value):
        raise SpecError(field, f"{text!r} is not finite")
    return value, match.group("unit")


def finite(field: str, value: int | float) -> float:
    """A number given as a number, as a finite float: NaN, the infinities and integers too
    large for a float (TOML and JSON allow all three) are refused, in one line."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(field, f"must be a number, got {value!r}")
    try:
        number = float(value)
    except OverflowError:
        raise SpecError(field, f"a {len(str(abs(value)))}-digit number is too large") from None
    if not math.isfinite(number):
        raise SpecError(field, f"{value!r} is not a finite number")
    return number


def _to_float(value: int | float) -> float:
    """``float(value)``, an integer too large for a float being infinite (the callers refuse
    what is not finite, each in its own words)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _negative(value: float) -> bool:
    """Below zero, or ``-0``: a sign that says nothing is a typo, not a zero."""
    if isinstance(value, int):
        return value < 0
    return math.copysign(1.0, value) < 0


def parse_number(field: str, text: str | int | float) -> float:
    """A plain finite number: ``"0.999"`` -> 0.999, ``2`` -> 2.0 (ASCII digits; ``nan``,
    ``inf``, ``1_000`` and ``٥`` refused)."""
    if not isinstance(text, str):
        return finite(field, text)
    if _PLAIN_NUMBER.match(text) is None:
        raise SpecError(field, f"{text!r} is not a number (ASCII digits)")
    return finite(field, float(text))


def parse_whole(
    field: str, text: str | int, low: int | None = None, high: int | None = None
) -> int:
    """A whole number written with ASCII digits and an optional sign (``"1500"``, 1500),
    within ``low`` and ``high`` when given. ``"²"``, ``"٥"`` and ``"５"`` are refused (Python's
    ``int()`` takes some of them), and so are ``1_500`` and ``True``."""
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        raise SpecError(field, f"{text!r} is not a whole number")
    if isinstance(text, str):
        if _WHOLE.match(text) is None:
            raise SpecError(field, f"{text!r} is not a whole number (ASCII digits)")
        value = int(text)
    else:
        value = text
    if low is not None and value < low:
        raise SpecError(field, f"must be at least {low}, got {value}")
    if high is not None and value > high:
        raise SpecError(field, f"must be at most {high}, got {value}")
    return value


def parse_duration_s(field: str, text: str | float | int) -> float:
    """``"200ms"`` -> 0.2. A bare number is refused: the unit of a delay is never implied."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = _to_float(text)
        if not math.isfinite(value) or _negative(value):
            raise SpecError(field, f"{text!r} must be a finite duration >= 0")
        return _check_duration(field, text, value)
    value, unit = _split(field, text)
    if unit == "":
        raise SpecError(field, f"{text!r} needs a unit (s, ms, us, ns)")
    scale = DURATION_UNITS_S.get(unit.lower() if unit != "µs" else unit)
    if scale is None:
        raise SpecError(field, f"unknown duration unit {unit!r} (use s, ms, us, ns)")
    if _negative(value):
        raise SpecError(field, f"{text!r} is negative")
    return _check_duration(field, text, value * scale)


def _check_duration(field: str, text: object, seconds: float) -> float:
    if seconds > MAX_DURATION_S:
        raise SpecError(field, f"{text!r} is longer than a day (at most {MAX_DURATION_S:g} s)")
    return seconds


def parse_rate_bps(field: str, text: str | float | int) -> float:
    """``"333mbit"`` -> 333e6 bits per second. Numbers given as numbers are bit/s."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = _to_float(text)
    else:
        value, unit = _split(field, text)
        key = unit.lower()
        if key.endswith("/s"):
            key = key[:-2]
        if key in ("bps", "kbps", "mbps", "gbps"):
            raise SpecError(
                field,
                f"{unit!r} is ambiguous (tc reads it as bytes/s); write bits as "
                f"{key[:-3] or ''}bit, e.g. 333mbit",
            )
        scale = RATE_UNITS_BPS.get(key)
        if scale is None:
            raise SpecError(field, f"unknown rate unit {unit!r} (use bit, kbit, mbit, gbit)")
        value *= scale
    if not math.isfinite(value) or value <= 0:
        raise SpecError(field, f"rate must be > 0 bit/s, got {text!r}")
    if not MIN_RATE_BPS <= value <= MAX_RATE_BPS:
        raise SpecError(
            field, f"{text!r} is outside 1 kbit/s .. 100 Gbit/s (physically sensible rates)"
        )
    return value


def parse_size_bytes(field: str, text: str | int) -> int:
    """``"64kb"`` -> 64000, ``"1MiB"`` -> 1048576, ``"354640"`` -> 354640."""
    if isinstance(text, int) and not isinstance(text, bool):
        value: float = text
    else:
        value, unit = _split(field, text)
        scale = SIZE_UNITS_BYTES.get(unit.lower())
        if scale is None:
            raise SpecError(field, f"unknown size unit {unit!r} (use b, kb, mb, gb, kib, mib)")
        value *= scale
    if _negative(value):
        raise SpecError(field, f"size must be >= 0 bytes, got {text!r}")
    if value > MAX_SIZE_BYTES:
        raise SpecError(field, f"{text!r} is larger than 1 TiB (at most 2^40 bytes)")
    if value != int(value):
        raise SpecError(field, f"{text!r} is not a whole number of bytes")
    return int(value)


def parse_count(field: str, text: str | int) -> int:
    """A whole number >= 1 (repetitions, runs, segments): ``"10"`` -> 10."""
    return parse_whole(field, text, low=1)


def parse_queue(field: str, text: str | int) -> tuple[int | None, int | None]:
    """A queue limit: ``"1000p"`` -> (None, 1000 packets); ``"1mb"`` -> (1000000 bytes, None)."""
    if isinstance(text, str):
        value, unit = _split(field, text)
        if unit.lower() in PACKET_UNITS:
            if value != int(value) or value < 1:
                raise SpecError(field, f"{text!r}: a packet count must be a whole number >= 1")
            return None, int(value)
    return parse_size_bytes(field, text), None


def _share(field: str, text: str | float | int, example: str) -> float:
    """A number, or a string with ``%`` or no unit, as a plain fraction (range unchecked)."""
    if isinstance(text, bool):
        raise SpecError(field, f"expected a number or a string, got {text!r}")
    if isinstance(text, (int, float)):
        return _to_float(text)
    value, unit = _split(field, text)
    if unit == "%":
        return value / 100.0
    if unit != "":
        raise SpecError(field, f"unknown unit {unit!r} (write {example})")
    return value


def parse_fraction(field: str, text: str | float | int) -> float:
    """``"14%"`` -> 0.14, ``"0.14"`` -> 0.14. The value must lie in [0, 1)."""
    value = _share(field, text, "14% or 0.14")
    if not math.isfinite(value) or not 0.0 <= value < 1.0:
        raise SpecError(field, f"must lie in [0, 1) (0 % to under 100 %), got {text!r}")
    return value


def parse_probability(field: str, text: str | float | int) -> float:
    """Like :func:`parse_fraction` but 1 (100 %) is allowed: a transition probability."""
    value = _share(field, text, "30% or 0.3")
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise SpecError(field, f"must lie in [0, 1] (0 % to 100 %), got {text!r}")
    return value


def format_duration(seconds: float) -> str:
    """0.2 -> ``"200ms"``; the inverse of :func:`parse_duration_s` up to rounding."""
    if seconds == 0:
        return "0ms"
    if seconds >= 1:
        return f"{seconds:g}s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:g}ms"
    return f"{seconds * 1e6:g}us"


def format_rate(bps: float) -> str:
    """333e6 -> ``"333mbit"``."""
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bps >= scale:
            return f"{bps / scale:g}{unit}"
    return f"{bps:g}bit"


def format_percent(fraction: float) -> str:
    return f"{fraction * 100:g}%"
