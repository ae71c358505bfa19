"""``testbed bench stacks``: loopback goodput and CPU cost of the HTTP/2 and HTTP/3 stacks,
then CPU per datagram of each QUIC stack, aioquic beside the native one (ngtcp2:
harness.bench.datagrams), on loopback and across the emulated link at 333 Mbit/s
(harness.bench.stacklink; ``--no-link`` leaves it out).

For each protocol, against a ``testbed serve`` subprocess on 127.0.0.1: 30 MB down
(``GET /image``) and 30 MB up (``POST /sink``) on a warm, reused connection, ``--reps``
times each, HTTP/3 on aioquic and on the native stack; goodput = body bytes / (first request
byte -> last response byte); CPU seconds per MB for the client (this process and its reaped
children: the native engine, getrusage) and the server (its process tree, schedstat).
Then one reused-connection ASR request (354,640 bytes up, 30 ms
processing): its median time over the reps. The machine's load (loadavg, steal) is
printed with the table, since these VMs share their CPUs.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import uvloop

from clients.api import run_requests
from clients.config import ClientConfig
from harness.bench.datagrams import run_datagrams, tree_runtime_s
from harness.bench.datagrams import summary as datagram_summary
from harness.bench.stacklink import run_link
from servers.process import ServerProcess
from tbcore import kinds
from tbcore.errors import SpecError
from tbcore.records import RequestRecord
from tbcore.settings import Settings
from tbcore.workloads import AUDIO_SIZE_BYTES

MB = 1_000_000
BENCH_TIMEOUT_S = 120.0
"""A 30 MB transfer at the slowest stack measured (~20 Mbit/s) takes ~12 s; ten times that."""
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


@dataclass
class CpuSnapshot:
    client_s: float
    server_s: float
    wall_s: float


def _self_cpu_s() -> float:
    """This process and its reaped children (the native stack's client engine)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def snapshot(server_pid: int) -> CpuSnapshot:
    """The server's whole process tree (the native stack's engine is a child of it)."""
    return CpuSnapshot(_self_cpu_s(), tree_runtime_s(server_pid), time.monotonic())


def steal_fraction(before: list[int], after: list[int]) -> float:
    total = sum(after) - sum(before)
    return (after[7] - before[7]) / total if total > 0 else 0.0


def cpu_times() -> list[int]:
    with open("/proc/stat") as handle:
        return [int(x) for x in handle.readline().split()[1:]]


def _duration_s(record: RequestRecord) -> float:
    assert record.request_first_byte is not None and record.response_last_byte is not None
    return record.response_last_byte - record.request_first_byte


async def _measure(
    config: ClientConfig, server_pid: int
) -> tuple[list[RequestRecord], CpuSnapshot, CpuSnapshot]:
    before = snapshot(server_pid)
    records = await run_requests(config)
    after = snapshot(server_pid)
    return records, before, after


def bench_protocol(
    protocol: str,
    reps: int,
    max_datagram_size: int,
    label: str,
    batching: bool = True,
    pacing: str = "cwnd",
    quic_stack: str = "aioquic",
) -> list[dict]:
    rows = []
    args = ["--max-datagram-size", str(max_datagram_size), "--max-body", "40mb"]
    if quic_stack != "aioquic":
        args += ["--quic-stack", quic_stack]
    args += kinds.protocol(protocol).listeners(0)  # this protocol alone, on a free port
    if not batching:
        args.append("--no-quic-batching")
    args += ["--quic-pacing", pacing]
    with ServerProcess(args) as server:
        assert server.proc is not None
        pid = server.proc.pid
        port = server.ports[protocol]
        for workload, direction in (("image", "down"), ("sink", "up")):
            config = ClientConfig(
                port=port,
                settings=Settings(
                    protocol=protocol,
                    workload=workload,
                    requests=reps,
                    warmup_requests=1,
                    connection="reused",
                    max_datagram_size_bytes=max_datagram_size,
                    quic_batching=batching,
                    quic_pacing=pacing,
                    quic_stack=quic_stack,
                    timeout_s=BENCH_TIMEOUT_S,
                ),
            )
            records, before, after = uvloop.run(_measure(config, pid))
            measured = [r for r in records if not r.warmup]
            failed = [r.error for r in records if r.error]
            if failed:
                raise RuntimeError(f"{protocol} {workload}: {failed[0]}")
            durations = [_duration_s(r) for r in measured]
            megabytes = 30.0 * len(records)  # CPU covers the warm-up too
            rows.append(
                {
                    "stack": label,
                    "transfer": f"30 MB {direction}",
                    "goodput_mbit_s": statistics.median(30 * 8 / d for d in durations),
                    "client_cpu_s_per_mb": (after.client_s - before.client_s) / megabytes,
                    "server_cpu_s_per_mb": (after.server_s - before.server_s) / megabytes,
                }
            )
        asr = ClientConfig(
            port=port,
            settings=Settings(
                protocol=protocol,
                workload="asr",
                requests=max(reps, 5),
                warmup_requests=1,
                connection="reused",
                max_datagram_size_bytes=max_datagram_size,
                quic_batching=batching,
                quic_pacing=pacing,
                quic_stack=quic_stack,
            ),
        )
        records, _, _ = uvloop.run(_measure(asr, pid))
        measured = [r for r in records if not r.warmup and r.ok]
        rows.append(
            {
                "stack": label,
                "transfer": "ASR reused (ms)",
                "asr_ms": statistics.median(_duration_s(r) for r in measured) * 1e3,
                "upload_mbit_s": statistics.median(
                    AUDIO_SIZE_BYTES * 8 / 1e6 / (r.request_last_byte - r.request_first_byte)
                    for r in measured
                    if r.request_last_byte
                ),
            }
        )
    return rows


def _h2_rows(args: argparse.Namespace) -> list[dict]:
    return bench_protocol("h2", args.reps, args.max_datagram_size, "h2")


def _h3_rows(args: argparse.Namespace) -> list[dict]:
    mds = args.max_datagram_size
    rows = []
    if args.baseline:
        # before: aioquic's defaults (1200-byte datagrams, a sendto and a transmit
        # per datagram, pacing at cwnd/srtt), then the datagram size alone
        rows += bench_protocol("h3", args.reps, 1200, "h3 1200 aioquic", batching=False)
        rows += bench_protocol("h3", args.reps, mds, f"h3 {mds} unbatched", batching=False)
    rows += bench_protocol("h3", args.reps, mds, f"h3 {mds} batched")
    rows += bench_protocol("h3", args.reps, mds, f"h3 {mds} batched nopace", pacing="off")
    rows += bench_protocol("h3", args.reps, mds, f"h3 {mds} ngtcp2", quic_stack="ngtcp2")
    return rows


VARIANTS: dict[str, Callable[[argparse.Namespace], list[dict]]] = {
    "h2": _h2_rows,
    "h3": _h3_rows,
}
"""The stack variants the bench measures, by protocol (each a row per transfer)."""


def run_bench(args: argparse.Namespace) -> int:
    protocols = [p.strip() for p in args.protocols.split(",") if p.strip()]
    load_before = os.getloadavg()
    stat_before = cpu_times()
    rows: list[dict] = []
    for protocol in protocols:
        if protocol not in VARIANTS:
            raise SpecError("protocols", f"{protocol!r}: the bench runs {', '.join(VARIANTS)}")
    for protocol in protocols:
        rows += VARIANTS[protocol](args)
    quic_stacks = [s.strip() for s in args.quic_stacks.split(",") if s.strip()]
    datagram_rows = run_datagrams(quic_stacks, args.reps) if quic_stacks else []
    link_rows = run_link(args.reps) if args.link else []
    steal = steal_fraction(stat_before, cpu_times())
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        if rows:
            print(pd.DataFrame(rows).to_string(index=False, float_format=lambda x: f"{x:.4g}"))
        if datagram_rows:
            print(f"\nCPU per datagram, {quic_stacks} (5 MB result down, loopback, medians):")
            table = pd.DataFrame(datagram_summary(datagram_rows))
            print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
        if link_rows:
            print("\nAcross the link (200 ms, 333 Mbit/s, bbr, 5 MB result down, medians):")
            table = pd.DataFrame(link_rows)
            print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    print(
        f"load: loadavg before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}; "
        f"steal {steal * 100:.1f} % of CPU time during the bench; {os.cpu_count()} CPUs"
    )
    return 0


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``bench stacks`` to ``testbed``."""
    del commands
    stacks = bench.add_parser(
        "stacks", help="loopback goodput and CPU per MB of the HTTP/2 and HTTP/3 stacks"
    )
    stacks.add_argument("--protocols", default="h2,h3")
    stacks.add_argument("--reps", type=int, default=3, help="repetitions of each transfer")
    stacks.add_argument("--max-datagram-size", type=int, default=1452)
    stacks.add_argument("--baseline", action="store_true", help="also run aioquic defaults (1200)")
    stacks.add_argument(
        "--quic-stacks",
        default="aioquic,ngtcp2",
        help="QUIC stacks of the CPU-per-datagram table (harness.bench.datagrams; root); "
        "empty: none",
    )
    stacks.add_argument(
        "--link",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run both QUIC stacks across the emulated 333 Mbit/s link "
        "(harness.bench.stacklink; root)",
    )
    stacks.set_defaults(handler=run_bench)
