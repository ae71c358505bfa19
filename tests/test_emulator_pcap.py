"""pcap buffers: nanosecond format, snaplen, memory cap, merge by time; read back by scapy."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from netem.emulator.pcap import (
    LINKTYPE_RAW,
    PCAP_MAGIC_NS,
    PcapBuffer,
    check_snaplen,
    read_pcap,
    write_merged,
)
from tbcore.errors import SpecError


def udp_packet(payload: bytes = b"hello") -> bytes:
    from scapy.layers.inet import IP, UDP

    return bytes(IP(src="198.18.1.2", dst="198.18.2.2") / UDP(sport=1000, dport=2000) / payload)


def test_write_and_read_back(tmp_path: Path) -> None:
    buf = PcapBuffer(snaplen=65535, offset_ns=1_000_000_000_000)
    pkt = udp_packet()
    buf.add(1.000000123, pkt)
    buf.add(2.5, pkt)
    path = tmp_path / "x.pcap"
    buf.write(path)
    header, packets = read_pcap(path)
    assert header["magic"] == PCAP_MAGIC_NS and header["linktype"] == LINKTYPE_RAW
    assert [ts for ts, _ in packets] == [1_001_000_000_123, 1_002_500_000_000]
    assert packets[0][1] == pkt
    assert struct.unpack("<I", path.read_bytes()[:4])[0] == 0xA1B23C4D

    from scapy.utils import PcapNgReader, rdpcap  # noqa: F401 (offline parsing only)

    parsed = rdpcap(str(path))
    assert len(parsed) == 2
    assert parsed[0].dport == 2000
    assert int(parsed[0].time * 10**9) // 1000 == 1_001_000_000_123 // 1000


def test_snaplen_truncates_but_keeps_original_length(tmp_path: Path) -> None:
    buf = PcapBuffer(snaplen=28, offset_ns=0)
    pkt = udp_packet(b"x" * 100)
    buf.add(1.0, pkt)
    buf.write(tmp_path / "t.pcap")
    raw = (tmp_path / "t.pcap").read_bytes()
    _, _, caplen, origlen = struct.unpack_from("<IIII", raw, 24)
    assert (caplen, origlen) == (28, len(pkt))


def test_memory_cap_counts_dropped_records() -> None:
    buf = PcapBuffer(snaplen=128, offset_ns=0, memory_limit_bytes=100)
    for _ in range(10):
        buf.add(1.0, udp_packet())
    assert buf.records >= 1 and buf.dropped == 10 - buf.records


def test_merge_orders_by_time(tmp_path: Path) -> None:
    a, b = PcapBuffer(offset_ns=0), PcapBuffer(offset_ns=0)
    for t in (1.0, 3.0, 5.0):
        a.add(t, udp_packet(b"a"))
    for t in (2.0, 4.0):
        b.add(t, udp_packet(b"b"))
    path = tmp_path / "m.pcap"
    assert write_merged(path, 128, [a.data, b.data]) == 5
    _, packets = read_pcap(path)
    assert [ts for ts, _ in packets] == [t * 10**9 for t in (1, 2, 3, 4, 5)]


@pytest.mark.parametrize("bad", [0, -1, 70000, "128", True])
def test_bad_snaplen(bad: object) -> None:
    with pytest.raises(SpecError, match="snaplen"):
        check_snaplen(bad)


def test_read_pcap_refuses_other_formats(tmp_path: Path) -> None:
    path = tmp_path / "us.pcap"
    path.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 101))
    with pytest.raises(SpecError, match="magic"):
        read_pcap(path)
