"""Every document the code and the docs cite is in the repository: no citation of a note
kept outside it (a user who clones the project must be able to read what the code cites)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTSIDE = re.compile(r"\b(MODELS|DESIGN|STYLE|NOTES-machine)\.md\b")
CITED = re.compile(r"\bdocs/([a-z0-9-]+\.md)\b")


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:  # not a git checkout (an unpacked archive): every file
        return [p for p in ROOT.rglob("*") if p.is_file() and ".venv" not in p.parts]
    return [ROOT / line for line in out.stdout.splitlines()]


def test_no_citation_of_a_note_outside_the_repository() -> None:
    hits = []
    for path in _tracked():
        if path.suffix not in (".py", ".md", ".toml", ".sh", ".yml") or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}")
    assert hits == []


def test_every_cited_doc_exists() -> None:
    cited = set()
    for path in _tracked():
        if path.suffix in (".py", ".md", ".toml") and path.is_file():
            cited |= set(CITED.findall(path.read_text(errors="replace")))
    assert cited >= {"models.md", "design.md", "machine.md"}
    assert [name for name in sorted(cited) if not (ROOT / "docs" / name).is_file()] == []
