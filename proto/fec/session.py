"""One FEC session, one end of it, without I/O (the aioquic model: every call takes ``now``).

The edge feeds :meth:`FecEndpoint.receive_datagram` (with the kernel's receive time) and
:meth:`FecEndpoint.handle_timer`, and pulls :meth:`FecEndpoint.datagrams_to_send`,
:meth:`FecEndpoint.get_timer` and :meth:`FecEndpoint.next_event`.

- **Measuring the path** (:meth:`start_probe`, client side): a train of
  :data:`PROBE_TRAIN_PACKETS` full-size datagrams leaves back to back (a bounded burst,
  70 KB); the peer times its arrival (kernel timestamps) and reports the rate and how many
  arrived, then sends its own train the other way, which the client reports back with the
  round trip. Each end then paces at ``min(cap, measured)``.
- **Sending a transfer** (:meth:`send`): k source + r repair symbols per block (r from
  :class:`~proto.fec.loss.Redundancy` and the peer's latest loss report), paced by a token
  bucket at the measured rate (bursts of at most :data:`PACING_BURST_S`).
- **Receiving**: datagrams that do not authenticate, replay a sequence number, name an
  unknown transfer beyond the limits, a block or symbol id out of range, or repeat a symbol
  are dropped and counted by reason (:attr:`FecEndpoint.dropped`). A block that stalls short
  of decoding asks for more (NEED, repeated each round trip until symbols come); a decoded
  transfer is acknowledged (DONE, twice) with the receiver's loss estimate and arrival rate.
- **What keeps it from flooding a shared path**: the rate never exceeds the configured cap
  (the link's rate; a session refuses to start without one); it follows the arrival rate
  the receiver measures per transfer (down at once when arrivals fall behind what left, not
  below :data:`RATE_FLOOR_FRACTION` of the cap; up by :data:`RATE_INCREASE` per transfer
  when they keep up); redundancy is capped at
  ``MAX_REDUNDANCY_FRACTION``; a repair round is sent once per NEED, never while the
  previous round is still queued; a silent peer gets at most :data:`MAX_TAIL_PROBES` small
  probes with doubling intervals, then the transfer fails.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field
from typing import Any

from proto.fec import wire
from proto.fec.code import (
    MAX_TRANSFER_BYTES,
    RAPTORQ_OVERHEAD_SYMBOLS,
    BlockDecoder,
    BlockEncoder,
    BlockLayout,
    esi_of,
    sbn_of,
)
from proto.fec.loss import LossReport, LossWindow, Redundancy
from tbcore.errors import SpecError

BITS_PER_BYTE = 8
PROBE_TRAIN_PACKETS = 48
"""Datagrams in a probe train (one way): 72 KB, 1.7 ms at 333 Mbit/s."""
PROBE_STALL_S = 0.010
"""A train is over this long after its last arrival (when its last datagram was lost)."""
PROBE_RETRIES = 4
MIN_PROBE_RATE_FRACTION = 0.01
"""A train measured below 1 % of the cap (or not at all: every datagram timestamped alike, as
on loopback where GSO segments arrive as one) is no measurement: the cap is used."""
PACING_BURST_S = 0.008
"""Token bucket depth: 8 ms of the rate. Event-loop timers are ~1 ms granular, and on a
loaded host (load 14 on 2 cores) the sender is descheduled for 5 to 10 ms at a time: with a
2 ms bucket it then fell to 76-177 Mbit/s of its 333. 8 ms at 333 Mbit/s is 333 KB, 4 % of
the path's one-BDP queue at 200 ms: the average never exceeds the rate, a burst stays
small next to the queue."""
INITIAL_RTT_S = 0.333
"""RFC 9002 section 6.2.2's kInitialRtt, until the probe measures one."""
STALL_MIN_S = 0.004
"""A block whose round's last symbol has been seen and that received nothing for this long
(and at least STALL_GAPS mean gaps) stalls: it asks for more."""
STALL_GAPS = 16
STALL_MID_ROUND_S = 0.025
"""The same while the round has not reached its last symbol: a busy sender pauses for
milliseconds (descheduled on a loaded host); asking then would fetch symbols still coming."""
TAIL_MARGIN_S = 0.050
TAIL_RTT_FACTOR = 1.5
"""The sender's wait for feedback after a round: 1.5 round trips + 50 ms (+ the peer's
stall). A tail probe only matters when every DONE and NEED was lost (2 % of transfers at
14 % loss); firing early instead would send symbols nobody needs."""
TAIL_PROBE_SYMBOLS = 8
"""Repair symbols of a tail probe. On a Gilbert-Elliott channel whose bad state lasts 5
packets on average (and a sparse direction crosses a burst only packet by packet), 2-symbol
probes stayed lost for 6 probes in a row (a request timed out after 30 s); 8 get through."""
MAX_TAIL_BACKOFF = 4
"""The tail wait doubles per probe up to 4x (not without end: a lost burst is no overload)."""
MAX_TAIL_PROBES = 12
BURST_MIN_PACKETS = 1000
"""A peer's loss report over fewer packets cannot show bursts reliably (see sizing_report)."""
PREMATURE_NEED_RTT_FRACTION = 0.9
"""A NEED that arrives sooner than 0.9 RTT after the round's last symbol left was sent before
that symbol could have arrived (a paused emulator or sender looked like a stall): it is not
answered; the receiver asks again once its ask times out."""
MAX_ASKS = 64
"""A receiver gives up on a transfer after this many unanswered NEEDs."""
DONE_COPIES = 2
"""DONE, NEED and REPORT are sent twice: at 14 % independent loss both are lost 2 % of
the time, and a lost DONE only costs a tail probe (answered with DONE again)."""
TOKEN_SLACK_BYTES = 1e-3
"""Rounding slack of the token bucket (a timer set for the exact refill must send)."""
RATE_INCREASE = 1.25
RATE_FLOOR_FRACTION = 0.05
"""The rate never follows arrivals below 5 % of the cap: one transfer slowed by a starved
receiver or emulator (a busy host) must not leave the session crawling (seen: 3 Mbit/s)."""
RATE_DECREASE_BELOW = 0.90
"""Arrivals slower than 90 % of the pacing rate mean a queue or a competitor: follow them."""
MIN_RATE_SAMPLE_PACKETS = 32
MIN_RATE_SAMPLE_S = 0.001
MAX_INCOMING_TRANSFERS = 4
"""Transfers a receiver assembles at once per session (memory bound with MAX_TRANSFER_BYTES
and MAX_SYMBOLS_PER_BLOCK_FACTOR: at most 4 x 64 MB x 2 held)."""
MAX_OUTGOING_TRANSFERS = 64
"""Unacknowledged transfers a sender keeps (a 20 ms chunk stream has ~10 per round trip)."""
MAX_SYMBOLS_PER_BLOCK_FACTOR = 2
"""A block stores at most 2k + 64 symbols: more than that is refused (over budget)."""
MAX_ESI_FACTOR = 8
"""Symbol ids above 8k + 256 are out of range (no sender sends that many)."""
COMPLETED_MEMORY = 256
"""Transfer ids remembered after completion, to tell late symbols from new transfers."""

DROP_REASONS = (
    "short",
    "unknown_session",
    "bad_tag",
    "replay",
    "bad_type",
    "malformed",
    "oversized",
    "too_many_transfers",
    "out_of_range",
    "duplicate",
    "over_budget",
    "late",
)
"""Why a datagram was dropped; ``late`` is a symbol of an already decoded transfer (normal:
repair still in flight when the block decoded), the others are garbage or attacks."""


# --- events -------------------------------------------------------------------------------


@dataclass
class TransferStats:
    """One transfer as one end saw it (the sender's fields or the receiver's)."""

    transfer: int
    transfer_bytes: int
    blocks: int
    source_symbols: int
    """k, summed over blocks."""
    repair_symbols: int
    """r of the first round, summed over blocks."""
    extra_symbols: int = 0
    """Symbols sent (sender) or announced (receiver) in later rounds."""
    extra_rounds: int = 0
    """Repair rounds after the first: the most any block needed."""
    decode_failures: int = 0
    """Blocks that did not decode from their first round."""
    loss_estimate: float = 0.0
    """The loss the sender sized r with."""
    loss_model: str = ""
    """none, binomial, markov or fixed (sender side)."""
    rate_bps: float = 0.0
    """Pacing rate (sender) or arrival rate (receiver)."""
    received_symbols: int = 0
    """Receiver: distinct symbols that arrived before the transfer decoded."""
    first_at: float | None = None
    """Sender: first datagram handed to the socket; receiver: first arrival."""
    round_sent_at: float | None = None
    """Sender: last datagram of the first round handed to the socket."""
    done_at: float | None = None
    """Sender: DONE received; receiver: decoded."""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Event:
    pass


@dataclass
class ProbeDone(Event):
    rate_bps: float
    """The rate this end will send at (min of cap and the peer's measurement)."""
    rtt_s: float


@dataclass
class TransferReceived(Event):
    data: bytes
    stats: TransferStats


@dataclass
class TransferDelivered(Event):
    stats: TransferStats


@dataclass
class TransferFailed(Event):
    transfer: int
    reason: str


# --- state --------------------------------------------------------------------------------


@dataclass
class _OutBlock:
    encoder: BlockEncoder
    k: int
    r: int
    next_esi: int = 0
    round: int = 0
    round_end: int = 0
    queued: int = 0
    """Datagrams of this block still waiting for the pacer."""
    answered_ask: float = 0.0


@dataclass
class _Outgoing:
    stats: TransferStats
    layout: BlockLayout
    blocks: list[_OutBlock]
    done: bool = False
    tail_deadline: float | None = None
    tail_probes: int = 0
    last_sent_at: float | None = None
    built: int = 0
    """Data datagrams of the transfer handed out so far."""


@dataclass
class _InBlock:
    decoder: BlockDecoder
    k: int
    round_end: int = 0
    max_round: int = 0
    last_at: float = 0.0
    highest_esi: int = -1
    asks: int = 0
    asked_round: int = 0
    """The highest round seen when the last NEED left: a later round answers it."""
    ask_deadline: float | None = None


@dataclass
class _Incoming:
    stats: TransferStats
    layout: BlockLayout
    blocks: dict[int, _InBlock] = field(default_factory=dict)
    last_at: float = 0.0
    first_seq: int = -1
    last_seq: int = -1
    first_t: float = 0.0
    last_t: float = 0.0
    gap_s: float = 0.0
    """Mean gap between arrivals (EWMA), for the stall time."""


@dataclass
class _Train:
    """A probe train arriving from the peer."""

    count: int
    first_seq: int
    first_t: float
    start: float
    last_seq: int = -1
    last_t: float = 0.0
    received: int = 0
    reported: bool = False

    def rate_bps(self) -> float:
        """Dispersion rate: the sequence numbers between first and last arrival (lost ones
        included: they crossed the bottleneck too, or were lost before it) over the time."""
        span = self.last_t - self.first_t
        if self.last_seq <= self.first_seq or span <= 0:
            return 0.0
        wire_bits = (wire.DATA_DATAGRAM_BYTES + wire.IPV4_UDP_HEADER_BYTES) * BITS_PER_BYTE
        return (self.last_seq - self.first_seq) * wire_bits / span


@dataclass
class _Queued:
    kind: int
    transfer: int = 0
    block: int = 0
    rq_packet: bytes = b""
    probe_index: int = 0
    probe_count: int = 0


def fec_in_force(endpoint: FecEndpoint) -> dict[str, Any]:
    """What an FEC session runs with, by knob key: its rate cap and redundancy (the target
    only where the adaptive redundancy uses it)."""
    redundancy = endpoint.redundancy
    return {
        "fec_rate": endpoint.cap_bps,
        "fec_redundancy": str(redundancy),
        "fec_target": redundancy.target if redundancy.mode == "adaptive" else None,
    }


class FecEndpoint:
    """One end of one session: ``is_client`` picks the direction keys."""

    def __init__(
        self,
        *,
        is_client: bool,
        session: bytes,
        secret: bytes,
        cap_bps: float,
        redundancy: Redundancy,
        now: float,
    ) -> None:
        if not cap_bps or cap_bps <= 0 or not math.isfinite(cap_bps):
            raise SpecError("fec_rate", "the FEC sender needs the path's rate (a cap in bit/s)")
        if len(session) != wire.SESSION_ID_BYTES or len(secret) != wire.SECRET_BYTES:
            raise SpecError("session", "bad session id or secret length")
        c2s, s2c = wire.derive_keys(secret)
        self.is_client = is_client
        self.session = session
        self.send_key, self.recv_key = (c2s, s2c) if is_client else (s2c, c2s)
        self.cap_bps = float(cap_bps)
        self.rate_bps: float | None = None
        """Measured pacing rate; None until the path was measured."""
        self.rate_source = "none"
        self.redundancy = redundancy
        self.rtt_s = INITIAL_RTT_S
        self.rtt_measured = False
        self.peer_loss = LossReport()
        """The peer's latest view of the loss on our sending direction."""
        self.created_at = now
        self.last_activity = now
        self._seq = 0
        self._replay = wire.ReplayWindow()
        self.loss_window = LossWindow()
        self._queue: collections.deque[_Queued] = collections.deque()
        self._repair_pending: collections.deque[tuple[int, int]] = collections.deque()
        """(transfer, block) whose first-round repair symbols are still to be computed."""
        self._control: list[bytes] = []
        self._tokens = 0.0
        self._tokens_at = now
        self._events: collections.deque[Event] = collections.deque()
        self._out: dict[int, _Outgoing] = {}
        self._in: dict[int, _Incoming] = {}
        self._completed: collections.OrderedDict[int, int] = collections.OrderedDict()
        """Decoded transfers: the highest round seen (a DONE is repeated once per later round)."""
        self._next_transfer = 1
        self.dropped: collections.Counter[str] = collections.Counter()
        self.sent_datagrams = 0
        self.received_datagrams = 0
        # probing
        self._probe_started: float | None = None
        self._probe_tries = 0
        self._train: _Train | None = None
        self._train_deadline: float | None = None
        self._probe_deadline: float | None = None

    # -- output ------------------------------------------------------------------------------
    def next_event(self) -> Event | None:
        return self._events.popleft() if self._events else None

    def _next_seq(self) -> int:
        seq = self._seq
        self._seq += 1
        return seq

    def _send_control(self, datagram_of_seq: Any) -> None:
        self._control.append(datagram_of_seq(self._next_seq()))

    def datagrams_to_send(self, now: float) -> list[bytes]:
        """Control datagrams at once, then data as far as the pacer allows."""
        out = self._control
        self._control = []
        if not self._queue:
            self._tokens_at = now
            self.sent_datagrams += len(out)
            return out
        rate = self._pacing_rate_bytes()
        bucket = max(2 * wire.PATH_MTU_BYTES, rate * PACING_BURST_S)
        self._tokens = min(bucket, self._tokens + (now - self._tokens_at) * rate)
        self._tokens_at = now
        wire_bytes = wire.DATA_DATAGRAM_BYTES + wire.IPV4_UDP_HEADER_BYTES
        while self._queue and (
            self._tokens + TOKEN_SLACK_BYTES >= wire_bytes or self._queue[0].kind == wire.TYPE_PROBE
        ):
            item = self._queue.popleft()
            datagram = self._build(item, now)
            if datagram is None:
                continue
            if item.kind != wire.TYPE_PROBE:
                self._tokens -= wire_bytes
            out.append(datagram)
        self.sent_datagrams += len(out)
        return out

    def _pacing_rate_bytes(self) -> float:
        rate = self.rate_bps if self.rate_bps is not None else self.cap_bps
        return min(rate, self.cap_bps) / BITS_PER_BYTE

    def _build(self, item: _Queued, now: float) -> bytes | None:
        if item.kind == wire.TYPE_PROBE:
            return wire.pack_probe(
                self.send_key, self.session, self._next_seq(), item.probe_index, item.probe_count
            )
        transfer = self._out.get(item.transfer)
        if transfer is None:
            return None
        block = transfer.blocks[item.block]
        block.queued -= 1
        if transfer.done:
            return None  # acknowledged while queued: the rest is not needed
        header = wire.DataHeader(
            transfer=item.transfer,
            transfer_bytes=transfer.layout.transfer_bytes,
            block=item.block,
            round=block.round,
            round_end=block.round_end,
            loss_estimate=transfer.stats.loss_estimate,
        )
        datagram = wire.pack_data(
            self.send_key, self.session, self._next_seq(), header, item.rq_packet
        )
        stats = transfer.stats
        if stats.first_at is None:
            stats.first_at = now
        transfer.last_sent_at = now
        transfer.built += 1
        if all(b.queued == 0 for b in transfer.blocks):
            if stats.round_sent_at is None:
                stats.round_sent_at = now
            transfer.tail_deadline = now + self._tail_wait(transfer)
        return datagram

    def _tail_wait(self, transfer: _Outgoing) -> float:
        """How long after a round the sender waits for a DONE or NEED: the round trip, the
        peer's stall time and a margin for a busy receiver; doubled per probe."""
        wait = TAIL_RTT_FACTOR * self.rtt_s + TAIL_MARGIN_S + STALL_MIN_S
        return wait * min(MAX_TAIL_BACKOFF, 2**transfer.tail_probes)

    def get_timer(self) -> float | None:
        """When :meth:`handle_timer` wants to run next (None: nothing pending)."""
        deadlines: list[float] = []
        if self._repair_pending:
            deadlines.append(self._tokens_at)
        if self._queue:
            if self._queue[0].kind == wire.TYPE_PROBE:
                deadlines.append(self._tokens_at)
            else:
                rate = self._pacing_rate_bytes()
                need = wire.DATA_DATAGRAM_BYTES + wire.IPV4_UDP_HEADER_BYTES - self._tokens
                deadlines.append(self._tokens_at + max(0.0, need) / rate)
        for transfer in self._out.values():
            if not transfer.done and transfer.tail_deadline is not None:
                deadlines.append(transfer.tail_deadline)
        for incoming in self._in.values():
            for block in incoming.blocks.values():
                if block.decoder.data is None:
                    deadlines.append(self._block_deadline(incoming, block))
        for deadline in (self._train_deadline, self._probe_deadline):
            if deadline is not None:
                deadlines.append(deadline)
        return min(deadlines) if deadlines else None

    # -- probing -----------------------------------------------------------------------------
    def start_probe(self, now: float) -> None:
        """Client: measure the path (both directions) before the first transfer."""
        self._probe_started = now
        self._probe_tries += 1
        self._probe_deadline = now + max(2 * self.rtt_s, 0.5) * self._probe_tries
        self._queue_train()

    def _queue_train(self) -> None:
        for index in range(PROBE_TRAIN_PACKETS):
            self._queue.append(
                _Queued(wire.TYPE_PROBE, probe_index=index, probe_count=PROBE_TRAIN_PACKETS)
            )

    @property
    def measured(self) -> bool:
        return self.rate_bps is not None

    def _on_probe(self, seq: int, body: bytes, now: float) -> None:
        index, count = wire.unpack_probe(body)
        if count == 0 or count > 4 * PROBE_TRAIN_PACKETS or index >= count:
            self.dropped["out_of_range"] += 1
            return
        train = self._train
        if train is None or train.reported:
            train = self._train = _Train(count, first_seq=seq, first_t=now, start=now)
        train.received += 1
        if seq < train.first_seq:
            train.first_seq, train.first_t = seq, now
        if seq > train.last_seq:
            train.last_seq, train.last_t = seq, now
        self._train_deadline = now + PROBE_STALL_S
        if index == count - 1:
            self._finish_train(now)

    def _finish_train(self, now: float) -> None:
        train = self._train
        self._train_deadline = None
        if train is None or train.reported:
            return
        train.reported = True
        rate = train.rate_bps()
        if self.is_client:
            # the server's train: report its rate and our round trip
            report = wire.Report(rate, train.received, train.count, self.rtt_s)
        else:
            # the client's train: report it (and how long we held it), then send ours
            report = wire.Report(rate, train.received, train.count, now - train.start)
            self._queue_train()
        for _ in range(DONE_COPIES):
            self._send_control(
                lambda seq: wire.pack_report(self.send_key, self.session, seq, report)
            )

    def _on_report(self, body: bytes, now: float) -> None:
        report = wire.unpack_report(body)
        if self.is_client:
            if self._probe_started is None or self._probe_deadline is None:
                return  # a second copy, or unasked
            rtt = now - self._probe_started - report.time_s
            if rtt > 0:
                self.set_rtt(rtt)
            self._probe_deadline = None
        else:
            self.set_rtt(report.time_s)
        if report.count:
            lost = 1.0 - report.received / report.count
            self.peer_loss = LossReport(lost, lost, report.count)
        if report.rate_bps >= MIN_PROBE_RATE_FRACTION * self.cap_bps and report.received >= 2:
            self._set_rate(report.rate_bps, "probe", now)
        elif self.rate_bps is None:
            self._set_rate(self.cap_bps, "cap", now)
        self._events.append(ProbeDone(self.rate_bps or 0.0, self.rtt_s))

    def set_rtt(self, rtt_s: float) -> None:
        """An RTT measured elsewhere (the client's, told over the control channel)."""
        if rtt_s > 0:
            self.rtt_s = rtt_s
            self.rtt_measured = True

    def _set_rate(self, rate_bps: float, source: str, now: float) -> None:
        self.rate_bps = min(self.cap_bps, rate_bps)
        self.rate_source = source

    # -- sending -----------------------------------------------------------------------------
    def send(self, data: bytes, now: float, transfer: int | None = None) -> TransferStats:
        """Queue a transfer; returns its (live) stats. ``transfer`` defaults to the next id."""
        if len(data) > MAX_TRANSFER_BYTES:
            raise SpecError("transfer", f"{len(data)} bytes > {MAX_TRANSFER_BYTES}")
        if len([t for t in self._out.values() if not t.done]) >= MAX_OUTGOING_TRANSFERS:
            raise SpecError("transfer", f"more than {MAX_OUTGOING_TRANSFERS} transfers in flight")
        tid = self._next_transfer if transfer is None else transfer
        if transfer is None:
            self._next_transfer += 1
        layout = BlockLayout(len(data))
        report = self.sizing_report()
        blocks: list[_OutBlock] = []
        model = ""
        for b in range(layout.blocks):
            start, end = layout.block_range(b)
            encoder = BlockEncoder(data[start:end])
            r, model = self.redundancy.repair(encoder.k, report, layout.blocks)
            blocks.append(_OutBlock(encoder, encoder.k, r))
        stats = TransferStats(
            transfer=tid,
            transfer_bytes=len(data),
            blocks=layout.blocks,
            source_symbols=sum(b.k for b in blocks),
            repair_symbols=sum(b.r for b in blocks),
            loss_estimate=report.loss,
            loss_model=model,
            rate_bps=self._pacing_rate_bytes() * BITS_PER_BYTE,
        )
        outgoing = _Outgoing(stats, layout, blocks)
        self._out[tid] = outgoing
        # RaptorQ is systematic: the source symbols are the data and leave at once; the
        # repair symbols are computed by prepare() while the source symbols are paced out.
        # Blocks are interleaved symbol by symbol: a burst then hits every block a little.
        packets = [b.encoder.source_packets() for b in blocks]
        for block in blocks:
            block.next_esi = block.round_end = block.k + block.r
            block.queued = block.k + block.r
        longest = max(len(p) for p in packets)
        for i in range(longest):
            for index, block_packets in enumerate(packets):
                if i < len(block_packets):
                    self._queue.append(_Queued(wire.TYPE_DATA, tid, index, block_packets[i]))
        self._repair_pending.extend((tid, index) for index, b in enumerate(blocks) if b.r)
        self._forget_old_outgoing()
        return stats

    def sizing_report(self) -> LossReport:
        """The loss to size redundancy with: the peer's report of our direction; when that
        covers too few packets to show bursts (a request direction carries little) but our
        own receive window shows them, the bursts are taken from ours (same path, the
        other way): a lone request sent as back-to-back copies would die in one burst."""
        peer = self.peer_loss
        if peer.packets >= BURST_MIN_PACKETS or peer.bursty:
            return peer
        loss, after, packets = self.loss_window.estimate()
        local = LossReport(loss, after, packets)
        if not local.bursty:
            return peer
        return LossReport(max(peer.loss, loss), after, packets)

    def prepare(self) -> bool:
        """Compute the first-round repair symbols of one queued block (call it after sending
        what :meth:`datagrams_to_send` returned); True while more is pending."""
        if not self._repair_pending:
            return False
        tid, index = self._repair_pending.popleft()
        transfer = self._out.get(tid)
        if transfer is not None and not transfer.done:
            block = transfer.blocks[index]
            for packet in block.encoder.packets(block.k, block.r):
                self._queue.append(_Queued(wire.TYPE_DATA, tid, index, packet))
        elif transfer is not None:
            transfer.blocks[index].queued -= transfer.blocks[index].r
        return bool(self._repair_pending)

    def _forget_old_outgoing(self) -> None:
        done = [tid for tid, t in self._out.items() if t.done]
        for tid in done[: max(0, len(done) - COMPLETED_MEMORY)]:
            del self._out[tid]

    def _send_more(self, transfer: _Outgoing, index: int, count: int) -> None:
        block = transfer.blocks[index]
        packets = block.encoder.packets(block.next_esi, count)
        block.next_esi += len(packets)
        block.round += 1
        block.round_end = block.next_esi
        block.queued += len(packets)
        transfer.stats.extra_symbols += len(packets)
        transfer.stats.extra_rounds = max(transfer.stats.extra_rounds, block.round)
        for packet in packets:
            self._queue.append(_Queued(wire.TYPE_DATA, transfer.stats.transfer, index, packet))

    def _on_feedback(self, body: bytes, now: float) -> None:
        fb = wire.unpack_feedback(body)
        if fb.window_packets > 0:
            self.peer_loss = LossReport(fb.loss, fb.loss_after_loss, int(fb.window_packets))
        transfer = self._out.get(fb.transfer)
        if transfer is None:
            return
        if fb.kind == wire.FEEDBACK_DONE:
            if fb.rate_bps > 0 and self.rate_bps is not None:
                self._follow_rate(fb.rate_bps, transfer, now)
            if not transfer.done:
                transfer.done = True
                transfer.stats.done_at = now
                transfer.stats.decode_failures = sum(1 for b in transfer.blocks if b.round > 0)
                self._events.append(TransferDelivered(transfer.stats))
            return
        if transfer.done or fb.block >= len(transfer.blocks):
            return
        block = transfer.blocks[fb.block]
        if block.queued > 0 or fb.ask <= block.answered_ask:
            return  # the round is still leaving, or this ask was answered already
        last = transfer.last_sent_at
        if last is not None and now < last + PREMATURE_NEED_RTT_FRACTION * self.rtt_s:
            return  # asked before the round's end could have arrived
        block.answered_ask = fb.ask
        self._send_more(transfer, fb.block, self.redundancy.extra(fb.needed, self.peer_loss))

    def _follow_rate(self, arrival_bps: float, transfer: _Outgoing, now: float) -> None:
        """Arrivals slower than what actually left (not what the pacer aimed at: a busy
        sender falls short of its rate by itself) mean a queue: follow them down; arrivals
        that keep up let the rate grow back towards the cap."""
        stats = transfer.stats
        current = self.rate_bps or self.cap_bps
        # what actually left before the DONE (the rest of a round is dropped on DONE)
        if stats.first_at is None or transfer.last_sent_at is None:
            return
        span = transfer.last_sent_at - stats.first_at
        count = transfer.built - 1
        if span < MIN_RATE_SAMPLE_S or count < MIN_RATE_SAMPLE_PACKETS:
            return
        wire_bits = (wire.DATA_DATAGRAM_BYTES + wire.IPV4_UDP_HEADER_BYTES) * BITS_PER_BYTE
        sent_bps = count * wire_bits / span
        floor = RATE_FLOOR_FRACTION * self.cap_bps
        if arrival_bps < RATE_DECREASE_BELOW * min(current, sent_bps):
            self._set_rate(max(floor, arrival_bps), "feedback", now)
        elif current < self.cap_bps:
            self._set_rate(current * RATE_INCREASE, self.rate_source, now)

    # -- receiving ---------------------------------------------------------------------------
    def receive_datagram(self, datagram: bytes, now: float) -> bool:
        """Take one datagram (``now``: its arrival); False when it was dropped (counted)."""
        head = wire.peek_session(datagram)
        if head is None:
            self.dropped["short"] += 1
            return False
        kind, session, seq = head
        if session != self.session:
            self.dropped["unknown_session"] += 1
            return False
        if len(datagram) > wire.MAX_DATAGRAM_BYTES:
            self.dropped["oversized"] += 1
            return False
        body = wire.verify(self.recv_key, datagram)
        if body is None:
            self.dropped["bad_tag"] += 1
            return False
        if not self._replay.check(seq):
            self.dropped["replay"] += 1
            return False
        self.loss_window.mark(seq)
        self.received_datagrams += 1
        self.last_activity = now
        try:
            if kind == wire.TYPE_DATA:
                return self._on_data(seq, body, now)
            if kind == wire.TYPE_PROBE:
                self._on_probe(seq, body, now)
            elif kind == wire.TYPE_REPORT:
                self._on_report(body, now)
            elif kind == wire.TYPE_FEEDBACK:
                self._on_feedback(body, now)
            else:
                self.dropped["bad_type"] += 1
                return False
        except ValueError:
            self.dropped["malformed"] += 1
            return False
        return True

    def _on_data(self, seq: int, body: bytes, now: float) -> bool:
        header, packet = wire.unpack_data(body)
        if len(packet) != wire.RAPTORQ_PAYLOAD_ID_BYTES + wire.SYMBOL_BYTES or sbn_of(packet):
            self.dropped["malformed"] += 1
            return False
        tid = header.transfer
        if tid in self._completed:
            self.dropped["late"] += 1
            if header.round > self._completed[tid]:
                # the sender is in a later round: our DONE was lost; say it again, once
                self._completed[tid] = header.round
                self._send_done(tid, None)
            return False
        incoming = self._incoming(header, seq, now)
        if incoming is None:
            return False
        layout = incoming.layout
        if header.block >= layout.blocks:
            self.dropped["out_of_range"] += 1
            return False
        block = incoming.blocks.get(header.block)
        k = layout.block_symbols(header.block)
        esi = esi_of(packet)
        if esi >= MAX_ESI_FACTOR * k + 256 or header.round_end > MAX_ESI_FACTOR * k + 256:
            self.dropped["out_of_range"] += 1
            return False
        if block is None:
            start, end = layout.block_range(header.block)
            block = _InBlock(BlockDecoder(end - start), k)
            incoming.blocks[header.block] = block
        if block.decoder.data is not None:
            self.dropped["late"] += 1
            return False
        if esi in block.decoder.esis:
            self.dropped["duplicate"] += 1
            return False
        if block.decoder.received >= MAX_SYMBOLS_PER_BLOCK_FACTOR * k + 64:
            self.dropped["over_budget"] += 1
            return False
        self._note_arrival(incoming, block, header, seq, esi, now)
        if block.decoder.add(packet):
            block.ask_deadline = None
            if all(
                (b := incoming.blocks.get(i)) is not None and b.decoder.data is not None
                for i in range(layout.blocks)
            ):
                self._complete(incoming, now)
        elif esi == block.round_end - 1 and (block.asks == 0 or header.round > block.asked_round):
            self._ask(incoming, header.block, block, now)  # a fresh round is over, short
        return True

    def _incoming(self, header: Any, seq: int, now: float) -> _Incoming | None:
        """The transfer a data datagram belongs to, begun on its first datagram; None (and
        the drop counted) when it cannot be taken."""
        tid = header.transfer
        incoming = self._in.get(tid)
        if incoming is None:
            if header.transfer_bytes > MAX_TRANSFER_BYTES or header.transfer_bytes == 0:
                self.dropped["oversized"] += 1
                return None
            if len(self._in) >= MAX_INCOMING_TRANSFERS:
                self.dropped["too_many_transfers"] += 1
                return None
            layout = BlockLayout(header.transfer_bytes)
            stats = TransferStats(
                transfer=tid,
                transfer_bytes=header.transfer_bytes,
                blocks=layout.blocks,
                source_symbols=layout.total_symbols,
                repair_symbols=0,
                loss_estimate=header.loss_estimate,
                first_at=now,
            )
            incoming = _Incoming(stats, layout, first_seq=seq, first_t=now)
            self._in[tid] = incoming
        elif header.transfer_bytes != incoming.layout.transfer_bytes:
            self.dropped["malformed"] += 1
            return None
        return incoming

    def _note_arrival(
        self, incoming: _Incoming, block: _InBlock, header: Any, seq: int, esi: int, now: float
    ) -> None:
        """Arrival bookkeeping (first-round datagrams give the arrival rate)."""
        if incoming.last_at:
            gap = now - incoming.last_at
            incoming.gap_s = gap if not incoming.gap_s else 0.9 * incoming.gap_s + 0.1 * gap
        incoming.last_at = now
        block.last_at = now
        if header.round == 0 and seq > incoming.last_seq:
            incoming.last_seq, incoming.last_t = seq, now
        block.round_end = max(block.round_end, header.round_end)
        block.max_round = max(block.max_round, header.round)
        block.highest_esi = max(block.highest_esi, esi)
        if header.round == 0:
            incoming.stats.repair_symbols = sum(
                b.round_end - b.k for b in incoming.blocks.values() if b.max_round == 0
            ) or max(0, header.round_end - block.k)

    def _arrival_rate(self, incoming: _Incoming) -> float:
        span = incoming.last_t - incoming.first_t
        count = incoming.last_seq - incoming.first_seq
        if count < MIN_RATE_SAMPLE_PACKETS or span < MIN_RATE_SAMPLE_S:
            return 0.0
        wire_bits = (wire.DATA_DATAGRAM_BYTES + wire.IPV4_UDP_HEADER_BYTES) * BITS_PER_BYTE
        return count * wire_bits / span

    def _complete(self, incoming: _Incoming, now: float) -> None:
        stats = incoming.stats
        stats.done_at = now
        stats.rate_bps = self._arrival_rate(incoming)
        stats.received_symbols = sum(b.decoder.received for b in incoming.blocks.values())
        stats.extra_rounds = max(b.max_round for b in incoming.blocks.values())
        # a block that decoded only with symbols of a later round (an ask that was not
        # answered because the round was still arriving is no failure)
        stats.decode_failures = sum(1 for b in incoming.blocks.values() if b.max_round)
        data = b"".join(
            incoming.blocks[i].decoder.data or b"" for i in range(incoming.layout.blocks)
        )
        del self._in[stats.transfer]
        self._completed[stats.transfer] = max(b.max_round for b in incoming.blocks.values())
        while len(self._completed) > COMPLETED_MEMORY:
            self._completed.popitem(last=False)
        for _ in range(DONE_COPIES):
            self._send_done(stats.transfer, stats.rate_bps)
        self._events.append(TransferReceived(data, stats))

    def _loss_fields(self) -> tuple[float, float, int]:
        return self.loss_window.estimate()

    def _send_done(self, tid: int, rate_bps: float | None) -> None:
        loss, after, packets = self._loss_fields()
        fb = wire.Feedback(tid, wire.FEEDBACK_DONE, rate_bps or 0.0, loss, after, packets, 0.0)
        self._send_control(lambda seq: wire.pack_feedback(self.send_key, self.session, seq, fb))

    def _ask(self, incoming: _Incoming, index: int, block: _InBlock, now: float) -> None:
        if block.asks >= MAX_ASKS:
            del self._in[incoming.stats.transfer]
            self._events.append(
                TransferFailed(
                    incoming.stats.transfer, f"block {index}: {MAX_ASKS} asks unanswered"
                )
            )
            return
        block.asks += 1
        block.asked_round = block.max_round
        needed = max(1, block.k + RAPTORQ_OVERHEAD_SYMBOLS - block.decoder.received)
        loss, after, packets = self._loss_fields()
        fb = wire.Feedback(
            incoming.stats.transfer,
            wire.FEEDBACK_NEED,
            0.0,
            loss,
            after,
            packets,
            float(block.asks),
            index,
            needed,
        )
        for _ in range(DONE_COPIES):
            self._send_control(lambda seq: wire.pack_feedback(self.send_key, self.session, seq, fb))
        block.ask_deadline = now + self.rtt_s + TAIL_MARGIN_S + self._stall_s(incoming)

    def _stall_s(self, incoming: _Incoming, block: _InBlock | None = None) -> float:
        floor = STALL_MIN_S
        if block is not None and block.highest_esi < block.round_end - 1:
            floor = STALL_MID_ROUND_S
        return max(floor, STALL_GAPS * incoming.gap_s)

    def _block_deadline(self, incoming: _Incoming, block: _InBlock) -> float:
        stall = self._stall_s(incoming, block)
        if block.ask_deadline is not None:
            return max(block.ask_deadline, block.last_at + stall)
        return max(block.last_at, incoming.last_at) + stall

    # -- timers ------------------------------------------------------------------------------
    def handle_timer(self, now: float) -> None:
        if self._repair_pending and not self._queue:
            self.prepare()
        if self._train_deadline is not None and now >= self._train_deadline:
            self._finish_train(now)
        if self._probe_deadline is not None and now >= self._probe_deadline:
            if self._probe_tries >= PROBE_RETRIES:
                self._probe_deadline = None
                self._events.append(TransferFailed(0, "path probe unanswered"))
            else:
                self.start_probe(now)
        for incoming in list(self._in.values()):
            for index, block in list(incoming.blocks.items()):
                if block.decoder.data is None and now >= self._block_deadline(incoming, block):
                    self._ask(incoming, index, block, now)
                    if incoming.stats.transfer not in self._in:
                        break
        for transfer in self._out.values():
            if transfer.done or transfer.tail_deadline is None or now < transfer.tail_deadline:
                continue
            if any(b.queued for b in transfer.blocks):
                transfer.tail_deadline = None
                continue
            if transfer.tail_probes >= MAX_TAIL_PROBES:
                transfer.done = True
                self._events.append(
                    TransferFailed(transfer.stats.transfer, "no feedback from the receiver")
                )
                continue
            transfer.tail_probes += 1
            transfer.tail_deadline = None
            for index in range(len(transfer.blocks)):
                self._send_more(transfer, index, TAIL_PROBE_SYMBOLS)
