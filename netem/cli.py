"""Command-line edge of the emulated path: ``doctor``, ``link up/show/down/list``, ``clean``,
the links' traces (netem.trace_cli); its benchmark is ``testbed bench link`` (harness.bench).

::

    testbed doctor [--json]
    testbed link up NAME LINKSPEC [--backend auto|netem|userspace]
                        [--slow-start-after-idle 0|1] [--sysctl net.x.y=VALUE ...]
                        [--topology relay|dual --near-link L --link-b L --exit-link L]
                        [--event outage:at=2s,for=1s ...]
    testbed link up NAME "topology=relay;near_link=rtt=2ms;link=dc-longhaul-clean"
    testbed link event NAME outage:for=1s [--edge link_b]
    testbed link events NAME [--edge E] [--json]
    testbed link show NAME [--json]
    testbed link down NAME
    testbed link list [--json]
    testbed clean [--name NAME] [--force] [--json]
    testbed trace make markov|constant|leo OUT ...   (netem/trace_cli.py)
    testbed trace show PATH [--below 6mbit] [--plot FILE.png]

``link up`` returns once packets flow and leaves the link running (the userspace emulator is
a daemon logging to /run/testbed/links/NAME.log); any program can then use it, e.g.
``ip netns exec tb-NAME-server iperf3 -s`` and ``ip netns exec tb-NAME-client iperf3 -c
198.18.2.2``. An empty LINKSPEC is refused (an unshaped link by accident): write
``rtt=0ms`` for one without delay.

``clean`` removes what no living process owns: a link whose owner (the ``testbed run`` or
test that made it) is alive, or one that ``link up`` left whose emulator runs, is skipped
and named (``--force`` removes it too); ``--name`` limits it to one link. ``link down``
always removes its link.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from netem import backends, clean, doctor, trace_cli
from netem.events import parse_event
from netem.link import Link, list_links
from netem.linkspec import PRESETS
from netem.topologyspec import TOPOLOGIES, Topology
from tbcore.errors import SpecError

EXIT_LEFTOVERS = 1
"""Exit status of ``clean`` when something could not be removed."""


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def _print_rows(
    rows: list[dict[str, Any]], as_json: bool, line: Callable[[dict[str, Any]], str]
) -> None:
    """``rows`` as one JSON list, or one line each (tab-separated, made by ``line``)."""
    if as_json:
        _print_json(rows)
        return
    for row in rows:
        print(line(row))


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


def _link_up_spec(args: argparse.Namespace) -> str | Topology:
    """The link string, or the topology the flags describe (``--topology relay ...``)."""
    extra = {"near_link": args.near_link, "link_b": args.link_b, "exit_link": args.exit_link}
    if args.topology is None:
        given = [k for k, v in extra.items() if v is not None]
        if given:
            raise SpecError(given[0], "needs --topology relay or dual")
        return args.linkspec
    if "topology=" in args.linkspec:
        raise SpecError("topology", "give it as --topology or in the link string, not both")
    events: dict[str, list] = {}
    for item in args.event or []:
        edge, sep, text = item.partition("@")
        if not sep:
            raise SpecError("event", f"{item!r}: in a topology, give EDGE@EVENT")
        events.setdefault(edge, []).append(parse_event(text))
    return Topology.build(
        args.topology,
        link=args.linkspec,
        **{k: v for k, v in extra.items() if v is not None},
        events=events,
    )


def _cmd_link_up(args: argparse.Namespace) -> int:
    ssai = None if args.slow_start_after_idle is None else args.slow_start_after_idle == "1"
    spec = _link_up_spec(args)
    link = Link.up(
        args.name,
        spec,
        backend=args.backend,
        slow_start_after_idle=ssai,
        sysctls=_parse_sysctls(args.sysctl),
        events=None if isinstance(spec, Topology) else args.event,
        persistent=True,
    )
    info = link.show()
    print(
        f"link {link.name} up ({link.backend}): {link.client_ns} {link.client_addr} <-> "
        f"{link.server_ns} {link.server_addr}"
    )
    print(f"  spec: {info['spec']}")
    if info.get("topology", "direct") != "direct":
        for edge, e in info["edges"].items():
            print(f"  edge {edge}: {e['a']} {e['a_addr']} <-> {e['b']} {e['b_addr']}: {e['spec']}")
    if info.get("emulator_pid"):
        print(f"  emulator pid {info['emulator_pid']}, log {info.get('log')}")
    for warning in info["warnings"]:
        print(f"  warning: {warning}")
    for line in link.state.extra.get("reaped", []):
        print(f"  reaped {line}")
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
    if info.get("topology", "direct") != "direct":
        lines.append(f"topology: {info['topology']}")
        for node, n in info.get("nodes", {}).items():
            addrs = ", ".join(f"{i['device']} {i['addr']}" for i in n["interfaces"])
            lines.append(f"node {node} ({n['ns']}): {addrs}")
        for edge, e in info.get("edges", {}).items():
            lines.append(f"edge {edge}: {e['a']} <-> {e['b']}: {e['spec']}")
    for event in info.get("events", []):
        lines.append(f"event {event['kind']} {event['start_s']:.3f}-{event['end_s']}")
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
        report = clean.clean(args.name, force=True)
        print(f"link {args.name}: no state file; removed what was left ({len(leftovers)} items)")
        return 0 if report.ok else EXIT_LEFTOVERS
    link.down()
    print(f"link {args.name} down")
    return 0


def _cmd_link_event(args: argparse.Namespace) -> int:
    link = Link.attach(args.name)
    event = link.event(args.event, edge=args.edge)
    if args.json:
        _print_json(event.to_dict())
    else:
        end = "for good" if event.to_dict()["end_s"] is None else f"to {event.end_s:.6f}"
        print(
            f"link {link.name} {args.edge or 'link'}: {event.kind} from {event.start_s:.6f} {end}"
        )
    return 0


def _event_line(e: dict[str, Any]) -> str:
    return f"{e['kind']}\t{e['start_s']:.6f}\t{e['end_s']}\t{e['dropped_packets']}"


def _cmd_link_events(args: argparse.Namespace) -> int:
    events = [e.to_dict() for e in Link.attach(args.name).events(edge=args.edge)]
    _print_rows(events, args.json, _event_line)
    return 0


def _link_line(row: dict[str, Any]) -> str:
    return f"{row['name']}\t{row['backend'] or '?'}\t{row['spec'] or row.get('error')}"


def _cmd_link_list(args: argparse.Namespace) -> int:
    rows = []
    for name in list_links():
        try:
            link = Link.attach(name)
            rows.append({"name": name, "backend": link.backend, "spec": str(link.spec)})
        except SpecError as err:
            rows.append({"name": name, "backend": None, "spec": None, "error": str(err)})
    _print_rows(rows, args.json, _link_line)
    return 0


def _cmd_clean(args: argparse.Namespace) -> int:
    report = clean.clean(args.name, force=args.force)
    if args.json:
        _print_json(asdict(report))
    else:
        what = f"link {args.name}" if args.name else "all tb- links"
        print(
            f"clean {what}: {len(report.killed)} processes, {len(report.namespaces)} namespaces, "
            f"{len(report.devices)} devices, {len(report.files)} files removed"
        )
        for item in report.skipped:
            print(f"  skipped (in use; --force removes it): {item}")
        for item in report.remaining:
            print(f"  still there: {item}", file=sys.stderr)
    return 0 if report.ok else EXIT_LEFTOVERS


def _register_link(commands: argparse._SubParsersAction) -> None:
    """``testbed link up|event|events|show|down|list``."""
    link = commands.add_parser("link", help="a persistent emulated path: up, show, down, list")
    sub = link.add_subparsers(dest="link_command", metavar="ACTION", required=True)
    up = sub.add_parser("up", help="bring a link up and leave it running")
    up.add_argument("name", help="link name: 1-10 lowercase letters or digits")
    up.add_argument(
        "linkspec",
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
    up.add_argument("--topology", choices=TOPOLOGIES, help="the shape (default: one link)")
    up.add_argument("--near-link", help="relay: the client's hop to the relay (a link string)")
    up.add_argument("--link-b", help="dual: the second path (a link string)")
    up.add_argument("--exit-link", help="dual: the shared exit both paths cross")
    up.add_argument(
        "--event",
        action="append",
        metavar="EVENT",
        help="scheduled from link up: outage:at=2s,for=1s or rate:at=5s,rate=10mbit "
        "(in a topology: EDGE@EVENT)",
    )
    up.set_defaults(handler=_cmd_link_up)
    ev = sub.add_parser("event", help="an outage or rate change now (or in at=...)")
    ev.add_argument("name")
    ev.add_argument("event", help="outage:for=1s, rate:rate=1mbit,for=2s,dir=up ...")
    ev.add_argument("--edge", help="the edge of a topology (default: link)")
    ev.add_argument("--json", action="store_true")
    ev.set_defaults(handler=_cmd_link_event)
    evs = sub.add_parser("events", help="the scheduled events of a link and what they did")
    evs.add_argument("name")
    evs.add_argument("--edge", help="the edge of a topology (default: link)")
    evs.add_argument("--json", action="store_true")
    evs.set_defaults(handler=_cmd_link_events)
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

    _register_link(commands)

    c = commands.add_parser(
        "clean",
        help="remove every tb- namespace, device and emulator process that no living process "
        "owns (or one link's)",
    )
    c.add_argument("--name", help="only this link's (what tests use)")
    c.add_argument(
        "--force",
        action="store_true",
        help="also links in use (a live testbed run's, or testbed link up's with its emulator)",
    )
    c.add_argument("--json", action="store_true")
    c.set_defaults(handler=_cmd_clean)

    trace_cli.register(commands)
