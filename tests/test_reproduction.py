"""The reproduction report: one row per finding in the chapter's order, each with its verdict
(reproduced within the stated tolerance, differs with the reason, not measurable with why),
report.md and index.html in the campaign's directory."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from support_campaign import synthetic_campaign

from harness.report import chapter, chapter_measures, reproduction
from harness.report.findings import Measured, NotMeasured, Results


def _finding(**kw: object) -> chapter.Finding:
    base = dict(section="§1.1", finding="f", chapter="10 s", experiment="x", value=10.0,
                unit="s")  # fmt: skip
    return chapter.Finding(**{**base, **kw})  # type: ignore[arg-type]


def test_verdicts() -> None:
    assert reproduction.judge(_finding(), Measured("", 10.9)) == (
        "reproduced",
        "reproduced (within 10%: +9.0%)",
    )
    kind, text = reproduction.judge(_finding(differs="TLS adds a round trip"), Measured("", 12.0))
    assert kind == "differs" and text == "differs (+20%): TLS adds a round trip"
    kind, text = reproduction.judge(_finding(), Measured("", 5.0))
    assert text == "differs (-50%): measured 5.00 s against the chapter's 10 s"
    assert reproduction.judge(_finding(value=None), Measured("", ok=True))[0] == "reproduced"
    kind, text = reproduction.judge(_finding(value=None), Measured("", ok=False, reason="why"))
    assert (kind, text) == ("differs", "differs: why")
    assert reproduction.judge(_finding(value=5.0, tolerance=0.0), Measured("", 5.0))[1] == (
        "reproduced (exactly: +0.0%)"
    )


def test_a_campaign_gets_one_row_per_finding_with_a_verdict(tmp_path: Path) -> None:
    campaign = synthetic_campaign(tmp_path, below=True)
    written = reproduction.write_reproduction(campaign)
    text = written["md"].read_text()
    header = "| section | finding | chapter | bound | measured | verdict | experiment |"
    assert header in text
    rows = [line for line in text.splitlines() if line.startswith("| §")]
    assert len(rows) == len(chapter.all_findings())
    assert all(line.split(" | ")[5].strip() for line in rows)  # every row has a verdict
    direct = next(r for r in rows if "| 1185.3 ms |" in r and "connection" in r.split("|")[-2])
    assert "1449.0 ms (connection/h2-new, 95 % CI" in direct
    assert "differs (+22%): HTTP/2 over TLS 1.3 adds a round trip" in direct
    assert "[connection](../../connection/" in direct
    reused = next(r for r in rows if "| 240.9 ms |" in r and "connection" in r.split("|")[-2])
    assert "reproduced (within 10%: +0.1%)" in reused
    ack = next(r for r in rows if "Fewer ACKs" in r)
    assert "not measurable: ack: failed: RuntimeError: the link went away" in ack
    mathis = next(r for r in rows if "Mathis" in r)
    assert "not measurable (a computation)" in mathis and "18.3 s (MODELS 8)" in mathis
    assert "Runs below their lower bound (runs.csv below_bound): 2 of 6 measured runs: " in text
    assert "wall time 30.0 min" in text
    html = written["html"].read_text()
    assert "<th>verdict</th>" in html and "<script" not in html
    assert (campaign / "plots" / "connection-levels.png").is_file()
    assert (tmp_path / "connection").glob("*/report.html")


def _hol_results(tmp_path: Path, h2_held: list[int], h3_held: list[int]) -> Results:
    rows = []
    for level, held in (("h2-l3.6", h2_held), ("h3-l3.6", h3_held)):
        for rep, n in enumerate(held):
            for stream, chunks in (("audio:tts", 22), ("image:result", 306)):
                rows.append({"run_id": f"{level}-{rep}", "level": level, "stream": stream,
                             "chunks": chunks, "held_chunks": n if stream == "audio:tts" else 0,
                             "held_max_s": 0.15 * bool(n), "valid": True})  # fmt: skip
    (tmp_path / "hol").mkdir(parents=True)
    pd.DataFrame(rows).to_csv(tmp_path / "hol" / "streams.csv", index=False)
    return Results({"hol": tmp_path / "hol"})


def test_hol_counts_audio_chunks_held_behind_the_image(tmp_path: Path) -> None:
    measured = chapter_measures.hol(_hol_results(tmp_path, [4, 6, 0], [0, 0, 0]))
    assert measured.ok
    assert "4 of 22 on HTTP/2 (longest 150 ms), 0 of 22 on HTTP/3" in measured.text
    held_on_h3 = chapter_measures.hol(_hol_results(tmp_path / "b", [4], [1]))
    assert not held_on_h3.ok


def test_hol_without_the_levels_is_not_measured(tmp_path: Path) -> None:
    (tmp_path / "hol").mkdir()
    pd.DataFrame([{"run_id": "r", "level": "h2-l0", "stream": "audio:tts", "chunks": 22,
                   "held_chunks": 0, "held_max_s": 0.0, "valid": True}]).to_csv(
        tmp_path / "hol" / "streams.csv", index=False)  # fmt: skip
    with pytest.raises(NotMeasured, match=r"3\.6 % levels"):
        chapter_measures.hol(Results({"hol": tmp_path / "hol"}))


@pytest.mark.parametrize(
    "finding", chapter.FINDINGS, ids=[f"{f.section} {f.finding[:30]}" for f in chapter.FINDINGS]
)
def test_every_bound_is_computed_or_says_what_it_lacks(finding: chapter.Finding) -> None:
    """A bound that raises anything but NotMeasured (an import gone missing, a name moved)
    would read "not computed" in every campaign's report: none may."""
    try:
        text = finding.bound(Results({}))
    except NotMeasured:
        return
    assert isinstance(text, str) and text
