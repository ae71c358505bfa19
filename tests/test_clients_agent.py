"""The agent workload end to end on loopback: rounds in order, connections per round or one
for the task, every screenshot's SHA-256 echoed, the action carried back, codecs timed."""

from __future__ import annotations

import itertools

import pytest
from support_servers import client_config

from clients.agent import run_agent
from clients.config import ClientConfig
from servers.process import ServerProcess
from tbcore.agent import RAW_SCREEN_BYTES

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server():  # type: ignore[no-untyped-def]
    with ServerProcess(["--agent-model", "50ms"]) as proc:
        yield proc


def config(server: ServerProcess, protocol: str, **kw: object) -> ClientConfig:
    """An agent client with 20 ms of local work a round."""
    return client_config(server, protocol, workload="agent", agent_local_s=0.02, **kw)


@pytest.mark.parametrize("protocol", ["h2", "h3"])
@pytest.mark.parametrize("connection", ["new", "reused"])
async def test_rounds_in_order(server: ServerProcess, protocol: str, connection: str) -> None:
    rounds = await run_agent(config(server, protocol, agent_rounds=3, connection=connection))
    assert [r.round for r in rounds] == [0, 1, 2]
    assert all(r.error is None and r.sha256_ok and r.executed for r in rounds)
    assert all(r.upload_bytes == RAW_SCREEN_BYTES and r.encode_s == 0.0 for r in rounds)
    # a round starts only after the previous action arrived
    for a, b in itertools.pairwise(rounds):
        assert b.start_s >= a.end_s
    assert all(r.model_s == pytest.approx(0.05) for r in rounds)
    assert all(r.round_s >= r.local_s + r.model_s for r in rounds)
    conns = [r.conn_index for r in rounds]
    assert conns == ([0, 1, 2] if connection == "new" else [0, 0, 0])
    assert [r.new_connection for r in rounds] == (
        [True] * 3 if connection == "new" else [True, False, False]
    )


@pytest.mark.parametrize("codec", ["webp", "jpeg"])
async def test_compressed_screenshots_are_timed(server: ServerProcess, codec: str) -> None:
    rounds = await run_agent(
        config(server, "h2", agent_rounds=2, connection="reused", screenshot=codec)
    )
    assert [(r.error, r.sha256_ok) for r in rounds] == [(None, True)] * 2
    assert all(0 < r.upload_bytes < RAW_SCREEN_BYTES / 4 for r in rounds)
    assert all(r.encode_s > 0 for r in rounds)
    # the round number changes the screen, so the bytes differ
    assert rounds[0].upload_bytes != rounds[1].upload_bytes


async def test_rounds_written(server: ServerProcess, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tbcore.records import AgentRound, read_jsonl

    path = tmp_path / "rounds.jsonl"
    await run_agent(
        config(
            server, "h3", agent_rounds=2, connection="0rtt", warmup_requests=1, records_path=path
        )
    )
    rounds = read_jsonl(path, AgentRound)
    assert [(r.round, r.warmup) for r in rounds] == [(0, True), (1, False), (2, False)]
    assert all(r.error is None for r in rounds)


async def test_a_0rtt_replay_of_an_operation_never_executes_twice(server: ServerProcess) -> None:
    """The same round sent again as QUIC 0-RTT early data (what a replayed request is to the
    server): the stored action comes back, the model does not run a second time."""
    import hashlib

    from clients.api import _Run
    from clients.workload import RequestSpec

    run = _Run(config(server, "h3", connection="0rtt"))
    body = b"screenshot" * 1000
    run.spec = RequestSpec(
        "agent",
        "POST",
        "/agent?op=replay-test-a0-r0&round=0",
        body=body,
        expect_upload_sha256=hashlib.sha256(body).hexdigest(),
    )
    answers = []
    for early in (False, True, True):
        conn = await run.connect(early=early and run.ticket is not None)
        record = run.new_record(0)
        collector = await conn.request(run.spec, record, 20.0)
        if conn.protocol.tickets:
            run.ticket = conn.protocol.tickets[-1]
        else:
            run.ticket = await conn.wait_ticket(2.0)
        answers.append((collector.headers.get("x-agent-executed"), collector.body, record))
        await conn.close()
    assert [a[0] for a in answers] == ["1", "0", "0"]
    assert answers[1][1] == answers[0][1] == answers[2][1]
    assert answers[2][2].sha256_ok
    assert conn.protocol.early_data_accepted  # the last one did go as early data


@pytest.mark.parametrize("protocol", ["h2", "h3"])
@pytest.mark.parametrize("recovery", ["committed", "restart"])
async def test_a_connection_break_loses_the_executed_round_and_reconnects(
    server: ServerProcess, protocol: str, recovery: str
) -> None:
    """outage_mode break after one round: round 1 is executed and its connection reset (no
    reply); the client learns it from the reset (long before its 20 s timeout), waits the
    outage, and goes on over a new connection: committed gets round 1 from the server's
    store, restart does round 0 and round 1 again as new operations."""
    rounds = await run_agent(
        config(
            server, protocol, agent_rounds=3, connection="reused", outage_after_round=1,
            outage_s=0.3, recovery=recovery,
        )
    )  # fmt: skip
    lost = [r for r in rounds if r.error is not None]
    assert len(lost) == 1 and lost[0].round == 1 and lost[0].broken
    assert lost[0].detected_s - lost[0].start_s < 5.0  # the reset, not the timeout
    assert lost[0].resumed_s - lost[0].detected_s == pytest.approx(0.3, abs=0.05)
    after = rounds[rounds.index(lost[0]) + 1]
    assert after.new_connection and after.reconnected_s is not None
    assert after.start_s >= lost[0].resumed_s
    if recovery == "committed":
        assert [r.round for r in rounds] == [0, 1, 1, 2]
        assert after.op_id == lost[0].op_id and after.executed is False
    else:
        assert [r.round for r in rounds] == [0, 1, 0, 1, 2]
        assert after.op_id != rounds[0].op_id and after.executed is True
    assert all(r.error is None and r.sha256_ok for r in rounds if r is not lost[0])
    assert sum(1 for r in rounds if r.broken) == 1  # one break per task


@pytest.mark.parametrize("protocol", ["h2", "h3"])
async def test_judged_attempts_are_redone_until_each_task_is_done(protocol: str) -> None:
    """Six one-round tasks whose attempts the model fails half the time: every task ends
    with an attempt judged done, each failed one was followed by a new attempt of the same
    task, and only an attempt's last round carries a verdict."""
    with ServerProcess(["--agent-model", "1ms", "--task-success", "0.5"]) as judged:
        rounds = await run_agent(
            config(judged, protocol, agent_rounds=1, agent_tasks=6, task_success=0.5,
                   connection="reused", warmup_requests=1)
        )  # fmt: skip
    measured = [r for r in rounds if not r.warmup]
    assert all(r.error is None for r in rounds)
    assert [r.task_outcome for r in rounds if r.warmup] == [None]
    assert all(r.task_outcome in ("done", "failed") for r in measured)
    done = [r.task for r in measured if r.task_outcome == "done"]
    assert done == list(range(6))
    for a, b in itertools.pairwise(measured):
        if a.task_outcome == "failed":
            assert b.task == a.task and b.attempt > a.attempt and b.op_id != a.op_id
    assert len({r.attempt for r in measured}) == len(measured)


async def test_an_attempt_without_the_models_verdict_is_not_acknowledged(
    server: ServerProcess,
) -> None:
    """The client judges attempts (task_success) but the server was started without it: no
    round that ends an attempt is acknowledged, and the task gives up as unfinished."""
    from clients.agent import MAX_LOSSES, main_exit

    rounds = await run_agent(
        config(server, "h2", agent_rounds=1, agent_tasks=2, task_success=0.5,
               connection="reused")
    )  # fmt: skip
    assert len(rounds) == MAX_LOSSES + 1
    assert all("no task verdict" in (r.error or "") and r.end_s is None for r in rounds)
    assert main_exit(rounds, 2) == 1
