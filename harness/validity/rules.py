"""Is a run valid? Pure functions on recorded numbers (tested with fixture values).

Two kinds of reasons:

- **The run itself** (:func:`run_validity`): an error, a checksum mismatch, a path whose
  measured RTT or loss was not the configured one. Such a run measured something else.
- **A disturbance** (:func:`judge_disturbance`): the machine took time from the run (the
  emulator released packets late, the endpoints waited for a CPU or the hypervisor took
  it). Lateness, steal, CPU pressure and endpoint CPU are recorded for every run, but a
  run is judged by how much the disturbance *could have changed what it measures*: an
  estimate in seconds (:class:`Disturbance`, an upper estimate) against a stated fraction
  of the measured time and of the arm effect under test. A busy host that took 2 ms from a
  28 s transfer leaves its answer intact; the same 2 ms on a 240 ms request whose gap to
  the bound is 3 ms does not.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

# --- the run itself --------------------------------------------------------------------------

RTT_TOLERANCE_S = 2e-3
RTT_TOLERANCE_FRACTION = 0.02
"""A measured handshake RTT more than max(2 ms, 2 %) above the configured RTT flags the
run (the link issue's accuracy targets are 0.3 ms median, 1 ms p99)."""

LOSS_SIGMAS = 4.0
"""Realised loss further than 4 binomial standard deviations (plus one packet) from the
configured rate flags the run: the path did not have the configured loss."""

MIN_CPU_WINDOW_S = 0.2
"""CPU fractions are measured over at least 200 ms around the request (tick accounting:
10 ms ticks give +-5 % on a 200 ms window, docs/machine.md)."""


def loss_out_of_range(configured: float, dropped: int, trials: int) -> bool:
    if trials <= 0:
        return False
    expected = configured * trials
    sigma = math.sqrt(trials * configured * (1.0 - configured))
    return abs(dropped - expected) > LOSS_SIGMAS * sigma + 1.0


def run_validity(
    *,
    error: str | None,
    sha256_ok: bool | None,
    configured_rtt_s: float,
    measured_rtt_s: float | None,
    loss: Mapping[str, tuple[float, int, int]],
) -> tuple[bool, str | None]:
    """(valid, reason) from what the run itself says; reasons joined with '; ', the most
    basic first."""
    reasons: list[str] = []
    if error:
        reasons.append(f"error: {error}")
    if sha256_ok is False:
        reasons.append("integrity: checksum mismatch")
    if measured_rtt_s is not None:
        limit = max(RTT_TOLERANCE_S, RTT_TOLERANCE_FRACTION * configured_rtt_s)
        if measured_rtt_s - configured_rtt_s > limit:
            reasons.append(
                f"link: RTT {measured_rtt_s * 1e3:.1f} ms vs {configured_rtt_s * 1e3:.1f} ms"
            )
    for direction, (configured, dropped, trials) in loss.items():
        if loss_out_of_range(configured, dropped, trials):
            reasons.append(
                f"link: {direction} loss {dropped}/{trials} vs {configured * 100:g} % configured"
            )
    return (not reasons, "; ".join(reasons) or None)


# --- the disturbance, by its impact ------------------------------------------------------------

DISTURBANCE_MAX_FRACTION = 0.01
"""A disturbance may have moved the measured time by at most 1 %: the report reads ratios to
the bound to three decimals and names gaps of 1.1-1.2 % in the main job
(docs/measurements.md, "The main job"); a disturbance of that size could fake or hide such a gap."""

DISTURBANCE_MAX_EFFECT_FRACTION = 0.10
"""...and by at most a tenth of the arm effect under test (predicted by the bounds of the
level and its baseline, or as the runs so far show it when larger: harness.run.runner
.effect_scales): it can then neither flip the effect's sign nor move it by more than 10 %."""

DISTURBANCE_FLOOR_S = 1e-3
"""A disturbance below 1 ms is within the emulator's own accuracy (1 ms p99 RTT-error
target, docs/machine.md) and never invalidates a run, however short."""

FLIGHT_WORK_S = 0.02
"""How long an endpoint works on a flight it received before the next flight leaves: up to
20 ms on these machines (an HTTP/3 server's handshake crypto and response, aioquic, is
10-40 ms of CPU in bursts; a kernel-TCP endpoint's much less). A wait in that span delays
the next round."""

FLIGHT_GAP_FRACTION = 0.25
"""Packets of one direction belong to one flight until a gap of a quarter of the configured
RTT: the rounds of slow start on a 200 ms path are separated by 150 ms or more, the packets
inside a round by the serialisation time (microseconds)."""


@dataclass(frozen=True)
class Disturbance:
    """What the machine could have added to one request's measured time (an upper estimate;
    None where the quantity was not measured)."""

    lateness_s: float | None
    """Emulator lateness on the request's critical path: per flight of packets (each
    direction, in the request window), the lateness of its latest-released packet, summed.
    A packet released late delays its flight's successors (its ACK, the next round) by at
    most that much; packets of one flight are late in parallel, not in series. A packet
    that entered behind a queue and does not end its flight is not counted: the packets
    queued behind it keep the bottleneck busy while its ACK is late."""
    endpoint_wait_s: float | None
    """Run-queue wait of the client's and the server's main threads (their event loops, which
    do the protocol work) while they were on the request's critical path
    (:func:`flight_wait_s`: sending a flight, or waking for one that arrived and working on
    it; a wait there delays the next round, a wait elsewhere does not; and not while a
    bottleneck held a queue, which absorbs a stall shorter than itself), times the
    share of the host's busy CPU time that processes other than the run's own used
    (:func:`foreign_wait_s`). The rest of the wait is the run's own processes (the real-time
    emulator, the peer stack, the samplers) sharing two cores: it is there on a quiet host
    too, in every run of every arm, and is part of what the testbed measures. Without a
    packet log (kernel netem) the whole wait of the request counts. Measured on connection
    runs beside a second experiment (closing note of issue 10): h3-new's whole main-thread
    waits were 68-166 ms for slow-downs of 4-22 ms against quiet runs; the whole wait was a
    median 2.2 times the slow-down in 35 runs at 84-99 % CPU pressure."""
    endpoint_steal_s: float | None
    """CPU the hypervisor took from the endpoints: their CPU time during the request times
    steal / (1 - steal) (steal is invisible to the guest's scheduler), outside the times a
    bottleneck held a queue (:meth:`CriticalPath.backlog_fraction`), which absorbed it as
    it absorbs a wait."""

    @property
    def total_s(self) -> float | None:
        values = (self.lateness_s, self.endpoint_wait_s, self.endpoint_steal_s)
        parts = [v for v in values if v is not None]
        return math.fsum(parts) if parts else None


def flights(departures_s: Sequence[float], gap_s: float) -> np.ndarray:
    """Index of the first packet of each flight (a run of departures separated by less than
    ``gap_s``) in ``departures_s`` sorted ascending."""
    t = np.asarray(departures_s, dtype=float)
    if t.size == 0:
        return np.zeros(0, dtype=int)
    return np.concatenate(([0], np.nonzero(np.diff(t) >= gap_s)[0] + 1))


def flight_lateness_s(
    departures_s: Sequence[float],
    lateness_s: Sequence[float],
    gap_s: float,
    queued: Sequence[bool] | None = None,
) -> float:
    """Sum over flights of the largest lateness in the flight; early releases count as 0.
    ``queued``: packets that entered behind a queue (:func:`queue_wait_s` above 0); their lateness
    is absorbed by the queue behind them (the sender's next packets are already waiting)
    unless the packet ends its flight, whose release is when the flight has arrived."""
    if len(departures_s) == 0:
        return 0.0
    t = np.asarray(departures_s, dtype=float)
    late = np.clip(np.asarray(lateness_s, dtype=float), 0.0, None)
    order = np.argsort(t, kind="stable")
    t, late = t[order], late[order]
    heads = flights(t, gap_s)
    if queued is not None:
        absorbed = np.asarray(queued, dtype=bool)[order]
        absorbed[np.append(heads[1:] - 1, t.size - 1)] = False  # each flight's last packet
        late = np.where(absorbed, 0.0, late)
    return float(np.maximum.reduceat(late, heads).sum())


@dataclass(frozen=True)
class PacketTimes:
    """The emulator's packets of one direction: when each entered it (sent by an endpoint),
    when it left (reached the other endpoint) and how late it left."""

    sent_s: np.ndarray
    departure_s: np.ndarray
    lateness_s: np.ndarray


@dataclass(frozen=True)
class CriticalPath:
    """The emulator's packets of one request, as flights on its critical path."""

    lateness_s: float
    """:attr:`Disturbance.lateness_s`."""
    starts_s: dict[str, list[float]]
    """Per direction (``up``: client to server), the release time of each flight's first
    packet: when it reached the receiving endpoint."""
    sends_s: dict[str, list[tuple[float, float]]]
    """Per direction, when the sending endpoint put each flight out: (first, last) packet."""
    backlog_s: list[tuple[float, float]] = field(default_factory=list)
    """When a bottleneck of the path held a queue (:func:`backlog_spans`, both directions,
    merged): the path, not an endpoint, set the pace then."""

    @property
    def flights(self) -> dict[str, int]:
        return {name: len(starts) for name, starts in self.starts_s.items()}

    def backlog_fraction(self, start_s: float, end_s: float) -> float:
        """The share of [start_s, end_s] in which a bottleneck held a queue."""
        if end_s <= start_s:
            return 0.0
        inside = [(max(a, start_s), min(b, end_s)) for a, b in self.backlog_s]
        return math.fsum(b - a for a, b in inside if b > a) / (end_s - start_s)

    def endpoint_spans(self, work_s: float = FLIGHT_WORK_S) -> dict[str, list[tuple[float, float]]]:
        """Per endpoint, the spans in which it was on the critical path: sending a flight,
        and receiving one and working on it (``work_s`` after its first packet arrived),
        except while a bottleneck held a queue (:attr:`backlog_s`): an endpoint that stalls
        then delays nothing until the queue has drained, and the part of a stall that
        outlasts the queue leaves a gap that is counted."""
        spans: dict[str, list[tuple[float, float]]] = {"client": [], "server": []}
        for name, starts in self.starts_s.items():
            spans[RECEIVER[name]] += [(t, t + work_s) for t in starts]
        for name, sends in self.sends_s.items():
            spans[SENDER[name]] += sends
        if not self.backlog_s:
            return spans
        return {end: uncovered(parts, self.backlog_s) for end, parts in spans.items()}


def critical_path(
    directions: Mapping[str, PacketTimes],
    start_s: float,
    end_s: float,
    rtt_s: float,
    jitter_s: Mapping[str, float] | None = None,
) -> CriticalPath:
    """The flights and their lateness from each direction's packets, counting the packets
    released within [start_s, end_s]; with each direction's configured ``jitter_s`` known,
    also when its bottleneck held a queue (without it, none is assumed)."""
    gap = max(FLIGHT_GAP_FRACTION * rtt_s, 1e-3)
    total = 0.0
    starts: dict[str, list[float]] = {}
    sends: dict[str, list[tuple[float, float]]] = {}
    backlog: list[tuple[float, float]] = []
    for name, packets in directions.items():
        t = np.asarray(packets.departure_s, dtype=float)
        inside = (t >= start_s) & (t <= end_s)
        late = np.asarray(packets.lateness_s, dtype=float)[inside]
        sent = np.asarray(packets.sent_s, dtype=float)[inside]
        queued = None
        if jitter_s is not None:
            wait = queue_wait_s(sent, t[inside] - late, jitter_s.get(name, 0.0))
            backlog += backlog_spans(sent, wait)
            queued = wait > 0
        total += flight_lateness_s(t[inside], late, gap, queued)
        order = np.argsort(t[inside], kind="stable")
        kept, sent = t[inside][order], sent[order]
        heads = flights(kept, gap)
        starts[name] = [float(v) for v in kept[heads]]
        sends[name] = [
            (float(part.min()), float(part.max()))
            for part in np.split(sent, heads[1:])
            if part.size
        ]
    return CriticalPath(lateness_s=total, starts_s=starts, sends_s=sends, backlog_s=merged(backlog))


QUEUE_MIN_S = 1e-6
"""A sojourn longer than the shortest by less than this is the same (float rounding of the
emulator's schedule, microsecond timestamps)."""


def queue_wait_s(sent_s: np.ndarray, due_s: np.ndarray, jitter_s: float = 0.0) -> np.ndarray:
    """Per packet of one direction, how long it waited behind others at the bottleneck: its
    sojourn (entry to scheduled release) beyond the direction's smallest one (propagation
    and one serialisation), less 2 x ``jitter_s``, what a jittered delay alone can add
    (netem.linkspec: uniform, never reordering); 0 for a packet without both times."""
    sojourn = np.asarray(due_s, dtype=float) - np.asarray(sent_s, dtype=float)
    known = np.isfinite(sojourn)
    if not known.any():
        return np.zeros(sojourn.size)
    wait = sojourn - sojourn[known].min() - 2.0 * jitter_s
    return np.where(known & (wait > QUEUE_MIN_S), wait, 0.0)


def backlog_spans(sent_s: np.ndarray, wait_s: np.ndarray) -> list[tuple[float, float]]:
    """When one direction's bottleneck held a queue: a packet that waited ``wait_s``
    (:func:`queue_wait_s`) found it busy from its entry for that long."""
    busy = wait_s > 0
    return [
        (float(a), float(a + q))
        for a, q in zip(np.asarray(sent_s)[busy], wait_s[busy], strict=True)
    ]


def merged(spans: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of ``spans`` as sorted, disjoint spans."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def uncovered(
    spans: Sequence[tuple[float, float]], cover: Sequence[tuple[float, float]]
) -> list[tuple[float, float]]:
    """The parts of ``spans`` outside ``cover`` (sorted, disjoint: :func:`merged`); a span
    of one instant (a flight of one packet) is kept when not covered."""
    out: list[tuple[float, float]] = []
    for a, b in spans:
        cursor = a
        for c, d in cover:
            if d < cursor or c > b:
                continue
            if c > cursor:
                out.append((cursor, c))
            cursor = max(cursor, d)
            if cursor > b:
                break
        if cursor < b or (cursor == a == b):
            out.append((cursor, b))
    return out


RECEIVER = {"up": "server", "down": "client"}
"""Which endpoint a direction's flights reach."""
SENDER = {"up": "client", "down": "server"}
"""Which endpoint sends a direction's flights."""


def flight_wait_s(
    spans_s: Sequence[tuple[float, float]], waits: Sequence[tuple[float, float]]
) -> float:
    """The run-queue wait an endpoint's main thread could have added to the request: its
    cumulative wait over every sampling interval that overlaps one of the spans in which it
    was on the critical path (:meth:`CriticalPath.endpoint_spans`), each interval counted
    once. ``waits``: (time, cumulative wait) samples in time order."""
    if len(waits) < 2 or not spans_s:
        return 0.0
    times = np.asarray([t for t, _ in waits], dtype=float)
    values = np.asarray([w for _, w in waits], dtype=float)
    bounds = np.asarray(spans_s, dtype=float).reshape(-1, 2)
    first = np.searchsorted(times, bounds[:, 0], side="right")
    last = np.searchsorted(times, bounds[:, 1], side="left")
    intervals = {i for a, b in zip(first, last, strict=True) for i in range(int(a), int(b) + 1)}
    intervals = {i for i in intervals if 0 < i < len(times)}
    return float(sum(values[i] - values[i - 1] for i in intervals))


def endpoint_steal_s(
    cpu_fractions: Sequence[float | None], window_s: float, steal: float | None
) -> float | None:
    """:attr:`Disturbance.endpoint_steal_s`: the endpoints' CPU seconds over the window,
    stretched by the host's steal fraction; None when steal was not measured."""
    if steal is None or not math.isfinite(steal):
        return None
    steal = min(max(steal, 0.0), 0.99)
    cpu_s = sum(f for f in cpu_fractions if f is not None and math.isfinite(f)) * window_s
    return cpu_s * steal / (1.0 - steal)


def foreign_wait_s(waits_s: Sequence[float], foreign_share: float | None) -> float | None:
    """:attr:`Disturbance.endpoint_wait_s`: the main threads' waits times the foreign share
    of the host's CPU (all of the wait when the share was not measured); None without a
    measured wait."""
    if not waits_s:
        return None
    share = 1.0 if foreign_share is None or not math.isfinite(foreign_share) else foreign_share
    return math.fsum(waits_s) * min(max(share, 0.0), 1.0)


def own_wait_s(waits_s: Sequence[float], foreign_share: float | None) -> float | None:
    """The part of the main threads' critical-path waits the run's own processes caused
    (the emulator, the peer stack, the samplers on the same cores): not a disturbance but
    part of what the run measures, named in its gap ("CPU: the endpoints"); None without a
    measured wait or share."""
    if not waits_s or foreign_share is None or not math.isfinite(foreign_share):
        return None
    return math.fsum(waits_s) * (1.0 - min(max(foreign_share, 0.0), 1.0))


def disturbance_limit_s(total_s: float, effect_s: float | None = None) -> float:
    """The largest disturbance a valid run may carry: :data:`DISTURBANCE_MAX_FRACTION` of its
    measured time and :data:`DISTURBANCE_MAX_EFFECT_FRACTION` of the arm effect (when the
    level has one), never below :data:`DISTURBANCE_FLOOR_S`."""
    limit = DISTURBANCE_MAX_FRACTION * total_s
    if effect_s is not None and math.isfinite(effect_s) and effect_s > 0:
        limit = min(limit, DISTURBANCE_MAX_EFFECT_FRACTION * effect_s)
    return max(DISTURBANCE_FLOOR_S, limit)


def judge_disturbance(
    disturbance: Disturbance, total_s: float | None, effect_s: float | None = None
) -> tuple[bool, str | None, float | None]:
    """(acceptable, reason, limit_s) of one run's disturbance. A run without a measured
    time has nothing a disturbance could change (its own reason says why)."""
    amount = disturbance.total_s
    if total_s is None or not math.isfinite(total_s) or total_s <= 0:
        return (True, None, None)
    limit = disturbance_limit_s(total_s, effect_s)
    if amount is None or amount <= limit:
        return (True, None, limit)
    parts = {
        "emulator lateness": disturbance.lateness_s,
        "endpoint run-queue wait": disturbance.endpoint_wait_s,
        "steal from endpoints": disturbance.endpoint_steal_s,
    }
    detail = ", ".join(f"{k} {v * 1e3:.2f}" for k, v in parts.items() if v)
    reason = (
        f"disturbance: {amount * 1e3:.2f} ms ({detail}) could have moved the "
        f"{total_s * 1e3:.1f} ms measured by more than {limit * 1e3:.2f} ms"
    )
    return (False, reason, limit)


def disturbance_columns(
    disturbance: Disturbance, total_s: float | None, effect_s: float | None
) -> dict[str, float | None]:
    """The runs.csv columns of a run's disturbance estimate (see RUN_COLUMNS)."""
    amount = disturbance.total_s
    fraction = (
        amount / total_s
        if amount is not None and total_s is not None and math.isfinite(total_s) and total_s > 0
        else None
    )
    return {
        "disturbance_s": amount,
        "disturbance_fraction": fraction,
        "disturbance_lateness_s": disturbance.lateness_s,
        "disturbance_wait_s": disturbance.endpoint_wait_s,
        "disturbance_steal_s": disturbance.endpoint_steal_s,
        "effect_scale_s": effect_s,
    }


Verdict = tuple[bool, str | None]


def combine(first: Verdict, second: Verdict) -> Verdict:
    """Both judgements: valid when both are; reasons joined in order."""
    reasons = [r for r in (first[1], second[1]) if r]
    return (first[0] and second[0], "; ".join(reasons) or None)
