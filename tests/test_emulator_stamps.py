"""Arrival times from the kernel (netem/emulator/csrc/stamp.c): the C path times each packet
by when it entered the TUN device, not by when the packet thread read it, and so may leave a
direction unread until its next wake-up (root: namespaces, TUN devices, eBPF).

Marker datagrams are sent from the client every few milliseconds beside a dense flow that
keeps the thread waking on its timer; the clock is read just before and just after each
``sendto``, and the kernel runs the TUN's program inside that call, so each marker's
arrival in the packet log must fall between the two readings. A read-time stamp falls after
the second one (the thread reads the packet later, by up to a millisecond when its reads
wait for a wake-up)."""

from __future__ import annotations

import csv
import socket
import time
from pathlib import Path

import pytest

from netem.emulator.control import EmulatorClient
from netem.emulator.cpath import CPath
from netem.emulator.engine import DEFAULT_EARLY_S, DENSE_GAP_S
from netem.emulator.options import DEFAULT_COALESCE_S, EmulatorOptions
from netem.emulator.packetlog import parse_headers
from netem.emulator.pcap import read_pcap
from netem.link import Link
from netem.linkspec import parse_link
from netem.nsexec import in_netns

PORT_BULK = 5292
PORT_MARKER = 5293
MARKERS = 150
MARKER_GAP_S = 4e-3
BULK_PER_MARKER = 16
"""1,200-byte datagrams between two markers: about 40 Mbit/s, one every 250 µs, so the
thread's timer wakes it every grid period and its reads wait for those wake-ups."""
DATAGRAM_BYTES = 1200


LINK_NAME = "cm31"
"""The link these tests bring up (the ``link_name`` fixture, tests/conftest.py)."""


def send_markers(link: Link) -> list[tuple[int, float, float]]:
    """Markers among bulk datagrams, client to server: (number, clock before, after)."""
    with in_netns(link.client_ns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sent = []
    bulk = bytes(DATAGRAM_BYTES)
    with sock:
        for i in range(MARKERS):
            for _ in range(BULK_PER_MARKER):
                sock.sendto(bulk, (link.server_addr, PORT_BULK))
                time.sleep(MARKER_GAP_S / BULK_PER_MARKER / 2)
            before = time.monotonic()
            sock.sendto(i.to_bytes(4, "big") * 8, (link.server_addr, PORT_MARKER))
            sent.append((i, before, time.monotonic()))
    return sent


def marker_arrivals(directory: Path) -> list[float]:
    with open(directory / "packets-up.csv", newline="") as f:
        return [
            float(row["arrival_s"])
            for row in csv.DictReader(f)
            if row["dst_port"] == str(PORT_MARKER)
        ]


def run(link_name: str, spec: str, stamps: bool, tmp_path: Path):
    with Link.up(
        link_name, spec, backend="userspace", emulator=EmulatorOptions(path="c", stamps=stamps)
    ) as link:
        client = EmulatorClient(link._state.control_path)
        before = client.request("path")["counters"]
        with link.capture(tmp_path):
            sent = send_markers(link)
            time.sleep(0.1)  # past the 10 ms one-way delay: every marker has departed
        answer = client.request("path")
    counters = {k: v - before[k] for k, v in answer["counters"].items()}
    return sent, marker_arrivals(tmp_path), counters, answer["stamps"]


@pytest.mark.root
@pytest.mark.timeout(120)
def test_a_packets_arrival_is_when_the_kernel_queued_it(link_name: str, tmp_path: Path) -> None:
    """Every marker arrives (in the packet log) between the clock readings around its
    ``sendto``, while the thread, woken by its timer for the bulk flow, reads the client's
    side only at its wake-ups."""
    sent, arrivals, counters, stamps = run(link_name, "rtt=20ms,rate=100mbit", True, tmp_path)
    print(f"\n{stamps}: {counters}")
    assert stamps == "kernel"
    assert len(arrivals) == MARKERS
    inside = [before <= a <= after for (_, before, after), a in zip(sent, arrivals, strict=True)]
    assert all(inside), [
        (i, round((a - after) * 1e6)) for (i, _, after), a in zip(sent, arrivals, strict=True)
    ][:10]
    assert counters["read_stamps"] == 0
    assert counters["kernel_stamps"] == counters["reads"] >= MARKERS * (BULK_PER_MARKER + 1)
    # reads waited for the timer's wake-ups: a packet seldom woke the thread by itself
    assert counters["input_wakeups"] < 0.05 * counters["reads"]


@pytest.mark.root
@pytest.mark.timeout(120)
def test_reads_are_not_deferred_on_a_short_path(link_name: str, tmp_path: Path) -> None:
    """At 1 ms one way a packet read at the next wake-up could be due already: the thread
    is woken by its packets as they come, and still times them by the kernel."""
    sent, arrivals, counters, stamps = run(link_name, "rtt=2ms,rate=100mbit", True, tmp_path)
    print(f"\n{stamps}: {counters}")
    assert stamps == "kernel"
    assert len(arrivals) == MARKERS
    assert all(b <= a <= c for (_, b, c), a in zip(sent, arrivals, strict=True))
    assert counters["input_wakeups"] > 0.3 * MARKERS * (BULK_PER_MARKER + 1)


@pytest.mark.root
@pytest.mark.timeout(120)
def test_without_stamps_a_packet_is_timed_by_its_read(link_name: str, tmp_path: Path) -> None:
    """``stamps = false``: no program, each packet timed when the thread read it, after
    ``sendto`` returned."""
    sent, arrivals, counters, stamps = run(link_name, "rtt=20ms,rate=100mbit", False, tmp_path)
    assert stamps == "off"
    assert counters["kernel_stamps"] == 0 and counters["read_stamps"] == counters["reads"]
    assert len(arrivals) == MARKERS
    assert all(a > before for (_, before, _), a in zip(sent, arrivals, strict=True))
    # a read can come after sendto returned, which a kernel stamp never does; how many do
    # depends on the scheduler (a sender preempted after sendto reads its clock late: 27 of
    # 150 on a loaded host, most on a quiet one)
    assert any(a > after for (_, _, after), a in zip(sent, arrivals, strict=True))


SYN, ACK = 0x02, 0x10


@pytest.mark.root
@pytest.mark.timeout(60)
def test_an_ends_capture_keeps_cause_before_answer(link_name: str, tmp_path: Path) -> None:
    """The receiving stack answers inside the thread's write (the client's ACK of the
    SYN-ACK is stamped there by the kernel): the capture times a delivery at the write's
    start, so in the client's capture the SYN-ACK comes before the ACK that answers it."""
    with Link.up(
        link_name, "rtt=20ms", backend="userspace", emulator=EmulatorOptions(path="c")
    ) as link:
        with in_netns(link.server_ns):
            listener = socket.create_server((link.server_addr, PORT_BULK))
        with listener, link.capture(tmp_path):
            with in_netns(link.client_ns):
                socket.create_connection((link.server_addr, PORT_BULK), timeout=5).close()
            time.sleep(0.1)
    _, packets = read_pcap(tmp_path / "client.pcap")
    flags = [(ts, parse_headers(pkt)[5]) for ts, pkt in packets]
    syn_ack = next(i for i, (_, f) in enumerate(flags) if f & (SYN | ACK) == SYN | ACK)
    answer = next(i for i, (_, f) in enumerate(flags) if i != syn_ack and f & (SYN | ACK) == ACK)
    assert syn_ack < answer and flags[syn_ack][0] <= flags[answer][0]


def test_a_device_that_is_no_tun_is_read_as_packets_come() -> None:
    """Where the program cannot be attached (here: a socket, not a TUN; without root: the
    bpf map), the path says why and times packets by their reads."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = CPath(parse_link("rtt=20ms"))
    with a, b:
        path.native.start(
            [(0, a.fileno(), b.fileno())],
            DEFAULT_EARLY_S,
            DENSE_GAP_S,
            DEFAULT_COALESCE_S,
            False,
            False,
            True,
        )
        try:
            on, why = path.native.stamps()
        finally:
            path.native.stop()
    assert not on
    assert why.startswith(("TUNSETFILTEREBPF: ", "bpf map: ", "bpf program: ")), why
