"""Recorded link traces: capacity (Mahimahi's format) and one-way delay. Parsed, checked, hashed.

Capacity traces (``rate=trace:PATH``)
=====================================
Mahimahi's ``mm-link`` format, read as ``mm-link`` reads it (its ``LinkQueue``): one line per
delivery opportunity, each a whole number of milliseconds from the trace's start at which
:data:`OPPORTUNITY_BYTES` may leave the bottleneck. Stamps never decrease; a repeated stamp is
several opportunities in that millisecond. The trace repeats after its last line with a
period equal to the last stamp (``mm-link`` adds the last stamp to its base time at each
wrap), so opportunity ``k`` (counted from 0 over all repetitions) is at::

    time_ms(k) = (k // n) * period_ms + stamps_ms[k % n]      n = number of lines

A constant 12 Mbit/s is the one-line trace ``1`` (1,500 bytes each millisecond; docs/models.md
section 14). Lines may carry surrounding blanks and a CR (CRLF files); an empty line is
refused (``mm-link`` refuses it too), as is a trace whose last stamp is 0.

Delay traces (``delay=trace:PATH``)
===================================
Two columns per line, separated by blanks or a comma: a time in ms from the trace's start and
the one-way delay in ms from then on (decimals allowed). Times start at 0 and increase
strictly. The trace repeats with a period of its last time plus its last interval (a trace
sampled every 10 ms and ending at 9,990 ms has a period of 10 s). Between points the delay is
a step (the last point's value holds, the default) or linear (``delay_interp=linear``: it moves
straight to the next point's value; the last point moves towards the first point's value of
the next repetition).

A :class:`TraceFile` is what a :class:`netem.linkspec.DirectionSpec` carries: the file's
absolute path, its SHA-256 and its kind. Making one reads and checks the file (cached per
process by path, size and modification time); a file that changed since the spec was made is
refused, so a run records exactly the trace it used. Every bad trace is one
:class:`~tbcore.errors.SpecError` naming the file and the line.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import os
import re
import stat
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tbcore.errors import SpecError

_Parsed = TypeVar("_Parsed")

OPPORTUNITY_BYTES = 1500
"""IP bytes one delivery opportunity carries (docs/models.md section 14, the issue's 1,500 bytes).
``mm-link`` counts 1,504 bytes per opportunity against packets read with the TUN's 4-byte
packet-information header, i.e. one 1,500-byte IP packet each: the same for full-size packets;
a 40-byte ACK costs it 44 bytes, here 40 (the testbed counts IP bytes everywhere)."""
MAX_TRACE_FILE_BYTES = 64 * 2**20
"""64 MiB: a 1 Gbit/s capacity trace of a minute is 5 million lines, about 40 MB; the public
cellular traces (Mahimahi's, Pantheon's) are a few MB at most."""
MAX_PERIOD_MS = 86_400_000
"""A day (tbcore.units.MAX_DURATION_S): no run lasts longer; larger stamps are a unit error."""
MAX_DELAY_MS = 10_000.0
"""One direction's delay at most (netem.linkspec.MAX_RTT_S, 10 s: the whole round trip)."""
KINDS = ("capacity", "delay")
INTERPOLATIONS = ("step", "linear")
SHIPPED_DIR = Path(__file__).resolve().parent / "traces"
"""The traces the testbed ships (their models and commands: netem/traces/README.md)."""

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_DELAY_SPLIT = re.compile(rb"[\s,]+")


class CapacityTrace:
    """The delivery opportunities of a capacity trace, and where they fall in time."""

    def __init__(self, stamps_ms: array) -> None:
        self.stamps_ms = stamps_ms
        """The lines, in order (array of int64): one opportunity each."""
        self.count = len(stamps_ms)
        self.period_ms = int(stamps_ms[-1])

    @property
    def period_s(self) -> float:
        return self.period_ms / 1000.0

    @property
    def mean_rate_bps(self) -> float:
        """IP bits per second over one period."""
        return self.count * OPPORTUNITY_BYTES * 8 / self.period_s

    def time_ms(self, k: int) -> int:
        """When opportunity ``k`` (0-based, counted over every repetition) may be used."""
        cycle, index = divmod(k, self.count)
        return cycle * self.period_ms + self.stamps_ms[index]

    def first_at_or_after(self, position_ms: float) -> int:
        """The index of the first opportunity at ``position_ms`` or later (so, the number of
        opportunities strictly before it)."""
        if position_ms <= 0:
            return 0
        # position in (cycle * P, (cycle + 1) * P]: the cycle's last stamp (P) is >= it, and
        # the cycle before ends at cycle * P, strictly before it
        cycle = math.ceil(position_ms / self.period_ms) - 1
        index = bisect.bisect_left(self.stamps_ms, position_ms - cycle * self.period_ms)
        return cycle * self.count + min(index, self.count - 1)

    def opportunities_between(self, start_ms: float, end_ms: float) -> int:
        """How many opportunities fall in ``[start_ms, end_ms)``."""
        if end_ms <= start_ms:
            return 0
        return self.first_at_or_after(end_ms) - self.first_at_or_after(start_ms)


class DelayTrace:
    """The one-way delay of a delay trace at any position, step or linear between points."""

    def __init__(self, times_ms: array, delays_ms: array) -> None:
        self.times_ms = times_ms
        self.delays_ms = delays_ms
        self.period_ms = times_ms[-1] + (times_ms[-1] - times_ms[-2])

    @property
    def period_s(self) -> float:
        return self.period_ms / 1000.0

    @property
    def min_delay_ms(self) -> float:
        return min(self.delays_ms)

    @property
    def max_delay_ms(self) -> float:
        return max(self.delays_ms)

    def mean_delay_ms(self, interp: str = "step") -> float:
        """The time-weighted mean over one period."""
        ends = [*self.times_ms[1:], self.period_ms]
        nexts = [*self.delays_ms[1:], self.delays_ms[0]]
        total = 0.0
        for start, end, value, following in zip(
            self.times_ms, ends, self.delays_ms, nexts, strict=True
        ):
            height = value if interp == "step" else (value + following) / 2.0
            total += height * (end - start)
        return total / self.period_ms

    def delay_ms(self, position_ms: float, interp: str = "step") -> float:
        """The delay at ``position_ms`` from the trace's start (wrapping)."""
        at = position_ms % self.period_ms if position_ms > 0 else 0.0
        index = bisect.bisect_right(self.times_ms, at) - 1
        value = self.delays_ms[index]
        if interp == "step":
            return value
        last = index + 1 == len(self.times_ms)
        end = self.period_ms if last else self.times_ms[index + 1]
        following = self.delays_ms[0] if last else self.delays_ms[index + 1]
        start = self.times_ms[index]
        return value + (following - value) * (at - start) / (end - start)


Parsed = CapacityTrace | DelayTrace


# --- parsing ----------------------------------------------------------------------------


def _lines(data: bytes, where: str) -> list[bytes]:
    """The lines of a trace: a final newline ends the last line, it does not add one."""
    if not data.strip():
        raise SpecError("trace", f"{where}: empty: no opportunity at all")
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return lines


def parse_capacity(data: bytes, where: str) -> CapacityTrace:
    """Mahimahi's format (see the module docstring); ``where`` names the file in errors."""
    stamps = array("q")
    previous = 0
    for number, raw in enumerate(_lines(data, where), start=1):
        line = raw.strip()
        if not line.isdigit():  # bytes.isdigit: ASCII digits only
            raise SpecError("trace", f"{where} line {number}: {_capacity_problem(line)}")
        stamp = int(line)
        if stamp < previous:
            raise SpecError(
                "trace",
                f"{where} line {number}: {stamp} is before the line above's {previous} "
                "(stamps must not decrease)",
            )
        if stamp > MAX_PERIOD_MS:
            raise SpecError("trace", f"{where} line {number}: {stamp} ms is more than a day")
        stamps.append(stamp)
        previous = stamp
    if stamps[-1] == 0:
        raise SpecError(
            "trace", f"{where} line {len(stamps)}: the last stamp is 0: a trace must last > 0 ms"
        )
    return CapacityTrace(stamps)


def _capacity_problem(line: bytes) -> str:
    if not line:
        return "empty (one millisecond stamp per line)"
    if len(_DELAY_SPLIT.split(line)) == 2:
        return f"{_show(line)} has two columns: a delay trace? (delay=trace:PATH)"
    return f"{_show(line)} is not a whole number of milliseconds"


def _show(line: bytes) -> str:
    return repr(line[:40].decode("ascii", "replace"))


def parse_delay(data: bytes, where: str) -> DelayTrace:
    """Two columns, time and delay in ms (see the module docstring)."""
    times, delays = array("d"), array("d")
    for number, raw in enumerate(_lines(data, where), start=1):
        at = f"{where} line {number}"
        time_ms, delay_ms = _delay_row(raw, at)
        if not times and time_ms != 0:
            raise SpecError("trace", f"{at}: the first time must be 0, got {time_ms:g}")
        if times and time_ms <= times[-1]:
            raise SpecError(
                "trace", f"{at}: time {time_ms:g} is not after the line above's {times[-1]:g}"
            )
        if not 0.0 <= delay_ms <= MAX_DELAY_MS:
            raise SpecError("trace", f"{at}: delay {delay_ms:g} ms is outside 0..10000 ms")
        times.append(time_ms)
        delays.append(delay_ms)
    if len(times) < 2:
        raise SpecError(
            "trace", f"{where}: one point is a constant delay: write delay=<ms> instead"
        )
    period = times[-1] + (times[-1] - times[-2])
    if period > MAX_PERIOD_MS:
        raise SpecError("trace", f"{where}: lasts {period:g} ms, more than a day")
    return DelayTrace(times, delays)


def _delay_row(raw: bytes, at: str) -> tuple[float, float]:
    fields = [f for f in _DELAY_SPLIT.split(raw.strip()) if f]
    if len(fields) != 2:
        if len(fields) == 1 and fields[0].isdigit():
            raise SpecError("trace", f"{at}: one column: a capacity trace? (rate=trace:PATH)")
        raise SpecError("trace", f"{at}: {_show(raw.strip())} is not 'time_ms delay_ms'")
    values = []
    for text in fields:
        try:
            value = float(text.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            raise SpecError("trace", f"{at}: {_show(text)} is not a number of ms") from None
        if not math.isfinite(value) or value < 0:
            raise SpecError("trace", f"{at}: {_show(text)} must be finite and >= 0")
        values.append(value)
    return values[0], values[1]


PARSERS = {"capacity": parse_capacity, "delay": parse_delay}


# --- files ------------------------------------------------------------------------------


def read_trace_file(path: str) -> tuple[bytes, tuple[int, ...]]:
    """The bytes of a regular trace file and its signature (device, inode, size, mtime)."""
    try:
        info = os.stat(path)
    except OSError as err:
        raise SpecError("trace", f"trace {path}: cannot read: {err.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise SpecError("trace", f"trace {path}: not a regular file")
    if info.st_size > MAX_TRACE_FILE_BYTES:
        raise SpecError("trace", f"trace {path}: {info.st_size} bytes, more than 64 MiB")
    try:
        with open(path, "rb") as handle:
            opened = os.fstat(handle.fileno())
            data = handle.read(MAX_TRACE_FILE_BYTES + 1)
    except OSError as err:
        raise SpecError("trace", f"trace {path}: cannot read: {err.strerror}") from None
    if len(data) > MAX_TRACE_FILE_BYTES:
        raise SpecError("trace", f"trace {path}: more than 64 MiB")
    signature = (opened.st_dev, opened.st_ino, opened.st_size, opened.st_mtime_ns)
    return data, signature


_CACHE: dict[tuple[str, str], tuple[tuple[int, ...], str, Parsed]] = {}
"""Per (path, kind): the file's signature when read, its SHA-256 and the parsed trace."""


def load(path: str, kind: str, sha256: str | None = None) -> tuple[str, Parsed]:
    """The SHA-256 and the parsed trace of ``path``; with ``sha256`` given, the file must
    still have it. Re-read only when the file's size, inode or mtime changed."""
    key = (path, kind)
    cached = _CACHE.get(key)
    if cached is not None:
        try:
            info = os.stat(path)
            now = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        except OSError:
            now = ()
        if now == cached[0] and (sha256 is None or sha256 == cached[1]):
            return cached[1], cached[2]
    data, signature = read_trace_file(path)
    digest = hashlib.sha256(data).hexdigest()
    if sha256 is not None and digest != sha256:
        raise SpecError(
            "trace",
            f"trace {path}: changed since the link was specified (sha256 {sha256[:12]}..., "
            f"now {digest[:12]}...)",
        )
    parsed = PARSERS[kind](data, f"trace {path}")
    _CACHE[key] = (signature, digest, parsed)
    return digest, parsed


@dataclass(frozen=True)
class TraceFile:
    """A trace file a link uses: where it is, what it held, which kind. Made from a link
    string with :func:`open_trace`; equal specs name equal contents."""

    path: str
    """Absolute path."""
    sha256: str
    """SHA-256 of the file's bytes (hex): the run records what it used."""
    kind: str
    """``capacity`` (Mahimahi's format) or ``delay`` (time, delay)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SpecError("trace.kind", f"must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if not isinstance(self.path, str) or not os.path.isabs(self.path):
            raise SpecError("trace.path", f"must be an absolute path, got {self.path!r}")
        if not isinstance(self.sha256, str) or not _SHA256.match(self.sha256):
            raise SpecError("trace.sha256", f"must be 64 hex digits, got {self.sha256!r}")
        _, parsed = load(self.path, self.kind, self.sha256)
        object.__setattr__(self, "_parsed", parsed)

    def _parsed_as(self, kind: type[_Parsed], name: str) -> _Parsed:
        parsed = self._parsed  # type: ignore[attr-defined]
        if not isinstance(parsed, kind):
            raise SpecError("trace", f"{self.path} is a {self.kind} trace, not a {name} one")
        return parsed

    @property
    def capacity(self) -> CapacityTrace:
        return self._parsed_as(CapacityTrace, "capacity")

    @property
    def delay(self) -> DelayTrace:
        return self._parsed_as(DelayTrace, "delay")

    @property
    def period_s(self) -> float:
        return self._parsed.period_s  # type: ignore[attr-defined]

    def text(self) -> str:
        """The link-string value: ``trace:PATH``."""
        return f"trace:{self.path}"

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "kind": self.kind}

    @classmethod
    def from_dict(cls, data: object, kind: str) -> TraceFile:
        if not isinstance(data, dict):
            raise SpecError("trace", f"must be a mapping (path, sha256, kind), got {data!r}")
        unknown = set(data) - {"path", "sha256", "kind"}
        if unknown:
            raise SpecError(f"trace.{sorted(unknown)[0]}", "unknown trace key")
        if data.get("kind", kind) != kind:
            raise SpecError("trace.kind", f"a {data.get('kind')!r} trace where {kind} belongs")
        return cls(path=data.get("path"), sha256=data.get("sha256"), kind=kind)  # type: ignore[arg-type]


def detect_kind(path: str) -> str:
    """``capacity`` (one column) or ``delay`` (two), by the first line with anything on it."""
    data, _ = read_trace_file(path)
    for line in data.splitlines():
        if line.strip():
            fields = [f for f in _DELAY_SPLIT.split(line.strip()) if f]
            return "delay" if len(fields) == 2 else "capacity"
    raise SpecError("trace", f"trace {path}: empty: no opportunity at all")


TRACE_PREFIX = "trace:"
FORBIDDEN_PATH_CHARS = ",="
"""A link string separates keys with commas and values with ``=``: a path with them cannot
be written back (``format_link``)."""


def is_trace_value(value: str) -> bool:
    """Whether a link-string value names a trace (``trace:PATH``)."""
    return value[: len(TRACE_PREFIX)].lower() == TRACE_PREFIX


def resolve_path(text: str) -> str:
    """The absolute path of a trace named in a link string: as given (relative to the
    working directory), or, for a bare name that is no file here, the shipped trace of that
    name (:data:`SHIPPED_DIR`)."""
    if not text:
        raise SpecError("trace", "trace: needs a file (trace:PATH)")
    if any(c in text for c in FORBIDDEN_PATH_CHARS):
        raise SpecError("trace", f"{text!r}: a path with ',' or '=' cannot go in a link string")
    path = os.path.expanduser(text)
    shipped = SHIPPED_DIR / text
    if not os.path.exists(path) and "/" not in text and os.path.exists(shipped):
        path = str(shipped)
    return os.path.abspath(path)


def open_trace(value: str, kind: str) -> TraceFile:
    """The :class:`TraceFile` of a link-string value ``trace:PATH``, read and checked."""
    if not is_trace_value(value):
        raise SpecError("trace", f"{value!r} is not trace:PATH")
    path = resolve_path(value[len(TRACE_PREFIX) :].strip())
    digest, _ = load(path, kind)
    return TraceFile(path=path, sha256=digest, kind=kind)
