"""The reproduction report: one row per finding in the chapter's order, each with its verdict
(reproduced within the stated tolerance, differs with the reason, not measurable with why),
report.md and index.html in the campaign's directory."""

from __future__ import annotations

from pathlib import Path

from support_campaign import synthetic_campaign

from harness.report import chapter, reproduction
from harness.report.findings import Measured


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
