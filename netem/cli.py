"""Command-line edge of the emulated path: ``doctor``, ``link up/show/down/list``, ``clean``,
and ``bench link`` (registered by :mod:`netem.bench` when it is there).

::

    testbed doctor [--json]
    testbed link up NAME [LINKSPEC] [--backend auto|netem|userspace]
                        [--slow-start-after-idle 0|1] [--sysctl net.x.y=VALUE ...]
    testbed link show NAME [--json]
    testbed link down NAME
    testbed link list [--json]
    testbed clean [--name NAME] [--json]

``link up`` returns once packets flow and leaves the link running (the userspace emulator is
a daemon logging to /run/testbed/links/NAME.log); any program can then use it, e.g.
``ip netns exec tb-NAME-server iperf3 -s`` and ``ip netns exec tb-NAME-client iperf3 -c
198.18.2.2``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from dataclasses import asdict
from typing import Any

from netem import backends, clean, doctor
from netem.link import Link, list_links
from netem.linkspec import PRESETS
from tbcore.errors import SpecError

EXIT_LEFTOVERS = 1
"""Exit status of ``clean`` when something could not be removed."""


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


EXIT_UNUSABLE = 2
"""Exit status of ``doctor`` when a piece the testbed needs is missing (as bad input)."""


def _cmd_doctor(args: argparse.Namespace) -> int:
    data = doctor.report(args.backend)
    if args.json:
        _print_json(data)
    else:
        print(doctor.format_report(data))
    return 0 if data["usable"] else EXIT_UNUSABLE


def _parse_sysctls(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise SpecError("sysctl", f"{item!r} is not NAME=VALUE")
        out[key.strip()] = value.strip()
    return out


def _cmd_link_up(args: argparse.Namespace) -> int:
    ssai = None if args.slow_start_after_idle is None else args.slow_start_after_idle == "1"
    link = Link.up(
        args.name,
        args.linkspec,
        backend=args.backend,
        slow_start_after_idle=ssai,
        sysctls=_parse_sysctls(args.sysctl),
    )
    info = link.show()
    print(
        f"link {link.name} up ({link.backend}): {link.client_ns} {link.client_addr} <-> "
        f"{link.server_ns} {link.server_addr}"
    )
    print(f"  spec: {info['spec']}")
    if info.get("emulator_pid"):
        print(f"  emulator pid {info['emulator_pid']}, log {info.get('log')}")
    for warning in info["warnings"]:
        print(f"  warning: {warning}")
    return 0


def _format_show(info: dict[str, Any]) -> str:
    keys = (
        "name",
        "backend",
        "status",
        "client_ns",
        "client_addr",
        "server_ns",
        "server_addr",
        "router_ns",
        "spec",
        "created_at",
        "emulator_pid",
        "emulator_alive",
        "log",
    )
    lines = [f"{k}: {info[k]}" for k in keys if info.get(k) is not None]
    for role, values in info.get("sysctls", {}).items():
        for name, value in values.items():
            lines.append(f"sysctl {role} {name} = {value}")
    for role, routes in info.get("routes", {}).items():
        for r in routes:
            via = f" via {r['gateway']}" if r["gateway"] else ""
            metrics = "".join(f" {k} {v}" for k, v in r["metrics"].items())
            lines.append(f"route {role} {r['dst']}{via} dev {r['dev']}{metrics}")
    for warning in info.get("warnings", []):
        lines.append(f"warning: {warning}")
    return "\n".join(lines)


def _cmd_link_show(args: argparse.Namespace) -> int:
    info = Link.attach(args.name).show()
    if args.json:
        _print_json(info)
    else:
        print(_format_show(info))
    return 0


def _cmd_link_down(args: argparse.Namespace) -> int:
    try:
        link = Link.attach(args.name)
    except SpecError:
        leftovers = clean.leftovers(args.name)
        if not leftovers:
            raise
        report = clean.clean(args.name)
        print(f"link {args.name}: no state file; removed what was left ({len(leftovers)} items)")
        return 0 if report.ok else EXIT_LEFTOVERS
    link.down()
    print(f"link {args.name} down")
    return 0


def _cmd_link_list(args: argparse.Namespace) -> int:
    rows = []
    for name in list_links():
        try:
            link = Link.attach(name)
            rows.append({"name": name, "backend": link.backend, "spec": str(link.spec)})
        except SpecError as err:
            rows.append({"name": name, "backend": None, "spec": None, "error": str(err)})
    if args.json:
        _print_json(rows)
    else:
        for row in rows:
            print(f"{row['name']}\t{row['backend'] or '?'}\t{row['spec'] or row.get('error')}")
    return 0


def _cmd_clean(args: argparse.Namespace) -> int:
    report = clean.clean(args.name)
    if args.json:
        _print_json(asdict(report))
    else:
        what = f"link {args.name}" if args.name else "all tb- links"
        print(
            f"clean {what}: {len(report.killed)} processes, {len(report.namespaces)} namespaces, "
            f"{len(report.devices)} devices, {len(report.files)} files removed"
        )
        for item in report.remaining:
            print(f"  still there: {item}", file=sys.stderr)
    return 0 if report.ok else EXIT_LEFTOVERS


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add this package's subcommands to ``testbed``."""
    p = commands.add_parser("doctor", help="what this host can do, and the backend auto picks")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--backend",
        choices=backends.BACKEND_CHOICES,
        default="auto",
        help="check for this backend's needs (netem needs no /dev/net/tun)",
    )
    p.set_defaults(handler=_cmd_doctor)

    link = commands.add_parser("link", help="a persistent emulated path: up, show, down, list")
    sub = link.add_subparsers(dest="link_command", metavar="ACTION", required=True)
    up = sub.add_parser("up", help="bring a link up and leave it running")
    up.add_argument("name", help="link name: 1-10 lowercase letters or digits")
    up.add_argument(
        "linkspec",
        nargs="?",
        default="",
        help=f"e.g. rtt=200ms,loss=14%%,rate=333mbit, or a preset: {', '.join(PRESETS)}",
    )
    up.add_argument("--backend", choices=backends.BACKEND_CHOICES, default="auto")
    up.add_argument(
        "--slow-start-after-idle",
        choices=("0", "1"),
        help="net.ipv4.tcp_slow_start_after_idle in both ends (default: the kernel's 1)",
    )
    up.add_argument(
        "--sysctl", action="append", metavar="NAME=VALUE", help="a net.* sysctl for both ends"
    )
    up.set_defaults(handler=_cmd_link_up)
    show = sub.add_parser("show", help="namespaces, addresses, backend, spec of a link")
    show.add_argument("name")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=_cmd_link_show)
    down = sub.add_parser("down", help="take a link down")
    down.add_argument("name")
    down.set_defaults(handler=_cmd_link_down)
    ls = sub.add_parser("list", help="links that are up")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(handler=_cmd_link_list)

    c = commands.add_parser(
        "clean", help="remove every tb- namespace, device and emulator process (or one link's)"
    )
    c.add_argument("--name", help="only this link's (what tests use)")
    c.add_argument("--json", action="store_true")
    c.set_defaults(handler=_cmd_clean)

    try:
        bench_module = importlib.import_module("netem.bench")
    except ModuleNotFoundError as err:
        if err.name != "netem.bench":
            raise
        return
    register_bench = getattr(bench_module, "register", None)
    if register_bench is not None:
        register_bench(bench)
