"""The emulator beside its peers (``testbed bench link --compare``): the plan and the
arithmetic, with no I/O.

The same workloads cross each emulator in turn, alternated (round 1: ours, then each peer,
case by case; round 2 the same, ...), with the same parameters: one-way delay
:data:`ONE_WAY_DELAY_S` each way (the chapter's 200 ms round trip), a constant rate (for
Mahimahi's ``mm-link`` a constant trace of that rate, one 1,500-byte opportunity per 12,000
bits), and one drop-tail queue of one BDP in bytes per direction. The cases:

* ``rtt``: the idle round trip at the rate, with the testbed's UDP probe (kernel receive
  stamps at both ends): median and p99 of measured minus configured;
* ``tcp``: one kernel TCP flow from the server side to the client side (the host's default
  congestion control), socket buffers of twice the BDP at both ends (the link's sysctls):
  the receiver's goodput;
* ``udp``: UDP offered at 110 % of the rate in 1,500-byte IP packets: the receiver's rate;
* ``trace``: a capacity trace (Mahimahi's format) replayed by both, saturated by UDP from the
  client side: the bytes each 100 ms window delivered against the trace's opportunities in
  that window, at the alignment that fits best (the trace's start and the sender's are not
  shared clocks; the search is over every millisecond of one period).

Delivered rates are IP rates: the receiver's goodput times (payload + headers) / payload,
since both emulators count IP bytes against their rate. CPU is each emulator's own processes
(user + system of every thread, from /proc/PID/stat) over the measured window, in cores and
per 100 Mbit/s delivered; the host's softirq time over the same window is reported apart
(:mod:`harness.bench.peerlink` says what it holds).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.bench.udpblast import IP_PACKET_BYTES, UDP_PAYLOAD_BYTES
from tbcore.errors import SpecError
from tbcore.plain import AsDict

ONE_WAY_DELAY_S = 0.100
"""Each direction's delay: the chapter's reference path of 200 ms round trip (section 12.1)."""
CHAPTER_RATE_BPS = 333e6
"""The chapter's reference path rate (section 12.1)."""
GIGABIT_BPS = 1e9
UDP_OVERLOAD = 1.10
"""UDP is offered at 110 % of the rate (of the trace's peak 100 ms): the link sets the rate."""
TCP_MSS_BYTES = 1448
"""A full TCP segment's payload at MTU 1,500 with the timestamp option (Linux's default)."""
TCP_OVERHEAD_BYTES = 52
"""IPv4 (20) + TCP (20) + timestamp option (12)."""
TRACE_BIN_S = 0.100
"""The window the trace's replay is judged in (the issue's bytes per 100 ms)."""
DEFAULT_TRACE = "cell-markov.down"
"""A shipped capacity trace (netem/traces: 20 s, mean 10.9 Mbit/s, 0.5-24 Mbit/s)."""
MIN_QUEUE_BYTES = 64 * IP_PACKET_BYTES
"""A queue of at least 64 full packets, for a trace's low mean rate."""
PEERS = ("mahimahi", "netem")
"""The emulators a user would pick instead of ours."""
OURS_VARIANTS = {
    "ours": "the testbed's emulator, its defaults: every packet delivered on its own (a "
    "receiver without GRO acknowledges every second segment)",
    "ours-gro": "the same with --gro on: the TCP segments one wake-up releases reach the "
    "receiver as one super-packet, as a NIC's GRO hands them up (one ACK per super-packet); "
    "loss, queue and timing still see every wire packet",
}
"""Ours, as the table shows it: with its defaults and with the one setting that changes its
CPU most (:data:`netem.emulator.options.GRO_DOC`), so that the table says what it changes."""
EMULATORS = (*OURS_VARIANTS, *PEERS)
GUEST_SUFFIX = "@guest"
"""Marks the emulators measured in the stock-kernel QEMU guest (netem where this kernel has
none, with ours beside it there): their ratios are to ours in the guest."""


def ratio_base(emulator: str) -> str:
    """The emulator a row's ratios divide by: ours, on the same machine."""
    return "ours" + (GUEST_SUFFIX if emulator.endswith(GUEST_SUFFIX) else "")


KINDS = ("rtt", "tcp", "udp", "trace")


def parse_compare(text: str, *, variants: bool = True) -> tuple[str, ...]:
    """``--compare mahimahi,netem`` -> ("ours", "ours-gro", "mahimahi", "netem"); without
    ``variants`` (the user set ours' options) ours once."""
    peers = [word.strip() for word in text.split(",") if word.strip()]
    for peer in peers:
        if peer not in PEERS:
            raise SpecError("compare", f"{peer!r}: the peers are {', '.join(PEERS)}")
    if not peers or len(set(peers)) != len(peers):
        raise SpecError("compare", f"{text!r}: name each peer once ({', '.join(PEERS)})")
    ours = tuple(OURS_VARIANTS) if variants else ("ours",)
    return (*ours, *peers)


@dataclass(frozen=True)
class PeerCase:
    """One workload at one rate (or on one trace)."""

    kind: str
    rate_bps: float | None = None
    """The constant rate; None for ``trace``."""
    trace_path: str | None = None
    """The capacity trace of a ``trace`` case (absolute path)."""
    trace_mean_bps: float | None = None
    trace_peak_bps: float | None = None
    """The trace's mean, and its largest rate over a :data:`TRACE_BIN_S` window."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SpecError("case", f"{self.kind!r}: one of {', '.join(KINDS)}")
        if (self.kind == "trace") != (self.trace_path is not None):
            raise SpecError("case", "a trace case names its trace, and only a trace case does")
        if self.kind != "trace" and (self.rate_bps is None or self.rate_bps <= 0):
            raise SpecError("rate_bps", f"{self.kind} needs a positive rate")

    @property
    def name(self) -> str:
        if self.kind == "trace":
            return f"trace {self.trace_path.rsplit('/', 1)[-1]}" if self.trace_path else "trace"
        assert self.rate_bps is not None
        return f"{self.kind} {format_rate(self.rate_bps)}"

    @property
    def link_rate_bps(self) -> float:
        """The rate that sizes the queue and the socket buffers (a trace's mean)."""
        rate = self.rate_bps if self.kind != "trace" else self.trace_mean_bps
        if rate is None:
            raise SpecError("trace", "the trace's mean rate is not known")
        return rate

    @property
    def queue_bytes(self) -> int:
        """One BDP of the round trip at :attr:`link_rate_bps`, at least :data:`MIN_QUEUE_BYTES`."""
        bdp = self.link_rate_bps * 2 * ONE_WAY_DELAY_S / 8
        return max(MIN_QUEUE_BYTES, int(bdp))

    @property
    def offered_bps(self) -> float:
        """What UDP offers (110 % of the rate, or of the trace's peak window)."""
        top = self.trace_peak_bps if self.kind == "trace" else self.rate_bps
        assert top is not None
        return top * UDP_OVERLOAD

    def ours_link(self) -> str:
        """The testbed's link string for this case (one direction's trace is both's)."""
        delay = f"delay={ONE_WAY_DELAY_S * 1e3:g}ms,queue={self.queue_bytes}b"
        if self.kind == "trace":
            return f"{delay},rate=trace:{self.trace_path}"
        return f"{delay},rate={self.link_rate_bps / 1e6:g}mbit"


def format_rate(rate_bps: float) -> str:
    """``333 Mbit/s``, ``1 Gbit/s``."""
    if rate_bps >= 1e9 and rate_bps % 1e8 == 0:
        return f"{rate_bps / 1e9:g} Gbit/s"
    return f"{rate_bps / 1e6:g} Mbit/s"


@dataclass(frozen=True)
class PeerConfig:
    """How much of each case, and how often."""

    rounds: int = 3
    """Alternated rounds (the issue: three at least)."""
    rates_bps: tuple[float, ...] = (CHAPTER_RATE_BPS, GIGABIT_BPS)
    duration_s: float = 10.0
    """iperf3's measured part (after its omitted start)."""
    omit_s: float = 5.0
    """iperf3's omitted start: TCP's slow start to 1 Gbit/s at 200 ms takes about 3 s."""
    probes: int = 1000
    probe_interval_s: float = 0.005
    trace_duration_s: float = 20.0
    """The trace case's sending time: one period of the default trace."""

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise SpecError("rounds", f"at least 1, got {self.rounds}")
        if not self.rates_bps or any(r <= 0 for r in self.rates_bps):
            raise SpecError("rates", "at least one positive rate")
        for name in ("duration_s", "omit_s", "probe_interval_s", "trace_duration_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise SpecError(name, f"must be a positive number of seconds, got {value!r}")
        if self.probes < 10:
            raise SpecError("probes", f"at least 10, got {self.probes}")

    @classmethod
    def quick(cls) -> PeerConfig:
        """A short form (a test runs it): one round at the chapter's rate, short parts."""
        return cls(
            rounds=1,
            rates_bps=(CHAPTER_RATE_BPS,),
            duration_s=3.0,
            omit_s=3.0,
            probes=200,
            trace_duration_s=4.0,
        )


def plan_cases(config: PeerConfig, traces: Sequence[PeerCase] = ()) -> list[PeerCase]:
    """Per rate: the idle RTT, TCP, UDP; then each trace."""
    cases = [PeerCase(kind, rate) for rate in config.rates_bps for kind in ("rtt", "tcp", "udp")]
    return [*cases, *traces]


def trace_case(path: str, stamps_ms: Sequence[int]) -> PeerCase:
    """The trace case of a capacity trace's lines (its mean and its peak 100 ms window)."""
    per_ms = opportunities_per_ms(stamps_ms)
    period_s = len(per_ms) / 1000
    mean = len(stamps_ms) * IP_PACKET_BYTES * 8 / period_s
    bins = window_counts(per_ms, 0, round(TRACE_BIN_S * 1000), len(per_ms))
    peak = float(bins.max()) * IP_PACKET_BYTES * 8 / TRACE_BIN_S
    return PeerCase("trace", trace_path=path, trace_mean_bps=mean, trace_peak_bps=max(peak, mean))


@dataclass(frozen=True)
class Slot:
    """One measurement of the schedule."""

    round: int
    case: PeerCase
    emulator: str


CANNOT = {("netem", "trace"): "the kernel's netem has a rate, not a capacity trace"}
"""(emulator, case kind) pairs that are not measured, and why (the table's conditions say)."""


def schedule(cases: Sequence[PeerCase], emulators: Sequence[str], rounds: int) -> list[Slot]:
    """A B A B: each round runs every case, each case through every emulator in turn (but
    the pairs of :data:`CANNOT`)."""
    if not emulators or emulators[0] != "ours":
        raise SpecError("compare", "the testbed's own emulator comes first (the ratios' base)")
    return [
        Slot(r, case, emulator)
        for r in range(1, rounds + 1)
        for case in cases
        for emulator in emulators
        if (emulator, case.kind) not in CANNOT
    ]


# --- one measurement ----------------------------------------------------------------------


def delivered_ip_bps(goodput_bps: float, kind: str) -> float:
    """The IP rate behind a receiver's payload rate (the emulators count IP bytes)."""
    if kind == "tcp":
        return goodput_bps * (TCP_MSS_BYTES + TCP_OVERHEAD_BYTES) / TCP_MSS_BYTES
    return goodput_bps * IP_PACKET_BYTES / UDP_PAYLOAD_BYTES


@dataclass(frozen=True)
class TraceFit:
    """How a trace's replay matched the trace, per :data:`TRACE_BIN_S` window."""

    offset_ms: int
    """Where in the trace the first window started (the best fit)."""
    windows: int
    delivered_packets: int
    opportunities: int
    err_p50: float
    err_p99: float
    """Median and p99 of |delivered - opportunities| per window, over the mean
    opportunities per window (a fraction of the trace's mean window)."""

    @property
    def delivered_ratio(self) -> float:
        return self.delivered_packets / self.opportunities if self.opportunities else math.nan


def opportunities_per_ms(stamps_ms: Sequence[int]) -> np.ndarray:
    """Opportunities in each millisecond of one period (index t: stamps equal to t + 1, so
    that a trace's period is its last stamp, as ``mm-link`` wraps it)."""
    stamps = np.asarray(stamps_ms, dtype=np.int64)
    if stamps.size == 0 or stamps[-1] <= 0:
        raise SpecError("trace", "a capacity trace needs at least one stamp after 0")
    period = int(stamps[-1])
    return np.bincount(np.clip(stamps - 1, 0, period - 1), minlength=period)


def window_counts(per_ms: np.ndarray, offset_ms: Any, bin_ms: int, count: int) -> np.ndarray:
    """Opportunities in ``count`` consecutive windows of ``bin_ms`` from ``offset_ms`` (wrapping
    over the period); ``offset_ms`` an int or an array of them (one row of windows each)."""
    offsets = np.asarray(offset_ms)
    period = len(per_ms)
    reps = (int(offsets.max()) + bin_ms * count) // period + 2
    cumulative = np.concatenate(([0], np.cumsum(np.tile(per_ms, reps))))
    edges = offsets[..., None] + bin_ms * np.arange(count + 1)
    return np.diff(cumulative[edges], axis=-1)


def fit_trace(arrivals_s: Sequence[float], stamps_ms: Sequence[int]) -> TraceFit:
    """Bin the received full-size packets by arrival time in :data:`TRACE_BIN_S` windows
    (whole windows only, from the first arrival, times rounded to the millisecond) and find
    the trace offset whose windows match them best (least absolute error, every millisecond
    of one period tried)."""
    bin_ms = round(TRACE_BIN_S * 1000)
    times = np.sort(np.asarray(arrivals_s, dtype=float))
    if times.size < 2:
        raise SpecError("trace", "fewer than two packets arrived: nothing to fit")
    windows = int((times[-1] - times[0]) * 1000) // bin_ms
    if windows < 2:
        raise SpecError("trace", "less than two windows of arrivals: nothing to fit")
    # both emulators release a trace's opportunities on whole milliseconds: each arrival,
    # rounded to the millisecond from the first, is in the window of its opportunity
    relative_ms = np.rint((times - times[0]) * 1000).astype(np.int64)
    got = np.bincount(relative_ms // bin_ms, minlength=windows)
    got = got[:windows]
    per_ms = opportunities_per_ms(stamps_ms)
    expected = window_counts(per_ms, np.arange(len(per_ms)), bin_ms, windows)
    errors = np.abs(expected - got[None, :]).sum(axis=1)
    best = int(np.argmin(errors))
    chosen = expected[best]
    mean_window = max(1e-9, float(chosen.mean()))
    relative = np.abs(chosen - got) / mean_window
    return TraceFit(
        offset_ms=best,
        windows=windows,
        delivered_packets=int(got.sum()),
        opportunities=int(chosen.sum()),
        err_p50=float(np.quantile(relative, 0.5)),
        err_p99=float(np.quantile(relative, 0.99)),
    )


@dataclass(frozen=True)
class PeerRun(AsDict):
    """One slot's measurement through one emulator."""

    round: int
    case: str
    kind: str
    emulator: str
    rate_bps: float | None
    delivered_bps: float | None = None
    """IP bits per second the receiver got (the goodput's IP rate)."""
    goodput_bps: float | None = None
    cpu_cores: float | None = None
    """The emulator's own processes' CPU over the window (None: it runs in the kernel)."""
    softirq_cores: float | None = None
    """The host's softirq time over the window, apart (every stack's receive work)."""
    host_busy: float | None = None
    host_steal: float | None = None
    window_s: float | None = None
    rtt_err_p50_s: float | None = None
    rtt_err_p99_s: float | None = None
    probes: int | None = None
    trace_delivered_ratio: float | None = None
    trace_err_p50: float | None = None
    trace_err_p99: float | None = None
    error: str | None = None
    """Why this slot has no measurement (the emulator failed it), in one line."""


# --- the table ----------------------------------------------------------------------------


TABLE_COLUMNS = (
    "case",
    "emulator",
    "rate_bps",
    "runs",
    "delivered_bps",
    "delivered_ratio",
    "cpu_cores",
    "cpu_cores_per_100mbit",
    "cpu_ratio",
    "softirq_cores",
    "rtt_err_p50_s",
    "rtt_err_p99_s",
    "trace_delivered_ratio",
    "trace_err_p50",
    "trace_err_p99",
)
"""The compare table's columns (the issue's names first among them): medians over the
rounds; ``*_ratio`` columns are the emulator's median over ours (CPU per 100 Mbit/s
delivered, so that a slower emulator does not look cheaper)."""


def _median(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(known) if known else None


def _per_100mbit(run: PeerRun) -> float | None:
    if run.cpu_cores is None or not run.delivered_bps:
        return None
    return run.cpu_cores / (run.delivered_bps / 100e6)


@dataclass
class TableRow(AsDict):
    """One (case, emulator) of the table."""

    case: str
    emulator: str
    rate_bps: float | None
    runs: int
    failed: list[str] = field(default_factory=list)
    values: dict[str, float | None] = field(default_factory=dict)

    def cell(self, column: str) -> Any:
        if column in ("case", "emulator", "rate_bps", "runs"):
            return getattr(self, column)
        return self.values.get(column)


MEDIAN_FIELDS = tuple(c for c in TABLE_COLUMNS[4:] if c in PeerRun.__dataclass_fields__)
"""The measured columns, each the median of the rounds' values (the rest are derived)."""


def table(runs: Sequence[PeerRun]) -> list[TableRow]:
    """Medians per (case, emulator) in the schedule's order, with ratios to ours (on the
    same machine: :func:`ratio_base`)."""
    groups: dict[tuple[str, str], list[PeerRun]] = {}
    for run in runs:
        groups.setdefault((run.case, run.emulator), []).append(run)
    rows = []
    for (case, emulator), members in groups.items():
        good = [r for r in members if r.error is None]
        values = {name: _median(getattr(r, name) for r in good) for name in MEDIAN_FIELDS}
        values["cpu_cores_per_100mbit"] = _median(_per_100mbit(r) for r in good)
        rows.append(
            TableRow(
                case=case,
                emulator=emulator,
                rate_bps=members[0].rate_bps,
                runs=len(good),
                failed=[r.error for r in members if r.error is not None],
                values=values,
            )
        )
    bases = {(row.case, row.emulator): row for row in rows}
    for row in rows:
        base = bases.get((row.case, ratio_base(row.emulator)))
        for name, source in (
            ("delivered_ratio", "delivered_bps"),
            ("cpu_ratio", "cpu_cores_per_100mbit"),
        ):
            mine = row.values.get(source)
            theirs = None if base is None else base.values.get(source)
            row.values[name] = mine / theirs if mine is not None and theirs else None
    return rows


def _cell_text(column: str, value: Any) -> str:
    if value is None:
        return "–"
    if column in ("case", "emulator", "runs"):
        return str(value)
    if column.endswith("_bps"):
        return f"{value / 1e6:,.1f} Mbit/s"
    if column.endswith("_s"):
        return f"{value * 1e3:+.3f} ms"
    if column.startswith("trace_err") or column == "trace_delivered_ratio":
        return f"{value * 100:.1f} %"
    if column.endswith("_ratio"):
        return f"{value:.2f}"
    return f"{value:.3f}"


def table_cells(row: TableRow) -> list[str]:
    return [_cell_text(column, row.cell(column)) for column in TABLE_COLUMNS]


def markdown(rows: Sequence[TableRow], conditions: dict[str, Any]) -> str:
    """The table as Markdown, with the conditions it was made under."""
    lines = [
        "| " + " | ".join(TABLE_COLUMNS) + " |",
        "|" + "---|" * len(TABLE_COLUMNS),
    ]
    lines += ["| " + " | ".join(table_cells(row)) + " |" for row in rows]
    lines.append("")
    lines += [f"- {key}: {value}" for key, value in conditions.items()]
    failed = [f"- {row.case}, {row.emulator}: {reason}" for row in rows for reason in row.failed]
    if failed:
        lines += ["", "Slots without a measurement:", *failed]
    return "\n".join(lines) + "\n"


def rows_from_dicts(data: Sequence[dict[str, Any]]) -> list[PeerRun]:
    """PeerRun records back from their JSON (unknown keys refused in one line)."""
    names = set(PeerRun.__dataclass_fields__)
    runs = []
    for item in data:
        extra = set(item) - names
        if extra:
            raise SpecError("runs", f"unknown field(s) {', '.join(sorted(extra))}")
        runs.append(PeerRun(**item))
    return runs
