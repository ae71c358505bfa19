"""The runner: validity and CPU windows with plain values, then a real short run end to end
(root)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from harness import spec as specmod
from harness.runner import CPU_SATURATED_FRACTION, CpuWatch, run_experiment, validity


def _valid(**changes):
    args = dict(
        error=None,
        sha256_ok=True,
        cpu={"client": 0.2, "server": 0.1, "emulator": 0.3},
        steal=0.0,
        lateness_p99_s=1e-4,
        configured_rtt_s=0.2,
        measured_rtt_s=0.2004,
        loss={"down": (0.14, 140, 1000)},
    )
    args.update(changes)
    return validity(**args)


def test_validity_names_every_reason() -> None:
    assert _valid() == (True, None)
    ok, reason = _valid(cpu={"server": CPU_SATURATED_FRACTION + 0.05})
    assert not ok and reason.startswith("cpu: server 95 %")
    assert "steal" in _valid(steal=0.3)[1]
    assert _valid(host_pressure=0.5)[1] == "host busy: CPU pressure 50 %"
    assert _valid(host_pressure=0.1)[0]
    assert "lateness" in _valid(lateness_p99_s=5e-3)[1]
    assert "RTT" in _valid(measured_rtt_s=0.215)[1]
    assert "loss" in _valid(loss={"down": (0.14, 20, 1000)})[1]
    assert "integrity" in _valid(sha256_ok=False)[1]
    # run-queue wait is recorded, not a reason by default (see RUNQUEUE_WAIT_MAX_FRACTION)
    assert _valid(runqueue_wait_s={"client": 0.010, "server": 0.0}, total_s=0.24)[0]
    both = _valid(error="client exited 1", steal=0.5)[1]
    assert both.startswith("error: client exited 1") and "; steal" in both


def test_cpu_fraction_over_a_window_with_a_fake_clock() -> None:
    now = [0.0]
    watch = CpuWatch(clock=lambda: now[0])
    cpu = {"n": 0.0}
    watch.pids = {}
    for step in range(11):  # 0.1 s apart, the process burns half a core
        now[0] = step * 0.1
        watch.samples.append((now[0], {"x": cpu["n"]}, (0.0, now[0] * 2)))
        cpu["n"] += 0.05
    assert watch.fraction("x", 0.3, 0.7) == pytest.approx(0.5)
    assert watch.fraction("x", 0.5, 0.5) == pytest.approx(0.5)  # widened to 200 ms
    assert watch.fraction("missing", 0.0, 1.0) is None
    assert watch.steal(0.2, 0.8) == pytest.approx(0.0)


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
    assert list(frame["level"]) == ["h2-new", "h2-reused", "h3-new"]
    assert [e for e in events if e[0] == "start"] == [
        ("start", "h2-new"),
        ("start", "h2-reused"),
        ("start", "h3-new"),
    ]
    for row in frame.itertuples():
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
    again = run_experiment(spec, resume=path, link_name="hn7", report=False)
    assert again.rows == [] and again.skipped == 3
    assert len(pd.read_csv(path / "runs.csv")) == 3
