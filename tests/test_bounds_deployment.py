"""Where to run the rounds (docs/models.md §18): a site's task, its energy, the uplink that
meets a deadline or crosses another site, a broken connection's cost, retries, Amdahl."""

from __future__ import annotations

import pytest

from harness.bounds import deployment as dep
from tbcore.errors import SpecError

CLOUD = dep.Site(prep_s=0.14, model_s=0.073, rtt_s=0.2, up_bps=6.4e6, power_w=700)


def test_a_sites_task_is_its_preparation_and_serial_rounds() -> None:
    assert CLOUD.round_s(0.3, 800_000) == pytest.approx(1.573)
    assert CLOUD.task_s(20, 0.3, 800_000) == pytest.approx(31.6)
    phone = dep.Site(prep_s=0.0, model_s=2.9, rtt_s=0.0, up_bps=None)
    assert phone.task_s(20, 0.3, 800_000) == pytest.approx(64.0)
    assert CLOUD.energy_j(20) == pytest.approx(700 * (0.14 + 20 * 0.073))
    with pytest.raises(SpecError):
        phone.energy_j(20)


def test_the_deadline_rate_exists_only_above_the_fixed_time() -> None:
    fixed = dep.fixed_s(CLOUD, 20, 0.3)
    assert fixed == pytest.approx(11.6)
    assert dep.deadline_rate_bps(fixed, 128e6, 45.0) == pytest.approx(128e6 / 33.4)
    assert dep.deadline_rate_bps(fixed, 128e6, 11.0) is None


def test_the_crossover_and_when_there_is_none() -> None:
    assert dep.crossover_rate_bps(16.04, 14.29, 128e6) == pytest.approx(73.1e6, rel=1e-3)
    assert dep.crossover_rate_bps(11.0, 11.6, 128e6) is None


def test_redo_retries_and_amdahl() -> None:
    assert dep.redo_cost_s(1.0, 1.57, 1) == pytest.approx(2.57)
    assert dep.redo_cost_s(1.0, 1.57, 10) == pytest.approx(16.7)
    assert dep.expected_attempts_cost(1.0, 0.8) == pytest.approx(1.25)
    assert dep.accelerated_s(8.0, 2.0, 10.0) == pytest.approx(2.8)
    assert dep.startup_count(36, 2, 2) == 144
    assert dep.decode_round_s(1_792e9) == pytest.approx(0.1374, abs=1e-4)


@pytest.mark.parametrize(
    "call",
    [
        lambda: dep.expected_attempts_cost(1.0, 0.0),
        lambda: dep.accelerated_s(1.0, 1.0, 0.0),
        lambda: dep.redo_cost_s(-1.0, 1.0, 1),
        lambda: CLOUD.task_s(-1, 0.3, 1),
        lambda: dep.decode_round_s(0.0),
    ],
)
def test_impossible_input_is_refused(call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SpecError):
        call()
