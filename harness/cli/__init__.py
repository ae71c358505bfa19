"""The ``testbed`` command. Each concern registers its own subcommands.

A module in :data:`COMMAND_MODULES` exposes ``register(commands, bench)``: ``commands`` is
the top-level subparser action, ``bench`` the one of ``testbed bench``. A handler is set
with ``parser.set_defaults(handler=fn)`` and returns the exit status.
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import os
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

from harness import __version__
from tbcore.errors import LinkLost, SpecError, clip

COMMAND_MODULES = (
    "netem.cli",  # doctor, link, clean, bench link
    "harness.cli.bounds",  # bounds
    "servers.cli",  # serve, workload
    "clients.cli",  # client
    "harness.bench.stacks",  # bench stacks
    "proto.fec.bench",  # bench fec
    "harness.cli.run",  # run, campaign, report
    "harness.cli.compare",  # compare (two result directories)
    "harness.abuse.bench",  # abuse (attacks on loopback, a benchmark)
    "netem.crossval",  # bench crossval (kernel netem in a VM vs the userspace emulator)
    "harness.cli.remote",  # remote check, clock, agent (a server host over ssh)
)

EXIT_USAGE = 2
"""Exit status of bad input, as argparse uses it."""
EXIT_LINK_LOST = 3
"""Exit status when the emulated path was taken down under a run."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (``testbed run: error: ...``), as
    every other bad input is; ``--help`` still prints the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {clip(message)}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="testbed",
        description="Where the time of one interactive request goes on a long, lossy path.",
    )
    parser.add_argument("--version", action="version", version=f"testbed {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    bench_parser = commands.add_parser(
        "bench", help="benchmarks: print measured ratios and tables (not unit tests)"
    )
    bench = bench_parser.add_subparsers(dest="bench", metavar="BENCH", required=True)
    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        module.register(commands, bench)
    return parser


def _stacks_on_sigusr1() -> None:
    """`kill -USR1 PID` prints every thread's stack to stderr: what a run that seems stuck
    is waiting for, without stopping it. Only where stderr is a file descriptor (not when
    main() is called inside a process that captured it, as a test does)."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return
    faulthandler.register(signal.SIGUSR1, all_threads=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _stacks_on_sigusr1()
    try:
        return int(args.handler(args) or 0)
    except SpecError as err:
        print(f"testbed {args.command}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except LinkLost as err:
        print(f"testbed {args.command}: error: {err}", file=sys.stderr)
        return EXIT_LINK_LOST
    except KeyboardInterrupt:
        print(f"testbed {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader (``| head``) went away: stop quietly, as cat and grep do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
