"""A run's drawn failures put on its link and taken off (harness.run.failures)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis.levels import levels_without_valid
from harness.run.failures import failed_edges
from tbcore.failures import draw_down
from tbcore.settings import Settings


class FakeLink:
    def __init__(self, fail_on: str | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail_on = fail_on

    def outage(self, duration_s: float, *, edge: str) -> None:
        if edge == self.fail_on:
            raise RuntimeError(f"no edge {edge}")
        assert duration_s >= 3600  # until told
        self.calls.append(("down", edge))

    def end_events(self, *, edge: str) -> int:
        self.calls.append(("up", edge))
        return 1


def test_the_drawn_edges_are_down_while_the_run_runs_and_noted(tmp_path: Path) -> None:
    settings = Settings().replace(path_failures="link=100%,link_b=100%")
    link = FakeLink()
    with failed_edges(link, settings, 5, tmp_path) as down:
        assert down == ("link", "link_b") and link.calls == [("down", "link"), ("down", "link_b")]
    assert link.calls[2:] == [("up", "link"), ("up", "link_b")]
    noted = json.loads((tmp_path / "failures.json").read_text())
    assert noted["down"] == ["link", "link_b"] and noted["seed"] == 5


def test_the_edges_come_back_when_the_run_fails_and_nothing_is_drawn_without_failures(
    tmp_path: Path,
) -> None:
    chances = "link=50%,link_b=50%"
    seed = next(s for s in range(100) if draw_down({"link": 0.5, "link_b": 0.5}, s))
    link = FakeLink()
    with pytest.raises(KeyError), failed_edges(link, Settings().replace(path_failures=chances),
                                               seed, tmp_path):  # fmt: skip
        raise KeyError("the client failed")
    assert [c for c in link.calls if c[0] == "up"] == [("up", e) for _, e in link.calls[:1]]
    broken = FakeLink(fail_on="link_b")
    with (
        pytest.raises(RuntimeError),
        failed_edges(
            broken, Settings().replace(path_failures="link=100%,link_b=100%"), 1, tmp_path / "x"
        ),
    ):
        pass
    assert broken.calls == [("down", "link"), ("up", "link")]  # what went down came back
    with failed_edges(link, Settings(), 1, tmp_path / "none") as down:
        assert down == ()
    assert not (tmp_path / "none" / "failures.json").exists()


def test_a_level_whose_trials_all_failed_has_answered_all_the_same() -> None:
    frame = pd.DataFrame(
        {"level": ["a", "both"], "warmup": [False, False], "valid": [True, True],
         "total_s": [0.01, None], "delivered": [True, False]}
    )  # fmt: skip
    assert levels_without_valid(frame) == []
    assert levels_without_valid(frame.drop(columns="delivered")) == ["both"]
