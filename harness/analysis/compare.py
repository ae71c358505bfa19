"""Two result directories side by side (``testbed compare A B``): before and after a kernel,
an emulator against a real path, one host against another.

A and B are each an experiment's result directory (``manifest.json``, ``runs.csv``) or a
campaign's (``campaign.json``: its experiments' directories). Experiment by experiment and
level by level: the median of the valid measured runs of each, the difference ``B - A``
with its percentile bootstrap interval (each side resampled on its own:
tbcore.stats.median_difference_ci), and whether the level moved beyond its noise: the
interval excludes 0 and the difference is larger than :data:`NOISE_FLOOR_S`. Pure functions
on frames, plus :func:`result_dirs` and :func:`compare_dirs` (the file edge).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness.analysis.levels import NEGLIGIBLE_GAP_S, analysable
from tbcore.errors import SpecError
from tbcore.plain import AsDict
from tbcore.stats import median_difference_ci

NOISE_FLOOR_S = NEGLIGIBLE_GAP_S
"""A difference below this is the testbed's own noise whatever its interval (the emulator's
p99 RTT error is about 1 ms; harness.analysis.levels)."""
MANIFEST = "manifest.json"
CAMPAIGN_INDEX = "campaign.json"


@dataclass(frozen=True)
class LevelComparison(AsDict):
    """One level of one experiment in A and in B."""

    experiment: str
    level: str
    runs_a: int
    """Valid measured runs in A."""
    runs_b: int
    median_a_s: float
    median_b_s: float
    difference_s: float
    """median(B) - median(A): positive, B took longer."""
    ci_low_s: float
    ci_high_s: float
    moved: str
    """``slower`` / ``faster`` (beyond the noise), ``no``, or why it cannot be said."""


def moved(difference_s: float, low_s: float, high_s: float, runs: tuple[int, int]) -> str:
    """Whether a level moved beyond its noise, in words."""
    if not math.isfinite(difference_s):
        return "not comparable: no valid run on " + ("A" if runs[0] == 0 else "B")
    if not (math.isfinite(low_s) and math.isfinite(high_s)):
        return "no interval: fewer than two valid runs a side"
    if abs(difference_s) <= NOISE_FLOOR_S or low_s <= 0.0 <= high_s:
        return "no"
    return "slower" if difference_s > 0 else "faster"


def compare_frames(
    experiment: str, frame_a: pd.DataFrame, frame_b: pd.DataFrame, *, seed: int = 0
) -> list[LevelComparison]:
    """Every level of either frame (A's order first), compared on ``total_s``."""
    good_a, good_b = analysable(frame_a), analysable(frame_b)
    levels = list(dict.fromkeys([*_levels(frame_a), *_levels(frame_b)]))
    out = []
    for index, level in enumerate(levels):
        a = _totals(good_a, level)
        b = _totals(good_b, level)
        point, low, high = median_difference_ci(a, b, seed=seed + index)
        out.append(
            LevelComparison(
                experiment=experiment,
                level=level,
                runs_a=len(a),
                runs_b=len(b),
                median_a_s=float(pd.Series(a).median()) if a else math.nan,
                median_b_s=float(pd.Series(b).median()) if b else math.nan,
                difference_s=point,
                ci_low_s=low,
                ci_high_s=high,
                moved=moved(point, low, high, (len(a), len(b))),
            )
        )
    return out


def _levels(frame: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(frame["level"].astype(str))) if "level" in frame else []


def _totals(frame: pd.DataFrame, level: str) -> list[float]:
    if frame.empty:
        return []
    values = pd.to_numeric(frame.loc[frame["level"].astype(str) == level, "total_s"], "coerce")
    return [float(v) for v in values.dropna()]


# --- the file edge --------------------------------------------------------------------------


def result_dirs(path: Path) -> dict[str, Path]:
    """The experiments' result directories of ``path`` by experiment name: ``path`` itself
    (an experiment's result directory) or those its campaign index names."""
    path = Path(path)
    if (path / MANIFEST).is_file():
        return {_experiment_name(path): path}
    index = path / CAMPAIGN_INDEX
    if not index.is_file():
        raise SpecError(str(path), f"neither a result directory ({MANIFEST}) nor a campaign")
    try:
        entries = json.loads(index.read_text(encoding="utf-8")).get("entries", [])
    except (OSError, json.JSONDecodeError) as err:
        raise SpecError(str(index), f"unreadable: {err}") from None
    out = {}
    for entry in entries:
        found = entry_dir(path, entry.get("result_dir"))
        if found is not None:
            out[str(entry["name"])] = found
    return out


def _experiment_name(path: Path) -> str:
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return path.parent.name
    return str(manifest.get("resolved", {}).get("name") or path.parent.name)


def entry_dir(campaign: Path, recorded: str | None) -> Path | None:
    """A campaign entry's directory as recorded (relative to where the campaign ran), or
    the same experiment/stamp under this campaign's results root (a moved results tree)."""
    if not recorded:
        return None
    candidates = [Path(recorded), campaign.parent.parent / Path(*Path(recorded).parts[-2:])]
    return next((c for c in candidates if (c / MANIFEST).is_file()), None)


def _frame(path: Path) -> pd.DataFrame:
    from harness.store.resultdir import ResultDir

    return ResultDir.open(path).frame()


@dataclass
class Comparison:
    """A against B: every level of the experiments both have, and those only one has."""

    a: Path
    b: Path
    levels: list[LevelComparison] = field(default_factory=list)
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)

    def moved_levels(self) -> list[LevelComparison]:
        return [c for c in self.levels if c.moved in ("slower", "faster")]


def compare_dirs(a: Path, b: Path, *, seed: int = 0) -> Comparison:
    dirs_a, dirs_b = result_dirs(a), result_dirs(b)
    if len(dirs_a) == 1 and len(dirs_b) == 1 and set(dirs_a) != set(dirs_b):
        raise SpecError(
            "B", f"{next(iter(dirs_b))!r} is not the experiment of A ({next(iter(dirs_a))!r})"
        )
    out = Comparison(Path(a), Path(b))
    out.only_a = [n for n in dirs_a if n not in dirs_b]
    out.only_b = [n for n in dirs_b if n not in dirs_a]
    for name in (n for n in dirs_a if n in dirs_b):
        out.levels += compare_frames(name, _frame(dirs_a[name]), _frame(dirs_b[name]), seed=seed)
    return out


def _ms(seconds: float) -> str:
    return "–" if not math.isfinite(seconds) else f"{seconds * 1e3:.1f}"


def markdown(comparison: Comparison) -> str:
    """The comparison as a Markdown table, with the levels that moved named first."""
    moved_levels = comparison.moved_levels()
    lines = [
        f"# {comparison.b} against {comparison.a}",
        "",
        "Medians of the valid measured runs (ms), the difference B - A (positive: B took "
        "longer) with its bootstrap 95 % interval, and whether the level moved beyond its "
        f"noise (the interval excludes 0 and the difference exceeds {NOISE_FLOOR_S * 1e3:g} ms).",
        "",
        f"Moved: {len(moved_levels)} of {len(comparison.levels)} levels"
        + (": " + ", ".join(f"{c.experiment}/{c.level} ({c.moved})" for c in moved_levels))
        if moved_levels
        else f"Moved: none of {len(comparison.levels)} levels.",
        "",
        "| experiment | level | runs A | runs B | median A | median B | B - A | 95 % CI | moved |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in comparison.levels:
        interval = f"{_ms(c.ci_low_s)} to {_ms(c.ci_high_s)}" if math.isfinite(c.ci_low_s) else "–"
        lines.append(
            f"| {c.experiment} | {c.level} | {c.runs_a} | {c.runs_b} | {_ms(c.median_a_s)} | "
            f"{_ms(c.median_b_s)} | {_ms(c.difference_s)} | {interval} | {c.moved} |"
        )
    for side, names in (("A", comparison.only_a), ("B", comparison.only_b)):
        if names:
            lines += ["", f"Only in {side}: {', '.join(names)}."]
    return "\n".join(lines) + "\n"


def levels_frame(comparison: Comparison) -> pd.DataFrame:
    return pd.DataFrame([c.to_dict() for c in comparison.levels])
