"""The agent workload's row: its rounds (AgentRound records) -> the task's time, its bound
(harness.bounds.agent_task_time), the outage's timeline and rounds.csv (issue 13).

``total_s`` is the task: the first round's start to the last action. The bound is the
task's lower bound for the level's settings with the measured screenshot bytes and encode
time (both measured, the codec's output is not assumed), plus the outage and the rounds
the recovery mode must redo.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness import bounds
from harness.collect.rowparts import RowPart, register_row_part
from harness.spec.paths import end_to_end
from netem.linkspec import LinkSpec
from netem.topologyspec import Topology
from tbcore import kinds
from tbcore.records import AgentRound, RecordError, read_jsonl, write_csv
from tbcore.settings import Settings

REPLY_BYTES = 256
"""About the action's JSON (tbcore.agent.action_for): the reply the bound counts."""
ROUNDS_FILE = "rounds.csv"


def _median(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.fmean(kept) if kept else None


def agent_bound(
    settings: Settings, link: LinkSpec, upload_bytes: int, encode_s: float
) -> bounds.AgentBound | None:
    if link.up.rate_bps is None or link.down.rate_bps is None:
        return None
    protocol = kinds.protocol(settings.protocol)
    outage = settings.outage_after_round is not None
    return bounds.agent_task_time(
        rounds=settings.agent_rounds,
        rtt_s=link.rtt_s,
        up_bps=link.up.rate_bps,
        down_bps=link.down.rate_bps,
        upload_bytes=upload_bytes,
        local_s=settings.agent_local_s,
        model_s=settings.agent_model_s,
        protocol=settings.protocol,
        connection=settings.connection,
        encode_s=encode_s,
        reply_bytes=REPLY_BYTES,
        initcwnd_segments=protocol.initial_window(settings),
        mss_bytes=protocol.mss(settings),
        redone_rounds=bounds.agent_redone_rounds(settings.recovery, settings.outage_after_round),
        outage_s=settings.outage_s if outage else 0.0,
        # committed retries the lost round's id: the server may already have executed it
        stored_rounds=1 if outage and settings.recovery == "committed" else 0,
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
) -> RowPart:
    try:
        rounds = read_jsonl(run_dir / "records.jsonl", AgentRound)
    except (OSError, RecordError) as err:
        rounds = []
        error = error or f"no agent rounds: {err}"
    write_csv(run_dir / ROUNDS_FILE, AgentRound, rounds)
    rounds = [r for r in rounds if not r.warmup]  # warm-up rounds: the connection's set-up
    done = [r for r in rounds if r.end_s is not None]
    out: dict[str, Any] = {"requests": len(done)}
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
        agent_handshake_s=_mean([r.handshake_s for r in opened]),
        sha256_ok=sha256_ok,
    )
    if start_s is not None and end_s is not None:
        out["total_s"] = end_s - start_s
        detected = [r.detected_s for r in rounds if r.detected_s is not None]
        back = [r.reconnected_s for r in rounds if r.reconnected_s is not None]
        outages = [f for f in fired if f.get("kind") == "outage"]
        if outages:
            out["outage_start_s"] = outages[0]["start_s"] - start_s
            out["outage_end_s"] = outages[0]["end_s"] - start_s
        if detected:
            out["outage_detected_s"] = detected[0] - start_s
        if back:
            out["outage_back_s"] = back[0] - start_s
    given = {f.get("kind") for f in fired if "start_s" in f}
    if settings.outage_after_round is not None and "outage" not in given:
        error = error or "the outage was never given to the link"
    if settings.rate_change_after_round is not None and "rate" not in given:
        error = error or "the rate change was never given to the link"
    bound = agent_bound(settings, end_to_end(path), upload, encode)
    if bound is not None:
        out.update(
            bound_s=bound.total_s,
            bound_setup_s=bound.setup_s,
            bound_feedback_s=bound.feedback_s,
            bound_processing_s=(bound.rounds + bound.redone_rounds) * settings.agent_model_s,
        )
        if out.get("total_s"):
            out["ratio"] = out["total_s"] / bound.total_s
    if settings.agent_deadline_s is not None:
        out["deadline_s"] = settings.agent_deadline_s
        if "total_s" in out:
            out["deadline_met"] = out["total_s"] <= settings.agent_deadline_s
    busy = sum(r.model_s for r in done if r.model_s is not None and r.executed)
    out["site_busy_s"] = busy
    if settings.site_power_w is not None:
        out["site_energy_j"] = bounds.agent_energy_j(settings.site_power_w, busy)
    return RowPart(out, error, start_s, end_s, sha256_ok)


register_row_part("agent_round", agent_part)
