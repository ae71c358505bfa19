"""The reproduction report in headless Chromium (Debian's chromium): every image loads, no
console message, no empty table; the screenshot goes beside it. And the probe fails where it
must: a missing image, an empty table."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support_campaign import synthetic_campaign

from harness.report import browser, reproduction

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed"),
]


def test_the_report_renders_whole_in_a_real_browser(tmp_path: Path) -> None:
    campaign = synthetic_campaign(tmp_path)
    index = reproduction.write_reproduction(campaign)["html"]
    assert browser.probe(index) == []
    shot = campaign / reproduction.SCREENSHOT
    rendered = browser.render(index, shot)
    assert rendered.console == []
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    assert rendered.dom.count("<tr>") >= len(reproduction.build_rows(
        reproduction.campaign_results(campaign)[0]))  # fmt: skip
    # every experiment page it links to renders too (its plots load)
    for page in (tmp_path / "connection").glob("*/report.html"):
        assert browser.probe(page) == []


def test_the_probe_finds_a_missing_image_and_an_empty_table(tmp_path: Path) -> None:
    campaign = synthetic_campaign(tmp_path)
    index = reproduction.write_reproduction(campaign)["html"]
    (campaign / "plots" / "connection-levels.png").unlink()
    text = index.read_text()
    index.write_text(text.replace("</body>", "<table><tr><th>nothing</th></tr></table></body>"))
    problems = browser.probe(index)
    assert any(p.startswith("missing image: ") and "connection-levels.png" in p for p in problems)
    assert any(p.startswith("empty table ") for p in problems)
