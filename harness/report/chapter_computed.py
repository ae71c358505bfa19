"""The chapter's computations (FINDINGS kinds C and M/C), recomputed by harness.bounds from
the chapter's own inputs and compared with its printed figure at the precision it prints
(harness.report.verdict.judge_computed): a wrong bound reads "differs", whatever any run
measured. One :class:`Computation` a number; several may share a finding's ID.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from harness import bounds
from harness.bounds import deployment as dep
from harness.bounds import device as dev
from harness.bounds import features as feat
from harness.report.verdict import precision_of

MBIT = 1e6
GB = 1e9
R = 0.2
"""The long haul's round trip (§12.3)."""
AUDIO_BYTES = 354_640
AGENT_LOCAL_S = 0.3
SCREENSHOT_BYTES = 800_000
REMAINING_ROUNDS = 20
DEADLINE_S = 45.0


@dataclass(frozen=True)
class Computation:
    id: str
    """The FINDINGS.md ID."""
    section: str
    finding: str
    chapter: str
    """The chapter's figure as it prints it (its precision is read from it)."""
    unit: str
    compute: Callable[[], float]
    """The figure recomputed by harness.bounds, in ``unit``."""
    source: str
    """The model (docs/models.md section) and the chapter's inputs."""
    precision: float | None = None
    """None: half a unit of the printed figure's last digit; else what "about" allows."""

    @property
    def value(self) -> float:
        return float(self.chapter.replace(",", "").split()[0].lstrip("~"))

    @property
    def tolerance(self) -> float:
        return (
            self.precision if self.precision is not None else precision_of(self.chapter.split()[0])
        )


# --- the chapter's sites (§12.5.1's table), its devices (§12.1.5) ----------------------------

PHONE_BW = dev.memory_bandwidth_Bps()
NEAR = dep.Site(prep_s=0.27, model_s=dep.decode_round_s(1_792 * GB), rtt_s=0.02,
                up_bps=80 * MBIT, power_w=600)  # fmt: skip
CLOUD = dep.Site(prep_s=feat.compute_s(dep.PREFILL_FLOP, feat.H100_SXM_BF16_FLOPS),
                 model_s=dep.decode_round_s(3_350 * GB), rtt_s=R, up_bps=6.4 * MBIT,
                 power_w=700)  # fmt: skip
PHONE = dep.Site(prep_s=0.0, model_s=dep.decode_round_s(PHONE_BW), rtt_s=0.0, up_bps=None)
MEASURED_DECODE_FACTOR = 2.83
"""A measured step over the read bound on an RTX PRO 6000 (§12.5.2: 25.83 ms against 9.12 ms,
"about 2.83x"; the chapter multiplies by the rounded factor, and so do we: 25.83 / 9.12 =
2.832 moves the near site's 16.04 s to 16.05 s)."""


def _task(site: dep.Site, up_bps: float | None = None) -> float:
    return site.task_s(REMAINING_ROUNDS, AGENT_LOCAL_S, SCREENSHOT_BYTES, up_bps)


def _q4_step_s() -> float:
    weights = dev.quantised_bytes(dev.QWEN3_8B_WEIGHTS_READ_BYTES)
    return dev.decode_step_s(weights + dev.QWEN3_8B_KV_8K_BYTES, PHONE_BW)


def _phone_capacity(memory_gb: float) -> dev.Capacity:
    weights = 4.61 * GB  # q4_0 resident weights (§12.1.5)
    return dev.capacity(memory_gb * GB, weights, 4 * GB, dev.QWEN3_8B_KV_8K_BYTES)


def _cloud_fixed_s() -> float:
    return dep.fixed_s(CLOUD, REMAINING_ROUNDS, AGENT_LOCAL_S)


def _upload_bits() -> float:
    return REMAINING_ROUNDS * SCREENSHOT_BYTES * 8


def _crossover_mbit() -> float:
    near = _task(NEAR.scaled(MEASURED_DECODE_FACTOR))
    far = dep.fixed_s(CLOUD.scaled(MEASURED_DECODE_FACTOR), REMAINING_ROUNDS, AGENT_LOCAL_S)
    rate = dep.crossover_rate_bps(near, far, _upload_bits())
    return math.nan if rate is None else rate / MBIT


def _feature_bytes() -> int:
    return feat.tensor_bytes(feat.QWEN3_VL_4B_VISUAL_TOKENS * feat.QWEN3_VL_4B_FEATURE_WIDTH)


def _migration(restore_s: float) -> float:
    return feat.migration_s(64 * 2**20, 80 * MBIT, restore_s)


C = Computation
# fmt: off
COMPUTATIONS: tuple[Computation, ...] = (
    C("F4", "§12.1.1", "Break-even uplink of lossless compression (half the 30 MB, 0.15 s)",
      "800 Mbit/s", "Mbit/s", lambda: 15e6 * 8 / 0.15 / MBIT, "MODELS 1: (S_u - S'_u) / B = T_e"),
    C("F11", "§12.1.3", "Rounds of 2.78 s that stay under the uncompressed 105 s",
      "37 rounds", "rounds", lambda: math.ceil(105 / 2.78) - 1, "MODELS 1", precision=0),
    C("F11", "§12.1.3", "... 38 rounds take", "106 s", "s", lambda: 38 * 2.78, "MODELS 1"),
    C("F12", "§12.1.4", "10,000 km one way at 2e8 m/s: the smallest RTT", "100 ms", "ms",
      lambda: 2 * 10_000e3 / 2e8 * 1e3, "propagation"),
    C("F13", "§12.1.5", "Phone memory bandwidth, 4 x16 LPDDR5X at 10.6 Gbit/s a pin",
      "84.8 GB/s", "GB/s", lambda: PHONE_BW / GB, "docs/models.md §16"),
    C("F14", "§12.1.5", "BF16 decode step reading the weights (15.14 GB)", "0.179 s", "s",
      lambda: dev.decode_step_s(dev.QWEN3_8B_WEIGHTS_READ_BYTES, PHONE_BW), "§16"),
    C("F14", "§12.1.5", "... with the 8K KV (16.345 GB)", "0.193 s", "s",
      lambda: dev.decode_step_s(dev.QWEN3_8B_WEIGHTS_READ_BYTES + dev.QWEN3_8B_KV_8K_BYTES,
                                PHONE_BW), "§16"),
    C("F14", "§12.1.5", "q4_0 weights read a step (18 B per 32 values)", "4.26 GB", "GB",
      lambda: dev.quantised_bytes(dev.QWEN3_8B_WEIGHTS_READ_BYTES) / GB, "§16"),
    C("F14", "§12.1.5", "... the q4_0 step with KV", "64.4 ms", "ms", lambda: _q4_step_s() * 1e3,
      "§16"),
    C("F14", "§12.1.5", "... its token rate", "15.5 token/s", "token/s", lambda: 1 / _q4_step_s(),
      "§16"),
    C("F15", "§12.1.5", "A 6 GB phone after 4 GB reserved and 4.61 GB of q4_0 weights",
      "-2.61 GB", "GB", lambda: _phone_capacity(6).free_bytes / GB, "§16 capacity"),
    C("F15", "§12.1.5", "8K requests a 12 GB phone holds", "2 requests", "requests",
      lambda: _phone_capacity(12).requests, "§16 capacity", precision=0),
    C("F15", "§12.1.5", "... a 16 GB phone", "6 requests", "requests",
      lambda: _phone_capacity(16).requests, "§16 capacity", precision=0),
    C("F15", "§12.1.5", "... a 24 GB phone", "12 requests", "requests",
      lambda: _phone_capacity(24).requests, "§16 capacity", precision=0),
    C("F15", "§12.1.5", "BF16 weights (16.38 GB) on a 24 GB phone: left", "3.62 GB", "GB",
      lambda: dev.capacity(24 * GB, 16.38 * GB, 4 * GB, dev.QWEN3_8B_KV_8K_BYTES).free_bytes / GB,
      "§16 capacity"),
    C("F16", "§12.1.5", "M3 Ultra (819 GB/s): a step of 16.345 GB", "19.96 ms", "ms",
      lambda: dev.decode_step_s(16.345 * GB, 819 * GB) * 1e3, "§16"),
    C("F16", "§12.1.5", "RTX PRO 6000 (1,792 GB/s)", "9.12 ms", "ms",
      lambda: dev.decode_step_s(16.345 * GB, 1_792 * GB) * 1e3, "§16"),
    C("F17", "§12.1.5", "14.8 token/s at 0.576 J a token", "8.5 W", "W",
      lambda: dev.power_w(14.8, 0.576), "§16 power"),
    C("F18", "§12.1.5", "Rank-16 Q/V LoRA of 14.6 MiB: parameters", "7.65 M", "M",
      lambda: dev.lora_parameters(14.6 * dev.MIB) / 1e6, "§16 training state"),
    C("F18", "§12.1.5", "Full Adam (16 B a parameter) in 24 GB", "1.5 B", "B",
      lambda: dev.trainable_parameters(24 * GB, dev.ADAM_BYTES_PER_PARAMETER) / 1e9, "§16"),
    C("F18", "§12.1.5", "Qwen3-8B's full training state", "131.1 GB", "GB",
      lambda: dev.QWEN3_8B_PARAMETERS * dev.ADAM_BYTES_PER_PARAMETER / GB, "§16"),
    C("F19", "§12.1.5", "Tokens a round in 2.9 s at q4_0's 15.5 token/s", "45 tokens", "tokens",
      lambda: dev.tokens_in(2.9, 1 / _q4_step_s()), "§16"),
    C("F19", "§12.1.5", "Tokens a round within a 45 s deadline over 20 rounds", "30 tokens",
      "tokens", lambda: math.floor(dev.tokens_in(dev.round_budget_s(45, 20, 0.3),
                                                   1 / _q4_step_s())), "§16", precision=0),
    C("F20", "§12.2.2", "Qwen3-VL-4B features, 400 x (4 x 2,560) BF16", "8,192,000 B", "B",
      _feature_bytes, "docs/models.md §17"),
    C("F20", "§12.2.2", "... uploaded at 6.4 Mbit/s", "10.24 s", "s",
      lambda: feat.transfer_s(_feature_bytes(), 6.4 * MBIT), "§17"),
    C("F21", "§12.2.2", "Encoding (1.31 TFLOP) on an RTX 4090", "7.9 ms", "ms",
      lambda: feat.compute_s(feat.QWEN3_VL_ENCODE_FLOP, feat.RTX_4090_BF16_FLOPS) * 1e3, "§17"),
    C("F21", "§12.2.2", "... on an H100 SXM", "1.3 ms", "ms",
      lambda: feat.compute_s(feat.QWEN3_VL_ENCODE_FLOP, feat.H100_SXM_BF16_FLOPS) * 1e3, "§17"),
    C("F21", "§12.2.2", "Local encode and features sent", "10.25 s", "s",
      lambda: feat.compute_s(feat.QWEN3_VL_ENCODE_FLOP, feat.RTX_4090_BF16_FLOPS)
      + feat.transfer_s(_feature_bytes(), 6.4 * MBIT), "§17"),
    C("F22", "§12.2.2", "Image against features on a 400 Gbit/s port", "0.15 ms", "ms",
      lambda: (feat.transfer_s(_feature_bytes(), 400e9)
               - feat.transfer_s(SCREENSHOT_BYTES, 400e9)) * 1e3, "§17"),
    C("F22", "§12.2.2", "KV of the 400 visual tokens at 144 KiB a token", "56.3 MiB", "MiB",
      lambda: 400 * feat.KV_BYTES_PER_TOKEN_VL / dev.MIB, "§17"),
    C("F23", "§12.2.3", "Migrating 64 MiB over 80 Mbit/s with 1 s of restore", "7.7 s", "s",
      lambda: _migration(1.0), "§17 migration"),
    C("F23", "§12.2.3", "... net over 10 rounds at 0.4 s saved a round", "-3.7 s", "s",
      lambda: feat.net_saving_s(0.4, 10, _migration(1.0)), "§17 migration"),
    C("F23", "§12.2.3", "... break-even rounds", "20 rounds", "rounds",
      lambda: feat.break_even_rounds(_migration(1.0), 0.4), "§17 migration", precision=0),
    C("F23", "§12.2.3", "... with 2 s of restore", "22 rounds", "rounds",
      lambda: feat.break_even_rounds(_migration(2.0), 0.4), "§17 migration", precision=0),
    C("F24", "§12.2.4", "Start-ups of a TP=2 step (36 layers, 2 all-reduces, 2 each)",
      "144 start-ups", "start-ups", lambda: dep.startup_count(36, 2, 2), "§18", precision=0),
    C("F24", "§12.2.4", "... at 134 µs a short air exchange", "19.3 ms", "ms",
      lambda: dep.startup_count(36, 2, 2) * bounds.airtime_s(1, bounds.CHAPTER_ACK_IP_BYTES)
      * 1e3, "§18 and MODELS 7 (802.11a)"),
    C("F33", "§12.3.3", "Mathis, MSS 1448, 200 ms, 14 %, C = 1", "0.155 Mbit/s", "Mbit/s",
      lambda: bounds.mathis_throughput_bps(1448, R, 0.14) / MBIT, "MODELS 8"),
    C("F33", "§12.3.3", "... C = 1.22", "0.189 Mbit/s", "Mbit/s",
      lambda: bounds.mathis_throughput_bps(1448, R, 0.14, c=1.22) / MBIT, "MODELS 8"),
    C("F33", "§12.3.3", "... the audio at that rate", "18.3 s", "s",
      lambda: AUDIO_BYTES * 8 / bounds.mathis_throughput_bps(1448, R, 0.14), "MODELS 8"),
    C("F34", "§12.3.3", "BDP of 333 Mbit/s x 200 ms", "8.325 MB", "MB",
      lambda: 333 * MBIT * R / 8 / 1e6, "MODELS 8 (BBR)"),
    C("F34", "§12.3.3", "Ideal goodput (1 - p) x 333 Mbit/s", "286 Mbit/s", "Mbit/s",
      lambda: (1 - 0.14) * 333, "MODELS 8 (BBR)", precision=0.5),
    C("F34", "§12.3.3", "... over the Mathis bound", "1850 x", "x",
      lambda: (1 - 0.14) * 333 * MBIT / bounds.mathis_throughput_bps(1448, R, 0.14),
      "MODELS 8", precision=5),
    C("F35", "§12.3.3", "Expected losses of 245 packets at 14 %", "34.3 packets", "packets",
      lambda: 245 * 0.14, "MODELS 9"),
    C("F35", "§12.3.3", "Ideal selective repeat: expected completion", "0.756 s", "s",
      lambda: bounds.retransmission_time_s(0.2385, R, 245, 0.14), "MODELS 9"),
    C("F35", "§12.3.3", "... its p99", "1.24 s", "s",
      lambda: bounds.retransmission_time_s(0.2385, R, 245, 0.14, quantile=0.99), "MODELS 9"),
    C("F43", "§12.3.5", "Model 30 -> 3 ms: at most saved", "27 ms", "ms", lambda: 30 - 3,
      "MODELS 1"),
    C("F43", "§12.3.5", "RTT 200 -> 20 ms: saved", "180 ms", "ms", lambda: 200 - 20, "MODELS 1"),
    C("F45", "§12.4.1", "802.11a data exchange (1,228 B at 54 Mbit/s)", "302 µs", "µs",
      lambda: bounds.airtime_s(1, bounds.CHAPTER_DATA_IP_BYTES) * 1e6, "MODELS 7, 802.11a"),
    C("F45", "§12.4.1", "... an ACK-carrying exchange", "134 µs", "µs",
      lambda: bounds.airtime_s(1, bounds.CHAPTER_ACK_IP_BYTES) * 1e6, "MODELS 7, 802.11a"),
    C("F51", "§12.4.3", "Duplication over both paths, p1 0.1, p2 0.05", "0.5 %", "%",
      lambda: 100 * bounds.duplicate_failure(0.1, 0.05), "MODELS 12"),
    C("F51", "§12.4.3", "... behind an end point failing with q = 0.02", "2.5 %", "%",
      lambda: 100 * bounds.duplicate_failure(0.1, 0.05, 0.02), "MODELS 12", precision=0.05),
    C("F55", "§12.5.1", "Phone energy, 900 tokens at 0.576 J", "518 J", "J",
      lambda: 900 * 0.576, "§18 energy", precision=0.5),
    C("F55", "§12.5.1", "... at 0.756 J", "680 J", "J", lambda: 900 * 0.756, "§18 energy",
      precision=0.5),
    C("F55", "§12.5.1", "Near: 600 W x busy time", "1.81 kJ", "kJ",
      lambda: NEAR.energy_j(REMAINING_ROUNDS) / 1e3, "§18 energy"),
    C("F55", "§12.5.1", "Cloud: 700 W x busy time", "1.12 kJ", "kJ",
      lambda: CLOUD.energy_j(REMAINING_ROUNDS) / 1e3, "§18 energy"),
    C("F55", "§12.5.1", "20 prompts of the 490 a charge allows", "4.1 %", "%",
      lambda: 100 * 20 / 490, "§18 energy"),
    C("F59", "§12.5.2", "Near with the measured 2.83x model time", "16.04 s", "s",
      lambda: _task(NEAR.scaled(MEASURED_DECODE_FACTOR)), "§18"),
    C("F59", "§12.5.2", "Cloud without upload, 2.83x", "14.29 s", "s",
      lambda: dep.fixed_s(CLOUD.scaled(MEASURED_DECODE_FACTOR), REMAINING_ROUNDS, AGENT_LOCAL_S),
      "§18"),
    C("F59", "§12.5.2", "The uplink above which the cloud wins", "73 Mbit/s", "Mbit/s",
      _crossover_mbit, "§18 crossover"),
    C("F62", "§12.5.2", "Text agent: 56 KB fewer at 333 Mbit/s", "1.3 ms", "ms",
      lambda: feat.transfer_s(66_207 - 10_193, 333 * MBIT) * 1e3, "MODELS 1"),
    C("F62", "§12.5.2", "GPU-seconds the kept state saves (H100 SXM)", "0.239 s", "s",
      lambda: feat.compute_s(296_505_803_538_432 - 60_380_764_176_384,
                             feat.H100_SXM_BF16_FLOPS), "§17"),
    C("F62", "§12.5.2", "Holding 465 MB of 80 GB breaks even after", "41 s", "s",
      lambda: feat.holding_break_even_s(
          feat.compute_s(296_505_803_538_432 - 60_380_764_176_384, feat.H100_SXM_BF16_FLOPS),
          0.465e9, 80e9), "§17"),
    C("F64", "§12.5.2", "Expected cost at 99 % success", "1.01 C", "C",
      lambda: dep.expected_attempts_cost(1.0, 0.99), "§18 retries"),
    C("F64", "§12.5.2", "... at 80 %", "1.25 C", "C", lambda: dep.expected_attempts_cost(1.0, 0.8),
      "§18 retries"),
)
# fmt: on
"""Every computation the chapter prints that FINDINGS.md marks C or M/C."""


def site_task_s(site: str, up_bps: float | None = None) -> float:
    """The remaining 20 rounds at one of the chapter's sites (for the deployment rows)."""
    return _task({"phone": PHONE, "near": NEAR, "cloud": CLOUD}[site], up_bps)


def cloud_deadline_rate_bps() -> float | None:
    return dep.deadline_rate_bps(_cloud_fixed_s(), _upload_bits(), DEADLINE_S)
