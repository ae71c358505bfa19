"""``testbed serve`` and ``testbed workload``.

Interface for the harness (issue 5)::

    testbed serve --bind ADDR --h2-port P --h3-port P --log FILE
        [--settings JSON|FILE]
        [--cc reno|cubic|bbr] [--window-clamp BYTES] [--sndbuf BYTES] [--rcvbuf BYTES]
        [--max-pacing-rate RATE] [--notsent-lowat BYTES] [--quickack]
        [--quic-cc reno|cubic] [--max-datagram-size N] [--quic-max-data BYTES]
        [--h2-window BYTES] [--processing-audio 30ms] [--processing-image 300ms]
        [--max-body BYTES] [--qlog-dir DIR] [--keylog FILE] [--cert-dir DIR]
        [--no-h2 | --no-h3] [--quic-pacing cwnd|off|RATE] [--no-quic-batching]
        [--samples FILE.csv] [--sample-hz 1000] [--idle-timeout 60s]

prints exactly one line per listener once it listens, and flushes stdout::

    listening h2 tcp 127.0.0.1:8443
    listening h3 udp 127.0.0.1:8443

then serves until SIGINT/SIGTERM (exit status 0). A port of 0 picks a free one (read it
from the line). Sizes take units (``64kb``, ``16MiB``), rates ``333mbit``, durations ``30ms``.
``--quic-max-data`` pins QUIC's connection and stream flow-control windows to that size
(aioquic grows them otherwise); ``--h2-window`` sets HTTP/2's (default 16 MiB).
``--quic-pacing``: ``cwnd`` is aioquic's pacer (rate cwnd/srtt, at most 16 datagrams per
timer wake-up, i.e. ~186 Mbit/s at 1452 bytes), ``off`` sends cwnd-limited bursts (as Linux
reno/cubic without fq), a rate paces at that rate; ``--max-pacing-rate`` caps QUIC's pacer
too. ``--no-quic-batching`` restores aioquic's one sendto and one transmit per datagram (for
``bench stacks`` comparisons). ``--samples`` writes the server's sender-side in-flight
samples (TCP_INFO / aioquic recovery; ``request_id`` = ``proto:conn:stream``) when it stops.

The event log (``--log``) is JSONL, one object per line: ``t`` (``time.monotonic()``
seconds, CLOCK_MONOTONIC), ``event`` (listening, connection_open, connection_closed,
request_first_byte, request_body_first_byte, request_last_byte, upload_truncated,
processing_start, processing_end, response_first_byte, response_last_byte, chunk_sent,
stream_reset, error), ``proto`` (h2/h3), ``conn``, ``stream`` and details.

``--settings`` takes the run's settings document (tbcore.settings, what the harness
passes); each knob flag (one per knob the server applies) overrides it.

``testbed workload path NAME`` / ``testbed workload sha256 NAME`` (audio, image, retouched).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from servers.config import DEFAULT_PORT, DEFAULT_SAMPLE_HZ, ServerConfig
from tbcore import units, workloads
from tbcore.errors import SpecError
from tbcore.settings import add_flags, settings_from_flags


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bind", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--h2-port", type=int, default=DEFAULT_PORT, help="TCP port (0: any)")
    parser.add_argument("--h3-port", type=int, default=DEFAULT_PORT, help="UDP port (0: any)")
    parser.add_argument("--no-h2", action="store_true", help="no HTTP/2 listener")
    parser.add_argument("--no-h3", action="store_true", help="no HTTP/3 listener")
    parser.add_argument("--log", type=Path, default=None, help="JSONL event log")
    add_flags(parser, "server")
    parser.add_argument("--max-body", default="64mb", help="413 above this body size")
    parser.add_argument(
        "--samples", type=Path, default=None, help="sender-side in-flight samples (CSV)"
    )
    parser.add_argument("--sample-hz", type=float, default=DEFAULT_SAMPLE_HZ)
    parser.add_argument("--qlog-dir", type=Path, default=None)
    parser.add_argument("--keylog", type=Path, default=None, help="SSLKEYLOGFILE-format file")
    parser.add_argument("--cert-dir", type=Path, default=None)
    parser.add_argument("--idle-timeout", default="60s", help="close idle connections after")


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    return ServerConfig(
        bind=args.bind,
        h2_port=None if args.no_h2 else args.h2_port,
        h3_port=None if args.no_h3 else args.h3_port,
        settings=settings_from_flags(args),
        log_path=args.log,
        max_body_bytes=units.parse_size_bytes("max-body", args.max_body),
        samples_path=args.samples,
        sample_hz=args.sample_hz,
        qlog_dir=args.qlog_dir,
        keylog_path=args.keylog,
        cert_dir=args.cert_dir,
        idle_timeout_s=units.parse_duration_s("idle-timeout", args.idle_timeout),
    )


def _serve(args: argparse.Namespace) -> int:
    from servers.serve import run

    return run(config_from_args(args))


def _workload(args: argparse.Namespace) -> int:
    if args.what == "path":
        print(workloads.workload_path(args.name))
    elif args.what == "sha256":
        print(workloads.workload_sha256(args.name))
    else:  # argparse guards this; kept for direct callers
        raise SpecError("workload", f"unknown action {args.what!r}")
    return 0


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``serve`` and ``workload`` to ``testbed``."""
    serve = commands.add_parser("serve", help="run the HTTP/2 and HTTP/3 servers in the foreground")
    add_arguments(serve)
    serve.set_defaults(handler=_serve)
    workload = commands.add_parser("workload", help="path or SHA-256 of a fixed workload")
    workload.add_argument("what", choices=("path", "sha256"))
    workload.add_argument("name", choices=tuple(workloads.WORKLOADS))
    workload.set_defaults(handler=_workload)
