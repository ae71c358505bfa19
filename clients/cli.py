"""``testbed client`` and ``testbed bench stacks``.

``testbed client --host ADDR --port P [--settings JSON|FILE] [--protocol h2|h3]
[--workload asr|tts|retouch|stream] [--chunks N] [--requests N] [--warmup-requests K]
[--connection new|reused|0rtt] [--resume] [--cc ...] [--quic-cc ...] [--max-datagram-size N]
[--records FILE.jsonl] [--samples FILE.csv] [--sample-hz 1000] [--qlog-dir DIR]
[--keylog FILE] [--timeout 60s]`` (one flag per knob of tbcore.settings the client applies,
each overriding the settings document) runs the requests
(see :mod:`clients.api`), prints one summary line per request, writes the records, and exits
1 if any measured request failed (0 otherwise; 2 on bad input).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from clients.config import DEFAULT_PORT, DEFAULT_SAMPLE_HZ, ClientConfig
from tbcore import units
from tbcore.settings import add_flags, settings_from_flags

EXIT_FAILED_REQUEST = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    add_flags(parser, "client")
    parser.add_argument("--records", type=Path, default=None, help="JSONL records")
    parser.add_argument("--samples", type=Path, default=None, help="in-flight samples CSV")
    parser.add_argument("--sample-hz", default=f"{DEFAULT_SAMPLE_HZ:g}", help="samples per s")
    parser.add_argument("--qlog-dir", type=Path, default=None)
    parser.add_argument("--keylog", type=Path, default=None)
    parser.add_argument("--quiet", action="store_true", help="no per-request lines")


def config_from_args(args: argparse.Namespace) -> ClientConfig:
    return ClientConfig(
        host=args.host,
        port=args.port,
        settings=settings_from_flags(args),
        records_path=args.records,
        samples_path=args.samples,
        sample_hz=units.parse_number("sample-hz", args.sample_hz),
        qlog_dir=args.qlog_dir,
        keylog_path=args.keylog,
    )


def _client(args: argparse.Namespace) -> int:
    from clients.api import run_requests_sync

    config = config_from_args(args)
    if config.settings.workload == "agent":
        from clients.agent import main_exit, run_agent_sync

        return main_exit(run_agent_sync(config), config.settings.agent_rounds)
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
