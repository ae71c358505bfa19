"""Backend-neutral link statistics: subtraction, quantiles of differences, JSON round trip."""

from __future__ import annotations

import math

import pytest

from netem.stats import (
    CLOCK_TICKS_PER_S,
    LATENESS_BINS,
    CpuStats,
    DirectionStats,
    LinkStats,
    histogram_quantile_s,
    host_cpu_s,
    lateness_bin,
    lateness_bin_upper_s,
)
from tbcore.errors import SpecError


def direction(**kw: object) -> DirectionStats:
    return DirectionStats(lateness_hist=[0] * LATENESS_BINS, **kw)  # type: ignore[arg-type]


def test_bins_cover_the_range_and_edges_bound_their_values() -> None:
    for value in (0.0, 5e-6, 10e-6, 99e-6, 1e-3, 9.99e-3, 10e-3, 0.5, 0.999, 1.0, 30.0):
        index = lateness_bin(value)
        assert 0 <= index < LATENESS_BINS
        assert lateness_bin_upper_s(index) >= min(value, 1.0)
        if index > 0 and value < 1.0:
            assert lateness_bin_upper_s(index - 1) <= value + 1e-12
    assert lateness_bin(-1.0) == 0


def test_quantile_of_a_difference() -> None:
    before = direction(packets_in=10, max_backlog_bytes=5)
    after = direction(packets_in=110, max_backlog_bytes=7)
    for _ in range(10):
        before.lateness_hist[lateness_bin(5e-3)] += 1
        after.lateness_hist[lateness_bin(5e-3)] += 1
    for i in range(100):
        after.lateness_hist[lateness_bin(i * 1e-6)] += 1
    delta = after - before
    assert delta.packets_in == 100
    assert delta.max_backlog_bytes == 7  # maxima are kept, not subtracted
    assert math.isclose(delta.lateness_quantile_s(0.99), 100e-6)  # the 5 ms ones are gone
    assert math.isclose(after.lateness_quantile_s(0.99), 5.01e-3)


def test_quantile_edge_cases() -> None:
    assert histogram_quantile_s([0, 0], 0.5) is None
    with pytest.raises(SpecError, match="quantile"):
        histogram_quantile_s([1], 0.0)


def test_realised_loss_counts_only_packets_past_the_queue() -> None:
    d = direction(packets_in=1000, dropped_queue=200, dropped_loss=80)
    assert d.loss_trials == 800 and d.realised_loss == 0.1
    assert direction().realised_loss is None


def test_link_stats_json_round_trip_is_sparse_and_exact() -> None:
    up = direction(packets_in=5, bytes_in=500, lateness_sum_s=1e-4)
    up.lateness_hist[3] = 5
    stats = LinkStats(
        backend="userspace",
        time_s=12.5,
        up=up,
        cpu=CpuStats(user_s=1.0, system_s=2.0, host_total_s=10.0, host_steal_s=1.0),
        measured=("counters", "lateness"),
        processes=2,
    )
    data = stats.to_dict()
    assert data["up"]["lateness_hist"] == {"3": 5}
    assert data["up"]["lateness_p99_s"] == lateness_bin_upper_s(3)
    back = LinkStats.from_dict(data)
    assert back.up == up and back.cpu == stats.cpu and back.processes == 2
    delta = back - LinkStats(backend="userspace", time_s=2.5)
    assert delta.time_s == 10.0 and delta.emulator_cpu_fraction == 0.3
    assert delta.cpu.steal_fraction == 0.1


def test_from_dict_refuses_bad_records() -> None:
    with pytest.raises(SpecError, match="stats"):
        LinkStats.from_dict({"time_s": 1})
    with pytest.raises(SpecError, match="lateness_hist"):
        DirectionStats.from_dict({"lateness_hist": {str(LATENESS_BINS): 1}})
    with pytest.raises(SpecError, match="direction"):
        LinkStats(backend="x").direction("left")


def test_host_cpu_from_proc_stat_line() -> None:
    busy, steal, total = host_cpu_s("cpu  100 0 50 800 10 0 5 35 0 0")
    ticks = CLOCK_TICKS_PER_S
    assert (busy, steal, total) == (155 / ticks, 35 / ticks, 1000 / ticks)
    with pytest.raises(SpecError):
        host_cpu_s("intr 1 2 3")
    busy, steal, total = host_cpu_s()
    assert total > 0 and 0 <= busy <= total
