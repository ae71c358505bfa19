"""How faithfully a live userspace link follows its traces (root, real namespaces, issue 28).

* Capacity: UDP offered above the trace's capacity, the bytes that reach the far end per
  100 ms window against the trace's opportunities in the same window, over one period.
* Bound: TCP transfers on a traced uplink finish at or after the trace's bound
  (:mod:`harness.bounds.trace`), at three offsets into the trace.
* Delay: a UDP probe every millisecond across a delay trace with 10 ms steps; its one-way
  delay against the trace at every step.

Clocks: the kernel stamps each arrival (``SO_TIMESTAMPNS``, CLOCK_REALTIME); the trace's
origin is on CLOCK_MONOTONIC (the emulator's ``trace`` command); the offset between the two
clocks is read before and after and its drift reported. Run with ``-s`` for the numbers.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.bounds.trace import trace_transfer_done_s
from netem import backends, clean, names, nsexec
from netem.link import Link
from netem.linkspec import parse_link
from netem.nsexec import in_netns
from netem.probe import SO_TIMESTAMPNS, kernel_time_ns, probe_link, quantile, realtime_thread
from netem.stats import host_cpu_s
from netem.trace import SHIPPED_DIR, DelayTrace, open_trace
from netem.tracegen import LeoModel, leo_trace

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(120)]

UDP_IP_BYTES = 1500
UDP_PAYLOAD_BYTES = UDP_IP_BYTES - 28
"""A full-size datagram: 20 bytes of IPv4 and 8 of UDP around it."""
OFFERED_BPS = 30e6
"""Above the busiest 100 ms window of cell-markov.down (24.24 Mbit/s)."""
QUEUE_PACKETS = 1000
"""A queue deep enough (0.5 s at 24 Mbit/s) that a stall of the sender never empties it."""
FILL_S = 2.0
"""Offered before the windows are counted: the queue fills (at 6 Mbit/s above even the
trace's fastest spell, faster in the slow ones)."""
WINDOW_S = 0.1
TCP_HEADER_BYTES = 52
"""IPv4 20 + TCP 20 + timestamps 12 per segment (Linux's default options)."""
MSS_BYTES = 1448
SO_RCVBUFFORCE = 33
PORT = 7281


@pytest.fixture
def link_name() -> Iterator[str]:
    name = "trcfid"
    clean.clean(name, force=True)
    yield name
    clean.clean(name, force=True)


class HostLoad:
    """The host's CPU while a test ran (the machine is shared): load average, busy, steal."""

    def __init__(self) -> None:
        self.before = host_cpu_s()

    def __str__(self) -> str:
        busy, steal, total = (b - a for a, b in zip(self.before, host_cpu_s(), strict=True))
        return (
            f"host: load {os.getloadavg()[0]:.2f}, CPU busy {100 * busy / total:.0f} %, "
            f"steal {100 * steal / total:.2f} % during the test"
        )


def trace_clock(link: Link, direction: str) -> dict:
    info = backends.get("userspace").client(link.state).trace()[direction]  # type: ignore[attr-defined]
    assert info is not None
    return info


@contextlib.contextmanager
def traced_link(name: str, text: str, direction: str) -> Iterator[tuple[Link, dict]]:
    """The link of ``text`` up (userspace), with where ``direction``'s trace is when."""
    with Link.up(name, parse_link(text), backend="userspace") as link:
        yield link, trace_clock(link, direction)


def realtime_minus_monotonic_s() -> float:
    return time.clock_gettime(time.CLOCK_REALTIME) - time.monotonic()


class Receiver(threading.Thread):
    """Every datagram on ``port`` in ``ns``: (kernel receive time ns, realtime; bytes)."""

    def __init__(self, ns: str, addr: str, port: int = PORT) -> None:
        super().__init__(daemon=True)
        with in_netns(ns):
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 16 * 2**20)
        self.sock.bind((addr, port))
        self.sock.settimeout(0.2)
        self.stop = threading.Event()
        self.got: list[tuple[int, bytes]] = []

    def _take_one(self) -> None:
        """One datagram with the kernel's arrival stamp (raises as recvmsg does)."""
        data, ancdata, _, _ = self.sock.recvmsg(65535, 256)
        stamp = kernel_time_ns(ancdata)
        assert stamp is not None
        self.got.append((stamp, data))

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self._take_one()
            except TimeoutError:
                continue

    def finish(self) -> list[tuple[int, bytes]]:
        self.stop.set()
        self.join(5)
        self.sock.close()
        return self.got

    def drain(self) -> list[tuple[int, bytes]]:
        """Without the thread: what waits in the socket (the kernel stamped it on arrival)."""
        self.sock.setblocking(False)
        while True:
            try:
                self._take_one()
            except BlockingIOError:
                break
        self.sock.close()
        return self.got


def sender_socket(ns: str) -> socket.socket:
    with in_netns(ns):
        return socket.socket(socket.AF_INET, socket.SOCK_DGRAM)


FLOOD = """
import socket, sys, time
dst, port = sys.argv[1], int(sys.argv[2])
rate_bps, duration_s = float(sys.argv[3]), float(sys.argv[4])
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
payload = bytes(1472)
start, sent = time.monotonic(), 0
while time.monotonic() < start + duration_s:
    due = int((time.monotonic() - start) * rate_bps / 8 / 1500)
    for _ in range(due - sent):
        try:
            sock.sendto(payload, (dst, port))
        except OSError:
            pass
    sent = max(sent, due)
    time.sleep(0.0005)
"""
"""Full-size datagrams at a rate (IP bytes), paced every half millisecond: a process of its
own at real-time priority, so that the host's load does not starve the offered stream."""
FLOOD_RR_PRIORITY = 5
"""Below the emulator's SCHED_FIFO 10, above every normal process (netem.probe's choice)."""


def flood(ns: str, dst: str, rate_bps: float, duration_s: float) -> subprocess.Popen:
    argv = [sys.executable, "-c", FLOOD, dst, str(PORT), str(rate_bps), str(duration_s)]
    return nsexec.popen(ns, argv, rr_priority=FLOOD_RR_PRIORITY)


@pytest.mark.timeout(90)
def test_udp_above_capacity_delivers_the_traces_opportunities_per_100ms(link_name: str) -> None:
    trace = open_trace("trace:cell-markov.down", "capacity")
    assert trace.path == str(SHIPPED_DIR / "cell-markov.down")
    cap = trace.capacity
    text = f"rtt=0ms,down.rate={trace.text()},down.queue={QUEUE_PACKETS}p"
    host = HostLoad()
    with traced_link(link_name, text, "down") as (link, clock):
        receiver = Receiver(link.client_ns, names.CLIENT_ADDR)
        receiver.start()
        before = realtime_minus_monotonic_s()
        start_s = time.monotonic() + FILL_S  # the queue is full by then
        sender = flood(link.server_ns, names.CLIENT_ADDR, OFFERED_BPS, FILL_S + cap.period_s + 0.3)
        try:
            sender.wait(FILL_S + cap.period_s + 10)
        finally:
            sender.kill()
            sender.wait()
        got = receiver.finish()
        after = realtime_minus_monotonic_s()
        stats = link.stats()
    offset = (before + after) / 2
    windows = math.floor(cap.period_s / WINDOW_S + 1e-9)
    delivered = [0] * windows
    for stamp_ns, data in got:
        index = math.floor((stamp_ns * 1e-9 - offset - start_s) / WINDOW_S)
        if 0 <= index < windows:
            delivered[index] += len(data) + 28
    position_ms = (start_s - clock["origin_s"] + clock["offset_s"]) * 1e3
    expected = [
        cap.opportunities_between(position_ms + k * 100, position_ms + (k + 1) * 100) * 1500
        for k in range(windows)
    ]
    errors = [d - e for d, e in zip(delivered, expected, strict=True)]
    total = sum(expected)
    l1 = sum(abs(e) for e in errors) / total
    worst = max(abs(e) for e in errors)
    print(
        f"\ncapacity trace {Path(trace.path).name}: {windows} windows of 100 ms, offered "
        f"{total} B, delivered {sum(delivered)} B ({100 * (sum(delivered) - total) / total:+.3f} "
        f"%), per-window |error| summed {100 * l1:.3f} % of the trace, worst window "
        f"{worst} B ({worst / 1500:.0f} packets); emulator lateness p99 "
        f"{stats.down.lateness_quantile_s(0.99) * 1e6:.0f} us; clock drift "
        f"{(after - before) * 1e6:.1f} us; {host}"
    )
    bad = [(k, e // 1500, expected[k] // 1500) for k, e in enumerate(errors) if abs(e) > 3000]
    print(
        f"windows off by more than a packet at each edge (index, packets, of): {bad}; "
        f"emulator lateness max {stats.down.lateness_max_s * 1e3:.2f} ms"
    )
    assert stats.down.dropped_queue > 0  # offered above capacity: the queue overflowed
    # the measure: over the whole trace, within 2 % (a window's packets pushed into
    # the next one by a late wake-up on this shared host count twice, once in each)
    assert abs(sum(delivered) - total) <= 0.02 * total
    assert l1 <= 0.02


def tcp_transfer(link: Link, size_bytes: int) -> tuple[float, float]:
    """Send ``size_bytes`` client -> server; (monotonic time the client began sending,
    monotonic time the server had the last byte)."""
    with in_netns(link.server_ns):
        listener = socket.create_server((names.SERVER_ADDR, PORT))
    done: list[float] = []

    def serve() -> None:
        conn, _ = listener.accept()
        got = 0
        while got < size_bytes:
            chunk = conn.recv(1 << 20)
            if not chunk:
                break
            got += len(chunk)
        done.append(time.monotonic())
        conn.close()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    with in_netns(link.client_ns):
        client = socket.create_connection((names.SERVER_ADDR, PORT), timeout=30)
    start = time.monotonic()
    client.sendall(bytes(size_bytes))
    server.join(60)
    client.close()
    listener.close()
    assert done, "the server did not get the transfer"
    return start, done[0]


@pytest.mark.timeout(90)
def test_tcp_transfers_finish_at_or_after_the_bound_from_the_trace(link_name: str) -> None:
    trace = open_trace("trace:cell-markov.up", "capacity")
    size = 1_000_000
    wire = size + TCP_HEADER_BYTES * math.ceil(size / MSS_BYTES)
    lines = []
    host = HostLoad()
    with Link.up(link_name, parse_link("rtt=20ms"), backend="userspace") as link:
        for offset_s in (0.0, 12.5, 25.0):
            link.set_spec(parse_link(f"rtt=20ms,up.rate={trace.text()},trace_offset={offset_s}s"))
            clock = trace_clock(link, "up")
            start, done = tcp_transfer(link, size)
            left = trace_transfer_done_s(
                trace.capacity, wire, start - clock["origin_s"], clock["offset_s"]
            )
            bound = clock["origin_s"] + left + 0.010  # and the one-way delay
            lines.append(
                f"offset {offset_s:4.1f} s: took {done - start:.3f} s, bound "
                f"{bound - start:.3f} s, ratio {(done - start) / (bound - start):.3f}"
            )
            assert done >= bound, lines[-1]
    print(f"\n1 MB up over {Path(trace.path).name} at 20 ms RTT; {host}")
    print("\n".join(lines))


PROBE_INTERVAL_S = 0.001
PERIODS = 3
"""Periods of the delay trace probed: a step's median holds against one stall in one period."""
PROBE_PHASE_S = 0.0005
"""Probes leave half-way between the trace's millisecond marks (its 10 ms steps among
them), so the emulator's stamp, some tens of microseconds after the send, never falls on
the other side of a step."""


def send_probes(link: Link, clock: dict, count: int) -> dict[int, tuple[float, int]]:
    """``count`` probes, one per millisecond of the trace clock at the half millisecond;
    each one's send time (monotonic s, realtime ns)."""
    sock = sender_socket(link.client_ns)
    position_s = time.monotonic() + 0.05 - clock["origin_s"] + clock["offset_s"]
    first = math.ceil(position_s / PROBE_INTERVAL_S)
    sent: dict[int, tuple[float, int]] = {}
    with realtime_thread(True):
        for seq in range(count):
            position = (first + seq) * PROBE_INTERVAL_S + PROBE_PHASE_S
            target = clock["origin_s"] - clock["offset_s"] + position
            time.sleep(max(0.0, target - time.monotonic() - 0.0003))
            while time.monotonic() < target:  # the last 0.3 ms spun: a punctual send
                pass
            mono, real_ns = time.monotonic(), time.clock_gettime_ns(time.CLOCK_REALTIME)
            sock.sendto(struct.pack("!I", seq), (names.SERVER_ADDR, PORT))
            sent[seq] = (mono, real_ns)
    sock.close()
    return sent


def probe_errors_by_step(
    curve: DelayTrace, clock: dict, sent: dict, got: list[tuple[int, bytes]]
) -> dict[int, list[float]]:
    """Per 10 ms step of the trace (numbered within its period): each probe's one-way delay
    minus the trace's, kept in order as the link keeps it (a probe due before the one ahead
    of it leaves right after it)."""
    errors: dict[int, list[float]] = {}
    previous_due = -math.inf
    for stamp_ns, data in sorted(got, key=lambda g: struct.unpack("!I", g[1][:4])[0]):
        mono, real_ns = sent[struct.unpack("!I", data[:4])[0]]
        position_ms = (mono - clock["origin_s"] + clock["offset_s"]) * 1e3
        due = max(mono + curve.delay_ms(position_ms) / 1e3, previous_due)
        previous_due = due
        error_ms = ((stamp_ns - real_ns) * 1e-9 - (due - mono)) * 1e3
        step = math.floor(position_ms / 10) % round(curve.period_ms / 10)
        errors.setdefault(step, []).append(error_ms)
    return errors


@pytest.mark.timeout(90)
def test_a_delay_trace_moves_a_probes_one_way_delay_to_the_trace(
    link_name: str, tmp_path: Path
) -> None:
    """At every 10 ms step the median one-way delay of its probes (one a millisecond, over
    three periods of the trace: thirty a step) is the trace's within 0.5 ms; single probes are
    reported (a probe's own send or receive can be late on a loaded host: the host's lateness,
    not the link's; a stall of up to 10 ms in one period reaches at most ten of a step's
    thirty probes, so the median stays the link's: CI once saw a step's median of twenty,
    ten of them in one stall, at +0.67 ms while the p99 of all probes was 0.30 ms)."""
    model = LeoModel(duration_s=3.0, handover_s=1.0, drift_s_per_s=0.002, seed=3)
    (tmp_path / "leo.delay").write_text(leo_trace(model))
    trace = open_trace(f"trace:{tmp_path / 'leo.delay'}", "delay")
    curve = trace.delay
    host = HostLoad()
    with traced_link(link_name, f"up.delay={trace.text()},down.delay=1ms", "up") as (link, clock):
        # read after the probes were sent: no other thread of this process may hold the GIL
        # between a probe's time stamp and its send
        receiver = Receiver(link.server_ns, names.SERVER_ADDR)
        sent = send_probes(link, clock, round(PERIODS * curve.period_s / PROBE_INTERVAL_S))
        time.sleep(curve.max_delay_ms / 1e3 + 0.2)
        got = receiver.drain()
    errors = probe_errors_by_step(curve, clock, sent, got)
    steps = sorted(errors)
    medians = [sorted(errors[s])[len(errors[s]) // 2] for s in steps]
    singles = sorted(abs(e) for v in errors.values() for e in v)
    print(
        f"\ndelay trace: {len(got)} of {len(sent)} probes over {len(steps)} steps of 10 ms; "
        f"per-step median error (measured - trace) from {min(medians):+.3f} to "
        f"{max(medians):+.3f} ms; single probes |error| p50 {singles[len(singles) // 2]:.3f}, "
        f"p99 {singles[int(0.99 * len(singles))]:.3f}, worst {singles[-1]:.3f} ms; {host}"
    )
    assert len(got) == len(sent)
    assert steps == list(range(round(curve.period_ms / 10)))  # every step was probed
    assert max(abs(m) for m in medians) <= 0.5


@pytest.mark.timeout(60)
def test_a_stepped_delay_trace_has_a_fixed_links_rtt_error(link_name: str, tmp_path: Path) -> None:
    """Issue 41's held-out trace on the C path (the default): 10 ms one way for a second,
    then 40 ms, 10 ms back. Each plateau's probe RTTs against 20 and 50 ms within the fixed
    link's targets (median 0.3 ms, p99 1 ms: harness/bench/link.py TARGETS); the probes sent
    just after the fall to 10 ms leave in order behind those still in flight, in between."""
    (tmp_path / "step.delay").write_text("0 10\n1000 40\n")
    spec = parse_link(f"up.delay=trace:{tmp_path / 'step.delay'},down.delay=10ms")
    with Link.up(link_name, spec, backend="userspace") as link:
        assert link.show()["emulator_path"]["path"] == "c"
        result = probe_link(link, count=2000, interval_s=1e-3, drain_s=0.3)
    plateaus = {0.020: [], 0.050: []}
    for rtt in result.rtt_s:
        for want, got in plateaus.items():
            if abs(rtt - want) < 5e-3:
                got.append(rtt - want)
    in_between = len(result.rtt_s) - sum(len(v) for v in plateaus.values())
    lines = []
    for want, errors in plateaus.items():
        median, p99 = quantile(errors, 0.5), quantile(errors, 0.99)
        lines.append(f"{want * 1e3:.0f} ms: {len(errors)}, {median * 1e3:+.3f}/{p99 * 1e3:+.3f}")
        assert len(errors) > 800 and abs(median) < 0.3e-3 and p99 < 1e-3, lines[-1]
    summary = "; ".join(lines)
    print(
        f"\nstepped delay trace: probes, RTT error median/p99 ms: {summary}; {in_between} between"
    )
    assert in_between < 60
