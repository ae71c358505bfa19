"""The runner: the judgement of a run and the effect scales with plain values, then a
real short run end to end (root)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from harness.campaign.experiment import run_reported
from harness.collect.lateness import emulator_lateness
from harness.collect.row import bound_for
from harness.run.machine import CpuWatch
from harness.run.runner import effect_scales, measured_times, run_experiment
from harness.run.stacks import ENDPOINT_RR_PRIORITY
from harness.spec import experiment as specmod
from harness.validity.judge import Collected, judge
from tbcore.procfs import HostCpu
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
        # the host was busy 0.4 s per s, half of it with the client and the server
        watch.samples.append((t, values, HostCpu(busy_s=0.4 * t, steal_s=0.0, total_s=2 * t)))
    return watch


def _collected(row: RunRow, run_dir: Path, error: str | None = None) -> Collected:
    """The collection's answer for ``run_dir``: the row and the packet log's times."""
    lateness = emulator_lateness(run_dir)
    return Collected(row=row, error=error, start_s=10.0, end_s=10.5, lateness=lateness)


def test_judge_adds_the_disturbance_and_its_verdict(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path, late_up_s=0.002)
    judged = judge(_collected(_row(), run_dir), _watch(0.001), effect_s=None)
    # flights: up {10.05, 10.0502} max 2 ms, up {10.30} 0.1 ms, down {10.45} 0.2 ms
    assert judged.disturbance_lateness_s == pytest.approx(0.0023)
    assert judged.main_wait_client_s == pytest.approx(0.001)
    assert judged.foreign_cpu_share == pytest.approx(0.5)
    assert judged.disturbance_wait_s == pytest.approx(0.0005)  # the foreign half of the wait
    assert judged.disturbance_steal_s == pytest.approx(0.0)
    assert judged.disturbance_s == pytest.approx(0.0028)
    assert judged.disturbance_fraction == pytest.approx(0.0056)
    assert judged.flights_up == 2 and judged.flights_down == 1
    assert judged.cpu_client == pytest.approx(0.1)
    # 2.8 ms on 500 ms is below 1 % (5 ms): valid; a 10 ms arm effect makes 1 ms the limit
    assert judged.valid and judged.disturbance_limit_s == pytest.approx(0.005)
    strict = judge(_collected(_row(), run_dir), _watch(0.001), effect_s=0.010)
    assert not strict.valid and strict.invalid_reason.startswith("disturbance: 2.80 ms")
    # the run's own reason comes first, the disturbance's after it
    own = judge(_collected(_row(), run_dir, error="x"), _watch(0.001), 0.010)
    assert own.invalid_reason.startswith("error: x; disturbance:")


def test_judge_without_a_time_or_a_packet_log(tmp_path: Path) -> None:
    none = Collected(row=_row(total_s=None), error="no", start_s=None, end_s=None)
    judged = judge(none, _watch(0.0), None)
    assert judged.disturbance_s is None and judged.invalid_reason == "error: no"
    run_dir = _run_dir(tmp_path, late_up_s=0.0)
    for name in ("packets-up.csv", "packets-down.csv"):
        (run_dir / name).unlink()
    judged = judge(_collected(_row(), run_dir), _watch(0.002), None)
    assert judged.disturbance_lateness_s is None
    assert judged.disturbance_s == pytest.approx(0.001)  # the foreign half of the wait


def test_an_agents_predicted_time_is_its_whole_task_as_its_runs_measure() -> None:
    from harness.run.runner import bound_times

    shipped = Path(__file__).resolve().parent.parent / "experiments"
    spec = specmod.load(shipped / "agent-connection.toml").in_form("chapter")
    level = spec.level("h2-reused")
    one = bound_for(level.settings, level.topology, 798_720, 200).total_s
    times = bound_times(spec)
    assert times["h2-reused"] == pytest.approx(30 * (one + level.settings.agent_local_s), 0.02)
    assert 100 < times["h2-reused"] < 110  # the chapter's 105 s task, not one 3.5 s round
    # so a new connection per round is about 28 s of effect, and its runs' limit 1 % of
    # the task (1.1-1.4 s), not a tenth of one round's 0.9 s
    assert effect_scales(spec)["h2-new"] == pytest.approx(times["h2-new"] - times["h2-reused"])
    assert effect_scales(spec)["h2-new"] > 20


def test_effect_scales_come_from_the_bounds_of_level_and_baseline() -> None:
    spec = specmod.load(Path(__file__).resolve().parent.parent / "experiments/connection.toml")
    scales = effect_scales(spec)
    b = {lv.name: bound_for(lv.settings, lv.topology, 354_640, 0).total_s for lv in spec.levels}
    assert scales["h2-reused"] == pytest.approx(b["h2-new"] - b["h2-reused"])
    # h3-new's baseline is the first level, h2-new: a baseline takes its smallest effect
    assert scales["h2-new"] == pytest.approx(
        min(b["h2-new"] - b["h2-reused"], b["h2-new"] - b["h3-new"])
    )
    assert scales["h3-new"] == pytest.approx(
        min(b["h3-new"] - b["h3-reused"], b["h3-new"] - b["h3-0rtt"], b["h2-new"] - b["h3-new"])
    )


def test_an_effect_the_runs_already_show_widens_a_scale_the_bounds_predict_small() -> None:
    spec = specmod.load(Path(__file__).resolve().parent.parent / "experiments/connection.toml")
    predicted = effect_scales(spec)
    # h3-new measured 0.5 s behind h2-new and h2c-new 0.5 s ahead of it, where the bounds
    # predict 0.2 s each: for h2-new those comparisons now weigh 0.5 s (its other, h2-reused,
    # is larger still)
    measured = effect_scales(spec, {"h2-new": 1.45, "h3-new": 1.95, "h2c-new": 0.95})
    assert predicted["h2-new"] == pytest.approx(0.199, abs=0.001)
    assert measured["h2-new"] == pytest.approx(0.5)
    # h3-new keeps its smallest comparison, with h3-0rtt (0.2 s, not measured yet)
    assert measured["h3-new"] == pytest.approx(predicted["h3-0rtt"])
    # a measured difference smaller than the prediction does not narrow it
    assert effect_scales(spec, {"h2-new": 1.45, "h2-reused": 1.449}) == predicted


def test_an_expected_effect_widens_a_scale_neither_bounds_nor_runs_show() -> None:
    spec = specmod.load(Path(__file__).resolve().parent.parent / "experiments/overhead.toml")
    assert spec.level("h3n-every2").expected_effect_s == pytest.approx(0.043)
    # ngtcp2's two ACK policies ran 3 ms apart; the bounds do not tell them apart: the
    # comparison asks about the chapter's 43 ms, so that is the scale of both
    scales = effect_scales(spec, {"h3n-immediate": 14.636, "h3n-every2": 14.639})
    assert scales["h3n-every2"] == pytest.approx(0.043)
    assert scales["h3n-immediate"] == pytest.approx(0.043)  # its other comparisons are larger
    # a measured effect larger than the expected one still wins
    wider = effect_scales(spec, {"h3n-immediate": 14.6, "h3n-every2": 14.7})
    assert wider["h3n-every2"] == pytest.approx(0.1)


def test_measured_times_are_each_levels_median_over_its_attempts() -> None:
    rows = [
        {"level": "a", "total_s": 1.0},
        {"level": "a", "total_s": 3.0},
        {"level": "a", "total_s": 2.0},
        {"level": "b", "total_s": None},
        {"level": "b", "total_s": float("nan")},
        {"level": "c", "total_s": 0.5},
    ]
    assert measured_times(rows) == {"a": 2.0, "c": 0.5}


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


def _tshark_frames(capture: Path, protocol: str) -> int:
    """Packets of ``capture`` that tshark decodes as ``protocol`` (no key-log option)."""
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    done = subprocess.run(
        ["tshark", "-n", "-r", str(capture), "-Y", protocol],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return len(done.stdout.splitlines())


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_real_short_experiment_end_to_end(tmp_path: Path) -> None:
    spec = specmod.loads(TINY)
    events = []
    result = run_reported(
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
        expected = f"rr {ENDPOINT_RR_PRIORITY}"  # CI runs as root on a kernel that allows it
        assert row.sched_client == expected and row.sched_server == expected
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
    # whole packets (a voice request is small), the secrets inside: decrypted with no key log
    h2_dir = path / "runs" / h2_new.run_id
    assert not (h2_dir / "client.pcap").exists()
    assert json.loads((h2_dir / "run.json").read_text())["capture"]["mode"] == "full"
    assert _tshark_frames(h2_dir / "client.pcapng", "http2") > 0
    assert _tshark_frames(h2_dir / "server.pcapng", "http2") > 0
    assert h2_new.handshake_s >= 0.080 - 1e-3  # TCP + TLS 1.3: at least 2 RTT
    h3 = frame[frame["level"] == "h3-new"].iloc[0]
    assert any((path / "runs" / h3.run_id / "qlog").rglob("*.qlog"))
    assert _tshark_frames(path / "runs" / h3.run_id / "client.pcapng", "http3") > 0
    reused = frame[frame["level"] == "h2-reused"].iloc[0]
    assert reused.total_s < h2_new.total_s
    # resume on a finished directory makes nothing and loses nothing
    again = run_experiment(spec, resume=path, link_name="hn7", attempts=1)
    assert again.rows == [] and again.skipped == 3
    assert len(pd.read_csv(path / "runs.csv")) == len(frame)


class _VanishingLink:
    """A link whose path is gone (what ``lost()`` reports after a careless clean)."""

    name = "ab70"

    def __init__(self, reason: str | None) -> None:
        self.reason = reason

    def lost(self) -> str | None:
        return self.reason


def test_a_link_taken_down_under_a_run_stops_it_and_discards_the_run(tmp_path: Path) -> None:
    from harness.run.runner import _check_paths
    from harness.store.resultdir import ResultDir
    from tbcore.errors import LinkLost

    result = ResultDir.create(tmp_path, "exp")
    run_dir = result.fresh_run_dir("0001-a-r0")
    (run_dir / "row.json").write_text("{}")
    _check_paths(_VanishingLink(None), result, "0001-a-r0", before=False)  # whole: nothing
    assert run_dir.exists()
    with pytest.raises(LinkLost, match="namespace tb-ab70-client is gone"):
        _check_paths(_VanishingLink("namespace tb-ab70-client is gone"), result, "0001-a-r0",
                    before=False)  # fmt: skip
    assert not run_dir.exists()  # not recorded as an invalid run: --resume makes it again


def test_result_directories_of_the_same_second_are_distinct(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from harness.store.resultdir import ResultDir

    with ThreadPoolExecutor(8) as pool:
        made = list(pool.map(lambda _: ResultDir.create(tmp_path, "exp", "20261203T000000Z"),
                             range(16)))  # fmt: skip
    assert len({d.path for d in made}) == 16


def test_an_invalid_run_is_made_again_after_the_other_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run loop with the link and the run itself replaced: h2-reused's first two
    attempts are invalid; each next attempt waits for the runs still queued."""
    import contextlib

    from harness.plan import planner as planmod
    from harness.run import runner

    spec = specmod.loads(TINY)
    made: list[str] = []

    class FakePaths:
        def lost(self) -> None:
            return None

        def probe(self, block: int | None) -> None:
            del block

    def fake_run(env: object, run: planmod.PlannedRun, effect_s: float | None) -> dict:
        made.append(run.run_id)
        valid = not (run.level == "h2-reused" and run.attempt < 3)
        return {"run_id": run.run_id, "attempt": run.attempt, "valid": valid}

    monkeypatch.setenv("TESTBED_RUN_LOCK", str(tmp_path / "lock"))
    monkeypatch.setattr(runner, "open_paths", lambda *a, **k: contextlib.nullcontext(FakePaths()))
    monkeypatch.setattr(runner, "_environment", lambda *a: None)
    monkeypatch.setattr(runner, "execute_run", fake_run)
    gated: list[str] = []
    monkeypatch.setattr(runner, "_wait_for_low_steal", lambda log: gated.append(made[-1]))
    plan = planmod.plan_for(spec)
    events: list[tuple[str, str]] = []
    result = SimpleNamespace(path=tmp_path)
    hook = lambda what, run, data: events.append((what, run.run_id))  # noqa: E731
    options = runner.RunOptions("userspace", "x", 3, None, hook, lambda _m: None)
    rows = runner._make_runs(spec, result, plan, {r.run_id: r for r in plan}, {}, options)
    first, second, third = (r.run_id for r in plan)
    assert made == [first, second, third, f"{second}-a2", f"{second}-a3"]
    assert gated == [third, f"{second}-a2"]  # before each re-run, not before a first attempt
    assert len(rows) == 5
    assert ("retry", second) in events and ("retry", f"{second}-a2") in events
    assert events[-1] == ("done", f"{second}-a3")
    # with one attempt, nothing is made again
    made.clear()
    options = runner.RunOptions("userspace", "x", 1, None, None, lambda _m: None)
    runner._make_runs(spec, result, plan, {r.run_id: r for r in plan}, {}, options)
    assert made == [first, second, third]
