"""proto.quic.adapter: every aioquic internal it lists exists, with the type the adapter
relies on, on real objects made the way the testbed makes them; and each adapter function
works on a real connection (two endpoints in memory with a fake clock, as aioquic's own tests
do, and two protocols over loopback UDP). An aioquic upgrade that moves or renames one of
them fails here."""

from __future__ import annotations

import asyncio
import inspect
import socket
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from aioquic import tls
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.asyncio.server import QuicServer, serve
from aioquic.h3.connection import H3Connection
from aioquic.quic import events
from aioquic.quic.connection import QuicConnection, QuicConnectionState
from aioquic.quic.logger import QuicLoggerTrace
from aioquic.quic.stream import QuicStreamSender

from proto.priority import POLICY_FIFO, Scheduler
from proto.quic import adapter
from proto.quic.adapter import (
    INTERNALS,
    AdaptedProtocol,
    FixedWindowQuicConnection,
    MonotonicProtocol,
    QuicCongestionControl,
    QuicPacketPacer,
    QuicPacketRecovery,
    ScheduledFixedWindowQuicConnection,
    ScheduledList,
    ScheduledQuicConnection,
    ScheduledStreamsMixin,
    WindowedQuicConnection,
)
from proto.quic.bbr import BbrCongestionControl
from proto.quic.edge import RatePacer, make_quic_configuration, make_quic_connection
from proto.tls import ensure_certificate
from tbcore.ackpolicy import parse_ack_policy

CLIENT_ADDR = ("1.2.3.4", 1234)
SERVER_ADDR = ("2.3.4.5", 4433)
ONE_WAY_S = 0.02
"""The in-memory path's one-way delay (fake clock)."""
DATAGRAM_BYTES = 1350
WINDOW_BYTES = 200_000
LOOPBACK_TIMEOUT_S = 10.0


def pair(tmp_path: Path, **client_kwargs: Any) -> tuple[QuicConnection, QuicConnection]:
    """A client and a server made by make_quic_configuration / make_quic_connection, with
    qlog, BBR, a fixed window and a scheduler: every internal the adapter touches in use."""
    paths = ensure_certificate(tmp_path / "tls")
    common = {"cc": "bbr", "max_datagram_size": DATAGRAM_BYTES, "fixed_window_bytes": WINDOW_BYTES}
    server_configuration = make_quic_configuration(
        is_client=False, qlog_dir=tmp_path / "qlog", **common
    )
    server_configuration.load_cert_chain(paths.cert, paths.key)
    client_configuration = make_quic_configuration(is_client=True, **common)
    client_configuration.verify_mode = 0
    client = make_quic_connection(
        client_configuration, WINDOW_BYTES, scheduler=Scheduler(POLICY_FIFO), **client_kwargs
    )
    server = make_quic_connection(
        server_configuration,
        WINDOW_BYTES,
        original_destination_connection_id=client.original_destination_connection_id,
    )
    return client, server


def step(client: QuicConnection, server: QuicConnection, now: float, drop: bool = False) -> float:
    """Client's datagrams to the server (lost when ``drop``), then the server's back, each
    a one-way delay later; returns the time after."""
    for data, _ in client.datagrams_to_send(now=now):
        if not drop:
            server.receive_datagram(data, CLIENT_ADDR, now=now + ONE_WAY_S)
    now += ONE_WAY_S
    for data, _ in server.datagrams_to_send(now=now):
        client.receive_datagram(data, SERVER_ADDR, now=now + ONE_WAY_S)
    return now + ONE_WAY_S


def handshake(tmp_path: Path, **client_kwargs: Any) -> tuple[QuicConnection, QuicConnection]:
    client, server = pair(tmp_path, **client_kwargs)
    client.connect(SERVER_ADDR, now=0.0)
    now = 0.0
    for _ in range(10):
        now = step(client, server, now)
    assert any(isinstance(e, events.HandshakeCompleted) for e in iter(client.next_event, None))
    return client, server


# --- every internal exists, with the type the adapter relies on ---------------------------
def is_float(value: Any) -> bool:
    return isinstance(value, float)


def method_with(*params: str) -> Callable[[Any], bool]:
    """A bound method that takes (at least) these parameters."""

    def check(value: Any) -> bool:
        return callable(value) and set(params) <= set(inspect.signature(value).parameters)

    return check


def kind(*types: type) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, types)


def udp_transport(value: Any) -> bool:
    """asyncio's datagram transports do not all derive from DatagramTransport (3.11)."""
    return isinstance(value, asyncio.BaseTransport) and callable(getattr(value, "sendto", None))


EXPECTED: dict[tuple[str, str], Callable[[Any], bool]] = {
    ("quic.connection.QuicConnection", "_loss"): kind(QuicPacketRecovery),
    ("quic.connection.QuicConnection", "_max_datagram_size"): kind(int),
    ("quic.connection.QuicConnection", "_pacing_at"): kind(float, type(None)),
    ("quic.connection.QuicConnection", "_ack_delay"): is_float,
    ("quic.connection.QuicConnection", "_payload_received"): method_with(
        "context", "plain", "crypto_frame_required"
    ),
    ("quic.connection.QuicConnection", "_write_ack_frame"): method_with("builder", "space", "now"),
    ("quic.connection.QuicConnection", "_spaces"): lambda v: (
        isinstance(v, dict)
        and all(hasattr(s, "ack_queue") and hasattr(s, "ack_at") for s in v.values())
    ),
    ("quic.connection.QuicConnection", "_streams"): kind(dict),
    ("quic.connection.QuicConnection", "_streams_queue"): kind(list),
    ("quic.connection.QuicConnection", "_packet_number"): kind(int),
    ("quic.connection.QuicConnection", "_state"): kind(QuicConnectionState),
    ("quic.connection.QuicConnection", "_network_paths"): kind(list),
    ("quic.connection.QuicConnection", "_local_max_data"): lambda v: (
        {"value", "used"} <= set(vars(v))
    ),
    ("quic.connection.QuicConnection", "_quic_logger"): kind(QuicLoggerTrace),
    ("quic.connection.QuicConnection", "_on_max_stream_data_delivery"): method_with(
        "delivery", "stream"
    ),
    ("quic.connection.QuicConnection", "_write_connection_limits"): method_with("builder", "space"),
    ("quic.connection.QuicConnection", "_serialize_transport_parameters"): method_with(),
    ("quic.connection.QuicConnection", "_parse_transport_parameters"): method_with(
        "data", "from_session_ticket"
    ),
    ("quic.connection.QuicConnection", "_QuicConnection__frame_handlers"): lambda v: (
        isinstance(v, dict) and all(isinstance(h, tuple) and len(h) == 2 for h in v.values())
    ),
    ("quic.connection.QuicConnection", "_handshake_complete"): kind(bool),
    ("quic.connection.QuicConnection", "_write_ping_frame"): method_with(
        "builder", "uids", "comment"
    ),
    ("quic.connection.QuicConnection", "_write_stream_limits"): method_with(
        "builder", "space", "stream"
    ),
    ("quic.recovery.QuicPacketRecovery", "_cc"): kind(QuicCongestionControl),
    ("quic.recovery.QuicPacketRecovery", "_pacer"): kind(QuicPacketPacer),
    ("quic.recovery.QuicPacketRecovery", "_rtt_smoothed"): is_float,
    ("quic.recovery.QuicPacketRecovery", "_rtt_latest"): is_float,
    ("quic.recovery.QuicPacketRecovery", "_rtt_min"): is_float,
    ("quic.recovery.QuicPacketRecovery", "_pto_count"): kind(int),
    ("quic.recovery.QuicPacketRecovery", "_on_packets_lost"): method_with("now", "packets"),
    ("quic.recovery.QuicPacketRecovery", "on_ack_received"): method_with("now", "space"),
    ("quic.stream.QuicStreamSender", "_buffer_fin"): kind(int, type(None)),
    ("quic.stream.QuicStreamSender", "_pending_eof"): kind(bool),
    ("asyncio.protocol.QuicConnectionProtocol", "_quic"): kind(QuicConnection),
    ("asyncio.protocol.QuicConnectionProtocol", "_loop"): kind(asyncio.AbstractEventLoop),
    ("asyncio.protocol.QuicConnectionProtocol", "_transport"): udp_transport,
    ("asyncio.protocol.QuicConnectionProtocol", "_timer"): kind(asyncio.TimerHandle, type(None)),
    ("asyncio.protocol.QuicConnectionProtocol", "_timer_at"): kind(float, type(None)),
    ("asyncio.protocol.QuicConnectionProtocol", "_transmit_task"): kind(asyncio.Handle, type(None)),
    ("asyncio.protocol.QuicConnectionProtocol", "_handle_timer"): method_with(),
    ("asyncio.protocol.QuicConnectionProtocol", "_process_events"): method_with(),
    ("asyncio.protocol.QuicConnectionProtocol", "_transmit_soon"): method_with(),
    ("asyncio.protocol.QuicConnectionProtocol", "_connection_id_issued_handler"): callable,
    ("asyncio.protocol.QuicConnectionProtocol", "_connection_id_retired_handler"): callable,
    ("asyncio.protocol.QuicConnectionProtocol", "_connection_terminated_handler"): callable,
    ("h3.connection.H3Connection", "_quic"): kind(QuicConnection),
    ("h3.connection.H3Connection", "_local_control_stream_id"): kind(int),
    ("asyncio.server.QuicServer", "_transport"): udp_transport,
}
"""What each private name of :data:`proto.quic.adapter.INTERNALS` must be on a live object."""


def test_every_internal_has_an_expected_type_here_and_each_is_listed() -> None:
    assert {(i.owner, i.name) for i in INTERNALS} == set(EXPECTED)
    assert all(i.use in ("read", "replace", "override") and i.why for i in INTERNALS)


def test_the_installed_aioquic_is_the_one_the_adapter_was_read_from() -> None:
    assert version("aioquic") == adapter.AIOQUIC_VERSION


async def live_objects(tmp_path: Path) -> dict[str, Any]:
    """One live object of every class that owns an internal: the connection after a
    handshake and a stream sent, its recovery, a stream's sender, an H3 connection, a
    protocol connected to a UDP socket and a QuicServer from ``serve``."""
    client, server = handshake(tmp_path)
    stream_id = client.get_next_available_stream_id()
    client.send_stream_data(stream_id, b"z" * 3000, end_stream=True)
    reno = make_quic_connection(make_quic_configuration(is_client=True, cc="reno"), None)
    protocol = MonotonicProtocol(client)
    transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(
        lambda: protocol, local_addr=("127.0.0.1", 0)
    )
    configuration = make_quic_configuration(is_client=False)
    paths = ensure_certificate(tmp_path / "tls")
    configuration.load_cert_chain(paths.cert, paths.key)
    quic_server = await serve("127.0.0.1", 0, configuration=configuration)
    objects = {
        "quic.connection.QuicConnection": server,
        # a control without hooks: on_ack_received as aioquic has it
        "quic.recovery.QuicPacketRecovery": adapter.recovery_of(reno),
        "quic.stream.QuicStreamSender": client._streams[stream_id].sender,
        "asyncio.protocol.QuicConnectionProtocol": protocol,
        "h3.connection.H3Connection": H3Connection(client),
        "asyncio.server.QuicServer": quic_server,
    }
    assert isinstance(objects["quic.stream.QuicStreamSender"], QuicStreamSender)
    assert isinstance(quic_server, QuicServer) and isinstance(protocol, QuicConnectionProtocol)
    objects["close"] = lambda: (transport.close(), quic_server.close())
    return objects


async def test_every_internal_exists_with_its_type_on_live_objects(tmp_path: Path) -> None:
    objects = await live_objects(tmp_path)
    try:
        wrong = []
        for internal in INTERNALS:
            owner = objects[internal.owner]
            value = getattr(owner, internal.name, AttributeError)
            if value is AttributeError or not EXPECTED[(internal.owner, internal.name)](value):
                wrong.append(f"{internal.owner}.{internal.name} = {value!r}")
        assert not wrong, "aioquic moved or changed: " + "; ".join(wrong)
    finally:
        objects["close"]()


def test_the_overridden_methods_are_still_the_ones_aioquic_calls() -> None:
    """An override works only while aioquic's own code calls it by that name."""
    sources = {
        QuicConnection: inspect.getsource(QuicConnection),
        QuicConnectionProtocol: inspect.getsource(QuicConnectionProtocol),
    }
    for name in (
        "_write_connection_limits(",
        "_write_stream_limits(",
        "self._streams_queue",
        "_payload_received(",
        "_write_ack_frame(",
    ):
        assert sources[QuicConnection].count(name) >= 2, name  # defined and called
    # the ACK policy learns of a 1-RTT packet from the add to the space's received packets,
    # which aioquic makes before it arms its own ACK timer (only when none is armed)
    source = sources[QuicConnection]
    add = source.index("space.ack_queue.add(packet_number)")
    assert add < source.index("if is_ack_eliciting and space.ack_at is None:", add)
    assert "self._pacing_at = self._loss._pacer.next_send_time" in sources[QuicConnection]
    assert "call_at(timer_at, self._handle_timer)" in sources[QuicConnectionProtocol]
    for name in ("_connection_id_issued_handler(", "_connection_terminated_handler("):
        assert name in sources[QuicConnectionProtocol], name


# --- each adapter function on a real connection ---------------------------------------------
def test_recovery_control_pacer_and_datagram_size(tmp_path: Path) -> None:
    client, _ = pair(tmp_path, pacing="off")
    assert isinstance(adapter.recovery_of(client), QuicPacketRecovery)
    assert isinstance(adapter.congestion_control_of(client), BbrCongestionControl)
    assert adapter.max_datagram_size_of(client) == DATAGRAM_BYTES
    pacer = RatePacer(max_datagram_size=DATAGRAM_BYTES, fixed_rate_bps=1e6)
    adapter.install_pacer(client, pacer)
    assert adapter.pacer_of(client) is pacer
    assert adapter.recovery_of(client)._pacer is pacer  # the one aioquic sends through


def test_pacing_holds_once_the_pacer_runs_dry(tmp_path: Path) -> None:
    client, _ = handshake(tmp_path, pacing=1e6)
    assert not adapter.pacing_holds(client)
    pacer = adapter.pacer_of(client)
    pacer.bucket_time, pacer.evaluation_time = 0.0, 1.0  # an empty bucket at now = 1 s
    stream_id = client.get_next_available_stream_id()
    client.send_stream_data(stream_id, b"p" * 5000, end_stream=True)
    assert client.datagrams_to_send(now=1.0) == []
    assert adapter.pacing_holds(client)


def test_ack_delay_is_set_and_used(tmp_path: Path) -> None:
    client, server = handshake(tmp_path, ack_delay_s=0.015)
    assert adapter.ack_delay_s_of(client) == 0.015
    adapter.set_ack_delay_s(server, 0.02)
    assert adapter.ack_delay_s_of(server) == 0.02
    stream_id = client.get_next_available_stream_id()
    client.send_stream_data(stream_id, b"a" * 100)
    for data, _ in client.datagrams_to_send(now=1.0):
        server.receive_datagram(data, CLIENT_ADDR, now=1.0)
    assert server.datagrams_to_send(now=1.0) == []  # the ACK waits
    assert server.get_timer() == pytest.approx(1.02)


def test_packets_sent_counts_and_first_flight_and_peer(tmp_path: Path) -> None:
    client, server = pair(tmp_path)
    assert adapter.packets_sent(client) == 0
    assert adapter.is_first_flight(server) and adapter.peer_address(server) is None
    server.receive_datagram(b"\xc0" + bytes(1199), CLIENT_ADDR, now=0.0)  # garbage
    assert adapter.is_first_flight(server)
    client.connect(SERVER_ADDR, now=0.0)
    step(client, server, 0.0)
    assert adapter.packets_sent(client) >= 1
    assert not adapter.is_first_flight(server)
    assert adapter.peer_address(server) == CLIENT_ADDR


def test_rtt_estimates_follow_the_path(tmp_path: Path) -> None:
    client, _ = pair(tmp_path)
    fresh = adapter.rtt_estimates(client)
    assert fresh.smoothed_s == 0.0 and fresh.min_s == float("inf") and fresh.pto_count == 0
    client, _ = handshake(tmp_path)
    rtt = adapter.rtt_estimates(client)
    assert rtt.min_s == pytest.approx(2 * ONE_WAY_S, abs=0.002)
    assert rtt.latest_s >= rtt.min_s and rtt.smoothed_s > 0


def test_streams_sent_bytes_and_fully_sent(tmp_path: Path) -> None:
    client, server = handshake(tmp_path)
    stream_id = client.get_next_available_stream_id()
    assert adapter.stream_of(client, stream_id) is None
    assert adapter.stream_bytes_sent(client, stream_id) == 0
    client.send_stream_data(stream_id, b"s" * 5000, end_stream=True)
    assert not adapter.stream_fully_sent(client, stream_id)
    now = 1.0
    while not adapter.stream_fully_sent(client, stream_id) and now < 2.0:
        now = step(client, server, now)
    assert adapter.stream_bytes_sent(client, stream_id) == 5000
    assert adapter.stream_fully_sent(client, stream_id)


def test_hooks_count_losses_and_mark_each_ack_end(tmp_path: Path) -> None:
    client, server = handshake(tmp_path)
    lost: list[int] = []
    ends: list[float] = []
    adapter.hook_packets_lost(client, lost.append)
    adapter.hook_ack_end(client, ends.append)
    stream_id = client.get_next_available_stream_id()
    client.send_stream_data(stream_id, b"l" * 20_000)
    now = 1.0
    for _ in range(5):
        now = step(client, server, now)
    # each end is a time the client read the server's datagrams (an ACK among them)
    assert ends and all(round((e - 1.0) / (2 * ONE_WAY_S), 6).is_integer() for e in ends)
    client.send_stream_data(stream_id, b"m" * 20_000, end_stream=True)
    now = step(client, server, now, drop=True)  # all of these lost
    for _ in range(20):
        now = step(client, server, max(now, client.get_timer() or now))
        client.handle_timer(now=max(now, client.get_timer() or now))
    assert sum(lost) >= 1  # aioquic also reports empty loss sets: counted as 0
    assert len(ends) >= 2 and ends == sorted(ends)


def test_fixed_window_and_scheduled_stream_queue(tmp_path: Path) -> None:
    client, server = pair(tmp_path)
    assert isinstance(server, FixedWindowQuicConnection) and server.window_bytes == WINDOW_BYTES
    assert isinstance(client, ScheduledFixedWindowQuicConnection)
    assert isinstance(client, ScheduledStreamsMixin)
    plain = make_quic_connection(make_quic_configuration(is_client=True), None)
    assert isinstance(plain, ScheduledQuicConnection) and plain.scheduler is None
    queue = client._streams_queue  # the override: what aioquic's _write_application walks
    assert isinstance(queue, ScheduledList) and queue.scheduler is client.scheduler


def _auto_window_connections(tmp_path: Path) -> tuple[QuicConnection, QuicConnection]:
    """A client and a server with aioquic's own windows (None: grown on delivered bytes)."""
    paths = ensure_certificate(tmp_path / "tls")
    server_configuration = make_quic_configuration(is_client=False, cc="reno")
    server_configuration.load_cert_chain(paths.cert, paths.key)
    client_configuration = make_quic_configuration(is_client=True, cc="reno")
    client_configuration.verify_mode = 0
    client = make_quic_connection(client_configuration, None)
    server = make_quic_connection(
        server_configuration, None,
        original_destination_connection_id=client.original_destination_connection_id,
    )  # fmt: skip
    client.connect(SERVER_ADDR, now=0.0)
    return client, server


def _auto_window_pair(tmp_path: Path) -> tuple[QuicConnection, QuicConnection]:
    client, server = _auto_window_connections(tmp_path)
    now = 0.0
    for _ in range(10):
        now = step(client, server, now)
    return client, server


def test_windows_grow_on_delivered_bytes_not_on_a_gap(tmp_path: Path) -> None:
    """A STREAM frame at the window's edge (nothing before it delivered) neither doubles the
    stream's nor the connection's window (aioquic's own doubles both), so the zero-filled gap
    it makes stays within one window; in-order data still doubles it."""
    client, server = _auto_window_pair(tmp_path)
    assert isinstance(server, WindowedQuicConnection) and server.window_bytes is None
    window = adapter.skip_to_window_edge(client, 0, 10) + 10
    client.send_stream_data(0, b"y" * 10)
    now = 1.0
    for _ in range(3):
        now = step(client, server, now)
    received = server._streams[0]
    assert received.receiver.highest_offset == window and server.delivered_bytes == 0
    assert received.max_stream_data_local == window
    assert server._local_max_data.value == window
    client2, server2 = _auto_window_pair(tmp_path / "b")
    client2.send_stream_data(0, b"z" * (window // 2 + 1000))
    for _ in range(200):
        now = step(client2, server2, now)
        if server2.delivered_bytes == window // 2 + 1000:
            break
    assert server2.delivered_bytes == window // 2 + 1000
    assert server2._streams[0].max_stream_data_local == 2 * window


def test_an_ack_of_a_packet_never_sent_closes_the_connection(tmp_path: Path) -> None:
    from aioquic.buffer import Buffer
    from aioquic.quic.connection import QuicConnectionError
    from aioquic.quic.packet import QuicErrorCode, push_ack_frame
    from aioquic.quic.rangeset import RangeSet

    client, server = _auto_window_pair(tmp_path)
    adapter.acknowledge_next(client, RangeSet([range(10**6, 10**6 + 1)]), now=1.0)
    client.send_ping(1)
    for data, _ in client.datagrams_to_send(now=1.0):
        server.receive_datagram(data, CLIENT_ADDR, now=1.02)
    closed = [
        e for e in iter(server.next_event, None) if isinstance(e, events.ConnectionTerminated)
    ]
    assert server._close_event is not None and server._close_event.error_code == 0xA, closed
    buf = Buffer(capacity=64)
    push_ack_frame(
        buf,
        RangeSet([range(0, 1), range(server._packet_number + 100, server._packet_number + 101)]),
        0,
        64,
    )
    buf.seek(0)
    with pytest.raises(QuicConnectionError) as caught:
        server._handle_ack_frame(None, 0x02, buf)
    assert caught.value.error_code == QuicErrorCode.PROTOCOL_VIOLATION


def test_a_close_on_an_unvalidated_path_keeps_to_three_times_what_came(tmp_path: Path) -> None:
    """One client Initial in; the server's handshake flight and then its CONNECTION_CLOSE
    (as at a handshake timeout) together stay within 3x (RFC 9000 section 8.1)."""
    client, server = _auto_window_connections(tmp_path)
    received = 0
    for data, _ in client.datagrams_to_send(now=0.0)[:1]:
        server.receive_datagram(data, CLIENT_ADDR, now=0.01)
        received += len(data)
    sent = sum(len(d) for d, _ in server.datagrams_to_send(now=0.01))
    for _ in range(6):  # the client is silent: the server's probes fill the 3x budget
        timer = server.get_timer()
        if timer is None or timer > 5.0:  # no probe left; the next would be the idle timeout
            break
        server.handle_timer(now=timer)
        sent += sum(len(d) for d, _ in server.datagrams_to_send(now=timer))
    assert sent == 3 * received
    server.close(error_code=0x2)
    sent += sum(len(d) for d, _ in server.datagrams_to_send(now=0.02))
    assert isinstance(server, WindowedQuicConnection)
    assert 0 < sent <= 3 * received


def test_priority_update_goes_on_the_control_stream(tmp_path: Path) -> None:
    client, server = handshake(tmp_path)
    h3 = H3Connection(client)
    control = h3._local_control_stream_id
    step(client, server, 1.0)
    before = adapter.stream_bytes_sent(client, control)
    adapter.send_h3_control_frame(h3, b"\x0f\x02ab")
    step(client, server, 1.1)
    assert adapter.stream_bytes_sent(client, control) == before + 4


class Recording(MonotonicProtocol):
    """Counts what MonotonicProtocol's hooks see: datagrams in and out, transmits."""

    def __init__(self, quic: QuicConnection, **kwargs: Any) -> None:
        super().__init__(quic, **kwargs)
        self.seen: list[type] = []
        self.calls = {"datagram_received": 0, "send_datagrams": 0, "before_timer": 0}
        self.after_transmit_timers: list[bool] = []

    def quic_event_received(self, event: events.QuicEvent) -> None:
        self.seen.append(type(event))

    def datagram_received(self, data: bytes | str, addr: Any) -> None:
        self.calls["datagram_received"] += 1
        super().datagram_received(data, addr)

    def send_datagrams(self, datagrams: list[tuple[bytes, Any]]) -> None:
        self.calls["send_datagrams"] += bool(datagrams)
        super().send_datagrams(datagrams)

    def before_timer(self) -> None:
        self.calls["before_timer"] += 1

    def after_transmit(self) -> None:  # the timer is armed by then
        self.after_transmit_timers.append(self._timer_at == self.quic.get_timer())


async def test_protocols_handshake_over_loopback_with_the_handlers(tmp_path: Path) -> None:
    client_quic, server_quic = pair(tmp_path)
    loop = asyncio.get_running_loop()
    server = Recording(server_quic)
    issued: list[bytes] = []
    server.set_connection_handlers(issued=issued.append, retired=print, terminated=print)
    server_transport, _ = await loop.create_datagram_endpoint(
        lambda: server, local_addr=("127.0.0.1", 0)
    )
    client = Recording(client_quic)
    client_transport, _ = await loop.create_datagram_endpoint(
        lambda: client, local_addr=("127.0.0.1", 0)
    )
    try:
        assert client.quic is client_quic and client.loop is loop
        assert client.transport is client_transport
        client.connect(server_transport.get_extra_info("sockname"))
        await asyncio.wait_for(client.wait_connected(), LOOPBACK_TIMEOUT_S)
        assert events.HandshakeCompleted in client.seen
        async with asyncio.timeout(LOOPBACK_TIMEOUT_S):
            while not issued:  # the server's NEW_CONNECTION_IDs follow its handshake
                await asyncio.sleep(0.01)
        client.transmit_soon()
        client.process_events()
        for protocol in (client, server):
            assert all(count > 0 for count in protocol.calls.values()), protocol.calls
            assert protocol.after_transmit_timers and all(protocol.after_transmit_timers)
    finally:
        client_transport.close()
        server_transport.close()


async def test_the_served_socket_is_the_listening_one(tmp_path: Path) -> None:
    paths = ensure_certificate(tmp_path / "tls")
    configuration = make_quic_configuration(is_client=False)
    configuration.load_cert_chain(paths.cert, paths.key)
    server = await serve(
        "127.0.0.1", 0, configuration=configuration, create_protocol=AdaptedProtocol
    )
    try:
        sock = adapter.server_socket(server)
        assert sock.type == socket.SOCK_DGRAM
        assert sock.getsockname()[0] == "127.0.0.1"
    finally:
        server.close()


def test_every_function_and_class_of_the_adapter_is_exercised_here() -> None:
    """A new way into aioquic's internals comes with its test in this file."""
    source = Path(__file__).read_text(encoding="utf-8")
    own = [
        name
        for name, value in vars(adapter).items()
        if (inspect.isfunction(value) or inspect.isclass(value))
        and value.__module__ == adapter.__name__
        and name not in ("Internal", "RttEstimates")
    ]
    methods = [
        name
        for cls in (AdaptedProtocol, MonotonicProtocol)
        for name in vars(cls)
        if not name.startswith("_") and name not in ("coalesce_transmit",)
    ]
    missing = [name for name in own + methods if name not in source.replace(f"def {name}", "")]
    assert not missing, f"not exercised in tests/test_adapter.py: {missing}"


def test_an_ack_policy_takes_the_one_rtt_acks_and_reads_back(tmp_path: Path) -> None:
    """set_ack_policy / ack_policy_of on a real connection; after a handshake the 1-RTT
    space's received packets tell the policy of each packet (_ReceivedPackets)."""
    client, server = handshake(tmp_path)
    assert adapter.ack_policy_of(server) == "default"
    adapter.set_ack_policy(server, parse_ack_policy("ack_policy", "immediate"))
    assert adapter.ack_policy_of(server) == "immediate"
    stream_id = client.get_next_available_stream_id()
    client.send_stream_data(stream_id, b"q" * 5000, end_stream=True)
    for data, _addr in client.datagrams_to_send(now=1.0):
        server.receive_datagram(data, ("127.0.0.1", 4433), now=1.0)
    space = server._spaces[tls.Epoch.ONE_RTT]
    assert isinstance(space.ack_queue, adapter._ReceivedPackets)
    assert space.ack_at == 1.0  # immediate: due when the packet arrived
    assert adapter.policy_ack_due(server, 1.0) and not adapter.policy_ack_due(client, 1.0)
    assert server.ack_scheduler is not None and server.ack_scheduler.eliciting_received > 0
    server.datagrams_to_send(now=1.0)
    assert server.ack_scheduler.acks_sent == 1 and space.ack_at is None
    assert not adapter.policy_ack_due(server, 1.0)
    adapter.set_ack_policy(server, parse_ack_policy("ack_policy", "default"))
    assert server.ack_scheduler is None


def test_ack_frequency_is_negotiated_and_its_frames_go_both_ways(tmp_path: Path) -> None:
    """Both ends with ack-frequency: each sees the other's min_ack_delay (_transport_parameter
    reads it from the list aioquic skips), the data sender sends ACK_FREQUENCY (qlog'd as
    _ack_frequency_qlog writes it) and the receiver follows it (_AckFrequency counts)."""
    policy = parse_ack_policy("ack_policy", "ack-frequency")
    client, server = pair(tmp_path)
    adapter.set_ack_policy(client, policy)
    adapter.set_ack_policy(server, policy)
    client.connect(SERVER_ADDR, now=0.0)
    now = 0.0
    for _ in range(10):
        now = step(client, server, now)
    stream_id = client.get_next_available_stream_id()
    client.send_stream_data(stream_id, b"u" * 200_000, end_stream=True)
    for _ in range(40):
        now = step(client, server, now)
    sent, got = adapter.ack_frequency_counts(client), adapter.ack_frequency_counts(server)
    assert isinstance(client.frequency, adapter._AckFrequency)
    assert sent is not None and got is not None
    assert sent["peer_min_ack_delay_s"] == got["peer_min_ack_delay_s"] == 0.001
    assert sent["frames_sent"] >= 1 and got["frames_received"] >= 1
    assert got["following"].startswith("every:")
    assert adapter.ack_frequency_counts(pair(tmp_path)[0]) is None
    frame = adapter._ack_frequency_qlog(3, 1, 10_000, 1)
    assert frame["frame_type"] == "ack_frequency" and frame["request_max_ack_delay"] == 10_000
    data = bytes([0x0B, 0x01, 0x19, 0xC0, 0, 0, 0, 0xFF, 0x04, 0xDE, 0x1B, 0x02, 0x43, 0xE8])
    assert adapter._transport_parameter(data, adapter.TP_MIN_ACK_DELAY) == 1000
    assert adapter._transport_parameter(data[:5], adapter.TP_MIN_ACK_DELAY) is None


def test_an_ack_frequency_peer_without_the_parameter_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    client, server = pair(tmp_path)
    adapter.set_ack_policy(client, parse_ack_policy("ack_policy", "ack-frequency"))
    client.connect(SERVER_ADDR, now=0.0)
    now = 0.0
    for _ in range(10):
        now = step(client, server, now)
    server.handle_timer(now=now + 5.0)  # the end of its draining period: the event
    closed = [
        e for e in iter(server.next_event, None) if isinstance(e, events.ConnectionTerminated)
    ]
    assert closed and "did not negotiate" in closed[0].reason_phrase
    assert "\n" not in closed[0].reason_phrase
