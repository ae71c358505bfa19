"""Loss measured by the receiver, and the redundancy the sender derives from it (no I/O).

:class:`LossWindow` marks which of the peer's last :data:`LOSS_WINDOW_PACKETS` sequence
numbers arrived; its estimate (mean loss and P(lost | previous lost)) travels back in every
FEEDBACK. :class:`Redundancy` turns the latest estimate into a repair count per block:

- ``"adaptive"``: docs/models.md section 10's binomial at ``target`` for independent loss; when
  the window shows bursts (loss after loss clearly more likely than loss, see
  :data:`BURST_Z`), the two-state Markov count of :mod:`tbcore.fecmath` (the burst-aware
  variant for Gilbert-Elliott channels). RaptorQ wants :data:`RAPTORQ_OVERHEAD_SYMBOLS`
  more than k, so the binomial is taken for k + 1 symbols that must arrive.
- ``"25.7%"`` (any percentage): ``ceil(k * percent / 100)`` repair symbols, whatever the loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from proto.fec.code import RAPTORQ_OVERHEAD_SYMBOLS
from tbcore import fecmath
from tbcore.errors import SpecError

LOSS_WINDOW_PACKETS = 4096
"""Packets the receiver's estimate covers: at 14 % loss its standard error is 0.54 points
(about 2 repair symbols on the audio), and at 333 Mbit/s the window is 150 ms of traffic,
so it follows the path over a few transfers."""
BURST_Z = 3.0
"""Losses count as bursty when the number of loss-after-loss pairs exceeds its expectation
under independence by this many standard deviations."""
DEFAULT_TARGET = 0.999
"""docs/models.md section 10's success target per transfer."""
MAX_REDUNDANCY_FRACTION = 4.0
MAX_REDUNDANCY_EXTRA_SYMBOLS = 64
"""Cap on r: ``4 k + 64``. A loss estimate near 1 must not make a sender flood (at p = 0.8
the binomial asks for ~4x), but a one-symbol request on a bursty path needs tens of copies
(a burst takes them all): 64 more symbols are 90 KB."""


class LossWindow:
    """Which of the last ``size`` sequence numbers arrived (the receiver's view)."""

    def __init__(self, size: int = LOSS_WINDOW_PACKETS) -> None:
        self.size = size
        self.first = -1
        self.highest = -1
        self._got = bytearray(size)

    def mark(self, seq: int) -> None:
        if self.first < 0:
            self.first = seq
            self.highest = seq - 1
        if seq > self.highest:
            if seq - self.highest >= self.size:
                self._got = bytearray(self.size)
            else:
                for s in range(self.highest + 1, seq):
                    self._got[s % self.size] = 0
            self.highest = seq
        elif self.highest - seq >= self.size or seq < self.first:
            return
        self._got[seq % self.size] = 1

    def _trace(self) -> np.ndarray:
        """1 for each received, 0 for each lost number in the window, oldest first."""
        start = max(self.first, self.highest - self.size + 1)
        ring = np.frombuffer(self._got, dtype=np.uint8)
        index = np.arange(start, self.highest + 1) % self.size
        return ring[index]

    def estimate(self) -> tuple[float, float, int]:
        """(loss, P(lost | previous lost), packets): (0, 0, 0) before any packet."""
        if self.highest < 0 or self.highest < self.first:
            return 0.0, 0.0, 0
        trace = self._trace()
        n = int(trace.size)
        lost_mask = trace == 0
        lost = int(lost_mask.sum())
        pairs = int(lost_mask[:-1].sum())
        both = int((lost_mask[:-1] & lost_mask[1:]).sum())
        p = lost / n
        after = both / pairs if pairs else p
        return p, after, n


@dataclass(frozen=True)
class LossReport:
    """What the sender knows of the path's loss (from the peer's latest FEEDBACK)."""

    loss: float = 0.0
    loss_after_loss: float = 0.0
    packets: int = 0

    @property
    def bursty(self) -> bool:
        """Loss after loss is more likely than loss, beyond chance (``BURST_Z``)."""
        p, n = self.loss, self.packets
        if n < 2 or p <= 0.0 or p >= 1.0:
            return False
        pairs = max(1.0, p * (n - 1))
        expected = pairs * p
        sd = math.sqrt(pairs * p * (1.0 - p))
        observed = self.loss_after_loss * pairs
        return observed - expected > BURST_Z * max(sd, 1e-9)


@dataclass(frozen=True)
class Redundancy:
    """``adaptive`` or a fixed percentage, with the success target of the adaptive one."""

    mode: str = "adaptive"
    """'adaptive' or 'fixed'."""
    percent: float = 0.0
    """Fixed: repair symbols as a percentage of k."""
    target: float = DEFAULT_TARGET

    @classmethod
    def parse(cls, text: str, target: float = DEFAULT_TARGET) -> Redundancy:
        if isinstance(target, bool) or not isinstance(target, (int, float)):
            raise SpecError("fec_target", f"must be a number in (0, 1), got {target!r}")
        if not 0.0 < target < 1.0:
            raise SpecError("fec_target", f"must lie in (0, 1), got {target!r}")
        mode, percent = fecmath.parse_redundancy("fec_redundancy", text)
        return cls(mode, percent, float(target))

    def __str__(self) -> str:
        return "adaptive" if self.mode == "adaptive" else f"{self.percent:g}%"

    def repair(self, k: int, report: LossReport, blocks: int = 1) -> tuple[int, str]:
        """(repair symbols for a block of k, the model used: fixed, none, binomial, markov).

        With several blocks, each block gets the target ``target ** (1 / blocks)`` so that
        the whole transfer meets ``target``.
        """
        if self.mode == "fixed":
            return math.ceil(k * self.percent / 100.0 - 1e-9), "fixed"
        cap = math.ceil(k * MAX_REDUNDANCY_FRACTION) + MAX_REDUNDANCY_EXTRA_SYMBOLS
        if report.loss <= 0.0:
            return 0, "none"
        goal = self.target ** (1.0 / blocks)
        need = k + RAPTORQ_OVERHEAD_SYMBOLS
        if report.bursty:
            p = min(report.loss, 0.99)
            b = min(max(report.loss_after_loss, 0.0), 0.99)
            # a from the stationary loss p = a / (1 - b + a)
            a = min(0.99, p * (1.0 - b) / max(1e-9, 1.0 - p))
            r = fecmath.markov_repair_symbols(need, a, b, goal)
            model = "markov"
        else:
            r = fecmath.repair_symbols(need, min(report.loss, 0.99), goal)
            model = "binomial"
        return min(cap, r + RAPTORQ_OVERHEAD_SYMBOLS), model

    def extra(self, needed: int, report: LossReport) -> int:
        """Symbols to send to a block ``needed`` short (a repair round), at the target."""
        p = min(max(report.loss, 0.0), 0.9)
        goal = self.target if self.mode == "adaptive" else DEFAULT_TARGET
        return max(needed, fecmath.extra_symbols(needed, p, goal))
