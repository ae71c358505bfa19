"""``testbed bench link``, the loaded rows: the emulator at the rates of issue 29, with the
probe running across the same link, and its CPU per packet and per Mbit/s.

At 200 ms (the chapter's path), one run each, the RTT probe running alongside:

* TCP (cubic) at 333 Mbit/s: the emulator's CPU while it carries what TCP gets (the
  issue's target: at most a quarter of a core);
* UDP offered at 110 % of 1 Gbit/s: delivered against configured (within 2 %);
* TCP at 1 Gbit/s with socket buffers of at least one BDP (the link's sysctls raise
  ``tcp_rmem``/``tcp_wmem`` to twice it; autotuning grows into them): at least 95 %;
* under each, the lateness p99 of both directions (for TCP the down direction carries the
  ACKs while the up direction is saturated: under 0.5 ms), and the probe's one-way error
  on the down direction (its round trip holds the saturated up queue, a BDP of delay).

CPU per packet is the emulator's CPU seconds (user and system, all its threads) over the
packets it delivered in both directions in the window; per Mbit/s, its cores over the IP
Mbit/s delivered upstream.

The comparison with the peers (``--compare``) is :mod:`harness.bench.peerlink`.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from netem import nsexec, sysctl
from netem.linkspec import parse_link
from netem.probe import probe_link, quantile
from netem.stats import LinkStats

LOAD_RTT = "rtt=200ms"
GIGABIT_BPS = 1e9
CHAPTER_RATE_BPS = 333e6
UDP_OVERLOAD = 1.10
UDP_PAYLOAD_BYTES = 1400
UDP_HEADER_BYTES = 28
TCP_MSS_BYTES = 1448
"""A full segment's payload with the timestamp option (52 bytes of IPv4 and TCP headers)."""
IPERF_PORT = 5202
PROBE_INTERVAL_S = 5e-3
"""The probe alongside a loaded run: 200 round trips a second, a small load of its own."""


@dataclass(frozen=True)
class LoadCase:
    """One loaded row: a protocol at a rate, on a round trip."""

    label: str
    udp: bool
    rate_bps: float
    rtt: str = LOAD_RTT

    @property
    def link(self) -> str:
        return f"{self.rtt},rate={self.rate_bps / 1e6:g}mbit"

    @property
    def payload_bps(self) -> float:
        """The most the receiver can get: the rate less each packet's headers."""
        payload = UDP_PAYLOAD_BYTES if self.udp else TCP_MSS_BYTES
        return self.rate_bps * payload / (payload + (UDP_HEADER_BYTES if self.udp else 52))


LOAD_CASES = (
    LoadCase("TCP 333 Mbit/s", False, CHAPTER_RATE_BPS),
    LoadCase("UDP 1 Gbit/s", True, GIGABIT_BPS),
    LoadCase("TCP 1 Gbit/s", False, GIGABIT_BPS),
)
GRO_CASES = (
    LoadCase("TCP 2.5 Gbit/s, 40 ms, GRO", False, 2.5e9, rtt="rtt=40ms"),
    LoadCase("TCP 2.5 Gbit/s, 200 ms, GRO", False, 2.5e9),
    LoadCase("UDP 2.5 Gbit/s, 200 ms, GRO", True, 2.5e9),
)
"""Issue 41's path to 2.5 Gbit/s, measured on a second link whose emulator hands the receiver
super-packets (``--gro on``, harness.bench.link.measure_gro_load): one TCP flow at 40 ms
(its BDP, 12.5 MB, within the link's buffers of twice it) and at 200 ms (62.5 MB), and UDP
above the rate. On two cores the receiving stack's work, which runs in the emulator's TUN
writes, sets the ceiling: handed one segment at a time it stopped near 1.7 Gbit/s with the
emulator at 0.92-0.94 of a core; as super-packets (GRO) the receiver does that work once per
run of segments."""


def cpu_columns(delta: LinkStats) -> dict[str, float | None]:
    """The emulator's CPU per packet delivered (both directions) and per Mbit/s (up)."""
    cpu_s = delta.cpu.user_s + delta.cpu.system_s
    packets = delta.up.packets_out + delta.down.packets_out
    mbit_s = delta.up.bytes_out * 8 / delta.time_s / 1e6 if delta.time_s > 0 else 0.0
    cores = delta.emulator_cpu_fraction
    return {
        "emulator_cpu_us_per_packet": cpu_s / packets * 1e6 if packets else None,
        "emulator_cpu_cores_per_mbit_s": cores / mbit_s if cores is not None and mbit_s else None,
    }


def iperf_argv(server_addr: str, case: LoadCase, duration_s: float, omit_s: float) -> list[str]:
    argv = ["iperf3", "-c", server_addr, "-p", str(IPERF_PORT), "-J"]
    argv += ["-t", f"{duration_s:g}", "-O", f"{omit_s:g}"]
    if case.udp:
        argv += ["-u", "-b", f"{case.rate_bps * UDP_OVERLOAD:.0f}", "-l", str(UDP_PAYLOAD_BYTES)]
    else:
        argv += ["-C", "cubic"]
    return argv


def goodput_bps(stdout: bytes) -> float:
    """The receiver's payload rate (``sum_received``: for UDP, ``sum`` is the sender's)."""

    try:
        return float(json.loads(stdout)["end"]["sum_received"]["bits_per_second"])
    except (ValueError, KeyError, TypeError) as err:
        raise RuntimeError(f"iperf3 gave no receiver result: {err}") from None


def iperf_server(link: Any, port: int) -> subprocess.Popen[bytes]:
    """iperf3's server for one test (``-1``) in the link's server namespace, on ``port``;
    the caller gives it time to listen and waits for it."""
    return nsexec.popen(
        link.server_ns,
        ["iperf3", "-s", "-1", "-B", link.server_addr, "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def measure_case(link: Any, case: LoadCase, duration_s: float, omit_s: float) -> dict[str, Any]:
    """One loaded row: iperf3 across ``link`` (already at ``case.link``), the probe beside it
    once iperf3 is past its omitted start, the link's counters over the probe's window."""
    server = iperf_server(link, IPERF_PORT)
    try:
        time.sleep(0.3)
        client = nsexec.popen(
            link.client_ns,
            iperf_argv(link.server_addr, case, duration_s, omit_s),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            time.sleep(omit_s + 0.5)
            before = link.stats()
            probes = max(50, int((duration_s - 2.0) / PROBE_INTERVAL_S))
            result = probe_link(link, count=probes, interval_s=PROBE_INTERVAL_S, drain_s=0.5)
            delta = link.stats() - before
            stdout, _ = client.communicate(timeout=duration_s + omit_s + 60)
        finally:
            if client.poll() is None:
                client.kill()
                client.wait()
    finally:
        if server.poll() is None:
            server.terminate()
        server.wait(timeout=10)
    # the up direction is saturated (its queue holds up to a BDP): the probe's round trip
    # measures that queue; the down direction (the ACKs) is where the emulator's own error
    # under load shows, one way, with the kernel's receive stamp at the client
    errors = [d - link.spec.down.delay_s for d in result.down_s]
    delivered = delta.up.bytes_out * 8 / delta.time_s
    return {
        "label": case.label,
        "link": case.link,
        "proto": "udp" if case.udp else "tcp",
        "configured_bps": case.rate_bps,
        "goodput_bps": goodput_bps(stdout),
        "payload_fraction": goodput_bps(stdout) / case.payload_bps,
        "link_out_bps": delivered,
        "link_fraction": delivered / case.rate_bps,
        "down_median_error_s": quantile(errors, 0.5) if errors else None,
        "down_p99_error_s": quantile(errors, 0.99) if errors else None,
        "up_lateness_p99_s": delta.up.lateness_quantile_s(0.99),
        "down_lateness_p99_s": delta.down.lateness_quantile_s(0.99),
        **cpu_columns(delta),
        **load_row(delta),
    }


def measure_load(
    link: Any,
    duration_s: float,
    omit_s: float,
    say: Callable[[str], None],
    cases: tuple[LoadCase, ...] = LOAD_CASES,
) -> list[dict[str, Any]]:
    """Every loaded row on ``link`` (its spec changed per row)."""
    rows = []
    for case in cases:
        spec = parse_link(case.link)
        link.set_spec(spec)
        wanted = sysctl.link_sysctls(spec)  # socket buffers of twice this rate's BDP
        for role in ("client", "server"):
            sysctl.apply_link_sysctls(link.ns(role), wanted)
        say(f"{case.label} at {case.link}, probe alongside")
        rows.append(measure_case(link, case, duration_s, omit_s))
    return rows


def load_row(delta: LinkStats) -> dict[str, Any]:
    """The emulator's lateness and CPU, and the host's load, over one measurement."""
    cpu = delta.cpu
    lateness = [delta.up.lateness_quantile_s(0.99), delta.down.lateness_quantile_s(0.99)]
    known = [v for v in lateness if v is not None]
    return {
        "lateness_p99_s": max(known) if known else None,
        "lateness_max_s": max(delta.up.lateness_max_s, delta.down.lateness_max_s),
        "emulator_cpu_cores": delta.emulator_cpu_fraction,
        **cpu_columns(delta),
        "host_busy": None if cpu.host_total_s <= 0 else cpu.host_busy_s / cpu.host_total_s,
        "host_steal": cpu.steal_fraction,
        "queue_drops": delta.up.dropped_queue + delta.down.dropped_queue,
        "write_errors": delta.up.write_errors + delta.down.write_errors,
    }
