"""The campaign's summary: the invalid fraction per experiment, and its exit status."""

from __future__ import annotations

from pathlib import Path

from harness.campaign.serial import CampaignSummary


def test_summary_prints_the_invalid_fraction_and_fails_on_a_level_without_a_valid_run() -> None:
    entries = [
        {
            "name": "connection",
            "status": "finished",
            "result_dir": "r/c",
            "runs": 25,
            "planned": 20,
            "invalid": 5,
            "levels_without_valid": [],
        },
        {
            "name": "ack",
            "status": "finished",
            "result_dir": "r/a",
            "runs": 6,
            "planned": 2,
            "invalid": 6,
            "levels_without_valid": ["delayed", "quick"],
        },
    ]
    summary = CampaignSummary(index_path=Path("x"), entries=entries[:1])
    assert summary.ok
    assert summary.lines() == [
        "connection: finished -> r/c, 25 runs (20 planned), 5 invalid (20 %)"
    ]
    summary = CampaignSummary(index_path=Path("x"), entries=entries)
    assert not summary.ok
    assert summary.lines()[1] == (
        "ack: finished -> r/a, 6 runs (2 planned), 6 invalid (100 %); "
        "no valid run for delayed, quick"
    )
    failed = CampaignSummary(Path("x"), [{"name": "loss", "status": "failed", "error": "boom"}])
    assert not failed.ok
    assert failed.lines() == ["loss: failed -> -, 0 runs (0 planned), 0 invalid (boom)"]
