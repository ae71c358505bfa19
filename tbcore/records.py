"""The record model: every record the stacks emit and the harness reads, as typed classes.

One class per kind of record, written and read by the same class. Each is a dataclass
subclass of :class:`Record` registered with :func:`record` under a schema name and version;
every field has a docstring (``col(doc=...)``) and, where it has one, a unit in its name.
A serialised record carries ``schema = "<name>/<version>"``; reading checks it, and a
missing or unknown field fails with a :class:`RecordError` naming the field.

Files: JSONL (:func:`write_jsonl` / :func:`read_jsonl`) and CSV (:func:`write_csv` /
:func:`read_csv`). Adding a record type: declare a dataclass with ``@record("name", 1)``
and write it with these functions; adding a column: one ``col(...)`` field (and bump the
version when an existing field changes meaning).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields, make_dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from tbcore.errors import SpecError
from tbcore.tcpinfo import SAMPLE_FIELDS as TCP_SAMPLE_FIELDS

SCHEMA_KEY = "schema"
US_PER_S = 1e6

R = TypeVar("R", bound="Record")


class RecordError(SpecError):
    """A record that does not match its class: the field and what is wrong."""


def col(
    default: Any = None, *, doc: str, unit: str = "", factory: Any = None, group: str = ""
) -> Any:
    """A field of a record with its documentation (used by the results README). ``group``:
    the kind of run that fills it (a table keeps a group's columns only when some run of
    its experiment is of that kind; empty: every run)."""
    meta = {"doc": doc, "unit": unit, "group": group}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    if default is MISSING:
        return field(metadata=meta)
    return field(default=default, metadata=meta)


REQUIRED: Any = MISSING
"""``col(REQUIRED, doc=...)``: a field without a default."""

RECORD_TYPES: dict[str, type[Record]] = {}
"""Every record class by its schema name."""


class Record:
    """Base of the record classes (dataclasses registered with :func:`record`)."""

    SCHEMA: ClassVar[str] = ""
    VERSION: ClassVar[int] = 0
    READS_OLDER: ClassVar[bool] = False
    """A line of an older version of the schema is read with the fields it predates as None
    (its writer did not measure them); a field this version does not know is still refused."""

    @classmethod
    def schema_tag(cls) -> str:
        return f"{cls.SCHEMA}/{cls.VERSION}"

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        """Every field (nested records as dicts), then the schema tag."""
        return {**asdict(self), SCHEMA_KEY: self.schema_tag()}  # type: ignore[call-overload]

    def to_json(self) -> str:
        return json.dumps(clean_json(self.to_dict()), separators=(",", ":"))

    @classmethod
    def older_version(cls, tag: object) -> int | None:
        """The version ``tag`` names when it is an earlier one of this schema, else None."""
        prefix = f"{cls.SCHEMA}/"
        text = str(tag)
        number = text.removeprefix(prefix)
        if text.startswith(prefix) and number.isdigit() and 0 < int(number) < cls.VERSION:
            return int(number)
        return None

    @classmethod
    def from_dict(cls: type[R], data: Mapping[str, Any], where: str = "") -> R:
        """The record of ``data``: its schema tag must match (or name an older version, where
        the class reads them); no field missing, none unknown."""
        where = where or cls.SCHEMA
        tag = data.get(SCHEMA_KEY)
        older = cls.READS_OLDER and cls.older_version(tag) is not None
        if tag != cls.schema_tag() and not older:
            raise RecordError(f"{where}.{SCHEMA_KEY}", f"{tag!r}, expected {cls.schema_tag()!r}")
        names = cls.field_names()
        for key in data:
            if key != SCHEMA_KEY and key not in names:
                raise RecordError(f"{where}.{key}", "unknown field")
        if older:
            data = {**dict.fromkeys(names), **data}
        for name in names:
            if name not in data:
                raise RecordError(f"{where}.{name}", "missing")
        values = {}
        for item in fields(cls):  # type: ignore[arg-type]
            value = data[item.name]
            nested = NESTED.get((cls, item.name))
            if nested is not None and value is not None:
                value = nested.from_plain(value, f"{where}.{item.name}")
            values[item.name] = value
        return cls(**values)


def record(name: str, version: int) -> Any:
    """Class decorator: make a :class:`Record` dataclass and register its schema."""

    def wrap(cls: type[R]) -> type[R]:
        if name in RECORD_TYPES:
            raise ValueError(f"record schema {name!r} defined twice")
        cls.SCHEMA, cls.VERSION = name, version
        made = cls if "__dataclass_fields__" in cls.__dict__ else dataclass(cls)
        RECORD_TYPES[name] = made
        return made

    return wrap


# --- nested values: the sender state at the end of a request ----------------------------------


class Snapshot:
    """A flat record of counters nested in another record (no schema tag of its own)."""

    @classmethod
    def from_plain(cls, data: Any, where: str) -> Any:
        if not isinstance(data, dict):
            raise RecordError(where, "must be an object")
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        for key in data:
            if key not in names:
                raise RecordError(f"{where}.{key}", "unknown field")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]


BBR_COUNTERS = (
    "delivery_rate",
    "bbr_mode",
    "bbr_bw",
    "bbr_min_rtt_us",
    "bbr_pacing_gain",
    "bbr_cwnd_gain",
)
"""What only a BBR control fills in a QUIC sender sample (None otherwise); tcp_bbr_info's
units."""
QUIC_SAMPLE_FIELDS = (
    "bytes_in_flight",
    "cwnd",
    "ssthresh",
    "smoothed_rtt_us",
    "latest_rtt_us",
    "min_rtt_us",
    "packets_sent",
    "packets_lost",
    "pto_count",
    "pacing_rate",
    *BBR_COUNTERS,
)
"""Columns of a QUIC sender sample (aioquic's recovery state, in TCP_INFO's units):
``pacing_rate`` (bytes/s) is the pacer's; ``delivery_rate`` and the ``bbr_*`` columns only a
BBR control fills, in the units of the kernel's tcp_bbr_info (TCP_CC_INFO): bw in bytes/s,
min RTT in µs, gains x 256; ``bbr_mode`` is enum bbr_mode (0 Startup, 1 Drain, 2 ProbeBW,
3 ProbeRTT)."""


def _snapshot(name: str, doc: str, columns: tuple[str, ...]) -> Any:
    """A :class:`Snapshot` class of integer counters, each None when not known."""
    made = make_dataclass(
        name, [(c, "int | None", field(default=None)) for c in columns], bases=(Snapshot,)
    )
    made.__module__, made.__doc__ = __name__, doc
    return made


TcpInfo: Any = _snapshot(
    "TcpInfo",
    "TCP_INFO of a socket (tbcore.tcpinfo.SAMPLE_FIELDS; times in µs).",
    TCP_SAMPLE_FIELDS,
)
QuicRecovery: Any = _snapshot(
    "QuicRecovery", "aioquic's recovery state of a connection (times in µs).", QUIC_SAMPLE_FIELDS
)


@dataclass
class FecFigures(Snapshot):
    """One FEC request's figures (proto.fec.session.TransferStats as dicts)."""

    request: dict[str, Any] | None = None
    """The request transfer as its sender (the client) saw it."""
    request_received: dict[str, Any] | None = None
    """The request as the server received it (told back in the response)."""
    response: dict[str, Any] | None = None
    """The response transfer as its receiver (the client) saw it."""
    session: dict[str, Any] | None = None
    """The session: pacing rate and its source, RTT, datagram and drop counters."""
    probe_done: float | None = None
    """When the path probe of the session finished (CLOCK_MONOTONIC s)."""

    def data(self) -> tuple[dict[str, Any] | None, str]:
        """The larger transfer of the exchange (the one the workload is about) and who
        received it: ('server' for the request, 'client' for the response)."""
        request = self.request or {}
        response = self.response or {}
        if request.get("transfer_bytes", 0) >= response.get("transfer_bytes", 0):
            merged = {**request, **{k: v for k, v in (self.request_received or {}).items()}}
            return (merged if self.request else None), "server"
        return (self.response, "client")


def tcp_info_of(info: Mapping[str, Any]) -> Any:
    """The :class:`TcpInfo` of a parsed TCP_INFO (fields beyond the sample's are dropped)."""
    return TcpInfo(**{name: info.get(name) for name in TCP_SAMPLE_FIELDS})


# --- what the client records -----------------------------------------------------------------


@record("request", 4)
class RequestRecord(Record):
    """One request as the client saw it. Times are ``time.monotonic()`` seconds
    (CLOCK_MONOTONIC, shared with the server log and the link). For a reused connection
    ``connect_start``/``tcp_connected``/``handshake_done`` are those of the connection the
    request ran on (so they precede the request by a lot)."""

    request_id: int = col(REQUIRED, doc="Index of the request in its client process, from 0.")
    protocol: str = col(REQUIRED, doc="h2 or h3.")
    connection: str = col(REQUIRED, doc="new, reused or 0rtt.")
    workload: str = col(REQUIRED, doc="The workload's name (tbcore.workloads).")
    warmup: bool = col(REQUIRED, doc="A warm-up request (not measured).")
    conn_index: int = col(0, doc="Which connection of this run carried the request (0-based).")
    stream_id: int | None = col(doc="HTTP/2 or QUIC stream of the request.")
    connect_start: float | None = col(doc="Connection attempt started.", unit="s")
    tcp_connected: float | None = col(doc="TCP handshake done (None for h3).", unit="s")
    handshake_done: float | None = col(doc="TLS (or QUIC) handshake done.", unit="s")
    request_first_byte: float | None = col(doc="HEADERS handed to the transport.", unit="s")
    request_last_byte: float | None = col(
        doc="The last body byte handed to the kernel (h2) or put in a packet (h3).", unit="s"
    )
    response_first_byte: float | None = col(doc="Response HEADERS received.", unit="s")
    response_last_byte: float | None = col(doc="Last response byte received.", unit="s")
    resumed: bool | None = col(doc="TLS session resumed.")
    early_data_accepted: bool | None = col(doc="QUIC 0-RTT data accepted.")
    reconnected: bool | None = col(
        doc="reused: the request ran on a connection opened again after the previous one failed."
    )
    up_bytes: int = col(0, doc="Request body bytes sent.", unit="bytes")
    down_bytes: int = col(0, doc="Response body bytes received.", unit="bytes")
    status: int | None = col(doc="HTTP status.")
    sha256_ok: bool | None = col(
        doc="Every checksum of the exchange matched (upload as echoed, download)."
    )
    error: str | None = col(doc="None, or a one-line reason the request failed.")
    sample_error: str | None = col(
        doc="None, or why in-flight sampling of the request stopped early (a probe that raised)."
    )
    close_error: str | None = col(
        doc="None, or why closing the connection that carried the request failed or timed out."
    )
    tcp_info: Any = col(doc="TCP_INFO at the end of the request (h2): TcpInfo.")
    quic: Any = col(doc="aioquic recovery state at the end of the request (h3): QuicRecovery.")
    chunk_times: list[float] | None = col(
        doc="stream workload: arrival time of each complete chunk.", unit="s"
    )
    stream_workload: str | None = col(
        doc="multi: the workload this stream of the group carried (tts, stream, result)."
    )
    stream_index: int | None = col(doc="multi: position of the stream's request in its group.")
    priority: str | None = col(doc="The RFC 9218 priority the client signalled, if any.")
    response_body_first_byte: float | None = col(
        doc="The first response body byte handed to the application.", unit="s"
    )
    cancelled_at: float | None = col(
        doc="When the client cancelled the response (RST_STREAM / STOP_SENDING).", unit="s"
    )
    bytes_at_cancel: int | None = col(
        doc="Body bytes the application had read when it cancelled.", unit="bytes"
    )
    player: Any = col(
        doc="stream with player_buffer: the real-clock player's summary, events, flush time."
    )
    fec: Any = col(
        doc="fec: the request transfer (sender's view and receiver's), the response transfer "
        "(receiver's view) and the session: FecFigures."
    )

    @property
    def ok(self) -> bool:
        return self.error is None and self.status == 200 and bool(self.sha256_ok)

    @property
    def min_rtt_s(self) -> float | None:
        """The sender's own RTT floor at the end of the request (TCP_INFO or aioquic)."""
        snapshot = self.tcp_info if self.tcp_info is not None else self.quic
        value = None if snapshot is None else snapshot.min_rtt_us
        return None if not value else value / US_PER_S

    @property
    def retransmits(self) -> int | None:
        """Segments (h2) or packets (h3) the client retransmitted or declared lost."""
        if self.tcp_info is not None:
            return self.tcp_info.total_retrans
        return None if self.quic is None else self.quic.packets_lost


NESTED: dict[tuple[type, str], Any] = {
    (RequestRecord, "tcp_info"): TcpInfo,
    (RequestRecord, "quic"): QuicRecovery,
    (RequestRecord, "fec"): FecFigures,
}
"""Fields holding a :class:`Snapshot`: read back into their class."""


# --- what the server logs --------------------------------------------------------------------


@dataclass(frozen=True)
class ServerEventKind:
    """One kind of server event, with the details that kind has (one subclass per kind, as
    aioquic's and h2's events are). The log writes it as a :class:`ServerEvent` line."""

    EVENT: ClassVar[str] = ""
    proto: str | None = None
    conn: int | None = None
    stream: int | None = None

    def record(self, t: float) -> ServerEvent:
        """The log's line of this event at ``t``."""
        return ServerEvent(t=t, event=self.EVENT, **asdict(self))


@dataclass(frozen=True)
class Listening(ServerEventKind):
    EVENT: ClassVar[str] = "listening"
    addr: str | None = None


@dataclass(frozen=True)
class ConnectionOpen(ServerEventKind):
    EVENT: ClassVar[str] = "connection_open"
    peer: str | None = None
    alpn: str | None = None
    tls_version: str | None = None
    resumed: bool | None = None
    early_data_accepted: bool | None = None
    fec: dict[str, Any] | None = None


@dataclass(frozen=True)
class ConnectionClosed(ServerEventKind):
    EVENT: ClassVar[str] = "connection_closed"
    reason: str | None = None
    error_code: int | None = None
    fec: dict[str, Any] | None = None


@dataclass(frozen=True)
class RequestFirstByte(ServerEventKind):
    EVENT: ClassVar[str] = "request_first_byte"
    method: str | None = None
    path: str | None = None
    content_length: int | None = None
    priority: str | None = None


@dataclass(frozen=True)
class RequestBodyFirstByte(ServerEventKind):
    EVENT: ClassVar[str] = "request_body_first_byte"


@dataclass(frozen=True)
class RequestLastByte(ServerEventKind):
    EVENT: ClassVar[str] = "request_last_byte"
    received_bytes: int | None = None
    upload_sha256: str | None = None
    fec: dict[str, Any] | None = None


@dataclass(frozen=True)
class UploadTruncated(ServerEventKind):
    EVENT: ClassVar[str] = "upload_truncated"
    received_bytes: int | None = None
    content_length: int | None = None
    reason: str | None = None


@dataclass(frozen=True)
class ConnectionBreak(ServerEventKind):
    """The server reset the connection in place of a marked agent round's reply (the
    agent's outage_mode break); ``stream`` is that round's."""

    EVENT: ClassVar[str] = "connection_break"


@dataclass(frozen=True)
class ProcessingStart(ServerEventKind):
    EVENT: ClassVar[str] = "processing_start"
    tile: int | None = None


@dataclass(frozen=True)
class ProcessingEnd(ServerEventKind):
    EVENT: ClassVar[str] = "processing_end"
    tile: int | None = None


@dataclass(frozen=True)
class ResponseFirstByte(ServerEventKind):
    EVENT: ClassVar[str] = "response_first_byte"
    status: int | None = None


@dataclass(frozen=True)
class ResponseLastByte(ServerEventKind):
    EVENT: ClassVar[str] = "response_last_byte"
    bytes: int | None = None
    reason: str | None = None
    fec: dict[str, Any] | None = None


@dataclass(frozen=True)
class ChunkSent(ServerEventKind):
    EVENT: ClassVar[str] = "chunk_sent"
    index: int | None = None


@dataclass(frozen=True)
class StreamReset(ServerEventKind):
    EVENT: ClassVar[str] = "stream_reset"
    error_code: int | None = None


@dataclass(frozen=True)
class Abuse(ServerEventKind):
    EVENT: ClassVar[str] = "abuse"
    reason: str | None = None


@dataclass(frozen=True)
class Error(ServerEventKind):
    EVENT: ClassVar[str] = "error"
    reason: str | None = None
    count: int | None = None
    peer: str | None = None
    status: int | None = None


@dataclass(frozen=True)
class ChunkProduced(ServerEventKind):
    EVENT: ClassVar[str] = "chunk_produced"
    index: int | None = None


@dataclass(frozen=True)
class ChunkProductionStopped(ServerEventKind):
    EVENT: ClassVar[str] = "chunk_production_stopped"
    next_index: int | None = None


@dataclass(frozen=True)
class ResponseStopped(ServerEventKind):
    EVENT: ClassVar[str] = "response_stopped"
    bytes: int | None = None


@dataclass(frozen=True)
class StreamCancelled(ServerEventKind):
    EVENT: ClassVar[str] = "stream_cancelled"
    how: str | None = None
    error_code: int | None = None


@dataclass(frozen=True)
class PriorityUpdate(ServerEventKind):
    EVENT: ClassVar[str] = "priority_update"
    urgency: int | None = None
    incremental: bool | None = None


@dataclass(frozen=True)
class TileReceived(ServerEventKind):
    EVENT: ClassVar[str] = "tile_received"
    index: int | None = None


@dataclass(frozen=True)
class TileSent(ServerEventKind):
    EVENT: ClassVar[str] = "tile_sent"
    index: int | None = None
    bytes: int | None = None
    """The part of the result sent for the tile."""


SERVER_EVENTS: dict[str, type[ServerEventKind]] = {
    kind.EVENT: kind
    for kind in (
        Listening,
        ConnectionOpen,
        ConnectionClosed,
        ConnectionBreak,
        RequestFirstByte,
        RequestBodyFirstByte,
        RequestLastByte,
        UploadTruncated,
        ProcessingStart,
        ProcessingEnd,
        ResponseFirstByte,
        ResponseLastByte,
        ChunkSent,
        StreamReset,
        Abuse,
        Error,
        ChunkProduced,
        ChunkProductionStopped,
        ResponseStopped,
        StreamCancelled,
        PriorityUpdate,
        TileReceived,
        TileSent,
    )
}
"""Every kind of server event by its name (what a log line's ``event`` says)."""
SERVER_EVENT_NAMES = frozenset(SERVER_EVENTS)


@record("server_event", 3)
class ServerEvent(Record):
    """One line of a server's event log, on CLOCK_MONOTONIC: the union of the kinds'
    details (:data:`SERVER_EVENTS`), each None where the line's kind has no such detail."""

    t: float = col(REQUIRED, doc="time.monotonic() of the event.", unit="s")
    event: str = col(REQUIRED, doc="One of SERVER_EVENT_NAMES.")
    proto: str | None = col(doc="h2 or h3.")
    conn: int | None = col(doc="Connection number within the server process.")
    stream: int | None = col(doc="Stream of the event.")
    addr: str | None = col(doc="listening: the address and port.")
    peer: str | None = col(doc="The peer's address and port.")
    reason: str | None = col(doc="Why (error, reset, close, truncation).")
    count: int | None = col(doc="error: how many such errors so far.")
    alpn: str | None = col(doc="connection_open: the negotiated ALPN.")
    tls_version: str | None = col(doc="connection_open: the TLS version.")
    bytes: int | None = col(doc="Bytes of the event (body, chunk).", unit="bytes")
    received_bytes: int | None = col(doc="Bytes received before it.", unit="bytes")
    error_code: int | None = col(doc="HTTP/2 or HTTP/3 error code.")
    status: int | None = col(doc="Response status.")
    index: int | None = col(doc="chunk_sent: the chunk's index.")
    upload_sha256: str | None = col(doc="request_last_byte: SHA-256 of the body received.")
    method: str | None = col(doc="request_first_byte: the HTTP method.")
    path: str | None = col(doc="request_first_byte: the request path.")
    content_length: int | None = col(doc="The request's content-length.", unit="bytes")
    resumed: bool | None = col(doc="connection_open: TLS session resumed.")
    early_data_accepted: bool | None = col(doc="connection_open: 0-RTT data accepted.")
    priority: str | None = col(doc="request_first_byte: the RFC 9218 priority header sent.")
    urgency: int | None = col(doc="priority_update: the RFC 9218 urgency (0 most urgent).")
    incremental: bool | None = col(doc="priority_update: the RFC 9218 incremental flag.")
    how: str | None = col(doc="stream_cancelled: reset (RST_STREAM) or stop_sending.")
    next_index: int | None = col(doc="chunk_production_stopped: the first chunk not made.")
    tile: int | None = col(doc="processing_start/end of a tiled upload: the tile.")
    fec: dict[str, Any] | None = col(
        doc="fec: a transfer's figures (request_last_byte, response_last_byte) or the "
        "session's redundancy and datagram counters (connection_open, connection_closed)."
    )

    def __post_init__(self) -> None:
        if self.event not in SERVER_EVENT_NAMES:
            raise RecordError("event", f"unknown event name {self.event!r}")


# --- in-flight samples -----------------------------------------------------------------------


def _sample_record(name: str, doc: str, columns: tuple[str, ...], lead: list[Any]) -> Any:
    made = make_dataclass(
        name,
        [
            ("t", float, col(REQUIRED, doc="time.monotonic() of the sample.", unit="s")),
            ("request_id", str, col(REQUIRED, doc="The request sampled.")),
            *lead,
            *[(c, "int | None", col(doc=f"{c} of the sender's state.")) for c in columns],
        ],
        bases=(Record,),
    )
    made.__module__ = __name__
    made.__doc__ = doc
    return made


TcpSample: Any = record("tcp_sample", 1)(
    _sample_record(
        "TcpSample", "TCP_INFO of the data sender (samples.csv, h2).", TCP_SAMPLE_FIELDS, []
    )
)
QuicSample: Any = record("quic_sample", 1)(
    _sample_record(
        "QuicSample",
        "aioquic recovery state of the data sender (samples.csv, h3).",
        QUIC_SAMPLE_FIELDS,
        [],
    )
)
ServerSample: Any = record("server_sample", 1)(
    _sample_record(
        "ServerSample",
        "The server's sender state (its samples.csv): h2 rows fill the TCP_INFO columns, h3 "
        "rows the QUIC ones; request_id is proto:conn:stream.",
        (*TCP_SAMPLE_FIELDS, *(f for f in QUIC_SAMPLE_FIELDS if f not in TCP_SAMPLE_FIELDS)),
        [("proto", str, col(REQUIRED, doc="h2 or h3."))],
    )
)
FEC_SAMPLE_FIELDS = ("rate_bps", "rtt_us", "sent_datagrams", "received_datagrams", "loss_ppm")
"""Columns of a FEC sender sample (proto.fec.session.FecEndpoint)."""
FecSample: Any = record("fec_sample", 1)(
    _sample_record(
        "FecSample", "FEC session state of the client (samples.csv, fec).", FEC_SAMPLE_FIELDS, []
    )
)
SAMPLE_RECORDS: dict[str, Any] = {"h2": TcpSample, "h3": QuicSample, "fec": FecSample}
"""The client's sample record by protocol."""


# --- files -----------------------------------------------------------------------------------


def clean_json(value: Any) -> Any:
    """NaN and infinities are not JSON: store them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: clean_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_json(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return value


def mode_of_new_files() -> int:
    """0o666 less the umask: what ``open()`` gives a new file (0o644 under umask 022).
    mkstemp makes 0o600, which a lab user could not read in ./results written by a
    container's root."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def mkstemp_beside(path: Path) -> tuple[int, str]:
    """A temporary file next to ``path`` (for an atomic rename), with open()'s mode."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, mode_of_new_files())
    return fd, tmp


def _atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = mkstemp_beside(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_jsonl(path: Path, records: Iterable[Record]) -> None:
    """One record per line, atomically (a temporary file renamed over ``path``)."""
    text = "".join(
        json.dumps(clean_json(r.to_dict()), separators=(",", ":")) + "\n" for r in records
    )
    _atomic_write_text(Path(path), text)


def read_jsonl(path: Path, cls: type[R]) -> list[R]:
    """The records of a JSONL file; a torn last line (a killed writer) is skipped, any other
    bad line fails naming the file and line."""
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    out = []
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            if index == len(lines) - 1:
                continue
            raise RecordError(f"{path.name}:{index + 1}", "not a JSON line") from None
        out.append(cls.from_dict(data, f"{path.name}:{index + 1}"))
    return out


def write_csv(path: Path, cls: type[Record], records: Iterable[Record]) -> None:
    """A CSV with the class's fields as columns and the schema tag in a last column."""
    columns = [*cls.field_names(), SCHEMA_KEY]
    rows = []
    for item in records:
        data = clean_json(item.to_dict())
        rows.append(["" if data[c] is None else data[c] for c in columns])

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(rows)
    _atomic_write_text(Path(path), buffer.getvalue())


def read_csv(path: Path, cls: type[R]) -> list[R]:
    """The records of a CSV written by :func:`write_csv` (or a sampler): every column of the
    class, the schema tag in each row; empty cells are None, numbers typed by the field."""
    path = Path(path)
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        for name in header:
            if name != SCHEMA_KEY and name not in cls.field_names():
                raise RecordError(f"{path.name}.{name}", "unknown column")
        out = []
        for index, raw in enumerate(reader):
            data: dict[str, Any] = {k: _typed(cls, k, v) for k, v in raw.items()}
            out.append(cls.from_dict(data, f"{path.name}:{index + 2}"))
    return out


def _typed(cls: type[Record], name: str, text: str | None) -> Any:
    if name == SCHEMA_KEY or text is None:
        return text
    if text == "":
        return None
    declared = next(f.type for f in fields(cls) if f.name == name)  # type: ignore[arg-type]
    kind = declared if isinstance(declared, str) else declared.__name__
    if kind.startswith("bool"):
        return text == "True"
    if kind.startswith("int"):
        return int(float(text))
    if kind.startswith("float"):
        return float(text)
    return text


# --- the relay (servers/relay.py, issue 14) ---------------------------------------------------

RELAY_EVENT_NAMES = frozenset(
    {
        "upstream_connected",
        "warmup_done",
        "ready",
        "front_connection_open",
        "front_request_first_byte",
        "upstream_request_sent",
        "front_request_last_byte",
        "upstream_response_first_byte",
        "front_response_last_byte",
        "upstream_lost",
        "error",
    }
)


@record("relay_event", 1)
class RelayEvent(Record):
    """One event of the relay, on CLOCK_MONOTONIC like the client's, the server's and the
    link's (the relay's clock is the same host's)."""

    t: float = col(REQUIRED, doc="time.monotonic() of the event.", unit="s")
    event: str = col(REQUIRED, doc="One of RELAY_EVENT_NAMES.")
    protocol: str | None = col(doc="h2 or h3: the side of the relay (front and upstream).")
    conn: int | None = col(doc="Front connection number within the relay process.")
    stream: int | None = col(doc="Front stream of the event.")
    upstream_stream: int | None = col(doc="The stream on the long-haul connection it maps to.")
    addr: str | None = col(doc="ready: the listening address; upstream_connected: upstream.")
    peer: str | None = col(doc="front_connection_open: the client's address and port.")
    where: str | None = col(doc="error: front or upstream.")
    reason: str | None = col(doc="error, upstream_lost: why.")
    rounds: int | None = col(doc="warmup_done: warm-up rounds made.")
    cwnd_segments: int | None = col(
        doc="warmup_done: the upstream's cwnd (QUIC: in datagrams).", unit="segments"
    )
    rtt_s: float | None = col(doc="warmup_done: the upstream's smoothed RTT.", unit="s")

    def __post_init__(self) -> None:
        if self.event not in RELAY_EVENT_NAMES:
            raise RecordError("event", f"{self.event!r} is not a relay event")


@record("agent_round", 2)
class AgentRound(Record):
    """One attempt of one round of the agent task (tbcore.agent; rounds.csv beside runs.csv).
    Times are CLOCK_MONOTONIC, like every other record's."""

    READS_OLDER: ClassVar[bool] = True  # version 2 added task and task_outcome

    round: int = col(REQUIRED, doc="Round index, from 0.")
    attempt: int = col(REQUIRED, doc="Task attempt (restart recovery begins a new one).")
    op_id: str = col(REQUIRED, doc="The operation id the action carries.")
    redone: bool = col(REQUIRED, doc="This round had been begun before (after a loss).")
    warmup: bool = col(False, doc="A warm-up round (settings.warmup_requests): not measured.")
    conn_index: int | None = col(doc="Connection number within the client process.")
    new_connection: bool | None = col(doc="The round opened its connection.")
    start_s: float | None = col(doc="Round start (local work begins).", unit="s")
    local_s: float | None = col(doc="Local work: capture (render) and the rest.", unit="s")
    render_s: float | None = col(doc="Rendering the screenshot (part of local_s).", unit="s")
    encode_s: float | None = col(doc="Codec time, measured (0 for raw).", unit="s")
    handshake_s: float | None = col(doc="Connect to handshake done (new connection).", unit="s")
    upload_s: float | None = col(doc="First to last request byte written.", unit="s")
    reply_s: float | None = col(doc="Last request byte to the action's last byte.", unit="s")
    model_s: float | None = col(doc="The server's decision time for this op.", unit="s")
    end_s: float | None = col(doc="The action arrived (round end).", unit="s")
    round_s: float | None = col(doc="start_s to end_s.", unit="s")
    upload_bytes: int | None = col(doc="Screenshot bytes sent.", unit="bytes")
    executed: bool | None = col(doc="The server executed the op now (False: stored result).")
    action: str | None = col(doc="The action the server replied.")
    sha256_ok: bool | None = col(doc="The server echoed the screenshot's SHA-256 and length.")
    error: str | None = col(doc="Why the round was lost (timeout, connection lost...).")
    detected_s: float | None = col(doc="A lost round: when the client gave it up.", unit="s")
    broken: bool | None = col(
        doc="The round the connection break took (outage_mode break): the server executed "
        "it, then reset the connection instead of replying."
    )
    resumed_s: float | None = col(
        doc="A round lost to the break: when the client's wait (outage) ended and it went on.",
        unit="s",
    )
    reconnected_s: float | None = col(
        doc="The first round after a loss: when its new connection was up.", unit="s"
    )
    task: int | None = col(
        doc="The task the round belongs to, from 0 (agent_tasks; None: a warm-up round)."
    )
    task_outcome: str | None = col(
        doc="The last round of a task attempt the model judged (task_success): done, or "
        "failed (the task is then done again, whole)."
    )


@record("transfer", 1)
class TransferRecord(Record):
    """One upload over the two paths of a dual topology (clients.multipath), as its client
    saw it. Times are CLOCK_MONOTONIC; the connections were up before ``start_s``."""

    mode: str = col(REQUIRED, doc="single, mptcp, split, duplicate, or h3-migrate.")
    size_bytes: int = col(REQUIRED, doc="Payload bytes of the upload.", unit="bytes")
    start_s: float = col(REQUIRED, doc="The timed transfer began.", unit="s")
    end_s: float | None = col(doc="The server had every byte (duplicate: once).", unit="s")
    bytes_sent: int | None = col(doc="Payload bytes the client sent, copies included.")
    bytes_per_path: list | None = col(doc="Payload bytes sent from each source address.")
    fractions: list | None = col(doc="split: the share of the payload on each path.")
    measured_rates_bps: list | None = col(doc="split: each path's probed goodput.", unit="bit/s")
    detected_s: float | None = col(doc="h3 migration: the path was taken for dead.", unit="s")
    migrated_s: float | None = col(doc="h3 migration: packets left the second address.")
    resumed_s: float | None = col(doc="h3 migration: the first ACK after it.", unit="s")
    sha256_ok: bool | None = col(doc="The server's SHA-256 of what it kept matched.")
    error: str | None = col(doc="Why the transfer failed.")

    @property
    def total_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.start_s


# --- what each end put in force ----------------------------------------------------------------

APPLIED_LAYERS = frozenset(
    {
        "server",  # the server process: its application's settings
        "response",  # one response: the processing its route slept (which knob it came from)
        "streams",  # a connection's send order of response streams (proto.priority)
        "workload",  # the client's requests as built and the loop that makes them
        "connection",  # one client connection: what it offered (a TLS session, a ticket)
        "tcp",  # one TCP socket's options read back with getsockopt, and TCP_QUICKACK re-arming
        "h2",  # one HTTP/2 connection's local settings
        "quic",  # one QUIC connection's configuration and sender as aioquic holds them
        "fec",  # one FEC session's rate cap and redundancy
        "agent",  # the agent task as its client runs it
        "upload",  # an upload over two paths as its client runs it
    }
)
"""What an :class:`AppliedRecord` describes."""


@record("applied", 1)
class AppliedRecord(Record):
    """What one end of a run put in force, read back where the kernel or the library can
    tell (getsockopt, aioquic's connection, h2's local settings, the FEC session, the
    requests as built): one record per layer and connection, each value under the key of
    the knob (tbcore.settings.KNOBS) it answers, so that a knob that changed nothing shows."""

    t: float = col(REQUIRED, doc="time.monotonic() when it was read.", unit="s")
    role: str = col(REQUIRED, doc="server, client or relay.")
    layer: str = col(REQUIRED, doc="One of APPLIED_LAYERS.")
    conn: int | None = col(doc="The connection within its process, for a per-connection layer.")
    values: dict[str, Any] = col(factory=dict, doc="By knob key: the value in force.")

    def __post_init__(self) -> None:
        if self.layer not in APPLIED_LAYERS:
            raise RecordError("layer", f"{self.layer!r} is not one of {sorted(APPLIED_LAYERS)}")


class AppliedLog:
    """An end's :class:`AppliedRecord` lines, appended as each is known (``path=None``:
    nothing is kept), so that a run cut short still says what it had put in force."""

    def __init__(self, path: Path | None, role: str) -> None:
        self.path = Path(path) if path is not None else None
        self.role = role
        self._handle: Any = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = self.path.open("a", buffering=1, encoding="utf-8")

    def write(self, layer: str, values: Mapping[str, Any], conn: int | None = None) -> None:
        if self._handle is None:
            return
        made = AppliedRecord(time.monotonic(), self.role, layer, conn, dict(values))
        self._handle.write(made.to_json() + "\n")

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


NO_APPLIED_LOG = AppliedLog(None, "")
"""An :class:`AppliedLog` that keeps nothing (an end run without ``--applied``)."""
