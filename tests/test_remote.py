"""harness.run.remote.channel: the control channel to a real agent process (run here on pipes,
as ssh would run it there), the clock offset through it, ``check``'s one-line findings, and the
host and command checks that keep ssh from being handed an option or shell syntax."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import support_sshd
from support_sshd import SshdHost

from harness import __version__
from harness.run.remote import channel as remote
from harness.run.remote.channel import ChannelError, ControlChannel
from netem import nsexec
from tbcore.control import ControlRequest, encode
from tbcore.errors import SpecError

TESTBED = [sys.executable, "-m", "harness.cli"]
LOCAL_AGENT = [sys.executable, "-m", "harness.cli", "remote", "agent", "--lease", "30"]


def local_channel() -> ControlChannel:
    return ControlChannel(list(LOCAL_AGENT), name="local")


def test_hello_and_the_clock_of_the_same_host() -> None:
    with local_channel() as channel:
        hello, sent_s, returned_s = channel.request("hello")
        assert hello.version == __version__ and returned_s >= sent_s
        offset = channel.clock_offset(8)
    # the same CLOCK_MONOTONIC on both sides: the true offset is 0, inside the bound
    assert offset.samples == 8
    assert abs(offset.offset_s) <= offset.error_s < 0.05
    assert offset.min_rtt_s >= 0


def test_close_says_bye_and_the_agent_exits() -> None:
    channel = local_channel().open()
    process = channel.process
    channel.close()
    assert process is not None and process.returncode == 0 and channel.process is None


def test_the_reply_of_a_request_cut_short_is_skipped() -> None:
    """Ctrl-C while a request waited leaves its reply in the pipe: the next request reads
    past it (a seq before its own) instead of failing, so the run's clean-up still talks."""
    with local_channel() as channel:
        assert channel.process is not None and channel.process.stdin is not None
        channel.seq += 1  # what request() does, then interrupted before reading the reply
        channel.process.stdin.write(encode(ControlRequest(seq=channel.seq, op="time")))
        channel.process.stdin.flush()
        reply, _, _ = channel.request("hello")
        assert reply.seq == channel.seq and reply.version == __version__


def test_a_refused_request_is_a_channel_error_naming_the_host() -> None:
    with local_channel() as channel, pytest.raises(ChannelError, match=r"^local: .*lease_s"):
        channel.request("lease", lease_s=0.01)


def test_an_agent_that_is_not_there_is_one_line() -> None:
    channel = ControlChannel([sys.executable, "-c", "import sys; sys.exit(127)"], name="h")
    with channel, pytest.raises(ChannelError, match=r"^h: command not found there"):
        channel.request("hello")


def test_check_of_a_ready_host_is_empty_and_a_non_root_agent_is_named() -> None:
    problems = remote.check(local_channel())
    if os.geteuid() == 0:
        assert problems == []
    else:
        assert len(problems) == 1 and "needs root" in problems[0]


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client")
def test_check_of_a_host_ssh_cannot_reach_is_one_line() -> None:
    # loopback port 9 (discard): nothing listens there, ssh is refused at once
    problems = remote.check(remote.RemoteHost("ssh://root@127.0.0.1:9").channel())
    assert len(problems) == 1
    assert problems[0].startswith("ssh://root@127.0.0.1:9: ssh could not connect: ")
    assert "refused" in problems[0]


def test_check_without_the_ssh_client_says_so() -> None:
    channel = ControlChannel(["tb-no-such-ssh", "host"], name="host")
    assert remote.check(channel) == [
        "tb-no-such-ssh: not found here (Debian: apt install openssh-client)"
    ]


@pytest.mark.parametrize(
    "target",
    [
        "",
        "-oProxyCommand=sh",
        "host name",
        "host;reboot",
        "a$(b)",
        "h\nx",
        "ssh://-x",
        "root@",
        "@",
        "root@:22",
        "host:22",
        "u@@h",
        "ssh://h:0",
        "ssh://h:99999",
        "@host",
    ],
)
def test_a_host_that_is_an_option_or_shell_syntax_is_refused(target: str) -> None:
    with pytest.raises(SpecError, match=r"^remote: "):
        remote.check_target(target)


@pytest.mark.parametrize("target", ["lab2", "root@10.0.0.2", "ssh://root@host:2222", "u@[::1]"])
def test_hosts_as_ssh_takes_them(target: str) -> None:
    assert remote.check_target(target) == target


def test_the_agent_command_line() -> None:
    argv = remote.RemoteHost("root@lab2", "/opt/tb/.venv/bin/testbed", 12).agent_argv()
    assert argv[0] == "ssh" and "BatchMode=yes" in argv
    assert argv[argv.index("--") - 1] == "root@lab2"
    assert argv[argv.index("--") + 1 :] == [
        "/opt/tb/.venv/bin/testbed", "remote", "agent", "--lease", "12"
    ]  # fmt: skip
    with pytest.raises(SpecError, match=r"^remote_command: "):
        remote.RemoteHost("lab2", "testbed; rm -rf /", 12)
    with pytest.raises(SpecError, match=r"^lease_s: "):
        remote.RemoteHost("lab2", lease_s=0)
    with pytest.raises(SpecError, match=r"^ssh_config: "):
        remote.RemoteHost("lab2", ssh_config="/nonexistent/tb-config")
    configured = remote.RemoteHost("lab2", ssh_config=__file__).agent_argv()
    assert configured[:3] == ["ssh", "-F", __file__]


# --- over a real ssh, to an sshd in a namespace across an emulated path (root) -------------


@pytest.fixture
def far_host(tmp_path: Path) -> Iterator[tuple[SshdHost, Any]]:
    with support_sshd.sshd_across("rmt", "rtt=40ms", tmp_path / "sshd") as pair:
        yield pair


far = support_sshd.remote_host


@pytest.mark.root
def test_over_ssh_the_clock_sees_the_paths_round_trip(far_host: tuple[SshdHost, Any]) -> None:
    host, link = far_host
    done = nsexec.run(
        link.client_ns,
        [*TESTBED, "remote", "clock", host.target, "--ssh-config", str(host.ssh_config),
         "--remote-command", support_sshd.TESTBED_COMMAND, "--json", "--exchanges", "8"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    # the emulated 40 ms plus ssh's and the agent's turnaround; never below the path
    assert 0.040 <= doc["min_rtt_s"] < 0.060
    # one kernel, one CLOCK_MONOTONIC: the true offset is 0 and must lie inside the bound
    assert abs(doc["offset_s"]) <= doc["error_s"] <= doc["min_rtt_s"] / 2 + 1e-3
    assert remote.check(far(host).channel(link.client_ns)) == []


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.root
def test_sigkill_of_the_local_side_ends_the_remote_agent(far_host: tuple[SshdHost, Any]) -> None:
    host, link = far_host
    channel = far(host).channel(link.client_ns).open()
    hello, _, _ = channel.request("hello")
    assert hello.pid and Path(f"/proc/{hello.pid}").exists()
    assert channel.process is not None
    channel.process.kill()  # the harness's ssh dies as with the harness: SIGKILL
    assert _gone(hello.pid, 10.0)
    channel.close()


@pytest.mark.root
def test_a_silent_harness_loses_the_agent_to_its_lease(far_host: tuple[SshdHost, Any]) -> None:
    host, link = far_host
    with far(host, lease_s=2).channel(link.client_ns) as channel:
        hello, _, _ = channel.request("hello")
        assert hello.pid is not None and not _gone(hello.pid, 1.0)
        assert _gone(hello.pid, 5.0)  # the ssh session is alive, the harness said nothing


def test_check_names_a_program_missing_there() -> None:
    channel = ControlChannel(["env", "PATH=/nonexistent", *LOCAL_AGENT], name="lab2")
    problems = remote.check(channel)
    assert "lab2: iperf3 is not installed there (harness/install.sh installs it)" in problems
