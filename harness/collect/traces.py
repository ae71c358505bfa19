"""A run on a traced link: where its traces were when the measured work began, and what
capacity they offered while it ran (the ``trace`` columns of runs.csv).

run.json keeps, by edge, the trace clock of each traced direction as the emulator reported
it at the run's ``set_spec`` (netem.traceclock); a position is ``offset + (t - origin)``
on the one CLOCK_MONOTONIC every process of a run shares. The bound of the run
(harness.collect.row, harness.collect.agent_rows) starts from these positions, so that its
``ratio`` compares the run with the capacity the trace actually gave it.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from harness.bounds.trace import direction_bottleneck
from netem.topologyspec import Topology
from netem.traceclock import DIRECTIONS, TraceClock, clocks_of

PRIMARY_EDGE = "link"
"""The edge whose traces a run's bound follows (a direct link's only edge)."""


def run_clocks(run_json: Mapping[str, Any]) -> dict[str, TraceClock]:
    """The trace clocks of the primary edge's directions from run.json (``{}``: none)."""
    traces = run_json.get("traces") or {}
    return clocks_of(traces.get(PRIMARY_EDGE)) if isinstance(traces, Mapping) else {}


def positions_at(clocks: Mapping[str, TraceClock], monotonic_s: float | None) -> dict[str, float]:
    """Where each traced direction's trace was at ``monotonic_s`` (``{}`` without a time)."""
    if monotonic_s is None:
        return {}
    return {d: c.position_s(monotonic_s) for d, c in clocks.items()}


def trace_columns(
    path: Topology,
    clocks: Mapping[str, TraceClock],
    start_s: float | None,
    end_s: float | None,
) -> dict[str, Any]:
    """``trace_position_{up,down}_s`` at ``start_s`` and ``offered_{up,down}_bps``: the mean
    capacity each direction's trace offered over ``[start_s, end_s]`` (a fixed rate: itself)."""
    link = path.link_spec
    out: dict[str, Any] = {}
    if start_s is None or not clocks:
        return out
    for direction in DIRECTIONS:
        spec = getattr(link, direction)
        clock = clocks.get(direction)
        if clock is not None:
            out[f"trace_position_{direction}_s"] = clock.position_s(start_s)
        if end_s is None or end_s <= start_s:
            continue
        if spec.rate_trace is None and spec.rate_bps is None:
            continue
        position = None if clock is None else clock.position_s(start_s)
        offered = direction_bottleneck(spec, position).offered_bytes(0.0, end_s - start_s)
        out[f"offered_{direction}_bps"] = offered * 8 / (end_s - start_s)
    return out


def longest_gap_s(spec: Any) -> float:
    """The longest wait between two of a direction's capacity opportunities (across the
    trace's wrap too); 0 without a capacity trace. A handshake packet may wait this long."""
    if spec.rate_trace is None:
        return 0.0
    stamps = spec.rate_trace.capacity.stamps_ms
    period = spec.rate_trace.capacity.period_ms
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    gaps.append(period - stamps[-1] + stamps[0])
    return max(gaps) / 1e3


def handshake_slack_s(path: Topology | None) -> float:
    """What a traced path may add to a handshake's round trip beyond its propagation: each
    direction's longest wait for an opportunity (the RTT check allows it)."""
    if path is None:
        return 0.0
    link = path.link_spec
    return longest_gap_s(link.up) + longest_gap_s(link.down)
