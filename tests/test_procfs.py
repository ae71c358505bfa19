"""tbcore.procfs: one parser per /proc file, on fixture text."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tbcore import procfs
from tbcore.errors import SpecError
from tbcore.procfs import (
    CLOCK_TICKS_PER_S,
    child_pids,
    cpu_pressure_s,
    host_cpu,
    parse_children,
    parse_host_cpu,
    parse_process_cpu_s,
    parse_process_sched,
    process_cpu_s,
    process_rss_bytes,
    process_sched,
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
    # fields 19 nice, 40 rt_priority, 41 policy (proc(5))
    tail = " ".join(["0"] * 18)  # fields 22 to 39
    reniced = f"123 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 150 50 0 0 10 -10 1 0 {tail} 0 0"
    realtime = f"123 (a) S 1 2 3 4 5 6 7 8 9 10 150 50 0 0 -2 0 1 0 {tail} 1 2"
    assert parse_process_sched(reniced) == "other nice -10"
    assert parse_process_sched(realtime) == "rr 1"
    with pytest.raises(SpecError):
        parse_process_sched(stat)  # too short: no policy field


def test_live_readers_of_this_process() -> None:
    assert process_cpu_s(os.getpid()) is not None
    assert process_sched(os.getpid()) == f"other nice {os.getpriority(os.PRIO_PROCESS, 0)}"
    assert process_sched(2**22 + 7) is None
    stats = thread_schedstats(os.getpid())
    assert stats and os.getpid() in stats
    assert (process_rss_bytes(os.getpid()) or 0) > 0
    assert process_cpu_s(2**22 + 7) is None and thread_schedstats(2**22 + 7) is None
    assert process_rss_bytes(2**22 + 7) is None
    assert cpu_pressure_s("/nonexistent") is None


def test_children_of_a_process() -> None:
    import subprocess
    import sys

    assert parse_children("12 345 \n") == [12, 345] and parse_children("") == []
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        assert proc.pid in child_pids(os.getpid())
    finally:
        proc.kill()
        proc.wait()
    assert child_pids(2**22 + 1) == []  # no such process


def test_descendants_are_found_below_their_children() -> None:
    child = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    try:
        for _ in range(100):
            found = procfs.descendant_pids(child.pid)
            if found:
                break
            subprocess.run(["sleep", "0.02"], check=True)
        assert found and all(Path(f"/proc/{pid}").exists() for pid in found)
        assert child.pid not in found
    finally:
        subprocess.run(["pkill", "-P", str(child.pid)], check=False)
        child.kill()
        child.wait()
