"""``testbed remote``: check a remote host, measure its clock's offset, and the agent the
harness starts there over ssh (issue 18)."""

from __future__ import annotations

import argparse
import json
import sys

from harness import __version__
from harness.run.remote import agent as remote_agent
from harness.run.remote import channel as remote
from harness.run.remote import pathprobe
from harness.run.remote.channel import ChannelError


def _channel(args: argparse.Namespace) -> remote.ControlChannel:
    return remote_host(args).channel()


def remote_host(args: argparse.Namespace) -> remote.RemoteHost:
    """The host of ``--remote`` (or ``testbed remote``'s HOST) and its options."""
    return remote.RemoteHost(
        target=args.host,
        command=args.remote_command,
        lease_s=args.lease,
        ssh_config=args.ssh_config,
    )


def run_check(args: argparse.Namespace) -> int:
    problems = remote.check(_channel(args))
    for line in problems:
        print(f"testbed remote check: {line}")
    if not problems:
        print(f"testbed remote check: {args.host}: ready (testbed {__version__}, root)")
    return 1 if problems else 0


def run_clock(args: argparse.Namespace) -> int:
    try:
        with _channel(args) as channel:
            offset = channel.clock_offset(args.exchanges)
    except ChannelError as err:
        print(f"testbed remote clock: {err}")
        return 1
    doc = {
        "host": args.host,
        "offset_s": offset.offset_s,
        "error_s": offset.error_s,
        "min_rtt_s": offset.min_rtt_s,
        "exchanges": offset.samples,
    }
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(
            f"{args.host}: its CLOCK_MONOTONIC is ours + {offset.offset_s:.6f} s "
            f"+- {offset.error_s * 1e3:.3f} ms (min round trip {offset.min_rtt_s * 1e3:.3f} ms "
            f"of {offset.samples} exchanges)"
        )
    return 0


def run_path(args: argparse.Namespace) -> int:
    plan = pathprobe.ProbePlan.quick() if args.quick else pathprobe.ProbePlan()
    try:
        with _channel(args) as channel:
            hello, _, _ = channel.request("hello")
            addr = args.addr or hello.addr
            if addr is None:
                print(f"testbed remote path: {args.host}: no address to probe (give --addr)")
                return 1
            path = pathprobe.measure(channel, addr, plan)
    except ChannelError as err:
        print(f"testbed remote path: {err}")
        return 1
    if args.json:
        print(json.dumps({"host": args.host, "addr": addr, **path.to_dict()}, indent=2))
        return 0
    print(f"{args.host} ({addr}): {path.link_string()}")
    for name in ("up", "down"):
        sent, lost = getattr(path, f"{name}_sent"), getattr(path, f"{name}_lost")
        rate = getattr(path, f"{name}_rate_bps")
        print(
            f"  {name:4} loss {lost}/{sent} probes, TCP "
            + (f"{rate / 1e6:.2f} Mbit/s" if rate else "-")
        )
    return 0


def run_fetch(args: argparse.Namespace) -> int:
    remote_agent.fetch(args.dir, sys.stdout.buffer)
    sys.stdout.buffer.flush()
    return 0


def run_agent(args: argparse.Namespace) -> int:
    remote_agent.check_lease(args.lease)
    return remote_agent.main(args.lease)


def _host_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("host", help="host, user@host or ssh://user@host:port, as ssh takes it")
    parser.add_argument(
        "--remote-command",
        default=remote.DEFAULT_REMOTE_COMMAND,
        help="the testbed command there (default: testbed on its PATH)",
    )
    parser.add_argument(
        "--ssh-config", metavar="FILE", help="an ssh config file in place of yours (ssh -F)"
    )
    parser.add_argument(
        "--lease",
        type=float,
        default=remote_agent.LEASE_DEFAULT_S,
        help="seconds the remote agent outlives a silent harness",
    )


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``testbed remote check|clock|path|agent``."""
    parser = commands.add_parser("remote", help="a remote host over ssh: check, clock, path, agent")
    sub = parser.add_subparsers(dest="remote_command_name", metavar="SUBCOMMAND", required=True)
    check = sub.add_parser(
        "check", help="what the remote host lacks for a run there, one line each"
    )
    _host_arguments(check)
    check.set_defaults(handler=run_check)
    clock = sub.add_parser(
        "clock", help="the remote clock's offset and its error (NTP-style exchanges over ssh)"
    )
    _host_arguments(clock)
    clock.add_argument(
        "--exchanges", type=int, default=remote.CLOCK_EXCHANGES, help="exchanges to take"
    )
    clock.add_argument("--json", action="store_true", help="print JSON")
    clock.set_defaults(handler=run_clock)
    path = sub.add_parser(
        "path", help="the path to it, measured: min RTT, loss and TCP rate per direction"
    )
    _host_arguments(path)
    path.add_argument("--addr", help="its address to probe (default: the one ssh reached)")
    path.add_argument("--quick", action="store_true", help="a short probe (about 10 s)")
    path.add_argument("--json", action="store_true", help="print JSON")
    path.set_defaults(handler=run_path)
    agent = sub.add_parser(
        "agent", help="the remote side of the control channel (started by the harness over ssh)"
    )
    agent.add_argument(
        "--lease",
        type=float,
        default=remote_agent.LEASE_DEFAULT_S,
        help="seconds without a request before it exits",
    )
    agent.set_defaults(handler=run_agent)
    fetch = sub.add_parser(
        "fetch", help="a served run's files as a tar stream on stdout, then removed (harness)"
    )
    fetch.add_argument("dir", help="the run directory the agent's serve answered with")
    fetch.set_defaults(handler=run_fetch)
