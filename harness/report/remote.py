"""The report's section for runs whose server was on another host (issue 18): the path as
each probe measured it, its drift between the probes around a block, and the two clocks.

A pure function of the result directory's ``path_probes.json`` and the runs frame; empty
for an experiment on an emulated link.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from harness.store.files import PROBES_FILE


def _ms(value: Any) -> str:
    return "-" if value is None or pd.isna(value) else f"{float(value) * 1e3:.2f}"


def _pct(lost: int, sent: int) -> str:
    return "-" if not sent else f"{lost / sent:.2%} ({lost}/{sent})"


def _mbit(value: Any) -> str:
    return "-" if value is None or pd.isna(value) else f"{float(value) / 1e6:.1f}"


def probe_rows(probes: list[dict[str, Any]]) -> list[str]:
    rows = []
    for probe in probes:
        m = probe["measured"]
        cells = [
            str(probe["block"]),
            probe["when"],
            _ms(m.get("min_rtt_s")),
            _pct(m.get("up_lost", 0), m.get("up_sent", 0)),
            _pct(m.get("down_lost", 0), m.get("down_sent", 0)),
            _mbit(m.get("up_rate_bps")),
            _mbit(m.get("down_rate_bps")),
            "; ".join(probe.get("drift") or []) or "-",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def clock_lines(frame: pd.DataFrame) -> list[str]:
    """The clock offset and its error over the runs, and the one-way delays across them."""
    if "server_clock_offset_s" not in frame or frame["server_clock_offset_s"].isna().all():
        return []
    flagged = frame["one_way_flag"].dropna() if "one_way_flag" in frame else pd.Series()
    error = frame["server_clock_error_s"].dropna()
    return [
        "",
        f"Clocks: the server's CLOCK_MONOTONIC minus ours, median "
        f"{_ms(frame['server_clock_offset_s'].median())} ms over {len(error)} runs, true "
        f"within +-{_ms(error.median())} ms (median; at most {_ms(error.max())} ms): half "
        "the round trip of the best of 8 exchanges over the control channel before each run "
        "(RFC 5905 section 8). Server event times were moved onto ours by it, so a time "
        "across the two hosts (a one-way delay, a server-side phase measured from the "
        "client's start) carries that error; a duration on one host (processing, the "
        "server's receive and send) does not.",
        f"One-way delays of the first request byte up and the first response byte down, "
        f"medians: {_ms(frame['one_way_up_s'].median())} and "
        f"{_ms(frame['one_way_down_s'].median())} ms; "
        + (
            f"{len(flagged)} runs came out negative (column one_way_flag: "
            f"{', '.join(sorted(set(flagged)))})."
            if len(flagged)
            else "none came out negative."
        ),
    ]


def path_section(result_dir: Path, frame: pd.DataFrame) -> list[str]:
    """Markdown lines of the real path's section, [] on an emulated link."""
    path = result_dir / PROBES_FILE
    if not path.exists():
        return []
    probes = json.loads(path.read_text(encoding="utf-8"))
    host = (
        frame["remote_host"].dropna().iloc[0]
        if "remote_host" in frame and frame["remote_host"].notna().any()
        else "the remote host"
    )
    headers = [
        "block", "probe", "min RTT ms", "loss up", "loss down", "TCP up Mbit/s",
        "TCP down Mbit/s", "moved since the probe before the block",
    ]  # fmt: skip
    return [
        "## The real path (measured, not emulated)",
        "",
        f"The server ran on {host}. The path was measured before each block and after the "
        "last, with the probe of `testbed bench link`: a paced UDP train to an echo there "
        "(minimum round trip with the echo's turnaround removed; the echo's count splits "
        "the loss by direction) and one iperf3 TCP transfer each way. A run's link, rtt_s, "
        "loss, up_bps, down_bps and bound are those of the probe before its block. A block "
        "is flagged when the probe after it moved beyond the margins of "
        "harness.run.remote.pathprobe (min RTT 10 % or 2 ms, 99 % loss intervals apart, "
        "TCP rate 25 %).",
        "",
        "| " + " | ".join(headers) + " |",
        "| " + " | ".join("---" for _ in headers) + " |",
        *probe_rows(probes),
        *clock_lines(frame),
        "",
    ]
