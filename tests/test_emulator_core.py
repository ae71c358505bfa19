"""The sans-I/O link direction, driven with a fake clock."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from netem.emulator.core import LinkDirection
from netem.emulator.loss import loss_rng
from netem.events import Outage, RateChange
from netem.linkspec import DirectionSpec, GilbertElliott, LinkSpec
from netem.trace import TraceFile, open_trace
from tbcore.errors import SpecError


def packet(size: int, tag: int = 0) -> bytes:
    return tag.to_bytes(4, "big") + bytes(size - 4)


def drain(core: LinkDirection) -> list[tuple[float, bytes]]:
    """Pop every packet exactly at its deadline: (departure time, packet)."""
    out = []
    while (deadline := core.next_deadline()) is not None:
        out += [(deadline, p) for p in core.pop_due(deadline)]
    return out


def test_burst_departs_at_the_serialisation_rate_plus_delay() -> None:
    core = LinkDirection("up", DirectionSpec(delay_s=0.05, rate_bps=8e6), 10**6)
    for i in range(10):
        core.receive(1.0, packet(1000, i))
    departures = drain(core)
    # 1000 bytes at 8 Mbit/s = 1 ms each, back to back from t=1.0, then 50 ms
    assert [round(t, 9) for t, _ in departures] == [
        round(1.0 + (i + 1) * 1e-3 + 0.05, 9) for i in range(10)
    ]
    assert [int.from_bytes(p[:4], "big") for _, p in departures] == list(range(10))


def test_idle_link_does_not_bank_credit() -> None:
    core = LinkDirection("up", DirectionSpec(rate_bps=8e6), 10**6)
    core.receive(0.0, packet(1000))
    core.receive(5.0, packet(1000))
    assert [t for t, _ in drain(core)] == [0.001, 5.001]


def test_nothing_is_due_before_its_time() -> None:
    core = LinkDirection("up", DirectionSpec(delay_s=0.1), None)
    core.receive(0.0, packet(100))
    assert core.pop_due(0.0999) == []
    assert len(core.pop_due(0.1)) == 1
    assert core.next_deadline() is None


def test_queue_overflow_drops_tail_and_counts_bytes() -> None:
    limit = 5 * 1500
    core = LinkDirection("up", DirectionSpec(rate_bps=1e6), limit)
    for i in range(8):
        core.receive(0.0, packet(1500, i))
    st = core.stats
    assert st.dropped_queue == 3
    assert st.bytes_dropped_queue == 3 * 1500
    assert st.max_backlog_bytes == limit
    assert st.max_backlog_packets == 5
    assert [int.from_bytes(p[:4], "big") for _, p in drain(core)] == [0, 1, 2, 3, 4]


def test_queue_frees_space_as_packets_leave() -> None:
    core = LinkDirection("up", DirectionSpec(rate_bps=12e6), 3000)  # 1500 B = 1 ms
    core.receive(0.0, packet(1500))
    core.receive(0.0, packet(1500))
    core.receive(0.0005, packet(1500))  # full: both still unserialised
    core.receive(0.0011, packet(1500))  # the first has left
    assert core.stats.dropped_queue == 1
    assert core.stats.packets_in == 4


def test_default_queue_limit_comes_from_the_spec() -> None:
    spec = LinkSpec(up=DirectionSpec(delay_s=0.1, rate_bps=100e6))
    core = LinkDirection("up", spec.up, spec.queue_limit_bytes("up"))
    assert core.queue_limit_bytes == spec.queue_limit_bytes("up") == 1_250_000


def test_bernoulli_loss_rate_inside_binomial_interval() -> None:
    n = 20000
    core = LinkDirection("down", DirectionSpec(loss=0.14, seed=7), None)
    for _ in range(n):
        core.receive(0.0, packet(100))
    lost = core.stats.dropped_loss
    sigma = math.sqrt(n * 0.14 * 0.86)
    assert abs(lost - n * 0.14) < 3.3 * sigma  # 99.9 %
    assert core.stats.realised_loss == lost / n
    assert core.stats.packets_out == 0 and core.in_flight_packets == n - lost


def test_lost_packets_use_the_bottleneck() -> None:
    """Loss comes after the queue: a lost packet still took its serialisation time."""
    lossy = LinkDirection("up", DirectionSpec(rate_bps=8e6, loss=0.5, seed=3), 10**7)
    for i in range(100):
        lossy.receive(0.0, packet(1000, i))
    times = [t for t, _ in drain(lossy)]
    # the k-th offered packet leaves at (k+1) ms whether or not the ones before it were lost
    survivors = LinkDirection("up", DirectionSpec(rate_bps=8e6, loss=0.5, seed=3), 10**7)
    kept = []
    for i in range(100):
        before = survivors.stats.dropped_loss
        survivors.receive(0.0, packet(1000, i))
        if survivors.stats.dropped_loss == before:
            kept.append(i)
    assert [round(t, 9) for t in times] == [round((i + 1) * 1e-3, 9) for i in kept]


def test_same_seed_same_pattern_other_seed_or_direction_other_pattern() -> None:
    def pattern(direction: str, seed: int) -> list[int]:
        core = LinkDirection(direction, DirectionSpec(loss=0.3, seed=seed), None)
        out = []
        for i in range(500):
            before = core.stats.dropped_loss
            core.receive(i * 1e-3, packet(100))
            out.append(core.stats.dropped_loss - before)
        return out

    assert pattern("up", 5) == pattern("up", 5)
    assert pattern("up", 5) != pattern("up", 6)
    assert pattern("up", 5) != pattern("down", 5)


def test_queue_drops_do_not_shift_the_loss_pattern() -> None:
    """The k-th offered packet meets the k-th draw, whatever the queue did before it."""
    small = LinkDirection("up", DirectionSpec(rate_bps=1e6, loss=0.3, seed=9), 1500)
    large = LinkDirection("up", DirectionSpec(rate_bps=1e6, loss=0.3, seed=9), 10**7)
    for core in (small, large):
        for i in range(200):
            core.receive(i * 1e-4, packet(1500, i))
    assert small.stats.dropped_queue > 0
    assert large.stats.dropped_queue == 0
    assert small._loss._random() == large._loss._random()  # both made 200 draws


def test_gilbert_elliott_bursts() -> None:
    model = GilbertElliott(p=0.02, r=0.25)
    core = LinkDirection("down", DirectionSpec(gemodel=model, seed=1), None)
    outcome = []
    for _ in range(100_000):
        before = core.stats.dropped_loss
        core.receive(0.0, packet(64))
        outcome.append(core.stats.dropped_loss - before)
    bursts, run = [], 0
    for lost in outcome:
        if lost:
            run += 1
        elif run:
            bursts.append(run)
            run = 0
    mean_burst = sum(bursts) / len(bursts)
    assert abs(mean_burst - model.mean_burst_packets) < 0.3  # 4 packets
    assert abs(sum(outcome) / len(outcome) - model.mean_loss) < 0.01  # 7.4 %


def test_jitter_never_reorders_and_stays_in_range() -> None:
    spec = DirectionSpec(delay_s=0.01, jitter_s=0.005, seed=4)
    core = LinkDirection("up", spec, None)
    for i in range(2000):
        core.receive(i * 1e-4, packet(64, i))
    departures = drain(core)
    tags = [int.from_bytes(p[:4], "big") for _, p in departures]
    assert tags == sorted(tags)
    delays = [t - tag * 1e-4 for (t, _), tag in zip(departures, tags, strict=True)]
    assert min(delays) >= 0.005 - 1e-12
    assert max(delays) > 0.0145  # the spread is used, not collapsed onto the mean
    assert len(set(round(d, 6) for d in delays)) > 100


def test_lateness_is_recorded_against_the_schedule() -> None:
    core = LinkDirection("up", DirectionSpec(delay_s=0.001), None)
    core.receive(0.0, packet(64))
    core.receive(0.0, packet(64))
    assert len(core.pop_due(0.001 + 250e-6)) == 2
    st = core.stats
    assert st.lateness_samples == 2
    assert math.isclose(st.lateness_max_s, 250e-6)
    assert math.isclose(st.lateness_quantile_s(0.99), 260e-6)  # the bin's upper edge
    assert st.packets_out == 2 and st.bytes_out == 128


def test_set_spec_reseeds_and_keeps_packets_in_flight() -> None:
    core = LinkDirection("up", DirectionSpec(delay_s=0.1, loss=0.2, seed=1), None)
    core.receive(0.0, packet(64))
    core.set_spec(DirectionSpec(delay_s=0.001, loss=0.2, seed=1), None)
    assert core._loss._random() == loss_rng("up", 1).random()  # restarted from the seed
    core.receive(0.0, packet(64))
    # the packet already in flight keeps its 100 ms; the new one cannot overtake it
    assert core.next_deadline() == 0.1


# --- scheduled events (netem.events) ----------------------------------------------------


def test_outage_drops_offered_and_arriving_packets_then_recovers() -> None:
    from netem.events import Outage

    core = LinkDirection("up", DirectionSpec(delay_s=0.1), None)
    outage = Outage(at_s=1.0, duration_s=0.5).resolve(0.0)
    assert core.add_event(outage)
    core.receive(0.95, packet(100, 1))  # on the wire when the link goes down: due at 1.05
    core.receive(1.2, packet(100, 2))  # offered during the outage
    core.receive(1.45, packet(100, 3))  # offered before the end, due at 1.55: dropped at offer
    core.receive(1.5, packet(100, 4))  # the link is back
    out = drain(core)
    assert [int.from_bytes(p[:4], "big") for _, p in out] == [4]
    assert [round(t, 9) for t, _ in out] == [1.6]
    assert core.stats.dropped_outage == 3
    assert outage.dropped_packets == {"up": 3}
    assert core.stats.loss_trials == 1


def test_outage_keeps_the_loss_draws_aligned_with_offered_packets() -> None:
    from netem.events import Outage

    spec = DirectionSpec(loss=0.3, seed=5)
    plain = LinkDirection("up", spec, None)
    cut = LinkDirection("up", spec, None)
    cut.add_event(Outage(at_s=10.0, duration_s=10.0).resolve(0.0))
    fates = {}
    for name, core in (("plain", plain), ("cut", cut)):
        for i in range(200):
            core.receive(float(i), packet(100, i))
        fates[name] = {int.from_bytes(p[:4], "big") for _, p in drain(core)}
    # outside the outage (t < 10 and t >= 20) the same packets survive in both
    outside = {i for i in range(200) if not 10 <= i < 20}
    assert fates["plain"] & outside == fates["cut"]


def test_rate_event_changes_serialisation_then_reverts() -> None:
    from netem.events import RateChange

    core = LinkDirection("up", DirectionSpec(rate_bps=8e6), 10**6)
    core.add_event(RateChange(at_s=1.0, duration_s=1.0, rate_bps=0.8e6).resolve(0.0))
    core.receive(0.5, packet(1000))  # 1 ms at 8 Mbit/s
    core.receive(1.5, packet(1000))  # 10 ms at 0.8 Mbit/s
    core.receive(2.5, packet(1000))  # back to 1 ms
    assert [round(t, 9) for t, _ in drain(core)] == [0.501, 1.51, 2.501]


def test_rate_event_on_an_unlimited_direction_adds_a_bottleneck() -> None:
    from netem.events import RateChange

    core = LinkDirection("down", DirectionSpec(), None)
    core.add_event(RateChange(rate_bps=8e6).resolve(0.0))
    core.receive(0.0, packet(1000))
    core.receive(0.0, packet(1000))
    assert [round(t, 9) for t, _ in drain(core)] == [0.001, 0.002]


# --- traces -----------------------------------------------------------------------------


def trace_file(tmp_path: Path, name: str, text: str, kind: str) -> TraceFile:
    path = tmp_path / name
    path.write_text(text)
    return open_trace(f"trace:{path}", kind)


def test_a_capacity_trace_paces_the_queue_and_keeps_its_drop_tail(tmp_path: Path) -> None:
    rate = trace_file(tmp_path, "c", "1\n", "capacity")  # 1500 B each ms from the origin
    core = LinkDirection("up", DirectionSpec(delay_s=0.01, rate_trace=rate), 3000, now=5.0)
    for i in range(4):
        core.receive(5.0, packet(1500, i))
    assert core.stats.dropped_queue == 2  # 3000 bytes of queue: two packets
    core.receive(5.0015, packet(1500, 9))  # the first has left at 5.001
    assert [round(t, 9) for t, _ in drain(core)] == [5.011, 5.012, 5.013]


def test_set_spec_restarts_the_trace_at_its_offset_after_the_queued_packets(tmp_path: Path) -> None:
    rate = trace_file(tmp_path, "c", "10\n20\n", "capacity")  # 10, 20 | 30, 40 ms
    core = LinkDirection("up", DirectionSpec(rate_bps=12e6), 10**6)
    core.receive(0.0, packet(1500))  # leaves at 1 ms
    core.set_spec(DirectionSpec(rate_trace=rate, trace_offset_s=0.015), 10**6, now=0.0005)
    assert core.trace_info() == {
        "origin_s": 0.0005,
        "offset_s": 0.015,
        "rate_trace": rate.to_dict(),
        "delay_trace": None,
        "delay_interp": "step",
    }
    core.receive(0.0006, packet(1500))  # position 15.1 ms: the next stamp is 20, at 5.5 ms
    assert [round(t, 9) for t, _ in drain(core)] == [0.001, 0.0055]


def test_a_delay_trace_sets_each_packets_delay_at_its_departure(tmp_path: Path) -> None:
    delay = trace_file(tmp_path, "d", "0 50\n10 20\n20 30\n", "delay")
    core = LinkDirection("up", DirectionSpec(delay_trace=delay), None, now=1.0)
    core.receive(1.005, packet(100))  # 50 ms
    core.receive(1.025, packet(100))  # 30 ms
    core.receive(1.031, packet(100))  # wrapped to position 1 ms: 50 ms
    assert [round(t, 9) for t, _ in drain(core)] == [1.055, 1.055, 1.081]


def test_a_falling_delay_never_overtakes_a_packet_in_flight(tmp_path: Path) -> None:
    delay = trace_file(tmp_path, "d", "0 50\n10 5\n", "delay")
    core = LinkDirection("up", DirectionSpec(delay_trace=delay), None)
    for i, t in enumerate((0.009, 0.011, 0.055, 0.071)):
        core.receive(t, packet(100, i))
    departures = drain(core)
    # 0.011 + 5 ms would pass the packet sent at 0.009 (due 0.059): it follows it instead
    assert [round(t, 9) for t, _ in departures] == [0.059, 0.059, 0.060, 0.076]
    assert [int.from_bytes(p[:4], "big") for _, p in departures] == [0, 1, 2, 3]


def test_linear_delay_interpolates_between_points(tmp_path: Path) -> None:
    delay = trace_file(tmp_path, "d", "0 10\n10 20\n", "delay")
    spec = DirectionSpec(delay_trace=delay, delay_interp="linear")
    core = LinkDirection("up", spec, None)
    core.receive(0.005, packet(100))  # 15 ms
    assert [round(t, 9) for t, _ in drain(core)] == [0.020]


def test_a_rate_event_on_a_capacity_trace_is_refused(tmp_path: Path) -> None:
    rate = trace_file(tmp_path, "c", "1\n", "capacity")
    core = LinkDirection("up", DirectionSpec(rate_trace=rate), 10**6)
    with pytest.raises(SpecError, match=r"up\.rate: a capacity trace"):
        core.add_event(RateChange(rate_bps=1e6).resolve(0.0))
    core.add_event(Outage(duration_s=1.0).resolve(0.0))  # outages are fine
    fixed = LinkDirection("up", DirectionSpec(rate_bps=1e6), 10**6)
    fixed.add_event(RateChange(rate_bps=2e6, at_s=5.0, duration_s=2.0).resolve(0.0))
    with pytest.raises(SpecError, match="rate event"):
        fixed.set_spec(DirectionSpec(rate_trace=rate), 10**6, now=1.0)
    fixed.set_spec(DirectionSpec(rate_trace=rate), 10**6, now=8.0)  # refused only while due
