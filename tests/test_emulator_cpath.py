"""The C packet path against the Python core, packet for packet (no root: both driven
sans-I/O with the same clock and the same packets).

Each scenario drives :func:`netem.emulator.medium.make_cores` (the reference) and a
:class:`netem.emulator.cpath.CPath` with one seeded workload: arrivals in both directions,
and a pump's calls (``pop_due`` at every arrival and at every deadline either side
announces). Both keep a packet log, whose binary records (event, arrival, scheduled and
actual departure, size and header fields) must be equal byte for byte: the same drops for
the same reasons, the same departure times to the last bit. Counters, lateness histograms,
the medium's accounts and the outages' drop counts must be equal too.
"""

from __future__ import annotations

import math
import os
import random
import struct
from dataclasses import asdict

import pytest

from netem.emulator import cpath
from netem.emulator.medium import AirDirection, make_cores
from netem.emulator.packetlog import PacketLog
from netem.events import ScheduledEvent, end_events, parse_event
from netem.linkspec import LinkSpec, parse_link
from tbcore.errors import SpecError

pytestmark = pytest.mark.skipif(not cpath.available(), reason="C path not built (install.sh)")

DIRECTIONS = ("up", "down")


def ipv4(total: int, ident: int, proto: int, *, dont_fragment: bool) -> bytes:
    """An IPv4 header from 198.18.1.2 to 198.18.2.2 (no options, checksum left 0)."""
    return struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        total,
        ident & 0xFFFF,
        0x4000 if dont_fragment else 0,
        64,
        proto,
        0,
        bytes([198, 18, 1, 2]),
        bytes([198, 18, 2, 2]),
    )


def tcp(payload: int, seq: int, *, flags: int = 0x10) -> bytes:
    """An IPv4 TCP segment with the timestamp option (52 header bytes)."""
    ip = ipv4(52 + payload, seq, 6, dont_fragment=True)
    th = struct.pack("!HHIIBBHHH", 40000, 5201, seq, 7, 8 << 4, flags, 512, 0, 0)
    return ip + th + bytes(12) + bytes(payload)


def udp(payload: int, tag: int) -> bytes:
    ip = ipv4(28 + payload, tag, 17, dont_fragment=False)
    return ip + struct.pack("!HHHH", 4433, 443, 8 + payload, 0) + bytes(payload)


def workload(seed: int, count: int, mean_gap_s: float) -> list[tuple[float, str, bytes]]:
    """Seeded arrivals: bursts of full segments up, ACK-only and small packets down."""
    rng = random.Random(seed)
    t = 1000.0
    out = []
    for i in range(count):
        t += rng.expovariate(1.0 / mean_gap_s) if rng.random() < 0.7 else 0.0
        kind = rng.random()
        if kind < 0.55:
            out.append((t, "up", tcp(1448, i)))
        elif kind < 0.75:
            out.append((t, "down", tcp(0, i)))
        elif kind < 0.9:
            out.append((t, "down", udp(rng.randrange(20, 1400), i)))
        else:
            out.append((t, "up", udp(rng.randrange(20, 1400), i)))
    return out


class Reference:
    """The Python cores with packet logs."""

    def __init__(self, spec: LinkSpec, origin_s: float = 0.0) -> None:
        self.cores = make_cores(spec, origin_s)
        self.logs = {d: PacketLog(d) for d in DIRECTIONS}
        for d in DIRECTIONS:
            self.cores[d].recorder = self.logs[d]
        self.events: list[ScheduledEvent] = []

    def add_event(self, event: ScheduledEvent) -> None:
        for core in self.cores.values():
            core.add_event(event)
        self.events.append(event)

    def end_events(self, at_s: float) -> list[int]:
        changed = end_events(self.events, at_s)
        for core in self.cores.values():
            core.timeline.refresh()
        return [self.events.index(e) for e in changed]


class Native:
    """The C path with packet logs."""

    def __init__(self, spec: LinkSpec, origin_s: float = 0.0) -> None:
        self.path = cpath.CPath(spec, origin_s)
        for d in DIRECTIONS:
            self.path.log_start(d)
        self.events: list[ScheduledEvent] = []

    def add_event(self, event: ScheduledEvent) -> None:
        self.path.add_event(len(self.events), event)
        self.events.append(event)


def run(
    spec: LinkSpec,
    arrivals: list[tuple[float, str, bytes]],
    events: list[str] = (),
    end_at: float | None = None,
) -> tuple[Reference, Native]:
    """Drive both with the same calls; every departure list and deadline must agree. The
    traces' clock starts 0.3 s before the first arrival."""
    base_s = arrivals[0][0]
    ref, nat = Reference(spec, base_s - 0.3), Native(spec, base_s - 0.3)
    for i, text in enumerate(events):
        scheduled = parse_event(text).resolve(base_s, index=i)
        ref.add_event(scheduled)
        nat.add_event(ScheduledEvent.from_dict(scheduled.to_dict()))
    calls: list[tuple[float, str, bytes | None]] = list(arrivals)
    step = 0
    ended = False
    while calls or any(ref.cores[d].next_deadline() is not None for d in DIRECTIONS):
        deadlines = [ref.cores[d].next_deadline() for d in DIRECTIONS]
        assert deadlines == [nat.path.next_deadline(d) for d in DIRECTIONS], step
        known = [t for t in deadlines if t is not None]
        if calls and (not known or calls[0][0] <= min(known)):
            now, direction, packet = calls.pop(0)
            ref.cores[direction].receive(now, packet)
            nat.path.receive(direction, now, packet)
        else:
            # a pump wakes a little after the deadline (its lateness), or exactly on it
            now = min(known) + (0.0 if step % 3 else 13e-6)
        if end_at is not None and not ended and now >= end_at:
            for index in ref.end_events(now):
                nat.path.set_event_end(index, ref.events[index].end_s)
            ended = True
        for d in DIRECTIONS:
            assert ref.cores[d].pop_due(now) == nat.path.pop_due(d, now), (step, d)
        step += 1
    return ref, nat


def assert_same(ref: Reference, nat: Native) -> None:
    for d in DIRECTIONS:
        log = nat.path.log_take(d)
        assert log.records == ref.logs[d].records
        assert bytes(log.data) == bytes(ref.logs[d].data), d
        assert asdict(nat.path.stats(d)) == asdict(ref.cores[d].stats), d
    for i, event in enumerate(ref.events):
        nat.path.fill_drops(i, nat.events[i])
        assert nat.events[i].dropped_packets == event.dropped_packets, i
    core = ref.cores["up"]
    if isinstance(core, AirDirection):
        now = 1e6
        assert nat.path.air_stats(now) == core.medium.snapshot(now)


def offer(ref: Reference, nat: Native, now: float, direction: str, packet: bytes) -> None:
    """One arrival to both, then what each has due by then (the same, in the same order)."""
    ref.cores[direction].receive(now, packet)
    nat.path.receive(direction, now, packet)
    for name in DIRECTIONS:
        assert ref.cores[name].pop_due(now) == nat.path.pop_due(name, now)


def drain_and_compare(ref: Reference, nat: Native) -> None:
    for name in DIRECTIONS:
        assert ref.cores[name].pop_due(math.inf) == nat.path.pop_due(name, math.inf)
    assert_same(ref, nat)


def departed(ref: Reference) -> int:
    return sum(ref.cores[d].stats.packets_out for d in DIRECTIONS)


def test_bernoulli_loss_rate_queue_delay_jitter() -> None:
    spec = parse_link("rtt=40ms,rate=20mbit,loss=10%,jitter=2ms,queue=30p,seed=3")
    ref, nat = run(spec, workload(1, 6000, 0.4e-3))
    stats = ref.cores["up"].stats
    assert stats.dropped_loss > 100 and stats.dropped_queue > 100  # both paths exercised
    assert_same(ref, nat)


def test_gilbert_elliott() -> None:
    spec = parse_link("rtt=20ms,rate=50mbit,gemodel=2%/25%/90%/1%,seed=11")
    ref, nat = run(spec, workload(2, 6000, 0.3e-3))
    assert ref.cores["up"].stats.dropped_loss > 50
    assert_same(ref, nat)


def test_unlimited_rate_and_per_direction_specs() -> None:
    spec = parse_link("up.delay=5ms,down.delay=30ms,down.loss=20%,up.rate=5mbit,up.queue=20000b")
    ref, nat = run(spec, workload(3, 4000, 1e-3))
    assert_same(ref, nat)


def test_rate_changes() -> None:
    spec = parse_link("rtt=20ms,rate=20mbit,loss=1%")
    events = [
        "rate:at=0.3s,rate=2mbit,dir=up",
        "rate:at=0.2s,for=0.5s,rate=100mbit,dir=down",
        "rate:at=0.9s,rate=40mbit",
    ]
    ref, nat = run(spec, workload(4, 5000, 0.3e-3), events)
    assert_same(ref, nat)


def test_rate_change_on_an_unlimited_link() -> None:
    spec = parse_link("rtt=10ms")
    ref, nat = run(spec, workload(5, 3000, 0.3e-3), ["rate:at=0.2s,for=0.3s,rate=5mbit"])
    assert ref.cores["up"].stats.max_backlog_packets > 1
    assert_same(ref, nat)


def test_outages_and_end_events() -> None:
    spec = parse_link("rtt=60ms,rate=30mbit,loss=2%")
    events = ["outage:at=0.2s,for=0.1s", "outage:at=0.5s,for=10s,dir=down"]
    arrivals = workload(6, 5000, 0.25e-3)
    ref, nat = run(spec, arrivals, events, end_at=arrivals[0][0] + 0.8)
    assert all(e.dropped_packets for e in ref.events)
    assert_same(ref, nat)


@pytest.mark.parametrize(
    "air",
    [
        "air=54mbit/6mbit",
        "air=54mbit/6mbit,air.order=alternate,air.backoff=on,air.seed=5",
        "air=24mbit/6mbit,air.ampdu=8,air.queue=40p,air.backoff=on",
    ],
)
def test_air_medium(air: str) -> None:
    spec = parse_link(f"rtt=10ms,loss=3%,rate=40mbit,{air}")
    ref, nat = run(spec, workload(7, 4000, 0.2e-3), ["outage:at=0.3s,for=50ms"])
    assert_same(ref, nat)


def test_a_new_spec_restarts_the_generators_and_keeps_packets_in_flight() -> None:
    spec = parse_link("rtt=100ms,rate=10mbit,loss=20%,jitter=5ms")
    arrivals = workload(8, 3000, 0.3e-3)
    ref, nat = Reference(spec), Native(spec)
    for i, (now, d, packet) in enumerate(arrivals):
        if i == 1500:
            other = parse_link("rtt=50ms,rate=30mbit,gemodel=5%/30%,seed=9")
            for name in DIRECTIONS:
                ref.cores[name].set_spec(getattr(other, name), other.queue_limit_bytes(name))
            nat.path.set_spec(other)
        offer(ref, nat, now, d, packet)
    drain_and_compare(ref, nat)


def test_capacity_traces_with_an_offset_loss_and_a_byte_queue() -> None:
    """mm-link's byte accounting (small packets sharing an opportunity, a large one spanning
    several, an idle link banking nothing), wrapping, the offset, loss and the queue."""
    spec = parse_link(
        "rtt=40ms,up.rate=trace:cell-markov.up,down.rate=trace:cell-slow.up,"
        "trace_offset=39.5s,loss=3%,queue=40p,seed=4"
    )
    ref, nat = run(spec, workload(21, 8000, 0.4e-3))
    up = ref.cores["up"].stats
    assert up.dropped_queue > 100 and up.dropped_loss > 20 and up.packets_out > 1000
    assert_same(ref, nat)


@pytest.mark.parametrize("interp", ["step", "linear"])
def test_delay_traces_step_and_linear(interp: str) -> None:
    spec = parse_link(
        f"up.delay=trace:leo.delay,down.delay=trace:leo.delay,delay_interp={interp},"
        "rate=30mbit,trace_offset=14.9s,loss=1%"
    )
    ref, nat = run(spec, workload(22, 6000, 0.3e-3))
    assert_same(ref, nat)


def test_both_traces_on_one_direction_and_a_rate_event_on_the_other() -> None:
    spec = parse_link(
        "up.rate=trace:cell-markov.up,up.delay=trace:leo.delay,down.delay=20ms,down.rate=10mbit"
    )
    ref, nat = run(spec, workload(23, 5000, 0.3e-3), ["rate:at=0.2s,rate=2mbit,dir=down"])
    assert_same(ref, nat)


def test_a_new_traced_spec_starts_after_the_queued_packets() -> None:
    """set_spec while packets are queued: the new trace's opportunities start once they have
    left (busy_until), its clock at the new spec's time."""
    spec = parse_link("rtt=50ms,rate=5mbit")
    arrivals = workload(24, 3000, 0.2e-3)
    ref, nat = Reference(spec, arrivals[0][0]), Native(spec, arrivals[0][0])
    for i, (now, d, packet) in enumerate(arrivals):
        if i in (1000, 2000):
            other = parse_link(
                "delay=30ms,rate=trace:cell-dips.down,trace_offset=2s"
                if i == 1000
                else "delay=trace:leo.delay,rate=trace:cell-markov.down,delay_interp=linear"
            )
            for name in DIRECTIONS:
                ref.cores[name].set_spec(getattr(other, name), other.queue_limit_bytes(name), now)
            nat.path.set_spec(other, now)
            assert nat.path.trace_info("up") == ref.cores["up"].trace_info()
        offer(ref, nat, now, d, packet)
    drain_and_compare(ref, nat)


def test_a_medium_cannot_come_or_go() -> None:
    path = cpath.CPath(parse_link("rtt=10ms"))
    with pytest.raises(SpecError, match="air"):
        path.set_spec(parse_link("rtt=10ms,air=54mbit/6mbit"))


def test_the_c_path_refuses_an_aggregate_it_cannot_gather() -> None:
    with pytest.raises(SpecError, match=r"air\.ampdu"):
        cpath.CPath(parse_link("rtt=10ms,air=54mbit/6mbit,air.ampdu=300"))


# --- segmentation of TCP super-packets (csrc/gso.c) ----------------------------------------

VNET_NEEDS_CSUM = 1
GSO_TCPV4, GSO_UDP, GSO_TCPV6 = 1, 3, 4


def vnet_header(gso_type: int, gso_size: int, hdr_len: int, csum_start: int) -> bytes:
    return struct.pack("<BBHHHH", VNET_NEEDS_CSUM, gso_type, hdr_len, gso_size, csum_start, 16)


def ones_sum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def tcp_checksum_ok(pseudo: bytes, segment: bytes) -> bool:
    return ones_sum(pseudo + segment) == 0xFFFF


def complete_partial(segment: bytes, start: int, offset: int) -> bytes:
    """What a NIC (or the kernel for CHECKSUM_PARTIAL) does: sum from csum_start with the
    field holding the pseudo-header sum, store the complement at csum_start + offset."""
    value = (~ones_sum(segment[start:])) & 0xFFFF
    at = start + offset
    return segment[:at] + struct.pack("!H", value) + segment[at + 2 :]


def super_packet_v4(payload: bytes, seq: int, flags: int) -> bytes:
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        52 + len(payload),
        0xFFFE,
        0x4000,
        64,
        6,
        0,
        bytes([198, 18, 1, 2]),
        bytes([198, 18, 2, 2]),
    )
    th = struct.pack("!HHIIBBHHH", 40000, 5201, seq, 7, 8 << 4, flags, 512, 0xABCD, 0)
    return ip + th + bytes(12) + payload


def test_a_tcp_v4_super_packet_is_cut_as_the_kernel_would() -> None:
    path = cpath.CPath(parse_link("rtt=10ms"))
    payload = bytes(range(256)) * 40  # 10,240 bytes: 7 full segments and one of 104
    packet = super_packet_v4(payload, 0xFFFFF000, 0x80 | 0x10 | 0x08 | 0x01)  # CWR ACK PSH FIN
    segments = path.native.segment(vnet_header(GSO_TCPV4, 1448, 52, 20), packet)
    assert len(segments) == 8
    for i, (header, seg) in enumerate(segments):
        flags, gso_type, _, _, start, offset = struct.unpack("<BBHHHH", header)
        assert (flags, gso_type, start, offset) == (VNET_NEEDS_CSUM, 0, 20, 16)
        chunk = payload[i * 1448 : (i + 1) * 1448]
        assert seg[52:] == chunk and len(seg) == 52 + len(chunk)
        total, ip_id = struct.unpack_from("!HH", seg, 2)
        assert total == len(seg) and ip_id == (0xFFFE + i) & 0xFFFF
        assert ones_sum(seg[:20]) == 0xFFFF  # IP header checksum
        seq = struct.unpack_from("!I", seg, 24)[0]
        assert seq == (0xFFFFF000 + i * 1448) & 0xFFFFFFFF  # wraps past 2**32
        tcp_flags = seg[33]
        assert bool(tcp_flags & 0x80) == (i == 0)  # CWR on the first only
        assert bool(tcp_flags & 0x09) == (i == 7) and tcp_flags & 0x10  # FIN, PSH on the last
        pseudo = seg[12:20] + struct.pack("!BBH", 0, 6, len(seg) - 20)
        assert tcp_checksum_ok(pseudo, complete_partial(seg, 20, 16)[20:])


V6_SRC, V6_DST = bytes(15) + b"\1", bytes(15) + b"\2"


def super_packet_v6(payload: bytes) -> bytes:
    """A TCP super-packet over IPv6 (ACK PSH, 12 bytes of options: 72 header bytes)."""
    ip6 = struct.pack("!IHBB16s16s", 6 << 28, 32 + len(payload), 6, 64, V6_SRC, V6_DST)
    th = struct.pack("!HHIIBBHHH", 40000, 5201, 1000, 7, 8 << 4, 0x18, 512, 0, 0)
    return ip6 + th + bytes(12) + payload


def test_a_tcp_v6_super_packet_is_cut() -> None:
    path = cpath.CPath(parse_link("rtt=10ms"))
    payload = os.urandom(3000)
    segments = path.native.segment(vnet_header(GSO_TCPV6, 1428, 72, 40), super_packet_v6(payload))
    assert [len(s) - 72 for _, s in segments] == [1428, 1428, 144]
    for i, (_, seg) in enumerate(segments):
        assert struct.unpack_from("!H", seg, 4)[0] == len(seg) - 40
        assert struct.unpack_from("!I", seg, 44)[0] == 1000 + i * 1428
        pseudo = V6_SRC + V6_DST + struct.pack("!IxxxB", len(seg) - 40, 6)
        assert tcp_checksum_ok(pseudo, complete_partial(seg, 40, 16)[40:])


def test_what_is_not_a_tcp_super_packet_is_not_cut() -> None:
    path = cpath.CPath(parse_link("rtt=10ms"))
    packet = super_packet_v4(bytes(5000), 1, 0x10)
    assert path.native.segment(vnet_header(GSO_UDP, 1448, 52, 20), packet) == []
    assert path.native.segment(vnet_header(GSO_TCPV4, 0, 52, 20), packet) == []
    assert path.native.segment(vnet_header(GSO_TCPV6, 1448, 52, 20), packet) == []  # not v6


# --- GRO on delivery: what the packet thread writes for segments released together ----


def cut(path: cpath.CPath, payload: bytes, seq: int = 1000, flags: int = 0x18) -> list:
    """The segments the C path cuts a super-packet into (ACK, PSH on the last)."""
    return path.native.segment(
        vnet_header(GSO_TCPV4, 1448, 52, 20), super_packet_v4(payload, seq, flags)
    )


def test_segments_released_together_reach_the_receiver_as_the_super_packet() -> None:
    path = cpath.CPath(parse_link("rtt=10ms"))
    payload = os.urandom(10_000)  # 6 full segments and one of 1,312 bytes
    (merged,) = path.native.coalesce(cut(path, payload))
    header, packet = merged
    flags, gso_type, hdr_len, gso_size, start, offset = struct.unpack("<BBHHHH", header)
    assert (flags, gso_type, hdr_len, gso_size, start, offset) == (
        VNET_NEEDS_CSUM, GSO_TCPV4, 52, 1448, 20, 16
    )  # fmt: skip
    assert packet[52:] == payload and struct.unpack_from("!H", packet, 2)[0] == len(packet)
    assert ones_sum(packet[:20]) == 0xFFFF  # the IP header's checksum, made anew
    assert struct.unpack_from("!I", packet, 24)[0] == 1000 and packet[33] == 0x18  # ACK PSH
    pseudo = packet[12:20] + struct.pack("!BBH", 0, 6, len(packet) - 20)
    assert tcp_checksum_ok(pseudo, complete_partial(packet, 20, 16)[20:])


def test_a_v6_run_is_merged_too() -> None:
    path = cpath.CPath(parse_link("rtt=10ms"))
    payload = os.urandom(3000)
    segments = path.native.segment(vnet_header(GSO_TCPV6, 1428, 72, 40), super_packet_v6(payload))
    (merged,) = path.native.coalesce(segments)
    header, packet = merged
    assert struct.unpack("<BBHHHH", header)[1:4] == (GSO_TCPV6, 72, 1428)
    assert packet[72:] == payload and struct.unpack_from("!H", packet, 4)[0] == len(packet) - 40
    pseudo = V6_SRC + V6_DST + struct.pack("!IxxxB", len(packet) - 40, 6)
    assert tcp_checksum_ok(pseudo, complete_partial(packet, 40, 16)[40:])


def test_a_run_holds_at_most_64_kb() -> None:
    path = cpath.CPath(parse_link("rtt=10ms"))
    payload = os.urandom(50 * 1448)
    half = 25 * 1448
    segments = cut(path, payload[:half], flags=0x10) + cut(path, payload[half:], 1000 + half)
    out = path.native.coalesce(segments)
    sizes = [len(p) for _, p in out]
    assert sizes == [52 + 45 * 1448, 52 + 5 * 1448]  # 65,212 bytes: a 46th would pass 65,535
    assert b"".join(p[52:] for _, p in out) == payload


def _patched(segment: tuple[bytes, bytes], at: int, value: bytes) -> tuple[bytes, bytes]:
    header, packet = segment
    return header, packet[:at] + value + packet[at + len(value) :]


def _third(at: int, value: bytes):
    """The third of four segments with ``value`` written at byte ``at``."""
    return lambda s: [*s[:2], _patched(s[2], at, value), *s[3:]]


@pytest.mark.parametrize(
    ("change", "runs"),
    [
        (lambda s: s, [4]),
        (_third(22, b"\x14\x52"), [2, 1, 1]),  # another destination port
        (lambda s: s[:2] + s[3:], [2, 1]),  # a gap in the sequence numbers
        (_third(33, b"\x18"), [3, 1]),  # PSH ends a run, itself in it
        (_third(33, b"\x11"), [2, 1, 1]),  # FIN
        (_third(44, b"\x01"), [2, 1, 1]),  # other TCP options (a timestamp)
        (_third(28, b"\0\0\0\x08"), [2, 1, 1]),  # another ACK number
        (_third(1, b"\x03"), [2, 1, 1]),  # ECN CE
        (lambda s: [_patched(x, 6, b"\0") for x in s], [1, 1, 1, 1]),  # DF clear
        (lambda s: [(bytes(10), p) for _, p in s], [1, 1, 1, 1]),  # full checksums: kept
    ],
    ids=["one-run", "flow", "gap", "psh", "fin", "options", "ack", "ecn", "no-df", "csum"],
)
def test_what_gro_would_not_merge_stays_apart(change, runs: list[int]) -> None:
    path = cpath.CPath(parse_link("rtt=10ms"))
    segments = change(cut(path, os.urandom(4 * 1448), flags=0x10))
    out = path.native.coalesce(segments)
    assert [max(1, (len(p) - 52) // 1448) for _, p in out] == runs
    assert sum(len(p) - 52 for _, p in out) == sum(len(p) - 52 for _, p in segments)


def test_a_short_segment_ends_its_run_and_an_ack_is_never_merged() -> None:
    path = cpath.CPath(parse_link("rtt=10ms"))
    short = cut(path, os.urandom(1448 + 700), seq=1000, flags=0x10)
    after = cut(path, os.urandom(1448), seq=1000 + 1448 + 700, flags=0x10)
    ack = [(vnet_header(0, 0, 0, 20), super_packet_v4(b"", 9, 0x10))]  # no payload
    out = path.native.coalesce(short + after + ack + ack)
    assert [len(p) - 52 for _, p in out] == [2148, 1448, 0, 0]


def udp_v4(payload: bytes, *, port: int = 5201, df: bool = True) -> tuple[bytes, bytes]:
    """A datagram as the sending stack hands it over: checksum left partial."""
    ip = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 28 + len(payload), 7, 0x4000 if df else 0, 64, 17, 0,
        bytes([198, 18, 1, 2]), bytes([198, 18, 2, 2]),
    )  # fmt: skip
    udp = struct.pack("!HHHH", 40000, port, 8 + len(payload), 0)
    return vnet_header(0, 0, 0, 20)[:8] + struct.pack("<H", 6), ip + udp + payload


def test_datagrams_of_one_flow_go_up_as_one_udp_super_packet() -> None:
    path = cpath.CPath(parse_link("rtt=10ms"))
    payloads = [os.urandom(1200) for _ in range(5)] + [os.urandom(300)]
    (merged,) = path.native.coalesce([udp_v4(p) for p in payloads])
    header, packet = merged
    flags, gso_type, hdr_len, gso_size, start, offset = struct.unpack("<BBHHHH", header)
    assert (flags, gso_type, hdr_len, gso_size, start, offset) == (
        VNET_NEEDS_CSUM, 5, 28, 1200, 20, 6  # VIRTIO_NET_HDR_GSO_UDP_L4
    )  # fmt: skip
    assert packet[28:] == b"".join(payloads) and ones_sum(packet[:20]) == 0xFFFF
    assert struct.unpack_from("!H", packet, 24)[0] == len(packet) - 20  # the UDP length
    pseudo = packet[12:20] + struct.pack("!BBH", 0, 17, len(packet) - 20)
    assert tcp_checksum_ok(pseudo, complete_partial(packet, 20, 6)[20:])


def test_datagrams_stay_apart_across_flows_sizes_and_fragments() -> None:
    path = cpath.CPath(parse_link("rtt=10ms"))
    d = [os.urandom(1200) for _ in range(3)]
    out = path.native.coalesce(
        [
            *(udp_v4(d[0]), udp_v4(d[1])),
            *(udp_v4(d[2], port=5202), udp_v4(d[0], port=5202)),  # another flow
            *(udp_v4(d[0][:500]), udp_v4(d[1])),  # a larger one after a smaller: apart
            *(udp_v4(d[0], df=False), udp_v4(d[1], df=False)),  # DF clear
        ]
    )
    assert [len(p) - 28 for _, p in out] == [2400, 2400, 500, 1200, 1200, 1200]


def test_every_direction_field_is_applied_by_the_c_path_or_refused() -> None:
    """One declaration (cpath.C_PATH_FIELDS) for every DirectionSpec field: a field added to
    the spec and not to the table is refused on the C path, never parsed and dropped."""
    import dataclasses

    from netem.linkspec import DirectionSpec

    names = {f.name for f in dataclasses.fields(DirectionSpec)}
    assert set(cpath.C_PATH_FIELDS) == names
    refused = {name for name, why in cpath.C_PATH_FIELDS.items() if why is not None}
    assert refused == set()  # traces too, since issue 41
    cpath.refused_fields("down", parse_link("down.delay=trace:leo.delay").down)
    cpath.refused_fields("up", DirectionSpec(delay_s=0.1, loss=0.1, rate_bps=1e6))


def test_a_field_the_table_does_not_know_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from netem.linkspec import DirectionSpec

    monkeypatch.delitem(cpath.C_PATH_FIELDS, "jitter_s")
    with pytest.raises(SpecError, match=r"up\.jitter_s: the C packet path does not apply it"):
        cpath.refused_fields("up", DirectionSpec(delay_s=0.1, jitter_s=0.01))
