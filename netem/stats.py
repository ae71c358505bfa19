"""What a link did, backend-neutral: counters that both backends return from ``link.stats()``.

Every counter is cumulative since the link came up, so two snapshots subtract
(``after - before``) to give what happened during one run, including the quantiles of the
emulator's lateness over that run: lateness is kept as a histogram of fixed bins
(:data:`LATENESS_BIN_EDGES_S`), and a difference of histograms is still a histogram.

A backend that cannot measure a quantity leaves it at its zero value and says so in
``measured`` (the kernel netem backend has no lateness, for instance).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from netem.linkspec import pick_direction
from tbcore import procfs
from tbcore.errors import SpecError

LATENESS_FINE_STEP_S = 10e-6
"""Width of the fine lateness bins (10 µs), below :data:`LATENESS_FINE_LIMIT_S`."""
LATENESS_FINE_LIMIT_S = 10e-3
"""Lateness up to 10 ms is binned finely; above, in 1 ms bins up to 1 s."""
LATENESS_COARSE_STEP_S = 1e-3
LATENESS_COARSE_LIMIT_S = 1.0
LATENESS_FINE_BINS = round(LATENESS_FINE_LIMIT_S / LATENESS_FINE_STEP_S)
LATENESS_BINS = (
    LATENESS_FINE_BINS
    + round((LATENESS_COARSE_LIMIT_S - LATENESS_FINE_LIMIT_S) / LATENESS_COARSE_STEP_S)
    + 1
)
"""Number of bins; the last one holds everything from 1 s up (and is reported as 1 s)."""


def lateness_bin(lateness_s: float) -> int:
    """Index of the bin of one lateness (actual minus scheduled departure, seconds).

    Early releases (negative lateness) land in bin 0 with the punctual ones.
    """
    if lateness_s < LATENESS_FINE_LIMIT_S:
        return int(lateness_s * 1e5) if lateness_s > 0 else 0
    if lateness_s < LATENESS_COARSE_LIMIT_S:
        return LATENESS_FINE_BINS + int((lateness_s - LATENESS_FINE_LIMIT_S) * 1e3)
    return LATENESS_BINS - 1


def lateness_bin_upper_s(index: int) -> float:
    """Upper edge of bin ``index``: a quantile read from the histogram is never optimistic."""
    if index < LATENESS_FINE_BINS:
        return (index + 1) * LATENESS_FINE_STEP_S
    if index < LATENESS_BINS - 1:
        return LATENESS_FINE_LIMIT_S + (index - LATENESS_FINE_BINS + 1) * LATENESS_COARSE_STEP_S
    return LATENESS_COARSE_LIMIT_S


def histogram_quantile_s(histogram: list[int], q: float) -> float | None:
    """The q-quantile (0 < q <= 1) of a lateness histogram, as a bin's upper edge."""
    if not 0.0 < q <= 1.0:
        raise SpecError("quantile", f"must lie in (0, 1], got {q!r}")
    total = sum(histogram)
    if total == 0:
        return None
    rank = math.ceil(q * total)
    seen = 0
    for index, count in enumerate(histogram):
        seen += count
        if seen >= rank:
            return lateness_bin_upper_s(index)
    return lateness_bin_upper_s(len(histogram) - 1)


@dataclass
class DirectionStats:
    """Cumulative counters of one direction (``up``: client -> server, ``down``: back)."""

    packets_in: int = 0
    """Packets offered to the link (read from the sender's side)."""
    bytes_in: int = 0
    packets_out: int = 0
    """Packets delivered to the receiver's side."""
    bytes_out: int = 0
    dropped_loss: int = 0
    """Packets the loss model dropped."""
    dropped_queue: int = 0
    """Packets the drop-tail queue refused (it was full)."""
    bytes_dropped_queue: int = 0
    dropped_outage: int = 0
    """Packets dropped by a scheduled outage (:mod:`netem.events`)."""
    write_errors: int = 0
    """Packets the emulator could not hand to the receiving device (counted, never silent;
    they are included in packets_out, which counts departures from the link)."""
    max_backlog_bytes: int = 0
    """Largest queue occupancy seen (a maximum: it does not subtract; see ``__sub__``)."""
    max_backlog_packets: int = 0
    lateness_hist: list[int] = field(default_factory=list)
    """Counts per lateness bin (:func:`lateness_bin`): actual minus scheduled departure."""
    lateness_sum_s: float = 0.0
    """Sum of all lateness values, for the mean."""
    lateness_max_s: float = 0.0
    """Largest lateness seen (a maximum, like max_backlog_*)."""

    @property
    def loss_trials(self) -> int:
        """Packets that reached the loss stage (not refused by the queue, not cut by an
        outage: a scheduled outage is not the loss model's doing)."""
        return self.packets_in - self.dropped_queue - self.dropped_outage

    @property
    def realised_loss(self) -> float | None:
        """Fraction of packets that reached the loss stage and were dropped there."""
        trials = self.loss_trials
        return None if trials <= 0 else self.dropped_loss / trials

    @property
    def lateness_samples(self) -> int:
        return sum(self.lateness_hist)

    def lateness_quantile_s(self, q: float) -> float | None:
        return histogram_quantile_s(self.lateness_hist, q)

    def __sub__(self, other: DirectionStats) -> DirectionStats:
        """What happened between snapshot ``other`` and this one.

        Counters subtract; maxima (backlog, lateness) cannot, so the later snapshot's value
        is kept: it bounds the interval's maximum from above.
        """
        values: dict[str, Any] = {}
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if f.name.startswith("max_") or f.name.endswith("_max_s"):
                values[f.name] = mine
            elif f.name == "lateness_hist":
                if theirs and len(theirs) != len(mine):
                    raise SpecError("lateness_hist", "snapshots have different bin counts")
                values[f.name] = [
                    a - b for a, b in zip(mine, theirs or [0] * len(mine), strict=True)
                ]
            else:
                values[f.name] = mine - theirs
        return DirectionStats(**values)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; the histogram is sparse (``{"bin": count}``, non-zero bins only)."""
        data = asdict(self)
        data["lateness_hist"] = {str(i): c for i, c in enumerate(self.lateness_hist) if c}
        data["realised_loss"] = self.realised_loss
        data["lateness_p50_s"] = self.lateness_quantile_s(0.5) if self.lateness_hist else None
        data["lateness_p99_s"] = self.lateness_quantile_s(0.99) if self.lateness_hist else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DirectionStats:
        """From :meth:`to_dict` (sparse histogram) or ``asdict`` (dense); derived keys ignored."""
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        hist = values.get("lateness_hist")
        if isinstance(hist, dict):
            dense = [0] * LATENESS_BINS
            for key, count in hist.items():
                index = int(key)
                if not 0 <= index < LATENESS_BINS:
                    raise SpecError("lateness_hist", f"bin {key} outside [0, {LATENESS_BINS})")
                dense[index] = int(count)
            values["lateness_hist"] = dense
        return cls(**values)


@dataclass
class CpuStats:
    """CPU time of the emulator process(es) and of the host, cumulative (seconds)."""

    user_s: float = 0.0
    """User CPU of the emulator (all its processes)."""
    system_s: float = 0.0
    """Kernel CPU of the emulator: on the userspace backend mostly ``write()`` to the TUN,
    which runs the receiving host's network stack."""
    host_busy_s: float = 0.0
    """Host CPU time not idle, all CPUs (from /proc/stat)."""
    host_steal_s: float = 0.0
    """Time the hypervisor took from this VM, all CPUs (from /proc/stat, field steal)."""
    host_total_s: float = 0.0
    """All host CPU time, all CPUs: the denominator for busy and steal fractions."""

    def __sub__(self, other: CpuStats) -> CpuStats:
        return CpuStats(
            **{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)}
        )

    @property
    def steal_fraction(self) -> float | None:
        return None if self.host_total_s <= 0 else self.host_steal_s / self.host_total_s


AIR_KEYS = ("up.data", "up.ack", "down.data", "down.ack")
"""Keys of the per-direction, per-kind medium counters (:class:`AirStats`)."""


def _zero(keys: tuple[str, ...] = AIR_KEYS) -> dict[str, int]:
    return dict.fromkeys(keys, 0)


@dataclass
class AirStats:
    """Cumulative medium accounting of an ``air=`` link (:mod:`netem.emulator.medium`).

    Keys ``direction.kind`` (:data:`AIR_KEYS`); kind ``ack`` is an ACK-only frame (a TCP
    segment without payload, or a small non-TCP packet, :data:`netem.air.ACK_ONLY_MAX_IP_BYTES`),
    ``data`` everything else. Times are whole nanoseconds, so that they subtract exactly.
    """

    frames: dict[str, int] = field(default_factory=_zero)
    """Frames (IP packets) carried over the medium."""
    ip_bytes: dict[str, int] = field(default_factory=_zero)
    """Their IP bytes."""
    busy_ns: dict[str, int] = field(default_factory=_zero)
    """Medium time of their exchanges (access, data PPDU, SIFS, MAC ACK); an A-MPDU exchange
    is shared among its frames in proportion to their bytes."""
    exchanges: dict[str, int] = field(default_factory=lambda: _zero(("up", "down")))
    """Medium exchanges per direction (fewer than frames with A-MPDU aggregation)."""
    dropped: dict[str, int] = field(default_factory=lambda: _zero(("up", "down")))
    """Frames refused because the direction's medium queue was full."""
    wait_ns: dict[str, int] = field(default_factory=lambda: _zero(("up", "down")))
    """Summed time frames waited for the medium (arrival to start of their exchange)."""
    ahead_ns: dict[str, int] = field(default_factory=lambda: _zero(("up", "down")))
    """Part of ``busy_ns`` that lies after the snapshot: an exchange is charged whole when it
    starts, so one taken during an exchange has its rest here, by the exchange's direction."""

    @property
    def busy_s(self) -> float:
        """Medium occupied up to the snapshot, both directions, all kinds."""
        return (sum(self.busy_ns.values()) - sum(self.ahead_ns.values())) / 1e9

    @property
    def charged_s(self) -> float:
        """Medium time of the counted frames' whole exchanges, the part after the snapshot
        included: what an exchange model of those frames predicts."""
        return sum(self.busy_ns.values()) / 1e9

    @property
    def frames_total(self) -> int:
        return sum(self.frames.values())

    def __sub__(self, other: AirStats) -> AirStats:
        values = {}
        for f in fields(self):
            theirs = getattr(other, f.name)
            values[f.name] = {k: v - theirs.get(k, 0) for k, v in getattr(self, f.name).items()}
        return AirStats(**values)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["busy_s"] = self.busy_s
        data["charged_s"] = self.charged_s
        data["frames_total"] = self.frames_total
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AirStats:
        names = {f.name for f in fields(cls)}
        try:
            values = {
                k: {str(a): int(b) for a, b in v.items()} for k, v in data.items() if k in names
            }
            return cls(**values)
        except (AttributeError, TypeError, ValueError) as err:
            raise SpecError("air", f"not an AirStats record: {err}") from None


@dataclass
class LinkStats:
    """Both directions, the CPU, and when the snapshot was taken."""

    backend: str
    """``userspace`` or ``netem``."""
    time_s: float = 0.0
    """CLOCK_MONOTONIC time of the snapshot."""
    up: DirectionStats = field(default_factory=DirectionStats)
    down: DirectionStats = field(default_factory=DirectionStats)
    cpu: CpuStats = field(default_factory=CpuStats)
    measured: tuple[str, ...] = ()
    """Which groups this backend measures: of ``counters``, ``lateness``, ``backlog``, ``cpu``."""
    processes: int = 1
    """How many emulator processes served the link (one per direction, or one for both)."""
    air: AirStats | None = None
    """The shared medium's accounting, on an ``air=`` link; None otherwise."""

    def direction(self, name: str) -> DirectionStats:
        return pick_direction(name, self.up, self.down)

    def __sub__(self, other: LinkStats) -> LinkStats:
        return replace(
            self,
            time_s=self.time_s - other.time_s,
            up=self.up - other.up,
            down=self.down - other.down,
            cpu=self.cpu - other.cpu,
            air=None if self.air is None else self.air - (other.air or AirStats()),
        )

    @property
    def emulator_cpu_fraction(self) -> float | None:
        """Emulator CPU (user + system) per wall second, of a difference of snapshots."""
        if self.time_s <= 0:
            return None
        return (self.cpu.user_s + self.cpu.system_s) / self.time_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "time_s": self.time_s,
            "up": self.up.to_dict(),
            "down": self.down.to_dict(),
            "cpu": asdict(self.cpu),
            "measured": list(self.measured),
            "processes": self.processes,
            **({} if self.air is None else {"air": self.air.to_dict()}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LinkStats:
        try:
            return cls(
                backend=str(data["backend"]),
                time_s=float(data.get("time_s", 0.0)),
                up=DirectionStats.from_dict(data.get("up", {})),
                down=DirectionStats.from_dict(data.get("down", {})),
                cpu=CpuStats(**data.get("cpu", {})),
                measured=tuple(data.get("measured", ())),
                processes=int(data.get("processes", 1)),
                air=None if data.get("air") is None else AirStats.from_dict(data["air"]),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise SpecError("stats", f"not a LinkStats record: {err}") from None


CLOCK_TICKS_PER_S = procfs.CLOCK_TICKS_PER_S
"""USER_HZ: the unit of /proc/stat and /proc/PID/stat times (100 on every Linux build seen)."""


def host_cpu_s(proc_stat: str | None = None) -> tuple[float, float, float]:
    """(busy, steal, total) CPU seconds of the whole host, from the ``cpu`` line of /proc/stat
    (:func:`tbcore.procfs.parse_host_cpu`, which counts guest time once)."""
    cpu = procfs.host_cpu() if proc_stat is None else procfs.parse_host_cpu(proc_stat)
    return (cpu.busy_s, cpu.steal_s, cpu.total_s)
