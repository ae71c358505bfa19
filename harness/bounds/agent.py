"""The agent's rounds (docs/models.md sections 1, 4, 6; the chapter's §12.1.3, §12.3.1, §12.5)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Required, TypedDict, Unpack

from harness.bounds.base import BITS_PER_BYTE, INITCWND_SEGMENTS, _count, _non_negative, _positive
from harness.bounds.request import RequestBound, request_time
from harness.bounds.trace import trace_request_time
from tbcore.errors import SpecError
from tbcore.plain import AsDict


@dataclass(frozen=True)
class AgentBound(AsDict):
    """The lower bound of an agent task: ``rounds`` serial rounds, each local work + encode
    + one request (section 1: upload, RTT, model, reply) with set-up (section 4) and slow
    start (section 6) on every new connection, plus, after an outage, the outage itself, the
    reconnection and the rounds redone."""

    rounds: int
    round_s: float
    """One round on a warm connection: local + encode + upload + RTT + model + reply."""
    first_round_s: float
    """One round on a new connection (set-up and slow start included)."""
    new_connections: int
    setup_s: float
    """Set-up of every new connection (section 4)."""
    feedback_s: float
    """Slow-start idle time of every new connection (section 6)."""
    redone_rounds: int
    outage_s: float
    """The part of the outage nothing can use: its duration less the local work of the round
    it interrupts (which does not need the path)."""
    reconnect_s: float = 0.0
    """After a connection break: the client's wait from the reset to its reconnection (the
    chapter's 1 s to reconnect, §12.5.2); nothing overlaps it."""
    stored_model_s: float = 0.0
    """Model time a redone round need not spend: committed recovery retries the same
    operation id, and the server may answer with the stored result."""
    later_rounds: int = 0
    """Rounds after a scheduled uplink rate change."""
    later_round_s: float = 0.0
    """One warm round at the changed rate."""
    serialisation_s: float = 0.0
    """Of the total: every round's upload and reply through the link's rates (section 1)."""
    propagation_s: float = 0.0
    """Of the total: every round's round trip (section 1)."""
    window_s: float = 0.0
    """Of ``feedback_s``: the rounds a new connection's window takes to open (section 6)."""
    total_s: float = field(init=False)

    def __post_init__(self) -> None:
        done = self.rounds + self.redone_rounds - self.later_rounds
        parts = [done * self.round_s, self.later_rounds * self.later_round_s]
        parts += [self.setup_s, self.feedback_s, self.outage_s, self.reconnect_s]
        object.__setattr__(self, "total_s", math.fsum(parts) - self.stored_model_s)


def agent_round_time(common: dict[str, Any], connection: str) -> RequestBound:
    """One round's request (set-up, slow start, upload, RTT, model, reply) by part; the
    round is this plus ``local_s + encode_s``. ``common``: :func:`agent_task_time`'s path
    and round keywords (``rtt_s`` to ``mss_bytes``)."""
    _non_negative("local_s", common["local_s"])
    _non_negative("encode_s", common["encode_s"])
    own = {"local_s", "encode_s", "model_s", "reply_bytes"}
    return request_time(
        **{k: v for k, v in common.items() if k not in own},
        download_bytes=common["reply_bytes"],
        connection=connection,
        processing_s=common["model_s"],
    )


def agent_task_time(
    *,
    rounds: int,
    rtt_s: float,
    up_bps: float,
    down_bps: float,
    upload_bytes: int,
    local_s: float,
    model_s: float,
    protocol: str,
    connection: str,
    encode_s: float = 0.0,
    reply_bytes: int = 0,
    initcwnd_segments: int = INITCWND_SEGMENTS,
    mss_bytes: int | None = None,
    slow_start: bool = True,
    redone_rounds: int = 0,
    outage_s: float = 0.0,
    reconnect_s: float = 0.0,
    stored_rounds: int = 0,
    warm: bool = False,
    rate_change_after_round: int | None = None,
    rate_change_bps: float | None = None,
) -> AgentBound:
    """``rounds`` rounds (plus ``redone_rounds`` after an outage of ``outage_s`` (a blackout:
    the interrupted round's local work overlaps it) or a break followed by ``reconnect_s``
    of waiting, either opening one more connection; ``stored_rounds`` of them may be
    answered from the server's stored results, without model time) with a connection per
    round (``new``, ``0rtt``) or one for the task (``reused``). ``slow_start=False`` leaves
    section 6 out (the chapter's arithmetic); ``warm=True``: a reused connection is open
    and warm when the task starts."""
    count = _count("rounds", rounds, minimum=1)
    redone = _count("redone_rounds", redone_rounds)
    outage = _non_negative("outage_s", outage_s)
    reconnect = _non_negative("reconnect_s", reconnect_s)
    common: dict[str, Any] = {
        "rtt_s": rtt_s,
        "up_bps": up_bps,
        "down_bps": down_bps,
        "upload_bytes": upload_bytes,
        "local_s": local_s,
        "model_s": model_s,
        "protocol": protocol,
        "encode_s": encode_s,
        "reply_bytes": reply_bytes,
        "initcwnd_segments": initcwnd_segments,
        "mss_bytes": mss_bytes,
    }
    opened_first = 0 if warm else 1
    warm_round = agent_round_time(common, "reused")
    opening = "0rtt" if connection == "0rtt" else "new"
    cold = agent_round_time(common, opening)
    per_round = connection in ("new", "0rtt")
    # a reused connection is opened once, and once more after an outage
    # (``warm``: the task's reused connection is already open, its window grown: the
    # chapter's "remaining rounds")
    broke = outage or reconnect or redone
    connections = count + redone if per_round else opened_first + (1 if broke else 0)
    local = local_s + encode_s
    feedback = cold.feedback_s + cold.window_s if slow_start else 0.0
    later = _later_rounds(count, rate_change_after_round, rate_change_bps, common)
    done = count + redone - later.get("later_rounds", 0)
    changed = later.pop("_changed", None)
    wire = [done * warm_round.serialisation_s, done * warm_round.propagation_s]
    if changed is not None:
        wire[0] += later["later_rounds"] * changed.serialisation_s
        wire[1] += later["later_rounds"] * changed.propagation_s
    return AgentBound(
        rounds=count,
        round_s=local + warm_round.total_s,
        first_round_s=local + warm_round.total_s + cold.setup_s + feedback,
        new_connections=connections,
        setup_s=connections * cold.setup_s,
        feedback_s=connections * feedback,
        redone_rounds=redone,
        outage_s=max(0.0, outage - local_s) if outage > 0 else 0.0,
        reconnect_s=reconnect,
        stored_model_s=min(_count("stored_rounds", stored_rounds), redone) * model_s,
        serialisation_s=wire[0],
        propagation_s=wire[1],
        window_s=connections * cold.window_s if slow_start else 0.0,
        **later,
    )


def _later_rounds(
    rounds: int, after: int | None, rate_bps: float | None, common: dict[str, Any]
) -> dict[str, Any]:
    """The rounds after an uplink rate change and one warm round at the new rate."""
    if after is None or rate_bps is None:
        return {}
    later = max(0, rounds - _count("rate_change_after_round", after))
    changed = agent_round_time(
        {**common, "up_bps": _positive("rate_change_bps", rate_bps)}, "reused"
    )
    return {
        "later_rounds": later,
        "later_round_s": common["local_s"] + common["encode_s"] + changed.total_s,
        "_changed": changed,
    }


def agent_redone_rounds(recovery: str, outage_after_round: int | None) -> int:
    """Rounds done again after an outage that follows ``outage_after_round`` acknowledged
    rounds: the round in flight (committed), or every round so far and it (restart)."""
    if outage_after_round is None:
        return 0
    if recovery == "committed":
        return 1
    if recovery == "restart":
        return outage_after_round + 1
    raise SpecError("recovery", f"must be committed or restart, got {recovery!r}")


def agent_recovery_cost_s(fixed_s: float, round_s: float, redone_rounds: int) -> float:
    """What a disconnect costs: a fixed part (outage, reconnection) plus the redone rounds."""
    return _non_negative("fixed_s", fixed_s) + _count("redone_rounds", redone_rounds) * (
        _non_negative("round_s", round_s)
    )


def agent_deadline_rate_bps(
    *,
    rounds: int,
    deadline_s: float,
    upload_bytes: int,
    rtt_s: float,
    local_s: float,
    model_s: float,
    encode_s: float = 0.0,
) -> float:
    """The uplink rate below which ``rounds`` warm rounds miss ``deadline_s``:
    rounds * (local + encode + S/B + R + model) = deadline, solved for B."""
    count = _count("rounds", rounds, minimum=1)
    fixed = local_s + encode_s + rtt_s + model_s
    per_round = _positive("deadline_s", deadline_s) / count - fixed
    if per_round <= 0:
        return math.inf
    return upload_bytes * BITS_PER_BYTE / per_round


def agent_energy_j(power_w: float, busy_s: float) -> float:
    """Energy of a site: its stated power over the time it is busy (W * s = J)."""
    return _non_negative("power_w", power_w) * _non_negative("busy_s", busy_s)


def agent_break_even_rounds(rounds: int, raw_round_s: float, compressed_round_s: float) -> float:
    """How many extra rounds a compressed task may take (a lossy screen misleading the
    model) before it is no faster than the raw one: rounds * (raw - compressed) / compressed."""
    count = _count("rounds", rounds, minimum=1)
    return (
        count
        * (_positive("raw_round_s", raw_round_s) - compressed_round_s)
        / _positive("compressed_round_s", compressed_round_s)
    )


# --- the task on a path whose capacity follows a trace (docs/models.md sections 13 and 14) -------


@dataclass(frozen=True)
class AgentTraceBound(AsDict):
    """The lower bound of an agent task on a traced path: the rounds one after the other, each
    round's request through the same bottlenecks (harness.bounds.trace), so that every
    round's upload meets the rates the trace offers when it can start. With ``b_i`` the rate
    the uplink offered during round ``i``'s upload this is section 13's ``fixed + sum S/b_i``
    (the chapter's ``T = 11.6 + sum 6.4 / b_i`` s)."""

    rounds: int
    total_s: float
    setup_s: float
    """Set-up of every connection the task opened (section 4)."""
    feedback_s: float
    """Slow-start idle time of those connections (section 6)."""
    processing_s: float
    """Model time of every round."""
    round_s: tuple[float, ...]
    """Each round: local work, encode, its request."""
    upload_s: tuple[float, ...]
    """Each round's upload: first byte offered to its last byte out of the uplink."""
    offered_bps: tuple[float, ...]
    """The rate the uplink offered during each round's upload (``b_i``)."""


class AgentRound(TypedDict, total=False):
    """What each round of a task does, as :func:`agent_task_on_trace` takes it (the
    defaults are :func:`agent_task_time`'s)."""

    upload_bytes: Required[int]
    local_s: Required[float]
    model_s: Required[float]
    protocol: Required[str]
    connection: Required[str]
    encode_s: float
    reply_bytes: int
    initcwnd_segments: int
    mss_bytes: int | None


def agent_task_on_trace(
    *,
    rounds: int,
    up: Any,
    down: Any,
    up_delay_s: float,
    down_delay_s: float,
    warm: bool = False,
    **work: Unpack[AgentRound],
) -> AgentTraceBound:
    """``rounds`` serial rounds whose requests cross the bottlenecks ``up`` and ``down``
    (:class:`~harness.bounds.bottleneck.Bottleneck`, positioned where the traces were at the
    task's start): a new connection per round (``new``, ``0rtt``) or one for the task
    (``reused``; ``warm``: open and grown when the task starts)."""
    count = _count("rounds", rounds, minimum=1)
    local_s, encode_s = work["local_s"], work.get("encode_s", 0.0)
    before = _non_negative("local_s", local_s) + _non_negative("encode_s", encode_s)
    connection = work["connection"]
    now = 0.0
    setup = feedback = 0.0
    round_s, upload_s, offered = [], [], []
    for index in range(count):
        opening = connection in ("new", "0rtt") or (index == 0 and not warm)
        kind = ("0rtt" if connection == "0rtt" else "new") if opening else "reused"
        request = trace_request_time(
            up=up, down=down, up_delay_s=up_delay_s, down_delay_s=down_delay_s,
            upload_bytes=work["upload_bytes"], download_bytes=work.get("reply_bytes", 0),
            protocol=work["protocol"], connection=kind, processing_s=work["model_s"],
            initcwnd_segments=work.get("initcwnd_segments", INITCWND_SEGMENTS),
            mss_bytes=work.get("mss_bytes"), start_s=now + before,
        )  # fmt: skip
        setup += request.setup_s
        feedback += request.feedback_s
        round_s.append(before + request.total_s)
        upload_s.append(request.upload_done_s - request.setup_s)
        offered.append(request.up_offered_bps)
        now += round_s[-1]
    return AgentTraceBound(
        rounds=count,
        total_s=now,
        setup_s=setup,
        feedback_s=feedback,
        processing_s=count * _non_negative("model_s", work["model_s"]),
        round_s=tuple(round_s),
        upload_s=tuple(upload_s),
        offered_bps=tuple(offered),
    )
