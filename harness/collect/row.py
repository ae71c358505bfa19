"""Collection: the files of one run in, its typed row out (no processes, no root).

A run directory holds what the execution left (harness/run/execute.py): ``run.json`` (the
planned run, its settings, the link, the clock offset of the captures), the client's
``records.jsonl``, the server's ``server.jsonl``, the link's ``link_stats.json`` and the
captures (``client.pcapng``/``server.pcapng`` for h2, ``qlog/`` for h3). :func:`collect_run`
reads them into a :class:`~tbcore.runrow.RunRow` and writes the derived files
(``events.jsonl``, ``acks.csv``, ``inflight.csv``); CPU and validity are the runner's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import bounds
from harness.collect import acks as ackmod
from harness.collect import feedback, rounds
from harness.collect.agent_rows import agent_part
from harness.collect.airtime import air_columns
from harness.collect.cross import cross_columns
from harness.collect.lateness import emulator_lateness
from harness.collect.rowparts import RowPart
from harness.collect.traces import handshake_slack_s, positions_at, run_clocks, trace_columns
from harness.collect.transfer import transfer_part
from harness.spec.cross import data_direction
from harness.spec.paths import end_to_end, request_path
from harness.store.files import (
    AIR_FILE,
    EDGE_STATS_FILE,
    EVENTS_FILE,
    LINK_EVENTS_FILE,
    LINK_STATS_FILE,
    QLOG_DIR,
    RECORDS_FILE,
    REMOTE_FILE,
    RUN_FILE,
    SERVER_LOG_FILE,
)
from harness.store.resultdir import write_jsonl
from harness.validity.below_bound import below_bound
from harness.validity.judge import Collected
from netem import pcapng
from netem.linkspec import LinkSpec
from netem.stats import LinkStats
from netem.topologyspec import Topology
from netem.traceclock import TraceClock
from tbcore import fecmath, kinds
from tbcore.records import RequestRecord, ServerEvent, read_jsonl
from tbcore.runrow import RunRow
from tbcore.settings import Settings

KEEP_QLOG_BYTES = 64 * 2**20
"""qlog costs ~1.1 KB per packet: traces above 64 MiB per run are removed after use."""

LATENESS_QUANTILE = 0.99
"""The emulator lateness quantile a run reports (the link issue's p99 target)."""

PHASE_TIMES = (
    ("t_connect_s", "connect_start"),
    ("t_handshake_s", "handshake_done"),
    ("t_request_first_s", "request_first_byte"),
    ("t_request_last_s", "request_last_byte"),
    ("t_response_first_s", "response_first_byte"),
    ("t_response_last_s", "response_last_byte"),
)
"""Row column and RequestRecord time of each phase boundary."""
CONNECTION_TIMES = ("connect_start", "handshake_done")
CLIENT_EVENT_TIMES = (
    "connect_start",
    "tcp_connected",
    "handshake_done",
    "request_first_byte",
    "request_last_byte",
    "response_first_byte",
    "response_last_byte",
)
"""The RequestRecord times that go to events.jsonl."""


# --- one request -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Phases:
    """One request's times, relative to its start (connect start for a request that opened
    its connection, first request byte otherwise)."""

    start_s: float
    """Absolute CLOCK_MONOTONIC start."""
    new_connection: bool
    handshake_s: float
    ttfb_s: float
    total_s: float
    rel: dict[str, float]
    """t_connect_s, t_handshake_s, t_request_first_s, ... relative to the start."""


def request_phases(record: RequestRecord, opened_connection: bool) -> Phases | None:
    """Times of one client record; None when it has no complete response."""
    first, last = record.request_first_byte, record.response_last_byte
    if first is None or last is None:
        return None
    connect = record.connect_start
    new = opened_connection and connect is not None
    start = float(connect) if new else float(first)  # type: ignore[arg-type]
    handshake = 0.0
    if new and record.handshake_done is not None:
        handshake = record.handshake_done - start
    rel = {}
    for name, key in PHASE_TIMES:
        value = getattr(record, key)
        if value is not None and (new or key not in CONNECTION_TIMES):
            rel[name] = float(value) - start
    response_first = record.response_first_byte
    return Phases(
        start_s=start,
        new_connection=new,
        handshake_s=handshake,
        ttfb_s=(response_first - start) if response_first is not None else math.nan,
        total_s=float(last) - start,
        rel=rel,
    )


def opened_connections(records: Sequence[RequestRecord]) -> list[bool]:
    """For each record, whether it was the first request on its connection."""
    seen: set[int] = set()
    out = []
    for record in records:
        out.append(record.conn_index not in seen)
        seen.add(record.conn_index)
    return out


def server_phases(events: Sequence[ServerEvent], start_s: float, end_s: float) -> dict[str, float]:
    """The server's view of one request, from its events inside [start_s, end_s]:
    ``server_receive_s`` (first to last request byte read), ``server_turnaround_s``
    (processing end, or the last request byte read where the route has no processing, to
    the first response byte written), ``server_send_s`` (first to last response byte
    written), ``processing_s`` (first processing start to last processing end). Stack
    overheads the bound does not count show up here."""

    def times(name: str) -> list[float]:
        return [e.t for e in events if e.event == name and start_s <= e.t <= end_s]

    def first(name: str) -> float | None:
        return min(times(name), default=None)

    def last(name: str) -> float | None:
        return max(times(name), default=None)

    out: dict[str, float] = {}
    pairs = {
        "processing_s": (first("processing_start"), last("processing_end")),
        "server_receive_s": (first("request_first_byte"), last("request_last_byte")),
        "server_turnaround_s": (last("processing_end"), first("response_first_byte")),
        "server_send_s": (first("response_first_byte"), last("response_last_byte")),
    }
    for name, (a, b) in pairs.items():
        if a is not None and b is not None:
            out[name] = b - a
    if "server_turnaround_s" not in out and "processing_s" not in out:
        # no processing: from the request's last byte to the answer's first, where the
        # answer follows it (one request in the window)
        received, answered = last("request_last_byte"), first("response_first_byte")
        if received is not None and answered is not None and answered >= received:
            out["server_turnaround_s"] = answered - received
    return out


# --- the bound -------------------------------------------------------------------------------


AnyRequestBound = bounds.RequestBound | bounds.TraceRequestBound | bounds.RelayBound


def _has_capacity(link: LinkSpec) -> bool:
    """Both directions have a rate or a capacity trace (what the request bound needs)."""
    return all(d.rate_bps is not None or d.rate_trace is not None for d in (link.up, link.down))


def bound_for(
    settings: Settings,
    path: Topology,
    up_bytes: int,
    down_bytes: int,
    positions_s: Mapping[str, float] | None = None,
    *,
    shares: Mapping[str, float] | None = None,
    extra_rtt_s: float = 0.0,
) -> AnyRequestBound | None:
    """The bound of one request of this level (None for a workload the request bound does
    not cover, such as the stream, or a path without rates): a new connection through a
    relay's warm long haul has its own (bounds.relay_request_time); every other request
    crosses its path end to end (bounds.request_time_for_link). On a traced link
    ``positions_s`` says where each direction's trace was at the request's start (the run's
    trace clock; default: the traces' offsets). ``shares`` and ``extra_rtt_s``: the request's
    part of each direction's capacity and a standing queue (docs/models.md section 15)."""
    workload = kinds.workload(settings.workload)
    link = request_path(path, settings.multipath)
    if not workload.bounded or not _has_capacity(link):
        return None
    protocol = kinds.protocol(settings.protocol)
    window = min((c for c in protocol.window_caps(settings) if c is not None), default=None)
    request = bounds.RequestArgs(
        upload_bytes=up_bytes,
        download_bytes=down_bytes,
        protocol=kinds.setup_name(settings),
        connection=settings.connection,
        processing_s=workload.processing_s(settings),
        initcwnd_segments=protocol.initial_window(settings),
        mss_bytes=protocol.mss(settings),
        window_bytes=window,
    )
    fair = bool(shares) or extra_rtt_s > 0
    if not fair and kinds.topology(path.kind).relayed(settings) and settings.connection == "new":
        if link.up.rate_bps is None or link.down.rate_bps is None:
            return None  # a relay's bound holds fixed rates
        return relay_bound(path, link, request)
    return bounds.request_time_for_link(
        link, positions_s=positions_s, shares=shares, extra_rtt_s=extra_rtt_s, **request
    )


def relay_bound(path: Topology, link: LinkSpec, request: bounds.RequestArgs) -> bounds.RelayBound:
    """docs/models.md sections 1 and 4 on a relay: a new near hop, one warm long-haul exchange."""
    near, far = path.edge("near_link").spec, path.edge("link").spec
    assert link.up.rate_bps is not None and link.down.rate_bps is not None
    return bounds.relay_request_time(
        protocol=request["protocol"],
        near_rtt_s=near.rtt_s,
        long_rtt_s=far.rtt_s,
        up_bps=link.up.rate_bps,
        down_bps=link.down.rate_bps,
        upload_bytes=request["upload_bytes"],
        download_bytes=request["download_bytes"],
        processing_s=request["processing_s"],
        near_up_bps=near.up.rate_bps,
        near_down_bps=near.down.rate_bps,
        initcwnd_segments=request["initcwnd_segments"],
        mss_bytes=request["mss_bytes"],
    )


def mathis_time_s(link: LinkSpec, bound: bounds.RequestBound) -> float | None:
    """docs/models.md section 8: the data direction sent at min(path, Mathis rate), plus the
    bound's set-up, propagation and processing; None without loss on that direction."""
    upload = bound.upload_bytes >= bound.download_bytes
    loss = link.up.mean_loss if upload else link.down.mean_loss
    size = bound.upload_bytes if upload else bound.download_bytes
    rate = bound.up_bps if upload else bound.down_bps
    if loss <= 0 or size <= 0:
        return None
    mathis = bounds.mathis_throughput_bps(bound.mss_bytes, bound.rtt_s, loss)
    return (
        bound.setup_s
        + bound.propagation_s
        + bound.processing_s
        + size * bounds.BITS_PER_BYTE / min(rate, mathis)
    )


BOUND_COLUMNS = (
    ("bound_setup_s", "setup_s"),
    ("bound_feedback_s", "feedback_s"),
    ("bound_window_s", "window_s"),
    ("bound_serialisation_s", "serialisation_s"),
    ("bound_propagation_s", "propagation_s"),
    ("bound_processing_s", "processing_s"),
    ("bound_retransmission_s", "retransmission_s"),
    ("bound_expected_s", "expected_s"),
)
"""bound_* columns and the part of the bound each holds (a part a bound lacks: 0, or for
the expected time its total)."""


def bound_columns(
    settings: Settings,
    path: Topology,
    values: dict[str, Any],
    positions_s: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """bound_* columns and the ratio of the measured total to the bound (``positions_s``:
    the traces' positions at the request's start, :func:`bound_for`)."""
    bound = bound_for(
        settings, path, int(values["up_bytes"]), int(values["down_bytes"]), positions_s
    )
    if bound is None:
        return {}
    out: dict[str, Any] = {"bound_s": bound.total_s}
    for column, part in BOUND_COLUMNS:
        default = bound.total_s if part == "expected_s" else 0.0
        out[column] = getattr(bound, part, default)
    if isinstance(bound, bounds.RequestBound):
        out["bound_mathis_s"] = mathis_time_s(end_to_end(path), bound)
    if values.get("total_s") is not None and bound.total_s > 0:
        out["ratio"] = values["total_s"] / bound.total_s
    return out


def sender_paces(settings: Settings) -> bool:
    """Whether the sender spreads a window over time instead of sending it at line rate
    (tbcore.kinds: the protocol's pacer). The bound assumes line-rate windows, so a paced
    sender's gap is named for its pacer."""
    return kinds.protocol(settings.protocol).paces(settings)


def _way_labels(settings: Settings, path: Topology) -> dict[str, Any]:
    """``route`` and ``multipath``: the value of the setting that says which way the run took
    through its shape (tbcore.kinds.TopologyKind.label_setting), None for the others."""
    own = kinds.topology(path.kind).label_setting
    labels = {t.label_setting for t in kinds.TOPOLOGIES.values() if t.label_setting}
    return {name: getattr(settings, name) if name == own else None for name in sorted(labels)}


def label_columns(settings: Settings, path: Topology) -> dict[str, Any]:
    """What ran: the row's labels from the settings and the path (end to end)."""
    link = end_to_end(path)
    return {
        "protocol": settings.protocol,
        "connection": settings.connection,
        "workload": settings.workload,
        "topology": path.kind,
        **_way_labels(settings, path),
        "cc": kinds.protocol(settings.protocol).cc_of(settings),
        "quic_stack": kinds.protocol(settings.protocol).stack_of(settings),
        "paced": sender_paces(settings),
        "rtt_s": link.rtt_s,
        "loss": max(link.up.mean_loss, link.down.mean_loss),
        "up_bps": link.up.rate_bps,
        "down_bps": link.down.rate_bps,
        "link": str(path.link_spec),
        "exit_link": str(path.edge("exit_link").spec) if "exit_link" in path.edge_names else None,
        "ignored_settings": ",".join(settings.ignored()) or None,
    }


def median_record(records: Sequence[RequestRecord]) -> RequestRecord | None:
    """The run's request as :func:`request_columns` picks it: the median measured one."""
    opened = opened_connections(records)
    good = [
        (r, p)
        for r, o in zip(records, opened, strict=True)
        if not r.warmup and (p := request_phases(r, o)) is not None
    ]
    if not good:
        return None
    good.sort(key=lambda rp: rp[1].total_s)
    return good[len(good) // 2][0]


def fec_columns(
    settings: Settings,
    link: LinkSpec,
    record: RequestRecord | None,
    values: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The fec_* columns, the FEC bound (MODELS s10) and the ratio of a run, from its
    median request's figures: the data transfer (the larger one) as its receiver saw it."""
    out: dict[str, Any] = {}
    fec = None if record is None else record.fec
    if fec is None or link.up.rate_bps is None or link.down.rate_bps is None:
        return out
    data, receiver = fec.data()
    request = fec.request or {}
    response = fec.response or {}
    up_symbols = request.get("source_symbols", 0) + request.get("repair_symbols", 0)
    down_symbols = response.get("source_symbols", 0) + response.get("repair_symbols", 0)
    bound = bounds.fec_request_time(
        rtt_s=link.rtt_s,
        up_bps=link.up.rate_bps,
        down_bps=link.down.rate_bps,
        up_symbols=up_symbols,
        down_symbols=down_symbols,
        symbol_bytes=fecmath.FEC_SYMBOL_BYTES,
        processing_s=kinds.workload(settings.workload).processing_s(settings),
        connection=settings.connection,
    )
    out.update(
        bound_s=bound.total_s,
        bound_setup_s=bound.setup_s,
        bound_feedback_s=0.0,
        bound_window_s=0.0,
        bound_serialisation_s=bound.serialisation_s,
        bound_propagation_s=bound.propagation_s,
        bound_processing_s=bound.processing_s,
        bound_retransmission_s=0.0,
        bound_expected_s=bound.total_s,
    )
    total = (values or {}).get("total_s")
    if total is not None and bound.total_s > 0:
        out["ratio"] = total / bound.total_s
    if data is not None:
        out.update(
            fec_source_symbols=data.get("source_symbols"),
            fec_repair_symbols=data.get("repair_symbols"),
            fec_extra_rounds=data.get("extra_rounds"),
            fec_decode_failures=data.get("decode_failures"),
            fec_loss_estimate=data.get("loss_estimate"),
            fec_loss_model=data.get("loss_model") or None,
            fec_data_direction="up" if receiver == "server" else "down",
        )
    out["fec_rate_bps"] = (fec.session or {}).get("rate_bps")
    return out


def fec_required(k: int | None, realised_loss: float | None, target: float) -> int | None:
    """MODELS s10's repair symbols for k at the loss the link realised (None: unknown)."""
    if not k or realised_loss is None or not 0 <= realised_loss < 1:
        return None
    return fecmath.repair_symbols(k, realised_loss, target)


# --- the run -----------------------------------------------------------------------------------


ROW_PARTS: dict[str, Callable[..., RowPart]] = {
    "agent_round": agent_part,
    "transfer": transfer_part,
}
"""The row part of each record kind other than ``request`` (tbcore.kinds.WorkloadKind.records:
a workload names its kind; harness.collect.rowparts says what a part is)."""


@dataclass(frozen=True)
class RunFiles:
    """What run.json says about a run."""

    run_dir: Path
    plan: dict[str, Any]
    settings: Settings
    path: Topology
    """The path the run crossed, every edge's spec as the run set it."""
    offset_s: float
    """CLOCK_REALTIME - CLOCK_MONOTONIC when the run started (pcap times are realtime)."""
    started_utc: str | None
    backend: str | None = None
    clocks: dict[str, TraceClock] = field(default_factory=dict)
    """The primary edge's trace clocks, by direction (harness.collect.traces)."""
    port: int | None = None
    """The port the run's server listened on."""

    @property
    def link(self) -> LinkSpec:
        """The path end to end (harness.spec.paths.end_to_end)."""
        return end_to_end(self.path)

    @classmethod
    def open(cls, run_dir: Path) -> RunFiles:
        data = json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))
        return cls(
            run_dir=run_dir,
            plan=data["run"],
            settings=Settings.from_stored(data["settings"], f"{RUN_FILE}.settings"),
            path=Topology.from_dict(data["topology"]),
            offset_s=float(data["clock_offset_s"]),
            started_utc=data.get("started_utc"),
            backend=data.get("backend"),
            clocks=run_clocks(data),
            port=data.get("port"),
        )


def collect_run(run_dir: Path, error: str | None = None) -> Collected:
    """The row of the run in ``run_dir`` (``error``: what the execution saw go wrong)."""
    files = RunFiles.open(run_dir)
    kind = kinds.workload(files.settings.workload).records
    if kind == "request":
        values, error, window = request_row(files, error)
    else:  # another record kind (agent rounds): its registered row part (harness.collect.rowparts)
        build = ROW_PARTS[kind]
        part = build(
            files.settings, files.path, run_dir, error, fired_events(run_dir), files.clocks
        )
        values, error, window = part.columns, part.error, (part.start_s, part.end_s)
        values.setdefault("sha256_ok", part.sha256_ok)
    upload = int(values["up_bytes"]) >= int(values["down_bytes"])
    values.update(packet_columns(files, upload, *window))
    if files.settings.cross is not None:
        values.update(competing_columns(files, values, window))
    link_values, loss_checks = link_columns(run_dir / LINK_STATS_FILE, files.path.link_spec)
    values.update(link_values)
    values.update(edge_columns(run_dir / EDGE_STATS_FILE))
    values.update(
        air_columns(run_dir / LINK_STATS_FILE, run_dir / AIR_FILE, files.settings, files.link)
    )
    values.update(remote_columns(run_dir / REMOTE_FILE))
    direction = values.get("fec_data_direction")
    if direction is not None:
        values["fec_repair_required"] = fec_required(
            values.get("fec_source_symbols"),
            values.get(f"realised_loss_{direction}"),
            files.settings.fec_target,
        )
    labels = label_columns(files.settings, files.path)
    values["below_bound"] = below_bound({**labels, **values}, files.settings)
    row = RunRow(
        **files.plan, **labels, started_utc=files.started_utc, backend=files.backend, **values
    )
    return Collected(
        row,
        error,
        window[0],
        window[1],
        loss_checks,
        path=files.path,
        lateness=emulator_lateness(run_dir),
        handshake_slack_s=handshake_slack_s(files.path),
    )


Window = tuple[float | None, float | None]
BoundColumns = Callable[
    ["RunFiles", Sequence[RequestRecord], dict[str, Any], Window], dict[str, Any]
]


def _request_bound(
    files: RunFiles, records: Sequence[RequestRecord], values: dict[str, Any], window: Window
) -> dict[str, Any]:
    """MODELS sections 1, 4-6 from where each trace was at the request's start, and what
    the traces offered over the request."""
    positions = positions_at(files.clocks, window[0])
    out = bound_columns(files.settings, files.path, values, positions)
    out.update(trace_columns(files.path, files.clocks, *window))
    return out


BOUNDS: dict[str, BoundColumns] = {
    "request": _request_bound,
    # MODELS s10: the serial time of the symbols sent, no retransmission round
    "fec": lambda files, records, values, window: fec_columns(
        files.settings, files.link, median_record(records), values
    ),
}
"""The bound_* columns of a run of request records, by its protocol's model
(tbcore.kinds.ProtocolKind.bound)."""


def request_row(
    files: RunFiles, error: str | None
) -> tuple[dict[str, Any], str | None, tuple[float | None, float | None]]:
    """Columns, error and window of a run of request records, with its bound."""
    records = read_jsonl(files.run_dir / RECORDS_FILE, RequestRecord)
    events = read_jsonl(files.run_dir / SERVER_LOG_FILE, ServerEvent)
    values, error, window = request_columns(files.settings, records, events, error)
    model = kinds.protocol(files.settings.protocol).bound
    values.update(BOUNDS[model](files, records, values, window))
    write_events(files.run_dir / EVENTS_FILE, records, events)
    return values, error, window


def competing_columns(
    files: RunFiles, values: dict[str, Any], window: tuple[float | None, float | None]
) -> dict[str, Any]:
    """A run beside competing traffic (harness.collect.cross): the flows' bytes and the
    request's share while it ran, and its bound at its fair share behind the standing queue
    (docs/models.md section 15)."""
    out, queue = cross_columns(
        files.settings, files.link, files.run_dir, files.offset_s, files.port, window
    )
    measured_rtt = values.get("measured_rtt_s")
    if queue is None and measured_rtt is not None:
        queue = max(0.0, measured_rtt - files.link.rtt_s)
    out["standing_queue_s"] = queue
    share = out.get("fair_share")
    if share is None or values.get("up_bytes") is None:
        return out
    positions = positions_at(files.clocks, window[0])
    bound = bound_for(
        files.settings, files.path, int(values["up_bytes"]), int(values["down_bytes"]),
        positions, shares={data_direction(files.settings): share}, extra_rtt_s=queue or 0.0,
    )  # fmt: skip
    if bound is not None:
        out["bound_fair_s"] = bound.total_s
        if values.get("total_s") is not None and bound.total_s > 0:
            out["ratio_fair"] = values["total_s"] / bound.total_s
    return out


def fired_events(run_dir: Path) -> list[dict[str, Any]]:
    """The link events the run's progress gave (harness.run.progress), [] if none."""
    path = run_dir / LINK_EVENTS_FILE
    if not path.exists():
        return []
    return list(json.loads(path.read_text(encoding="utf-8")))


def request_columns(
    settings: Settings,
    records: Sequence[RequestRecord],
    events: Sequence[ServerEvent],
    error: str | None,
) -> tuple[dict[str, Any], str | None, tuple[float | None, float | None]]:
    """The run's request (the median of its measured requests): its columns, the run's
    error (the first request error if the execution had none) and its time window."""
    opened = opened_connections(records)
    measured = [r for r, o in zip(records, opened, strict=True) if not r.warmup]
    phases = [request_phases(r, o) for r, o in zip(records, opened, strict=True) if not r.warmup]
    good = [(r, p) for r, p in zip(measured, phases, strict=True) if p is not None]
    errors = [r.error for r in records if r.error]
    if error is None and errors:
        error = str(errors[0])
    if error is None and not good:
        error = "no measured request completed"
    workload = kinds.workload(settings.workload)
    up_default, down_default = workload.up_bytes(settings), workload.down_bytes(settings)
    sha = [r.sha256_ok for r in measured]
    values: dict[str, Any] = {"sha256_ok": None if not sha else all(v is True for v in sha)}
    if not good:
        values.update(up_bytes=up_default, down_bytes=down_default, requests=0)
        return values, error, (None, None)
    good.sort(key=lambda rp: rp[1].total_s)
    record, ph = good[len(good) // 2]
    start_s, end_s = ph.start_s, ph.start_s + ph.total_s
    values.update(
        handshake_s=ph.handshake_s if ph.new_connection else 0.0,
        ttfb_s=ph.ttfb_s,
        total_s=ph.total_s,
        requests=len(good),
        up_bytes=record.up_bytes or up_default,
        down_bytes=record.down_bytes or down_default,
        resumed=record.resumed,
        early_data_accepted=record.early_data_accepted,
        client_retransmits=record.retransmits,
        client_min_rtt_s=record.min_rtt_s,
        **ph.rel,
        **server_phases(events, start_s, end_s),
    )
    return values, error, (start_s, end_s)


def write_events(
    path: Path, records: Sequence[RequestRecord], events: Sequence[ServerEvent]
) -> None:
    """events.jsonl: client and server events on one clock, in time order."""
    out = []
    for index, record in enumerate(records):
        for key in CLIENT_EVENT_TIMES:
            if getattr(record, key) is not None:
                out.append(
                    {
                        "t": getattr(record, key),
                        "source": "client",
                        "event": key,
                        "request": index,
                        "warmup": record.warmup,
                        "conn": record.conn_index,
                        "schema": RequestRecord.schema_tag(),
                    }
                )
    out.extend({**event.to_dict(), "source": "server"} for event in events)
    out.sort(key=lambda e: e["t"])
    write_jsonl(path, out)


def remote_columns(path: Path) -> dict[str, Any]:
    """The clock offset and the one-way delays of a run whose server ran on another host."""
    if not path.exists():
        return {}
    info = json.loads(path.read_text(encoding="utf-8"))
    flags = [info.get("one_way_up_flag"), info.get("one_way_down_flag")]
    return {
        "remote_host": info.get("host"),
        "server_clock_offset_s": info.get("clock_offset_s"),
        "server_clock_error_s": info.get("clock_error_s"),
        "one_way_up_s": info.get("one_way_up_s"),
        "one_way_down_s": info.get("one_way_down_s"),
        "one_way_flag": "impossible"
        if "impossible" in flags
        else next((f for f in flags if f), None),
    }


def edge_columns(path: Path) -> dict[str, Any]:
    """Bytes each edge of a topology delivered upstream, and the worst emulator lateness of
    any edge (edge_stats.json; a direct link has no such file)."""
    if not path.exists():
        return {}
    edges = json.loads(path.read_text(encoding="utf-8"))
    out: dict[str, Any] = {}
    worst: list[float] = []
    for name, data in edges.items():
        stats = LinkStats.from_dict(data)
        out[f"bytes_{name}"] = stats.up.bytes_out
        if name == "link":
            out["dropped_outage_link"] = stats.up.dropped_outage
        if "lateness" in stats.measured:
            for d in ("up", "down"):
                value = stats.direction(d).lateness_quantile_s(LATENESS_QUANTILE)
                if value is not None:
                    worst.append(value)
    if worst:
        out["lateness_p99_s"] = max(worst)
    return out


def link_columns(
    path: Path, link: LinkSpec
) -> tuple[dict[str, Any], dict[str, tuple[float, int, int]]]:
    """What the emulator counted over the run (link_stats.json: the difference of its
    counters after and before), and the loss checks of the directions with a loss rate."""
    if not path.exists():
        return {}, {}
    diff = LinkStats.from_dict(json.loads(path.read_text(encoding="utf-8")))
    out: dict[str, Any] = {"cpu_emulator_run": diff.emulator_cpu_fraction}
    checks: dict[str, tuple[float, int, int]] = {}
    p99 = []
    for name in ("up", "down"):
        d = diff.direction(name)
        out[f"realised_loss_{name}"] = d.realised_loss
        out[f"queue_drops_{name}"] = d.dropped_queue
        out[f"dropped_loss_{name}"] = d.dropped_loss
        configured = getattr(link, name)
        if configured.gemodel is None:
            checks[name] = (configured.loss, d.dropped_loss, d.loss_trials)
        if "lateness" in diff.measured:
            p99.append(d.lateness_quantile_s(LATENESS_QUANTILE))
    known = [v for v in p99 if v is not None]
    out["lateness_p99_s"] = max(known) if known else None
    return out, checks


# --- packets -------------------------------------------------------------------------------


def packet_columns(
    files: RunFiles, upload: bool, start_s: float | None, end_s: float | None
) -> dict[str, Any]:
    """acks.csv and inflight.csv of the data sender; counts within the request window."""
    kind = kinds.protocol(files.settings.protocol)
    if kind.transport == "tcp":
        out = _tcp_packets(files, upload, start_s, end_s)
    elif not kind.qlog:
        return {}  # datagrams without ACKs (fec: its figures are in the fec_* columns)
    else:
        out = _quic_packets(files, upload, start_s, end_s)
        _trim_qlog(files.run_dir / QLOG_DIR)
    return {**out, **_ack_model(files, upload, out)}


def _ack_model(files: RunFiles, upload: bool, measured: Mapping[str, Any]) -> dict[str, Any]:
    """The ACKs per data packet section 7 gives the run's ack_policy (harness.bounds), at
    the data direction's rate in full packets, and the ACK bytes it predicts for the data
    packets measured (at the stack's mean ACK-only packet, as measured)."""
    settings, link = files.settings, end_to_end(files.path)
    kind = kinds.protocol(settings.protocol)
    rate = (link.up if upload else link.down).rate_bps
    packets_per_s = rate / (8 * kind.mss(settings)) if rate else None
    model = bounds.policy_acks_per_packet(
        settings.ack_policy, kind.transport, packets_per_s, link.rtt_s or None
    )
    data, acks = measured.get("data_packets"), measured.get("ack_only_packets")
    ack_bytes = measured.get("wire_bytes_ack")
    predicted = None
    if model is not None and data and acks and ack_bytes:
        predicted = round(data * model * ack_bytes / acks)
    return {"model_acks_per_packet": model, "model_wire_bytes_ack": predicted}


def _tcp_packets(
    files: RunFiles, upload: bool, start_s: float | None, end_s: float | None
) -> dict[str, Any]:
    capture = pcapng.capture_file(files.run_dir, "client" if upload else "server")
    segments = ackmod.read_tcp_segments(capture) if capture is not None else []
    if files.settings.cross is not None and files.port is not None:
        # the request's own connections: competing flows are not its ACKs
        segments = [s for s in segments if files.port in (s.sport, s.dport)]
    if not segments:
        return {}
    result = ackmod.tcp_acks(segments, clock_offset_s=files.offset_s)
    inside = _inside(result.rows, start_s, end_s)
    policy = _tcp_feedback(files, (start_s, end_s))
    windows = [r.rwnd_bytes for r in inside if r.rwnd_bytes is not None]
    ackmod.write_inflight_csv(
        files.run_dir / "inflight.csv",
        ackmod.tcp_inflight(segments, clock_offset_s=files.offset_s),
        start_s=start_s or 0.0,
    )
    ackmod.write_acks_csv(files.run_dir / "acks.csv", result.rows, start_s=start_s or 0.0)
    return {
        "acks": len(inside),
        "min_rwnd_bytes": min(windows) if windows else None,
        "retransmits": _count_inside(result.retransmit_times_s, start_s, end_s),
        "transmission_rounds": rounds.transmission_rounds(
            segments, clock_offset_s=files.offset_s, window=(start_s, end_s)
        ),
        "measured_rtt_s": ackmod.handshake_rtt_s(segments),
        **policy,
    }


def _tcp_feedback(files: RunFiles, window: tuple[float | None, float | None]) -> dict[str, Any]:
    """The receivers' ACKs (harness.collect.feedback), each from the capture at its end,
    both directions added."""
    total = feedback.Feedback()
    for receiver in ("client", "server"):
        capture = pcapng.capture_file(files.run_dir, receiver)
        if capture is None:
            continue
        segments = ackmod.read_tcp_segments(capture)
        if files.settings.cross is not None and files.port is not None:
            segments = [s for s in segments if files.port in (s.sport, s.dport)]
        total = total.add(
            feedback.tcp_feedback(
                segments, receiver=receiver, clock_offset_s=files.offset_s, window=window
            )
        )
    return total.columns()


def _quic_packets(
    files: RunFiles, upload: bool, start_s: float | None, end_s: float | None
) -> dict[str, Any]:
    vantage = "client" if upload else "server"
    traces = ackmod.read_qlog_traces(files.run_dir / QLOG_DIR / vantage)
    if not traces:
        return {}
    result = ackmod.quic_acks(traces, clock_offset_s=files.offset_s, vantage=vantage)
    ackmod.write_inflight_csv(
        files.run_dir / "inflight.csv",
        ackmod.quic_inflight(traces, clock_offset_s=files.offset_s, vantage=vantage),
        start_s=start_s or 0.0,
    )
    if result.rows:
        ackmod.write_acks_csv(files.run_dir / "acks.csv", result.rows, start_s=start_s or 0.0)
    policy = feedback.Feedback()
    for receiver in ("client", "server"):
        policy = policy.add(
            feedback.quic_feedback(
                traces
                if receiver == vantage
                else ackmod.read_qlog_traces(files.run_dir / QLOG_DIR / receiver),
                vantage=receiver,
                clock_offset_s=files.offset_s,
                window=(start_s, end_s),
            )
        )
    return {
        "acks": len(_inside(result.rows, start_s, end_s)),
        "retransmits": _count_inside(result.lost_times_s, start_s, end_s),
        "measured_rtt_s": ackmod.qlog_min_rtt_s(traces),
        **policy.columns(),
    }


def _inside(rows: Sequence[ackmod.AckRow], t0: float | None, t1: float | None) -> list:
    if t0 is None or t1 is None:
        return list(rows)
    return [r for r in rows if t0 <= r.time_s <= t1]


def _count_inside(times_s: Sequence[float], t0: float | None, t1: float | None) -> int:
    """Events (retransmissions, losses) at times within [t0, t1]; all without a window."""
    if t0 is None or t1 is None:
        return len(times_s)
    return sum(t0 <= t <= t1 for t in times_s)


def _trim_qlog(directory: Path) -> None:
    """Very large traces are removed after use, with a note of their size."""
    if not directory.is_dir():
        return
    total = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())
    if total > KEEP_QLOG_BYTES:
        (directory / "TRIMMED").write_text(
            f"{total} bytes of qlog removed (cap {KEEP_QLOG_BYTES})\n"
        )
        for pattern in ("*.qlog", "*.sqlog"):
            for path in directory.rglob(pattern):
                path.unlink()
