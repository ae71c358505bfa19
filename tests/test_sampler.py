"""The in-flight sampler's schedule and its CSV."""

from __future__ import annotations

import itertools
import statistics
import time
from pathlib import Path

import pytest

from tbcore.sampler import Sampler


def test_samples_at_the_requested_period(tmp_path: Path) -> None:
    counter = iter(range(10**9))
    sampler = Sampler(["n"], hz=1000.0)
    sampler.start(7, lambda: {"n": next(counter)})
    time.sleep(0.3)
    sampler.stop()
    times = [row[0] for row in sampler.rows]
    assert len(times) > 50
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert statistics.median(gaps) == pytest.approx(0.001, abs=0.0005)
    assert all(row[1] == 7 for row in sampler.rows)
    path = tmp_path / "s.csv"
    sampler.write_csv(path)
    lines = path.read_text().splitlines()
    assert lines[0] == "t,request_id,n" and len(lines) == len(times) + 1


@pytest.mark.parametrize(
    ("raised", "kept"),
    [
        (OSError("closed"), {}),  # the socket closed under the sampler: the request is over
        (KeyError("cwnd"), {3: "KeyError: 'cwnd'"}),  # a probe's defect: kept for the record
    ],
)
def test_a_probe_that_raises_ends_sampling(raised: Exception, kept: dict[int, str]) -> None:
    sampler = Sampler(["n"], hz=1000.0)

    def probe() -> dict[str, int]:
        raise raised

    sampler.start(3, probe)
    time.sleep(0.01)
    sampler.stop()
    assert sampler.rows == []
    assert sampler.failures == kept


def test_rate_below_one_hz_refused() -> None:
    with pytest.raises(ValueError):
        Sampler(["n"], hz=0.5)


def test_a_pushed_sample_is_a_row_like_the_threads() -> None:
    sampler = Sampler(["cwnd", "bytes_in_flight"], 100.0)
    sampler.add(12.5, 3, {"cwnd": 12000, "other": 1})
    assert sampler.rows == [(12.5, 3, 12000, None)]
