"""docs/models.md section 12: two paths (split, duplicate, failover, a shared exit)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tbcore.errors import SpecError

if TYPE_CHECKING:
    pass

from harness.bounds.base import BITS_PER_BYTE, _non_negative, _positive, _probability, _sequence


def split_fractions(rates_bps: Sequence[float]) -> list[float]:
    """Section 12: the share of the bytes for each path that makes all finish together."""
    rates = _sequence("rates_bps", rates_bps, _positive)
    total = math.fsum(rates)
    return [rate / total for rate in rates]


def split_time_s(
    size_bytes: float, rates_bps: Sequence[float], exit_bps: float | None = None
) -> float:
    """Section 12: ``S / sum(B_i)`` over independent paths, never below ``S / E`` when they
    share an exit of rate ``E``."""
    size = _non_negative("size_bytes", size_bytes)
    rates = _sequence("rates_bps", rates_bps, _positive)
    seconds = size * BITS_PER_BYTE / math.fsum(rates)
    if exit_bps is not None:
        seconds = max(seconds, size * BITS_PER_BYTE / _positive("exit_bps", exit_bps))
    return seconds


def duplicate_failure(p1: float, p2: float, shared: float = 0.0) -> float:
    """Section 12: ``q + (1 - q) p1 p2``: a copy on each path, a shared end point failing
    with ``q``. Failure probabilities may be 1 (a path that is down)."""
    a = _probability("p1", p1)
    b = _probability("p2", p2)
    q = _probability("shared", shared)
    return q + (1.0 - q) * a * b


def duplicate_time_s(
    size_bytes: float, rates_bps: Sequence[float], exit_bps: float | None = None
) -> float:
    """Section 12, duplicate: the first complete copy needs ``S / max(B_i)`` on its own path;
    behind a shared exit both copies cross it, so the exit carries at least ``S`` too."""
    size = _non_negative("size_bytes", size_bytes)
    rates = _sequence("rates_bps", rates_bps, _positive)
    seconds = size * BITS_PER_BYTE / max(rates)
    if exit_bps is not None:
        seconds = max(seconds, size * BITS_PER_BYTE / _positive("exit_bps", exit_bps))
    return seconds


def duplicate_failover_time_s(
    size_bytes: float,
    rates_bps: Sequence[float],
    outage_at_s: float,
    failed: int,
    exit_bps: float | None = None,
) -> float:
    """Section 12, duplicate, path ``failed`` lost at ``outage_at_s``: if its copy was not
    complete by then, the surviving copy (which never shared the work) is the first one."""
    size = _non_negative("size_bytes", size_bytes)
    rates = _sequence("rates_bps", rates_bps, _positive)
    at = _non_negative("outage_at_s", outage_at_s)
    if not 0 <= failed < len(rates) or len(rates) < 2:
        raise SpecError("failed", f"must index one of {len(rates)} paths, got {failed!r}")
    if size * BITS_PER_BYTE / rates[failed] <= at:
        return duplicate_time_s(size, rates, exit_bps)
    survivors = [r for i, r in enumerate(rates) if i != failed]
    return duplicate_time_s(size, survivors, exit_bps)


def failover_time_s(
    size_bytes: float,
    rates_bps: Sequence[float],
    outage_at_s: float,
    surviving_bps: float,
    exit_bps: float | None = None,
) -> float:
    """Section 12 with a path lost at ``outage_at_s`` into the transfer: the ideal split
    carries ``sum(B_i)`` (at most ``E``) until then, the surviving path the rest. The
    measured time above this is the failover's cost: detection plus re-sending what was
    in flight on the dead path."""
    size = _non_negative("size_bytes", size_bytes)
    rates = _sequence("rates_bps", rates_bps, _positive)
    at = _non_negative("outage_at_s", outage_at_s)
    survivor = _positive("surviving_bps", surviving_bps)
    both = math.fsum(rates)
    if exit_bps is not None:
        exit_rate = _positive("exit_bps", exit_bps)
        both = min(both, exit_rate)
        survivor = min(survivor, exit_rate)
    done_bytes = both / BITS_PER_BYTE * at
    if done_bytes >= size:
        return size * BITS_PER_BYTE / both
    return at + (size - done_bytes) * BITS_PER_BYTE / survivor
