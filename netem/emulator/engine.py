"""The asyncio edge: pumps packets of one direction from a TUN fd, through the core, to another.

Each :class:`DirectionPump` watches its input TUN fd and a :class:`Timerfd` with the loop's
``add_reader``. Reads come in batches (:data:`netem.emulator.tun.READ_BATCH`); each packet is
stamped with ``time.monotonic()`` and offered to the core. Departures on sparse traffic:
the timerfd is armed ``early_s`` before the head packet is due (the wake-up itself takes
tens of microseconds on these VMs), and the last stretch is spun on ``time.monotonic()``,
so a packet leaves within a few microseconds of its time when the CPU is there. On dense
traffic (:data:`DENSE_GAP_S`) the timer is armed for the departure itself and nothing is
spun: tens of µs of lateness instead of a core. The core records each packet's lateness
against the ``now`` read just before its batch is written.

What lateness does not see: the time between a packet entering the sender's TUN and the
emulator stamping it (the read wake-up, about 40-70 µs median here). It adds to the
one-way delay as a small constant; the probe's RTT error at 0 ms configured delay
(about 0.14 ms median, two wake-ups and two stacks) is that floor.

:class:`Engine` holds the pumps of one process and answers the control commands for them.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

from netem.emulator.clock import Timerfd
from netem.emulator.core import LinkDirection
from netem.emulator.medium import AirDirection, medium_snapshot, set_medium_spec
from netem.emulator.packetlog import PacketLog
from netem.emulator.pcap import DEFAULT_SNAPLEN_BYTES, PcapBuffer, check_snaplen, clock_offset_ns
from netem.emulator.stats import cpu_snapshot, directions_snapshot
from netem.emulator.tun import read_batch
from netem.events import ScheduledEvent, end_events
from netem.linkspec import LinkSpec
from tbcore.errors import SpecError

DEFAULT_EARLY_S = 80e-6
"""How long before a departure the timerfd fires on sparse traffic; the rest is spun.
Measured on these VMs: a timerfd wake-up through epoll takes about 40 µs (median), 45 µs
(p90), 100-220 µs (p99)."""
DENSE_GAP_S = 500e-6
"""A departure due less than this after the previous release belongs to dense traffic: the
timer is armed for the departure itself and nothing is spun. Spinning through every gap of
a 333 Mbit/s stream (one 1500-byte packet per 36 µs) takes a whole core, which on two
cores starves the endpoints (kernel TCP fell from 321 to 194 Mbit/s); asleep, the wake-up
adds tens of µs of lateness instead. Spinning thus costs at most
early_s / (DENSE_GAP_S + early_s), 14 % of a core, per direction."""
SPIN_ALWAYS_S = 10e-6
"""A departure this close is spun for, dense or not: cheaper than a timer round trip."""

ENDS = {"up": ("client", "server"), "down": ("server", "client")}
"""Per direction: (the end it reads from, the end it writes to)."""


@dataclass
class Capture:
    """pcap buffers of one direction: what its sender sent and what its receiver got."""

    sent: PcapBuffer
    received: PcapBuffer


class DirectionPump:
    """Moves packets of one direction from ``in_fd`` through the core to ``out_fd``."""

    def __init__(
        self,
        core: LinkDirection | AirDirection,
        in_fd: int,
        out_fd: int,
        *,
        early_s: float = DEFAULT_EARLY_S,
    ) -> None:
        self.core = core
        self.in_fd = in_fd
        self.out_fd = out_fd
        self.early_s = early_s
        self.timer = Timerfd()
        self.capture: Capture | None = None
        self.log: PacketLog | None = None
        self._last_release_s = float("-inf")
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        loop.add_reader(self.in_fd, self.on_readable)
        loop.add_reader(self.timer.fd, self.on_timer)

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self.in_fd)
            self._loop.remove_reader(self.timer.fd)
            self._loop = None
        self.timer.close()

    def on_readable(self) -> None:
        packets = read_batch(self.in_fd)
        if not packets:
            return
        now = time.monotonic()
        receive = self.core.receive
        capture = self.capture
        for packet in packets:
            if capture is not None:
                capture.sent.add(now, packet)
            receive(now, packet)
        if self.timer.armed_at is None:
            self.release()

    def on_timer(self) -> None:
        self.timer.drain()
        self.timer.armed_at = None
        self.release()

    def release(self) -> None:
        """Write every packet that is due; then, for the next one, spin (sparse traffic and
        due within ``early_s``) or arm the timer (``early_s`` ahead on sparse traffic, on
        time on dense traffic, see :data:`DENSE_GAP_S`)."""
        core = self.core
        monotonic = time.monotonic
        write = os.write
        out_fd = self.out_fd
        while True:
            now = monotonic()
            due = core.pop_due(now)
            if due:
                self._last_release_s = now
                capture = self.capture
                for packet in due:
                    try:
                        write(out_fd, packet)
                    except OSError:
                        core.stats.write_errors += 1
                        continue
                    if capture is not None:
                        capture.received.add(monotonic(), packet)
            deadline = core.next_deadline()
            if deadline is None:
                return
            wait = deadline - monotonic()
            if wait > SPIN_ALWAYS_S:
                if deadline - self._last_release_s < DENSE_GAP_S:
                    self.timer.arm_at(deadline)
                    return
                if wait > self.early_s:
                    self.timer.arm_at(deadline - self.early_s)
                    return
            while monotonic() < deadline:
                pass

    # --- capture and log -----------------------------------------------------------------

    def capture_start(self, snaplen: int, offset_ns: int) -> None:
        self.capture = Capture(PcapBuffer(snaplen, offset_ns), PcapBuffer(snaplen, offset_ns))

    def capture_stop(self, directory: Path) -> dict[str, Any]:
        """Write this direction's records as part files; the caller merges them per end."""
        capture, self.capture = self.capture, None
        if capture is None:
            return {}
        sender, receiver = ENDS[self.core.direction]
        parts = {}
        for end, buffer in ((sender, capture.sent), (receiver, capture.received)):
            path = directory / f".{end}.{self.core.direction}.part"
            path.write_bytes(buffer.data)
            parts[end] = {"part": str(path), "records": buffer.records, "dropped": buffer.dropped}
        return parts

    def log_start(self) -> None:
        self.log = PacketLog(self.core.direction)
        self.core.recorder = self.log

    def log_stop(self, directory: Path) -> dict[str, Any]:
        log, self.log = self.log, None
        self.core.recorder = None
        if log is None:
            return {}
        path = directory / f"packets-{self.core.direction}.csv"
        count = log.write_csv(path)
        return {"path": str(path), "records": count, "dropped_records": log.dropped_records}


def check_directory(value: object, field: str = "dir") -> Path:
    if not isinstance(value, str) or not value:
        raise SpecError(field, f"must be a directory path, got {value!r}")
    path = Path(value)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SpecError(field, f"cannot create {value!r}: {err.strerror}") from None
    return path


def end_time_arg(request: dict[str, Any]) -> float:
    """``end_events``' ``at_s``: CLOCK_MONOTONIC seconds the parent gave."""
    at_s = request.get("at_s")
    if isinstance(at_s, bool) or not isinstance(at_s, (int, float)):
        raise SpecError("at_s", f"must be CLOCK_MONOTONIC seconds, got {at_s!r}")
    return float(at_s)


def time_arg(request: dict[str, Any], key: str) -> float:
    """A CLOCK_MONOTONIC time of a request (default: now)."""
    value = request.get(key)
    if value is None:
        return time.monotonic()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SpecError(key, f"must be CLOCK_MONOTONIC seconds, got {value!r}")
    return float(value)


class Engine:
    """The pumps of one process and the control commands that act on them."""

    def __init__(self, spec: LinkSpec, pumps: dict[str, DirectionPump]) -> None:
        self.spec = spec
        self.pumps = pumps
        self.capture_dir: Path | None = None
        self.log_dir: Path | None = None
        self.events: list[ScheduledEvent] = []
        """Every scheduled event given to this process, in order (see :mod:`netem.events`)."""

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start moving packets (each pump on ``loop``)."""
        for pump in self.pumps.values():
            pump.start(loop)

    def stop(self) -> None:
        for pump in self.pumps.values():
            pump.stop()

    def add_event(self, event: ScheduledEvent) -> ScheduledEvent:
        """Give a resolved event (absolute times) to every direction it concerns (none, if
        one of them refuses it)."""
        for pump in self.pumps.values():
            pump.core.check_event(event)
        for pump in self.pumps.values():
            pump.core.add_event(event)
        self.events.append(event)
        return event

    def trace_info(self) -> dict[str, Any]:
        """Per direction of this process, its traces and their clock (None: no trace)."""
        return {name: pump.core.trace_info() for name, pump in self.pumps.items()}

    COMMANDS: ClassVar[dict[str, str]] = {
        "stats": "cmd_stats",
        "set_spec": "cmd_set_spec",
        "trace": "cmd_trace",
        "capture_start": "cmd_capture_start",
        "capture_stop": "cmd_capture_stop",
        "packet_log_start": "cmd_packet_log_start",
        "packet_log_stop": "cmd_packet_log_stop",
        "event": "cmd_event",
        "events": "cmd_events",
        "end_events": "cmd_end_events",
        "path": "cmd_path",
        "ping": "cmd_nothing",
        "shutdown": "cmd_nothing",
    }
    """The control commands (``__main__``'s contract) by name: the method that answers each.
    A packet path's engine overrides the methods, never the table."""

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        """Answer one control request for this process's directions (see ``__main__``)."""
        cmd = request.get("cmd")
        method = self.COMMANDS.get(cmd) if isinstance(cmd, str) else None
        if method is None:
            raise SpecError("cmd", f"unknown command {cmd!r}")
        return getattr(self, method)(request)  # type: ignore[no-any-return]

    def cmd_stats(self, request: dict[str, Any]) -> dict[str, Any]:
        now = time.monotonic()
        return {
            "time_s": now,
            "directions": directions_snapshot({n: p.core for n, p in self.pumps.items()}),
            "cpu": asdict(cpu_snapshot()),
            "air": medium_snapshot((p.core for p in self.pumps.values()), now),
        }

    def cmd_set_spec(self, request: dict[str, Any]) -> dict[str, Any]:
        """at_s: the parent's time, so both processes' traces agree."""
        spec = LinkSpec.from_dict(request.get("spec") or {})
        at_s = time_arg(request, "at_s")
        for name, pump in self.pumps.items():  # all or none
            pump.core.check_spec(getattr(spec, name), at_s)
        set_medium_spec([p.core for p in self.pumps.values()], spec)
        for name, pump in self.pumps.items():
            pump.core.set_spec(getattr(spec, name), spec.queue_limit_bytes(name), at_s)
        self.spec = spec
        return {"trace": self.trace_info()}

    def cmd_trace(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"trace": self.trace_info()}

    def cmd_capture_start(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.capture_dir is not None:  # a second start would drop the first's records
            raise SpecError("cmd", "capture_start while a capture runs (capture_stop first)")
        snaplen = check_snaplen(request.get("snaplen", DEFAULT_SNAPLEN_BYTES))
        offset_ns = int(request.get("offset_ns") or clock_offset_ns())
        self.capture_dir = check_directory(request.get("dir"))
        for pump in self.pumps.values():
            pump.capture_start(snaplen, offset_ns)
        return {"offset_ns": offset_ns, "snaplen": snaplen}

    def cmd_capture_stop(self, request: dict[str, Any]) -> dict[str, Any]:
        directory = self._stop_dir("capture_dir", "capture")
        return {n: p.capture_stop(directory) for n, p in self.pumps.items()}

    def _stop_dir(self, attr: str, what: str) -> Path:
        """The folder of the running ``what`` (capture or packet_log), which stops with it."""
        directory = getattr(self, attr)
        if directory is None:
            raise SpecError("cmd", f"{what}_stop without {what}_start")
        setattr(self, attr, None)
        return directory

    def cmd_packet_log_start(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.log_dir is not None:
            raise SpecError("cmd", "packet_log_start while a log runs (packet_log_stop first)")
        self.log_dir = check_directory(request.get("dir"))
        for pump in self.pumps.values():
            pump.log_start()
        return {}

    def cmd_packet_log_stop(self, request: dict[str, Any]) -> dict[str, Any]:
        directory = self._stop_dir("log_dir", "packet_log")
        return {n: p.log_stop(directory) for n, p in self.pumps.items()}

    def cmd_event(self, request: dict[str, Any]) -> dict[str, Any]:
        """Resolved by the parent, so both processes share the times."""
        event = ScheduledEvent.from_dict(request.get("scheduled") or {})
        return self.add_event(event).to_dict()

    def cmd_events(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"events": [e.to_dict() for e in self.events]}

    def cmd_end_events(self, request: dict[str, Any]) -> dict[str, Any]:
        """The parent gives the time, so both processes agree."""
        changed = end_events(self.events, end_time_arg(request))
        for pump in self.pumps.values():
            if pump.core.timeline is not None:
                pump.core.timeline.refresh()
        return {"ended": len(changed)}

    def cmd_path(self, request: dict[str, Any]) -> dict[str, Any]:
        """Which packet path moves this process's directions."""
        return {"path": "python"}

    def cmd_nothing(self, request: dict[str, Any]) -> dict[str, Any]:
        """ping, shutdown: an answer is all (the server loop acts on shutdown)."""
        return {}
