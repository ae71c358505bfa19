"""Validity: the run's own checks and the disturbance judged by its impact, on fixture
numbers."""

from __future__ import annotations

import numpy as np
import pytest

from harness.validity.rules import (
    DISTURBANCE_FLOOR_S,
    DISTURBANCE_MAX_EFFECT_FRACTION,
    DISTURBANCE_MAX_FRACTION,
    CriticalPath,
    Disturbance,
    PacketTimes,
    backlog_spans,
    combine,
    critical_path,
    disturbance_columns,
    disturbance_limit_s,
    endpoint_steal_s,
    flight_lateness_s,
    flight_wait_s,
    foreign_wait_s,
    judge_disturbance,
    loss_out_of_range,
    merged,
    queue_wait_s,
    run_validity,
    uncovered,
)


def test_run_validity_names_every_reason_of_the_run_itself() -> None:
    ok = dict(error=None, sha256_ok=True, configured_rtt_s=0.2, measured_rtt_s=0.2004, loss={})
    assert run_validity(**ok) == (True, None)
    assert run_validity(**{**ok, "measured_rtt_s": 0.2041})[1] == "link: RTT 204.1 ms vs 200.0 ms"
    assert run_validity(**{**ok, "measured_rtt_s": 0.2039})[0]  # within max(2 ms, 2 %)
    bad = run_validity(**{**ok, "error": "boom", "loss": {"down": (0.14, 20, 1000)}})
    assert bad == (False, "error: boom; link: down loss 20/1000 vs 14 % configured")


def test_loss_out_of_range_at_four_sigma() -> None:
    # 1000 trials at 14 %: sigma 10.97, so 140 +- 44.9 (+1 packet) is in range
    assert not loss_out_of_range(0.14, 140 + 44, 1000)
    assert loss_out_of_range(0.14, 140 - 46, 1000)
    assert not loss_out_of_range(0.14, 5, 0)


def test_flights_count_the_latest_packet_of_each_flight() -> None:
    # three flights 100 ms apart; inside a flight packets are late in parallel
    t = [1.0, 1.0001, 1.0002, 1.1, 1.1001, 1.2]
    late = [0.001, 0.003, -0.0005, 0.0, 0.0002, 0.004]
    assert flight_lateness_s(t, late, gap_s=0.05) == pytest.approx(0.003 + 0.0002 + 0.004)
    # a gap threshold above 100 ms makes it one flight: the largest lateness only
    assert flight_lateness_s(t, late, gap_s=0.2) == pytest.approx(0.004)
    assert flight_lateness_s([], [], gap_s=0.05) == 0.0
    # behind a queue a late packet is absorbed, unless it ends its flight
    queued = [False, True, True, False, True, True]
    assert flight_lateness_s(t, late, gap_s=0.05, queued=queued) == pytest.approx(
        0.001 + 0.0002 + 0.004
    )


def _packets(departures: list[float], lateness: list[float], sent: list[float]) -> PacketTimes:
    return PacketTimes(
        sent_s=np.asarray(sent), departure_s=np.asarray(departures), lateness_s=np.asarray(lateness)
    )


def test_critical_path_counts_packets_inside_the_request_only() -> None:
    up = _packets([0.5, 1.0, 1.0001, 1.2], [0.010, 0.001, 0.002, 0.0003], [0.45, 0.95, 0.96, 1.15])
    down = _packets([1.1, 2.5], [0.0005, 0.5], [1.05, 2.45])
    path = critical_path({"up": up, "down": down}, start_s=0.9, end_s=1.3, rtt_s=0.1)
    assert path.lateness_s == pytest.approx(0.002 + 0.0003 + 0.0005)
    assert path.flights == {"up": 2, "down": 1}
    assert path.starts_s == {"up": [1.0, 1.2], "down": [1.1]}
    # each flight's send span: its first and last packet into the emulator
    assert path.sends_s == {"up": [(0.95, 0.96), (1.15, 1.15)], "down": [(1.05, 1.05)]}
    spans = path.endpoint_spans(work_s=0.02)
    # the client sends up and receives down; the server the other way round
    assert spans["client"] == [(1.1, 1.12), (0.95, 0.96), (1.15, 1.15)]
    assert spans["server"] == [(1.0, 1.02), (1.2, 1.22), (1.05, 1.05)]


def test_the_wait_counted_is_the_one_on_the_critical_path() -> None:
    # cumulative main-thread wait sampled every 20 ms: 1 ms per interval, 5 ms in the third
    times = [0.0, 0.02, 0.04, 0.06, 0.08]
    waits = list(zip(times, [0.0, 0.001, 0.002, 0.007, 0.008], strict=True))
    # working on a flight from 45 to 65 ms: two intervals
    assert flight_wait_s([(0.045, 0.065)], waits) == pytest.approx(0.005 + 0.001)
    assert flight_wait_s([(0.045, 0.055)], waits) == pytest.approx(0.005)
    # spans that share an interval count it once; outside the samples, nothing
    assert flight_wait_s([(0.01, 0.012), (0.015, 0.016)], waits) == pytest.approx(0.001)
    assert flight_wait_s([(0.09, 0.1), (-1.0, -0.9)], waits) == 0.0
    assert flight_wait_s([(0.05, 0.06)], waits[:1]) == 0.0
    assert flight_wait_s([], waits) == 0.0


def _bulk(count: int, every_s: float, service_s: float, delay_s: float) -> PacketTimes:
    """Packets entering every ``every_s`` into a bottleneck that serves one per
    ``service_s`` behind a ``delay_s`` propagation delay, released on time."""
    sent = np.arange(count) * every_s
    due = np.empty(count)
    free = 0.0
    for k, t in enumerate(sent):
        free = max(free, t) + service_s
        due[k] = free + delay_s
    return PacketTimes(sent_s=sent, departure_s=due, lateness_s=np.zeros(count))


def test_a_queue_at_the_bottleneck_is_found_from_the_sojourns() -> None:
    # entering every 1 ms, served every 2 ms: packet k waits k ms behind the others
    bulk = _bulk(11, every_s=0.001, service_s=0.002, delay_s=0.05)
    spans = backlog_spans(bulk.sent_s, queue_wait_s(bulk.sent_s, bulk.departure_s, jitter_s=0.0))
    assert merged(spans) == [(pytest.approx(0.001), pytest.approx(0.020))]
    # paced below the bottleneck's rate: no packet waits, no queue
    paced = _bulk(11, every_s=0.003, service_s=0.002, delay_s=0.05)
    assert backlog_spans(paced.sent_s, queue_wait_s(paced.sent_s, paced.departure_s)) == []
    # sojourns that differ by less than twice the jitter are the jitter's, not a queue
    jittered = paced.departure_s + np.array([0.004, -0.004] * 5 + [0.0])
    assert backlog_spans(paced.sent_s, queue_wait_s(paced.sent_s, jittered, jitter_s=0.004)) == []
    assert backlog_spans(paced.sent_s, queue_wait_s(paced.sent_s, jittered, jitter_s=0.0)) != []


def test_uncovered_parts_of_spans() -> None:
    cover = merged([(0.6, 1.0), (0.0, 0.4), (0.3, 0.45)])
    assert cover == [(0.0, 0.45), (0.6, 1.0)]
    assert uncovered([(0.0, 1.0)], cover) == [(0.45, 0.6)]
    assert uncovered([(0.2, 0.5), (1.1, 1.2)], cover) == [(0.45, 0.5), (1.1, 1.2)]
    assert uncovered([(0.5, 0.5), (0.7, 0.7)], cover) == [(0.5, 0.5)]  # one-packet flights
    assert uncovered([(0.1, 0.2)], []) == [(0.1, 0.2)]


def test_a_stall_behind_a_queue_counts_only_where_it_outlasted_the_queue() -> None:
    # the client sends one flight for a second; the bottleneck is queued but for 0.41-0.59 s
    path = CriticalPath(
        lateness_s=0.0,
        starts_s={"up": [0.05]},
        sends_s={"up": [(0.0, 1.0)]},
        backlog_s=[(0.0, 0.41), (0.59, 1.0)],
    )
    spans = path.endpoint_spans(work_s=0.02)
    assert spans == {"client": [(0.41, 0.59)], "server": []}
    assert path.backlog_fraction(0.0, 1.0) == pytest.approx(0.82)
    assert path.backlog_fraction(0.4, 0.6) == pytest.approx(0.1)
    assert path.backlog_fraction(1.0, 1.0) == 0.0
    # 1 ms of wait in each 20 ms interval: only the ten intervals the gap overlaps count
    times = [i * 0.02 for i in range(51)]
    waits = list(zip(times, [i * 0.001 for i in range(51)], strict=True))
    assert flight_wait_s(spans["client"], waits) == pytest.approx(0.010)
    assert flight_wait_s(path.sends_s["up"], waits) == pytest.approx(0.050)


def test_critical_path_finds_the_queue_only_with_the_jitter_known() -> None:
    bulk = _bulk(11, every_s=0.001, service_s=0.002, delay_s=0.05)
    directions = {"up": bulk}
    unknown = critical_path(directions, start_s=0.0, end_s=1.0, rtt_s=0.1)
    assert unknown.backlog_s == []
    known = critical_path(directions, start_s=0.0, end_s=1.0, rtt_s=0.1, jitter_s={"up": 0.0})
    assert (queue_wait_s(bulk.sent_s, bulk.departure_s) > 0).tolist() == [False] + [True] * 10
    assert known.backlog_s == [(pytest.approx(0.001), pytest.approx(0.020))]
    assert known.endpoint_spans()["client"] == [(pytest.approx(0.0), pytest.approx(0.001))]


def test_steal_from_the_endpoints() -> None:
    # 0.3 + 0.1 of a core for 2 s at 20 % steal: 0.8 s of CPU stretched by 0.2 / 0.8
    assert endpoint_steal_s([0.3, 0.1], 2.0, 0.2) == pytest.approx(0.2)
    assert endpoint_steal_s([0.3, None], 2.0, 0.0) == 0.0
    assert endpoint_steal_s([0.3], 2.0, None) is None


def test_only_the_foreign_share_of_the_wait_counts() -> None:
    assert foreign_wait_s([0.010, 0.030], 0.25) == pytest.approx(0.010)
    assert foreign_wait_s([0.010], None) == pytest.approx(0.010)  # unmeasured: all of it
    assert foreign_wait_s([0.010], float("nan")) == pytest.approx(0.010)
    assert foreign_wait_s([0.010], 1.7) == pytest.approx(0.010)
    assert foreign_wait_s([], 0.5) is None


def test_limit_is_a_fraction_of_the_time_and_of_the_arm_effect() -> None:
    assert disturbance_limit_s(1.5) == pytest.approx(DISTURBANCE_MAX_FRACTION * 1.5)
    assert disturbance_limit_s(1.5, effect_s=0.05) == pytest.approx(
        DISTURBANCE_MAX_EFFECT_FRACTION * 0.05
    )
    assert disturbance_limit_s(1.5, effect_s=10.0) == pytest.approx(0.015)
    assert disturbance_limit_s(0.01) == DISTURBANCE_FLOOR_S
    assert disturbance_limit_s(1.5, effect_s=0.0) == pytest.approx(0.015)  # no effect


def test_judge_disturbance_by_impact() -> None:
    # the held-out run: 28.17 s, a few ms of lateness: its answer stands
    small = Disturbance(lateness_s=0.004, endpoint_wait_s=0.002, endpoint_steal_s=0.0)
    assert judge_disturbance(small, 28.17) == (True, None, pytest.approx(0.2817))
    # the same disturbance on a 240 ms request is 2.5 % of it
    ok, reason, limit = judge_disturbance(small, 0.240)
    assert not ok and limit == pytest.approx(0.0024)
    assert reason == (
        "disturbance: 6.00 ms (emulator lateness 4.00, endpoint run-queue wait 2.00) could "
        "have moved the 240.0 ms measured by more than 2.40 ms"
    )
    # unknown parts are not counted; nothing measured is nothing to judge
    unknown = Disturbance(lateness_s=None, endpoint_wait_s=None, endpoint_steal_s=None)
    assert unknown.total_s is None and judge_disturbance(unknown, 0.24)[0]
    assert judge_disturbance(small, None) == (True, None, None)


def test_columns_and_combined_verdicts() -> None:
    d = Disturbance(lateness_s=0.001, endpoint_wait_s=None, endpoint_steal_s=0.001)
    cols = disturbance_columns(d, 0.2, 0.5)
    assert cols["disturbance_s"] == pytest.approx(0.002)
    assert cols["disturbance_fraction"] == pytest.approx(0.01)
    assert cols["disturbance_wait_s"] is None and cols["effect_scale_s"] == 0.5
    assert disturbance_columns(d, None, None)["disturbance_fraction"] is None
    assert combine((True, None), (True, None)) == (True, None)
    assert combine((False, "a"), (False, "b")) == (False, "a; b")
    assert combine((True, None), (False, "b")) == (False, "b")


def test_the_runs_own_wait_is_what_the_foreign_share_leaves() -> None:
    from harness.validity.rules import foreign_wait_s, own_wait_s

    waits = [0.004, 0.006]
    assert own_wait_s(waits, 0.0) == pytest.approx(0.010)  # a quiet host: all the run's own
    assert foreign_wait_s(waits, 0.0) == pytest.approx(0.0)  # ... and no disturbance
    assert own_wait_s(waits, 0.25) == pytest.approx(0.0075)
    assert own_wait_s(waits, 0.25) + foreign_wait_s(waits, 0.25) == pytest.approx(0.010)
    assert own_wait_s([], 0.5) is None and own_wait_s(waits, None) is None
