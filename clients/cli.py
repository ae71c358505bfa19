"""``testbed client`` and ``testbed bench stacks``.

``testbed client --protocol h2|h3 --host ADDR --port P --workload asr|tts|retouch|stream
[--chunks N] --requests N [--warmup K] --connection new|reused|0rtt [--resume] [--cc ...]
[--quic-cc ...] [--max-datagram-size N] [--records FILE.jsonl] [--samples FILE.csv]
[--sample-hz 1000] [--qlog-dir DIR] [--keylog FILE] [--timeout 60s]`` runs the requests
(see :mod:`clients.api`), prints one summary line per request, writes the records, and exits
1 if any measured request failed (0 otherwise; 2 on bad input).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from clients.config import (
    CONNECTION_MODES,
    PRIORITY_SIGNALS,
    PROTOCOLS,
    WORKLOAD_NAMES,
    ClientConfig,
)
from servers.knobs import add_transport_arguments, transport_fields
from tbcore import units

EXIT_FAILED_REQUEST = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--protocol", choices=PROTOCOLS, default="h2")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--workload", choices=WORKLOAD_NAMES, default="asr")
    parser.add_argument("--chunks", type=int, default=50, help="chunks of the stream workload")
    parser.add_argument("--requests", type=int, default=1, help="measured requests")
    parser.add_argument("--warmup", type=int, default=0, help="warm-up requests first")
    parser.add_argument("--connection", choices=CONNECTION_MODES, default="new")
    parser.add_argument("--resume", action="store_true", help="TLS session resumption")
    add_transport_arguments(parser)
    parser.add_argument("--records", type=Path, default=None, help="JSONL records")
    parser.add_argument("--samples", type=Path, default=None, help="in-flight samples CSV")
    parser.add_argument("--sample-hz", type=float, default=1000.0)
    parser.add_argument("--qlog-dir", type=Path, default=None)
    parser.add_argument("--keylog", type=Path, default=None)
    parser.add_argument("--timeout", default="60s", help="per connect and per request")
    parser.add_argument("--quiet", action="store_true", help="no per-request lines")
    parser.add_argument(
        "--streams", default="", help="multi: workloads at once on one connection, e.g. result,tts"
    )
    parser.add_argument("--priority-signal", choices=PRIORITY_SIGNALS, default="header")
    parser.add_argument(
        "--cancel-after", type=int, default=None, help="stream: cancel after N chunks read"
    )
    parser.add_argument(
        "--player-buffer", default=None, help="stream: real-clock player, initial buffer (40ms)"
    )


def config_from_args(args: argparse.Namespace) -> ClientConfig:
    return ClientConfig(
        protocol=args.protocol,
        host=args.host,
        port=args.port,
        workload=args.workload,
        chunks=args.chunks,
        requests=args.requests,
        warmup=args.warmup,
        connection=args.connection,
        resume=args.resume,
        **transport_fields(args),
        records_path=args.records,
        samples_path=args.samples,
        sample_hz=args.sample_hz,
        qlog_dir=args.qlog_dir,
        keylog_path=args.keylog,
        timeout_s=units.parse_duration_s("timeout", args.timeout),
        streams=tuple(name for name in args.streams.split(",") if name),
        priority_signal=args.priority_signal,
        cancel_after_chunks=args.cancel_after,
        player_buffer_s=(
            None
            if args.player_buffer is None
            else units.parse_duration_s("player-buffer", args.player_buffer)
        ),
    )


def _client(args: argparse.Namespace) -> int:
    from clients.api import run_requests_sync

    config = config_from_args(args)
    records = run_requests_sync(config)
    failed = 0
    for record in records:
        total = (
            (record.response_last_byte - record.request_first_byte) * 1e3
            if record.response_last_byte and record.request_first_byte
            else float("nan")
        )
        if record.error is not None and not record.warmup:
            failed += 1
        if not args.quiet:
            tag = "warmup" if record.warmup else "measured"
            print(
                f"{record.request_id} {tag} {record.protocol} {record.connection} "
                f"{record.stream_workload or record.workload} status={record.status} "
                f"total_ms={total:.1f} "
                f"sha256_ok={record.sha256_ok} error={record.error}",
                flush=True,
            )
    measured = sum(1 for r in records if not r.warmup)
    if failed:
        print(f"testbed client: {failed} of {measured} measured requests failed", file=sys.stderr)
        return EXIT_FAILED_REQUEST
    return 0


def _bench_stacks(args: argparse.Namespace) -> int:
    from clients.bench import run_bench

    return run_bench(args)


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``client`` and ``bench stacks`` to ``testbed``."""
    client = commands.add_parser("client", help="run instrumented HTTP/2 or HTTP/3 requests")
    add_arguments(client)
    client.set_defaults(handler=_client)
    stacks = bench.add_parser(
        "stacks", help="loopback goodput and CPU per MB of the HTTP/2 and HTTP/3 stacks"
    )
    stacks.add_argument("--protocols", default="h2,h3")
    stacks.add_argument("--reps", type=int, default=3, help="repetitions of each transfer")
    stacks.add_argument("--max-datagram-size", type=int, default=1452)
    stacks.add_argument("--baseline", action="store_true", help="also run aioquic defaults (1200)")
    stacks.set_defaults(handler=_bench_stacks)
