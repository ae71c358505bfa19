"""What the relay's two sides share (servers.relay: HTTP/2 and the process; servers.relay_h3:
HTTP/3): the configuration, the event log, one request on a warm upstream, and the request
head as forwarded."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from servers.events import JsonlLog
from tbcore.errors import SpecError
from tbcore.records import RelayEvent
from tbcore.settings import Settings

DEFAULT_WINDOW_BYTES = 16 * 2**20
"""HTTP/2 stream and connection windows of both connections (as the server's default)."""
DEFAULT_WARMUP = 3
DEFAULT_WARMUP_BYTES = 2_000_000
"""Each warm-up upload: several BDPs of a 20 Mbit/s path, a sixth of one at 333 Mbit/s /
200 ms; three rounds grow the window past the 354,640-byte audio on either."""
CONNECT_TIMEOUT_S = 30.0
UPSTREAM_DATAGRAM_BYTES = 1452
"""The HTTP/3 long haul's QUIC datagrams (either stack's): a 1,500-byte MTU less IPv4 and UDP
headers (28 bytes) and 20 bytes of margin, as the direct tuned HTTP/3 arms use."""
H3_ERROR_REQUEST_CANCELLED = 0x010C
"""RFC 9114 section 8.1: H3_REQUEST_CANCELLED, for a stream whose other half was reset."""
KEEPALIVE_S = 10.0
"""A PING on an idle upstream this often (RFC 9113 section 6.7; RFC 9000 section 10.1.2):
well inside the server's 60 s idle timeout (servers.config.DEFAULT_IDLE_TIMEOUT_S) and
QUIC's (proto.quic.edge.QUIC_IDLE_TIMEOUT_S), so a warm upstream is never closed for idling
while levels that do not use it run."""
RELAY_PROTOCOLS = ("h2", "h3")
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding"})
"""RFC 9113 section 8.2.2: connection-specific fields are not forwarded."""


class RelayLog(JsonlLog):
    """The relay's event log: one :class:`tbcore.records.RelayEvent` per JSON line."""

    def emit(self, event: str, **details: Any) -> dict[str, Any]:
        return self.write(RelayEvent(t=time.monotonic(), event=event, **details).to_dict())


@dataclass
class StreamCallbacks:
    """Where an upstream stream's response goes."""

    on_headers: Callable[[list[tuple[bytes, bytes]], bool], None]
    on_data: Callable[[bytes], None]
    on_end: Callable[[], None]
    on_reset: Callable[[], None]


async def fetch(upstream: Any, method: str, path: str, authority: str, body: bytes = b"") -> bytes:
    """One request on a warm upstream (either side's: ``request`` and ``send_data``),
    returning the response body; the warm-ups use it."""
    done: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
    received = bytearray()

    def end() -> None:
        if not done.done():
            done.set_result(bytes(received))

    def reset() -> None:
        if not done.done():
            done.set_exception(ConnectionError(f"{method} {path}: stream reset"))

    headers = [
        (b":method", method.encode()),
        (b":scheme", b"https"),
        (b":authority", authority.encode()),
        (b":path", path.encode()),
    ]
    if body:
        headers.append((b"content-length", str(len(body)).encode()))
    callbacks = StreamCallbacks(lambda h, e: None, received.extend, end, reset)
    sid = upstream.request(headers, callbacks, end=not body)
    if body:
        upstream.send_data(sid, body, end=True)
    return await done


@dataclass
class RelayConfig:
    """The relay's listener, its upstream and the warm-up, each with its unit."""

    bind: str
    port: int
    upstream_host: str
    upstream_port: int
    log_path: Any = None
    window_bytes: int = DEFAULT_WINDOW_BYTES
    warmup: int = DEFAULT_WARMUP
    warmup_bytes: int = DEFAULT_WARMUP_BYTES
    settings: Any = field(default_factory=Settings)
    """The TCP knobs (cc, buffers...) and ``quic_cc`` of both sides."""
    cert_dir: Any = None
    protocols: tuple[str, ...] = ("h2",)
    """The sides to run: h2 (TCP, front and upstream) and/or h3 (QUIC, the same port on UDP)."""
    upstream_h3_port: int | None = None
    """The server's HTTP/3 (UDP) port; None: ``upstream_port``."""

    def __post_init__(self) -> None:
        for name in ("port", "upstream_port"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
                raise SpecError(name, f"must be a port in [0, 65535], got {value!r}")
        for name in ("warmup", "warmup_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SpecError(name, f"must be a whole number >= 0, got {value!r}")
        if not self.protocols or set(self.protocols) - set(RELAY_PROTOCOLS):
            raise SpecError("protocols", f"{self.protocols!r}: one or both of h2, h3")
        if self.upstream_h3_port is None:
            self.upstream_h3_port = self.upstream_port
        if self.window_bytes < 65_535 or self.window_bytes > 2**31 - 1:
            raise SpecError("window_bytes", f"must lie in [65535, 2^31-1], got {self.window_bytes}")


class RelayState:
    """What both sides of a relay share: its configuration, event log, upstreams and the
    request head it forwards (servers.relay runs the HTTP/2 side, servers.relay_h3 the
    HTTP/3 one)."""

    def __init__(self, config: RelayConfig) -> None:
        self.config = config
        self.log = RelayLog(config.log_path)
        self.upstream: Any = None
        """The HTTP/2 side's upstream (servers.relay.Upstream) when it runs."""
        self.upstream_h3: Any = None
        """The HTTP/3 side's upstream (servers.relay_h3.H3Upstream) when it runs."""
        self.front_ids = 0
        self._keepalives: list[asyncio.Future[None]] = []
        self.authority = f"{config.upstream_host}:{config.upstream_port}"
        self.authority_h3 = f"{config.upstream_host}:{config.upstream_h3_port}"

    def forward_headers(
        self, headers: list[tuple[bytes, bytes]], authority: str | None = None
    ) -> list[tuple[bytes, bytes]]:
        """The request head as sent upstream: no hop-by-hop fields, ``:authority`` the
        upstream's (``authority``, default the HTTP/2 one)."""
        authority = self.authority if authority is None else authority
        out = []
        for name, value in headers:
            key = name.lower()
            if key in HOP_BY_HOP:
                continue
            if key == b":authority":
                value = authority.encode()
            out.append((name, value))
        return out
