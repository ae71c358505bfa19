"""Snapshots of the emulator process: its directions' counters and its CPU.

``getrusage`` gives this process's user and system CPU (the kernel's precise runtime,
apportioned by ticks); /proc/stat the host's busy and steal time, which say whether the
hypervisor took the CPU away while a run was measured.
"""

from __future__ import annotations

import resource
from collections.abc import Mapping
from dataclasses import asdict

from netem.emulator.core import LinkDirection
from netem.emulator.medium import AirDirection
from netem.stats import CpuStats, host_cpu_s


def process_cpu_s() -> tuple[float, float]:
    """(user, system) CPU seconds of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def cpu_snapshot() -> CpuStats:
    user_s, system_s = process_cpu_s()
    busy_s, steal_s, total_s = host_cpu_s()
    return CpuStats(
        user_s=user_s,
        system_s=system_s,
        host_busy_s=busy_s,
        host_steal_s=steal_s,
        host_total_s=total_s,
    )


def directions_snapshot(directions: Mapping[str, LinkDirection | AirDirection]) -> dict[str, dict]:
    """The cumulative counters of the given directions, as plain dicts (JSON-ready)."""
    return {name: asdict(core.stats) for name, core in directions.items()}
