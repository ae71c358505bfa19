"""One record per request, written as JSONL: what the client saw, on CLOCK_MONOTONIC."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

RECORD_SCHEMA_VERSION = 1


@dataclass
class RequestRecord:
    """Times are ``time.monotonic()`` seconds (CLOCK_MONOTONIC, shared with the server log).

    For a reused connection ``connect_start``/``tcp_connected``/``handshake_done`` are those
    of the connection the request ran on (so they precede the request by a lot).
    """

    request_id: int
    protocol: str
    connection: str
    """new, reused or 0rtt."""
    workload: str
    warmup: bool
    conn_index: int = 0
    """Which connection of this run carried the request (0-based)."""
    stream_id: int | None = None
    connect_start: float | None = None
    tcp_connected: float | None = None
    """None for h3."""
    handshake_done: float | None = None
    request_first_byte: float | None = None
    """HEADERS handed to the transport."""
    request_last_byte: float | None = None
    """The last body byte handed to the kernel (h2) or put in a packet (h3)."""
    response_first_byte: float | None = None
    """Response HEADERS received."""
    response_last_byte: float | None = None
    resumed: bool | None = None
    early_data_accepted: bool | None = None
    up_bytes: int = 0
    """Request body bytes sent."""
    down_bytes: int = 0
    """Response body bytes received."""
    status: int | None = None
    sha256_ok: bool | None = None
    """Every checksum of the exchange matched (upload as echoed by the server, download)."""
    error: str | None = None
    """None, or a one-line reason the request failed."""
    tcp_info: dict[str, Any] | None = None
    """TCP_INFO at the end of the request (h2)."""
    quic: dict[str, Any] | None = None
    """aioquic recovery counters at the end of the request (h3)."""
    chunk_times: list[float] | None = None
    """stream workload: arrival time of each complete 960-byte chunk."""
    stream_workload: str | None = None
    """multi: which workload this stream of the group carried (tts, stream, result)."""
    stream_index: int | None = None
    """multi: position of this stream's request in the group (0 = sent first)."""
    priority: str | None = None
    """The RFC 9218 priority the client signalled for this stream, if any."""
    response_body_first_byte: float | None = None
    """The first response body byte handed to the application."""
    cancelled_at: float | None = None
    """When the client cancelled the response (RST_STREAM / STOP_SENDING + RESET_STREAM)."""
    bytes_at_cancel: int | None = None
    """Body bytes the application had read when it cancelled."""
    schema: int = RECORD_SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None and self.status == 200 and bool(self.sha256_ok)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def write_records(path: Path, records: list[RequestRecord]) -> None:
    """Write all records (atomically: a temporary file renamed over ``path``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(record.to_json() + "\n")
    tmp.replace(path)


def read_records(path: Path) -> list[RequestRecord]:
    with path.open(encoding="utf-8") as handle:
        return [RequestRecord.from_dict(json.loads(line)) for line in handle if line.strip()]
