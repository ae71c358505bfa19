"""harness.bounds: every worked example of docs/models.md, the request bound, and invariants."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support_bounds import VOICE_REQUEST, voice_request

from harness import bounds
from harness.bounds import (
    Playback,
    buffer_depletion_s,
    direction_rounds,
    duplicate_failure,
    fec_repair_symbols,
    fec_request_time,
    fec_success_probability,
    mathis_throughput_bps,
    pipeline,
    playback,
    relay_request_time,
    request_time,
    request_time_for_link,
    retransmission_rounds,
    retransmission_time_s,
    serial_time,
    setup_rtts,
    setup_time_s,
    slow_start_rounds,
    split_fractions,
    split_time_s,
    window_throughput_bps,
    wire_bytes,
)
from tbcore.errors import SpecError

pytestmark = pytest.mark.timeout(120)

MBIT = 1e6
AUDIO = 354_640


def at(value: float, printed: str) -> bool:
    """``value`` rounds to ``printed`` at the precision docs/models.md prints."""
    decimals = len(printed.partition(".")[2])
    return f"{value:.{decimals}f}" == printed


# --- the worked examples, each computed directly ----------------------------------------


def test_serial_image_example_is_12_8_s() -> None:
    seconds = serial_time(30_000_000, 5_000_000, 20 * MBIT, 100 * MBIT, 0.1, 0.3)
    assert at(seconds, "12.8")
    assert seconds == pytest.approx(12 + 0.1 + 0.3 + 0.4)


def test_serial_voice_example_is_0_2385_s() -> None:
    seconds = serial_time(AUDIO, 0, 333 * MBIT, 333 * MBIT, 0.2, 0.030)
    assert at(seconds, "0.2385")  # the seed's 238.5 ms "ideal" request


def test_window_example_is_5_12_mbit_and_46_9_s() -> None:
    rate = window_throughput_bps(64_000, 0.1, 20 * MBIT)
    assert at(rate / MBIT, "5.12")
    assert at(30_000_000 * 8 / rate, "46.9")
    assert bounds.bdp_bytes(20 * MBIT, 0.1) == pytest.approx(250_000)


def test_slow_start_example_is_5_rounds() -> None:
    assert slow_start_rounds(AUDIO) == 5
    assert slow_start_rounds(219_000) == 4  # 4 rounds allow exactly 219,000 bytes
    assert slow_start_rounds(219_001) == 5
    assert slow_start_rounds(452_600) == 5
    assert slow_start_rounds(452_601) == 6


def test_mathis_example_is_0_155_mbit_and_18_3_s() -> None:
    rate = mathis_throughput_bps(1448, 0.2, 0.14)
    assert at(rate / MBIT, "0.155")
    assert at(AUDIO * 8 / rate, "18.3")
    periodic = mathis_throughput_bps(1448, 0.2, 0.14, c=bounds.MATHIS_C_PERIODIC)
    assert periodic / rate == pytest.approx(math.sqrt(1.5))
    assert mathis_throughput_bps(1448, 0.2, 0.0) == math.inf


def test_retransmission_example_is_0_756_s_and_p99_1_24_s_in_6_rounds() -> None:
    packets, _ = wire_bytes(AUDIO, 1448, 0, 0)
    assert packets == 245
    base = serial_time(AUDIO, 0, 333 * MBIT, 333 * MBIT, 0.2, 0.030)
    assert at(retransmission_time_s(base, 0.2, packets, 0.14), "0.756")
    assert retransmission_rounds(packets, 0.14, quantile=0.99) == 6
    assert at(retransmission_time_s(base, 0.2, packets, 0.14, quantile=0.99), "1.24")


def test_fec_example_is_63_repair_symbols() -> None:
    repair = fec_repair_symbols(245, 0.14, 0.999)
    assert repair == 63
    assert at(100 * repair / 245, "25.7")
    assert fec_success_probability(245, 63, 0.14) >= 0.999
    assert fec_success_probability(245, 62, 0.14) < 0.999
    block = serial_time((245 + repair) * 1448, 0, 333 * MBIT, 333 * MBIT, 0.2, 0.030)
    assert at(block, "0.241")


def test_setup_example_is_12_s_per_round_vs_0_4_s_once() -> None:
    assert setup_time_s("h2", "new", 0.2, requests=30) == pytest.approx(12.0)
    assert setup_time_s("h2", "new", 0.2) == pytest.approx(0.4)


def test_worked_examples_table_matches_models_md() -> None:
    examples = bounds.worked_examples()
    assert len(examples) >= 12
    assert [e.name for e in examples if not e.matches()] == []
    printed = {e.printed for e in examples}
    for value in ("12.8", "0.2385", "5.12", "46.9", "5", "0.155", "18.3", "0.756", "1.24", "63"):
        assert value in printed


# --- the other functions ----------------------------------------------------------------


def test_pipeline_recurrence_by_hand() -> None:
    # chunk 1 waits for the processor (data dependency), chunk 2 for the egress
    arrivals = pipeline([0.0, 0.0, 0.5], [1.0, 1.0, 0.1], [0.5, 2.0, 0.1], [0.1, 0.1, 0.1])
    # c = 1, 2, 2.1; u = 1.5, 4.0, 4.1; r = 1.6, 4.1, 4.2
    assert arrivals == pytest.approx([1.6, 4.1, 4.2])


def test_playback_by_hand() -> None:
    result = playback([0.0, 0.1, 0.5, 0.55], chunk_s=0.1, initial_buffer_s=0.2)
    # p0 = 0.2, p1 = 0.3, p2 = max(0.5, 0.4) = 0.5 (stall 0.1), p3 = 0.6
    assert isinstance(result, Playback)
    assert result.start_s == pytest.approx([0.2, 0.3, 0.5, 0.6])
    assert result.stall_s == pytest.approx(0.1)
    assert result.stall_count == 1


def test_buffer_depletion() -> None:
    assert buffer_depletion_s(8e6, 2e6, 1e6) == pytest.approx(8.0)
    assert buffer_depletion_s(8e6, 2e6, 2e6) == math.inf
    assert buffer_depletion_s(8e6, 2e6, 0.0) == pytest.approx(4.0)  # an outage


def test_wire_bytes_counts_headers_and_acks() -> None:
    assert wire_bytes(3000, 1448, 52, 52) == (3, 3000 + 3 * 104)
    assert wire_bytes(0, 1448, 52, 52) == (0, 0)
    assert wire_bytes(1448, 1448, 52, 0) == (1, 1500)


def test_split_and_duplicate() -> None:
    assert split_fractions([10 * MBIT, 30 * MBIT]) == pytest.approx([0.25, 0.75])
    assert split_time_s(5_000_000, [10 * MBIT, 30 * MBIT]) == pytest.approx(1.0)
    assert split_time_s(5_000_000, [10 * MBIT, 30 * MBIT], exit_bps=20 * MBIT) == pytest.approx(2)
    assert duplicate_failure(0.1, 0.2) == pytest.approx(0.02)
    assert duplicate_failure(0.1, 0.2, shared=0.5) == pytest.approx(0.5 + 0.5 * 0.02)
    assert duplicate_failure(1.0, 1.0) == 1.0


def test_retransmission_rounds_small_cases_exact() -> None:
    for p in (0.0, 0.1, 0.5, 0.9):
        # one packet: K is geometric, E[K] = 1 / (1 - p)
        assert retransmission_rounds(1, p) == pytest.approx(1 / (1 - p), rel=1e-12)
    assert retransmission_rounds(0, 0.5) == 0.0
    assert retransmission_rounds(0, 0.5, quantile=0.99) == 0
    assert retransmission_rounds(100, 0.0) == 1.0
    assert retransmission_rounds(100, 0.0, quantile=0.99) == 1
    # one packet at p = 0.5: P(K <= k) = 1 - 0.5^k; 0.99 needs k = 7 (0.9921875)
    assert retransmission_rounds(1, 0.5, quantile=0.99) == 7


def test_fec_success_matches_exact_fractions() -> None:
    def exact(k: int, r: int, p: float) -> float:
        q = Fraction(p)
        n = k + r
        return float(sum(math.comb(n, i) * q**i * (1 - q) ** (n - i) for i in range(r + 1)))

    for k, r, p in ((10, 0, 0.1), (10, 3, 0.1), (50, 20, 0.3), (245, 63, 0.14), (40, 5, 0.01)):
        assert fec_success_probability(k, r, p) == pytest.approx(exact(k, r, p), rel=1e-9)
    assert fec_repair_symbols(100, 0.0) == 0


def test_setup_rtts_table() -> None:
    assert setup_rtts("h2", "new") == 2
    assert setup_rtts("h3", "new") == 1
    assert setup_rtts("h3", "0rtt") == 0
    assert setup_rtts("h2", "reused") == setup_rtts("h3", "reused") == 0
    assert setup_rtts("h2", "0rtt") == 1  # TLS early data still waits for TCP's handshake


# --- the request bound ------------------------------------------------------------------


def test_request_reused_is_the_serial_bound() -> None:
    bound = voice_request()
    assert at(bound.total_s, "0.2385")
    assert bound.setup_s == 0 and bound.feedback_s == 0 and bound.window_s == 0
    assert bound.up_rounds == 1
    assert bound.retransmission_s == 0 and bound.expected_s == bound.total_s


def test_request_loss_is_a_separate_part_and_gives_0_756_s() -> None:
    bound = voice_request(up_loss=0.14)
    assert at(bound.total_s, "0.2385")  # not mixed into the loss-free bound
    assert at(bound.expected_s, "0.756")
    assert bound.retransmission_s == pytest.approx(bound.expected_s - bound.total_s)
    assert bound.up_retransmission_rounds == pytest.approx(retransmission_rounds(245, 0.14))
    assert bound.down_retransmission_rounds == 0.0  # no bytes down


def test_request_new_h2_counts_handshakes_and_slow_start_rounds() -> None:
    bound = voice_request(connection="new")
    assert bound.setup_rtts == 2 and bound.setup_s == pytest.approx(0.4)
    assert bound.up_rounds == 5  # 10, 20, 40, 80, 160 segments of 1448 bytes
    # the serialisation of earlier windows overlaps their ACK wait: idle = R + MSS/B - w/B
    byte_s = 8 / (333 * MBIT)
    windows = [14_480, 28_960, 57_920, 115_840]
    idle = sum(0.2 + 1448 * byte_s - w * byte_s for w in windows)
    assert bound.feedback_s == pytest.approx(idle)
    assert bound.total_s == pytest.approx(0.4 + idle + AUDIO * byte_s + 0.2 + 0.030)
    # TCP without TLS would be 1 RTT less; the emulator measured 1209.6 ms (reno) for that
    assert bound.total_s - 0.2 - 0.030 < 1.2096


def test_request_h3_new_is_one_rtt_and_0rtt_none() -> None:
    assert voice_request(protocol="h3", connection="new").setup_s == pytest.approx(0.2)
    assert voice_request(protocol="h3", connection="0rtt").setup_s == 0.0
    assert voice_request(protocol="h3").mss_bytes == bounds.QUIC_MAX_DATAGRAM_BYTES
    assert voice_request(protocol="h2").mss_bytes == bounds.TCP_MSS_BYTES
    # 0-RTT still starts with a cold window
    assert voice_request(protocol="h3", connection="0rtt").feedback_s > 0


def test_request_window_cap_reports_window_stalls() -> None:
    bound = voice_request(window_bytes=64_000)
    assert bound.feedback_s == 0.0  # warm: the window is at its cap from the start
    assert bound.up_rounds == math.ceil(AUDIO / 64_000)
    assert bound.window_s > 0
    assert bound.total_s > voice_request().total_s


def test_request_parts_sum_and_record() -> None:
    bound = voice_request(connection="new", download_bytes=50_000, loss=0.1, window_bytes=100_000)
    parts = bound.parts()
    assert list(parts) == list(bounds.RequestBound.PARTS)
    assert math.fsum(v for k, v in parts.items() if k != "retransmission_s") == pytest.approx(
        bound.total_s
    )
    record = bound.to_dict()
    assert record["total_s"] == bound.total_s and record["expected_s"] == bound.expected_s
    assert record["upload_bytes"] == AUDIO and record["down_loss"] == 0.1


def test_request_for_link_uses_each_directions_loss() -> None:
    from netem.linkspec import resolve_link

    bound = request_time_for_link(
        resolve_link("dc-longhaul"),
        upload_bytes=AUDIO,
        download_bytes=0,
        protocol="h2",
        connection="reused",
        processing_s=0.030,
    )
    assert at(bound.total_s, "0.2385")
    assert bound.up_loss == 0.0 and bound.down_loss == pytest.approx(0.14)
    assert bound.retransmission_s == 0.0  # the lossy direction carries no bytes here
    with pytest.raises(SpecError, match="rate"):
        request_time_for_link(
            resolve_link("rtt=200ms"),
            upload_bytes=1,
            download_bytes=1,
            protocol="h2",
            connection="new",
        )


def test_direction_rounds_by_hand() -> None:
    # 1,000,000 bytes/s: a 10,000-byte window takes 10 ms
    rounds = direction_rounds(
        50_000, 8e6, 0.1, initial_window_bytes=10_000, mss_bytes=1000, window_bytes=None
    )
    assert rounds.rounds == 3
    assert rounds.feedback_s == pytest.approx((0.1 + 0.001 - 0.01) + (0.1 + 0.001 - 0.02))
    capped = direction_rounds(
        50_000, 8e6, 0.1, initial_window_bytes=10_000, mss_bytes=1000, window_bytes=15_000
    )
    assert capped.rounds == 4  # 10,000 then 15,000 x 3
    assert capped.feedback_s == pytest.approx(0.091)
    assert capped.window_s == pytest.approx(2 * (0.1 + 0.001 - 0.015))
    # once a window outlasts the round trip there is nothing to wait for
    fast = direction_rounds(50_000, 8e6, 0.001, initial_window_bytes=10_000, mss_bytes=1000)
    assert fast.feedback_s == 0.0
    warm = direction_rounds(50_000, 8e6, 0.1, initial_window_bytes=math.inf, mss_bytes=1000)
    assert (warm.rounds, warm.feedback_s, warm.window_s) == (1, 0.0, 0.0)
    assert direction_rounds(0, 8e6, 0.1, initial_window_bytes=10, mss_bytes=1).rounds == 0


# --- bad input names its argument ------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: serial_time(-1, 0, 1, 1, 0), "upload_bytes"),
        (lambda: serial_time(0, 0, 0, 1, 0), "up_bps"),
        (lambda: serial_time(0, 0, 1, 1, -0.1), "rtt_s"),
        (lambda: serial_time(0, 0, 1, 1, 0, math.nan), "processing_s"),
        (lambda: serial_time(0, 0, 1, math.inf, 0), "down_bps"),
        (lambda: pipeline([], [], [], []), "ready_s"),
        (lambda: pipeline([0, 1], [0], [0, 0], [0, 0]), "process_s"),
        (lambda: pipeline([0], [-1], [0], [0]), "process_s[0]"),
        (lambda: pipeline("ab", [0], [0], [0]), "ready_s"),
        (lambda: playback([0.0], 0.0, 0.1), "chunk_s"),
        (lambda: playback([], 0.02, 0.1), "arrivals_s"),
        (lambda: playback([0.0], 0.02, -1), "initial_buffer_s"),
        (lambda: buffer_depletion_s(1, 0, 1), "play_bps"),
        (lambda: window_throughput_bps(0, 0.1, 1), "window_bytes"),
        (lambda: window_throughput_bps(1, 0.1, 0), "path_bps"),
        (lambda: slow_start_rounds(-1), "size_bytes"),
        (lambda: slow_start_rounds(10, mss_bytes=0), "mss_bytes"),
        (lambda: slow_start_rounds(10, initcwnd_segments=1.5), "initcwnd_segments"),
        (lambda: mathis_throughput_bps(1448, 0.2, 1.0), "loss"),
        (lambda: mathis_throughput_bps(1448, 0.0, 0.1), "rtt_s"),
        (lambda: retransmission_rounds(10, -0.1), "loss"),
        (lambda: retransmission_rounds(10, 0.1, quantile=1.0), "quantile"),
        (lambda: retransmission_rounds(True, 0.1), "packets"),
        (lambda: fec_repair_symbols(0, 0.1), "data_symbols"),
        (lambda: fec_repair_symbols(10, 1.0), "loss"),
        (lambda: fec_repair_symbols(10, 0.1, target=1.0), "target"),
        (lambda: wire_bytes(10, 0, 0, 0), "packet_payload_bytes"),
        (lambda: split_time_s(1, []), "rates_bps"),
        (lambda: split_time_s(1, [1, 0]), "rates_bps[1]"),
        (lambda: split_time_s(1, [1], exit_bps=0), "exit_bps"),
        (lambda: duplicate_failure(1.5, 0), "p1"),
        (lambda: duplicate_failure(0, 0, shared=-0.1), "shared"),
        (lambda: setup_rtts("h1", "new"), "protocol"),
        (lambda: voice_request(connection="warm"), "connection"),
        (lambda: voice_request(upload_bytes=-5), "upload_bytes"),
        (lambda: voice_request(upload_bytes=1.5), "upload_bytes"),
        (lambda: voice_request(down_bps=0), "down_bps"),
        (lambda: voice_request(loss=1.0), "loss"),
        (lambda: voice_request(down_loss=2), "down_loss"),
        (lambda: voice_request(window_bytes=0), "window_bytes"),
        (lambda: voice_request(mss_bytes=0), "mss_bytes"),
        (lambda: voice_request(initcwnd_segments=0), "initcwnd_segments"),
    ],
)
def test_bad_input_raises_a_value_error_naming_the_argument(call, field: str) -> None:
    with pytest.raises(ValueError) as info:
        call()
    assert isinstance(info.value, SpecError)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")
    assert "\n" not in str(info.value)


# --- invariants (hypothesis) ------------------------------------------------------------

seconds = st.floats(min_value=0.0, max_value=10.0, allow_nan=False)
rates = st.floats(min_value=1e3, max_value=1e10, allow_nan=False)
losses = st.floats(min_value=0.0, max_value=0.6, allow_nan=False)


@st.composite
def chunks(draw: st.DrawFn) -> tuple[list[float], ...]:
    n = draw(st.integers(min_value=1, max_value=30))
    column = st.lists(seconds, min_size=n, max_size=n)
    return draw(column), draw(column), draw(column), draw(column)


@given(chunks())
def test_pipeline_never_delivers_before_each_chunks_serial_bound(data) -> None:
    ready, process, send, delay = data
    arrivals = pipeline(ready, process, send, delay)
    assert len(arrivals) == len(ready)
    for i, arrival in enumerate(arrivals):
        assert arrival >= ready[i] + process[i] + send[i] + delay[i] - 1e-9
    # the egress is one resource: sends finish in order, each at least s_i after the last
    sent = [r - d for r, d in zip(arrivals, delay, strict=True)]
    for i in range(1, len(sent)):
        assert sent[i] >= sent[i - 1] + send[i] - 1e-9


@given(
    start=seconds,
    chunk=st.floats(min_value=1e-3, max_value=1.0),
    buffer=seconds,
    early=st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=40),
)
def test_playback_has_no_stall_when_every_chunk_beats_its_slot(
    start: float, chunk: float, buffer: float, early: list[float]
) -> None:
    # chunk i arrives some fraction of its slot early: r_i <= r_0 + J + i * tau
    slots = [start + buffer + i * chunk for i in range(len(early))]
    arrivals = [start] + [
        max(0.0, slot - e * (buffer + chunk)) for slot, e in zip(slots[1:], early[1:], strict=True)
    ]
    result = playback(arrivals, chunk, buffer)
    assert result.stall_s == 0.0 and result.stall_count == 0
    assert result.start_s == pytest.approx(slots)


@given(
    arrivals=st.lists(seconds, min_size=1, max_size=40),
    chunk=st.floats(min_value=1e-3, max_value=1.0),
    buffer=seconds,
)
def test_playback_stall_is_the_lateness_of_the_last_chunk(
    arrivals: list[float], chunk: float, buffer: float
) -> None:
    result = playback(arrivals, chunk, buffer)
    n = len(arrivals)
    for i in range(n):
        assert result.start_s[i] >= arrivals[i]
        if i:
            assert result.start_s[i] - result.start_s[i - 1] >= chunk - 1e-9
    on_schedule = arrivals[0] + buffer + (n - 1) * chunk
    assert result.start_s[-1] == pytest.approx(on_schedule + result.stall_s, abs=1e-9)


@given(
    k=st.integers(min_value=1, max_value=400),
    p=st.floats(min_value=0.0, max_value=0.5),
    r=st.integers(min_value=0, max_value=200),
)
def test_more_repair_symbols_never_lower_success(k: int, p: float, r: int) -> None:
    assert fec_success_probability(k, r + 1, p) >= fec_success_probability(k, r, p) - 1e-12


@settings(max_examples=60)
@given(
    k=st.integers(min_value=1, max_value=400),
    p=st.floats(min_value=0.001, max_value=0.5),
    target=st.sampled_from([0.9, 0.99, 0.999, 0.9999]),
)
def test_fec_repair_symbols_is_the_smallest_that_meets_the_target(
    k: int, p: float, target: float
) -> None:
    r = fec_repair_symbols(k, p, target)
    assert fec_success_probability(k, r, p) >= target
    if r > 0:
        assert fec_success_probability(k, r - 1, p) < target


@given(
    window=st.floats(min_value=1.0, max_value=1e9),
    rtt=seconds,
    path=rates,
)
def test_window_bound_never_exceeds_the_path_rate(window: float, rtt: float, path: float) -> None:
    rate = window_throughput_bps(window, rtt, path)
    assert 0 < rate <= path
    if rtt > 0:
        assert rate <= window * 8 / rtt * (1 + 1e-12)


@given(
    size=st.integers(min_value=0, max_value=10**9),
    mss=st.integers(min_value=500, max_value=9000),
    iw=st.integers(min_value=1, max_value=100),
)
def test_slow_start_rounds_is_the_smallest_k(size: int, mss: int, iw: int) -> None:
    k = slow_start_rounds(size, mss, iw)
    assert iw * mss * (2**k - 1) >= size
    if k > 0:
        assert iw * mss * (2 ** (k - 1) - 1) < size


@given(
    n=st.integers(min_value=1, max_value=5000),
    p=st.floats(min_value=0.0, max_value=0.9),
    q=st.floats(min_value=0.01, max_value=0.999),
)
def test_retransmission_quantile_is_the_smallest_k(n: int, p: float, q: float) -> None:
    k = retransmission_rounds(n, p, quantile=q)
    assert (1 - p**k) ** n >= q * (1 - 1e-12)
    if k > 1:
        assert (1 - p ** (k - 1)) ** n < q * (1 + 1e-12)
    assert retransmission_rounds(n, p) >= 1.0


REQUESTS = st.fixed_dictionaries(
    {
        "rtt_s": st.floats(min_value=0.0, max_value=1.0),
        "up_bps": rates,
        "down_bps": rates,
        "upload_bytes": st.integers(min_value=0, max_value=10**8),
        "download_bytes": st.integers(min_value=0, max_value=10**8),
        "processing_s": st.floats(min_value=0.0, max_value=1.0),
        # the protocols with early data (h2c has none: its own test below)
        "protocol": st.sampled_from(("h2", "h3")),
        "initcwnd_segments": st.integers(min_value=1, max_value=64),
        "window_bytes": st.one_of(st.none(), st.integers(min_value=1200, max_value=10**8)),
        "loss": losses,
    }
)
"""request_time's keywords but the connection, over their whole ranges."""


@given(common=REQUESTS)
def test_request_bound_invariants(common: dict[str, Any]) -> None:
    rtt, upload, download = common["rtt_s"], common["upload_bytes"], common["download_bytes"]
    up, down, processing = common["up_bps"], common["down_bps"], common["processing_s"]
    iw, window, loss = common["initcwnd_segments"], common["window_bytes"], common["loss"]
    new = request_time(connection="new", **common)
    resumed = request_time(connection="0rtt", **common)
    reused = request_time(connection="reused", **common)
    serial = serial_time(upload, download, up, down, rtt, processing)
    tolerance = 1e-9 * max(1.0, serial)
    # never below the serial bound; more connection state never costs more
    assert reused.total_s >= serial - tolerance
    assert new.total_s >= resumed.total_s - tolerance >= reused.total_s - 2 * tolerance
    for bound in (new, resumed, reused):
        assert bound.total_s == pytest.approx(
            math.fsum(v for k, v in bound.parts().items() if k != "retransmission_s")
        )
        assert bound.expected_s >= bound.total_s
        assert all(v >= 0 for v in bound.parts().values())
        assert (bound.retransmission_s == 0) == (
            loss == 0 or (upload == 0 and download == 0) or rtt == 0
        ) or bound.retransmission_s < tolerance
    if window is None:
        assert new.up_rounds == slow_start_rounds(upload, new.mss_bytes, iw)
        assert new.down_rounds == slow_start_rounds(download, new.mss_bytes, iw)
        assert reused.window_s == 0.0


@given(
    rtt=st.floats(min_value=0.001, max_value=1.0),
    rate=rates,
    size=st.integers(min_value=1, max_value=10**8),
    iw=st.integers(min_value=1, max_value=32),
    window=st.integers(min_value=1448, max_value=10**7),
)
def test_a_window_cap_or_a_smaller_initial_window_never_lowers_the_bound(
    rtt: float, rate: float, size: int, iw: int, window: int
) -> None:
    inputs: dict[str, Any] = dict(
        rtt_s=rtt,
        up_bps=rate,
        down_bps=rate,
        upload_bytes=size,
        download_bytes=size,
        protocol="h2",
        connection="new",
        initcwnd_segments=iw,
    )

    def total(**overrides: Any) -> float:
        return request_time(**{**inputs, **overrides}).total_s

    free = total()
    assert total(window_bytes=window) >= free * (1 - 1e-12)
    assert total(initcwnd_segments=iw + 1) <= free * (1 + 1e-12)
    # with a rate so high that sending is instant, the idle time is (rounds - 1) * R per direction
    instant_upload = {"up_bps": 1e15, "down_bps": 1e15, "download_bytes": 0, "connection": "reused"}
    instant = request_time(**{**inputs, **instant_upload})
    assert instant.feedback_s == 0.0
    cold = direction_rounds(size, 1e15, rtt, initial_window_bytes=iw * 1448.0, mss_bytes=1448)
    expected = (slow_start_rounds(size, 1448, iw) - 1) * rtt
    assert cold.feedback_s == pytest.approx(expected, abs=1e-6)


@pytest.mark.timeout(30)
def test_loss_close_to_one_still_answers() -> None:
    # one packet: E[K] = 1 / (1 - p) even when that is a million rounds
    assert retransmission_rounds(1, 0.999999) == pytest.approx(1e6, rel=1e-6)
    assert retransmission_rounds(245, 0.999999) > retransmission_rounds(245, 0.99999)
    r = fec_repair_symbols(245, 0.999999)
    assert fec_success_probability(245, r, 0.999999) >= 0.999
    assert fec_success_probability(245, r - 1, 0.999999) < 0.999


def relayed_voice(**overrides: Any) -> bounds.RelayBound:
    """The voice request through a relay 2 ms from the client: a new connection over the
    near hop, the voice request's 200 ms round trip on the warm long haul."""
    voice = {k: v for k, v in VOICE_REQUEST.items() if k not in ("rtt_s", "connection")}
    hops = {"near_rtt_s": 0.002, "long_rtt_s": VOICE_REQUEST["rtt_s"]}
    return relay_request_time(**{**voice, **hops, **overrides})


def test_relay_bound_pays_only_the_near_hop_set_up() -> None:
    relay = relayed_voice()
    assert relay.setup_s == pytest.approx(0.004)
    assert relay.propagation_s == pytest.approx(0.202)
    assert relay.serialisation_s == pytest.approx(354_640 * 8 / 333e6)
    # 354,640 bytes need 5 windows of IW 10: 4 idle round trips of the near hop
    assert relay.feedback_s == pytest.approx(4 * 0.002, rel=0.01)
    assert relay.total_s == pytest.approx(0.004 + 0.008 + 0.202 + 0.00852 + 0.030, abs=1e-4)
    direct = voice_request(rtt_s=0.202, connection="new")
    assert direct.total_s > 4 * relay.total_s
    h3 = relayed_voice(protocol="h3", up_bps=1e9, down_bps=1e9, upload_bytes=0, processing_s=0.0)
    assert h3.setup_s == pytest.approx(0.002) and h3.total_s == pytest.approx(0.204)
    with pytest.raises(SpecError, match="near_rtt_s"):
        relayed_voice(near_rtt_s=-1)


def test_duplicate_and_failover_bounds() -> None:
    from harness.bounds import duplicate_time_s, failover_time_s

    mbit = 1e6
    assert duplicate_time_s(30_000_000, [20 * mbit, 10 * mbit]) == pytest.approx(12.0)
    assert duplicate_time_s(30_000_000, [20 * mbit, 10 * mbit], exit_bps=24 * mbit) == (
        pytest.approx(12.0)
    )
    assert duplicate_time_s(30_000_000, [20 * mbit, 10 * mbit], exit_bps=15 * mbit) == (
        pytest.approx(16.0)
    )
    # 2 s at 30 Mbit/s (7.5 MB), then 22.5 MB at 10 Mbit/s: 18 s more
    assert failover_time_s(30_000_000, [20 * mbit, 10 * mbit], 2.0, 10 * mbit) == (
        pytest.approx(20.0)
    )
    # an outage after the end changes nothing
    assert failover_time_s(30_000_000, [20 * mbit, 10 * mbit], 60.0, 10 * mbit) == (
        pytest.approx(8.0)
    )
    with pytest.raises(SpecError):
        failover_time_s(30_000_000, [20 * mbit], -1.0, 10 * mbit)


def test_duplicate_failover_is_the_surviving_copy() -> None:
    from harness.bounds import duplicate_failover_time_s

    mbit = 1e6
    assert duplicate_failover_time_s(30_000_000, [20 * mbit, 10 * mbit], 3.0, 0) == (
        pytest.approx(24.0)
    )
    # the failed path had finished its copy already
    assert duplicate_failover_time_s(30_000_000, [20 * mbit, 10 * mbit], 13.0, 0) == (
        pytest.approx(12.0)
    )
    with pytest.raises(SpecError):
        duplicate_failover_time_s(30_000_000, [20 * mbit, 10 * mbit], 3.0, 2)


# --- the agent's rounds (the chapter's §12.1.3, §12.3.1, §12.5) ----------------------------

AGENT = dict(
    rtt_s=0.2, up_bps=6.4e6, down_bps=6.4e6, upload_bytes=800_000, local_s=0.3, model_s=2.0
)


def test_agent_round_and_task_match_the_chapter() -> None:
    reused = bounds.agent_task_time(
        rounds=30, protocol="h2", connection="reused", slow_start=False, **AGENT
    )
    assert reused.round_s == pytest.approx(3.5)
    assert reused.total_s == pytest.approx(105.4)  # set-up once: 2 RTT
    new = bounds.agent_task_time(
        rounds=30, protocol="h2", connection="new", slow_start=False, **AGENT
    )
    assert new.total_s == pytest.approx(117.0)  # 2 RTT every round
    assert new.new_connections == 30
    warm = bounds.agent_task_time(rounds=30, protocol="h2", connection="reused", warm=True, **AGENT)
    assert warm.new_connections == 0 and warm.total_s == pytest.approx(105.0)


def test_agent_compression_matches_the_chapter() -> None:
    args = {**AGENT, "upload_bytes": 200_000}
    task = bounds.agent_task_time(
        rounds=30, protocol="h2", connection="reused", slow_start=False, encode_s=0.030, **args
    )
    assert task.round_s == pytest.approx(2.78)
    assert round(task.round_s * 30) == 83


def test_agent_slow_start_of_every_new_connection() -> None:
    cold = bounds.agent_task_time(rounds=30, protocol="h2", connection="new", **AGENT)
    warm = bounds.agent_task_time(rounds=30, protocol="h2", connection="reused", **AGENT)
    # 0.8 MB on a 160 kB bandwidth-delay product: slow start idles every new connection
    assert cold.feedback_s == pytest.approx(30 * warm.feedback_s)
    assert cold.total_s - warm.total_s == pytest.approx(29 * (0.4 + warm.feedback_s))


def test_agent_redone_rounds_and_recovery_cost() -> None:
    assert bounds.agent_redone_rounds("committed", 9) == 1
    assert bounds.agent_redone_rounds("restart", 9) == 10
    assert bounds.agent_redone_rounds("restart", None) == 0
    with pytest.raises(SpecError):
        bounds.agent_redone_rounds("later", 3)
    # the chapter's 2.57 s (nine rounds committed) vs 16.7 s (all ten redone): 1.0 s fixed
    # (outage and reconnection) plus 1.57 s per redone round
    assert bounds.agent_recovery_cost_s(1.0, 1.57, 1) == pytest.approx(2.57)
    assert bounds.agent_recovery_cost_s(1.0, 1.57, 10) == pytest.approx(16.7)
    task = bounds.agent_task_time(
        rounds=30, protocol="h3", connection="reused", redone_rounds=10, outage_s=1.0, **AGENT
    )
    plain = bounds.agent_task_time(rounds=30, protocol="h3", connection="reused", **AGENT)
    assert task.new_connections == 2
    # the outage less the interrupted round's local work, ten rounds, one more connection
    assert task.total_s - plain.total_s == pytest.approx(
        0.7 + 10 * plain.round_s + 0.2 + plain.feedback_s
    )
    stored = bounds.agent_task_time(
        rounds=30, protocol="h3", connection="reused", redone_rounds=1, outage_s=1.0,
        stored_rounds=1, **AGENT,
    )  # fmt: skip
    assert stored.total_s - plain.total_s == pytest.approx(
        0.7 + plain.round_s - 2.0 + 0.2 + plain.feedback_s
    )


def test_agent_deployment_matches_the_chapter() -> None:
    # the remaining 20 rounds, deadline 45 s; model times per site inferred from the
    # chapter's totals: near 0.15 s, cloud 0.08 s
    near = bounds.agent_task_time(
        rounds=20, protocol="h3", connection="reused", slow_start=False,
        **{**AGENT, "rtt_s": 0.02, "up_bps": 80e6, "down_bps": 80e6, "model_s": 0.15},
    )  # fmt: skip
    cloud = bounds.agent_task_time(
        rounds=20, protocol="h3", connection="reused", slow_start=False,
        **{**AGENT, "model_s": 0.08},
    )  # fmt: skip
    assert 20 * near.round_s == pytest.approx(11.0)
    assert 20 * cloud.round_s == pytest.approx(31.6)
    rate = bounds.agent_deadline_rate_bps(
        rounds=20, deadline_s=45.0, upload_bytes=800_000, rtt_s=0.2, local_s=0.3, model_s=0.08
    )
    assert f"{rate / 1e6:.1f}" == "3.8"
    assert bounds.agent_energy_j(40.0, 2.0) == pytest.approx(80.0)


def test_agent_break_even_rounds() -> None:
    # the chapter's 3.5 s raw round against 2.78 s compressed, over 30 rounds
    assert bounds.agent_break_even_rounds(30, 3.5, 2.78) == pytest.approx(7.77, abs=0.01)
    assert bounds.agent_break_even_rounds(30, 3.0, 3.5) < 0  # compression that loses
    with pytest.raises(SpecError):
        bounds.agent_break_even_rounds(30, 3.0, 0.0)


def test_agent_rate_change_after_ten_rounds() -> None:
    # the chapter's §12.5.2 (docs/models.md section 13): ten rounds at 6 Mbit/s, then ten at 10,
    # 28.7 s, against a constant 8 Mbit/s, 27.6 s (0.8 MB: 1.0667 s, 0.64 s, 0.8 s of upload)
    args = {**AGENT, "model_s": 0.08}
    varying = bounds.agent_task_time(
        rounds=20, protocol="h2", connection="reused", slow_start=False, warm=True,
        rate_change_after_round=10, rate_change_bps=10e6, **{**args, "up_bps": 6e6},
    )  # fmt: skip
    assert varying.later_rounds == 10
    assert varying.total_s == pytest.approx(10 * (0.58 + 0.8 * 8 / 6) + 10 * (0.58 + 0.64))
    assert f"{varying.total_s:.1f}" == "28.7"
    constant = bounds.agent_task_time(
        rounds=20, protocol="h2", connection="reused", slow_start=False, warm=True,
        **{**args, "up_bps": 8e6},
    )  # fmt: skip
    assert f"{constant.total_s:.1f}" == "27.6"


# --- shared airtime -------------------------------------------------------------------


def test_airtime_of_the_chapters_exchanges() -> None:
    assert bounds.airtime_s(1, bounds.CHAPTER_DATA_IP_BYTES) == 302e-6
    assert bounds.airtime_s(1, bounds.CHAPTER_ACK_IP_BYTES) == 134e-6
    total = bounds.airtime_s(30_800, 1228) + bounds.airtime_s(30_800, 78)
    assert total == pytest.approx(13.4288, abs=1e-9)
    assert bounds.airtime_s(15_400, 78) == pytest.approx(2.0636, abs=1e-9)


def test_airtime_exchanges_of_the_image() -> None:
    # 35 MB in 1,136-byte payloads (what a 1,200-byte QUIC datagram carries here): 30,810
    data, acks = bounds.airtime_exchanges(30_000_000, 5_000_000, 1136, 1)
    assert (data, acks) == (26_409 + 4_402, 26_409 + 4_402)
    data, acks = bounds.airtime_exchanges(30_000_000, 5_000_000, 1448, 2)
    assert (data, acks) == (20_719 + 3_454, math.ceil((20_719 + 3_454) / 2))


def test_airtime_bound_applies_the_model_per_kind_at_mean_size() -> None:
    frames = {"up.data": 10, "up.ack": 0, "down.data": 0, "down.ack": 5}
    ip_bytes = {"up.data": 15_000, "up.ack": 0, "down.data": 0, "down.ack": 5 * 52}
    bound = bounds.airtime_bound(frames, ip_bytes, processing_s=0.3, rtt_s=0.01)
    assert bound.medium_s["up.data"] == pytest.approx(10 * 342e-6)
    assert bound.medium_s["down.ack"] == pytest.approx(5 * 130e-6)
    assert bound.busy_s == pytest.approx(10 * 342e-6 + 5 * 130e-6)
    # processing and propagation cannot overlap the data frames
    assert bound.total_s == pytest.approx(10 * 342e-6 + 0.31)
    # a medium busier than processing dominates
    busy = bounds.airtime_bound(
        {"up.data": 10_000, "down.ack": 10_000}, {"up.data": 15_000_000, "down.ack": 520_000}
    )
    assert busy.total_s == busy.busy_s == pytest.approx(10_000 * (342e-6 + 130e-6))


def test_airtime_bound_refuses_bad_keys_and_counts() -> None:
    with pytest.raises(SpecError) as err:
        bounds.airtime_bound({"up.video": 1}, {"up.video": 1500})
    assert err.value.field == "frames"
    with pytest.raises(SpecError):
        bounds.airtime_bound({"up.data": -1}, {"up.data": 0})
    with pytest.raises(SpecError):
        bounds.airtime_s(1, float("nan"))


def fec_voice(**overrides: Any) -> bounds.FecBound:
    """MODELS section 10: the voice request sent as k + r = 245 + 63 symbols of 1448 B."""
    link = {k: VOICE_REQUEST[k] for k in ("rtt_s", "up_bps", "down_bps", "processing_s")}
    symbols = dict(up_symbols=245 + 63, down_symbols=0, symbol_bytes=1448)
    return fec_request_time(**{**link, **symbols, **overrides})


def test_fec_bound_is_the_serial_time_of_every_symbol() -> None:
    bound = fec_voice()
    assert f"{bound.total_s:.3f}" == "0.241" and bound.setup_s == 0
    new = fec_voice(down_symbols=4, connection="new", processing_s=0.0)
    assert new.setup_s == pytest.approx(0.6)
    with pytest.raises(SpecError, match="up_symbols"):
        fec_voice(up_symbols=-1)


def test_each_ack_policy_has_its_acks_per_packet_where_section_7_can_say() -> None:
    from harness.bounds import policy_acks_per_packet

    assert policy_acks_per_packet("immediate", "udp") == 1.0
    assert policy_acks_per_packet("every:2,max:10ms", "udp") == 0.5
    assert policy_acks_per_packet("default", "tcp") == 0.5
    assert policy_acks_per_packet("default", "udp") is None  # aioquic's 1 ms timer decides
    assert policy_acks_per_packet("ack-frequency", "udp") is None  # the sender decides
    # TACK at 20 Mbit/s of 1,200-byte packets (2,083/s), 100 ms: the 25 ms cap, 1 per 52
    assert policy_acks_per_packet("tack", "udp", 20e6 / 9600, 0.1) == pytest.approx(
        1 / (0.025 * 20e6 / 9600)
    )
    # slow: one packet per 50 ms, L = 2 rules
    assert policy_acks_per_packet("tack", "udp", 20.0, 0.04) == 0.5
    assert policy_acks_per_packet("tack", "udp") is None


def test_h2_in_cleartext_saves_the_tls_round_trip_and_nothing_else() -> None:
    """tbcore.kinds.setup_name: h2 without TLS is h2c, whose new connection waits for TCP's
    handshake only (RFC 9113 section 3.3): one RTT less than h2's, the rest equal."""
    from tbcore import kinds
    from tbcore.settings import Settings

    assert kinds.setup_name(Settings(tls=False)) == "h2c"
    assert kinds.setup_name(Settings()) == "h2"
    assert kinds.setup_name(Settings(protocol="h3")) == "h3"
    args = dict(rtt_s=0.2, up_bps=333e6, down_bps=333e6, upload_bytes=354_640,
                download_bytes=0, processing_s=0.03, connection="new")  # fmt: skip
    tls = request_time(protocol="h2", **args)
    plain = request_time(protocol="h2c", **args)
    assert tls.total_s - plain.total_s == pytest.approx(0.2)
    assert (plain.setup_rtts, plain.window_s) == (1, tls.window_s)
    with pytest.raises(SpecError, match="connection"):
        request_time(protocol="h2c", **{**args, "connection": "0rtt"})
