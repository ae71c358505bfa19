"""``testbed bench link --compare``: the options, the table on the terminal, the saved files.

Options that would change nothing are refused in one line: ``--no-load`` and ``--backend``
with ``--compare`` (the comparison has no loaded rows and brings each emulator up itself),
``--trace``/``--rounds``/``--save`` without it, ``--mahimahi-bin`` without Mahimahi among the
peers, and the packet path's options with netem alone.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from harness.bench.peers import (
    CANNOT,
    DEFAULT_TRACE,
    GUEST_SUFFIX,
    OURS_VARIANTS,
    TABLE_COLUMNS,
    PeerConfig,
    markdown,
    parse_compare,
    rows_from_dicts,
    table,
    table_cells,
)
from netem.emulator.options import EmulatorOptions
from tbcore.errors import SpecError

COMPARE_ONLY = ("trace", "rounds", "save", "mahimahi_bin")
"""Options that mean something only with ``--compare``."""


def check_options(args: argparse.Namespace) -> None:
    """Refuse what would have no effect (one line each)."""
    if args.compare is None:
        for name in COMPARE_ONLY:
            if getattr(args, name, None) is not None:
                raise SpecError(name, "has no effect without --compare")
        return
    if args.no_load:
        raise SpecError("no_load", "has no effect with --compare (it has no loaded rows)")
    if args.backend != "auto":
        raise SpecError("backend", "has no effect with --compare (each emulator is its own)")
    peers = parse_compare(args.compare)
    if args.mahimahi_bin is not None and "mahimahi" not in peers:
        raise SpecError("mahimahi_bin", "has no effect without mahimahi in --compare")
    if args.rounds is not None and args.rounds < 1:
        raise SpecError("rounds", f"at least 1, got {args.rounds}")


def emulator_options(args: argparse.Namespace) -> EmulatorOptions | None:
    options = EmulatorOptions(
        path=args.path,
        offload=None if args.offload is None else args.offload == "on",
        coalesce_s=None if args.coalesce_us is None else args.coalesce_us * 1e-6,
        gro=None if args.gro is None else args.gro == "on",
        stamps=None if args.stamps is None else args.stamps == "on",
    )
    return None if options.empty else options


def document(args: argparse.Namespace) -> dict[str, Any]:
    """Run the comparison the options ask for; its JSON document with the table's rows."""
    from harness.bench.peerlink import run_compare

    check_options(args)
    options = emulator_options(args)
    emulators = parse_compare(args.compare, variants=options is None)
    config = PeerConfig.quick() if args.quick else PeerConfig()
    if args.rounds is not None:
        config = replace(config, rounds=args.rounds)
    progress = None if args.json else (lambda msg: print(f"bench link: {msg}", flush=True))
    doc = run_compare(
        emulators,
        config,
        name=args.name,
        traces=(DEFAULT_TRACE, *(args.trace or ())),
        mahimahi_bin=args.mahimahi_bin,
        emulator=options,
        progress=progress,
    )
    doc["table"] = [row.to_dict() for row in table(rows_from_dicts(doc["runs"]))]
    return doc


def conditions(doc: dict[str, Any]) -> dict[str, Any]:
    """The lines under the table: where and how it was made."""
    host = doc["host"]
    config = doc["config"]
    out = {
        "host": f"{host['cpu_model']}, {host['cpus']} CPUs, Linux {host['kernel']}",
        "made": f"{host['date_utc']}, load average {host['loadavg_start']} -> "
        f"{host.get('loadavg_end')}",
        "rounds": f"{config['rounds']} (alternated: each case through "
        + "; ".join(
            f"{', '.join(group)} in turn{where}"
            for group, where in (
                ([e for e in doc["emulators"] if not e.endswith(GUEST_SUFFIX)], " here"),
                ([e for e in doc["emulators"] if e.endswith(GUEST_SUFFIX)], " in the guest"),
            )
            if group
        )
        + ")",
        "path": "100 ms each way, drop-tail queue of one BDP in bytes per direction",
        "tcp": f"one flow, server to client, {doc.get('tcp_congestion_control')} (the host's "
        "default), socket buffers of twice the BDP at both ends",
    }
    present = {e.split("@")[0] for e in doc["emulators"]}
    for variant, what in OURS_VARIANTS.items():
        if variant in present:
            out[variant] = what
    if "ours-gro" not in present:
        out["ours"] = doc.get("ours_path", "the userspace emulator's default packet path")
    if "mahimahi" in doc:
        out["mahimahi"] = ", ".join(doc["mahimahi"].values())
    for (emulator, kind), why in CANNOT.items():
        if any(e.split("@")[0] == emulator for e in doc["emulators"]):
            out[f"{emulator}, {kind}"] = f"not measured: {why}"
    if "guest" in doc:
        guest = doc["guest"]
        out["@guest"] = (
            f"measured in the stock-kernel QEMU guest (Linux {guest.get('kernel')}, QEMU's "
            "software CPU: rates and CPU compare within the guest only, ratios are to ours "
            f"there), the VM stage {guest.get('vm_stage_s')} s"
        )
    return out


def print_table(doc: dict[str, Any]) -> None:
    console = Console(width=max(160, Console().width))
    rows = table(rows_from_dicts(doc["runs"]))
    out = Table(title="The emulator beside its peers (medians over the rounds; ratios to ours)")
    for column in TABLE_COLUMNS:
        out.add_column(column, justify="right")
    for row in rows:
        out.add_row(*table_cells(row))
    console.print(out)
    for key, value in conditions(doc).items():
        console.print(f"{key}: {value}")
    for row in rows:
        for reason in row.failed:
            console.print(f"[red]{row.case}, {row.emulator}: {reason}[/red]")


def save(doc: dict[str, Any], stem: str) -> None:
    """``STEM.json`` (every run) and ``STEM.md`` (the table and its conditions)."""
    path = Path(stem)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".json").write_text(json.dumps(doc, indent=2) + "\n")
    rows = table(rows_from_dicts(doc["runs"]))
    title = "# The emulator beside its peers (`testbed bench link --compare`)\n\n"
    path.with_suffix(".md").write_text(title + markdown(rows, conditions(doc)))


def compare_cli(args: argparse.Namespace) -> int:
    doc = document(args)
    if args.save is not None:
        save(doc, args.save)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print_table(doc)
    return 1 if any(run.get("error") for run in doc["runs"]) else 0
