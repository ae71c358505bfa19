"""The bound on a traced link (MODELS.md section 14): hand-computed cases, and the emulator's
serialiser never beating it."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from harness.bounds.trace import (
    direction_transfer_done_s,
    trace_offered_bytes,
    trace_transfer_done_s,
)
from netem.emulator.tracelink import TraceServer
from netem.linkspec import DirectionSpec, parse_link
from netem.trace import CapacityTrace, parse_capacity
from tbcore.errors import SpecError

MS = 1e-3


def capacity(text: str) -> CapacityTrace:
    return parse_capacity(text.encode(), "t")


def done_ms(text: str, size: int, start_ms: float, offset_ms: float = 0.0) -> float:
    return round(trace_transfer_done_s(capacity(text), size, start_ms * MS, offset_ms * MS) / MS, 9)


@pytest.mark.parametrize(
    ("size", "start_ms", "expected_ms"),
    [
        (0, 3.25, 3.25),  # nothing to send: done at once
        (1, 0.0, 1.0),  # one byte waits for the first opportunity
        (1500, 0.0, 1.0),
        (1501, 0.0, 2.0),
        (15_000, 0.0, 10.0),
        (1500, 0.5, 1.0),
        (1500, 1.0, 1.0),  # an opportunity at the start instant counts ([t0, t])
        (1_500_000, 0.0, 1000.0),  # 1.5 MB at 12 Mbit/s: exactly S / B
    ],
)
def test_a_constant_twelve_megabit_trace_is_the_one_line_trace_1(
    size: int, start_ms: float, expected_ms: float
) -> None:
    assert done_ms("1\n", size, start_ms) == expected_ms


def test_the_trace_wraps_with_its_last_stamp() -> None:
    # 2 3 10 | 12 13 20 | 22 ...: four opportunities from 0 end at 12 ms
    assert done_ms("2\n3\n10\n", 4 * 1500, 0.0) == 12.0
    assert done_ms("2\n3\n10\n", 7 * 1500, 0.0) == 22.0


def test_the_offset_moves_the_start_into_the_trace() -> None:
    # positions from 2.5 ms: 3 10 12 13 -> 13 - 2.5
    assert done_ms("2\n3\n10\n", 4 * 1500, 0.0, offset_ms=2.5) == 10.5
    # start 8 ms after an offset of 2.5 ms: position 10.5, next opportunity 12 -> 9.5 ms
    assert done_ms("2\n3\n10\n", 1500, 8.0, offset_ms=2.5) == 9.5
    # an offset of a whole period and more is the same place
    assert done_ms("2\n3\n10\n", 4 * 1500, 0.0, offset_ms=22.5) == 10.5


def test_repeated_stamps_are_several_packets_in_one_millisecond() -> None:
    # 0 0 5 | 5 5 10: from 1 ms the next three opportunities are all at 5 ms
    assert done_ms("0\n0\n5\n", 3 * 1500, 1.0) == 5.0
    assert done_ms("0\n0\n5\n", 4 * 1500, 1.0) == 10.0
    assert done_ms("0\n0\n5\n", 2 * 1500, 0.0) == 0.0


def test_offered_bytes_integrate_the_opportunities() -> None:
    t = capacity("2\n3\n10\n")
    assert trace_offered_bytes(t, 0.0, 0.010) == 2 * 1500
    assert trace_offered_bytes(t, 0.0, 1.0) == 299 * 1500
    assert trace_offered_bytes(capacity("1\n"), 0.0, 1.0, offset_s=0.5) == 1000 * 1500


def test_on_a_direction_spec_with_its_offset(tmp_path: Path) -> None:
    (tmp_path / "t").write_text("2\n3\n10\n")
    spec = parse_link(f"up.rate=trace:{tmp_path / 't'},up.trace_offset=2.5ms").up
    assert direction_transfer_done_s(spec, 4 * 1500, 0.0) == pytest.approx(10.5 * MS)
    with pytest.raises(SpecError, match="rate_trace"):
        direction_transfer_done_s(DirectionSpec(rate_bps=1e6), 1500, 0.0)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((-1, 0.0), "size_bytes"),
        ((1.5, 0.0), "size_bytes"),
        ((True, 0.0), "size_bytes"),
        ((10, -1.0), "start_s"),
        ((10, float("nan")), "start_s"),
    ],
)
def test_bad_arguments_name_the_argument(args: tuple, field: str) -> None:
    with pytest.raises(SpecError) as err:
        trace_transfer_done_s(capacity("1\n"), *args)
    assert err.value.field == field


@pytest.mark.parametrize("seed", range(10))
def test_the_emulators_serialiser_meets_the_bound_and_never_beats_it(seed: int) -> None:
    """Offered all at once, a transfer's last packet leaves exactly at the bound; offered
    spread out (a sender that waits for acknowledgements), never before it."""
    rng = random.Random(seed)
    stamps = sorted(rng.randrange(0, 50) for _ in range(rng.randrange(1, 40)))
    stamps[-1] = max(stamps[-1], 1)
    trace = capacity("\n".join(map(str, stamps)))
    offset_s, start_s = rng.uniform(0, 0.2), rng.uniform(0, 0.2)
    sizes = [rng.choice((52, 600, 1500, 1500, 2900)) for _ in range(rng.randrange(1, 60))]
    bound = trace_transfer_done_s(trace, sum(sizes), start_s, offset_s)
    burst = TraceServer(trace, origin_s=0.0, offset_s=offset_s)
    assert max(burst.serve(start_s, size) for size in sizes) == pytest.approx(bound, abs=1e-12)
    spread = TraceServer(trace, origin_s=0.0, offset_s=offset_s)
    now, last = start_s, start_s
    for size in sizes:
        now += rng.choice((0.0, 0.0, 0.0003, 0.004))
        last = max(last, spread.serve(now, size))
    assert last >= bound - 1e-12
