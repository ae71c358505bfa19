"""A device as an execution resource (the chapter's §12.1.5): memory bandwidth bounds the
decode rate, memory capacity bounds what fits, stated power bounds the rate a battery can
sustain. docs/models.md §16.

Every decode step reads the weights (and the request's KV cache) once, so a step takes at
least ``bytes_read / bandwidth``; a token rate above ``1 / step`` is impossible whatever the
software does. Capacity: weights and a fixed reserve stay resident, the rest holds requests'
state. Units: bytes, bytes per second, seconds, watts, joules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tbcore.errors import SpecError

BITS_PER_BYTE = 8

LPDDR5X_PINS_PER_CHANNEL = 16
"""A JEDEC LPDDR5X device is one x16 channel (§12.1.5)."""
PHONE_CHANNELS = 4
"""The chapter's phone: four x16 channels (its SoC brief gives no bus width, §12.1.5)."""
PHONE_PIN_RATE_BPS = 10.6e9
"""5,300 MHz, two transfers a clock: 10.6 Gbit/s a pin (§12.1.5)."""

QWEN3_8B_WEIGHTS_READ_BYTES = 15_136_819_200
"""Weights one decode step reads, BF16, without the embedding table (§12.1.5, note 2)."""
QWEN3_8B_KV_8K_BYTES = 1_207_959_552
"""The KV cache of one 8K request, BF16: 147,456 bytes a token x 8,192 (§12.1.5, note 2)."""
QWEN3_8B_KV_BYTES_PER_TOKEN = 147_456
QWEN3_8B_PARAMETERS = 8_190_735_360
"""Qwen3-8B's parameters: 16.38 GB resident in BF16 (§12.1.5)."""
BF16_BYTES = 2
Q4_0_RATIO = 18 / 64
"""q4_0 stores 32 BF16 values (64 bytes) in 18 bytes (§12.1.5, the chapter's §8.4)."""
ADAM_BYTES_PER_PARAMETER = 16
"""Mixed-precision Adam: BF16 weight and gradient (2 + 2), FP32 master and two moments
(4 + 4 + 4) (§12.1.5, the chapter's §10.1.2)."""
GB = 1e9
MIB = 2**20


def channel_bandwidth_Bps(pins: int, pin_rate_bps: float) -> float:
    """Bytes per second of one memory channel."""
    if pins <= 0 or pin_rate_bps <= 0:
        raise SpecError("pins", "pins and pin rate must be positive")
    return pins * pin_rate_bps / BITS_PER_BYTE


def memory_bandwidth_Bps(
    channels: int = PHONE_CHANNELS,
    pins: int = LPDDR5X_PINS_PER_CHANNEL,
    pin_rate_bps: float = PHONE_PIN_RATE_BPS,
) -> float:
    """The phone's memory bandwidth: 4 x 16 x 10.6 Gbit/s / 8 = 84.8 GB/s (§12.1.5)."""
    if channels <= 0:
        raise SpecError("channels", f"must be positive, got {channels}")
    return channels * channel_bandwidth_Bps(pins, pin_rate_bps)


def decode_step_s(bytes_read: float, bandwidth_Bps: float) -> float:
    """The lower bound of one decode step: every byte it needs read once."""
    if bytes_read < 0 or bandwidth_Bps <= 0:
        raise SpecError("bandwidth_Bps", "bytes must be >= 0 and bandwidth positive")
    return bytes_read / bandwidth_Bps


def quantised_bytes(bf16_bytes: float, ratio: float = Q4_0_RATIO) -> float:
    """What ``bf16_bytes`` of weights occupy in a grouped format (q4_0: 18/64)."""
    return bf16_bytes * ratio


@dataclass(frozen=True)
class Capacity:
    """What a memory of ``memory_bytes`` holds after the reserve and the weights."""

    free_bytes: float
    """Left for requests' state (negative: the model does not fit)."""
    requests: int
    """Whole requests of ``request_bytes`` that fit (0 when nothing is free)."""


def capacity(
    memory_bytes: float, weights_bytes: float, reserve_bytes: float, request_bytes: float
) -> Capacity:
    """The capacity formula of §12.1.5: free = memory - reserve - weights; requests =
    floor(free / request state)."""
    if request_bytes <= 0:
        raise SpecError("request_bytes", "must be positive")
    free = memory_bytes - reserve_bytes - weights_bytes
    return Capacity(free, max(0, math.floor(free / request_bytes + 1e-9)))


def power_w(tokens_per_s: float, joules_per_token: float) -> float:
    """Power a token rate draws at a measured energy per token."""
    return tokens_per_s * joules_per_token


def lora_parameters(adapter_bytes: float, bytes_per_value: int = BF16_BYTES) -> float:
    """Parameters of an adapter stored at ``bytes_per_value``."""
    return adapter_bytes / bytes_per_value


def trainable_parameters(memory_bytes: float, bytes_per_parameter: float) -> float:
    """Parameters whose resident training state fits in ``memory_bytes``."""
    if bytes_per_parameter <= 0:
        raise SpecError("bytes_per_parameter", "must be positive")
    return memory_bytes / bytes_per_parameter


def tokens_in(seconds: float, tokens_per_s: float) -> float:
    """Tokens generated in ``seconds`` at a decode rate."""
    return seconds * tokens_per_s


def round_budget_s(deadline_s: float, rounds: int, other_s: float) -> float:
    """Model time left a round when ``deadline_s`` is spread over ``rounds`` of which
    ``other_s`` a round is other work (§12.1.5: 45 / 20 - 0.3 = 1.95 s)."""
    if rounds <= 0:
        raise SpecError("rounds", "must be positive")
    return deadline_s / rounds - other_s
