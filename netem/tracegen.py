"""Traces made by a stated model, seeded: what the testbed ships and ``testbed trace make``
writes. Sans-I/O: each model returns the lines of a trace file (:mod:`netem.trace`).

Markov-modulated capacity (:class:`MarkovModel`)
================================================
A birth-death chain over rate states (a cellular link moving between good and bad spells):
the link holds state ``i`` for an exponentially distributed time of mean ``mean_hold_s``,
then moves to state ``i - 1`` or ``i + 1`` with equal probability (the only neighbour at the
ends), so slow spells come in runs and a collapse passes through the states between. Within
a state the capacity is fluid at the state's rate: the opportunity that completes each
12,000 bits (one 1,500-byte packet) is stamped at the millisecond that follows the instant
it is complete (rounded up: no opportunity comes before its capacity). The generator is
``random.Random("markov:<seed>")``; the trace ends with the last opportunity before
``duration_s`` (so its period, the last stamp, is at most the duration).

:data:`CELL_STATES` are the shipped trace's: 24, 8, 2 and 0.5 Mbit/s held 2, 1.5, 1 and
0.3 s on average, chosen to span what the public LTE traces (Mahimahi's Verizon and T-Mobile
recordings) show of a link's good, fair, poor and nearly-dead spells. Not a measurement.

LEO-like delay (:class:`LeoModel`)
==================================
One-way delay sampled every ``interval_s`` (10 ms, as LEO trace sets publish it). Every
``handover_s`` (15 s: Starlink re-assigns satellites on a 15-second schedule, as measured
by Tanveer et al., CoNEXT 2023, and Pan et al., 2023) the path changes: a new base delay
drawn uniformly from ``[min_delay_s, max_delay_s]`` and a new drift (the satellite's motion)
drawn uniformly from ``[-drift, +drift]`` seconds per second, held until the next handover
and kept inside the range. The generator is ``random.Random("leo:<seed>")``. A model of
the shape (steps at handovers, slow drift between), not a measurement.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from netem.trace import MAX_DELAY_MS, MAX_PERIOD_MS, OPPORTUNITY_BYTES
from tbcore.errors import SpecError
from tbcore.units import MAX_RATE_BPS, MIN_RATE_BPS

OPPORTUNITY_BITS = OPPORTUNITY_BYTES * 8


def _positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(name, f"must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise SpecError(name, f"must be finite and > 0, got {value!r}")


def _duration(name: str, value: float) -> None:
    _positive(name, value)
    if value * 1e3 > MAX_PERIOD_MS:
        raise SpecError(name, f"{value!r} s is more than a day")


@dataclass(frozen=True)
class RateState:
    """One state of a Markov-modulated link."""

    rate_bps: float
    """The capacity while in this state (IP bits per second)."""
    mean_hold_s: float
    """Mean of the exponential holding time."""

    def __post_init__(self) -> None:
        _positive("rate_bps", self.rate_bps)
        if not MIN_RATE_BPS <= self.rate_bps <= MAX_RATE_BPS:
            raise SpecError("rate_bps", f"{self.rate_bps!r} is outside 1 kbit/s .. 100 Gbit/s")
        _positive("mean_hold_s", self.mean_hold_s)


CELL_STATES = (
    RateState(24e6, 2.0),
    RateState(8e6, 1.5),
    RateState(2e6, 1.0),
    RateState(0.5e6, 0.3),
)
"""The shipped cellular-like trace's states (module docstring)."""


@dataclass(frozen=True)
class MarkovModel:
    """A birth-death Markov-modulated capacity (module docstring)."""

    states: tuple[RateState, ...] = CELL_STATES
    duration_s: float = 30.0
    seed: int = 1
    start_state: int = 0
    """The state at time 0 (an index into ``states``)."""

    def __post_init__(self) -> None:
        if not self.states or not all(isinstance(s, RateState) for s in self.states):
            raise SpecError("states", "give at least one RateState")
        _duration("duration_s", self.duration_s)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise SpecError("seed", f"must be a whole number >= 0, got {self.seed!r}")
        if not 0 <= self.start_state < len(self.states):
            raise SpecError("start_state", f"must index the {len(self.states)} states")


def _next_state(rng: random.Random, state: int, count: int) -> int:
    if count == 1:
        return state
    if state == 0:
        return 1
    if state == count - 1:
        return state - 1
    return state + (1 if rng.random() < 0.5 else -1)


def markov_spells(model: MarkovModel) -> list[tuple[float, float, float]]:
    """The chain's path: (start s, end s, rate bit/s) of each spell, up to the duration."""
    rng = random.Random(f"markov:{model.seed}")
    spells, t, state = [], 0.0, model.start_state
    while t < model.duration_s:
        current = model.states[state]
        end = min(model.duration_s, t + rng.expovariate(1.0 / current.mean_hold_s))
        spells.append((t, end, current.rate_bps))
        t, state = end, _next_state(rng, state, len(model.states))
    return spells


TIME_EPSILON_S = 1e-9
"""An opportunity complete within a nanosecond of a spell's end belongs to it (12 Mbit/s for
10 ms is ten opportunities, not nine and a rounding error)."""


def fluid_stamps(spells: list[tuple[float, float, float]]) -> list[int]:
    """Millisecond stamps of the opportunities of a piecewise-constant fluid capacity: one
    each time 12,000 more bits are complete, stamped at the millisecond after (rounded to a
    nanosecond first, so that exact multiples stay on their millisecond)."""
    stamps: list[int] = []
    carried_bits = 0.0
    for start, end, rate in spells:
        count = 0
        while True:
            due = start + ((count + 1) * OPPORTUNITY_BITS - carried_bits) / rate
            if due > end + TIME_EPSILON_S:
                break
            stamps.append(math.ceil(round(due * 1e3, 6)))
            count += 1
        carried_bits += (end - start) * rate - count * OPPORTUNITY_BITS
    return stamps


def capacity_lines(stamps: list[int]) -> str:
    """A capacity trace file's text (Mahimahi's format)."""
    if not stamps or stamps[-1] == 0:
        raise SpecError("duration", "too short for one opportunity at these rates")
    return "".join(f"{s}\n" for s in stamps)


def markov_trace(model: MarkovModel) -> str:
    """The capacity trace of a Markov-modulated link."""
    return capacity_lines(fluid_stamps(markov_spells(model)))


def constant_trace(rate_bps: float, duration_s: float) -> str:
    """A constant capacity over ``duration_s`` (``12mbit`` over 1 ms: the one-line ``1``)."""
    state = RateState(rate_bps, duration_s)
    _duration("duration_s", duration_s)
    return capacity_lines(fluid_stamps([(0.0, duration_s, state.rate_bps)]))


@dataclass(frozen=True)
class LeoModel:
    """A LEO-like one-way delay (module docstring)."""

    duration_s: float = 60.0
    interval_s: float = 0.010
    handover_s: float = 15.0
    min_delay_s: float = 0.020
    max_delay_s: float = 0.040
    drift_s_per_s: float = 0.0002
    """At most this much change of delay per second between handovers (0.2 ms/s)."""
    seed: int = 1

    def __post_init__(self) -> None:
        _duration("duration_s", self.duration_s)
        for name in ("interval_s", "handover_s", "max_delay_s"):
            _positive(name, getattr(self, name))
        if not 0 <= self.min_delay_s <= self.max_delay_s <= MAX_DELAY_MS / 1e3:
            raise SpecError("min_delay_s", "0 <= min <= max <= 10 s")
        if not self.interval_s < self.duration_s:
            raise SpecError("interval_s", "must be shorter than the duration (two points)")
        if not math.isfinite(self.drift_s_per_s) or self.drift_s_per_s < 0:
            raise SpecError("drift_s_per_s", f"must be >= 0, got {self.drift_s_per_s!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise SpecError("seed", f"must be a whole number >= 0, got {self.seed!r}")


def leo_points(model: LeoModel) -> list[tuple[float, float]]:
    """(time ms, delay ms) every ``interval_s`` from 0 to before ``duration_s``."""
    rng = random.Random(f"leo:{model.seed}")
    points = []
    base = slope = since = 0.0
    next_handover = 0.0
    steps = math.ceil(round(model.duration_s / model.interval_s, 9))
    for index in range(steps):
        t = index * model.interval_s
        if t >= next_handover - 1e-12:
            base = rng.uniform(model.min_delay_s, model.max_delay_s)
            slope = rng.uniform(-model.drift_s_per_s, model.drift_s_per_s)
            since, next_handover = t, next_handover + model.handover_s
        delay = min(model.max_delay_s, max(model.min_delay_s, base + slope * (t - since)))
        points.append((round(t * 1e3, 6), round(delay * 1e3, 3)))
    return points


def delay_lines(points: list[tuple[float, float]]) -> str:
    """A delay trace file's text: ``time_ms delay_ms`` per line."""
    return "".join(f"{t:g} {d:g}\n" for t, d in points)


def leo_trace(model: LeoModel) -> str:
    return delay_lines(leo_points(model))
