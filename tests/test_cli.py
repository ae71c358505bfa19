"""harness.cli: what every `testbed` command shares."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from tbcore.control import ControlReply, ControlRequest, encode, parse_line


def test_sigusr1_prints_every_threads_stack_and_the_command_goes_on() -> None:
    argv = [sys.executable, "-m", "harness.cli", "remote", "agent", "--lease", "30"]
    agent = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert agent.stdin is not None and agent.stdout is not None
        agent.stdin.write(encode(ControlRequest(seq=1, op="hello")))
        agent.stdin.flush()
        reply = parse_line(agent.stdout.readline().rstrip(b"\n"), ControlReply)
        assert reply.seq == 1  # up, its handler registered
        agent.send_signal(signal.SIGUSR1)
        time.sleep(0.5)
        assert agent.poll() is None  # a stack dump, not an exit
    finally:
        _, stderr = agent.communicate(b"", timeout=30)  # end of input: the agent ends
    assert agent.returncode == 0
    assert b"Current thread" in stderr and b"remote/agent.py" in stderr


def _registered(module: str) -> set[str]:
    """The commands ``module`` registers (``bench X`` for a benchmark)."""
    import argparse
    import importlib

    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers()
    bench = commands.add_parser("bench").add_subparsers()
    importlib.import_module(module).register(commands, bench)
    return (set(commands.choices) - {"bench"}) | {f"bench {name}" for name in bench.choices}


def test_the_command_table_says_what_each_module_registers() -> None:
    from harness.cli import COMMAND_MODULES

    for module, commands in COMMAND_MODULES.items():
        assert _registered(module) == set(commands), module


def test_a_command_imports_only_its_module_and_anything_else_all() -> None:
    from harness.cli import COMMAND_MODULES, modules_for

    assert modules_for(["serve", "--h2-port", "0"]) == ["servers.cli"]
    assert modules_for(["bench", "stacks"]) == ["harness.bench.stacks"]
    everything = list(COMMAND_MODULES)
    for argv in ([], ["--help"], ["bench"], ["bench", "nope"], ["srve"]):
        assert modules_for(argv) == everything, argv


def test_testbed_serve_carries_no_analysis_and_no_netlink() -> None:
    """What ``testbed serve`` imports (the server's resident size: README)."""
    code = (
        "import sys\n"
        "from harness import cli\n"
        "cli.build_parser(['serve'])\n"
        "import servers.serve\n"
        "print(' '.join(m for m in ('pandas', 'pyarrow', 'matplotlib', 'pyroute2', 'numpy',"
        " 'raptorq', 'scipy') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "", out.stdout + out.stderr
