"""The order of runs: sans-I/O, deterministic from a seed.

Runs come in blocks of one run per level. ``alternate`` keeps the levels' order in every
block (A B A B ...); with ``counterbalance`` every other block is reversed (A B, B A, ...)
so that a first-versus-second position effect cancels between arms (docs/design.md,
"Order of runs"). ``shuffle`` draws a random order for each block from a seeded generator,
so that drift over time cannot line up with one level (Flent's batch mode does the same).
Warm-up blocks come first and are flagged: they are run and kept, never analysed.

A run's identity is its ``run_id``; the plan is a pure function of the spec, so a resumed
campaign recomputes the same plan and skips the run ids that already finished.

A measured run that ends invalid is made again, with the same settings, block, position and
link seed, as a new attempt (``0007-h2-new-r3-a2``), until it is valid or has had
:data:`DEFAULT_ATTEMPTS` attempts: every level then ends with its planned number of valid
runs unless the host stays too disturbed, and every attempt is kept with its reason.
"""

from __future__ import annotations

import random
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from harness.spec.experiment import ORDERS, ExperimentSpec
from tbcore.errors import SpecError
from tbcore.plain import AsDict


@dataclass(frozen=True)
class PlannedRun(AsDict):
    run_id: str
    """Stable name of the run: ``0007-h2-new-r3`` (sequence, level, repetition)."""
    seq: int
    """Position in the whole plan, from 0."""
    level: str
    rep: int
    """Repetition number within its level, from 0; warm-up runs count from -warmup_runs."""
    block: int
    """Index of the block (one run per level), warm-up blocks included, from 0."""
    position: int
    """Position of this run inside its block, from 0 (for the order effect)."""
    warmup: bool
    link_seed: int
    """Seed of the link's loss generators: equal for the levels of one block, so the arms of
    a block see the same loss pattern."""
    attempt: int = 1
    """1 for the planned run; 2, 3, ... for the re-runs of an invalid one."""

    @property
    def planned_id(self) -> str:
        """The run id of the planned run this attempt repeats."""
        return planned_id(self.run_id)

    def next_attempt(self) -> PlannedRun:
        """The same run again (settings, block, position, seed), as the next attempt."""
        attempt = self.attempt + 1
        return replace(self, run_id=f"{self.planned_id}-a{attempt}", attempt=attempt)


def block_orders(
    levels: Sequence[str], blocks: int, order: str, counterbalance: bool, seed: int
) -> list[list[str]]:
    """The order of the levels in each block."""
    if order not in ORDERS:
        raise SpecError("order", f"must be one of {', '.join(ORDERS)}, got {order!r}")
    if len(set(levels)) != len(levels) or not levels:
        raise SpecError("levels", "need distinct level names")
    rng = random.Random(seed)
    out: list[list[str]] = []
    for block in range(blocks):
        if order == "shuffle":
            current = list(levels)
            rng.shuffle(current)
            if counterbalance and block % 2 == 1:
                current = list(reversed(out[-1]))
        else:
            current = list(levels)
            if counterbalance and block % 2 == 1:
                current.reverse()
        out.append(current)
    return out


def plan_runs(
    levels: Sequence[str],
    repetitions: int,
    *,
    order: str = "alternate",
    counterbalance: bool = True,
    seed: int = 1,
    warmup_runs: int = 0,
) -> list[PlannedRun]:
    """Every run of an experiment in the order it is made."""
    if repetitions < 1:
        raise SpecError("repetitions", f"must be >= 1, got {repetitions}")
    if warmup_runs < 0:
        raise SpecError("warmup_runs", f"must be >= 0, got {warmup_runs}")
    blocks = warmup_runs + repetitions
    orders = block_orders(levels, blocks, order, counterbalance, seed)
    width = len(str(blocks * len(levels)))
    runs: list[PlannedRun] = []
    for block, names in enumerate(orders):
        rep = block - warmup_runs
        for position, level in enumerate(names):
            seq = len(runs)
            tag = f"w{-rep}" if rep < 0 else f"r{rep}"
            runs.append(
                PlannedRun(
                    run_id=f"{seq:0{max(width, 4)}d}-{level}-{tag}",
                    seq=seq,
                    level=level,
                    rep=rep,
                    block=block,
                    position=position,
                    warmup=rep < 0,
                    link_seed=seed * 1_000_003 + block,
                )
            )
    return runs


def plan_for(spec: ExperimentSpec) -> list[PlannedRun]:
    """The plan of an experiment."""
    return plan_runs(
        spec.level_names,
        spec.repetitions,
        order=spec.order,
        counterbalance=spec.counterbalance,
        seed=spec.seed,
        warmup_runs=spec.warmup_runs,
    )


DEFAULT_ATTEMPTS = 3
"""Attempts per planned run (the first and two re-runs). On a busy host about one run in
two was disturbed beyond its limit in the worst spells measured (issue 10), so three
attempts leave a planned run without a valid one about one time in eight in such a spell
and almost never otherwise; a host that stays busier than that should be reported, not
out-waited."""

_ATTEMPT_SUFFIX = re.compile(r"-a(\d+)$")

OUTSIDE_REASONS = ("harness:", "error: harness:")
"""An invalid reason starting with one of these is a failure of the harness, not of the run
(the link went down, collecting failed): ``--resume`` does not count such an attempt."""


def planned_id(run_id: str) -> str:
    """``0007-h2-new-r3-a2`` -> ``0007-h2-new-r3``."""
    return _ATTEMPT_SUFFIX.sub("", run_id)


@dataclass(frozen=True)
class Outcome:
    """How one finished attempt ended (from its row)."""

    run_id: str
    attempt: int
    valid: bool
    outside: bool = False
    """Invalid for a reason outside the run (:data:`OUTSIDE_REASONS`)."""

    @classmethod
    def of_row(cls, row: Mapping[str, object]) -> Outcome:
        reason = str(row.get("invalid_reason") or "")
        return cls(
            run_id=str(row["run_id"]),
            attempt=int(row.get("attempt") or 1),  # type: ignore[call-overload]
            valid=bool(row.get("valid")),
            outside=reason.startswith(OUTSIDE_REASONS),
        )


def next_attempt(
    run: PlannedRun,
    outcomes: Iterable[Outcome],
    attempts: int = DEFAULT_ATTEMPTS,
    *,
    count_outside: bool = True,
) -> PlannedRun | None:
    """The next attempt of planned ``run`` given the outcomes of its attempts so far, or
    None: not yet run (-> ``run`` itself), valid, a warm-up (never analysed, never re-run),
    or out of attempts. ``count_outside=False`` (a resumed directory) gives attempts that
    failed outside the run a new chance."""
    mine = [o for o in outcomes if planned_id(o.run_id) == run.run_id]
    if not mine:
        return run
    if any(o.valid for o in mine) or run.warmup:
        return None
    counted = [o for o in mine if count_outside or not o.outside]
    if len(counted) >= attempts:
        return None
    last = max(o.attempt for o in mine)
    return replace(run, attempt=last).next_attempt()


def remaining(
    plan: Sequence[PlannedRun],
    finished: Collection[str] | Mapping[str, Outcome],
    attempts: int = 1,
) -> list[PlannedRun]:
    """The runs still to make (for ``--resume``): planned runs not yet made and, with
    ``attempts`` > 1 and outcomes, the next attempt of invalid ones. ``finished``: run ids
    (then nothing is re-run) or their :class:`Outcome` by run id."""
    known = {run.run_id for run in plan}
    stray = {planned_id(r) for r in finished} - known
    if stray:
        raise SpecError(
            "resume", f"run {sorted(stray)[0]!r} is not in this plan (another experiment?)"
        )
    if not isinstance(finished, Mapping):
        return [run for run in plan if run.run_id not in finished]
    out = []
    for run in plan:
        nxt = next_attempt(run, finished.values(), attempts, count_outside=False)
        if nxt is not None:
            out.append(nxt)
    return out
