"""Execution of one run: the path set for it, the server, whatever its topology runs in
between (the relay) and the client started in their namespaces with the run's settings
document, the link's captures and counters around them.

What a run leaves in its directory is read by harness/collect/row.py; the CPU of the
processes is watched by the caller's watcher (``watch(name, pid)`` as the processes start).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.plan.planner import PlannedRun
from harness.run import capture as capturemod
from harness.run.backends import RunPaths
from harness.run.cross import competing
from harness.run.failures import failed_edges
from harness.run.progress import ProgressEvents
from harness.run.stacks import (
    SERVER_STOP_TIMEOUT_S,
    client_argv,
    server_argv,
    start_client,
)
from harness.run.topologies import topology_run
from harness.spec.experiment import ExperimentSpec, Level
from harness.store.files import EDGE_STATS_FILE, LINK_STATS_FILE, RUN_FILE
from harness.store.resultdir import ResultDir, atomic_write_json
from netem.topologyspec import Topology
from proto.delack import delack_max
from tbcore import kinds
from tbcore.processes import stop_process
from tbcore.settings import DEFAULT_INITCWND_SEGMENTS, Settings

CLIENT_TIMEOUT_MARGIN_S = 30.0
"""Added to the run's timeout before the harness kills a client (startup, warm-up)."""
CLIENT_POLL_S = 0.005
"""How often the harness checks whether the client has exited."""
PORT_BASE = 20000
PORT_SPAN = 20000
"""Each run listens on PORT_BASE + seq mod PORT_SPAN: a fresh port, no TIME_WAIT clash."""
ERROR_CHARS = 300
"""A run's error is one line of at most this many characters."""
ROLES = ("client", "server")
STACK_NODES = ("client", "relay", "server")
"""Nodes of a topology whose namespaces run a stack (their TCP sysctls are the run's)."""


def run_sysctls(settings: Settings) -> dict[str, str]:
    # The congestion control is chosen per socket by the stacks (TCP_CONGESTION, --cc): a
    # namespace may set net.ipv4.tcp_congestion_control only to an algorithm of the host's
    # tcp_allowed_congestion_control (reno and bbr here, not cubic), a socket as root any.
    values = {
        "net.ipv4.tcp_slow_start_after_idle": "1" if settings.slow_start_after_idle else "0",
    }
    values.update(settings.sysctls)
    return values


def stack_roles(path: Topology) -> tuple[str, ...]:
    """The namespaces of ``path`` that run a stack: client, server, and the relay's."""
    return tuple(n for n in STACK_NODES if n in path.nodes or n in ROLES)


# --- one run -------------------------------------------------------------------------------


@dataclass
class RunEnvironment:
    """What stays up across the runs of one experiment."""

    paths: RunPaths
    """The links (or the real path) the runs cross (harness.run.backends)."""
    result: ResultDir
    spec: ExperimentSpec
    set_route_metrics: bool = False
    """True when some level sets initcwnd/initrwnd/route_quickack (every run then sets them)."""
    sysctl_defaults: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per role, the values at link up of every sysctl some level sets: a run of a level
    that does not set one gets this value back, not the previous level's."""
    port_base: int = PORT_BASE
    log: Callable[[str], None] = lambda _msg: None


@dataclass
class RunProcesses:
    """The processes of one run, so that whatever happens they are stopped."""

    server: Any = None
    client: subprocess.Popen | None = None
    progress: ProgressEvents | None = None


def run_processes(
    env: RunEnvironment,
    planned: PlannedRun,
    level: Level,
    path: Topology,
    run_dir: Path,
    watch: Any,
) -> str | None:
    """Set the path and namespaces for the run, run the server, the topology's middle and
    the client, keep the link's counters; returns the run's error (None if nothing went
    wrong). Never raises for a failed run: the failure is the error, with the traceback in
    harness_error.txt."""
    error: str | None = None
    procs = RunProcesses()
    try:
        settings = level.settings
        link = env.paths.link_for(level)
        clocks = prepare_link(env, link, settings, path)
        shape = topology_run(path.kind)
        port = env.port_base + planned.seq % PORT_SPAN
        link_spec = path.link_spec
        target = shape.target(link, settings, port)
        s_argv = server_argv(settings, link_spec, bind=link.server_addr, port=port, run_dir=run_dir)
        c_argv = client_argv(
            settings, link_spec, host=target.host, port=target.port, run_dir=run_dir
        )
        c_argv += list(target.client_args)
        context = write_run_file(
            env,
            link,
            planned,
            settings,
            path,
            run_dir,
            (s_argv, c_argv),
            {"port": port, "traces": clocks},
        )
        procs.server = env.paths.start_server(link, s_argv, run_dir)
        ceiling = delack_max(settings.tcp_delack_max_s)  # ack_policy every:2,max:T over TCP
        with ceiling, watch, shape.middle(link, settings, run_dir, port):
            watch.watch("server", procs.server.pid)
            for pid in env.paths.emulator_pids(link):
                watch.watch("emulator", pid)
            with failed_edges(link, settings, planned.link_seed, run_dir):
                error = _client_run(
                    env, link, settings, context, path, run_dir, c_argv, watch, procs, planned.seq
                )
    except Exception as err:  # a run that fails is recorded, never dropped
        error = f"harness: {type(err).__name__}: {err}".replace("\n", " ")[:ERROR_CHARS]
        (run_dir / "harness_error.txt").write_text(traceback.format_exc())
    finally:
        client = procs.client
        if client is not None and client.poll() is None:  # interrupted while it ran
            client.kill()
            client.wait()
        code = stop_process(procs.server, SERVER_STOP_TIMEOUT_S)
        if code not in (0, None, -signal.SIGTERM) and error is None:
            error = f"server exited {code}: {_tail(run_dir / 'server.stderr')}"
        if procs.progress is not None:
            procs.progress.finish(run_dir)
    return error


def _client_run(
    env: RunEnvironment,
    link: Any,
    settings: Settings,
    context: dict[str, Any],
    path: Topology,
    run_dir: Path,
    c_argv: list[str],
    watch: Any,
    procs: RunProcesses,
    seq: int = 0,
) -> str | None:
    """The client's part of a run, inside the competing traffic (harness.run.cross), the
    captures and the link's counters; ``context``: run.json as written (the capture's
    files are added to it, never read back)."""
    error = None
    before = {e: link.stats(edge=e) for e in path.edge_names} if env.paths.counts else None
    plan = capturemod.capture_plan(settings)
    capture = (
        link.capture(run_dir, mode=plan.mode) if plan.mode != "off" else contextlib.nullcontext()
    )
    workload = kinds.workload(settings.workload)
    limit_s = workload.run_limit_s(settings) + CLIENT_TIMEOUT_MARGIN_S
    beside = competing(link, settings, seq=seq, run_dir=run_dir, duration_s=limit_s, watch=watch)
    with beside, capture:
        planned_events = workload.link_events(settings)
        procs.client = start_client(link.client_ns, c_argv, run_dir, piped=bool(planned_events))
        if planned_events:
            procs.progress = ProgressEvents(link, planned_events, env.log)
            procs.progress.follow(procs.client.stdout)
        watch.watch("client", procs.client.pid)
        code = _wait_child(procs.client, limit_s)
        if code != 0:
            error = f"client exited {code}: {_tail(run_dir / 'client.stderr')}"
    if plan.mode != "off":
        written = capturemod.finish(run_dir)
        context["capture"] = {**plan.to_dict(), **written}
        atomic_write_json(run_dir / RUN_FILE, context)
    if before is not None:  # a real path has no emulator counters
        delta = {e: (link.stats(edge=e) - before[e]).to_dict() for e in path.edge_names}
        atomic_write_json(run_dir / LINK_STATS_FILE, delta["link"])
        if len(delta) > 1:
            atomic_write_json(run_dir / EDGE_STATS_FILE, delta)
    return error


def prepare_link(
    env: RunEnvironment, link: Any, settings: Settings, path: Topology
) -> dict[str, dict[str, dict[str, float]]]:
    """The path's specs, the namespaces' sysctls and route metrics for this run. Returns the
    trace clock of every traced direction, by edge (netem.traceclock): where the traces
    restarted, which the run's bound needs."""
    clocks: dict[str, dict[str, dict[str, float]]] = {}
    for edge in path.edges:
        started = link.set_spec(edge.spec, edge=edge.name) or {}
        if started:
            clocks[edge.name] = {d: c.to_dict() for d, c in started.items()}
    for role in stack_roles(path):
        values = {**env.sysctl_defaults.get(role, {}), **run_sysctls(settings)}
        link.set_sysctls(values, (role,))
    if env.set_route_metrics:
        for role in ROLES:
            link.set_route_metrics(
                role,
                initcwnd=settings.initcwnd or DEFAULT_INITCWND_SEGMENTS,
                initrwnd=settings.initrwnd,
                quickack=settings.quickack_route,
            )
    return clocks


def write_run_file(
    env: RunEnvironment,
    link: Any,
    planned: PlannedRun,
    settings: Settings,
    path: Topology,
    run_dir: Path,
    argvs: tuple[list[str], list[str]],
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """run.json: what collection needs to read the run's other files, and how it ran;
    ``extra``: the server's port and the trace clocks by edge (``traces``). Returns what it
    wrote (the run adds the capture's files to it)."""
    applied = path_applied(env, link, settings)
    context = {
        "run": planned.to_dict(),
        "settings": settings.to_dict(),
        "ignored_settings": settings.ignored(),
        "link": str(path.link_spec),
        "topology": path.to_dict(),
        "backend": env.paths.backend,
        "server_argv": argvs[0],
        "client_argv": argvs[1],
        "sysctls": applied["sysctls"],
        "applied": applied,
        "clock_offset_s": time.time() - time.monotonic(),
        "capture": capturemod.capture_plan(settings).to_dict(),
        "started_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        **(extra or {}),
    }
    atomic_write_json(run_dir / RUN_FILE, context)
    return context


def path_applied(env: RunEnvironment, link: Any, settings: Settings) -> dict[str, Any]:
    """What the harness put in force on the namespaces, read back: the sysctls a level of the
    experiment sets (and tcp_no_metrics_save) and, where it sets them, the route metrics
    (pyroute2)."""
    others = {name for values in env.sysctl_defaults.values() for name in values}
    names = [*sorted({*run_sysctls(settings), *others}), "net.ipv4.tcp_no_metrics_save"]
    out: dict[str, Any] = {"sysctls": {role: link.sysctls(role, names) for role in ROLES}}
    if env.set_route_metrics:
        out["route_metrics"] = {role: link.route_metrics(role) for role in ROLES}
    return out


def _tail(path: Path, limit: int = 300) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return (text[-1] if text else "")[:limit]


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
