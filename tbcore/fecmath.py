"""How many repair symbols a block needs (docs/models.md section 10), shared by the stacks and
the bounds: the FEC stack computes its redundancy with the same functions that
``harness.bounds`` uses for the bound, so the two can never disagree.

- :func:`binomial_cdf` and :func:`repair_symbols`: independent loss, the exact binomial
  (``P(at most r of k + r lost) >= target``).
- :func:`markov_loss_cdf` and :func:`markov_repair_symbols`: losses that come in bursts,
  modelled as a two-state Markov chain on the packets themselves (lost after received with
  probability ``a``, lost after lost with ``b``): the simple Gilbert model, which is what a
  receiver can estimate from a loss trace without knowing the hidden states of a
  Gilbert-Elliott channel. ``a == b`` is independent loss again.

Arguments are checked by the callers (bounds checks and names them; the stack builds them);
these functions assume ``0 <= p < 1`` and whole counts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from statistics import NormalDist

from tbcore.errors import SpecError

# numpy and tbcore.stats (numpy, scipy) are imported where they are used: every client and
# server process imports this module through tbcore.settings, and numpy alone is ~0.12 s of
# start-up per process, twice per run (`python -X importtime`).

FEC_SYMBOL_BYTES = 1416
"""Payload of one FEC symbol: the largest 8-aligned RaptorQ symbol whose authenticated
datagram fits a 1500-byte packet (proto.fec.wire.SYMBOL_BYTES computes it from the layout;
a test checks the two agree). The FEC bound counts symbols of this size."""
MAX_REDUNDANCY_PERCENT = 400.0
_PERCENT = re.compile(r"^(\d+(?:\.\d+)?)%$")


def parse_redundancy(name: str, text: object) -> tuple[str, float]:
    """``"adaptive"`` -> ("adaptive", 0); ``"25.7%"`` -> ("fixed", 25.7); SpecError else."""
    if text == "adaptive":
        return "adaptive", 0.0
    match = _PERCENT.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise SpecError(name, f"must be 'adaptive' or a percentage like '25.7%', got {text!r}")
    percent = float(match.group(1))
    if percent > MAX_REDUNDANCY_PERCENT:
        raise SpecError(name, f"{text} is above {MAX_REDUNDANCY_PERCENT:.0f}%")
    return "fixed", percent


MARKOV_EXACT_MAX_PACKETS = 4096
"""Up to this many packets the Markov loss count is summed exactly (O(n^2) dynamic
programme, ~0.1 s at the limit); beyond it, a normal approximation with the chain's
variance (the count is a sum of a stationary, geometrically mixing sequence)."""


def binomial_cdf(r: int, n: int, p: float) -> float:
    """``P(X <= r)`` for ``X ~ Binomial(n, p)``: tbcore.stats' (scipy.stats.binom), the one
    ``harness.bounds.fec_success_probability`` uses, so both agree to the last symbol."""
    if p == 0.0 or r >= n:
        return 1.0
    if r < 0:
        return 0.0
    from tbcore import stats

    return stats.binomial_cdf(r, n, p)


def _smallest(ok: Callable[[int], float], goal: float) -> int:
    """The smallest r >= 0 with ``ok(r) >= goal``; success never falls as r grows (one
    more symbol and one more allowed loss), so exponential then binary search."""
    if ok(0) >= goal:
        return 0
    high = 1
    while ok(high) < goal:
        high *= 2
    low = high // 2
    while high - low > 1:
        middle = (low + high) // 2
        if ok(middle) >= goal:
            high = middle
        else:
            low = middle
    return high


def repair_symbols(k: int, p: float, target: float) -> int:
    """Section 10: the smallest r with ``P(at most r of k + r lost) >= target``."""
    if p == 0.0:
        return 0
    return _smallest(lambda r: binomial_cdf(r, k + r, p), target)


def extra_symbols(needed: int, p: float, target: float) -> int:
    """The smallest x with ``P(at least needed of x arrive) >= target``: a repair round for a
    block that is ``needed`` symbols short."""
    if needed <= 0:
        return 0
    return needed + repair_symbols(needed, p, target)


# --- bursts ------------------------------------------------------------------------------


def markov_stationary_loss(a: float, b: float) -> float:
    """Mean loss of the chain: ``a / (1 - b + a)``."""
    denominator = 1.0 - b + a
    return 0.0 if denominator <= 0 else a / denominator


def markov_loss_cdf(r: int, n: int, a: float, b: float) -> float:
    """``P(at most r of n packets lost)`` when packet losses follow the two-state chain
    (``a`` = P(lost | previous received), ``b`` = P(lost | previous lost)), started in its
    stationary state."""
    if r >= n:
        return 1.0
    if r < 0:
        return 0.0
    p = markov_stationary_loss(a, b)
    if p == 0.0:
        return 1.0
    if n > MARKOV_EXACT_MAX_PACKETS:
        rho = b - a  # lag-1 correlation of the loss indicator
        rho = min(max(rho, -0.999), 0.999)
        variance = n * p * (1.0 - p) * (1.0 + rho) / (1.0 - rho)
        z = (r + 0.5 - n * p) / math.sqrt(max(variance, 1e-300))
        return 0.5 * math.erfc(-z / math.sqrt(2.0))
    import numpy as np

    # dist_good[c] / dist_bad[c]: P(c losses so far and the last packet received / lost)
    cap = r + 2  # counts above r are lumped (only P(<= r) is wanted)
    good = np.zeros(cap)
    bad = np.zeros(cap)
    good[0] = 1.0 - p
    bad[1] = p
    for _ in range(n - 1):
        new_good = good * (1.0 - a) + bad * (1.0 - b)
        new_bad = np.zeros(cap)
        new_bad[1:] = good[:-1] * a + bad[:-1] * b
        new_bad[-1] += good[-1] * a + bad[-1] * b  # stays "more than r"
        good, bad = new_good, new_bad
    return float(min(1.0, good[: r + 1].sum() + bad[: r + 1].sum()))


def _markov_normal_guess(k: int, a: float, b: float, target: float) -> int:
    """r from the normal approximation of the loss count (mean n p, variance
    n p (1 - p) (1 + rho) / (1 - rho)): the starting point of the exact search."""
    p = markov_stationary_loss(a, b)
    rho = min(max(b - a, -0.999), 0.999)
    z = NormalDist().inv_cdf(target)
    r = 0
    for _ in range(50):  # fixed point of r = n p + z sd(n), n = k + r
        n = k + r
        sd = math.sqrt(max(n * p * (1.0 - p) * (1.0 + rho) / (1.0 - rho), 0.0))
        nxt = max(0, math.ceil(n * p + z * sd))
        if nxt == r:
            break
        r = nxt
    return r


def markov_repair_symbols(k: int, a: float, b: float, target: float) -> int:
    """The burst-aware redundancy: the smallest r with ``P(at most r of k + r lost) >=
    target`` under the two-state chain. The exact count costs O(n r) per evaluation, so the
    search starts at the normal approximation and steps from there (a few evaluations, not
    the ~15 of a bisection: 10 ms instead of 100 ms for the audio on a bursty path)."""
    if markov_stationary_loss(a, b) == 0.0:
        return 0
    r = _markov_normal_guess(k, a, b, target)
    if markov_loss_cdf(r, k + r, a, b) >= target:
        while r > 0 and markov_loss_cdf(r - 1, k + r - 1, a, b) >= target:
            r -= 1
        return r
    step = 1
    while markov_loss_cdf(r + step, k + r + step, a, b) < target:
        r += step
        step *= 2
    low, high = r, r + step  # fails at low, meets at high
    while high - low > 1:
        middle = (low + high) // 2
        if markov_loss_cdf(middle, k + middle, a, b) >= target:
            high = middle
        else:
            low = middle
    return high
