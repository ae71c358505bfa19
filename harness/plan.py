"""The order of runs: sans-I/O, deterministic from a seed.

Runs come in blocks of one run per level. ``alternate`` keeps the levels' order in every
block (A B A B ...); with ``counterbalance`` every other block is reversed (A B, B A, ...)
so that a first-versus-second position effect cancels between arms (shared DESIGN.md,
"Order of runs"). ``shuffle`` draws a random order for each block from a seeded generator,
so that drift over time cannot line up with one level (Flent's batch mode does the same).
Warm-up blocks come first and are flagged: they are run and kept, never analysed.

A run's identity is its ``run_id``; the plan is a pure function of the spec, so a resumed
campaign recomputes the same plan and skips the run ids that already finished.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass

from harness.spec import ORDERS, ExperimentSpec
from tbcore.errors import SpecError


@dataclass(frozen=True)
class PlannedRun:
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

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


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


def remaining(plan: Sequence[PlannedRun], finished: Collection[str]) -> list[PlannedRun]:
    """The runs still to make when ``finished`` run ids are done (for ``--resume``)."""
    known = {run.run_id for run in plan}
    stray = set(finished) - known
    if stray:
        raise SpecError(
            "resume", f"run {sorted(stray)[0]!r} is not in this plan (another experiment?)"
        )
    return [run for run in plan if run.run_id not in finished]
