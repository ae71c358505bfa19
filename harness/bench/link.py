"""``testbed bench link``: how faithful the emulated path is, measured on this host.

On the backend in use (or a forced one), through the :class:`netem.link.Link` API:

* **RTT** at 200 ms configured (333 Mbit/s), with and without 14 % loss, with the UDP probe
  (:mod:`netem.probe`): median and p99 of (measured - configured), kernel receive
  timestamps at both ends; the application-level RTT beside it.
* **Loss**: realised against configured with the 99 % Wilson score interval, per direction,
  over the probe packets (>= 10^4 per direction in the full run), and the emulator's own
  count of its draws.
* **Rate**: delivered UDP (offered at 110 %) and kernel TCP (cubic) at 20, 100 and 333
  Mbit/s against configured, from iperf3's receiver side, on a 20 ms path (a 200 ms path
  makes TCP's convergence, not the link, the subject). The link's rate counts IP packets
  and iperf3 counts payload, so the delivered IP rate is the goodput times
  (payload + headers) / payload (1428/1400 for UDP, 1500/1448 for TCP); the goodput is
  reported beside it. Beside the receiver's view: the rate the link itself handed to the
  receiver in a steady-state window (its own counters), and the datagrams the receiving
  socket dropped, so that a shortfall is placed at the link or at an endpoint.
* **Air** (userspace backend only: the kernel has no shared medium): the RTT probe across
  ``air=54mbit/6mbit`` behind the same 200 ms, whose error should exceed the plain path's
  by the modelled medium time of one probe each way (access + data PPDU, :mod:`netem.air`),
  nothing more; and kernel TCP across ``air=54mbit/6mbit`` behind 20 ms, whose iperf3
  goodput should reach the medium's capacity for the ACK ratio the link carried:
  ``1448 * 8 / (exchange(1500) + acks/data * exchange(52))`` bits per second.
* **Load** (:mod:`harness.bench.linkload`): the emulator at the rates of issue 29 on the 200 ms
  path, TCP at 333 Mbit/s, UDP and TCP at 1 Gbit/s, and (full run, a second link with
  ``--gro on``) TCP at 2.5 Gbit/s at 40 and 200 ms and UDP above it, with the probe
  alongside: delivered rate (and its share of the payload limit), RTT error under load,
  each direction's lateness p99, and the emulator's CPU per packet and per Mbit/s.
* For every measurement: the emulator's lateness p99, its CPU (cores, and per packet
  delivered), and the host's busy and steal fractions (the load the number was taken under).

``--path c|python`` picks the emulator's packet path (the C path by default, the Python
reference to compare). ``--compare mahimahi[,netem]`` measures the emulator beside its peers
instead (:mod:`harness.bench.peerlink`, :mod:`harness.bench.peers`): one table, ratios to
ours.
``--quick`` runs a short version (a test runs it); ``--json`` prints the JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from rich.console import Console
from rich.table import Table

from harness.bench.linkload import GRO_CASES, iperf_server, load_row, measure_load
from netem import nsexec
from netem.air import AirSpec
from netem.emulator.control import EmulatorClient
from netem.emulator.options import PATHS, EmulatorOptions
from netem.link import Link
from netem.linkspec import parse_link
from netem.probe import probe_link, quantile
from netem.stats import LinkStats
from tbcore.errors import SpecError
from tbcore.stats import wilson_interval

SCHEMA_VERSION = 1
RTT_LINK = "rtt=200ms,rate=333mbit"
LOSS_FRACTION = 0.14
RATE_RTT = "20ms"
RATES_BPS = (20e6, 100e6, 333e6)
UDP_OVERLOAD = 1.10
"""UDP is offered at 110 % of the configured rate: the link, not the sender, sets the rate."""
UDP_PAYLOAD_BYTES = 1400
UDP_OVERHEAD_BYTES = 28
"""IPv4 (20) + UDP (8) header bytes per datagram."""
TCP_MSS_BYTES = 1448
"""Payload of a full TCP segment at MTU 1500 with the timestamp option (Linux's default)."""
TCP_OVERHEAD_BYTES = 52
"""IPv4 (20) + TCP (20) + timestamp option (12) header bytes per segment."""
IPERF_PORT = 5201
AIR = "air=54mbit/6mbit"
AIR_RTT_LINK = f"rtt=200ms,{AIR}"
AIR_RATE_LINK = f"rtt={RATE_RTT},{AIR}"
PROBE_IP_BYTES = 64 + UDP_OVERHEAD_BYTES
"""The probe's datagrams (64 bytes, :func:`netem.probe.probe_link`'s default) as IP packets."""
TCP_ACK_IP_BYTES = TCP_OVERHEAD_BYTES
"""A pure ACK with the timestamp option: 52 IP bytes."""
TARGETS = {
    "rtt_median_error_s": 0.3e-3,
    "rtt_p99_error_s": 1e-3,
    "rate_error_fraction_20_100": 0.02,
}
"""The issue's targets for the userspace backend on a 2-core machine."""


@dataclass(frozen=True)
class BenchConfig:
    """How long each part runs."""

    rtt_probes: int = 3000
    rtt_interval_s: float = 2e-3
    loss_probes: int = 12000
    """Sent by the lossy run; the down direction sees about 86 % of them (>= 10^4)."""
    loss_interval_s: float = 0.5e-3
    rate_duration_s: float = 6.0
    rate_omit_s: float = 2.0
    rates_bps: tuple[float, ...] = RATES_BPS
    load_duration_s: float = 10.0
    """Each loaded row (harness.bench.linkload): iperf3's measured part, the probe inside it."""
    load_omit_s: float = 4.0
    """iperf3's omitted start at 200 ms (TCP's slow start to 1 Gbit/s takes about 3 s)."""
    load: bool = True
    gro_omit_s: float = 8.0
    """The 2.5 Gbit/s rows' omitted start: slow start to 2.5 Gbit/s at 200 ms takes longer."""

    @property
    def quick_form(self) -> bool:
        return self.rates_bps != RATES_BPS

    @classmethod
    def quick(cls) -> BenchConfig:
        return cls(
            rtt_probes=300,
            loss_probes=2000,
            rate_duration_s=2.0,
            rate_omit_s=1.0,
            rates_bps=(20e6, 100e6),
            load=False,
        )


def loss_row(
    source: str, direction: str, configured: float, lost: int, trials: int
) -> dict[str, Any]:
    low, high = wilson_interval(lost, trials)
    return {
        "source": source,
        "direction": direction,
        "configured": configured,
        "trials": trials,
        "lost": lost,
        "realised": lost / trials,
        "wilson99": [low, high],
        "inside": low <= configured <= high,
    }


def measure_probe(link: Any, count: int, interval_s: float) -> tuple[dict[str, Any], Any]:
    configured = link.spec.rtt_s
    before = link.stats()
    result = probe_link(link, count=count, interval_s=interval_s, drain_s=configured + 0.5)
    delta = link.stats() - before
    errors = [r - configured for r in result.rtt_s]
    app_errors = [r - configured for r in result.app_rtt_s]
    row = {
        "configured_rtt_s": configured,
        "samples": len(errors),
        "median_error_s": quantile(errors, 0.5),
        "p99_error_s": quantile(errors, 0.99),
        "min_error_s": quantile(errors, 0.0),
        "app_median_error_s": quantile(app_errors, 0.5),
        "app_p99_error_s": quantile(app_errors, 0.99),
        "reordered": result.reordered,
        **load_row(delta),
    }
    return row, (result, delta)


@dataclass
class RateRun:
    """One iperf3 run: what the receiving application got, and what the link did meanwhile."""

    goodput_bps: float
    """iperf3's receiver-side payload rate over its measured interval."""
    link_in_bps: float
    """IP bytes the sender offered to the link per second, in the same window: below the
    rate, the sender (not the link) was short of CPU."""
    link_out_bps: float
    """IP bytes the emulated link handed to the receiver per second, in a steady-state window
    inside iperf3's interval (from the link's own counters)."""
    window: LinkStats
    """The link's counters over that window."""
    receiver_drops: int
    """UDP datagrams the receiving socket dropped (RcvbufErrors): the receiver, not the link."""


def udp_rcvbuf_errors(netns: str) -> int:
    """``Udp: RcvbufErrors`` of namespace ``netns`` (/proc/thread-self/net shows this thread's)."""
    with nsexec.in_netns(netns), open("/proc/thread-self/net/snmp") as f:
        rows = [line.split() for line in f if line.startswith("Udp:")]
    return int(dict(zip(rows[0][1:], rows[1][1:], strict=True))["RcvbufErrors"])


def iperf(link: Any, *, udp: bool, rate_bps: float, config: BenchConfig) -> RateRun:
    """Run iperf3 client -> server across the link (UDP at 110 % of the rate, or TCP cubic)."""
    server = iperf_server(link, IPERF_PORT)
    try:
        time.sleep(0.3)
        argv = [
            "iperf3",
            "-c",
            link.server_addr,
            "-p",
            str(IPERF_PORT),
            "-t",
            f"{config.rate_duration_s:g}",
            "-O",
            f"{config.rate_omit_s:g}",
            "-J",
        ]
        if udp:
            argv += ["-u", "-b", f"{rate_bps * UDP_OVERLOAD:.0f}", "-l", str(UDP_PAYLOAD_BYTES)]
        else:
            argv += ["-C", "cubic"]
        drops_before = udp_rcvbuf_errors(link.server_ns)
        client = nsexec.popen(link.client_ns, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            # iperf3 runs omit + duration seconds; the window sits inside the measured part
            time.sleep(config.rate_omit_s + 0.5)
            first = link.stats()
            time.sleep(max(0.5, config.rate_duration_s - 1.0))
            window = link.stats() - first
            stdout, stderr = client.communicate(
                timeout=config.rate_duration_s + config.rate_omit_s + 30
            )
        finally:
            if client.poll() is None:
                client.kill()
                client.wait()
        try:
            goodput = float(json.loads(stdout)["end"]["sum_received"]["bits_per_second"])
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise RuntimeError(f"iperf3 gave no receiver result: {stderr!r} {err}") from None
        return RateRun(
            goodput_bps=goodput,
            link_in_bps=window.up.bytes_in * 8 / window.time_s,
            link_out_bps=window.up.bytes_out * 8 / window.time_s,
            window=window,
            receiver_drops=udp_rcvbuf_errors(link.server_ns) - drops_before,
        )
    finally:
        if server.poll() is None:
            server.terminate()
        server.wait(timeout=10)


def measure_rates(link: Any, config: BenchConfig, say: Callable[[str], None]) -> list[dict]:
    """The rate rows: UDP and TCP at each configured rate on the 20 ms path."""
    rows = []
    for rate_bps in config.rates_bps:
        spec = f"rtt={RATE_RTT},rate={rate_bps / 1e6:g}mbit"
        link.set_spec(spec)
        for udp in (True, False):
            proto = "udp" if udp else "tcp"
            say(f"{proto} at {spec}")
            run = iperf(link, udp=udp, rate_bps=rate_bps, config=config)
            # the link's rate counts IP packets; iperf3 counts payload
            payload, overhead = (
                (UDP_PAYLOAD_BYTES, UDP_OVERHEAD_BYTES)
                if udp
                else (TCP_MSS_BYTES, TCP_OVERHEAD_BYTES)
            )
            delivered = run.goodput_bps * (payload + overhead) / payload
            rows.append(
                {
                    "proto": proto,
                    "link": spec,
                    "configured_bps": rate_bps,
                    "goodput_bps": run.goodput_bps,
                    "delivered_bps": delivered,
                    "error_fraction": delivered / rate_bps - 1.0,
                    "link_in_bps": run.link_in_bps,
                    "link_out_bps": run.link_out_bps,
                    "link_error_fraction": run.link_out_bps / rate_bps - 1.0,
                    "receiver_drops": run.receiver_drops,
                    **load_row(run.window),
                }
            )
    return rows


def run_bench(
    *,
    backend: str = "auto",
    name: str = "bench",
    config: BenchConfig | None = None,
    progress: Callable[[str], None] | None = None,
    emulator: EmulatorOptions | None = None,
) -> dict[str, Any]:
    """Measure the link backend; returns the JSON document :func:`print_table` shows."""

    config = config or BenchConfig()
    say = progress or (lambda _msg: None)
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "quick": config != BenchConfig(),
        "config": asdict(config),
        "host": {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg()},
        "targets": TARGETS,
        "rtt": [],
        "loss": [],
        "rate": [],
    }
    with Link.up(name, RTT_LINK, backend=backend, emulator=emulator) as link:
        doc["backend"] = link.backend
        doc["emulator_processes"] = link.stats().processes
        doc["emulator"] = emulator_path(link)
        say(f"RTT at {RTT_LINK}")
        row, _ = measure_probe(link, config.rtt_probes, config.rtt_interval_s)
        doc["rtt"].append({"label": "200 ms, no loss", "link": RTT_LINK, **row})

        lossy = f"{RTT_LINK},loss={LOSS_FRACTION * 100:g}%"
        link.set_spec(lossy)
        say(f"RTT and loss at {lossy}")
        row, (result, delta) = measure_probe(link, config.loss_probes, config.loss_interval_s)
        doc["rtt"].append({"label": "200 ms, 14 % loss", "link": lossy, **row})
        doc["loss"].append(
            loss_row("probe", "up", LOSS_FRACTION, result.sent - result.echoed, result.sent)
        )
        doc["loss"].append(
            loss_row("probe", "down", LOSS_FRACTION, result.echoed - result.received, result.echoed)
        )
        for direction in ("up", "down"):
            d = delta.direction(direction)
            if d.loss_trials > 0:
                doc["loss"].append(
                    loss_row("emulator", direction, LOSS_FRACTION, d.dropped_loss, d.loss_trials)
                )

        doc["rate"] = measure_rates(link, config, say)
        air = doc["backend"] == "userspace"
        if config.load:
            doc["load"] = measure_load(link, config.load_duration_s, config.load_omit_s, say)
    if config.load and doc["backend"] == "userspace" and not config.quick_form:
        doc["load"] += measure_gro_load(name, config, say, emulator)
    if air:
        doc["air"] = measure_air(name, config, say, emulator)
    doc["host"]["loadavg_end"] = os.getloadavg()
    return doc


def measure_gro_load(
    name: str,
    config: BenchConfig,
    say: Callable[[str], None],
    emulator: EmulatorOptions | None,
) -> list[dict[str, Any]]:
    """The 2.5 Gbit/s rows (:data:`harness.bench.linkload.GRO_CASES`) on a link of their own
    with ``--gro on``; not on the Python path (it has no offloads), and with the user's
    ``--gro off`` as asked (the rows then say so)."""
    options = emulator or EmulatorOptions()
    if options.path == "python":
        return []
    gro = options.gro is not False
    cases = (
        GRO_CASES
        if gro
        else tuple(replace(c, label=c.label.replace(", GRO", ", no GRO")) for c in GRO_CASES)
    )
    with Link.up(
        f"{name}g", cases[0].link, backend="userspace", emulator=replace(options, gro=gro)
    ) as link:
        return measure_load(link, config.load_duration_s, config.gro_omit_s, say, cases=cases)


def air_probe_model_s(air: AirSpec) -> float:
    """What the medium adds to one probe round trip: access + data PPDU, each way."""
    return 2 * (air.access_ns + air.data_ppdu_ns(PROBE_IP_BYTES)) / 1e9


def air_tcp_model_bps(air: AirSpec, acks_per_data: float) -> float:
    """TCP goodput the medium allows: full segments, each with its share of pure ACKs."""
    per_segment_ns = air.exchange_ns(TCP_MSS_BYTES + TCP_OVERHEAD_BYTES) + (
        acks_per_data * air.exchange_ns(TCP_ACK_IP_BYTES)
    )
    return TCP_MSS_BYTES * 8 / (per_segment_ns / 1e9)


def emulator_path(link: Any) -> dict[str, Any] | None:
    """The userspace emulator's packet path and knobs (its ``path`` command), or None."""
    if link.backend != "userspace":
        return None

    answer = EmulatorClient(link.state.control_path).request("path")
    return {k: v for k, v in answer.items() if k != "counters"}


def measure_air(
    name: str,
    config: BenchConfig,
    say: Callable[[str], None],
    emulator: EmulatorOptions | None = None,
) -> dict[str, Any]:
    """The air rows: probe RTT across the medium, and kernel TCP against its capacity."""

    air = parse_link(AIR).air
    assert air is not None
    out: dict[str, Any] = {"link_rtt": AIR_RTT_LINK, "link_rate": AIR_RATE_LINK}
    with Link.up(f"{name}a", AIR_RTT_LINK, backend="userspace", emulator=emulator) as link:
        say(f"RTT at {AIR_RTT_LINK}")
        row, _ = measure_probe(link, config.rtt_probes, config.rtt_interval_s)
        model = air_probe_model_s(air)
        out["rtt"] = {
            **row,
            "air_model_s": model,
            "median_residual_s": row["median_error_s"] - model,
            "p99_residual_s": row["p99_error_s"] - model,
        }
        link.set_spec(AIR_RATE_LINK)
        say(f"tcp at {AIR_RATE_LINK}")
        run = iperf(link, udp=False, rate_bps=air.data_rate_bps, config=config)
    medium = run.window.air
    assert medium is not None
    data = medium.frames["up.data"]
    acks = medium.frames["down.ack"]
    ratio = acks / data if data else 0.0
    model_bps = air_tcp_model_bps(air, ratio)
    out["tcp"] = {
        "goodput_bps": run.goodput_bps,
        "model_bps": model_bps,
        "error_fraction": run.goodput_bps / model_bps - 1.0,
        "acks_per_data": ratio,
        "air_busy_fraction": medium.busy_s / run.window.time_s,
        **load_row(run.window),
    }
    return out


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:+.3f}"


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e6:.0f}"


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}"


LOAD_COLUMNS = ("lateness p99 µs", "emu CPU %", "CPU µs/pkt", "host busy %", "steal %")
"""The last columns of the RTT and rate tables: the load a row was measured under."""


def _load_cells(row: dict[str, Any]) -> tuple[str, ...]:
    """A row's :data:`LOAD_COLUMNS` cells (from :func:`load_row`'s keys)."""
    return (
        _us(row["lateness_p99_s"]),
        _pct(row["emulator_cpu_cores"]),
        _num(row.get("emulator_cpu_us_per_packet"), "{:.1f}"),
        _pct(row["host_busy"]),
        _pct(row["host_steal"]),
    )


def _table(title: str, columns: tuple[str, ...]) -> Any:
    """A rich table with right-justified ``columns``."""

    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="right")
    return table


def print_table(doc: dict[str, Any]) -> None:
    console = Console(width=max(140, Console().width))
    path = doc.get("emulator") or {}
    knobs = "".join(f", {k} {v}" for k, v in path.items() if k != "path")
    console.print(
        f"backend {doc.get('backend')}"
        + (f", {path['path']} packet path{knobs}" if path else "")
        + f", {doc.get('emulator_processes')} emulator process(es), "
        f"{doc['host']['cpus']} CPUs, load average {doc['host']['loadavg_start'][0]:.2f} at "
        f"start{' (quick run)' if doc['quick'] else ''}"
    )
    rtt = _table(
        "RTT error at 200 ms (UDP probe, kernel timestamps)",
        ("path", "samples", "median ms", "p99 ms", "app median ms", "app p99 ms", *LOAD_COLUMNS),
    )
    for r in doc["rtt"]:
        rtt.add_row(
            r["label"],
            str(r["samples"]),
            _ms(r["median_error_s"]),
            _ms(r["p99_error_s"]),
            _ms(r["app_median_error_s"]),
            _ms(r["app_p99_error_s"]),
            *_load_cells(r),
        )
    console.print(rtt)
    loss = _table(
        "Loss: realised vs configured, 99 % Wilson interval",
        ("source", "direction", "configured %", "trials", "realised %", "99 % CI", "ok"),
    )
    for r in doc["loss"]:
        low, high = r["wilson99"]
        loss.add_row(
            r["source"],
            r["direction"],
            _pct(r["configured"]),
            str(r["trials"]),
            f"{r['realised'] * 100:.2f}",
            f"{low * 100:.2f}-{high * 100:.2f}",
            "yes" if r["inside"] else "NO",
        )
    console.print(loss)
    rate = _table(
        f"Delivered rate (iperf3 receiver, {RATE_RTT} RTT)",
        (
            "proto",
            "configured Mbit/s",
            "goodput Mbit/s",
            "IP Mbit/s",
            "error %",
            "link in Mbit/s",
            "link out Mbit/s",
            "rcv drops",
            *LOAD_COLUMNS,
        ),
    )
    for r in doc["rate"]:
        rate.add_row(
            r["proto"],
            f"{r['configured_bps'] / 1e6:g}",
            f"{r['goodput_bps'] / 1e6:.2f}",
            f"{r['delivered_bps'] / 1e6:.2f}",
            f"{r['error_fraction'] * 100:+.2f}",
            f"{r['link_in_bps'] / 1e6:.2f}",
            f"{r['link_out_bps'] / 1e6:.2f}",
            str(r["receiver_drops"]),
            *_load_cells(r),
        )
    console.print(rate)
    if doc.get("load"):
        print_load(console, doc["load"])
    if doc.get("air"):
        print_air(console, doc["air"])


def print_load(console: Any, rows: list[dict[str, Any]]) -> None:
    table = _table(
        "Under load at 200 ms (iperf3, the probe alongside; targets in issue 29)",
        (
            "run",
            "goodput Mbit/s",
            "of payload limit %",
            "link out Mbit/s",
            "of rate %",
            "down err median ms",
            "down err p99 ms",
            "late p99 up µs",
            "late p99 down µs",
            "emu CPU %",
            "CPU µs/pkt",
            "CPU %/100 Mbit/s",
            "host busy %",
            "steal %",
        ),
    )
    for r in rows:
        per_mbit = r.get("emulator_cpu_cores_per_mbit_s")
        table.add_row(
            r["label"],
            f"{r['goodput_bps'] / 1e6:.1f}",
            _pct(r.get("payload_fraction")),
            f"{r['link_out_bps'] / 1e6:.1f}",
            _pct(r["link_fraction"]),
            _ms(r["down_median_error_s"]),
            _ms(r["down_p99_error_s"]),
            _us(r["up_lateness_p99_s"]),
            _us(r["down_lateness_p99_s"]),
            _pct(r["emulator_cpu_cores"]),
            _num(r.get("emulator_cpu_us_per_packet"), "{:.1f}"),
            _num(None if per_mbit is None else per_mbit * 1e4, "{:.1f}"),
            _pct(r["host_busy"]),
            _pct(r["host_steal"]),
        )
    console.print(table)


def print_air(console: Any, air: dict[str, Any]) -> None:
    table = _table(
        f"air=54mbit/6mbit: probe RTT ({air['link_rtt']}), TCP ({air['link_rate']})",
        (
            "measure",
            "measured",
            "air model",
            "residual / error",
            "p99 residual",
            "acks/data",
            "medium busy %",
            "lateness p99 µs",
            "emu CPU %",
            "steal %",
        ),
    )
    r = air["rtt"]
    table.add_row(
        "RTT error median ms",
        _ms(r["median_error_s"]),
        _ms(r["air_model_s"]),
        _ms(r["median_residual_s"]),
        _ms(r["p99_residual_s"]),
        "-",
        "-",
        _us(r["lateness_p99_s"]),
        _pct(r["emulator_cpu_cores"]),
        _pct(r["host_steal"]),
    )
    t = air["tcp"]
    table.add_row(
        "TCP goodput Mbit/s",
        f"{t['goodput_bps'] / 1e6:.2f}",
        f"{t['model_bps'] / 1e6:.2f}",
        f"{t['error_fraction'] * 100:+.2f} %",
        "-",
        f"{t['acks_per_data']:.3f}",
        _pct(t["air_busy_fraction"]),
        _us(t["lateness_p99_s"]),
        _pct(t["emulator_cpu_cores"]),
        _pct(t["host_steal"]),
    )
    console.print(table)


def cli(args: argparse.Namespace) -> int:
    from harness.bench.peercli import check_options, compare_cli, emulator_options

    check_options(args)
    if args.compare is not None:
        return compare_cli(args)
    config = BenchConfig.quick() if args.quick else BenchConfig()
    if args.no_load:
        config = replace(config, load=False)
    progress = None if args.json else (lambda msg: print(f"bench link: {msg}", flush=True))
    emulator = emulator_options(args)
    if emulator is not None and args.backend == "netem":
        raise SpecError("path", "the netem backend has no userspace emulator")
    doc = run_bench(
        backend=args.backend, name=args.name, config=config, progress=progress, emulator=emulator
    )
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print_table(doc)
    return 0


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``testbed bench link`` to the ``bench`` subparsers."""
    parser = bench.add_parser(
        "link", help="fidelity of the emulated path: RTT, loss, rate, emulator lateness and CPU"
    )
    parser.add_argument(
        "--backend", default="auto", choices=("auto", "netem", "userspace"), help="link backend"
    )
    parser.add_argument("--quick", action="store_true", help="a short run (about 30 s)")
    parser.add_argument("--json", action="store_true", help="print the JSON document")
    parser.add_argument("--name", default="bench", help="name of the temporary link")
    parser.add_argument(
        "--path", choices=PATHS, help="the userspace emulator's packet path (default: c)"
    )
    parser.add_argument(
        "--offload", choices=("on", "off"), help="C path: take TCP super-packets (default on)"
    )
    parser.add_argument(
        "--coalesce-us",
        type=float,
        help="C path: the timer grid on dense traffic, µs (default: the emulator's)",
    )
    parser.add_argument(
        "--gro",
        choices=("on", "off"),
        help="C path with offloads: hand the receiver runs of segments as one (default off)",
    )
    parser.add_argument(
        "--stamps",
        choices=("on", "off"),
        help="C path: arrival times from the kernel, reads deferred where that changes "
        "nothing (default on)",
    )
    parser.add_argument(
        "--no-load", action="store_true", help="skip the loaded rows at 333 Mbit/s and 1 Gbit/s"
    )
    parser.add_argument(
        "--compare",
        metavar="PEERS",
        help="mahimahi, netem or mahimahi,netem: the same workloads through each emulator, "
        "alternated, one table with ratios to ours (instead of the fidelity bench)",
    )
    parser.add_argument(
        "--mahimahi-bin",
        metavar="DIR",
        help="where Mahimahi's mm-delay and mm-link are (setuid root; default: the PATH)",
    )
    parser.add_argument(
        "--trace",
        action="append",
        metavar="FILE",
        help="--compare: a capacity trace (Mahimahi's format) every emulator also replays, "
        "beside the shipped cell-markov.down (repeatable)",
    )
    parser.add_argument(
        "--rounds", type=int, default=None, help="--compare: alternated rounds (default 3)"
    )
    parser.add_argument(
        "--save",
        metavar="STEM",
        default=None,
        help="--compare: also write STEM.md and STEM.json (e.g. results/reference/link-compare)",
    )
    parser.set_defaults(handler=cli)
