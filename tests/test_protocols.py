"""harness.analysis.protocols and its report section: an HTTP/2-HTTP/3 difference split into
set-up, ordering, congestion control, pacing, implementation and the rest, each measured or
named as not separable, never silently 0."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from harness.analysis.protocols import PARTS, decompose
from harness.report.protocols import pair_lines

LINK = "rtt=200ms,rate=333mbit"


def _runs(level: str, protocol: str, totals: list[float], **kw: object) -> list[dict]:
    base = {
        "level": level, "protocol": protocol, "cc": "bbr", "paced": True, "link": LINK,
        "workload": "tts", "connection": "new",
        "quic_stack": "aioquic" if protocol == "h3" else None,
        "handshake_s": 0.4 if protocol == "h2" else 0.2, "valid": True, "warmup": False,
    }  # fmt: skip
    base.update(kw)
    return [{**base, "run_id": f"{level}-{i}", "total_s": t} for i, t in enumerate(totals)]


def _frame(*groups: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([row for group in groups for row in group])


def test_parts_add_up_and_unmeasured_ones_are_none_with_a_reason() -> None:
    frame = _frame(_runs("h2", "h2", [1.5, 1.6, 1.7]), _runs("h3", "h3", [1.4, 1.45, 1.5]))
    (pair,) = decompose(frame)
    assert (pair.h2_level, pair.h3_level) == ("h2", "h3")
    assert math.isclose(pair.difference_s, -0.15)
    assert math.isclose(pair.part("set-up").delta_s, -0.2)
    assert pair.part("congestion control").delta_s == 0.0
    assert pair.part("pacing").delta_s == 0.0  # both pace
    assert pair.part("ordering").delta_s is None and "streams.csv" in pair.part("ordering").how
    assert pair.part("implementation").delta_s is None
    measured = sum(p.delta_s for p in pair.parts if p.delta_s is not None)
    assert math.isclose(measured, pair.difference_s)
    assert [p.name for p in pair.parts] == list(PARTS)


def test_different_controls_are_not_separable_and_the_same_cc_is_preferred() -> None:
    frame = _frame(
        _runs("h2-cubic", "h2", [2.0], cc="cubic"),
        _runs("h2-bbr", "h2", [1.6]),
        _runs("h3-reno", "h3", [1.5], cc="reno"),
        _runs("h3-bbr", "h3", [1.4]),
    )
    pairs = {p.h3_level: p for p in decompose(frame)}
    assert pairs["h3-bbr"].h2_level == "h2-bbr"
    reno = pairs["h3-reno"]
    assert reno.part("congestion control").delta_s is None
    assert "not separable" in reno.part("congestion control").how


def test_pacing_measured_against_the_unpaced_level_and_taken_out_of_the_implementation() -> None:
    frame = _frame(
        _runs("h2", "h2", [1.6], paced=False),
        _runs("aioquic", "h3", [1.45]),
        _runs("aioquic-unpaced", "h3", [1.25], paced=False, link=LINK),
        _runs("ngtcp2", "h3", [1.21], paced=False, quic_stack="ngtcp2"),
    )
    pair = next(p for p in decompose(frame) if p.h3_level == "aioquic")
    assert math.isclose(pair.part("pacing").delta_s, 0.2)  # aioquic - aioquic-unpaced
    # aioquic - ngtcp2 = 0.24, of which 0.2 is aioquic's pacer
    assert math.isclose(pair.part("implementation").delta_s, 0.04)
    assert "less the pacing part" in pair.part("implementation").how


def test_implementation_without_a_pacing_control_says_it_holds_both() -> None:
    frame = _frame(
        _runs("h2", "h2", [1.6]),
        _runs("aioquic", "h3", [1.45]),
        _runs("ngtcp2", "h3", [1.21], paced=False, quic_stack="ngtcp2"),
    )
    pair = next(p for p in decompose(frame) if p.h3_level == "aioquic")
    assert math.isclose(pair.part("implementation").delta_s, 0.24)
    assert "one paces" in pair.part("implementation").how


def test_ordering_from_the_last_stream_and_zero_on_one_stream() -> None:
    frame = _frame(_runs("h2", "h2", [2.0]), _runs("h3", "h3", [1.8]))
    streams = pd.DataFrame(
        [
            {"run_id": "h2-0", "level": "h2", "request_id": 0, "stream": "audio",
             "delivered_s": 1.0, "hol_transport_s": 0.3, "valid": True},
            {"run_id": "h2-0", "level": "h2", "request_id": 0, "stream": "image",
             "delivered_s": 2.0, "hol_transport_s": 0.2, "valid": True},
            {"run_id": "h3-0", "level": "h3", "request_id": 0, "stream": "audio",
             "delivered_s": 1.8, "hol_transport_s": 0.0, "valid": True},
        ]
    )  # fmt: skip
    (pair,) = decompose(frame, streams)
    # h2's request ended with the image (0.2 s behind a hole); h3 had one stream: 0
    assert math.isclose(pair.part("ordering").delta_s, -0.2)


def test_different_paths_are_not_paired_and_invalid_runs_not_counted() -> None:
    frame = _frame(
        _runs("h2", "h2", [1.6]),
        _runs("h3-lossy", "h3", [9.0], link=LINK + ",down.loss=14%"),
        _runs("h3", "h3", [1.4, 99.0]),
    )
    frame.loc[frame["total_s"] == 99.0, "valid"] = False
    pairs = decompose(frame)
    assert [p.h3_level for p in pairs] == ["h3"]
    assert pairs[0].h3_median_s == pytest.approx(1.4)


def test_section_table_and_the_hows() -> None:
    frame = _frame(_runs("h2", "h2", [1.6]), _runs("h3", "h3", [1.4]))
    text = "\n".join(pair_lines(decompose(frame)))
    assert "## HTTP/2 against HTTP/3: where the difference goes" in text
    assert "| h2 | h3 | 1600.0 | 1400.0 | -200.0 | -200.0 | – | +0.0 | +0.0 | – | +0.0 |" in text
    assert "implementation: no level runs the request on another QUIC stack" in text
    assert pair_lines([]) == []


def test_a_result_that_holds_on_one_stack_only_says_so() -> None:
    from harness.analysis.protocols import stack_agreement

    h2 = _runs("h2", "h2", [1.5, 1.5, 1.5])
    aio = _runs("h3-aioquic", "h3", [1.6, 1.6, 1.6])
    native = _runs("h3-ngtcp2", "h3", [1.3, 1.3, 1.3], quic_stack="ngtcp2")
    [line] = stack_agreement(decompose(_frame(h2, aio, native)))
    assert "faster on ngtcp2 only and slower on aioquic" in line and "the stack's" in line
    assert "the stack's" in "\n".join(pair_lines(decompose(_frame(h2, aio, native))))
    both = _runs("h3-aioquic", "h3", [1.4, 1.4, 1.4])
    [line] = stack_agreement(decompose(_frame(h2, both, native)))
    assert line.startswith("Against h2, HTTP/3 is faster on every QUIC stack")
    assert stack_agreement(decompose(_frame(h2, aio))) == []  # one stack: nothing to say
