"""A run's medium accounts as runs.csv columns and air.json (harness.collect.airtime)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from harness.collect.airtime import (
    AIR_COLUMNS,
    AirRecord,
    air_columns,
    air_record,
    air_report_lines,
)
from netem.air import AirSpec
from netem.linkspec import parse_link
from netem.stats import AirStats, LinkStats
from tbcore.settings import Settings


def stats() -> AirStats:
    air = AirSpec()
    s = AirStats()
    # 1,000 full segments up, 500 pure ACKs down, 2 small data frames down (182 µs each)
    s.frames.update({"up.data": 1000, "down.ack": 500, "down.data": 2})
    s.ip_bytes.update({"up.data": 1_500_000, "down.ack": 500 * 52, "down.data": 2 * 400})
    s.busy_ns.update(
        {
            "up.data": 1000 * air.exchange_ns(1500),
            "down.ack": 500 * air.exchange_ns(52),
            "down.data": 2 * air.exchange_ns(400),
        }
    )
    s.exchanges.update({"up": 1000, "down": 502})
    s.wait_ns.update({"up": 5_000_000, "down": 1_000_000})
    return s


def test_columns_split_by_kind_and_direction() -> None:
    row, doc = air_record(stats(), AirSpec(), processing_s=0.3, rtt_s=0.01)
    assert set(row) == set(AIR_COLUMNS)
    assert row["air_frames"] == 1502
    assert (row["air_frames_data"], row["air_frames_ack"]) == (1002, 500)
    assert (row["air_frames_up"], row["air_frames_down"]) == (1000, 502)
    assert row["air_time_ack_s"] == pytest.approx(500 * 130e-6)
    assert row["air_time_data_s"] == pytest.approx(1000 * 342e-6 + 2 * 182e-6)
    assert row["air_busy_s"] == pytest.approx(row["air_time_data_s"] + row["air_time_ack_s"])
    assert doc.by_kind["down.ack"]["frames"] == 500
    assert doc.wait_s == {"up": 0.005, "down": 0.001}
    assert AirRecord.from_dict(doc.to_dict()) == doc
    assert doc.to_dict()["schema"] == "air/1"


def test_model_matches_the_medium_when_sizes_are_uniform() -> None:
    row, doc = air_record(stats(), AirSpec(), processing_s=0.3, rtt_s=0.01)
    assert row["air_model_error"] == pytest.approx(0.0, abs=1e-12)
    assert row["air_bound_busy_s"] == pytest.approx(row["air_busy_s"])
    # processing and RTT cannot overlap the data exchanges
    assert row["air_bound_s"] == pytest.approx(row["air_time_data_s"] + 0.31)
    assert doc.bound["total_s"] == row["air_bound_s"]


def test_mixed_sizes_show_as_a_model_error() -> None:
    s = AirStats()
    air = AirSpec()
    # one full and one tiny data frame: the model takes both at the mean size (776 bytes)
    s.frames["up.data"] = 2
    s.ip_bytes["up.data"] = 1500 + 52
    s.busy_ns["up.data"] = air.exchange_ns(1500) + air.exchange_ns(52)
    row, _ = air_record(s, air, processing_s=0.0, rtt_s=0.0)
    assert row["air_model_error"] != 0.0
    assert abs(row["air_model_error"]) < 0.05


def test_no_frames_no_error_ratio() -> None:
    row, _ = air_record(AirStats(), AirSpec(), processing_s=0.3, rtt_s=0.01)
    assert row["air_frames"] == 0 and row["air_model_error"] is None
    assert row["air_bound_s"] == pytest.approx(0.31)


def test_report_table_per_level() -> None:
    rows = []
    for level, acks, total, valid in (
        ("delayed", 500, 10.0, True),
        ("delayed", 520, 10.2, False),
        ("quick", 1000, 10.5, False),
    ):
        row, _ = air_record(stats(), AirSpec(), processing_s=0.3, rtt_s=0.01)
        row.update(air_frames_ack=acks, level=level, total_s=total, valid=valid, warmup=False)
        rows.append(row)
    lines = air_report_lines(pd.DataFrame(rows), ["delayed", "quick"])
    assert lines[0] == "## Shared medium"
    table = [line for line in lines if line.startswith("| delayed") or line.startswith("| quick")]
    # delayed: only its valid run; quick: none valid, so its (one) run
    assert table[0].split(" | ")[1:4] == ["1/2", "1002", "500"]
    assert table[1].split(" | ")[1:4] == ["0/1", "1002", "1000"]
    assert " 10.000 " in table[0] and " 10.500 " in table[1]


def test_no_medium_no_section() -> None:
    frame = pd.DataFrame([{"level": "a", "total_s": 1.0, "valid": True, "warmup": False}])
    assert air_report_lines(frame, ["a"]) == []


def test_air_columns_from_the_runs_link_stats(tmp_path: Path) -> None:
    link = parse_link("rtt=10ms,air=54mbit/6mbit")
    stats_path = tmp_path / "link_stats.json"
    stats_path.write_text(json.dumps(LinkStats(backend="userspace", air=stats()).to_dict()))
    settings = Settings(workload="retouch")
    row = air_columns(stats_path, tmp_path / "air.json", settings, link)
    assert row["air_frames"] == 1502
    assert row["air_bound_s"] == pytest.approx(row["air_time_data_s"] + 0.3 + 0.01)
    doc = AirRecord.from_dict(json.loads((tmp_path / "air.json").read_text()))
    assert doc.busy_s == row["air_busy_s"]
    # a link without a medium: nothing, no file
    assert air_columns(stats_path, tmp_path / "none.json", settings, parse_link("rtt=10ms")) == {}
    assert not (tmp_path / "none.json").exists()


def test_the_tradeoff_puts_freed_medium_time_beside_the_completion_time_change() -> None:
    from harness.collect.airtime import tradeoff_lines

    frame = pd.DataFrame(
        {
            "protocol": ["h3", "h3", "h3", "h2"],
            "level": ["immediate", "every2", "every2", "tcp"],
            "air_time_ack_s": [5.4, 2.7, 2.9, 1.6],
            "total_s": [16.4, 13.5, 13.7, 10.2],
        }
    )
    lines = tradeoff_lines(frame, ["immediate", "every2", "tcp"])
    assert "| h3 | every2 | immediate | 2.600 | -2.800 |" in lines
    assert not any("| h2 |" in line for line in lines)  # one level: nothing to compare
    assert tradeoff_lines(frame.iloc[:0], ["immediate"]) == []
