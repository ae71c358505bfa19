"""The worked examples of docs/models.md, recomputed from the models (``testbed bounds``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

from harness.bounds.airtime import (
    CHAPTER_ACK_IP_BYTES,
    CHAPTER_DATA_IP_BYTES,
    IMAGE_EXCHANGES,
    airtime_s,
)
from harness.bounds.base import BITS_PER_BYTE, INITCWND_SEGMENTS, MODELS_MSS_BYTES, TCP_MSS_BYTES
from harness.bounds.fec import fec_repair_symbols
from harness.bounds.mathis import mathis_throughput_bps
from harness.bounds.overhead import wire_bytes
from harness.bounds.retransmission import retransmission_rounds, retransmission_time_s
from harness.bounds.serial import serial_time
from harness.bounds.setup import setup_time_s
from harness.bounds.slowstart import slow_start_rounds
from harness.bounds.window import bdp_bytes, window_throughput_bps


@dataclass(frozen=True)
class WorkedExample:
    """One worked example of docs/models.md, recomputed by the functions above."""

    name: str
    """Short name, with the docs/models.md section."""
    inputs: str
    """The inputs, as docs/models.md states them."""
    value: float
    """The computed value, in ``unit``."""
    unit: str
    """Unit of ``value``: s, Mbit/s, bytes, rounds, symbols, %."""
    printed: str
    """The value as docs/models.md prints it; ``value`` rounds to it (see :meth:`matches`)."""

    def rounded(self) -> str:
        """``value`` at the precision of ``printed``."""
        decimals = len(self.printed.partition(".")[2])
        return f"{self.value:.{decimals}f}"

    def matches(self) -> bool:
        return self.rounded() == self.printed


AUDIO_BYTES = 354_640
"""The WAN voice case's audio (docs/design.md workloads)."""


MBIT = 1e6
"""Bits per second in a Mbit/s (the unit docs/models.md states rates in)."""


def _voice_time_s() -> float:
    """The WAN voice case's ideal serial time (docs/models.md section 1)."""
    return serial_time(AUDIO_BYTES, 0, 333 * MBIT, 333 * MBIT, 0.2, 0.030)


def _audio_packets() -> int:
    """Packets of the voice case's audio at the TCP MSS."""
    return wire_bytes(AUDIO_BYTES, TCP_MSS_BYTES, 0, 0)[0]


def _serial_and_setup_examples() -> list[WorkedExample]:
    """docs/models.md sections 1 (serial request) and 4 (set-up)."""
    return [
        WorkedExample(
            "1 serial request (image)",
            "30 MB up @ 20 Mbit/s, 5 MB down @ 100 Mbit/s, R 0.1 s, Tc 0.3 s",
            serial_time(30_000_000, 5_000_000, 20 * MBIT, 100 * MBIT, 0.1, 0.3),
            "s",
            "12.8",
        ),
        WorkedExample(
            "1 serial request (voice, ideal)",
            "354,640 B up @ 333 Mbit/s, R 0.2 s, Tc 30 ms",
            _voice_time_s(),
            "s",
            "0.2385",
        ),
        WorkedExample(
            "4 set-up per round",
            "30 rounds, R 0.2 s, 2 extra RTT each (h2 new)",
            setup_time_s("h2", "new", 0.2, requests=30),
            "s",
            "12",
        ),
        WorkedExample(
            "4 set-up once",
            "1 connection, R 0.2 s, 2 RTT (h2 new)",
            setup_time_s("h2", "new", 0.2),
            "s",
            "0.4",
        ),
    ]


def _window_examples() -> list[WorkedExample]:
    """docs/models.md sections 5 (window bound, BDP) and 6 (slow start)."""
    window = window_throughput_bps(64_000, 0.1, 20 * MBIT)
    return [
        WorkedExample(
            "5 window bound",
            "W 64,000 B, R 0.1 s, path 20 Mbit/s",
            window / MBIT,
            "Mbit/s",
            "5.12",
        ),
        WorkedExample(
            "5 window bound, 30 MB",
            "30 MB at the window bound above",
            30_000_000 * BITS_PER_BYTE / window,
            "s",
            "46.9",
        ),
        WorkedExample(
            "5 BDP",
            "20 Mbit/s, R 0.1 s",
            bdp_bytes(20 * MBIT, 0.1) / 1000,
            "KB",
            "250",
        ),
        WorkedExample(
            "6 slow-start rounds",
            "354,640 B, IW 10, MSS 1460",
            slow_start_rounds(AUDIO_BYTES, MODELS_MSS_BYTES, INITCWND_SEGMENTS),
            "rounds",
            "5",
        ),
    ]


def _loss_examples() -> list[WorkedExample]:
    """docs/models.md sections 8 (Mathis) and 9 (retransmission)."""
    mathis = mathis_throughput_bps(TCP_MSS_BYTES, 0.2, 0.14)
    voice = _voice_time_s()
    audio_packets = _audio_packets()
    return [
        WorkedExample(
            "8 Mathis (C = 1)",
            "MSS 1448, R 0.2 s, p 0.14",
            mathis / MBIT,
            "Mbit/s",
            "0.155",
        ),
        WorkedExample(
            "8 Mathis, audio",
            "354,640 B at the Mathis bound above",
            AUDIO_BYTES * BITS_PER_BYTE / mathis,
            "s",
            "18.3",
        ),
        WorkedExample(
            "9 retransmission, expected",
            f"{audio_packets} packets, p 0.14, base 0.2385 s, R 0.2 s",
            retransmission_time_s(voice, 0.2, audio_packets, 0.14),
            "s",
            "0.756",
        ),
        WorkedExample(
            "9 retransmission, p99",
            f"{audio_packets} packets, p 0.14, base 0.2385 s, R 0.2 s",
            retransmission_time_s(voice, 0.2, audio_packets, 0.14, quantile=0.99),
            "s",
            "1.24",
        ),
        WorkedExample(
            "9 retransmission, p99 rounds",
            f"{audio_packets} packets, p 0.14",
            retransmission_rounds(audio_packets, 0.14, quantile=0.99),
            "rounds",
            "6",
        ),
    ]


def _fec_examples() -> list[WorkedExample]:
    """docs/models.md section 10 (erasure coding)."""
    audio_packets = _audio_packets()
    repair = fec_repair_symbols(audio_packets, 0.14, 0.999)
    fec_block_s = serial_time(
        (audio_packets + repair) * TCP_MSS_BYTES, 0, 333 * MBIT, 333 * MBIT, 0.2, 0.030
    )
    return [
        WorkedExample(
            "10 FEC repair symbols",
            f"k {audio_packets}, p 0.14, target 0.999",
            repair,
            "symbols",
            "63",
        ),
        WorkedExample(
            "10 FEC redundancy",
            f"r / k with k {audio_packets}",
            100.0 * repair / audio_packets,
            "%",
            "25.7",
        ),
        WorkedExample(
            "10 FEC block time",
            "k + r packets of 1448 B @ 333 Mbit/s, R 0.2 s, Tc 30 ms",
            fec_block_s,
            "s",
            "0.241",
        ),
    ]


def _airtime_examples() -> list[WorkedExample]:
    """docs/models.md section 7 (shared airtime)."""
    return [
        WorkedExample(
            "7 shared airtime (image, chapter 12.4.1)",
            "30,800 data (302 µs) + 30,800 feedback (134 µs) exchanges, 802.11a 54/6 Mbit/s",
            airtime_s(IMAGE_EXCHANGES, CHAPTER_DATA_IP_BYTES)
            + airtime_s(IMAGE_EXCHANGES, CHAPTER_ACK_IP_BYTES),
            "s",
            "13.4",
        ),
        WorkedExample(
            "7 shared airtime, half the ACKs",
            "medium freed by 15,400 fewer feedback exchanges",
            airtime_s(IMAGE_EXCHANGES // 2, CHAPTER_ACK_IP_BYTES),
            "s",
            "2.1",
        ),
    ]


def worked_examples() -> list[WorkedExample]:
    """Every worked example of docs/models.md, computed (no typed-in results)."""
    return [
        *_serial_and_setup_examples(),
        *_window_examples(),
        *_loss_examples(),
        *_fec_examples(),
        *_airtime_examples(),
    ]
