"""Every packet of one direction: arrival, departure or drop and why, size and header fields.

While a log runs, the core calls :meth:`PacketLog.departed` or :meth:`PacketLog.dropped`
for each packet; the header fields are parsed with ``struct`` on the spot (IPv4 or IPv6;
TCP seq/ack/flags/window, UDP ports) and packed into one fixed-size binary record in a
``bytearray``. Nothing touches the disk until the log stops and :meth:`write_csv` turns
the records into CSV. Times are CLOCK_MONOTONIC seconds, the clock every process of the
testbed shares.

Columns of the CSV (:data:`CSV_COLUMNS`): ``direction`` (up/down), ``event`` (departed,
dropped_queue, dropped_loss, dropped_outage), ``arrival_s``, ``due_s`` (scheduled departure,
empty for a drop), ``departure_s`` (actual, empty for a drop), ``size_bytes``, ``ip_proto``
(6 TCP, 17 UDP, ...), ``src_port``, ``dst_port``, ``tcp_seq``, ``tcp_ack``, ``tcp_flags`` (the byte
with FIN=1 SYN=2 RST=4 PSH=8 ACK=16 ...), ``tcp_window`` (unscaled), ``ip_id`` (IPv4).
"""

from __future__ import annotations

import csv
import math
import struct
from collections.abc import Iterator
from pathlib import Path

from netem.emulator.core import DROP_LOSS, DROP_OUTAGE, DROP_QUEUE

IPPROTO_TCP = 6
IPPROTO_UDP = 17
EVENTS = ("departed", "dropped_" + DROP_QUEUE, "dropped_" + DROP_LOSS, "dropped_" + DROP_OUTAGE)
_EVENT_CODE = {DROP_QUEUE: 1, DROP_LOSS: 2, DROP_OUTAGE: 3}

_RECORD = struct.Struct("<BdddIBHHIIBHH")
"""event, arrival, due, departure, size, proto, sport, dport, seq, ack, flags, window, ip id."""
_TCP = struct.Struct("!HHIIBBH")
_PORTS = struct.Struct("!HH")

CSV_COLUMNS = (
    "direction",
    "event",
    "arrival_s",
    "due_s",
    "departure_s",
    "size_bytes",
    "ip_proto",
    "src_port",
    "dst_port",
    "tcp_seq",
    "tcp_ack",
    "tcp_flags",
    "tcp_window",
    "ip_id",
)
DEFAULT_MEMORY_LIMIT_BYTES = 512 * 2**20


def parse_headers(packet: bytes) -> tuple[int, int, int, int, int, int, int, int]:
    """(proto, sport, dport, seq, ack, flags, window, ip_id) of an IP packet; zeros if absent."""
    if not packet:
        return 0, 0, 0, 0, 0, 0, 0, 0
    version = packet[0] >> 4
    if version == 4 and len(packet) >= 20:
        ihl = (packet[0] & 0x0F) * 4
        proto = packet[9]
        ip_id = (packet[4] << 8) | packet[5]
        fragment_offset = ((packet[6] & 0x1F) << 8) | packet[7]
        if fragment_offset:
            return proto, 0, 0, 0, 0, 0, 0, ip_id
    elif version == 6 and len(packet) >= 40:
        ihl = 40
        proto = packet[6]
        ip_id = 0
    else:
        return 0, 0, 0, 0, 0, 0, 0, 0
    if proto == IPPROTO_TCP and len(packet) >= ihl + 20:
        sport, dport, seq, ack, _, flags, window = _TCP.unpack_from(packet, ihl)
        return proto, sport, dport, seq, ack, flags, window, ip_id
    if proto == IPPROTO_UDP and len(packet) >= ihl + 4:
        sport, dport = _PORTS.unpack_from(packet, ihl)
        return proto, sport, dport, 0, 0, 0, 0, ip_id
    return proto, 0, 0, 0, 0, 0, 0, ip_id


class PacketLog:
    """The records of one direction, in memory; a :class:`netem.emulator.core.PacketRecorder`."""

    def __init__(
        self, direction: str, memory_limit_bytes: int = DEFAULT_MEMORY_LIMIT_BYTES
    ) -> None:
        self.direction = direction
        self.memory_limit_bytes = memory_limit_bytes
        self.data = bytearray()
        self.dropped_records = 0
        """Records not kept because the buffer was full (the packets themselves flowed on)."""

    def departed(self, arrival_s: float, due_s: float, now_s: float, packet: bytes) -> None:
        if len(self.data) >= self.memory_limit_bytes:
            self.dropped_records += 1
            return
        self.data += _RECORD.pack(0, arrival_s, due_s, now_s, len(packet), *parse_headers(packet))

    def dropped(self, arrival_s: float, reason: str, packet: bytes) -> None:
        if len(self.data) >= self.memory_limit_bytes:
            self.dropped_records += 1
            return
        self.data += _RECORD.pack(
            _EVENT_CODE[reason], arrival_s, math.nan, math.nan, len(packet), *parse_headers(packet)
        )

    @property
    def records(self) -> int:
        return len(self.data) // _RECORD.size

    def rows(self) -> Iterator[tuple]:
        for fields in _RECORD.iter_unpack(self.data):
            event, arrival, due, departure, *rest = fields
            yield (
                self.direction,
                EVENTS[event],
                repr(arrival),
                "" if math.isnan(due) else repr(due),
                "" if math.isnan(departure) else repr(departure),
                *rest,
            )

    def write_csv(self, path: Path) -> int:
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(CSV_COLUMNS)
            writer.writerows(self.rows())
        return self.records
