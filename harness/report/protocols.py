"""The report's "HTTP/2 against HTTP/3" section (issue 25): for every HTTP/3 level with an
HTTP/2 level on the same path, the difference of their medians split into set-up, ordering,
congestion control, pacing, implementation and the rest (harness.analysis.protocols), with
how each part was measured, or why it could not be in this experiment."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.analysis.protocols import PARTS, Pair, decompose, stack_agreement
from harness.store.files import STREAMS_CSV


def _signed_ms(seconds: float | None) -> str:
    # + 0.0: a part that rounds to nothing reads +0.0, not -0.0
    return "–" if seconds is None else f"{round(seconds * 1e3, 1) + 0.0:+.1f}"


def _streams(result_dir: Path) -> pd.DataFrame | None:
    path = result_dir / STREAMS_CSV
    if not path.is_file():
        return None
    try:
        return pd.read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError):
        return None


def pair_lines(pairs: list[Pair]) -> list[str]:
    """The table and, per pair, how each part was measured."""
    if not pairs:
        return []
    head = ["HTTP/2", "HTTP/3", "h2 (ms)", "h3 (ms)", "h3 - h2", *PARTS]
    lines = [
        "## HTTP/2 against HTTP/3: where the difference goes",
        "",
        "Medians of the valid runs; each part is HTTP/3 minus HTTP/2 in ms, measured as said "
        "below the table (– : not separable in this experiment; the reason is given). The parts "
        "add up to the difference.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for pair in pairs:
        cells = [
            pair.h2_level,
            pair.h3_level,
            f"{pair.h2_median_s * 1e3:.1f}",
            f"{pair.h3_median_s * 1e3:.1f}",
            _signed_ms(pair.difference_s),
            *(_signed_ms(pair.part(name).delta_s) for name in PARTS),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for pair in pairs:
        hows = "; ".join(f"{p.name}: {p.how}" for p in pair.parts if p.name != "rest")
        lines.append(f"- {pair.h3_level} against {pair.h2_level}: {hows}.")
    agreement = stack_agreement(pairs)
    if agreement:
        lines += ["", *(f"- {line}" for line in agreement)]
    return [*lines, ""]


def protocols_section(result_dir: Path, frame: pd.DataFrame) -> list[str]:
    """The section for a result directory (empty without an HTTP/2-HTTP/3 pair)."""
    return pair_lines(decompose(frame, _streams(result_dir)))
