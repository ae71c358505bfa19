"""Execution: the commands and the settings document each end gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.collect.row import sender_paces
from harness.run.execute import run_sysctls
from harness.run.stacks import client_argv, server_argv
from harness.spec import experiment as specmod
from harness.spec.paths import topology_of
from netem.linkspec import LinkSpec
from tbcore.settings import Settings

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"
SERVER_ADDRESS = "198.18.2.2"
PORT = 20001


def settings_passed(argv: list[str]) -> Settings:
    """The settings an end reads from the document its command line names."""
    return Settings.load(argv[argv.index("--settings") + 1])


def settings_at_both_ends(settings: Settings, link: LinkSpec, run_dir: Path) -> list[Settings]:
    """The settings the server and then the client read, for one level's settings."""
    server = server_argv(settings, link, bind=SERVER_ADDRESS, port=PORT, run_dir=run_dir)
    client = client_argv(settings, link, host=SERVER_ADDRESS, port=PORT, run_dir=run_dir)
    return [settings_passed(server), settings_passed(client)]


def test_argv_carries_the_level_settings(tmp_path: Path) -> None:
    text = (EXPERIMENTS / "pacing.toml").read_text()
    spec = specmod.loads(text)
    paced = spec.level("paced").settings
    link = topology_of(paced, "test").link_spec
    argv = server_argv(paced, link, bind=SERVER_ADDRESS, port=PORT, run_dir=tmp_path)
    server = settings_passed(argv)
    assert server.max_pacing_rate_bps == link.down.rate_bps == 333e6
    assert "--no-h3" in argv and server.cc == "cubic"
    # the sender samples of the congestion-control trace, every 10 ms
    assert argv[argv.index("--samples") + 1] == str(tmp_path / "server-samples.csv")
    assert argv[argv.index("--sample-hz") + 1] == "100"
    client = client_argv(paced, link, host=SERVER_ADDRESS, port=PORT, run_dir=tmp_path)
    assert settings_passed(client).connection == "new"
    assert client[client.index("--records") + 1] == str(tmp_path / "records.jsonl")
    # everything but the resolved pacing rate is the level's settings as they are
    assert settings_passed(client) == paced.for_end(link.up.rate_bps)


def test_tuned_quic_arm_sends_unpaced_full_size_datagrams(tmp_path: Path) -> None:
    spec = specmod.load(EXPERIMENTS / "connection.toml")
    tuned = spec.level("h3-reused").settings
    link = topology_of(tuned, "test").link_spec
    for passed in settings_at_both_ends(tuned, link, tmp_path):
        assert passed.quic_pacing == "off" and passed.max_datagram_size_bytes == 1452
    new = spec.level("h3-new").settings
    assert sender_paces(new) and not sender_paces(tuned)
    assert not sender_paces(spec.level("h2-reused").settings)


def test_run_sysctls_carry_slow_start_after_idle_and_the_extras() -> None:
    settings = Settings(slow_start_after_idle=False, sysctls={"net.ipv4.tcp_sack": "0"})
    assert run_sysctls(settings) == {
        "net.ipv4.tcp_slow_start_after_idle": "0",
        "net.ipv4.tcp_sack": "0",
    }


def test_airtime_arms_carry_their_ack_policies_to_both_ends(tmp_path: Path) -> None:
    spec = specmod.load(EXPERIMENTS / "airtime.toml")
    fewer = spec.level("quic-every2").settings
    link = topology_of(fewer, "test").link_spec
    for passed in settings_at_both_ends(fewer, link, tmp_path):
        assert passed.ack_policy == "every:2,max:10ms"
    default = spec.level("tcp-delayed").settings
    argv = client_argv(default, link, host=SERVER_ADDRESS, port=PORT, run_dir=tmp_path)
    assert settings_passed(argv).ack_policy == "default"
    assert spec.level("tcp-quick").settings.quickack_route
    assert not spec.level("tcp-delayed").settings.quickack_route
    assert spec.level("quic-tack").settings.max_datagram_size_bytes == 1200
    assert link.air is not None and link.air.order == "alternate"


def test_fec_arm_runs_the_fec_listener_capped_at_each_directions_rate(tmp_path: Path) -> None:
    spec = specmod.load(Path(__file__).resolve().parent.parent / "experiments/fec.toml")
    settings = spec.level("tts-l14-fecad").settings
    link = topology_of(settings, "test").link_spec
    argv = server_argv(settings, link, bind=SERVER_ADDRESS, port=PORT, run_dir=tmp_path)
    assert argv[argv.index("--fec-port") + 1] == "20001" and "--no-h2" in argv
    assert "--qlog-dir" not in argv
    assert settings_passed(argv).fec_rate_bps == link.down.rate_bps
    client = client_argv(settings, link, host=SERVER_ADDRESS, port=PORT, run_dir=tmp_path)
    assert settings_passed(client).fec_rate_bps == link.up.rate_bps
    # the bbr arm's TCP settings are not refused for fec: recorded as ignored
    bbr = spec.level("tts-l14-bbr").settings
    assert bbr.replace(protocol="fec").ignored() == ["cc", "slow_start_after_idle"]


def test_a_server_that_never_listens_is_stopped_not_orphaned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """start_server's wait fails (here a timeout; a signal the same way): the process it
    started is stopped before the error goes on, since it is a session of its own."""
    import subprocess
    import sys
    from types import SimpleNamespace

    from harness.run import stacks as execute
    from netem import nsexec

    started: list[subprocess.Popen] = []

    def popen(
        ns: str, argv: list[str], nice: object = None, rr_priority: object = None, **kwargs: object
    ):
        proc = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True, **kwargs
        )
        started.append(proc)
        return proc

    monkeypatch.setattr(nsexec, "popen", popen)
    monkeypatch.setattr(execute, "SERVER_START_TIMEOUT_S", 0.3)
    with pytest.raises(TimeoutError):
        execute.start_server(SimpleNamespace(server_ns="tb-x-server"), ["x"], tmp_path)
    (proc,) = started
    assert proc.poll() is not None  # stopped and reaped
