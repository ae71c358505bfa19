"""Where to run the remaining rounds (the chapter's §12.5): each site's task time, its
energy, the uplink that meets a deadline, where two sites cross, what a broken connection
costs with and without committed progress, and the speed-up a faster model can give.
docs/models.md §18.

A site's task is one preparation and then ``rounds`` serial rounds of local work, model
time, a round trip and the upload (MODELS 1 per round, warm connection):
``T = prep + rounds x (local + model + rtt + upload_bits / rate)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tbcore.errors import SpecError

BITS_PER_BYTE = 8

DECODE_TOKENS_PER_ROUND = 45
"""Tokens each round generates (§12.1.5: 2.9 s at 15.5 token/s)."""
DECODE_STEP_BYTES = 5.47e9
"""Bytes one q4_0 decode step reads, weights and 8K KV (§12.1.5)."""
PREFILL_FLOP = 133.6e12
"""The one preparation: prefill of the first ten rounds' 8K context (§12.5.1)."""


@dataclass(frozen=True)
class Site:
    """One place to run the rounds (§12.5.1's table)."""

    prep_s: float
    model_s: float
    """Model time a round."""
    rtt_s: float
    up_bps: float | None
    """None: the input stays on the device (nothing uploaded)."""
    power_w: float | None = None
    """Stated board power (None: measured per token instead)."""

    def round_s(self, local_s: float, upload_bytes: float, up_bps: float | None = None) -> float:
        rate = self.up_bps if up_bps is None else up_bps
        upload = 0.0 if rate is None else upload_bytes * BITS_PER_BYTE / rate
        return local_s + self.model_s + self.rtt_s + upload

    def task_s(
        self, rounds: int, local_s: float, upload_bytes: float, up_bps: float | None = None
    ) -> float:
        if rounds < 0:
            raise SpecError("rounds", f"must be >= 0, got {rounds}")
        return self.prep_s + rounds * self.round_s(local_s, upload_bytes, up_bps)

    def energy_j(self, rounds: int) -> float:
        """Stated power x busy time (one preparation and every round's model time)."""
        if self.power_w is None:
            raise SpecError("power_w", "this site states no power")
        return self.power_w * (self.prep_s + rounds * self.model_s)

    def scaled(self, factor: float) -> Site:
        """The same site with its model time ``factor`` times the read bound (§12.5.2:
        a measured 2.83x on an RTX PRO 6000)."""
        return Site(self.prep_s, self.model_s * factor, self.rtt_s, self.up_bps, self.power_w)


def decode_round_s(bandwidth_Bps: float, tokens: int = DECODE_TOKENS_PER_ROUND) -> float:
    """Model time a round: ``tokens`` steps each reading :data:`DECODE_STEP_BYTES`."""
    if bandwidth_Bps <= 0:
        raise SpecError("bandwidth_Bps", "must be positive")
    return tokens * DECODE_STEP_BYTES / bandwidth_Bps


def fixed_s(site: Site, rounds: int, local_s: float) -> float:
    """The task's time without its uploads: what no uplink rate can remove."""
    return site.prep_s + rounds * (local_s + site.model_s + site.rtt_s)


def deadline_rate_bps(fixed_task_s: float, upload_bits: float, deadline_s: float) -> float | None:
    """The uplink that meets ``deadline_s``: upload_bits / (D - fixed); None when the fixed
    part alone reaches the deadline (no finite rate is enough, §12.5.2)."""
    if deadline_s <= fixed_task_s:
        return None
    return upload_bits / (deadline_s - fixed_task_s)


def crossover_rate_bps(near_s: float, far_fixed_s: float, upload_bits: float) -> float | None:
    """The uplink above which the far site (its fixed part plus the uploads) beats the near
    one; None when the far site's fixed part is already slower."""
    if far_fixed_s >= near_s:
        return None
    return upload_bits / (near_s - far_fixed_s)


def redo_cost_s(reconnect_s: float, round_s: float, redone_rounds: int) -> float:
    """What a broken connection adds: the reconnect and the rounds done again (§12.5.2)."""
    if redone_rounds < 0 or reconnect_s < 0:
        raise SpecError("redone_rounds", "rounds and reconnect time must be >= 0")
    return reconnect_s + redone_rounds * round_s


def expected_attempts_cost(cost: float, success: float) -> float:
    """Independent attempts until one succeeds, each costing ``cost``: E = C / p (§12.5.2)."""
    if not 0 < success <= 1:
        raise SpecError("success", f"must be in (0, 1], got {success}")
    return cost / success


def accelerated_s(accelerable_s: float, fixed_part_s: float, speedup: float) -> float:
    """Amdahl on a trajectory: only the model part speeds up (§12.5.4)."""
    if speedup <= 0:
        raise SpecError("speedup", "must be positive")
    return accelerable_s / speedup + fixed_part_s


def startup_count(layers: int, collectives_per_layer: int, startups_per_collective: int) -> int:
    """Latency-bound start-ups of a tensor-parallel step (§12.2.4: 36 x 2 x 2 = 144)."""
    if min(layers, collectives_per_layer, startups_per_collective) < 0:
        raise SpecError("layers", "counts must be >= 0")
    return layers * collectives_per_layer * startups_per_collective
