"""Features instead of the input, and moving or keeping state (docs/models.md §17)."""

from __future__ import annotations

import pytest

from harness.bounds import features as feat
from tbcore.errors import SpecError


def test_features_are_elements_times_their_width() -> None:
    assert feat.tensor_bytes(400 * 4 * 2560) == 8_192_000
    assert feat.transfer_s(8_192_000, 6.4e6) == pytest.approx(10.24)
    assert feat.compute_s(1.31e12, 165.2e12) == pytest.approx(7.93e-3, rel=1e-3)


def test_a_migration_pays_back_after_its_break_even_rounds() -> None:
    cost = feat.migration_s(64 * 2**20, 80e6, 1.0)
    assert cost == pytest.approx(7.71, abs=0.01)
    assert feat.break_even_rounds(cost, 0.4) == 20
    assert feat.net_saving_s(0.4, 19, cost) < 0 < feat.net_saving_s(0.4, 20, cost)
    assert feat.break_even_rounds(8.0, 0.4) == 20  # exactly even is even


def test_holding_state_breaks_even_when_its_share_equals_the_compute_saved() -> None:
    assert feat.holding_break_even_s(0.239, 0.465e9, 80e9) == pytest.approx(41.1, abs=0.1)


@pytest.mark.parametrize(
    "call",
    [
        lambda: feat.transfer_s(1, 0),
        lambda: feat.compute_s(1, 0),
        lambda: feat.break_even_rounds(1, 0),
        lambda: feat.holding_break_even_s(1, 0, 1),
        lambda: feat.tensor_bytes(-1),
    ],
)
def test_impossible_input_is_refused(call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SpecError):
        call()
