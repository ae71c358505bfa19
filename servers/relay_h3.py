"""The relay's HTTP/3 side: a reverse proxy from new QUIC connections on the near hop to
one warm QUIC connection over the long haul (the Queqiao case over QUIC, chapter 12.3.5).

::

    client --new h3 connection (near hop)--> relay --one h3 connection (long haul)--> server

As on the HTTP/2 side (:mod:`servers.relay`), each request stream that arrives is forwarded
at once as a new request stream of the upstream connection (RFC 9114 section 4.1; the
relay is an intermediary in the sense of RFC 9110 section 3.7): the head with
``:authority`` rewritten, the body as it arrives, the response back the same way. The
upstream is opened and warmed (uploads to ``/sink``, downloads from ``/tts``) before the
relay listens, so its congestion window is grown and its flow-control credit granted;
aioquic does not shrink a congestion window after idle (it has no RFC 9002 section 7.8
"persistent congestion" on an idle connection, and no slow start after idle), and a PING
every :data:`KEEPALIVE_S` keeps the connection inside both ends' idle timeouts.

aioquic buffers what a stream's credit does not take yet; the relay's memory per request is
bounded by that request's body, as on the HTTP/2 side.
"""

from __future__ import annotations

import asyncio
import hashlib
import ssl
from typing import Any

from aioquic.asyncio.server import QuicServer, serve
from aioquic.h3.connection import H3Connection
from aioquic.h3.events import DataReceived, H3Event, HeadersReceived
from aioquic.quic import events as qevents

from proto.quic.adapter import (
    AdaptedProtocol,
    congestion_control_of,
    peer_address,
    rtt_estimates,
    server_socket,
)
from proto.quic.edge import (
    PACING_OFF,
    make_quic_configuration,
    make_quic_connection,
    make_udp_socket,
)
from proto.sockopts import set_udp_buffers
from proto.tls import ensure_certificate
from servers.config import DEFAULT_UDP_BUFFER_BYTES
from servers.relay_base import (
    CONNECT_TIMEOUT_S,
    H3_ERROR_REQUEST_CANCELLED,
    HOP_BY_HOP,
    KEEPALIVE_S,
    UPSTREAM_DATAGRAM_BYTES,
    RelayState,
    StreamCallbacks,
    fetch,
)


class CoalescingProtocol(AdaptedProtocol):
    """A QUIC protocol that sends once per event-loop iteration instead of once per datagram
    received or forwarded: the loop reads a batch of datagrams per wake-up (libuv: up to 32),
    and each of aioquic's sends walks every stream, so the relay's forwarding, which touches
    two connections per datagram, would otherwise spend most of its CPU building packets."""

    def datagram_received(self, data: bytes | str, addr: Any) -> None:
        self.quic.receive_datagram(data, addr, now=self.loop.time())  # type: ignore[arg-type]
        self.process_events()
        self.transmit_soon()


class H3Upstream(CoalescingProtocol):
    """The one long-haul QUIC connection: request streams on behalf of many front streams."""

    def __init__(self, quic: Any, *, relay: RelayState) -> None:
        super().__init__(quic)
        self.relay = relay
        self.h3 = H3Connection(quic)
        self.streams: dict[int, StreamCallbacks] = {}
        self.lost = asyncio.get_running_loop().create_future()

    def request(
        self, headers: list[tuple[bytes, bytes]], callbacks: StreamCallbacks, end: bool = False
    ) -> int:
        """Open a request stream with ``headers`` (ended at once for a request without body)."""
        stream_id = self.quic.get_next_available_stream_id()
        self.streams[stream_id] = callbacks
        self.h3.send_headers(stream_id, headers, end_stream=end)
        self.transmit_soon()
        return stream_id

    def send_data(self, stream_id: int, data: bytes, end: bool = False) -> None:
        if stream_id in self.streams:
            self.h3.send_data(stream_id, data, end_stream=end)
            self.transmit_soon()

    def reset(self, stream_id: int) -> None:
        if self.streams.pop(stream_id, None) is not None:
            self.quic.reset_stream(stream_id, H3_ERROR_REQUEST_CANCELLED)
            self.transmit_soon()

    def quic_event_received(self, event: qevents.QuicEvent) -> None:
        if isinstance(event, qevents.ConnectionTerminated):
            self._on_lost(f"{event.error_code}: {event.reason_phrase}")
            return
        if isinstance(event, qevents.StreamReset):
            callbacks = self.streams.pop(event.stream_id, None)
            if callbacks is not None:
                callbacks.on_reset()
            return
        for h3_event in self.h3.handle_event(event):
            self._on_h3_event(h3_event)

    def _on_h3_event(self, event: H3Event) -> None:
        sid = getattr(event, "stream_id", None)
        callbacks = self.streams.get(sid) if sid is not None else None
        if callbacks is None:
            return
        if isinstance(event, HeadersReceived):
            callbacks.on_headers(list(event.headers), event.stream_ended)
        elif isinstance(event, DataReceived) and event.data:
            callbacks.on_data(event.data)
        if getattr(event, "stream_ended", False):
            self.streams.pop(sid, None)
            callbacks.on_end()

    def _on_lost(self, reason: str) -> None:
        if self.lost.done():
            return
        self.lost.set_result(reason)
        self.relay.log.emit("upstream_lost", protocol="h3", reason=reason[:200])
        for callbacks in self.streams.values():
            callbacks.on_reset()
        self.streams.clear()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._on_lost(repr(exc))

    def window_facts(self) -> dict[str, Any]:
        """The long haul's round trip and window after the warm-up (aioquic's state)."""
        cwnd = congestion_control_of(self.quic).congestion_window
        return {
            "rtt_s": rtt_estimates(self.quic).smoothed_s,
            "cwnd_segments": int(cwnd // UPSTREAM_DATAGRAM_BYTES),
        }

    async def keep_alive(self) -> None:
        """PING the peer every :data:`KEEPALIVE_S` until the connection goes."""
        while not self.lost.done():
            await asyncio.sleep(KEEPALIVE_S)
            self.quic.send_ping(0)
            self.transmit_soon()


class H3Front(CoalescingProtocol):
    """One client's QUIC connection to the relay: every request stream forwarded upstream."""

    def __init__(self, quic: Any, *, relay: RelayState, conn_id: int, **kwargs: Any) -> None:
        super().__init__(quic, **kwargs)
        self.relay = relay
        self.conn_id = conn_id
        self.h3: H3Connection | None = None
        self.to_upstream: dict[int, int] = {}

    def quic_event_received(self, event: qevents.QuicEvent) -> None:
        log = self.relay.log
        if isinstance(event, qevents.ProtocolNegotiated) and self.h3 is None:
            self.h3 = H3Connection(self.quic)
            peer = peer_address(self.quic)
            log.emit("front_connection_open", protocol="h3", conn=self.conn_id, peer=str(peer))
        elif isinstance(event, qevents.StreamReset):
            uid = self.to_upstream.pop(event.stream_id, None)
            upstream = self.relay.upstream_h3
            if uid is not None and upstream is not None:
                upstream.reset(uid)
        if self.h3 is None:
            return
        for h3_event in self.h3.handle_event(event):
            if isinstance(h3_event, HeadersReceived):
                self._on_request_head(h3_event)
            elif isinstance(h3_event, DataReceived):
                self._on_request_data(h3_event)

    def _on_request_head(self, event: HeadersReceived) -> None:
        assert self.h3 is not None
        log, sid = self.relay.log, event.stream_id
        if sid in self.to_upstream:  # trailers: not forwarded (the testbed sends none)
            return
        log.emit("front_request_first_byte", conn=self.conn_id, stream=sid)
        upstream = self.relay.upstream_h3
        if upstream is None or upstream.lost.done():
            self.h3.send_headers(sid, [(b":status", b"502")], end_stream=True)
            self.transmit_soon()
            return
        uid = upstream.request(
            self.relay.forward_headers(list(event.headers), self.relay.authority_h3),
            self._callbacks(sid),
            end=event.stream_ended,
        )
        self.to_upstream[sid] = uid
        log.emit("upstream_request_sent", conn=self.conn_id, stream=sid, upstream_stream=uid)
        if event.stream_ended:
            log.emit("front_request_last_byte", conn=self.conn_id, stream=sid)

    def _on_request_data(self, event: DataReceived) -> None:
        uid = self.to_upstream.get(event.stream_id)
        upstream = self.relay.upstream_h3
        if uid is None or upstream is None:
            return
        upstream.send_data(uid, event.data, end=event.stream_ended)
        if event.stream_ended:
            self.relay.log.emit(
                "front_request_last_byte", conn=self.conn_id, stream=event.stream_id
            )

    def _callbacks(self, sid: int) -> StreamCallbacks:
        log = self.relay.log

        def on_headers(headers: list[tuple[bytes, bytes]], ended: bool) -> None:
            assert self.h3 is not None
            log.emit("upstream_response_first_byte", conn=self.conn_id, stream=sid)
            kept = [(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP]
            self.h3.send_headers(sid, kept, end_stream=ended)
            self.transmit_soon()

        def on_data(data: bytes) -> None:
            assert self.h3 is not None
            self.h3.send_data(sid, data, end_stream=False)
            self.transmit_soon()

        def on_end() -> None:
            assert self.h3 is not None
            self.to_upstream.pop(sid, None)
            self.h3.send_data(sid, b"", end_stream=True)
            self.transmit_soon()
            log.emit("front_response_last_byte", conn=self.conn_id, stream=sid)

        def on_reset() -> None:
            self.to_upstream.pop(sid, None)
            self.quic.reset_stream(sid, H3_ERROR_REQUEST_CANCELLED)
            self.transmit_soon()

        return StreamCallbacks(on_headers, on_data, on_end, on_reset)


async def connect_upstream_h3(relay: RelayState) -> H3Upstream:
    """Open the long-haul QUIC connection and wait for its handshake."""
    config = relay.config
    configuration = make_quic_configuration(
        is_client=True,
        cc=config.settings.quic_control,
        max_datagram_size=UPSTREAM_DATAGRAM_BYTES,
        fixed_window_bytes=config.window_bytes,
    )
    configuration.server_name = "testbed"
    configuration.verify_mode = ssl.CERT_NONE
    quic = make_quic_connection(configuration, None, pacing=PACING_OFF)
    sock = make_udp_socket("0.0.0.0", 0, DEFAULT_UDP_BUFFER_BYTES)
    try:
        loop = asyncio.get_running_loop()
        _, upstream = await loop.create_datagram_endpoint(
            lambda: H3Upstream(quic, relay=relay), sock=sock
        )
    except BaseException:
        sock.close()
        raise
    upstream.connect((config.upstream_host, config.upstream_h3_port))
    try:
        await asyncio.wait_for(upstream.wait_connected(), CONNECT_TIMEOUT_S)
    except BaseException:
        upstream.close()
        raise
    relay.log.emit("upstream_connected", protocol="h3", addr=relay.authority_h3)
    return upstream


async def warm_h3(relay: RelayState, upstream: Any) -> None:
    """Grow the upstream's congestion window and credit: uploads to /sink, downloads /tts."""
    body = hashlib.shake_256(b"testbed relay warm-up").digest(relay.config.warmup_bytes)
    for _ in range(relay.config.warmup):
        await fetch(upstream, "POST", "/sink", relay.authority_h3, body)
        await fetch(upstream, "GET", "/tts", relay.authority_h3)
    if relay.config.warmup:
        await asyncio.sleep(0.05)  # the native engine's next sample of its state
    relay.log.emit(
        "warmup_done", protocol="h3", rounds=relay.config.warmup, **upstream.window_facts()
    )


async def listen_h3(relay: RelayState, port: int) -> tuple[QuicServer, tuple[str, int]]:
    """Serve HTTP/3 on UDP ``port`` of the relay's address (0: any); returns the server and
    its bound address."""
    config = relay.config
    paths = ensure_certificate(config.cert_dir)
    configuration = make_quic_configuration(
        is_client=False,
        cc=config.settings.quic_control,
        max_datagram_size=config.settings.max_datagram_size_bytes,
    )
    configuration.load_cert_chain(paths.cert, paths.key)

    def create(*args: Any, **kwargs: Any) -> H3Front:
        relay.front_ids += 1
        return H3Front(*args, relay=relay, conn_id=relay.front_ids, **kwargs)

    server = await serve(config.bind, port, configuration=configuration, create_protocol=create)
    sock = server_socket(server)
    # a burst of unpaced datagrams overflows the 208 KB default buffer (as the server's)
    set_udp_buffers(sock, DEFAULT_UDP_BUFFER_BYTES)
    host, bound = sock.getsockname()[:2]
    return server, (host, bound)
