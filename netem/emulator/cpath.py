"""The emulator's per-packet path in C (``netem.emulator._cpath``, sources in ``csrc/``),
configured from the same specs and events as the Python core.

The C path runs the pipeline of :mod:`netem.emulator.core` (loss draw, drop-tail queue and
serialisation, loss applied, delay and jitter, outages and rate changes) and the shared
medium of :mod:`netem.emulator.medium`, with the same arithmetic in the same order on the
same generators: the loss, jitter and backoff generators are CPython's Mersenne Twister,
handed over as :meth:`random.Random.getstate` of the very generators the Python core would
seed (:func:`netem.emulator.loss.loss_rng`, :func:`~netem.emulator.loss.jitter_rng`,
``air:SEED``). One seed and one input give the same drops and the same departure times.

:class:`CPath` is sans-I/O when driven with :meth:`CPath.receive`, :meth:`CPath.pop_due`
and :meth:`CPath.next_deadline` (each takes ``now``), which is how the tests compare it
with the Python core packet for packet. The packet thread that moves real packets lives
in C as well (``csrc/loop.c``); :mod:`netem.emulator.cengine` starts it and answers
control commands.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from netem.air import AirSpec
from netem.emulator.core import trace_info
from netem.emulator.loss import jitter_rng, loss_rng
from netem.emulator.packetlog import PacketLog
from netem.events import ScheduledEvent, ScheduledOutage
from netem.linkspec import DirectionSpec, LinkSpec
from netem.stats import AirStats, DirectionStats
from tbcore.errors import SpecError

try:
    from netem.emulator import _cpath
except ImportError:  # not built: harness/install.sh builds it
    _cpath = None

DIRECTION_INDEX = {"up": 0, "down": 1}
LOSS_KINDS = {"none": 0, "bernoulli": 1, "gemodel": 2}
"""csrc/cpath.h: LOSS_NONE, LOSS_BERNOULLI, LOSS_GE."""
SLOT_HEADROOM_BYTES = 64
"""Room in each packet slot beyond the MTU (the slots hold IP packets of at most the MTU;
a larger one that is not a TCP super-packet is refused as a queue drop, and logged)."""
MAX_AMPDU_FRAMES = 256
"""csrc/medium.c: most frames one A-MPDU exchange gathers (802.11n's 64-frame BlockAck
window fits; the C path refuses a spec beyond it rather than cut the aggregate short)."""
LOG_MEMORY_LIMIT_BYTES = 512 * 2**20
"""As :data:`netem.emulator.packetlog.DEFAULT_MEMORY_LIMIT_BYTES`."""


def available() -> bool:
    """Whether the C path is built (``harness/install.sh`` builds it with pip)."""
    return _cpath is not None


def require() -> None:
    if _cpath is None:
        raise SpecError(
            "path", "the C packet path is not built (run harness/install.sh), or use --path python"
        )


def rng_state(rng: random.Random) -> tuple[int, ...]:
    """The Mersenne Twister state (624 words and the index) the C path continues from."""
    return rng.getstate()[1]


C_PATH_FIELDS: dict[str, str | None] = {
    "delay_s": None,
    "jitter_s": None,
    "loss": None,
    "gemodel": None,
    "rate_bps": None,
    "queue_bytes": None,
    "queue_packets": None,
    "seed": None,
    "rate_trace": None,
    "delay_trace": None,
    "delay_interp": None,
    "trace_offset_s": None,
}
"""Every :class:`~netem.linkspec.DirectionSpec` field, as the C path takes it: None where it
applies it (queue_bytes and queue_packets through the byte limit the spec resolves), or why
not: a field set to anything but its default is then refused in one line, never run as if
it were not there. A field missing from this table is refused too (tests/test_emulator_cpath
checks the table against the dataclass), so a new impairment cannot be accepted and dropped."""


def refused_fields(direction: str, spec: DirectionSpec) -> None:
    """SpecError for the first field of ``spec`` the C path would not apply."""
    for item in dataclasses.fields(spec):
        value = getattr(spec, item.name)
        default = item.default
        if value == default:
            continue
        if item.name not in C_PATH_FIELDS:
            raise SpecError(f"{direction}.{item.name}", "the C packet path does not apply it")
        why = C_PATH_FIELDS[item.name]
        if why is not None:
            raise SpecError(f"{direction}.{item.name}", why)


@dataclass(frozen=True)
class DirectionConfig:
    """One direction's spec as the C path takes it."""

    loss_kind: int
    loss_p: float
    gemodel: tuple[float, float, float, float]
    loss_state: tuple[int, ...]
    jitter_state: tuple[int, ...]
    delay_s: float
    jitter_s: float
    rate_bps: float | None
    queue_limit_bytes: int | None

    @classmethod
    def of(cls, direction: str, spec: DirectionSpec, queue_limit: int | None) -> DirectionConfig:
        """What :meth:`netem.emulator.core.LinkDirection.set_spec` sets up, for C (its
        traces: :meth:`CPath.set_traces`)."""
        refused_fields(direction, spec)
        if spec.gemodel is not None:
            g = spec.gemodel
            kind, gemodel = "gemodel", (g.p, g.r, g.loss_bad, g.loss_good)
        else:
            kind, gemodel = ("bernoulli" if spec.loss > 0.0 else "none"), (0.0, 0.0, 0.0, 0.0)
        return cls(
            loss_kind=LOSS_KINDS[kind],
            loss_p=float(spec.loss),
            gemodel=tuple(float(v) for v in gemodel),  # type: ignore[arg-type]
            loss_state=rng_state(loss_rng(direction, spec.seed)),
            jitter_state=rng_state(jitter_rng(direction, spec.seed)),
            delay_s=float(spec.delay_s),
            jitter_s=float(spec.jitter_s),
            rate_bps=None if spec.rate_bps is None else float(spec.rate_bps),
            queue_limit_bytes=queue_limit,
        )


def medium_args(air: AirSpec) -> tuple:
    """:class:`netem.emulator.medium.Medium`'s parameters, its PHY arithmetic done here
    (:mod:`netem.air`): the C path only counts symbols at the data rate."""
    if air.ampdu_frames > MAX_AMPDU_FRAMES:
        raise SpecError(
            "air.ampdu",
            f"{air.ampdu_frames} frames: the C path gathers at most 256 (--path python)",
        )
    return (
        air.access_ns,
        air.sifs_ns,
        air.slot_ns,
        air.ack_ppdu_ns,
        air.block_ack_ppdu_ns,
        round(air.preamble_s * 1e9) + round(air.signal_s * 1e9),
        round(air.symbol_s * 1e9),
        round(air.data_rate_bps * air.symbol_s),
        air.mac_overhead_bytes,
        air.cw_min,
        air.ampdu_frames,
        air.queue_packets,
        air.backoff,
        air.order == "alternate",
        rng_state(random.Random(f"air:{air.seed}")),
    )


class CPath:
    """Both directions of one link in C, configured from a :class:`LinkSpec`."""

    def __init__(self, spec: LinkSpec, origin_s: float = 0.0) -> None:
        """``origin_s``: when the spec's traces are at their offset (CLOCK_MONOTONIC)."""
        require()
        assert _cpath is not None
        self.native = _cpath.Path(spec.mtu_bytes + SLOT_HEADROOM_BYTES)
        self.spec = spec
        self.has_medium = spec.air is not None
        self.trace_origin_s = origin_s
        self.set_spec(spec, origin_s)

    def set_spec(self, spec: LinkSpec, origin_s: float = 0.0) -> None:
        """A new spec at ``origin_s``: generators restart from its seeds, traces from their
        offset; packets in flight keep their times, and a new capacity trace's opportunities
        start once the packets queued before have left (:meth:`LinkDirection.set_spec`,
        :meth:`Medium.set_spec`)."""
        if (spec.air is not None) != self.has_medium:
            state = "with" if self.has_medium else "without"
            raise SpecError(
                "air", f"this link came up {state} air=; a medium cannot come or go while it is up"
            )
        medium = None if spec.air is None else medium_args(spec.air)
        configs = {
            name: DirectionConfig.of(name, getattr(spec, name), spec.queue_limit_bytes(name))
            for name in DIRECTION_INDEX
        }
        if medium is not None:
            self.native.set_medium(*medium)
        for name, c in configs.items():
            self.native.set_direction(
                DIRECTION_INDEX[name],
                c.loss_kind,
                c.loss_p,
                c.gemodel,
                c.loss_state,
                c.jitter_state,
                c.delay_s,
                c.jitter_s,
                c.rate_bps,
                c.queue_limit_bytes,
            )
            self.set_traces(name, getattr(spec, name), origin_s)
        self.spec = spec
        self.trace_origin_s = origin_s

    def set_traces(self, direction: str, spec: DirectionSpec, origin_s: float) -> None:
        """The direction's capacity and delay traces (or none) on a clock started at
        ``origin_s`` (:class:`netem.emulator.tracelink.TraceServer`, ``DelayCurve``)."""
        stamps = None if spec.rate_trace is None else spec.rate_trace.capacity.stamps_ms
        delay = None if spec.delay_trace is None else spec.delay_trace.delay
        self.native.set_traces(
            DIRECTION_INDEX[direction],
            origin_s,
            float(spec.trace_offset_s),
            stamps,
            None if delay is None else delay.times_ms,
            None if delay is None else delay.delays_ms,
            0.0 if delay is None else float(delay.period_ms),
            spec.delay_interp == "linear",
        )

    def trace_info(self, direction: str) -> dict[str, object] | None:
        """As :meth:`netem.emulator.core.LinkDirection.trace_info`."""
        return trace_info(getattr(self.spec, direction), self.trace_origin_s)

    # --- events ---------------------------------------------------------------------------

    def add_event(self, index: int, event: ScheduledEvent) -> None:
        """Event ``index`` of the engine's list, to the directions it concerns (every
        direction gets a timeline, as every Python core does)."""
        for name, dir_index in DIRECTION_INDEX.items():
            self.native.timeline(dir_index, True)
            if name in event.directions:
                self.native.add_event(
                    dir_index,
                    index,
                    isinstance(event, ScheduledOutage),
                    event.start_s,
                    event.end_s,
                    event.rate_bps or 0.0,
                )

    def set_event_end(self, index: int, end_s: float) -> None:
        self.native.set_event_end(index, end_s)

    def fill_drops(self, index: int, event: ScheduledEvent) -> None:
        """Put the packets outage ``index`` dropped into ``event.dropped_packets``."""
        for name, count in zip(DIRECTION_INDEX, self.native.event_drops(index), strict=True):
            if count:
                event.dropped_packets[name] = count

    # --- sans-I/O ---------------------------------------------------------------------------

    def receive(self, direction: str, now: float, packet: bytes) -> None:
        self.native.receive(DIRECTION_INDEX[direction], now, packet)

    def pop_due(self, direction: str, now: float) -> list[bytes]:
        return self.native.pop_due(DIRECTION_INDEX[direction], now)

    def next_deadline(self, direction: str) -> float | None:
        return self.native.next_deadline(DIRECTION_INDEX[direction])

    # --- accounts ---------------------------------------------------------------------------

    def stats(self, direction: str) -> DirectionStats:
        return DirectionStats(**self.native.stats(DIRECTION_INDEX[direction]))

    def air_stats(self, now: float) -> AirStats | None:
        """:meth:`Medium.snapshot`: exchanges due by ``now`` started, the rest ahead."""
        data = self.native.air_stats(now)
        return None if data is None else AirStats(**data)

    def log_start(self, direction: str) -> None:
        self.native.log_start(DIRECTION_INDEX[direction], LOG_MEMORY_LIMIT_BYTES)

    def log_take(self, direction: str) -> PacketLog:
        """The records so far as a :class:`PacketLog` (same binary records); logging stops."""
        data, _, dropped = self.native.log_take(DIRECTION_INDEX[direction])
        log = PacketLog(direction)
        log.data = bytearray(data)
        log.dropped_records = dropped
        return log
