"""Server configuration: one dataclass, each field with its unit, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from servers.knobs import QUIC_MIN_DATAGRAM_BYTES, check_quic_pacing, check_transport_fields
from tbcore.errors import SpecError

DEFAULT_H2_WINDOW_BYTES = 16 * 1024 * 1024
"""HTTP/2 stream and connection windows large enough not to be the limit (16 MiB)."""
DEFAULT_MAX_BODY_BYTES = 64_000_000
"""Request bodies above this get 413; the 30 MB image fits."""
DEFAULT_PROCESSING_AUDIO_S = 0.030
DEFAULT_PROCESSING_IMAGE_S = 0.300
DEFAULT_PORT = 8443
DEFAULT_UDP_BUFFER_BYTES = 8 * 1024 * 1024
"""UDP SO_RCVBUF/SO_SNDBUF: loopback overflows the 208 KB default (NOTES-machine.md)."""
DEFAULT_HANDSHAKE_TIMEOUT_S = 10.0
DEFAULT_IDLE_TIMEOUT_S = 60.0


@dataclass
class ServerConfig:
    """Everything `testbed serve` takes. ``None`` means "leave the kernel/library default"."""

    bind: str = "127.0.0.1"
    h2_port: int | None = DEFAULT_PORT
    """TCP port of HTTP/2 over TLS 1.3; None: no h2 listener. 0: any free port."""
    h3_port: int | None = DEFAULT_PORT
    """UDP port of HTTP/3; None: no h3 listener. 0: any free port."""
    fec_port: int | None = None
    """UDP port of the FEC datagrams and TCP port of its TLS control channel (the same
    number); None: no FEC listener. 0: any free port."""
    log_path: Path | None = None
    """JSONL event log (CLOCK_MONOTONIC seconds)."""
    cc: str | None = None
    """TCP congestion control of accepted sockets."""
    window_clamp_bytes: int | None = None
    sndbuf_bytes: int | None = None
    rcvbuf_bytes: int | None = None
    max_pacing_rate_bps: float | None = None
    """SO_MAX_PACING_RATE, in bit/s here (the kernel takes bytes/s); for QUIC the same cap
    on the pacer (see ``quic_pacing``)."""
    notsent_lowat_bytes: int | None = None
    quickack: bool = False
    quic_cc: str = "reno"
    max_datagram_size: int = QUIC_MIN_DATAGRAM_BYTES
    quic_max_data_bytes: int | None = None
    """Fixed QUIC flow-control windows (connection and stream); None: aioquic's growing ones."""
    h2_window_bytes: int = DEFAULT_H2_WINDOW_BYTES
    processing_audio_s: float = DEFAULT_PROCESSING_AUDIO_S
    processing_image_s: float = DEFAULT_PROCESSING_IMAGE_S
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    samples_path: Path | None = None
    """In-flight samples of the server as sender (TCP_INFO / aioquic recovery), CSV, written
    when the server stops; sampled from the first response byte until all is acknowledged."""
    sample_hz: float = 1000.0
    qlog_dir: Path | None = None
    keylog_path: Path | None = None
    cert_dir: Path | None = None
    udp_buffer_bytes: int = DEFAULT_UDP_BUFFER_BYTES
    quic_pacing: str | float = "cwnd"
    """QUIC sender pacing: "cwnd" (aioquic's: cwnd / srtt), "off" (cwnd-limited bursts,
    as Linux reno/cubic without fq), or a fixed rate in bit/s (e.g. the path's)."""
    quic_batching: bool = True
    """QUIC: send runs of datagrams as UDP GSO segments (one system call per run) and
    transmit once per batch of datagrams read, not once per datagram."""
    fec_rate_bps: float | None = None
    """FEC: the path's configured rate, a cap the sender never exceeds; required for fec."""
    fec_redundancy: str = "adaptive"
    """FEC: "adaptive" (from the receiver's loss estimate) or a fixed percentage ("25.7%")."""
    fec_target: float = 0.999
    """FEC: the adaptive redundancy's success probability per transfer (MODELS.md s10)."""
    handshake_timeout_s: float = DEFAULT_HANDSHAKE_TIMEOUT_S
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S

    def __post_init__(self) -> None:
        check_quic_pacing(self.quic_pacing)
        for name in ("h2_port", "h3_port", "fec_port"):
            port = getattr(self, name)
            if port is not None and not 0 <= port <= 65535:
                raise SpecError(name.replace("_", "-"), f"port {port} is not in 0..65535")
        if self.h2_port is None and self.h3_port is None and self.fec_port is None:
            raise SpecError("h2-port", "at least one of h2, h3 and fec must listen")
        if self.fec_port is not None and self.fec_rate_bps is None:
            raise SpecError("fec-rate", "the FEC server needs the path's rate (e.g. 333mbit)")
        check_transport_fields(self)
        for name in ("processing_audio_s", "processing_image_s"):
            if getattr(self, name) < 0:
                raise SpecError(name.removesuffix("_s").replace("_", "-"), "must be >= 0")
        if self.max_body_bytes < 0:
            raise SpecError("max-body", "must be >= 0 bytes")
