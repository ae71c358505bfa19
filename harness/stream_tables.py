"""The tables of several streams, chunks, playback, cancel and overhead for a result
directory, and their report sections (measured next to modelled).

Reads every finished run (``runs/<id>/row.json``, ``run.json``, the run's files) and writes,
beside ``runs.csv``, whichever of these have rows:

- ``streams.csv``: ``run_id, level, protocol, stream, bytes, last_byte_arrived_s,
  delivered_s`` (+ first byte, the head-of-line wait), seconds from the request start;
- ``chunks.csv``: per streamed chunk, produced / sent / arrived / read and on time;
- ``playback.csv``: ``run_id, level, initial_buffer_s, start_delay_s, stall_count,
  stall_s, predicted_stall_s, stall_cause`` (+ the drop rule and the prediction's parts);
- ``cancel.csv``: per cancelled stream, when the server learned, stopped producing and
  sending, bytes after the cancel, and the bound (one-way delay + one chunk);
- ``overhead.csv``: per data direction of HTTP/2 image runs, packets, ACKs and bytes on the
  wire next to MODELS.md section 7.
"""

from __future__ import annotations

import json
import math
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from harness import bounds, overhead, playback, streams, streamview
from harness.record import atomic_write_frame
from netem import names
from netem.linkspec import resolve_link
from tbcore.workloads import (
    IMAGE_SIZE_BYTES,
    RETOUCHED_SIZE_BYTES,
    STREAM_CHUNK_BYTES,
    STREAM_CHUNK_DURATION_S,
)

TABLES = ("streams", "chunks", "playback", "cancel", "overhead")
CHAPTER_TILES_S = {"whole": 12.8, "tiles": 12.36}
"""The chapter's figures for the tiles case (20 Mbit/s up, 100 Mbit/s down, 100 ms)."""


def _json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}


CLIENT_ADDR = socket.inet_aton(names.CLIENT_ADDR)
"""The client end of every link."""


def run_tables(run_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """All rows of one finished run."""
    row = _json(run_dir / "row.json")
    meta = _json(run_dir / "run.json")
    settings = meta.get("settings", {})
    protocol = row.get("protocol") or settings.get("protocol", "h2")
    base = {
        "run_id": row.get("run_id", run_dir.name),
        "level": row.get("level"),
        "protocol": protocol,
    }
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in TABLES}
    if not (run_dir / "records.jsonl").exists():
        return out
    views = streams.run_views(run_dir, protocol, float(meta.get("clock_offset_s", 0.0)))
    if any(r.get("stream_workload") for r in views.records):
        out["streams"] = streams.stream_rows(views, base)
    out["chunks"] = streams.chunk_rows(views, base)
    link = resolve_link(meta["link"]) if meta.get("link") else None
    if out["chunks"] and link is not None:
        out["playback"] = _playback(out["chunks"], link, protocol, base)
    out["cancel"] = [
        {**r, "bound_s": (link.down.delay_s if link else math.nan) + STREAM_CHUNK_DURATION_S}
        for r in streams.cancel_rows(views, base)
    ]
    workload = row.get("workload") or settings.get("workload", "")
    if (
        protocol == "h2"
        and str(workload).startswith("retouch")
        and (run_dir / "client.pcap").exists()
    ):
        counts = overhead.count(streamview.read_pcap(run_dir / "client.pcap"), CLIENT_ADDR)
        per_segment = bool(settings.get("route_quickack") or settings.get("quickack"))
        extra = {**base, "total_s": row.get("total_s"), "ack_per_segment": per_segment}
        out["overhead"] = overhead.overhead_rows(
            counts, extra, int(settings.get("mss_bytes", 1448)), per_segment
        )
    return out


def _playback(
    chunk_rows: list[dict[str, Any]], link: Any, protocol: str, base: Mapping[str, Any]
) -> list[dict[str, Any]]:
    rows = []
    for request_id in sorted({r["request_id"] for r in chunk_rows}):
        mine = [r for r in chunk_rows if r["request_id"] == request_id]
        mine.sort(key=lambda r: r["chunk"])
        times = [playback.ChunkTimes(r["produced_s"], r["arrived_s"], r["read_s"]) for r in mine]
        overhead_bytes = (
            playback.H2_CHUNK_OVERHEAD_BYTES
            if protocol == "h2"
            else playback.H3_CHUNK_OVERHEAD_BYTES
        )
        predicted = playback.predicted_arrivals(
            len(times),
            down_rate_bps=link.down.rate_bps,
            down_delay_s=link.down.delay_s,
            up_delay_s=link.up.delay_s,
            overhead_bytes=overhead_bytes,
        )
        receive_bps = None
        if link.down.rate_bps:
            receive_bps = (
                link.down.rate_bps * STREAM_CHUNK_BYTES / (STREAM_CHUNK_BYTES + overhead_bytes)
            )
        rows += playback.playback_rows(
            times,
            predicted,
            {**base, "request_id": request_id},
            receive_bps=receive_bps,
            jitter_s=link.down.jitter_s,
        )
    return rows


def write_tables(result_dir: Path) -> dict[str, pd.DataFrame]:
    """Build every table of a result directory and write the non-empty ones as CSV."""
    collected: dict[str, list[dict[str, Any]]] = {name: [] for name in TABLES}
    runs = Path(result_dir) / "runs"
    for run_dir in sorted(runs.iterdir()) if runs.is_dir() else []:
        if not (run_dir / "row.json").exists():
            continue
        for name, rows in run_tables(run_dir).items():
            collected[name] += rows
    frames = {}
    for name, rows in collected.items():
        if rows:
            frame = pd.DataFrame(rows)
            atomic_write_frame(Path(result_dir) / f"{name}.csv", frame)
            frames[name] = frame
    return frames


# --- report sections -------------------------------------------------------------------------


def _note(frame: pd.DataFrame) -> list[str]:
    note = frame.attrs.get("note")
    return [note, ""] if note else []


def _ms(value: Any) -> str:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return "-"
    return "-" if math.isnan(v) else f"{v * 1e3:.1f}"


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def streams_section(frame: pd.DataFrame) -> list[str]:
    out = [
        "## Streams on one connection (MODELS.md section 11)",
        "",
        *_note(frame),
        "Medians over runs; ms from the request start. *arrived*: every body byte in the "
        "receiver's transport (qlog for HTTP/3, the decrypted capture for HTTP/2); "
        "*in order*: every transport byte up to the stream's last had arrived (one TCP byte "
        "stream for HTTP/2; the stream's own bytes for QUIC); *HOL* = in order - arrived, the "
        "head-of-line wait of section 11 free of the receiver's CPU; *delivered*: the last "
        "byte handed to the application; *wait* = delivered - arrived (HOL + the receiver's "
        "own reading).",
        "",
    ]
    rows = []
    for (level, protocol, stream), group in frame.groupby(["level", "protocol", "stream"]):
        rows.append(
            [
                str(level),
                str(protocol),
                str(stream),
                str(len(group)),
                _ms(group["first_byte_delivered_s"].median()),
                _ms(group["last_byte_arrived_s"].median()),
                _ms(group["in_order_s"].median()),
                _ms(group["hol_transport_s"].median()),
                _ms(group["hol_transport_s"].max()),
                _ms(group["delivered_s"].median()),
                _ms(group["hol_wait_s"].median()),
            ]
        )
    out += _table(
        [
            "level",
            "protocol",
            "stream",
            "runs",
            "first byte",
            "arrived",
            "in order",
            "HOL",
            "max HOL",
            "delivered",
            "wait",
        ],
        rows,
    )
    return [*out, ""]


def chunks_section(frame: pd.DataFrame) -> list[str]:
    out = [
        "## Deadline: chunks read before their playout time (0.4 s + i x 20 ms)",
        "",
        *_note(frame),
    ]
    rows = []
    for (level, protocol), group in frame.groupby(["level", "protocol"]):
        per_run = group.groupby("run_id")["on_time"].agg(["sum", "count"])
        rows.append(
            [
                str(level),
                str(protocol),
                str(len(per_run)),
                f"{per_run['sum'].median():.0f} of {per_run['count'].median():.0f}",
                _ms(group["read_s"].median()),
                _ms(group["arrived_s"].median()),
            ]
        )
    out += _table(
        ["level", "protocol", "runs", "on time (median)", "read (median)", "arrived (median)"], rows
    )
    return [*out, ""]


def playback_section(frame: pd.DataFrame) -> list[str]:
    out = [
        "## Playback (MODELS.md sections 2-3)",
        "",
        *_note(frame),
        "Measured: read times through the player that waits for a missing chunk; stalls are "
        "WebRTC's concealment events, stall time its concealed duration. Predicted: the chunk "
        "pipeline from the link parameters alone, then the playback recurrence. Drop rule: "
        "slots played as concealment.",
        "",
    ]
    rows = []
    keys = ["level", "protocol", "initial_buffer_s"]
    for (level, protocol, buffer_s), group in frame.groupby(keys):
        causes: dict[str, int] = {}
        for text in group["stall_cause"]:
            for part in str(text).split(";"):
                if ":" in part:
                    name, count = part.split(":")
                    causes[name] = causes.get(name, 0) + int(count)
        rows.append(
            [
                str(level),
                str(protocol),
                _ms(buffer_s),
                str(len(group)),
                _ms(group["start_delay_s"].median()),
                f"{group['stall_count'].median():.0f}",
                _ms(group["stall_s"].median()),
                f"{group['predicted_stall_count'].median():.0f}",
                _ms(group["predicted_stall_s"].median()),
                ", ".join(f"{k} {v}" for k, v in sorted(causes.items())) or "none",
                f"{group['drop_concealed_count'].median():.0f}",
            ]
        )
    out += _table(
        [
            "level",
            "protocol",
            "buffer ms",
            "runs",
            "start delay",
            "stalls",
            "stall ms",
            "predicted stalls",
            "predicted stall ms",
            "causes (all runs)",
            "drop rule: concealed",
        ],
        rows,
    )
    return [*out, ""]


def cancel_section(frame: pd.DataFrame) -> list[str]:
    out = [
        "## Cancel: the sender stops within one one-way delay + one chunk",
        "",
        *_note(frame),
        "ms after the client's cancel (medians); bytes: body bytes the server handed to its "
        "transport after the client had read its last chunk.",
        "",
    ]
    rows = []
    for (level, protocol), group in frame.groupby(["level", "protocol"]):
        rows.append(
            [
                str(level),
                str(protocol),
                str(len(group)),
                _ms(group["playback_stopped_s"].median()),
                _ms(group["server_learned_s"].median()),
                _ms(group["production_stopped_s"].median()),
                _ms(group["sending_stopped_s"].median()),
                _ms(group["bound_s"].median()),
                f"{group['bytes_sent_after_cancel'].median():.0f}",
                f"{(group['sending_stopped_s'] <= group['bound_s']).sum()} of {len(group)}",
            ]
        )
    out += _table(
        [
            "level",
            "protocol",
            "runs",
            "playback flushed",
            "server learned",
            "production stopped",
            "sending stopped",
            "bound (d + 1 chunk)",
            "bytes after cancel",
            "within bound",
        ],
        rows,
    )
    return [*out, ""]


def overhead_section(frame: pd.DataFrame) -> list[str]:
    out = [
        "## Header and ACK overhead (MODELS.md section 7)",
        "",
        *_note(frame),
        "Per data direction: data packets and the pure ACKs the other end sent for them, from "
        "the capture, next to the model (H = A = 52 bytes; an ACK per packet with quickack, "
        "per two otherwise).",
        "",
    ]
    rows = []
    for (level, direction), group in frame.groupby(["level", "direction"]):
        rows.append(
            [
                str(level),
                str(direction),
                str(len(group)),
                f"{group['data_packets'].median():.0f}",
                f"{group['model_data_packets'].median():.0f}",
                f"{group['acks_for_it'].median():.0f}",
                f"{group['model_ack_packets'].median():.0f}",
                f"{group['data_wire_bytes'].median() / 1e6:.3f}",
                f"{group['model_wire_bytes'].median() / 1e6:.3f}",
                f"{group['ack_wire_bytes'].median() / 1e6:.3f}",
                _ms(group["total_s"].median()),
            ]
        )
    out += _table(
        [
            "level",
            "direction",
            "runs",
            "data pkts",
            "model",
            "ACKs",
            "model ACKs",
            "data MB on wire",
            "model MB",
            "ACK MB",
            "completion ms",
        ],
        rows,
    )
    levels = frame.groupby("level")
    if len(levels) == 2:
        totals = {
            level: (
                group.groupby("run_id")["ack_wire_bytes"].sum().median(),
                group.groupby("run_id")["total_s"].first().median(),
            )
            for level, group in levels
        }
        (a, (a_bytes, a_time)), (b, (b_bytes, b_time)) = sorted(
            totals.items(), key=lambda kv: -kv[1][0]
        )
        out += [
            "",
            f"{b} vs {a}: {(a_bytes - b_bytes) / 1e6:.3f} MB fewer ACK bytes on the wire, "
            f"completion {(b_time - a_time) * 1e3:+.1f} ms "
            "(the chapter: 1.38 MB fewer, 43 ms later).",
        ]
    return [*out, ""]


def tiles_section(runs: pd.DataFrame) -> list[str]:
    """Whole vs tiled image next to the pipeline bound (MODELS.md section 2)."""
    out = [
        "## Tiles vs the whole image (MODELS.md section 2)",
        "",
        "Request time (from the connect on a new connection), median; the bound is the "
        "pipeline of section 2 plus the connection set-up of section 4.",
        "",
    ]
    rows = []
    for level, group in runs.groupby("level"):
        workload = str(group["workload"].iloc[0])
        up = float(group["up_bps"].iloc[0])
        down = float(group["down_bps"].iloc[0])
        rtt = float(group["rtt_s"].iloc[0])
        processing = 0.3
        tiles = int(workload.removeprefix("retouch-tiles")) if "tiles" in workload else 1
        setup = bounds.setup_time_s(
            str(group["protocol"].iloc[0]), str(group["connection"].iloc[0]), rtt
        )
        bound = setup + tiles_bound_s(tiles, up, down, rtt, processing)
        chapter = CHAPTER_TILES_S["tiles" if tiles > 1 else "whole"]
        total = pd.to_numeric(group["total_s"], errors="coerce")
        rows.append(
            [str(level), workload, str(len(group)), _ms(total.median()), _ms(bound), _ms(chapter)]
        )
    out += _table(["level", "workload", "runs", "measured", "pipeline bound", "chapter"], rows)
    return [*out, ""]


def tiles_bound_s(
    tiles: int, up_bps: float, down_bps: float, rtt_s: float, processing_s: float
) -> float:
    """Section 2 for ``tiles`` equal tiles of the 30 MB upload: tile ``i`` is ready when its
    last byte has arrived (``(i+1) * S_u/n / B_u + R/2``), is processed in ``T_c / n`` and its
    share of the 5 MB result is sent in ``S_d/n / B_d`` and arrives ``R/2`` later."""
    d = rtt_s / 2
    ready = [(i + 1) * IMAGE_SIZE_BYTES / tiles * 8 / up_bps + d for i in range(tiles)]
    arrivals = bounds.pipeline(
        ready,
        [processing_s / tiles] * tiles,
        [RETOUCHED_SIZE_BYTES / tiles * 8 / down_bps] * tiles,
        [d] * tiles,
    )
    return arrivals[-1]


def _usable(frame: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The valid runs' rows, or every row (and a note) when no run of it is valid."""
    if "valid" not in frame or frame["valid"].astype(bool).all():
        return frame, ""
    valid = frame[frame["valid"].astype(bool)]
    if len(valid):
        return valid, ""
    return frame, (
        "*No run of this table is valid (see Validity): the rows below are from invalid runs, "
        "kept to show the mechanism, not as results.*"
    )


def report_sections(result_dir: Path, runs: pd.DataFrame | None = None) -> list[str]:
    """Markdown for every table the result directory has (valid runs only, unless none is)."""
    frames = write_tables(result_dir)
    for name, frame in list(frames.items()):
        usable, note = _usable(frame)
        frames[name] = usable
        if note:
            frames[name].attrs["note"] = note
    out: list[str] = []
    if "streams" in frames:
        out += streams_section(frames["streams"])
    if "chunks" in frames:
        out += chunks_section(frames["chunks"])
    if "playback" in frames:
        out += playback_section(frames["playback"])
    if "cancel" in frames:
        out += cancel_section(frames["cancel"])
    if "overhead" in frames:
        out += overhead_section(frames["overhead"])
    if (
        runs is not None
        and "workload" in runs
        and runs["workload"].astype(str).str.startswith("retouch").any()
    ):
        out += tiles_section(runs)
    return out
