"""The comparison's plan and arithmetic (harness/bench/peers.py): cases, the alternated
schedule, the IP rate behind a goodput, the trace fit, the table and its ratios."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.bench.peers import (
    CHAPTER_RATE_BPS,
    GIGABIT_BPS,
    MIN_QUEUE_BYTES,
    TABLE_COLUMNS,
    PeerCase,
    PeerConfig,
    PeerRun,
    delivered_ip_bps,
    fit_trace,
    markdown,
    opportunities_per_ms,
    parse_compare,
    plan_cases,
    rows_from_dicts,
    schedule,
    table,
    trace_case,
    window_counts,
)
from tbcore.errors import SpecError


def test_compare_names_peers_once_and_puts_ours_first() -> None:
    assert parse_compare("mahimahi") == ("ours", "ours-gro", "mahimahi")
    assert parse_compare("mahimahi, netem", variants=False) == ("ours", "mahimahi", "netem")
    for bad, why in (
        ("ns-3", "the peers are"),
        ("mahimahi,mahimahi", "each peer once"),
        ("", "each peer once"),
    ):
        with pytest.raises(SpecError, match=why) as err:
            parse_compare(bad)
        assert err.value.field == "compare" and "\n" not in str(err.value)


def test_a_case_sizes_its_queue_by_the_bdp_and_offers_udp_above_the_rate() -> None:
    case = PeerCase("tcp", CHAPTER_RATE_BPS)
    assert case.queue_bytes == int(333e6 * 0.2 / 8)  # 8.325 MB
    assert case.ours_link() == "delay=100ms,queue=8325000b,rate=333mbit"
    assert PeerCase("udp", GIGABIT_BPS).offered_bps == pytest.approx(1.1e9)
    assert PeerCase("rtt", 1e6).queue_bytes == MIN_QUEUE_BYTES
    assert case.name == "tcp 333 Mbit/s" and PeerCase("udp", 1e9).name == "udp 1 Gbit/s"
    with pytest.raises(SpecError, match="positive rate"):
        PeerCase("tcp")
    with pytest.raises(SpecError, match="names its trace"):
        PeerCase("trace")
    with pytest.raises(SpecError, match="one of"):
        PeerCase("quic", 1e6)


def test_the_trace_case_takes_its_mean_and_its_peak_window() -> None:
    # 100 ms at 2 opportunities a ms (24 Mbit/s), 100 ms at none: mean 12, peak 24 Mbit/s
    stamps = [t for t in range(1, 101) for _ in range(2)] + [200]
    case = trace_case("/x/t.up", stamps)
    assert case.trace_mean_bps == pytest.approx(201 * 1500 * 8 / 0.2)
    assert case.trace_peak_bps == pytest.approx(200 * 1500 * 8 / 0.1)
    assert case.offered_bps == pytest.approx(1.1 * case.trace_peak_bps)
    assert case.ours_link().endswith("rate=trace:/x/t.up") and case.name == "trace t.up"


def test_the_schedule_alternates_emulators_case_by_case_round_by_round() -> None:
    config = PeerConfig(rounds=2, rates_bps=(333e6,))
    cases = plan_cases(config)
    assert [c.kind for c in cases] == ["rtt", "tcp", "udp"]
    slots = schedule(cases, ("ours", "mahimahi"), config.rounds)
    assert [(s.round, s.case.kind, s.emulator) for s in slots[:4]] == [
        (1, "rtt", "ours"),
        (1, "rtt", "mahimahi"),
        (1, "tcp", "ours"),
        (1, "tcp", "mahimahi"),
    ]
    assert len(slots) == 12 and slots[6].round == 2
    with pytest.raises(SpecError, match="comes first"):
        schedule(cases, ("mahimahi", "ours"), 1)


def test_netem_replays_no_capacity_trace_so_it_has_no_trace_slot() -> None:
    trace = trace_case("/x/t", [1, 2])
    slots = schedule([PeerCase("rtt", 1e6), trace], ("ours", "netem"), 1)
    assert [(s.case.kind, s.emulator) for s in slots] == [
        ("rtt", "ours"),
        ("rtt", "netem"),
        ("trace", "ours"),
    ]


def test_config_refuses_what_cannot_be_measured() -> None:
    assert PeerConfig.quick().rounds == 1
    for kwargs, name in (
        ({"rounds": 0}, "rounds"),
        ({"rates_bps": ()}, "rates"),
        ({"duration_s": math.nan}, "duration_s"),
        ({"probes": 3}, "probes"),
    ):
        with pytest.raises(SpecError) as err:
            PeerConfig(**kwargs)
        assert err.value.field == name


def test_delivered_rate_counts_ip_bytes() -> None:
    assert delivered_ip_bps(1448e6, "tcp") == pytest.approx(1500e6)
    assert delivered_ip_bps(1472e6, "udp") == pytest.approx(1500e6)


def test_opportunities_per_ms_follow_mm_links_period() -> None:
    per_ms = opportunities_per_ms([1, 1, 3, 4])
    assert per_ms.tolist() == [2, 0, 1, 1]
    assert window_counts(per_ms, 1, 2, 3).tolist() == [1, 3, 1]  # wraps over the period
    with pytest.raises(SpecError, match="after 0"):
        opportunities_per_ms([0])


def test_the_fit_finds_the_trace_offset_of_a_perfect_replay() -> None:
    rng = np.random.default_rng(1)
    per_ms = rng.integers(0, 4, size=2000)
    stamps = [t + 1 for t, n in enumerate(per_ms) for _ in range(n)]
    offset_ms = 737
    # one arrival per opportunity from offset 737 on, 3 periods' worth, 5.2 ms of path delay
    arrivals = [
        0.0052 + (k * 2000 + t - offset_ms) / 1000
        for k in range(3)
        for t, n in enumerate(per_ms)
        for _ in range(n)
        if k * 2000 + t >= offset_ms
    ]
    fit = fit_trace(arrivals, stamps)
    assert fit.offset_ms == offset_ms
    assert fit.delivered_ratio == pytest.approx(1.0)
    assert fit.err_p50 == 0.0 and fit.err_p99 == 0.0
    # a replay that delivers every other opportunity misses half of each window
    half = fit_trace(arrivals[::2], stamps)
    assert half.delivered_ratio == pytest.approx(0.5, abs=0.02)
    assert half.err_p50 == pytest.approx(0.5, abs=0.1)


def test_the_fit_refuses_too_few_arrivals() -> None:
    with pytest.raises(SpecError, match="fewer than two"):
        fit_trace([1.0], [1])
    with pytest.raises(SpecError, match="two windows"):
        fit_trace([1.0, 1.05], [1])


def _run(emulator: str, delivered: float, cpu: float | None, round_: int = 1) -> PeerRun:
    return PeerRun(
        round=round_,
        case="tcp 333 Mbit/s",
        kind="tcp",
        emulator=emulator,
        rate_bps=333e6,
        delivered_bps=delivered,
        cpu_cores=cpu,
    )


def test_the_table_takes_medians_and_divides_by_ours() -> None:
    runs = [
        _run("ours", 330e6, 0.20, 1),
        _run("mahimahi", 250e6, 0.30, 1),
        _run("ours", 320e6, 0.22, 2),
        _run("mahimahi", 300e6, 0.36, 2),
        _run("ours", 332e6, 0.24, 3),
        PeerRun(3, "tcp 333 Mbit/s", "tcp", "mahimahi", 333e6, error="OSError: it died"),
    ]
    ours, mm = table(runs)
    assert (ours.emulator, ours.runs, mm.runs) == ("ours", 3, 2)
    assert ours.values["delivered_bps"] == 330e6 and mm.values["delivered_bps"] == 275e6
    assert mm.values["delivered_ratio"] == pytest.approx(275 / 330)
    # CPU per 100 Mbit/s delivered: the slower emulator does not look cheaper
    ours_per = np.median([0.20 / 3.3, 0.22 / 3.2, 0.24 / 3.32])
    assert ours.values["cpu_cores_per_100mbit"] == pytest.approx(ours_per)
    mm_per = np.median([0.30 / 2.5, 0.36 / 3.0])
    assert mm.values["cpu_ratio"] == pytest.approx(mm_per / ours_per)
    assert mm.failed == ["OSError: it died"]
    text = markdown([ours, mm], {"host": "test"})
    assert text.splitlines()[0] == "| " + " | ".join(TABLE_COLUMNS) + " |"
    assert "- host: test" in text and "tcp 333 Mbit/s, mahimahi: OSError: it died" in text


def test_the_issues_column_names_are_in_the_table() -> None:
    for name in ("emulator", "rate_bps", "delivered_bps", "cpu_cores"):
        assert name in TABLE_COLUMNS
    assert {"rtt_err_p50_s", "rtt_err_p99_s"} <= set(TABLE_COLUMNS)


def test_a_kernel_emulator_has_no_cpu_ratio() -> None:
    rows = table([_run("ours", 330e6, 0.2), _run("netem", 330e6, None)])
    assert rows[1].values["cpu_ratio"] is None and rows[1].values["delivered_ratio"] == 1.0


def test_runs_come_back_from_json_and_unknown_fields_are_refused() -> None:
    run = _run("ours", 1e6, 0.1)
    assert rows_from_dicts([run.to_dict()]) == [run]
    with pytest.raises(SpecError, match="unknown field"):
        rows_from_dicts([{**run.to_dict(), "speed": 1}])
