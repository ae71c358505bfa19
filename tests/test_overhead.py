"""ACK and header overhead counted from packets, next to MODELS.md section 7."""

import struct

import pytest

from harness.collect import overhead

CLIENT = bytes([198, 18, 1, 2])
SERVER = bytes([198, 18, 2, 2])


def _packet(src: bytes, dst: bytes, payload: int, flags: int = 0x10) -> bytes:
    total = 20 + 32 + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, 0, 0, 64, 6, 0, src, dst)
    tcp = struct.pack("!HHIIHHHH", 1, 2, 0, 0, (8 << 12) | flags, 0, 0, 0) + b"\x00" * 12
    return ip + tcp + b"x" * payload


def test_counts_data_and_pure_acks_per_direction() -> None:
    packets = [(0.0, _packet(CLIENT, SERVER, 0, 0x02))]  # SYN: not a pure ACK
    packets += [(0.0, _packet(SERVER, CLIENT, 1448)) for _ in range(10)]
    packets += [(0.0, _packet(CLIENT, SERVER, 0)) for _ in range(5)]
    counts = overhead.count(packets, CLIENT)
    assert counts["down"].data_packets == 10
    assert counts["down"].payload_bytes == 14480
    assert counts["up"].ack_packets == 5
    assert counts["down"].wire_bytes == 10 * (1448 + 52)
    rows = overhead.overhead_rows(counts, {"run_id": "r"}, 1448, quickack=False)
    (row,) = rows
    assert row["direction"] == "down" and row["acks_for_it"] == 5
    assert row["model_ack_packets"] == pytest.approx(5)  # one ACK per two segments
    assert row["model_wire_bytes"] == 14480 + 10 * 52
