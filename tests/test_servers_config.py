"""Server configuration and `testbed serve` flags: bad values refused with one line."""

from __future__ import annotations

import argparse

import pytest

from servers.cli import add_arguments, config_from_args
from servers.config import ServerConfig
from tbcore.errors import SpecError


def parse(*argv: str) -> ServerConfig:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return config_from_args(parser.parse_args(list(argv)))


def test_flags_with_units() -> None:
    config = parse(
        "--window-clamp",
        "64kb",
        "--max-pacing-rate",
        "333mbit",
        "--quic-max-data",
        "1MiB",
        "--processing-audio",
        "45ms",
        "--h2-window",
        "65535",
        "--cc",
        "cubic",
        "--quickack",
    )
    assert config.settings.window_clamp_bytes == 64_000
    assert config.settings.max_pacing_rate_bps == 333e6
    assert config.settings.quic_max_data_bytes == 1024 * 1024
    assert config.settings.processing_audio_s == pytest.approx(0.045)
    assert config.settings.h2_window_bytes == 65_535
    assert config.settings.cc == "cubic" and config.settings.quickack


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--max-datagram-size", "1000"], "max-datagram-size: must be at least 1200"),
        (["--h2-window", "100"], "h2-window"),
        (["--processing-audio", "30"], "processing-audio: '30' needs a unit"),
        (["--window-clamp", "-5"], "window-clamp"),
        (["--max-pacing-rate", "10mbps"], "max-pacing-rate"),
        (["--no-h2", "--no-h3"], "h2-port: at least one"),
    ],
)
def test_bad_values(argv: list[str], message: str) -> None:
    with pytest.raises(SpecError) as info:
        parse(*argv)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_port_range() -> None:
    with pytest.raises(SpecError, match="h2-port"):
        ServerConfig.of(h2_port=70000)


def test_the_settings_document_and_flags_build_one_settings(tmp_path) -> None:
    from tbcore.settings import Settings

    document = tmp_path / "settings.json"
    document.write_text(Settings(cc="bbr", processing_audio_s=0.01).to_json())
    config = parse("--settings", str(document), "--quickack")
    assert config.settings == Settings(cc="bbr", processing_audio_s=0.01, quickack=True)
    with pytest.raises(SpecError, match=r"^settings: .*No such file"):
        parse("--settings", str(tmp_path / "missing.json"))
