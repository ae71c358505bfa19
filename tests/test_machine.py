"""Machine sampling: CPU, run-queue waits and steal over a window, with a fake clock; the
emulator's packet log read back."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from harness.machine import CpuWatch, emulator_lateness


def _watch() -> CpuWatch:
    now = [0.0]
    watch = CpuWatch(clock=lambda: now[0])
    for step in range(11):  # 0.1 s apart: half a core, main thread waits 10 ms per 100 ms
        now[0] = step * 0.1
        values = {
            "x": 0.05 * step,
            "wait:x": 0.03 * step,  # all threads, the sampler thread included
            "mainwait:x": 0.01 * step,
            "host:pressure": 0.02 * step,
        }
        watch.samples.append((now[0], values, (0.01 * step, now[0] * 2)))
    return watch


def test_fractions_and_waits_over_a_window() -> None:
    watch = _watch()
    assert watch.fraction("x", 0.3, 0.7) == pytest.approx(0.5)
    assert watch.fraction("x", 0.5, 0.5) == pytest.approx(0.5)  # widened to 200 ms
    assert watch.fraction("missing", 0.0, 1.0) is None
    assert watch.wait_s("x", 0.2, 0.6) == pytest.approx(0.12)
    assert watch.main_wait_s("x", 0.2, 0.6) == pytest.approx(0.04)
    assert watch.main_wait_s("missing", 0.2, 0.6) is None
    assert watch.pressure(0.2, 0.8) == pytest.approx(0.2)
    assert watch.steal(0.2, 0.8) == pytest.approx(0.05)


def test_a_real_watch_of_this_process_sees_its_main_thread() -> None:
    with CpuWatch() as watch:
        watch.watch("me", os.getpid())
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            pass
    assert len(watch.samples) >= 3
    last = watch.samples[-1][1]
    assert last["me"] is not None and last["mainwait:me"] is not None
    t0, t1 = watch.samples[0][0], watch.samples[-1][0]
    assert watch.fraction("me", t0, t1) > 0  # it spun: some CPU, however busy the host


def test_emulator_lateness_from_the_packet_log(tmp_path: Path) -> None:
    header = "direction,event,arrival_s,due_s,departure_s,size_bytes\n"
    (tmp_path / "packets-up.csv").write_text(
        header + "up,departed,1.0,1.1,1.1005,1500\nup,dropped_loss,1.0,,,1500\n"
    )
    assert emulator_lateness(tmp_path) is None  # one direction missing
    (tmp_path / "packets-down.csv").write_text(header)
    series = emulator_lateness(tmp_path)
    assert series is not None
    departures, lateness = series["up"]
    assert list(departures) == [1.1005] and lateness[0] == pytest.approx(0.0005)
    assert len(series["down"][0]) == 0
