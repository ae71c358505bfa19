"""The host as a blocking factor: medians by host, the host effect, and a level whose
effect depends on the host."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from harness.analysis.hosts import (
    host_effect_s,
    host_interactions,
    host_offsets,
    hosts_of,
    medians_by_host,
)
from harness.report.hosts import host_section


def _frame(slow_host_extra_s: float, effect_b_s: dict[str, float]) -> pd.DataFrame:
    """Six blocks (levels a and b) alternating over hosts h1, h2; h2 adds
    ``slow_host_extra_s`` to every run, and b is a's time plus its host's effect (with a
    small spread per block so that ranks are defined)."""
    rows = []
    for block in range(6):
        host = "h1" if block % 2 == 0 else "h2"
        base = 0.200 + (slow_host_extra_s if host == "h2" else 0.0) + block * 1e-4
        for position, level in enumerate(("a", "b") if block % 2 == 0 else ("b", "a")):
            total = base + (effect_b_s[host] + block * 1e-5 if level == "b" else 0.0)
            rows.append(
                dict(level=level, block=block, position=position, host=host, total_s=total,
                     valid=True, warmup=False)
            )  # fmt: skip
    rows.append(dict(level="a", block=9, position=0, host="h3", total_s=9.0, valid=False,
                     warmup=False))  # fmt: skip
    return pd.DataFrame(rows)


def test_a_slower_host_is_a_host_effect_not_an_arm_effect() -> None:
    frame = _frame(0.050, {"h1": 0.010, "h2": 0.010})
    assert hosts_of(frame) == ["h1", "h2"]  # h3's only run is invalid
    table = medians_by_host(frame, ["a", "b"])
    assert table.loc["a", "h2"] - table.loc["a", "h1"] == pytest.approx(0.050, abs=1e-3)
    offsets = host_offsets(frame, ["a", "b"])
    assert host_effect_s(offsets) == pytest.approx(0.050, abs=1e-3)
    (found,) = host_interactions(frame, {"a": "a", "b": "a"})
    assert found.effect_by_host_s["h1"] == pytest.approx(0.010, abs=1e-4)
    assert found.effect_by_host_s["h2"] == pytest.approx(0.010, abs=1e-4)
    assert not found.depends_on_host


def test_an_effect_that_differs_by_host_is_named() -> None:
    frame = _frame(0.0, {"h1": 0.010, "h2": 0.080})
    (found,) = host_interactions(frame, {"a": "a", "b": "a"})
    assert found.pairs_by_host == {"h1": 3, "h2": 3}
    assert found.p_value < 0.05 and found.depends_on_host
    lines = "\n".join(host_section({"cluster": {}}, frame, {"a": "a", "b": "a"}, []))
    assert "## Host effect" in lines
    assert "Effect depends on the host: **b**" in lines


def test_one_host_gives_no_host_effect_and_no_section_without_a_cluster() -> None:
    frame = _frame(0.0, {"h1": 0.010, "h2": 0.010})
    frame = frame[frame["host"] == "h1"]
    assert math.isnan(host_effect_s(host_offsets(frame, ["a", "b"])))
    assert host_section({}, frame, {"a": "a", "b": "a"}, []) == []
    (found,) = host_interactions(frame, {"a": "a", "b": "a"})
    assert math.isnan(found.p_value) and not found.depends_on_host
