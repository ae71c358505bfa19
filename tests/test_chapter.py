"""The chapter's findings as data: in the chapter's order, every shipped experiment among
them, every level a finding reads carried by its file's quick form, and the chapter's figures
recomputed by harness.bounds where MODELS.md has their inputs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.report import chapter
from harness.report.findings import Results
from harness.spec import experiment as specmod

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"


def test_every_shipped_experiment_reproduces_a_section_in_the_chapters_order() -> None:
    shipped = {p.stem for p in EXPERIMENTS.glob("*.toml")}
    assert set(chapter.CHAPTER_ORDER) == shipped
    sections = [chapter._section_key(f.section) for f in chapter.all_findings()]
    assert sections == sorted(sections)
    first = [next(f.section for f in chapter.FINDINGS if f.experiment == n)
             for n in chapter.CHAPTER_ORDER]  # fmt: skip
    assert [chapter._section_key(s) for s in first] == sorted(
        chapter._section_key(s) for s in first
    )


def test_the_quick_forms_carry_every_level_a_finding_reads() -> None:
    quick = {n: specmod.load(EXPERIMENTS / f"{n}.toml").quick_form() for n in chapter.CHAPTER_ORDER}
    for finding in chapter.FINDINGS:
        if finding.experiment is None:
            continue
        experiment, levels = finding.measure.levels  # type: ignore[union-attr]
        assert experiment == finding.experiment
        names = {lv.name for lv in quick[experiment].levels}
        assert set(levels) <= names, (finding.section, finding.finding, set(levels) - names)


RECOMPUTED = {
    ("§12.1.1", "12.8 s"): 12.80,
    ("§12.1.3", "105 s"): 105.4,
    ("§12.1.3", "83 s"): 83.8,
    ("§12.3.1", "12 s"): 12.00,
    ("§12.3.1", "240.9 ms"): 238.5,
    ("§12.3.2", "5.12 Mbit/s"): 5.12,
    ("§12.3.2", "46.9 s"): 46.88,
    ("§12.3.2", "5 rounds"): 5,
    ("§12.3.2", "14.4 s"): 14.41,
    ("§12.3.2", "1.38 MB, +43 ms"): 1.38,
    ("§12.3.3", "18.3 s"): 18.3,
    ("§12.3.3", "0.756 s"): 0.756,
    ("§12.3.3", "1.24 s"): 1.24,
    ("§12.3.3", "241 ms"): 241.0,
    ("§12.4.1", "302 µs"): 302.0,
    ("§12.4.1", "134 µs"): 134.0,
    ("§12.4.1", "13.4 s"): 13.43,
    ("§12.4.1", "2.1 s"): 2.06,
    ("§12.4.3", "8 s"): 8.0,
    ("§12.4.3", "10 s"): 10.0,
    ("§12.4.3", "12 s"): 12.0,
    ("§12.5.2", "64.0 s"): 64.03,
    ("§12.5.2", "11.0 s"): 11.0,
    ("§12.5.2", "31.6 s"): 31.6,
    ("§12.5.2", "3.8 Mbit/s"): 3.83,
    ("§12.5.2", "28.7 s vs 27.6 s"): 28.7,
}
"""The first number of each bound, computed for the chapter's parameters: the chapter's
figure, or (12.36 s, 1185.3 ms) a departure the file's header names."""


@pytest.mark.parametrize(("key", "expected"), RECOMPUTED.items(), ids=str)
def test_the_chapters_figures_recompute(key: tuple[str, str], expected: float) -> None:
    (finding,) = [f for f in chapter.FINDINGS if (f.section, f.chapter) == key]
    text = finding.bound(Results({}))
    first = float(re.search(r"-?\d[\d,]*\.?\d*", text).group().replace(",", ""))  # type: ignore[union-attr]
    assert first == pytest.approx(expected, rel=0.002), text


def test_the_known_departures_are_said() -> None:
    tiles = next(f for f in chapter.FINDINGS if f.chapter == "12.36 s")
    assert tiles.bound(Results({})).startswith("12.33 s") and "1, 2 and 2 MB" in tiles.differs
    direct = next(f for f in chapter.FINDINGS if (f.section, f.chapter) == ("§12.3.1", "1185.3 ms"))
    assert direct.bound(Results({})).startswith("1433.4 ms") and "TLS 1.3" in direct.differs
    computed = [f for f in chapter.all_findings() if f.experiment is None]
    assert {f.chapter for f in computed} >= {"8.192 MB", "144", "2.83x", "73 Mbit/s", "18.3 s"}
