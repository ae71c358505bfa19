"""Scheduled link events on an edge: an outage and a rate change. Backend-neutral, sans-I/O.

A :class:`LinkEvent` is what an experiment or a harness asks for::

    outage:at=2s,for=1s              both directions carry nothing from t0+2 s to t0+3 s
    rate:at=5s,rate=10mbit,dir=up    the up direction runs at 10 Mbit/s from t0+5 s on
    rate:at=5s,for=2s,rate=1mbit     both directions at 1 Mbit/s for 2 s, then as before
    outage:at=1s,spread=4s,for=1s,seed=7   start drawn in [t0+1, t0+5) from seed 7

``t0`` is the moment the event is given to the link: link up for a schedule declared with
the link, the moment of the call for an event given on demand (``Link.event(...)``, the
emulator's ``event`` control command). :meth:`LinkEvent.resolve` turns it into a
:class:`ScheduledEvent` on CLOCK_MONOTONIC (the one clock of every node), drawing the start
from the event's own seeded generator when ``spread_s`` is set: equal seeds, equal times.

:class:`DirectionTimeline` is what one direction of the userspace emulator consults
(:mod:`netem.emulator.core`): whether a time falls in an outage, and the rate in force at a
time. It records, per event, the packets the outage dropped, so what the link reports says
when each outage began and ended and what it cost.

Semantics of an outage (both backends): a packet offered to the direction during the outage
is dropped, and so is a packet that would reach the far end during it (it was on the wire
when the link went down). Packets due after the outage ends are delivered.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

from tbcore.errors import SpecError
from tbcore.units import parse_duration_s, parse_rate_bps

DIRECTIONS = ("up", "down")


@dataclass(frozen=True)
class LinkEvent:
    """One event on one edge, with its start relative to when it is given to the link; one
    subclass per kind (:class:`Outage`, :class:`RateChange`), as aioquic's events are."""

    KIND: ClassVar[str] = ""
    at_s: float = 0.0
    """Start, seconds after the event is given to the link (0: now)."""
    duration_s: float | None = None
    """How long it lasts; required for an outage; None for a rate change: for good."""
    directions: tuple[str, ...] = DIRECTIONS
    """Which directions it affects (an outage: both, unless told)."""
    spread_s: float = 0.0
    """When > 0 the start is drawn uniformly from [at_s, at_s + spread_s) with ``seed``."""
    seed: int = 1
    """Seed of the start draw (only used with ``spread_s``)."""

    @property
    def kind(self) -> str:
        return self.KIND

    def __post_init__(self) -> None:
        if type(self) is LinkEvent:
            raise SpecError("event.kind", f"missing: one of {', '.join(EVENT_KINDS)}")
        _check_seconds("event.at_s", self.at_s)
        _check_seconds("event.spread_s", self.spread_s)
        if self.duration_s is not None:
            _check_seconds("event.duration_s", self.duration_s)
            if self.duration_s <= 0:
                raise SpecError("event.duration_s", f"must be > 0 s, got {self.duration_s!r}")
        if not isinstance(self.directions, tuple) or not self.directions:
            raise SpecError("event.directions", "must be a non-empty tuple of up/down")
        for d in self.directions:
            if d not in DIRECTIONS:
                raise SpecError("event.directions", f"{d!r}: must be up or down")
        if len(set(self.directions)) != len(self.directions):
            raise SpecError("event.directions", "a direction is given twice")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise SpecError("event.seed", f"must be a whole number >= 0, got {self.seed!r}")

    def resolve(self, base_s: float, index: int = 0) -> ScheduledEvent:
        """The event on the monotonic clock, ``base_s`` being the moment it is given."""
        offset_s = self.at_s
        if self.spread_s > 0:
            offset_s += random.Random(f"event:{self.seed}:{index}").uniform(0.0, self.spread_s)
        start_s = base_s + offset_s
        end_s = math.inf if self.duration_s is None else start_s + self.duration_s
        return self._scheduled(start_s, end_s, base_s)

    def _scheduled(self, start_s: float, end_s: float, given_s: float) -> ScheduledEvent:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        data = {"kind": self.KIND, **asdict(self)}
        data["directions"] = list(self.directions)
        return data

    @classmethod
    def from_dict(cls, data: object) -> LinkEvent:
        """The event of a mapping with its ``kind`` and that kind's keys."""
        if not isinstance(data, dict):
            raise SpecError("event", f"must be a mapping, got {type(data).__name__}")
        if "kind" not in data:
            raise SpecError("event.kind", "missing")
        values = dict(data)
        if "directions" in values:
            dirs = values["directions"]
            if isinstance(dirs, str) or not isinstance(dirs, (list, tuple)):
                raise SpecError("event.directions", f"must be a list of up/down, got {dirs!r}")
            values["directions"] = tuple(dirs)
        return link_event(values.pop("kind"), **values)


@dataclass(frozen=True)
class Outage(LinkEvent):
    """The directions drop everything for ``duration_s`` (required)."""

    KIND: ClassVar[str] = "outage"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.duration_s is None:
            raise SpecError("event.duration_s", "an outage needs a duration (for=1s)")

    def _scheduled(self, start_s: float, end_s: float, given_s: float) -> ScheduledEvent:
        return ScheduledOutage(
            start_s=start_s, end_s=end_s, directions=self.directions, given_s=given_s
        )


@dataclass(frozen=True)
class RateChange(LinkEvent):
    """The directions' bottleneck runs at ``rate_bps`` (for ``duration_s``, or for good)."""

    KIND: ClassVar[str] = "rate"
    rate_bps: float | None = None
    """The new rate (IP bits per second), required."""

    def __post_init__(self) -> None:
        super().__post_init__()
        rate = self.rate_bps
        if isinstance(rate, bool) or not isinstance(rate, (int, float)):
            raise SpecError("event.rate_bps", f"a rate event needs one, got {rate!r}")
        if not math.isfinite(rate) or rate <= 0:
            raise SpecError("event.rate_bps", f"must be > 0 bit/s, got {rate!r}")

    def _scheduled(self, start_s: float, end_s: float, given_s: float) -> ScheduledEvent:
        return ScheduledRate(
            start_s=start_s,
            end_s=end_s,
            directions=self.directions,
            given_s=given_s,
            rate_bps=float(self.rate_bps or 0.0),
        )


LINK_EVENTS: dict[str, type[LinkEvent]] = {kind.KIND: kind for kind in (Outage, RateChange)}
"""Every kind of link event by its name (what a string or a mapping names)."""
EVENT_KINDS = tuple(LINK_EVENTS)


def link_event(kind: object, **values: Any) -> LinkEvent:
    """The event of kind ``kind`` with ``values``; a key that kind has not is refused in one
    line naming it."""
    cls = LINK_EVENTS.get(str(kind).lower()) if isinstance(kind, str) else None
    if cls is None:
        raise SpecError("event.kind", f"{kind!r}: must be one of {', '.join(EVENT_KINDS)}")
    names = {f.name for f in fields(cls)}
    for key in values:
        if key not in names:
            if key in ("rate_bps",):
                raise SpecError(f"event.{key}", f"an {cls.KIND} has no rate")
            raise SpecError(f"event.{key}", "unknown event key")
    return cls(**values)


def _check_seconds(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(name, f"must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise SpecError(name, f"must be finite and >= 0, got {value!r}")


EVENT_KEYS = {"at": "at_s", "for": "duration_s", "rate": "rate_bps", "dir": "directions"}
EVENT_KEYS_MORE = {"spread": "spread_s", "seed": "seed"}


def parse_event(text: str) -> LinkEvent:
    """``"outage:at=2s,for=1s"`` or ``"rate:at=5s,rate=10mbit,dir=up"`` into a LinkEvent."""
    if not isinstance(text, str) or not text.strip():
        raise SpecError("event", f"expected KIND:key=value,..., got {text!r}")
    kind, _, rest = text.strip().partition(":")
    values: dict[str, Any] = {"kind": kind.strip().lower()}
    for item in (p.strip() for p in rest.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not sep or not value:
            raise SpecError(f"event.{key or '?'}", f"{item!r} is not key=value")
        if key in ("at", "for", "spread"):
            values[(EVENT_KEYS | EVENT_KEYS_MORE)[key]] = parse_duration_s(f"event.{key}", value)
        elif key == "rate":
            values["rate_bps"] = parse_rate_bps("event.rate", value)
        elif key == "dir":
            values["directions"] = tuple(d.strip() for d in value.split("+"))
        elif key == "seed":
            try:
                values["seed"] = int(value)
            except ValueError:
                raise SpecError("event.seed", f"{value!r} is not a whole number") from None
        else:
            known = ", ".join([*EVENT_KEYS, *EVENT_KEYS_MORE])
            raise SpecError(f"event.{key}", f"unknown event key (known: {known})")
        if key in values.get("_seen", ()):
            raise SpecError(f"event.{key}", "given twice")
        values.setdefault("_seen", set()).add(key)
    values.pop("_seen", None)
    return link_event(values.pop("kind"), **values)


@dataclass
class ScheduledEvent:
    """An event with absolute times (CLOCK_MONOTONIC seconds), and what it did; one subclass
    per kind (:class:`ScheduledOutage`, :class:`ScheduledRate`)."""

    KIND: ClassVar[str] = ""
    start_s: float
    end_s: float
    """``inf`` for a rate change that stays."""
    directions: tuple[str, ...]
    given_s: float
    """When it was given to the link (its ``t0``)."""
    dropped_packets: dict[str, int] = field(default_factory=dict)
    """Per direction, packets the outage dropped (userspace backend; empty on netem)."""

    @property
    def kind(self) -> str:
        return self.KIND

    @property
    def rate_bps(self) -> float | None:
        """The rate it sets (a rate change), None for another kind."""
        return None

    def covers(self, t: float) -> bool:
        return self.start_s <= t < self.end_s

    def to_dict(self) -> dict[str, Any]:
        data = {"kind": self.KIND, "rate_bps": self.rate_bps, **asdict(self)}
        data["directions"] = list(self.directions)
        data["end_s"] = None if math.isinf(self.end_s) else self.end_s
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScheduledEvent:
        try:
            end = data.get("end_s")
            common = {
                "start_s": float(data["start_s"]),
                "end_s": math.inf if end is None else float(end),
                "directions": tuple(data.get("directions", DIRECTIONS)),
                "given_s": float(data.get("given_s", data["start_s"])),
                "dropped_packets": {k: int(v) for k, v in data.get("dropped_packets", {}).items()},
            }
            kind = SCHEDULED_EVENTS.get(str(data["kind"]))
            if kind is None:
                raise ValueError(f"kind {data['kind']!r}")
            if kind is ScheduledRate:
                common["rate_bps"] = float(data["rate_bps"])
            return kind(**common)
        except (KeyError, TypeError, ValueError) as err:
            raise SpecError("event", f"not a scheduled event: {err}") from None


@dataclass
class ScheduledOutage(ScheduledEvent):
    """An outage on the clock: the directions drop everything while it covers a time."""

    KIND: ClassVar[str] = "outage"


@dataclass
class ScheduledRate(ScheduledEvent):
    """A rate change on the clock: the directions' bottleneck runs at ``rate_bps``."""

    KIND: ClassVar[str] = "rate"
    rate_bps: float = 0.0  # type: ignore[assignment]  # a field here, None on other kinds


SCHEDULED_EVENTS: dict[str, type[ScheduledEvent]] = {
    kind.KIND: kind for kind in (ScheduledOutage, ScheduledRate)
}
"""Every kind of scheduled event by its name (what a link's state file says)."""


class DirectionTimeline:
    """The events of one direction, consulted by the emulator core with ``now``.

    Outages are kept as intervals; rate changes as intervals too, the latest-starting one
    covering a time wins (a change for good has ``end_s = inf``).
    """

    def __init__(self, direction: str) -> None:
        if direction not in DIRECTIONS:
            raise SpecError("direction", f"must be up or down, got {direction!r}")
        self.direction = direction
        self.outages: list[ScheduledEvent] = []
        self.rates: list[ScheduledEvent] = []
        self._horizon_s = -math.inf
        """The latest end of any outage: past it, no outage can cover a time."""

    def add(self, event: ScheduledEvent) -> bool:
        """Take ``event`` if it concerns this direction; True if it did."""
        if self.direction not in event.directions:
            return False
        if isinstance(event, ScheduledOutage):
            self.outages.append(event)
            self._horizon_s = max(self._horizon_s, event.end_s)
        else:
            self.rates.append(event)
            self.rates.sort(key=lambda e: e.start_s)
        return True

    def outage_at(self, t: float) -> ScheduledEvent | None:
        """The outage covering ``t``, if any."""
        if t >= self._horizon_s:
            return None
        for event in self.outages:
            if event.covers(t):
                return event
        return None

    def count_drop(self, event: ScheduledEvent) -> None:
        event.dropped_packets[self.direction] = event.dropped_packets.get(self.direction, 0) + 1

    def rate_at(self, t: float, base_rate_bps: float | None) -> float | None:
        """The rate in force at ``t``: the latest-starting rate event covering it, else base."""
        rate = base_rate_bps
        for event in self.rates:
            if event.start_s > t:
                break
            if t < event.end_s:
                rate = event.rate_bps
        return rate

    @property
    def has_rates(self) -> bool:
        return bool(self.rates)

    def refresh(self) -> None:
        """Recompute what depends on the events' ends (after :func:`end_events`)."""
        self._horizon_s = max((e.end_s for e in self.outages), default=-math.inf)


def end_events(events: list[ScheduledEvent], now: float) -> list[ScheduledEvent]:
    """End every event still running at ``now`` (one not yet begun is cancelled: it ends
    where it starts); returns those changed. Callers refresh their timelines."""
    changed = []
    for event in events:
        if event.end_s > now:
            event.end_s = max(event.start_s, now)
            changed.append(event)
    return changed
