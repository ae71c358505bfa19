"""A device's memory as a bound (docs/models.md §16): bandwidth from channels and pins, a
decode step from the bytes it reads, what a memory holds, power from a token rate."""

from __future__ import annotations

import pytest

from harness.bounds import device as dev
from tbcore.errors import SpecError


def test_the_phones_bandwidth_is_four_x16_channels() -> None:
    assert dev.channel_bandwidth_Bps(16, 10.6e9) == pytest.approx(21.2e9)
    assert dev.memory_bandwidth_Bps() == pytest.approx(84.8e9)
    assert dev.memory_bandwidth_Bps(channels=2) == pytest.approx(42.4e9)


def test_a_step_reads_its_bytes_once() -> None:
    step = dev.decode_step_s(dev.QWEN3_8B_WEIGHTS_READ_BYTES, dev.memory_bandwidth_Bps())
    assert step == pytest.approx(0.1785, abs=1e-4)
    q4 = dev.quantised_bytes(64.0)
    assert q4 == 18.0


def test_capacity_leaves_whole_requests_and_says_when_the_model_does_not_fit() -> None:
    fits = dev.capacity(12e9, 4.61e9, 4e9, dev.QWEN3_8B_KV_8K_BYTES)
    assert fits.free_bytes == pytest.approx(3.39e9) and fits.requests == 2
    too_small = dev.capacity(6e9, 4.61e9, 4e9, dev.QWEN3_8B_KV_8K_BYTES)
    assert too_small.free_bytes < 0 and too_small.requests == 0


def test_power_training_state_and_a_rounds_budget() -> None:
    assert dev.power_w(14.8, 0.576) == pytest.approx(8.5248)
    assert dev.trainable_parameters(24e9, 16) == pytest.approx(1.5e9)
    assert dev.lora_parameters(14.6 * dev.MIB) == pytest.approx(7.654e6, rel=1e-3)
    assert dev.round_budget_s(45, 20, 0.3) == pytest.approx(1.95)


@pytest.mark.parametrize(
    "call",
    [
        lambda: dev.memory_bandwidth_Bps(channels=0),
        lambda: dev.decode_step_s(1.0, 0.0),
        lambda: dev.capacity(1.0, 0.0, 0.0, 0.0),
        lambda: dev.trainable_parameters(1.0, 0.0),
        lambda: dev.round_budget_s(45, 0, 0.3),
    ],
)
def test_impossible_input_is_refused(call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SpecError):
        call()
