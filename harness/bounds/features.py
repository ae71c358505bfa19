"""Sending a model's features instead of its input (the chapter's §12.2.2), and moving or
keeping a session's state (§12.2.3, §12.5.2). docs/models.md §17.

A tensor's bytes are its elements times their width; sending them takes bytes x 8 / rate;
encoding takes FLOPs / peak. State is worth moving or keeping while what it saves a round,
or in compute, outweighs what moving or holding it costs: the break-even is their ratio.
"""

from __future__ import annotations

import math

from tbcore.errors import SpecError

BITS_PER_BYTE = 8
BF16_BYTES = 2

QWEN3_VL_4B_VISUAL_TOKENS = 400
"""Visual tokens of a 640x640 input (§12.2.2)."""
QWEN3_VL_4B_FEATURE_WIDTH = 4 * 2560
"""The final projection and three DeepStack levels, 2,560 wide each (§12.2.2)."""
QWEN3_VL_ENCODE_FLOP = 1.31e12
"""Matrix work of encoding one image (§12.2.2)."""
RTX_4090_BF16_FLOPS = 165.2e12
H100_SXM_BF16_FLOPS = 989.4e12
"""Dense BF16 peaks the chapter divides by (§12.2.2, §12.5.2)."""
KV_BYTES_PER_TOKEN_VL = 144 * 1024
"""Logical KV storage a language-model input token (§12.2.2)."""


def tensor_bytes(elements: int, width_bytes: int = BF16_BYTES) -> int:
    if elements < 0 or width_bytes <= 0:
        raise SpecError("elements", "must be >= 0 with a positive width")
    return elements * width_bytes


def transfer_s(size_bytes: float, rate_bps: float) -> float:
    if rate_bps <= 0:
        raise SpecError("rate_bps", f"must be positive, got {rate_bps}")
    return size_bytes * BITS_PER_BYTE / rate_bps


def compute_s(flop: float, peak_flops: float) -> float:
    if peak_flops <= 0:
        raise SpecError("peak_flops", "must be positive")
    return flop / peak_flops


def migration_s(state_bytes: float, rate_bps: float, restore_s: float) -> float:
    """Moving a session: its state over the link, then restoring it (§12.2.3)."""
    return transfer_s(state_bytes, rate_bps) + restore_s


def net_saving_s(saving_per_round_s: float, rounds: int, cost_s: float) -> float:
    """What a one-off cost buys back over ``rounds`` rounds (negative: a loss)."""
    return saving_per_round_s * rounds - cost_s


def break_even_rounds(cost_s: float, saving_per_round_s: float) -> int:
    """The fewest rounds after which the saving covers the cost (§12.2.3: 7.7 / 0.4 -> 20)."""
    if saving_per_round_s <= 0:
        raise SpecError("saving_per_round_s", "must be positive")
    return math.ceil(cost_s / saving_per_round_s - 1e-12)


def holding_break_even_s(saved_gpu_s: float, state_bytes: float, memory_bytes: float) -> float:
    """Seconds of holding ``state_bytes`` of a ``memory_bytes`` accelerator after which the
    share of it held equals the compute saved (§12.5.2: 0.239 / (0.465 / 80) = 41 s)."""
    if state_bytes <= 0 or memory_bytes <= 0:
        raise SpecError("state_bytes", "state and memory must be positive")
    return saved_gpu_s / (state_bytes / memory_bytes)
