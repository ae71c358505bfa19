"""The host as a blocking factor (issue 30): plain functions on the runs frame.

A block never spans hosts (harness.cluster), so every paired arm difference is made on one
host and the arm effect stays within hosts. What the host itself does is a block effect:

- :func:`medians_by_host`: each level's median ``total_s`` on each host.
- :func:`host_offsets`: each host's offset, the median over levels of (the level's median on
  that host minus its median over all hosts); the **host effect** is the spread of the
  offsets (largest minus smallest), reported beside the order effect, which is the same kind
  of nuisance (docs/design.md, "Order of runs").
- :func:`host_interactions`: per level against its baseline, the within-block differences
  grouped by host and a Kruskal-Wallis test of "the same effect on every host" (scipy; rank
  based, as the differences of a noisy host are not normal). A level whose p falls below
  :data:`INTERACTION_ALPHA` is a level whose effect depends on the host.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd
from scipy import stats

from harness.analysis.levels import analysable

INTERACTION_ALPHA = 0.05
"""Significance level of the level-by-host interaction test (the conventional 5 %, as the
report's 95 % intervals)."""

MIN_PAIRS_PER_HOST = 2
"""Pairs a host needs for its arm effect to enter the interaction test (Kruskal-Wallis
needs more than one value per group to rank within it)."""


def _good(frame: pd.DataFrame) -> pd.DataFrame:
    good = analysable(frame)
    if good.empty or "host" not in good.columns:
        return good.iloc[0:0]
    good = good[good["host"].notna()].copy()
    good["total_s"] = pd.to_numeric(good["total_s"], errors="coerce")
    good["host"] = good["host"].astype(str)
    return good


def hosts_of(frame: pd.DataFrame) -> list[str]:
    """The hosts of the analysable runs, sorted."""
    return sorted(_good(frame)["host"].unique())


def medians_by_host(frame: pd.DataFrame, levels: Sequence[str]) -> pd.DataFrame:
    """Rows: levels; columns: hosts; cells: the median ``total_s`` of the level's valid
    measured runs on the host (NaN without one)."""
    good = _good(frame)
    table = good.pivot_table(index="level", columns="host", values="total_s", aggfunc="median")
    return table.reindex(index=list(levels), columns=hosts_of(frame))


def host_offsets(frame: pd.DataFrame, levels: Sequence[str]) -> dict[str, float]:
    """Each host's median offset from the levels' overall medians (seconds)."""
    good = _good(frame)
    if good.empty:
        return {}
    overall = good.groupby("level")["total_s"].median()
    table = medians_by_host(frame, levels)
    offsets = table.sub(overall.reindex(table.index), axis=0)
    return {str(host): float(offsets[host].median()) for host in offsets.columns}


def host_effect_s(offsets: Mapping[str, float]) -> float:
    """The spread of the hosts' offsets; NaN with fewer than two hosts."""
    values = [v for v in offsets.values() if math.isfinite(v)]
    return max(values) - min(values) if len(values) >= 2 else math.nan


@dataclass(frozen=True)
class HostInteraction:
    level: str
    baseline: str
    effect_by_host_s: dict[str, float] = field(default_factory=dict)
    """Median within-block difference (level minus baseline) on each host."""
    pairs_by_host: dict[str, int] = field(default_factory=dict)
    p_value: float = math.nan
    """Kruskal-Wallis p of equal effects across hosts; NaN when fewer than two hosts have
    :data:`MIN_PAIRS_PER_HOST` pairs."""

    @property
    def depends_on_host(self) -> bool:
        return math.isfinite(self.p_value) and self.p_value < INTERACTION_ALPHA


def _differences(good: pd.DataFrame, level: str, baseline: str) -> pd.DataFrame:
    """Per block where both have a valid run: the block's host and level minus baseline."""
    a = good[good["level"] == level].drop_duplicates("block").set_index("block")
    b = good[good["level"] == baseline].drop_duplicates("block").set_index("block")
    blocks = sorted(set(a.index) & set(b.index))
    return pd.DataFrame(
        {
            "host": [a.loc[k, "host"] for k in blocks],
            "d_s": [float(a.loc[k, "total_s"]) - float(b.loc[k, "total_s"]) for k in blocks],
        }
    )


def host_interactions(frame: pd.DataFrame, baselines: Mapping[str, str]) -> list[HostInteraction]:
    """For each level against its baseline: its effect on each host and the test of equal
    effects across hosts."""
    good = _good(frame)
    out = []
    for level, baseline in baselines.items():
        if level == baseline:
            continue
        diffs = _differences(good, level, baseline)
        groups = {str(h): g["d_s"].to_numpy() for h, g in diffs.groupby("host")}
        tested = [v for v in groups.values() if len(v) >= MIN_PAIRS_PER_HOST]
        p = math.nan
        if len(tested) >= 2 and len({x for v in tested for x in v}) > 1:
            p = float(stats.kruskal(*tested).pvalue)
        out.append(
            HostInteraction(
                level=level,
                baseline=baseline,
                effect_by_host_s={h: float(pd.Series(v).median()) for h, v in groups.items()},
                pairs_by_host={h: len(v) for h, v in groups.items()},
                p_value=p,
            )
        )
    return out
