"""The shared medium of an air= link, driven with a fake clock (netem.emulator.medium)."""

from __future__ import annotations

import pytest

from netem.air import AirSpec
from netem.emulator.core import LinkDirection
from netem.emulator.medium import (
    AirDirection,
    Medium,
    frame_kind,
    make_cores,
    medium_snapshot,
    set_medium_spec,
)
from netem.linkspec import DirectionSpec, LinkSpec, parse_link
from tbcore.errors import SpecError

DATA_IP_BYTES = 1228  # 302 µs exchange
ACK_IP_BYTES = 78  # 134 µs exchange
US = 1e-6


def ipv4(protocol: int, size: int, *, tcp_header: int = 32, tag: int = 0) -> bytes:
    """An IPv4 packet of ``size`` bytes (TCP with a ``tcp_header``-byte header, or UDP)."""
    head = bytearray(20)
    head[0] = 0x45
    head[2:4] = size.to_bytes(2, "big")
    head[9] = protocol
    body = bytearray(size - 20)
    if protocol == 6:
        body[12] = (tcp_header // 4) << 4
    body[-4:] = tag.to_bytes(4, "big")
    return bytes(head + body)


def udp(size: int, tag: int = 0) -> bytes:
    return ipv4(17, size, tag=tag)


def tag_of(packet: bytes) -> int:
    return int.from_bytes(packet[-4:], "big")


class Sink:
    def __init__(self) -> None:
        self.got: list[tuple[float, str, int]] = []

    def to(self, direction: str):
        return lambda t, packet: self.got.append((round(t / US, 6), direction, tag_of(packet)))


def medium(air: AirSpec | None = None) -> tuple[Medium, Sink]:
    m = Medium(air or AirSpec())
    sink = Sink()
    m.attach("up", sink.to("up"))
    m.attach("down", sink.to("down"))
    return m, sink


def test_one_data_frame_is_delivered_at_the_end_of_its_ppdu_and_holds_302_us() -> None:
    m, sink = medium()
    m.offer("up", 0.0, udp(DATA_IP_BYTES, 1))
    assert sink.got == [(242.0, "up", 1)]  # DIFS 34 + PPDU 208
    assert m.stats.busy_ns["up.data"] == 302_000
    assert m.stats.frames["up.data"] == 1
    assert m.stats.busy_s == 302e-6


def test_an_ack_only_exchange_holds_134_us() -> None:
    m, _ = medium()
    m.offer("down", 0.0, udp(ACK_IP_BYTES))
    assert m.stats.busy_ns == {"up.data": 0, "up.ack": 0, "down.data": 0, "down.ack": 134_000}


def test_the_other_direction_waits_for_the_exchange_in_progress() -> None:
    m, sink = medium()
    m.offer("up", 0.0, udp(DATA_IP_BYTES, 1))
    m.offer("down", 10 * US, udp(ACK_IP_BYTES, 2))
    assert m.next_start_s("down") == pytest.approx(302 * US)
    assert m.next_start_s("up") is None
    m.advance(301 * US)
    assert len(sink.got) == 1
    m.advance(1.0)  # a late wake-up still starts it at its scheduled time
    assert sink.got[1] == (302.0 + 34 + 40, "down", 2)
    assert m.stats.wait_ns["down"] == 292_000


def queue_both(order: str) -> list[str]:
    m, sink = medium(AirSpec(order=order))
    for i in range(3):
        m.offer("up", 0.0, udp(DATA_IP_BYTES, i))
    m.offer("down", 5 * US, udp(ACK_IP_BYTES, 9))
    m.advance(1.0)
    return [f"{d}{t}" for _, d, t in sink.got]


def test_fifo_serves_by_arrival() -> None:
    assert queue_both("fifo") == ["up0", "up1", "up2", "down9"]


def test_alternate_serves_the_other_direction_when_both_wait() -> None:
    assert queue_both("alternate") == ["up0", "down9", "up1", "up2"]


def test_fifo_tie_goes_up() -> None:
    m, sink = medium()
    m.offer("up", 0.0, udp(DATA_IP_BYTES, 1))
    m.offer("up", 0.0, udp(DATA_IP_BYTES, 2))
    m.offer("down", 0.0, udp(DATA_IP_BYTES, 3))
    m.advance(1.0)
    assert [t for _, _, t in sink.got] == [1, 2, 3]


def test_contention_stretches_both_directions() -> None:
    """Back-to-back traffic both ways: each direction gets the medium half the time."""
    m, sink = medium(AirSpec(order="alternate"))
    for i in range(100):
        m.offer("up", 0.0, udp(DATA_IP_BYTES, i))
        m.offer("down", 0.0, udp(DATA_IP_BYTES, 1000 + i))
    m.advance(1.0)
    up = [t for t, d, _ in sink.got if d == "up"]
    down = [t for t, d, _ in sink.got if d == "down"]
    # alone, 100 frames would take 100 * 302 µs; sharing, each direction's last frame ends
    # its data PPDU after 200 exchanges (minus the final SIFS + ACK for the last one)
    assert up[-1] == pytest.approx(199 * 302 - 302 + 242, abs=1e-6)
    assert down[-1] == pytest.approx(200 * 302 - 302 + 242, abs=1e-6)
    assert m.stats.busy_s == pytest.approx(200 * 302e-6, abs=1e-12)


def test_the_image_exchange_counts_occupy_13_4_s() -> None:
    """30,800 data exchanges one way and 30,800 feedback exchanges the other, back to back."""
    n = 30_800
    m, _ = medium(AirSpec(order="alternate", queue_packets=n))
    for i in range(n):
        m.offer("up", 0.0, udp(DATA_IP_BYTES, i))
        m.offer("down", 0.0, udp(ACK_IP_BYTES, i))
    m.advance(100.0)
    assert m.stats.frames == {"up.data": n, "up.ack": 0, "down.data": 0, "down.ack": n}
    assert sum(m.stats.busy_ns.values()) == n * 302_000 + n * 134_000
    assert m.stats.busy_s == pytest.approx(13.4288, abs=1e-9)
    # the medium never idles: the last exchange ends at the busy total
    assert m.next_start_s("up") is None
    assert m._free_s == pytest.approx(13.4288, abs=1e-6)


def test_queue_limit_refuses_and_counts() -> None:
    m, _ = medium(AirSpec(queue_packets=2))
    results = [m.offer("up", 0.0, udp(DATA_IP_BYTES)) for _ in range(4)]
    # the first starts at once; two wait; the fourth is refused
    assert results == [True, True, True, False]
    assert m.stats.dropped == {"up": 1, "down": 0}


def test_backoff_is_seeded_and_bounded() -> None:
    def starts(seed: int) -> list[float]:
        m, sink = medium(AirSpec(backoff=True, seed=seed))
        for i in range(200):
            m.offer("up", i * 1e-3, udp(DATA_IP_BYTES, i))
        m.advance(1.0)
        return [t - i * 1e3 - 242 for i, (t, _, _) in enumerate(sink.got)]

    extra = starts(3)
    assert extra == starts(3)
    assert extra != starts(4)
    slots = {round(e / 9) for e in extra}
    assert slots <= set(range(16)) and len(slots) > 8
    assert all(abs(e - 9 * round(e / 9)) < 1e-6 for e in extra)


def test_ampdu_carries_waiting_frames_in_one_exchange() -> None:
    m, sink = medium(AirSpec(ampdu_frames=4))
    m.offer("up", 0.0, udp(1500, 0))  # alone: a plain exchange
    for i in range(1, 4):
        m.offer("up", 1 * US, udp(1500, i))
    m.advance(1.0)
    assert m.stats.exchanges["up"] == 2
    assert m.stats.frames["up.data"] == 4
    # the 3 waiting ones share one A-MPDU: 3 * (4 + 1536) bytes = 172 symbols, BlockAck 68 µs
    ampdu_us = 20 + 172 * 4
    assert [t for t, _, _ in sink.got[1:]] == [342 + 34 + ampdu_us] * 3
    assert m.stats.busy_ns["up.data"] == 342_000 + (34 + ampdu_us + 16 + 68) * 1000


def test_frame_kind() -> None:
    assert frame_kind(ipv4(6, 52)) == "ack"  # 20 IP + 32 TCP, no payload
    assert frame_kind(ipv4(6, 53)) == "data"
    assert frame_kind(ipv4(6, 1500)) == "data"
    assert frame_kind(udp(78)) == "ack"
    assert frame_kind(udp(129)) == "data"
    v6 = bytearray(60)
    v6[0] = 0x60
    v6[4:6] = (20).to_bytes(2, "big")
    v6[6] = 6
    v6[52] = 5 << 4
    assert frame_kind(bytes(v6)) == "ack"


def drain(cores: dict, until: float = 10.0) -> list[tuple[float, str, int]]:
    """Run both directions like two pumps: wake at the earliest deadline, pop what is due."""
    out = []
    while True:
        deadlines = [(c.next_deadline(), n) for n, c in cores.items()]
        deadlines = [(d, n) for d, n in deadlines if d is not None]
        if not deadlines:
            return out
        now, _ = min(deadlines)
        assert now < until
        for name, core in cores.items():
            out += [(round(now / US, 6), name, tag_of(p)) for p in core.pop_due(now)]


def test_medium_then_wired_delay_and_rate() -> None:
    spec = parse_link("delay=1ms,rate=100mbit,air=54mbit/6mbit")
    cores = make_cores(spec)
    cores["up"].receive(0.0, udp(DATA_IP_BYTES, 1))
    cores["down"].receive(0.0, udp(ACK_IP_BYTES, 2))
    got = drain(cores)
    serial_us = DATA_IP_BYTES * 8 / 100
    ack_serial_us = ACK_IP_BYTES * 8 / 100
    assert got == [
        (pytest.approx(242 + serial_us + 1000), "up", 1),
        (pytest.approx(302 + 74 + ack_serial_us + 1000), "down", 2),
    ]
    assert cores["up"].stats.packets_out == 1
    assert cores["down"].stats.packets_in == 1


def test_wired_loss_comes_after_the_medium() -> None:
    spec = parse_link("loss=50%,air=54mbit/6mbit")
    cores = make_cores(spec)
    for i in range(100):
        cores["up"].receive(i * 1e-3, udp(DATA_IP_BYTES, i))
    drain(cores)
    st = cores["up"].stats
    assert st.packets_in == 100
    assert 20 < st.dropped_loss < 80
    assert st.packets_out == 100 - st.dropped_loss
    # every frame crossed the air, lost behind it or not
    assert cores["up"].medium.stats.frames["up.data"] == 100


def test_a_refused_frame_is_a_queue_drop_of_its_direction() -> None:
    cores = make_cores(parse_link("air=54mbit/6mbit,air.queue=1p"))
    for i in range(3):
        cores["up"].receive(0.0, udp(DATA_IP_BYTES, i))
    assert cores["up"].stats.dropped_queue == 1
    assert len(drain(cores)) == 2
    # a waiting frame is counted in when the medium hands it on: all three by now
    assert cores["up"].stats.packets_in == 3


def test_a_waiting_direction_is_woken_for_the_decision() -> None:
    cores = make_cores(parse_link("air=54mbit/6mbit"))
    cores["up"].receive(0.0, udp(DATA_IP_BYTES, 1))
    cores["down"].receive(0.0, udp(DATA_IP_BYTES, 2))
    assert cores["down"].next_deadline() == pytest.approx(302 * US)
    assert cores["down"].in_flight_packets == 1
    assert [d for _, d, _ in drain(cores)] == ["up", "down"]


def test_plain_links_get_plain_cores() -> None:
    cores = make_cores(parse_link("rtt=10ms"))
    assert all(type(c) is LinkDirection for c in cores.values())
    assert medium_snapshot(cores.values(), 0.0) is None


def test_live_spec_changes_the_medium_but_cannot_add_or_remove_it() -> None:
    cores = make_cores(parse_link("air=54mbit/6mbit"))
    set_medium_spec(cores.values(), parse_link("air=54mbit/6mbit,air.order=alternate"))
    assert cores["up"].medium.air.order == "alternate"
    with pytest.raises(SpecError) as err:
        set_medium_spec(cores.values(), parse_link("rtt=10ms"))
    assert err.value.field == "air"
    plain = make_cores(parse_link("rtt=10ms"))
    with pytest.raises(SpecError):
        set_medium_spec(plain.values(), parse_link("air=54mbit/6mbit"))


def test_snapshot_is_the_stats_dict() -> None:
    cores = make_cores(parse_link("air=54mbit/6mbit"))
    cores["up"].receive(0.0, udp(DATA_IP_BYTES))
    snap = medium_snapshot(cores.values(), 1.0)
    assert snap is not None
    assert snap["busy_s"] == 302e-6 and snap["frames_total"] == 1


def test_a_snapshot_during_an_exchange_counts_busy_time_only_up_to_its_instant() -> None:
    cores = make_cores(parse_link("air=54mbit/6mbit"))
    assert cores["up"].medium.snapshot(0.0).busy_s == 0.0
    cores["up"].receive(0.0, udp(DATA_IP_BYTES))
    medium = cores["up"].medium
    # 100 µs into a 302 µs exchange: the medium has been busy 100 µs, and the frame's
    # whole exchange is still what the model of that frame predicts
    early = medium.snapshot(100e-6)
    assert early.busy_s == pytest.approx(100e-6, abs=1e-9)
    assert early.charged_s == pytest.approx(302e-6)
    later = medium.snapshot(400e-6)
    assert (later - early).busy_s == pytest.approx(202e-6, abs=1e-9)
    assert medium.stats.ahead_ns == {"up": 0, "down": 0}


def test_a_snapshot_starts_the_exchanges_that_are_due_before_counting() -> None:
    cores = make_cores(parse_link("air=54mbit/6mbit"))
    medium = cores["up"].medium
    for n in range(3):
        cores["up"].receive(0.0, udp(DATA_IP_BYTES, n))
    # the first exchange starts on arrival; the next two are due at 302 and 604 µs, and
    # no pump has run since: at 700 µs all three have happened and the third is in progress
    snap = medium.snapshot(700e-6)
    assert snap.frames["up.data"] == 3
    assert snap.busy_s == pytest.approx(700e-6, abs=1e-9)


def test_air_direction_keeps_the_wired_recorder() -> None:
    wired = LinkDirection("up", DirectionSpec(), None)
    air = AirDirection(wired, Medium(AirSpec()))
    marker = object()
    air.recorder = marker  # type: ignore[assignment]
    assert wired.recorder is marker
    assert LinkSpec().air is None


def test_other_attributes_are_the_wired_stages() -> None:
    cores = make_cores(parse_link("delay=3ms,air=54mbit/6mbit"))
    assert cores["up"].queue_limit_bytes is cores["up"].wired.queue_limit_bytes
    assert cores["up"].spec.delay_s == 0.003


@pytest.mark.root
@pytest.mark.timeout(120)
def test_a_real_air_link_accounts_every_probe_and_adds_its_exchanges() -> None:
    import statistics

    from netem import clean, topology
    from netem.link import Link
    from netem.probe import probe_link

    name = "aitest"
    clean.clean(name)
    try:
        with Link.up(name, "rtt=20ms,air=54mbit/6mbit", backend="userspace") as link:
            before = link.stats()
            result = probe_link(link, count=30, interval_s=0.01, drain_s=0.5)
            delta = link.stats() - before
            air = delta.air
            assert air is not None
            # 92-byte IP probes (64-byte datagrams), small: ACK-only by size, both ways
            assert air.frames["up.ack"] >= 30 and air.frames["down.ack"] >= 30
            exchange_ns = AirSpec().exchange_ns(92)
            assert air.busy_ns["up.ack"] == air.frames["up.ack"] * exchange_ns
            # each way: 34 µs DIFS + 40 µs PPDU before the wired 10 ms
            assert min(result.rtt_s) >= 0.020 + 2 * 74e-6
            assert statistics.median(result.rtt_s) < 0.030
            link.set_route_metrics("server", initcwnd=10, quickack=True)
            routes = [r for r in topology.routes(link.server_ns) if r.get("metrics")]
            assert routes and routes[0]["metrics"]["quickack"] == 1
            with pytest.raises(SpecError):
                link.set_spec("rtt=20ms")  # a medium cannot go while the link is up
    finally:
        assert not clean.clean(name).remaining
