"""The data sender's congestion control over time (issue 25): pacing rate, congestion window
and pacing gain of the median run of each level, from the server's sender samples
(``server-samples.csv``, tbcore.records.ServerSample: TCP_INFO and the kernel BBR's
tcp_bbr_info for HTTP/2, aioquic's recovery and proto.quic.bbr's state for HTTP/3), so that
the kernel's BBR and aioquic's can be read side by side on one time axis; and a table of
what the trace says (when Startup ended, the peaks, the gains ProbeBW cycled through).

ngtcp2's example server is not the testbed's and writes no sender samples: its levels are
named as having none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from harness.analysis import levels as analysis
from harness.store.files import SERVER_SAMPLES
from harness.store.resultdir import ResultDir

BBR_UNIT = 256
"""Gains in tcp_bbr_info and in the QUIC sample are x 256 (tcp_bbr.c BBR_UNIT)."""
STARTUP_GAIN = 739
"""bbr_high_gain: 2/ln 2 x 256 rounded up (tcp_bbr.c); Startup's pacing gain."""
BITS_PER_BYTE = 8


def sender_trace(path: Path) -> pd.DataFrame:
    """The last response's sender samples of one run (the measured request is the last the
    server answered): ``t_s`` from its first sample, ``pacing_bps``, ``cwnd_bytes`` (TCP's
    segments times its MSS), ``pacing_gain`` (x 256; NaN without BBR). Empty when the run has
    no samples."""
    columns = ["t_s", "pacing_bps", "cwnd_bytes", "pacing_gain"]
    if not path.is_file():
        return pd.DataFrame(columns=columns)
    try:
        data = pd.read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError):
        return pd.DataFrame(columns=columns)
    if data.empty or "request_id" not in data.columns:
        return pd.DataFrame(columns=columns)
    data = data[data["request_id"] == data["request_id"].iloc[-1]]
    t = pd.to_numeric(data["t"], errors="coerce")
    tcp_cwnd = _num(data, "snd_cwnd") * _num(data, "snd_mss")
    cwnd = _num(data, "cwnd").fillna(tcp_cwnd)
    return pd.DataFrame(
        {
            "t_s": t - t.iloc[0],
            "pacing_bps": _num(data, "pacing_rate") * BITS_PER_BYTE,
            "cwnd_bytes": cwnd,
            "pacing_gain": _num(data, "bbr_pacing_gain"),
        }
    ).reset_index(drop=True)


def _num(data: pd.DataFrame, column: str) -> pd.Series:
    if column not in data.columns:
        return pd.Series(math.nan, index=data.index)
    return pd.to_numeric(data[column], errors="coerce")


def startup_end_s(trace: pd.DataFrame) -> float:
    """When the pacing gain first left Startup's, after having had it; NaN without BBR or
    when the response ended in Startup."""
    gains = trace["pacing_gain"]
    started = gains == STARTUP_GAIN
    if not started.any():
        return math.nan
    after = trace[(gains != STARTUP_GAIN) & gains.notna() & (started.cumsum() > 0)]
    return float(after["t_s"].iloc[0]) if len(after) else math.nan


def cycle_gains(trace: pd.DataFrame) -> list[float]:
    """The distinct pacing gains (as factors) after Startup and Drain, in the order first
    seen: ProbeBW's 1.25, 0.75, 1 when the response lasted into it."""
    end = startup_end_s(trace)
    if math.isnan(end):
        return []
    drain_gain = round(BBR_UNIT * BBR_UNIT / STARTUP_GAIN)  # bbr_drain_gain, 1/high_gain
    later = trace[(trace["t_s"] >= end) & trace["pacing_gain"].notna()]["pacing_gain"]
    seen = [g for g in dict.fromkeys(later.astype(int)) if abs(g - drain_gain) > 1]
    return [g / BBR_UNIT for g in seen]


def _traces(
    result: ResultDir, frame: pd.DataFrame, levels: Sequence[str]
) -> dict[str, tuple[pd.Series, pd.DataFrame]]:
    """Level -> (its median run's row, its sender trace), for the levels that have one."""
    traces = {}
    for level in levels:
        run = analysis.median_run(frame, level)
        if run is None:
            continue
        trace = sender_trace(result.run_dir(str(run["run_id"])) / SERVER_SAMPLES)
        if not trace.empty:
            traces[level] = (run, trace)
    return traces


def plot_cc_trace(
    result: ResultDir, frame: pd.DataFrame, levels: Sequence[str], path: Path
) -> bool:
    """Pacing rate, congestion window and pacing gain over the response, the median run of
    each level in ``plots/cctrace.png``; False (nothing drawn) when no level has samples."""
    traces = _traces(result, frame, levels)
    if not traces:
        return False
    fig, axes = plt.subplots(3, 1, figsize=(8.0, 9.0), sharex=True)
    for level, (run, trace) in traces.items():
        label = f"{level} ({run.get('protocol')}, {run.get('cc')})"
        ms = trace["t_s"] * 1e3
        axes[0].step(ms, trace["pacing_bps"] / 1e6, where="post", label=label)
        axes[1].step(ms, trace["cwnd_bytes"] / 1e3, where="post", label=label)
        if trace["pacing_gain"].notna().any():
            axes[2].step(ms, trace["pacing_gain"] / BBR_UNIT, where="post", label=label)
    axes[0].set_ylabel("pacing rate (Mbit/s)")
    axes[0].set_yscale("log")
    axes[1].set_ylabel("congestion window (kB)")
    axes[2].set_ylabel("BBR pacing gain")
    axes[2].set_xlabel("time since the response's first byte was written (ms)")
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # no BBR level: the gain panel stays empty
            ax.legend(fontsize="small")
    axes[0].set_title("The data sender's congestion control, median run per level")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110, bbox_inches="tight")
    plt.close(fig)
    tmp.replace(path)
    return True


def _ms(seconds: float) -> str:
    return "–" if not math.isfinite(seconds) else f"{seconds * 1e3:.0f}"


def cc_trace_section(result_dir: Path, frame: pd.DataFrame, levels: Sequence[str]) -> list[str]:
    """The table beside plots/cctrace.png; empty when no level has sender samples."""
    result = ResultDir.open(result_dir)
    traces = _traces(result, frame, levels)
    if not traces:
        return []
    lines = [
        "## The sender's congestion control (plots/cctrace.png)",
        "",
        "The median run of each level, from the server's sender samples every 10 ms "
        f"({SERVER_SAMPLES}: TCP_INFO and tcp_bbr_info for HTTP/2, aioquic's recovery and "
        "BBR state for HTTP/3); times from the response's first byte written.",
        "",
        "| level | protocol | cc | samples | Startup ended (ms) | peak pacing (Mbit/s) "
        "| peak cwnd (kB) | gains after Drain |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for level, (run, trace) in traces.items():
        gains = ", ".join(f"{g:g}" for g in cycle_gains(trace)) or "–"
        lines.append(
            f"| {level} | {run.get('protocol')} | {run.get('cc')} | {len(trace)} "
            f"| {_ms(startup_end_s(trace))} | {trace['pacing_bps'].max() / 1e6:.1f} "
            f"| {trace['cwnd_bytes'].max() / 1e3:.1f} | {gains} |"
        )
    missing = [lv for lv in levels if lv not in traces]
    if missing:
        lines += ["", f"No sender samples: {', '.join(missing)} (ngtcp2's server, or older runs)."]
    return [*lines, ""]
