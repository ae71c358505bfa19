"""tbcore.agent: deterministic screenshots, real codecs, operation ids executed once, and
the round plan under committed and restart recovery."""

from __future__ import annotations

import hashlib
import json

import pytest

from tbcore import agent


def test_screens_are_deterministic_and_change_with_the_round() -> None:
    a = agent.render_screen(3).tobytes()
    assert len(a) == agent.RAW_SCREEN_BYTES == 798_720
    assert hashlib.sha256(a).digest() == hashlib.sha256(agent.render_screen(3).tobytes()).digest()
    assert a != agent.render_screen(4).tobytes()


def test_the_photo_screen_compresses_to_the_chapters_size() -> None:
    """screen = "photo": the same raw size, other pixels, deterministic, and JPEG at quality
    96 within 10 % of the chapter's 0.2 MB compressed screenshot (the desktop: far below)."""
    from tbcore import settings

    assert settings.SCREENS == agent.SCREENS
    photo = agent.render_screen(5, screen="photo")
    assert len(photo.tobytes()) == agent.RAW_SCREEN_BYTES
    assert photo.tobytes() == agent.render_screen(5, screen="photo").tobytes()
    assert photo.tobytes() != agent.render_screen(5).tobytes()
    assert photo.tobytes() != agent.render_screen(6, screen="photo").tobytes()
    size = len(agent.encode_screen(photo, "jpeg", 96)[0])
    assert 180_000 <= size <= 220_000
    assert len(agent.encode_screen(agent.render_screen(5), "jpeg", 96)[0]) < 150_000
    with pytest.raises(ValueError, match="screen"):
        agent.render_screen(5, screen="tv")


@pytest.mark.parametrize("codec", ["webp", "jpeg"])
def test_codecs_compress_and_are_timed(codec: str) -> None:
    img = agent.render_screen(1)
    data, encode_s = agent.encode_screen(img, codec, 80)
    assert 0 < len(data) < agent.RAW_SCREEN_BYTES / 4
    assert encode_s > 0
    assert data[:4] == (b"RIFF" if codec == "webp" else b"\xff\xd8\xff\xe0"[:4])
    raw, zero = agent.encode_screen(img, "raw", 80)
    assert len(raw) == agent.RAW_SCREEN_BYTES and zero == 0.0


def test_an_operation_executes_once_and_a_retry_gets_the_stored_result() -> None:
    store = agent.OpStore()
    body, wait, executed = store.execute("t-a0-r0", 0, "ab" * 32, 2.0, now=10.0)
    assert executed and wait == 2.0
    # a retry (or a 0-RTT replay) of the same id while the decision is still running waits
    # for it, then gets the same action; nothing executes a second time
    again, wait2, executed2 = store.execute("t-a0-r0", 0, "ab" * 32, 2.0, now=11.5)
    assert (again, executed2) == (body, False) and wait2 == pytest.approx(0.5)
    late, wait3, executed3 = store.execute("t-a0-r0", 0, "ab" * 32, 2.0, now=20.0)
    assert (late, wait3, executed3) == (body, 0.0, False)
    assert store.executions() == 1
    _, _, other = store.execute("t-a0-r1", 1, "cd" * 32, 2.0, now=20.0)
    assert other and store.executions() == 2


def test_committed_recovery_redoes_the_lost_round_with_its_id() -> None:
    plan = agent.RoundPlan(5, "committed", token="t")
    for _ in range(3):
        plan.next_round()
        plan.acknowledged()
    index, op, redone = plan.next_round()
    assert (index, redone) == (3, False)
    plan.lost()
    assert plan.next_round() == (3, op, True)
    plan.acknowledged()
    assert plan.next_round()[0] == 4
    plan.acknowledged()
    assert plan.finished


def test_restart_recovery_redoes_every_round_with_new_ids() -> None:
    plan = agent.RoundPlan(4, "restart", token="t")
    ids = []
    for _ in range(2):
        ids.append(plan.next_round()[1])
        plan.acknowledged()
    plan.next_round()
    plan.lost()
    again = [plan.next_round()]
    plan.acknowledged()
    assert again[0][0] == 0 and again[0][2] is True and again[0][1] not in ids
    redone = []
    while not plan.finished:
        index, _, flag = plan.next_round()
        redone.append((index, flag))
        plan.acknowledged()
    assert redone == [(1, True), (2, True), (3, False)]


def test_restart_keeps_the_warm_up_rounds() -> None:
    """One warm-up round, then the task's: a restart after round 2 goes back to round 1 (the
    task's first), not to the warm-up round."""
    plan = agent.RoundPlan(4, "restart", token="t", kept=1)
    for _ in range(2):
        plan.next_round()
        plan.acknowledged()
    plan.next_round()  # round 2, lost
    plan.lost()
    assert plan.next_round()[0] == 1


def test_bad_recovery_is_refused() -> None:
    with pytest.raises(ValueError):
        agent.RoundPlan(3, "later")


def test_a_task_verdict_is_the_operations_draw_at_its_probability() -> None:
    """The model's verdict is a function of the operation id (a retry of the same round gets
    the same verdict), independent between ids, done with the given probability."""
    assert agent.task_outcome("t-a3-r7", 0.5) == agent.task_outcome("t-a3-r7", 0.5)
    assert agent.task_outcome("t-a3-r7", 1.0) == agent.TASK_DONE
    draws = [agent.task_outcome(agent.op_id("t", a, 0), 0.8) for a in range(4000)]
    share = draws.count(agent.TASK_DONE) / len(draws)
    assert 0.77 < share < 0.83  # 4,000 draws: +-0.013 at 95 %


def test_a_judged_round_carries_the_verdict_and_a_retry_keeps_it() -> None:
    store = agent.OpStore()
    body, _, executed = store.execute("t-a0-r0", 0, "ab" * 32, 0.0, now=0.0, task_success=0.5)
    verdict = json.loads(body)["task"]
    assert executed and verdict in agent.TASK_OUTCOMES
    again, _, executed = store.execute("t-a0-r0", 0, "ab" * 32, 0.0, now=1.0, task_success=0.5)
    assert not executed and json.loads(again)["task"] == verdict
    plain, _, _ = store.execute("t-a0-r1", 1, "ab" * 32, 0.0, now=2.0)
    assert "task" not in json.loads(plain)


def test_a_failed_attempt_redoes_its_task_whole_and_a_done_one_moves_on() -> None:
    """One warm-up round, then two tasks of two rounds: the first attempt of task 0 fails
    and is done again with new ids; the warm-up round is never redone."""
    plan = agent.RoundPlan(5, "committed", token="t", kept=1, per_task=2)
    plan.next_round()
    plan.acknowledged()  # the warm-up round
    first = []
    for _ in range(2):
        index, op, _ = plan.next_round()
        first.append(op)
        plan.acknowledged()
    assert plan.ends_attempt(index) and not plan.ends_attempt(index - 1)
    plan.task_failed()
    again = []
    for _ in range(2):
        index, op, redone = plan.next_round()
        again.append((index, redone))
        assert op not in first
        plan.acknowledged()
    assert again == [(1, True), (2, True)] and plan.task == 0
    plan.task_done()
    assert plan.task == 1 and plan.next_round()[0] == 3
    plan.acknowledged()
    plan.next_round()
    plan.acknowledged()
    plan.task_done()
    assert plan.finished


def test_tasks_that_do_not_divide_the_rounds_are_refused() -> None:
    with pytest.raises(ValueError, match="per_task"):
        agent.RoundPlan(5, "committed", kept=1, per_task=3)


def test_expected_rounds_are_the_tasks_rounds_over_p() -> None:
    assert agent.expected_rounds(1, 400, 0.8) == pytest.approx(500.0)
    assert agent.expected_rounds(30) == 30
