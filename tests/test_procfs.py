"""tbcore.procfs: one parser per /proc file, on fixture text."""

from __future__ import annotations

import os

import pytest

from tbcore.errors import SpecError
from tbcore.procfs import (
    CLOCK_TICKS_PER_S,
    PAGE_BYTES,
    cpu_pressure_s,
    host_cpu,
    parse_host_cpu,
    parse_pressure_total_s,
    parse_process_cpu_s,
    parse_rss_bytes,
    parse_schedstat,
    process_cpu_s,
    process_rss_bytes,
    thread_schedstats,
)


def test_host_cpu_counts_guest_time_once() -> None:
    hz = CLOCK_TICKS_PER_S
    # user 100 (of which guest 40), nice 0, system 50, idle 800, iowait 10, irq 0,
    # softirq 5, steal 35, guest 40, guest_nice 0
    cpu = parse_host_cpu("cpu  100 0 50 800 10 0 5 35 40 0")
    assert cpu.total_s == pytest.approx(1000 / hz)  # not 1040: guest is inside user
    assert cpu.steal_s == pytest.approx(35 / hz)
    assert cpu.busy_s == pytest.approx(155 / hz)
    assert cpu.steal_fraction == pytest.approx(0.035)
    delta = parse_host_cpu("cpu  200 0 50 800 10 0 5 135 40 0") - cpu
    assert delta.steal_fraction == pytest.approx(0.5)
    # an old kernel without steal and guest fields
    assert parse_host_cpu("cpu 1 2 3 4").total_s == pytest.approx(10 / hz)


def test_host_cpu_refuses_other_lines() -> None:
    for text in ("intr 1 2 3", "", "cpu 1 2 x 4", "cpu 1 2"):
        with pytest.raises(SpecError):
            parse_host_cpu(text)
    assert host_cpu().total_s > 0


def test_process_pressure_and_schedstat_fixtures() -> None:
    stat = "123 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 150 50 0 0 20 0 1 0"
    assert parse_process_cpu_s(stat) == pytest.approx(200 / CLOCK_TICKS_PER_S)
    with pytest.raises(SpecError):
        parse_process_cpu_s("123 (x) S 1")
    psi = "some avg10=0.91 avg60=18.21 avg300=10.44 total=48869822\nfull avg10=0 total=7\n"
    assert parse_pressure_total_s(psi) == pytest.approx(48.869822)
    assert parse_pressure_total_s("full total=7\n") is None
    assert parse_schedstat("2000000000 500000000 42\n") == (2.0, 0.5, 42)
    with pytest.raises(SpecError):
        parse_schedstat("1 2\n")
    assert parse_rss_bytes("5000 1200 300 10 0 900 0\n") == 1200 * PAGE_BYTES
    with pytest.raises(SpecError):
        parse_rss_bytes("5000\n")


def test_live_readers_of_this_process() -> None:
    assert process_cpu_s(os.getpid()) is not None
    stats = thread_schedstats(os.getpid())
    assert stats and os.getpid() in stats
    assert (process_rss_bytes(os.getpid()) or 0) > 0
    assert process_cpu_s(2**22 + 7) is None and thread_schedstats(2**22 + 7) is None
    assert process_rss_bytes(2**22 + 7) is None
    assert cpu_pressure_s("/nonexistent") is None
