"""Machine sampling: CPU, run-queue waits and steal over a window, with a fake clock; the
emulator's packet log read back."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.run.machine import (
    CpuWatch,
    wait_for_low_steal,
)
from tbcore.procfs import HostCpu


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
        # two CPUs: 0.02 s steal and 0.15 s busy per 0.1 s (0.05 of it x's)
        host = HostCpu(busy_s=0.15 * step, steal_s=0.01 * step, total_s=now[0] * 2)
        watch.samples.append((now[0], values, host))
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


def test_the_foreign_share_of_the_host_cpu() -> None:
    watch = _watch()
    # x used a third of the host's busy time: two thirds were somebody else's
    assert watch.foreign_share(0.2, 0.8, ["x"]) == pytest.approx(2 / 3)
    assert watch.foreign_share(0.2, 0.8, []) == pytest.approx(1.0)
    assert watch.foreign_share(0.2, 0.8, ["x", "missing"]) == pytest.approx(2 / 3)
    # own processes that used all of it: none foreign (the run's own CPU is not a
    # disturbance), and a share below the ticks' resolution cannot be told from none
    assert watch.foreign_share(0.2, 0.8, ["x", "x", "x"]) == 0.0
    assert CpuWatch().foreign_share(0.0, 1.0, ["x"]) is None  # never sampled


def test_a_real_watch_of_this_process_sees_its_main_thread() -> None:
    with CpuWatch() as watch:
        watch.watch("me", os.getpid())
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            sum(range(10_000))  # CPU, in bursts that hand the GIL to the watch between them
            time.sleep(0)
    assert len(watch.samples) >= 3
    last = watch.samples[-1][1]
    assert last["me"] is not None and last["mainwait:me"] is not None
    assert watch.sched == {"me": f"other nice {os.getpriority(os.PRIO_PROCESS, 0)}"}
    t0, t1 = watch.samples[0][0], watch.samples[-1][0]
    assert watch.fraction("me", t0, t1) > 0  # it spun: some CPU, however busy the host


def _wait_on(steal_per_window: list[float], **limits: float) -> tuple[float, float | None]:
    """wait_for_low_steal on a fake two-CPU host whose steal over each 1 s window is given,
    and a fake clock that sleeping moves."""
    now = [0.0]
    cumulative = [sum(steal_per_window[:i]) * 2.0 for i in range(len(steal_per_window) + 1)]
    reads = iter(HostCpu(0.0, steal_s, 2.0 * i) for i, steal_s in enumerate(cumulative))

    def sleep(seconds: float) -> None:
        now[0] += seconds

    return wait_for_low_steal(
        lambda: next(reads), sleep, lambda: now[0], limit=0.02, window_s=1.0, **limits
    )


def test_a_re_run_waits_for_a_spell_of_steal_to_pass() -> None:
    waited, steal = _wait_on([0.12, 0.08, 0.01], quiet_windows=1)
    assert waited == 3.0 and steal == pytest.approx(0.01)
    # it gives up after max_s, and reports the steal it last saw
    waited, steal = _wait_on([0.1] * 99, max_s=5.0)
    assert waited == 5.0 and steal == pytest.approx(0.1)


def test_one_quiet_second_inside_a_spell_is_not_its_end() -> None:
    # 12 %, 1 %, 9 % (the spell is back), then three quiet seconds
    waited, steal = _wait_on([0.12, 0.01, 0.09, 0.01, 0.0, 0.01], quiet_windows=3)
    assert waited == 6.0 and steal == pytest.approx(0.01)


BURN_S = 0.3
"""CPU a grandchild spends in the test below (a busy loop, 0.3 s of one core)."""


def test_a_stack_working_in_its_child_is_counted_under_its_name(tmp_path: Path) -> None:
    # ngtcp2's binaries run under their testbed edge: the edge (watched) sleeps, its child
    # computes; the child's CPU is the stack's, even after it exited
    burn = tmp_path / "burn.py"
    burn.write_text(
        "import time\nt = time.process_time()\nwhile time.process_time() - t < "
        f"{BURN_S}:\n    pass\n"
    )
    edge = "import subprocess, sys, time; subprocess.run([sys.executable, sys.argv[1]]); "
    edge += "time.sleep(0.2)"
    proc = subprocess.Popen([sys.executable, "-c", edge, str(burn)])
    watch = CpuWatch()
    with watch:
        watch.watch("server", proc.pid)
        proc.wait(timeout=30)
    assert len(watch.pids["server"]) >= 2  # the edge and the child it started
    seen = [v["server"] for _, v, _ in watch.samples if v.get("server") is not None]
    assert seen == sorted(seen)  # the child's exit takes nothing away
    assert seen[-1] >= BURN_S * 0.8
