"""Execution of one run: the link set for it, the server and the client started in their
namespaces with the run's settings document, the link's captures and counters around them.

What a run leaves in its directory is read by harness/collect/row.py; the CPU of the processes
is watched by the caller's watcher (``watch(name, pid)`` as the processes start).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.collect.row import LINK_STATS_FILE, QLOG_DIR, RUN_FILE
from harness.plan.planner import PlannedRun
from harness.run.progress import ProgressEvents
from harness.spec.experiment import ExperimentSpec
from harness.store.resultdir import ResultDir, atomic_write_json
from netem.linkspec import LinkSpec
from tbcore import kinds
from tbcore.processes import stop_process
from tbcore.settings import DEFAULT_INITCWND_SEGMENTS, Settings

SERVER_START_TIMEOUT_S = 30.0
SERVER_STOP_TIMEOUT_S = 10.0
CLIENT_TIMEOUT_MARGIN_S = 30.0
"""Added to the run's timeout before the harness kills a client (startup, warm-up)."""
ENDPOINT_RR_PRIORITY = 1
"""The client and the server run SCHED_RR at priority 1, below the emulator (SCHED_FIFO 10)
and above every normal task. Under a CPU-bound neighbour a stack otherwise waits for a CPU
at every wake-up: beside two busy loops at nice 0, on this host's EEVDF scheduler, with
the stacks at nice -10 in an autogroup of their own, h2-reused still took 242-250 ms and
h3-reused 259-274 ms (241-243 and 244-257 ms alone); at SCHED_RR 1 they took 241-243 and
240-242 ms, every run valid (issue 10's closing note). Round-robin, so that client and
server share a CPU in turns; a CPU-bound stack is held to the kernel's real-time budget
(sched_rt_runtime_us, 95 %). Both arms of every experiment get the same; what a run got
is in its row (sched_client, sched_server)."""
ENDPOINT_NICE = -10
"""Where real-time scheduling is refused (no CAP_SYS_NICE, no RT budget in a container's
cgroup), the stacks at least run at nice -10, as a session and autogroup of their own
(sched(7)): CFS/EEVDF weights 9548 : 1024 against a nice-0 neighbour."""
CLIENT_POLL_S = 0.005
"""How often the harness checks whether the client has exited."""
PORT_BASE = 20000
PORT_SPAN = 20000
"""Each run listens on PORT_BASE + seq mod PORT_SPAN: a fresh port, no TIME_WAIT clash."""
ERROR_CHARS = 300
"""A run's error is one line of at most this many characters."""
ROLES = ("client", "server")


# --- commands of the stacks --------------------------------------------------------------


def testbed_argv() -> list[str]:
    """How to start ``testbed`` in a child: this interpreter, the package's entry point."""
    return [sys.executable, "-m", "harness.cli"]


def write_settings(run_dir: Path, name: str, settings: Settings) -> Path:
    """The settings document one end reads (``--settings FILE``), kept with the run."""
    path = run_dir / name
    atomic_write_json(path, settings.document())
    return path


def server_argv(
    settings: Settings, link: LinkSpec, *, bind: str, port: int, run_dir: Path
) -> list[str]:
    """``testbed serve`` of a run: its addresses and files; the knobs in one document."""
    if settings.protocol == "fec":
        listeners = ["--no-h2", "--no-h3", "--fec-port", str(port)]
    else:
        only = "--no-h3" if kinds.protocol(settings.protocol).transport == "tcp" else "--no-h2"
        listeners = ["--h2-port", str(port), "--h3-port", str(port), only]
    own = ["--bind", bind, *listeners, "--log", str(run_dir / "server.jsonl")]
    return _stack_argv("serve", "server", settings.for_end(link.down.rate_bps), run_dir, own)


def client_argv(
    settings: Settings, link: LinkSpec, *, host: str, port: int, run_dir: Path
) -> list[str]:
    """``testbed client`` of a run: its peer and files; the knobs in one document."""
    files = ["--records", str(run_dir / "records.jsonl"), "--samples", str(run_dir / "samples.csv")]
    own = ["--host", host, "--port", str(port), *files]
    return _stack_argv("client", "client", settings.for_end(link.up.rate_bps), run_dir, own)


def _stack_argv(
    command: str, role: str, settings: Settings, run_dir: Path, own: list[str]
) -> list[str]:
    """What both ends take: the keylog, the settings document, the qlog directory (made
    here: aioquic refuses a missing one) for a QUIC run."""
    document = write_settings(run_dir, f"{role}-settings.json", settings)
    argv = [*testbed_argv(), command, *own, "--keylog", str(run_dir / "keys.log")]
    argv += ["--settings", str(document)]
    if settings.qlog and settings.protocol == "h3":
        qlog = run_dir / QLOG_DIR / role
        qlog.mkdir(parents=True, exist_ok=True)
        argv += ["--qlog-dir", str(qlog)]
    return argv


def run_sysctls(settings: Settings) -> dict[str, str]:
    # The congestion control is chosen per socket by the stacks (TCP_CONGESTION, --cc): a
    # namespace may set net.ipv4.tcp_congestion_control only to an algorithm of the host's
    # tcp_allowed_congestion_control (reno and bbr here, not cubic), a socket as root any.
    values = {
        "net.ipv4.tcp_slow_start_after_idle": "1" if settings.slow_start_after_idle else "0",
    }
    values.update(settings.sysctls)
    return values


# --- one run -------------------------------------------------------------------------------


@dataclass
class RunEnvironment:
    """What stays up across the runs of one experiment."""

    link: Any
    """A ``netem.link.Link`` that is up."""
    result: ResultDir
    spec: ExperimentSpec
    set_route_metrics: bool = False
    """True when some level sets initcwnd/initrwnd/route_quickack (every run then sets them)."""
    sysctl_defaults: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per role, the values at link up of every sysctl some level sets: a run of a level
    that does not set one gets this value back, not the previous level's."""
    current_link: str | None = None
    port_base: int = 20000
    log: Callable[[str], None] = lambda _msg: None


def wait_listening(proc: subprocess.Popen, expected: int, timeout_s: float) -> list[str]:
    """Read the server's stdout until ``expected`` 'listening' lines (or fail)."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None

    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while sum("listening" in line for line in lines) < expected:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"server did not listen within {timeout_s:g} s")
            if not sel.select(timeout=left):
                continue
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"server exited ({proc.wait()}) before listening")
            lines.append(line.decode(errors="replace").rstrip())
    return lines


def _tail(path: Path, limit: int = 300) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return (text[-1] if text else "")[:limit]


def _emulator_pids(link: Any) -> list[int]:
    state = getattr(link, "state", None)
    pids = []
    for name in ("emulator_pid", "emulator_pids"):
        value = getattr(state, name, None) if state is not None else getattr(link, name, None)
        if isinstance(value, int):
            pids.append(value)
        elif isinstance(value, (list, tuple)):
            pids.extend(int(v) for v in value)
    return pids


def run_processes(
    env: RunEnvironment,
    planned: PlannedRun,
    settings: Settings,
    link_spec: LinkSpec,
    run_dir: Path,
    watch: Any,
) -> str | None:
    """Set the link and namespaces for the run, run server and client, keep the link's
    counters; returns the run's error (None if nothing went wrong). Never raises for a
    failed run: the failure is the error, with the traceback in harness_error.txt."""
    error: str | None = None
    server: subprocess.Popen | None = None
    client: subprocess.Popen | None = None
    progress: ProgressEvents | None = None
    try:
        link = env.link
        prepare_link(env, settings, link_spec)
        port = env.port_base + planned.seq % PORT_SPAN
        s_argv = server_argv(settings, link_spec, bind=link.server_addr, port=port, run_dir=run_dir)
        c_argv = client_argv(settings, link_spec, host=link.server_addr, port=port, run_dir=run_dir)
        write_run_file(env, planned, settings, link_spec, run_dir, (s_argv, c_argv))
        remote_start = getattr(link, "start_server", None)  # a server on another host
        server = (
            remote_start(s_argv, run_dir) if remote_start else start_server(link, s_argv, run_dir)
        )
        with watch:
            watch.watch("server", server.pid)
            for pid in _emulator_pids(link):
                watch.watch("emulator", pid)
            before = link.stats()
            capture = (
                link.capture(run_dir, mode=settings.capture)
                if settings.capture != "off"
                else contextlib.nullcontext()
            )
            with capture:
                workload = kinds.workload(settings.workload)
                planned_events = workload.link_events(settings)
                client = start_client(link, c_argv, run_dir, piped=bool(planned_events))
                if planned_events:
                    progress = ProgressEvents(link, planned_events, env.log)
                    progress.follow(client.stdout)
                watch.watch("client", client.pid)
                limit_s = workload.run_limit_s(settings) + CLIENT_TIMEOUT_MARGIN_S
                code = _wait_child(client, limit_s)
                if code != 0:
                    error = f"client exited {code}: {_tail(run_dir / 'client.stderr')}"
            if before is not None:  # a real path has no emulator counters
                atomic_write_json(run_dir / LINK_STATS_FILE, (link.stats() - before).to_dict())
    except Exception as err:  # a run that fails is recorded, never dropped
        error = f"harness: {type(err).__name__}: {err}".replace("\n", " ")[:ERROR_CHARS]
        (run_dir / "harness_error.txt").write_text(traceback.format_exc())
    finally:
        if client is not None and client.poll() is None:  # interrupted while it ran
            client.kill()
            client.wait()
        code = stop_process(server, SERVER_STOP_TIMEOUT_S)
        if code not in (0, None, -signal.SIGTERM) and error is None:
            error = f"server exited {code}: {_tail(run_dir / 'server.stderr')}"
        if progress is not None:
            progress.finish(run_dir)
    return error


def prepare_link(env: RunEnvironment, settings: Settings, link_spec: LinkSpec) -> None:
    """The link's spec, the namespaces' sysctls and route metrics for this run."""
    link = env.link
    link.set_spec(link_spec)
    for role in ROLES:
        values = {**env.sysctl_defaults.get(role, {}), **run_sysctls(settings)}
        link.set_sysctls(values, (role,))
    if env.set_route_metrics:
        for role in ROLES:
            link.set_route_metrics(
                role,
                initcwnd=settings.initcwnd or DEFAULT_INITCWND_SEGMENTS,
                initrwnd=settings.initrwnd,
                quickack=settings.route_quickack,
            )


def write_run_file(
    env: RunEnvironment,
    planned: PlannedRun,
    settings: Settings,
    link_spec: LinkSpec,
    run_dir: Path,
    argvs: tuple[list[str], list[str]],
) -> None:
    """run.json: what collection needs to read the run's other files, and how it ran."""
    names = [*sorted(run_sysctls(settings)), "net.ipv4.tcp_no_metrics_save"]
    atomic_write_json(
        run_dir / RUN_FILE,
        {
            "run": planned.to_dict(),
            "settings": settings.to_dict(),
            "ignored_settings": settings.ignored(),
            "link": str(link_spec),
            "backend": getattr(env.link, "backend", None),
            "server_argv": argvs[0],
            "client_argv": argvs[1],
            "sysctls": {role: env.link.sysctls(role, names) for role in ROLES},
            "clock_offset_s": time.time() - time.monotonic(),
            "started_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        },
    )


def popen_endpoint(ns: str, argv: list[str], **kwargs: Any) -> subprocess.Popen:
    """A stack process (client, server, relay) in namespace ``ns`` at the endpoints'
    priority (:data:`ENDPOINT_RR_PRIORITY`, else :data:`ENDPOINT_NICE`)."""
    from netem import nsexec

    return nsexec.popen(ns, argv, nice=ENDPOINT_NICE, rr_priority=ENDPOINT_RR_PRIORITY, **kwargs)


def start_server(link: Any, argv: list[str], run_dir: Path) -> subprocess.Popen:
    """The server in its namespace, once it says it listens."""
    with open(run_dir / "server.stderr", "wb") as server_log:
        server = popen_endpoint(link.server_ns, argv, stdout=subprocess.PIPE, stderr=server_log)
    try:
        wait_listening(server, 1, SERVER_START_TIMEOUT_S)
    except BaseException:  # a timeout, an exit, or a signal while it starts: never orphaned
        stop_process(server, SERVER_STOP_TIMEOUT_S)
        raise
    return server


def start_client(
    link: Any, argv: list[str], run_dir: Path, piped: bool = False
) -> subprocess.Popen:
    """The client in its namespace; ``piped``: its stdout read for ``progress N`` lines."""
    stdout = subprocess.PIPE if piped else subprocess.DEVNULL
    with open(run_dir / "client.stderr", "wb") as client_err:
        return popen_endpoint(link.client_ns, argv, stdout=stdout, stderr=client_err)


def _wait_child(proc: subprocess.Popen, timeout_s: float) -> int:
    """Wait for the client, sampling its CPU up to its exit (reaped with wait4)."""
    deadline = time.monotonic() + timeout_s
    while True:
        pid, status, _usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            return -signal.SIGKILL
        time.sleep(CLIENT_POLL_S)
