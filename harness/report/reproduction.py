"""The reproduction report of a campaign: ``results/campaign/<stamp>/report.md`` and
``index.html``, one row per finding of the chapter in its order (harness.report.chapter):
``section``, ``finding``, ``chapter`` (its figure), ``bound`` (ours, for the same
parameters), ``measured`` (median, 95 % interval, valid runs) and ``verdict``:

- *reproduced* (within the finding's stated tolerance, or the order or sign it states held),
- *differs* (by how much, and why: the file's known departure or what the data says),
- *not measurable* (a computation; or why not on this host: the experiment failed, the level
  had no valid run, the quick form does not carry it).

Each row links to its experiment's report (rendered to ``report.html`` beside its
``report.md``) and plots; the HTML is self-contained (inline CSS, local images copied into the
campaign's ``plots/``, no JavaScript). The summary counts the verdicts and the runs below
their lower bound (runs.csv ``below_bound``).
"""

from __future__ import annotations

import html
import json
import math
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.report.chapter import Finding, all_findings
from harness.report.findings import Measured, NotMeasured, Results, fmt
from harness.report.guard import one_line
from harness.store.resultdir import atomic_write_text

COLUMNS = ("section", "finding", "chapter", "bound", "measured", "verdict")
"""The report's columns, in order (the names checks use)."""
REPORT_MD = "report.md"
INDEX_HTML = "index.html"
SCREENSHOT = "index.png"
KINDS = ("reproduced", "differs", "not measurable")


@dataclass(frozen=True)
class Row:
    section: str
    finding: str
    chapter: str
    bound: str
    measured: str
    verdict: str
    kind: str
    """One of :data:`KINDS`."""
    experiment: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def judge(finding: Finding, measured: Measured) -> tuple[str, str]:
    """(kind, verdict) of a measured finding."""
    if measured.ok is not None:
        if measured.ok:
            return "reproduced", "reproduced"
        return "differs", f"differs: {finding.differs or measured.reason or 'see measured'}"
    if finding.value is None or measured.value is None or not math.isfinite(measured.value):
        return "not measurable", "not measurable: the chapter gives no figure to compare"
    deviation = measured.value / finding.value - 1.0
    if abs(deviation) <= finding.tolerance + 1e-12:
        within = "exactly" if finding.tolerance == 0 else f"within {finding.tolerance:.0%}"
        return "reproduced", f"reproduced ({within}: {deviation:+.1%})"
    why = (
        finding.differs
        or measured.reason
        or (f"measured {fmt(measured.value, finding.unit)} against the chapter's {finding.chapter}")
    )
    return "differs", f"differs ({deviation:+.0%}): {why}"


def row_of(finding: Finding, results: Results) -> Row:
    """One finding's row: its bound, its measurement (or why there is none), its verdict."""
    try:
        bound = finding.bound(results)
    except NotMeasured as err:
        bound = f"– ({err})"
    except Exception as err:  # a bound of the report, never the report
        bound = f"– (not computed: {one_line(err)})"
    if finding.experiment is None:
        return Row(finding.section, finding.finding, finding.chapter, bound, "–",
                   "not measurable (a computation)", "not measurable", None)  # fmt: skip
    try:
        assert finding.measure is not None
        measured = finding.measure(results)
        kind, verdict = judge(finding, measured)
        text = measured.text
    except NotMeasured as err:
        kind, verdict, text = "not measurable", f"not measurable: {err}", "–"
    except Exception as err:
        kind, verdict, text = "not measurable", f"not measurable: {one_line(err)}", "–"
    return Row(finding.section, finding.finding, finding.chapter, bound, text, verdict, kind,
               finding.experiment)  # fmt: skip


def build_rows(results: Results) -> list[Row]:
    return [row_of(f, results) for f in all_findings()]


def lock_wait_s(results: Results) -> float:
    """Seconds the campaign's runs waited for other experiments' runs on the host."""
    total = 0.0
    for name in results.dirs:
        try:
            frame = results.frame(name)
        except Exception:
            continue
        if "lock_wait_s" in frame:
            total += float(frame["lock_wait_s"].fillna(0).sum())
    return total


def below_bound_counts(results: Results) -> dict[str, tuple[int, int]]:
    """Per experiment: (measured runs below their bound, measured runs)."""
    out = {}
    for name in results.dirs:
        try:
            frame = results.frame(name)
        except Exception:
            continue
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

    index = json.loads((Path(campaign_dir) / "campaign.json").read_text(encoding="utf-8"))
    dirs, errors = {}, {}
    for entry in index.get("entries", []):
        name = str(entry["name"])
        found = entry_dir(Path(campaign_dir), entry.get("result_dir"))
        if found is not None:
            dirs[name] = found
        if entry.get("status") != "finished":
            errors[name] = f"{entry.get('status')}: {entry.get('error') or 'no result'}"
    return Results(dirs, errors), index


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
td.not-measurable { background: #eceff3; color: #444; }
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


@dataclass(frozen=True)
class Campaign:
    """What the report says of the campaign besides its rows."""

    directory: Path
    index: dict[str, Any]
    results: Results

    @property
    def wall_s(self) -> float | None:
        value = self.index.get("wall_s")
        return float(value) if isinstance(value, (int, float)) else None

    def experiment_link(self, name: str | None) -> str | None:
        if name is None or name not in self.results.dirs:
            return None
        return _relative(self.results.dirs[name] / "report.html", self.directory)


def _summary(campaign: Campaign, rows: list[Row]) -> list[str]:
    counts = {k: sum(1 for r in rows if r.kind == k) for k in KINDS}
    below = below_bound_counts(campaign.results)
    below_runs = sum(b for b, _ in below.values())
    all_runs = sum(n for _, n in below.values())
    wall = campaign.wall_s
    waited = lock_wait_s(campaign.results)
    shared = (
        f", of which {waited / 60:.1f} min waiting for other experiments' runs" if waited else ""
    )
    lines = [
        f"Findings: {len(rows)}; reproduced {counts['reproduced']}, differs {counts['differs']}, "
        f"not measurable {counts['not measurable']}.",
        f"Runs below their lower bound (runs.csv below_bound): {below_runs} of {all_runs} "
        "measured runs"
        + (": " + ", ".join(f"{n} {b}" for n, (b, _) in below.items() if b) if below_runs else "."),
        f"Campaign: {'quick' if campaign.index.get('quick') else 'full'} forms, "
        f"{len(campaign.index.get('entries', []))} experiments, started "
        f"{campaign.index.get('started_utc', '?')}, finished "
        f"{campaign.index.get('finished_utc', 'not yet')}"
        + (f", wall time {wall / 60:.1f} min{shared}." if wall is not None else "."),
    ]
    return lines


def markdown_report(campaign: Campaign, rows: list[Row]) -> str:
    lines = ["# Reproduction of the chapter", "", *[f"- {s}" for s in _summary(campaign, rows)]]
    lines += [
        "",
        "Verdicts: *reproduced* within the stated tolerance (10 % unless the row says "
        "otherwise), *differs* with the reason, *not measurable* with why. Bounds are "
        "harness.bounds for the chapter's parameters (and the runs' own where they differ).",
        "",
        "| " + " | ".join(COLUMNS) + " | experiment |",
        "|" + "---|" * (len(COLUMNS) + 1),
    ]
    for row in rows:
        link = campaign.experiment_link(row.experiment)
        exp = (
            f"[{row.experiment}]({link.replace('.html', '.md')})"
            if link
            else (row.experiment or "–")
        )
        cells = [getattr(row, c).replace("|", "/").replace("\n", " ") for c in COLUMNS]
        lines.append("| " + " | ".join(cells) + f" | {exp} |")
    lines += ["", *_experiments_md(campaign)]
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


def html_report(campaign: Campaign, rows: list[Row]) -> str:
    parts = ["<h1>Reproduction of the chapter</h1>", '<p class="summary">']
    parts += [f"<span>{_cell(s)}</span>" for s in _summary(campaign, rows)]
    parts += [
        "</p>",
        "<p>Verdicts: <em>reproduced</em> within the stated tolerance (10 % unless the row says "
        "otherwise), <em>differs</em> with the reason, <em>not measurable</em> with why. Bounds "
        "are harness.bounds for the chapter's parameters (and the runs' own where they "
        "differ).</p>",
        "<table><thead><tr>" + "".join(f"<th>{c}</th>" for c in COLUMNS) + "<th>experiment</th>"
        "</tr></thead><tbody>",
    ]
    for row in rows:
        link = campaign.experiment_link(row.experiment)
        exp = (
            f'<a href="{html.escape(link)}">{html.escape(row.experiment or "")}</a>'
            if link
            else html.escape(row.experiment or "–")
        )
        cells = "".join(f"<td>{_cell(getattr(row, c))}</td>" for c in COLUMNS[:-1])
        kind = row.kind.replace(" ", "-")
        parts.append(f'<tr>{cells}<td class="{kind}">{_cell(row.verdict)}</td><td>{exp}</td></tr>')
    parts += ["</tbody></table>", "<h2>Experiments</h2>", *_experiments_html(campaign)]
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
    experiments' report.html); returns the files written."""
    results, index = campaign_results(campaign_dir)
    for path in results.dirs.values():
        try:
            render_experiment_html(path)
        except Exception:  # an experiment's page, never the campaign's report
            continue
    campaign = Campaign(Path(campaign_dir), index, results)
    rows = build_rows(results)
    out = {"md": Path(campaign_dir) / REPORT_MD, "html": Path(campaign_dir) / INDEX_HTML}
    atomic_write_text(out["md"], markdown_report(campaign, rows))
    atomic_write_text(out["html"], html_report(campaign, rows))
    atomic_write_text(
        Path(campaign_dir) / "reproduction.json",
        json.dumps([r.to_dict() for r in rows], indent=1),
    )
    return out
