"""``testbed check FILE``: what an experiment file will do, without running it.

Per level: the settings it sets, those in force that its protocol, workload or topology does
not apply (the runs' ``ignored_settings``) and why, the path (each edge's LinkSpec); then the
order of runs and an estimate of the wall time (each run's requests at their lower bound, the
run's own time limit where the workload has no bound, plus what setting up a run costs).
A bad file is one line and exit 2, as ``testbed run`` says it.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from harness.plan.planner import plan_for
from harness.run.runner import run_seconds
from harness.spec import experiment as specmod
from tbcore.errors import SpecError
from tbcore.settings import KNOBS

RUN_SETUP_S = 3.0
"""What a run costs besides its requests: namespaces, the link, both processes started and
stopped, the capture and the row (measured: the connection file's quick form, 20 runs of
about 1.4 s each, took 88 s)."""


@dataclass(frozen=True)
class LevelPlan:
    name: str
    baseline: str
    overrides: dict[str, object]
    ignored: list[str]
    """``key: why`` for each setting in force that the level does not apply."""
    edges: list[str]
    run_s: float | None
    """Estimated seconds of one run's requests (None: no bound and no limit)."""


def level_plan(level: specmod.Level) -> LevelPlan:
    settings = level.settings
    ignored = []
    for key in settings.ignored():
        item = KNOBS[key]
        ignored.append(f"{key}: {item.scope.refusal(settings)}")
    edges = [f"{edge.name}: {edge.spec}" for edge in level.topology.edges]
    return LevelPlan(level.name, level.baseline, dict(level.overrides), ignored, edges,
                     run_seconds(level))  # fmt: skip


def plan_lines(spec: specmod.ExperimentSpec) -> list[str]:
    """The plan as the command prints it."""
    lines = [
        f"{spec.name}: {spec.question}",
        f"factor {spec.factor} ({', '.join(spec.factor_settings)}); {len(spec.levels)} levels, "
        f"{spec.repetitions} repetitions, order {spec.order}"
        + (", counterbalanced" if spec.counterbalance else "")
        + (f", {spec.warmup_runs} warm-up runs" if spec.warmup_runs else ""),
    ]
    plans = {lv.name: level_plan(lv) for lv in spec.levels}
    for plan in plans.values():
        effect = spec.level(plan.name).expected_effect_s
        expected = "" if effect is None else f", expected effect {effect * 1e3:g} ms"
        lines.append(f"level {plan.name} (baseline {plan.baseline}{expected})")
        sets = ", ".join(f"{k} = {v!r}" for k, v in plan.overrides.items()) or "nothing"
        lines.append(f"  sets: {sets}")
        for why in plan.ignored or ["none"]:
            lines.append(f"  ignored: {why}")
        for edge in plan.edges:
            lines.append(f"  path {edge}")
        run = "unknown" if plan.run_s is None else f"{plan.run_s:.1f} s"
        lines.append(f"  one run: {run} of requests + {RUN_SETUP_S:g} s to set up")
    runs = plan_for(spec)
    lines.append("order: " + " ".join(run.run_id for run in runs))
    lines.append("estimate: " + estimate_text(*estimate(spec, plans)))
    return lines


def estimate(
    spec: specmod.ExperimentSpec, plans: dict[str, LevelPlan] | None = None
) -> tuple[int, float, int]:
    """(runs, seconds, runs of unknown length) the plan of ``spec`` will take, each run at
    its estimate plus :data:`RUN_SETUP_S`."""
    plans = plans or {lv.name: level_plan(lv) for lv in spec.levels}
    runs = plan_for(spec)
    total = sum((plans[run.level].run_s or 0.0) + RUN_SETUP_S for run in runs)
    unknown = sum(plans[run.level].run_s is None for run in runs)
    return len(runs), total, unknown


def estimate_text(runs: int, total_s: float, unknown: int) -> str:
    return f"{runs} runs, about {total_s / 60:.1f} min" + (
        f" ({unknown} runs of unknown length not counted)" if unknown else ""
    )


def file_form(args: argparse.Namespace) -> str:
    """The form of one file that ``--quick`` or ``--chapter`` asks for (``testbed run``,
    ``testbed check``)."""
    if args.quick and args.chapter:
        raise SpecError("chapter", "give --quick or --chapter, not both")
    return "quick" if args.quick else "chapter" if args.chapter else "full"


def _check(args: argparse.Namespace) -> int:
    spec = specmod.load(Path(args.experiment)).in_form(file_form(args))
    if args.reps is not None:
        spec = spec.with_repetitions(args.reps)
    for line in plan_lines(spec):
        print(line)
    return 0


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    check = commands.add_parser(
        "check", help="validate an experiment file and print its plan, without running it"
    )
    check.add_argument("experiment", help="experiments/NAME.toml")
    check.add_argument("--quick", action="store_true", help="the file's quick form")
    check.add_argument("--chapter", action="store_true", help="the file's [chapter] form")
    check.add_argument("--reps", type=int, default=None, help="repetitions per level")
    check.set_defaults(handler=_check)
