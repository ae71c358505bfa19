"""Retransmission rounds from a sender's capture (harness.collect.rounds)."""

from __future__ import annotations

from harness.collect.acks import TCP_ACK, TCP_SYN, TcpSegment
from harness.collect.rounds import transmission_rounds

SERVER, CLIENT = ("198.18.2.2", 443), ("198.18.1.2", 40000)
ISN = 1000


def _sent(t: float, first: int, size: int, flags: int = TCP_ACK) -> TcpSegment:
    return TcpSegment(t, SERVER[0], SERVER[1], CLIENT[0], CLIENT[1], ISN + 1 + first, 1, flags,
                      size, 100, 0)  # fmt: skip


def _transfer(segments: list[tuple[float, int, int]]) -> list[TcpSegment]:
    syn = _sent(0.0, -1, 0, TCP_SYN | TCP_ACK)
    return [syn] + [_sent(t, first, size) for t, first, size in segments]


def test_nothing_resent_is_one_round_and_no_data_is_none() -> None:
    assert transmission_rounds(_transfer([(1.0, 0, 1448), (1.0, 1448, 1448)])) == 1
    assert transmission_rounds(_transfer([])) is None


def test_the_most_resent_byte_counts_and_a_merged_retransmission_covers_both() -> None:
    segments = _transfer(
        [
            (1.0, 0, 1448),
            (1.0, 1448, 1448),
            (1.0, 2896, 1448),
            (1.2, 1448, 1448),  # the second segment again
            (1.4, 0, 2896),  # the first two merged (Linux's collapse): both once more
        ]
    )
    assert transmission_rounds(segments) == 3  # the second: sent, resent, in the merge


def test_only_data_first_sent_inside_the_window_counts() -> None:
    segments = _transfer(
        [
            (1.0, 0, 1448),  # a warm-up's data, resent three times, before the window
            (1.1, 0, 1448),
            (1.2, 0, 1448),
            (5.0, 1448, 1448),  # the request's, resent once
            (5.2, 1448, 1448),
        ]
    )
    assert transmission_rounds(segments, window=(4.0, None)) == 2
    assert transmission_rounds(segments, clock_offset_s=2.0, window=(2.5, 3.5)) == 2
    assert transmission_rounds(segments, window=(6.0, 7.0)) is None
