"""The shared medium of an ``air=`` link, sans-I/O: both directions take turns on it.

Where it sits in the pipeline
=============================
Per direction, a packet read from the sender at ``t`` goes::

    medium (queue per direction, one exchange at a time for both)  ->  wired part
    (loss draw, drop-tail queue + rate, loss applied, delay + jitter: netem.emulator.core)

The medium is the first hop of each direction (the sender's own wireless hop) and the rest
of the link string (``rtt``, ``loss``, ``rate``, ``queue``) is the wired remainder of the
path behind it. Consequences, chosen on purpose:

* every frame offered is carried over the air (a wired loss is a loss behind the wireless
  hop, whose MAC ACK has already been sent), so medium time counts frames later lost;
* the medium sees each frame at the instant the emulator read it (no timer in between),
  so the direction order (FIFO by arrival) is decided on exact arrival times;
* the wired stage receives the frame when its data PPDU ends, and the wired stage's
  release (and its lateness statistics) stay what they are on any link.

The price: for the ``down`` direction the medium sits at the server's end of the wired
delay instead of the client's (an AP at the client). The airtime and the contention are the
same; only the phase of the one-way wired delay relative to the contention moves, which on
the short wired path this hop is meant for (a few ms against tens of ms of transfer) does
not change which frames contend.

The exchange
============
A frame of ``n`` IP bytes that reaches the head of the medium at ``t0`` (the medium free,
the direction chosen by the order policy) occupies the medium from ``t0`` for
``access + PPDU(n) + SIFS + ACK PPDU`` (:mod:`netem.air`); it is handed to the wired stage
at ``t0 + access + PPDU(n)`` (the end of its data PPDU, when the receiver has it). With
``ampdu_frames > 1``, frames of the chosen direction already waiting at ``t0`` join one
A-MPDU answered by a BlockAck. The backoff, when on, adds ``k * slot`` to the access with
``k`` drawn from a seeded generator; collisions are not modelled (two stations, each
waiting its turn).

Order policies (:data:`netem.air.ORDERS`): ``fifo`` serves the frame that arrived first
(ties: up); ``alternate`` serves the other direction than the last exchange when both wait.

Decisions are taken lazily, when :meth:`Medium.advance` is called with a ``now`` past the
next start: the scheduled times are used, never ``now``, so the medium's timing does not
depend on when a pump woke (a decision taken late only matters if the frame's wired
departure has already passed, which the wired delay makes rare). A direction with frames
waiting reports the next start as a deadline (:meth:`AirDirection.next_deadline`), so its
pump is awake for the decision that may start them.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from netem.air import ACK_ONLY_MAX_IP_BYTES, AirSpec
from netem.emulator.core import DROP_QUEUE, LinkDirection, PacketRecorder
from netem.linkspec import DirectionSpec, LinkSpec
from netem.stats import AirStats, DirectionStats
from tbcore.errors import SpecError

IPPROTO_TCP = 6


def frame_kind(packet: bytes) -> str:
    """``ack`` for an ACK-only frame, ``data`` otherwise.

    TCP (IPv4 or IPv6 without extension headers) exactly: a segment without payload is
    ACK-only (SYN and FIN without data included). Anything else by size: at most
    :data:`~netem.air.ACK_ONLY_MAX_IP_BYTES` IP bytes is ACK-only (QUIC's packets are
    encrypted; its ACK-only packets are small, its bulk data packets full).
    """
    size = len(packet)
    if size >= 20:
        version = packet[0] >> 4
        if version == 4 and packet[9] == IPPROTO_TCP:
            ihl = (packet[0] & 0x0F) * 4
            if size >= ihl + 13:
                total = int.from_bytes(packet[2:4], "big")
                return "ack" if total - ihl - (packet[ihl + 12] >> 4) * 4 <= 0 else "data"
        elif version == 6 and size >= 53 and packet[6] == IPPROTO_TCP:
            payload = int.from_bytes(packet[4:6], "big")
            return "ack" if payload - (packet[52] >> 4) * 4 <= 0 else "data"
    return "ack" if size <= ACK_ONLY_MAX_IP_BYTES else "data"


Sink = Callable[[float, bytes], None]


class Medium:
    """One medium for both directions: their queues, the exchange in progress, the accounts."""

    def __init__(self, air: AirSpec) -> None:
        self.stats = AirStats()
        self._queues: dict[str, deque[tuple[float, bytes]]] = {"up": deque(), "down": deque()}
        """(arrival, packet) of the frames waiting for the medium, per direction."""
        self._sinks: dict[str, Sink] = {}
        self._free_s = float("-inf")
        """When the exchange in progress (or the last one) ends."""
        self._last = "down"
        """Direction of the last exchange (``alternate`` starts with up)."""
        self._exchange_cache: dict[int, tuple[int, int]] = {}
        self.set_spec(air)

    def set_spec(self, air: AirSpec) -> None:
        """Take new parameters; waiting frames keep their places, the backoff draws restart."""
        self.air = air
        self._rng = random.Random(f"air:{air.seed}")
        self._exchange_cache.clear()

    def attach(self, direction: str, sink: Sink) -> None:
        """Where frames of ``direction`` go when their data PPDU ends: ``sink(t, packet)``."""
        self._sinks[direction] = sink

    # --- input ---------------------------------------------------------------------------

    def offer(self, direction: str, now: float, packet: bytes) -> bool:
        """Queue one frame that arrived at ``now``; False if the direction's queue is full."""
        queue = self._queues[direction]
        if len(queue) >= self.air.queue_packets:
            self.stats.dropped[direction] += 1
            return False
        queue.append((now, packet))
        self.advance(now)
        return True

    # --- time ----------------------------------------------------------------------------

    def next_start_s(self, direction: str) -> float | None:
        """When the next exchange may start, if ``direction`` has frames waiting."""
        queue = self._queues[direction]
        if not queue:
            return None
        other = self._queues["down" if direction == "up" else "up"]
        earliest = queue[0][0] if not other else min(queue[0][0], other[0][0])
        return max(self._free_s, earliest)

    def snapshot(self, now: float) -> AirStats:
        """The accounts as of ``now``: exchanges due by ``now`` started first (the pumps start
        them lazily, when they next run), then a copy, with the rest of an exchange in progress
        in ``ahead_ns`` so that busy time neither lags nor runs ahead of the clock."""
        self.advance(now)
        snap = AirStats(**{name: dict(value) for name, value in vars(self.stats).items()})
        if self._free_s > now:
            snap.ahead_ns[self._last] = round((self._free_s - now) * 1e9)
        return snap

    def waiting(self, direction: str) -> int:
        return len(self._queues[direction])

    def advance(self, now: float) -> None:
        """Start every exchange whose start time has come by ``now``, at its scheduled time."""
        up, down = self._queues["up"], self._queues["down"]
        while up or down:
            earliest = min(up[0][0], down[0][0]) if up and down else (up or down)[0][0]
            start = self._free_s if self._free_s > earliest else earliest
            if start > now:
                return
            up_ready = bool(up) and up[0][0] <= start
            down_ready = bool(down) and down[0][0] <= start
            if up_ready and down_ready:
                if self.air.order == "alternate":
                    direction = "down" if self._last == "up" else "up"
                else:
                    direction = "up" if up[0][0] <= down[0][0] else "down"
            else:
                direction = "up" if up_ready else "down"
            self._exchange(direction, start)

    def _single(self, size: int) -> tuple[int, int]:
        """(ns from start to the end of the data PPDU, ns of the whole exchange) w/o backoff."""
        cached = self._exchange_cache.get(size)
        if cached is None:
            air = self.air
            to_end = air.access_ns + air.data_ppdu_ns(size)
            cached = (to_end, to_end + air.sifs_ns + air.ack_ppdu_ns)
            self._exchange_cache[size] = cached
        return cached

    def _exchange(self, direction: str, start: float) -> None:
        air = self.air
        queue = self._queues[direction]
        frames = [queue.popleft()]
        while len(frames) < air.ampdu_frames and queue and queue[0][0] <= start:
            frames.append(queue.popleft())
        backoff_ns = air.slot_ns * self._rng.randint(0, air.cw_min) if air.backoff else 0
        if len(frames) == 1:
            to_end, total = self._single(len(frames[0][1]))
        else:
            to_end = air.access_ns + air.ampdu_ppdu_ns([len(p) for _, p in frames])
            total = to_end + air.sifs_ns + air.block_ack_ppdu_ns
        to_end += backoff_ns
        total += backoff_ns
        self._free_s = start + total * 1e-9
        self._last = direction
        delivered = start + to_end * 1e-9
        st = self.stats
        st.exchanges[direction] += 1
        sizes = [len(p) for _, p in frames]
        all_bytes = sum(sizes)
        left = total
        sink = self._sinks[direction]
        for index, (arrival, packet) in enumerate(frames):
            key = f"{direction}.{frame_kind(packet)}"
            share = left if index == len(frames) - 1 else total * sizes[index] // all_bytes
            left -= share
            st.frames[key] += 1
            st.ip_bytes[key] += sizes[index]
            st.busy_ns[key] += share
            st.wait_ns[direction] += round((start - arrival) * 1e9)
            sink(delivered, packet)


class AirDirection:
    """One direction of an ``air=`` link: the shared medium, then the wired
    :class:`~netem.emulator.core.LinkDirection`. Same interface as a LinkDirection, so the
    engine's pumps drive it unchanged."""

    def __init__(self, wired: LinkDirection, medium: Medium) -> None:
        self.wired = wired
        self.medium = medium
        self.direction = wired.direction
        medium.attach(self.direction, wired.receive)

    def __getattr__(self, name: str) -> Any:
        """Everything else (scheduled events, say) is the wired stage's."""
        if name == "wired":  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.wired, name)

    @property
    def stats(self) -> DirectionStats:
        """The direction's counters; a frame the medium queue refused is a queue drop."""
        return self.wired.stats

    @property
    def recorder(self) -> PacketRecorder | None:
        return self.wired.recorder

    @recorder.setter
    def recorder(self, value: PacketRecorder | None) -> None:
        self.wired.recorder = value

    @property
    def spec(self) -> DirectionSpec:
        return self.wired.spec

    def set_spec(
        self, spec: DirectionSpec, queue_limit_bytes: int | None, now: float = 0.0
    ) -> None:
        self.wired.set_spec(spec, queue_limit_bytes, now)

    def receive(self, now: float, packet: bytes) -> None:
        if not self.medium.offer(self.direction, now, packet):
            st = self.wired.stats
            st.packets_in += 1
            st.bytes_in += len(packet)
            st.dropped_queue += 1
            st.bytes_dropped_queue += len(packet)
            if self.wired.recorder is not None:
                self.wired.recorder.dropped(now, DROP_QUEUE, packet)

    def next_deadline(self) -> float | None:
        wired = self.wired.next_deadline()
        start = self.medium.next_start_s(self.direction)
        if start is None:
            return wired
        return start if wired is None or start < wired else wired

    def pop_due(self, now: float) -> list[bytes]:
        self.medium.advance(now)
        return self.wired.pop_due(now)

    @property
    def in_flight_packets(self) -> int:
        return self.wired.in_flight_packets + self.medium.waiting(self.direction)


def make_cores(spec: LinkSpec, now: float = 0.0) -> dict[str, LinkDirection | AirDirection]:
    """The two directions of ``spec`` (its traces start at ``now``): plain, or sharing one
    :class:`Medium` with ``air=``."""
    cores: dict[str, Any] = {
        name: LinkDirection(name, getattr(spec, name), spec.queue_limit_bytes(name), now)
        for name in ("up", "down")
    }
    if spec.air is None:
        return cores
    medium = Medium(spec.air)
    return {name: AirDirection(core, medium) for name, core in cores.items()}


def _media(cores: Iterable[object]) -> list[Medium]:
    media: list[Medium] = []
    for core in cores:
        if isinstance(core, AirDirection) and core.medium not in media:
            media.append(core.medium)
    return media


def set_medium_spec(cores: Iterable[object], spec: LinkSpec) -> None:
    """Apply ``spec.air`` to the medium of these cores (a live ``set_spec``)."""
    media = _media(cores)
    if bool(media) != (spec.air is not None):
        state = "with" if media else "without"
        raise SpecError(
            "air", f"this link came up {state} air=; a medium cannot come or go while it is up"
        )
    for medium in media:
        assert spec.air is not None
        medium.set_spec(spec.air)


def medium_snapshot(cores: Iterable[object], now: float) -> dict[str, Any] | None:
    """The medium's cumulative accounts as of ``now`` (``AirStats.to_dict()``), or None
    without one."""
    media = _media(cores)
    return media[0].snapshot(now).to_dict() if media else None
