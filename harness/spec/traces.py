"""Where a run starts in its link's traces (the ``trace_start`` setting), sans-I/O.

``fixed``: every run at the link's ``trace_offset`` (the traces restart there at the
``set_spec`` before each run). ``spread``: repetition ``r`` of ``R`` starts every traced
direction ``r / R`` of the path's longest trace period further in, so that a level's runs
sample the trace's start evenly over one period (a stratified sample of "the task begins
at a random moment"); its warm-up runs start at the offset itself, and a re-run of an
invalid run keeps its repetition's start. Refused: ``spread`` on a path without a trace (it
would change nothing) and with fewer than two repetitions (one start is no spread).
"""

from __future__ import annotations

import dataclasses

from netem.linkspec import DirectionSpec
from netem.topologyspec import Topology
from tbcore.errors import SpecError
from tbcore.settings import Settings

MIN_SPREAD_REPETITIONS = 2


def trace_periods_s(path: Topology) -> list[float]:
    """The periods of every trace on every edge and direction of ``path``."""
    out: list[float] = []
    for edge in path.edges:
        for spec in (edge.spec.up, edge.spec.down):
            for trace in (spec.rate_trace, spec.delay_trace):
                if trace is not None:
                    out.append(trace.period_s)
    return out


def check_trace_start(settings: Settings, path: Topology, where: str) -> None:
    """``spread`` needs a trace on the path."""
    if settings.trace_start != "fixed" and not trace_periods_s(path):
        raise SpecError(
            f"{where}.trace_start",
            f"{settings.trace_start} has no effect without a trace on the path "
            "(rate=trace:PATH or delay=trace:PATH)",
        )


def check_repetitions(settings: Settings, repetitions: int, where: str) -> None:
    """``spread`` over fewer than two repetitions is one start."""
    if settings.trace_start == "spread" and repetitions < MIN_SPREAD_REPETITIONS:
        raise SpecError(
            where,
            f"trace_start = spread needs at least {MIN_SPREAD_REPETITIONS} repetitions "
            f"to spread over, got {repetitions}",
        )


def start_shift_s(settings: Settings, path: Topology, rep: int, repetitions: int) -> float:
    """How much further in than its offset a run of repetition ``rep`` starts its traces."""
    periods = trace_periods_s(path)
    if settings.trace_start == "fixed" or rep < 0 or not periods or repetitions < 1:
        return 0.0
    return (rep % repetitions) * max(periods) / repetitions


def _shifted(spec: DirectionSpec, shift_s: float) -> DirectionSpec:
    if not spec.has_trace or shift_s == 0:
        return spec
    return dataclasses.replace(spec, trace_offset_s=spec.trace_offset_s + shift_s)


def run_path(path: Topology, settings: Settings, rep: int, repetitions: int) -> Topology:
    """``path`` with every traced direction's offset moved by :func:`start_shift_s`."""
    shift = start_shift_s(settings, path, rep, repetitions)
    if shift == 0:
        return path
    edges = tuple(
        dataclasses.replace(
            edge,
            spec=dataclasses.replace(
                edge.spec, up=_shifted(edge.spec.up, shift), down=_shifted(edge.spec.down, shift)
            ),
        )
        for edge in path.edges
    )
    return dataclasses.replace(path, edges=edges)
