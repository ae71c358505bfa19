"""The edge of the C packet path: its thread on the TUN fds, and the control commands.

:class:`CEngine` answers the same commands as :class:`netem.emulator.engine.Engine`
(stats, set_spec, capture, packet log, events) with the same results, for directions that
the C packet thread (``csrc/loop.c``) moves instead of asyncio pumps. The asyncio loop of
the process then only serves the control socket; the thread holds the path's lock while
it handles a wake-up, and each command takes it for the time of one copy.

What the thread does per wake-up, and why it cannot starve a direction: see ``loop.c``.
Lateness is measured as in the Python path (the clock read just before a batch is written,
minus each packet's scheduled departure), so the two paths' statistics compare directly.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from netem.emulator.core import refuse_rate_events
from netem.emulator.cpath import DIRECTION_INDEX, CPath
from netem.emulator.engine import DENSE_GAP_S, ENDS, Engine, end_time_arg, time_arg
from netem.emulator.pcap import DEFAULT_MEMORY_LIMIT_BYTES
from netem.emulator.stats import cpu_snapshot
from netem.events import ScheduledEvent, end_events
from netem.linkspec import LinkSpec


class CPump:
    """One direction moved by the C thread: capture and packet log, as DirectionPump's."""

    def __init__(self, path: CPath, direction: str, in_fd: int, out_fd: int) -> None:
        self.path = path
        self.direction = direction
        self.in_fd = in_fd
        self.out_fd = out_fd
        self.capturing = False

    def capture_start(self, snaplen: int, offset_ns: int) -> None:
        self.path.native.capture_start(
            DIRECTION_INDEX[self.direction], snaplen, offset_ns, DEFAULT_MEMORY_LIMIT_BYTES
        )
        self.capturing = True

    def capture_stop(self, directory: Path) -> dict[str, Any]:
        """This direction's part files (``.END.DIRECTION.part``), merged per end by the caller."""
        if not self.capturing:
            return {}
        self.capturing = False
        buffers = self.path.native.capture_take(DIRECTION_INDEX[self.direction])
        parts = {}
        for end, (data, records, dropped) in zip(ENDS[self.direction], buffers, strict=True):
            path = directory / f".{end}.{self.direction}.part"
            path.write_bytes(data)
            parts[end] = {"part": str(path), "records": records, "dropped": dropped}
        return parts

    def log_start(self) -> None:
        self.path.log_start(self.direction)

    def log_stop(self, directory: Path) -> dict[str, Any]:
        log = self.path.log_take(self.direction)
        path = directory / f"packets-{self.direction}.csv"
        count = log.write_csv(path)
        return {"path": str(path), "records": count, "dropped_records": log.dropped_records}


class CEngine(Engine):
    """The C path's directions of one process and the control commands that act on them."""

    def __init__(
        self,
        spec: LinkSpec,
        path: CPath,
        pumps: dict[str, CPump],
        *,
        early_s: float,
        coalesce_s: float,
        dense_gap_s: float = DENSE_GAP_S,
        vnet_hdr: bool = False,
        gro: bool = False,
        stamps: bool = False,
    ) -> None:
        super().__init__(spec, pumps)  # type: ignore[arg-type]
        self.path = path
        self.early_s = early_s
        self.dense_gap_s = dense_gap_s
        self.coalesce_s = coalesce_s
        self.vnet_hdr = vnet_hdr
        self.gro = gro
        self.stamps = stamps
        self._reported_error: str | None = None

    @classmethod
    def build(
        cls,
        spec: LinkSpec,
        fds: dict[str, tuple[int, int]],
        *,
        early_s: float,
        coalesce_s: float,
        vnet_hdr: bool = False,
        gro: bool = False,
        stamps: bool = False,
        origin_s: float = 0.0,
    ) -> CEngine:
        """An engine for the directions in ``fds`` (name: (in_fd, out_fd)), whose traces
        start at ``origin_s``."""
        path = CPath(spec, origin_s)
        pumps = {name: CPump(path, name, *fds[name]) for name in fds}
        return cls(
            spec,
            path,
            pumps,
            early_s=early_s,
            coalesce_s=coalesce_s,
            vnet_hdr=vnet_hdr,
            gro=gro,
            stamps=stamps,
        )

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        del loop  # the packets never touch the event loop
        pumps = [(DIRECTION_INDEX[n], p.in_fd, p.out_fd) for n, p in self.pumps.items()]
        self.path.native.start(
            pumps,
            self.early_s,
            self.dense_gap_s,
            self.coalesce_s,
            self.vnet_hdr,
            self.gro,
            self.stamps,
        )

    def stop(self) -> None:
        self.path.native.stop()

    def add_event(self, event: ScheduledEvent) -> ScheduledEvent:
        for name in self.pumps:
            if getattr(self.spec, name).rate_trace is not None:
                refuse_rate_events(name, [event])
        self.path.add_event(len(self.events), event)
        self.events.append(event)
        return event

    def _check_thread(self) -> None:
        """Say once on stderr (the link's log) if the packet thread stopped reading a side."""
        error = self.path.native.error()
        if error and error != self._reported_error:
            print(f"emulator: error: packet thread: {error}", file=sys.stderr, flush=True)
            self._reported_error = error

    def cmd_stats(self, request: dict[str, Any]) -> dict[str, Any]:
        self._check_thread()
        now = time.monotonic()
        air = self.path.air_stats(now)
        return {
            "time_s": now,
            "directions": {n: asdict(self.path.stats(n)) for n in self.pumps},
            "cpu": asdict(cpu_snapshot()),
            "air": None if air is None else air.to_dict(),
        }

    def cmd_set_spec(self, request: dict[str, Any]) -> dict[str, Any]:
        """at_s: the parent's time, so both processes' traces agree (as the Python path)."""
        spec = LinkSpec.from_dict(request.get("spec") or {})
        at_s = time_arg(request, "at_s")
        for name in self.pumps:  # a capacity trace while a rate event is in force or to come
            if getattr(spec, name).rate_trace is not None:
                refuse_rate_events(name, [e for e in self.events if e.end_s > at_s])
        self.path.set_spec(spec, at_s)
        self.spec = spec
        return {"trace": self.trace_info()}

    def trace_info(self) -> dict[str, Any]:
        return {name: self.path.trace_info(name) for name in self.pumps}

    def cmd_end_events(self, request: dict[str, Any]) -> dict[str, Any]:
        changed = end_events(self.events, end_time_arg(request))
        for event in changed:
            self.path.set_event_end(self.events.index(event), event.end_s)
        return {"ended": len(changed)}

    def cmd_path(self, request: dict[str, Any]) -> dict[str, Any]:
        return {
            "path": "c",
            "offload": self.vnet_hdr,
            "coalesce_s": self.coalesce_s,
            "gro": self.gro,
            "stamps": self.stamps_state(),
            "counters": self.path.native.loop_counters(),
        }

    def stamps_state(self) -> str:
        """``kernel``, ``off`` (not asked for) or ``read: <why the kernel refused>``."""
        if not self.stamps:
            return "off"
        on, why = self.path.native.stamps()
        return "kernel" if on else f"read: {why}"

    def cmd_events(self, request: dict[str, Any]) -> dict[str, Any]:
        for index, event in enumerate(self.events):
            self.path.fill_drops(index, event)
        return super().cmd_events(request)
