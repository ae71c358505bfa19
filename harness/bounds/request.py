"""The request bound every run is put beside: set-up, slow start per direction,
serialisation, propagation and processing (docs/models.md sections 1, 4, 5 and 6)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from tbcore import kinds
from tbcore.settings import Settings

if TYPE_CHECKING:
    pass

from harness.bounds.base import (
    BITS_PER_BYTE,
    CLEARTEXT_OF,
    INITCWND_SEGMENTS,
    _count,
    _loss,
    _non_negative,
    _positive,
)
from harness.bounds.retransmission import retransmission_rounds
from harness.bounds.setup import setup_rtts

DEFAULT_SETTINGS = Settings()
"""The knobs' defaults: a protocol's full packet when the caller gives no MSS."""


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


class RequestParts(Parts):
    """The parts of a request's bound (docs/models.md sections 1-8), mixed into a frozen bound
    dataclass with those fields and ``total_s`` / ``expected_s`` (``init=False``): the
    total is set-up + feedback + window + serialisation + propagation + processing, the
    expectation adds the retransmission rounds."""

    PARTS: ClassVar[tuple[str, ...]] = (
        "setup_s",
        "feedback_s",
        "window_s",
        "serialisation_s",
        "propagation_s",
        "processing_s",
        "retransmission_s",
    )
    OUTSIDE_TOTAL: ClassVar[tuple[str, ...]] = ("retransmission_s",)

    def __post_init__(self) -> None:
        total = self._sum_parts()
        object.__setattr__(self, "total_s", total)
        object.__setattr__(self, "expected_s", total + self.retransmission_s)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class RequestBound(RequestParts):
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
    None: the protocol's full packet at the default settings, tbcore.kinds.ProtocolKind.mss:
    :data:`TCP_MSS_BYTES` for h2, :data:`QUIC_MAX_DATAGRAM_BYTES` for h3)."""
    if mss_bytes is None:
        setup_rtts(protocol, "reused")  # a protocol the bounds know (one-line SpecError)
        mss_bytes = kinds.protocol(CLEARTEXT_OF.get(protocol, protocol)).mss(DEFAULT_SETTINGS)
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
