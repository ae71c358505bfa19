"""``testbed trace make`` and ``testbed trace show``: traces made by a model, and what a trace
offers over time.

::

    testbed trace make markov OUT [--states 24mbit:2s,8mbit:1.5s,2mbit:1s,0.5mbit:0.3s]
                                  [--duration 30s] [--seed 1] [--start-state 0] [--force]
    testbed trace make constant OUT --rate 12mbit [--duration 1s] [--force]
    testbed trace make leo OUT [--duration 60s] [--interval 10ms] [--handover 15s]
                               [--min 20ms] [--max 40ms] [--drift-ms-per-s 0.2] [--seed 1]
    testbed trace show PATH [PATH ...] [--window 100ms] [--below 6mbit]
                            [--interp step|linear] [--plot FILE.png | --no-plot] [--json]

``show`` tells a capacity trace (one column) from a delay trace (two) by its first line,
prints the mean, p5, p50 and p95 of the rate over windows (and the share of time below
``--below``) or of the delay, and plots each trace over one period into one PNG (default
``<first trace's name>.png`` in the working directory). A bare name that is no file here is
a shipped trace (:data:`netem.trace.SHIPPED_DIR`), as in a link string. The models:
:mod:`netem.tracegen`.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from netem import trace, tracegen, tracestats
from tbcore.errors import SpecError
from tbcore.units import format_rate, parse_duration_s, parse_rate_bps


def parse_states(text: str) -> tuple[tracegen.RateState, ...]:
    """``24mbit:2s,8mbit:1.5s`` -> the states of a Markov model (rate:mean holding time)."""
    states = []
    for item in text.split(","):
        rate, sep, hold = item.strip().partition(":")
        if not sep:
            raise SpecError("states", f"{item!r} is not RATE:MEAN_HOLD (e.g. 8mbit:1.5s)")
        states.append(
            tracegen.RateState(
                parse_rate_bps("states", rate), parse_duration_s("states", hold.strip())
            )
        )
    return tuple(states)


def _write(path: str, text: str, force: bool) -> Path:
    out = Path(path)
    if out.exists() and not force:
        raise SpecError("out", f"{path} exists (--force replaces it)")
    if out.exists() and not out.is_file():
        raise SpecError("out", f"{path} is not a regular file")
    out.write_text(text)
    return out


def _cmd_make(args: argparse.Namespace) -> int:
    if args.model == "markov":
        model = tracegen.MarkovModel(
            states=parse_states(args.states),
            duration_s=parse_duration_s("duration", args.duration),
            seed=args.seed,
            start_state=args.start_state,
        )
        text, kind = tracegen.markov_trace(model), "capacity"
    elif args.model == "constant":
        rate = parse_rate_bps("rate", args.rate)
        text = tracegen.constant_trace(rate, parse_duration_s("duration", args.duration))
        kind = "capacity"
    else:
        text, kind = tracegen.leo_trace(_leo_model(args)), "delay"
    out = _write(args.out, text, args.force)
    digest, parsed = trace.load(os.path.abspath(out), kind)
    print(f"{out}: {kind} trace, {len(text.splitlines())} lines, {_describe(parsed)}")
    print(f"  sha256 {digest}")
    return 0


def _leo_model(args: argparse.Namespace) -> tracegen.LeoModel:
    return tracegen.LeoModel(
        duration_s=parse_duration_s("duration", args.duration),
        interval_s=parse_duration_s("interval", args.interval),
        handover_s=parse_duration_s("handover", args.handover),
        min_delay_s=parse_duration_s("min", args.min),
        max_delay_s=parse_duration_s("max", args.max),
        drift_s_per_s=args.drift_ms_per_s / 1e3,
        seed=args.seed,
    )


def _describe(parsed: trace.Parsed) -> str:
    if isinstance(parsed, trace.CapacityTrace):
        return f"period {parsed.period_s:g} s, mean {format_rate(parsed.mean_rate_bps)}"
    return f"period {parsed.period_s:g} s, delay {parsed.min_delay_ms:g}-{parsed.max_delay_ms:g} ms"


def summarise(path: str, args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The parsed trace of ``path`` and its summary (a dict, JSON-ready)."""
    try:
        full = trace.resolve_path(path)
        kind = trace.detect_kind(full)
        digest, parsed = trace.load(full, kind)
    except SpecError as err:
        raise SpecError("path", err.reason) from None
    if isinstance(parsed, trace.CapacityTrace):
        below = None if args.below is None else parse_rate_bps("below", args.below)
        summary = tracestats.summarise_capacity(parsed, args.window_s, below).to_dict()
    else:
        summary = tracestats.summarise_delay(parsed, args.interp).to_dict()
    return parsed, {"path": full, "sha256": digest, **summary}


def format_summary(s: dict[str, Any]) -> list[str]:
    if s["kind"] == "capacity":
        mbit = {k: s[k] / 1e6 for k in ("mean_bps", "p5_bps", "p50_bps", "p95_bps")}
        lines = [
            f"{s['path']}: capacity, period {s['period_s']:g} s, {s['opportunities']} "
            f"opportunities, windows of {s['window_s'] * 1e3:g} ms",
            f"  rate mean {mbit['mean_bps']:.3f}  p5 {mbit['p5_bps']:.3f}  "
            f"p50 {mbit['p50_bps']:.3f}  p95 {mbit['p95_bps']:.3f} Mbit/s  "
            f"(windows {s['min_window_bps'] / 1e6:.3f} to {s['max_window_bps'] / 1e6:.3f})",
        ]
        if s["below_bps"] is not None:
            lines.append(
                f"  below {format_rate(s['below_bps'])}: {s['share_below'] * 100:.1f} % of the time"
            )
        return lines
    ms = {k: s[k] * 1e3 for k in ("mean_s", "min_s", "p5_s", "p50_s", "p95_s", "max_s")}
    return [
        f"{s['path']}: delay ({s['interp']}), period {s['period_s']:g} s, {s['points']} points",
        f"  delay mean {ms['mean_s']:.3f}  min {ms['min_s']:.3f}  p5 {ms['p5_s']:.3f}  "
        f"p50 {ms['p50_s']:.3f}  p95 {ms['p95_s']:.3f}  max {ms['max_s']:.3f} ms",
    ]


def plot(traces: list[tuple[Any, dict[str, Any]]], args: argparse.Namespace, out: Path) -> None:
    """Each trace over one period, one panel each, into ``out`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(traces), 1, figsize=(10, 3 * len(traces)), squeeze=False)
    for ax, (parsed, summary) in zip(axes[:, 0], traces, strict=True):
        if isinstance(parsed, trace.CapacityTrace):
            series = tracestats.capacity_series(parsed, args.window_s)
            ax.step(series.times_s, series.values / 1e6, where="post", lw=0.8)
            ax.axhline(summary["mean_bps"] / 1e6, color="k", ls="--", lw=0.8, label="mean")
            if summary["below_bps"] is not None:
                ax.axhline(summary["below_bps"] / 1e6, color="r", ls=":", lw=0.8, label="below")
            ax.set_ylabel(f"Mbit/s per {args.window_s * 1e3:g} ms")
        else:
            series = tracestats.delay_series(parsed, args.interp)
            ax.plot(series.times_s, series.values * 1e3, lw=0.8)
            ax.axhline(summary["mean_s"] * 1e3, color="k", ls="--", lw=0.8, label="mean")
            ax.set_ylabel("one-way delay (ms)")
        ax.set_title(Path(summary["path"]).name, fontsize=9)
        ax.legend(loc="upper right", fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("time into the trace (s)")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def _cmd_show(args: argparse.Namespace) -> int:
    args.window_s = parse_duration_s("window", args.window)
    results = [summarise(path, args) for path in args.paths]
    out = None
    if not args.no_plot:
        out = Path(args.plot or f"{Path(args.paths[0]).name}.png")
        try:
            plot(results, args, out)
        except OSError as err:
            raise SpecError("plot", f"cannot write {out}: {err.strerror}") from None
    if args.json:
        print(json.dumps({"traces": [s for _, s in results], "plot": out and str(out)}, indent=2))
        return 0
    for _, summary in results:
        print("\n".join(format_summary(summary)))
    if out is not None:
        print(f"plot: {out}")
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    """Add ``testbed trace make|show``."""
    top = commands.add_parser("trace", help="link traces: make one from a model, show one")
    sub = top.add_subparsers(dest="trace_command", metavar="ACTION", required=True)
    make = sub.add_parser("make", help="write a trace made by a model (netem/tracegen.py)")
    models = make.add_subparsers(dest="model", metavar="MODEL", required=True)
    markov = models.add_parser("markov", help="Markov-modulated capacity (birth-death)")
    markov.add_argument(
        "--states", default="24mbit:2s,8mbit:1.5s,2mbit:1s,0.5mbit:0.3s", help="RATE:MEAN_HOLD,..."
    )
    markov.add_argument("--duration", default="30s")
    markov.add_argument("--start-state", type=int, default=0, help="index of the first state")
    constant = models.add_parser("constant", help="a constant capacity")
    constant.add_argument("--rate", required=True, help="e.g. 12mbit")
    constant.add_argument("--duration", default="1s")
    leo = models.add_parser("leo", help="LEO-like one-way delay: handovers and drift")
    leo.add_argument("--duration", default="60s")
    leo.add_argument("--interval", default="10ms", help="one point per interval")
    leo.add_argument("--handover", default="15s", help="a new base delay and drift each")
    leo.add_argument("--min", default="20ms")
    leo.add_argument("--max", default="40ms")
    leo.add_argument("--drift-ms-per-s", type=float, default=0.2)
    for parser in (markov, constant, leo):
        parser.add_argument("out", help="the file to write")
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--force", action="store_true", help="replace an existing file")
        parser.set_defaults(handler=_cmd_make)
    show = sub.add_parser("show", help="capacity or delay over time: percentiles and a plot")
    show.add_argument("paths", nargs="+", metavar="PATH", help="capacity or delay trace files")
    show.add_argument("--window", default="100ms", help="the window of the rate")
    show.add_argument("--below", help="report the share of time below this rate (e.g. 6mbit)")
    show.add_argument("--interp", choices=trace.INTERPOLATIONS, default="step")
    show.add_argument("--plot", help="the PNG to write (default: <first trace's name>.png)")
    show.add_argument("--no-plot", action="store_true")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=_cmd_show)
