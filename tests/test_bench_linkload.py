"""The loaded rows of ``testbed bench link``: CPU per packet and per Mbit/s and the iperf3
command lines (the runs themselves: tests/test_bench_link.py)."""

from __future__ import annotations

import pytest

from harness.bench.linkload import GRO_CASES, LOAD_CASES, LoadCase, cpu_columns, iperf_argv
from netem.stats import CpuStats, DirectionStats, LinkStats


def test_cpu_per_packet_and_per_mbit() -> None:
    delta = LinkStats(
        backend="userspace",
        time_s=2.0,
        up=DirectionStats(packets_out=30_000, bytes_out=45_000_000),
        down=DirectionStats(packets_out=10_000, bytes_out=520_000),
        cpu=CpuStats(user_s=0.1, system_s=0.3),
    )
    cols = cpu_columns(delta)
    # 0.4 CPU seconds over 40,000 packets; 0.2 cores over 180 Mbit/s delivered up
    assert cols["emulator_cpu_us_per_packet"] == pytest.approx(10.0)
    assert cols["emulator_cpu_cores_per_mbit_s"] == pytest.approx(0.2 / 180)


def test_cpu_columns_without_packets() -> None:
    cols = cpu_columns(LinkStats(backend="userspace", time_s=1.0))
    assert cols == {"emulator_cpu_us_per_packet": None, "emulator_cpu_cores_per_mbit_s": None}


def test_the_cases_are_the_issues_rates_at_200_ms() -> None:
    assert [(c.udp, c.rate_bps) for c in LOAD_CASES] == [(False, 333e6), (True, 1e9), (False, 1e9)]
    assert all(c.link.startswith("rtt=200ms,") for c in LOAD_CASES)


def test_udp_is_offered_at_110_percent() -> None:
    argv = iperf_argv("198.18.2.2", LoadCase("u", True, 1e9), 10, 4)
    assert argv[argv.index("-b") + 1] == "1100000000"
    assert "-u" in argv and "-C" not in argv
    tcp = iperf_argv("198.18.2.2", LoadCase("t", False, 333e6), 10, 4)
    assert tcp[tcp.index("-C") + 1] == "cubic" and "-u" not in tcp


def test_the_gro_rows_are_issue_41s_path_to_2_5_gbit() -> None:
    assert [(c.udp, c.rate_bps, c.link.split(",")[0], c.label[-3:]) for c in GRO_CASES] == [
        (False, 2.5e9, "rtt=40ms", "GRO"),
        (False, 2.5e9, "rtt=200ms", "GRO"),
        (True, 2.5e9, "rtt=200ms", "GRO"),
    ]


def test_the_payload_limit_takes_each_packets_headers_off_the_rate() -> None:
    assert LoadCase("t", False, 1.5e9).payload_bps == pytest.approx(1.448e9)
    assert LoadCase("u", True, 1.428e9).payload_bps == pytest.approx(1.4e9)
