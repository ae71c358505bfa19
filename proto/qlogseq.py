"""qlog in JSON-SEQ, as ngtcp2 0.12 writes it: parsing, its missing clock, and the shape the
testbed reads (aioquic's). Sans-I/O: text in, data out.

ngtcp2 0.12.1 writes ``qlog_format`` "JSON-SEQ", ``qlog_version`` "0.3" (RFC 7464 records:
each JSON text after an ASCII RS, 0x1E): the serialisation of
draft-ietf-quic-qlog-main-schema-02/-03, which share version 0.3 and the ``trace`` header
read here; events named and shaped as in draft-ietf-quic-qlog-quic-events-02/-03
(``transport:packet_sent`` with ``header.packet_type`` and ``frames``,
``recovery:metrics_updated`` with ``congestion_window``). The first record is the header:
one ``trace`` with its ``vantage_point`` and ``common_fields`` (``time_format`` "relative",
``reference_time`` 0, ``group_id`` the client's original destination connection ID); then
one record per event, ``time`` in whole milliseconds since the connection began
(lib/ngtcp2_qlog.c: ``(ts - qlog->ts) / NGTCP2_MILLISECONDS``, truncated).

ngtcp2 leaves ``reference_time`` at 0: the file does not say when the connection began. The
stack's edge measures that moment (the file's creation, servers/ngtcp2.py,
clients/ngtcp2.py) and writes it into the header with :func:`with_reference_time`, so that
the file on disk is a complete qlog: an event happened at ``reference_time + time`` ms of
CLOCK_REALTIME (qlog's clock). :func:`aioquic_trace` turns it into the one trace shape
harness.collect.acks reads for every stack (aioquic's: absolute ``time`` in ms,
``metrics_updated`` with ``cwnd``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tbcore.errors import SpecError

RECORD_SEPARATOR = "\x1e"
"""RFC 7464: every JSON text of a JSON-SEQ stream starts with ASCII RS."""
QLOG_FORMAT = "JSON-SEQ"
QLOG_VERSION = "0.3"
SEQ_SUFFIX = ".sqlog"
"""ngtcp2's file name: the connection's source connection ID in hex, then this."""
MS_PER_S = 1e3
TIME_RESOLUTION_S = 1e-3
"""ngtcp2 0.12 truncates every event time to a whole millisecond."""
HALF_TICK_S = TIME_RESOLUTION_S / 2
"""An event logged at ``time`` t happened in [t, t + 1) ms: its best single estimate is the
middle of that millisecond."""

METRIC_NAMES = {"congestion_window": "cwnd"}
"""qlog quic-events' metrics_updated names that aioquic's qlog (and the testbed) spell
otherwise."""


@dataclass
class QlogSeq:
    """One JSON-SEQ qlog file: one connection seen from one end."""

    vantage: str
    """``client`` or ``server``."""
    group_id: str | None
    """The client's original destination connection ID (hex): the same in both ends' files."""
    reference_time_ms: float
    """CLOCK_REALTIME ms of ``time`` 0 (0: not known, as ngtcp2 writes it)."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """Every event as written: ``time`` (ms, relative), ``name``, ``data``."""

    @property
    def anchored(self) -> bool:
        return self.reference_time_ms > 0


def _records(text: str, where: str) -> list[Any]:
    chunks = [c for c in text.split(RECORD_SEPARATOR) if c.strip()]
    out = []
    for index, chunk in enumerate(chunks):
        try:
            out.append(json.loads(chunk))
        except json.JSONDecodeError as err:
            if index == len(chunks) - 1:
                break  # a last record cut short: the writer was stopped mid-record
            raise SpecError(where, f"record {index} is not JSON: {err}") from None
    return out


def parse_qlog_seq(text: str, where: str = "qlog") -> QlogSeq:
    """A JSON-SEQ qlog's header and events (SpecError naming ``where`` when it is not one)."""
    records = _records(text, where)
    if not records or not isinstance(records[0], dict):
        raise SpecError(where, "empty: no qlog header")
    header = records[0]
    if header.get("qlog_format") != QLOG_FORMAT or header.get("qlog_version") != QLOG_VERSION:
        raise SpecError(
            where,
            f"qlog {header.get('qlog_format')!r} {header.get('qlog_version')!r}, this reads "
            f"{QLOG_FORMAT} {QLOG_VERSION}",
        )
    trace = header.get("trace")
    if not isinstance(trace, dict):
        raise SpecError(where, "the header has no trace")
    common = trace.get("common_fields") or {}
    if common.get("time_format", "relative") != "relative":
        raise SpecError(where, f"time_format {common.get('time_format')!r}, not relative")
    events = [r for r in records[1:] if isinstance(r, dict) and "name" in r and "time" in r]
    return QlogSeq(
        vantage=str((trace.get("vantage_point") or {}).get("type")),
        group_id=common.get("group_id"),
        reference_time_ms=float(common.get("reference_time") or 0),
        events=events,
    )


def with_reference_time(text: str, reference_time_ms: float) -> str:
    """``text`` with its header's ``reference_time`` set (the events stay as written)."""
    head, sep, rest = text.lstrip(RECORD_SEPARATOR).partition("\n" + RECORD_SEPARATOR)
    header = json.loads(head)
    header["trace"]["common_fields"]["reference_time"] = reference_time_ms
    return RECORD_SEPARATOR + json.dumps(header, separators=(",", ":")) + "\n" + sep[1:] + rest


def reference_time_ms(start_s: float, realtime_minus_monotonic_s: float) -> float:
    """The ``reference_time`` of a connection that began at CLOCK_MONOTONIC ``start_s``: its
    CLOCK_REALTIME in ms, plus :data:`HALF_TICK_S` so that ``reference_time + time`` is the
    middle of each event's millisecond."""
    return (start_s + realtime_minus_monotonic_s + HALF_TICK_S) * MS_PER_S


def event_time_s(start_s: float, time_ms: float) -> float:
    """CLOCK_MONOTONIC of an event logged at ``time_ms`` in a connection that began at
    ``start_s``: the middle of its millisecond."""
    return start_s + time_ms / MS_PER_S + HALF_TICK_S


def aioquic_trace(seq: QlogSeq) -> dict[str, Any]:
    """The trace in the shape of aioquic's qlog (harness.collect.acks reads it): absolute
    ``time`` (CLOCK_REALTIME ms), metrics named as aioquic names them. SpecError when the
    file was never anchored (its times would be since an unknown moment)."""
    if not seq.anchored:
        raise SpecError("qlog", "reference_time is 0: when the connection began is unknown")
    events = []
    for event in seq.events:
        data = event.get("data") or {}
        if event.get("name") == "recovery:metrics_updated":
            data = {METRIC_NAMES.get(k, k): v for k, v in data.items()}
        events.append(
            {
                "time": seq.reference_time_ms + float(event["time"]),
                "name": event["name"],
                "data": data,
            }
        )
    return {
        "vantage_point": {"type": seq.vantage, "name": "ngtcp2"},
        "group_id": seq.group_id,
        "events": events,
    }
