"""docs/models.md section 9: retransmission rounds."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    pass

from harness.bounds.base import _count, _loss, _non_negative, _open_unit


def _all_within(packets: int, loss: float, rounds: int) -> float:
    """``P(K <= k) = (1 - p^k)^n``, computed without cancellation for small ``p^k``."""
    if packets == 0:
        return 1.0
    if rounds == 0:
        return 0.0
    lost_every_time = loss**rounds
    if lost_every_time == 0.0:
        return 1.0
    return math.exp(packets * math.log1p(-lost_every_time))


def retransmission_rounds(packets: int, loss: float, quantile: float | None = None) -> float | int:
    """Section 9: rounds K until all ``packets`` arrive under independent loss ``p``.

    With ``quantile=None``, E[K] = sum_{k>=0} (1 - (1 - p^k)^n) as a float; otherwise the
    smallest k (an int) with ``P(K <= k) = (1 - p^k)^n >= quantile``. Zero packets need 0.
    """
    n = _count("packets", packets)
    p = _loss("loss", loss)
    if quantile is not None:
        q = _open_unit("quantile", quantile)
        if n == 0:
            return 0
        if p == 0:
            return 1
        # closed form, then step over any floating-point edge
        k = max(1, math.ceil(math.log(-math.expm1(math.log(q) / n)) / math.log(p)))
        while k > 1 and _all_within(n, p, k - 1) >= q:
            k -= 1
        while _all_within(n, p, k) < q:
            k += 1
        return k
    return _expected_rounds(n, p)


def _expected_rounds(packets: int, loss: float) -> float:
    """E[K] = sum_{k>=0} P(K > k) = 1 + sum_{k>=1} (1 - (1 - p^k)^n), summed in numpy blocks
    that grow geometrically until a term falls below 1e-17: about log(n) / (1 - p) terms, so
    a loss close to 1 stays seconds, not minutes."""
    if packets == 0:
        return 0.0
    if loss == 0.0:
        return 1.0
    log_loss = math.log(loss)
    sums = [1.0]  # k = 0: P(K > 0) = 1
    start, size = 1, 256
    while True:
        k = np.arange(start, start + size, dtype=np.float64)
        terms = -np.expm1(packets * np.log1p(-np.exp(k * log_loss)))
        sums.append(float(terms.sum()))
        if terms[-1] < 1e-17:
            return math.fsum(sums)
        start += size
        size = min(size * 2, 1 << 20)


def retransmission_time_s(
    base_s: float, rtt_s: float, packets: int, loss: float, quantile: float | None = None
) -> float:
    """Section 9: completion = base + (K - 1) * R, with K expected or at a quantile."""
    base = _non_negative("base_s", base_s)
    rtt = _non_negative("rtt_s", rtt_s)
    rounds = retransmission_rounds(packets, loss, quantile)
    return base + max(0.0, rounds - 1) * rtt
