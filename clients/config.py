"""Client configuration: one dataclass, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from servers.knobs import QUIC_MIN_DATAGRAM_BYTES, check_quic_pacing, check_transport_fields
from tbcore.errors import SpecError

PROTOCOLS = ("h2", "h3", "fec")
WORKLOAD_NAMES = ("asr", "tts", "retouch", "stream", "image", "sink")
"""The issue's four workloads, then the two 30 MB bench transfers (down, up)."""
CONNECTION_MODES = ("new", "reused", "0rtt")
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_CHUNKS = 50


@dataclass
class ClientConfig:
    """Everything ``testbed client`` takes."""

    protocol: str = "h2"
    host: str = "127.0.0.1"
    port: int = 8443
    workload: str = "asr"
    chunks: int = DEFAULT_CHUNKS
    """Chunks of the ``stream`` workload."""
    requests: int = 1
    """Measured requests."""
    warmup: int = 0
    """Requests sent first and recorded with ``warmup=True`` (reused: on the same connection;
    new/0rtt: each on its own connection, which also primes TLS tickets)."""
    connection: str = "new"
    resume: bool = False
    """TLS session resumption for new TCP connections (the ticket of the previous one)."""
    cc: str | None = None
    window_clamp_bytes: int | None = None
    sndbuf_bytes: int | None = None
    rcvbuf_bytes: int | None = None
    max_pacing_rate_bps: float | None = None
    """SO_MAX_PACING_RATE (bit/s); for QUIC the same cap on the pacer."""
    notsent_lowat_bytes: int | None = None
    quickack: bool = False
    quic_cc: str = "reno"
    max_datagram_size: int = QUIC_MIN_DATAGRAM_BYTES
    quic_max_data_bytes: int | None = None
    h2_window_bytes: int = 16 * 1024 * 1024
    records_path: Path | None = None
    samples_path: Path | None = None
    sample_hz: float = 1000.0
    qlog_dir: Path | None = None
    keylog_path: Path | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    """Limit on each connect and each request; nothing waits longer."""
    server_name: str = "testbed.local"
    udp_buffer_bytes: int = 8 * 1024 * 1024
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

    def __post_init__(self) -> None:
        check_quic_pacing(self.quic_pacing)
        if self.protocol not in PROTOCOLS:
            raise SpecError("protocol", f"{self.protocol!r} is not one of h2, h3")
        if self.workload not in WORKLOAD_NAMES:
            raise SpecError(
                "workload", f"{self.workload!r} is not one of {', '.join(WORKLOAD_NAMES)}"
            )
        if self.connection not in CONNECTION_MODES:
            raise SpecError("connection", f"{self.connection!r} is not one of new, reused, 0rtt")
        if self.protocol == "fec" and self.fec_rate_bps is None:
            raise SpecError("fec-rate", "the FEC client needs the path's rate (e.g. 333mbit)")
        if self.connection == "0rtt" and self.protocol != "h3":
            raise SpecError(
                "connection",
                "0rtt needs h3: Python's ssl has no TLS 1.3 early data (use --resume for h2)",
            )
        if self.requests < 1:
            raise SpecError("requests", f"must be >= 1, got {self.requests}")
        if self.warmup < 0:
            raise SpecError("warmup", f"must be >= 0, got {self.warmup}")
        if not 1 <= self.chunks <= 30_000:
            raise SpecError("chunks", f"must be in 1..30000, got {self.chunks}")
        if not 0 < self.port <= 65535:
            raise SpecError("port", f"{self.port} is not in 1..65535")
        check_transport_fields(self)
        if self.timeout_s <= 0:
            raise SpecError("timeout", "must be > 0 s")
        if not 1 <= self.sample_hz <= 100_000:
            raise SpecError("sample-hz", f"must be in 1..100000, got {self.sample_hz}")
