"""harness.collect.lateness: the emulator's packet times from its packet log."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.collect.lateness import emulator_lateness


def test_emulator_lateness_from_the_packet_log(tmp_path: Path) -> None:
    header = "direction,event,arrival_s,due_s,departure_s,size_bytes\n"
    (tmp_path / "packets-up.csv").write_text(
        header + "up,departed,1.0,1.1,1.1005,1500\nup,dropped_loss,1.0,,,1500\n"
    )
    assert emulator_lateness(tmp_path) is None  # one direction missing
    (tmp_path / "packets-down.csv").write_text(header)
    series = emulator_lateness(tmp_path)
    assert series is not None
    up = series["up"]
    assert list(up.departure_s) == [1.1005] and up.lateness_s[0] == pytest.approx(0.0005)
    assert list(up.sent_s) == [1.0]
    assert len(series["down"].departure_s) == 0
