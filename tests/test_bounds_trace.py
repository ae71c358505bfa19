"""The bound on a traced link (docs/models.md section 14): hand-computed cases, and the emulator's
serialiser never beating it."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from harness.bounds.trace import (
    trace_transfer_done_s,
)
from netem.emulator.tracelink import TraceServer
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


# --- a whole request, and the agent's task, on a traced path ----------------------------


AUDIO = 354_640


def _request(link: str, **kwargs: object) -> object:
    from harness.bounds import request_time_for_link
    from netem.linkspec import resolve_link

    args = {"upload_bytes": AUDIO, "download_bytes": 5000, "protocol": "h2"}
    args.update(processing_s=0.03, connection="new")
    args.update(kwargs)
    return request_time_for_link(resolve_link(link), **args)  # type: ignore[arg-type]


@pytest.mark.parametrize("connection", ["new", "reused"])
@pytest.mark.parametrize("protocol", ["h2", "h3"])
def test_a_trace_equal_to_a_fixed_rate_gives_the_fixed_rate_bound(
    connection: str, protocol: str
) -> None:
    """The one-line trace "1" is 12 Mbit/s: the round model through it agrees with the
    fixed-rate bound within one 1 ms opportunity per window."""
    fixed = _request("rtt=200ms,rate=12mbit", connection=connection, protocol=protocol)
    traced = _request(
        "rtt=200ms,rate=trace:const-12mbit.up", connection=connection, protocol=protocol
    )
    windows = fixed.up_rounds + fixed.down_rounds  # type: ignore[attr-defined]
    assert traced.total_s == pytest.approx(fixed.total_s, abs=windows * MS)  # type: ignore[attr-defined]
    assert traced.up_rounds == fixed.up_rounds  # type: ignore[attr-defined]
    assert traced.setup_s == fixed.setup_s  # type: ignore[attr-defined]


def test_where_the_trace_is_at_the_start_decides_the_bound(tmp_path: Path) -> None:
    """100 ms at 12 Mbit/s, then 900 ms at 1.2 Mbit/s (an opportunity every 10 ms): the same
    warm upload of 50 opportunities is fast at position 0 and slow at 0.1 s."""
    stamps = list(range(1, 101)) + list(range(110, 1001, 10))
    (tmp_path / "t").write_text("\n".join(map(str, stamps)) + "\n")
    link = f"rtt=200ms,up.rate=trace:{tmp_path / 't'},down.rate=100mbit"
    size = {"upload_bytes": 75_000, "download_bytes": 0, "connection": "reused"}
    fast = _request(link, positions_s={"up": 0.0}, **size)
    slow = _request(link, positions_s={"up": 0.1}, **size)
    assert fast.serialisation_s == pytest.approx(0.050)  # type: ignore[attr-defined]
    assert slow.serialisation_s == pytest.approx(0.490)  # 100, 110, ... 590 ms
    assert slow.up_offered_bps == pytest.approx(75_000 * 8 / 0.49)  # type: ignore[attr-defined]
    assert _request(link, **size).total_s == fast.total_s  # type: ignore[attr-defined]


def test_the_standing_queue_and_a_share_slow_the_bound() -> None:
    alone = _request("rtt=200ms,rate=12mbit")
    fair = _request("rtt=200ms,rate=12mbit", shares={"up": 0.5}, extra_rtt_s=0.1)
    assert fair.rtt_s == pytest.approx(0.3)  # type: ignore[attr-defined]
    assert fair.serialisation_s > alone.serialisation_s  # type: ignore[attr-defined]
    assert fair.total_s > alone.total_s + 7 * 0.1  # type: ignore[attr-defined]


def _task(up: object, rounds: int = 20) -> object:
    from harness.bounds import agent_task_on_trace
    from harness.bounds.bottleneck import Bottleneck

    return agent_task_on_trace(
        rounds=rounds, up=up, down=Bottleneck(rate_bps=6.4e6), up_delay_s=0.1,
        down_delay_s=0.1, upload_bytes=800_000, local_s=0.3, model_s=0.08, protocol="h2",
        connection="reused", warm=True,
    )  # fmt: skip


def test_the_agents_task_on_a_constant_trace_is_the_fixed_rate_task() -> None:
    from harness.bounds import agent_task_time
    from harness.bounds.bottleneck import Bottleneck

    fixed = agent_task_time(
        rounds=20, rtt_s=0.2, up_bps=12e6, down_bps=6.4e6, upload_bytes=800_000,
        local_s=0.3, model_s=0.08, protocol="h2", connection="reused", warm=True,
    )  # fmt: skip
    traced = _task(Bottleneck(trace=capacity("1\n")))
    assert traced.total_s == pytest.approx(fixed.total_s, abs=20 * MS)  # type: ignore[attr-defined]


def test_the_chapters_sum_over_the_rates_the_trace_gave() -> None:
    """docs/models.md section 13: ten rounds at 6 Mbit/s then ten at 12 take
    11.6 + 10 * 6.4/6 + 10 * 6.4/12 = 27.6 s; the uplink changes at 16.5 s, between the
    tenth round's upload (done by 16.19 s) and the eleventh's (from 16.77 s)."""
    from harness.bounds.bottleneck import Bottleneck

    stamps = list(range(2, 16_501, 2)) + list(range(16_501, 60_001))
    task = _task(Bottleneck(trace=capacity("\n".join(map(str, stamps)))))
    assert task.total_s == pytest.approx(27.6, abs=20 * 2 * MS)  # type: ignore[attr-defined]
    rates = task.offered_bps  # type: ignore[attr-defined]
    assert rates[:10] == pytest.approx([6e6] * 10, rel=0.01)
    assert rates[10:] == pytest.approx([12e6] * 10, rel=0.01)
    # Jensen: a constant 9 Mbit/s, the rounds' mean rate, is faster (11.6 + 20 * 6.4/9 s)
    even = _task(Bottleneck(rate_bps=9e6))
    assert even.total_s == pytest.approx(11.6 + 20 * 6.4 / 9)  # type: ignore[attr-defined]
    assert even.total_s < task.total_s  # type: ignore[attr-defined]
