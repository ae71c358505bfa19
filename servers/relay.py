"""The relay: a reverse proxy near the client with one warm, tuned long-haul connection to
the server (the Queqiao case, chapter 12.3.5). This module is its HTTP/2 side and the
process; :mod:`servers.relay_h3` is the HTTP/3 side (``--protocols h2,h3``).

::

    client --new h2 connection (near hop)--> relay --one h2 connection (long haul)--> server

The relay listens for HTTP/2 over TLS 1.3 (ALPN h2) on the near hop. Each request stream
that arrives is forwarded at once, as a new stream of the one upstream HTTP/2 connection
(RFC 9113 multiplexing: a standard reverse proxy, no framing of our own): the request head
with ``:authority`` rewritten to the upstream, its body as it arrives (the relay streams,
it does not store the upload first), and the response back the same way. The upstream
connection is opened and *warmed* before the relay says it is ready: ``warmup`` uploads
of ``warmup_bytes`` to ``POST /sink`` and as many ``GET /tts`` downloads grow the TCP
windows of both ends (with ``tcp_slow_start_after_idle = 0`` in the relay's and the server's
namespaces they stay grown), so a measured request pays the near hop's set-up and one
long-haul round trip, not the long haul's handshake and slow start (harness.bounds.
relay_request_time).

Flow control: each endpoint acknowledges received DATA at once and the relay queues what
the other side's window does not take yet (a memory cost bounded by one request's body);
both connections advertise ``window_bytes`` (default 16 MiB) so the long haul is never
window-bound.

Events (JSONL, ``t`` on CLOCK_MONOTONIC like the client's, the server's and the link's):
``upstream_connected``, ``warmup_done`` (with the upstream socket's cwnd and rtt from
TCP_INFO), ``ready``, ``front_connection_open``, ``front_request_first_byte`` (the request
head arrived), ``upstream_request_sent`` (head forwarded), ``front_request_last_byte``,
``upstream_response_first_byte``, ``front_response_last_byte``, ``upstream_lost``, ``error``.

    testbed relay --bind 198.18.5.2 --port 8443 --upstream 198.18.2.2:8443 --log relay.jsonl
        [--protocols h2,h3] [--warmup 3] [--warmup-bytes 2MB] [--h2-window 16MiB] [--cc bbr]
        [--quic-cc cubic]

prints ``listening relay h2 tcp ADDR:PORT`` (and ``listening relay h3 udp ADDR:PORT``) once
every upstream is warm, serves until SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import hashlib
import signal
import socket
import ssl
import sys
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions

from proto.http2 import start_connection
from proto.sockopts import apply_tcp_options, hold_window_clamp
from proto.tls import client_context, ensure_certificate, server_context
from servers import relay_h3
from servers.relay_base import (
    CONNECT_TIMEOUT_S,
    HOP_BY_HOP,
    KEEPALIVE_S,
    RelayConfig,
    RelayLog,
    RelayState,
    StreamCallbacks,
    fetch,
)
from tbcore.tcpinfo import read_tcp_info


class H2Endpoint(asyncio.Protocol):
    """One HTTP/2 connection (either side) with per-stream send queues under flow control."""

    def __init__(
        self,
        conn: h2.connection.H2Connection,
        window_bytes: int,
        window_clamp_bytes: int | None = None,
    ) -> None:
        self.conn = conn
        self.window_bytes = window_bytes
        self.window_clamp_bytes = window_clamp_bytes
        self.transport: asyncio.Transport | None = None
        self.sock: Any = None
        self._pending: dict[int, bytearray] = {}
        self._ending: set[int] = set()
        self.closed = asyncio.get_event_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.sock = transport.get_extra_info("socket")
        hold_window_clamp(self.sock, self.window_clamp_bytes)  # the handshake's data reset it
        start_connection(self.conn, self.window_bytes)
        self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(exc)
        self.on_lost(exc)

    def on_lost(self, exc: Exception | None) -> None:
        """A subclass's clean-up when the connection goes."""

    def data_received(self, data: bytes) -> None:
        hold_window_clamp(self.sock, self.window_clamp_bytes)
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError as err:
            self.on_error(f"h2: {err}")
            self.flush()
            if self.transport is not None:
                self.transport.close()
            return
        for event in events:
            if isinstance(event, h2.events.DataReceived):
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.WindowUpdated):
                self.drain()
            self.on_event(event)
        self.drain()

    def on_event(self, event: h2.events.Event) -> None:
        """A subclass's handling of one h2 event."""

    def on_error(self, reason: str) -> None:
        """A subclass's report of a protocol error."""

    def send_headers(self, stream_id: int, headers: list[tuple[bytes, bytes]], end: bool) -> None:
        self.conn.send_headers(stream_id, headers, end_stream=end)
        self.flush()

    def send_data(self, stream_id: int, data: bytes, end: bool = False) -> None:
        """Queue body bytes (and the end of the stream); sent as the peer's window allows."""
        self._pending.setdefault(stream_id, bytearray()).extend(data)
        if end:
            self._ending.add(stream_id)
        self.drain()

    def drain(self) -> None:
        for stream_id in list(self._pending):
            buffer = self._pending[stream_id]
            try:
                while buffer:
                    window = self.conn.local_flow_control_window(stream_id)
                    size = min(window, self.conn.max_outbound_frame_size, len(buffer))
                    if size <= 0:
                        break
                    self.conn.send_data(stream_id, bytes(buffer[:size]))
                    del buffer[:size]
                if not buffer and stream_id in self._ending:
                    self.conn.end_stream(stream_id)
                    self._ending.discard(stream_id)
                    del self._pending[stream_id]
            except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError, KeyError):
                self._pending.pop(stream_id, None)
                self._ending.discard(stream_id)
        self.flush()

    def reset(self, stream_id: int) -> None:
        self._pending.pop(stream_id, None)
        self._ending.discard(stream_id)
        try:
            self.conn.reset_stream(stream_id)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError, KeyError):
            pass
        self.flush()

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)


class Upstream(H2Endpoint):
    """The one long-haul HTTP/2 connection: client side, requests from many front streams."""

    def __init__(
        self, window_bytes: int, log: RelayLog, window_clamp_bytes: int | None = None
    ) -> None:
        super().__init__(
            h2.connection.H2Connection(
                h2.config.H2Configuration(client_side=True, header_encoding=None)
            ),
            window_bytes,
            window_clamp_bytes,
        )
        self.log = log
        self.streams: dict[int, StreamCallbacks] = {}

    def request(
        self, headers: list[tuple[bytes, bytes]], callbacks: StreamCallbacks, end: bool = False
    ) -> int:
        """Open a stream with ``headers`` (ending it at once for a request without a body)."""
        stream_id = self.conn.get_next_available_stream_id()
        self.streams[stream_id] = callbacks
        self.send_headers(stream_id, headers, end=end)
        return stream_id

    def on_event(self, event: h2.events.Event) -> None:
        sid = getattr(event, "stream_id", None)
        callbacks = self.streams.get(sid) if sid is not None else None
        if callbacks is None:
            return
        if isinstance(event, h2.events.ResponseReceived):
            callbacks.on_headers(list(event.headers), event.stream_ended is not None)
        elif isinstance(event, h2.events.DataReceived):
            callbacks.on_data(event.data)
        elif isinstance(event, h2.events.StreamEnded):
            self.streams.pop(sid, None)
            callbacks.on_end()
        elif isinstance(event, h2.events.StreamReset):
            self.streams.pop(sid, None)
            callbacks.on_reset()

    def on_lost(self, exc: Exception | None) -> None:
        self.log.emit("upstream_lost", reason=repr(exc)[:200])
        for callbacks in self.streams.values():
            callbacks.on_reset()
        self.streams.clear()

    def on_error(self, reason: str) -> None:
        self.log.emit("error", where="upstream", reason=reason[:300])

    async def keep_alive(self) -> None:
        """PING the peer every :data:`KEEPALIVE_S` until the connection goes."""
        while not self.closed.done():
            await asyncio.sleep(KEEPALIVE_S)
            self.conn.ping(b"tb-alive")
            self.flush()


class FrontConnection(H2Endpoint):
    """One client's HTTP/2 connection to the relay: every stream forwarded upstream."""

    def __init__(self, relay: Relay, conn_id: int) -> None:
        super().__init__(
            h2.connection.H2Connection(
                h2.config.H2Configuration(client_side=False, header_encoding=None)
            ),
            relay.config.window_bytes,
            relay.config.settings.window_clamp_bytes,
        )
        self.relay = relay
        self.conn_id = conn_id
        self.to_upstream: dict[int, int] = {}
        self.request_ended: set[int] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        peer = transport.get_extra_info("peername")
        self.relay.log.emit(
            "front_connection_open", protocol="h2", conn=self.conn_id, peer=str(peer)
        )

    def on_error(self, reason: str) -> None:
        self.relay.log.emit("error", where="front", conn=self.conn_id, reason=reason[:300])

    def on_event(self, event: h2.events.Event) -> None:
        log = self.relay.log
        if isinstance(event, h2.events.RequestReceived):
            sid = event.stream_id
            log.emit("front_request_first_byte", conn=self.conn_id, stream=sid)
            upstream = self.relay.upstream
            if upstream is None or upstream.closed.done():
                self.send_headers(sid, [(b":status", b"502")], end=True)
                return
            ended = event.stream_ended is not None
            uid = upstream.request(
                self.relay.forward_headers(event.headers), self._callbacks(sid), end=ended
            )
            self.to_upstream[sid] = uid
            log.emit("upstream_request_sent", conn=self.conn_id, stream=sid, upstream_stream=uid)
            if ended:
                self.request_ended.add(sid)
                log.emit("front_request_last_byte", conn=self.conn_id, stream=sid)
        elif isinstance(event, h2.events.DataReceived):
            uid = self.to_upstream.get(event.stream_id)
            if uid is not None and self.relay.upstream is not None:
                self.relay.upstream.send_data(uid, event.data)
        elif isinstance(event, h2.events.StreamEnded):
            if event.stream_id in self.request_ended:  # already forwarded with the head
                return
            self.request_ended.add(event.stream_id)
            uid = self.to_upstream.get(event.stream_id)
            if uid is not None and self.relay.upstream is not None:
                self.relay.upstream.send_data(uid, b"", end=True)
                log.emit("front_request_last_byte", conn=self.conn_id, stream=event.stream_id)
        elif isinstance(event, h2.events.StreamReset):
            uid = self.to_upstream.pop(event.stream_id, None)
            if uid is not None and self.relay.upstream is not None:
                self.relay.upstream.reset(uid)

    def _callbacks(self, sid: int) -> StreamCallbacks:
        log = self.relay.log

        def on_headers(headers: list[tuple[bytes, bytes]], ended: bool) -> None:
            log.emit("upstream_response_first_byte", conn=self.conn_id, stream=sid)
            kept = [(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP]
            self.send_headers(sid, kept, end=ended)

        def on_data(data: bytes) -> None:
            self.send_data(sid, data)

        def on_end() -> None:
            self.send_data(sid, b"", end=True)
            self.to_upstream.pop(sid, None)
            log.emit("front_response_last_byte", conn=self.conn_id, stream=sid)

        def on_reset() -> None:
            self.to_upstream.pop(sid, None)
            self.reset(sid)

        return StreamCallbacks(on_headers, on_data, on_end, on_reset)


class Relay(RelayState):
    """The listener, the upstream connections and the event log of one relay process."""

    async def connect_upstream(self) -> Upstream:
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        apply_tcp_options(sock, self.config.settings)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(
                loop.sock_connect(sock, (self.config.upstream_host, self.config.upstream_port)),
                CONNECT_TIMEOUT_S,
            )
        except BaseException:
            sock.close()
            raise
        _, upstream = await asyncio.wait_for(
            loop.create_connection(
                lambda: Upstream(
                    self.config.window_bytes, self.log, self.config.settings.window_clamp_bytes
                ),
                sock=sock,
                ssl=client_context(),
                server_hostname="testbed",
            ),
            CONNECT_TIMEOUT_S,
        )
        self.log.emit("upstream_connected", protocol="h2", addr=self.authority)
        return upstream

    async def warm(self, upstream: Upstream) -> dict[str, Any]:
        """Grow both ends' windows: uploads to /sink, downloads from /tts."""
        body = hashlib.shake_256(b"testbed relay warm-up").digest(self.config.warmup_bytes)
        for _ in range(self.config.warmup):
            await fetch(upstream, "POST", "/sink", self.authority, body)
            await fetch(upstream, "GET", "/tts", self.authority)
        info = read_tcp_info(upstream.sock) if upstream.sock is not None else None
        facts: dict[str, Any] = {}
        if info is not None:
            facts = {"cwnd_segments": info.get("snd_cwnd"), "rtt_s": info.get("rtt_us", 0) / 1e6}
        self.log.emit("warmup_done", protocol="h2", rounds=self.config.warmup, **facts)
        return facts

    def _front(self) -> FrontConnection:
        self.front_ids += 1
        return FrontConnection(self, self.front_ids)

    async def start(self) -> tuple[asyncio.AbstractServer, tuple[str, int]]:
        """Open and warm the HTTP/2 upstream, then listen; returns the server and address."""
        self.upstream = await self.connect_upstream()
        await self.warm(self.upstream)
        self._keepalives.append(asyncio.ensure_future(self.upstream.keep_alive()))
        paths = ensure_certificate(self.config.cert_dir)
        tls: ssl.SSLContext = server_context(paths)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        apply_tcp_options(sock, self.config.settings, listening=True)
        sock.bind((self.config.bind, self.config.port))
        sock.listen(128)
        sock.setblocking(False)
        server = await asyncio.get_running_loop().create_server(self._front, sock=sock, ssl=tls)
        host, port = sock.getsockname()[:2]
        self.log.emit("ready", protocol="h2", addr=f"{host}:{port}")
        return server, (host, port)

    async def start_h3(self, port: int) -> tuple[Any, tuple[str, int]]:
        """Open and warm the HTTP/3 upstream, then listen on UDP ``port``; returns the QUIC
        server and its address."""

        if self.config.settings.quic_stack == "ngtcp2":
            from servers.relay_native import connect_upstream_native

            self.upstream_h3 = await connect_upstream_native(self)
        else:
            self.upstream_h3 = await relay_h3.connect_upstream_h3(self)
        await relay_h3.warm_h3(self, self.upstream_h3)
        self._keepalives.append(asyncio.ensure_future(self.upstream_h3.keep_alive()))
        server, (host, bound) = await relay_h3.listen_h3(self, port)
        self.log.emit("ready", protocol="h3", addr=f"{host}:{bound}")
        return server, (host, bound)

    def close(self) -> None:
        """Close both upstreams (the listeners are the caller's)."""
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()
        for task in self._keepalives:
            task.cancel()
        if self.upstream_h3 is not None:
            self.upstream_h3.close()


async def serve_relay(
    config: RelayConfig, out: Any = None, stop: asyncio.Event | None = None
) -> None:
    """Warm the upstreams, listen, print a listening line per side (h2 on TCP, then h3 on
    the same port number on UDP), serve until ``stop`` (or a signal when ``stop`` is
    None)."""

    out = sys.stdout if out is None else out
    loop = asyncio.get_running_loop()
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    relay = Relay(config)
    servers: list[Any] = []
    lines = []
    try:
        port = config.port
        if "h2" in config.protocols:
            server, (host, port) = await relay.start()
            servers.append(server)
            lines.append(f"listening relay h2 tcp {host}:{port}")
        if "h3" in config.protocols:
            server, (host, port) = await relay.start_h3(port)
            servers.append(server)
            lines.append(f"listening relay h3 udp {host}:{port}")
        print("\n".join(lines), file=out, flush=True)  # once every side is warm
        await stop.wait()
    finally:
        for server in servers:
            server.close()
        relay.close()
        await asyncio.sleep(0.05)
        relay.log.close()
