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
  wire next to docs/models.md section 7.
"""

from __future__ import annotations

import json
import math
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from harness import bounds
from harness.analysis import playback
from harness.collect import overhead, streams, streamview
from harness.collect.traces import positions_at, run_clocks
from harness.report.guard import Guard
from harness.store.resultdir import atomic_write_frame
from netem import names, pcapng
from netem.topologyspec import Topology
from tbcore import kinds
from tbcore.errors import SpecError
from tbcore.workloads import (
    IMAGE_SIZE_BYTES,
    RETOUCHED_SIZE_BYTES,
    STREAM_CHUNK_BYTES,
    STREAM_CHUNK_DURATION_S,
    STREAM_SAMPLE_RATE_HZ,
    stream_chunk_bytes,
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
    rate = int(settings.get("sample_rate_hz", STREAM_SAMPLE_RATE_HZ))
    chunk_bytes = stream_chunk_bytes(rate)
    views = streams.run_views(
        run_dir, protocol, float(meta.get("clock_offset_s", 0.0)), chunk_bytes
    )
    if any(r.get("stream_workload") for r in views.records):
        out["streams"] = streams.stream_rows(views, base)
    out["chunks"] = streams.chunk_rows(views, base)
    link = Topology.from_dict(meta["topology"]).link_spec if meta.get("topology") else None
    if out["chunks"] and link is not None:
        starts = {
            r["request_id"]: streams.group_start(views.records, r["request_id"])
            for r in views.records
            if r.get("request_id") is not None
        }
        positions = {k: positions_at(run_clocks(meta), v) for k, v in starts.items()}
        out["playback"] = _playback(out["chunks"], link, protocol, base, positions, chunk_bytes)
    out["cancel"] = [
        {**r, "bound_s": (link.down.delay_s if link else math.nan) + STREAM_CHUNK_DURATION_S}
        for r in streams.cancel_rows(views, base, chunk_bytes)
    ]
    workload = row.get("workload") or settings.get("workload", "")
    client_capture = pcapng.capture_file(run_dir, "client")
    if _counts_overhead(protocol, str(workload)) and client_capture is not None:
        counts = overhead.count(streamview.read_pcap(client_capture), CLIENT_ADDR)
        per_segment = bool(
            settings.get("route_quickack")
            or settings.get("quickack")
            or (settings.get("ack_policy") == "immediate")
        )
        extra = {**base, "total_s": row.get("total_s"), "ack_per_segment": per_segment}
        out["overhead"] = overhead.overhead_rows(
            counts, extra, int(settings.get("mss_bytes", 1448)), per_segment
        )
    return out


def _counts_overhead(protocol: str, workload: str) -> bool:
    """Whether the overhead table counts this run: an upload over TCP (docs/models.md section 7
    counts TCP segments and ACKs in the client's capture)."""
    try:
        return kinds.protocol(protocol).transport == "tcp" and "overhead" in kinds.traits_of(
            kinds.workload(workload)
        )
    except SpecError:
        return False


def _image_upload(workload: Any) -> bool:
    """A workload of the tiles section: the image upload, whole or in tiles."""
    kind = kinds.WORKLOADS.get(str(workload))
    return kind is not None and "image_processing" in kind.traits


def _playback(
    chunk_rows: list[dict[str, Any]],
    link: Any,
    protocol: str,
    base: Mapping[str, Any],
    positions: Mapping[Any, Mapping[str, float]] | None = None,
    chunk_bytes: int = STREAM_CHUNK_BYTES,
) -> list[dict[str, Any]]:
    """playback.csv's rows of one run: per request and initial buffer, measured beside the
    model (a traced downlink: the model through the trace from where it was when the request
    began, ``positions`` by request id; more and longer buffers); ``chunk_bytes``: the
    stream's 20 ms chunk."""
    rows = []
    for request_id in sorted({r["request_id"] for r in chunk_rows}):
        mine = [r for r in chunk_rows if r["request_id"] == request_id]
        mine.sort(key=lambda r: r["chunk"])
        times = [playback.ChunkTimes(r["produced_s"], r["arrived_s"], r["read_s"]) for r in mine]
        overhead_bytes = kinds.protocol(protocol).chunk_overhead_bytes
        traced = link.down.rate_trace is not None
        if traced:
            where = (positions or {}).get(request_id, {}).get("down")
            predicted = playback.predicted_arrivals(
                len(times),
                down=bounds.direction_bottleneck(link.down, where),
                down_delay_s=link.down.min_delay_s,
                up_delay_s=link.up.min_delay_s,
                overhead_bytes=overhead_bytes,
                chunk_bytes=chunk_bytes,
            )
        else:
            predicted = playback.predicted_arrivals(
                len(times),
                down_rate_bps=link.down.rate_bps,
                down_delay_s=link.down.delay_s,
                up_delay_s=link.up.delay_s,
                overhead_bytes=overhead_bytes,
                chunk_bytes=chunk_bytes,
            )
        receive_bps = None
        if link.down.rate_bps:
            receive_bps = link.down.rate_bps * chunk_bytes / (chunk_bytes + overhead_bytes)
        rows += playback.playback_rows(
            times,
            predicted,
            {**base, "request_id": request_id},
            receive_bps=receive_bps,
            jitter_s=link.down.jitter_s,
            play_bps=chunk_bytes * 8 / STREAM_CHUNK_DURATION_S,
            initial_buffers_s=playback.TRACE_BUFFERS_S if traced else playback.INITIAL_BUFFERS_S,
        )
    return rows


def write_tables(result_dir: Path, guard: Guard | None = None) -> dict[str, pd.DataFrame]:
    """Build every table of a result directory and write the non-empty ones as CSV; a run
    whose files make no table is left out (and noted in ``guard``, when given)."""
    collected: dict[str, list[dict[str, Any]]] = {name: [] for name in TABLES}
    runs = Path(result_dir) / "runs"
    guard = guard if guard is not None else Guard()
    for run_dir in sorted(runs.iterdir()) if runs.is_dir() else []:
        if not (run_dir / "row.json").exists():
            continue
        valid = _run_valid(run_dir)
        tables = guard.attempt(f"tables of run {run_dir.name}", run_tables, run_dir, default={})
        for name, rows in tables.items():
            collected[name] += [{**row, "valid": valid} for row in rows]
    frames = {}
    for name, rows in collected.items():
        if rows:
            frame = pd.DataFrame(rows)
            atomic_write_frame(Path(result_dir) / f"{name}.csv", frame)
            frames[name] = frame
    return frames


def _run_valid(run_dir: Path) -> bool:
    """The run's verdict from its row (harness.validity.rules); a row without one is valid."""
    try:
        row = json.loads((run_dir / "row.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(row.get("valid", True)) if isinstance(row, dict) else False


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


def _section(title: str, notes: list[str], text: str, body: list[str]) -> list[str]:
    """A report section: its title, notes, the text that explains it (if any), then ``body``."""
    intro = [text, ""] if text else []
    return [title, "", *notes, *intro, *body, ""]


@dataclass(frozen=True)
class _Column:
    """One column of a section's table: its header and its cell for one group of rows."""

    header: str
    cell: Callable[[pd.DataFrame], str]
    group_by: str | None = None
    """The frame's column the table groups by (a key column); None: a value column."""


def _key(column: str, header: str | None = None, fmt: Callable[[Any], str] = str) -> _Column:
    """A key column: the group's value of ``column``."""
    return _Column(header or column, lambda group: fmt(group[column].iloc[0]), group_by=column)


def _median_ms(header: str, column: str) -> _Column:
    return _Column(header, lambda group: _ms(group[column].median()))


def _median_count(header: str, column: str) -> _Column:
    return _Column(header, lambda group: f"{group[column].median():.0f}")


def _median_mb(header: str, column: str) -> _Column:
    return _Column(header, lambda group: f"{group[column].median() / 1e6:.3f}")


@dataclass(frozen=True)
class _GroupedSection:
    """The report section of one table: a row per group of its key columns (sorted)."""

    title: str
    text: str
    """What the columns mean ("": nothing to explain)."""
    columns: tuple[_Column, ...]

    def lines(self, frame: pd.DataFrame, after_table: Sequence[str] = ()) -> list[str]:
        keys = [c.group_by for c in self.columns if c.group_by is not None]
        rows = [[c.cell(group) for c in self.columns] for _, group in frame.groupby(keys)]
        table = _table([c.header for c in self.columns], rows)
        return _section(self.title, _note(frame), self.text, [*table, *after_table])


_LEVEL = _key("level")
_PROTOCOL = _key("protocol")
_RUNS = _Column("runs", lambda group: str(len(group)))
"""The group's rows (one per run in the tables that have a row per run)."""


def _column(group: pd.DataFrame, name: str) -> pd.Series:
    """A numeric column the table may lack (older runs: NaN)."""
    if name not in group.columns:
        return pd.Series(float("nan"), index=group.index)
    return pd.to_numeric(group[name], errors="coerce")


def _held_per_run(group: pd.DataFrame) -> str:
    """``held of chunks``, medians over runs: 16 KB chunks of the stream that had all their
    own bytes and waited for another stream's (– without a transport view)."""
    held, chunks = _column(group, "held_chunks").dropna(), _column(group, "chunks").dropna()
    if held.empty or chunks.empty:
        return "–"
    return f"{held.median():.0f} of {chunks.median():.0f}"


def _on_time_per_run(group: pd.DataFrame) -> str:
    per_run = group.groupby("run_id")["on_time"].agg(["sum", "count"])
    return f"{per_run['sum'].median():.0f} of {per_run['count'].median():.0f}"


def _stall_causes(group: pd.DataFrame) -> str:
    """``cause count`` of every run's stalls together, e.g. ``jitter 4, rate 8``."""
    causes: dict[str, int] = {}
    for text in group["stall_cause"]:
        for part in str(text).split(";"):
            if ":" in part:
                name, count = part.split(":")
                causes[name] = causes.get(name, 0) + int(count)
    return ", ".join(f"{k} {v}" for k, v in sorted(causes.items())) or "none"


def _within_bound(group: pd.DataFrame) -> str:
    return f"{(group['sending_stopped_s'] <= group['bound_s']).sum()} of {len(group)}"


_STREAMS = _GroupedSection(
    title="## Streams on one connection (docs/models.md section 11)",
    text="Medians over runs; ms from the request start. *arrived*: every body byte in the "
    "receiver's transport (qlog for HTTP/3, the decrypted capture for HTTP/2); "
    "*in order*: every transport byte up to the stream's last had arrived (one TCP byte "
    "stream for HTTP/2; the stream's own bytes for QUIC); *HOL* = in order - arrived, the "
    "head-of-line wait of section 11 free of the receiver's CPU; *chunks held*: of the "
    "stream's 16 KB chunks, those whose own bytes had all arrived but that waited for "
    "another stream's (0 by construction on QUIC, which orders each stream alone), with the "
    "longest such wait; *delivered*: the last byte handed to the application; *wait* = "
    "delivered - arrived (HOL + the receiver's own reading).",
    columns=(
        _LEVEL,
        _PROTOCOL,
        _key("stream"),
        _RUNS,
        _median_ms("first byte", "first_byte_delivered_s"),
        _median_ms("arrived", "last_byte_arrived_s"),
        _median_ms("in order", "in_order_s"),
        _median_ms("HOL", "hol_transport_s"),
        _Column("max HOL", lambda group: _ms(group["hol_transport_s"].max())),
        _Column("chunks held", _held_per_run),
        _Column("max chunk wait", lambda group: _ms(_column(group, "held_max_s").max())),
        _median_ms("delivered", "delivered_s"),
        _median_ms("wait", "hol_wait_s"),
    ),
)
_CHUNKS = _GroupedSection(
    title="## Deadline: chunks read before their playout time (0.4 s + i x 20 ms)",
    text="",
    columns=(
        _LEVEL,
        _PROTOCOL,
        _Column("runs", lambda group: str(group["run_id"].nunique())),
        _Column("on time (median)", _on_time_per_run),
        _median_ms("read (median)", "read_s"),
        _median_ms("arrived (median)", "arrived_s"),
    ),
)
_PLAYBACK = _GroupedSection(
    title="## Playback (docs/models.md sections 2-3)",
    text="Measured: read times through the player that waits for a missing chunk; stalls are "
    "WebRTC's concealment events, stall time its concealed duration. Predicted: the chunk "
    "pipeline from the link parameters alone (on a traced downlink, each chunk through the "
    "trace from where it was when the request began), then the playback recurrence: a "
    "model, not a bound on stalls (a stream whose first chunk comes later than modelled "
    "starts playing later and has more slack). Drop rule: slots played as concealment.",
    columns=(
        _LEVEL,
        _PROTOCOL,
        _key("initial_buffer_s", "buffer ms", _ms),
        _RUNS,
        _median_ms("start delay", "start_delay_s"),
        _median_count("stalls", "stall_count"),
        _median_ms("stall ms", "stall_s"),
        _median_count("predicted stalls", "predicted_stall_count"),
        _median_ms("predicted stall ms", "predicted_stall_s"),
        _Column("causes (all runs)", _stall_causes),
        _median_count("drop rule: concealed", "drop_concealed_count"),
    ),
)
_CANCEL = _GroupedSection(
    title="## Cancel: the sender stops within one one-way delay + one chunk",
    text="ms after the client's cancel (medians); bytes: body bytes the server handed to its "
    "transport after the client had read its last chunk.",
    columns=(
        _LEVEL,
        _PROTOCOL,
        _RUNS,
        _median_ms("playback flushed", "playback_stopped_s"),
        _median_ms("server learned", "server_learned_s"),
        _median_ms("production stopped", "production_stopped_s"),
        _median_ms("sending stopped", "sending_stopped_s"),
        _median_ms("bound (d + 1 chunk)", "bound_s"),
        _median_count("bytes after cancel", "bytes_sent_after_cancel"),
        _Column("within bound", _within_bound),
    ),
)
_OVERHEAD = _GroupedSection(
    title="## Header and ACK overhead (docs/models.md section 7)",
    text="Per data direction: data packets and the pure ACKs the other end sent for them, from "
    "the capture, next to the model (P = the MSS, H = A = 52 bytes as Linux sends them; an ACK "
    "per packet with quickack, per two otherwise) and to the chapter's example sizes for the "
    "same payload (P = 1,168, H = 60, A = 92 bytes: not the same quantity as ours).",
    columns=(
        _LEVEL,
        _key("direction"),
        _RUNS,
        _median_count("data pkts", "data_packets"),
        _median_count("model", "model_data_packets"),
        _median_count("ACKs", "acks_for_it"),
        _median_count("model ACKs", "model_ack_packets"),
        _median_mb("data MB on wire", "data_wire_bytes"),
        _median_mb("model MB", "model_wire_bytes"),
        _median_mb("ACK MB", "ack_wire_bytes"),
        _median_count("chapter pkts", "chapter_data_packets"),
        _median_mb("chapter MB", "chapter_wire_bytes"),
        _median_mb("chapter ACK MB", "chapter_ack_wire_bytes"),
        _median_ms("completion ms", "total_s"),
    ),
)


def streams_section(frame: pd.DataFrame) -> list[str]:
    return _STREAMS.lines(frame)


def chunks_section(frame: pd.DataFrame) -> list[str]:
    return _CHUNKS.lines(frame)


def playback_section(frame: pd.DataFrame) -> list[str]:
    return _PLAYBACK.lines(frame)


def cancel_section(frame: pd.DataFrame) -> list[str]:
    return _CANCEL.lines(frame)


def _ack_saving_lines(frame: pd.DataFrame) -> list[str]:
    """Two levels: the one with fewer ACK bytes against the other, next to the chapter."""
    levels = frame.groupby("level")
    if len(levels) != 2:
        return []
    sized = "ack_wire_bytes_at_chapter_size"
    totals = {
        level: (
            group.groupby("run_id")["ack_wire_bytes"].sum().median(),
            group.groupby("run_id")["total_s"].first().median(),
            group.groupby("run_id")[sized].sum().median() if sized in group else math.nan,
        )
        for level, group in levels
    }
    (a, (a_bytes, a_time, a_92)), (b, (b_bytes, b_time, b_92)) = sorted(
        totals.items(), key=lambda kv: -kv[1][0]
    )
    at_92 = "" if math.isnan(a_92) else f" ({(a_92 - b_92) / 1e6:.3f} MB at the chapter's 92 bytes)"
    return [
        "",
        f"{b} vs {a}: {(a_bytes - b_bytes) / 1e6:.3f} MB fewer ACK bytes on the wire{at_92}, "
        f"completion {(b_time - a_time) * 1e3:+.1f} ms "
        "(the chapter: 1.38 MB fewer, 43 ms later, with 1,168-byte payloads and 92-byte ACKs).",
    ]


def overhead_section(frame: pd.DataFrame) -> list[str]:
    return _OVERHEAD.lines(frame, after_table=_ack_saving_lines(frame))


SECTIONS: dict[str, Callable[[pd.DataFrame], list[str]]] = {
    "streams": streams_section,
    "chunks": chunks_section,
    "playback": playback_section,
    "cancel": cancel_section,
    "overhead": overhead_section,
}
"""The report section of each table (of :data:`TABLES`, in its order)."""


def tiles_section(runs: pd.DataFrame) -> list[str]:
    """Whole vs tiled image next to the pipeline bound (docs/models.md section 2)."""
    rows = []
    images = runs[runs["workload"].map(_image_upload)]
    for level, attempts in images.groupby("level"):
        group, _ = _usable(attempts)
        workload = str(group["workload"].iloc[0])
        tiles = kinds.workload(workload).parts
        chapter = CHAPTER_TILES_S["tiles" if tiles > 1 else "whole"]
        route = kinds.workload(workload).route
        bound = _tiles_bound(group.iloc[0], tiles, route.tile_results if route else ())
        total = pd.to_numeric(group["total_s"], errors="coerce")
        used = int(group["valid"].astype(bool).sum()) if "valid" in group else len(group)
        shown = _ms(bound) if bound is not None else "– (no wired rate on the link)"
        rows.append([str(level), workload, str(used), _ms(total.median()), shown, _ms(chapter)])
    return _section(
        "## Tiles vs the whole image (docs/models.md section 2)",
        [],
        "Request time (from the connect; on an established connection from the request), "
        "median of the valid runs (of "
        "every attempt where *runs* is 0: none was valid); the bound is the pipeline of "
        "section 2 plus the connection set-up of section 4.",
        _table(["level", "workload", "runs", "measured", "pipeline bound", "chapter"], rows),
    )


def _tiles_bound(row: pd.Series, tiles: int, results: Sequence[int] = ()) -> float | None:
    """Section 2 plus the set-up of section 4 for a run's link; None when the link has no
    wired rate in each direction (an air hop alone, a link of delay only)."""
    up, down, rtt = (
        pd.to_numeric(row.get(c), errors="coerce") for c in ("up_bps", "down_bps", "rtt_s")
    )
    if any(pd.isna(v) for v in (up, down, rtt)) or min(up, down) <= 0:
        return None
    setup = bounds.setup_time_s(str(row["protocol"]), str(row["connection"]), float(rtt))
    return setup + tiles_bound_s(
        tiles, float(up), float(down), float(rtt), TILES_PROCESSING_S, results
    )


TILES_PROCESSING_S = 0.3
"""The image's processing in the chapter's tiles case (0.3 s, split over the tiles)."""


def tiles_bound_s(
    tiles: int,
    up_bps: float,
    down_bps: float,
    rtt_s: float,
    processing_s: float,
    results: Sequence[int] = (),
) -> float:
    """Section 2 for ``tiles`` equal tiles of the 30 MB upload: tile ``i`` is ready when its
    last byte has arrived (``(i+1) * S_u/n / B_u + R/2``), is processed in ``T_c / n`` and its
    part of the 5 MB result (``S_d/n``, or in proportion to ``results``: the chapter's 1, 2
    and 2 MB) is sent at ``B_d`` and arrives ``R/2`` later."""
    d = rtt_s / 2
    weights = list(results) or [1] * tiles
    ready = [(i + 1) * IMAGE_SIZE_BYTES / tiles * 8 / up_bps + d for i in range(tiles)]
    arrivals = bounds.pipeline(
        ready,
        [processing_s / tiles] * tiles,
        [RETOUCHED_SIZE_BYTES * w / sum(weights) * 8 / down_bps for w in weights],
        [d] * tiles,
    )
    return arrivals[-1]


def _all_valid(frame: pd.DataFrame) -> bool:
    return "valid" not in frame or bool(frame["valid"].astype(bool).all())


def _usable(frame: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The valid runs' rows, or every row (and a note) when no run of it is valid."""
    if _all_valid(frame):
        return frame, ""
    valid = frame[frame["valid"].astype(bool)]
    if len(valid):
        return valid, ""
    return frame, (
        "*No run of this table is valid (see Validity): the rows below are from invalid runs, "
        "kept to show the mechanism, not as results.*"
    )


def report_sections(result_dir: Path, runs: pd.DataFrame | None = None) -> list[str]:
    """Markdown for every table the result directory has (valid runs only, unless none is);
    a table that cannot be computed for these runs says so in one line (harness.report.guard)."""
    guard = Guard()
    frames = guard.attempt("tables", write_tables, result_dir, guard, default={})
    out = [f"*{title}: not computed for these runs ({why}).*" for title, why, _ in guard.failures]
    for name in TABLES:
        if name in frames:
            usable, note = _usable(frames[name])
            if note:
                usable.attrs["note"] = note
            out += guard.section(name, SECTIONS[name], usable)
    if runs is not None and "workload" in runs and any(map(_image_upload, runs["workload"])):
        out += guard.section("tiles", tiles_section, runs)
    return out
