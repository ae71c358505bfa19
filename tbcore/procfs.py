"""Linux /proc readers shared by every package: one parser per file, pure on its text.

``/proc/stat``'s aggregate ``cpu`` line is the only source of host CPU time here (busy,
idle, steal). proc(5) lists its fields as user nice system idle iowait irq softirq steal
guest guest_nice, in USER_HZ ticks; ``guest`` and ``guest_nice`` are already counted in
``user`` and ``nice``, so the total is the sum of the first eight fields only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tbcore.errors import SpecError

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
"""USER_HZ: the unit of /proc/stat and /proc/PID/stat times (100 on every Linux build seen)."""

PROC_STAT_FIELDS = (
    "user",
    "nice",
    "system",
    "idle",
    "iowait",
    "irq",
    "softirq",
    "steal",
    "guest",
    "guest_nice",
)
"""The fields of the ``cpu`` line, in order (proc(5)); older kernels stop earlier."""

COUNTED_FIELDS = 8
"""user .. steal: guest and guest_nice are part of user and nice, never added again."""


@dataclass(frozen=True)
class HostCpu:
    """Host CPU seconds since boot, all CPUs, from the ``cpu`` line of /proc/stat."""

    busy_s: float
    """Neither idle, iowait nor steal: the time the guest kernel ran something."""
    steal_s: float
    """Time the hypervisor ran something else while this VM wanted the CPU."""
    total_s: float
    """All of it (the first eight fields): the denominator of busy and steal fractions."""
    softirq_s: float = 0.0
    """Of ``busy_s``, the time in softirq context (``softirq``, the seventh field): where a
    receiving stack's packet processing lands when no process's system time takes it."""

    def __sub__(self, other: HostCpu) -> HostCpu:
        return HostCpu(
            busy_s=self.busy_s - other.busy_s,
            steal_s=self.steal_s - other.steal_s,
            total_s=self.total_s - other.total_s,
            softirq_s=self.softirq_s - other.softirq_s,
        )

    @property
    def steal_fraction(self) -> float | None:
        return None if self.total_s <= 0 else self.steal_s / self.total_s


def parse_host_cpu(line: str) -> HostCpu:
    """The aggregate ``cpu`` line of /proc/stat -> :class:`HostCpu`; SpecError otherwise."""
    parts = line.split()
    if not parts or parts[0] != "cpu":
        raise SpecError("/proc/stat", "first line is not the aggregate cpu line")
    try:
        ticks = [int(v) for v in parts[1 : 1 + COUNTED_FIELDS]]
    except ValueError:
        raise SpecError("/proc/stat", f"non-integer field in {line.strip()!r}") from None
    if len(ticks) < 4:
        raise SpecError("/proc/stat", f"too few fields in {line.strip()!r}")
    ticks += [0] * (COUNTED_FIELDS - len(ticks))
    idle = ticks[3] + ticks[4]
    steal = ticks[7]
    total = sum(ticks)
    return HostCpu(
        busy_s=(total - idle - steal) / CLOCK_TICKS_PER_S,
        steal_s=steal / CLOCK_TICKS_PER_S,
        total_s=total / CLOCK_TICKS_PER_S,
        softirq_s=ticks[6] / CLOCK_TICKS_PER_S,
    )


def host_cpu(path: str = "/proc/stat") -> HostCpu:
    """The host's CPU time now (reads the first line of /proc/stat)."""
    with open(path, encoding="ascii") as handle:
        return parse_host_cpu(handle.readline())


def parse_process_cpu_s(text: str) -> float:
    """User + system CPU seconds from the text of /proc/PID/stat (all threads)."""
    fields = text.rpartition(")")[2].split()
    # after the comm field: state is fields[0]; utime, stime are fields 14 and 15 (1-based)
    try:
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S
    except (IndexError, ValueError):
        raise SpecError("/proc/PID/stat", "no utime/stime fields") from None


def _process_stat(pid: int) -> str | None:
    """The text of /proc/PID/stat, None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process (all its threads), None when it is gone."""
    text = _process_stat(pid)
    return None if text is None else parse_process_cpu_s(text)


def parse_children(text: str) -> list[int]:
    """The pids of /proc/PID/task/TID/children (space-separated)."""
    return [int(word) for word in text.split() if word.isdigit()]


def child_pids(pid: int) -> list[int]:
    """The live children of a process (every thread's), [] when it is gone. Needs
    /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as handle:
                out += parse_children(handle.read())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return out


SCHED_POLICIES = {0: "other", 1: "fifo", 2: "rr", 3: "batch", 5: "idle", 6: "deadline"}
"""sched(7) policy numbers, as /proc/PID/stat's field 41 gives them."""


def descendant_pids(pid: int) -> list[int]:
    """Every live descendant of a process, breadth first (children, then theirs)."""
    found: list[int] = []
    frontier = [pid]
    while frontier:
        frontier = [c for p in frontier for c in child_pids(p)]
        found += frontier
    return found


def parse_process_sched(text: str) -> str:
    """How a process is scheduled, from the text of /proc/PID/stat: ``rr 1`` / ``fifo 10``
    (policy and real-time priority, fields 41 and 40) or ``other nice -10`` (field 19)."""
    fields = text.rpartition(")")[2].split()
    try:
        nice, rt_priority, policy = int(fields[16]), int(fields[37]), int(fields[38])
    except (IndexError, ValueError):
        raise SpecError("/proc/PID/stat", "no nice/rt_priority/policy fields") from None
    name = SCHED_POLICIES.get(policy, str(policy))
    return f"{name} {rt_priority}" if name in ("rr", "fifo") else f"{name} nice {nice}"


def process_sched(pid: int) -> str | None:
    """:func:`parse_process_sched` of a live process, None when it is gone."""
    text = _process_stat(pid)
    return None if text is None else parse_process_sched(text)


PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def parse_rss_bytes(text: str) -> int:
    """Resident set size in bytes from the text of /proc/PID/statm (its second field, in
    pages)."""
    try:
        return int(text.split()[1]) * PAGE_BYTES
    except (IndexError, ValueError):
        raise SpecError("/proc/PID/statm", "no resident field") from None


def process_rss_bytes(pid: int) -> int | None:
    """Resident set size of a process in bytes, None when it is gone."""
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as handle:
            text = handle.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return parse_rss_bytes(text)


def parse_pressure_total_s(text: str) -> float | None:
    """Cumulative stall seconds of the ``some`` line of a PSI file (/proc/pressure/cpu)."""
    for line in text.splitlines():
        items = line.split()
        if items and items[0] == "some":
            for item in items[1:]:
                if item.startswith("total="):
                    return int(item[6:]) / 1e6
    return None


def cpu_pressure_s(path: str = "/proc/pressure/cpu") -> float | None:
    """Host CPU pressure stall time so far (PSI 'some'); None without PSI."""
    try:
        with open(path, encoding="ascii") as handle:
            return parse_pressure_total_s(handle.read())
    except OSError:
        return None


def parse_schedstat(text: str) -> tuple[float, float, int]:
    """(on-CPU seconds, run-queue wait seconds, timeslices) from a schedstat file's text
    (``/proc/PID/task/TID/schedstat``: nanoseconds, nanoseconds, count)."""
    try:
        run_ns, wait_ns, slices = (int(v) for v in text.split()[:3])
    except ValueError:
        raise SpecError("schedstat", f"not three integers: {text.strip()!r}") from None
    return run_ns / 1e9, wait_ns / 1e9, slices


def thread_schedstats(pid: int) -> dict[int, tuple[float, int]] | None:
    """Per thread of ``pid``: (seconds it spent runnable but waiting for a CPU, times it was
    scheduled onto a CPU). None when the process is gone."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    out: dict[int, tuple[float, int]] = {}
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as handle:
                _run_s, wait_s, slices = parse_schedstat(handle.read())
        except (FileNotFoundError, ProcessLookupError, SpecError):
            continue
        out[int(tid)] = (wait_s, slices)
    return out
