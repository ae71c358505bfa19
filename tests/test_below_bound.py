"""A run below its lower bound names the premise the bound took that it did not meet."""

from __future__ import annotations

import pytest

from harness.validity import below_bound as below
from tbcore.settings import Settings


def test_within_the_stated_errors_is_not_below() -> None:
    row = {"total_s": 0.2380, "bound_s": 0.2385, "bound_serialisation_s": 0.0085}
    assert below.tolerance_s(row) == pytest.approx(1e-6 + 1e-3 + 8.5e-6)
    assert below.below_bound(row) is None
    assert below.below_bound({"total_s": 0.5, "bound_s": 0.2}) is None  # above
    assert below.below_bound({"total_s": 0.1, "bound_s": None}) is None  # no bound


def test_the_tolerance_grows_with_round_trips_and_a_remote_clock() -> None:
    row = {"flights_up": 5, "flights_down": 1, "server_clock_error_s": 2e-4}
    assert below.tolerance_s(row) == pytest.approx(2e-4 + 6e-3)


def test_below_names_the_premise_the_row_shows_unmet() -> None:
    row = {
        "total_s": 0.60, "bound_s": 1.43, "rtt_s": 0.2, "measured_rtt_s": 0.1,
        "handshake_s": 0.2, "bound_setup_s": 0.4, "resumed": True,
        "processing_s": 0.03, "bound_processing_s": 0.03,
    }  # fmt: skip
    text = below.below_bound(row)
    assert text is not None and text.startswith("0.420 x the bound (830.0 ms below")
    assert "the configured round trip: the handshake's round trip was 100.0 ms" in text
    assert "the set-up took 200.0 ms (the session was resumed)" in text
    assert "processing" not in text


def test_an_agent_that_rode_through_its_outage_is_named() -> None:
    settings = Settings(
        workload="agent", agent_rounds=30, outage_after_round=9, recovery="restart",
        agent_model_s=1.0,
    )  # fmt: skip
    row = {"total_s": 40.0, "bound_s": 60.4, "agent_redone": 0, "agent_rounds_done": 30,
           "site_busy_s": 30.0}  # fmt: skip
    text = below.below_bound(row, settings)
    assert text is not None and text.startswith("0.662 x the bound")
    assert (
        "an outage loses the round in flight and the recovery redoes it: the run redid 0 "
        "round(s): the transport rode through the outage" in text
    )


def test_below_with_nothing_to_show_says_so() -> None:
    text = below.below_bound({"total_s": 1.0, "bound_s": 2.0})
    assert text is not None and text.endswith(
        "premise not met: none the run's records show unmet (the bound's inputs as configured)"
    )
