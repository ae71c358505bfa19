"""The reproduction report of a campaign: ``results/campaign/<stamp>/report.md``,
``index.html`` and ``reproduction.json``, one row per finding of the chapter in its order
(every ID of its index of findings, harness.report.chapter): the chapter's figure, our bound
for the same parameters, the measured median with its 95 % interval and run count, the
tolerance it is judged with and why, and a verdict that is a statistic
(harness.report.verdict):

- *reproduced*: the interval lies within the tolerance band around the chapter's figure (a
  computation: it agrees at the chapter's printed precision);
- *differs*: the interval lies outside it; the reason is a known departure checked against
  the direction of the difference, or says that nothing known explains it;
- *inconclusive*: the interval straddles the band, or there are too few runs for one (a
  two-sided 95 % interval on a median needs 6 runs); it says how many would decide;
- *error*: the measure raised; the message is the reason, and the campaign fails;
- *not measurable*: why not here (no level yet, the experiment failed, no valid run).

Rows the testbed asks beside the chapter (IDs ``T<n>``) are reported apart, with no verdict.
Each row links to its experiment's report (``report.html`` beside its ``report.md``) and
plots; the HTML is self-contained (inline CSS, local images copied into ``plots/``).
"""

from __future__ import annotations

import html
import json
import math
import os
import shutil
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.report.chapter import TESTBED_QUESTIONS, Finding, all_findings
from harness.report.chapter_computed import COMPUTATIONS
from harness.report.findings import Measured, NotMeasured, Results, fmt
from harness.report.guard import one_line
from harness.report.verdict import (
    DIFFERS,
    ERROR,
    INCONCLUSIVE,
    NOT_MEASURABLE,
    VERDICTS,
    Estimate,
    Verdict,
    judge_computed,
    judge_decision,
    judge_interval,
    judge_order,
)
from harness.store.resultdir import atomic_write_text, campaign_form, read_json_object
from tbcore.errors import SpecError
from tbcore.plain import AsDict

COLUMNS = ("id", "section", "finding", "chapter", "bound", "measured", "verdict")
"""The report's columns, in order (the names checks use)."""
JSON_FIELDS = (
    "id", "section", "kind", "chapter_value", "unit", "measured_median", "ci_low", "ci_high",
    "runs", "tolerance", "verdict", "reason", "experiment", "level",
)  # fmt: skip
"""The fields of each object of reproduction.json."""
REPORT_MD = "report.md"
INDEX_HTML = "index.html"
REPRODUCTION_JSON = "reproduction.json"
SCREENSHOT = "index.png"
KINDS = VERDICTS


@dataclass(frozen=True)
class Row(AsDict):
    id: str
    section: str
    kind: str
    """M (measured) or C (computed)."""
    finding: str
    chapter: str
    chapter_value: float | None
    unit: str
    bound: str
    measured: str
    measured_median: float | None
    ci_low: float | None
    ci_high: float | None
    runs: int | None
    """Valid runs the median rests on (per arm for a difference); None for a computation."""
    tolerance: str
    verdict: str
    """One of harness.report.verdict.VERDICTS."""
    reason: str
    experiment: str | None
    level: str | None

    def to_json(self) -> dict[str, Any]:
        return {k: _finite(getattr(self, k)) for k in JSON_FIELDS} | {
            "finding": self.finding, "chapter": self.chapter, "measured": self.measured,
            "bound": self.bound,
        }  # fmt: skip


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# --- judging ---------------------------------------------------------------------------------


def judge(finding: Finding, measured: Measured) -> Verdict:
    """The verdict of a measured row (harness.report.verdict)."""
    if measured.scaled:
        return Verdict(
            INCONCLUSIVE,
            f"indicative only: {measured.scaled} (a quick form); the chapter form runs the "
            "chapter's whole task",
        )
    if measured.ok is not None:
        verdict = judge_order(measured.ok, measured.runs, f"the chapter's {finding.chapter!r}")
        if not measured.ok and measured.reason:
            return Verdict(verdict.verdict, f"{verdict.detail}: {measured.reason}",
                           verdict.runs_needed)  # fmt: skip
        return verdict
    if measured.value is None or not math.isfinite(measured.value):
        return Verdict(NOT_MEASURABLE, measured.reason or "the measure gave no number")
    estimate = Estimate(
        measured.value, measured.low, measured.high, measured.runs, measured.decide_runs
    )
    if finding.deadline_s is not None:
        return judge_decision(estimate, finding.deadline_s, finding.meets, finding.unit)
    if finding.value is None:
        return Verdict(NOT_MEASURABLE, "the chapter gives no figure to compare")
    return judge_interval(finding.value, estimate, finding.tolerance, finding.unit)


def explain(finding: Finding, measured: Measured, verdict: Verdict) -> str:
    """Why a row differs: its known departure where the measurement moved the way it
    predicts; said to be unexplained where it did not, or where nothing is known."""
    detail = verdict.detail
    if verdict.verdict != DIFFERS:
        return detail
    dep = finding.departure
    value = measured.value
    if dep is None:
        why = measured.reason or "no known departure explains it: see the bound and the level"
        return f"{detail}; {why}"
    if dep.sign == 0 or value is None or finding.value is None:
        return f"{detail}; {dep.reason}"
    moved = 1 if value > finding.value else -1
    if moved == dep.sign:
        return f"{detail}; {dep.reason}"
    said = "higher" if dep.sign > 0 else "lower"
    return f"{detail}; unexplained: the known departure ({dep.reason}) predicts a {said} value"


def _estimate_fields(measured: Measured | None) -> dict[str, Any]:
    if measured is None:
        return {"measured_median": None, "ci_low": None, "ci_high": None, "runs": 0}
    return {
        "measured_median": measured.value,
        "ci_low": measured.low,
        "ci_high": measured.high,
        "runs": measured.runs,
    }


def _row(finding: Finding, bound: str, measured: Measured | None, verdict: str, reason: str,
         text: str = "–") -> Row:  # fmt: skip
    return Row(
        id=finding.id, section=finding.section, kind=finding.kind, finding=finding.finding,
        chapter=finding.chapter, chapter_value=finding.value, unit=finding.unit, bound=bound,
        measured=text, tolerance=finding.tolerance.describe(finding.unit)
        if finding.kind == "M" else "the chapter's printed precision",
        verdict=verdict, reason=reason, experiment=finding.experiment, level=finding.level,
        **_estimate_fields(measured),
    )  # fmt: skip


def _bound_of(finding: Finding, results: Results) -> str:
    try:
        return finding.bound(results)
    except NotMeasured as err:
        return f"– ({err})"
    except Exception as err:  # recorded in the row: a bound that raises is a defect to see
        return f"– (error: {one_line(err)})"


def _measure(finding: Finding, results: Results, bound: str) -> Measured | Row:
    """The finding's measurement, or the row that says why there is none (not measurable,
    or an error: a measure that raised, which then fails the campaign)."""
    if finding.experiment is None or finding.measure is None:
        return _row(finding, bound, None, NOT_MEASURABLE, finding.unmeasured or "no level")
    try:
        return finding.measure(results)
    except NotMeasured as err:
        return _row(finding, bound, None, NOT_MEASURABLE, str(err))
    except Exception as err:  # recorded as an error row; the campaign then fails
        return _row(finding, bound, None, ERROR, one_line(err))


def row_of(finding: Finding, results: Results) -> Row:
    """One finding's row: its bound, its measurement (or why there is none), its verdict."""
    bound = _bound_of(finding, results)
    if finding.kind == "C":
        return _computed_row(finding, bound)
    measured = _measure(finding, results, bound)
    if isinstance(measured, Row):
        return measured
    verdict = judge(finding, measured)
    return _row(finding, bound, measured, verdict.verdict, explain(finding, measured, verdict),
                measured.text)  # fmt: skip


def _computed_row(finding: Finding, bound: str) -> Row:
    match = [c for c in COMPUTATIONS if (c.id, c.finding) == (finding.id, finding.finding)]
    try:
        (computation,) = match
        computed = float(computation.compute())
        verdict = judge_computed(computation.value, computed, computation.tolerance,
                                 computation.unit)  # fmt: skip
    except Exception as err:  # recorded as an error row
        return _row(finding, bound, None, ERROR, one_line(err))
    measured = Measured(fmt(computed, finding.unit), computed)
    row = _row(finding, bound, measured, verdict.verdict, verdict.detail, measured.text)
    return Row(**{**row.to_dict(), "runs": None, "ci_low": None, "ci_high": None,
                  "tolerance": f"±{computation.tolerance:g} {finding.unit} (the chapter's "
                  "printed precision)"})  # fmt: skip


def build_rows(results: Results) -> list[Row]:
    return [row_of(f, results) for f in all_findings()]


def question_row(finding: Finding, results: Results) -> Row:
    """A row of the testbed's own questions: measured (or why not), no verdict on the
    chapter."""
    bound = _bound_of(finding, results)
    measured = _measure(finding, results, bound)
    if isinstance(measured, Row):
        return measured
    said = measured.reason if measured.ok is False else ""
    return _row(finding, bound, measured, MEASURED, said, measured.text)


MEASURED = "measured"
"""The verdict cell of a testbed question that has its measurement."""


def build_questions(results: Results) -> list[Row]:
    """The testbed's own questions (no verdict on the chapter)."""
    return [question_row(f, results) for f in TESTBED_QUESTIONS]


def readable_frames(results: Results) -> list[tuple[str, Any]]:
    """(name, runs frame) of every experiment whose runs.csv can be read; why one cannot is
    kept in ``results.unreadable`` (the summary shows it)."""
    out = []
    for name in results.dirs:
        try:
            out.append((name, results.frame(name)))
        except (NotMeasured, OSError, ValueError) as err:
            results.unreadable[name] = one_line(err)
    return out


def lock_wait_s(results: Results) -> float:
    """Seconds the campaign's runs waited for other experiments' runs on the host."""
    total = 0.0
    for _name, frame in readable_frames(results):
        if "lock_wait_s" in frame:
            total += float(frame["lock_wait_s"].fillna(0).sum())
    return total


def sharing_line(index: dict[str, Any], results: Results) -> str | None:
    """What sharing the host cost (None when no experiment shared it): the sharing
    experiments, how many at a time, and their measured runs' judged disturbance (what the
    neighbours' processes and the host could have added, harness.validity) and invalid runs."""
    names = [str(n) for n in index.get("sharing") or []]
    if not names:
        return None
    frames = [f for n, f in readable_frames(results) if n in names and not f.empty]
    measured = [f[~f["warmup"].fillna(False).astype(bool)] for f in frames]
    runs = sum(len(f) for f in measured)
    invalid = sum(int((~f["valid"].fillna(False).astype(bool)).sum()) for f in measured)
    values = [
        float(v) for f in measured if "disturbance_s" in f for v in f["disturbance_s"].dropna()
    ]
    judged = (
        f"judged disturbance a run: median {statistics.median(values) * 1e3:.1f} ms, "
        f"largest {max(values) * 1e3:.1f} ms"
        if values
        else "no judged disturbance"
    )
    return (
        f"Shared host: {', '.join(names)} ran {index.get('lanes')} at a time after the others "
        f"(their runs sleep through the model's and device's time: harness.run.lock); "
        f"{runs} measured runs, {invalid} invalid, {judged}."
    )


def below_bound_counts(results: Results) -> dict[str, tuple[int, int]]:
    """Per experiment: (measured runs below their bound, measured runs)."""
    out = {}
    for name, frame in readable_frames(results):
        if frame.empty:
            continue
        measured = frame[~frame["warmup"].fillna(False).astype(bool)]
        below = int(measured["below_bound"].notna().sum()) if "below_bound" in measured else 0
        out[name] = (below, len(measured))
    return out


# --- the campaign's index -> results ----------------------------------------------------------


def campaign_results(campaign_dir: Path) -> tuple[Results, dict[str, Any]]:
    """The campaign's experiments (their result directories, why one has none) and its index."""
    from harness.analysis.compare import entry_dir

    index = read_json_object(Path(campaign_dir) / "campaign.json", "campaign.json")
    dirs, errors, more = {}, {}, {}
    for entry in index.get("entries", []):
        if not isinstance(entry, dict) or "name" not in entry:
            raise SpecError("campaign.json", f"an entry without a name: {str(entry)[:80]}")
        name = str(entry["name"])
        found = entry_dir(Path(campaign_dir), entry.get("result_dir"))
        if found is not None:
            dirs[name] = found
        extra = [entry_dir(Path(campaign_dir), d) for d in entry.get("more_result_dirs") or []]
        more[name] = [d for d in extra if d is not None]
        if entry.get("status") != "finished":
            errors[name] = f"{entry.get('status')}: {entry.get('error') or 'no result'}"
    return Results(dirs, errors, more), index


# --- writing -------------------------------------------------------------------------------


def _relative(target: Path, start: Path) -> str:
    return Path(os.path.relpath(Path(target).resolve(), Path(start).resolve())).as_posix()


def render_experiment_html(result_dir: Path) -> Path | None:
    """``report.html`` beside an experiment's ``report.md`` (its plots are relative links)."""
    from markdown_it import MarkdownIt

    source = Path(result_dir) / REPORT_MD
    if not source.is_file():
        return None
    body = MarkdownIt("commonmark").enable("table").render(source.read_text(encoding="utf-8"))
    target = Path(result_dir) / "report.html"
    title = html.escape(Path(result_dir).parent.name)
    atomic_write_text(target, _page(title, body))
    return target


CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em auto; max-width: 1400px;
       color: #1d1d1f; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; width: 100%; margin: 0.8em 0; }
th, td { border: 1px solid #c9c9d0; padding: 0.3em 0.5em; vertical-align: top;
         text-align: left; }
th { background: #eef0f4; position: sticky; top: 0; }
td.reproduced { background: #e3f4e4; } td.differs { background: #fdf0d8; }
td.inconclusive { background: #eef2fb; } td.error { background: #f8d7da; }
td.not-measurable { background: #eceff3; color: #444; } td.measured { background: #f6f6f6; }
.summary span { display: inline-block; margin-right: 1.5em; }
img.plot { max-width: 320px; border: 1px solid #ddd; }
img { max-width: 100%; }
code { background: #f3f3f6; padding: 0 0.2em; }
"""


def _page(title: str, body: str) -> str:
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width"><title>{title}</title>'
        f"<style>{CSS}</style></head><body>\n{body}\n</body></html>\n"
    )


def _cell(text: str) -> str:
    return html.escape(text).replace("\n", "<br>")


FORM_TEXT = {
    "quick": "quick (indicative: few runs, 'inconclusive' is expected)",
    "chapter": "chapter (the signed form: each experiment's [chapter] form, the runs its "
    "judged levels need)",
    "full": "full (every level of every file, its own repetitions)",
}
"""The campaign's form as the report's header names it."""


@dataclass(frozen=True)
class Campaign:
    """What the report says of the campaign besides its rows."""

    directory: Path
    index: dict[str, Any]
    results: Results

    @property
    def form(self) -> str:
        """quick, chapter or full (an index older than ``form`` says ``quick``)."""
        return campaign_form(self.index)

    @property
    def wall_s(self) -> float | None:
        value = self.index.get("wall_s")
        return float(value) if isinstance(value, (int, float)) else None

    def experiment_link(self, name: str | None) -> str | None:
        if name is None or name not in self.results.dirs:
            return None
        return _relative(self.results.dirs[name] / "report.html", self.directory)


def _summary(campaign: Campaign, rows: list[Row]) -> list[str]:
    counts = {k: sum(1 for r in rows if r.verdict == k) for k in KINDS}
    kinds = {k: sum(1 for r in rows if r.kind == k) for k in ("M", "C")}
    ids = {r.id for r in rows}
    below = below_bound_counts(campaign.results)
    below_runs = sum(b for b, _ in below.values())
    all_runs = sum(n for _, n in below.values())
    wall = campaign.wall_s
    waited = lock_wait_s(campaign.results)
    shared = (
        f", of which {waited / 60:.1f} min waiting for other experiments' runs" if waited else ""
    )
    form = FORM_TEXT[campaign.form]
    lines = [
        f"Form: {form}; {all_runs} measured runs in {len(campaign.index.get('entries', []))} "
        f"experiments, started {campaign.index.get('started_utc', '?')}, finished "
        f"{campaign.index.get('finished_utc', 'not yet')}"
        + (f", wall time {wall / 60:.1f} min{shared}." if wall is not None else "."),
        f"Rows: {len(rows)} for {len(ids)} findings of the chapter's index ({kinds['M']} "
        f"measured, {kinds['C']} computed); " + ", ".join(f"{k} {counts[k]}" for k in KINDS) + ".",
        f"Runs below their lower bound (runs.csv below_bound): {below_runs} of {all_runs} "
        "measured runs"
        + (": " + ", ".join(f"{n} {b}" for n, (b, _) in below.items() if b) if below_runs else "."),
    ]
    shared_line = sharing_line(campaign.index, campaign.results)
    if shared_line:
        lines.append(shared_line)
    if campaign.results.unreadable:
        lines.append("Unreadable results: " + "; ".join(
            f"{n}: {why}" for n, why in campaign.results.unreadable.items()))  # fmt: skip
    return lines


LEGEND = (
    "Verdicts are statistics: the median's 95 % interval (order statistics; a bootstrap for a "
    "difference of medians) against the chapter's figure widened by the row's tolerance. "
    "*reproduced*: the interval inside the band; *differs*: outside it, with the known "
    "departure that explains it (checked against the difference's direction) or 'unexplained'; "
    "*inconclusive*: it straddles the band or there are fewer than 6 runs, with the runs that "
    "would decide; a decision (a deadline) is *fragile* where the interval crosses it. "
    "Computed rows (kind C) are harness.bounds on the chapter's inputs, judged at the "
    "chapter's printed precision. Every ID of the chapter's index of findings has a row. "
    "Rates, once for every row: the chapter's rates are payload rates; the links here are set "
    "to the same numbers in IP bytes, so each transfer over TCP carries 1,448 payload bytes "
    "in 1,500 and takes about 3.6 % longer, plus TLS records and HTTP/2 frames (about 0.2 %). "
    "The bounds are the chapter's arithmetic; the 10 % band holds the difference, and a row "
    "whose conclusion turns on less (a threshold, a deadline) names it as its departure."
)


def _experiment_cell_md(campaign: Campaign, experiment: str | None) -> str:
    link = campaign.experiment_link(experiment)
    if link:
        return f"[{experiment}]({link.replace('.html', '.md')})"
    return experiment or "–"


def _table_md(campaign: Campaign, rows: list[Row]) -> list[str]:
    lines = ["| " + " | ".join(COLUMNS) + " | experiment |", "|" + "---|" * (len(COLUMNS) + 1)]
    for row in rows:
        cells = [row.id, row.section, f"{row.finding} ({row.kind})", row.chapter, row.bound,
                 row.measured, f"{row.verdict}: {row.reason}"]  # fmt: skip
        cells = [c.replace("|", "/").replace("\n", " ") for c in cells]
        lines.append(
            "| " + " | ".join(cells) + f" | {_experiment_cell_md(campaign, row.experiment)} |"
        )
    return lines


def markdown_report(campaign: Campaign, rows: list[Row], questions: list[Row]) -> str:
    lines = ["# Reproduction of the chapter", "", *[f"- {s}" for s in _summary(campaign, rows)]]
    lines += ["", LEGEND, "", *_table_md(campaign, rows), ""]
    lines += ["## The testbed's own questions", "",
              "Measured beside the chapter's findings; no verdict on the chapter.", "",
              *_table_md(campaign, questions), ""]  # fmt: skip
    lines += _experiments_md(campaign)
    return "\n".join(lines) + "\n"


def _experiments_md(campaign: Campaign) -> list[str]:
    lines = [
        "## Experiments",
        "",
        "| experiment | status | runs | invalid | report |",
        "|---|---|---|---|---|",
    ]
    for entry in campaign.index.get("entries", []):
        link = campaign.experiment_link(entry["name"])
        report = f"[report]({link.replace('.html', '.md')})" if link else "–"
        lines.append(
            f"| {entry['name']} | {entry.get('status')} | {entry.get('runs', '–')} | "
            f"{entry.get('invalid', '–')} | {report} |"
        )
    return lines


def _copy_plot(campaign: Campaign, name: str) -> str | None:
    """The experiment's levels plot copied into the campaign's plots/ (a local image)."""
    if name not in campaign.results.dirs:
        return None
    source = campaign.results.dirs[name] / "plots" / "levels.png"
    if not source.is_file():
        return None
    target = campaign.directory / "plots" / f"{name}-levels.png"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return f"plots/{target.name}"


def _table_html(campaign: Campaign, rows: list[Row]) -> list[str]:
    parts = [
        "<table><thead><tr>" + "".join(f"<th>{c}</th>" for c in COLUMNS) + "<th>experiment</th>"
        "</tr></thead><tbody>"
    ]
    for row in rows:
        link = campaign.experiment_link(row.experiment)
        exp = (
            f'<a href="{html.escape(link)}">{html.escape(row.experiment or "")}</a>'
            if link
            else html.escape(row.experiment or "–")
        )
        cells = [row.id, row.section, f"{row.finding} ({row.kind})", row.chapter, row.bound,
                 row.measured]  # fmt: skip
        body = "".join(f"<td>{_cell(c)}</td>" for c in cells)
        kind = row.verdict.replace(" ", "-")
        verdict = f"<b>{_cell(row.verdict)}</b>: {_cell(row.reason)}"
        parts.append(f'<tr>{body}<td class="{kind}">{verdict}</td><td>{exp}</td></tr>')
    parts.append("</tbody></table>")
    return parts


def html_report(campaign: Campaign, rows: list[Row], questions: list[Row]) -> str:
    parts = ["<h1>Reproduction of the chapter</h1>", '<p class="summary">']
    parts += [f"<span>{_cell(s)}</span>" for s in _summary(campaign, rows)]
    parts += ["</p>", f"<p>{_cell(LEGEND)}</p>", *_table_html(campaign, rows)]
    parts += ["<h2>The testbed's own questions</h2>",
              "<p>Measured beside the chapter's findings; no verdict on the chapter.</p>",
              *_table_html(campaign, questions)]  # fmt: skip
    parts += ["<h2>Experiments</h2>", *_experiments_html(campaign)]
    return _page("Reproduction of the chapter", "\n".join(parts))


def _experiments_html(campaign: Campaign) -> list[str]:
    parts = [
        "<table><thead><tr><th>experiment</th><th>status</th><th>runs</th><th>invalid</th>"
        "<th>report</th><th>plot</th></tr></thead><tbody>"
    ]
    for entry in campaign.index.get("entries", []):
        name = str(entry["name"])
        link = campaign.experiment_link(name)
        plot = _copy_plot(campaign, name)
        report = f'<a href="{html.escape(link)}">report</a>' if link else "–"
        image = (
            f'<a href="{html.escape(link.rsplit("/", 1)[0])}/plots/"><img class="plot" '
            f'src="{html.escape(plot)}" alt="{html.escape(name)}: request time per level"></a>'
            if plot and link
            else "–"
        )
        parts.append(
            f"<tr><td>{html.escape(name)}</td><td>{_cell(str(entry.get('status')))}</td>"
            f"<td>{entry.get('runs', '–')}</td><td>{entry.get('invalid', '–')}</td>"
            f"<td>{report}</td><td>{image}</td></tr>"
        )
    parts.append("</tbody></table>")
    return parts


def write_reproduction(campaign_dir: Path) -> dict[str, Path]:
    """Write the reproduction report of the campaign in ``campaign_dir`` (and each of its
    experiments' report.html); returns the files written. The verdicts follow the data: run
    it again after the runs change and they change with them."""
    results, index = campaign_results(campaign_dir)
    for name, path in results.dirs.items():
        try:
            render_experiment_html(path)
        except (OSError, ValueError) as err:  # that page is missing; the summary says why
            results.unreadable[name] = f"report.html: {one_line(err)}"
    campaign = Campaign(Path(campaign_dir), index, results)
    rows, questions = build_rows(results), build_questions(results)
    out = {
        "md": Path(campaign_dir) / REPORT_MD,
        "html": Path(campaign_dir) / INDEX_HTML,
        "json": Path(campaign_dir) / REPRODUCTION_JSON,
    }
    atomic_write_text(out["md"], markdown_report(campaign, rows, questions))
    atomic_write_text(out["html"], html_report(campaign, rows, questions))
    payload = [r.to_json() for r in rows] + [r.to_json() for r in questions]
    atomic_write_text(out["json"], json.dumps(payload, indent=1, allow_nan=False))
    return out


def error_rows(campaign_dir: Path) -> list[dict[str, Any]]:
    """The rows of a written reproduction.json whose verdict is "error"."""
    path = Path(campaign_dir) / REPRODUCTION_JSON
    rows = json.loads(path.read_text(encoding="utf-8"))
    return [r for r in rows if isinstance(r, dict) and r.get("verdict") == ERROR]
