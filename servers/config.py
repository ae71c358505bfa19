"""Server configuration: the run's settings (tbcore.settings) plus what belongs to this process
(addresses, files, process limits), validated on construction."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tbcore.errors import SpecError
from tbcore.settings import HasSettings, Settings

DEFAULT_MAX_BODY_BYTES = 64_000_000
"""Request bodies above this get 413; the 30 MB image fits."""
DEFAULT_PORT = 8443
DEFAULT_UDP_BUFFER_BYTES = 8 * 1024 * 1024
"""UDP SO_RCVBUF/SO_SNDBUF: loopback overflows the 208 KB default (NOTES-machine.md)."""
DEFAULT_HANDSHAKE_TIMEOUT_S = 10.0
DEFAULT_IDLE_TIMEOUT_S = 60.0
DEFAULT_SAMPLE_HZ = 1000.0


@dataclass
class ServerConfig(HasSettings):
    """Everything `testbed serve` takes. The knobs of a run are in ``settings``."""

    bind: str = "127.0.0.1"
    h2_port: int | None = DEFAULT_PORT
    """TCP port of HTTP/2 over TLS 1.3; None: no h2 listener. 0: any free port."""
    h3_port: int | None = DEFAULT_PORT
    """UDP port of HTTP/3; None: no h3 listener. 0: any free port."""
    settings: Any = field(default_factory=Settings)
    """The run's :class:`tbcore.settings.Settings` (socket, QUIC, HTTP/2, processing)."""
    log_path: Path | None = None
    """JSONL event log (CLOCK_MONOTONIC seconds)."""
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

    def __post_init__(self) -> None:
        self.check_settings()
        for name in ("h2_port", "h3_port"):
            port = getattr(self, name)
            if port is not None and not 0 <= port <= 65535:
                raise SpecError(name.replace("_", "-"), f"port {port} is not in 0..65535")
        if self.h2_port is None and self.h3_port is None:
            raise SpecError("h2-port", "at least one of h2 and h3 must listen")
        if self.max_body_bytes < 0:
            raise SpecError("max-body", "must be >= 0 bytes")
