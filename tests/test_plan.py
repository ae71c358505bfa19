"""The planner: alternation, counterbalancing, seeded shuffles, warm-up, resume."""

from __future__ import annotations

import pytest

from harness.plan.planner import (
    DEFAULT_ATTEMPTS,
    Outcome,
    next_attempt,
    plan_runs,
    planned_id,
    remaining,
)
from tbcore.errors import SpecError


def _levels(plan):
    return [run.level for run in plan]


def test_alternation_without_counterbalance_is_a_b_a_b() -> None:
    plan = plan_runs(["a", "b"], 3, counterbalance=False)
    assert _levels(plan) == ["a", "b", "a", "b", "a", "b"]
    assert [run.rep for run in plan] == [0, 0, 1, 1, 2, 2]
    assert [run.seq for run in plan] == list(range(6))


def test_counterbalance_reverses_every_other_block() -> None:
    plan = plan_runs(["a", "b", "c"], 2)
    assert _levels(plan) == ["a", "b", "c", "c", "b", "a"]
    assert [run.position for run in plan] == [0, 1, 2, 0, 1, 2]


def test_shuffle_is_seeded_and_keeps_one_run_per_level_per_block() -> None:
    one = plan_runs(["a", "b", "c", "d"], 6, order="shuffle", counterbalance=False, seed=3)
    two = plan_runs(["a", "b", "c", "d"], 6, order="shuffle", counterbalance=False, seed=3)
    other = plan_runs(["a", "b", "c", "d"], 6, order="shuffle", counterbalance=False, seed=4)
    assert one == two
    assert _levels(one) != _levels(other)
    for block in range(6):
        assert sorted(r.level for r in one if r.block == block) == ["a", "b", "c", "d"]
    assert len({tuple(_levels(one)[i : i + 4]) for i in range(0, 24, 4)}) > 1


def test_warmup_blocks_come_first_and_are_flagged() -> None:
    plan = plan_runs(["a", "b"], 2, warmup_runs=1)
    assert [r.warmup for r in plan] == [True, True, False, False, False, False]
    assert plan[0].rep == -1
    assert plan[0].run_id.endswith("-w1")
    assert plan[2].run_id == "0002-a-r0" or plan[2].run_id.endswith("-r0")


def test_run_ids_are_unique_and_levels_of_a_block_share_the_link_seed() -> None:
    plan = plan_runs(["a", "b"], 5, seed=9)
    assert len({r.run_id for r in plan}) == len(plan)
    for block in range(5):
        seeds = {r.link_seed for r in plan if r.block == block}
        assert len(seeds) == 1
    assert len({r.link_seed for r in plan}) == 5


def test_resume_skips_exactly_the_finished_runs() -> None:
    plan = plan_runs(["a", "b"], 3)
    done = {plan[0].run_id, plan[1].run_id, plan[3].run_id}
    left = remaining(plan, done)
    assert [r.run_id for r in left] == [plan[2].run_id, plan[4].run_id, plan[5].run_id]
    with pytest.raises(SpecError) as info:
        remaining(plan, {"9999-z-r0"})
    assert info.value.field == "resume"


def test_an_invalid_run_is_made_again_until_valid_or_out_of_attempts() -> None:
    run = plan_runs(["a", "b"], 2, warmup_runs=1)[2]  # the first measured run of a
    assert next_attempt(run, []) == run
    bad = Outcome(run.run_id, 1, valid=False)
    second = next_attempt(run, [bad])
    assert second is not None
    assert (second.run_id, second.attempt) == (f"{run.run_id}-a2", 2)
    assert (second.level, second.block, second.position, second.link_seed) == (
        run.level,
        run.block,
        run.position,
        run.link_seed,
    )
    assert planned_id(second.run_id) == run.run_id == second.planned_id
    third = next_attempt(run, [bad, Outcome(second.run_id, 2, valid=False)])
    assert third is not None and third.run_id.endswith("-a3")
    outcomes = [bad, Outcome(second.run_id, 2, False), Outcome(third.run_id, 3, False)]
    assert DEFAULT_ATTEMPTS == 3 and next_attempt(run, outcomes) is None
    assert next_attempt(run, [bad, Outcome(second.run_id, 2, valid=True)]) is None
    assert next_attempt(run, [bad], attempts=1) is None
    warmup = plan_runs(["a"], 1, warmup_runs=1)[0]
    assert next_attempt(warmup, [Outcome(warmup.run_id, 1, valid=False)]) is None


def test_resume_counts_attempts_and_forgives_failures_outside_the_run() -> None:
    plan = plan_runs(["a", "b"], 1)
    a, b = plan
    rows = [
        {"run_id": a.run_id, "attempt": 1, "valid": False, "invalid_reason": "disturbance: x"},
        {"run_id": f"{a.run_id}-a2", "attempt": 2, "valid": False, "invalid_reason": "link: y"},
        {"run_id": b.run_id, "valid": False, "invalid_reason": "error: harness: link gone"},
    ]
    outcomes = {r["run_id"]: Outcome.of_row(r) for r in rows}
    assert outcomes[b.run_id].outside and not outcomes[a.run_id].outside
    left = remaining(plan, outcomes, attempts=2)
    # a used its two attempts; b failed outside the run: made again, as attempt 2
    assert [(r.run_id, r.attempt) for r in left] == [(f"{b.run_id}-a2", 2)]
    assert [r.run_id for r in remaining(plan, outcomes, attempts=3)] == [
        f"{a.run_id}-a3",
        f"{b.run_id}-a2",
    ]
    with pytest.raises(SpecError):
        remaining(plan, {"9999-z-r0-a2": Outcome("9999-z-r0-a2", 2, False)})


def test_bad_input_is_named() -> None:
    with pytest.raises(SpecError) as info:
        plan_runs(["a", "b"], 0)
    assert info.value.field == "repetitions"
    with pytest.raises(SpecError) as info:
        plan_runs(["a", "a"], 1)
    assert info.value.field == "levels"
    with pytest.raises(SpecError) as info:
        plan_runs(["a", "b"], 1, order="random")
    assert info.value.field == "order"
