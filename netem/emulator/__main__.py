"""The userspace link emulator process: ``python -m netem.emulator``.

Contract with the topology (netem/backends, the userspace backend)
==================================================================

Before starting the process, the topology creates, in each of the client and server
namespaces, a persistent TUN device named ``tb-eth`` (``IFF_TUN | IFF_NO_PI``, not
multi-queue), with the MTU of the spec, the address (198.18.1.2/24 client, 198.18.2.2/24
server, :mod:`netem.names`), a route to the peer's /24 over the device, offloads off (the C
path's ``--offload on`` switches TSO back on and cuts what it gets, see below), and
the device up. Then it runs::

    python -m netem.emulator --name NAME \\
        --client-ns tb-NAME-client --server-ns tb-NAME-server --device tb-eth \\
        --spec-json '<json.dumps(LinkSpec.to_dict())>' \\
        --control /run/testbed/links/NAME.sock \\
        [--pid-file /run/testbed/links/NAME.pid] [--ready-fd FD] [--processes 1|2]
        [--client-device DEV --server-device DEV] [--events-json '[...]']

A multi-link topology (:mod:`netem.topologyspec`) runs one such process per edge, its
"client" and "server" being the edge's two ends (``--client-ns tb-NAME-relay
--client-device tb-link``, say) and its control socket ``/run/testbed/links/NAME.EDGE.sock``.

and waits until it is ready: either ``EmulatorClient(path).wait_ready(timeout_s)``
(:mod:`netem.emulator.control`) answers, or, with ``--ready-fd FD`` (a pipe's write end,
passed with ``pass_fds``), the line ``ready`` arrives on the pipe; EOF without it means
the process failed, and its stderr says why in one line (``emulator: error: field:
reason``, exit status 2 for bad input, 1 for a failure to attach).

The process
-----------
* attaches to both TUN devices by entering each namespace while opening /dev/net/tun
  (:func:`netem.emulator.tun.open_tun`), and waits until both are operationally up
  (:func:`netem.emulator.tun.wait_running`: until the kernel's link watch has seen the
  carrier, a TUN device drops what is sent to it), so that ``ready`` means packets flow;
* writes its pid to the pid file (default ``<control without .sock>.pid``, i.e.
  ``/run/testbed/links/NAME.pid``);
* is findable by ``testbed clean``: its command line contains ``netem.emulator`` and
  ``tb-NAME-client``; its ``comm`` (thread name) is ``tb-NAME-emu`` (and ``tb-NAME-dn``
  for the second process with ``--processes 2``). Killing the pid in the pid file is
  enough: the second process, if any, gets SIGTERM when its parent dies
  (``PR_SET_PDEATHSIG``);
* moves packets read from the client TUN through the ``up`` direction of the spec to the
  server TUN, and server -> client through ``down`` (:mod:`netem.emulator.core`);
* runs until SIGTERM, SIGINT or the ``shutdown`` command; then stops a running capture
  and packet log and writes their files, prints the final stats as one JSON line on
  stdout, removes the pid file and the socket, and exits 0.

Options with measured defaults
------------------------------
``--path c|python`` (default c)
    Which per-packet path moves the packets: the C path (:mod:`netem.emulator.cengine`,
    ``csrc/``: a packet thread of its own, batched reads timed by the kernel's arrival
    stamps, one timerfd for both directions on a coalescing grid, no allocation per packet
    once warm) or the Python reference
    (:mod:`netem.emulator.engine` around :mod:`netem.emulator.core`). Both run the same
    pipeline on the same generators; tests/test_emulator_cpath.py holds them equal packet
    for packet. The control socket, the stats, the capture and the packet log are the same.
``--offload on|off`` (C path, default on)
    Attach with ``IFF_VNET_HDR`` and switch TSO back on (the topology switches it off): the
    senders' stacks hand over TCP super-packets of up to 64 KB, which the C path cuts into
    wire-sized segments (as the kernel's GSO would) before the loss draw, so every segment
    meets the loss model, the queue and the clock on its own. One read instead of up to 44,
    and the sender's stack (which runs in the emulator's ``write()`` of each ACK) builds one
    skb instead of 44.
``--coalesce-us`` (C path, default 300)
    On dense traffic the one timerfd fires at most once per this period after the last
    wake-up, for both directions, and each wake-up releases everything due: each packet at
    most that much late (:data:`netem.emulator.options.DEFAULT_COALESCE_S`).
``--gro on|off`` (C path with offloads, default off), ``--stamps on|off`` (C path,
default on: arrival times from the kernel, :data:`netem.emulator.options.STAMPS_DOC`)
    The segments of one TCP flow that one wake-up releases together reach the receiving
    stack as one super-packet, as a NIC's GRO hands them up; the link, its log and its
    capture see segments only (:data:`netem.emulator.options.GRO_DOC`).
``--processes 1|2`` (default 1)
    2 runs the ``down`` direction in a forked second process, so the two directions can
    use both cores; the parent serves the control socket and forwards every command to
    it. Measured on this 2-core VM (kernel TCP cubic, 333 Mbit/s, 20 ms, 3 alternating
    rounds, load average 3-5 from other tests, no steal): one process 331.2, 332.7,
    332.4 Mbit/s (IP rate) at 0.82-0.85 cores; two processes 333.0, 333.0, 330.9 at
    1.09-1.17 cores. No gain for 0.3 cores more, which the endpoints on the same two
    cores need, so one process is the default. The prototype's gain from two (NOTES:
    under heavy steal) was not reproducible without steal; ``--processes 2`` is there to
    re-measure it when steal is high.
``--sched fifo|nice|normal`` (default fifo)
    SCHED_FIFO priority 10: the emulator runs before any normal process (endpoints, other
    tests) when a packet is due, so the host's load shows up as the endpoints' slowness,
    as on a real slow host, not as link lateness. Without CAP_SYS_NICE (a container) it
    warns on stderr and runs unprioritised.
``--early-us`` (default 80)
    The timerfd fires this long before a departure on sparse traffic and the rest is
    spun (:mod:`netem.emulator.engine`).

Control commands (JSON lines; :class:`netem.emulator.control.EmulatorClient` has a
method for each)
------------------------------------------------------------------------------------
``{"cmd": "ping"}``
    ``{}``: the emulator is up.
``{"cmd": "stats"}``
    ``LinkStats.to_dict()`` (:mod:`netem.stats`): per direction cumulative packets and
    bytes in and out, dropped by loss and by the queue, realised loss, the lateness
    histogram (fixed bins, so two snapshots subtract and quantiles of the difference are
    computable), maximum backlog in bytes and packets; the emulator's CPU seconds (user,
    system, summed over its processes) and the host's busy/steal/total seconds from
    /proc/stat; ``time_s`` on CLOCK_MONOTONIC; on an ``air=`` link, ``air``: the shared
    medium's frames, IP bytes and busy nanoseconds per direction and frame kind, exchanges,
    waiting time and refused frames (:class:`netem.stats.AirStats`). An ``air=`` link runs
    in one process (its medium is shared by both directions): ``--processes 2`` is refused.
``{"cmd": "set_spec", "spec": LinkSpec.to_dict()}``
    Change the link live (between runs): rate, queue limit, delay, jitter, loss, traces;
    the loss and jitter generators restart from the new seeds, the traces from their
    offsets. Packets already in flight keep their schedule. ``mtu_bytes`` is the device's,
    which only the topology can change. Returns ``{"trace": ...}`` as ``trace`` does.
``{"cmd": "trace"}``
    ``{"trace": {"up": info or null, "down": ...}}``: per direction with a trace, its
    clock and files (:meth:`netem.emulator.core.LinkDirection.trace_info`): ``origin_s``
    (CLOCK_MONOTONIC when the traces were at their offset: link up or the last
    ``set_spec``), ``offset_s``, ``rate_trace`` and ``delay_trace`` (path, sha256, kind),
    ``delay_interp``. A trace's position at time t is ``offset_s + t - origin_s``.
``{"cmd": "capture_start", "dir": PATH, "snaplen": 128}``
    Record every packet at both ends: ``PATH/client.pcap`` (what the client's TUN sent
    and received) and ``PATH/server.pcap``; nanosecond pcap (magic 0xa1b23c4d), raw IP.
    Records are buffered in memory and written at ``capture_stop``.
``{"cmd": "capture_stop"}``
    Writes the files; returns ``{"client": {"path", "records", "dropped"}, "server": ...,
    "offset_ns"}`` (pcap time = CLOCK_MONOTONIC + offset_ns).
``{"cmd": "packet_log_start", "dir": PATH}`` / ``{"cmd": "packet_log_stop"}``
    Log every packet (:mod:`netem.emulator.packetlog`): ``PATH/packets-up.csv`` and
    ``PATH/packets-down.csv``, written at stop.
``{"cmd": "event", "event": LinkEvent.to_dict(), ["base_s": T]}``
    Schedule an outage or a rate change (:mod:`netem.events`) ``event.at_s`` after
    ``base_s`` (CLOCK_MONOTONIC; default: now). Returns the ``ScheduledEvent`` with its
    absolute ``start_s``/``end_s``.
``{"cmd": "end_events"}``
    End every event still running now (cancel those not begun): an outage "until told".
``{"cmd": "events"}``
    ``{"events": [ScheduledEvent.to_dict(), ...]}``: every event so far, with the packets
    each outage dropped per direction.
``{"cmd": "path"}``
    Which packet path moves the packets (``{"path": "python"}``, or ``{"path": "c",
    "offload": ..., "coalesce_s": ..., "gro": ..., "counters": {...}}`` with the C thread's
    wake-ups, reads, super-packets cut, writes, and GRO packets written and the segments
    they carried so far).
``{"cmd": "shutdown"}``
    Clean exit, as on SIGTERM.

``--events-json '[LinkEvent.to_dict(), ...]'`` schedules events relative to the moment the
emulator is ready (link up).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import json
import math
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import uvloop

from netem.emulator import control, cpath
from netem.emulator.cengine import CEngine
from netem.emulator.clock import set_thread_name, set_timer_slack_ns
from netem.emulator.core import LinkDirection
from netem.emulator.engine import DEFAULT_EARLY_S, DirectionPump, Engine
from netem.emulator.medium import make_cores
from netem.emulator.options import (
    DEFAULT_COALESCE_S,
    DEFAULT_PATH,
    MAX_COALESCE_S,
    PATHS,
    EmulatorOptions,
)
from netem.emulator.pcap import write_merged
from netem.emulator.tun import open_tun, wait_running
from netem.events import LinkEvent, ScheduledEvent
from netem.linkspec import LinkSpec
from netem.names import DEVICE_IN_NS, check_link_name
from netem.stats import AirStats, CpuStats, DirectionStats, LinkStats
from tbcore.errors import SpecError

EXIT_BAD_INPUT = 2
EXIT_FAILURE = 1
PR_SET_PDEATHSIG = 1
"""linux/prctl.h: signal sent to this process when its parent dies."""
MEASURED = ("counters", "lateness", "backlog", "cpu")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m netem.emulator", description=__doc__)
    parser.add_argument("--name", required=True, help="link name (tb-NAME-...)")
    parser.add_argument("--client-ns", required=True)
    parser.add_argument("--server-ns", required=True)
    parser.add_argument("--device", default=DEVICE_IN_NS, help="TUN device in both namespaces")
    parser.add_argument("--client-device", help="TUN device on the up side (default --device)")
    parser.add_argument("--server-device", help="TUN device on the down side (default --device)")
    parser.add_argument("--spec-json", required=True, help="LinkSpec.to_dict() as JSON")
    parser.add_argument("--control", required=True, type=Path, help="control socket path")
    parser.add_argument("--pid-file", type=Path, help="default: the control path with .pid")
    parser.add_argument("--ready-fd", type=int, help="write 'ready' to this fd when ready")
    parser.add_argument("--processes", type=int, choices=(1, 2), default=1)
    parser.add_argument("--events-json", help="[LinkEvent.to_dict(), ...], from ready on")
    parser.add_argument(
        "--sched",
        choices=SCHED_POLICIES,
        default=DEFAULT_SCHED,
        help="CPU scheduling of the emulator: fifo (real-time), nice (-20) or normal",
    )
    parser.add_argument(
        "--path",
        choices=PATHS,
        default=None,
        help="the per-packet path: c (netem/emulator/csrc) or python (the reference core); "
        "default c",
    )
    parser.add_argument(
        "--offload",
        choices=("on", "off"),
        default=None,
        help="C path only: take TCP super-packets from the senders (TSO, IFF_VNET_HDR) and "
        "cut them into segments before the loss draw (default on)",
    )
    parser.add_argument(
        "--coalesce-us",
        type=float,
        default=None,
        help="C path only: on dense traffic, at most one timer wake-up per direction per this "
        f"many µs (default {DEFAULT_COALESCE_S * 1e6:g}, at most {MAX_COALESCE_S * 1e6:g})",
    )
    parser.add_argument(
        "--gro",
        choices=("on", "off"),
        default=None,
        help="C path with offloads only: hand the receiving stack the segments of one TCP "
        "flow released together as one super-packet, as a NIC's GRO (default off)",
    )
    parser.add_argument(
        "--stamps",
        choices=("on", "off"),
        default=None,
        help="C path only: take packets' arrival times from the kernel (an eBPF program on "
        "the TUN device) and read a direction only at wake-ups where that changes nothing "
        "(default on; off where the kernel refuses, and the link says why)",
    )
    parser.add_argument(
        "--early-us",
        type=float,
        default=DEFAULT_EARLY_S * 1e6,
        help="wake this long before a departure and spin the rest (µs)",
    )
    return parser


def check_path_options(args: argparse.Namespace, spec: LinkSpec) -> None:
    """``--offload`` and ``--coalesce-us`` belong to the C path, which must be built."""
    if args.coalesce_us is not None and not math.isfinite(args.coalesce_us):
        raise SpecError("coalesce-us", f"must be finite, got {args.coalesce_us!r}")
    flags = {"emulator.path": "path", "emulator.offload": "offload", "emulator.gro": "gro"}
    flags["emulator.stamps"] = "stamps"
    flags["emulator.coalesce_s"] = "coalesce-us"
    try:
        EmulatorOptions(
            path=args.path,
            offload=None if args.offload is None else args.offload == "on",
            coalesce_s=None if args.coalesce_us is None else args.coalesce_us * 1e-6,
            gro=None if args.gro is None else args.gro == "on",
            stamps=None if args.stamps is None else args.stamps == "on",
        )
    except SpecError as err:  # named by the command-line option
        raise SpecError(flags.get(err.field, err.field), err.reason) from None
    if args.path is None:
        args.path = DEFAULT_PATH
    if args.path == "python":
        return
    cpath.require()
    if spec.air is not None:
        cpath.medium_args(spec.air)  # what the C medium cannot gather is refused here
    if args.offload is None:
        args.offload = "on"
    if args.gro is None:
        args.gro = "off"
    if args.stamps is None:
        args.stamps = "on"
    if args.coalesce_us is None:
        args.coalesce_us = DEFAULT_COALESCE_S * 1e6


SCHED_POLICIES = ("fifo", "nice", "normal")
DEFAULT_SCHED = "fifo"
SCHED_FIFO_PRIORITY = 10
"""Low among real-time priorities (1-99): above every normal process (the endpoints, other
tests), below the kernel's own real-time threads. The kernel's RT throttling
(``sched_rt_runtime_us``, 95 % by default) keeps a runaway emulator from locking a CPU."""


def set_scheduling(policy: str) -> None:
    """Give the emulator the CPU first: its lateness is the link's fidelity."""
    if policy == "fifo":
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(SCHED_FIFO_PRIORITY))
    elif policy == "nice":
        os.setpriority(os.PRIO_PROCESS, 0, -20)


def _load_json_arg(text: str, option: str, kind: type, shape: str) -> Any:
    """The JSON value of command-line option ``option``, which must be a ``kind``
    (SpecError naming the option, and saying ``shape``, otherwise)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise SpecError(option, f"not JSON: {err}") from None
    if not isinstance(data, kind):
        raise SpecError(option, f"must be {shape}")
    return data


def load_spec(text: str) -> LinkSpec:
    data = _load_json_arg(text, "spec-json", dict, "a JSON object (LinkSpec.to_dict())")
    return LinkSpec.from_dict(data)


def make_engine(
    args: argparse.Namespace,
    spec: LinkSpec,
    fds: dict[str, tuple[int, int]],
    early_s: float,
    origin_s: float,
) -> Engine:
    """The engine of the directions in ``fds`` (name: (in_fd, out_fd)), on the packet path
    ``args.path`` asked for: the C thread, or asyncio pumps around the Python core (whose
    traces start at ``origin_s``)."""
    if args.path == "c":
        return CEngine.build(
            spec,
            fds,
            early_s=early_s,
            coalesce_s=args.coalesce_us * 1e-6,
            vnet_hdr=args.offload == "on",
            gro=args.gro == "on",
            stamps=args.stamps == "on",
            origin_s=origin_s,
        )
    if set(fds) == {"up", "down"}:
        cores = make_cores(spec, origin_s)  # an air= link's directions share its medium
    else:
        cores = {
            name: LinkDirection(name, getattr(spec, name), spec.queue_limit_bytes(name), origin_s)
            for name in fds
        }
    pumps = {
        name: DirectionPump(cores[name], in_fd, out_fd, early_s=early_s)
        for name, (in_fd, out_fd) in fds.items()
    }
    return Engine(spec, pumps)


FULL_GC_EVERY_REQUESTS = 64
"""Control requests between full collections (about 0.3-1 ms with a 200 ms delay line full
of packets, visible in the lateness histogram); the others collect generations 0-1 only
(microseconds)."""


def quiet_gc() -> None:
    """No collector pauses on the packet path: everything alive now is frozen out of its
    reach and automatic collection is off. The control handler collects after each request
    instead (see :func:`collect_after_request`): requests come between runs."""
    gc.collect()
    gc.freeze()
    gc.disable()


_requests_served = 0


def collect_after_request() -> None:
    """Free the cycles a control exchange leaves (asyncio streams): young generations
    each time, everything every :data:`FULL_GC_EVERY_REQUESTS` requests."""
    global _requests_served
    _requests_served += 1
    full = _requests_served % FULL_GC_EVERY_REQUESTS == 0
    gc.collect(2 if full else 1)


def merge_events(mine: list[dict], theirs: list[dict]) -> list[dict]:
    """The events of both processes (same order, same times): drop counts added up."""
    out = []
    for a, b in zip(mine, theirs, strict=False):
        event = ScheduledEvent.from_dict(a)
        for direction, count in ScheduledEvent.from_dict(b).dropped_packets.items():
            event.dropped_packets[direction] = event.dropped_packets.get(direction, 0) + count
        out.append(event.to_dict())
    return out


def load_events(text: str | None) -> list[LinkEvent]:
    if not text:
        return []
    data = _load_json_arg(text, "events-json", list, "a JSON list of events")
    return [LinkEvent.from_dict(item) for item in data]


class ChildLink:
    """The parent's end of the socket pair to the process that runs the other direction."""

    def __init__(self, sock: socket.socket, pid: int) -> None:
        self.sock = sock
        self.pid = pid
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()

    async def request(self, request: dict[str, Any]) -> dict[str, Any]:
        async with self._lock:
            if self._writer is None:
                self._reader, self._writer = await asyncio.open_unix_connection(
                    sock=self.sock, limit=control.MAX_LINE_BYTES
                )
            assert self._reader is not None
            self._writer.write(control.encode(request))
            await self._writer.drain()
            line = await self._reader.readline()
        if not line:
            raise OSError(f"direction process {self.pid} closed its channel")
        reply = json.loads(line)
        if not reply.get("ok"):
            field, _, reason = str(reply.get("error")).partition(": ")
            raise SpecError(field, reason or "refused by the direction process")
        return reply["result"]

    def wait(self, timeout_s: float = 5.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pid, _ = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return
            time.sleep(0.01)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


class Emulator:
    """The parent process: its own pumps, the control socket, and the child, if any."""

    def __init__(self, engine: Engine, child: ChildLink | None) -> None:
        self.engine = engine
        self.child = child
        self.stop = asyncio.Event()
        self._capture_dir: Path | None = None
        self._snaplen = 0
        self._offset_ns = 0

    async def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self._handle(request)
        finally:
            collect_after_request()

    def resolve_event(self, request: dict[str, Any]) -> dict[str, Any]:
        """Turn an ``event`` request into absolute times, once, for both processes."""
        if "scheduled" in request:
            return request
        event = LinkEvent.from_dict(request.get("event"))
        base_s = request.get("base_s")
        if base_s is None:
            base_s = time.monotonic()
        elif isinstance(base_s, bool) or not isinstance(base_s, (int, float)):
            raise SpecError("base_s", f"must be CLOCK_MONOTONIC seconds, got {base_s!r}")
        scheduled = event.resolve(float(base_s), index=len(self.engine.events))
        return {"cmd": "event", "scheduled": scheduled.to_dict()}

    async def _handle(self, request: dict[str, Any]) -> dict[str, Any]:
        cmd = request.get("cmd")
        if cmd == "event":
            request = self.resolve_event(request)
        if cmd in ("end_events", "set_spec") and "at_s" not in request:
            request = {**request, "at_s": time.monotonic()}
        local = self.engine.handle(request)
        if cmd == "capture_start":  # one clock offset for both processes' records
            request = {**request, "offset_ns": local["offset_ns"]}
        remote = await self.child.request(request) if self.child is not None else {}
        if cmd == "stats":
            directions = {**local["directions"], **remote.get("directions", {})}
            cpu = dict(local["cpu"])
            for key in ("user_s", "system_s"):
                cpu[key] += remote.get("cpu", {}).get(key, 0.0)
            stats = LinkStats(
                backend="userspace",
                time_s=local["time_s"],
                up=DirectionStats(**directions["up"]),
                down=DirectionStats(**directions["down"]),
                cpu=CpuStats(**cpu),
                measured=MEASURED,
                processes=1 if self.child is None else 2,
                air=None if local.get("air") is None else AirStats.from_dict(local["air"]),
            )
            return stats.to_dict()
        if cmd == "capture_start":
            self._capture_dir = self.engine.capture_dir
            self._snaplen = local["snaplen"]
            self._offset_ns = local["offset_ns"]
            return local
        if cmd == "capture_stop":
            return self._merge_capture({**local, **remote})
        if cmd == "packet_log_stop":
            return {**local, **remote}
        if cmd == "path" and "counters" in remote:
            counters = {k: v + remote["counters"].get(k, 0) for k, v in local["counters"].items()}
            return {**local, "counters": counters}
        if cmd == "events" and remote:
            return {"events": merge_events(local["events"], remote["events"])}
        if cmd in ("set_spec", "trace") and remote:
            return {"trace": {**local["trace"], **remote["trace"]}}
        if cmd == "shutdown":
            self.stop.set()
        return local

    def _merge_capture(self, parts: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
        """Merge the per-direction part files into ``client.pcap`` and ``server.pcap``."""
        assert self._capture_dir is not None
        result: dict[str, Any] = {}
        for end in ("client", "server"):
            paths = [Path(p[end]["part"]) for p in parts.values() if end in p]
            bodies = [path.read_bytes() for path in paths]
            target = self._capture_dir / f"{end}.pcap"
            records = write_merged(target, self._snaplen, bodies)
            for path in paths:
                path.unlink()
            dropped = sum(p[end]["dropped"] for p in parts.values() if end in p)
            result[end] = {"path": str(target), "records": records, "dropped": dropped}
        self._capture_dir = None
        result["offset_ns"] = self._offset_ns
        return result

    async def finish(self) -> dict[str, Any]:
        """Flush a running capture or log, take the final stats, stop the child."""
        if self.engine.capture_dir is not None:
            with contextlib.suppress(SpecError, OSError):
                await self._handle({"cmd": "capture_stop"})
        if self.engine.log_dir is not None:
            with contextlib.suppress(SpecError, OSError):
                await self._handle({"cmd": "packet_log_stop"})
        final = await self._handle({"cmd": "stats"})
        if self.child is not None:
            with contextlib.suppress(SpecError, OSError):
                await self.child.request({"cmd": "shutdown"})
        return final


async def run_parent(args: argparse.Namespace, engine: Engine, child: ChildLink | None) -> int:
    loop = asyncio.get_running_loop()
    emulator = Emulator(engine, child)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, emulator.stop.set)
    engine.start(loop)
    server = await control.start_server(emulator.handle, args.control)
    base_s = time.monotonic()
    for event in args.events:  # the link's own schedule: from ready on
        await emulator._handle({"cmd": "event", "event": event.to_dict(), "base_s": base_s})
    if args.ready_fd is not None:
        os.write(args.ready_fd, b"ready\n")
        os.close(args.ready_fd)
    quiet_gc()
    try:
        await emulator.stop.wait()
    finally:
        server.close()
        engine.stop()
        final = await emulator.finish()
        print(json.dumps({"final_stats": final}), flush=True)
    return 0


async def run_child(engine: Engine, sock: socket.socket) -> None:
    """The second process: its pumps and the channel to the parent, until told to stop."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    engine.start(loop)
    reader, writer = await asyncio.open_unix_connection(sock=sock, limit=control.MAX_LINE_BYTES)

    async def handle(request: dict[str, Any]) -> dict[str, Any]:
        try:
            result = engine.handle(request)
        finally:
            collect_after_request()
        if request.get("cmd") == "shutdown":
            stop.set()
        return result

    async def serve() -> None:
        while not stop.is_set():
            line = await reader.readline()
            if not line:
                break
            writer.write(control.encode(await control.answer(handle, line)))
            await writer.drain()
        stop.set()

    quiet_gc()
    task = asyncio.create_task(serve())
    await stop.wait()
    task.cancel()
    engine.stop()
    # a capture or log left running by a parent that died is written where it was asked
    with contextlib.suppress(SpecError, OSError):
        if engine.capture_dir is not None:
            engine.handle({"cmd": "capture_stop"})
        if engine.log_dir is not None:
            engine.handle({"cmd": "packet_log_stop"})


def fork_child(
    args: argparse.Namespace,
    spec: LinkSpec,
    client_fd: int,
    server_fd: int,
    early_s: float,
    origin_s: float,
) -> tuple[ChildLink, int]:
    parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:  # the child: the down direction
        status = 0
        try:
            parent_sock.close()
            if args.ready_fd is not None:
                os.close(args.ready_fd)  # only the parent says ready
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
            if os.getppid() == 1:
                os._exit(0)
            set_thread_name(f"tb-{args.name}-dn")
            engine = make_engine(args, spec, {"down": (server_fd, client_fd)}, early_s, origin_s)
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(run_child(engine, child_sock))
        except BaseException as err:  # the child must never return into the parent's code
            print(f"emulator: error: down process: {err}", file=sys.stderr)
            status = EXIT_FAILURE
        finally:
            os._exit(status)
    child_sock.close()
    return ChildLink(parent_sock, pid), pid


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        name = check_link_name(args.name)
        spec = load_spec(args.spec_json)
        args.events = load_events(args.events_json)
        if not math.isfinite(args.early_us) or args.early_us < 0:
            raise SpecError("early-us", f"must be finite and >= 0, got {args.early_us!r}")
        if spec.air is not None and args.processes != 1:
            raise SpecError("processes", "an air= link shares one medium: it runs in one process")
        check_path_options(args, spec)
    except SpecError as err:
        print(f"emulator: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    set_thread_name(f"tb-{name}-emu")
    set_timer_slack_ns(1)
    try:
        set_scheduling(args.sched)
    except OSError as err:  # a container without CAP_SYS_NICE: run, and say so
        print(
            f"emulator: warning: sched: {args.sched}: {err.strerror}; running unprioritised "
            "(lateness will show it)",
            file=sys.stderr,
        )
    pid_file = args.pid_file or args.control.with_suffix(".pid")
    try:
        client_device = args.client_device or args.device
        server_device = args.server_device or args.device
        vnet_hdr = args.path == "c" and args.offload == "on"
        client_fd = open_tun(client_device, args.client_ns, vnet_hdr=vnet_hdr)
        server_fd = open_tun(server_device, args.server_ns, vnet_hdr=vnet_hdr)
        for device, netns in ((client_device, args.client_ns), (server_device, args.server_ns)):
            wait_running(device, netns)
    except SpecError as err:
        print(f"emulator: error: {err}", file=sys.stderr)
        return EXIT_FAILURE
    early_s = args.early_us * 1e-6
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(f"{os.getpid()}\n")
    child: ChildLink | None = None
    origin_s = time.monotonic()  # the traces' origin until a set_spec: one for both processes
    try:
        fds = {"up": (client_fd, server_fd), "down": (server_fd, client_fd)}
        if args.processes == 2:
            child, _ = fork_child(args, spec, client_fd, server_fd, early_s, origin_s)
            del fds["down"]
        engine = make_engine(args, spec, fds, early_s, origin_s)
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(run_parent(args, engine, child))
    finally:
        if child is not None:
            child.wait()
        for path in (args.control, pid_file):
            with contextlib.suppress(FileNotFoundError):
                if path == pid_file and path.read_text().strip() != str(os.getpid()):
                    continue
                path.unlink()
        os.close(client_fd)
        os.close(server_fd)


if __name__ == "__main__":
    sys.exit(main())
