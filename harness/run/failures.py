"""A run's drawn failures (``path_failures``, tbcore.failures): the edges drawn down for
it are down from before its client starts until it has ended (an outage "until told" on
each, netem.events), and ``failures.json`` says which, from which seed."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.store.files import FAILURES_FILE
from harness.store.resultdir import atomic_write_json
from tbcore import failures
from tbcore.kinds import OUTAGE_UNTIL_TOLD_S
from tbcore.settings import Settings


@contextlib.contextmanager
def failed_edges(link: Any, settings: Settings, seed: int, run_dir: Path) -> Iterator[tuple]:
    """The edges ``settings.path_failures`` draws down for the run of ``seed``, down while
    the run runs (none without ``path_failures``); yields them."""
    if settings.path_failures is None:
        yield ()
        return
    chances = failures.parse_failures("path_failures", settings.path_failures)
    down = failures.draw_down(chances, seed)
    atomic_write_json(
        run_dir / FAILURES_FILE, {"path_failures": chances, "seed": seed, "down": list(down)}
    )
    taken: list[str] = []
    try:
        for edge in down:
            link.outage(OUTAGE_UNTIL_TOLD_S, edge=edge)
            taken.append(edge)
        yield down
    finally:
        for edge in taken:  # the next run gets its path back
            link.end_events(edge=edge)
