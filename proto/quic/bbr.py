"""BBR version 1 for aioquic: the algorithm of Linux's net/ipv4/tcp_bbr.c, in bytes.

draft-cardwell-iccrg-bbr-congestion-control-00 as the kernel runs it (the ``bbr`` of
``TCP_CONGESTION`` on this testbed's hosts), registered with aioquic's own
``register_congestion_control`` (proto.quic.edge.TESTBED_CONTROLS); no fork of aioquic. On
every ACK:

- a delivery-rate sample (:mod:`proto.quic.delivery`) feeds a windowed maximum over 10
  packet-timed round trips (:mod:`proto.quic.minmax`): the bottleneck bandwidth ``bw``;
- the RTT of the newest packet acknowledged feeds a 10 s windowed minimum: ``min_rtt``;
- the mode (Startup, Drain, ProbeBW, ProbeRTT) sets a pacing gain and a cwnd gain;
- ``pacing_rate = pacing_gain * bw * 0.99`` and ``cwnd = cwnd_gain * bw * min_rtt`` plus
  Linux's allowances (GSO quantization, ACK aggregation), approached by slow start.

Loss is not a congestion signal: no multiplicative decrease. What Linux does on loss is
done here too: the cwnd gives back the bytes lost on the ACK that reported them, the first
round of a recovery follows packet conservation, the cwnd saved on entering recovery is
restored on leaving it, and a persistently lossy, rate-consistent path is taken for a
token-bucket policer (the "long-term" bandwidth).

Mapping of the kernel's TCP state to QUIC (where the two differ):

- cwnd and every count are bytes; the kernel's per-packet constants (4-packet minimum,
  10-packet initial window, the quantization budget) are multiplied by the datagram size.
- TCP's Recovery state starts when a loss is declared and ends when a packet sent after
  the latest loss declared is acknowledged: every hole found must be repaired first, as
  Linux leaves Recovery only when the cumulative ACK passes ``high_seq`` and re-enters at
  once while holes remain (so BBR sees one Recovery under continuous random loss, not one
  per round, and conserves packets only in its first round). Persistent congestion
  (RFC 9002 section 7.6) is TCP's RTO (the Loss state: cwnd = in flight + 1 packet).
- The kernel's earliest departure time of the next packet (``tcp_wstamp_ns``) is the
  pacer's: it sets :attr:`BbrCongestionControl.departure_time_s` after each datagram
  (proto.quic.edge.ControlPacer); without a pacer that does, the next packet may leave now.
- One rate sample per ACK frame needs the end of an ACK's processing: the owner of the
  connection calls :meth:`BbrCongestionControl.on_ack_end` after aioquic's
  ``on_ack_received`` (proto.quic.edge installs that); without it the ACK is closed at the
  next callback (a send, or a callback with another ``now``), one ACK late.
- The sender reports application-limited moments through :meth:`on_app_limited`.
- Not carried over: ``undo_cwnd`` (aioquic detects no spurious retransmission) and TSO
  autosizing itself (the quantization budget uses the same goal, in datagrams of one GSO
  send).
"""

from __future__ import annotations

import math
import random
from enum import IntEnum
from typing import Any

from proto.quic.adapter import (
    K_INITIAL_WINDOW,
    QuicCongestionControl,
    QuicSentPacket,
)
from proto.quic.delivery import DeliveryRateEstimator, PacketSendState, RateSample
from proto.quic.minmax import WindowedFilter

BBR_UNIT = 256
"""tcp_bbr.c BBR_SCALE 8: gains are fractions of 256, and are kept exactly so here."""
BBR_HIGH_GAIN = (BBR_UNIT * 2885 // 1000 + 1) / BBR_UNIT
"""2/ln 2 as tcp_bbr.c rounds it (739/256 = 2.887): Startup's pacing and cwnd gain."""
BBR_DRAIN_GAIN = (BBR_UNIT * 1000 // 2885) / BBR_UNIT
"""1/high_gain (88/256 = 0.344): Drain's pacing gain, empties Startup's queue in a round."""
BBR_CWND_GAIN = 2.0
"""ProbeBW's cwnd gain (bbr_cwnd_gain): tolerates delayed and stretched ACKs."""
BBR_PACING_GAIN_CYCLE = (5 / 4, 3 / 4, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
"""ProbeBW's eight phases (bbr_pacing_gain[]): probe, drain, cruise six."""
CYCLE_LEN = len(BBR_PACING_GAIN_CYCLE)
BBR_CYCLE_RAND = 7
"""The start phase is drawn from the 7 phases other than the 0.75 one (bbr_cycle_rand)."""
BW_FILTER_ROUNDS = CYCLE_LEN + 2
"""Window of the max-bandwidth filter in packet-timed round trips (bbr_bw_rtts)."""
MIN_RTT_WINDOW_S = 10.0
"""Window of the min-RTT filter (bbr_min_rtt_win_sec)."""
PROBE_RTT_DURATION_S = 0.200
"""Least time at the minimum cwnd in ProbeRTT (bbr_probe_rtt_mode_ms)."""
CWND_MIN_TARGET_PACKETS = 4
"""ProbeRTT's cwnd and the floor of every cwnd (bbr_cwnd_min_target)."""
FULL_BW_THRESH = 5 / 4
"""Startup's bandwidth must grow by 25 % per round to go on (bbr_full_bw_thresh)..."""
FULL_BW_COUNT = 3
"""...or, after 3 rounds without that growth, the pipe is full (bbr_full_bw_cnt)."""
PACING_MARGIN = 0.99
"""Pace 1 % below the estimate to drain queues (bbr_pacing_margin_percent)."""
INIT_CWND_PACKETS = K_INITIAL_WINDOW
"""TCP_INIT_CWND (RFC 6928); aioquic's initial window is the same 10 datagrams."""
NOMINAL_RTT_S = 0.001
"""The RTT assumed before any sample (bbr_init_pacing_rate_from_rtt: USEC_PER_MSEC)."""
MIN_TSO_RATE_BYTES_PER_S = 1_200_000 / 8
"""Below 1.2 Mbit/s a GSO burst is one datagram, above two (bbr_min_tso_rate)."""
PACING_SHIFT = 10
"""sk_pacing_shift: a GSO burst carries about 1/1024 s (~1 ms) of the pacing rate."""
GSO_MAX_BYTES = 65_000
"""The largest GSO send of this sender (proto.quic.edge UDP_GSO_MAX_BYTES): Linux caps a TSO
burst at GSO_MAX_SIZE - 1 - MAX_TCP_HEADER (65,215 bytes on x86-64)."""
LT_INTERVAL_MIN_ROUNDS = 4
"""Policer detection: the least round trips of a sampling interval (bbr_lt_intvl_min_rtts)."""
LT_LOSS_THRESH = 50 / BBR_UNIT
"""An interval is lossy when lost / delivered >= 19.5 % (bbr_lt_loss_thresh)."""
LT_BW_RATIO = 1 / 8
"""Two intervals' rates are consistent within 1/8 (bbr_lt_bw_ratio)..."""
LT_BW_DIFF_BYTES_PER_S = 4000 / 8
"""...or within 4 kbit/s (bbr_lt_bw_diff)."""
LT_BW_MAX_ROUNDS = 48
"""Round trips to pace at the policed rate before probing again (bbr_lt_bw_max_rtts)."""
EXTRA_ACKED_GAIN = 1.0
"""Gain on the ACK-aggregation allowance (bbr_extra_acked_gain)."""
EXTRA_ACKED_WIN_ROUNDS = 5
"""Each of the two aggregation slots covers 5 round trips (bbr_extra_acked_win_rtts)."""
ACK_EPOCH_RESET_PACKETS = 1 << 20
"""An aggregation epoch restarts after this many packets (bbr_ack_epoch_acked_reset_thresh)."""
EXTRA_ACKED_MAX_S = 0.100
"""The aggregation allowance is at most 100 ms of bandwidth (bbr_extra_acked_max_us)."""
DEFAULT_PHASE_SEED = 25
"""Seed of the start-phase draws of the registered factory (reseed: :func:`seed_phases`)."""


class BbrMode(IntEnum):
    """enum bbr_mode, with the kernel's numbers."""

    STARTUP = 0
    DRAIN = 1
    PROBE_BW = 2
    PROBE_RTT = 3


class CaState(IntEnum):
    """The TCP congestion-avoidance states BBR looks at (enum tcp_ca_state numbers)."""

    OPEN = 0
    RECOVERY = 3
    LOSS = 4


_phase_rng = random.Random(DEFAULT_PHASE_SEED)


def seed_phases(seed: int) -> None:
    """Reseed the draws of ProbeBW start phases of connections made by name ("bbr")."""
    _phase_rng.seed(seed)


class BbrCongestionControl(QuicCongestionControl):
    """tcp_bbr.c on aioquic's congestion-control interface (module docstring)."""

    def __init__(self, *, max_datagram_size: int, rng: random.Random | None = None) -> None:
        super().__init__(max_datagram_size=max_datagram_size)
        self.max_datagram_size = max_datagram_size
        self.rng = rng if rng is not None else _phase_rng
        self.delivery = DeliveryRateEstimator(max_datagram_size=max_datagram_size)
        self.max_pacing_rate_bytes_per_s = math.inf
        """sk_max_pacing_rate (SO_MAX_PACING_RATE): the pacing rate's cap."""
        self._sent: dict[tuple[int, int], PacketSendState] = {}
        self._ack_now: float | None = None
        self._srtt_s: float | None = None
        self._init_model()

    def _init_model(self) -> None:
        """bbr_init."""
        self.mode = BbrMode.STARTUP
        self.pacing_gain = BBR_HIGH_GAIN
        self.cwnd_gain = BBR_HIGH_GAIN
        self.ca_state = CaState.OPEN
        self.prev_ca_state = CaState.OPEN
        self.recovery_start_s = -math.inf
        self.bw_filter = WindowedFilter(BW_FILTER_ROUNDS, time=0, value=0.0)
        self.round_count = 0
        self.next_round_delivered_bytes = 0
        self.round_start = False
        self.packet_conservation = False
        self.prior_cwnd_bytes = 0
        self.idle_restart = False
        self.min_rtt_s = math.inf
        self.min_rtt_stamp_s: float | None = None
        self.probe_rtt_done_s: float | None = None
        self.probe_rtt_round_done = False
        self.full_bw_bytes_per_s = 0.0
        self.full_bw_count = 0
        self.full_bw_reached = False
        self.cycle_index = 0
        self.cycle_stamp_s = 0.0
        self.has_seen_rtt = False
        self.departure_time_s = 0.0
        """When the pacer will release the next datagram (Linux tcp_wstamp_ns)."""
        self.lt = LongTermBandwidth()
        self.ack_epoch_start_s: float | None = None
        self.ack_epoch_acked_bytes = 0
        self.extra_acked_bytes = [0.0, 0.0]
        self.extra_acked_win_rounds = 0
        self.extra_acked_win_index = 0
        self.pacing_rate_bytes_per_s = 0.0
        self._init_pacing_rate_from_rtt()

    # --- aioquic's interface ---------------------------------------------------------------

    @property  # type: ignore[override]
    def bytes_in_flight(self) -> int:
        return self.delivery.in_flight_bytes

    def on_packet_sent(self, *, packet: QuicSentPacket) -> None:
        now = packet.sent_time if packet.sent_time is not None else 0.0
        self._close_pending_ack()
        if self.min_rtt_stamp_s is None:
            self.min_rtt_stamp_s = now  # bbr_init: the window starts with the connection
            self.ack_epoch_start_s = now
        if self.delivery.in_flight_bytes == 0:
            self._on_tx_start(now)
        self._sent[(packet.epoch, packet.packet_number)] = self.delivery.on_packet_sent(
            packet_number=packet.packet_number, size_bytes=packet.sent_bytes, now=now
        )

    def on_packet_acked(self, *, now: float, packet: QuicSentPacket) -> None:
        if self._ack_now is not None and self._ack_now != now:
            self._close_pending_ack()
        state = self._sent.pop((packet.epoch, packet.packet_number), None)
        if state is None:
            return
        self._ack_now = now
        self.delivery.on_packet_acked(state, now=now)

    def on_packets_expired(self, *, packets: Any) -> None:
        for packet in packets:
            state = self._sent.pop((packet.epoch, packet.packet_number), None)
            if state is not None:
                self.delivery.on_packet_expired(state)

    def on_packets_lost(self, *, now: float, packets: Any) -> None:
        if self._ack_now is not None and self._ack_now != now:
            self._close_pending_ack()
        lost = False
        for packet in packets:
            state = self._sent.pop((packet.epoch, packet.packet_number), None)
            if state is not None:
                self.delivery.on_packet_lost(state)
                lost = True
        if not lost:
            return
        # tcp_enter_recovery calls bbr_ssthresh (save the cwnd); Linux also re-enters at
        # once, saving again, when high_seq is passed with holes left
        self._save_cwnd()
        if self.ca_state == CaState.OPEN:
            self.ca_state = CaState.RECOVERY
        self.recovery_start_s = now  # the hole just found must be repaired to leave

    def on_persistent_congestion(self) -> None:
        """RFC 9002 section 7.6 as TCP's RTO (tcp_enter_loss, then bbr_set_state(Loss))."""
        mds = self.max_datagram_size
        self.congestion_window = self.delivery.in_flight_bytes + mds
        self.ca_state = CaState.LOSS
        self.prev_ca_state = CaState.LOSS
        # high_seq is what was sent by the timeout: the losses just reported set it
        self.full_bw_bytes_per_s = 0.0
        self.round_start = True  # treat the timeout like the end of a round
        self.lt.sample(self, losses=True, app_limited=False)

    def on_rtt_measurement(self, *, now: float, rtt: float) -> None:
        # the smoothed RTT (RFC 6298 weights) for the first pacing rate, as tp->srtt_us
        if self._srtt_s is None:
            self._srtt_s = rtt
        else:
            self._srtt_s += (rtt - self._srtt_s) / 8

    def on_ack_end(self, *, now: float) -> None:
        """The ACK frame has been processed (acknowledged and lost packets reported)."""
        self._ack_now = now
        self._close_pending_ack()

    def on_app_limited(self) -> None:
        """The sender had nothing to send while its window had room (tcp_rate_check_app_limited)."""
        self.delivery.on_app_limited()

    def get_log_data(self) -> dict[str, Any]:
        data = super().get_log_data()
        data.update(
            pacing_rate=int(self.pacing_rate_bytes_per_s * 8),
            bbr_mode=self.mode.name.lower(),
            bbr_bw=int(self.bandwidth_bytes_per_s * 8),
            bbr_min_rtt=None if self.min_rtt_s == math.inf else self.min_rtt_s * 1e3,
            bbr_pacing_gain=self.pacing_gain,
            bbr_cwnd_gain=self.cwnd_gain,
        )
        return data

    def counters(self) -> dict[str, int | None]:
        """The state in TCP_INFO's and tcp_bbr_info's units (bytes/s, µs, gains x 256)."""
        rate = self.delivery.delivery_rate_bytes_per_s
        return {
            "pacing_rate": int(self.pacing_rate_bytes_per_s),
            "delivery_rate": None if rate is None else int(rate),
            "bbr_mode": int(self.mode),
            "bbr_bw": int(self.bandwidth_bytes_per_s),
            "bbr_min_rtt_us": None if self.min_rtt_s == math.inf else int(self.min_rtt_s * 1e6),
            "bbr_pacing_gain": round(self.pacing_gain * BBR_UNIT),
            "bbr_cwnd_gain": round(self.cwnd_gain * BBR_UNIT),
        }

    # --- the model -------------------------------------------------------------------------

    @property
    def max_bw_bytes_per_s(self) -> float:
        """bbr_max_bw: the windowed maximum delivery rate."""
        return self.bw_filter.value

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """bbr_bw: the policed rate while one is in use, else the windowed maximum."""
        return self.lt.bw_bytes_per_s if self.lt.use_bw else self.max_bw_bytes_per_s

    def _close_pending_ack(self) -> None:
        now = self._ack_now
        if now is None:
            return
        self._ack_now = None
        self._update_ca_state()
        self._main(self.delivery.generate_rate_sample(now=now), now)

    def _update_ca_state(self) -> None:
        """Leave Recovery or Loss once a packet sent after its start is acknowledged (the
        cumulative ACK passing high_seq)."""
        newest = self.delivery.newest_acked_sent_time_s
        if self.ca_state != CaState.OPEN and newest is not None and newest > self.recovery_start_s:
            self.ca_state = CaState.OPEN

    def _main(self, rs: RateSample, now: float) -> None:
        """bbr_main: update the model, then the pacing rate and the cwnd."""
        self._update_model(rs, now)
        bw = self.bandwidth_bytes_per_s
        self._set_pacing_rate(bw, self.pacing_gain)
        self._set_cwnd(rs, bw, self.cwnd_gain)

    def _update_model(self, rs: RateSample, now: float) -> None:
        """bbr_update_model."""
        self._update_bw(rs)
        self._update_ack_aggregation(rs, now)
        self._update_cycle_phase(rs, now)
        self._check_full_bw_reached(rs)
        self._check_drain(now)
        self._update_min_rtt(rs, now)
        self._update_gains()

    def _update_bw(self, rs: RateSample) -> None:
        """bbr_update_bw: count packet-timed rounds; feed the max filter."""
        self.round_start = False
        if not rs.is_valid:
            return
        if rs.prior_delivered_bytes >= self.next_round_delivered_bytes:
            self.next_round_delivered_bytes = self.delivery.delivered_bytes
            self.round_count += 1
            self.round_start = True
            self.packet_conservation = False
        self.lt.sample(self, losses=rs.lost_bytes > 0, app_limited=rs.is_app_limited)
        bw = rs.delivered_bytes / rs.interval_s
        # an app-limited sample says what the application did, unless it beats the model
        if not rs.is_app_limited or bw >= self.max_bw_bytes_per_s:
            self.bw_filter.running_max(self.round_count, bw)

    def _update_ack_aggregation(self, rs: RateSample, now: float) -> None:
        """bbr_update_ack_aggregation: the most data acknowledged beyond bw * time."""
        if rs.acked_bytes <= 0 or not rs.is_valid:
            return
        if self.round_start:
            self.extra_acked_win_rounds = min(0x1F, self.extra_acked_win_rounds + 1)
            if self.extra_acked_win_rounds >= EXTRA_ACKED_WIN_ROUNDS:
                self.extra_acked_win_rounds = 0
                self.extra_acked_win_index ^= 1
                self.extra_acked_bytes[self.extra_acked_win_index] = 0.0
        start = self.ack_epoch_start_s if self.ack_epoch_start_s is not None else now
        expected = self.bandwidth_bytes_per_s * (now - start)
        reset_bytes = ACK_EPOCH_RESET_PACKETS * self.max_datagram_size
        if (
            self.ack_epoch_acked_bytes <= expected
            or self.ack_epoch_acked_bytes + rs.acked_bytes >= reset_bytes
        ):
            self.ack_epoch_acked_bytes = 0
            self.ack_epoch_start_s = now
            expected = 0.0
        self.ack_epoch_acked_bytes = min(
            reset_bytes - 1, self.ack_epoch_acked_bytes + rs.acked_bytes
        )
        extra = min(self.ack_epoch_acked_bytes - expected, float(self.congestion_window))
        index = self.extra_acked_win_index
        self.extra_acked_bytes[index] = max(self.extra_acked_bytes[index], extra)

    def _update_cycle_phase(self, rs: RateSample, now: float) -> None:
        """bbr_update_cycle_phase."""
        if self.mode == BbrMode.PROBE_BW and self._is_next_cycle_phase(rs, now):
            self._advance_cycle_phase()

    def _is_next_cycle_phase(self, rs: RateSample, now: float) -> bool:
        """bbr_is_next_cycle_phase: a phase lasts min_rtt; probing may stop early on loss
        or once in flight reaches its target, draining once in flight is down to BDP."""
        delivered_s = self._delivered_time_s(now)
        is_full_length = delivered_s - self.cycle_stamp_s > self.min_rtt_s
        if self.pacing_gain == 1.0:
            return is_full_length
        inflight = self._bytes_in_net_at_edt(rs.prior_in_flight_bytes, now)
        bw = self.max_bw_bytes_per_s
        if self.pacing_gain > 1.0:
            return is_full_length and (
                rs.lost_bytes > 0 or inflight >= self._inflight_bytes(bw, self.pacing_gain)
            )
        return is_full_length or inflight <= self._inflight_bytes(bw, 1.0)

    def _advance_cycle_phase(self) -> None:
        """bbr_advance_cycle_phase."""
        self.cycle_index = (self.cycle_index + 1) % CYCLE_LEN
        self.cycle_stamp_s = self._delivered_time_s(0.0)

    def _delivered_time_s(self, default: float) -> float:
        """tp->delivered_mstamp: when the latest delivery was acknowledged."""
        stamp = self.delivery.delivered_time_s
        return default if stamp is None else stamp

    def _check_full_bw_reached(self, rs: RateSample) -> None:
        """bbr_check_full_bw_reached: 3 rounds without 25 % growth fill the pipe."""
        if self.full_bw_reached or not self.round_start or rs.is_app_limited:
            return
        if self.max_bw_bytes_per_s >= self.full_bw_bytes_per_s * FULL_BW_THRESH:
            self.full_bw_bytes_per_s = self.max_bw_bytes_per_s
            self.full_bw_count = 0
            return
        self.full_bw_count += 1
        self.full_bw_reached = self.full_bw_count >= FULL_BW_COUNT

    def _check_drain(self, now: float) -> None:
        """bbr_check_drain: Startup filled the pipe, drain until in flight is one BDP."""
        if self.mode == BbrMode.STARTUP and self.full_bw_reached:
            self.mode = BbrMode.DRAIN
            self.ssthresh = self._inflight_bytes(self.max_bw_bytes_per_s, 1.0)
        if self.mode == BbrMode.DRAIN and self._bytes_in_net_at_edt(
            self.delivery.in_flight_bytes, now
        ) <= self._inflight_bytes(self.max_bw_bytes_per_s, 1.0):
            self._reset_probe_bw_mode()

    def _update_min_rtt(self, rs: RateSample, now: float) -> None:
        """bbr_update_min_rtt: the 10 s min filter, and ProbeRTT when it expires."""
        stamp = self.min_rtt_stamp_s if self.min_rtt_stamp_s is not None else now
        filter_expired = now > stamp + MIN_RTT_WINDOW_S
        # whole microseconds, as the kernel keeps it: an RTT equal to the minimum (to a
        # float's last bit) is no new minimum and does not postpone ProbeRTT
        rtt = None if rs.rtt_s is None else round(rs.rtt_s * 1e6) / 1e6
        if rtt is not None and (rtt < self.min_rtt_s or (filter_expired and not rs.is_ack_delayed)):
            self.min_rtt_s = rtt
            self.min_rtt_stamp_s = now
        if filter_expired and not self.idle_restart and self.mode != BbrMode.PROBE_RTT:
            self.mode = BbrMode.PROBE_RTT  # dip, drain the queue
            self._save_cwnd()
            self.probe_rtt_done_s = None
        if self.mode == BbrMode.PROBE_RTT:
            self._probe_rtt(now)
        if rs.delivered_bytes > 0:
            self.idle_restart = False

    def _probe_rtt(self, now: float) -> None:
        """Hold 4 packets in flight for max(200 ms, one round), ignoring low samples."""
        self.delivery.on_app_limited()
        if (
            self.probe_rtt_done_s is None
            and self.delivery.in_flight_bytes <= CWND_MIN_TARGET_PACKETS * self.max_datagram_size
        ):
            self.probe_rtt_done_s = now + PROBE_RTT_DURATION_S
            self.probe_rtt_round_done = False
            self.next_round_delivered_bytes = self.delivery.delivered_bytes
        elif self.probe_rtt_done_s is not None:
            if self.round_start:
                self.probe_rtt_round_done = True
            if self.probe_rtt_round_done:
                self._check_probe_rtt_done(now)

    def _check_probe_rtt_done(self, now: float) -> None:
        """bbr_check_probe_rtt_done."""
        if self.probe_rtt_done_s is None or not now > self.probe_rtt_done_s:
            return
        self.min_rtt_stamp_s = now  # wait a while until the next ProbeRTT
        self.congestion_window = max(self.congestion_window, self.prior_cwnd_bytes)
        self._reset_mode()

    def _update_gains(self) -> None:
        """bbr_update_gains."""
        if self.mode == BbrMode.STARTUP:
            self.pacing_gain, self.cwnd_gain = BBR_HIGH_GAIN, BBR_HIGH_GAIN
        elif self.mode == BbrMode.DRAIN:
            self.pacing_gain, self.cwnd_gain = BBR_DRAIN_GAIN, BBR_HIGH_GAIN
        elif self.mode == BbrMode.PROBE_BW:
            gain = 1.0 if self.lt.use_bw else BBR_PACING_GAIN_CYCLE[self.cycle_index]
            self.pacing_gain, self.cwnd_gain = gain, BBR_CWND_GAIN
        else:
            self.pacing_gain, self.cwnd_gain = 1.0, 1.0

    def _reset_mode(self) -> None:
        """bbr_reset_mode: back to Startup unless the pipe was filled."""
        if not self.full_bw_reached:
            self.mode = BbrMode.STARTUP
        else:
            self._reset_probe_bw_mode()

    def _reset_probe_bw_mode(self) -> None:
        """bbr_reset_probe_bw_mode: a random start phase, never the 0.75 one."""
        self.mode = BbrMode.PROBE_BW
        self.cycle_index = CYCLE_LEN - 1 - self.rng.randrange(BBR_CYCLE_RAND)
        self._advance_cycle_phase()

    def _save_cwnd(self) -> None:
        """bbr_save_cwnd: the last known good cwnd, to restore after recovery or ProbeRTT."""
        if self.prev_ca_state < CaState.RECOVERY and self.mode != BbrMode.PROBE_RTT:
            self.prior_cwnd_bytes = self.congestion_window
        else:
            self.prior_cwnd_bytes = max(self.prior_cwnd_bytes, self.congestion_window)

    def _on_tx_start(self, now: float) -> None:
        """bbr_cwnd_event(CA_EVENT_TX_START): sending again after an app-limited idle."""
        if not self.delivery.is_app_limited:
            return
        self.idle_restart = True
        self.ack_epoch_start_s = now
        self.ack_epoch_acked_bytes = 0
        if self.mode == BbrMode.PROBE_BW:
            self._set_pacing_rate(self.bandwidth_bytes_per_s, 1.0)
        elif self.mode == BbrMode.PROBE_RTT:
            self._check_probe_rtt_done(now)

    # --- pacing rate and cwnd --------------------------------------------------------------

    def _pacing_rate_of(self, bw: float, gain: float) -> float:
        """bbr_bw_to_pacing_rate: gain * bw less the 1 % margin, at most the cap."""
        return min(bw * gain * PACING_MARGIN, self.max_pacing_rate_bytes_per_s)

    def _init_pacing_rate_from_rtt(self) -> None:
        """bbr_init_pacing_rate_from_rtt: high_gain * cwnd / srtt (1 ms before a sample)."""
        rtt = NOMINAL_RTT_S
        if self._srtt_s is not None:
            rtt = max(self._srtt_s, 1e-6)
            self.has_seen_rtt = True
        bw = self.congestion_window / rtt
        self.pacing_rate_bytes_per_s = self._pacing_rate_of(bw, BBR_HIGH_GAIN)

    def _set_pacing_rate(self, bw: float, gain: float) -> None:
        """bbr_set_pacing_rate: never slower before the pipe is full."""
        rate = self._pacing_rate_of(bw, gain)
        if not self.has_seen_rtt and self._srtt_s is not None:
            self._init_pacing_rate_from_rtt()
        if self.full_bw_reached or rate > self.pacing_rate_bytes_per_s:
            self.pacing_rate_bytes_per_s = rate

    @property
    def burst_datagrams(self) -> int:
        """How many datagrams Linux would let leave at once at this pacing rate (one
        TSO/GSO burst, bbr_tso_segs_goal): the pacer's bucket."""
        return self._tso_segs_goal()

    def _tso_segs_goal(self) -> int:
        """bbr_tso_segs_goal: datagrams in one GSO burst of ~1 ms at the pacing rate."""
        burst = min(int(self.pacing_rate_bytes_per_s) >> PACING_SHIFT, GSO_MAX_BYTES)
        least = 1 if self.pacing_rate_bytes_per_s < MIN_TSO_RATE_BYTES_PER_S else 2
        return max(burst // self.max_datagram_size, least)

    def _bdp_packets(self, bw: float, gain: float) -> int:
        """bbr_bdp: ceil(gain * bw * min_rtt) in datagrams (10 before an RTT sample)."""
        if self.min_rtt_s == math.inf:
            return INIT_CWND_PACKETS
        return math.ceil(bw * self.min_rtt_s * gain / self.max_datagram_size)

    def _quantization_budget(self, packets: int) -> int:
        """bbr_quantization_budget: room for three GSO bursts, an even count, and +2 while
        probing so that small BDPs still rise above one BDP."""
        packets += 3 * self._tso_segs_goal()
        packets = (packets + 1) & ~1
        if self.mode == BbrMode.PROBE_BW and self.cycle_index == 0:
            packets += 2
        return packets

    def _inflight_bytes(self, bw: float, gain: float) -> int:
        """bbr_inflight, in bytes."""
        return self._quantization_budget(self._bdp_packets(bw, gain)) * self.max_datagram_size

    def _bytes_in_net_at_edt(self, inflight_bytes: int, now: float) -> float:
        """bbr_packets_in_net_at_edt: what will still be in the network when the next
        packet departs (in flight less what bw delivers until then)."""
        interval = max(self.departure_time_s, now) - now
        delivered = self.bandwidth_bytes_per_s * interval
        at_edt = inflight_bytes
        if self.pacing_gain > 1.0:
            at_edt += self._tso_segs_goal() * self.max_datagram_size
        return max(at_edt - delivered, 0.0)

    def _ack_aggregation_bytes(self) -> float:
        """bbr_ack_aggregation_cwnd: the aggregation allowance, once the pipe is full."""
        if not (EXTRA_ACKED_GAIN and self.full_bw_reached):
            return 0.0
        cap = self.bandwidth_bytes_per_s * EXTRA_ACKED_MAX_S
        return min(EXTRA_ACKED_GAIN * max(self.extra_acked_bytes), cap)

    def _set_cwnd(self, rs: RateSample, bw: float, gain: float) -> None:
        """bbr_set_cwnd: slow start toward the target, or snap down to it."""
        mds = self.max_datagram_size
        cwnd = self.congestion_window
        acked = rs.acked_bytes
        if acked:
            cwnd, conserving = self._set_cwnd_to_recover_or_restore(rs)
            if not conserving:
                target = self._bdp_packets(bw, gain)
                target += int(self._ack_aggregation_bytes() // mds)
                target_bytes = self._quantization_budget(target) * mds
                if self.full_bw_reached:  # only cut the cwnd once the pipe was filled
                    cwnd = min(cwnd + acked, target_bytes)
                elif cwnd < target_bytes or self.delivery.delivered_bytes < INIT_CWND_PACKETS * mds:
                    cwnd += acked
                cwnd = max(cwnd, CWND_MIN_TARGET_PACKETS * mds)
        if self.mode == BbrMode.PROBE_RTT:  # drain the queue, refresh min_rtt
            cwnd = min(cwnd, CWND_MIN_TARGET_PACKETS * mds)
        self.congestion_window = int(cwnd)

    def _set_cwnd_to_recover_or_restore(self, rs: RateSample) -> tuple[int, bool]:
        """bbr_set_cwnd_to_recover_or_restore: give back the bytes lost; the first round of
        a recovery sends one packet per packet acknowledged; leaving it restores the cwnd
        saved on entry. Returns the cwnd and whether packet conservation holds it."""
        mds = self.max_datagram_size
        cwnd = self.congestion_window
        in_flight = self.delivery.in_flight_bytes
        if rs.lost_bytes > 0:
            cwnd = max(cwnd - rs.lost_bytes, mds)
        state, prev = self.ca_state, self.prev_ca_state
        if state == CaState.RECOVERY and prev != CaState.RECOVERY:
            self.packet_conservation = True
            self.next_round_delivered_bytes = self.delivery.delivered_bytes  # a round now
            cwnd = in_flight + rs.acked_bytes  # cut what the application left unused
        elif prev >= CaState.RECOVERY and state < CaState.RECOVERY:
            cwnd = max(cwnd, self.prior_cwnd_bytes)
            self.packet_conservation = False
        self.prev_ca_state = state
        if self.packet_conservation:
            return max(cwnd, in_flight + rs.acked_bytes), True
        return cwnd, False


class LongTermBandwidth:
    """BBR's token-bucket policer detection (bbr_lt_bw_sampling and friends): two
    consecutive intervals of at least 4 rounds with >= 19.5 % loss and rates within 1/8
    of each other mean a policer; then BBR paces at their mean rate for 48 rounds."""

    def __init__(self) -> None:
        self.bw_bytes_per_s = 0.0
        self.use_bw = False
        self.is_sampling = False
        self.rounds = 0
        self.last_delivered_bytes = 0
        self.last_lost_bytes = 0
        self.last_stamp_s = 0.0

    def reset(self, bbr: BbrCongestionControl) -> None:
        """bbr_reset_lt_bw_sampling."""
        self.bw_bytes_per_s = 0.0
        self.use_bw = False
        self.is_sampling = False
        self.reset_interval(bbr)

    def reset_interval(self, bbr: BbrCongestionControl) -> None:
        """bbr_reset_lt_bw_sampling_interval."""
        delivery = bbr.delivery
        self.last_stamp_s = bbr._delivered_time_s(0.0)
        self.last_delivered_bytes = delivery.delivered_bytes
        self.last_lost_bytes = delivery.lost_bytes
        self.rounds = 0

    def sample(self, bbr: BbrCongestionControl, *, losses: bool, app_limited: bool) -> None:
        """bbr_lt_bw_sampling, once per valid rate sample."""
        if self.use_bw:
            if bbr.mode == BbrMode.PROBE_BW and bbr.round_start:
                self.rounds += 1
                if self.rounds >= LT_BW_MAX_ROUNDS:
                    self.reset(bbr)  # stop using the policed rate
                    bbr._reset_probe_bw_mode()  # and probe again
            return
        if not self.is_sampling:
            if not losses:
                return  # wait for the first loss: the policer's tokens are spent
            self.reset_interval(bbr)
            self.is_sampling = True
        if app_limited:
            self.reset(bbr)  # running out of data would underestimate the rate
            return
        if bbr.round_start:
            self.rounds += 1
        if self.rounds < LT_INTERVAL_MIN_ROUNDS:
            return
        if self.rounds > 4 * LT_INTERVAL_MIN_ROUNDS:
            self.reset(bbr)  # the interval is too long
            return
        if losses:
            self._end_interval_on_loss(bbr)

    def _end_interval_on_loss(self, bbr: BbrCongestionControl) -> None:
        delivery = bbr.delivery
        lost = delivery.lost_bytes - self.last_lost_bytes
        delivered = delivery.delivered_bytes - self.last_delivered_bytes
        if not delivered or lost < LT_LOSS_THRESH * delivered:
            return  # not lossy enough to be a policer
        elapsed = bbr._delivered_time_s(0.0) - self.last_stamp_s
        if elapsed < 0.001:
            return  # less than the kernel's millisecond stamp
        self._interval_done(bbr, delivered / elapsed)

    def _interval_done(self, bbr: BbrCongestionControl, bw: float) -> None:
        """bbr_lt_bw_interval_done: a second consistent interval means a policer."""
        if self.bw_bytes_per_s:
            diff = abs(bw - self.bw_bytes_per_s)
            if (
                diff <= LT_BW_RATIO * self.bw_bytes_per_s
                or diff * PACING_MARGIN <= LT_BW_DIFF_BYTES_PER_S
            ):
                self.bw_bytes_per_s = (bw + self.bw_bytes_per_s) / 2
                self.use_bw = True
                bbr.pacing_gain = 1.0  # try to avoid drops
                self.rounds = 0
                return
        self.bw_bytes_per_s = bw
        self.reset_interval(bbr)


def bbr_factory(*, max_datagram_size: int) -> BbrCongestionControl:
    """What aioquic's registry calls for ``congestion_control_algorithm="bbr"``."""
    return BbrCongestionControl(max_datagram_size=max_datagram_size)
