"""harness.store.empty: every column no row of runs.csv filled gets the reason its runs give."""

from __future__ import annotations

import pandas as pd

from harness.store.empty import empty_columns


def _reasons(frame: pd.DataFrame) -> dict[str, str]:
    return {e["column"]: e["reason"] for e in empty_columns(frame)}


def test_each_empty_column_is_named_with_the_reason_its_runs_give() -> None:
    agent = pd.DataFrame({"workload": ["agent"] * 2, "loss": [0.0, 0.0], "total_s": [1.0, 2.0],
                          "ttfb_s": [None, None], "bound_mathis_s": [None, None],
                          "site_energy_j": [None, None], "mystery": [None, None]})  # fmt: skip
    got = _reasons(agent)
    assert set(got) == {"ttfb_s", "bound_mathis_s", "site_energy_j", "mystery"}
    assert "rounds.csv" in got["ttfb_s"] and "no random loss" in got["bound_mathis_s"]
    assert "site_power" in got["site_energy_j"] and "no rule" in got["mystery"]
    stream = pd.DataFrame({"workload": ["stream"], "loss": [0.0], "bound_s": [None],
                           "processing_s": [None], "below_bound": [None]})  # fmt: skip
    got = _reasons(stream)
    assert "per chunk" in got["bound_s"] and "paces" in got["processing_s"]
    assert "no request bound" in got["below_bound"]
    quic = pd.DataFrame({"workload": ["asr"], "protocol": ["h3"], "client_retransmits": [None]})
    assert "TCP_INFO" in _reasons(quic)["client_retransmits"]


def test_the_flag_columns_say_what_their_emptiness_means_for_these_runs() -> None:
    request = pd.DataFrame({"workload": ["asr"] * 2, "total_s": [1.02, 0.995],
                            "bound_s": [1.0, 1.0], "below_bound": [None, None],
                            "bound_basis": [None, None]})  # fmt: skip
    got = _reasons(request)
    assert "least time / bound: 0.995" in got["below_bound"]
    assert "only an agent run's records" in got["bound_basis"]
    agent = request.assign(workload="agent")
    assert "no run's rounds showed" in _reasons(agent)["bound_basis"]
    untimed = request.assign(total_s=[None, None])
    assert "no run has both" in _reasons(untimed)["below_bound"]
