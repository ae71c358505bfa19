"""The runner: the judgement of a run and the effect scales with plain values, then a
real short run end to end (root)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from harness import spec as specmod
from harness.collect import Collected, bound_for
from harness.machine import CpuWatch
from harness.runner import effect_scales, judge, run_experiment
from tbcore.runrow import RunRow


def _run_dir(tmp_path: Path, late_up_s: float) -> Path:
    """A run directory with one client record (request from 10.0 to 10.5 s) and the
    emulator's packet log: two flights up (one packet ``late_up_s`` late), one down."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record = {
        "connect_start": 10.0,
        "handshake_done": 10.1,
        "request_first_byte": 10.1,
        "request_last_byte": 10.2,
        "response_first_byte": 10.45,
        "response_last_byte": 10.5,
        "conn_index": 0,
    }
    (run_dir / "records.jsonl").write_text(json.dumps(record) + "\n")
    header = "direction,event,arrival_s,due_s,departure_s,size_bytes\n"
    up = [(10.05, 0.0), (10.0502, late_up_s), (10.30, 0.0001), (11.0, 0.5)]  # last: after
    down = [(10.45, 0.0002)]
    for name, rows in (("up", up), ("down", down)):
        lines = [f"{name},departed,{t - 0.1!r},{t - late!r},{t!r},1500\n" for t, late in rows] + [
            f"{name},dropped_loss,10.2,,,1500\n"
        ]
        (run_dir / f"packets-{name}.csv").write_text(header + "".join(lines))
    return run_dir


def _row(**values: object) -> RunRow:
    head = dict(run_id="r0", seq=0, block=0, position=0, level="a", rep=0, warmup=False)
    base = dict(link_seed=1, total_s=0.5, rtt_s=0.1, measured_rtt_s=0.1, sha256_ok=True)
    return RunRow(**{**head, **base, **values})


def _watch(main_wait_client_s: float) -> CpuWatch:
    """A watch whose samples say the client's main thread waited ``main_wait_client_s``
    between 10.0 and 10.5 s, and nothing else did."""
    watch = CpuWatch(clock=lambda: 0.0)
    for t, wait in (
        (9.9, 0.0),
        (10.0, 0.0),
        (10.5, main_wait_client_s),
        (10.6, main_wait_client_s),
    ):
        values = {"client": 0.1 * t, "server": 0.1 * t, "mainwait:client": wait}
        values["mainwait:server"] = 0.0
        watch.samples.append((t, values, (0.0, 2 * t)))
    return watch


def _collected(row: RunRow, error: str | None = None) -> Collected:
    return Collected(row=row, error=error, start_s=10.0, end_s=10.5)


def test_judge_adds_the_disturbance_and_its_verdict(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path, late_up_s=0.002)
    judged = judge(_collected(_row()), _watch(0.0005), run_dir, effect_s=None)
    # flights: up {10.05, 10.0502} max 2 ms, up {10.30} 0.1 ms, down {10.45} 0.2 ms
    assert judged.disturbance_lateness_s == pytest.approx(0.0023)
    assert judged.disturbance_wait_s == pytest.approx(0.0005)
    assert judged.disturbance_steal_s == pytest.approx(0.0)
    assert judged.disturbance_s == pytest.approx(0.0028)
    assert judged.disturbance_fraction == pytest.approx(0.0056)
    assert judged.flights_up == 2 and judged.flights_down == 1
    assert judged.cpu_client == pytest.approx(0.1)
    # 2.8 ms on 500 ms is below 1 % (5 ms): valid; a 10 ms arm effect makes 1 ms the limit
    assert judged.valid and judged.disturbance_limit_s == pytest.approx(0.005)
    strict = judge(_collected(_row()), _watch(0.0005), run_dir, effect_s=0.010)
    assert not strict.valid and strict.invalid_reason.startswith("disturbance: 2.80 ms")
    # the run's own reason comes first, the disturbance's after it
    own = judge(_collected(_row(), error="x"), _watch(0.0005), run_dir, 0.010)
    assert own.invalid_reason.startswith("error: x; disturbance:")


def test_judge_without_a_time_or_a_packet_log(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    none = Collected(row=_row(total_s=None), error="no", start_s=None, end_s=None)
    judged = judge(none, _watch(0.0), empty, None)
    assert judged.disturbance_s is None and judged.invalid_reason == "error: no"
    run_dir = _run_dir(tmp_path, late_up_s=0.0)
    for name in ("packets-up.csv", "packets-down.csv"):
        (run_dir / name).unlink()
    judged = judge(_collected(_row()), _watch(0.001), run_dir, None)
    assert judged.disturbance_lateness_s is None
    assert judged.disturbance_s == pytest.approx(0.001)  # the main thread's wait, all of it


def test_effect_scales_come_from_the_bounds_of_level_and_baseline() -> None:
    spec = specmod.load(Path(__file__).resolve().parent.parent / "experiments/connection.toml")
    scales = effect_scales(spec)
    b = {
        lv.name: bound_for(lv.settings, specmod.link_of(lv.settings), 354_640, 0).total_s
        for lv in spec.levels
    }
    assert scales["h2-reused"] == pytest.approx(b["h2-new"] - b["h2-reused"])
    # h3-new's baseline is the first level, h2-new: a baseline takes its smallest effect
    assert scales["h2-new"] == pytest.approx(
        min(b["h2-new"] - b["h2-reused"], b["h2-new"] - b["h3-new"])
    )
    assert scales["h3-new"] == pytest.approx(
        min(b["h3-new"] - b["h3-reused"], b["h3-new"] - b["h3-0rtt"], b["h2-new"] - b["h3-new"])
    )


TINY = """
name = "tiny"
question = "Does the harness run both stacks end to end?"
repetitions = 1
seed = 11

[fixed]
link = "rtt=40ms,rate=100mbit"
workload = "asr"
processing_audio = "10ms"
timeout = "30s"

[factor]
name = "connection"
settings = ["protocol", "connection", "warmup_requests", "slow_start_after_idle"]

[[factor.levels]]
name = "h2-new"
protocol = "h2"
connection = "new"

[[factor.levels]]
name = "h2-reused"
protocol = "h2"
connection = "reused"
warmup_requests = 1
slow_start_after_idle = false

[[factor.levels]]
name = "h3-new"
protocol = "h3"
connection = "new"
"""


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_real_short_experiment_end_to_end(tmp_path: Path) -> None:
    spec = specmod.loads(TINY)
    events = []
    result = run_experiment(
        spec,
        output=tmp_path,
        link_name="hn7",
        progress=lambda what, run, data: events.append((what, run and run.level)),
    )
    path = result.result.path
    assert path.parent == tmp_path / "tiny"
    for name in ("manifest.json", "runs.csv", "runs.parquet", "report.md"):
        assert (path / name).is_file(), name
    frame = pd.read_csv(path / "runs.csv")
    assert list(dict.fromkeys(frame["level"])) == ["h2-new", "h2-reused", "h3-new"]
    assert set(frame.groupby("level")["attempt"].max()) <= {1, 2, 3}
    # every planned run started once, and again only after an invalid attempt
    starts = [e for e in events if e[0] == "start"]
    assert list(dict.fromkeys(starts)) == [
        ("start", "h2-new"),
        ("start", "h2-reused"),
        ("start", "h3-new"),
    ]
    assert len(starts) == len(frame) == len(events) - 1 - len(starts)
    for row in frame.itertuples():
        assert row.disturbance_s >= 0 and row.disturbance_lateness_s >= 0
        assert row.sha256_ok, row.invalid_reason
        assert not str(row.invalid_reason).startswith("error"), row.invalid_reason
        assert math.isfinite(row.total_s) and row.total_s > 0.04
        assert row.ratio == pytest.approx(row.total_s / row.bound_s)
        assert row.acks > 0
        run_dir = path / "runs" / row.run_id
        acks = pd.read_csv(run_dir / "acks.csv")
        assert len(acks) >= row.acks
        assert (run_dir / "events.jsonl").stat().st_size > 0
        assert (run_dir / "inflight.csv").is_file()
        # the path is never faster than configured, and the bound is a lower bound
        assert row.measured_rtt_s >= 0.040 - 1e-4
        assert row.ratio >= 0.98
    h2_new = frame[frame["level"] == "h2-new"].iloc[0]
    assert (path / "runs" / h2_new.run_id / "client.pcap").stat().st_size > 0
    assert h2_new.handshake_s >= 0.080 - 1e-3  # TCP + TLS 1.3: at least 2 RTT
    h3 = frame[frame["level"] == "h3-new"].iloc[0]
    assert any((path / "runs" / h3.run_id / "qlog").rglob("*.qlog"))
    reused = frame[frame["level"] == "h2-reused"].iloc[0]
    assert reused.total_s < h2_new.total_s
    # resume on a finished directory makes nothing and loses nothing
    again = run_experiment(spec, resume=path, link_name="hn7", report=False, attempts=1)
    assert again.rows == [] and again.skipped == 3
    assert len(pd.read_csv(path / "runs.csv")) == len(frame)
