"""Two aioquic connections joined by an emulated path in memory, on a fake clock.

Each direction is a bottleneck: Bernoulli loss (seeded), a drop-tail byte queue served at
``rate_bytes_per_s``, then a fixed one-way delay (the testbed emulator's model, netem/).
The loop jumps from one event to the next (a datagram's arrival, either end's timer), so a
transfer of many round trips takes the CPU time of the packets, not the path's time. Both
ends are built by :func:`proto.quic.edge.make_quic_connection`, so the congestion control, its
ACK hook and its pacer are the ones a real run has; after every ``datagrams_to_send`` the
sender's app-limited check runs, as ``WatchedProtocol.transmit`` does.
"""

from __future__ import annotations

import functools
import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aioquic.quic import events
from aioquic.quic.connection import QuicConnection

from proto.quic.edge import app_limited_check, make_quic_configuration, make_quic_connection
from proto.tls import ensure_certificate

TIMER_LATENESS_S = 1e-6
"""A timer fires this long after its time, as an event loop's never fires early: aioquic
paces an ACK due exactly ``now`` (``ack_at >= now``), so an exact timer would spin."""
CLIENT_ADDR = ("198.18.1.2", 40000)
SERVER_ADDR = ("198.18.2.2", 4433)


@dataclass
class Direction:
    """One direction of the path."""

    rate_bytes_per_s: float
    delay_s: float
    loss: float = 0.0
    queue_bytes: int | None = None
    seed: int = 1
    free_at_s: float = 0.0
    sent: int = 0
    dropped: int = 0

    @functools.cached_property
    def rng(self) -> random.Random:
        """The loss draws, from ``seed``."""
        return random.Random(self.seed)

    def arrival_s(self, now: float, size_bytes: int) -> float | None:
        """When a datagram handed to the path at ``now`` arrives (None: lost or dropped)."""
        self.sent += 1
        if self.loss and self.rng.random() < self.loss:
            self.dropped += 1
            return None
        start = max(now, self.free_at_s)
        if (
            self.queue_bytes is not None
            and (start - now) * self.rate_bytes_per_s > self.queue_bytes
        ):
            self.dropped += 1
            return None
        self.free_at_s = start + size_bytes / self.rate_bytes_per_s
        return self.free_at_s + self.delay_s


@dataclass
class QuicPath:
    """A client and a server connection and the path between them."""

    client: QuicConnection
    server: QuicConnection
    up: Direction
    down: Direction
    now: float = 0.0
    _wire: list[tuple[float, int, bool, bytes]] = field(default_factory=list)
    _seq: int = 0
    _checks: dict[bool, Callable[[], None] | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._checks = {
            True: app_limited_check(self.client),
            False: app_limited_check(self.server),
        }

    def connect(self) -> None:
        self.client.connect(SERVER_ADDR, now=self.now)
        self.flush(True)

    def flush(self, from_client: bool) -> None:
        """Hand what one end has to send to its direction of the path."""
        conn = self.client if from_client else self.server
        direction = self.up if from_client else self.down
        for data, _addr in conn.datagrams_to_send(now=self.now):
            at = direction.arrival_s(self.now, len(data))
            if at is not None:
                self._seq += 1
                heapq.heappush(self._wire, (at, self._seq, not from_client, data))
        check = self._checks[from_client]
        if check is not None:
            check()

    def _next_event_s(self) -> float | None:
        timers = (self.client.get_timer(), self.server.get_timer())
        times = [t + TIMER_LATENESS_S for t in timers if t is not None]
        if self._wire:
            times.append(self._wire[0][0])
        return min(times) if times else None

    def step(self) -> bool:
        """Advance to the next event and handle it; False when nothing is left to happen."""
        at = self._next_event_s()
        if at is None:
            return False
        self.now = max(self.now, at)
        touched = set()
        while self._wire and self._wire[0][0] <= self.now:
            _t, _seq, to_client, data = heapq.heappop(self._wire)
            conn = self.client if to_client else self.server
            conn.receive_datagram(data, SERVER_ADDR if to_client else CLIENT_ADDR, now=self.now)
            touched.add(to_client)
        for is_client, conn in ((True, self.client), (False, self.server)):
            timer = conn.get_timer()
            if timer is not None and timer <= self.now:
                conn.handle_timer(now=self.now)
                touched.add(is_client)
        for is_client in (True, False):
            if is_client in touched:
                self.flush(is_client)
        return True

    def run(self, done: Callable[[], bool], limit_s: float) -> None:
        """Step until ``done()`` or ``limit_s`` of fake time."""
        while not done() and self.now < limit_s and self.step():
            pass


def make_path(
    tmp_path: Path,
    *,
    cc: str,
    rtt_s: float,
    rate_bps: float,
    down_loss: float = 0.0,
    queue_bytes: int | None = None,
    max_datagram_size: int = 1200,
    seed: int = 1,
    **server_kwargs: Any,
) -> QuicPath:
    """A connected-to-be pair with ``cc`` at both ends over a symmetric path."""
    paths = ensure_certificate(tmp_path / "tls")
    server_configuration = make_quic_configuration(
        is_client=False, cc=cc, max_datagram_size=max_datagram_size
    )
    server_configuration.load_cert_chain(paths.cert, paths.key)
    client_configuration = make_quic_configuration(
        is_client=True, cc=cc, max_datagram_size=max_datagram_size
    )
    client_configuration.verify_mode = 0
    client = make_quic_connection(client_configuration, None)
    server = make_quic_connection(
        server_configuration,
        None,
        original_destination_connection_id=client.original_destination_connection_id,
        **server_kwargs,
    )
    rate = rate_bps / 8
    return QuicPath(
        client,
        server,
        up=Direction(rate, rtt_s / 2, 0.0, queue_bytes, seed),
        down=Direction(rate, rtt_s / 2, down_loss, queue_bytes, seed + 1),
    )


@dataclass
class Download:
    """The server sends ``size_bytes`` on one stream once the handshake is done."""

    path: QuicPath
    size_bytes: int
    received: bytearray = field(default_factory=bytearray)
    done_at_s: float | None = None
    _stream_id: int | None = None

    def start(self) -> None:
        self.path.connect()

    def poll(self) -> bool:
        """Handle both ends' events; True once every byte has arrived."""
        path = self.path
        while (event := path.server.next_event()) is not None:
            if isinstance(event, events.HandshakeCompleted) and self._stream_id is None:
                self._stream_id = path.server.get_next_available_stream_id(is_unidirectional=True)
                payload = bytes(i % 251 for i in range(self.size_bytes))
                path.server.send_stream_data(self._stream_id, payload, end_stream=True)
                path.flush(False)
        while (event := path.client.next_event()) is not None:
            if isinstance(event, events.StreamDataReceived):
                self.received += event.data
                if event.end_stream:
                    self.done_at_s = path.now
        return self.done_at_s is not None

    def run(self, limit_s: float) -> None:
        self.start()
        while not self.poll() and self.path.now < limit_s and self.path.step():
            pass
