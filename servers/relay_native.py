"""The relay's HTTP/3 long haul on the native stack (``quic_stack = "ngtcp2"``): the one warm
upstream QUIC connection made by ``tb-h3 --client`` (proto/native/tbh3.c) instead of
aioquic, with the same interface as :class:`servers.relay_h3.H3Upstream` (``request``,
``send_data``, ``reset``, ``keep_alive``, ``lost``), so that the relay's front side forwards
each request stream to it unchanged.

Stream IDs: the engine opens a connection's request streams in the order it is asked to
(client-initiated bidirectional streams, RFC 9000 section 2.1: 0, 4, 8, ...), so the id of
a new request is known when it is asked and the body can follow at once; the engine's own
report of the stream it opened is checked against it. The long haul's settings are those of
the aioquic long haul: its datagram size, the relay's window as every flow-control limit,
no pacing, the level's congestion control; ngtcp2 keeps it alive with a PING every
:data:`servers.relay_base.KEEPALIVE_S` (its keep-alive timer).
"""

from __future__ import annotations

import asyncio
from typing import Any

from proto.native import engine as native
from proto.native import wire
from servers.relay_base import (
    CONNECT_TIMEOUT_S,
    H3_ERROR_REQUEST_CANCELLED,
    KEEPALIVE_S,
    UPSTREAM_DATAGRAM_BYTES,
    StreamCallbacks,
)

UPSTREAM_CONN = 0
"""The engine's one connection."""
STREAM_ID_STEP = 4
"""RFC 9000 section 2.1: a client's bidirectional streams are 4 apart."""


class NativeUpstream:
    """The long haul over the native engine (module docstring)."""

    def __init__(self, relay: Any, engine: native.Engine) -> None:
        self.relay = relay
        self.engine = engine
        self.streams: dict[int, StreamCallbacks] = {}
        self.next_stream = 0
        self.stats: dict[str, int | None] = {}
        loop = asyncio.get_running_loop()
        self.lost: asyncio.Future[str] = loop.create_future()
        self.connected: asyncio.Future[None] = loop.create_future()
        engine.handlers[UPSTREAM_CONN] = self.on_event
        engine.default = self.on_event

    def request(
        self, headers: list[tuple[bytes, bytes]], callbacks: StreamCallbacks, end: bool = False
    ) -> int:
        """Open a request stream with ``headers`` (ended at once for a request without body)."""
        stream_id = self.next_stream
        self.next_stream += STREAM_ID_STEP
        self.streams[stream_id] = callbacks
        head = wire.encode_headers([(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers])
        self.engine.send(wire.Cmd.REQUEST, UPSTREAM_CONN, a=stream_id, b=int(not end), payload=head)
        return stream_id

    def send_data(self, stream_id: int, data: bytes, end: bool = False) -> None:
        if stream_id in self.streams:
            self.engine.send_body(UPSTREAM_CONN, stream_id, data, fin=end)

    def reset(self, stream_id: int) -> None:
        if self.streams.pop(stream_id, None) is not None:
            self.engine.send(wire.Cmd.STOP, UPSTREAM_CONN, stream_id, a=H3_ERROR_REQUEST_CANCELLED,
                             b=wire.STOP_READING | wire.STOP_WRITING)  # fmt: skip

    def on_event(self, event: wire.Event) -> None:
        if isinstance(event, wire.Handshake) and not self.connected.done():
            self.connected.set_result(None)
        elif isinstance(event, wire.StreamOpened):
            if event.stream != event.tag:  # the order the engine opens streams in
                self._on_lost(f"stream {event.stream} opened for request {event.tag}")
        elif isinstance(event, wire.Headers):
            callbacks = self.streams.get(event.stream)
            if callbacks is not None:
                pairs = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in event.headers]
                callbacks.on_headers(pairs, event.ended)
                if event.ended:
                    self._end(event.stream)
        elif isinstance(event, wire.Data) and event.data:
            callbacks = self.streams.get(event.stream)
            if callbacks is not None:
                callbacks.on_data(event.data)
        elif isinstance(event, wire.End):
            self._end(event.stream)
        elif isinstance(event, wire.Reset):
            callbacks = self.streams.pop(event.stream, None)
            if callbacks is not None:
                callbacks.on_reset()
        elif isinstance(event, wire.Stats):
            self.stats = event.values
        elif isinstance(event, wire.Closed):
            self._on_lost(f"{event.error_code}: {event.reason}")

    def _end(self, stream_id: int) -> None:
        callbacks = self.streams.pop(stream_id, None)
        if callbacks is not None:
            callbacks.on_end()

    def _on_lost(self, reason: str) -> None:
        if not self.connected.done():
            self.connected.set_exception(ConnectionError(reason))
        if self.lost.done():
            return
        self.lost.set_result(reason)
        self.relay.log.emit("upstream_lost", protocol="h3", reason=reason[:200])
        for callbacks in self.streams.values():
            callbacks.on_reset()
        self.streams.clear()

    def window_facts(self) -> dict[str, Any]:
        """The long haul's round trip and window after the warm-up (ngtcp2's connection
        state, the engine's newest sample)."""
        cwnd = self.stats.get("cwnd")
        srtt_us = self.stats.get("smoothed_rtt_us")
        return {
            "rtt_s": None if srtt_us is None else srtt_us / 1e6,
            "cwnd_segments": None if cwnd is None else int(cwnd // UPSTREAM_DATAGRAM_BYTES),
        }

    async def keep_alive(self) -> None:
        """ngtcp2 sends the PINGs (``--keep-alive-ms``): wait until the connection goes."""
        await asyncio.shield(self.lost)

    def close(self) -> None:
        if self.engine.alive:
            self.engine.send(wire.Cmd.QUIT, -1)


async def connect_upstream_native(relay: Any) -> NativeUpstream:
    """Start the engine, open the long-haul connection and wait for its handshake."""
    config = relay.config
    settings = config.settings.replace(
        max_datagram_size_bytes=UPSTREAM_DATAGRAM_BYTES,
        quic_max_data_bytes=config.window_bytes,
        quic_pacing="off",
    )
    argv = [
        "--client",
        f"--host={config.upstream_host}",
        f"--port={config.upstream_h3_port}",
        "--sni=testbed",
        f"--keep-alive-ms={round(KEEPALIVE_S * 1e3)}",
        *native.engine_argv(settings, qlog_dir=None, sample_hz=100.0, idle_timeout_s=3600.0),
    ]
    engine = native.Engine(argv)
    await engine.start()
    upstream = NativeUpstream(relay, engine)
    engine.send(wire.Cmd.CONNECT, UPSTREAM_CONN)
    try:
        await asyncio.wait_for(asyncio.shield(upstream.connected), CONNECT_TIMEOUT_S)
    except BaseException:
        await engine.stop()
        raise
    relay.log.emit("upstream_connected", protocol="h3", addr=relay.authority_h3)
    return upstream
