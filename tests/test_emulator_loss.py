"""Loss models: seeded, one draw per packet, the configured rates."""

from __future__ import annotations

import pytest

from netem.emulator.loss import (
    Bernoulli,
    GilbertElliottLoss,
    NoLoss,
    jitter_rng,
    loss_rng,
    make_loss,
)
from netem.linkspec import DirectionSpec, GilbertElliott
from tbcore.errors import SpecError


def test_make_loss_picks_the_model() -> None:
    assert isinstance(make_loss("up", DirectionSpec()), NoLoss)
    assert isinstance(make_loss("up", DirectionSpec(loss=0.1)), Bernoulli)
    ge = DirectionSpec(gemodel=GilbertElliott(p=0.1, r=0.5))
    assert isinstance(make_loss("up", ge), GilbertElliottLoss)


def test_generators_are_seeded_per_direction_and_purpose() -> None:
    assert loss_rng("up", 1).random() == loss_rng("up", 1).random()
    assert loss_rng("up", 1).random() != loss_rng("down", 1).random()
    assert loss_rng("up", 1).random() != jitter_rng("up", 1).random()
    with pytest.raises(SpecError, match="direction"):
        loss_rng("sideways", 1)


def test_bernoulli_rate() -> None:
    model = Bernoulli(0.14, loss_rng("down", 3))
    n = 50_000
    lost = sum(model.lost() for _ in range(n))
    assert abs(lost / n - 0.14) < 0.006  # > 4 sigma


def test_bernoulli_rejects_bad_probability() -> None:
    with pytest.raises(SpecError, match="loss"):
        Bernoulli(1.0, loss_rng("up", 1))


def test_gilbert_elliott_stationary_loss_and_partial_states() -> None:
    model = GilbertElliott(p=0.05, r=0.2, loss_bad=0.5, loss_good=0.01)
    chain = GilbertElliottLoss(model, loss_rng("up", 11))
    n = 200_000
    lost = sum(chain.lost() for _ in range(n))
    assert abs(lost / n - model.mean_loss) < 0.01


def test_gilbert_elliott_starts_good() -> None:
    chain = GilbertElliottLoss(GilbertElliott(p=0.0, r=1.0), loss_rng("up", 1))
    assert not any(chain.lost() for _ in range(1000))
