"""The runner: its pure parts with plain values, then a real short run end to end (root)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from harness import spec as specmod
from harness.runner import (
    CPU_SATURATED_FRACTION,
    CpuWatch,
    bound_for,
    client_argv,
    opened_connections,
    request_phases,
    run_experiment,
    sender_paces,
    server_argv,
    server_phases,
    validity,
)
from tbcore.records import RequestRecord, ServerEvent
from tbcore.settings import Settings


def request(**values: object) -> RequestRecord:
    head = dict(request_id=0, protocol="h2", connection="new", workload="asr", warmup=False)
    return RequestRecord(**{**head, **values})


RECORD = request(
    connect_start=10.0,
    handshake_done=10.4,
    request_first_byte=10.401,
    request_last_byte=10.9,
    response_first_byte=11.4,
    response_last_byte=11.45,
)


def test_request_phases_of_a_new_and_a_reused_connection() -> None:
    new = request_phases(RECORD, opened_connection=True)
    assert new is not None and new.new_connection
    assert new.handshake_s == pytest.approx(0.4)
    assert new.total_s == pytest.approx(1.45)
    assert new.ttfb_s == pytest.approx(1.4)
    assert new.rel["t_request_first_s"] == pytest.approx(0.401)
    reused = request_phases(RECORD, opened_connection=False)
    assert reused is not None and not reused.new_connection
    assert reused.total_s == pytest.approx(1.049)
    assert "t_handshake_s" not in reused.rel
    assert request_phases(replace(RECORD, response_last_byte=None), True) is None


def test_server_phases_from_its_events() -> None:
    events = [
        ServerEvent(t=5.0, event="request_first_byte"),  # another request, outside the window
        ServerEvent(t=10.100, event="request_first_byte"),
        ServerEvent(t=10.113, event="request_last_byte"),
        ServerEvent(t=10.1135, event="processing_start"),
        ServerEvent(t=10.1435, event="processing_end"),
        ServerEvent(t=10.148, event="response_first_byte"),
        ServerEvent(t=10.149, event="response_last_byte"),
    ]
    phases = server_phases(events, 10.0, 10.25)
    assert phases["processing_s"] == pytest.approx(0.030)
    assert phases["server_receive_s"] == pytest.approx(0.013)
    assert phases["server_turnaround_s"] == pytest.approx(0.0045)
    assert phases["server_send_s"] == pytest.approx(0.001)


def test_opened_connections_marks_the_first_request_of_each_connection() -> None:
    records = [request(conn_index=0), request(conn_index=0), request(conn_index=1)]
    assert opened_connections(records) == [True, False, True]


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


def test_bound_for_uses_the_level_settings() -> None:
    spec = specmod.load(Path(__file__).resolve().parent.parent / "experiments/connection.toml")
    new = spec.level("h2-new").settings
    reused = spec.level("h2-reused").settings
    link = specmod.link_of(new)
    b_new = bound_for(new, link, 354_640, 0)
    b_reused = bound_for(reused, link, 354_640, 0)
    assert b_reused is not None and b_new is not None
    # MODELS.md section 1: 0.2 + 0.030 + 0.00852 = 0.2385 s for the warm connection
    assert b_reused.total_s == pytest.approx(0.2385, abs=1e-4)
    assert b_new.setup_s == pytest.approx(0.4)
    assert b_new.total_s > b_reused.total_s


def test_bound_for_caps_the_window_each_protocol_honours() -> None:
    base = specmod.Settings(link="rtt=100ms,rate=20mbit", workload="retouch")
    link = specmod.link_of(base)
    up, down = 30_000_000, 5_000_000

    def window(**changes: object) -> int | None:
        bound = bound_for(replace(base, **changes), link, up, down)
        assert bound is not None
        return bound.window_bytes

    assert window(window_clamp_bytes=64_000) == 64_000
    # HTTP/2 flow control caps bytes in flight too, whichever is tighter
    assert window(window_clamp_bytes=640_000, h2_window_bytes=65_535) == 65_535
    assert window(h2_window_bytes=65_535) == 65_535
    # TCP_WINDOW_CLAMP does not reach QUIC; only its own flow-control window does
    assert window(protocol="h3", window_clamp_bytes=64_000) is None
    assert window(protocol="h3", window_clamp_bytes=64_000, quic_max_data_bytes=100_000) == 100_000


def settings_passed(argv: list[str]) -> Settings:
    """The settings an end reads from the document its command line names."""
    return Settings.load(argv[argv.index("--settings") + 1])


def test_argv_carries_the_level_settings(tmp_path: Path) -> None:
    text = (Path(__file__).resolve().parent.parent / "experiments/pacing.toml").read_text()
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
    spec = specmod.load(Path(__file__).resolve().parent.parent / "experiments/connection.toml")
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
