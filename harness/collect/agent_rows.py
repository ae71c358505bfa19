"""The agent workload's row: its rounds (AgentRound records) -> the task's time, its bound
(harness.bounds.agent_task_time), the outage's timeline and rounds.csv (issue 13).

``total_s`` is the task: the first round's start to the last action. The bound is the
task's lower bound for the level's settings with the measured screenshot bytes and encode
time (both measured, the codec's output is not assumed), plus the outage and the rounds
the recovery mode must redo.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import bounds
from harness.collect.rowparts import RowPart, read_run_records
from harness.collect.traces import positions_at, trace_columns
from harness.spec.paths import end_to_end
from harness.store.files import ROUND_TRACE_FILE, ROUNDS_FILE
from harness.store.resultdir import atomic_write_text
from netem.linkspec import LinkSpec
from netem.topologyspec import Topology
from netem.traceclock import TraceClock
from tbcore import kinds
from tbcore.records import AgentRound, write_csv
from tbcore.settings import Settings

REPLY_BYTES = 256
"""About the action's JSON (tbcore.agent.action_for): the reply the bound counts."""


def _median(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.fmean(kept) if kept else None


@dataclass(frozen=True)
class Recovery:
    """What an outage did to the task, as planned or as the rounds' records show it."""

    redone_rounds: int
    outage_s: float
    """The blackout the bound counts (0: no round was lost to it)."""
    stored_rounds: int
    reconnect_s: float = 0.0
    """After a connection break (outage_mode break): the client's wait before reconnecting."""

    @classmethod
    def planned(cls, settings: Settings) -> Recovery:
        if settings.outage_after_round is None:
            return cls(0, 0.0, 0)
        return cls._of(
            settings,
            bounds.agent_redone_rounds(settings.recovery, settings.outage_after_round),
            # committed retries the lost round's id: the server has executed it (a break:
            # always, before the reset) or may have (a blackout)
            1 if settings.recovery == "committed" else 0,
            lost=True,
        )

    @classmethod
    def recorded(cls, settings: Settings, rounds: Sequence[AgentRound]) -> Recovery:
        """From the rounds: those begun again, whether one was lost (given up or failed:
        only then did the outage cost its length), the redone ones the server answered
        from its store."""
        lost = any(r.error is not None or r.detected_s is not None for r in rounds)
        redone = [r for r in rounds if r.redone]
        stored = sum(1 for r in redone if r.executed is False)
        return cls._of(settings, len(redone), stored, lost=lost)

    @classmethod
    def _of(cls, settings: Settings, redone: int, stored: int, *, lost: bool) -> Recovery:
        wait = settings.outage_s if lost else 0.0
        if settings.outage_mode == "break":
            return cls(redone, 0.0, stored, reconnect_s=wait)
        return cls(redone, wait, stored)

    def differs(self, other: Recovery) -> str | None:
        """The premise of ``other`` (the plan) these records contradict, None if none."""
        if self == other:
            return None
        lost = "a round lost" if self.outage_s or self.reconnect_s else "no round lost"
        return (
            f"records: {lost}, {self.redone_rounds} redone ({self.stored_rounds} from the "
            f"server's store); the plan's bound assumed a round lost, {other.redone_rounds} "
            f"redone ({other.stored_rounds} from the store)"
        )


@dataclass(frozen=True)
class Tasks:
    """A run of several tasks, or of attempts the model judges (agent_tasks, task_success)."""

    done: int
    """Tasks finished: with task_success, attempts judged done; else tasks whose last round
    was acknowledged."""
    attempts: int
    """Task attempts made (failed ones included)."""


def task_counts(settings: Settings, done: Sequence[AgentRound]) -> Tasks | None:
    """The tasks of a run's acknowledged measured rounds; None for a run of one task whose
    attempts nobody judges."""
    if not settings.several_tasks:
        return None
    attempts = len({(r.task, r.attempt) for r in done})
    if settings.task_success is not None:
        finished = sum(1 for r in done if r.task_outcome == "done")
    else:
        last = settings.agent_rounds - 1
        finished = len(
            {
                r.task
                for r in done
                if (r.round - settings.warmup_requests) % settings.agent_rounds == last
            }
        )
    return Tasks(done=finished, attempts=attempts)


def agent_bound(
    settings: Settings,
    link: LinkSpec,
    upload_bytes: int,
    encode_s: float,
    recovery: Recovery | None = None,
    rounds: int | None = None,
) -> bounds.AgentBound | None:
    """The task's bound for the level (``recovery``: what the outage did; default the plan;
    ``rounds``: the measured rounds the run made, default one task's)."""
    if link.up.rate_bps is None or link.down.rate_bps is None:
        return None
    protocol = kinds.protocol(settings.protocol)
    recovery = recovery if recovery is not None else Recovery.planned(settings)
    return bounds.agent_task_time(
        rounds=rounds or settings.agent_rounds,
        rtt_s=link.rtt_s,
        up_bps=link.up.rate_bps,
        down_bps=link.down.rate_bps,
        upload_bytes=upload_bytes,
        local_s=settings.agent_local_s,
        model_s=settings.agent_model_s,
        protocol=kinds.setup_name(settings),
        connection=settings.connection,
        encode_s=encode_s,
        reply_bytes=REPLY_BYTES,
        initcwnd_segments=protocol.initial_window(settings),
        mss_bytes=protocol.mss(settings),
        redone_rounds=recovery.redone_rounds,
        outage_s=recovery.outage_s,
        reconnect_s=recovery.reconnect_s,
        stored_rounds=recovery.stored_rounds,
        warm=settings.warmup_requests > 0,
        rate_change_after_round=settings.rate_change_after_round,
        rate_change_bps=settings.rate_change_bps,
    )


def agent_part(
    settings: Settings,
    path: Topology,
    run_dir: Path,
    error: str | None,
    fired: Sequence[dict[str, Any]],
    clocks: Mapping[str, TraceClock] | None = None,
) -> RowPart:
    """The agent workload's columns (``clocks``: the run's trace clocks by direction, from
    its run.json as the collection read it; needed on a traced path)."""
    rounds, error = read_run_records(run_dir, AgentRound, error, "agent rounds")
    write_csv(run_dir / ROUNDS_FILE, AgentRound, rounds)
    # every connection of the run, the warm-up's included (a task on a warm connection
    # opened its connection there: its handshake is still the run's)
    handshakes = [r.handshake_s for r in rounds if r.new_connection]
    rounds = [r for r in rounds if not r.warmup]  # warm-up rounds: the connection's set-up
    done = [r for r in rounds if r.end_s is not None]
    out: dict[str, Any] = {"requests": len(done)}
    tasks = task_counts(settings, done)
    if tasks is not None:
        out.update(agent_tasks_done=tasks.done, task_attempts=tasks.attempts)
        if error is None and tasks.done < settings.agent_tasks:
            error = f"agent tasks unfinished: {tasks.done} of {settings.agent_tasks}"
    else:
        finished = len(
            {r.round for r in done if r.attempt == max((d.attempt for d in done), default=0)}
        )
        if error is None and finished < settings.agent_rounds:
            error = f"agent task unfinished: {finished} of {settings.agent_rounds} rounds"
    start_s = rounds[0].start_s if rounds else None
    end_s = done[-1].end_s if done else None
    sha = [r.sha256_ok for r in done]
    sha256_ok = None if not sha else all(v is True for v in sha)
    upload = int(
        _median([r.upload_bytes for r in done]) or kinds.workload("agent").up_bytes(settings)
    )
    encode = _mean([r.encode_s for r in done]) or 0.0
    opened = [r for r in rounds if r.new_connection]
    out.update(
        up_bytes=upload,
        down_bytes=REPLY_BYTES,
        agent_rounds_done=len(done),
        agent_redone=sum(1 for r in rounds if r.redone),
        agent_connections=len(opened),
        agent_round_s=_median([r.round_s for r in done]),
        agent_upload_s=_median([r.upload_s for r in done]),
        agent_encode_s=encode,
        agent_handshake_s=_mean(handshakes),
        sha256_ok=sha256_ok,
    )
    if start_s is not None and end_s is not None:
        out["total_s"] = end_s - start_s
        out.update(outage_timeline(rounds, fired, start_s))
    given = {f.get("kind") for f in fired if "start_s" in f}
    blackout = settings.outage_after_round is not None and settings.outage_mode == "blackout"
    if blackout and "outage" not in given:
        error = error or "the outage was never given to the link"
    if settings.rate_change_after_round is not None and "rate" not in given:
        error = error or "the rate change was never given to the link"
    link = end_to_end(path)
    if link.up.rate_trace is not None or link.down.rate_trace is not None:
        clocks = clocks or {}
        out.update(trace_part(settings, path, clocks, done, upload, encode, run_dir))
        out.update(trace_columns(path, clocks, start_s, end_s))
    else:
        recorded = rounds if error is None else None
        made = None if tasks is None else tasks.attempts * settings.agent_rounds
        out.update(_bound_columns(settings, path, recorded, upload, encode, made))
    if out.get("total_s") and out.get("bound_s"):
        out["ratio"] = out["total_s"] / out["bound_s"]
    if settings.agent_deadline_s is not None:
        out["deadline_s"] = settings.agent_deadline_s
        if "total_s" in out:
            out["deadline_met"] = out["total_s"] <= settings.agent_deadline_s
    busy = sum(r.model_s for r in done if r.model_s is not None and r.executed)
    out["site_busy_s"] = busy
    if settings.site_power_w is not None:
        out["site_energy_j"] = bounds.agent_energy_j(settings.site_power_w, busy)
    return RowPart(out, error, start_s, end_s, sha256_ok)


def _bound_columns(
    settings: Settings,
    path: Topology,
    rounds: Sequence[AgentRound] | None,
    upload: int,
    encode: float,
    made: int | None = None,
) -> dict[str, Any]:
    """The task's bound: the plan's, or (an outage whose premise the ``rounds`` contradict)
    what the rounds show happened, named in ``bound_basis``. ``made``: the measured rounds
    of a run of several tasks or judged attempts (every attempt's), which the bound counts."""
    out: dict[str, Any] = {}
    recovery = Recovery.planned(settings)
    if settings.outage_after_round is not None and rounds is not None:
        recorded = Recovery.recorded(settings, rounds)
        out["bound_basis"] = recorded.differs(recovery)
        recovery = recorded
    if made:
        out["bound_basis"] = (
            f"the {made} rounds of the run's {made // settings.agent_rounds} task attempts"
        )
    link = end_to_end(path)
    bound = agent_bound(settings, link, upload, encode, recovery, rounds=made)
    if bound is not None:
        out.update(
            bound_s=bound.total_s,
            bound_setup_s=bound.setup_s,
            bound_feedback_s=bound.feedback_s,
            bound_window_s=bound.window_s,
            bound_serialisation_s=bound.serialisation_s,
            bound_propagation_s=bound.propagation_s,
            bound_processing_s=(bound.rounds + bound.redone_rounds) * settings.agent_model_s,
            **_no_loss_parts(link, bound.total_s),
        )
    return out


def _no_loss_parts(link: LinkSpec, total_s: float) -> dict[str, Any]:
    """The retransmission part and the expectation: none on a path without random loss
    (the agent's bound has no loss model: on a lossy path both stay empty, not computed)."""
    if link.up.mean_loss or link.down.mean_loss:
        return {}
    return {"bound_retransmission_s": 0.0, "bound_expected_s": total_s}


def outage_timeline(
    rounds: Sequence[AgentRound], fired: Sequence[dict[str, Any]], start_s: float
) -> dict[str, Any]:
    """When the outage began and ended, when the client gave the lost round up and when its
    new connection was up, from the task's start."""
    out: dict[str, Any] = {}
    detected = [r.detected_s for r in rounds if r.detected_s is not None]
    back = [r.reconnected_s for r in rounds if r.reconnected_s is not None]
    outages = [f for f in fired if f.get("kind") == "outage"]
    broken = [r for r in rounds if r.broken and r.detected_s is not None]
    if outages:
        out["outage_start_s"] = outages[0]["start_s"] - start_s
        out["outage_end_s"] = outages[0]["end_s"] - start_s
    elif broken:  # a break: from the reset's arrival to the end of the client's wait
        out["outage_start_s"] = broken[0].detected_s - start_s  # type: ignore[operator]
        if broken[0].resumed_s is not None:
            out["outage_end_s"] = broken[0].resumed_s - start_s
    if detected:
        out["outage_detected_s"] = detected[0] - start_s
    if back:
        out["outage_back_s"] = back[0] - start_s
    return out


def trace_part(
    settings: Settings,
    path: Topology,
    clocks: Mapping[str, TraceClock],
    done: Sequence[AgentRound],
    upload: int,
    encode: float,
    run_dir: Path,
) -> dict[str, Any]:
    """On a traced path: the task's bound from where the traces were when it began (each
    round's upload at the rates the trace offered then, docs/models.md sections 13 and 14), and
    round_trace.csv: per round, its network time beside the earliest its screenshot could
    have crossed from the moment its first byte was written."""
    link = end_to_end(path)
    if settings.outage_after_round is not None or settings.several_tasks or not done:
        return {}  # an outage, or tasks after tasks, are not part of the trace bound
    start = min(r.start_s for r in done if r.start_s is not None)
    positions = positions_at(clocks, start)
    bound = bounds.agent_task_on_trace(
        rounds=settings.agent_rounds,
        up=bounds.direction_bottleneck(link.up, positions.get("up")),
        down=bounds.direction_bottleneck(link.down, positions.get("down")),
        up_delay_s=link.up.min_delay_s, down_delay_s=link.down.min_delay_s,
        upload_bytes=upload, local_s=settings.agent_local_s, model_s=settings.agent_model_s,
        protocol=kinds.setup_name(settings),
        connection=settings.connection, encode_s=encode,
        reply_bytes=REPLY_BYTES,
        initcwnd_segments=kinds.protocol(settings.protocol).initial_window(settings),
        mss_bytes=kinds.protocol(settings.protocol).mss(settings),
        warm=settings.warmup_requests > 0,
    )  # fmt: skip
    rows = round_trace_rows(link, clocks, done, start)
    write_csv_rows(run_dir / ROUND_TRACE_FILE, ROUND_TRACE_COLUMNS, rows)
    return {
        "bound_s": bound.total_s,
        "bound_setup_s": bound.setup_s,
        "bound_feedback_s": bound.feedback_s,
        "bound_processing_s": bound.processing_s,
        # each round's screenshot through the trace as offered, and its round trip
        "bound_serialisation_s": math.fsum(bound.upload_s),
        "bound_propagation_s": bound.rounds * (link.up.min_delay_s + link.down.min_delay_s),
        **_no_loss_parts(link, bound.total_s),
    }


ROUND_TRACE_COLUMNS = (
    "round", "attempt", "first_byte_s", "position_up_s", "upload_bytes", "network_s",
    "network_bound_s", "offered_up_bps",
)  # fmt: skip
"""round_trace.csv: a round's first request byte (from the task's start) and where the
uplink's trace was then; its network time (first request byte to the action, less the
model's time) and the least that time could be (the screenshot through the uplink from that
moment, one round trip, the reply); the rate the uplink offered to it (its ``b_i``)."""


def round_trace_rows(
    link: LinkSpec, clocks: Mapping[str, TraceClock], done: Sequence[AgentRound], start_s: float
) -> list[dict[str, Any]]:
    rows = []
    for r in done:
        if None in (r.end_s, r.reply_s, r.upload_s, r.upload_bytes):
            continue
        first = r.end_s - r.reply_s - r.upload_s  # type: ignore[operator]
        positions = positions_at(clocks, first)
        up = bounds.direction_bottleneck(link.up, positions.get("up"))
        down = bounds.direction_bottleneck(link.down, positions.get("down"))
        upload_s = up.serve(r.upload_bytes, 0.0)  # type: ignore[arg-type]
        reply_s = down.serve(REPLY_BYTES, upload_s + link.up.min_delay_s) - upload_s
        rows.append(
            {
                "round": r.round,
                "attempt": r.attempt,
                "first_byte_s": first - start_s,
                "position_up_s": positions.get("up"),
                "upload_bytes": r.upload_bytes,
                "network_s": r.end_s - first - (r.model_s or 0.0),  # type: ignore[operator]
                "network_bound_s": upload_s + reply_s + link.down.min_delay_s,
                "offered_up_bps": r.upload_bytes * 8 / upload_s if upload_s > 0 else None,  # type: ignore[operator]
            }
        )
    return rows


def write_csv_rows(path: Path, columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> None:
    lines = [",".join(columns)]
    for row in rows:
        lines.append(",".join("" if row.get(c) is None else f"{row[c]}" for c in columns))
    atomic_write_text(path, "\n".join(lines) + "\n")
