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
from netem import nsexec
from tbcore.errors import HostUnreachable, LinkLost, SpecError, clip

COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "netem.cli": ("doctor", "link", "clean", "trace"),
    "harness.cli.bounds": ("bounds",),
    "servers.cli": ("serve", "workload", "relay"),
    "clients.cli": ("client",),
    "harness.cli.run": ("run", "campaign", "report"),
    "harness.cli.check": ("check",),  # an experiment file's plan, not run
    "harness.cli.compare": ("compare",),  # two result directories
    # the benchmarks, one room (harness/bench): they print measured ratios and tables
    "harness.bench.link": ("bench link",),  # the emulated path's fidelity, load and CPU
    "harness.bench.stacks": ("bench stacks",),  # the HTTP/3 stacks on one path
    "harness.bench.fec": ("bench fec",),  # the FEC codes
    "harness.bench.abuse": ("bench abuse", "abuse"),  # attacks on loopback; abuse: older name
    "harness.bench.crossval": ("bench crossval",),  # kernel netem in a VM vs the emulator
    "harness.cli.remote": ("remote",),  # check, clock, agent (a server host over ssh)
}
"""Each module and the commands it registers (``bench X``: a benchmark). ``testbed COMMAND``
imports only the modules of COMMAND: a server started as ``testbed serve`` does not carry
the analysis (pandas, pyarrow), pyroute2 and the rest in its memory (189 MB resident at
start with every module, 75 MB with its own; README). Anything else (``--help``, a typo)
imports every module, so that argparse lists every command. tests/test_cli.py checks that
the table says what the modules register."""

EXIT_USAGE = 2
"""Exit status of bad input, as argparse uses it."""
EXIT_LINK_LOST = 3
"""Exit status when the emulated path was taken down under a run."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (``testbed run: error: ...``), as
    every other bad input is; ``--help`` still prints the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {clip(message)}\n")


def modules_for(argv: Sequence[str]) -> list[str]:
    """The command modules ``testbed ARGV`` needs: those of its command, or all."""
    words = [*argv[:2], "", ""]
    wanted = f"bench {words[1]}" if words[0] == "bench" else words[0]
    chosen = [m for m, commands in COMMAND_MODULES.items() if wanted in commands]
    return chosen or list(COMMAND_MODULES)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of ``testbed``: every command, or (``argv`` given) those it needs."""
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
    for name in COMMAND_MODULES if argv is None else modules_for(argv):
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
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    _stacks_on_sigusr1()
    try:
        return int(args.handler(args) or 0)
    except (SpecError, HostUnreachable) as err:
        print(f"testbed {args.command}: error: {clip(str(err))}", file=sys.stderr)
        return EXIT_USAGE
    except LinkLost as err:
        print(f"testbed {args.command}: error: {err}", file=sys.stderr)
        return EXIT_LINK_LOST
    except KeyboardInterrupt:
        nsexec.stop_children()  # one made as the signal came, that its caller never saw
        print(f"testbed {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader (``| head``) went away: stop quietly, as cat and grep do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
