"""The abuse limits without I/O, on a fake clock (servers.guard)."""

from __future__ import annotations

import pytest

from servers.guard import (
    H2_CONTINUATION,
    H2_DATA,
    H2_FLAG_ACK,
    H2_FLAG_END_HEADERS,
    H2_FLAG_END_STREAM,
    H2_HEADERS,
    H2_PING,
    H2_PREFACE,
    H2_PRIORITY,
    H2_PRIORITY_UPDATE,
    H2_RST_STREAM,
    H2_SETTINGS,
    H2_WINDOW_UPDATE,
    MAX_HEADER_BLOCK_BYTES,
    MAX_PEER_RESETS_PER_WINDOW,
    RESET_STREAM_GRACE_BYTES,
    RESET_STREAMS_TRACKED,
    Admission,
    H2AbuseGuard,
    H2Limits,
    H2WireScanner,
    HeadDeadline,
    RetryPolicy,
    SourceRateLimiter,
    WindowCounter,
    is_empty_frame,
)

pytestmark = pytest.mark.timeout(30)


def test_window_counter_counts_only_the_window_and_keeps_limit_plus_one() -> None:
    counter = WindowCounter(limit=3, window_s=1.0)
    assert not any(counter.add(t) for t in (0.0, 0.1, 0.2))
    assert counter.add(0.3)  # the fourth within a second
    assert not counter.over(1.25)  # 0.0, 0.1, 0.2 fell out
    for t in range(1000):
        counter.add(2.0 + t * 1e-6)
    assert len(counter._times) == 4  # bounded memory whatever the peer sends


def test_admission_caps_per_source_and_in_total() -> None:
    admission = Admission(max_total=3, max_per_source=2)
    assert admission.admit("a") is None and admission.admit("a") is None
    assert "from a" in (admission.admit("a") or "")
    assert admission.admit("b") is None
    assert "in total" in (admission.admit("c") or "")
    admission.release("a")
    assert admission.admit("c") is None
    assert admission.total == 3 and admission.refused == 2
    admission.release("nobody")  # a release without an admission changes nothing
    assert admission.total == 3


def test_rapid_reset_is_condemned_after_the_limit_and_not_before() -> None:
    guard = H2AbuseGuard(H2Limits(), stream_window_bytes=65_535)
    now = 100.0
    for _ in range(MAX_PEER_RESETS_PER_WINDOW):
        assert guard.on_stream_opened(now) is None
        assert guard.on_peer_reset(now) is None
        now += 1e-4
    reason = guard.on_peer_reset(now)
    assert reason is not None and "CVE-2023-44487" in reason


def test_resets_spread_over_time_are_fine() -> None:
    limits = H2Limits()
    guard = H2AbuseGuard(limits, stream_window_bytes=65_535)
    step = limits.window_s / limits.max_peer_resets * 1.01
    assert all(guard.on_peer_reset(i * step) is None for i in range(5 * limits.max_peer_resets))


def test_stream_opening_rate_is_bounded() -> None:
    limits = H2Limits(max_streams=10, window_s=1.0)
    guard = H2AbuseGuard(limits, stream_window_bytes=65_535)
    verdicts = [guard.on_stream_opened(0.5) for _ in range(11)]
    assert verdicts[:10] == [None] * 10 and verdicts[10] is not None


def test_data_after_reset_is_allowed_up_to_a_window_and_a_grace() -> None:
    window = 1_000_000
    guard = H2AbuseGuard(H2Limits(), stream_window_bytes=window)
    bound = window + RESET_STREAM_GRACE_BYTES
    assert guard.on_data_after_reset(1, bound) is None  # what was in flight
    assert guard.on_data_after_reset(3, bound) is None  # per stream, not per connection
    reason = guard.on_data_after_reset(1, 1)
    assert reason is not None and "closed stream 1" in reason


def test_late_data_tracking_is_bounded() -> None:
    guard = H2AbuseGuard(H2Limits(), stream_window_bytes=65_535)
    for stream in range(1, 2 * RESET_STREAMS_TRACKED * 2, 2):
        guard.on_data_after_reset(stream, 10)
    assert len(guard._late_bytes) == RESET_STREAMS_TRACKED


def test_head_deadline_starts_at_a_partial_head_and_clears_when_complete() -> None:
    deadline = HeadDeadline(timeout_s=10.0)
    deadline.update(partial=False, now=0.0)
    assert deadline.due_at() is None
    deadline.update(partial=True, now=1.0)
    deadline.update(partial=True, now=5.0)  # more bytes do not restart it (slowloris)
    assert deadline.due_at() == 11.0
    assert not deadline.expired(10.9) and deadline.expired(11.1)
    deadline.update(partial=False, now=6.0)
    assert not deadline.expired(100.0)


def test_retry_policy_modes_and_load() -> None:
    assert RetryPolicy("always").required(0, 0.0)
    assert not RetryPolicy("off").required(10**6, 0.0)
    auto = RetryPolicy("auto", threshold=5)
    assert not auto.required(4, 0.0)
    assert auto.required(5, 0.0)
    for _ in range(6):
        auto.note_attempt(1.0)
    assert auto.required(0, 1.5)  # a burst of attempts
    assert not auto.required(0, 2.5)  # a second later: quiet again


def test_source_rate_limiter_buckets_and_bounded_memory() -> None:
    limiter = SourceRateLimiter(rate_per_s=10.0, burst=5.0, max_sources=3)
    allowed = [limiter.allow("a", 0.0) for _ in range(8)]
    assert allowed == [True] * 5 + [False] * 3
    assert limiter.allow("a", 0.1)  # one token back after 0.1 s
    assert limiter.allow("b", 0.1)  # another source has its own bucket
    for source in ("c", "d", "e"):
        limiter.allow(source, 0.2)
    assert len(limiter._buckets) == 3 and limiter.dropped == 3


# -- control-frame floods (the 2019 advisories) ---------------------------------------------


def _flood(
    guard: H2AbuseGuard, count: int, frame_type: int, flags: int = 0, now: float = 50.0
) -> list[str | None]:
    """``count`` frames at one instant; the verdicts, in order."""
    return [guard.on_frame_received(frame_type, flags, 0, now) for _ in range(count)]


@pytest.mark.parametrize(
    ("frame_type", "flags", "limit", "advisory"),
    [
        (H2_SETTINGS, 0, H2Limits().max_settings, "CVE-2019-9515"),
        (H2_SETTINGS, H2_FLAG_ACK, H2Limits().max_settings, "CVE-2019-9515"),
        (H2_PING, 0, H2Limits().max_pings, "CVE-2019-9512"),
        (H2_PING, H2_FLAG_ACK, H2Limits().max_pings, "CVE-2019-9512"),
        (H2_PRIORITY, 0, H2Limits().max_priority, "CVE-2019-9513"),
        (H2_DATA, 0, H2Limits().max_empty_frames, "CVE-2019-9518"),
        (H2_HEADERS, H2_FLAG_END_HEADERS, H2Limits().max_empty_frames, "CVE-2019-9518"),
        (H2_RST_STREAM, 0, H2Limits().max_peer_resets, "CVE-2023-44487"),
        (H2_WINDOW_UPDATE, 0, H2Limits().max_window_updates, "WINDOW_UPDATE"),
        (H2_PRIORITY_UPDATE, 0, H2Limits().max_priority_updates, "RFC 9218"),
        (0xFA, 0, H2Limits().max_unknown_frames, "unknown types"),
    ],
)
def test_a_control_frame_flood_is_condemned_after_its_budget_and_not_before(
    frame_type: int, flags: int, limit: int, advisory: str
) -> None:
    guard = H2AbuseGuard(H2Limits(), stream_window_bytes=65_535)
    verdicts = _flood(guard, limit + 1, frame_type, flags)
    assert verdicts[:limit] == [None] * limit
    assert verdicts[limit] is not None and advisory in verdicts[limit]


def test_control_frames_spread_over_time_are_fine() -> None:
    limits = H2Limits()
    guard = H2AbuseGuard(limits, stream_window_bytes=65_535)
    step = limits.window_s / limits.max_settings * 1.01
    for i in range(5 * limits.max_settings):
        assert guard.on_frame_received(H2_SETTINGS, 0, 0, i * step) is None
        assert guard.on_frame_received(H2_PING, 0, 0, i * step) is None


def test_each_kind_has_its_own_budget() -> None:
    """A connection's SETTINGS do not use up its PING allowance, and frames with content
    (a request's HEADERS, DATA with bytes) are not empty frames."""
    limits = H2Limits()
    guard = H2AbuseGuard(limits, stream_window_bytes=65_535)
    assert _flood(guard, limits.max_settings, H2_SETTINGS) == [None] * limits.max_settings
    assert _flood(guard, limits.max_pings, H2_PING) == [None] * limits.max_pings
    for _ in range(10 * limits.max_empty_frames):
        assert guard.on_frame_received(H2_DATA, 0, 16_384, 50.0) is None
        assert guard.on_frame_received(H2_HEADERS, H2_FLAG_END_HEADERS, 40, 50.0) is None


def test_empty_frames_are_those_without_content_and_without_an_end() -> None:
    assert is_empty_frame(H2_DATA, 0, 0)
    assert not is_empty_frame(H2_DATA, H2_FLAG_END_STREAM, 0)  # how a body is ended
    assert not is_empty_frame(H2_DATA, 0, 1)
    assert is_empty_frame(H2_HEADERS, H2_FLAG_END_HEADERS, 0)
    assert not is_empty_frame(H2_HEADERS, H2_FLAG_END_STREAM | H2_FLAG_END_HEADERS, 0)
    assert is_empty_frame(H2_CONTINUATION, 0, 0)
    assert not is_empty_frame(H2_CONTINUATION, H2_FLAG_END_HEADERS, 0)
    assert not is_empty_frame(H2_PING, 0, 0)  # a PING has its own budget


def test_window_updates_are_credited_two_per_data_frame_sent() -> None:
    limits = H2Limits()
    guard = H2AbuseGuard(limits, stream_window_bytes=65_535)
    data_frames = 5_000
    for _ in range(data_frames):
        assert guard.on_frame_sent(H2_DATA, 0, 50.0) is None
    allowed = 2 * data_frames + limits.max_window_updates
    verdicts = _flood(guard, allowed + 1, H2_WINDOW_UPDATE)
    assert verdicts[:allowed] == [None] * allowed and verdicts[allowed] is not None


def test_resets_the_server_is_made_to_send_are_bounded() -> None:
    limits = H2Limits()
    guard = H2AbuseGuard(limits, stream_window_bytes=65_535)
    verdicts = [
        guard.on_frame_sent(H2_RST_STREAM, 0, 50.0) for _ in range(limits.max_server_resets + 1)
    ]
    assert verdicts[-1] is not None and "CVE-2019-9514" in verdicts[-1]
    assert all(v is None for v in verdicts[:-1])


def test_replies_queued_while_the_peer_reads_nothing_are_bounded() -> None:
    limits = H2Limits(max_unread_replies=10, max_server_resets=10**6)
    guard = H2AbuseGuard(limits, stream_window_bytes=65_535)
    for _ in range(100):  # the transport takes them: no backlog
        assert guard.on_frame_sent(H2_PING, H2_FLAG_ACK, 1.0) is None
    guard.on_writing_paused()
    assert guard.on_frame_sent(H2_SETTINGS, 0, 1.0) is None  # the server's own, not a reply
    for _ in range(10):
        assert guard.on_frame_sent(H2_PING, H2_FLAG_ACK, 1.0) is None
    guard.on_writing_resumed()  # the peer read: the count starts again
    guard.on_writing_paused()
    replies = [guard.on_frame_sent(H2_SETTINGS, H2_FLAG_ACK, 2.0) for _ in range(10)]
    assert replies == [None] * 10
    reason = guard.on_frame_sent(H2_RST_STREAM, 0, 2.0)
    assert reason is not None and "reads nothing" in reason


def _head(length: int, frame_type: int, flags: int = 0, stream: int = 1) -> bytes:
    return length.to_bytes(3, "big") + bytes([frame_type, flags]) + stream.to_bytes(4, "big")


def test_the_scanner_refuses_an_oversized_frame_at_its_header() -> None:
    scanner = H2WireScanner(max_frame_bytes=2**20)
    assert scanner.feed(H2_PREFACE + _head(16, H2_SETTINGS, stream=0) + bytes(16), 0.0) is None
    assert scanner.feed(_head(16 * 2**20 - 1, H2_DATA), 0.0) is None  # not abuse: an error
    assert "above our SETTINGS_MAX_FRAME_SIZE" in str(scanner.protocol_error)
    garbage = H2WireScanner(max_frame_bytes=2**20)
    assert garbage.feed(b"GET / HTTP/1.1\r\n" + bytes(4000), 0.0) is None
    assert garbage.protocol_error is None and garbage.frames == 0  # left to h2


def test_the_scanner_bounds_a_header_block_across_its_continuations() -> None:
    scanner = H2WireScanner(max_frame_bytes=2**20)
    scanner.feed(H2_PREFACE, 0.0)
    chunk = MAX_HEADER_BLOCK_BYTES // 4
    assert scanner.feed(_head(chunk, H2_HEADERS) + bytes(chunk), 0.0) is None
    for _ in range(3):
        assert scanner.feed(_head(chunk, H2_CONTINUATION) + bytes(chunk), 0.0) is None
    assert scanner.in_header_block
    reason = scanner.feed(_head(1, H2_CONTINUATION, H2_FLAG_END_HEADERS), 0.0)
    assert reason is not None and "header block" in reason
    whole = H2WireScanner(max_frame_bytes=2**20)
    whole.feed(H2_PREFACE, 0.0)
    block = _head(100, H2_HEADERS, H2_FLAG_END_HEADERS) + bytes(100)
    assert whole.feed(block * 1000, 0.0) is None  # many small blocks: each ends
    assert not whole.in_header_block and whole.frames == 1000


def test_a_partial_frame_has_a_deadline_by_its_length_and_split_headers_are_read() -> None:
    scanner = H2WireScanner(max_frame_bytes=2**20, head_timeout_s=10.0, min_rate_Bps=4096)
    data = H2_PREFACE + _head(2**20, H2_DATA, stream=3)
    for i in range(len(data)):  # a byte at a time, the header split everywhere
        assert scanner.feed(data[i : i + 1], 5.0) is None
    assert scanner.frames == 1  # the DATA frame's header, read across nine feeds
    assert scanner.partial_due_at() == 5.0 + 10.0 + 256.0
    scanner.feed(bytes(2**20), 6.0)
    assert scanner.partial_due_at() is None
