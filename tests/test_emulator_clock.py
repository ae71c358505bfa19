"""The timerfd: readable once its absolute CLOCK_MONOTONIC time has passed, not before."""

from __future__ import annotations

import select
import time

import pytest

from netem.emulator.clock import Timerfd, set_thread_name, set_timer_slack_ns

pytestmark = pytest.mark.timeout(20)


def test_fires_after_its_time_and_not_before() -> None:
    with Timerfd() as timer:
        due = time.monotonic() + 0.02
        timer.arm_at(due)
        assert timer.armed_at == due
        assert select.select([timer], [], [], 0.005)[0] == []
        assert timer.drain() == 0
        ready, _, _ = select.select([timer], [], [], 2.0)
        assert ready == [timer]
        assert time.monotonic() >= due
        assert timer.drain() == 1


def test_a_past_time_fires_at_once_and_disarm_cancels() -> None:
    with Timerfd() as timer:
        timer.arm_at(time.monotonic() - 1.0)
        assert select.select([timer], [], [], 1.0)[0] == [timer]
        assert timer.drain() == 1
        timer.arm_at(time.monotonic() + 0.01)
        timer.disarm()
        assert timer.armed_at is None
        assert select.select([timer], [], [], 0.05)[0] == []


def test_close_is_idempotent() -> None:
    timer = Timerfd()
    timer.close()
    timer.close()
    assert timer.fd == -1


def test_prctl_helpers_apply() -> None:
    set_timer_slack_ns(1)
    set_thread_name("tb-test-name")
    with open("/proc/thread-self/comm") as f:
        assert f.read().strip() == "tb-test-name"
    set_timer_slack_ns(50_000)
