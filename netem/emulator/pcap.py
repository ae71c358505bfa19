"""pcap files of each end of the link, with nanosecond timestamps, written off the packet path.

Records are appended to a ``bytearray`` in memory while the capture runs (one ``struct``
pack and one slice per packet, no I/O) and written to disk when it stops. A memory cap
bounds the buffer; records beyond it are counted as ``dropped`` and never block the path.

Format: classic pcap, nanosecond variant (magic ``0xa1b23c4d``), link type
``LINKTYPE_RAW`` (101: each record is a bare IPv4 or IPv6 packet, as a TUN device
carries them). Timestamps are CLOCK_REALTIME, derived from the CLOCK_MONOTONIC times the
emulator works in plus an offset taken when the capture starts (``clock_offset_ns``,
reported by ``capture_stop``): subtract it to get back the shared monotonic clock.
"""

from __future__ import annotations

import heapq
import struct
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from tbcore.errors import SpecError

PCAP_MAGIC_NS = 0xA1B23C4D
"""Nanosecond-resolution pcap (libpcap's PCAP_NSEC_MAGIC)."""
PCAP_VERSION = (2, 4)
LINKTYPE_RAW = 101
"""Raw IP, no link-layer header (tcpdump.org/linktypes.html)."""
DEFAULT_SNAPLEN_BYTES = 128
"""Enough for IPv4/IPv6 + TCP with options; full packets at 333 Mbit/s fill memory quickly."""
MAX_SNAPLEN_BYTES = 65535
DEFAULT_MEMORY_LIMIT_BYTES = 512 * 2**20
"""Per capture buffer: past it, records are dropped (and counted), never the packets."""

_FILE_HEADER = struct.Struct("<IHHiIII")
_RECORD_HEADER = struct.Struct("<IIII")


def clock_offset_ns() -> int:
    """CLOCK_REALTIME minus CLOCK_MONOTONIC, in nanoseconds, now."""
    return time.time_ns() - time.monotonic_ns()


def check_snaplen(snaplen: object) -> int:
    if (
        isinstance(snaplen, bool)
        or not isinstance(snaplen, int)
        or not (1 <= snaplen <= MAX_SNAPLEN_BYTES)
    ):
        raise SpecError("snaplen", f"must be a whole number in [1, 65535], got {snaplen!r}")
    return snaplen


class PcapBuffer:
    """pcap records of one end of the link, in memory until :meth:`write`."""

    def __init__(
        self,
        snaplen: int = DEFAULT_SNAPLEN_BYTES,
        offset_ns: int | None = None,
        memory_limit_bytes: int = DEFAULT_MEMORY_LIMIT_BYTES,
    ) -> None:
        self.snaplen = check_snaplen(snaplen)
        self.offset_ns = clock_offset_ns() if offset_ns is None else offset_ns
        self.memory_limit_bytes = memory_limit_bytes
        self.data = bytearray()
        self.records = 0
        self.dropped = 0
        """Records not kept because the buffer was full."""

    def add(self, monotonic_s: float, packet: bytes) -> None:
        """One packet seen at monotonic time ``monotonic_s``."""
        data = self.data
        if len(data) >= self.memory_limit_bytes:
            self.dropped += 1
            return
        ts_ns = int(monotonic_s * 1e9) + self.offset_ns
        size = len(packet)
        caplen = size if size < self.snaplen else self.snaplen
        data += _RECORD_HEADER.pack(ts_ns // 1_000_000_000, ts_ns % 1_000_000_000, caplen, size)
        data += packet[:caplen]
        self.records += 1

    def header(self) -> bytes:
        return _FILE_HEADER.pack(PCAP_MAGIC_NS, *PCAP_VERSION, 0, 0, self.snaplen, LINKTYPE_RAW)

    def write(self, path: Path) -> None:
        with open(path, "wb") as f:
            f.write(self.header())
            f.write(self.data)


def iter_records(data: bytes | bytearray) -> Iterator[tuple[int, bytes]]:
    """(timestamp_ns, raw record with its header) of a pcap body (without the file header)."""
    view = memoryview(data)
    pos = 0
    end = len(data)
    while pos + _RECORD_HEADER.size <= end:
        sec, nsec, caplen, _ = _RECORD_HEADER.unpack_from(view, pos)
        stop = pos + _RECORD_HEADER.size + caplen
        yield sec * 1_000_000_000 + nsec, bytes(view[pos:stop])
        pos = stop


def write_merged(path: Path, snaplen: int, bodies: Iterable[bytes | bytearray]) -> int:
    """Write one pcap from several record bodies, each in time order, merged by timestamp."""
    count = 0
    with open(path, "wb") as f:
        f.write(_FILE_HEADER.pack(PCAP_MAGIC_NS, *PCAP_VERSION, 0, 0, snaplen, LINKTYPE_RAW))
        for _, record in heapq.merge(*(iter_records(b) for b in bodies), key=lambda r: r[0]):
            f.write(record)
            count += 1
    return count


def read_pcap(path: Path) -> tuple[dict[str, int], list[tuple[int, bytes]]]:
    """(file header fields, [(timestamp_ns, packet bytes)]) of a nanosecond pcap file."""
    raw = Path(path).read_bytes()
    if len(raw) < _FILE_HEADER.size:
        raise SpecError("pcap", f"{path}: shorter than a pcap header")
    magic, major, minor, _, _, snaplen, linktype = _FILE_HEADER.unpack_from(raw)
    if magic != PCAP_MAGIC_NS:
        raise SpecError("pcap", f"{path}: magic {magic:#x} is not nanosecond pcap")
    packets = [
        (ts, rec[_RECORD_HEADER.size :]) for ts, rec in iter_records(raw[_FILE_HEADER.size :])
    ]
    header = {"magic": magic, "version": (major, minor), "snaplen": snaplen, "linktype": linktype}
    return header, packets
