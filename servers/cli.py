"""``testbed serve`` and ``testbed workload``.

Interface for the harness (issue 5)::

    testbed serve --bind ADDR --h2-port P --h3-port P --log FILE
        [--settings JSON|FILE]
        [--cc reno|cubic|bbr] [--window-clamp BYTES] [--sndbuf BYTES] [--rcvbuf BYTES]
        [--max-pacing-rate RATE] [--notsent-lowat BYTES] [--quickack]
        [--quic-cc reno|cubic|bbr] [--max-datagram-size N] [--quic-max-data BYTES]
        [--h2-window BYTES] [--processing-audio 30ms] [--processing-image 300ms]
        [--max-body BYTES] [--qlog-dir DIR] [--keylog FILE] [--cert-dir DIR]
        [--no-h2 | --no-h3] [--quic-pacing cwnd|off|RATE] [--no-quic-batching]
        [--samples FILE.csv] [--sample-hz 1000] [--idle-timeout 60s]
        [--head-timeout 10s] [--quic-retry auto|always|off] [--retry-threshold 64]
        [--max-connections 2048] [--max-connections-per-source 256] [--listen-backlog 4096]
        [--send-policy none|rr|fifo|rfc9218]

prints exactly one line per listener once it listens, and flushes stdout::

    listening h2 tcp 127.0.0.1:8443
    listening h3 udp 127.0.0.1:8443

then serves until SIGINT/SIGTERM (exit status 0). A port of 0 picks a free one (read it
from the line). Sizes take units (``64kb``, ``16MiB``), rates ``333mbit``, durations ``30ms``.
``--quic-max-data`` pins QUIC's connection and stream flow-control windows to that size
(aioquic grows them otherwise); ``--h2-window`` sets HTTP/2's (default 16 MiB).
``--quic-pacing``: ``cwnd`` is the control's own pacing (reno, cubic: aioquic's pacer at
cwnd/srtt, at most 16 datagrams per timer wake-up, i.e. ~186 Mbit/s at 1452 bytes; bbr: its
pacing_gain x bw), ``off`` sends cwnd-limited bursts (as Linux
reno/cubic without fq), a rate paces at that rate; ``--max-pacing-rate`` caps QUIC's pacer
too. ``--no-quic-batching`` restores aioquic's one sendto and one transmit per datagram (for
``bench stacks`` comparisons). ``--samples`` writes the server's sender-side in-flight
samples (TCP_INFO / aioquic recovery; ``request_id`` = ``proto:conn:stream``) when it stops.

The event log (``--log``) is JSONL, one object per line: ``t`` (``time.monotonic()``
seconds, CLOCK_MONOTONIC), ``event`` (listening, connection_open, connection_closed,
request_first_byte, request_body_first_byte, request_last_byte, upload_truncated,
processing_start, processing_end, response_first_byte, response_last_byte, chunk_sent,
stream_reset, abuse, error), ``proto`` (h2/h3), ``conn``, ``stream`` and details.

Abuse limits (issue 17; reasons in servers/guard.py): an HTTP/2 connection is closed with
GOAWAY(ENHANCE_YOUR_CALM) after more than 200 RST_STREAM or 2,000 new streams in 10 s, more
than a window + 1 MiB of DATA on a closed stream, or a request head (or the preface) not
complete ``--head-timeout`` after its first byte (an ``abuse`` event says which); its source
then waits 10 s for its next connection. Connections are capped per source address and in
total before the TLS handshake. QUIC: an Initial that does not decrypt leaves nothing behind;
``--quic-retry auto`` sends a Retry (address validation) once more than
``--retry-threshold`` connections are in handshake or were attempted in the last second;
Initials beyond 100/s from one address are dropped unread; a handshake must finish in 10 s.
Unusable values (``--bind`` not an address of this host, an unwritable ``--log`` or
``--cert-dir``, socket sizes beyond a C int) are refused before anything is created.

``--settings`` takes the run's settings document (tbcore.settings, what the harness
passes); each knob flag (one per knob the server applies) overrides it.

``--quic-stack ngtcp2`` (or a settings document with ``quic_stack = "ngtcp2"``) serves
HTTP/3 with the testbed's native endpoint (servers/h3native.py: tb-h3 on ngtcp2 and nghttp3)
instead of aioquic: the same routes, listening line, log, samples, qlog directory and key
log; what it cannot apply is refused (tbcore.quicstack).

``testbed workload path NAME`` / ``testbed workload sha256 NAME`` (audio, image, retouched).
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import socket
from pathlib import Path
from typing import Any

import uvloop

from servers.config import DEFAULT_PORT, ServerConfig
from servers.guard import RETRY_MODES
from tbcore import paths, units, workloads
from tbcore.errors import SpecError
from tbcore.settings import Settings, add_flags, settings_from_flags

CONFIG_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(ServerConfig)}
"""The default of each :class:`ServerConfig` field: the defaults of its flags, so that
``testbed serve`` and a config built in code start from the same values."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bind", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--h2-port", type=int, default=DEFAULT_PORT, help="TCP port (0: any)")
    parser.add_argument("--h3-port", type=int, default=DEFAULT_PORT, help="UDP port (0: any)")
    parser.add_argument("--no-h2", action="store_true", help="no HTTP/2 listener")
    parser.add_argument("--no-h3", action="store_true", help="no HTTP/3 listener")
    parser.add_argument(
        "--fec-port", type=int, default=None, help="FEC listener, UDP + TLS control (0: any)"
    )
    parser.add_argument("--log", type=Path, default=None, help="JSONL event log")
    parser.add_argument(
        "--applied", type=Path, default=None, help="JSONL: what the server put in force"
    )
    add_flags(parser, "server")
    parser.add_argument("--max-body", default="72mb", help="413 above this body size")
    parser.add_argument(
        "--samples", type=Path, default=None, help="sender-side in-flight samples (CSV)"
    )
    parser.add_argument(
        "--sample-hz", default=f"{CONFIG_DEFAULTS['sample_hz']:g}", help="samples per s"
    )
    parser.add_argument("--qlog-dir", type=Path, default=None)
    parser.add_argument("--keylog", type=Path, default=None, help="SSLKEYLOGFILE-format file")
    parser.add_argument("--cert-dir", type=Path, default=None)
    parser.add_argument(
        "--idle-timeout",
        default=f"{CONFIG_DEFAULTS['idle_timeout_s']:g}s",
        help="close idle connections after",
    )
    parser.add_argument(
        "--head-timeout",
        default=f"{CONFIG_DEFAULTS['head_timeout_s']:g}s",
        help="HTTP/2 request head deadline",
    )
    parser.add_argument(
        "--quic-retry",
        choices=RETRY_MODES,
        default=CONFIG_DEFAULTS["quic_retry"],
        help="QUIC Retry (address validation): under load, always or never",
    )
    for flag, name in (
        ("--retry-threshold", "quic_retry_threshold"),
        ("--max-connections", "max_connections"),
        ("--max-connections-per-source", "max_connections_per_source"),
        ("--listen-backlog", "listen_backlog"),
    ):
        parser.add_argument(flag, default=str(CONFIG_DEFAULTS[name]))


def check_bindable(bind: str) -> None:
    """``--bind`` is an address of this host (not a name, not someone else's address)."""
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(bind).version == 6 else socket.AF_INET
    except ValueError:
        raise SpecError("bind", f"{bind!r} is not an IP address") from None
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((bind, 0))
        except OSError as err:
            raise SpecError(
                "bind", f"{bind}: {err.strerror} (not an address of this host)"
            ) from None


def check_paths(args: argparse.Namespace) -> None:
    """Every file and directory the server would write, before it writes any."""
    for flag, value in (("log", args.log), ("samples", args.samples), ("keylog", args.keylog)):
        if value is not None:
            paths.check_writable_file(flag, value)
    for flag, value in (("qlog-dir", args.qlog_dir), ("cert-dir", args.cert_dir)):
        if value is not None:
            paths.check_writable_dir(flag, value)


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    check_bindable(args.bind)
    check_paths(args)
    return ServerConfig(
        bind=args.bind,
        h2_port=None if args.no_h2 else args.h2_port,
        h3_port=None if args.no_h3 else args.h3_port,
        fec_port=args.fec_port,
        settings=settings_from_flags(args),
        log_path=args.log,
        applied_path=args.applied,
        max_body_bytes=units.parse_size_bytes("max-body", args.max_body),
        samples_path=args.samples,
        sample_hz=units.parse_number("sample-hz", args.sample_hz),
        qlog_dir=args.qlog_dir,
        keylog_path=args.keylog,
        cert_dir=args.cert_dir,
        idle_timeout_s=units.parse_duration_s("idle-timeout", args.idle_timeout),
        head_timeout_s=units.parse_duration_s("head-timeout", args.head_timeout),
        quic_retry=args.quic_retry,
        quic_retry_threshold=units.parse_count("retry-threshold", args.retry_threshold),
        max_connections=units.parse_count("max-connections", args.max_connections),
        max_connections_per_source=units.parse_count(
            "max-connections-per-source", args.max_connections_per_source
        ),
        listen_backlog=units.parse_count("listen-backlog", args.listen_backlog),
    )


NGTCP2_SERVE_BASE = {"protocol": "h3"}
"""``testbed serve --quic-stack ngtcp2`` without a settings document: an HTTP/3 level (the
default one is h2, where a QUIC stack has no effect); the harness passes its own."""


def _serve(args: argparse.Namespace) -> int:
    if args.settings is None and args.knob_quic_stack not in (None, "aioquic"):
        args.settings = Settings(**NGTCP2_SERVE_BASE).to_json()
    config = config_from_args(args)
    from servers import serve

    return int(serve.run(config))


def _relay(args: argparse.Namespace) -> int:
    from servers.relay import RelayConfig, serve_relay

    host, sep, port = args.upstream.rpartition(":")
    if not sep or not host or not port.isascii() or not port.isdigit():
        raise SpecError("upstream", f"{args.upstream!r} is not HOST:PORT")
    base = Settings.load(args.settings) if args.settings else Settings()
    knobs = {k: v for k, v in (("cc", args.cc), ("quic_cc", args.quic_cc)) if v is not None}
    config = RelayConfig(
        bind=args.bind,
        port=args.port,
        upstream_host=host,
        upstream_port=int(port),
        log_path=args.log,
        window_bytes=units.parse_size_bytes("h2-window", args.h2_window),
        warmup=args.warmup,
        warmup_bytes=units.parse_size_bytes("warmup-bytes", args.warmup_bytes),
        settings=base.replace(**knobs),
        cert_dir=args.cert_dir,
        protocols=tuple(p.strip() for p in args.protocols.split(",")),
        upstream_h3_port=args.upstream_h3_port,
    )
    uvloop.run(serve_relay(config))
    return 0


def _workload(args: argparse.Namespace) -> int:
    if args.what == "path":
        print(workloads.workload_path(args.name))
    elif args.what == "sha256":
        print(workloads.workload_sha256(args.name))
    else:  # argparse guards this; kept for direct callers
        raise SpecError("workload", f"unknown action {args.what!r}")
    return 0


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``serve``, ``relay`` and ``workload`` to ``testbed``."""
    serve = commands.add_parser("serve", help="run the HTTP/2 and HTTP/3 servers in the foreground")
    add_arguments(serve)
    serve.set_defaults(handler=_serve)
    relay = commands.add_parser("relay", help="an HTTP/2 + HTTP/3 reverse proxy, warm long haul")
    relay.add_argument("--bind", default="127.0.0.1")
    relay.add_argument("--port", type=int, default=DEFAULT_PORT, help="TCP port (0: any)")
    relay.add_argument("--upstream", required=True, help="the server's HOST:PORT (h2; h3 on UDP)")
    relay.add_argument("--protocols", default="h2", help="sides to run: h2, h3 or h2,h3")
    relay.add_argument(
        "--upstream-h3-port", type=int, default=None, help="the server's UDP port (default: PORT)"
    )
    relay.add_argument("--log", type=Path, default=None, help="JSONL event log")
    relay.add_argument("--warmup", type=int, default=3, help="warm-up rounds on the upstream")
    relay.add_argument("--warmup-bytes", default="2MB", help="each warm-up upload")
    relay.add_argument("--h2-window", default="16MiB", help="HTTP/2 windows of both sides")
    relay.add_argument(
        "--settings", default=None, help="the run's settings document (JSON text or file)"
    )
    relay.add_argument("--cc", default=None, help="TCP congestion control of both sides")
    relay.add_argument("--quic-cc", default=None, help="QUIC congestion control (h3 side)")
    relay.add_argument("--cert-dir", type=Path, default=None)
    relay.set_defaults(handler=_relay)
    workload = commands.add_parser("workload", help="path or SHA-256 of a fixed workload")
    workload.add_argument("what", choices=("path", "sha256"))
    workload.add_argument("name", choices=tuple(workloads.WORKLOADS))
    workload.set_defaults(handler=_workload)
