"""Snapshots of the emulator process's CPU and directions."""

from __future__ import annotations

from netem.emulator.core import LinkDirection
from netem.emulator.stats import cpu_snapshot, directions_snapshot, process_cpu_s
from netem.linkspec import DirectionSpec


def test_cpu_snapshot_grows_with_work() -> None:
    before = cpu_snapshot()
    x = 0
    for i in range(2_000_000):
        x += i
    after = cpu_snapshot()
    delta = after - before
    assert delta.user_s + delta.system_s > 0
    assert after.host_total_s >= before.host_total_s > 0
    assert process_cpu_s()[0] >= after.user_s


def test_directions_snapshot_is_plain_data() -> None:
    core = LinkDirection("up", DirectionSpec(), None)
    core.receive(0.0, b"\x45" + bytes(39))
    snap = directions_snapshot({"up": core})
    assert snap["up"]["packets_in"] == 1 and snap["up"]["bytes_in"] == 40
    core.receive(0.0, b"\x45" + bytes(39))
    assert snap["up"]["packets_in"] == 1  # a copy, not a view
