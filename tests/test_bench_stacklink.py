"""harness.bench.stacklink: the across-the-link table's arithmetic (sans-I/O, on a frame of
runs) and its experiment text (loaded by the harness's own spec reader)."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.bench import stacklink
from harness.spec import experiment as specmod


def test_the_experiment_is_the_chapters_link_with_both_stacks() -> None:
    spec = specmod.loads(stacklink.EXPERIMENT.format(reps=2))
    assert [lv.settings.quic_stack for lv in spec.levels] == ["aioquic", "ngtcp2"]
    assert {lv.settings.cc for lv in spec.levels} == {"bbr"}
    assert spec.repetitions == 2


def test_cpu_per_datagram_and_cores_at_the_rate() -> None:
    frame = pd.DataFrame(
        {
            "quic_stack": ["ngtcp2", "ngtcp2", "aioquic"],
            "valid": [True, True, False],
            "total_s": [1.0, 2.0, 1.0],
            "data_packets": [3000, 3000, 3000],
            "ack_only_packets": [1000, 1000, 1000],
            "cpu_client_s": [0.04, 0.04, 1.0],
            "cpu_server_s": [0.02, 0.02, 1.0],
        }
    )
    [row] = stacklink.summary(frame)  # the invalid aioquic run is left out
    assert row["stack"] == "ngtcp2" and row["runs"] == 2
    assert row["client_us_per_dgram"] == pytest.approx(10.0)
    assert row["server_us_per_dgram"] == pytest.approx(5.0)
    # 0.04 s for 5 MB: at 333 Mbit/s (41.6 MB/s) that is 0.333 of a core
    assert row["client_cores_at_333mbit"] == pytest.approx(0.04 * 333e6 / 8 / 5e6)
    assert row["goodput_mbit_s"] == pytest.approx(statistics_median([40.0, 20.0]))


def statistics_median(values: list[float]) -> float:
    import statistics

    return statistics.median(values)
