"""``testbed bounds``: the worked examples of docs/models.md, and one request's bound by part.

Every flag value is parsed here (not by argparse types), so a bad value prints one line
that names the flag: ``testbed bounds: error: --rtt: '200' needs a unit (s, ms, us, ns)``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from harness import bounds
from netem.linkspec import resolve_link
from tbcore.errors import SpecError
from tbcore.units import (
    parse_count,
    parse_duration_s,
    parse_fraction,
    parse_rate_bps,
    parse_size_bytes,
)

REQUEST_FLAGS = (
    ("--protocol", "h2 (HTTP/2, TLS 1.3, TCP) or h3 (HTTP/3, QUIC)"),
    ("--connection", "new, reused (warm window, no set-up) or 0rtt (resumed, early data)"),
    ("--link", "a link string or preset (e.g. dc-longhaul): RTT, rates and losses from it"),
    ("--rtt", "round-trip propagation delay, e.g. 200ms"),
    ("--rate", "rate of both directions, e.g. 333mbit"),
    ("--up-rate", "client-to-server rate (overrides --rate)"),
    ("--down-rate", "server-to-client rate (overrides --rate)"),
    ("--upload", "request body, e.g. 354640 or 30mb (default 0)"),
    ("--download", "response body (default 0)"),
    ("--processing", "server processing, e.g. 30ms (default 0ms)"),
    ("--initcwnd", f"initial window in segments (default {bounds.INITCWND_SEGMENTS}, RFC 6928)"),
    (
        "--mss",
        f"payload bytes per segment (default {bounds.TCP_MSS_BYTES} for h2, "
        f"{bounds.QUIC_MAX_DATAGRAM_BYTES} for h3)",
    ),
    ("--window", "cap on bytes in flight, e.g. 64kb (default none)"),
    ("--loss", "independent loss of both directions, e.g. 14%%: adds the retransmission part"),
    ("--up-loss", "loss of the upload direction (overrides --loss)"),
    ("--down-loss", "loss of the download direction (overrides --loss)"),
)

PART_LABELS = {
    "setup_s": "set-up",
    "feedback_s": "slow-start feedback",
    "window_s": "window stalls",
    "serialisation_s": "serialisation",
    "propagation_s": "propagation",
    "processing_s": "processing",
    "retransmission_s": "retransmission (expected)",
}


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``testbed bounds`` and ``testbed bounds request``."""
    parser = commands.add_parser(
        "bounds",
        help="analytic lower bounds: docs/models.md's worked examples, or one request's bound",
        description="Print the worked examples of docs/models.md, computed by harness.bounds.",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(handler=run_examples)
    sub = parser.add_subparsers(dest="bounds_command", metavar="SUBCOMMAND")
    request = sub.add_parser(
        "request",
        help="the lower bound of one request, by part",
        description="The lower bound of one request/response on one path, by part "
        "(harness.bounds.request_time).",
    )
    for flag, text in REQUEST_FLAGS:
        request.add_argument(flag, metavar="VALUE", help=text)
    request.add_argument("--json", action="store_true", help="print JSON instead of a table")
    request.set_defaults(handler=run_request)


def run_examples(args: argparse.Namespace) -> int:
    examples = bounds.worked_examples()
    if args.json:
        rows = [
            {
                "name": e.name,
                "inputs": e.inputs,
                "value": e.value,
                "unit": e.unit,
                "models_md": e.printed,
                "matches": e.matches(),
            }
            for e in examples
        ]
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    table = Table(title="Worked examples of docs/models.md, computed by harness.bounds")
    table.add_column("name")
    table.add_column("inputs")
    table.add_column("value", justify="right")
    table.add_column("unit")
    table.add_column("models.md", justify="right")
    for e in examples:
        table.add_row(e.name, e.inputs, e.rounded(), e.unit, e.printed)
    Console(width=max(120, Console().width)).print(table)
    mismatched = [e.name for e in examples if not e.matches()]
    if mismatched:
        print(f"differs from docs/models.md: {', '.join(mismatched)}", file=sys.stderr)
        return 1
    return 0


def _per_direction(
    values: dict[str, Any],
    args: argparse.Namespace,
    flag: str,
    suffix: str,
    parse: Callable[[str, str], float],
) -> None:
    """``--FLAG`` sets ``up_SUFFIX`` and ``down_SUFFIX``; ``--up-FLAG`` and ``--down-FLAG``
    then override one direction each (e.g. ``--rate``, ``--up-rate`` -> ``up_bps``)."""
    both = getattr(args, flag)
    if both is not None:
        values[f"up_{suffix}"] = values[f"down_{suffix}"] = parse(f"--{flag}", both)
    for direction in ("up", "down"):
        value = getattr(args, f"{direction}_{flag}")
        if value is not None:
            values[f"{direction}_{suffix}"] = parse(f"--{direction}-{flag}", value)


def request_from_args(args: argparse.Namespace) -> bounds.RequestBound:
    """Build the bound from the flags; a bad or missing value raises SpecError('--flag')."""
    values: dict[str, Any] = {}
    if args.link is not None:
        try:
            link = resolve_link(args.link)
        except SpecError as err:
            raise SpecError("--link", str(err)) from None
        values["rtt_s"] = link.rtt_s
        for name in ("up", "down"):
            direction = getattr(link, name)
            if direction.rate_bps is not None:
                values[f"{name}_bps"] = direction.rate_bps
            values[f"{name}_loss"] = direction.mean_loss
    for flag in ("--protocol", "--connection"):
        value = getattr(args, flag[2:])
        if value is None:
            raise SpecError(flag, "is required")
        values[flag[2:]] = value
    if args.rtt is not None:
        values["rtt_s"] = parse_duration_s("--rtt", args.rtt)
    _per_direction(values, args, "rate", "bps", parse_rate_bps)
    if "rtt_s" not in values:
        raise SpecError("--rtt", "is required (or give --link)")
    for name, flag in (("up_bps", "--up-rate"), ("down_bps", "--down-rate")):
        if name not in values:
            raise SpecError(flag, "is required: give --rate, or --up-rate and --down-rate")
    values["upload_bytes"] = parse_size_bytes("--upload", args.upload or "0")
    values["download_bytes"] = parse_size_bytes("--download", args.download or "0")
    values["processing_s"] = parse_duration_s("--processing", args.processing or "0ms")
    if args.initcwnd is not None:
        values["initcwnd_segments"] = parse_count("--initcwnd", args.initcwnd)
    if args.mss is not None:
        values["mss_bytes"] = parse_count("--mss", args.mss)
    if args.window is not None:
        values["window_bytes"] = parse_size_bytes("--window", args.window)
        if values["window_bytes"] < 1:
            raise SpecError("--window", "must be at least 1 byte")
    _per_direction(values, args, "loss", "loss", parse_fraction)
    try:
        return bounds.request_time(**values)
    except SpecError as err:
        raise SpecError(_flag_of(err.field), err.reason) from None


_FLAG_OF_FIELD = {
    "protocol": "--protocol",
    "connection": "--connection",
    "rtt_s": "--rtt",
    "up_bps": "--up-rate",
    "down_bps": "--down-rate",
    "upload_bytes": "--upload",
    "download_bytes": "--download",
    "processing_s": "--processing",
    "initcwnd_segments": "--initcwnd",
    "mss_bytes": "--mss",
    "window_bytes": "--window",
    "up_loss": "--up-loss",
    "down_loss": "--down-loss",
}


def _flag_of(field: str) -> str:
    return _FLAG_OF_FIELD.get(field, field)


def run_request(args: argparse.Namespace) -> int:
    bound = request_from_args(args)
    if args.json:
        record = bound.to_dict()
        json.dump(record, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    console = Console(width=max(100, Console().width))
    window = "none" if bound.window_bytes is None else f"{bound.window_bytes} B"
    console.print(
        f"{bound.protocol} {bound.connection}: RTT {bound.rtt_s * 1e3:g} ms, "
        f"up {bound.up_bps / 1e6:g} Mbit/s, down {bound.down_bps / 1e6:g} Mbit/s, "
        f"upload {bound.upload_bytes} B, download {bound.download_bytes} B, "
        f"processing {bound.processing_s * 1e3:g} ms, IW {bound.initcwnd_segments} x "
        f"{bound.mss_bytes} B, window cap {window}, loss up {bound.up_loss:.4g} / "
        f"down {bound.down_loss:.4g}",
        highlight=False,
    )
    table = Table(title="Lower bound of one request, by part")
    table.add_column("part")
    table.add_column("ms", justify="right")
    table.add_column("share", justify="right")
    table.add_column("detail")
    details = {
        "setup_s": f"{bound.setup_rtts} RTT",
        "feedback_s": f"{bound.up_rounds} windows up, {bound.down_rounds} down",
        "retransmission_s": (
            f"E[K] {bound.up_retransmission_rounds:.3f} up, "
            f"{bound.down_retransmission_rounds:.3f} down"
        ),
    }
    for name, seconds in bound.parts().items():
        if name == "retransmission_s":
            continue
        share = seconds / bound.total_s if bound.total_s > 0 else 0.0
        table.add_row(
            PART_LABELS[name], f"{seconds * 1e3:.3f}", f"{share:.1%}", details.get(name, "")
        )
    table.add_row(
        "total (loss-free bound)", f"{bound.total_s * 1e3:.3f}", "100.0%", "", end_section=True
    )
    if bound.up_loss or bound.down_loss:
        table.add_row(
            PART_LABELS["retransmission_s"],
            f"{bound.retransmission_s * 1e3:.3f}",
            "",
            details["retransmission_s"],
        )
        table.add_row("expected with loss", f"{bound.expected_s * 1e3:.3f}", "", "")
    console.print(table)
    return 0
