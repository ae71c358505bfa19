"""``testbed remote``: check a remote host, measure its clock's offset, and the agent the
harness starts there over ssh (issue 18)."""

from __future__ import annotations

import argparse
import json
import time

from harness import __version__, remote, remote_agent
from harness.remote import ChannelError


def _channel(args: argparse.Namespace) -> remote.ControlChannel:
    return remote.remote_channel(args.host, args.remote_command, args.lease)


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


def run_agent(args: argparse.Namespace) -> int:
    core = remote_agent.AgentCore(clock=time.monotonic, lease_s=args.lease)
    remote_agent.serve(core)
    return 0


def _host_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("host", help="host, user@host or ssh://user@host:port, as ssh takes it")
    parser.add_argument(
        "--remote-command",
        default=remote.DEFAULT_REMOTE_COMMAND,
        help="the testbed command there (default: testbed on its PATH)",
    )
    parser.add_argument(
        "--lease",
        type=float,
        default=remote_agent.LEASE_DEFAULT_S,
        help="seconds the remote agent outlives a silent harness",
    )


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add ``testbed remote check|clock|agent``."""
    parser = commands.add_parser("remote", help="a remote host over ssh: check, clock, agent")
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
