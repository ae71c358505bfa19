"""``testbed client``.

``testbed client --host ADDR --port P [--settings JSON|FILE] [--protocol h2|h3]
[--workload asr|tts|retouch|stream] [--chunks N] [--requests N] [--warmup-requests K]
[--connection new|reused|0rtt] [--resume] [--cc ...] [--quic-cc ...] [--max-datagram-size N]
[--records FILE.jsonl] [--samples FILE.csv] [--sample-hz 1000] [--qlog-dir DIR]
[--keylog FILE] [--timeout 60s]`` (one flag per knob of tbcore.settings the client applies,
each overriding the settings document) runs the requests
(see :mod:`clients.api`), prints one summary line per request, writes the records, and exits
1 if any measured request failed (0 otherwise; 2 on bad input). With ``--quic-stack
ngtcp2`` (protocol h3) the native engine makes them (clients/h3native.py).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from pathlib import Path

from clients.config import DEFAULT_PORT, DEFAULT_SAMPLE_HZ, ClientConfig
from tbcore import kinds, units
from tbcore.errors import SpecError
from tbcore.records import AppliedLog, write_jsonl
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
    parser.add_argument(
        "--applied", type=Path, default=None, help="JSONL: what the client put in force"
    )
    parser.add_argument("--quiet", action="store_true", help="no per-request lines")
    parser.add_argument(
        "--sources", default=None, help="workload upload: ADDR_LINK,ADDR_LINK_B (two paths)"
    )


def config_from_args(args: argparse.Namespace) -> ClientConfig:
    return ClientConfig(
        host=args.host,
        port=args.port,
        settings=settings_from_flags(args, scoped=True),
        records_path=args.records,
        samples_path=args.samples,
        sample_hz=units.parse_number("sample-hz", args.sample_hz),
        qlog_dir=args.qlog_dir,
        keylog_path=args.keylog,
        applied_path=args.applied,
    )


def _client(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    records = kinds.workload(config.settings.workload).records
    if args.sources is not None and records != "transfer":
        raise SpecError("sources", "only the upload workload (two paths) takes sources")
    return RUNNERS[records](config, args)


REQUEST_STACKS = {
    "aioquic": ("clients.api", "run_requests_sync"),
    "ngtcp2": ("clients.api", "run_requests_sync"),
}
"""Who makes the requests, by ``settings.quic_stack`` (tbcore.quicstack): the testbed's own
clients (clients.api) for both stacks, aioquic's connections (clients.h3client) or the
native engine's (clients.h3native). Each takes the ClientConfig and returns the
RequestRecords it wrote."""


def _requests(config: ClientConfig, args: argparse.Namespace) -> int:
    """Request records (clients.api): one line per request, 1 if a measured one failed."""

    module, name = REQUEST_STACKS[config.settings.quic_stack]
    records = getattr(importlib.import_module(module), name)(config)
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


def _agent(config: ClientConfig, args: argparse.Namespace) -> int:
    """The agent's rounds (clients.agent)."""
    from clients.agent import main_exit, run_agent_sync

    settings = config.settings
    return main_exit(run_agent_sync(config), settings.agent_tasks * settings.agent_rounds)


def _transfer(config: ClientConfig, args: argparse.Namespace) -> int:
    """One upload over two paths (clients.multipath): ``progress 0 T`` on stdout when the
    timed transfer begins (a failover is scheduled from T), the TransferRecord to --records."""
    from clients.multipath import run_transfer

    text = args.sources or ""
    sources = tuple(s.strip() for s in text.split(","))
    if len(sources) != 2 or not all(sources):
        raise SpecError("sources", f"{text!r}: two addresses, comma-separated")

    def started(t: float) -> None:
        print(f"progress 0 {t!r}", flush=True)

    applied = AppliedLog(config.applied_path, "client")
    try:
        record = run_transfer(config.settings, config.host, config.port, sources, started, applied)  # type: ignore[arg-type]
    finally:
        applied.close()
    if config.records_path is not None:
        write_jsonl(config.records_path, [record])
    if not args.quiet:
        print(f"transfer {record.mode} total_s={record.total_s} error={record.error}", flush=True)
    if record.error is None or config.settings.path_failures is not None:
        return 0  # drawn path failures: an undelivered trial is an outcome, in its record
    return EXIT_FAILED_REQUEST


RUNNERS: dict[str, Callable[[ClientConfig, argparse.Namespace], int]] = {
    "request": _requests,
    "agent_round": _agent,
    "transfer": _transfer,
}
"""How ``testbed client`` runs a workload, by the records it writes (tbcore.kinds)."""


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``client`` to ``testbed``."""
    client = commands.add_parser("client", help="run instrumented HTTP/2 or HTTP/3 requests")
    add_arguments(client)
    client.set_defaults(handler=_client)
