"""The userspace backend: persistent TUN devices in the client and server namespaces, and the
emulator process (``python -m netem.emulator``, see its module docstring for the contract)
moving packets between them.

The emulator runs as a daemon: its own session (so Ctrl-C at a terminal and the exit of
``testbed link up`` leave it alone), stdin from /dev/null, stdout and stderr appended to
``/run/testbed/links/NAME.log``. A multi-link topology (:mod:`netem.topologyspec`) runs one
emulator per edge (``NAME.EDGE.sock``/``.pid``/``.log``): each edge then has a core of its own
(a 333 Mbit/s long haul and a near hop do not share one process's CPU) and the one-link
emulator serves it unchanged. Link up waits for the line ``ready`` on a pipe
(``--ready-fd``); EOF without it means the emulator failed, and the log's last line says why.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from netem import names, topology
from netem.backends.base import (
    Backend,
    LinkState,
    commit_edge,
    edge_state,
    topology_of,
)
from netem.emulator.control import ControlError, EmulatorClient
from netem.emulator.options import EmulatorOptions
from netem.events import LinkEvent, ScheduledEvent
from netem.linkspec import LinkSpec
from netem.readiness import wait_for_marker
from netem.stats import LinkStats
from tbcore.errors import SpecError

READY_TIMEOUT_S = 90.0
"""How long the emulator may take to attach and answer (the VM guest runs Python ~17x slower:
the import alone takes seconds there)."""

STOP_TIMEOUT_S = 10.0
"""How long a clean shutdown may take (it writes a running capture) before SIGKILL."""

CONTROL_TIMEOUT_S = 30.0

_DAEMONS: dict[int, subprocess.Popen] = {}
"""Emulators this process started, kept so that Python does not warn about (or lose track
of) a child still running when its Popen object would otherwise be collected."""


def links_dir() -> Path:
    return names.STATE_DIR / "links"


def _stem(link: str, edge_short: str | None) -> str:
    """``NAME``, or ``NAME.EDGE`` for one edge's emulator of a multi-link topology."""
    name = names.check_link_name(link)
    return name if edge_short is None else f"{name}.{edge_short}"


def control_path(link: str, edge_short: str | None = None) -> Path:
    return links_dir() / f"{_stem(link, edge_short)}.sock"


def pid_path(link: str, edge_short: str | None = None) -> Path:
    return links_dir() / f"{_stem(link, edge_short)}.pid"


def log_path(link: str, edge_short: str | None = None) -> Path:
    return links_dir() / f"{_stem(link, edge_short)}.log"


def emulator_argv(
    state: LinkState,
    *,
    ready_fd: int | None = None,
    edge_short: str | None = None,
    devices: tuple[str, str] | None = None,
    events: list[LinkEvent] | None = None,
) -> list[str]:
    """The emulator's command line (the contract in netem/emulator/__main__.py); with
    ``edge_short`` and ``devices`` the one of an edge of a multi-link topology."""

    argv = [
        sys.executable,
        "-m",
        "netem.emulator",
        "--name",
        state.name,
        "--client-ns",
        state.client_ns,
        "--server-ns",
        state.server_ns,
        "--device",
        names.DEVICE_IN_NS,
        "--spec-json",
        json.dumps(state.spec.to_dict(), separators=(",", ":")),
        "--control",
        str(control_path(state.name, edge_short)),
        "--pid-file",
        str(pid_path(state.name, edge_short)),
    ]
    if devices is not None:
        argv += ["--client-device", devices[0], "--server-device", devices[1]]
    argv += EmulatorOptions.from_dict(state.extra.get("emulator", {})).argv()
    if events:
        argv += ["--events-json", json.dumps([e.to_dict() for e in events])]
    if ready_fd is not None:
        argv += ["--ready-fd", str(ready_fd)]
    return argv


def process_start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks), None if there is no such pid."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(text.rpartition(")")[2].split()[19])


def process_alive(pid: int, start_ticks: int | None = None) -> bool:
    """True if ``pid`` runs (not a zombie) and, when given, started at ``start_ticks``."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our child and has exited
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone (ENOENT, ESRCH)
        return False
    after = text.rpartition(")")[2].split()
    if after[0] in ("Z", "X"):
        return False
    return start_ticks is None or int(after[19]) == start_ticks


def wait_gone(pid: int, start_ticks: int | None, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while process_alive(pid, start_ticks):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def stop_process(pid: int, start_ticks: int | None, *, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM, then SIGKILL if it has not exited in ``timeout_s``; reaps our children."""
    if not process_alive(pid, start_ticks):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if wait_gone(pid, start_ticks, timeout_s):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    wait_gone(pid, start_ticks, timeout_s)


def _log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except FileNotFoundError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"


class UserspaceBackend(Backend):
    name = "userspace"

    @classmethod
    def probe(cls) -> tuple[bool, str]:
        if os.geteuid() != 0:
            return False, "not root: TUN devices and namespaces need CAP_NET_ADMIN"
        if not os.path.exists(topology.TUN_DEVICE_PATH):
            return False, f"{topology.TUN_DEVICE_PATH} missing (modprobe tun)"
        return True, "TUN emulator (python -m netem.emulator)"

    def up(self, state: LinkState) -> None:
        topo = topology_of(state)
        if topo is None:
            topology.build_tun_path(state.name, mtu_bytes=state.spec.mtu_bytes)
            schedule = [LinkEvent.from_dict(e) for e in state.extra.get("schedule", [])]
            self._start_emulator(state, events=schedule)
            return
        topology.build_topology_tun(state.name, topo, mtu_bytes=state.spec.mtu_bytes)
        for edge in topo.edges:  # one emulator per edge (see the module docstring)
            view = edge_state(state, edge.name)
            if "emulator" in state.extra:  # the packet path asked for, on every edge
                view.extra["emulator"] = state.extra["emulator"]
            try:
                self._start_emulator(
                    view,
                    edge_short=edge.short,
                    devices=(topo.device(edge.a, edge.name), topo.device(edge.b, edge.name)),
                    events=list(edge.events),
                )
            finally:
                commit_edge(state, edge.name, view)
        main = edge_state(state, "link")
        state.emulator_pid = main.emulator_pid
        state.emulator_start_ticks = main.emulator_start_ticks
        state.control_path = main.control_path
        state.log_path = main.log_path

    def _start_emulator(
        self,
        state: LinkState,
        *,
        edge_short: str | None = None,
        devices: tuple[str, str] | None = None,
        events: list[LinkEvent] | None = None,
    ) -> None:
        links_dir().mkdir(parents=True, exist_ok=True)
        log = log_path(state.name, edge_short)
        state.log_path = str(log)
        state.control_path = str(control_path(state.name, edge_short))
        read_end, write_end = os.pipe()
        try:
            with open(log, "ab") as log_file:
                log_file.write(f"--- link up {state.name} at {state.created_at}\n".encode())
                log_file.flush()
                proc = subprocess.Popen(
                    emulator_argv(
                        state,
                        ready_fd=write_end,
                        edge_short=edge_short,
                        devices=devices,
                        events=events,
                    ),
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=log_file,
                    pass_fds=(write_end,),
                    start_new_session=True,
                    close_fds=True,
                )
            os.close(write_end)
            write_end = -1
            _DAEMONS[proc.pid] = proc
            state.emulator_pid = proc.pid
            state.emulator_start_ticks = process_start_ticks(proc.pid)
            self._wait_ready(read_end, proc, log)
        finally:
            os.close(read_end)
            if write_end >= 0:
                os.close(write_end)

    @staticmethod
    def _wait_ready(read_end: int, proc: subprocess.Popen, log: Path) -> None:
        result = wait_for_marker(read_end, b"ready", time.monotonic() + READY_TIMEOUT_S)
        if result.ready:
            return
        if result.eof:  # the emulator exited (or closed the pipe) without "ready"
            proc.poll()
            raise RuntimeError(
                f"emulator exited ({proc.returncode}) before it was ready: {_log_tail(log)}"
            )
        raise RuntimeError(f"emulator not ready after {READY_TIMEOUT_S:g} s: {_log_tail(log)}")

    def client(self, state: LinkState) -> EmulatorClient:
        if state.control_path is None:
            raise SpecError("link", f"{state.name} has no emulator control socket")
        return EmulatorClient(state.control_path, timeout_s=CONTROL_TIMEOUT_S)

    def down(self, state: LinkState) -> None:
        topo = topology_of(state)
        if topo is not None:
            for edge in topo.edges:
                self._stop_emulator(edge_state(state, edge.name))
            topology.remove_path(state.name)
            for edge in topo.edges:
                for path in (
                    control_path(state.name, edge.short),
                    pid_path(state.name, edge.short),
                ):
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
            return
        self._stop_emulator(state)
        topology.remove_path(state.name)
        for path in (control_path(state.name), pid_path(state.name)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def _stop_emulator(self, state: LinkState) -> None:
        pid = state.emulator_pid
        if pid is not None and process_alive(pid, state.emulator_start_ticks):
            with contextlib.suppress(ControlError, SpecError):
                self.client(state).shutdown()
            if not wait_gone(pid, state.emulator_start_ticks, STOP_TIMEOUT_S):
                stop_process(pid, state.emulator_start_ticks)
        if pid is not None and (proc := _DAEMONS.pop(pid, None)) is not None:
            proc.poll()  # reaped already (process_alive): poll records it, no warning at exit

    def set_spec(self, state: LinkState, spec: LinkSpec) -> dict[str, Any]:
        if spec.mtu_bytes != state.spec.mtu_bytes:
            raise SpecError("mtu_bytes", "the MTU of a link cannot change while it is up")
        if (spec.air is None) != (state.spec.air is None):
            raise SpecError("air", "a shared medium cannot come or go while the link is up")
        report = self.client(state).set_spec(spec)
        state.spec = spec
        return report

    def trace(self, state: LinkState) -> dict[str, Any]:
        return self.client(state).trace()

    def stats(self, state: LinkState) -> LinkStats:
        return self.client(state).stats()

    def schedule_event(
        self, state: LinkState, event: LinkEvent, base_s: float | None = None
    ) -> ScheduledEvent:
        return self.client(state).event(event, base_s)

    def events(self, state: LinkState) -> list[ScheduledEvent]:
        return self.client(state).events()

    def end_events(self, state: LinkState) -> int:
        return self.client(state).end_events()

    @contextlib.contextmanager
    def _capture(self, state: LinkState, directory: Path, snaplen_bytes: int) -> Iterator[None]:
        directory.mkdir(parents=True, exist_ok=True)
        client = self.client(state)
        client.capture_start(directory.resolve(), snaplen=snaplen_bytes)
        try:
            # the emulator's own record of each packet (scheduled and actual release): the
            # harness reads the lateness it added on a request's critical path from it
            client.packet_log_start(directory.resolve())
            try:
                yield
            finally:
                client.packet_log_stop()
        finally:
            client.capture_stop()

    def capture(self, state: LinkState, directory: Path, snaplen_bytes: int) -> Any:
        return self._capture(state, directory, snaplen_bytes)

    def describe(self, state: LinkState) -> dict[str, Any]:
        alive = state.emulator_pid is not None and process_alive(
            state.emulator_pid, state.emulator_start_ticks
        )
        info: dict[str, Any] = {
            "emulator_alive": alive,
            "control": state.control_path,
            "log": state.log_path,
        }
        if alive:  # the packet path and its knobs (GRO changes what the receivers ACK)
            with contextlib.suppress(ControlError, OSError):
                answer = self.client(state).request("path")
                info["emulator_path"] = {k: v for k, v in answer.items() if k != "counters"}
        return info
