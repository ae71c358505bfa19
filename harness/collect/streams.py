"""Per-stream and per-chunk rows of a run with several streams on one connection.

A run's files (``records.jsonl`` of the client, ``server.jsonl`` of the server, the client
qlog for HTTP/3, ``client.pcap`` with the key log for HTTP/2) give, per response stream:

- ``delivered_s``: the last body byte handed to the application (client record);
- ``last_byte_arrived_s``: every body byte in the receiver's transport
  (:mod:`harness.collect.streamview`); ``hol_wait_s`` = delivered - arrived (docs/models.md §11);
  ``chunks``, ``held_chunks`` and ``held_max_s``: of the body's 16 KB chunks, those whose own
  bytes had all arrived but waited for another stream's (one TCP byte stream), and the
  longest such wait;

and per streamed chunk: produced and sent (server events), arrived (transport view), read
(client). Times are seconds from the group's request start (its first request byte).
:func:`stream_rows` and :func:`chunk_rows` take plain values; :func:`run_views` is the I/O
edge that reads a run directory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.collect import acks, streamview
from harness.store.resultdir import read_jsonl
from netem import pcapng
from tbcore import kinds
from tbcore.errors import SpecError
from tbcore.workloads import STREAM_CHUNK_BYTES, STREAM_CHUNK_DURATION_S

DEADLINE_START_S = 0.4
"""The chapter's deadline case: chunk ``i`` is due at 0.4 s + i * 20 ms after the request."""


@dataclass(frozen=True)
class RunViews:
    """Everything of one run that the rows need (absolute CLOCK_MONOTONIC seconds)."""

    records: list[dict[str, Any]]
    events: list[dict[str, Any]]
    arrivals: dict[int, streamview.StreamArrival]
    """Receiver transport view per stream id, already on CLOCK_MONOTONIC."""
    view_error: str | None = None
    """Why there is no transport view (no full capture, no qlog...), if there is none."""


def _shift(arrival: streamview.StreamArrival, offset_s: float) -> streamview.StreamArrival:
    def move(t: float | None) -> float | None:
        return None if t is None else t - offset_s

    return streamview.StreamArrival(
        arrival.stream_id,
        arrival.body_bytes,
        move(arrival.last_byte_arrived_s),
        [move(t) for t in arrival.chunk_arrived_s],
        move(arrival.in_order_s),
        arrival.cross_waits_s,  # durations: no clock to move
    )


def run_views(
    run_dir: Path, protocol: str, clock_offset_s: float, chunk_bytes: int = STREAM_CHUNK_BYTES
) -> RunViews:
    """Read one run's records, server events and receiver transport view (I/O edge);
    ``chunk_bytes``: the run's stream chunk (its sample rate's 20 ms)."""
    records = _read_jsonl(run_dir / "records.jsonl")
    events = _read_jsonl(run_dir / "server.jsonl")
    arrivals: dict[int, streamview.StreamArrival] = {}
    error = None
    try:
        if kinds.protocol(protocol).qlog:  # QUIC's receiver view is its qlog
            traces = acks.read_qlog_traces(run_dir / "qlog" / "client")
            raw = streamview.h3_stream_arrivals(traces, chunk_bytes)
        else:
            pcap = pcapng.capture_file(run_dir, "client")
            keys = run_dir / "keys.log"
            if pcap is None or not keys.exists():
                raise SpecError("capture", "no client.pcapng or key log in the run")
            raw = streamview.h2_stream_arrivals(
                streamview.read_pcap(pcap), keys.read_text(), chunk_bytes
            )
        arrivals = {sid: _shift(a, clock_offset_s) for sid, a in raw.items()}
    except SpecError as err:
        error = str(err)
    return RunViews(records, events, arrivals, error)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return read_jsonl(path) if path.exists() else []


def _measured(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in records if not r.get("warmup")]


def group_start(records: Sequence[Mapping[str, Any]], request_id: int) -> float | None:
    starts = [
        r["request_first_byte"]
        for r in records
        if r.get("request_id") == request_id and r.get("request_first_byte") is not None
    ]
    return min(starts) if starts else None


HELD_BEYOND_S = 0.001
"""A chunk counts as held behind other streams when it waited more than this (the emulator's
p99 timing error is about 1 ms, docs/machine.md)."""


def _held_chunks(arrival: streamview.StreamArrival | None) -> dict[str, Any]:
    """``chunks``, ``held_chunks`` (those that waited for another stream's bytes, docs/models.md
    section 11) and the longest such wait, ``held_max_s``; None without a transport view."""
    waits = arrival.cross_waits_s if arrival is not None else ()
    if not waits:
        return {"chunks": None, "held_chunks": None, "held_max_s": None}
    return {
        "chunks": len(waits),
        "held_chunks": sum(w > HELD_BEYOND_S for w in waits),
        "held_max_s": max(waits),
    }


def _label(workload: str | None) -> str | None:
    """Which stream of a group is the audio and which the image (the workload's
    registration, tbcore.kinds.WorkloadKind.label); another: its name."""
    if workload not in kinds.WORKLOADS:
        return workload
    return kinds.workload(workload).label or workload


def stream_rows(views: RunViews, base: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per measured response stream: ``base`` (run_id, level, protocol...) plus
    stream, bytes, first/last byte delivered, last byte arrived, the head-of-line wait."""
    rows = []
    for record in _measured(views.records):
        start = group_start(views.records, record["request_id"])
        workload = record.get("stream_workload") or record.get("workload")
        label = _label(workload)
        arrival = views.arrivals.get(record.get("stream_id"))

        def rel(t: float | None, start: float | None = start) -> float | None:
            return None if t is None or start is None else t - start

        arrived = rel(arrival.last_byte_arrived_s) if arrival is not None else None
        in_order = rel(arrival.in_order_s) if arrival is not None else None
        delivered = rel(record.get("response_last_byte"))
        if record.get("cancelled_at") is not None:
            delivered = rel(record["cancelled_at"])
            arrived = in_order = None
        rows.append(
            {
                **base,
                "request_id": record["request_id"],
                "stream": f"{label}:{workload}",
                "stream_id": record.get("stream_id"),
                "priority": record.get("priority"),
                "bytes": record.get("down_bytes"),
                "first_byte_delivered_s": rel(record.get("response_body_first_byte")),
                "last_byte_arrived_s": arrived,
                "in_order_s": in_order,
                "delivered_s": delivered,
                "hol_transport_s": (
                    in_order - arrived if in_order is not None and arrived is not None else None
                ),
                "hol_wait_s": (
                    delivered - arrived if delivered is not None and arrived is not None else None
                ),
                **_held_chunks(arrival if in_order is not None else None),
                "ok": record.get("error") is None and bool(record.get("sha256_ok")),
                "error": record.get("error"),
                "view_error": views.view_error,
            }
        )
    return rows


def _server_chunk_times(
    events: Sequence[Mapping[str, Any]], stream_id: int
) -> tuple[dict[int, float], dict[int, float]]:
    produced: dict[int, float] = {}
    sent: dict[int, float] = {}
    for event in events:
        if event.get("stream") != stream_id:
            continue
        if event.get("event") == "chunk_produced":
            produced[int(event["index"])] = event["t"]
        elif event.get("event") == "chunk_sent":
            sent[int(event["index"])] = event["t"]
    return produced, sent


def chunk_rows(
    views: RunViews, base: Mapping[str, Any], chunk_s: float = STREAM_CHUNK_DURATION_S
) -> list[dict[str, Any]]:
    """One row per chunk of each measured streamed response: produced, sent (server),
    arrived (transport), read (client), and whether it was read before the deadline case's
    playout time (0.4 s + i * 20 ms)."""
    rows = []
    for record in _measured(views.records):
        times = record.get("chunk_times")
        if not times:
            continue
        start = group_start(views.records, record["request_id"])
        if start is None:
            continue
        produced, sent = _server_chunk_times(views.events, record.get("stream_id"))
        arrival = views.arrivals.get(record.get("stream_id"))
        for index, read_t in enumerate(times):
            arrived = (
                arrival.chunk_arrived_s[index]
                if arrival is not None and index < len(arrival.chunk_arrived_s)
                else None
            )
            due = DEADLINE_START_S + index * chunk_s
            rows.append(
                {
                    **base,
                    "request_id": record["request_id"],
                    "stream_id": record.get("stream_id"),
                    "chunk": index,
                    "produced_s": produced[index] - start if index in produced else None,
                    "sent_s": sent[index] - start if index in sent else None,
                    "arrived_s": arrived - start if arrived is not None else None,
                    "read_s": read_t - start,
                    "due_s": due,
                    "on_time": read_t - start <= due,
                }
            )
    return rows


def cancel_rows(
    views: RunViews, base: Mapping[str, Any], chunk_bytes: int = STREAM_CHUNK_BYTES
) -> list[dict[str, Any]]:
    """One row per cancelled stream: when the client cancelled, when the server learned,
    stopped producing and stopped handing bytes to the transport, and the body bytes it
    handed over after the client's cancel (seconds from the client's cancel)."""
    rows = []
    for record in _measured(views.records):
        cancelled = record.get("cancelled_at")
        if cancelled is None:
            continue
        sid = record.get("stream_id")

        def first(name: str, sid: Any = sid) -> Mapping[str, Any] | None:
            return next(
                (e for e in views.events if e.get("stream") == sid and e.get("event") == name),
                None,
            )

        learned = first("stream_cancelled")
        stopped = first("chunk_production_stopped")
        response_stopped = first("response_stopped")
        produced, sent = _server_chunk_times(views.events, sid)
        after = [t for t in sent.values() if t > cancelled]
        player = record.get("player") or {}
        flushed = player.get("flushed_at")
        rows.append(
            {
                **base,
                "request_id": record["request_id"],
                "stream_id": sid,
                "playback_stopped_s": flushed - cancelled if flushed is not None else None,
                "cancel_after_chunks": (record.get("bytes_at_cancel") or 0) // chunk_bytes,
                "server_learned_s": learned["t"] - cancelled if learned else None,
                "production_stopped_s": stopped["t"] - cancelled if stopped else None,
                "last_send_after_cancel_s": max(after) - cancelled if after else 0.0,
                "sending_stopped_s": (
                    response_stopped["t"] - cancelled if response_stopped else None
                ),
                "bytes_sent_after_cancel": (
                    response_stopped["bytes"] - (record.get("bytes_at_cancel") or 0)
                    if response_stopped
                    else None
                ),
                "chunks_produced": len(produced),
            }
        )
    return rows
