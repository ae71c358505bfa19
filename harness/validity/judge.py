"""The judgement of one run: the machine's load over its request window, the disturbance
the host could have added to what it measured, and the verdict (harness.validity.rules).

Plain code on the collected row (harness.collect.row.Collected, which carries the run's
parsed context) and a CPU window (the run's :class:`harness.run.machine.CpuWatch`, or a
fake with the same methods)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from harness.validity import rules as judgement
from netem.topologyspec import Topology
from tbcore.runrow import RunRow


@dataclass
class Collected:
    """A run's row as its files tell it, and what the judgement of the run needs."""

    row: RunRow
    error: str | None
    start_s: float | None = None
    """CLOCK_MONOTONIC start and end of the run's request (None if none completed)."""
    end_s: float | None = None
    loss_checks: dict[str, tuple[float, int, int]] = field(default_factory=dict)
    """Per direction without a Gilbert-Elliott model: (configured, dropped, trials)."""
    path: Topology | None = None
    """The path the run crossed (its run.json, read once by the collection)."""
    lateness: dict[str, judgement.PacketTimes] | None = None
    """The emulator's packet times by direction (None: no packet log, as on kernel netem)."""
    handshake_slack_s: float = 0.0
    """What the path's traces may add to a handshake's round trip (the RTT check allows it)."""


class CpuWindow(Protocol):
    """What the judgement reads of the CPU watched during a run."""

    sched: dict[str, str | None]

    def fraction(self, name: str, t0: float, t1: float) -> float | None: ...
    def wait_s(self, name: str, t0: float, t1: float) -> float | None: ...
    def main_wait_series(self, name: str) -> list[tuple[float, float]]: ...
    def main_wait_s(self, name: str, t0: float, t1: float) -> float | None: ...
    def pressure(self, t0: float, t1: float) -> float | None: ...
    def steal(self, t0: float, t1: float) -> float | None: ...
    def foreign_share(self, t0: float, t1: float, own: Sequence[str]) -> float | None: ...


WATCHED = ("client", "server", "emulator")
"""The processes whose CPU is watched during a run."""
OWN = (*WATCHED, "cross")
"""The run's own processes: the watched ones and its competing traffic (harness.run.cross),
whose CPU is part of what the run measures, not a disturbance."""


def machine_columns(row: RunRow, watch: CpuWindow, t0: float, t1: float) -> dict[str, Any]:
    """CPU, run-queue waits, steal and pressure of the request window [t0, t1]."""
    out: dict[str, Any] = {}
    for name in WATCHED:
        out[f"cpu_{name}"] = watch.fraction(name, t0, t1)
        out[f"runqueue_wait_{name}_s"] = watch.wait_s(name, t0, t1)
    out["steal"] = watch.steal(t0, t1)
    out["cpu_pressure"] = watch.pressure(t0, t1)
    if out["cpu_emulator"] is None:
        out["cpu_emulator"] = row.cpu_emulator_run
    out["main_wait_client_s"] = watch.main_wait_s("client", t0, t1)
    out["main_wait_server_s"] = watch.main_wait_s("server", t0, t1)
    out["foreign_cpu_share"] = watch.foreign_share(t0, t1, OWN)
    out["sched_client"] = watch.sched.get("client")
    out["sched_server"] = watch.sched.get("server")
    return out


def disturbance_of(
    row: RunRow, watch: CpuWindow, collected: Collected, t0: float, t1: float
) -> tuple[judgement.Disturbance, judgement.CriticalPath | None, float | None]:
    """What the host's disturbance could have added to the request (harness.validity.rules):
    emulator lateness on the critical path; the endpoints' main-thread waits while they sent
    the request's flights or worked on the ones that reached them (the whole waits without a
    packet log), times the foreign share of the host's CPU; their steal. Third: the run's
    own part of those waits (harness.validity.rules.own_wait_s)."""
    path = None
    if collected.lateness is not None:
        path = judgement.critical_path(
            collected.lateness, t0, t1, rtt_s=row.rtt_s, jitter_s=_jitter_s(collected.path)
        )
    if path is None:
        waits = [w for w in (row.main_wait_client_s, row.main_wait_server_s) if w is not None]
    else:
        waits = [
            judgement.flight_wait_s(spans, watch.main_wait_series(endpoint))
            for endpoint, spans in path.endpoint_spans().items()
        ]
    total_s = row.total_s or 0.0
    steal = judgement.endpoint_steal_s(
        [row.cpu_client, row.cpu_server], max(total_s, judgement.MIN_CPU_WINDOW_S), row.steal
    )
    if steal is not None and path is not None:
        steal *= 1.0 - path.backlog_fraction(t0, t1)
    disturbance = judgement.Disturbance(
        lateness_s=None if path is None else path.lateness_s,
        endpoint_wait_s=judgement.foreign_wait_s(waits, row.foreign_cpu_share),
        endpoint_steal_s=steal,
    )
    return disturbance, path, judgement.own_wait_s(waits, row.foreign_cpu_share)


def _jitter_s(path: Topology | None) -> dict[str, float] | None:
    """Each direction's configured jitter on the run's primary edge (what it can add to a
    packet's sojourn), or None without a path (then no bottleneck queue is assumed)."""
    if path is None:
        return None
    link = path.link_spec
    return {"up": link.up.jitter_s, "down": link.down.jitter_s}


def judge(collected: Collected, watch: CpuWindow, effect_s: float | None = None) -> RunRow:
    """The collected row with the machine's load over the request window and the verdict:
    what the run itself says (error, integrity, RTT, loss) and the impact the host's
    disturbance could have had on what it measured (harness.validity.rules)."""
    row, t0, t1 = collected.row, collected.start_s, collected.end_s
    own = judgement.run_validity(
        error=collected.error,
        sha256_ok=row.sha256_ok,
        # on a capacity trace a handshake packet may wait for its opportunity
        configured_rtt_s=row.rtt_s + collected.handshake_slack_s,
        # beside competing flows the handshake crosses their standing queue by design: the
        # link's fidelity is then judged by the emulator's lateness, not by that RTT
        measured_rtt_s=None if row.cross is not None else row.measured_rtt_s,
        loss=collected.loss_checks,
    )
    if t0 is None or t1 is None:
        valid, reason = own
        return replace(row, valid=valid, invalid_reason=reason)
    row = replace(row, **machine_columns(row, watch, t0, t1))
    disturbance, path, own_wait = disturbance_of(row, watch, collected, t0, t1)
    ok, why, limit = judgement.judge_disturbance(disturbance, row.total_s, effect_s)
    valid, reason = judgement.combine(own, (ok, why))
    return replace(
        row,
        **judgement.disturbance_columns(disturbance, row.total_s, effect_s),
        flights_up=None if path is None else path.flights.get("up"),
        flights_down=None if path is None else path.flights.get("down"),
        disturbance_limit_s=limit,
        own_wait_s=own_wait,
        endpoint_cpu_s=_endpoint_cpu_s(row),
        cpu_client_s=_cpu_s(row.cpu_client, row.total_s),
        cpu_server_s=_cpu_s(row.cpu_server, row.total_s),
        valid=valid,
        invalid_reason=reason,
    )


def _cpu_s(fraction: float | None, total_s: float | None) -> float | None:
    """CPU seconds of one end during the request: its CPU per wall second times the
    request's time (its process tree: the native stack's engine counts with its edge)."""
    return None if fraction is None or total_s is None else fraction * total_s


def _endpoint_cpu_s(row: RunRow) -> float | None:
    """CPU seconds the client and the server used during the request (tick-counted)."""
    fractions = [f for f in (row.cpu_client, row.cpu_server) if f is not None]
    if not fractions or row.total_s is None:
        return None
    return math.fsum(fractions) * row.total_s
