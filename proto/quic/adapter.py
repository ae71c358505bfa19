"""The one adapter to aioquic's internals: every private attribute, private method and
internal module of aioquic that the testbed reads, replaces or overrides is named here, and
the rest of the tree reaches it only through the functions and classes of this module
(tests/test_layers.py fails on a private aioquic name touched anywhere else).

Read from aioquic 1.7.2 (:data:`AIOQUIC_VERSION`). aioquic's public API (its documentation:
``QuicConfiguration``, the public methods of ``QuicConnection`` and ``H3Connection``, the
events, ``QuicConnectionProtocol``'s public methods, ``serve``/``connect``, the loggers) has
no way to read a connection's congestion control, pacer or RTT estimates, to change its
ACK delay or flow-control growth, or to order its streams; those are what :data:`INTERNALS`
lists, one entry each with why the testbed needs it. tests/test_adapter.py checks each on
real objects made the way the testbed makes them, so an upgrade that moves or renames one
fails there, before a run records nonsense.

The internal modules (``aioquic.quic.recovery``, ``aioquic.quic.congestion.*``,
``aioquic.quic.packet_builder``, ``aioquic.quic.stream``) are imported here only; the
classes the testbed subclasses or types with are re-exported from here.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from aioquic import tls
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.asyncio.server import QuicServer
from aioquic.buffer import Buffer, BufferReadError
from aioquic.h3.connection import H3Connection
from aioquic.quic import events
from aioquic.quic.congestion.base import (
    K_INITIAL_WINDOW,
    QuicCongestionControl,
    register_congestion_control,
)
from aioquic.quic.connection import (
    EPOCHS,
    QuicConnection,
    QuicConnectionError,
    QuicConnectionState,
)
from aioquic.quic.packet import QuicErrorCode, QuicFrameType
from aioquic.quic.packet_builder import QuicDeliveryState, QuicPacketBuilder, QuicSentPacket
from aioquic.quic.rangeset import RangeSet
from aioquic.quic.recovery import QuicPacketPacer, QuicPacketRecovery
from aioquic.quic.stream import QuicStream

from proto.priority import Scheduler
from tbcore.ackpolicy import (
    AF_MIN_ACK_DELAY_S,
    AckPolicy,
    AckScheduler,
    requested_frequency,
)

__all__ = [
    "K_INITIAL_WINDOW",
    "QuicCongestionControl",
    "QuicPacketPacer",
    "QuicPacketRecovery",
    "QuicSentPacket",
    "register_congestion_control",
]

AIOQUIC_VERSION = "1.7.2"
"""The aioquic release these internals were read from (pyproject.toml pins it)."""
MAX_STREAM_DATA_FRAME_CAPACITY = 1 + 8 + 8
"""Frame type + stream id + limit, as varints (aioquic's own constant is private)."""
# draft-ietf-quic-ack-frequency-10 (tbcore.ackpolicy's ack-frequency)
TP_MIN_ACK_DELAY = 0xFF04DE1B
"""The min_ack_delay transport parameter (section 3), microseconds."""
FRAME_ACK_FREQUENCY = 0xAF
"""ACK_FREQUENCY (section 4): Sequence Number, Ack-Eliciting Threshold, Requested Max Ack
Delay (microseconds), Reordering Threshold, each a varint."""
FRAME_IMMEDIATE_ACK = 0x1F
"""IMMEDIATE_ACK (section 5): no fields."""
ACK_FREQUENCY_FRAME_CAPACITY = 2 + 4 * 8
AF_REORDERING_THRESHOLD = 1
"""The Reordering Threshold the sender asks for: RFC 9000's immediate ACK on any gap."""


@dataclass(frozen=True)
class Internal:
    """One private name of aioquic the adapter touches."""

    owner: str
    """The aioquic class (module.Class) that holds it."""
    name: str
    """The attribute or method name."""
    use: str
    """read, replace (the attribute is reassigned or wrapped) or override (a subclass)."""
    why: str
    """What the testbed needs it for."""


INTERNALS: tuple[Internal, ...] = (
    Internal("quic.connection.QuicConnection", "_loss", "read",
             "the recovery: congestion control, pacer, RTT estimates, loss hook"),
    Internal("quic.connection.QuicConnection", "_max_datagram_size", "read",
             "the datagram size pacers and the app-limited check count in"),
    Internal("quic.connection.QuicConnection", "_pacing_at", "read",
             "whether the pacer held the sender back (BBR's app-limited check)"),
    Internal("quic.connection.QuicConnection", "_ack_delay", "replace",
             "quic_ack_delay: aioquic's only ACK-frequency knob (1 ms by default)"),
    Internal("quic.connection.QuicConnection", "_payload_received", "override",
             "ack_policy: whether the 1-RTT packet being received elicits an ACK"),
    Internal("quic.connection.QuicConnection", "_write_ack_frame", "override",
             "ack_policy: an ACK of the 1-RTT space has left"),
    Internal("quic.connection.QuicConnection", "_spaces", "read",
             "ack_policy: the 1-RTT space's received packets and ACK deadline (ack_at)"),
    Internal("quic.connection.QuicConnection", "_streams", "read",
             "a stream's sender: the last byte put in a packet, bytes sent"),
    Internal("quic.connection.QuicConnection", "_streams_queue", "override",
             "send_policy: the order streams fill packets in (aioquic: round robin)"),
    Internal("quic.connection.QuicConnection", "_packet_number", "read",
             "packets sent, for the sender counters"),
    Internal("quic.connection.QuicConnection", "_state", "read",
             "an Initial that did not decrypt leaves the connection in FIRSTFLIGHT"),
    Internal("quic.connection.QuicConnection", "_network_paths", "read",
             "the peer's address, for the relay's log"),
    Internal("quic.connection.QuicConnection", "_local_max_data", "read",
             "quic_max_data: the connection credit a fixed window holds"),
    Internal("quic.connection.QuicConnection", "_quic_logger", "read",
             "qlog of the MAX_STREAM_DATA frames a fixed window writes itself"),
    Internal("quic.connection.QuicConnection", "_on_max_stream_data_delivery", "read",
             "the delivery handler of a MAX_STREAM_DATA frame written by a fixed window"),
    Internal("quic.connection.QuicConnection", "_write_connection_limits", "override",
             "quic_max_data: MAX_DATA stays consumed + window instead of doubling"),
    Internal("quic.connection.QuicConnection", "_write_stream_limits", "override",
             "quic_max_data: MAX_STREAM_DATA stays consumed + window"),
    Internal("quic.connection.QuicConnection", "_serialize_transport_parameters", "override",
             "ack-frequency: the min_ack_delay transport parameter is added"),
    Internal("quic.connection.QuicConnection", "_parse_transport_parameters", "override",
             "ack-frequency: the peer's min_ack_delay (aioquic skips unknown ones)"),
    Internal("quic.connection.QuicConnection", "_QuicConnection__frame_handlers", "replace",
             "ack-frequency: handlers of the ACK_FREQUENCY and IMMEDIATE_ACK frames added"),
    Internal("quic.connection.QuicConnection", "_handshake_complete", "read",
             "ack-frequency: frames are sent once the handshake is complete"),
    Internal("quic.connection.QuicConnection", "_write_ping_frame", "override",
             "ack-frequency: an IMMEDIATE_ACK rides with each probe"),
    Internal("quic.recovery.QuicPacketRecovery", "_cc", "read",
             "the congestion control: counters, BBR's pacing rate and hooks"),
    Internal("quic.recovery.QuicPacketRecovery", "_pacer", "replace",
             "quic_pacing / max_pacing_rate: the testbed's pacers"),
    Internal("quic.recovery.QuicPacketRecovery", "_rtt_smoothed", "read", "counters"),
    Internal("quic.recovery.QuicPacketRecovery", "_rtt_latest", "read", "counters"),
    Internal("quic.recovery.QuicPacketRecovery", "_rtt_min", "read", "counters"),
    Internal("quic.recovery.QuicPacketRecovery", "_pto_count", "read",
             "counters; the migration client's path-failure signal"),
    Internal("quic.recovery.QuicPacketRecovery", "_on_packets_lost", "replace",
             "a count of packets declared lost (aioquic keeps none)"),
    Internal("quic.recovery.QuicPacketRecovery", "on_ack_received", "replace",
             "public, but wrapped: BBR wants the end of each ACK frame"),
    Internal("quic.stream.QuicStreamSender", "_buffer_fin", "read",
             "the stream's final offset: when its last byte has left"),
    Internal("quic.stream.QuicStreamSender", "_pending_eof", "read",
             "a FIN not yet put in a packet"),
    Internal("asyncio.protocol.QuicConnectionProtocol", "_quic", "read",
             "the connection a protocol drives"),
    Internal("asyncio.protocol.QuicConnectionProtocol", "_loop", "read",
             "the protocol's event loop, for its futures and timers"),
    Internal("asyncio.protocol.QuicConnectionProtocol", "_transport", "read",
             "the UDP transport a transmit sends on"),
    Internal("asyncio.protocol.QuicConnectionProtocol", "_timer", "replace",
             "transmit re-arms the connection's timer (time.monotonic clock)"),
    Internal("asyncio.protocol.QuicConnectionProtocol", "_timer_at", "replace",
             "transmit re-arms the connection's timer (time.monotonic clock)"),
    Internal("asyncio.protocol.QuicConnectionProtocol", "_transmit_task", "replace",
             "a transmit cancels the one scheduled by _transmit_soon"),
    Internal("asyncio.protocol.QuicConnectionProtocol", "_handle_timer", "override",
             "the timer fires with time.monotonic() as now (uvloop truncates loop.time)"),
    Internal("asyncio.protocol.QuicConnectionProtocol", "_process_events", "read",
             "hand the connection's events to quic_event_received"),
    Internal("asyncio.protocol.QuicConnectionProtocol", "_transmit_soon", "read",
             "one transmit per event-loop iteration"),
    Internal("asyncio.protocol.QuicConnectionProtocol", "_connection_id_issued_handler",
             "replace", "the server's own demultiplexer learns a connection's IDs"),
    Internal("asyncio.protocol.QuicConnectionProtocol", "_connection_id_retired_handler",
             "replace", "the server's own demultiplexer forgets a retired ID"),
    Internal("asyncio.protocol.QuicConnectionProtocol", "_connection_terminated_handler",
             "replace", "the server's own demultiplexer drops a closed connection"),
    Internal("h3.connection.H3Connection", "_quic", "read",
             "PRIORITY_UPDATE goes on the client's control stream"),
    Internal("h3.connection.H3Connection", "_local_control_stream_id", "read",
             "PRIORITY_UPDATE goes on the client's control stream"),
    Internal("asyncio.server.QuicServer", "_transport", "read",
             "the relay raises its listening socket's buffers"),
)  # fmt: skip
"""Every private aioquic name this module touches (tests/test_adapter.py checks each)."""


# --- the connection and its recovery ------------------------------------------------------
def recovery_of(quic: QuicConnection) -> QuicPacketRecovery:
    """The connection's loss recovery (``QuicConnection._loss``)."""
    return quic._loss


def congestion_control_of(quic: QuicConnection) -> QuicCongestionControl:
    """The connection's congestion control (``_loss._cc``)."""
    return quic._loss._cc


def pacer_of(quic: QuicConnection) -> QuicPacketPacer:
    """The recovery's pacer (``_loss._pacer``)."""
    return quic._loss._pacer


def install_pacer(quic: QuicConnection, pacer: QuicPacketPacer) -> None:
    """Replace the recovery's pacer (``_loss._pacer``)."""
    quic._loss._pacer = pacer


def max_datagram_size_of(quic: QuicConnection) -> int:
    """The largest datagram the connection sends now (``_max_datagram_size``)."""
    return quic._max_datagram_size


def pacing_holds(quic: QuicConnection) -> bool:
    """True when the pacer held the last ``datagrams_to_send`` back (``_pacing_at``)."""
    return quic._pacing_at is not None


def ack_delay_s_of(quic: QuicConnection) -> float:
    """How long the receiver waits before an ACK of its own (``_ack_delay``)."""
    return quic._ack_delay


def set_ack_delay_s(quic: QuicConnection, ack_delay_s: float) -> None:
    """Set the receiver's ACK delay (``_ack_delay``; aioquic has no knob for it)."""
    quic._ack_delay = float(ack_delay_s)


def packets_sent(quic: QuicConnection) -> int:
    """Packet numbers used so far (``_packet_number``)."""
    return quic._packet_number


def is_first_flight(quic: QuicConnection) -> bool:
    """True while nothing of the peer's has decrypted (``_state`` is FIRSTFLIGHT)."""
    return quic._state == QuicConnectionState.FIRSTFLIGHT


def peer_address(quic: QuicConnection) -> Any:
    """The address of the connection's first network path (None before there is one)."""
    paths = quic._network_paths
    return paths[0].addr if paths else None


@dataclass(frozen=True)
class RttEstimates:
    """The recovery's RTT estimates (RFC 9002 section 5) and its PTO count."""

    smoothed_s: float
    """0 before the first sample."""
    latest_s: float
    min_s: float
    """inf before the first sample."""
    pto_count: int


def rtt_estimates(quic: QuicConnection) -> RttEstimates:
    """``_loss._rtt_smoothed``, ``_rtt_latest``, ``_rtt_min`` and ``_pto_count``."""
    loss = quic._loss
    return RttEstimates(loss._rtt_smoothed, loss._rtt_latest, loss._rtt_min, loss._pto_count)


def stream_of(quic: QuicConnection, stream_id: int) -> QuicStream | None:
    """The connection's stream ``stream_id`` (None: never opened or already discarded)."""
    return quic._streams.get(stream_id)


def stream_bytes_sent(quic: QuicConnection, stream_id: int) -> int:
    """Bytes of a stream put in packets so far (its sender's highest offset)."""
    stream = stream_of(quic, stream_id)
    return stream.sender.highest_offset if stream is not None else 0


def stream_fully_sent(quic: QuicConnection, stream_id: int) -> bool:
    """True once every byte of a finished stream has been put in a packet at least once."""
    stream = stream_of(quic, stream_id)
    if stream is None:
        return True
    sender = stream.sender
    fin = sender._buffer_fin
    return fin is not None and sender.highest_offset >= fin and not sender._pending_eof


def hook_packets_lost(quic: QuicConnection, on_lost: Callable[[int], None]) -> None:
    """Call ``on_lost(count)`` each time the recovery declares packets lost (it wraps
    ``_loss._on_packets_lost``; aioquic keeps no counter of its own)."""
    recovery = quic._loss
    lost = recovery._on_packets_lost

    def counting_on_lost(*, packets: Any, **kw: Any) -> None:
        packets = list(packets)
        on_lost(len(packets))
        lost(packets=packets, **kw)

    recovery._on_packets_lost = counting_on_lost  # type: ignore[method-assign]


def hook_ack_end(quic: QuicConnection, on_ack_end: Callable[[float], None]) -> None:
    """Call ``on_ack_end(now)`` once each ACK frame has been processed: aioquic's recovery
    reports acknowledged packets one by one, then losses, and has no callback for the end
    (it wraps the recovery's ``on_ack_received``)."""
    recovery = quic._loss
    on_ack_received = recovery.on_ack_received

    def on_ack_received_then_end(*, now: float, **kw: Any) -> None:
        on_ack_received(now=now, **kw)
        on_ack_end(now)

    recovery.on_ack_received = on_ack_received_then_end  # type: ignore[method-assign]


# --- connection classes that override aioquic's private methods ---------------------------
MAX_AUTO_WINDOW_BYTES = 32 * 2**20
"""The most a receive window grows to on its own (stream and connection): twice the chapter's
bandwidth-delay product (333 Mbit/s x 200 ms = 8.3 MB) with room to spare; aioquic's own
windows grow without bound."""


class _ReceivedPackets(RangeSet):
    """The 1-RTT space's received packet numbers (aioquic's ``ack_queue``) that tell the
    connection of each one added, so that its ACK policy sees every packet."""

    def __init__(self, ranges: RangeSet, added: Callable[[int], None]) -> None:
        super().__init__(list(ranges))
        self._added = added

    def add(self, start: int, stop: int | None = None) -> None:
        super().add(start, stop)
        if stop is None:
            self._added(start)


def ack_policy_of(quic: QuicConnection) -> str:
    """The ACK policy in force on the connection's 1-RTT space (its written form)."""
    scheduler = getattr(quic, "ack_scheduler", None)
    return "default" if scheduler is None else scheduler.policy.text


def policy_ack_due(quic: QuicConnection, now: float) -> bool:
    """Whether the connection's ACK policy (not aioquic's own rule) has an ACK of the 1-RTT
    space due by ``now``."""
    if getattr(quic, "ack_scheduler", None) is None:
        return False
    space = quic._spaces.get(tls.Epoch.ONE_RTT)
    return space is not None and space.ack_at is not None and space.ack_at <= now


def set_ack_policy(quic: QuicConnection, policy: AckPolicy) -> None:
    """Apply ``policy`` to the connection's 1-RTT ACKs (``default`` leaves aioquic's); with
    ``ack-frequency`` the connection advertises min_ack_delay, takes the draft's frames and,
    as a data sender, sends them. Before the handshake starts."""
    if not isinstance(quic, WindowedQuicConnection):
        raise TypeError("an ACK policy needs the testbed's QuicConnection")
    if policy.name == "default":
        quic.ack_scheduler = None
        return
    quic.ack_scheduler = AckScheduler(policy, rtt_min_s=lambda: quic._loss._rtt_min)
    if policy.name == "ack-frequency":
        quic.frequency = _AckFrequency()
        handlers = quic._QuicConnection__frame_handlers  # type: ignore[attr-defined]
        handlers[FRAME_ACK_FREQUENCY] = (quic._handle_ack_frequency_frame, EPOCHS("01"))
        handlers[FRAME_IMMEDIATE_ACK] = (quic._handle_immediate_ack_frame, EPOCHS("1"))


@dataclass
class _AckFrequency:
    """One connection's draft-ietf-quic-ack-frequency state (both roles)."""

    peer_min_ack_delay_s: float | None = None
    """The peer's min_ack_delay: None until its transport parameters, and when it sent none."""
    sent_seq: int = -1
    requested: tuple[int, float] | None = None
    """(threshold, max delay) of the newest frame sent and not lost."""
    frames_sent: int = 0
    frames_received: int = 0
    refused: bool = False


def ack_frequency_counts(quic: QuicConnection) -> dict[str, Any] | None:
    """What ack-frequency did on the connection (None: not in force): the peer's
    min_ack_delay, the frames sent and followed, the request in force."""
    state = getattr(quic, "frequency", None)
    if state is None:
        return None
    scheduler = quic.ack_scheduler
    return {
        "peer_min_ack_delay_s": state.peer_min_ack_delay_s,
        "frames_sent": state.frames_sent,
        "frames_received": state.frames_received,
        "requested": list(state.requested) if state.requested else None,
        "following": scheduler.rule.text if scheduler is not None else None,
    }


def _ack_frequency_qlog(seq: int, threshold: int, delay_us: int, reordering: int) -> dict:
    """An ACK_FREQUENCY frame as qlog writes it (draft-ietf-quic-ack-frequency's names)."""
    return {
        "frame_type": "ack_frequency",
        "sequence_number": seq,
        "ack_eliciting_threshold": threshold,
        "request_max_ack_delay": delay_us,
        "reordering_threshold": reordering,
    }


def _transport_parameter(data: bytes, wanted: int) -> int | None:
    """The varint value of transport parameter ``wanted`` in a serialised list (RFC 9000
    section 18: id, length, value), None when absent or malformed."""
    buf = Buffer(data=data)
    try:
        while not buf.eof():
            param_id, length = buf.pull_uint_var(), buf.pull_uint_var()
            start = buf.tell()
            if param_id == wanted:
                return buf.pull_uint_var()
            buf.seek(start + length)
    except BufferReadError:
        return None
    return None


class WindowedQuicConnection(QuicConnection):
    """A QuicConnection whose receive windows follow the bytes *delivered* in order, never
    the highest offset a peer named.

    aioquic doubles MAX_STREAM_DATA when the highest offset received passes half of it, and
    MAX_DATA when the sum of those offsets does, gaps included; a STREAM frame at the window's
    edge also makes it zero-fill its buffer up to that offset. Nine packets so took a server
    to 256 MB. Here the credit is granted on delivered bytes: ``window_bytes`` fixed (a TCP
    receiver with a clamped window: ``delivered + window`` whenever less than half of it is
    left), or, with None, doubling as aioquic does but on delivered bytes and to at most
    :data:`MAX_AUTO_WINDOW_BYTES` beyond them. What a peer can make the buffer hold is then
    at most one window per stream and one window per connection in all.

    ACKs for packets never sent close the connection (RFC 9000 section 13.1:
    PROTOCOL_VIOLATION), as aioquic does not check."""

    def __init__(self, *args: Any, window_bytes: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.window_bytes = window_bytes
        self.delivered_bytes = 0
        """Stream bytes delivered in order to the application, all streams."""
        self.ack_scheduler: AckScheduler | None = None
        """``ack_policy`` (tbcore.ackpolicy) on the 1-RTT space; None: aioquic's rule."""
        self.frequency: _AckFrequency | None = None
        """draft-ietf-quic-ack-frequency in force (``ack_policy = "ack-frequency"``)."""
        self._eliciting: tuple[bool, float] | None = None

    def _payload_received(
        self, context: Any, plain: bytes, crypto_frame_required: bool = False
    ) -> tuple[bool, bool]:
        eliciting, probing = super()._payload_received(
            context, plain, crypto_frame_required=crypto_frame_required
        )
        if self.ack_scheduler is not None and context.epoch == tls.Epoch.ONE_RTT:
            space = self._spaces[tls.Epoch.ONE_RTT]
            if not isinstance(space.ack_queue, _ReceivedPackets):
                space.ack_queue = _ReceivedPackets(space.ack_queue, self._on_one_rtt_packet)
            self._eliciting = (eliciting, context.time)
        return eliciting, probing

    def _on_one_rtt_packet(self, number: int) -> None:
        """A 1-RTT packet was recorded as received (before aioquic's own ACK timer): the
        policy's deadline, if earlier than one already set, becomes the space's."""
        if self.ack_scheduler is None or self._eliciting is None:
            return
        eliciting, now = self._eliciting
        self._eliciting = None
        due = self.ack_scheduler.on_packet(number, now, eliciting)
        if due is not None:
            space = self._spaces[tls.Epoch.ONE_RTT]
            space.ack_at = due if space.ack_at is None else min(space.ack_at, due)

    def _write_ack_frame(self, builder: QuicPacketBuilder, space: Any, now: float) -> None:
        super()._write_ack_frame(builder=builder, space=space, now=now)
        scheduler = self.ack_scheduler
        if scheduler is not None and space is self._spaces.get(tls.Epoch.ONE_RTT):
            scheduler.on_ack_sent(now)

    # --- draft-ietf-quic-ack-frequency-10 ---------------------------------------------------

    def _serialize_transport_parameters(self) -> bytes:
        data = super()._serialize_transport_parameters()
        if self.frequency is None:
            return data
        value = Buffer(capacity=8)
        value.push_uint_var(round(AF_MIN_ACK_DELAY_S * 1e6))
        extra = Buffer(capacity=24)
        extra.push_uint_var(TP_MIN_ACK_DELAY)
        extra.push_uint_var(len(value.data))
        extra.push_bytes(value.data)
        return data + extra.data

    def _parse_transport_parameters(self, data: bytes, from_session_ticket: bool = False) -> None:
        super()._parse_transport_parameters(data, from_session_ticket=from_session_ticket)
        if self.frequency is not None and not from_session_ticket:
            micros = _transport_parameter(data, TP_MIN_ACK_DELAY)
            if micros is not None and micros / 1e6 > self._loss.max_ack_delay:
                raise QuicConnectionError(
                    error_code=QuicErrorCode.TRANSPORT_PARAMETER_ERROR,
                    frame_type=QuicFrameType.CRYPTO,
                    reason_phrase="min_ack_delay above max_ack_delay",
                )
            self.frequency.peer_min_ack_delay_s = None if micros is None else micros / 1e6

    def _handle_ack_frequency_frame(self, context: Any, frame_type: int, buf: Any) -> None:
        """Follow the newest ACK_FREQUENCY (section 4); a delay below the min_ack_delay this
        end advertised is a PROTOCOL_VIOLATION."""
        seq, threshold = buf.pull_uint_var(), buf.pull_uint_var()
        delay_us, reordering = buf.pull_uint_var(), buf.pull_uint_var()
        if delay_us < round(AF_MIN_ACK_DELAY_S * 1e6):
            raise QuicConnectionError(
                error_code=QuicErrorCode.PROTOCOL_VIOLATION,
                frame_type=frame_type,
                reason_phrase=f"Requested Max Ack Delay {delay_us} us below min_ack_delay",
            )
        assert self.frequency is not None and self.ack_scheduler is not None
        if self.ack_scheduler.apply_frequency(seq, threshold, delay_us / 1e6, reordering):
            self.frequency.frames_received += 1
        if self._quic_logger is not None:
            context.quic_logger_frames.append(
                _ack_frequency_qlog(seq, threshold, delay_us, reordering)
            )

    def _handle_immediate_ack_frame(self, context: Any, frame_type: int, buf: Any) -> None:
        """IMMEDIATE_ACK (section 5): an ACK at once."""
        self._spaces[tls.Epoch.ONE_RTT].ack_at = context.time
        if self._quic_logger is not None:
            context.quic_logger_frames.append({"frame_type": "immediate_ack"})

    def _write_ack_frequency(self, builder: QuicPacketBuilder) -> None:
        """As the data sender: an ACK_FREQUENCY frame whenever the choice of
        :func:`tbcore.ackpolicy.requested_frequency` changes (the window grew, the RTT moved);
        a peer that did not advertise min_ack_delay ends the connection in one line."""
        state = self.frequency
        if state is None or not self._handshake_complete or state.refused:
            return
        if state.peer_min_ack_delay_s is None:
            state.refused = True
            self.close(
                error_code=QuicErrorCode.NO_ERROR,
                reason_phrase="ack_policy ack-frequency: the peer did not negotiate "
                "draft-ietf-quic-ack-frequency (no min_ack_delay transport parameter)",
            )
            return
        loss = self._loss
        if not loss._rtt_smoothed:
            return
        wanted = requested_frequency(
            loss.congestion_window, self._max_datagram_size, loss._rtt_smoothed,
            state.peer_min_ack_delay_s,
        )  # fmt: skip
        if wanted == state.requested:
            return
        state.sent_seq += 1
        buf = builder.start_frame(
            FRAME_ACK_FREQUENCY,
            capacity=ACK_FREQUENCY_FRAME_CAPACITY,
            handler=self._on_ack_frequency_delivery,
            handler_args=(state.sent_seq, wanted),
        )
        fields = (state.sent_seq, wanted[0], round(wanted[1] * 1e6), AF_REORDERING_THRESHOLD)
        for value in fields:
            buf.push_uint_var(value)
        state.requested = wanted
        state.frames_sent += 1
        if self._quic_logger is not None:
            builder.quic_logger_frames.append(_ack_frequency_qlog(*fields))

    def _on_ack_frequency_delivery(
        self, delivery: QuicDeliveryState, seq: int, wanted: tuple[int, float]
    ) -> None:
        """A lost frame that is still the newest is sent again; an acknowledged one's delay
        becomes the peer's max_ack_delay in this end's probe timeout (section 6)."""
        state = self.frequency
        if state is None or seq != state.sent_seq:
            return
        if delivery == QuicDeliveryState.LOST:
            state.requested = None
        elif delivery == QuicDeliveryState.ACKED:
            self._loss.max_ack_delay = wanted[1]

    def _write_ping_frame(
        self, builder: QuicPacketBuilder, uids: Any = None, comment: str = ""
    ) -> None:
        if (
            comment == "probe"
            and self.frequency is not None
            and self.frequency.peer_min_ack_delay_s
        ):
            builder.start_frame(FRAME_IMMEDIATE_ACK)
            if self._quic_logger is not None:
                builder.quic_logger_frames.append({"frame_type": "immediate_ack"})
        super()._write_ping_frame(builder, [] if uids is None else uids, comment)

    def _handle_stream_frame(self, context: Any, frame_type: int, buf: Any) -> None:
        queued = len(self._events)
        super()._handle_stream_frame(context, frame_type, buf)
        for event in itertools.islice(self._events, queued, None):
            if isinstance(event, events.StreamDataReceived):
                self.delivered_bytes += len(event.data)

    def _handle_ack_frame(self, context: Any, frame_type: int, buf: Any) -> None:
        # RFC 9000 section 19.3: the frame opens with the Largest Acknowledged; one varint
        # read (not the whole range list, which the parent parses next)
        start = buf.tell()
        largest = buf.pull_uint_var()
        buf.seek(start)
        if largest >= self._packet_number:
            raise QuicConnectionError(
                error_code=QuicErrorCode.PROTOCOL_VIOLATION,
                frame_type=frame_type,
                reason_phrase=f"ACK of packet {largest}, never sent",
            )
        super()._handle_ack_frame(context, frame_type, buf)

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, Any]]:
        """aioquic builds a CONNECTION_CLOSE (one packet per epoch it has keys for) without
        the anti-amplification limit it applies to everything else: a server closing an
        unvalidated path (a handshake that timed out) sent 3.1 times what it received. Here
        the close's datagrams that would pass three times the bytes received are not sent
        (RFC 9000 section 8.1: no more than three times, whatever the packet)."""
        path = self._network_paths[0] if self._network_paths else None
        guard = self._close_pending and path is not None and not path.is_validated
        sent_before = path.bytes_sent if path is not None else 0
        datagrams = super().datagrams_to_send(now)
        if not guard or path is None:
            return datagrams
        budget = 3 * path.bytes_received - sent_before
        kept, used = [], 0
        for datagram in datagrams:
            if used + len(datagram[0]) > budget:
                break
            kept.append(datagram)
            used += len(datagram[0])
        path.bytes_sent = sent_before + used
        return kept

    def _grown(self, limit: int, delivered: int) -> int:
        if self.window_bytes is not None:
            if limit - delivered < self.window_bytes // 2:
                return delivered + self.window_bytes
            return limit
        if delivered * 2 > limit:
            return min(limit * 2, delivered + MAX_AUTO_WINDOW_BYTES)
        return limit

    def _write_connection_limits(self, builder: QuicPacketBuilder, space: Any) -> None:
        self._write_ack_frequency(builder)
        limit = self._local_max_data
        limit.value = self._grown(limit.value, self.delivered_bytes)
        # the parent doubles max_data when used * 2 > value (used counts the highest offsets,
        # gaps included): present it a "used" of 0, then restore the real count
        used = limit.used
        limit.used = 0
        try:
            super()._write_connection_limits(builder, space)
        finally:
            limit.used = used

    def _write_stream_limits(self, builder: QuicPacketBuilder, space: Any, stream: Any) -> None:
        if not stream.max_stream_data_local:
            return
        delivered = stream.receiver._buffer_start
        stream.max_stream_data_local = self._grown(stream.max_stream_data_local, delivered)
        if stream.max_stream_data_local_sent != stream.max_stream_data_local:
            buf = builder.start_frame(
                QuicFrameType.MAX_STREAM_DATA,
                capacity=MAX_STREAM_DATA_FRAME_CAPACITY,
                handler=self._on_max_stream_data_delivery,
                handler_args=(stream,),
            )
            buf.push_uint_var(stream.stream_id)
            buf.push_uint_var(stream.max_stream_data_local)
            stream.max_stream_data_local_sent = stream.max_stream_data_local
            if self._quic_logger is not None:
                builder.quic_logger_frames.append(
                    self._quic_logger.encode_max_stream_data_frame(
                        maximum=stream.max_stream_data_local, stream_id=stream.stream_id
                    )
                )


def skip_to_window_edge(quic: QuicConnection, stream_id: int, before_edge: int) -> int:
    """Make the next bytes written to ``stream_id`` start ``before_edge`` bytes before the
    peer's flow-control limit, nothing sent before them (``testbed abuse``'s flow-gap
    attack: what a receiver must not answer by zero-filling and doubling); the offset."""
    stream = quic._get_or_create_stream_for_send(stream_id)
    offset = stream.max_stream_data_remote - before_edge
    stream.sender._buffer_start = stream.sender._buffer_stop = offset
    return offset


def acknowledge_next(quic: QuicConnection, ranges: RangeSet, now: float) -> None:
    """Make the next 1-RTT packet carry an ACK of ``ranges``, whatever was received
    (``testbed abuse``'s ack-ranges attack: ACKs of packets never sent)."""
    space = quic._spaces[tls.Epoch.ONE_RTT]
    space.ack_queue = RangeSet(list(ranges))
    space.ack_at = now


class FixedWindowQuicConnection(WindowedQuicConnection):
    """A :class:`WindowedQuicConnection` whose credit stays ``window_bytes`` (required)."""

    def __init__(self, *args: Any, window_bytes: int, **kwargs: Any) -> None:
        super().__init__(*args, window_bytes=window_bytes, **kwargs)


class ScheduledList(list):
    """A list that iterates in a scheduler's order; appends and extends stay plain."""

    scheduler: Scheduler | None = None

    def __iter__(self) -> Iterator[Any]:
        items = list.__iter__(self)
        if self.scheduler is None or len(self) < 2:
            return items
        by_id = {stream.stream_id: stream for stream in items}
        return iter([by_id[sid] for sid in self.scheduler.order(list(by_id))])


class ScheduledStreamsMixin:
    """aioquic serves its streams round robin: ``_write_application`` walks
    ``self._streams_queue`` for every packet and moves the streams that sent to the end.
    Here that attribute always holds a :class:`ScheduledList`, which iterates in the order
    of a :class:`proto.priority.Scheduler` (FIFO, RFC 9218 urgency, or round robin), so
    every packet is filled from the stream the policy picks, retransmissions included."""

    @property
    def scheduler(self) -> Scheduler | None:
        return self.__dict__.get("_scheduler")

    @scheduler.setter
    def scheduler(self, value: Scheduler | None) -> None:
        self.__dict__["_scheduler"] = value
        queue = self.__dict__.get("_stored_streams_queue")
        if queue is not None:
            queue.scheduler = value

    @property
    def _streams_queue(self) -> ScheduledList:
        return self.__dict__["_stored_streams_queue"]

    @_streams_queue.setter
    def _streams_queue(self, value: list[Any]) -> None:
        queue = ScheduledList(list.__iter__(value))
        queue.scheduler = self.__dict__.get("_scheduler")
        self.__dict__["_stored_streams_queue"] = queue


class ScheduledQuicConnection(ScheduledStreamsMixin, WindowedQuicConnection):
    """A QuicConnection whose stream service order follows a scheduler (windows grown on
    delivered bytes)."""


class ScheduledFixedWindowQuicConnection(ScheduledStreamsMixin, FixedWindowQuicConnection):
    """Fixed windows and a scheduled stream order."""


# --- the asyncio protocol -----------------------------------------------------------------
class AdaptedProtocol(QuicConnectionProtocol):
    """aioquic's protocol with public names for what its subclasses need of it."""

    @property
    def quic(self) -> QuicConnection:
        """The connection this protocol drives (``_quic``)."""
        return self._quic

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the protocol was made in (``_loop``)."""
        return self._loop

    def process_events(self) -> None:
        """Hand the connection's pending events to :meth:`quic_event_received`."""
        self._process_events()

    def transmit_soon(self) -> None:
        """Transmit on the event loop's next iteration (once, however often asked)."""
        self._transmit_soon()

    def set_connection_handlers(
        self,
        *,
        issued: Callable[[bytes], None],
        retired: Callable[[bytes], None],
        terminated: Callable[[], None],
    ) -> None:
        """Be told of connection IDs issued and retired and of the connection's end (what
        ``aioquic.asyncio.serve`` uses to demultiplex; a server of its own needs them)."""
        self._connection_id_issued_handler = issued
        self._connection_id_retired_handler = retired
        self._connection_terminated_handler = terminated


class MonotonicProtocol(AdaptedProtocol):
    """An :class:`AdaptedProtocol` on ``time.monotonic()``: aioquic's protocol takes ``now``
    from loop.time(), which uvloop truncates to whole milliseconds; this one feeds it
    time.monotonic() (same clock, full resolution). A transmit hands its datagrams to
    :meth:`send_datagrams` and ends with :meth:`after_transmit`, which subclasses extend."""

    coalesce_transmit = True
    """Transmit once per batch of datagrams read (see datagram_received)."""

    def connect(self, addr: Any, transmit: bool = True) -> None:
        self._quic.connect(addr, now=time.monotonic())
        if transmit:
            self.transmit()

    def datagram_received(self, data: bytes | str, addr: Any) -> None:
        now = time.monotonic()
        if self.coalesce_transmit and policy_ack_due(self._quic, now):
            # an ACK the receiver's policy made due leaves before the next datagram of the
            # batch is read: one per packet when the policy asks for one (ack_policy)
            self.transmit()
        self._quic.receive_datagram(data, addr, now=now)  # type: ignore[arg-type]
        self._process_events()
        # one transmit per batch of datagrams read in a loop iteration (libuv reads up to
        # 32 per wake-up), not one per datagram: datagrams_to_send() costs ~10 us even when
        # it has nothing to send, and each ACK it would send alone is a packet more
        if self.coalesce_transmit:
            self._transmit_soon()
        else:
            self.transmit()

    def _handle_timer(self) -> None:
        now = max(self._timer_at or 0.0, time.monotonic())
        self._timer = None
        self._timer_at = None
        self._quic.handle_timer(now=now)
        self._process_events()
        self.transmit()

    @property
    def transport(self) -> asyncio.DatagramTransport | None:
        """The UDP transport (None before connection_made)."""
        return self._transport

    def send_datagrams(self, datagrams: list[tuple[bytes, Any]]) -> None:
        """Send what ``datagrams_to_send`` returned, one ``sendto`` each."""
        sendto = self._transport.sendto  # type: ignore[union-attr]
        for data, addr in datagrams:
            sendto(data, addr)

    def after_transmit(self) -> None:
        """Called at the end of every transmit that had a transport to send on."""

    def transmit(self) -> None:
        if self._transmit_task is not None:
            self._transmit_task.cancel()
            self._transmit_task = None
        if self._transport is None or self._transport.is_closing():
            return  # closed under us (a client abandoned by its caller): nothing to send on
        self.send_datagrams(self._quic.datagrams_to_send(now=time.monotonic()))
        self.before_timer()
        timer_at = self._quic.get_timer()
        if self._timer is not None and self._timer_at != timer_at:
            self._timer.cancel()
            self._timer = None
        if self._timer is None and timer_at is not None:
            self._timer = self._loop.call_at(timer_at, self._handle_timer)
        self._timer_at = timer_at
        self.after_transmit()

    def before_timer(self) -> None:
        """Called after the datagrams are sent, before the timer is re-armed."""


# --- HTTP/3 and the asyncio server ----------------------------------------------------------
def send_h3_control_frame(h3: H3Connection, frame: bytes) -> None:
    """Send an encoded frame on the local HTTP/3 control stream (``H3Connection._quic``,
    ``_local_control_stream_id``: aioquic sends only its own frames there)."""
    stream_id = h3._local_control_stream_id
    if stream_id is None:
        raise RuntimeError("HTTP/3 control stream not open yet")
    h3._quic.send_stream_data(stream_id, frame)


def server_socket(server: QuicServer) -> Any:
    """The UDP socket a ``serve``'d QuicServer listens on (``QuicServer._transport``)."""
    return server._transport.get_extra_info("socket")  # type: ignore[union-attr]
