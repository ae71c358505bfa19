"""ACK and header overhead counted from packets, next to docs/models.md section 7."""

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


def test_the_chapters_sizes_beside_the_measured() -> None:
    # §12.3.2: 1,168-byte payloads, 60-byte headers, 92-byte ACKs; the image round trip's
    # 30 MB up and 5 MB down are 25,685 + 4,281 packets, and half their ACKs are 1.38 MB
    up = overhead.chapter_modelled(30_000_000, 1.0)
    down = overhead.chapter_modelled(5_000_000, 1.0)
    assert (up["chapter_data_packets"], down["chapter_data_packets"]) == (25_685, 4_281)
    assert up["chapter_wire_bytes"] == 30_000_000 + 25_685 * 60
    halved = (up["chapter_ack_wire_bytes"] + down["chapter_ack_wire_bytes"]) / 2
    assert f"{halved / 1e6:.2f}" == "1.38"
