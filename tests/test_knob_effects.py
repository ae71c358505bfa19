"""Every accepted knob changes what the run records it applied (issue 24).

For every knob of the settings registry and every protocol, workload and topology its scope
accepts it on, the knob at its default and at another value must differ in what the ends
(tbcore.records.AppliedRecord: sockets read back, aioquic's connection, HTTP/2 windows, the
FEC session, the requests as built) or the harness (bounds, link events, argv, run.json's
read-back of sysctls and route metrics) record under that knob's key. A knob accepted that
changed nothing fails here.

The stacks run for real on loopback: one server process per group of flipped knobs (its
knobs in force for every protocol), the client in this process, stopped as soon as both ends
have recorded what a run needs; the knobs flipped together in a group do not touch each
other's records (tbcore.records.AppliedRecord keys each value by the knob it answers).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from clients.agent import run_agent
from clients.api import run_requests
from clients.config import ClientConfig
from clients.multipath import run_multipath, upload_config
from harness.collect.agent_rows import agent_part
from harness.collect.row import bound_for
from harness.run.cross import client_argv as cross_client_argv
from harness.run.cross import cross_of
from harness.run.execute import run_sysctls
from harness.run.failures import failed_edges
from harness.run.runner import run_experiment
from harness.run.stacks import client_argv, server_argv
from harness.spec.experiment import check_consistent, loads
from harness.spec.paths import topology_of
from harness.spec.traces import run_path
from netem.pcapng import read_capture
from servers.process import ServerProcess
from tbcore import kinds
from tbcore.records import AppliedLog, AppliedRecord
from tbcore.settings import KNOBS, Settings

pytestmark = pytest.mark.timeout(600)

AXES = ("protocol", "workload", "topology", "quic_stack")
"""The knobs that choose the kinds: every combination of them is a case, not a flip
(quic_stack chooses the native engine: tests/test_native_engine.py checks that the knobs it
takes change what it runs with, tests/test_quicstack.py that the others are refused)."""
STACK_ENDS = ("server", "client", "both")

BASE: dict[str, Any] = {"fec_rate": "1gbit", "timeout": "20s"}
"""What every run has: fec needs a rate cap (the harness fills it from the path, checked
below) and no wait is long."""
WORKLOAD_BASE: dict[str, dict[str, Any]] = {
    "multi": {"streams": "tts,stream"},  # the audio (processing) and the chunked stream
    "upload": {"topology": "dual", "size": "4mb"},
}
"""What a workload cannot run without (its knobs compared against these, not None)."""

GROUPS: dict[str, dict[str, Any]] = {
    "a": {
        "cc": "reno", "window_clamp": "8mb", "sndbuf": "4mb", "notsent_lowat": "1mb",
        "quickack": True, "quic_cc": "reno", "max_datagram_size": 1452, "quic_pacing": "off",
        "quic_batching": False, "quic_max_data": "64mb", "h2_window": "32mb",
        "fec_redundancy": "10%", "fec_rate": "500mbit", "chunks": 4, "streams": "stream,tts",
        "priority_signal": "none", "requests": 2, "connection": "reused", "timeout": "30s",
        "processing_audio": "1ms", "processing_image": "1ms", "agent_rounds": 2,
        "agent_local": "10ms", "agent_model": "10ms", "screenshot": "jpeg",
        "recovery": "restart", "size": "3mb", "multipath": "split",
        "processing_restore": "1ms",
    },
    "b": {
        "rcvbuf": "4mb", "max_pacing_rate": "10gbit", "quic_ack_delay": "2ms",
        "ack_policy": "immediate",
        "fec_target": 0.99, "cancel_after": 2, "player_buffer": "40ms", "send_policy": "rr",
        "warmup_requests": 1, "resume": True, "round_timeout": "5s", "screen": "photo",
        "late_chunk": 2, "sample_rate": 16000, "agent_tasks": 2, "task_success": 0.5,
    },
}  # fmt: skip
"""Knobs flipped together (a server process per group), chosen so that none of a group
changes what another of it records."""
NEEDED: dict[str, dict[str, Any]] = {
    "screenshot_quality": {"screenshot": "webp"},
    "outage_mode": {"outage_after_round": 1},
    "tls": {},
    "chunk_size": {"multipath": "duplicate"},
    "late_chunk_delay": {"late_chunk": 2},
}
"""Knobs that act only beside another (their Scope.needs), or that change what a server
serves (tls): flipped alone over that base."""
SINGLES = {
    "screenshot_quality": {"screenshot_quality": 50},
    "outage_mode": {"outage_mode": "blackout"},
    "tls": {"tls": False},
    "chunk_size": {"chunk_size": "512kb"},
    "late_chunk_delay": {"late_chunk_delay": "10ms"},
}

LAYERS: dict[str, tuple[str, ...]] = {"h2": ("tcp", "h2"), "h3": ("quic",), "fec": ("fec",)}
"""What each protocol's connection records at each end."""
RUN_CAP_S = 90.0
PROCESSING = {"audio_processing", "image_processing", "agent", "restore_processing"}
"""Workloads whose server sleeps a setting's time per request (its "response" record)."""


def stack_knobs() -> list[str]:
    return [k for k, item in KNOBS.items() if item.applies in STACK_ENDS and k not in AXES]


def written(values: Mapping[str, Any]) -> dict[str, Any]:
    return {**BASE, **values}


def settings_of(protocol: str, workload: str, values: Mapping[str, Any]) -> Settings:
    table = {**written(WORKLOAD_BASE.get(workload, {})), **values}
    table.update(protocol=protocol, workload=workload)
    return Settings.from_table(table, "test")


HEAVY: dict[str, str] = {"migrate": "h2"}
"""Workloads too big for every protocol's variants (64 MiB over aioquic with one ACK a
packet takes minutes here): checked on this protocol only; the others' knobs act the same
on the smaller uploads (features-upload)."""


def combos() -> list[tuple[str, str]]:
    """Every (protocol, workload) the settings accept, with the workload's topology."""
    out = []
    for workload in kinds.WORKLOADS:
        for protocol in kinds.PROTOCOLS:
            if workload in HEAVY and protocol != HEAVY[workload]:
                continue
            try:
                settings = settings_of(protocol, workload, {})
                kinds.topology(settings.topology).check(settings)
            except Exception:
                continue
            out.append((protocol, workload))
    return out


# --- the ends ---------------------------------------------------------------------------------


@dataclass
class Server:
    process: ServerProcess
    applied: Path

    def records(self, after_conn: int) -> list[AppliedRecord]:
        return [r for r in read_applied(self.applied) if (r.conn or 0) > after_conn]

    def last_conn(self) -> int:
        return max((r.conn or 0 for r in read_applied(self.applied)), default=0)


def read_applied(path: Path) -> list[AppliedRecord]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(AppliedRecord.from_dict(json.loads(line)))
        except json.JSONDecodeError:
            continue  # a line being written
    return out


def server_table(group: Mapping[str, Any]) -> Settings:
    """The knobs a group's server runs with (the server applies its own; the rest idle)."""
    return Settings.from_table(written(group), "server")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Server]]:
    root = tmp_path_factory.mktemp("knob-servers")
    variants = {"base": {}, **GROUPS, **{k: {**NEEDED[k], **SINGLES[k]} for k in NEEDED}}
    started: dict[str, Server] = {}
    try:
        for name, group in variants.items():
            applied = root / f"{name}.jsonl"
            document = server_table(group).to_json()
            args = ["--settings", document, "--applied", str(applied), "--fec-port", "0"]
            started[name] = Server(ServerProcess(args).start(), applied)
        yield started
    finally:
        for server in started.values():
            server.process.stop()


def wanted(settings: Settings) -> tuple[set[tuple[str, int]], set[str]]:
    """What a run must have recorded before it is stopped: client (layer, count) and
    server layers."""
    protocol, kind = settings.protocol, kinds.workload(settings.workload)
    first = "agent" if kind.records == "agent_round" else "workload"
    first = "upload" if kind.records == "transfer" else first
    client = {(first, 1), *((layer, 1) for layer in LAYERS[protocol])}
    resumes = KNOBS["resume"].scope.refusal(settings) is None
    if resumes and settings.resume and settings.warmup_requests:
        client.add(("connection", 2))  # the second connection offers the session
    server = set(LAYERS[protocol])
    if PROCESSING & kinds.traits_of(kind):
        server.add("response")
    return client, server


async def _run_client(settings: Settings, server: Server, applied: Path) -> None:
    kind = kinds.workload(settings.workload)
    port = server.process.ports[settings.protocol]
    if kind.records == "transfer":
        log = AppliedLog(applied, "client")
        config = upload_config(settings, "127.0.0.1", port, ("127.0.0.1", "127.0.0.2"), log)
        try:
            await run_multipath(config)
        finally:
            log.close()
        return
    config = ClientConfig(port=port, settings=settings, applied_path=applied)
    if kind.records == "agent_round":
        await run_agent(config)
    else:
        await run_requests(config)


async def _until_recorded(settings: Settings, server: Server, applied: Path) -> list[Any]:
    """Run the client until both ends have recorded what the run needs; its records."""
    before = server.last_conn()
    client_wants, server_wants = wanted(settings)
    task = asyncio.create_task(_run_client(settings, server, applied))
    deadline = time.monotonic() + RUN_CAP_S
    while True:
        mine = read_applied(applied)
        theirs = server.records(before)
        counts = {layer: sum(r.layer == layer for r in mine) for layer, _ in client_wants}
        done_client = all(counts[layer] >= n for layer, n in client_wants)
        done_server = server_wants <= {r.layer for r in theirs}
        if done_client and done_server:
            break
        if task.done() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
        assert time.monotonic() < deadline, (settings.protocol, settings.workload, counts)
        await asyncio.sleep(0.02)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return [*mine, *theirs]


def values_of(records: list[AppliedRecord], key: str) -> set[str]:
    """Every value recorded under ``key`` (JSON, so lists and None compare)."""
    return {json.dumps(r.values[key], sort_keys=True) for r in records if key in r.values}


# --- the test ---------------------------------------------------------------------------------


def flips_of(key: str) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(server, base, flipped values) under which ``key`` is compared."""
    out = [(name, {}, group) for name, group in GROUPS.items() if key in group]
    if key in NEEDED:
        out.append((key, NEEDED[key], {**NEEDED[key], **SINGLES[key]}))
    return out


def test_every_stack_knob_is_flipped_somewhere() -> None:
    for key in stack_knobs():
        assert flips_of(key), f"{key}: no group flips it"
        for _, _base, flipped in flips_of(key):
            assert KNOBS[key].parse(key, flipped[key]) != KNOBS[key].default or key in BASE


@pytest.mark.parametrize(("protocol", "workload"), combos())
def test_each_accepted_stack_knob_changes_what_the_ends_applied(
    protocol: str, workload: str, servers: dict[str, Server], tmp_path: Path
) -> None:
    runs: dict[tuple[str, str], list[AppliedRecord]] = {}

    def run(server: str, values: Mapping[str, Any]) -> list[AppliedRecord]:
        settings = settings_of(protocol, workload, values)
        label = (server, settings.to_json())
        if label not in runs:
            applied = tmp_path / f"{server}-{len(runs)}.jsonl"
            runs[label] = asyncio.run(_until_recorded(settings, servers[server], applied))
        return runs[label]

    checked = []
    for key in stack_knobs():
        for server, base, flipped in flips_of(key):
            if KNOBS[key].scope.refusal(settings_of(protocol, workload, flipped)) is not None:
                continue
            before, after = run("base", base), run(server, flipped)
            assert values_of(after, key), f"{key}: nothing recorded under it"
            assert values_of(before, key) != values_of(after, key), (
                f"{key} = {flipped[key]!r} changed nothing {protocol} {workload} applied: "
                f"{values_of(after, key)}"
            )
            checked.append(key)
    assert checked  # every case has knobs of its own


# --- the harness's knobs: what the harness writes ---------------------------------------------

PATH = "rtt=40ms,rate=20mbit"
TOPOLOGY_BASE: dict[str, dict[str, Any]] = {
    "direct": {},
    "relay": {"topology": "relay", "near_link": "rtt=2ms"},
    "dual": {"topology": "dual", "link_b": "rtt=40ms,rate=10mbit", "multipath": "duplicate"},
}
"""The edges each shape needs (a failover arm on two paths, so that outage_at can act)."""

HARNESS_FLIPS: dict[str, Any] = {
    "link": "rtt=80ms,rate=20mbit", "near_link": "rtt=4ms", "link_b": "rtt=40ms,rate=5mbit",
    "exit_link": "rtt=2ms,rate=24mbit", "route": "direct", "outage_at": "3s", "mss": 600,
    "qlog": False, "pace_at_path_rate": True, "outage_after_round": 3, "outage": "2s",
    "rate_change_after_round": 2, "rate_change": "10mbit", "agent_deadline": "45s",
    "site_power": 700, "slow_start_after_idle": False, "sysctls": {"net.ipv4.tcp_sack": "0"},
    "initcwnd": 20, "initrwnd": 30, "route_quickack": True, "capture": "full",
    "trace_start": "spread", "cross": "tcp:2:cubic", "cross_lead": "10s",
    "path_failures": "link=100%",
}  # fmt: skip
HARNESS_NEEDED: dict[str, dict[str, Any]] = {
    "outage": {"outage_after_round": 3},
    "rate_change_after_round": {"rate_change": "10mbit"},
    "rate_change": {"rate_change_after_round": 2},
    "cross_lead": {"cross": "tcp:1:cubic"},
    "path_failures": {"multipath": "duplicate"},
}
"""Knobs that act only beside another, compared over it."""
ROOT_ONLY = {"initcwnd", "initrwnd", "route_quickack", "capture", "route"}
"""Knobs whose effect is read back from a link (tests below, as root)."""


def harness_settings(protocol: str, workload: str, shape: str, values: Mapping[str, Any]) -> Any:
    table = {"link": PATH, **written(WORKLOAD_BASE.get(workload, {})), **TOPOLOGY_BASE[shape]}
    table.update({**values, "protocol": protocol, "workload": workload})
    settings = Settings.from_table(table, "test")
    topology = topology_of(settings, "test")
    check_consistent(settings, topology, "test")
    return settings, topology


def harness_view(key: str, settings: Settings, topology: Any, run_dir: Path) -> Any:
    """What the harness writes or uses for ``key`` on a run of ``settings``."""
    kind = kinds.workload(settings.workload)
    if key in ("link", "near_link", "link_b", "exit_link"):
        return topology.to_dict()  # run.json's topology, each edge's spec the link is set to
    if key in ("slow_start_after_idle", "sysctls"):
        return run_sysctls(settings)
    if key == "trace_start":  # a traced path's second repetition starts further in
        return run_path(topology, settings, 1, 2).to_dict()
    if key in ("cross", "cross_lead"):  # the competing flows' iperf3 command
        traffic = cross_of(settings)
        return None if traffic is None else cross_client_argv(
            traffic, server="198.18.2.2", port=1, direction="up",
            duration_s=settings.cross_lead_s + 1.0,
        )  # fmt: skip
    if key in ("outage_after_round", "outage") and kind.records == "agent_round":
        # a blackout is a link event; a break (the default) is in the task's bound
        columns = agent_part(settings, topology, run_dir, None, []).columns
        return kind.link_events(settings), columns.get("bound_s")
    if key in ("outage_at", "rate_change_after_round", "rate_change"):
        return kind.link_events(settings)
    if key == "path_failures":  # the edges the harness takes down for the run
        return _edges_taken_down(settings, run_dir)
    if key in ("agent_deadline", "site_power", "mss") and kind.records == "agent_round":
        return agent_part(settings, topology, run_dir, None, []).columns
    if key == "mss":
        bound = bound_for(settings, topology, kind.up_bytes(settings), kind.down_bytes(settings))
        return None if bound is None else bound.total_s
    if key == "qlog":
        return client_argv(settings, topology.link_spec, host="198.18.2.2", port=1, run_dir=run_dir)
    # pace_at_path_rate: each end's document carries its direction's rate as its pacing cap
    server_argv(settings, topology.link_spec, bind="198.18.2.2", port=1, run_dir=run_dir)
    return json.loads((run_dir / "server-settings.json").read_text())["settings"]


def _edges_taken_down(settings: Settings, run_dir: Path) -> list[str]:
    taken: list[str] = []

    class Link:
        def outage(self, duration_s: float, *, edge: str) -> None:
            taken.append(edge)

        def end_events(self, *, edge: str) -> int:
            return 0

    with failed_edges(Link(), settings, 1, run_dir):
        return taken


def harness_cases() -> list[tuple[str, str, str]]:
    out = []
    for shape in TOPOLOGY_BASE:
        for workload in kinds.WORKLOADS:
            for protocol in kinds.PROTOCOLS:
                try:
                    harness_settings(protocol, workload, shape, {})
                except Exception:
                    continue
                out.append((protocol, workload, shape))
    return out


def harness_knobs() -> list[str]:
    return [k for k, item in KNOBS.items() if item.applies in ("link", "harness")]


def test_every_harness_knob_is_checked() -> None:
    for key in harness_knobs():
        if key not in AXES:
            assert key in HARNESS_FLIPS, f"{key}: no check of what the harness writes"


@pytest.mark.parametrize(("protocol", "workload", "shape"), harness_cases())
def test_each_accepted_harness_knob_changes_what_the_harness_writes(
    protocol: str, workload: str, shape: str, tmp_path: Path
) -> None:
    for key in harness_knobs():
        if key in AXES or key in ROOT_ONLY:
            continue
        base = HARNESS_NEEDED.get(key, {})
        flipped = {**base, key: HARNESS_FLIPS[key]}
        try:
            before, path_before = harness_settings(protocol, workload, shape, base)
            after, path_after = harness_settings(protocol, workload, shape, flipped)
        except Exception:
            continue  # the flipped value cannot run here (a failover on h3 needs its outage)
        if KNOBS[key].scope.refusal(after) is not None:
            continue
        (tmp_path / "a").mkdir(exist_ok=True)
        (tmp_path / "b").mkdir(exist_ok=True)
        seen = harness_view(key, before, path_before, tmp_path / "a")
        now = harness_view(key, after, path_after, tmp_path / "b")
        assert seen != now, f"{key} = {HARNESS_FLIPS[key]!r} changed nothing on {workload}"


# --- the harness's knobs on a link, as root -------------------------------------------------

LINK_EXPERIMENT = """
name = "knobs"
question = "Does every link knob change what run.json reads back?"
repetitions = 1
[fixed]
link = "rtt=10ms,rate=100mbit"
protocol = "h2"
workload = "asr"
timeout = "20s"
{fixed}
[factor]
name = "knobs"
settings = {settings}
levels = [ {{ name = "default" }}, {{ name = "flipped", {flipped} }} ]
"""
LINK_FLIPS = {
    "slow_start_after_idle": "false", "initcwnd": "20", "initrwnd": "30",
    "route_quickack": "true", "sysctls": '{ "net.ipv4.tcp_sack" = "0" }', "capture": '"headers"',
    "link": '"rtt=20ms"',
}  # fmt: skip


def _experiment(fixed: str, flips: Mapping[str, str]) -> Any:
    text = LINK_EXPERIMENT.format(
        fixed=fixed,
        settings=json.dumps(list(flips)),
        flipped=", ".join(f"{k} = {v}" for k, v in flips.items()),
    )
    return loads(text)


def _runs(spec: Any, output: Path, name: str) -> dict[str, Path]:
    result = run_experiment(spec, output=output, link_name=name, attempts=1)
    runs = result.result.path / "runs"
    out = {}
    for run_dir in sorted(runs.iterdir()):
        meta = json.loads((run_dir / "run.json").read_text())
        out[meta["run"]["level"]] = run_dir
    return out


def _read_back(run_dir: Path, key: str) -> Any:
    meta = json.loads((run_dir / "run.json").read_text())
    applied = meta["applied"]
    if key == "slow_start_after_idle":
        return {r: v["net.ipv4.tcp_slow_start_after_idle"] for r, v in applied["sysctls"].items()}
    if key == "sysctls":
        return {r: v["net.ipv4.tcp_sack"] for r, v in applied["sysctls"].items()}
    if key in ("initcwnd", "initrwnd", "route_quickack"):
        metric = {"route_quickack": "quickack"}.get(key, key)
        return {
            role: sorted(m.get(metric, 0) for m in routes.values())
            for role, routes in applied["route_metrics"].items()
        }
    if key == "capture":
        # the default (auto) keeps whole packets of a run this small; headers cuts them
        return read_capture(run_dir / "client.pcapng").snaplen
    if key == "link":
        row = json.loads((run_dir / "row.json").read_text())
        return round(row["measured_rtt_s"], 2)  # the emulator's path, measured
    client = meta["client_argv"]
    return client[client.index("--host") + 1], (run_dir / "relay.jsonl").exists()


RELAY_FLIPS = {"route": '"direct"', "route_quickack": "true"}
RELAY_FIXED = 'topology = "relay"\nnear_link = "rtt=2ms"'


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.parametrize(
    ("fixed", "flips", "name"),
    [("", LINK_FLIPS, "knobs1"), (RELAY_FIXED, RELAY_FLIPS, "knobs2")],
    ids=["direct", "relay"],
)
def test_link_knobs_change_what_the_harness_reads_back(
    fixed: str,
    flips: Mapping[str, str],
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An experiment of two levels on link ``name``: each knob the second flips must read
    back otherwise (sysctls, route metrics, capture, the path, the relay's route)."""
    monkeypatch.setenv("TESTBED_RUN_LOCK", "off")
    runs = _runs(_experiment(fixed, flips), tmp_path, name)
    for key in flips:
        before, after = _read_back(runs["default"], key), _read_back(runs["flipped"], key)
        assert before != after, f"{key}: {before} read back for both"
