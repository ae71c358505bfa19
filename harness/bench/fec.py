"""``testbed bench fec``: what the erasure code and the datagram authentication cost here.

For the audio (k = 251 symbols of 1416 bytes) and the 30 MB image (three blocks of about
7,060), with the stack's own code path (:class:`~proto.fec.code.BlockEncoder` /
:class:`~proto.fec.code.BlockDecoder`): encode k + r symbols (r from the adaptive
redundancy at 14 % loss), decode from the symbols that survive 14 % independent loss, and
seal / verify one datagram (HMAC-SHA256). Times are the median of ``--reps``; CPU is the
process's (user + system). On a shared, loaded host the wall time measures the neighbours
too; the CPU per MB is the code's own, and ``8 / (CPU s/MB)`` is what one core of its own
would sustain: the table compares that with 333 Mbit/s.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from proto.fec import wire
from proto.fec.code import BlockDecoder, BlockEncoder, BlockLayout
from proto.fec.loss import LossReport, Redundancy
from tbcore import workloads

PATH_RATE_BPS = 333e6
"""The chapter's path (docs/models.md section 10's worked example)."""
BENCH_LOSS = 0.14


@dataclass(frozen=True)
class Timing:
    wall_s: float
    cpu_s: float


def _timed(job: Callable[[], object], reps: int) -> Timing:
    walls, cpus = [], []
    for _ in range(reps):
        wall, cpu = time.perf_counter(), time.process_time()
        job()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return Timing(statistics.median(walls), statistics.median(cpus))


def _code_rows(name: str, data: bytes, reps: int) -> list[dict[str, object]]:
    layout = BlockLayout(len(data))
    redundancy = Redundancy()
    report = LossReport(BENCH_LOSS, BENCH_LOSS, 4096)
    rng = random.Random(7)
    blocks = []
    for b in range(layout.blocks):
        start, end = layout.block_range(b)
        k = layout.block_symbols(b)
        r, _ = redundancy.repair(k, report, layout.blocks)
        blocks.append((data[start:end], k, r))

    def encode() -> list[list[bytes]]:
        return [BlockEncoder(chunk).packets(0, k + r) for chunk, k, r in blocks]

    encoded = encode()
    survivors = [[p for p in packets if rng.random() >= BENCH_LOSS] for packets in encoded]

    def decode() -> None:
        for (chunk, _, _), packets in zip(blocks, survivors, strict=True):
            decoder = BlockDecoder(len(chunk))
            for packet in packets:
                if decoder.add(packet):
                    break
            assert decoder.data == chunk, "decode failed"

    megabytes = len(data) / 1e6
    rows = []
    for what, job in (("encode", encode), ("decode at 14 % loss", decode)):
        timing = _timed(job, reps)
        rows.append(
            {
                "payload": name,
                "k": layout.total_symbols,
                "blocks": layout.blocks,
                "r": sum(r for _, _, r in blocks),
                "step": what,
                "ms": timing.wall_s * 1e3,
                "cpu_s_per_mb": timing.cpu_s / megabytes,
                "mbit_s": len(data) * 8 / timing.wall_s / 1e6,
            }
        )
    return rows


def _hmac_rows(reps: int) -> list[dict[str, object]]:
    key, session = os.urandom(32), os.urandom(8)
    header = wire.DataHeader(1, 354_640, 0, 0, 300, 0.14)
    packet = bytes(4 + wire.SYMBOL_BYTES)
    count = 20_000
    datagram = wire.pack_data(key, session, 0, header, packet)

    def seal() -> None:
        for seq in range(count):
            wire.pack_data(key, session, seq, header, packet)

    def verify() -> None:
        for _ in range(count):
            wire.verify(key, datagram)

    rows = []
    for what, job in (("seal (HMAC-SHA256/128)", seal), ("verify", verify)):
        timing = _timed(job, reps)
        per_datagram = timing.wall_s / count
        rows.append(
            {
                "payload": f"{count} datagrams",
                "k": "",
                "blocks": "",
                "r": "",
                "step": what,
                "ms": per_datagram * 1e6,
                "cpu_s_per_mb": timing.cpu_s / (count * wire.SYMBOL_BYTES / 1e6),
                "mbit_s": wire.SYMBOL_BYTES * 8 / per_datagram / 1e6,
            }
        )
    return rows


def bench_fec(reps: int = 3) -> list[dict[str, object]]:
    rows = _code_rows("audio 354,640 B", workloads.workload_bytes("audio"), reps)
    rows += _code_rows("image 30,000,000 B", workloads.workload_bytes("image"), reps)
    rows += _hmac_rows(reps)
    return rows


def format_table(rows: list[dict[str, object]]) -> str:
    lines = [
        "| payload | k | blocks | r | step | ms (us per datagram for HMAC) | CPU s/MB "
        "| Mbit/s wall | Mbit/s per core (CPU) | one core keeps up with 333 Mbit/s |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        cpu = float(row["cpu_s_per_mb"])  # type: ignore[arg-type]
        per_core = 8.0 / cpu if cpu > 0 else float("inf")
        lines.append(
            f"| {row['payload']} | {row['k']} | {row['blocks']} | {row['r']} | {row['step']} "
            f"| {float(row['ms']):.2f} | {cpu:.4f} | {float(row['mbit_s']):.0f} "  # type: ignore[arg-type]
            f"| {per_core:.0f} | {'yes' if per_core * 1e6 > PATH_RATE_BPS else 'NO'} |"
        )
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, reps {args.reps}")
    print(format_table(bench_fec(args.reps)))
    return 0


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``bench fec`` to ``testbed``."""
    parser = bench.add_parser("fec", help="RaptorQ encode/decode and HMAC cost per MB")
    parser.add_argument("--reps", type=int, default=3, help="repetitions (median)")
    parser.set_defaults(handler=_run)
