"""Analytic lower bounds for one request on one path (shared MODELS.md), as plain functions.

Units are SI throughout: seconds, bytes, bits per second; loss is a fraction in [0, 1).
Every function rejects impossible input with :class:`~tbcore.errors.SpecError` (a
``ValueError``) that names the argument, so a notebook user sees which one was wrong.

The section numbers in the docstrings are those of MODELS.md. :func:`request_time` is the
bound the harness attaches to every run; :func:`worked_examples` recomputes every worked
example of MODELS.md from these functions (``testbed bounds`` prints them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Required, TypedDict, Unpack

import numpy as np

from netem.air import AirSpec
from tbcore import fecmath
from tbcore.errors import SpecError
from tbcore.settings import TCP_DEFAULT_MSS_BYTES
from tbcore.stats import binomial_cdf

if TYPE_CHECKING:
    from netem.linkspec import LinkSpec

BITS_PER_BYTE = 8

INITCWND_SEGMENTS = 10
"""Initial congestion window in segments: RFC 6928 (TCP); RFC 9002 section 7.2 gives QUIC
min(10 * max_datagram_size, max(14720, 2 * max_datagram_size)), the same 10 segments for
datagrams up to 1472 bytes."""

TCP_MSS_BYTES = TCP_DEFAULT_MSS_BYTES
"""TCP payload per segment on a 1500-byte Ethernet MTU with IPv4 and the timestamp option:
1500 - 20 (IPv4) - 20 (TCP) - 12 (RFC 7323 timestamps). Linux enables timestamps by default."""

MODELS_MSS_BYTES = 1460
"""The MSS of MODELS.md section 6 (1500 - 40, no TCP options): the default of
:func:`slow_start_rounds`, as the issue specifies it."""

QUIC_MAX_DATAGRAM_BYTES = 1200
"""QUIC's max_datagram_size: the RFC 9000 section 14 minimum, and aioquic's default. The
request bound counts the whole datagram as payload for QUIC: its frames, packet header and
AEAD tag make the real payload smaller, so this errs on the low side, as a bound must."""

FEC_NEW_SESSION_RTTS = 3
"""A new FEC session: TCP and TLS 1.3 for the keys (2 RTT), then the path probe (1 RTT)."""

TLS13_TCP_SETUP_RTTS = 2
"""TCP handshake (1 RTT) then the TLS 1.3 full handshake (1 RTT) before the request: section 4."""

SETUP_RTTS: dict[tuple[str, str], int] = {
    ("h2", "new"): TLS13_TCP_SETUP_RTTS,
    # TLS 1.3 early data still waits for TCP's SYN/SYN-ACK (TCP Fast Open is not modelled).
    ("h2", "0rtt"): 1,
    ("h2", "reused"): 0,
    ("h3", "new"): 1,  # QUIC combines transport and TLS 1.3 in one round trip (RFC 9000 s7)
    ("h3", "0rtt"): 0,  # resumed session, accepted 0-RTT data (RFC 9001 section 4.6)
    ("h3", "reused"): 0,
    # FEC: TCP + TLS 1.3 control channel (2 RTT), then the path probe (1 RTT and a train)
    ("fec", "new"): FEC_NEW_SESSION_RTTS,
    ("fec", "reused"): 0,
}
"""Round trips before the first request byte may leave, by (protocol, connection)."""

PROTOCOLS = ("h2", "h3")
"""Protocols of :func:`request_time` (the FEC protocol has its own, :func:`fec_request_time`)."""
CONNECTIONS = ("new", "reused", "0rtt")

MATHIS_C_PERIODIC = math.sqrt(3.0 / 2.0)
"""Mathis et al. (1997) constant for periodic loss with an ACK per packet (~1.22)."""


# --- argument checks -------------------------------------------------------------------


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(name, f"must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise SpecError(name, f"must be finite, got {value!r}")
    return number


def _non_negative(name: str, value: object) -> float:
    number = _number(name, value)
    if number < 0:
        raise SpecError(name, f"must be >= 0, got {value!r}")
    return number


def _positive(name: str, value: object) -> float:
    number = _number(name, value)
    if number <= 0:
        raise SpecError(name, f"must be > 0, got {value!r}")
    return number


def _count(name: str, value: object, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        # numpy integers and whole floats are common in notebooks: accept them when exact
        try:
            as_int = int(value)  # type: ignore[call-overload]
        except (TypeError, ValueError, OverflowError):
            raise SpecError(name, f"must be a whole number, got {value!r}") from None
        if isinstance(value, bool) or as_int != value:
            raise SpecError(name, f"must be a whole number, got {value!r}")
        value = as_int
    if value < minimum:
        raise SpecError(name, f"must be >= {minimum}, got {value!r}")
    return value


def _loss(name: str, value: object) -> float:
    number = _number(name, value)
    if not 0.0 <= number < 1.0:
        raise SpecError(name, f"must lie in [0, 1), got {value!r}")
    return number


def _probability(name: str, value: object) -> float:
    number = _number(name, value)
    if not 0.0 <= number <= 1.0:
        raise SpecError(name, f"must lie in [0, 1], got {value!r}")
    return number


def _open_unit(name: str, value: object) -> float:
    number = _number(name, value)
    if not 0.0 < number < 1.0:
        raise SpecError(name, f"must lie in (0, 1), got {value!r}")
    return number


def _sequence(name: str, values: object, check: Any) -> list[float]:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise SpecError(name, f"must be a sequence of numbers, got {type(values).__name__}")
    if len(values) == 0:  # type: ignore[arg-type]
        raise SpecError(name, "must not be empty")
    return [check(f"{name}[{i}]", v) for i, v in enumerate(values)]  # type: ignore[attr-defined]


# --- 1. serial request -----------------------------------------------------------------


def serial_time(
    upload_bytes: float,
    download_bytes: float,
    up_bps: float,
    down_bps: float,
    rtt_s: float,
    processing_s: float = 0.0,
) -> float:
    """Section 1: ``S_u/B_u + R + T_c + S_d/B_d`` on an established connection, in seconds."""
    upload = _non_negative("upload_bytes", upload_bytes)
    download = _non_negative("download_bytes", download_bytes)
    up = _positive("up_bps", up_bps)
    down = _positive("down_bps", down_bps)
    rtt = _non_negative("rtt_s", rtt_s)
    processing = _non_negative("processing_s", processing_s)
    return upload * BITS_PER_BYTE / up + rtt + processing + download * BITS_PER_BYTE / down


# --- 2. chunk pipeline -----------------------------------------------------------------


def pipeline(
    ready_s: Sequence[float],
    process_s: Sequence[float],
    send_s: Sequence[float],
    delay_s: Sequence[float],
) -> list[float]:
    """Section 2: arrival times ``r_i`` of chunks through one processor and one egress.

    ``c_i = max(a_i, c_{i-1}) + m_i``, ``u_i = max(c_i, u_{i-1}) + s_i``, ``r_i = u_i + d_i``.
    """
    ready = _sequence("ready_s", ready_s, _non_negative)
    process = _sequence("process_s", process_s, _non_negative)
    send = _sequence("send_s", send_s, _non_negative)
    delay = _sequence("delay_s", delay_s, _non_negative)
    for name, values in (("process_s", process), ("send_s", send), ("delay_s", delay)):
        if len(values) != len(ready):
            raise SpecError(name, f"has {len(values)} items, ready_s has {len(ready)}")
    processed = sent = -math.inf
    arrivals: list[float] = []
    for a, m, s, d in zip(ready, process, send, delay, strict=True):
        processed = max(a, processed) + m
        sent = max(processed, sent) + s
        arrivals.append(sent + d)
    return arrivals


# --- 3. playback continuity ------------------------------------------------------------


@dataclass(frozen=True)
class Playback:
    """When each chunk starts playing, and how long the player waited for late chunks."""

    start_s: list[float]
    """Start time of each chunk: ``p_0 = r_0 + J``, ``p_i = max(r_i, p_{i-1} + tau)``."""
    stall_s: float
    """Total stall added after playback began: the sum of ``r_i - (p_{i-1} + tau)`` where > 0."""
    stall_count: int
    """How many chunks arrived after their slot (each is one stall)."""


def playback(arrivals_s: Sequence[float], chunk_s: float, initial_buffer_s: float) -> Playback:
    """Section 3: a player that waits ``initial_buffer_s`` and never drops a late chunk."""
    arrivals = _sequence("arrivals_s", arrivals_s, _non_negative)
    tau = _positive("chunk_s", chunk_s)
    buffer = _non_negative("initial_buffer_s", initial_buffer_s)
    # Slots are anchor + j * tau from the last stall, not a running sum of tau: the same
    # recurrence without accumulated rounding (a chunk exactly on time is never "late").
    anchor = arrivals[0] + buffer
    anchor_index = 0
    starts = [anchor]
    stall = 0.0
    stalls = 0
    for index in range(1, len(arrivals)):
        slot = anchor + (index - anchor_index) * tau
        arrival = arrivals[index]
        if arrival > slot:
            stall += arrival - slot
            stalls += 1
            anchor, anchor_index = arrival, index
            starts.append(arrival)
        else:
            starts.append(slot)
    return Playback(start_s=starts, stall_s=stall, stall_count=stalls)


def buffer_depletion_s(buffered_bits: float, play_bps: float, receive_bps: float) -> float:
    """Section 3: seconds until a buffer of ``b`` bits empties, ``b / (P - Q)``.

    ``math.inf`` when the receive rate keeps up. ``receive_bps`` may be 0 (an outage).
    """
    bits = _non_negative("buffered_bits", buffered_bits)
    play = _positive("play_bps", play_bps)
    receive = _non_negative("receive_bps", receive_bps)
    if receive >= play:
        return math.inf
    return bits / (play - receive)


# --- 4. connection set-up --------------------------------------------------------------


def setup_rtts(protocol: str, connection: str) -> int:
    """Section 4: round trips before the request may leave (see :data:`SETUP_RTTS`)."""
    if protocol not in (*PROTOCOLS, "fec"):
        raise SpecError("protocol", f"must be one of {', '.join(PROTOCOLS)}, fec, got {protocol!r}")
    if (protocol, connection) not in SETUP_RTTS:
        known = sorted(c for p, c in SETUP_RTTS if p == protocol)
        raise SpecError("connection", f"must be one of {', '.join(known)}, got {connection!r}")
    return SETUP_RTTS[(protocol, connection)]


def setup_time_s(protocol: str, connection: str, rtt_s: float, requests: int = 1) -> float:
    """Section 4: set-up time of ``requests`` requests, each on the connection state given."""
    rtt = _non_negative("rtt_s", rtt_s)
    count = _count("requests", requests)
    return setup_rtts(protocol, connection) * rtt * count


# --- 5. window bound -------------------------------------------------------------------


def window_throughput_bps(window_bytes: float, rtt_s: float, path_bps: float) -> float:
    """Section 5: ``min(B_path, W / R)`` in bit/s (``R = 0`` leaves only the path rate)."""
    window = _positive("window_bytes", window_bytes)
    rtt = _non_negative("rtt_s", rtt_s)
    path = _positive("path_bps", path_bps)
    if rtt == 0:
        return path
    return min(path, window * BITS_PER_BYTE / rtt)


def bdp_bytes(rate_bps: float, rtt_s: float) -> float:
    """Section 5: the bandwidth-delay product, the window that fills the path."""
    rate = _positive("rate_bps", rate_bps)
    rtt = _non_negative("rtt_s", rtt_s)
    return rate / BITS_PER_BYTE * rtt


# --- 6. slow start ---------------------------------------------------------------------


def slow_start_rounds(
    size_bytes: int, mss_bytes: int = MODELS_MSS_BYTES, initcwnd_segments: int = INITCWND_SEGMENTS
) -> int:
    """Section 6: the smallest k with ``IW * MSS * (2^k - 1) >= size``: windows a cold
    connection needs to send ``size_bytes`` (0 for nothing to send)."""
    size = _count("size_bytes", size_bytes)
    mss = _count("mss_bytes", mss_bytes, minimum=1)
    iw = _count("initcwnd_segments", initcwnd_segments, minimum=1)
    first = iw * mss
    rounds = 0
    while first * ((1 << rounds) - 1) < size:
        rounds += 1
    return rounds


# --- 7. header and ACK overhead --------------------------------------------------------


def wire_bytes(
    payload_bytes: int, packet_payload_bytes: int, header_bytes: int, ack_bytes: int
) -> tuple[int, int]:
    """Section 7: (data packets, bytes on the wire) = ``(n, payload + n * (H + A))``."""
    payload = _count("payload_bytes", payload_bytes)
    per_packet = _count("packet_payload_bytes", packet_payload_bytes, minimum=1)
    header = _count("header_bytes", header_bytes)
    ack = _count("ack_bytes", ack_bytes)
    packets = -(-payload // per_packet)
    return packets, payload + packets * (header + ack)


# --- 8. Mathis -------------------------------------------------------------------------


def mathis_throughput_bps(mss_bytes: float, rtt_s: float, loss: float, c: float = 1.0) -> float:
    """Section 8: ``(MSS / R) * C / sqrt(p)`` in bit/s; ``math.inf`` at zero loss.

    ``c = 1`` is the simplified bound; :data:`MATHIS_C_PERIODIC` the periodic-loss one.
    """
    mss = _positive("mss_bytes", mss_bytes)
    rtt = _positive("rtt_s", rtt_s)
    p = _loss("loss", loss)
    constant = _positive("c", c)
    if p == 0:
        return math.inf
    return mss * BITS_PER_BYTE / rtt * constant / math.sqrt(p)


# --- 9. retransmission rounds ----------------------------------------------------------


def _all_within(packets: int, loss: float, rounds: int) -> float:
    """``P(K <= k) = (1 - p^k)^n``, computed without cancellation for small ``p^k``."""
    if packets == 0:
        return 1.0
    if rounds == 0:
        return 0.0
    lost_every_time = loss**rounds
    if lost_every_time == 0.0:
        return 1.0
    return math.exp(packets * math.log1p(-lost_every_time))


def retransmission_rounds(packets: int, loss: float, quantile: float | None = None) -> float | int:
    """Section 9: rounds K until all ``packets`` arrive under independent loss ``p``.

    With ``quantile=None``, E[K] = sum_{k>=0} (1 - (1 - p^k)^n) as a float; otherwise the
    smallest k (an int) with ``P(K <= k) = (1 - p^k)^n >= quantile``. Zero packets need 0.
    """
    n = _count("packets", packets)
    p = _loss("loss", loss)
    if quantile is not None:
        q = _open_unit("quantile", quantile)
        if n == 0:
            return 0
        if p == 0:
            return 1
        # closed form, then step over any floating-point edge
        k = max(1, math.ceil(math.log(-math.expm1(math.log(q) / n)) / math.log(p)))
        while k > 1 and _all_within(n, p, k - 1) >= q:
            k -= 1
        while _all_within(n, p, k) < q:
            k += 1
        return k
    return _expected_rounds(n, p)


def _expected_rounds(packets: int, loss: float) -> float:
    """E[K] = sum_{k>=0} P(K > k) = 1 + sum_{k>=1} (1 - (1 - p^k)^n), summed in numpy blocks
    that grow geometrically until a term falls below 1e-17: about log(n) / (1 - p) terms, so
    a loss close to 1 stays seconds, not minutes."""
    if packets == 0:
        return 0.0
    if loss == 0.0:
        return 1.0
    log_loss = math.log(loss)
    sums = [1.0]  # k = 0: P(K > 0) = 1
    start, size = 1, 256
    while True:
        k = np.arange(start, start + size, dtype=np.float64)
        terms = -np.expm1(packets * np.log1p(-np.exp(k * log_loss)))
        sums.append(float(terms.sum()))
        if terms[-1] < 1e-17:
            return math.fsum(sums)
        start += size
        size = min(size * 2, 1 << 20)


def retransmission_time_s(
    base_s: float, rtt_s: float, packets: int, loss: float, quantile: float | None = None
) -> float:
    """Section 9: completion = base + (K - 1) * R, with K expected or at a quantile."""
    base = _non_negative("base_s", base_s)
    rtt = _non_negative("rtt_s", rtt_s)
    rounds = retransmission_rounds(packets, loss, quantile)
    return base + max(0.0, rounds - 1) * rtt


# --- 10. forward error correction ------------------------------------------------------


def fec_success_probability(data_symbols: int, repair_symbols: int, loss: float) -> float:
    """Section 10: P(at most r of k + r symbols lost), the exact binomial sum."""
    k = _count("data_symbols", data_symbols, minimum=1)
    r = _count("repair_symbols", repair_symbols)
    p = _loss("loss", loss)
    return _binomial_cdf(r, k + r, p)


def _binomial_cdf(r: int, n: int, p: float) -> float:
    """P(at most r of n lost) under independent loss p (scipy.stats.binom)."""
    return binomial_cdf(r, n, p)


def fec_repair_symbols(data_symbols: int, loss: float, target: float = 0.999) -> int:
    """Section 10: the smallest r with ``P(at most r of k + r lost) >= target`` (exact binomial).

    The same function the FEC stack sizes its redundancy with (:mod:`tbcore.fecmath`).
    """
    k = _count("data_symbols", data_symbols, minimum=1)
    p = _loss("loss", loss)
    goal = _open_unit("target", target)
    return fecmath.repair_symbols(k, p, goal)


@dataclass(frozen=True)
class FecBound:
    """Section 10: a FEC request's bound, by part: set-up, then every source and repair
    symbol of both directions at the path rate, one round trip of propagation and the
    processing; no retransmission round."""

    setup_s: float
    serialisation_s: float
    """``(k_up + r_up) * T / B_up + (k_down + r_down) * T / B_down``."""
    propagation_s: float
    processing_s: float
    total_s: float = field(init=False)

    def __post_init__(self) -> None:
        total = math.fsum((self.setup_s, self.serialisation_s, self.propagation_s))
        object.__setattr__(self, "total_s", total + self.processing_s)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def fec_request_time(
    *,
    rtt_s: float,
    up_bps: float,
    down_bps: float,
    up_symbols: int,
    down_symbols: int,
    symbol_bytes: int,
    processing_s: float = 0.0,
    connection: str = "reused",
) -> FecBound:
    """Section 10: the bound of a FEC request whose transfers carried ``up_symbols`` and
    ``down_symbols`` symbols (source + repair) of ``symbol_bytes`` payload each (headers
    left out, as the section's worked example counts 1448-byte payloads)."""
    rtt = _non_negative("rtt_s", rtt_s)
    up = _positive("up_bps", up_bps)
    down = _positive("down_bps", down_bps)
    n_up = _count("up_symbols", up_symbols)
    n_down = _count("down_symbols", down_symbols)
    size = _count("symbol_bytes", symbol_bytes, minimum=1)
    processing = _non_negative("processing_s", processing_s)
    serial = n_up * size * BITS_PER_BYTE / up + n_down * size * BITS_PER_BYTE / down
    return FecBound(setup_rtts("fec", connection) * rtt, serial, rtt, processing)


# --- 12. two paths ---------------------------------------------------------------------


def split_fractions(rates_bps: Sequence[float]) -> list[float]:
    """Section 12: the share of the bytes for each path that makes all finish together."""
    rates = _sequence("rates_bps", rates_bps, _positive)
    total = math.fsum(rates)
    return [rate / total for rate in rates]


def split_time_s(
    size_bytes: float, rates_bps: Sequence[float], exit_bps: float | None = None
) -> float:
    """Section 12: ``S / sum(B_i)`` over independent paths, never below ``S / E`` when they
    share an exit of rate ``E``."""
    size = _non_negative("size_bytes", size_bytes)
    rates = _sequence("rates_bps", rates_bps, _positive)
    seconds = size * BITS_PER_BYTE / math.fsum(rates)
    if exit_bps is not None:
        seconds = max(seconds, size * BITS_PER_BYTE / _positive("exit_bps", exit_bps))
    return seconds


def duplicate_failure(p1: float, p2: float, shared: float = 0.0) -> float:
    """Section 12: ``q + (1 - q) p1 p2``: a copy on each path, a shared end point failing
    with ``q``. Failure probabilities may be 1 (a path that is down)."""
    a = _probability("p1", p1)
    b = _probability("p2", p2)
    q = _probability("shared", shared)
    return q + (1.0 - q) * a * b


def duplicate_time_s(
    size_bytes: float, rates_bps: Sequence[float], exit_bps: float | None = None
) -> float:
    """Section 12, duplicate: the first complete copy needs ``S / max(B_i)`` on its own path;
    behind a shared exit both copies cross it, so the exit carries at least ``S`` too."""
    size = _non_negative("size_bytes", size_bytes)
    rates = _sequence("rates_bps", rates_bps, _positive)
    seconds = size * BITS_PER_BYTE / max(rates)
    if exit_bps is not None:
        seconds = max(seconds, size * BITS_PER_BYTE / _positive("exit_bps", exit_bps))
    return seconds


def duplicate_failover_time_s(
    size_bytes: float,
    rates_bps: Sequence[float],
    outage_at_s: float,
    failed: int,
    exit_bps: float | None = None,
) -> float:
    """Section 12, duplicate, path ``failed`` lost at ``outage_at_s``: if its copy was not
    complete by then, the surviving copy (which never shared the work) is the first one."""
    size = _non_negative("size_bytes", size_bytes)
    rates = _sequence("rates_bps", rates_bps, _positive)
    at = _non_negative("outage_at_s", outage_at_s)
    if not 0 <= failed < len(rates) or len(rates) < 2:
        raise SpecError("failed", f"must index one of {len(rates)} paths, got {failed!r}")
    if size * BITS_PER_BYTE / rates[failed] <= at:
        return duplicate_time_s(size, rates, exit_bps)
    survivors = [r for i, r in enumerate(rates) if i != failed]
    return duplicate_time_s(size, survivors, exit_bps)


def failover_time_s(
    size_bytes: float,
    rates_bps: Sequence[float],
    outage_at_s: float,
    surviving_bps: float,
    exit_bps: float | None = None,
) -> float:
    """Section 12 with a path lost at ``outage_at_s`` into the transfer: the ideal split
    carries ``sum(B_i)`` (at most ``E``) until then, the surviving path the rest. The
    measured time above this is the failover's cost: detection plus re-sending what was
    in flight on the dead path."""
    size = _non_negative("size_bytes", size_bytes)
    rates = _sequence("rates_bps", rates_bps, _positive)
    at = _non_negative("outage_at_s", outage_at_s)
    survivor = _positive("surviving_bps", surviving_bps)
    both = math.fsum(rates)
    if exit_bps is not None:
        exit_rate = _positive("exit_bps", exit_bps)
        both = min(both, exit_rate)
        survivor = min(survivor, exit_rate)
    done_bytes = both / BITS_PER_BYTE * at
    if done_bytes >= size:
        return size * BITS_PER_BYTE / both
    return at + (size - done_bytes) * BITS_PER_BYTE / survivor


# --- the request bound -----------------------------------------------------------------


@dataclass(frozen=True)
class DirectionRounds:
    """How one direction's bytes leave a sender whose window grows by slow start."""

    rounds: int
    """Windows (round trips of sending) the bytes need; 0 for no bytes."""
    feedback_s: float
    """Idle time waiting for ACKs while the window grows (slow start)."""
    window_s: float
    """Idle time waiting for ACKs while the window sits at the cap."""


def direction_rounds(
    size_bytes: int,
    rate_bps: float,
    rtt_s: float,
    *,
    initial_window_bytes: float,
    mss_bytes: int,
    window_bytes: float | None = None,
) -> DirectionRounds:
    """The round model of one direction (Kurose and Ross's slow-start latency model).

    Window k carries ``w_k = min(IW * MSS * 2^(k-1), W)`` bytes back to back at the path
    rate; the next window may start when the first segment's ACK is back, ``MSS/B + R``
    after the window started. The sender is therefore idle ``max(0, R + MSS/B - w_k/B)``
    after each window but the last (a window below one MSS is one short segment): the
    serialisation of the earlier windows overlaps the
    wait for their ACKs, so only the idle part is counted here and all bytes' serialisation
    once, in the request's serialisation part. With an unlimited rate the rounds are those
    of :func:`slow_start_rounds` and the idle time is (rounds - 1) * R. ``initial_window_bytes
    = math.inf`` is a warm window: one round, no idle time unless the cap binds.
    """
    size = _count("size_bytes", size_bytes)
    rate = _positive("rate_bps", rate_bps)
    rtt = _non_negative("rtt_s", rtt_s)
    mss = _count("mss_bytes", mss_bytes, minimum=1)
    window = (
        math.inf
        if initial_window_bytes == math.inf
        else _positive("initial_window_bytes", initial_window_bytes)
    )
    cap = math.inf if window_bytes is None else _positive("window_bytes", window_bytes)
    window = min(window, cap)
    if size == 0:
        return DirectionRounds(0, 0.0, 0.0)
    if window == math.inf:
        return DirectionRounds(1, 0.0, 0.0)
    byte_s = BITS_PER_BYTE / rate
    remaining = size
    rounds = 0
    feedback = 0.0
    while remaining > 0 and window < cap:
        remaining -= min(window, remaining)
        rounds += 1
        if remaining > 0:
            feedback += max(0.0, rtt + (min(mss, window) - window) * byte_s)
        window = min(window * 2, cap)
    capped = 0.0
    if remaining > 0:
        windows = math.ceil(remaining / cap)
        rounds += windows
        capped = (windows - 1) * max(0.0, rtt + (min(mss, cap) - cap) * byte_s)
    return DirectionRounds(rounds, feedback, capped)


class Parts:
    """A bound made of named parts in seconds (mixed into the bound dataclasses): ``PARTS``
    in the order of the request; ``total_s`` sums those not in ``OUTSIDE_TOTAL``."""

    PARTS: ClassVar[tuple[str, ...]] = ()
    OUTSIDE_TOTAL: ClassVar[tuple[str, ...]] = ()

    def _sum_parts(self) -> float:
        return math.fsum(getattr(self, n) for n in self.PARTS if n not in self.OUTSIDE_TOTAL)

    def parts(self) -> dict[str, float]:
        """The parts by name, in the order of the request."""
        return {name: getattr(self, name) for name in self.PARTS}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record for the run's metadata."""
        return asdict(self)  # type: ignore[call-overload]


@dataclass(frozen=True)
class RequestBound(Parts):
    """The lower bound of one request and its parts, in seconds; the inputs ride along.

    ``total_s`` is the loss-free bound: set-up + feedback + window + serialisation +
    propagation + processing. Loss is never mixed into it: with loss the expected extra
    retransmission rounds are the separate part ``retransmission_s``, and ``expected_s``
    is ``total_s + retransmission_s``.
    """

    protocol: str
    """'h2' (HTTP/2 over TLS 1.3 over TCP) or 'h3' (HTTP/3 over QUIC)."""
    connection: str
    """'new', 'reused' (warm window, no set-up) or '0rtt' (resumed, early data accepted)."""
    rtt_s: float
    """Round-trip propagation delay of the path."""
    up_bps: float
    """Client-to-server rate, counted as payload rate (headers ignored: a lower bound)."""
    down_bps: float
    """Server-to-client rate."""
    upload_bytes: int
    """Request body."""
    download_bytes: int
    """Response body."""
    initcwnd_segments: int
    """Initial window in segments (cold connections only)."""
    mss_bytes: int
    """Payload bytes per segment (TCP MSS; QUIC max_datagram_size)."""
    window_bytes: int | None
    """Cap on bytes in flight (flow control or a configured cwnd limit); None for none."""
    up_loss: float
    """Independent loss on the upload direction, used only for ``retransmission_s``."""
    down_loss: float
    """Independent loss on the download direction, used only for ``retransmission_s``."""
    setup_rtts: int
    """Round trips before the request may leave (:data:`SETUP_RTTS`)."""
    setup_s: float
    """Connection set-up: ``setup_rtts * rtt_s``."""
    up_rounds: int
    """Windows the upload needs."""
    down_rounds: int
    """Windows the download needs."""
    feedback_s: float
    """Idle time waiting for ACKs during slow start, both directions."""
    window_s: float
    """Idle time waiting for ACKs with the window at its cap, both directions."""
    serialisation_s: float
    """All bytes at the path rate: ``S_u / B_u + S_d / B_d``."""
    propagation_s: float
    """One way up and one way down: ``rtt_s``."""
    processing_s: float
    """Server processing between the last request byte and the first response byte."""
    up_retransmission_rounds: float
    """E[K] of the upload's packets under ``up_loss`` (1 without loss, 0 without bytes)."""
    down_retransmission_rounds: float
    """E[K] of the download's packets under ``down_loss``."""
    retransmission_s: float
    """Expected extra rounds of ideal selective retransmission, times ``rtt_s``."""
    total_s: float = field(init=False)
    """The loss-free lower bound: the sum of the parts but ``retransmission_s``."""
    expected_s: float = field(init=False)
    """``total_s + retransmission_s``: the expected completion under independent loss."""

    PARTS = (
        "setup_s",
        "feedback_s",
        "window_s",
        "serialisation_s",
        "propagation_s",
        "processing_s",
        "retransmission_s",
    )
    OUTSIDE_TOTAL = ("retransmission_s",)

    def __post_init__(self) -> None:
        total = self._sum_parts()
        object.__setattr__(self, "total_s", total)
        object.__setattr__(self, "expected_s", total + self.retransmission_s)


def _transfer(
    protocol: str,
    up_bps: float,
    down_bps: float,
    upload_bytes: int,
    download_bytes: int,
    processing_s: float,
    initcwnd_segments: int,
    mss_bytes: int | None,
) -> tuple[float, float, int, int, float, int, int]:
    """The checked rates, sizes, processing, initial window and MSS of a request (``mss_bytes``
    None: :data:`TCP_MSS_BYTES` for h2, :data:`QUIC_MAX_DATAGRAM_BYTES` otherwise)."""
    if mss_bytes is None:
        mss_bytes = TCP_MSS_BYTES if protocol == "h2" else QUIC_MAX_DATAGRAM_BYTES
    return (
        _positive("up_bps", up_bps),
        _positive("down_bps", down_bps),
        _count("upload_bytes", upload_bytes),
        _count("download_bytes", download_bytes),
        _non_negative("processing_s", processing_s),
        _count("initcwnd_segments", initcwnd_segments, minimum=1),
        _count("mss_bytes", mss_bytes, minimum=1),
    )


def request_time(
    *,
    rtt_s: float,
    up_bps: float,
    down_bps: float,
    upload_bytes: int,
    download_bytes: int,
    protocol: str,
    connection: str,
    processing_s: float = 0.0,
    initcwnd_segments: int = INITCWND_SEGMENTS,
    mss_bytes: int | None = None,
    window_bytes: int | None = None,
    loss: float = 0.0,
    up_loss: float | None = None,
    down_loss: float | None = None,
) -> RequestBound:
    """The lower bound of one request/response on one path, by part.

    Set-up (:data:`SETUP_RTTS`), then the upload in slow-start windows (cold for 'new' and
    '0rtt', warm for 'reused'), processing, then the download the same way. See
    :func:`direction_rounds` for the round model. ``mss_bytes`` defaults to
    :data:`TCP_MSS_BYTES` for h2 and :data:`QUIC_MAX_DATAGRAM_BYTES` for h3. ``loss``
    applies to both directions unless ``up_loss``/``down_loss`` say otherwise; with loss,
    the expected extra rounds of section 9 are the separate part ``retransmission_s``
    (packets = ceil(bytes / mss_bytes) per direction).
    """
    rounds_setup = setup_rtts(protocol, connection)
    rtt = _non_negative("rtt_s", rtt_s)
    up, down, upload, download, processing, iw, mss = _transfer(
        protocol, up_bps, down_bps, upload_bytes, download_bytes, processing_s,
        initcwnd_segments, mss_bytes,
    )  # fmt: skip
    cap = None if window_bytes is None else _count("window_bytes", window_bytes, minimum=1)
    both = _loss("loss", loss)
    loss_up = both if up_loss is None else _loss("up_loss", up_loss)
    loss_down = both if down_loss is None else _loss("down_loss", down_loss)

    initial_window = math.inf if connection == "reused" else float(iw * mss)
    upward = direction_rounds(
        upload, up, rtt, initial_window_bytes=initial_window, mss_bytes=mss, window_bytes=cap
    )
    downward = direction_rounds(
        download, down, rtt, initial_window_bytes=initial_window, mss_bytes=mss, window_bytes=cap
    )
    k_up = retransmission_rounds(-(-upload // mss), loss_up)
    k_down = retransmission_rounds(-(-download // mss), loss_down)
    extra_rounds = max(0.0, k_up - 1) + max(0.0, k_down - 1)
    return RequestBound(
        protocol=protocol,
        connection=connection,
        rtt_s=rtt,
        up_bps=up,
        down_bps=down,
        upload_bytes=upload,
        download_bytes=download,
        initcwnd_segments=iw,
        mss_bytes=mss,
        window_bytes=cap,
        up_loss=loss_up,
        down_loss=loss_down,
        setup_rtts=rounds_setup,
        setup_s=rounds_setup * rtt,
        up_rounds=upward.rounds,
        down_rounds=downward.rounds,
        feedback_s=upward.feedback_s + downward.feedback_s,
        window_s=upward.window_s + downward.window_s,
        serialisation_s=upload * BITS_PER_BYTE / up + download * BITS_PER_BYTE / down,
        propagation_s=rtt,
        processing_s=processing,
        up_retransmission_rounds=float(k_up),
        down_retransmission_rounds=float(k_down),
        retransmission_s=extra_rounds * rtt,
    )


class RequestArgs(TypedDict, total=False):
    """The arguments of :func:`request_time` other than the path's (round trip, rates and
    losses), as :func:`request_time_for_link` takes them; the defaults are
    :func:`request_time`'s."""

    upload_bytes: Required[int]
    download_bytes: Required[int]
    protocol: Required[str]
    connection: Required[str]
    processing_s: float
    initcwnd_segments: int
    mss_bytes: int | None
    window_bytes: int | None


def request_time_for_link(link: LinkSpec, **request: Unpack[RequestArgs]) -> RequestBound:
    """:func:`request_time` on a :class:`~netem.linkspec.LinkSpec`: its round trip, each
    direction's rate and mean loss (Gilbert-Elliott included, as its stationary rate); the
    rest (:class:`RequestArgs`) passes through."""
    for name in ("up", "down"):
        if getattr(link, name).rate_bps is None:
            raise SpecError(f"{name}.rate", "the bound needs a rate on both directions")
    return request_time(
        rtt_s=link.rtt_s,
        up_bps=link.up.rate_bps,  # type: ignore[arg-type]
        down_bps=link.down.rate_bps,  # type: ignore[arg-type]
        up_loss=link.up.mean_loss,
        down_loss=link.down.mean_loss,
        **request,
    )


# --- the relay: a new near hop, a warm long haul (sections 1 and 4) --------------------


@dataclass(frozen=True)
class RelayBound(Parts):
    """A request through a relay that keeps a warm, tuned connection over the long haul.

    The client opens a new connection over the near hop only; the relay forwards the
    request on its long-haul connection, which is open and its window grown (no set-up, no
    slow start: section 1's serial time on an established connection). Parts: the near
    hop's set-up (section 4 on the near round trip) and its slow-start idle time (section 6;
    the near hop's windows overlap nothing), the propagation of both hops one way and back,
    the serialisation of all bytes once at the bottleneck rate (the relay streams: the two
    hops' serialisations overlap), and processing.
    """

    protocol: str
    near_rtt_s: float
    long_rtt_s: float
    up_bps: float
    down_bps: float
    upload_bytes: int
    download_bytes: int
    setup_s: float
    """The near hop's set-up: ``setup_rtts(protocol, 'new') * near_rtt_s``."""
    feedback_s: float
    """Slow-start idle time of the new connection on the near hop (both directions)."""
    propagation_s: float
    """``near_rtt_s + long_rtt_s``: the one long-haul round trip and the near hop's."""
    serialisation_s: float
    """``S_u / B_u + S_d / B_d`` at the bottleneck rates."""
    processing_s: float
    total_s: float = field(init=False)

    PARTS = ("setup_s", "feedback_s", "propagation_s", "serialisation_s", "processing_s")

    def __post_init__(self) -> None:
        object.__setattr__(self, "total_s", self._sum_parts())


def relay_request_time(
    *,
    protocol: str,
    near_rtt_s: float,
    long_rtt_s: float,
    up_bps: float,
    down_bps: float,
    upload_bytes: int,
    download_bytes: int,
    processing_s: float = 0.0,
    near_up_bps: float | None = None,
    near_down_bps: float | None = None,
    initcwnd_segments: int = INITCWND_SEGMENTS,
    mss_bytes: int | None = None,
) -> RelayBound:
    """The lower bound of one request over a new near-hop connection and a warm long haul
    (:class:`RelayBound`). ``up_bps``/``down_bps`` are the bottleneck rates (the long haul's
    when the near hop is faster); ``near_*_bps`` the near hop's (None: unlimited)."""
    rounds_setup = setup_rtts(protocol, "new")
    near = _non_negative("near_rtt_s", near_rtt_s)
    far = _non_negative("long_rtt_s", long_rtt_s)
    up, down, upload, download, processing, iw, mss = _transfer(
        protocol, up_bps, down_bps, upload_bytes, download_bytes, processing_s,
        initcwnd_segments, mss_bytes,
    )  # fmt: skip
    feedback = 0.0
    for size, rate in ((upload, near_up_bps), (download, near_down_bps)):
        near_rate = math.inf if rate is None else _positive("near rate", rate)
        rate_bps = near_rate if math.isfinite(near_rate) else 1e18
        feedback += direction_rounds(
            size, rate_bps, near, initial_window_bytes=float(iw * mss), mss_bytes=mss
        ).feedback_s
    return RelayBound(
        protocol=protocol,
        near_rtt_s=near,
        long_rtt_s=far,
        up_bps=up,
        down_bps=down,
        upload_bytes=upload,
        download_bytes=download,
        setup_s=rounds_setup * near,
        feedback_s=feedback,
        propagation_s=near + far,
        serialisation_s=upload * BITS_PER_BYTE / up + download * BITS_PER_BYTE / down,
        processing_s=processing,
    )


# --- shared airtime: section 7 on one medium for both directions (netem.air) --------------

CHAPTER_DATA_IP_BYTES = 1228
"""The IP packet of the chapter's 302 µs data exchange: 208 µs of PPDU at 54 Mbit/s holds a
MAC frame of 1,240-1,266 bytes, i.e. 1,228 IP bytes (a 1,200-byte QUIC datagram + UDP/IPv4)
+ 36 bytes of MAC header, LLC/SNAP and FCS. (A 1,500-byte packet takes 248 µs.)"""
CHAPTER_ACK_IP_BYTES = 78
"""An ACK-only packet of the chapter's 134 µs exchange (40 µs of PPDU: 70-96 IP bytes)."""
IMAGE_EXCHANGES = 30_800
"""The chapter's count of data (and of feedback) exchanges for the 30 MB / 5 MB image."""


def airtime_s(frames: int, ip_bytes: float, air: AirSpec | None = None) -> float:
    """Medium time of ``frames`` exchanges of ``ip_bytes`` each: access + data PPDU + SIFS +
    MAC ACK (802.11a arithmetic of :mod:`netem.air`; a mean size is rounded to whole bytes)."""
    count = _count("frames", frames)
    size = _non_negative("ip_bytes", ip_bytes)
    air = air or AirSpec()
    return count * air.exchange_ns(round(size)) / 1e9


def airtime_exchanges(
    upload_bytes: int, download_bytes: int, payload_bytes: int, segments_per_ack: float
) -> tuple[int, int]:
    """(data exchanges, feedback exchanges) of a transfer: every ``payload_bytes`` a data
    frame, every ``segments_per_ack`` data frames an ACK-only frame the other way."""
    up = _count("upload_bytes", upload_bytes)
    down = _count("download_bytes", download_bytes)
    payload = _positive("payload_bytes", payload_bytes)
    per_ack = _positive("segments_per_ack", segments_per_ack)
    data = math.ceil(up / payload) + math.ceil(down / payload)
    return data, math.ceil(data / per_ack)


@dataclass(frozen=True)
class AirtimeBound:
    """The exchange model applied to the frames a run carried, and the completion bound."""

    frames: dict[str, int]
    """Frames per ``direction.kind`` (:data:`netem.stats.AIR_KEYS`)."""
    medium_s: dict[str, float]
    """Modelled medium time per ``direction.kind``."""
    data_s: float
    """Medium time of the data frames, both directions."""
    ack_s: float
    """Medium time of the ACK-only frames, both directions."""
    busy_s: float
    """All of it: what the medium must have been occupied for."""
    processing_s: float
    rtt_s: float
    """Wired round-trip propagation."""
    total_s: float
    """Lower bound of the completion: ``max(busy_s, data_s + processing_s + rtt_s)``. The
    medium carries every exchange one at a time, and no data frame can overlap the server's
    processing (the upload precedes it, the download follows it) nor the propagation."""


def airtime_bound(
    frames: dict[str, int],
    ip_bytes: dict[str, int],
    *,
    processing_s: float = 0.0,
    rtt_s: float = 0.0,
    air: AirSpec | None = None,
) -> AirtimeBound:
    """Section 7 on a shared medium: each frame costs one exchange of its size; the frames of
    one kind are taken at their mean size (``ip_bytes / frames``)."""
    air = air or AirSpec()
    medium: dict[str, float] = {}
    for key, count in frames.items():
        kind = key.rpartition(".")[2]
        if kind not in ("data", "ack"):
            raise SpecError("frames", f"{key!r}: a key is direction.kind, kind data or ack")
        n = _count(f"frames[{key}]", count)
        size = _non_negative(f"ip_bytes[{key}]", ip_bytes.get(key, 0))
        medium[key] = airtime_s(n, size / n, air) if n else 0.0
    data = math.fsum(v for k, v in medium.items() if k.endswith(".data"))
    ack = math.fsum(v for k, v in medium.items() if k.endswith(".ack"))
    processing = _non_negative("processing_s", processing_s)
    rtt = _non_negative("rtt_s", rtt_s)
    return AirtimeBound(
        frames=dict(frames),
        medium_s=medium,
        data_s=data,
        ack_s=ack,
        busy_s=data + ack,
        processing_s=processing,
        rtt_s=rtt,
        total_s=max(data + ack, data + processing + rtt),
    )


# --- the worked examples of MODELS.md --------------------------------------------------


@dataclass(frozen=True)
class WorkedExample:
    """One worked example of MODELS.md, recomputed by the functions above."""

    name: str
    """Short name, with the MODELS.md section."""
    inputs: str
    """The inputs, as MODELS.md states them."""
    value: float
    """The computed value, in ``unit``."""
    unit: str
    """Unit of ``value``: s, Mbit/s, bytes, rounds, symbols, %."""
    printed: str
    """The value as MODELS.md prints it; ``value`` rounds to it (see :meth:`matches`)."""

    def rounded(self) -> str:
        """``value`` at the precision of ``printed``."""
        decimals = len(self.printed.partition(".")[2])
        return f"{self.value:.{decimals}f}"

    def matches(self) -> bool:
        return self.rounded() == self.printed


AUDIO_BYTES = 354_640
"""The WAN voice case's audio (DESIGN.md workloads)."""


MBIT = 1e6
"""Bits per second in a Mbit/s (the unit MODELS.md states rates in)."""


def _voice_time_s() -> float:
    """The WAN voice case's ideal serial time (MODELS.md section 1)."""
    return serial_time(AUDIO_BYTES, 0, 333 * MBIT, 333 * MBIT, 0.2, 0.030)


def _audio_packets() -> int:
    """Packets of the voice case's audio at the TCP MSS."""
    return wire_bytes(AUDIO_BYTES, TCP_MSS_BYTES, 0, 0)[0]


def _serial_and_setup_examples() -> list[WorkedExample]:
    """MODELS.md sections 1 (serial request) and 4 (set-up)."""
    return [
        WorkedExample(
            "1 serial request (image)",
            "30 MB up @ 20 Mbit/s, 5 MB down @ 100 Mbit/s, R 0.1 s, Tc 0.3 s",
            serial_time(30_000_000, 5_000_000, 20 * MBIT, 100 * MBIT, 0.1, 0.3),
            "s",
            "12.8",
        ),
        WorkedExample(
            "1 serial request (voice, ideal)",
            "354,640 B up @ 333 Mbit/s, R 0.2 s, Tc 30 ms",
            _voice_time_s(),
            "s",
            "0.2385",
        ),
        WorkedExample(
            "4 set-up per round",
            "30 rounds, R 0.2 s, 2 extra RTT each (h2 new)",
            setup_time_s("h2", "new", 0.2, requests=30),
            "s",
            "12",
        ),
        WorkedExample(
            "4 set-up once",
            "1 connection, R 0.2 s, 2 RTT (h2 new)",
            setup_time_s("h2", "new", 0.2),
            "s",
            "0.4",
        ),
    ]


def _window_examples() -> list[WorkedExample]:
    """MODELS.md sections 5 (window bound, BDP) and 6 (slow start)."""
    window = window_throughput_bps(64_000, 0.1, 20 * MBIT)
    return [
        WorkedExample(
            "5 window bound",
            "W 64,000 B, R 0.1 s, path 20 Mbit/s",
            window / MBIT,
            "Mbit/s",
            "5.12",
        ),
        WorkedExample(
            "5 window bound, 30 MB",
            "30 MB at the window bound above",
            30_000_000 * BITS_PER_BYTE / window,
            "s",
            "46.9",
        ),
        WorkedExample(
            "5 BDP",
            "20 Mbit/s, R 0.1 s",
            bdp_bytes(20 * MBIT, 0.1) / 1000,
            "KB",
            "250",
        ),
        WorkedExample(
            "6 slow-start rounds",
            "354,640 B, IW 10, MSS 1460",
            slow_start_rounds(AUDIO_BYTES, MODELS_MSS_BYTES, INITCWND_SEGMENTS),
            "rounds",
            "5",
        ),
    ]


def _loss_examples() -> list[WorkedExample]:
    """MODELS.md sections 8 (Mathis) and 9 (retransmission)."""
    mathis = mathis_throughput_bps(TCP_MSS_BYTES, 0.2, 0.14)
    voice = _voice_time_s()
    audio_packets = _audio_packets()
    return [
        WorkedExample(
            "8 Mathis (C = 1)",
            "MSS 1448, R 0.2 s, p 0.14",
            mathis / MBIT,
            "Mbit/s",
            "0.155",
        ),
        WorkedExample(
            "8 Mathis, audio",
            "354,640 B at the Mathis bound above",
            AUDIO_BYTES * BITS_PER_BYTE / mathis,
            "s",
            "18.3",
        ),
        WorkedExample(
            "9 retransmission, expected",
            f"{audio_packets} packets, p 0.14, base 0.2385 s, R 0.2 s",
            retransmission_time_s(voice, 0.2, audio_packets, 0.14),
            "s",
            "0.756",
        ),
        WorkedExample(
            "9 retransmission, p99",
            f"{audio_packets} packets, p 0.14, base 0.2385 s, R 0.2 s",
            retransmission_time_s(voice, 0.2, audio_packets, 0.14, quantile=0.99),
            "s",
            "1.24",
        ),
        WorkedExample(
            "9 retransmission, p99 rounds",
            f"{audio_packets} packets, p 0.14",
            retransmission_rounds(audio_packets, 0.14, quantile=0.99),
            "rounds",
            "6",
        ),
    ]


def _fec_examples() -> list[WorkedExample]:
    """MODELS.md section 10 (erasure coding)."""
    audio_packets = _audio_packets()
    repair = fec_repair_symbols(audio_packets, 0.14, 0.999)
    fec_block_s = serial_time(
        (audio_packets + repair) * TCP_MSS_BYTES, 0, 333 * MBIT, 333 * MBIT, 0.2, 0.030
    )
    return [
        WorkedExample(
            "10 FEC repair symbols",
            f"k {audio_packets}, p 0.14, target 0.999",
            repair,
            "symbols",
            "63",
        ),
        WorkedExample(
            "10 FEC redundancy",
            f"r / k with k {audio_packets}",
            100.0 * repair / audio_packets,
            "%",
            "25.7",
        ),
        WorkedExample(
            "10 FEC block time",
            "k + r packets of 1448 B @ 333 Mbit/s, R 0.2 s, Tc 30 ms",
            fec_block_s,
            "s",
            "0.241",
        ),
    ]


def _airtime_examples() -> list[WorkedExample]:
    """MODELS.md section 7 (shared airtime)."""
    return [
        WorkedExample(
            "7 shared airtime (image, chapter 12.4.1)",
            "30,800 data (302 µs) + 30,800 feedback (134 µs) exchanges, 802.11a 54/6 Mbit/s",
            airtime_s(IMAGE_EXCHANGES, CHAPTER_DATA_IP_BYTES)
            + airtime_s(IMAGE_EXCHANGES, CHAPTER_ACK_IP_BYTES),
            "s",
            "13.4",
        ),
        WorkedExample(
            "7 shared airtime, half the ACKs",
            "medium freed by 15,400 fewer feedback exchanges",
            airtime_s(IMAGE_EXCHANGES // 2, CHAPTER_ACK_IP_BYTES),
            "s",
            "2.1",
        ),
    ]


# --- the agent's rounds (sections 1, 4 and 6; the chapter's §12.1.3, §12.3.1, §12.5) ------


@dataclass(frozen=True)
class AgentBound:
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
    stored_model_s: float = 0.0
    """Model time a redone round need not spend: committed recovery retries the same
    operation id, and the server may answer with the stored result."""
    later_rounds: int = 0
    """Rounds after a scheduled uplink rate change."""
    later_round_s: float = 0.0
    """One warm round at the changed rate."""
    total_s: float = field(init=False)

    def __post_init__(self) -> None:
        done = self.rounds + self.redone_rounds - self.later_rounds
        parts = [done * self.round_s, self.later_rounds * self.later_round_s]
        parts += [self.setup_s, self.feedback_s, self.outage_s]
        object.__setattr__(self, "total_s", math.fsum(parts) - self.stored_model_s)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    stored_rounds: int = 0,
    warm: bool = False,
    rate_change_after_round: int | None = None,
    rate_change_bps: float | None = None,
) -> AgentBound:
    """``rounds`` rounds (plus ``redone_rounds`` after an outage of ``outage_s``, which
    opens one more connection; ``stored_rounds`` of them may be answered from the server's
    stored results, without model time) with a connection per round (``new``, ``0rtt``) or
    one for the task (``reused``). ``slow_start=False`` leaves section 6 out (the chapter's
    arithmetic); ``warm=True``: a reused connection is open and warm when the task starts."""
    count = _count("rounds", rounds, minimum=1)
    redone = _count("redone_rounds", redone_rounds)
    outage = _non_negative("outage_s", outage_s)
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
    connections = count + redone if per_round else opened_first + (1 if outage or redone else 0)
    local = local_s + encode_s
    feedback = cold.feedback_s + cold.window_s if slow_start else 0.0
    return AgentBound(
        rounds=count,
        round_s=local + warm_round.total_s,
        first_round_s=local + warm_round.total_s + cold.setup_s + feedback,
        new_connections=connections,
        setup_s=connections * cold.setup_s,
        feedback_s=connections * feedback,
        redone_rounds=redone,
        outage_s=max(0.0, outage - local_s) if outage > 0 else 0.0,
        stored_model_s=min(_count("stored_rounds", stored_rounds), redone) * model_s,
        **_later_rounds(count, rate_change_after_round, rate_change_bps, common),
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


def worked_examples() -> list[WorkedExample]:
    """Every worked example of MODELS.md, computed (no typed-in results)."""
    return [
        *_serial_and_setup_examples(),
        *_window_examples(),
        *_loss_examples(),
        *_fec_examples(),
        *_airtime_examples(),
    ]
