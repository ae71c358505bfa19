"""The experiment tables from result directories: names the output contract fixes."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from harness.report import stream_tables
from netem.linkspec import parse_link
from netem.topologyspec import Topology


def _run(
    root: Path,
    run_id: str,
    level: str,
    records: list[dict],
    events: list[dict],
    valid: bool = True,
) -> None:
    run = root / "runs" / run_id
    run.mkdir(parents=True)
    row = {"run_id": run_id, "level": level, "protocol": "h3", "valid": valid}
    (run / "row.json").write_text(json.dumps(row))
    settings = {"protocol": "h3", "workload": "stream"}
    path = Topology.build("direct", link=parse_link("rtt=200ms,rate=300kbit"))
    meta = {"settings": settings, "clock_offset_s": 0.0, "topology": path.to_dict()}
    (run / "run.json").write_text(json.dumps(meta))
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "server.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def test_playback_and_chunk_tables_have_the_contract_columns(tmp_path: Path) -> None:
    reads = [1.0 + 0.3 + i * 0.026 for i in range(30)]  # a rate shortfall
    record = {
        "request_id": 0,
        "stream_id": 0,
        "workload": "stream",
        "request_first_byte": 1.0,
        "response_last_byte": reads[-1],
        "down_bytes": 30 * 960,
        "chunk_times": reads,
        "sha256_ok": True,
        "error": None,
    }
    events = [
        {"t": 1.1 + i * 0.02 + 0.012, "event": "chunk_produced", "stream": 0, "index": i}
        for i in range(30)
    ]
    _run(tmp_path, "0000-rate-shortfall-h3-r0", "rate-shortfall-h3", [record], events)
    frames = stream_tables.write_tables(tmp_path)
    playback = pd.read_csv(tmp_path / "playback.csv")
    for column in (
        "run_id",
        "level",
        "initial_buffer_s",
        "start_delay_s",
        "stall_count",
        "stall_s",
        "predicted_stall_s",
        "stall_cause",
    ):
        assert column in playback.columns
    assert set(playback["initial_buffer_s"]) == {0.04, 0.045, 0.06, 0.12}
    assert (playback["stall_count"] > 0).all()  # no buffer hides a shortfall
    assert (playback["predicted_stall_s"] > 0).all()
    assert "chunks" in frames and len(frames["chunks"]) == 30
    lines = stream_tables.report_sections(tmp_path)
    assert any(line.startswith("## Playback") for line in lines)


def test_an_invalid_attempt_is_left_out_of_the_sections(tmp_path: Path) -> None:
    def record(last_s: float) -> dict:
        chunks = [1.0 + 0.3 + i * 0.02 for i in range(30)]
        return {
            "request_id": 0,
            "stream_id": 0,
            "workload": "stream",
            "request_first_byte": 1.0,
            "response_last_byte": last_s,
            "down_bytes": 30 * 960,
            "chunk_times": [*chunks[:-1], last_s],
            "sha256_ok": True,
            "error": None,
        }

    _run(tmp_path, "0000-jitter-h3-r0", "jitter-h3", [record(1.88)], [])
    _run(tmp_path, "0000-jitter-h3-r0-a2", "jitter-h3", [record(9.0)], [], valid=False)
    frames = stream_tables.write_tables(tmp_path)
    playback = pd.read_csv(tmp_path / "playback.csv")
    assert set(playback["valid"]) == {True, False}  # every attempt in the CSV, marked
    assert frames["playback"]["valid"].sum() == len(frames["playback"]) / 2
    lines = "\n".join(stream_tables.report_sections(tmp_path))
    # the invalid attempt's 7 s stall is not in the report's medians
    assert "| jitter-h3 | h3 | 40.0 | 1 |" in lines


def test_tiles_use_the_valid_runs_of_each_level() -> None:
    runs = pd.DataFrame(
        {
            "level": ["whole", "whole", "tiles"],
            "workload": ["retouch", "retouch", "retouch-tiles3"],
            "protocol": "h2",
            "connection": "new",
            "up_bps": 20e6,
            "down_bps": 100e6,
            "rtt_s": 0.1,
            "total_s": [14.35, 20.0, 15.0],
            "valid": [True, False, False],
        }
    )
    table = "\n".join(stream_tables.tiles_section(runs))
    assert "| whole | retouch | 1 | 14350.0 |" in table
    assert "| tiles | retouch-tiles3 | 0 | 15000.0 |" in table  # none valid: every attempt


def test_tiles_bound_is_the_pipeline() -> None:
    assert stream_tables.tiles_bound_s(1, 20e6, 100e6, 0.1, 0.3) == pytest.approx(12.8)
    tiled = stream_tables.tiles_bound_s(3, 20e6, 100e6, 0.1, 0.3)
    assert tiled == pytest.approx(12.05 + 0.1 + 5e6 / 3 * 8 / 100e6 + 0.05)
    # the chapter's 1, 2 and 2 MB: the last 2 MB take 0.16 s, so 12.36 s (§12.1.1)
    chapter = stream_tables.tiles_bound_s(3, 20e6, 100e6, 0.1, 0.3, (1, 2, 2))
    assert chapter == pytest.approx(12.05 + 0.1 + 0.16 + 0.05)
    assert round(chapter, 2) == 12.36
