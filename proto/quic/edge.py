"""QUIC pieces shared by the HTTP/3 server and client: configuration, the connection with
the testbed's window, pacing and ACK delay, the pacers, the sender counters, and the
datagram edge (one protocol per connection over a shared UDP transport).

What of this needs aioquic's internals (fixed flow-control windows, the stream order, the
pacer and congestion control of a connection, the protocol's timer) reaches them through
:mod:`proto.quic.adapter`, the one module that touches them.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Protocol, runtime_checkable

from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.logger import QuicFileLogger

from proto.priority import Scheduler
from proto.quic.adapter import (
    MonotonicProtocol,
    QuicPacketPacer,
    ScheduledFixedWindowQuicConnection,
    ScheduledQuicConnection,
    ack_delay_s_of,
    ack_policy_of,
    congestion_control_of,
    hook_ack_end,
    hook_packets_lost,
    install_pacer,
    max_datagram_size_of,
    pacer_of,
    pacing_holds,
    packets_sent,
    register_congestion_control,
    rtt_estimates,
    set_ack_delay_s,
    set_ack_policy,
)
from proto.quic.bbr import bbr_factory
from proto.sockopts import set_udp_buffers
from proto.watchers import Callback, Condition, Watchers
from tbcore.ackpolicy import parse_ack_policy
from tbcore.errors import SpecError
from tbcore.records import BBR_COUNTERS
from tbcore.settings import AIOQUIC_MAX_ACK_DELAY_S

H3_ALPN = ["h3"]
UDP_SEGMENT = 103
"""<linux/udp.h>: setsockopt/cmsg giving the GSO segment size."""
UDP_GSO_MAX_SEGMENTS = 64
"""UDP_MAX_SEGMENTS in include/linux/udp.h (older kernels; newer allow 128)."""
UDP_GSO_MAX_BYTES = 65_000
"""A GSO send is one UDP datagram to the kernel: its payload stays under 64 KiB."""
QUIC_IDLE_TIMEOUT_S = 60.0


def make_quic_configuration(
    *,
    is_client: bool,
    cc: str = "reno",
    max_datagram_size: int = 1200,
    fixed_window_bytes: int | None = None,
    qlog_dir: Path | None = None,
    keylog: IO[str] | None = None,
    idle_timeout_s: float = QUIC_IDLE_TIMEOUT_S,
) -> QuicConfiguration:
    """A QuicConfiguration for HTTP/3 with the testbed's knobs (TLS 1.3 is QUIC's only TLS)."""
    config = QuicConfiguration(
        is_client=is_client,
        alpn_protocols=H3_ALPN,
        congestion_control_algorithm=cc,
        max_datagram_size=max_datagram_size,
        idle_timeout=idle_timeout_s,
    )
    if fixed_window_bytes is not None:
        config.max_data = fixed_window_bytes
        config.max_stream_data = fixed_window_bytes
    if qlog_dir is not None:
        qlog_dir.mkdir(parents=True, exist_ok=True)
        config.quic_logger = QuicFileLogger(str(qlog_dir))
    if keylog is not None:
        config.secrets_log_file = keylog
    return config


PACING_CWND = "cwnd"
"""The congestion control's own pacing: aioquic's rate = cwnd / smoothed RTT for reno and
cubic; for a control with a pacing rate of its own (bbr), that rate."""
PACING_OFF = "off"
"""No pacing: the congestion window alone limits sending (as Linux reno/cubic without fq)."""
PACING_BURST_DATAGRAMS = 16
"""Bucket of a fixed-rate pacer, in datagrams (aioquic's own upper bound)."""
BITS_PER_BYTE = 8
PACING_TIMER_GRANULARITY_S = 0.001
"""Event-loop timers (epoll_wait) wake with millisecond resolution."""
PACING_EPSILON_S = 1e-9
NO_PACING_SLICE_DATAGRAMS = 32
"""Unpaced bursts are built and sent 32 datagrams at a time (one GSO send each)."""


TESTBED_CONTROLS = {"bbr": bbr_factory}
"""The congestion controls the testbed adds to aioquic's own reno and cubic, registered
with aioquic's registry here, by name (tbcore.quicstack.AIOQUIC_CONGESTION_CONTROLS lists
the names a setting accepts; tests/test_quicstack.py holds the two equal)."""
for _name, _factory in TESTBED_CONTROLS.items():
    register_congestion_control(_name, _factory)


@runtime_checkable
class RateSamplingControl(Protocol):
    """A congestion control that samples delivery rates and paces at its own rate (BBR,
    proto.quic.bbr): it is told when each ACK frame ends and when the sender ran out of
    data, may be capped, and reports its own counters. The edge asks for the capability,
    never for the class."""

    max_pacing_rate_bytes_per_s: float
    congestion_window: int
    bytes_in_flight: int

    @property
    def pacing_rate_bytes_per_s(self) -> float: ...

    def on_ack_end(self, *, now: float) -> None: ...

    def on_app_limited(self) -> None: ...

    def counters(self) -> dict[str, int | None]: ...


class RatePacer(QuicPacketPacer):
    """A token-bucket pacer at a fixed rate, or at cwnd / srtt capped by a maximum rate.

    Two differences from aioquic's pacer, which matter at hundreds of Mbit/s: event-loop
    timers fire with millisecond granularity (uvloop and asyncio alike), so the bucket holds
    at least ``2 * PACING_TIMER_GRANULARITY_S`` of sending (aioquic's 16-datagram bucket
    caps a sender at 16 datagrams per timer wake-up, ~186 Mbit/s with 1452-byte datagrams);
    and a datagram leaves only when a whole packet time is in the bucket (aioquic's float
    comparison lets two datagrams out per packet time once the bucket runs dry).
    """

    def __init__(
        self,
        *,
        max_datagram_size: int,
        fixed_rate_bps: float | None = None,
        max_rate_bps: float | None = None,
    ) -> None:
        super().__init__(max_datagram_size=max_datagram_size)
        self.datagram_size_bytes = max_datagram_size
        self.fixed_rate_bps = fixed_rate_bps
        self.max_rate_bps = max_rate_bps
        if fixed_rate_bps is not None:
            self._set_rate(fixed_rate_bps / BITS_PER_BYTE)
            self.bucket_time = self.bucket_max

    def _set_rate(self, rate_bytes: float) -> None:
        self.packet_time = self.datagram_size_bytes / rate_bytes
        self.bucket_max = max(
            PACING_BURST_DATAGRAMS * self.packet_time, 2 * PACING_TIMER_GRANULARITY_S
        )
        self.bucket_time = min(self.bucket_time, self.bucket_max)

    def next_send_time(self, now: float) -> float | None:  # type: ignore[override]
        if self.packet_time is None:
            return None
        self.update_bucket(now=now)
        missing = self.packet_time - self.bucket_time
        if missing > PACING_EPSILON_S:
            return now + missing
        return None

    def update_after_send(self, now: float) -> None:
        if self.packet_time is not None:
            self.update_bucket(now=now)
            self.bucket_time = max(self.bucket_time - self.packet_time, 0.0)

    def update_rate(self, congestion_window: int, smoothed_rtt: float) -> None:
        if self.fixed_rate_bps is not None:
            return
        rate_bytes = congestion_window / max(smoothed_rtt, 1e-6)
        if self.max_rate_bps is not None:
            rate_bytes = min(rate_bytes, self.max_rate_bps / BITS_PER_BYTE)
        self._set_rate(rate_bytes)


class NoPacer(QuicPacketPacer):
    """Never delays a datagram, but hands a large burst over in slices: aioquic builds every
    datagram of a ``datagrams_to_send`` call before the caller can send the first, so an
    unsliced 245-datagram burst would leave ~5 ms late. After ``NO_PACING_SLICE_DATAGRAMS``
    it asks to be called again at once (the event loop's next iteration)."""

    def __init__(self, *, max_datagram_size: int) -> None:
        super().__init__(max_datagram_size=max_datagram_size)
        self._slice_now = -1.0
        self._slice_count = 0

    def next_send_time(self, now: float) -> float | None:  # type: ignore[override]
        if now != self._slice_now:
            self._slice_now = now
            self._slice_count = 0
        if self._slice_count >= NO_PACING_SLICE_DATAGRAMS:
            return now + PACING_EPSILON_S
        return None

    def update_after_send(self, now: float) -> None:
        if now != self._slice_now:
            self._slice_now = now
            self._slice_count = 0
        self._slice_count += 1

    def update_rate(self, congestion_window: int, smoothed_rtt: float) -> None:
        return


class ControlPacer(RatePacer):
    """A :class:`RatePacer` at the pacing rate the congestion control sets on every ACK
    (BBR's pacing_gain x bw), capped by ``max_rate_bps``; aioquic's cwnd / srtt updates are
    ignored. The rate is read before each datagram, as Linux reads sk_pacing_rate. Its
    bucket is the control's burst (Linux's TSO/GSO burst: two datagrams at low rates,
    about 1 ms of sending at high ones), at least the timers' 2 ms.

    It paces from a connection's first datagram. Linux's TCP leaves a connection's first 10
    segments unpaced (tcp_update_skb_after_send, for sch_fq's sake): part of TCP's output
    path, not of tcp_bbr.c. Mirroring it here was measured and left out: on the chapter's
    path (200 ms, 333 Mbit/s, the TTS download, 1452-byte datagrams, 3 runs each) aioquic
    took 1410 ms with the burst against 1381 ms without, the kernel's h2 1564-1570 ms: the
    burst is acknowledged at once and the second round then waits a whole round trip, as
    the kernel's does, where a paced first round clocks the second out over its ACKs."""

    def __init__(
        self,
        *,
        max_datagram_size: int,
        control: RateSamplingControl,
        max_rate_bps: float | None = None,
    ) -> None:
        super().__init__(max_datagram_size=max_datagram_size, max_rate_bps=max_rate_bps)
        self.control = control
        self._rate_bytes = 0.0

    def _follow(self) -> None:
        rate = self.control.pacing_rate_bytes_per_s
        if self.max_rate_bps is not None:
            rate = min(rate, self.max_rate_bps / BITS_PER_BYTE)
        if rate != self._rate_bytes and rate > 0:
            self._rate_bytes = rate
            self._set_rate(rate)

    def _set_rate(self, rate_bytes: float) -> None:
        self.packet_time = self.datagram_size_bytes / rate_bytes
        burst = self.control.burst_datagrams * self.packet_time
        self.bucket_max = max(burst, 2 * PACING_TIMER_GRANULARITY_S)
        self.bucket_time = min(self.bucket_time, self.bucket_max)

    def next_send_time(self, now: float) -> float | None:  # type: ignore[override]
        self._follow()
        return super().next_send_time(now)

    def update_after_send(self, now: float) -> None:
        self._follow()
        super().update_after_send(now)
        # when the next datagram may leave: BBR's earliest departure time (tcp_wstamp_ns)
        wait = 0.0 if self.packet_time is None else self.packet_time - self.bucket_time
        self.control.departure_time_s = now + max(wait, 0.0)

    def update_rate(self, congestion_window: int, smoothed_rtt: float) -> None:
        return

    @property
    def rate_bytes_per_s(self) -> float:
        return self._rate_bytes


def set_pacing(
    quic: QuicConnection, pacing: str | float, max_rate_bps: float | None = None
) -> None:
    """``pacing``: ``"cwnd"`` (the control's own pacing: aioquic's pacer at cwnd / srtt, or
    the control's pacing rate when it has one), ``"off"``, or a fixed rate in bit/s.
    ``max_rate_bps`` caps it, like SO_MAX_PACING_RATE for TCP: cwnd / srtt or the control's
    rate at most that (with ``"off"`` or a higher fixed rate: that rate)."""
    mds = max_datagram_size_of(quic)
    control = congestion_control_of(quic)
    if isinstance(control, RateSamplingControl) and max_rate_bps is not None:
        control.max_pacing_rate_bytes_per_s = max_rate_bps / BITS_PER_BYTE
    if pacing == PACING_CWND:
        if isinstance(control, RateSamplingControl):
            pacer: QuicPacketPacer = ControlPacer(
                max_datagram_size=mds, control=control, max_rate_bps=max_rate_bps
            )
        elif max_rate_bps is None:
            return
        else:
            pacer = RatePacer(max_datagram_size=mds, max_rate_bps=max_rate_bps)
    elif pacing == PACING_OFF:
        if max_rate_bps is None:
            pacer = NoPacer(max_datagram_size=mds)
        else:
            pacer = RatePacer(max_datagram_size=mds, fixed_rate_bps=max_rate_bps)
    else:
        rate = float(pacing)
        if max_rate_bps is not None:
            rate = min(rate, max_rate_bps)
        pacer = RatePacer(max_datagram_size=mds, fixed_rate_bps=rate)
    install_pacer(quic, pacer)


def pacer_rate_bytes_per_s(quic: QuicConnection) -> float | None:
    """The rate the connection's pacer holds now (None: not pacing)."""
    pacer = pacer_of(quic)
    if isinstance(pacer, ControlPacer):
        return pacer.rate_bytes_per_s or None
    packet_time = pacer.packet_time
    if packet_time is None or isinstance(pacer, NoPacer):
        return None
    return max_datagram_size_of(quic) / packet_time


def hook_bbr_ack_end(quic: QuicConnection) -> None:
    """Tell a control that wants it (:meth:`BbrCongestionControl.on_ack_end`) when each ACK
    frame has been processed."""
    control = congestion_control_of(quic)
    if isinstance(control, RateSamplingControl):
        hook_ack_end(quic, lambda now: control.on_ack_end(now=now))


def app_limited_check(quic: QuicConnection) -> Callable[[], None] | None:
    """For a control that samples delivery rates, a check to run after each
    ``datagrams_to_send``: if neither the window nor the pacer held the sender back, it
    ran out of data, and the control is told (tcp_rate_check_app_limited). None: no need."""
    control = congestion_control_of(quic)
    if not isinstance(control, RateSamplingControl):
        return None
    room_bytes = max_datagram_size_of(quic)

    def check() -> None:
        if not pacing_holds(quic) and (
            control.congestion_window - control.bytes_in_flight >= room_bytes
        ):
            control.on_app_limited()

    return check


def make_quic_connection(
    configuration: QuicConfiguration,
    fixed_window_bytes: int | None,
    pacing: str | float = PACING_CWND,
    max_pacing_rate_bps: float | None = None,
    ack_delay_s: float | None = None,
    scheduler: Scheduler | None = None,
    ack_policy: str = "default",
    **kwargs: Any,
) -> QuicConnection:
    """A QuicConnection with the testbed's window, pacing and ACK delay.

    ``ack_delay_s``: how long the receiver waits after an ack-eliciting packet before it
    sends an ACK on its own (aioquic's ``_ack_delay``, 1 ms by default; it has no packet
    threshold, so this is its only ACK-frequency knob); None keeps aioquic's.
    """
    if ack_delay_s is not None and (
        isinstance(ack_delay_s, bool)
        or not isinstance(ack_delay_s, (int, float))
        or not 0 <= ack_delay_s <= AIOQUIC_MAX_ACK_DELAY_S
    ):
        raise SpecError(
            "quic-ack-delay",
            f"must lie in [0, {AIOQUIC_MAX_ACK_DELAY_S * 1e3:g} ms] (max_ack_delay), "
            f"got {ack_delay_s!r}",
        )
    if fixed_window_bytes is None:
        quic: QuicConnection = ScheduledQuicConnection(configuration=configuration, **kwargs)
    else:
        quic = ScheduledFixedWindowQuicConnection(
            configuration=configuration, window_bytes=fixed_window_bytes, **kwargs
        )
    quic.scheduler = scheduler  # type: ignore[attr-defined]
    set_pacing(quic, pacing, max_pacing_rate_bps)
    hook_bbr_ack_end(quic)
    if ack_delay_s is not None:
        set_ack_delay_s(quic, ack_delay_s)
    set_ack_policy(quic, parse_ack_policy("ack_policy", ack_policy))
    return quic


def quic_configuration_of(
    config: Any, *, is_client: bool, keylog: IO[str] | None = None, **kwargs: Any
) -> QuicConfiguration:
    """:func:`make_quic_configuration` from the QUIC fields that a
    :class:`~servers.config.ServerConfig` and a :class:`~clients.config.ClientConfig` share."""
    return make_quic_configuration(
        is_client=is_client,
        cc=config.settings.quic_control,
        max_datagram_size=config.settings.max_datagram_size_bytes,
        fixed_window_bytes=config.settings.quic_max_data_bytes,
        qlog_dir=config.qlog_dir,
        keylog=keylog,
        **kwargs,
    )


def quic_connection_of(
    configuration: QuicConfiguration, config: Any, **kwargs: Any
) -> QuicConnection:
    """:func:`make_quic_connection` with a server or client config's window and pacing."""
    return make_quic_connection(
        configuration,
        config.settings.quic_max_data_bytes,
        pacing=config.settings.quic_pacing,
        max_pacing_rate_bps=config.settings.max_pacing_rate_bps,
        ack_delay_s=config.settings.quic_ack_delay_s,
        ack_policy=config.settings.ack_policy,
        **kwargs,
    )


class WatchedProtocol(MonotonicProtocol):
    """aioquic's protocol on ``time.monotonic()`` (:class:`~proto.quic.adapter.
    MonotonicProtocol`) with "after transmit" watchers: callbacks that fire once a
    condition on the connection holds (e.g. a stream's last byte has left)."""

    def __init__(self, quic: QuicConnection, **kwargs: Any) -> None:
        super().__init__(quic, **kwargs)
        self.coalesce_transmit = True
        """Transmit once per batch of datagrams read (see datagram_received)."""
        self.gso_socket: socket.socket | None = None
        """The UDP socket, when set: runs of datagrams leave as GSO segments (one sendmsg)."""
        self._watchers = Watchers()
        self.packets_lost = 0
        """Packets declared lost by aioquic's recovery (it keeps no counter of its own)."""
        hook_packets_lost(quic, self._count_lost)
        self._app_limited_check = app_limited_check(quic)

    def _count_lost(self, count: int) -> None:
        self.packets_lost += count

    def _send_segmented(self, datagrams: list[tuple[bytes, Any]]) -> None:
        """Send runs of equal-size datagrams (the last of a run may be shorter) with one
        ``sendmsg`` each, as UDP GSO segments: one system call per run, not per packet."""
        sock = self.gso_socket
        transport = self.transport
        assert sock is not None and transport is not None
        count = len(datagrams)
        index = 0
        while index < count:
            data, addr = datagrams[index]
            size = len(data)
            stop = index + 1
            total = size
            while (
                stop < count
                and stop - index < UDP_GSO_MAX_SEGMENTS
                and datagrams[stop][1] == addr
                and total + len(datagrams[stop][0]) <= UDP_GSO_MAX_BYTES
            ):
                next_size = len(datagrams[stop][0])
                if next_size > size:
                    break
                total += next_size
                stop += 1
                if next_size < size:
                    break  # a shorter datagram ends the run
            if stop - index == 1 or transport.get_write_buffer_size():
                for data_, addr_ in datagrams[index:stop]:
                    transport.sendto(data_, addr_)
            else:
                payload = b"".join(d for d, _ in datagrams[index:stop])
                try:
                    sock.sendmsg(
                        [payload], [(socket.SOL_UDP, UDP_SEGMENT, struct.pack("=H", size))], 0, addr
                    )
                except BlockingIOError:
                    for data_, addr_ in datagrams[index:stop]:
                        transport.sendto(data_, addr_)  # the transport buffers them
                except OSError:
                    self.gso_socket = None  # no GSO on this path: one datagram per call
                    for data_, addr_ in datagrams[index:stop]:
                        transport.sendto(data_, addr_)
            index = stop

    def watch(self, condition: Condition, callback: Callback) -> None:
        self._watchers.add(condition, callback)

    def send_datagrams(self, datagrams: list[tuple[bytes, Any]]) -> None:
        if self.gso_socket is not None and len(datagrams) > 1:
            self._send_segmented(datagrams)
        else:
            super().send_datagrams(datagrams)

    def before_timer(self) -> None:
        if self._app_limited_check is not None:
            self._app_limited_check()

    def after_transmit(self) -> None:
        if self._watchers:
            self._watchers.fire(time.monotonic())


def make_udp_socket(host: str, port: int, buffer_bytes: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        set_udp_buffers(sock, buffer_bytes)
        sock.bind((host, port))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def quic_counters(protocol: WatchedProtocol) -> dict[str, int | None]:
    """The sender state of a QUIC connection, in the units of the TCP_INFO samples (and of
    tcp_bbr_info for BBR's: bytes/s, µs, gains x 256)."""
    quic = protocol.quic
    cc = congestion_control_of(quic)
    rtt = rtt_estimates(quic)
    min_rtt = rtt.min_s
    rate = pacer_rate_bytes_per_s(quic)
    if isinstance(cc, RateSamplingControl):
        control = cc.counters()
    else:
        control = dict.fromkeys(BBR_COUNTERS)
        control["pacing_rate"] = None if rate is None else int(rate)
    return {
        **control,
        "bytes_in_flight": cc.bytes_in_flight,
        "cwnd": cc.congestion_window,
        "ssthresh": cc.ssthresh,
        "smoothed_rtt_us": int(rtt.smoothed_s * 1e6),
        "latest_rtt_us": int(rtt.latest_s * 1e6),
        "min_rtt_us": None if min_rtt == float("inf") else int(min_rtt * 1e6),
        "packets_sent": packets_sent(quic),
        "packets_lost": protocol.packets_lost,
        "pto_count": rtt.pto_count,
    }


def quic_in_force(protocol: WatchedProtocol) -> dict[str, Any]:
    """What a QUIC connection runs with as aioquic holds it (read through
    :mod:`proto.quic.adapter`), by knob key: congestion control and pacer classes, datagram size,
    flow-control credit, ACK delay, and whether datagrams leave in GSO batches."""
    quic = protocol.quic
    pacer = pacer_of(quic)
    control = type(congestion_control_of(quic)).__name__
    return {
        "cc": control,  # cc names QUIC's control too (quic_cc overrides it)
        "quic_cc": control,
        "max_datagram_size": max_datagram_size_of(quic),
        "quic_max_data": [quic.configuration.max_data, getattr(quic, "window_bytes", None)],
        "quic_pacing": [type(pacer).__name__, getattr(pacer, "fixed_rate_bps", None)],
        "max_pacing_rate": getattr(pacer, "max_rate_bps", None),
        "quic_ack_delay": ack_delay_s_of(quic),
        "ack_policy": ack_policy_of(quic),
        "quic_batching": protocol.gso_socket is not None,
    }
