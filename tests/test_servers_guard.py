"""The abuse limits without I/O, on a fake clock (servers.guard)."""

from __future__ import annotations

import pytest

from servers.guard import (
    MAX_PEER_RESETS_PER_WINDOW,
    RESET_STREAM_GRACE_BYTES,
    RESET_STREAMS_TRACKED,
    Admission,
    H2AbuseGuard,
    H2Limits,
    HeadDeadline,
    RetryPolicy,
    SourceRateLimiter,
    WindowCounter,
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
