"""docs/models.md section 10: forward error correction."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tbcore import fecmath
from tbcore.stats import binomial_cdf

if TYPE_CHECKING:
    pass

from harness.bounds.base import BITS_PER_BYTE, _count, _loss, _non_negative, _open_unit, _positive
from harness.bounds.setup import setup_rtts
from tbcore.plain import AsDict


def fec_success_probability(data_symbols: int, repair_symbols: int, loss: float) -> float:
    """Section 10: P(at most r of k + r symbols lost), the exact binomial sum."""
    k = _count("data_symbols", data_symbols, minimum=1)
    r = _count("repair_symbols", repair_symbols)
    p = _loss("loss", loss)
    return _binomial_cdf(r, k + r, p)


def _binomial_cdf(r: int, n: int, p: float) -> float:
    """P(at most r of n lost) under independent loss p (scipy.stats.binom)."""
    return binomial_cdf(r, n, p)


def fec_repair_symbols(data_symbols: int, loss: float, target: float = 0.999) -> int:
    """Section 10: the smallest r with ``P(at most r of k + r lost) >= target`` (exact binomial).

    The same function the FEC stack sizes its redundancy with (:mod:`tbcore.fecmath`).
    """
    k = _count("data_symbols", data_symbols, minimum=1)
    p = _loss("loss", loss)
    goal = _open_unit("target", target)
    return fecmath.repair_symbols(k, p, goal)


@dataclass(frozen=True)
class FecBound(AsDict):
    """Section 10: a FEC request's bound, by part: set-up, then every source and repair
    symbol of both directions at the path rate, one round trip of propagation and the
    processing; no retransmission round."""

    setup_s: float
    serialisation_s: float
    """``(k_up + r_up) * T / B_up + (k_down + r_down) * T / B_down``."""
    propagation_s: float
    processing_s: float
    total_s: float = field(init=False)

    def __post_init__(self) -> None:
        total = math.fsum((self.setup_s, self.serialisation_s, self.propagation_s))
        object.__setattr__(self, "total_s", total + self.processing_s)


def fec_request_time(
    *,
    rtt_s: float,
    up_bps: float,
    down_bps: float,
    up_symbols: int,
    down_symbols: int,
    symbol_bytes: int,
    processing_s: float = 0.0,
    connection: str = "reused",
) -> FecBound:
    """Section 10: the bound of a FEC request whose transfers carried ``up_symbols`` and
    ``down_symbols`` symbols (source + repair) of ``symbol_bytes`` payload each (headers
    left out, as the section's worked example counts 1448-byte payloads)."""
    rtt = _non_negative("rtt_s", rtt_s)
    up = _positive("up_bps", up_bps)
    down = _positive("down_bps", down_bps)
    n_up = _count("up_symbols", up_symbols)
    n_down = _count("down_symbols", down_symbols)
    size = _count("symbol_bytes", symbol_bytes, minimum=1)
    processing = _non_negative("processing_s", processing_s)
    serial = n_up * size * BITS_PER_BYTE / up + n_down * size * BITS_PER_BYTE / down
    return FecBound(setup_rtts("fec", connection) * rtt, serial, rtt, processing)
