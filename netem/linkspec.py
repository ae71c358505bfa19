"""The emulated path, per direction: delay, jitter, loss, rate, queue. Validated on entry.

A :class:`LinkSpec` holds two :class:`DirectionSpec`: ``up`` (client -> server) and
``down`` (server -> client). Human strings parse with :func:`parse_link`::

    rtt=200ms,loss=14%,rate=333mbit          both directions
    up.rate=20mbit,down.rate=100mbit         one direction each
    rtt=200ms,down.loss=14%,rate=333mbit     the dc-longhaul shape: loss downstream only
    down.gemodel=1%/30%/100%/0%              Gilbert-Elliott loss, netem's p/r/1-h/1-k
    up.rate=trace:cell.up,trace_offset=12.5s a recorded capacity trace (Mahimahi's format)
    delay=trace:leo.delay,delay_interp=linear a one-way delay trace (:mod:`netem.trace`)

Unprefixed keys apply to both directions first; ``up.``/``down.`` keys then override them,
whatever their order in the string. ``rtt`` and ``delay`` are exclusive: ``rtt`` sets each
one-way delay to half of it.

Traces (userspace backend only): ``rate=trace:PATH`` replaces a direction's fixed rate with
the delivery opportunities of a capacity trace, ``delay=trace:PATH`` its fixed delay with a
delay trace. ``trace_offset`` starts a direction's traces that far in (positions wrap);
``delay_interp`` is ``step`` (default) or ``linear``. Given without a prefix, these two apply
to the directions that have a trace (and are refused if none has).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeVar

from netem.air import AirSpec, format_air, parse_air
from netem.trace import INTERPOLATIONS, TraceFile, is_trace_value, open_trace
from tbcore import units
from tbcore.errors import SpecError
from tbcore.units import (
    format_duration,
    format_percent,
    format_rate,
    parse_duration_s,
    parse_fraction,
    parse_probability,
    parse_queue,
    parse_rate_bps,
    parse_whole,
)

ETHERNET_MTU_BYTES = 1500
"""IP MTU of the emulated interfaces (RFC 894 Ethernet payload)."""

MIN_MTU_BYTES = 1280
"""IPv6's minimum link MTU (RFC 8200 section 5); QUIC needs 1200-byte datagrams (RFC 9000 s14)."""

MIN_DEFAULT_QUEUE_BYTES = 64 * ETHERNET_MTU_BYTES
"""Floor of the default queue: a short path still gets a few dozen packets of buffer."""

MAX_RTT_S = 10.0
"""Longest round trip of a link (both one-way delays plus jitter): a geostationary hop is
0.6 s and the worst bufferbloat measured a few seconds; ``rtt=1e12s`` is a typo."""
MIN_RATE_BPS = units.MIN_RATE_BPS
"""1 kbit/s (tbcore.units: one packet would take longer than any timeout below it)."""
MAX_RATE_BPS = units.MAX_RATE_BPS
"""100 Gbit/s (tbcore.units: beyond any interface or emulator on one host)."""
MAX_QUEUE_BYTES = 2**30
"""1 GiB of drop-tail queue: 86 s of queueing at 100 Mbit/s, beyond any buffer measured."""
MAX_QUEUE_PACKETS = 1_000_000
"""A million packets (1.5 GB of full-size ones): the same bound, counted in packets."""

LOSS_MODELS = ("bernoulli", "gemodel")

T = TypeVar("T")


def pick_direction(direction: str, up: T, down: T) -> T:
    """``up`` or ``down`` by the name of a direction; SpecError for any other name."""
    if direction not in ("up", "down"):
        raise SpecError("direction", f"must be 'up' or 'down', got {direction!r}")
    return up if direction == "up" else down


@dataclass(frozen=True)
class GilbertElliott:
    """Two-state Markov loss, with netem's parameter names (``loss gemodel p r 1-h 1-k``).

    In the good state a packet is lost with probability ``loss_good`` (netem's 1-k), in the
    bad state with ``loss_bad`` (1-h). After each packet the state moves good->bad with
    ``p`` and bad->good with ``r``. The simple Gilbert model is ``loss_good=0, loss_bad=1``.
    """

    p: float
    """Probability of moving from the good to the bad state, per packet."""
    r: float
    """Probability of moving from the bad to the good state, per packet."""
    loss_bad: float = 1.0
    """Loss probability in the bad state (netem's 1-h)."""
    loss_good: float = 0.0
    """Loss probability in the good state (netem's 1-k)."""

    def __post_init__(self) -> None:
        for name in ("p", "r", "loss_bad", "loss_good"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0.0 <= value <= 1.0):
                raise SpecError(f"gemodel.{name}", f"must lie in [0, 1], got {value!r}")
        if self.r == 0.0 and self.p > 0.0:
            raise SpecError("gemodel.r", "0 makes the bad state absorbing: the link would die")

    @property
    def mean_loss(self) -> float:
        """Stationary loss rate: pi_bad * loss_bad + pi_good * loss_good."""
        if self.p + self.r == 0.0:
            return self.loss_good
        bad = self.p / (self.p + self.r)
        return bad * self.loss_bad + (1.0 - bad) * self.loss_good

    @property
    def mean_burst_packets(self) -> float:
        """Mean sojourn in the bad state, in packets (1 / r)."""
        return math.inf if self.r == 0 else 1.0 / self.r


@dataclass(frozen=True)
class DirectionSpec:
    """One direction of the path. ``None`` rate means no rate limit (and no queue)."""

    delay_s: float = 0.0
    """One-way propagation delay added to every packet."""
    jitter_s: float = 0.0
    """Uniform jitter: each packet's delay is drawn from delay_s +- jitter_s (never reordering)."""
    loss: float = 0.0
    """Bernoulli loss probability per packet, in [0, 1)."""
    gemodel: GilbertElliott | None = None
    """Gilbert-Elliott loss instead of Bernoulli, when set (``loss`` must then be 0)."""
    rate_bps: float | None = None
    """Bottleneck rate in bits per second of IP packets; None for no limit."""
    queue_bytes: int | None = None
    """Drop-tail queue limit in bytes; None with queue_packets None: one BDP (see LinkSpec)."""
    queue_packets: int | None = None
    """Drop-tail queue limit in packets, instead of bytes."""
    seed: int = 1
    """Seed of this direction's loss and jitter generator. The generator mixes the direction
    name into it, so one seed gives the two directions different but repeatable patterns,
    and two arms with equal seeds see equal patterns."""
    rate_trace: TraceFile | None = None
    """A capacity trace (Mahimahi's format) instead of ``rate_bps``, when set."""
    delay_trace: TraceFile | None = None
    """A one-way delay trace instead of ``delay_s`` (and jitter), when set."""
    delay_interp: str = "step"
    """Between the delay trace's points: ``step`` (hold) or ``linear``."""
    trace_offset_s: float = 0.0
    """Where this direction's traces start, seconds into them (positions wrap)."""

    def __post_init__(self) -> None:
        self._check_traces()
        _check_number("delay_s", self.delay_s, minimum=0.0)
        _check_number("jitter_s", self.jitter_s, minimum=0.0)
        if self.delay_s + self.jitter_s > MAX_RTT_S:
            raise SpecError(
                "delay_s", f"{self.delay_s!r} s is longer than a link allows ({MAX_RTT_S:g} s RTT)"
            )
        if self.jitter_s > self.delay_s:
            raise SpecError("jitter_s", f"{self.jitter_s!r} exceeds delay_s {self.delay_s!r}")
        _check_number("loss", self.loss, minimum=0.0)
        if not self.loss < 1.0:
            raise SpecError("loss", f"must lie in [0, 1), got {self.loss!r}")
        if self.gemodel is not None and self.loss:
            raise SpecError("loss", "set either loss (Bernoulli) or gemodel, not both")
        if self.rate_bps is not None:
            _check_number("rate_bps", self.rate_bps, minimum=0.0)
            if self.rate_bps <= 0:
                raise SpecError("rate_bps", "must be > 0 bit/s (omit it for an unlimited link)")
            if not MIN_RATE_BPS <= self.rate_bps <= MAX_RATE_BPS:
                raise SpecError("rate_bps", f"{self.rate_bps!r} is outside 1 kbit/s .. 100 Gbit/s")
        if self.queue_bytes is not None and self.queue_packets is not None:
            raise SpecError("queue", "give the limit in bytes or in packets, not both")
        if self.queue_bytes is not None and (
            not _is_whole(self.queue_bytes) or self.queue_bytes < ETHERNET_MTU_BYTES
        ):
            raise SpecError(
                "queue_bytes",
                f"{self.queue_bytes!r} is smaller than one MTU ({ETHERNET_MTU_BYTES} bytes)",
            )
        if self.queue_packets is not None and (
            not _is_whole(self.queue_packets) or self.queue_packets < 1
        ):
            raise SpecError(
                "queue_packets", f"must be a whole number >= 1, got {self.queue_packets!r}"
            )
        if self.queue_bytes is not None and self.queue_bytes > MAX_QUEUE_BYTES:
            raise SpecError("queue_bytes", f"{self.queue_bytes!r} is more than 1 GiB")
        if self.queue_packets is not None and self.queue_packets > MAX_QUEUE_PACKETS:
            raise SpecError("queue_packets", f"{self.queue_packets!r} is more than a million")
        if not _is_whole(self.seed) or self.seed < 0:
            raise SpecError("seed", f"must be a whole number >= 0, got {self.seed!r}")

    def _check_traces(self) -> None:
        """Each trace where it belongs, and no setting beside it that it would override."""
        for name, kind in (("rate_trace", "capacity"), ("delay_trace", "delay")):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, TraceFile) or value.kind != kind):
                raise SpecError(name, f"must be a {kind} TraceFile, got {value!r}")
        if self.rate_trace is not None and self.rate_bps is not None:
            raise SpecError("rate", "give a rate or a capacity trace, not both")
        if self.delay_trace is not None:
            if self.delay_s or self.jitter_s:
                raise SpecError("delay", "a delay trace replaces delay and jitter: not both")
            if self.delay_trace.delay.max_delay_ms / 1e3 > MAX_RTT_S:
                raise SpecError("delay", f"the trace's delays exceed {MAX_RTT_S:g} s")
        if self.delay_interp not in INTERPOLATIONS:
            raise SpecError("delay_interp", f"must be step or linear, got {self.delay_interp!r}")
        if self.delay_interp != "step" and self.delay_trace is None:
            raise SpecError("delay_interp", "has no effect without a delay trace")
        _check_number("trace_offset_s", self.trace_offset_s, minimum=0.0)
        if self.trace_offset_s > units.MAX_DURATION_S:
            raise SpecError("trace_offset_s", f"{self.trace_offset_s!r} s is more than a day")
        if self.trace_offset_s and self.rate_trace is None and self.delay_trace is None:
            raise SpecError("trace_offset", "has no effect without a rate or delay trace")

    @property
    def has_trace(self) -> bool:
        return self.rate_trace is not None or self.delay_trace is not None

    @property
    def mean_rate_bps(self) -> float | None:
        """The fixed rate, or the capacity trace's mean over its period; None: no limit."""
        if self.rate_trace is not None:
            return self.rate_trace.capacity.mean_rate_bps
        return self.rate_bps

    @property
    def min_delay_s(self) -> float:
        """The least one-way delay this direction adds (the fixed delay, or the trace's
        minimum): what a lower bound may count on."""
        if self.delay_trace is not None:
            return self.delay_trace.delay.min_delay_ms / 1e3
        return self.delay_s

    @property
    def max_delay_s(self) -> float:
        """The most one-way delay this direction adds (jitter included)."""
        if self.delay_trace is not None:
            return self.delay_trace.delay.max_delay_ms / 1e3
        return self.delay_s + self.jitter_s

    @property
    def mean_delay_s(self) -> float:
        """The fixed delay, or the delay trace's time-weighted mean."""
        if self.delay_trace is not None:
            return self.delay_trace.delay.mean_delay_ms(self.delay_interp) / 1e3
        return self.delay_s

    @property
    def mean_loss(self) -> float:
        """The loss rate this direction is configured for, whatever the model."""
        return self.gemodel.mean_loss if self.gemodel is not None else self.loss

    @property
    def loss_model(self) -> str:
        return "gemodel" if self.gemodel is not None else "bernoulli"


@dataclass(frozen=True)
class LinkSpec:
    """Both directions of an emulated path, and the interface MTU."""

    up: DirectionSpec = field(default_factory=DirectionSpec)
    """Client -> server."""
    down: DirectionSpec = field(default_factory=DirectionSpec)
    """Server -> client."""
    mtu_bytes: int = ETHERNET_MTU_BYTES
    """IP MTU of the emulated interfaces."""
    air: AirSpec | None = None
    """A shared-airtime hop both directions contend for (:mod:`netem.air`), or None. Only
    the userspace emulator runs it (:mod:`netem.emulator.medium`)."""

    def __post_init__(self) -> None:
        if not _is_whole(self.mtu_bytes) or not (MIN_MTU_BYTES <= self.mtu_bytes <= 65535):
            raise SpecError(
                "mtu_bytes", f"must be a whole number in [1280, 65535], got {self.mtu_bytes!r}"
            )
        for name in ("up", "down"):
            if not isinstance(getattr(self, name), DirectionSpec):
                raise SpecError(name, "must be a DirectionSpec")
        rtt_s = self.up.max_delay_s + self.down.max_delay_s
        if rtt_s > MAX_RTT_S:
            raise SpecError("rtt", f"{rtt_s:g} s is longer than the {MAX_RTT_S:g} s a link allows")
        if self.air is not None and not isinstance(self.air, AirSpec):
            raise SpecError("air", "must be an AirSpec")

    @property
    def rtt_s(self) -> float:
        """Round-trip propagation delay: the sum of both one-way delays (with a delay
        trace, its least delay: the round trip never falls below this)."""
        return self.up.min_delay_s + self.down.min_delay_s

    @property
    def has_trace(self) -> bool:
        return self.up.has_trace or self.down.has_trace

    def bdp_bytes(self, direction: str) -> int | None:
        """Bandwidth-delay product of one direction: its rate times the round trip (with
        traces, the capacity trace's mean rate and the delay traces' mean delays)."""
        rate_bps = self._direction(direction).mean_rate_bps
        if rate_bps is None:
            return None
        return math.ceil(rate_bps / 8.0 * (self.up.mean_delay_s + self.down.mean_delay_s))

    def queue_limit_bytes(self, direction: str) -> int | None:
        """The drop-tail limit in bytes: the one given, or one BDP (at least 64 MTUs)."""
        spec = self._direction(direction)
        if spec.queue_bytes is not None:
            return spec.queue_bytes
        if spec.queue_packets is not None:
            return spec.queue_packets * self.mtu_bytes
        bdp = self.bdp_bytes(direction)
        if bdp is None:
            return None
        return max(bdp, MIN_DEFAULT_QUEUE_BYTES)

    def queue_limit_packets(self, direction: str) -> int | None:
        """The limit in full-size packets (what netem's ``limit`` counts)."""
        spec = self._direction(direction)
        if spec.queue_packets is not None:
            return spec.queue_packets
        limit = self.queue_limit_bytes(direction)
        return None if limit is None else max(1, math.ceil(limit / self.mtu_bytes))

    def _direction(self, direction: str) -> DirectionSpec:
        return pick_direction(direction, self.up, self.down)

    def with_seed(self, seed: int) -> LinkSpec:
        """The same path with per-direction seeds derived from one number."""
        return replace(
            self, up=replace(self.up, seed=2 * seed + 1), down=replace(self.down, seed=2 * seed + 2)
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # a TraceFile becomes its fields (path, sha256, kind)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LinkSpec:
        if not isinstance(data, dict):
            raise SpecError("link", f"must be a mapping, got {type(data).__name__}")
        unknown = set(data) - {"up", "down", "mtu_bytes", "air"}
        if unknown:
            raise SpecError(sorted(unknown)[0], "unknown link key")
        return cls(
            up=_direction_from_dict("up", data.get("up", {})),
            down=_direction_from_dict("down", data.get("down", {})),
            mtu_bytes=data.get("mtu_bytes", ETHERNET_MTU_BYTES),
            air=None if data.get("air") is None else AirSpec.from_dict(data["air"]),
        )

    def __str__(self) -> str:
        return format_link(self)


def _is_whole(value: object) -> bool:
    """An int that is not a bool (``True`` is an int to Python, not a seed or a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _check_number(name: str, value: object, *, minimum: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(name, f"must be a number, got {value!r}")
    if not math.isfinite(value) or value < minimum:
        raise SpecError(name, f"must be finite and >= {minimum:g}, got {value!r}")


def _direction_from_dict(prefix: str, data: object) -> DirectionSpec:
    if not isinstance(data, dict):
        raise SpecError(prefix, f"must be a mapping of direction keys, got {type(data).__name__}")
    known = {f.name for f in DirectionSpec.__dataclass_fields__.values()}
    unknown = set(data) - known
    if unknown:
        raise SpecError(f"{prefix}.{sorted(unknown)[0]}", "unknown link key")
    values = dict(data)
    try:
        if values.get("gemodel") is not None:
            values["gemodel"] = _gemodel_from_dict(values["gemodel"])
        for key, kind in (("rate_trace", "capacity"), ("delay_trace", "delay")):
            if values.get(key) is not None:
                values[key] = TraceFile.from_dict(values[key], kind)
        return DirectionSpec(**values)
    except SpecError as err:
        raise SpecError(f"{prefix}.{err.field}", err.reason) from None


def _gemodel_from_dict(data: object) -> GilbertElliott:
    if not isinstance(data, dict):
        raise SpecError("gemodel", f"must be a mapping (p, r, loss_bad, loss_good), got {data!r}")
    unknown = set(data) - set(GilbertElliott.__dataclass_fields__)
    if unknown:
        raise SpecError(f"gemodel.{sorted(unknown)[0]}", "unknown gemodel key")
    for name in ("p", "r"):
        if name not in data:
            raise SpecError(f"gemodel.{name}", "missing")
    return GilbertElliott(**data)


# --- the string form --------------------------------------------------------------------

LINK_KEYS = (
    "rtt",
    "delay",
    "jitter",
    "loss",
    "gemodel",
    "rate",
    "queue",
    "seed",
    "mtu",
    "air",
    "trace_offset",
    "delay_interp",
)
"""Keys of the string form; all but rtt, mtu and air take an ``up.``/``down.`` prefix. ``air``
(one medium for both directions) takes ``air.KEY`` options instead (:data:`netem.air.AIR_KEYS`)."""


def parse_link(text: str) -> LinkSpec:
    """Parse ``"rtt=200ms,loss=14%,rate=333mbit"`` into a :class:`LinkSpec`."""
    if not isinstance(text, str):
        raise SpecError("link", f"expected a string, got {type(text).__name__}")
    both: dict[str, str] = {}
    per: dict[str, dict[str, str]] = {"up": {}, "down": {}}
    mtu: str | None = None
    air: str | None = None
    air_options: dict[str, str] = {}
    seen: set[str] = set()
    if not text.strip(" ,\t"):
        raise SpecError(
            "link", f"{text!r} is empty: give at least one key (e.g. rtt=200ms) or a preset"
        )
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        value = value.strip()
        if not sep or not value or not key:
            raise SpecError(key or "link", f"{item!r} is not key=value")
        if key in seen:
            raise SpecError(key, "given twice")
        seen.add(key)
        if key == "air":
            air = value
            continue
        if key.startswith("air."):
            air_options[key.removeprefix("air.")] = value
            continue
        direction, dot, name = key.rpartition(".")
        if not dot:
            direction, name = "", key
        if name not in LINK_KEYS:
            raise SpecError(key, f"unknown link key (known: {', '.join(LINK_KEYS)})")
        if direction and direction not in ("up", "down"):
            raise SpecError(key, "a direction prefix is 'up.' or 'down.'")
        if name == "air":  # only reached with a direction prefix
            raise SpecError(key, "the medium is one for both directions: air=..., air.KEY=...")
        if name == "mtu":
            if direction:
                raise SpecError(key, "the MTU is one for both directions")
            mtu = value
        elif name == "rtt" and direction:
            raise SpecError(key, "rtt is a round trip; give a direction its one-way 'delay'")
        elif direction:
            per[direction][name] = value
        else:
            both[name] = value
    if "rtt" in both and "delay" in both:
        raise SpecError("rtt", "give rtt or delay, not both")
    if "rtt" in both and is_trace_value(both["rtt"]):
        raise SpecError("rtt", "a round trip takes a duration; a delay trace is delay=trace:PATH")
    directions = {}
    for direction in ("up", "down"):
        merged = _merged(both, per, direction)
        try:
            directions[direction] = _parse_direction(direction, merged)
        except SpecError as err:
            if err.field.startswith(direction):
                raise
            raise SpecError(f"{direction}.{err.field}", err.reason) from None
    mtu_bytes = ETHERNET_MTU_BYTES
    if mtu is not None:
        mtu_bytes = parse_whole("mtu", mtu)
    air_spec = None if air is None and not air_options else parse_air(air, air_options)
    return LinkSpec(up=directions["up"], down=directions["down"], mtu_bytes=mtu_bytes, air=air_spec)


TRACE_OPTIONS = {"trace_offset": ("rate", "delay"), "delay_interp": ("delay",)}
"""Options of a direction's traces, and the keys whose trace they need."""


def _traced(values: dict[str, str], keys: tuple[str, ...]) -> bool:
    return any(is_trace_value(values.get(key, "")) for key in keys)


def _merged(both: dict[str, str], per: dict[str, dict[str, str]], direction: str) -> dict[str, str]:
    """One direction's keys: the unprefixed ones, overridden by its own. An unprefixed trace
    option this direction has no trace for is left out (it is the other direction's); one
    that no direction can use is refused."""
    merged = {**both, **per[direction]}
    other = {**both, **per["down" if direction == "up" else "up"]}
    for option, keys in TRACE_OPTIONS.items():
        if option not in both or option in per[direction] or _traced(merged, keys):
            continue
        if not _traced(other, keys):
            raise SpecError(option, f"has no effect: no direction has a {'/'.join(keys)} trace")
        del merged[option]
    return merged


def _parse_traces(values: dict[str, str], kwargs: dict[str, Any]) -> None:
    """The trace keys of one direction (``rate``/``delay`` as ``trace:PATH``, and options)."""
    if is_trace_value(values.get("rate", "")):
        kwargs["rate_trace"] = _open("rate", values.pop("rate"), "capacity")
    if is_trace_value(values.get("delay", "")):
        kwargs["delay_trace"] = _open("delay", values.pop("delay"), "delay")
        values.pop("rtt", None)
    if "trace_offset" in values:
        kwargs["trace_offset_s"] = parse_duration_s("trace_offset", values["trace_offset"])
    if "delay_interp" in values:
        kwargs["delay_interp"] = values["delay_interp"].lower()


def _open(key: str, value: str, kind: str) -> TraceFile:
    try:
        return open_trace(value, kind)
    except SpecError as err:
        raise SpecError(key, err.reason) from None


def _parse_direction(direction: str, values: dict[str, str]) -> DirectionSpec:
    kwargs: dict[str, Any] = {}
    values = dict(values)
    _parse_traces(values, kwargs)
    if "rtt" in values:
        if "delay" in values:
            # an unprefixed rtt and a prefixed delay: the prefixed one wins for this direction
            kwargs["delay_s"] = parse_duration_s("delay", values["delay"])
        else:
            kwargs["delay_s"] = parse_duration_s("rtt", values["rtt"]) / 2.0
    elif "delay" in values:
        kwargs["delay_s"] = parse_duration_s("delay", values["delay"])
    if "jitter" in values:
        kwargs["jitter_s"] = parse_duration_s("jitter", values["jitter"])
    if "loss" in values:
        kwargs["loss"] = parse_fraction("loss", values["loss"])
    if "gemodel" in values:
        kwargs["gemodel"] = _parse_gemodel(values["gemodel"])
    if "rate" in values:
        kwargs["rate_bps"] = parse_rate_bps("rate", values["rate"])
    if "queue" in values:
        kwargs["queue_bytes"], kwargs["queue_packets"] = parse_queue("queue", values["queue"])
    if "seed" in values:
        kwargs["seed"] = parse_whole("seed", values["seed"])
    return DirectionSpec(**kwargs)


def _parse_gemodel(text: str) -> GilbertElliott:
    parts = [p for p in text.split("/")]
    if not 1 <= len(parts) <= 4:
        raise SpecError("gemodel", "write p[/r[/1-h[/1-k]]], e.g. 1%/30%/100%/0%")
    names = ("p", "r", "loss_bad", "loss_good")
    values = [parse_probability(f"gemodel.{names[i]}", part) for i, part in enumerate(parts)]
    p = values[0]
    # netem's defaults: r = 1 - p, 1-h = 1 (lose all in bad), 1-k = 0 (lose none in good)
    r = values[1] if len(values) > 1 else 1.0 - p
    loss_bad = values[2] if len(values) > 2 else 1.0
    loss_good = values[3] if len(values) > 3 else 0.0
    return GilbertElliott(p=p, r=r, loss_bad=loss_bad, loss_good=loss_good)


def format_link(spec: LinkSpec) -> str:
    """The canonical string of a spec; ``parse_link(format_link(s)) == s`` up to rounding
    (and while its trace files are unchanged)."""
    parts: list[str] = []
    for name in ("up", "down"):
        parts += _format_direction(name, getattr(spec, name))
    if spec.mtu_bytes != ETHERNET_MTU_BYTES:
        parts.append(f"mtu={spec.mtu_bytes}")
    if spec.air is not None:
        parts.append(format_air(spec.air))
    return ",".join(parts)


def _format_direction(name: str, d: DirectionSpec) -> list[str]:
    parts = []
    if d.delay_trace is not None:
        parts.append(f"{name}.delay={d.delay_trace.text()}")
        if d.delay_interp != "step":
            parts.append(f"{name}.delay_interp={d.delay_interp}")
    else:
        parts.append(f"{name}.delay={format_duration(d.delay_s)}")
    g = d.gemodel
    written: list[tuple[str, str | None]] = [
        ("jitter", format_duration(d.jitter_s) if d.jitter_s else None),
        (
            "gemodel",
            "/".join(format_percent(v) for v in (g.p, g.r, g.loss_bad, g.loss_good))
            if g is not None
            else None,
        ),
        ("loss", format_percent(d.loss) if g is None and d.loss else None),
        ("rate", format_rate(d.rate_bps) if d.rate_bps is not None else None),
        ("rate", d.rate_trace.text() if d.rate_trace is not None else None),
        ("trace_offset", format_duration(d.trace_offset_s) if d.trace_offset_s else None),
        ("queue", f"{d.queue_bytes}b" if d.queue_bytes is not None else None),
        ("queue", f"{d.queue_packets}p" if d.queue_packets is not None else None),
        ("seed", str(d.seed)),
    ]
    return parts + [f"{name}.{key}={text}" for key, text in written if text is not None]


# --- presets: measured paths, each citing its source (docs/design.md, "Reference paths") ---

PRESETS: dict[str, str] = {
    # Guiyang-Irvine, as published with Queqiao: RTT 197-207 ms (min 185.9), ~14 %
    # independent loss downstream at every offered rate 1-300 Mbit/s, 0 loss upstream
    # (0 of 41,663 packets at 50 Mbit/s), capacity knee about 333 Mbit/s.
    "dc-longhaul": "rtt=200ms,rate=333mbit,down.loss=14%",
    # The same path without its random loss: the connection-reuse experiments' path.
    "dc-longhaul-clean": "rtt=200ms,rate=333mbit",
    # Access link: about 42 % independent loss below a knee near 14.5 Mbit/s.
    "wan-access": "rtt=200ms,rate=14.5mbit,loss=42%",
    # The agent's sites (the chapter's §12.5, issue 13): a nearby workstation, 80 Mbit/s up
    # and 20 ms, and the cloud, 6.4 Mbit/s up and 200 ms. The chapter states the uplinks; the
    # downlinks carry only the small action and are set equal here.
    "near": "rtt=20ms,rate=80mbit",
    "cloud": "rtt=200ms,rate=6.4mbit",
}
"""Named paths; ``resolve_link("dc-longhaul")`` expands one, extra keys may follow it (the
experiment files and ``testbed link up`` resolve them; ``parse_link`` takes key=value pairs
only)."""


def resolve_link(text: str) -> LinkSpec:
    """A preset name, a link string, or a preset name followed by overriding keys (the one
    override rule: :func:`merge_link`)."""
    head, _, rest = text.partition(",")
    if head.strip() in PRESETS:
        return parse_link(merge_link(PRESETS[head.strip()], rest))
    return parse_link(text)


def _link_items(text: str) -> list[tuple[str, str]]:
    head, _, rest = text.partition(",")
    if head.strip() in PRESETS:
        text = merge_link(PRESETS[head.strip()], rest)
    items = []
    for part in text.split(","):
        if part.strip():
            key, _, value = part.partition("=")
            items.append((key.strip().lower(), value.strip()))
    return items


def _key_name(key: str) -> str:
    """The key without its direction; ``air`` and ``air.*`` keys (one medium) are whole."""
    return key if key == "air" or key.startswith("air.") else key.rpartition(".")[2]


def merge_link(base: str, overrides: str) -> str:
    """``base`` (a preset or link string) with the keys of ``overrides`` replacing its own:
    the one rule by which a preset takes extra keys and an experiment's level changes its
    fixed link.

    An unprefixed key replaces the same key of both directions (``loss`` drops
    ``down.loss``); a per-direction key replaces only its direction (an unprefixed base key
    is split so the other direction keeps it); ``rtt`` replaces every ``delay`` and the
    other way round.
    """
    over = _link_items(overrides) if overrides.strip() else []
    over_keys = {k for k, _ in over}
    over_names = {_key_name(k) for k, _ in over}
    kept = []
    for key, value in _link_items(base) if base.strip() else []:
        name = _key_name(key)
        prefixed = key.startswith(("up.", "down."))
        if key in over_keys:
            continue
        if prefixed and name in over_keys:
            continue  # unprefixed override covers both directions
        if not prefixed and name in over_names and name not in ("rtt", "mtu"):
            # a per-direction override of an unprefixed base key: keep the base for the
            # other direction by splitting it
            for direction in ("up", "down"):
                if f"{direction}.{name}" not in over_keys:
                    kept.append((f"{direction}.{name}", value))
            continue
        if name == "rtt" and over_names & {"delay"}:
            for direction in ("up", "down"):
                if f"{direction}.delay" not in over_keys and "delay" not in over_keys:
                    kept.append((f"{direction}.delay", _half(value)))
            continue
        if name == "delay" and "rtt" in over_keys:
            continue
        kept.append((key, value))
    return ",".join(f"{k}={v}" for k, v in [*kept, *over])


def _half(rtt: str) -> str:
    return f"{parse_duration_s('rtt', rtt) / 2.0 * 1e3:g}ms"
