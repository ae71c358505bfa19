"""harness.report.cctrace: the sender's trace from server-samples.csv (TCP and QUIC rows),
Startup's end and ProbeBW's gains read from it, and the section and plot on a result."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from harness.plan.planner import plan_runs
from harness.report import cctrace
from harness.store.files import SERVER_SAMPLES
from harness.store.resultdir import ResultDir
from tbcore.runrow import RunRow

GAINS = [739, 739, 739, 88, 320, 192, 256, 256]


def _tcp_rows(path: Path, request_ids: list[str]) -> None:
    rows = []
    for rid in request_ids:
        for i, gain in enumerate(GAINS):
            rows.append(
                {
                    "t": 100.0 + i * 0.01,
                    "request_id": rid,
                    "proto": "h2",
                    "snd_cwnd": 10 * (i + 1),
                    "snd_mss": 1448,
                    "pacing_rate": 125_000 * (i + 1),
                    "bbr_pacing_gain": gain,
                    "cwnd": math.nan,
                }
            )
    pd.DataFrame(rows).to_csv(path, index=False)


def test_tcp_rows_give_bytes_bits_and_gains_of_the_last_response(tmp_path: Path) -> None:
    path = tmp_path / SERVER_SAMPLES
    _tcp_rows(path, ["h2:1:1", "h2:1:3"])
    trace = cctrace.sender_trace(path)
    assert len(trace) == len(GAINS)  # the last response's rows only
    assert trace["t_s"].iloc[0] == 0.0 and math.isclose(trace["t_s"].iloc[-1], 0.07)
    assert trace["cwnd_bytes"].iloc[0] == 14480  # segments x MSS
    assert trace["pacing_bps"].iloc[1] == 2_000_000  # bytes/s x 8
    assert math.isclose(cctrace.startup_end_s(trace), 0.03)
    assert cctrace.cycle_gains(trace) == [1.25, 0.75, 1.0]  # Drain's 88 left out


def test_quic_rows_use_the_byte_window(tmp_path: Path) -> None:
    path = tmp_path / SERVER_SAMPLES
    pd.DataFrame(
        {
            "t": [5.0, 5.01],
            "request_id": ["h3:1:0"] * 2,
            "proto": ["h3"] * 2,
            "cwnd": [12000, 24000],
            "pacing_rate": [1000, 2000],
            "snd_cwnd": [None, None],
            "snd_mss": [None, None],
            "bbr_pacing_gain": [None, None],
        }
    ).to_csv(path, index=False)
    trace = cctrace.sender_trace(path)
    assert trace["cwnd_bytes"].tolist() == [12000, 24000]
    assert math.isnan(cctrace.startup_end_s(trace))  # not BBR: no Startup
    assert cctrace.cycle_gains(trace) == []


def test_no_or_empty_samples_give_an_empty_trace(tmp_path: Path) -> None:
    assert cctrace.sender_trace(tmp_path / "absent.csv").empty
    (tmp_path / "empty.csv").write_text("")
    assert cctrace.sender_trace(tmp_path / "empty.csv").empty


def test_section_and_plot_of_a_result(tmp_path: Path) -> None:
    result = ResultDir.create(tmp_path, "bbr")
    result.write_manifest({"resolved": {"name": "bbr"}})
    levels = ["h2-bbr", "ngtcp2-bbr"]
    for run in plan_runs(levels, 1):
        run_dir = result.fresh_run_dir(run.run_id)
        if run.level == "h2-bbr":
            _tcp_rows(run_dir / SERVER_SAMPLES, ["h2:1:1"])
        result.save_row(
            RunRow(
                **{
                    **run.to_dict(),
                    "protocol": "h2" if run.level == "h2-bbr" else "h3",
                    "cc": "bbr",
                    "total_s": 1.0,
                    "valid": True,
                }
            )
        )
    frame = result.frame()
    lines = cctrace.cc_trace_section(result.path, frame, levels)
    text = "\n".join(lines)
    assert "| h2-bbr | h2 | bbr | 8 | 30 | 8.0 | 115.8 | 1.25, 0.75, 1 |" in text
    assert "No sender samples: ngtcp2-bbr" in text
    png = tmp_path / "cctrace.png"
    assert cctrace.plot_cc_trace(result, frame, levels, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not cctrace.plot_cc_trace(result, frame, ["ngtcp2-bbr"], tmp_path / "none.png")
