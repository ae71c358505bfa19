"""The trace models: what they make, seeded, and what they refuse."""

from __future__ import annotations

import itertools
import math

import pytest

from netem.trace import parse_capacity, parse_delay
from netem.tracegen import (
    LeoModel,
    MarkovModel,
    RateState,
    constant_trace,
    fluid_stamps,
    leo_points,
    leo_trace,
    markov_spells,
    markov_trace,
)
from tbcore.errors import SpecError


def test_constant_twelve_megabit_is_one_packet_a_millisecond() -> None:
    assert constant_trace(12e6, 0.001) == "1\n"
    assert constant_trace(12e6, 0.010) == "".join(f"{i}\n" for i in range(1, 11))
    # 24 Mbit/s: two a millisecond, each stamped at the millisecond after it is complete
    assert constant_trace(24e6, 0.002) == "1\n1\n2\n2\n"


def test_fluid_stamps_carry_the_bits_across_a_change_of_rate() -> None:
    # 6 ms at 1.5 Mbit/s is 9,000 bits (no packet); 1 ms at 3 Mbit/s completes the first,
    # 4 ms more the second
    assert fluid_stamps([(0.0, 0.006, 1.5e6), (0.006, 0.011, 3e6)]) == [7, 11]


def test_markov_spells_walk_between_neighbouring_states() -> None:
    states = tuple(RateState(r, 0.05) for r in (4e6, 3e6, 2e6, 1e6))
    model = MarkovModel(states=states, duration_s=200.0, seed=3)
    spells = markov_spells(model)
    rates = [rate for _, _, rate in spells]
    index = {s.rate_bps: i for i, s in enumerate(states)}
    assert all(abs(index[a] - index[b]) == 1 for a, b in itertools.pairwise(rates))
    assert spells[0][0] == 0.0 and spells[-1][1] == 200.0
    for state in states:  # each state's mean holding time, within 4 standard errors
        holds = [end - start for start, end, rate in spells[:-1] if rate == state.rate_bps]
        assert abs(sum(holds) / len(holds) - 0.05) < 4 * 0.05 / math.sqrt(len(holds))


def test_a_markov_trace_offers_what_its_spells_hold() -> None:
    model = MarkovModel(duration_s=30.0, seed=1)
    trace = parse_capacity(markov_trace(model).encode(), "m")
    bits = sum((end - start) * rate for start, end, rate in markov_spells(model))
    assert trace.count == math.floor(bits / 12_000 + 1e-6)
    assert trace.period_ms <= 30_000


def test_the_seed_makes_the_trace() -> None:
    assert markov_trace(MarkovModel(duration_s=5.0, seed=4)) == markov_trace(
        MarkovModel(duration_s=5.0, seed=4)
    )
    assert markov_trace(MarkovModel(duration_s=5.0, seed=4)) != markov_trace(
        MarkovModel(duration_s=5.0, seed=5)
    )


def test_leo_steps_at_handovers_and_drifts_slowly_between() -> None:
    model = LeoModel(duration_s=45.0, seed=2)
    points = leo_points(model)
    assert len(points) == 4500 and points[0][0] == 0 and points[-1][0] == 44_990
    assert all(20 <= d <= 40 for _, d in points)
    for (t0, d0), (_, d1) in itertools.pairwise(points):
        if (t0 + 10) % 15_000 != 0:  # inside a handover interval: 10 ms of drift at most
            assert abs(d1 - d0) <= 0.2 * 0.010 + 0.001
    jumps = [i for i in range(1, len(points)) if abs(points[i][1] - points[i - 1][1]) > 0.5]
    assert set(jumps) <= {1500, 3000}
    trace = parse_delay(leo_trace(model).encode(), "l")
    assert trace.period_ms == 45_000


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: RateState(0.0, 1.0), "rate_bps"),
        (lambda: RateState(1e6, -1.0), "mean_hold_s"),
        (lambda: RateState(1e12, 1.0), "rate_bps"),
        (lambda: MarkovModel(states=()), "states"),
        (lambda: MarkovModel(duration_s=1e9), "duration_s"),
        (lambda: MarkovModel(start_state=4), "start_state"),
        (lambda: MarkovModel(seed=-1), "seed"),
        (lambda: constant_trace(12e6, 0.0005), "duration"),
        (lambda: LeoModel(min_delay_s=0.05, max_delay_s=0.04), "min_delay_s"),
        (lambda: LeoModel(interval_s=60.0), "interval_s"),
        (lambda: LeoModel(drift_s_per_s=float("nan")), "drift_s_per_s"),
    ],
)
def test_bad_models_name_the_parameter(make, field: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SpecError) as err:
        make()
    assert err.value.field == field
