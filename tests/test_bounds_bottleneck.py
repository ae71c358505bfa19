"""harness.bounds.bottleneck: a FIFO fluid server at a rate or at a trace's opportunities,
and the emulator's trace serialiser never beating it."""

from __future__ import annotations

import random

import pytest

from harness.bounds.bottleneck import Bottleneck
from harness.bounds.trace import trace_transfer_done_s
from netem.emulator.tracelink import TraceServer
from netem.trace import CapacityTrace, parse_capacity
from tbcore.errors import SpecError


def capacity(text: str) -> CapacityTrace:
    return parse_capacity(text.encode(), "t")


def test_a_fixed_rate_serves_in_order() -> None:
    link = Bottleneck(rate_bps=8e6)  # 1 MB/s
    assert link.serve(1000, 0.0) == pytest.approx(0.001)
    assert link.serve(1000, 0.0) == pytest.approx(0.002)  # behind the first
    assert link.serve(1000, 1.0) == pytest.approx(1.001)  # the queue drained meanwhile
    assert link.serve(0, 5.0) == 5.0


def test_a_share_is_that_part_of_the_rate() -> None:
    assert Bottleneck(rate_bps=8e6, share=0.25).serve(1000, 0.0) == pytest.approx(0.004)
    half = Bottleneck(trace=capacity("1\n"), share=0.5)
    assert half.serve(1500, 0.0) == pytest.approx(0.002)  # two opportunities


def test_a_trace_serves_bytes_at_its_opportunities_from_its_position() -> None:
    trace = capacity("2\n3\n10\n")  # opportunities at 2, 3, 10, 12, 13, 20 ... ms
    link = Bottleneck(trace=trace, position_s=0.0025)
    assert link.serve(1500, 0.0) == pytest.approx(0.0005)  # the one at 3 ms
    assert link.serve(3000, 0.0) == pytest.approx(0.0095)  # 10 and 12 ms
    fresh = Bottleneck(trace=trace, position_s=0.0025)
    assert fresh.serve(100, 0.0) == fresh.serve(1400, 0.0)  # sharing one opportunity


def test_it_agrees_with_the_section_14_bound_for_a_transfer_offered_at_once() -> None:
    trace = capacity("1\n1\n4\n9\n")
    for size in (1, 1500, 1501, 6000, 60_000):
        for start in (0.0, 0.0035, 0.02):
            link = Bottleneck(trace=trace)
            assert link.serve(size, start) == pytest.approx(
                trace_transfer_done_s(trace, size, start)
            )


def test_what_it_offers_over_a_window() -> None:
    assert Bottleneck(rate_bps=8e6).offered_bytes(0.0, 2.0) == pytest.approx(2e6)
    trace = Bottleneck(trace=capacity("1\n"), position_s=0.5)
    assert trace.offered_bytes(0.0, 0.010) == 10 * 1500


@pytest.mark.parametrize("seed", range(10))
def test_the_emulators_serialiser_never_beats_it(seed: int) -> None:
    """Packets offered at any moments: the emulator (mm-link's byte accounting) lets none
    leave before the fluid server has carried it."""
    rng = random.Random(seed)
    stamps = sorted(rng.randrange(0, 40) for _ in range(rng.randrange(1, 30)))
    stamps[-1] = max(stamps[-1], 1)
    trace = capacity("\n".join(map(str, stamps)))
    position = rng.uniform(0, 0.1)
    fluid = Bottleneck(trace=trace, position_s=position)
    real = TraceServer(trace, origin_s=0.0, offset_s=position)
    now = 0.0
    for _ in range(rng.randrange(1, 50)):
        now += rng.choice((0.0, 0.0, 0.0005, 0.003))
        size = rng.choice((52, 600, 1500, 2900))
        assert real.serve(now, size) >= fluid.serve(size, now) - 1e-12


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({}, "rate_bps"),
        ({"rate_bps": 1e6, "trace": capacity("1\n")}, "rate_bps"),
        ({"rate_bps": 0.0}, "rate_bps"),
        ({"rate_bps": 1e6, "share": 0.0}, "share"),
        ({"rate_bps": 1e6, "share": 1.5}, "share"),
        ({"trace": capacity("1\n"), "position_s": -1.0}, "position_s"),
        ({"trace": "1\n"}, "trace"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs: dict, field: str) -> None:
    with pytest.raises(SpecError) as err:
        Bottleneck(**kwargs)
    assert err.value.field == field
