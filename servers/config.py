"""Server configuration: the run's settings (tbcore.settings) plus what belongs to this process
(addresses, files, process limits), validated on construction."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servers.guard import (
    DEFAULT_HEAD_TIMEOUT_S,
    DEFAULT_LISTEN_BACKLOG,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_SOURCE,
    DEFAULT_RETRY_THRESHOLD,
    RETRY_MODES,
)
from tbcore.errors import SpecError
from tbcore.sampler import check_sample_hz
from tbcore.settings import HasSettings, Settings

DEFAULT_MAX_BODY_BYTES = 72_000_000
"""Request bodies above this get 413; the 30 MB image and the 64 MiB migrated state fit."""
DEFAULT_PORT = 8443
DEFAULT_UDP_BUFFER_BYTES = 8 * 1024 * 1024
"""UDP SO_RCVBUF/SO_SNDBUF: loopback overflows the 208 KB default (docs/machine.md)."""
DEFAULT_HANDSHAKE_TIMEOUT_S = 10.0
DEFAULT_IDLE_TIMEOUT_S = 60.0
DEFAULT_SAMPLE_HZ = 1000.0
MAX_TIMEOUT_S = 86_400.0
"""Timeouts above a day are a typo (and ``1e300s`` would overflow the event loop's timers)."""
MAX_CONNECTION_COUNT = 1_000_000
"""Connection caps and backlogs above a million exceed any file descriptor limit here."""


@dataclass
class ServerConfig(HasSettings):
    """Everything `testbed serve` takes. The knobs of a run are in ``settings``."""

    bind: str = "127.0.0.1"
    h2_port: int | None = DEFAULT_PORT
    """TCP port of HTTP/2 over TLS 1.3; None: no h2 listener. 0: any free port."""
    h3_port: int | None = DEFAULT_PORT
    """UDP port of HTTP/3; None: no h3 listener. 0: any free port."""
    fec_port: int | None = None
    """UDP port of the FEC datagrams and TCP port of its TLS control channel (the same
    number); None: no FEC listener. 0: any free port."""
    settings: Any = field(default_factory=Settings)
    """The run's :class:`tbcore.settings.Settings` (socket, QUIC, HTTP/2, processing)."""
    log_path: Path | None = None
    """JSONL event log (CLOCK_MONOTONIC seconds)."""
    applied_path: Path | None = None
    """Where the server records what it put in force (tbcore.records.AppliedRecord, JSONL)."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    samples_path: Path | None = None
    """In-flight samples of the server as sender (TCP_INFO / aioquic recovery), CSV, written
    when the server stops; sampled from the first response byte until all is acknowledged."""
    sample_hz: float = DEFAULT_SAMPLE_HZ
    qlog_dir: Path | None = None
    keylog_path: Path | None = None
    cert_dir: Path | None = None
    udp_buffer_bytes: int = DEFAULT_UDP_BUFFER_BYTES
    handshake_timeout_s: float = DEFAULT_HANDSHAKE_TIMEOUT_S
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    head_timeout_s: float = DEFAULT_HEAD_TIMEOUT_S
    """HTTP/2: a request head (or the preface) must be complete this long after its first
    byte; a QUIC handshake must complete within ``handshake_timeout_s``."""
    quic_retry: str = "auto"
    """QUIC address validation with Retry: "auto" (under load), "always" or "off"."""
    quic_retry_threshold: int = DEFAULT_RETRY_THRESHOLD
    """Connections in handshake (or attempts per second) above which "auto" sends Retry."""
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    """Concurrent connections per protocol; beyond it new ones are refused."""
    max_connections_per_source: int = DEFAULT_MAX_CONNECTIONS_PER_SOURCE
    """Concurrent connections per protocol from one source address."""
    listen_backlog: int = DEFAULT_LISTEN_BACKLOG
    """TCP listen() backlog (the kernel caps it at net.core.somaxconn)."""

    def __post_init__(self) -> None:
        self.check_settings()
        for name in ("h2_port", "h3_port", "fec_port"):
            port = getattr(self, name)
            if port is not None and not 0 <= port <= 65535:
                raise SpecError(name.replace("_", "-"), f"port {port} is not in 0..65535")
        if self.h2_port is None and self.h3_port is None and self.fec_port is None:
            raise SpecError("h2-port", "at least one of h2, h3 and fec must listen")
        if self.fec_port is not None and self.settings.fec_rate_bps is None:
            raise SpecError("fec-rate", "the FEC server needs the path's rate (e.g. 333mbit)")
        check_sample_hz("sample-hz", self.sample_hz)
        if self.max_body_bytes < 0:
            raise SpecError("max-body", "must be >= 0 bytes")
        for name in ("idle_timeout_s", "head_timeout_s", "handshake_timeout_s"):
            if not 0 < getattr(self, name) <= MAX_TIMEOUT_S:
                raise SpecError(
                    name.removesuffix("_s").replace("_", "-"),
                    f"must be > 0 s and at most {MAX_TIMEOUT_S:g} s",
                )
        if self.quic_retry not in RETRY_MODES:
            raise SpecError("quic-retry", f"{self.quic_retry!r} is not one of auto, always, off")
        for name in (
            "quic_retry_threshold",
            "max_connections",
            "max_connections_per_source",
            "listen_backlog",
        ):
            value = getattr(self, name)
            if not 1 <= value <= MAX_CONNECTION_COUNT:
                raise SpecError(
                    name.replace("_", "-"), f"{value} is not in 1..{MAX_CONNECTION_COUNT}"
                )
