"""The planner: alternation, counterbalancing, seeded shuffles, warm-up, resume."""

from __future__ import annotations

import pytest

from harness.plan import plan_runs, remaining
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
