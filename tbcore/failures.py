"""Failures drawn per trial on a dual topology's edges, as an experiment writes them
(sans-I/O): ``path_failures = "link=10%,link_b=5%,exit_link=2%"``.

Each named edge is down for a whole run with its probability, drawn independently per run
from the run's seed (the same seed draws the same edges: a re-made run meets the same
failures). ``100%`` forces an edge down in every run, ``0%`` never. The chapter's §12.4.3
(docs/models.md section 12): a copy over each access path is lost when its path fails
(``p1``, ``p2``) and both are lost when the end point they share fails (``q``), so
duplication fails with probability ``q + (1 - q) p1 p2``. The harness takes a drawn edge
down before the client starts and brings it back after (netem.events outage); the
duplicating client counts a trial whose copies all failed as undelivered, not as an error.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from tbcore import units
from tbcore.errors import SpecError

EDGES = ("link", "link_b", "exit_link")
"""The edges of the dual topology a failure can take down, in the order they are drawn."""
SYNTAX = "edge=P[,edge=P...] with edge one of link, link_b, exit_link and P a percentage"
SEED_SALT = 0x7FA1
"""Mixed into the run's seed so that the failures' draws are not the loss generators'."""


def parse_failures(name: str, value: object) -> dict[str, float]:
    """The written form -> {edge: probability in [0, 1]}, in :data:`EDGES` order."""
    if not isinstance(value, str) or not value.strip():
        raise SpecError(name, f"must be {SYNTAX}, got {value!r}")
    found: dict[str, float] = {}
    for item in value.split(","):
        edge, sep, text = (part.strip() for part in item.partition("="))
        if not sep or edge not in EDGES:
            raise SpecError(name, f"{item.strip()!r}: must be {SYNTAX}")
        if edge in found:
            raise SpecError(name, f"{edge} is given twice")
        found[edge] = units.parse_probability(f"{name}.{edge}", text)
    return {edge: found[edge] for edge in EDGES if edge in found}


def draw_down(failures: Mapping[str, float], seed: int) -> tuple[str, ...]:
    """The edges down in the run of ``seed``: each with its probability, drawn in
    :data:`EDGES` order from one generator (a forced edge, 100 %, is always down)."""
    rng = random.Random((int(seed) << 16) ^ SEED_SALT)
    down = []
    for edge in EDGES:
        if edge not in failures:
            continue
        if rng.random() < failures[edge]:  # random() < 1: 100 % is always down
            down.append(edge)
    return tuple(down)
