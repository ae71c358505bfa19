"""A campaign: every shipped experiment (or a chosen few), one after the other.

The campaign keeps an index, ``results/campaign/<UTC stamp>/campaign.json``, written
atomically after every experiment: which experiment went to which result directory and
how it ended. ``--resume`` on that directory continues each unfinished experiment in its
own result directory (no finished run is repeated, none is lost) and starts the ones not
yet begun; an experiment whose file gained levels since it finished has those levels made
in a directory of their own, which the index lists beside the first (``more_result_dirs``)
and the report reads with it. One experiment failing does not stop the others; the
campaign's exit status says that something failed.
"""

from __future__ import annotations

import functools
import json
import subprocess
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.analysis import levels as analysis
from harness.campaign import experiment as reported
from harness.campaign import lanes as lanes_mod
from harness.plan.planner import DEFAULT_ATTEMPTS, plan_for
from harness.spec import experiment as specmod
from harness.store.resultdir import (
    CAMPAIGN_FORMS,
    atomic_write_json,
    campaign_form,
    utc_stamp,
)
from tbcore.errors import SpecError

CAMPAIGN_ORDER = ("connection", "initcwnd", "window", "congestion", "ack", "pacing", "loss")
"""The default campaign (the main job): the one-request experiments of the seed chapter, the
headline question first. ``--chapter`` runs every file that reproduces a section of the
chapter, topologies included, in the chapter's order (harness.report.chapter.CHAPTER_ORDER);
a name given with ``--experiments`` runs alone."""

INDEX = "campaign.json"


def experiment_files(
    directory: Path, names: Sequence[str] | None = None, chapter: bool = False
) -> list[Path]:
    """The experiment files to run, in campaign order (``chapter``: every file that
    reproduces a section of the chapter, in the chapter's order, or those of ``names``);
    unknown names are refused."""
    available = {p.stem: p for p in sorted(Path(directory).glob("*.toml"))}
    if not available:
        raise SpecError("experiments", f"no *.toml in {directory}")
    for name in names or ():
        if name not in available:
            raise SpecError("experiments", f"{name!r} is not one of {', '.join(sorted(available))}")
    if chapter:
        order = chapter_order()
        wanted = set(names) if names else set(order)
        chosen = [n for n in order if n in wanted and n in available]
    elif names:
        chosen = list(dict.fromkeys(names))
    else:
        chosen = [n for n in CAMPAIGN_ORDER if n in available]
    return [available[n] for n in chosen]


def chapter_order() -> tuple[str, ...]:
    """The experiments of ``--chapter`` in the chapter's order (harness.report.chapter)."""
    from harness.report.chapter import CHAPTER_ORDER

    return CHAPTER_ORDER


@dataclass
class CampaignSummary:
    index_path: Path
    entries: list[dict[str, Any]] = field(default_factory=list)
    report_errors: list[str] = field(default_factory=list)
    """The reproduction report's error rows (a measure that raised), or why it was not
    written: either fails the campaign."""

    @property
    def ok(self) -> bool:
        """Every experiment finished, every level of each has a valid measured run, and the
        reproduction report has no error row."""
        return not self.report_errors and all(
            e.get("status") == "finished"
            and not e.get("levels_without_valid")
            and not e.get("more_error")
            for e in self.entries
        )

    def lines(self) -> list[str]:
        out = [f"reproduction report: error row {e}" for e in self.report_errors]
        for e in self.entries:
            extra = f" ({e['error']})" if e.get("error") else ""
            runs, invalid = e.get("runs", 0), e.get("invalid", 0)
            fraction = f" ({100.0 * invalid / runs:.0f} %)" if runs else ""
            empty = e.get("levels_without_valid")
            if empty:
                extra += f"; no valid run for {', '.join(empty)}"
            if e.get("more_result_dirs"):
                extra += f"; added levels in {', '.join(e['more_result_dirs'])}"
            if e.get("more_error"):
                extra += f"; added levels failed: {e['more_error']}"
            out.append(
                f"{e['name']}: {e.get('status')} -> {e.get('result_dir', '-')}, "
                f"{runs} runs ({e.get('planned', runs)} planned), "
                f"{invalid} invalid{fraction}{extra}"
            )
        return out


def _open_index(
    resume: Path | None,
    output: Path,
    form: str,
    reps: int | None,
    backend: str,
    chapter: bool = False,
    whole: bool = False,
) -> tuple[Path, dict[str, Any]]:
    """The campaign index to resume (read from ``resume``) or a new one under ``output``
    (``whole``: every experiment of its kind, not the ones named)."""
    if resume is not None:
        index_path = Path(resume) / INDEX
        try:
            index = json.loads(index_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise SpecError("resume", f"{index_path}: {err}") from None
        return index_path, index
    if form not in CAMPAIGN_FORMS:
        raise SpecError("form", f"{form!r} is not one of {', '.join(CAMPAIGN_FORMS)}")
    index_path = Path(output) / "campaign" / utc_stamp() / INDEX
    index = {
        "started_utc": utc_stamp(),
        "form": form,
        "quick": form == "quick",
        "reps": reps,
        "backend": backend,
        "chapter": chapter,
        "whole": whole,
        "entries": [],
    }
    return index_path, index


def _load_specs(
    experiments_dir: Path,
    names: Sequence[str] | None,
    form: str,
    reps: int | None,
    chapter: bool = False,
) -> list[specmod.ExperimentSpec]:
    """Load and validate every experiment file (in the campaign's form) before the first
    run."""
    specs = []
    for path in experiment_files(experiments_dir, names, chapter):
        spec = specmod.load(path).in_form(form)
        if reps is not None:
            spec = spec.with_repetitions(reps)
        specs.append(spec)
    return specs


def _finish(entry: dict[str, Any], spec: specmod.ExperimentSpec, result: Any) -> None:
    """Note in ``entry`` that ``spec`` (the levels its directory planned) ran to its end in
    ``result``; the levels its file gained, made in other directories (``more_result_dirs``),
    keep what the index said of them."""
    frame = result.result.frame()
    elsewhere = [
        level for level in entry.get("levels_without_valid") or [] if level not in spec.level_names
    ]
    entry.update(
        status="finished",
        result_dir=str(result.result.path),
        runs=len(frame),
        planned=len(plan_for(spec)),
        invalid=int((~frame["valid"].fillna(False).astype(bool)).sum()),
        levels_without_valid=analysis.levels_without_valid(frame, spec.level_names) + elsewhere,
        report=str(result.result.path / "report.md"),
    )


def continuing(spec: specmod.ExperimentSpec, entry: dict[str, Any]) -> specmod.ExperimentSpec:
    """The experiment as its unfinished result directory planned it: a file that gained
    levels since the campaign began goes on with the levels it had (its plan is the
    directory's), and the levels it gained are made once it has finished (added_levels)."""
    previous = entry.get("result_dir")
    if not previous or not Path(previous).is_dir():
        return spec
    had = planned_levels(Path(previous))
    if had and had < set(spec.level_names):
        return spec.only_levels(had)
    return spec


def _run_entry(
    spec: specmod.ExperimentSpec,
    entry: dict[str, Any],
    index: dict[str, Any],
    index_path: Path,
    progress: Any,
    run: Callable[..., Any],
) -> None:
    """Run one experiment and note its outcome in ``entry``; an interrupt is noted, then
    raised."""
    try:
        previous = entry.get("result_dir")
        planned = continuing(spec, entry)
        result = run(
            planned,
            resume=Path(previous) if previous and Path(previous).is_dir() else None,
            progress=_recorder(progress, entry, index, index_path),
            **({"log": progress.note} if hasattr(progress, "note") else {}),
        )
        _finish(entry, planned, result)
    except KeyboardInterrupt:
        entry["status"] = "interrupted"
        atomic_write_json(index_path, index)
        raise
    except Exception as err:
        entry.update(status="failed", error=f"{type(err).__name__}: {err}"[:300])
        entry["traceback"] = traceback.format_exc()[-2000:]
    finally:
        if progress is not None and hasattr(progress, "close"):
            progress.close()


def run_campaign(
    *,
    experiments_dir: Path,
    names: Sequence[str] | None,
    reps: int | None,
    form: str,
    backend: str,
    output: Path,
    resume: Path | None = None,
    progress_factory: Callable[[str], Any] | None = None,
    runner: Callable[..., Any] | None = None,
    link_name: str | None = None,
    attempts: int = DEFAULT_ATTEMPTS,
    chapter: bool = False,
    lanes: int = 1,
) -> CampaignSummary:
    """Run the experiments (``chapter``: in the chapter's order, harness.report.chapter), then
    write the reproduction report beside the index (harness.report.reproduction); ``runner``
    defaults to :func:`harness.campaign.experiment.run_reported`. ``lanes`` > 1: the
    experiments that share the host run after the others, that many at a time
    (harness.campaign.lanes)."""
    if runner is None:
        runner = reported.run_reported  # looked up now: a test may replace it
    started = time.monotonic()
    index_path, index = _open_index(resume, output, form, reps, backend, chapter, not names)
    if resume is not None:
        form, reps, backend = campaign_form(index), index["reps"], index["backend"]
        chapter = bool(index.get("chapter", False))
        # a whole chapter campaign goes on with the chapter's experiments as this version has
        # them (one added since it began is made, as a level a file gained is)
        whole = chapter and bool(index.get("whole", False))
        names = None if whole else [e["name"] for e in index["entries"]]
        # new directories (added levels, experiments not yet begun) go beside the others:
        # results/campaign/<stamp>/campaign.json -> results/
        output = index_path.resolve().parent.parent.parent
    specs = _load_specs(experiments_dir, names, form, reps, chapter)
    entries = {e["name"]: e for e in index["entries"]}
    for spec in specs:
        entries.setdefault(spec.name, {"name": spec.name, "status": "pending"})
    made = {s.name for s in specs}
    # an experiment the chapter no longer has keeps its entry (its runs stay readable)
    index["entries"] = [entries[s.name] for s in specs] + [
        e for name, e in entries.items() if name not in made
    ]
    atomic_write_json(index_path, index)
    run = functools.partial(
        runner, output=Path(output), backend=backend, link_name=link_name, attempts=attempts
    )
    try:
        _measure(
            specs,
            entries,
            index,
            index_path,
            progress_factory,
            run,
            resume,
            lanes,
            dict(output=Path(output), backend=backend, link_name=None, attempts=attempts),
        )
    except KeyboardInterrupt:  # the time measured so far counts in the campaign's wall time
        index["wall_s"] = float(index.get("wall_s") or 0.0) + time.monotonic() - started
        atomic_write_json(index_path, index)
        raise
    index["finished_utc"] = utc_stamp()
    index["wall_s"] = float(index.get("wall_s") or 0.0) + time.monotonic() - started
    atomic_write_json(index_path, index)
    index.update(reproduction_report(index_path.parent))
    atomic_write_json(index_path, index)
    return CampaignSummary(
        index_path=index_path, entries=index["entries"], report_errors=report_errors_of(index)
    )


def _measure(
    specs: Sequence[specmod.ExperimentSpec],
    entries: dict[str, dict[str, Any]],
    index: dict[str, Any],
    index_path: Path,
    progress_factory: Callable[[str], Any] | None,
    run: Callable[..., Any],
    resume: Path | None,
    lanes: int,
    options: dict[str, Any],
) -> None:
    """The campaign's experiments: the exclusive ones one after the other, then the sharing
    ones in lanes; on resume, the levels the files gained since."""
    alone, sharing = lanes_mod.split(specs) if lanes > 1 else (list(specs), [])
    if sharing:  # a resume without lanes keeps what the campaign's lanes were
        index["lanes"] = lanes
        before = list(index.get("sharing") or [])
        index["sharing"] = before + [s.name for s in sharing if s.name not in before]
    attempts = options["attempts"]
    for spec in alone:
        entry = entries[spec.name]
        if nothing_left(spec, entry, attempts):
            continue
        progress = progress_factory(spec.name) if progress_factory else None
        _run_entry(spec, entry, index, index_path, progress, run)
        atomic_write_json(index_path, index)
    left = [s for s in sharing if not nothing_left(s, entries[s.name], attempts)]
    if left:
        _run_sharing(left, entries, index, index_path, options, lanes)
    if resume is not None:
        shared_names = {s.name for s in sharing}
        for spec in specs:
            if spec.name not in shared_names:
                _run_added_levels(
                    spec, entries[spec.name], index, index_path, progress_factory, run
                )
        shared = [s for s in sharing if entries[s.name].get("status") == "finished"]
        if shared:
            _run_added_sharing(shared, entries, index, index_path, options, lanes)


def nothing_left(spec: specmod.ExperimentSpec, entry: dict[str, Any], attempts: int) -> bool:
    """Whether a campaign has nothing left to make of ``spec``: it finished, and its
    directory has no planned run without a valid row that ``attempts`` still allows (a resume
    with more attempts than the campaign had gives its invalid runs theirs, as ``testbed run
    --resume`` does). A directory whose plan is no longer the file's is done (its runs answer
    the file it was made from); the levels the file gained are :func:`added_levels`'."""
    if entry.get("status") != "finished":
        return False
    previous = entry.get("result_dir")
    if not previous or not Path(previous).is_dir():
        return True
    from harness.run.runner import blocks_left, same_plan
    from harness.store.resultdir import ResultDir

    planned = continuing(spec, entry)
    result = ResultDir.open(Path(previous))
    return not same_plan(result, plan_for(planned)) or not blocks_left(planned, result, attempts)


def planned_levels(path: Path) -> set[str]:
    """The levels a result directory's plan has."""
    from harness.store.resultdir import ResultDir

    manifest = ResultDir.open(path).read_manifest()
    return {str(r.get("level")) for r in manifest.get("plan", []) if isinstance(r, dict)}


def added_levels(
    spec: specmod.ExperimentSpec, entry: dict[str, Any]
) -> tuple[specmod.ExperimentSpec, Path | None] | None:
    """What a finished experiment's file asks for that its directories lack: the levels
    it gained since (a new directory: None), or an unfinished directory of added levels to
    continue; None when nothing is missing."""
    from harness.store.resultdir import ResultDir

    main = entry.get("result_dir")
    if entry.get("status") != "finished" or not main or not Path(main).is_dir():
        return None
    more = [Path(d) for d in entry.get("more_result_dirs") or [] if Path(d).is_dir()]
    for path in more:
        if not ResultDir.open(path).read_manifest().get("finished"):
            return spec.only_levels(planned_levels(path)), path
    have = set().union(*(planned_levels(p) for p in [Path(main), *more]))
    missing = [name for name in spec.level_names if name not in have]
    return (spec.only_levels(missing), None) if missing else None


def _note_more_dir(entry: dict[str, Any], path: str) -> None:
    """List a directory of added levels in the experiment's index entry (once)."""
    dirs = entry.setdefault("more_result_dirs", [])
    if path not in dirs:
        dirs.append(path)


def _added_made(entry: dict[str, Any], sub_spec: specmod.ExperimentSpec, result: Any) -> None:
    """Note in the index entry that the added levels ``sub_spec`` were made (``result``):
    those of them without a valid run join ``levels_without_valid``."""
    frame = result.result.frame()
    entry["levels_without_valid"] = list(entry.get("levels_without_valid") or []) + list(
        analysis.levels_without_valid(frame, sub_spec.level_names)
    )
    entry.pop("more_error", None)


def _result_dir_for(
    spec: specmod.ExperimentSpec, previous: Path | None, options: dict[str, Any]
) -> str:
    """The result directory the lanes fill for ``spec``: ``previous`` reopened (its plan
    must be ``spec``'s), or a new one under the campaign's output."""
    from harness.run.runner import create_result, reopen_result

    plan = plan_for(spec)
    if previous is not None and previous.is_dir():
        return str(reopen_result(spec, plan, previous).path)
    return str(create_result(spec, plan, options["output"], options["backend"], None).path)


def _run_added_levels(
    spec: specmod.ExperimentSpec,
    entry: dict[str, Any],
    index: dict[str, Any],
    index_path: Path,
    progress_factory: Callable[[str], Any] | None,
    run: Callable[..., Any],
) -> None:
    """Make the levels ``spec``'s file gained since its experiment finished (added_levels),
    noting their directory in the index as it starts; a failure is noted, not raised."""
    added = added_levels(spec, entry)
    if added is None:
        return
    sub_spec, previous = added
    progress = progress_factory(f"{spec.name} (added levels)") if progress_factory else None

    def hook(what: str, planned: Any, data: Any) -> None:
        if what == "plan" and data and "dir" in data:
            _note_more_dir(entry, data["dir"])
            atomic_write_json(index_path, index)
        if progress is not None:
            progress(what, planned, data)

    try:
        result = run(
            sub_spec,
            resume=previous,
            progress=hook,
            **({"log": progress.note} if hasattr(progress, "note") else {}),
        )
        _added_made(entry, sub_spec, result)
    except KeyboardInterrupt:
        atomic_write_json(index_path, index)
        raise
    except Exception as err:  # noted in the index; the summary then fails
        entry["more_error"] = f"{type(err).__name__}: {err}"[:300]
    finally:
        if progress is not None and hasattr(progress, "close"):
            progress.close()
    atomic_write_json(index_path, index)


@dataclass
class _SharedJob:
    """One sharing experiment (or the levels its file gained) for the lanes: its spec, the
    result directory its blocks fill, and what the index hears when the last one ends."""

    spec: specmod.ExperimentSpec
    result_dir: str
    finished: Callable[[Any], None]
    """Called with the finished ExperimentResult (tables and report made)."""
    failed: Callable[[str], None]


def _run_sharing(
    specs: Sequence[specmod.ExperimentSpec],
    entries: dict[str, dict[str, Any]],
    index: dict[str, Any],
    index_path: Path,
    options: dict[str, Any],
    lanes: int,
) -> None:
    """The sharing experiments' blocks, ``lanes`` at a time (harness.campaign.lanes), each
    experiment noted in the index as its directory is made (for ``--resume``) and as its
    last block ends (then its tables and report are made)."""
    jobs = []
    for file_spec in specs:
        entry = entries[file_spec.name]
        spec = continuing(file_spec, entry)  # the levels its directory planned
        previous = entry.get("result_dir")
        path = _result_dir_for(spec, Path(previous) if previous else None, options)
        entry.update(result_dir=path, status="running")

        def finished(result: Any, spec: specmod.ExperimentSpec = spec, entry: dict = entry) -> None:
            _finish(entry, spec, result)

        def failed(error: str, entry: dict = entry) -> None:
            entry.update(status="failed", error=error[:300])

        jobs.append(_SharedJob(spec, path, finished, failed))
    atomic_write_json(index_path, index)
    try:
        _share(jobs, index, index_path, options, lanes)
    except KeyboardInterrupt:
        for spec in specs:
            if entries[spec.name].get("status") == "running":
                entries[spec.name]["status"] = "interrupted"
        atomic_write_json(index_path, index)
        raise


def _run_added_sharing(
    specs: Sequence[specmod.ExperimentSpec],
    entries: dict[str, dict[str, Any]],
    index: dict[str, Any],
    index_path: Path,
    options: dict[str, Any],
    lanes: int,
) -> None:
    """The levels the sharing experiments' files gained since they finished (added_levels),
    in the lanes as the experiments themselves; each directory noted in the index as it is
    made (``more_result_dirs``), a failure noted (``more_error``), not raised."""
    jobs = []
    for spec in specs:
        entry = entries[spec.name]
        added = added_levels(spec, entry)
        if added is None:
            continue
        sub_spec, previous = added
        path = _result_dir_for(sub_spec, previous, options)
        _note_more_dir(entry, path)

        def finished(
            result: Any, sub: specmod.ExperimentSpec = sub_spec, entry: dict = entry
        ) -> None:
            _added_made(entry, sub, result)

        def failed(error: str, entry: dict = entry) -> None:
            entry["more_error"] = error[:300]

        jobs.append(_SharedJob(sub_spec, path, finished, failed))
    atomic_write_json(index_path, index)
    if jobs:
        _share(jobs, index, index_path, options, lanes)


def _share(
    jobs: Sequence[_SharedJob],
    index: dict[str, Any],
    index_path: Path,
    options: dict[str, Any],
    lanes: int,
) -> None:
    """Make the blocks left of every job, ``lanes`` at a time, the experiments' blocks in
    turn (harness.campaign.lanes.interleaved); when a job's last block ends, its tables and
    report (harness.campaign.experiment.finish_reported), and the index hears of it."""
    parts: list[lanes_mod.Part] = []
    pending: dict[str, int] = {}
    errors: dict[str, list[str]] = {}
    by_dir = {job.result_dir: job for job in jobs}
    for job in jobs:
        mine = lanes_mod.parts_of(job.spec, job.result_dir, options["attempts"])
        pending[job.result_dir], errors[job.result_dir] = len(mine), []
        parts.extend(mine)

    def finish(result_dir: str) -> None:
        job = by_dir[result_dir]
        if errors[result_dir]:
            job.failed("; ".join(errors[result_dir]))
        else:
            try:
                job.finished(
                    reported.finish_reported(job.spec, Path(result_dir), options["attempts"])
                )
            except Exception as err:  # noted in the index; the summary then fails
                job.failed(f"{type(err).__name__}: {err}")
        atomic_write_json(index_path, index)

    def done(part: lanes_mod.Part, error: BaseException | None) -> None:
        if error is not None:
            errors[part.result_dir].append(f"block {part.block}: {type(error).__name__}: {error}")
        pending[part.result_dir] -= 1
        if pending[part.result_dir] == 0:
            finish(part.result_dir)

    for result_dir in [d for d, count in pending.items() if count == 0]:
        finish(result_dir)  # every block already made (an interrupted finish)
    lanes_mod.run_lanes(lanes_mod.interleaved(parts), options, lanes, done)


def report_errors_of(index: dict[str, Any]) -> list[str]:
    """What keeps the campaign's reproduction report from being whole: its error rows, or
    why it was not written at all (only a chapter campaign must have one)."""
    if index.get("reproduction_error"):
        return [f"report not written: {index['reproduction_error']}"]
    return [str(e) for e in index.get("reproduction_errors") or []]


def reproduction_report(directory: Path) -> dict[str, Any]:
    """The reproduction report of the campaign (report.md, index.html) and, where chromium
    is installed, its screenshot; what failed is noted in the index, never raised (the
    experiments' results stand without it)."""
    out: dict[str, Any] = {}
    try:
        from harness.report import browser, reproduction

        written = reproduction.write_reproduction(directory)
        out["reproduction"] = {k: str(v) for k, v in written.items()}
        out["reproduction_errors"] = [
            f"{r.get('id')}: {r.get('reason')}" for r in reproduction.error_rows(directory)
        ]
    except Exception as err:  # recorded in the index; the campaign then fails (report_errors)
        out["reproduction_error"] = f"{type(err).__name__}: {err}"[:300]
        return out
    try:
        browser.render(written["html"], directory / reproduction.SCREENSHOT)
        out["reproduction"]["screenshot"] = str(directory / reproduction.SCREENSHOT)
    except (SpecError, OSError, subprocess.SubprocessError) as err:
        out["screenshot_error"] = str(err)[:300]
    return out


def _recorder(
    progress: Any, entry: dict[str, Any], index: dict[str, Any], index_path: Path
) -> Callable[[str, Any, Any], None]:
    """Pass progress on, and note the result directory as soon as it exists (for resume)."""

    def hook(what: str, run: Any, data: Any) -> None:
        if what == "plan" and data and "dir" in data:
            entry["result_dir"] = data["dir"]
            entry["status"] = "running"
            atomic_write_json(index_path, index)
        if progress is not None:
            progress(what, run, data)

    return hook
