"""Loss models of one direction: Bernoulli and Gilbert-Elliott, drawn from a seeded generator.

Each model answers one question per packet, ``lost() -> bool``, and advances its state by
exactly one step per call, so the n-th packet offered to a direction meets the n-th draw:
two runs (or two arms of an experiment) with equal seeds see the same pattern whatever
their traffic does in between.

The generator is :class:`random.Random` seeded with the string ``"<direction>:<seed>"``
(string seeds hash with SHA-512 in CPython, stable across versions and processes), so one
seed gives the two directions different but repeatable patterns.
"""

from __future__ import annotations

import random

from netem.linkspec import DirectionSpec, GilbertElliott
from tbcore.errors import SpecError

DIRECTIONS = ("up", "down")


def loss_rng(direction: str, seed: int) -> random.Random:
    """The loss generator of one direction."""
    if direction not in DIRECTIONS:
        raise SpecError("direction", f"must be 'up' or 'down', got {direction!r}")
    return random.Random(f"{direction}:{seed}")


def jitter_rng(direction: str, seed: int) -> random.Random:
    """The jitter generator: separate from the loss one, so jitter never shifts the loss pattern."""
    if direction not in DIRECTIONS:
        raise SpecError("direction", f"must be 'up' or 'down', got {direction!r}")
    return random.Random(f"{direction}:{seed}:jitter")


class NoLoss:
    """Loses nothing and draws nothing."""

    def lost(self) -> bool:
        return False


class Bernoulli:
    """Each packet is lost independently with probability ``p``."""

    def __init__(self, p: float, rng: random.Random) -> None:
        if not 0.0 <= p < 1.0:
            raise SpecError("loss", f"must lie in [0, 1), got {p!r}")
        self.p = p
        self._random = rng.random

    def lost(self) -> bool:
        return self._random() < self.p


class GilbertElliottLoss:
    """Two-state Markov loss with netem's semantics (``loss gemodel p r 1-h 1-k``).

    Per packet: first the loss draw in the current state (``loss_bad`` in bad, ``loss_good``
    in good), then the transition (good -> bad with ``p``, bad -> good with ``r``), as
    netem's ``loss_gilb_ell`` does. The chain starts in the good state.
    """

    def __init__(self, model: GilbertElliott, rng: random.Random) -> None:
        self.model = model
        self.bad = False
        self._random = rng.random

    def lost(self) -> bool:
        m = self.model
        rnd = self._random
        if self.bad:
            lost = rnd() < m.loss_bad
            if rnd() < m.r:
                self.bad = False
        else:
            lost = rnd() < m.loss_good
            if rnd() < m.p:
                self.bad = True
        return lost


LossModel = NoLoss | Bernoulli | GilbertElliottLoss


def make_loss(direction: str, spec: DirectionSpec) -> LossModel:
    """The loss model a direction's spec asks for, seeded from ``spec.seed``."""
    if spec.gemodel is not None:
        return GilbertElliottLoss(spec.gemodel, loss_rng(direction, spec.seed))
    if spec.loss > 0.0:
        return Bernoulli(spec.loss, loss_rng(direction, spec.seed))
    return NoLoss()
