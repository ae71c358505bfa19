"""harness.collect.agent_rows: the agent's rounds become the run's row (task time, bound, outage
timeline, deadline, energy) and rounds.csv."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.collect import agent_rows
from harness.collect.row import ROW_PARTS
from harness.collect.traces import run_clocks
from harness.spec.paths import topology_of
from harness.store.files import ROUND_TRACE_FILE, ROUNDS_FILE
from tbcore.records import AgentRound, read_csv, write_jsonl
from tbcore.settings import Settings

CLOUD = topology_of(Settings(link="cloud"), "test")


def _round(index: int, start: float, **kw: object) -> AgentRound:
    values: dict = dict(
        round=index, attempt=0, op_id=f"t-a0-r{index}", redone=False, start_s=start,
        end_s=start + 3.6, round_s=3.6, upload_bytes=798_720, encode_s=0.0, model_s=2.0,
        executed=True, sha256_ok=True, new_connection=index == 0, handshake_s=0.4,
    )  # fmt: skip
    values.update(kw)
    return AgentRound(**values)


def test_rounds_become_the_row(tmp_path: Path) -> None:
    settings = Settings(
        workload="agent", agent_rounds=3, connection="reused", link="cloud",
        agent_deadline_s=20.0, site_power_w=700, outage_after_round=1, outage_s=1.0,
        outage_mode="blackout",
    )  # fmt: skip
    rounds = [
        _round(0, 100.0),
        _round(1, 103.6),
        _round(2, 107.2, end_s=None, round_s=None, error="TimeoutError", detected_s=112.0),
        _round(2, 112.5, redone=True, executed=False, reconnected_s=113.0, new_connection=True),
    ]
    write_jsonl(tmp_path / "records.jsonl", rounds)
    fired = [
        {
            "after_progress": 2,
            "event": "outage:for=1s",
            "kind": "outage",
            "start_s": 107.2,
            "end_s": 108.2,
        }
    ]
    part = ROW_PARTS["agent_round"](settings, CLOUD, tmp_path, None, fired)
    cols = part.columns
    assert part.error is None and part.sha256_ok is True
    assert cols["total_s"] == pytest.approx(116.1 - 100.0)
    assert cols["agent_redone"] == 1 and cols["agent_rounds_done"] == 3
    assert cols["agent_connections"] == 2
    assert cols["outage_start_s"] == pytest.approx(7.2)
    assert cols["outage_detected_s"] == pytest.approx(12.0)
    assert cols["outage_back_s"] == pytest.approx(13.0)
    assert cols["deadline_met"] is True
    # the stored result of the retried op ran no model: busy time counts executions only
    assert cols["site_busy_s"] == pytest.approx(4.0)
    assert cols["site_energy_j"] == pytest.approx(2800.0)
    assert cols["ratio"] == pytest.approx(cols["total_s"] / cols["bound_s"])
    assert len(read_csv(tmp_path / ROUNDS_FILE, AgentRound)) == 4
    # the bound's parts: 3 rounds and the redone one, each a round trip and its bytes; no
    # random loss on the path, so no retransmission part and the expectation is the bound
    assert cols["bound_propagation_s"] == pytest.approx(4 * 0.2)
    assert cols["bound_serialisation_s"] == pytest.approx(4 * (798_720 + 256) * 8 / 6.4e6)
    assert 0 <= cols["bound_window_s"] <= cols["bound_feedback_s"]
    assert cols["bound_retransmission_s"] == 0.0 and cols["bound_expected_s"] == cols["bound_s"]
    assert cols["agent_handshake_s"] == pytest.approx(0.4)


def test_an_unfinished_task_or_a_missing_outage_is_an_error(tmp_path: Path) -> None:
    settings = Settings(
        workload="agent", agent_rounds=3, link="cloud", outage_after_round=1,
        outage_mode="blackout",
    )  # fmt: skip
    write_jsonl(tmp_path / "records.jsonl", [_round(0, 100.0)])
    part = agent_rows.agent_part(settings, CLOUD, tmp_path, None, [])
    assert part.error == "agent task unfinished: 1 of 3 rounds"
    write_jsonl(tmp_path / "records.jsonl", [_round(i, 100.0 + 4 * i) for i in range(3)])
    part = agent_rows.agent_part(settings, CLOUD, tmp_path, None, [])
    assert part.error == "the outage was never given to the link"


def test_a_task_that_rode_through_the_outage_gets_the_bound_of_what_happened(
    tmp_path: Path,
) -> None:
    # restart planned after round 1 (two rounds redone), but the transport rode through the
    # outage: no round lost, none redone (issue 27: the bound took a redo that never came)
    settings = Settings(
        workload="agent", agent_rounds=3, connection="reused", link="cloud",
        outage_after_round=1, outage_s=1.0, recovery="restart", outage_mode="blackout",
    )  # fmt: skip
    write_jsonl(tmp_path / "records.jsonl", [_round(i, 100.0 + 3.6 * i) for i in range(3)])
    fired = [{"kind": "outage", "start_s": 104.0, "end_s": 105.0}]
    cols = agent_rows.agent_part(settings, CLOUD, tmp_path, None, fired).columns
    planned = agent_rows.agent_bound(settings, CLOUD.link_spec, 798_720, 0.0)
    plain = agent_rows.agent_bound(
        Settings(workload="agent", agent_rounds=3, connection="reused", link="cloud"),
        CLOUD.link_spec, 798_720, 0.0,
    )  # fmt: skip
    assert planned is not None and plain is not None
    assert cols["bound_s"] == pytest.approx(plain.total_s)
    assert cols["bound_s"] < planned.total_s
    assert cols["bound_basis"] == (
        "records: no round lost, 0 redone (0 from the server's store); the plan's bound "
        "assumed a round lost, 2 redone (0 from the store)"
    )
    # the plan held (a round lost, one redone from the store): the planned bound, no basis
    committed = Settings(
        workload="agent", agent_rounds=3, connection="reused", link="cloud",
        outage_after_round=1, outage_s=1.0, recovery="committed", outage_mode="blackout",
    )  # fmt: skip
    rounds = [
        _round(0, 100.0),
        _round(1, 103.6),
        _round(2, 107.2, end_s=None, round_s=None, error="TimeoutError", detected_s=112.0),
        _round(2, 112.5, redone=True, executed=False, new_connection=True),
    ]
    write_jsonl(tmp_path / "records.jsonl", rounds)
    cols = agent_rows.agent_part(committed, CLOUD, tmp_path, None, fired).columns
    assert cols["bound_basis"] is None
    bound = agent_rows.agent_bound(committed, CLOUD.link_spec, 798_720, 0.0)
    assert bound is not None and cols["bound_s"] == pytest.approx(bound.total_s)


def test_a_connection_break_costs_the_wait_a_connection_and_the_redone_rounds(
    tmp_path: Path,
) -> None:
    """outage_mode break (the default): no link event; the bound adds the client's wait
    (outage) after the reset, one more connection and the rounds redone; the timeline runs
    from the reset's arrival to the end of the wait; a break that never came is a basis."""
    settings = Settings(
        workload="agent", agent_rounds=3, connection="reused", link="cloud",
        outage_after_round=1, outage_s=1.0, recovery="restart",
    )  # fmt: skip
    assert settings.outage_mode == "break"
    rounds = [
        _round(0, 100.0),
        _round(1, 103.6, end_s=None, round_s=None, error="connection lost", detected_s=107.2,
               broken=True, resumed_s=108.2),
        _round(0, 108.2, attempt=1, redone=True, reconnected_s=108.8, new_connection=True),
        _round(1, 111.8, attempt=1, redone=True),
        _round(2, 115.4, attempt=1),
    ]  # fmt: skip
    write_jsonl(tmp_path / "records.jsonl", rounds)
    part = agent_rows.agent_part(settings, CLOUD, tmp_path, None, [])
    cols = part.columns
    assert part.error is None and cols["bound_basis"] is None
    assert cols["outage_start_s"] == pytest.approx(7.2)
    assert cols["outage_end_s"] == pytest.approx(8.2)
    assert cols["outage_back_s"] == pytest.approx(8.8)
    planned = agent_rows.agent_bound(settings, CLOUD.link_spec, 798_720, 0.0)
    plain = agent_rows.agent_bound(
        Settings(workload="agent", agent_rounds=3, connection="reused", link="cloud"),
        CLOUD.link_spec, 798_720, 0.0,
    )  # fmt: skip
    assert planned is not None and plain is not None
    assert planned.reconnect_s == 1.0 and planned.outage_s == 0.0
    assert planned.redone_rounds == 2 and planned.new_connections == plain.new_connections + 1
    first = plain.first_round_s - plain.round_s  # a new connection's set-up and slow start
    assert planned.total_s == pytest.approx(plain.total_s + 1.0 + first + 2 * plain.round_s)
    assert cols["bound_s"] == pytest.approx(planned.total_s)
    # the server never reset: nothing lost, nothing redone, and the row says so
    write_jsonl(tmp_path / "records.jsonl", [_round(i, 100.0 + 3.6 * i) for i in range(3)])
    cols = agent_rows.agent_part(settings, CLOUD, tmp_path, None, []).columns
    assert cols["bound_s"] == pytest.approx(plain.total_s)
    assert cols["bound_basis"].startswith("records: no round lost, 0 redone")


def test_on_a_traced_uplink_the_bound_follows_the_trace_from_the_tasks_start(
    tmp_path: Path,
) -> None:
    """The one-line trace "1" (12 Mbit/s) on the uplink, its clock at 90 s with offset 2 s:
    the task's bound is the task at 12 Mbit/s, each round's network time has its bound
    from where the trace was at its first byte (round_trace.csv), and the row says where the
    trace was when the task began."""

    settings = Settings(
        workload="agent", agent_rounds=2, connection="reused", warmup_requests=1,
        link="rtt=200ms,up.rate=trace:const-12mbit.up,down.rate=6.4mbit", agent_model_s=0.08,
    )  # fmt: skip
    path = topology_of(settings, "test")
    rounds = [
        _round(1, 100.0, end_s=101.2, round_s=1.2, upload_s=0.01, reply_s=0.8, model_s=0.08),
        _round(2, 101.2, end_s=102.4, round_s=1.2, upload_s=0.01, reply_s=0.8, model_s=0.08),
    ]
    write_jsonl(tmp_path / "records.jsonl", rounds)
    clock = {"origin_s": 90.0, "offset_s": 2.0}
    clocks = run_clocks({"traces": {"link": {"up": clock}}})
    part = ROW_PARTS["agent_round"](settings, path, tmp_path, None, [], clocks)
    fixed = agent_rows.agent_bound(
        Settings(**{**settings.to_dict(), "link": "rtt=200ms,up.rate=12mbit,down.rate=6.4mbit"}),
        topology_of(Settings(link="rtt=200ms,up.rate=12mbit,down.rate=6.4mbit"), "t").link_spec,
        798_720,
        0.0,
    )
    assert fixed is not None
    assert part.columns["bound_s"] == pytest.approx(fixed.total_s, abs=2 * 1e-3)
    assert part.columns["ratio"] == pytest.approx(2.4 / part.columns["bound_s"])
    assert part.columns["trace_position_up_s"] == pytest.approx(12.0)
    assert part.columns["offered_up_bps"] == pytest.approx(12e6, rel=1e-3)
    table = (tmp_path / ROUND_TRACE_FILE).read_text().splitlines()
    assert table[0].split(",") == list(agent_rows.ROUND_TRACE_COLUMNS)
    first = dict(zip(table[0].split(","), table[1].split(","), strict=True))
    assert float(first["first_byte_s"]) == pytest.approx(0.39)  # 101.2 - 0.8 - 0.01 - 100
    assert float(first["position_up_s"]) == pytest.approx(12.39)
    assert float(first["network_s"]) == pytest.approx(0.81 - 0.08)
    upload_s = 798_720 * 8 / 12e6
    assert float(first["network_bound_s"]) == pytest.approx(upload_s + 0.2, abs=2e-3)


def test_judged_tasks_count_their_attempts_and_the_bound_every_attempts_rounds(
    tmp_path: Path,
) -> None:
    """Two one-round tasks, the first attempt failed: two tasks done in three attempts, and
    the bound is that of the three rounds the attempts made, named in bound_basis."""
    settings = Settings(
        workload="agent", agent_rounds=1, agent_tasks=2, task_success=0.5, connection="reused",
        link="cloud",
    )  # fmt: skip
    rounds = [
        _round(0, 100.0, task=0, task_outcome="failed"),
        _round(0, 103.6, attempt=1, op_id="t-a1-r0", redone=True, task=0, task_outcome="done"),
        _round(1, 107.2, attempt=2, op_id="t-a2-r1", task=1, task_outcome="done"),
    ]
    write_jsonl(tmp_path / "records.jsonl", rounds)
    part = ROW_PARTS["agent_round"](settings, CLOUD, tmp_path, None, [])
    cols = part.columns
    assert part.error is None
    assert (cols["agent_tasks_done"], cols["task_attempts"]) == (2, 3)
    assert cols["bound_propagation_s"] == pytest.approx(3 * 0.2)
    assert "3 rounds" in cols["bound_basis"] and "3 task attempts" in cols["bound_basis"]


def test_a_task_never_judged_done_leaves_the_run_unfinished(tmp_path: Path) -> None:
    settings = Settings(workload="agent", agent_rounds=1, agent_tasks=2, task_success=0.5)
    rounds = [
        _round(0, 100.0, task=0, task_outcome="done"),
        _round(1, 103.6, attempt=1, op_id="t-a1-r1", task=1, task_outcome="failed"),
    ]
    write_jsonl(tmp_path / "records.jsonl", rounds)
    part = ROW_PARTS["agent_round"](settings, CLOUD, tmp_path, None, [])
    assert part.error == "agent tasks unfinished: 1 of 2"
