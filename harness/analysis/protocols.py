"""How much of an HTTP/2-HTTP/3 difference is set-up, ordering, congestion control, pacing and
the QUIC implementation (issue 25). Plain functions on the runs frame and the streams frame.

A *pair* is an HTTP/3 level and the HTTP/2 level of the same experiment on the same path
(:data:`SAME_PATH`: link, workload, connection, topology...), the one with the same congestion
control when there are several. The difference of their median request times is split by
measurement, part by part, never by a model:

- **set-up**: the difference of the median set-up before the first request byte (TCP and
  TLS against QUIC's handshake; 0-RTT's request leaves before its handshake ends).
- **ordering**: the difference of the median head-of-line wait (streams.csv
  ``hol_transport_s``) of the stream that ended the request; 0 on one stream per request
  (nothing to wait behind); not measured when the runs have no stream view.
- **congestion control**: 0 when both arms run the same control; when they differ it is not
  separable in this experiment (no level pairs them otherwise), and the row says so.
- **pacing**: 0 when both senders pace or neither does; measured as the HTTP/3 level's median
  minus that of a level that differs from it only in its pacer (``quic_pacing = "off"``);
  otherwise not separated.
- **implementation**: the HTTP/3 level's median minus that of the same request on the other
  QUIC stack (aioquic against ngtcp2) with the same control; when the two stacks also differ in
  pacing, the pacing part (when measured) is taken out of it, and when it is not measured the
  part says that it holds both.
- **rest**: the difference less every measured part: what HTTP/3's transfer does otherwise
  (ACK ranges against SACK's three blocks, loss detection, the receiver's flow control).

A part that cannot be separated in an experiment is ``None`` with its reason, never 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from harness.analysis.levels import analysable, setup_before_request
from tbcore import kinds
from tbcore.errors import SpecError

SAME_PATH = ("link", "workload", "connection", "topology", "route", "multipath", "cross")
"""RunRow columns two levels must share to be the same request on the same path."""
PARTS = ("set-up", "ordering", "congestion control", "pacing", "implementation", "rest")


@dataclass(frozen=True)
class Part:
    name: str
    delta_s: float | None
    """HTTP/3 minus HTTP/2 (negative: HTTP/3 faster); None when not separable here."""
    how: str


@dataclass(frozen=True)
class Pair:
    h2_level: str
    h3_level: str
    h2_median_s: float
    h3_median_s: float
    parts: list[Part] = field(default_factory=list)
    h3_stack: str = ""
    """The QUIC stack of the HTTP/3 level (runs.csv ``quic_stack``)."""

    @property
    def difference_s(self) -> float:
        return self.h3_median_s - self.h2_median_s

    def part(self, name: str) -> Part:
        return next(p for p in self.parts if p.name == name)


@dataclass(frozen=True)
class _Level:
    """What a level ran, from its runs' rows (the first valid run's values)."""

    name: str
    family: str
    """``tcp`` for HTTP over one TCP byte stream, ``quic`` for HTTP over QUIC, ``""`` for
    any other protocol (the registry's traits: tbcore.kinds)."""
    stack: str
    cc: str
    paced: bool
    path: tuple[str, ...]
    median_s: float


HTTP_FAMILIES = ("tcp", "quic")
"""The transports an HTTP protocol's traits name: one ordered byte stream, or QUIC's streams."""


def _family(protocol: str) -> str:
    """The HTTP family of a protocol by its registered traits ("" for none or another)."""
    try:
        traits = kinds.traits_of(kinds.protocol(protocol))
    except SpecError:
        return ""
    if "http" not in traits:
        return ""
    return next((f for f in HTTP_FAMILIES if f in traits), "")


def _first(runs: pd.DataFrame, column: str) -> str:
    if column not in runs.columns:
        return ""
    values = runs[column].dropna()
    return str(values.iloc[0]) if len(values) else ""


def _levels(good: pd.DataFrame) -> list[_Level]:
    levels = []
    for name, runs in good.groupby("level", sort=False):
        paced = runs["paced"].dropna() if "paced" in runs.columns else pd.Series([], dtype=bool)
        levels.append(
            _Level(
                name=str(name),
                family=_family(_first(runs, "protocol")),
                stack=_first(runs, "quic_stack"),
                cc=_first(runs, "cc"),
                paced=bool(paced.astype(bool).all()) if len(paced) else False,
                path=tuple(_first(runs, c) for c in SAME_PATH),
                median_s=float(pd.to_numeric(runs["total_s"]).median()),
            )
        )
    return levels


def _hol_s(streams: pd.DataFrame | None, level: str) -> float | None:
    """Median over runs of the head-of-line wait of the stream that ended each request; 0
    when every request had one stream; None without a stream view of a level's runs."""
    if streams is None or streams.empty or "level" not in streams.columns:
        return None
    mine = streams[streams["level"] == level]
    if "valid" in mine.columns:
        mine = mine[mine["valid"].fillna(False).astype(bool)]
    if mine.empty:
        return None
    waits = []
    for _, run in mine.groupby(["run_id", "request_id"]):
        if len(run) == 1:
            waits.append(0.0)
            continue
        delivered = pd.to_numeric(run["delivered_s"], errors="coerce")
        if delivered.isna().all():
            continue
        last = run.loc[delivered.idxmax()]
        hol = pd.to_numeric(pd.Series([last.get("hol_transport_s")]), errors="coerce").iloc[0]
        if not pd.isna(hol):
            waits.append(float(hol))
    return float(pd.Series(waits).median()) if waits else None


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def _pacing_part(h2: _Level, h3: _Level, levels: Sequence[_Level]) -> Part:
    if h2.paced == h3.paced:
        both = "both senders pace" if h3.paced else "neither sender paces"
        return Part("pacing", 0.0, both)
    control = [
        lv for lv in levels
        if lv.family == h3.family and lv.stack == h3.stack and lv.cc == h3.cc
        and lv.path == h3.path and lv.paced != h3.paced
    ]  # fmt: skip
    who = f"{h3.name} paces, {h2.name} does not" if h3.paced else f"{h2.name} paces, not {h3.name}"
    if not control:
        return Part("pacing", None, f"{who}; no level of this experiment differs only in it")
    other = control[0]
    return Part("pacing", h3.median_s - other.median_s, f"{who}: {h3.name} - {other.name}")


def _implementation_part(h3: _Level, levels: Sequence[_Level], pacing: Part) -> Part:
    others = [
        lv for lv in levels
        if lv.family == h3.family and lv.stack and lv.stack != h3.stack and lv.cc == h3.cc
        and lv.path == h3.path
    ]  # fmt: skip
    if not others:
        return Part("implementation", None, "no level runs the request on another QUIC stack")
    other = next((lv for lv in others if lv.paced == h3.paced), others[0])
    delta = h3.median_s - other.median_s
    how = f"{h3.name} ({h3.stack}) - {other.name} ({other.stack}), both {h3.cc}"
    if other.paced == h3.paced:
        return Part("implementation", delta, how)
    if pacing.delta_s is not None and pacing.delta_s != 0.0:
        sign = pacing.delta_s if h3.paced else -pacing.delta_s
        return Part("implementation", delta - sign, f"{how}, less the pacing part")
    return Part("implementation", delta, f"{how}; with their pacing: one paces, the other not")


def decompose(frame: pd.DataFrame, streams: pd.DataFrame | None = None) -> list[Pair]:
    """Every HTTP/3 level with an HTTP/2 level on the same path, its difference split."""
    good = analysable(frame)
    if good.empty or "protocol" not in good.columns:  # runs.csv of another kind of run
        return []
    levels = _levels(good)
    pairs = []
    for h3 in (lv for lv in levels if lv.family == "quic"):
        matches = [lv for lv in levels if lv.family == "tcp" and lv.path == h3.path]
        if not matches:
            continue
        h2 = next((lv for lv in matches if lv.cc == h3.cc), matches[0])
        runs = {lv.name: good[good["level"] == lv.name] for lv in (h2, h3)}
        setup = setup_before_request(runs[h3.name]) - setup_before_request(runs[h2.name])
        parts = [Part("set-up", setup, "median set-up before the first request byte")]
        hol = {lv.name: _hol_s(streams, lv.name) for lv in (h2, h3)}
        if hol[h2.name] is None or hol[h3.name] is None:
            parts.append(Part("ordering", None, "no stream view of these runs (streams.csv)"))
        else:
            parts.append(Part("ordering", hol[h3.name] - hol[h2.name],
                              "median head-of-line wait of the request's last stream"))  # fmt: skip
        if h2.cc == h3.cc:
            parts.append(Part("congestion control", 0.0, f"{h3.cc} on both"))
        else:
            parts.append(
                Part("congestion control", None, f"{h2.cc} against {h3.cc}: not separable")
            )
        pacing = _pacing_part(h2, h3, levels)
        parts.append(pacing)
        implementation = _implementation_part(h3, levels, pacing)
        parts.append(implementation)
        difference = h3.median_s - h2.median_s
        counted = sum(p.delta_s for p in parts if p.delta_s is not None)
        parts.append(Part("rest", difference - counted, "the difference less the parts above"))
        pairs.append(Pair(h2.name, h3.name, h2.median_s, h3.median_s, parts, h3.stack))
    return pairs


def stack_agreement(pairs: Sequence[Pair]) -> list[str]:
    """Per HTTP/2 level paired with HTTP/3 on more than one QUIC stack: whether HTTP/3 is
    faster (or slower) on every stack, or on some only, in which case the result is the
    stack's, not HTTP/3's (one sentence each)."""
    lines = []
    for h2_level in dict.fromkeys(p.h2_level for p in pairs):
        mine = [p for p in pairs if p.h2_level == h2_level and p.h3_stack]
        if len({p.h3_stack for p in mine}) < 2:
            continue
        faster = sorted({p.h3_stack for p in mine if p.difference_s < 0})
        slower = sorted({p.h3_stack for p in mine if p.difference_s >= 0})
        levels = ", ".join(
            f"{p.h3_level} ({p.h3_stack}) {p.difference_s * 1e3:+.1f} ms" for p in mine
        )
        if not slower:
            lines.append(f"Against {h2_level}, HTTP/3 is faster on every QUIC stack: {levels}.")
        elif not faster:
            lines.append(f"Against {h2_level}, HTTP/3 is slower on every QUIC stack: {levels}.")
        else:
            lines.append(
                f"Against {h2_level}, HTTP/3 is faster on {', '.join(faster)} only and slower "
                f"on {', '.join(slower)}: the result holds on one stack only, it is the "
                f"stack's, not HTTP/3's ({levels})."
            )
    return lines
