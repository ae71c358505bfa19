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
