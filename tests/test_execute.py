"""Execution: the commands and the settings document each end gets."""

from __future__ import annotations

from pathlib import Path

from harness import spec as specmod
from harness.collect import sender_paces
from harness.execute import client_argv, run_sysctls, server_argv
from tbcore.settings import Settings

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"


def settings_passed(argv: list[str]) -> Settings:
    """The settings an end reads from the document its command line names."""
    return Settings.load(argv[argv.index("--settings") + 1])


def test_argv_carries_the_level_settings(tmp_path: Path) -> None:
    text = (EXPERIMENTS / "pacing.toml").read_text()
    spec = specmod.loads(text)
    paced = spec.level("paced").settings
    link = specmod.link_of(paced)
    argv = server_argv(paced, link, bind="198.18.2.2", port=20001, run_dir=tmp_path)
    server = settings_passed(argv)
    assert server.max_pacing_rate_bps == link.down.rate_bps == 333e6
    assert "--no-h3" in argv and server.cc == "cubic"
    client = client_argv(paced, link, host="198.18.2.2", port=20001, run_dir=tmp_path)
    assert settings_passed(client).connection == "new"
    assert client[client.index("--records") + 1] == str(tmp_path / "records.jsonl")
    # everything but the resolved pacing rate is the level's settings as they are
    assert settings_passed(client) == paced.for_end(link.up.rate_bps)


def test_tuned_quic_arm_sends_unpaced_full_size_datagrams(tmp_path: Path) -> None:
    spec = specmod.load(EXPERIMENTS / "connection.toml")
    tuned = spec.level("h3-reused").settings
    link = specmod.link_of(tuned)
    for argv in (
        server_argv(tuned, link, bind="198.18.2.2", port=20001, run_dir=tmp_path),
        client_argv(tuned, link, host="198.18.2.2", port=20001, run_dir=tmp_path),
    ):
        passed = settings_passed(argv)
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
