"""harness.run.remote.agent: the agent's answers and lease on a fake clock, then the real agent
process on pipes (the way ssh runs it): answers, garbage, end of stdin and the lease."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from harness import __version__
from harness.run.remote.agent import LEASE_DEFAULT_S, AgentCore, check_lease
from tbcore import control
from tbcore.control import ControlReply, ControlRequest
from tbcore.errors import SpecError


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def line(seq: int, op: str, lease_s: float | None = None) -> bytes:
    return control.encode(ControlRequest(seq=seq, op=op, lease_s=lease_s)).rstrip(b"\n")


def test_time_is_stamped_on_arrival_and_on_reply() -> None:
    clock = FakeClock()
    core = AgentCore(clock=clock)
    clock.now_s = 100.25
    reply = core.handle(line(1, "time"), received_s=100.2)
    assert (reply.seq, reply.received_s, reply.replied_s) == (1, 100.2, 100.25)


def test_hello_says_who_the_agent_is() -> None:
    reply = AgentCore(clock=FakeClock()).handle(line(1, "hello"), 100.0)
    assert reply.version == __version__ and reply.uid == os.geteuid()
    assert reply.kernel and reply.lease_s == LEASE_DEFAULT_S


def test_the_lease_runs_out_without_requests_and_any_request_renews_it() -> None:
    clock = FakeClock()
    core = AgentCore(clock=clock, lease_s=10)
    clock.now_s = 109.0
    assert not core.expired()
    core.handle(line(1, "time"), 109.0)
    clock.now_s = 118.9
    assert not core.expired() and core.remaining_s() == pytest.approx(0.1)
    clock.now_s = 119.0
    assert core.expired()


def test_a_lease_request_sets_the_lease() -> None:
    clock = FakeClock()
    core = AgentCore(clock=clock, lease_s=10)
    assert core.handle(line(1, "lease", 60), 100.0).lease_s == 60
    clock.now_s = 150.0
    assert not core.expired()
    refused = core.handle(line(2, "lease", 0.01), 150.0)
    assert refused.error and refused.error.startswith("lease_s: ") and core.refused == 1
    assert core.handle(line(3, "lease"), 150.0).error.startswith("control_request.lease_s: ")


def test_garbage_is_answered_and_counted_and_the_agent_goes_on() -> None:
    core = AgentCore(clock=FakeClock())
    assert core.handle(b"\x00garbage", 100.0).error.startswith("control: not JSON")
    assert core.handle(line(7, "time"), 100.0).error is None
    assert core.refused == 1 and not core.done


def test_bye_ends_it() -> None:
    core = AgentCore(clock=FakeClock())
    core.handle(line(1, "bye"), 100.0)
    assert core.done


@pytest.mark.parametrize("lease_s", [0.0, 0.5, 3601.0, -1.0])
def test_a_lease_out_of_range_is_refused(lease_s: float) -> None:
    with pytest.raises(SpecError, match="lease_s"):
        check_lease(lease_s)


def agent(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "remote", "agent", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_the_agent_process_answers_garbage_and_oversized_lines_then_bye() -> None:
    process = agent()
    oversized = b"{" + b"x" * (2 * control.MAX_LINE_BYTES) + b"\n"
    out, err = process.communicate(
        line(1, "hello")
        + b"\n"
        + oversized
        + b"\xff\n"
        + line(2, "time")
        + b"\n"
        + line(3, "bye")
        + b"\n",
        timeout=60,
    )
    replies = [control.parse_line(text, ControlReply) for text in out.splitlines()]
    assert [r.seq for r in replies] == [1, -1, -1, 2, 3]
    assert "bytes, at most" in replies[1].error and "not JSON" in replies[2].error
    assert replies[3].received_s <= replies[3].replied_s
    assert process.returncode == 0 and err == b""


def test_the_agent_exits_when_its_stdin_ends() -> None:
    process = agent()
    process.stdin.close()
    assert process.wait(timeout=60) == 0


def test_the_agent_exits_when_its_lease_runs_out() -> None:
    process = agent("--lease", "1")
    start = time.monotonic()
    assert process.wait(timeout=60) == 0
    assert time.monotonic() - start >= 1.0
    assert process.stdout.read() == b""
    process.stdin.close()


@pytest.mark.timeout(60)
def test_a_second_iperf_server_on_a_port_waits_for_the_first(monkeypatch) -> None:
    """A one-test iperf3 server lets its port go a moment after its client returns; the
    next ``iperf_start`` on that port waits for it (here it never had a test: stopped after
    the wait), instead of failing on 'Address already in use'."""
    from harness.run.remote import agent

    monkeypatch.setattr(agent, "IPERF_EXIT_WAIT_S", 0.5)
    resources = agent.HostResources()
    try:
        port = 5399
        assert resources.start_iperf("127.0.0.1", port) == port
        first = resources.iperf_by_port[port]
        assert resources.start_iperf("127.0.0.1", port) == port
        assert first.poll() is not None and resources.iperf_by_port[port] is not first
    finally:
        resources.close()
