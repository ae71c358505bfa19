"""The reproduction report in a real browser: Debian's chromium, headless (harness/install.sh
installs it). :func:`render` loads a page and writes its screenshot, returning the console
messages and the DOM; :func:`probe` loads a copy of the page with a checking script appended
(the page itself has none) and returns what is wrong with it: an image that did not load, an
empty table, a console message.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tbcore.errors import SpecError

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--log-level=0",
)
"""Headless, no sandbox (root in a container), nothing fetched from the network, console
messages logged to stderr (``INFO:CONSOLE``)."""
WINDOW = "1400,3000"
"""The screenshot's size: the findings table fits its height."""
TIMEOUT_S = 90.0
VIRTUAL_TIME_BUDGET_MS = 5000
"""Time the page gets to load its images before the DOM is read (virtual: no wait)."""
CONSOLE = re.compile(r":CONSOLE[:(]\d+\)?\] \"(.*)\", source: (.*) \(\d+\)$")

PROBE_SCRIPT = """<script>
window.addEventListener("load", function () {
  for (const img of document.images) {
    if (!img.complete || img.naturalWidth === 0) console.error("missing image: " + img.src);
  }
  document.querySelectorAll("table").forEach(function (t, i) {
    if (t.querySelectorAll("tbody tr, tr").length < 2) console.error("empty table " + i);
  });
});
</script>"""
"""Appended to a copy of the page: every problem becomes a console message."""


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise SpecError("browser", "chromium is not installed (harness/install.sh installs it)")


@dataclass(frozen=True)
class Rendered:
    console: list[str]
    """Console messages of the page (a page without scripts has none)."""
    dom: str


def _run(page: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="tb-chromium-") as profile:
        return subprocess.run(
            [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra,
             Path(page).resolve().as_uri()],
            capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
        )  # fmt: skip


def console_messages(stderr: str) -> list[str]:
    return [
        f"{m.group(1)} ({m.group(2)})"
        for line in stderr.splitlines()
        if (m := CONSOLE.search(line))
    ]


def render(page: Path, screenshot: Path | None = None) -> Rendered:
    """Load ``page``; its DOM and console messages (and a PNG screenshot when asked)."""
    done = _run(page, f"--virtual-time-budget={VIRTUAL_TIME_BUDGET_MS}", "--dump-dom")
    if done.returncode != 0:
        raise SpecError("browser", f"chromium exited {done.returncode}: {done.stderr[-300:]}")
    if screenshot is not None:
        shot = _run(page, f"--screenshot={Path(screenshot).resolve()}", f"--window-size={WINDOW}")
        if shot.returncode != 0 or not Path(screenshot).is_file():
            raise SpecError("browser", f"no screenshot: {shot.stderr[-300:]}")
    return Rendered(console_messages(done.stderr), done.stdout)


def probe(page: Path) -> list[str]:
    """What is wrong with ``page`` in the browser: console messages of the page itself, images
    that did not load and empty tables (a checking copy beside it, removed after)."""
    page = Path(page)
    problems = render(page).console
    copy = page.with_name(f".probe-{page.name}")
    text = page.read_text(encoding="utf-8")
    copy.write_text(text.replace("</body>", PROBE_SCRIPT + "</body>"), encoding="utf-8")
    try:
        problems += render(copy).console
    finally:
        copy.unlink(missing_ok=True)
    return problems
