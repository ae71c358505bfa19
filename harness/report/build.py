"""``report.md`` and PNG plots of one result directory (matplotlib, Agg backend).

Plots (``plots/``):
- ``levels.png``: every valid measured run per level (strip over a box), the level's bound
  drawn as a red bar, invalid runs as grey crosses.
- ``timeline.png``: the median run of each level: set-up, request sent, waiting for the
  first response byte, response, against the bound.
- ``inflight.png``: bytes in flight over time in the median run of each level.
- ``acks.png``: ACK arrival at the sender (acknowledged byte or packet number vs time).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from harness.analysis import levels as analysis
from harness.collect.airtime import air_report_lines
from harness.report import cctrace, stream_tables
from harness.report import fec as fecreport
from harness.report import hosts as host_report
from harness.report import remote as remote_report
from harness.report.guard import Guard
from harness.report.paths import paths_section
from harness.report.protocols import protocols_section
from harness.report.varying import varying_sections
from harness.store.resultdir import EMPTY_COLUMNS_FILE, ResultDir, atomic_write_text

PLOT_DPI = 110


def _ms(seconds: float) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "–"
    return f"{seconds * 1e3:.1f}"


def _ratio(value: float) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value:.3f}"


def _levels_and_baselines(manifest: dict[str, Any], frame: pd.DataFrame) -> dict[str, str]:
    levels = manifest.get("resolved", {}).get("levels")
    if levels:
        names = {lv["name"] for lv in levels}
        return {
            lv["name"]: (lv.get("baseline") if lv.get("baseline") in names else levels[0]["name"])
            for lv in levels
        }
    names = list(dict.fromkeys(frame["level"])) if not frame.empty else []
    return {name: names[0] for name in names}


def _save(fig: plt.Figure, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=PLOT_DPI, bbox_inches="tight")
    plt.close(fig)
    tmp.replace(path)


def plot_levels(frame: pd.DataFrame, levels: Sequence[str], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(max(4.0, 1.4 * len(levels) + 2), 4.0))
    measured = frame[~frame["warmup"].fillna(False).astype(bool)] if not frame.empty else frame
    good = analysis.analysable(frame)
    data = [pd.to_numeric(good[good["level"] == lv]["total_s"]).dropna() * 1e3 for lv in levels]
    if any(len(d) for d in data):
        ax.boxplot(
            [d.tolist() if len(d) else [math.nan] for d in data],
            positions=range(len(levels)),
            widths=0.5,
            showfliers=False,
        )
    for i, (lv, d) in enumerate(zip(levels, data, strict=True)):
        jitter = [(k % 7 - 3) * 0.03 for k in range(len(d))]
        ax.scatter([i + j for j in jitter], d, s=14, alpha=0.7, zorder=3)
        runs = good[good["level"] == lv]
        bound = pd.to_numeric(runs["bound_s"]).median() if len(runs) else math.nan
        if math.isfinite(bound):
            ax.hlines(bound * 1e3, i - 0.35, i + 0.35, colors="red", linewidth=2, zorder=4)
        bad = measured[(measured["level"] == lv) & ~measured["valid"].fillna(False).astype(bool)]
        bad_totals = pd.to_numeric(bad["total_s"], errors="coerce").dropna() * 1e3
        if len(bad_totals):
            ax.scatter([i] * len(bad_totals), bad_totals, marker="x", color="grey", zorder=3)
    ax.set_xticks(range(len(levels)), levels, rotation=20)
    ax.set_ylabel("request time (ms)")
    ax.set_title("Request time per level (red: bound; x: invalid runs)")
    ax.grid(axis="y", alpha=0.3)
    _save(fig, path)


TIMELINE_PHASES = (
    ("set-up", "t_connect_s", "t_handshake_s", "tab:orange"),
    ("request written", "t_request_first_s", "t_request_last_s", "tab:blue"),
    ("waiting", "t_request_last_s", "t_response_first_s", "tab:grey"),
    ("response", "t_response_first_s", "t_response_last_s", "tab:green"),
)
"""Phases of the timeline plot: (label, start column, end column, colour); times are
relative to the request's start."""


def plot_timeline(frame: pd.DataFrame, levels: Sequence[str], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8.0, 0.6 * len(levels) + 1.5))
    labelled: set[str] = set()
    for i, lv in enumerate(levels):
        run = analysis.median_run(frame, lv)
        if run is None:
            ax.text(0, i, " no valid run", va="center", color="grey")
            continue
        for label, start, end, colour in TIMELINE_PHASES:
            t0 = pd.to_numeric(pd.Series([run.get(start)]), errors="coerce").iloc[0]
            t1 = pd.to_numeric(pd.Series([run.get(end)]), errors="coerce").iloc[0]
            if pd.isna(t0) or pd.isna(t1) or t1 < t0:
                continue
            ax.barh(
                i,
                (t1 - t0) * 1e3,
                left=t0 * 1e3,
                height=0.5,
                color=colour,
                label=None if label in labelled else label,
            )
            labelled.add(label)
        bound = pd.to_numeric(pd.Series([run.get("bound_s")]), errors="coerce").iloc[0]
        if not pd.isna(bound):
            ax.vlines(bound * 1e3, i - 0.35, i + 0.35, colors="red", linewidth=2)
    ax.set_yticks(range(len(levels)), levels)
    ax.invert_yaxis()
    ax.set_xlabel("time since the request started (ms); red: bound")
    ax.set_title("Median run per level")
    if labelled:
        ax.legend(loc="lower right", fontsize="small")
    ax.grid(axis="x", alpha=0.3)
    _save(fig, path)


PLOT_MARGIN_S = 0.05
"""Series plots show the measured request only: from its start to this long after its end
(warm-up requests and other connections fall outside)."""
SERIES_TIME_COLUMN = "t_s"
"""Every series CSV's time: seconds since the measured request started."""


@dataclass(frozen=True)
class SeriesPlot:
    """A per-run CSV's ``y`` against time (:data:`SERIES_TIME_COLUMN`), one line per level
    (its median run); drawn as ``plots/<filename stem>.png``."""

    filename: str
    y: str
    title: str
    panels: Mapping[str | None, str]
    """One panel per value of the file's ``kind`` column (None: every row) with its y label:
    TCP bytes and QUIC packet numbers do not share an axis."""
    step: bool = False
    """Steps (a value that holds until the next sample) rather than points."""
    relative: bool = False
    """Shift each line so that it starts at 0 at the request's start."""

    @property
    def png_name(self) -> str:
        return Path(self.filename).with_suffix(".png").name


SERIES_PLOTS = (
    SeriesPlot(
        filename="inflight.csv",
        y="inflight_bytes",
        title="Bytes in flight, median run per level",
        panels={None: "bytes in flight (sender)"},
        step=True,
    ),
    SeriesPlot(
        filename="acks.csv",
        y="acked",
        title="ACK arrivals at the sender, median run per level",
        panels={
            "tcp": "TCP: bytes acknowledged since the request start",
            "quic": "QUIC: largest acked packet (since start)",
        },
        relative=True,
    ),
)


def _series_plot(
    result: ResultDir, frame: pd.DataFrame, levels: Sequence[str], plot: SeriesPlot
) -> bool:
    """Draw ``plot`` into ``plots/``; False: no level had a sample."""
    x, y = SERIES_TIME_COLUMN, plot.y
    kinds = list(plot.panels)
    fig, axes = plt.subplots(len(kinds), 1, figsize=(8.0, 3.2 * len(kinds) + 0.8), squeeze=False)
    drawn_kinds: set[str | None] = set()
    for lv in levels:
        run = analysis.median_run(frame, lv)
        if run is None:
            continue
        csv = result.run_dir(str(run["run_id"])) / plot.filename
        if not csv.is_file():
            continue
        try:
            data = pd.read_csv(csv)
        except (pd.errors.EmptyDataError, pd.errors.ParserError):
            continue
        if data.empty or x not in data.columns or y not in data.columns:
            continue
        total = pd.to_numeric(pd.Series([run.get("total_s")]), errors="coerce").iloc[0]
        xs_all = pd.to_numeric(data[x], errors="coerce")
        keep = xs_all >= 0.0
        if not pd.isna(total):
            keep &= xs_all <= total + PLOT_MARGIN_S
        data = data[keep]
        for ax, kind in zip(axes[:, 0], kinds, strict=True):
            part = (
                data if kind is None or "kind" not in data.columns else data[data["kind"] == kind]
            )
            if part.empty:
                continue
            xs = pd.to_numeric(part[x], errors="coerce") * 1e3
            ys = pd.to_numeric(part[y], errors="coerce")
            if plot.relative:
                ys = ys - ys.iloc[0]
            if plot.step:
                ax.step(xs, ys, where="post", label=lv)
            else:
                ax.plot(xs, ys, ".", markersize=3, label=lv)
            drawn_kinds.add(kind)
    for ax, kind in zip(axes[:, 0], kinds, strict=True):
        ax.set_xlabel("time since the request started (ms)")
        ax.set_ylabel(plot.panels[kind])
        ax.grid(alpha=0.3)
        if kind in drawn_kinds:
            ax.legend(fontsize="small")
        else:
            ax.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax.transAxes)
    axes[0, 0].set_title(plot.title)
    _save(fig, result.plots_dir / plot.png_name)
    return bool(drawn_kinds)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


BOUND_PARTS = (
    ("set-up", "bound_setup_s"),
    ("feedback (slow start)", "bound_feedback_s"),
    ("window cap", "bound_window_s"),
    ("serialisation", "bound_serialisation_s"),
    ("propagation", "bound_propagation_s"),
    ("processing", "bound_processing_s"),
)
"""The parts of harness.bounds.request_time, in the order of a request."""


def _bound_parts(frame: pd.DataFrame, levels: Sequence[str]) -> list[str]:
    good = analysis.analysable(frame)
    if good.empty:
        return []
    rows = []
    for lv in levels:
        runs = good[good["level"] == lv]
        if runs.empty:
            continue
        cells = [lv]
        for _, column in (*BOUND_PARTS, ("bound", "bound_s"), ("measured", "total_s")):
            values = pd.to_numeric(runs.get(column, pd.Series(dtype=float)), errors="coerce")
            cells.append(_ms(float(values.median())) if values.notna().any() else "–")
        rows.append(cells)
    return [
        "The bound's parts (ms; harness.bounds.request_time for the level's parameters), "
        "next to the measured median:",
        "",
        _table(["level", *(name for name, _ in BOUND_PARTS), "bound", "measured"], rows),
        "",
    ]


def _medians_table(
    frame: pd.DataFrame,
    levels: Sequence[str],
    columns: Sequence[tuple[str, str, float, str]],
    caption: str,
) -> list[str]:
    """Per level medians of the columns present: (label, column, scale, unit)."""
    measured = frame[~frame["warmup"].fillna(False).astype(bool)] if not frame.empty else frame
    present = [c for c in columns if c[1] in measured.columns]
    if measured.empty or not present:
        return []
    rows = []
    for lv in levels:
        runs = measured[measured["level"] == lv]
        cells = [lv]
        for _, column, scale, _unit in present:
            values = pd.to_numeric(runs[column], errors="coerce").dropna()
            cells.append(f"{values.median() * scale:.1f}" if len(values) else "–")
        rows.append(cells)
    return [
        caption,
        "",
        _table(["level", *(f"{name} ({unit})" for name, _, _, unit in present)], rows),
        "",
    ]


RUN_DETAIL_COLUMNS = (
    ("rounds", "agent_rounds_done", "{:.0f}"),
    ("redone", "agent_redone", "{:.0f}"),
    ("conns", "agent_connections", "{:.0f}"),
    ("round (s)", "agent_round_s", "{:.3f}"),
    ("encode (s)", "agent_encode_s", "{:.4f}"),
    ("up bytes", "up_bytes", "{:.0f}"),
    ("outage from-to (s)", "outage_start_s", None),
    ("detected (s)", "outage_detected_s", "{:.2f}"),
    ("back (s)", "outage_back_s", "{:.2f}"),
    ("deadline met", "deadline_met", None),
    ("site busy (s)", "site_busy_s", "{:.2f}"),
    ("energy (J)", "site_energy_j", "{:.0f}"),
)
"""Columns a workload fills beyond the request's (the agent's rounds, issue 13): shown in
the per-run table when some run has them."""


def _cell(row: Any, column: str, fmt: str | None) -> str:
    value = row.get(column)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if column == "outage_start_s":
        end = row.get("outage_end_s")
        return f"{value:.2f}-{end:.2f}"
    return fmt.format(value) if fmt else str(value)


def _is_true(value: Any) -> bool:
    return (
        value is not None and not (isinstance(value, float) and math.isnan(value)) and bool(value)
    )


def _runs_beside_bounds(frame: pd.DataFrame) -> list[str]:
    """Every measured run, valid or not, with its total, its bound and their ratio."""
    if frame.empty or "total_s" not in frame.columns:
        return []
    measured = frame[~frame["warmup"].astype(bool)] if "warmup" in frame.columns else frame
    extra = [
        (h, c, f)
        for h, c, f in RUN_DETAIL_COLUMNS
        if c in measured.columns and measured[c].notna().any()
    ]
    headers = ["run", "level", "total (s)", "bound (s)", "ratio", "valid"] + [
        h for h, _, _ in extra
    ]
    rows = []
    for _, row in measured.iterrows():
        rows.append(
            [
                str(row["run_id"]),
                str(row["level"]),
                _cell(row, "total_s", "{:.3f}"),
                _cell(row, "bound_s", "{:.3f}"),
                _cell(row, "ratio", "{:.3f}"),
                "yes" if _is_true(row.get("valid")) else f"no ({row.get('invalid_reason')})",
            ]
            + [_cell(row, c, f) for _, c, f in extra]
        )
    return [
        "## Every run beside its bound",
        "",
        "Each measured run, valid or not (times from the start of the run's work).",
        "",
        _table(headers, rows),
        "",
    ]


def _below_bound_lines(frame: pd.DataFrame) -> list[str]:
    """Runs below their lower bound (a finding: a premise of the bound did not hold) and runs
    whose bound took what their own records showed instead of the plan."""
    if frame.empty or "total_s" not in frame.columns:
        return []
    measured = frame[~frame["warmup"].fillna(False).astype(bool)]
    below = measured[measured["below_bound"].notna()] if "below_bound" in measured else []
    rebased = measured[measured["bound_basis"].notna()] if "bound_basis" in measured else []
    if not len(below) and not len(rebased):
        return []
    lines = [
        "## Below the bound",
        "",
        f"{len(below)} of {len(measured)} measured runs were below their lower bound by more "
        "than the clock's and the emulator's stated error (harness.validity.below_bound): a "
        "premise of the bound did not hold, and each row names it.",
        "",
    ]
    if len(below):
        rows = [
            [str(r["run_id"]), str(r["level"]), _cell(r, "total_s", "{:.3f}"),
             _cell(r, "bound_s", "{:.3f}"), str(r["below_bound"])]
            for _, r in below.iterrows()
        ]  # fmt: skip
        lines += [_table(["run", "level", "total (s)", "bound (s)", "below"], rows), ""]
    if len(rebased):
        basis = [
            [str(r["run_id"]), str(r["level"]), _cell(r, "bound_s", "{:.3f}"),
             str(r["bound_basis"])]
            for _, r in rebased.iterrows()
        ]  # fmt: skip
        lines += [
            f"{len(rebased)} runs have their bound from what their records show happened, not "
            "from the plan:",
            "",
            _table(["run", "level", "bound (s)", "basis"], basis),
            "",
        ]
    return lines


def _stack_phases(frame: pd.DataFrame, levels: Sequence[str]) -> list[str]:
    """Where the stacks spend time the bound does not count (server events)."""
    if frame.empty or "server_receive_s" not in frame.columns:
        return []
    frame = frame.copy()
    if "t_response_last_s" in frame.columns and "t_response_first_s" in frame.columns:
        frame["client_response_s"] = pd.to_numeric(
            frame["t_response_last_s"], errors="coerce"
        ) - pd.to_numeric(frame["t_response_first_s"], errors="coerce")
    return _medians_table(
        frame,
        levels,
        [
            ("server reads request", "server_receive_s", 1e3, "ms"),
            ("processing", "processing_s", 1e3, "ms"),
            ("processing end to response", "server_turnaround_s", 1e3, "ms"),
            ("server writes response", "server_send_s", 1e3, "ms"),
            ("client receives response", "client_response_s", 1e3, "ms"),
        ],
        "The stacks' own phases (medians, from the server's events and the client's "
        "record; with the serialisation and processing parts of the bound next to them, a "
        "phase much longer than its part is overhead of the implementation):",
    )


def _contention(frame: pd.DataFrame, levels: Sequence[str]) -> list[str]:
    """How busy the machine was during the requests (recorded, not a validity rule)."""
    columns = [
        ("client CPU", "cpu_client", 100.0, "%"),
        ("server CPU", "cpu_server", 100.0, "%"),
        ("emulator CPU", "cpu_emulator", 100.0, "%"),
        ("client wait", "runqueue_wait_client_s", 1e3, "ms"),
        ("server wait", "runqueue_wait_server_s", 1e3, "ms"),
        ("emulator wait", "runqueue_wait_emulator_s", 1e3, "ms"),
        ("host CPU pressure", "cpu_pressure", 100.0, "%"),
        ("steal", "steal", 100.0, "%"),
        ("lateness p99", "lateness_p99_s", 1e3, "ms"),
    ]
    return _medians_table(
        frame,
        levels,
        columns,
        "Machine load during the requests (medians per level; CPU in % of one core, waits "
        "on a run queue and emulator lateness in ms, host CPU pressure (PSI) and steal in % "
        "of the time; recorded, judged by their impact below):",
    )


def _attempts(frame: pd.DataFrame, levels: Sequence[str]) -> list[str]:
    """Attempts per level and the disturbance estimate its runs carried."""
    rows = analysis.level_attempts(frame, levels)
    if not rows:
        return []
    return [
        "Attempts and disturbance per level. An invalid measured run is made again (same "
        "settings and seed, after the other runs and a spell of steal) up to the attempt "
        "limit; every attempt is in runs.csv. The disturbance is what the machine could have "
        "added to a run's measured time: emulator lateness on the request's critical path, "
        "plus the "
        "endpoints' run-queue wait while they sent or received the request's flights (times "
        "the share of the host's CPU other processes used) and the CPU steal took from them "
        "(ms, an upper estimate); a run is valid while it stays under its limit (1 % of its "
        "time, a tenth of the arm effect (predicted by the bounds, or as measured when "
        "larger), at least 1 ms; harness.validity.rules).",
        "",
        _table(
            [
                "level",
                "planned",
                "attempts",
                "valid",
                "invalid",
                "most attempts",
                "disturbance median",
                "max",
                "max kept",
                "median % of time",
                "limit",
            ],
            [
                [
                    a.level,
                    str(a.planned),
                    str(a.attempts),
                    str(a.valid),
                    "–"
                    if not math.isfinite(a.invalid_fraction)
                    else f"{a.invalid_fraction * 100:.0f} %",
                    str(a.most_attempts),
                    _ms2(a.disturbance_median_s),
                    _ms2(a.disturbance_max_s),
                    _ms2(a.disturbance_valid_max_s),
                    _pct2(a.fraction_median),
                    _ms2(a.limit_median_s),
                ]
                for a in rows
            ],
        ),
        "",
    ]


def _pct2(fraction: float) -> str:
    return "–" if not math.isfinite(fraction) else f"{fraction * 100:.2f}"


def _ms2(seconds: float) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "–"
    return f"{seconds * 1e3:.2f}"


def _loss_bounds(summaries: Sequence[analysis.LevelSummary]) -> list[str]:
    """The loss bounds next to the measurement, when some level has loss."""
    lossy = [s for s in summaries if math.isfinite(s.mathis_s)]
    if not lossy:
        return []
    return [
        "With loss: the loss-free bound, the bound plus the expected rounds of ideal "
        "selective retransmission (docs/models.md section 9), and the time at the Mathis rate "
        "(section 8, C = 1), in ms.",
        "",
        _table(
            ["level", "median", "loss-free bound", "with retransmission rounds", "Mathis"],
            [
                [s.level, _ms(s.median_s), _ms(s.bound_s), _ms(s.expected_s), _ms(s.mathis_s)]
                for s in summaries
            ],
        ),
        "",
    ]


def answer_text(
    summaries: Sequence[analysis.LevelSummary], effects: Sequence[analysis.Effect]
) -> str:
    """A plain-language answer from the numbers (what a reader wants first)."""
    rows = [s for s in summaries if math.isfinite(s.median_s)]
    if not rows:
        return "No valid measured run: no answer (see the validity section)."
    fastest = min(rows, key=lambda s: s.median_s)
    slowest = max(rows, key=lambda s: s.median_s)
    parts = [
        f"One level ran: **{fastest.level}**, median {_ms(fastest.median_s)} ms "
        f"({_ratio(fastest.median_ratio)} x its bound of {_ms(fastest.bound_s)} ms)."
        if len(rows) == 1
        else f"Fastest level: **{fastest.level}**, median {_ms(fastest.median_s)} ms "
        f"({_ratio(fastest.median_ratio)} x its bound of {_ms(fastest.bound_s)} ms). "
        f"Slowest: **{slowest.level}**, median {_ms(slowest.median_s)} ms "
        f"({_ratio(slowest.median_ratio)} x its bound of {_ms(slowest.bound_s)} ms)."
    ]
    for s in rows:
        if s.gap_part != "none":
            parts.append(f"{s.level}: {_ms(s.gap_s)} ms above its bound, mostly in {s.gap_part}.")
    for e in effects:
        if not math.isfinite(e.arm_s):
            continue
        sign = "slower" if e.arm_s > 0 else "faster"
        text = f"{e.level} vs {e.baseline}: {_ms(abs(e.arm_s))} ms {sign} "
        if math.isfinite(e.arm_ci_low_s):
            text += f"(95 % CI {_ms(e.arm_ci_low_s)} to {_ms(e.arm_ci_high_s)} ms)"
        else:
            text += "(fewer than two pairs: no interval; run more repetitions)"
        if math.isfinite(e.order_s):
            text += f"; order effect (second minus first) {_ms(e.order_s)} ms"
        parts.append(text + ".")
    return "\n".join(f"- {p}" for p in parts)


def _plot_all(result: ResultDir, frame: pd.DataFrame, levels: Sequence[str], guard: Guard) -> None:
    """Draw the report's plots into ``plots/`` (one that fails is noted)."""
    plots = result.plots_dir
    guard.attempt("plot levels.png", plot_levels, frame, levels, plots / "levels.png", default=None)
    guard.attempt(
        "plot timeline.png", plot_timeline, frame, levels, plots / "timeline.png", default=None
    )
    for plot in SERIES_PLOTS:
        guard.attempt(
            f"plot {plot.png_name}", _series_plot, result, frame, levels, plot, default=False
        )
        plt.close("all")  # a plot that failed half-drawn leaves no figure behind
    guard.attempt(
        "plot cctrace.png", cctrace.plot_cc_trace, result, frame, levels,
        plots / "cctrace.png", default=False,
    )  # fmt: skip
    plt.close("all")


def _head_lines(
    resolved: dict[str, Any],
    name: str,
    summaries: Sequence[analysis.LevelSummary],
    effects: Sequence[analysis.Effect],
) -> list[str]:
    """Title, question and answer."""
    return [
        f"# Experiment `{resolved.get('name', name)}`",
        "",
        f"**Question.** {resolved.get('question', '')}",
        "",
        "## Answer",
        "",
        answer_text(summaries, effects),
        "",
    ]


def _unfinished_lines(manifest: dict[str, Any], frame: pd.DataFrame) -> list[str]:
    """A line at the top when the experiment stopped before its plan's end (interrupted,
    killed, its host lost): how many planned runs were made, and how to go on."""
    if manifest.get("finished") is True:
        return []
    planned = [str(r.get("run_id")) for r in manifest.get("plan", []) if isinstance(r, dict)]
    if not planned:
        return []  # no plan recorded: nothing to count against
    attempted = {str(i) for i in frame["run_id"]} if "run_id" in frame else set()
    made = sum(1 for i in planned if i in attempted)
    return [
        f"**Unfinished.** {made} of {len(planned)} planned runs were made: the experiment "
        "stopped before its plan's end, so its levels may have fewer runs than planned "
        "(`testbed run FILE --resume DIR` makes the rest).",
        "",
    ]


def _per_level_lines(summaries: Sequence[analysis.LevelSummary]) -> list[str]:
    """The per-level table: medians, intervals, bounds and the gap."""
    return [
        "## Per level",
        "",
        "Times in ms: median of the valid measured runs with its bootstrap 95 % interval, "
        "p95, the analytic bound for the same parameters (harness.bounds.request_time), the "
        "median ratio measured/bound, and where the gap falls.",
        "",
        _table(
            [
                "level",
                "runs",
                "valid",
                "median",
                "95 % CI",
                "p95",
                "bound",
                "ratio",
                "handshake",
                "TTFB",
                "gap",
                "gap in",
                "retx",
            ],
            [
                [
                    s.level,
                    str(s.runs),
                    str(s.valid),
                    _ms(s.median_s),
                    f"{_ms(s.ci_low_s)} to {_ms(s.ci_high_s)}",
                    _ms(s.p95_s),
                    _ms(s.bound_s),
                    _ratio(s.median_ratio),
                    _ms(s.handshake_s),
                    _ms(s.ttfb_s),
                    _ms(s.gap_s),
                    s.gap_part,
                    "–" if not math.isfinite(s.retransmits) else f"{s.retransmits:g}",
                ]
                for s in summaries
            ],
        ),
        "",
    ]


def _gap_split_lines(summaries: Sequence[analysis.LevelSummary]) -> list[str]:
    """The gap split by phase and the smallest advertised receive window."""
    return [
        "Gap split (ms, measured minus bound part): set-up / processing / transfer; the "
        "smallest receive window the receiver advertised during the request (TCP, median "
        "over runs, KB): a window below what a round of slow start sends means the "
        "receiver, not the sender, held the transfer back; and CPU: the endpoints (medians, "
        "ms): how long their main threads waited on the request's critical path for the "
        "run's own processes (the emulator and the peer stack share the cores: part of "
        "what the run measures, not a disturbance), and the CPU time client and server "
        "computed during the request.",
        "",
        _table(
            [
                "level",
                "set-up",
                "processing",
                "transfer",
                "min rwnd (KB)",
                "CPU: own waits",
                "CPU: endpoints computing",
            ],
            [
                [
                    s.level,
                    _ms(s.gap_setup_s),
                    _ms(s.gap_processing_s),
                    _ms(s.gap_transfer_s),
                    "–" if not math.isfinite(s.min_rwnd_bytes) else f"{s.min_rwnd_bytes / 1e3:.0f}",
                    _ms(s.own_wait_s),
                    _ms(s.endpoint_cpu_s),
                ]
                for s in summaries
            ],
        ),
        "",
    ]


def _effect_lines(effects: Sequence[analysis.Effect], position: pd.DataFrame) -> list[str]:
    """Arm effect against its baseline, the order effect and deviation by position."""
    return [
        "## Arm effect next to the order effect",
        "",
        "Arm: the level minus its baseline in the blocks where both have a valid run "
        "(positive: the level is slower), balanced over both orders, with a paired bootstrap "
        "95 % interval (whole pairs resampled). Order: the second-position minus "
        "first-position effect estimated from the counterbalanced blocks (– when every "
        "block had the same order).",
        "",
        _table(
            ["level", "baseline", "pairs", "arm", "95 % CI", "order"],
            [
                [
                    e.level,
                    e.baseline,
                    str(e.pairs),
                    _ms(e.arm_s),
                    f"{_ms(e.arm_ci_low_s)} to {_ms(e.arm_ci_high_s)}",
                    _ms(e.order_s),
                ]
                for e in effects
            ],
        ),
        "",
        "Median deviation from the level's median by position in the block (all levels):",
        "",
        _table(
            ["position", "runs", "deviation"],
            [
                [str(int(r.position)), str(int(r.runs)), _ms(r.median_deviation_s)]
                for r in position.itertuples()
            ],
        ),
        "",
    ]


def _validity_lines(
    frame: pd.DataFrame, levels: Sequence[str], summaries: Sequence[analysis.LevelSummary]
) -> list[str]:
    """Contention, attempts and the invalid runs of each level."""
    lines = ["## Validity", ""]
    lines += _contention(frame, levels)
    lines += _attempts(frame, levels)
    invalid = [s for s in summaries if s.invalid_reasons]
    if invalid:
        lines += [f"- {s.level}: {s.invalid_reasons}" for s in invalid]
    else:
        lines.append("- Every measured run is valid.")
    lines += [
        "",
        "Invalid runs (and attempts) are kept in runs.csv with their reason and left out of "
        "the statistics.",
        "",
    ]
    return lines


PLOTS = (
    ("request time per level", "levels.png"),
    ("timeline of the median run per level", "timeline.png"),
    ("bytes in flight", "inflight.png"),
    ("ACK arrivals", "acks.png"),
    ("the data sender's pacing rate, window and BBR gain", "cctrace.png"),
)
"""The report's plots: (alt text, file in plots/)."""


def _plots_lines(plots_dir: Path) -> list[str]:
    """Links to the plots that were drawn (one that could not be is named above)."""
    lines = ["## Plots", ""]
    for alt, name in PLOTS:
        if (plots_dir / name).is_file():
            lines += [f"![{alt}](plots/{name})", ""]
    return lines


def _empty_column_lines(path: Path) -> list[str]:
    """The runs.csv columns no run filled, each with why (empty_columns.csv, written with
    runs.csv by harness.store): an empty cell cannot say it."""
    where = path / EMPTY_COLUMNS_FILE
    if not where.is_file():
        return []
    empty = pd.read_csv(where)
    if empty.empty:
        return []
    rows = [[f"`{r.column}`", str(r.reason)] for r in empty.itertuples()]
    return ["## Empty columns", "", _table(["runs.csv column", "why no run filled it"], rows), ""]


def _how_run_lines(manifest: dict[str, Any]) -> list[str]:
    """The plan, environment, fixed link and levels the experiment ran with."""
    resolved = manifest.get("resolved", {})
    env = manifest.get("environment", {})
    lines = [
        "## How it was run",
        "",
        f"- Plan: {resolved.get('order', '?')} order, counterbalance "
        f"{resolved.get('counterbalance', '?')}, seed {resolved.get('seed', '?')}, "
        f"{resolved.get('repetitions', '?')} repetitions, "
        f"{resolved.get('warmup_runs', 0)} warm-up blocks.",
        f"- Backend: {env.get('backend', '?')}; kernel {env.get('kernel', '?')}; "
        f"testbed {manifest.get('versions', {}).get('testbed', '?')}.",
        f"- Fixed link: `{resolved.get('fixed', {}).get('link', '?')}`.",
    ]
    for lv in resolved.get("levels", []):
        lines.append(
            f"- Level `{lv['name']}`: {lv.get('overrides', {})}; "
            f"link `{lv.get('link_resolved', '')}`."
        )
    lines += ["", "Full details: manifest.json; every run: runs.csv, runs/<run_id>/.", ""]
    return lines


def build_report(path: Path) -> Path:
    """Write ``report.md`` and ``plots/*.png`` for the result directory at ``path``. A
    section (or plot) that cannot be computed for these runs says so in one line and the
    rest is written (harness.report.guard); its traceback goes to ``report_errors.txt``."""
    result = ResultDir.open(path)
    manifest = result.read_manifest()
    frame = result.frame()
    resolved = manifest.get("resolved", {})
    guard = Guard()
    baselines = guard.attempt(
        "levels", _levels_and_baselines, manifest, frame, default=_plain_levels(frame)
    )
    levels = list(baselines)
    seed = int(resolved.get("seed", 0) or 0)
    summaries = guard.attempt(
        "per-level statistics", analysis.level_summary, frame, levels, default=[], seed=seed
    )
    effects = guard.attempt(
        "arm effects", analysis.effects, frame, baselines, default=[], seed=seed
    )
    position = guard.attempt(
        "order effect", analysis.position_effect, frame, default=_EMPTY_POSITION
    )
    _plot_all(result, frame, levels, guard)
    links = guard.attempt(
        "links", lambda: {n: p.link_spec for n, p in result.level_paths().items()}, default={}
    )
    sections = [
        ("answer", _head_lines, resolved, path.name, summaries, effects),
        ("state", _unfinished_lines, manifest, frame),
        ("per level", _per_level_lines, summaries),
        ("the path's shape", paths_section, frame, levels, resolved.get("reference_ms", {})),
        ("the real path", remote_report.path_section, result.path, frame),
        ("gap split", _gap_split_lines, summaries),
        ("HTTP/2 against HTTP/3", protocols_section, result.path, frame),
        ("streams, chunks, playback, cancel, overhead", stream_tables.report_sections,
         result.path, frame),
        ("varying links", varying_sections, result.path, frame, levels),
        ("the bound's parts", _bound_parts, frame, levels),
        ("the stacks' phases", _stack_phases, frame, levels),
        ("the sender's congestion control", cctrace.cc_trace_section, result.path, frame, levels),
        ("loss bounds", _loss_bounds, summaries),
        ("arm and order effects", _effect_lines, effects, position),
        ("host effect", host_report.host_section, manifest, frame, baselines, effects),
        ("every run beside its bound", _runs_beside_bounds, frame),
        ("below the bound", _below_bound_lines, frame),
        ("shared airtime", air_report_lines, frame, levels),
        ("validity", _validity_lines, frame, levels, summaries),
        ("FEC", fecreport.fec_section, frame, levels, result.plots_dir, links),
        ("plots", _plots_lines, result.plots_dir),
        ("empty columns", _empty_column_lines, result.path),
        ("how it was run", _how_run_lines, manifest),
    ]  # fmt: skip
    lines = [line for title, make, *args in sections for line in guard.section(title, make, *args)]
    lines += guard.lines()
    report = result.path / "report.md"
    errors = result.path / "report_errors.txt"
    if guard.failures:
        atomic_write_text(errors, guard.tracebacks())
    elif errors.exists():
        errors.unlink()
    atomic_write_text(report, "\n".join(lines))
    return report


_EMPTY_POSITION = pd.DataFrame(columns=["position", "runs", "median_deviation_s"])


def _plain_levels(frame: pd.DataFrame) -> dict[str, str]:
    """Every level of the runs, each its own baseline (when the manifest cannot say)."""
    names = list(dict.fromkeys(frame["level"])) if "level" in frame.columns else []
    return {name: name for name in names}
