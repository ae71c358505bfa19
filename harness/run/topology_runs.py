"""Experiments on topologies beyond one link (issue 14): the relay and the two paths.

An experiment file with ``topology = "relay"`` or ``"dual"`` in ``[fixed]`` runs here
(``testbed run FILE [--quick]`` dispatches to :func:`run_file`)::

    name = "relay"
    question = "..."
    repetitions = 5
    [fixed]
    topology = "relay"           # relay | dual
    near_link = "rtt=2ms"        # relay: the client's hop to the relay
    link = "dc-longhaul-clean"   # relay: the long haul; dual: the first path
    link_b = "..."               # dual: the second path
    exit_link = "..."            # dual, optional: the shared exit (a level may set it too)
    workload = "asr"             # relay; dual uploads size = "30MB"
    cc = "cubic"
    [factor]
    name = "path"
    levels = [ { name = "h2-relay-new", protocol = "h2", route = "relay", connection = "new" } ]
    [reference]                  # optional: published medians (ms) shown beside ours
    "h2-relay-new" = 301.6
    [quick]
    repetitions = 2

Level keys: relay ``protocol`` (h2 | h3: the relay forwards either over its own warm
long-haul connection of the same protocol), ``route`` (direct | relay), ``connection``
(new | reused); dual ``multipath`` (single | mptcp | split | duplicate), ``exit_link`` (a
link string or ``"none"``), ``outage_at`` (a failover: the ``link`` edge goes down that
long after the transfer starts, for the rest of the run).

Every run is a row of ``runs.csv``: ``total_s`` (relay: connect to last response byte for a
new connection, first request byte to last response byte for a reused one; dual: the
transfer), ``bound_s`` (harness.bounds: request_time / relay_request_time for the relay;
split_time_s, duplicate_time_s, failover_time_s for two paths), ``ratio``, ``valid``
(no error, every edge's emulator lateness p99 under :data:`LATENESS_P99_LIMIT_S`) and the
bytes each edge carried upstream. A run invalid for lateness alone is made again (up to
``--attempts``, 3 by default; ``attempt`` counts them, every attempt is a row); a run that
failed is not, as its error is the arm's result. ``report.md`` has the medians of the valid
runs per level beside the bound and the reference. The links, server and relay of a
topology are brought up once and the levels that share them alternate within each
repetition.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from clients.multipath import MULTIPATH_MODES
from harness import bounds
from harness.plan.planner import DEFAULT_ATTEMPTS
from harness.run.execute import popen_endpoint
from harness.run.lock import exclusive_run
from netem import clean, nsexec
from netem.events import LinkEvent
from netem.link import Link
from netem.stats import LinkStats
from netem.topologyspec import Topology
from tbcore import workloads
from tbcore.errors import SpecError
from tbcore.records import write_csv
from tbcore.runrow import TopologyRunRow
from tbcore.settings import KNOBS, Settings
from tbcore.units import parse_duration_s, parse_size_bytes

SERVER_PORT = 8443
RELAY_PORT = 8444
LATENESS_P99_LIMIT_S = 2e-3
"""A run is invalid when an edge's emulator released 1 % of its packets later than this:
2 ms is 1 % of the 200 ms long haul, and 10 % of a 20 ms path."""
TOP_KEYS = {"name", "question", "repetitions", "seed", "fixed", "factor", "reference", "quick"}
FIXED_KEYS = {
    "topology",
    "near_link",
    "link",
    "link_b",
    "exit_link",
    "workload",
    "size",
    "cc",
    "processing_audio",
    "warmup_requests",
    "backend",
}
RELAY_LEVEL_KEYS = {"name", "protocol", "route", "connection"}
DUAL_LEVEL_KEYS = {"name", "multipath", "exit_link", "outage_at", "protocol"}
QUICK_KEYS = {"repetitions", "levels"}
TB = [sys.executable, "-m", "harness.cli"]
CLIENT_TIMEOUT_S = 600.0
OUTAGE_UNTIL_TOLD_S = 3600.0
"""A failover's outage lasts until the run ends it (Link.end_events)."""
LINK_NAME = "tbtopo"


@dataclass
class TopologyExperiment:
    name: str
    question: str
    repetitions: int
    fixed: dict[str, Any]
    levels: list[dict[str, Any]]
    reference_ms: dict[str, float] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return str(self.fixed["topology"])


def is_topology_file(path: Path) -> bool:
    """Whether ``path`` declares a relay or dual topology (then it runs here)."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, RecursionError, tomllib.TOMLDecodeError):
        return False  # harness.spec.experiment.load names what is wrong with such a file
    return data.get("fixed", {}).get("topology") in ("relay", "dual")


def load(path: Path, *, quick: bool = False) -> TopologyExperiment:
    """Read and check a topology experiment (one-line SpecError naming the key)."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except tomllib.TOMLDecodeError as err:
        raise SpecError("file", f"{path}: not TOML: {err}") from None
    for key in data:
        if key not in TOP_KEYS:
            raise SpecError(key, "unknown key")
    fixed = dict(data.get("fixed", {}))
    for key in fixed:
        if key not in FIXED_KEYS:
            raise SpecError(f"fixed.{key}", "unknown key")
    # the keys that are knobs of the one settings model are checked by it
    knob_keys = {k: v for k, v in fixed.items() if k in KNOBS}
    Settings.from_table(knob_keys, "fixed")
    kind = fixed.get("topology")
    if kind not in ("relay", "dual"):
        raise SpecError("fixed.topology", f"{kind!r}: relay or dual here")
    levels = list(data.get("factor", {}).get("levels", []))
    if not levels:
        raise SpecError("factor.levels", "at least one level")
    allowed = RELAY_LEVEL_KEYS if kind == "relay" else DUAL_LEVEL_KEYS
    names = []
    for level in levels:
        for key in level:
            if key not in allowed:
                raise SpecError(f"level.{key}", f"not a {kind} level key ({sorted(allowed)})")
        if "name" not in level:
            raise SpecError("level.name", "missing")
        names.append(level["name"])
        _check_level(kind, level)
    if len(set(names)) != len(names):
        raise SpecError("level.name", "two levels share a name")
    repetitions = data.get("repetitions", 5)
    quick_data = data.get("quick", {})
    for key in quick_data:
        if key not in QUICK_KEYS:
            raise SpecError(f"quick.{key}", "unknown key")
    keep = quick_data.get("levels")
    if keep is not None:
        unknown = set(keep) - set(names)
        if unknown:
            raise SpecError("quick.levels", f"no level {sorted(unknown)[0]!r}")
    if quick:
        repetitions = quick_data.get("repetitions", repetitions)
        if keep is not None:
            levels = [lv for lv in levels if lv["name"] in keep]
    if isinstance(repetitions, bool) or not isinstance(repetitions, int) or repetitions < 1:
        raise SpecError("repetitions", f"must be a whole number >= 1, got {repetitions!r}")
    experiment = TopologyExperiment(
        name=str(data.get("name", Path(path).stem)),
        question=str(data.get("question", "")),
        repetitions=repetitions,
        fixed=fixed,
        levels=levels,
        reference_ms={k: float(v) for k, v in data.get("reference", {}).items()},
    )
    for level in levels:  # every topology builds (bad link strings fail here, nothing made)
        topology_of_level(experiment, level)
    return experiment


def _check_level(kind: str, level: dict[str, Any]) -> None:
    if kind == "relay":
        if level.get("protocol", "h2") not in ("h2", "h3"):
            raise SpecError("level.protocol", f"{level.get('protocol')!r}: h2 or h3")
        if level.get("route") not in ("direct", "relay"):
            raise SpecError("level.route", f"{level.get('route')!r}: direct or relay")
        if level.get("connection") not in ("new", "reused"):
            raise SpecError("level.connection", f"{level.get('connection')!r}: new or reused")
    else:
        Settings.from_table({"multipath": level.get("multipath")}, f"level {level['name']}")
        if level.get("multipath") not in MULTIPATH_MODES:
            raise SpecError("level.multipath", f"{level.get('multipath')!r}: {MULTIPATH_MODES}")
        if "outage_at" in level:
            parse_duration_s("level.outage_at", level["outage_at"])
            if level["multipath"] not in ("mptcp", "duplicate") and level.get("protocol") != "h3":
                raise SpecError(
                    "level.outage_at", "a failover needs mptcp, duplicate or h3 (migration)"
                )
        if level.get("protocol", "h2") == "h3" and (
            level["multipath"] != "single" or "outage_at" not in level
        ):
            raise SpecError(
                "level.protocol", "h3 on two paths: multipath = single with outage_at (migration)"
            )


def topology_of_level(experiment: TopologyExperiment, level: dict[str, Any]) -> Topology:
    fixed = experiment.fixed
    if experiment.kind == "relay":
        return Topology.build("relay", link=fixed["link"], near_link=fixed["near_link"])
    exit_link = level.get("exit_link", fixed.get("exit_link"))
    if exit_link == "none":
        exit_link = None
    return Topology.build("dual", link=fixed["link"], link_b=fixed["link_b"], exit_link=exit_link)


# --- one run ----------------------------------------------------------------------------


def _edge_delta(link: Link, before: dict[str, LinkStats]) -> dict[str, LinkStats]:
    return {e: link.stats(edge=e) - before[e] for e in link.topology.edge_names}


def _validity(delta: dict[str, LinkStats], error: str | None) -> tuple[bool, str]:
    if error:
        return False, f"error: {error}"[:200]
    for edge, stats in delta.items():
        for name in ("up", "down"):
            p99 = stats.direction(name).lateness_quantile_s(0.99)
            if p99 is not None and p99 > LATENESS_P99_LIMIT_S:
                return False, f"{edge}.{name} emulator lateness p99 {p99 * 1e3:.2f} ms"
    return True, ""


def relay_bound_s(experiment: TopologyExperiment, level: dict[str, Any], topo: Topology) -> float:
    near, far = topo.edge("near_link").spec, topo.edge("link").spec
    workload = experiment.fixed.get("workload", "asr")
    upload = workloads.get_workload("audio").size_bytes if workload == "asr" else 0
    download = workloads.get_workload("audio").size_bytes if workload == "tts" else 0
    processing = parse_duration_s(
        "processing_audio", experiment.fixed.get("processing_audio", "30ms")
    )
    up = min(r for r in (near.up.rate_bps, far.up.rate_bps) if r is not None)
    down = min(r for r in (near.down.rate_bps, far.down.rate_bps) if r is not None)
    protocol = level.get("protocol", "h2")
    if level["route"] == "relay" and level["connection"] == "new":
        return bounds.relay_request_time(
            protocol=protocol,
            near_rtt_s=near.rtt_s,
            long_rtt_s=far.rtt_s,
            up_bps=up,
            down_bps=down,
            upload_bytes=upload,
            download_bytes=download,
            processing_s=processing,
            near_up_bps=near.up.rate_bps,
            near_down_bps=near.down.rate_bps,
        ).total_s
    return bounds.request_time(
        rtt_s=near.rtt_s + far.rtt_s,
        up_bps=up,
        down_bps=down,
        upload_bytes=upload,
        download_bytes=download,
        protocol=protocol,
        connection=level["connection"],
        processing_s=processing,
    ).total_s


def run_relay_once(
    experiment: TopologyExperiment, level: dict[str, Any], link: Link, relay_addr: str, out: Path
) -> dict[str, Any]:
    protocol = level.get("protocol", "h2")
    host = relay_addr if level["route"] == "relay" else link.server_addr
    port = RELAY_PORT if level["route"] == "relay" else SERVER_PORT
    records = out / "client.jsonl"
    records.unlink(missing_ok=True)
    reused = level["connection"] == "reused"
    argv = [
        *TB, "client", "--protocol", protocol, "--host", host, "--port", str(port),
        "--workload", experiment.fixed.get("workload", "asr"), "--requests", "1",
        "--connection", level["connection"], "--records", str(records),
        "--warmup-requests", str(experiment.fixed.get("warmup_requests", 3) if reused else 0),
    ]  # fmt: skip
    if experiment.fixed.get("cc"):
        argv += ["--cc", experiment.fixed["cc"]]
    if protocol == "h3" and reused:
        argv += ["--quic-pacing", "off", "--max-datagram-size", "1452"]
    before = {e: link.stats(edge=e) for e in link.topology.edge_names}
    result = nsexec.run(
        link.client_ns, argv, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S
    )
    delta = _edge_delta(link, before)
    rows = (
        [json.loads(line) for line in records.read_text().splitlines()] if records.exists() else []
    )
    measured = [r for r in rows if not r.get("warmup")]
    error = None if measured else f"no record (exit {result.returncode}): {result.stderr[-200:]}"
    total_s = None
    if measured:
        rec = measured[-1]
        error = rec.get("error")
        start = rec["request_first_byte"] if reused else rec["connect_start"]
        if rec.get("response_last_byte") and start:
            total_s = rec["response_last_byte"] - start
    return {"total_s": total_s, "error": error, "delta": delta}


def run_dual_once(
    experiment: TopologyExperiment, level: dict[str, Any], link: Link, out: Path
) -> dict[str, Any]:
    size = parse_size_bytes("size", experiment.fixed.get("size", "30MB"))
    migrate = level.get("protocol") == "h3"
    argv = [
        sys.executable, "-m", "clients.multipath",
        "--mode", "h3-migrate" if migrate else level["multipath"],
        "--host", link.server_addr, "--port", str(SERVER_PORT),
        "--sources", f"{link.addr('client', 'link')},{link.addr('client', 'link_b')}",
        "--size", str(size), "--timeout", "300s",
    ]  # fmt: skip
    if experiment.fixed.get("cc"):
        argv += ["--cc", experiment.fixed["cc"]]
    before = {e: link.stats(edge=e) for e in link.topology.edge_names}
    proc = popen_endpoint(
        link.client_ns, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    outage = None
    assert proc.stdout is not None
    first = proc.stdout.readline()  # {"started_s": T}: the timed transfer begins
    if "outage_at" in level and first.startswith('{"started_s"'):
        # an outage of `link` from outage_at after the transfer's start, until told to end
        outage = link.event(
            LinkEvent(
                "outage",
                at_s=parse_duration_s("outage_at", level["outage_at"]),
                duration_s=OUTAGE_UNTIL_TOLD_S,
            ),
            base_s=json.loads(first)["started_s"],
            edge="link",
        )
    stdout, stderr = proc.communicate(timeout=CLIENT_TIMEOUT_S)
    delta = _edge_delta(link, before)
    try:
        result = json.loads(stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"total_s": None, "error": f"client: {stderr[-300:]}", "delta": delta}
    row: dict[str, Any] = {
        "total_s": result["total_s"],
        "error": result["error"],
        "delta": delta,
        "bytes_sent_app": result["bytes_sent"],
        "split_fraction_link": (result["fractions"] or [None])[0],
    }
    if migrate and outage is not None:
        for key in ("detected_s", "resumed_s"):
            if result.get(key) is not None:
                row[key.replace("_s", "_after_outage_s")] = result[key] - outage.start_s
    if outage is not None:
        row["outage_after_start_s"] = outage.start_s - result["start_s"]
        link.end_events(edge="link")  # the link comes back for the next run
    return row


def dual_bound_s(
    experiment: TopologyExperiment, level: dict[str, Any], topo: Topology, row: dict[str, Any]
) -> float:
    size = parse_size_bytes("size", experiment.fixed.get("size", "30MB"))
    a, b = topo.edge("link").spec.up.rate_bps, topo.edge("link_b").spec.up.rate_bps
    exit_bps = topo.edge("exit_link").spec.up.rate_bps if "exit_link" in topo.edge_names else None
    assert a is not None and b is not None
    mode = level["multipath"]
    if "outage_at" in level and row.get("outage_after_start_s") is not None:
        at = max(0.0, row["outage_after_start_s"])
        if mode == "duplicate":  # the surviving copy never shared the work
            return bounds.duplicate_failover_time_s(size, [a, b], at, 0, exit_bps)
        if level.get("protocol") == "h3":  # one path until the outage, then the other
            return bounds.failover_time_s(size, [a], at, b, exit_bps)
        return bounds.failover_time_s(size, [a, b], at, b, exit_bps)
    if mode == "single":
        return bounds.split_time_s(size, [a], exit_bps)
    if mode == "duplicate":
        return bounds.duplicate_time_s(size, [a, b], exit_bps)
    return bounds.split_time_s(size, [a, b], exit_bps)


# --- the experiment ---------------------------------------------------------------------


def _start(argv: list[str], ns: str, expect: str) -> subprocess.Popen:
    proc = popen_endpoint(ns, argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline()
    except BaseException:  # a signal while it starts: never orphaned (a session of its own)
        proc.kill()
        raise
    if expect not in line:
        proc.kill()
        raise RuntimeError(f"{argv[3]} did not start: {line!r}")
    return proc


def run_experiment(
    experiment: TopologyExperiment,
    out_root: Path,
    *,
    backend: str = "auto",
    progress: Callable[[str], None] = print,
    link_name: str = LINK_NAME,
    attempts: int = DEFAULT_ATTEMPTS,
) -> Path:
    """Run every level ``repetitions`` times; a run made invalid by the host (emulator
    lateness) is made again, up to ``attempts`` in all; returns the result directory."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = out_root / experiment.name / stamp
    out.mkdir(parents=True, exist_ok=True)
    groups: dict[str, list[dict[str, Any]]] = {}
    for level in experiment.levels:
        key = json.dumps(topology_of_level(experiment, level).to_dict(), sort_keys=True)
        groups.setdefault(key, []).append(level)
    rows: list[dict[str, Any]] = []
    for group in groups.values():
        topo = topology_of_level(experiment, group[0])
        rows += _run_group(experiment, topo, group, out, backend, progress, link_name, attempts)
        _write(out, experiment, rows)
    return out


def _server_argv(experiment: TopologyExperiment, link: Link, cc: list[str]) -> list[str]:
    """The ``testbed serve`` command line of the group's server."""
    server_argv = [
        *TB, "serve", "--bind", link.server_addr, "--h2-port", str(SERVER_PORT),
        "--processing-audio", experiment.fixed.get("processing_audio", "30ms"), *cc,
    ]  # fmt: skip
    if experiment.kind == "dual":  # h2 over MPTCP (or TCP), h3 for the migration level
        server_argv += ["--multipath", "mptcp", "--h3-port", str(SERVER_PORT)]
    else:
        server_argv += ["--h3-port", str(SERVER_PORT)]
    return server_argv


def _start_relay(
    link: Link, out: Path, cc: list[str], protocols: list[str]
) -> tuple[subprocess.Popen, str]:
    """Start the relay (its HTTP/2 and/or HTTP/3 sides) in its namespace; return the process
    and its address. It prints its listening lines once every side's upstream is warm."""
    relay_addr = link.addr("relay", "near_link")
    relay = _start(
        [
            *TB,
            "relay",
            "--bind",
            relay_addr,
            "--port",
            str(RELAY_PORT),
            "--upstream",
            f"{link.server_addr}:{SERVER_PORT}",
            "--log",
            str(out / "relay.jsonl"),
            "--protocols",
            ",".join(protocols),
            *cc,
        ],
        link.ns("relay"),
        "listening relay",
    )
    return relay, relay_addr


def _relay_protocols(levels: list[dict[str, Any]]) -> list[str]:
    """The relay's sides the levels use (h2 alone when none goes through it)."""
    used = {lv.get("protocol", "h2") for lv in levels if lv.get("route") == "relay"}
    return sorted(used) or ["h2"]


def _stop(procs: Iterable[subprocess.Popen | None]) -> None:
    """Terminate each process, killing it when it does not exit within 10 s."""
    for proc in procs:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def _run_record(
    experiment: TopologyExperiment,
    topo: Topology,
    level: dict[str, Any],
    rep_attempt: tuple[int, int],
    run_id: str,
    row: dict[str, Any],
    bound: float,
    started: float,
) -> tuple[dict[str, Any], str]:
    """The run's record (a :class:`TopologyRunRow` as a dict) and its invalid reason."""
    delta = row.pop("delta")
    valid, reason = _validity(delta, row.get("error"))
    total = row.get("total_s")
    outage_at = row.get("outage_after_start_s")
    record = TopologyRunRow(
        run_id=run_id,
        level=level["name"],
        rep=rep_attempt[0],
        attempt=rep_attempt[1],
        topology=experiment.kind,
        total_s=total,
        bound_s=bound,
        ratio=None if total is None else total / bound,
        valid=valid,
        invalid_reason=reason or None,
        error=row.get("error"),
        route=level.get("route"),
        protocol=level.get("protocol", "h2"),
        connection=level.get("connection"),
        multipath=level.get("multipath"),
        exit_link=topo.edge("exit_link").spec.__str__() if "exit_link" in topo.edge_names else None,
        **{f"bytes_{e}": d.up.bytes_out for e, d in delta.items()},
        bytes_sent_app=row.get("bytes_sent_app"),
        split_fraction_link=row.get("split_fraction_link"),
        dropped_outage_link=delta["link"].up.dropped_outage,
        outage_after_start_s=outage_at,
        recovery_s=None if outage_at is None or total is None else total - bound,
        detected_after_outage_s=row.get("detected_after_outage_s"),
        resumed_after_outage_s=row.get("resumed_after_outage_s"),
        wall_s=time.monotonic() - started,
    ).to_dict()
    return record, reason


def _rerun(record: dict[str, Any]) -> bool:
    """Whether a run is made again: invalid because of the host (an edge's emulator was
    late), not because the transfer failed (an error is the arm's result)."""
    return not record["valid"] and not record.get("error")


def _run_level(
    experiment: TopologyExperiment,
    topo: Topology,
    level: dict[str, Any],
    rep_attempt: tuple[int, int],
    link: Link,
    relay_addr: str,
    out: Path,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """Run one level once, write its ``run.json`` and report it; return its record."""
    rep, attempt = rep_attempt
    run_id = f"{level['name']}-{rep}" + (f"-a{attempt}" if attempt else "")
    run_dir = out / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    relay = experiment.kind == "relay"
    with exclusive_run(progress):  # one measured run at a time on the host
        if relay:
            row = run_relay_once(experiment, level, link, relay_addr, run_dir)
        else:
            row = run_dual_once(experiment, level, link, run_dir)
    bound = (
        relay_bound_s(experiment, level, topo)
        if relay
        else dual_bound_s(experiment, level, topo, row)
    )
    record, reason = _run_record(experiment, topo, level, rep_attempt, run_id, row, bound, started)
    (run_dir / "run.json").write_text(json.dumps(record, indent=1, default=str))
    total = row.get("total_s")
    shown = "failed" if total is None else f"{total * 1e3:.1f} ms"
    progress(f"{run_id}: {shown} (bound {bound * 1e3:.1f} ms) {reason}")
    return record


def _run_group(
    experiment: TopologyExperiment,
    topo: Topology,
    levels: list[dict[str, Any]],
    out: Path,
    backend: str,
    progress: Callable[[str], None],
    link_name: str,
    attempts: int = DEFAULT_ATTEMPTS,
) -> list[dict[str, Any]]:
    clean.clean(link_name)
    rows = []
    cc = ["--cc", experiment.fixed["cc"]] if experiment.fixed.get("cc") else []
    with Link.up(link_name, topo, backend=backend, slow_start_after_idle=False) as link:
        server = _start(_server_argv(experiment, link, cc), link.server_ns, "listening")
        relay = None
        relay_addr = ""
        try:
            if experiment.kind == "relay":
                relay, relay_addr = _start_relay(link, out, cc, _relay_protocols(levels))
            for rep in range(experiment.repetitions):
                order = levels if rep % 2 == 0 else list(reversed(levels))
                for level in order:
                    for attempt in range(attempts):
                        row = _run_level(
                            experiment, topo, level, (rep, attempt), link, relay_addr, out,
                            progress,
                        )  # fmt: skip
                        rows.append(row)
                        if not _rerun(row):
                            break
        finally:
            _stop((relay, server))
    return rows


def _write(out: Path, experiment: TopologyExperiment, rows: list[dict[str, Any]]) -> None:
    import pandas as pd

    write_csv(out / "runs.csv", TopologyRunRow, [TopologyRunRow.from_dict(r) for r in rows])
    frame = pd.DataFrame(rows)
    lines = [
        f"# {experiment.name}",
        "",
        experiment.question,
        "",
        "| level | attempts (valid) | median total | median bound | ratio | reference "
        "| bytes per edge (median) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    byte_cols = [c for c in frame.columns if c.startswith("bytes_")]
    for level in experiment.levels:
        sub = frame[(frame["level"] == level["name"]) & frame["valid"]]
        every = frame[frame["level"] == level["name"]]
        if every.empty:
            continue
        totals = [t for t in sub["total_s"] if t is not None and t == t]
        med = statistics.median(totals) if totals else None
        bound = float(every["bound_s"].iloc[0])
        ref = experiment.reference_ms.get(level["name"])
        per_edge = ", ".join(
            f"{c[6:]} {statistics.median(sub[c].dropna()) / 1e6:.2f} MB"
            for c in byte_cols
            if not sub.empty and sub[c].notna().any()
        )
        lines.append(
            f"| {level['name']} | {len(every)} ({len(sub)}) | "
            f"{'-' if med is None else f'{med * 1e3:.1f} ms'} | {bound * 1e3:.1f} ms | "
            f"{'-' if med is None else f'{med / bound:.2f}'} | "
            f"{'-' if ref is None else f'{ref:.1f} ms'} | {per_edge} |"
        )
    if "recovery_s" in frame.columns:
        rec = frame[frame["recovery_s"].notna()]
        for _, r in rec.iterrows():
            lines.append(
                f"\nfailover {r['run_id']}: outage {r['outage_after_start_s']:.2f} s into the "
                f"transfer; {r['total_s']:.2f} s against {r['bound_s']:.2f} s ideal continuation: "
                f"recovery cost {r['recovery_s']:.2f} s"
            )
    (out / "report.md").write_text("\n".join(lines) + "\n")


def run_file(
    path: Path,
    *,
    quick: bool,
    out_root: Path,
    backend: str = "auto",
    repetitions: int | None = None,
    link_name: str = LINK_NAME,
    attempts: int = DEFAULT_ATTEMPTS,
) -> Path:
    experiment = load(path, quick=quick)
    if repetitions is not None:
        experiment.repetitions = repetitions
    return run_experiment(
        experiment, out_root, backend=backend, link_name=link_name, attempts=attempts
    )
