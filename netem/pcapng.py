"""pcapng with the TLS secrets inside: a capture that Wireshark and tshark decrypt with no
key-log option given.

:func:`pcapng_bytes` and :func:`iter_pcap` are pure (bytes in, bytes out); :func:`convert`
and :func:`read_capture` are the file edges. The layout is what ``editcap --inject-secrets
tls,keys.log`` writes (draft-ietf-opsawg-pcapng, "PCAP Next Generation Dump File Format"):

    Section Header Block (4.1), Interface Description Block (4.2, ``if_tsresol`` = 9:
    nanoseconds), Decryption Secrets Block (4.7, type ``TLSK``: the NSS key log, which
    also carries QUIC's secrets), then one Enhanced Packet Block (4.3) per packet.

Every block is padded to 32 bits. Only little-endian files are written; both byte orders
of classic pcap (microsecond and nanosecond) are read, and pcapng with one interface.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tbcore.errors import SpecError

SHB_TYPE = 0x0A0D0D0A
"""Section Header Block (pcapng section 4.1)."""
IDB_TYPE = 0x00000001
"""Interface Description Block (section 4.2)."""
EPB_TYPE = 0x00000006
"""Enhanced Packet Block (section 4.3)."""
DSB_TYPE = 0x0000000A
"""Decryption Secrets Block (section 4.7)."""
BYTE_ORDER_MAGIC = 0x1A2B3C4D
SECRETS_TLS_KEY_LOG = 0x544C534B
"""``TLSK``: the NSS key log format (SSLKEYLOGFILE), TLS and QUIC alike."""
OPT_ENDOFOPT = 0
OPT_IF_TSRESOL = 9
"""Interface option: timestamp resolution; 9 = 10^-9 s."""
TSRESOL_NS = 9
PCAP_MAGIC_US = 0xA1B2C3D4
PCAP_MAGIC_NS = 0xA1B23C4D
PCAP_HEADER = struct.Struct("IHHiIII")
PCAP_RECORD = struct.Struct("IIII")
KEY_LOG_LABELS = (
    "CLIENT_RANDOM",
    "CLIENT_EARLY_TRAFFIC_SECRET",
    "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
    "SERVER_HANDSHAKE_TRAFFIC_SECRET",
    "CLIENT_TRAFFIC_SECRET_0",
    "SERVER_TRAFFIC_SECRET_0",
    "EXPORTER_SECRET",
    "EARLY_EXPORTER_SECRET",
)
"""The lines of an NSS key log a dissector uses (TLS 1.2 and 1.3, QUIC)."""


def _pad(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 4)


def _block(block_type: int, body: bytes) -> bytes:
    """A block: type, total length, the body padded to 32 bits, total length again."""
    body = _pad(body)
    total = 12 + len(body)
    return struct.pack("<II", block_type, total) + body + struct.pack("<I", total)


def section_header() -> bytes:
    # version 1.0, section length unknown (-1), no options
    return _block(SHB_TYPE, struct.pack("<IHHq", BYTE_ORDER_MAGIC, 1, 0, -1))


def interface_description(linktype: int, snaplen: int) -> bytes:
    tsresol = struct.pack("<HHB", OPT_IF_TSRESOL, 1, TSRESOL_NS) + b"\0" * 3
    end = struct.pack("<HH", OPT_ENDOFOPT, 0)
    return _block(IDB_TYPE, struct.pack("<HHI", linktype, 0, snaplen) + tsresol + end)


def decryption_secrets(key_log: bytes) -> bytes:
    return _block(DSB_TYPE, struct.pack("<II", SECRETS_TLS_KEY_LOG, len(key_log)) + key_log)


def enhanced_packet(ts_ns: int, data: bytes, original_bytes: int) -> bytes:
    head = struct.pack("<IIIII", 0, ts_ns >> 32, ts_ns & 0xFFFFFFFF, len(data), original_bytes)
    return _block(EPB_TYPE, head + data)


def key_log_lines(*texts: str) -> bytes:
    """The secret lines of key logs (client's, server's: the same secrets twice), each once,
    in order of first appearance; comments and unknown lines left out."""
    seen: dict[str, None] = {}
    for text in texts:
        for line in text.splitlines():
            words = line.split()
            if len(words) == 3 and words[0] in KEY_LOG_LABELS:
                seen.setdefault(" ".join(words), None)
    return "".join(f"{line}\n" for line in seen).encode("ascii")


@dataclass
class Capture:
    """What a capture file holds: its link type and snap length, the packets
    ``(ts_ns, data, original_bytes)``, and the secrets a pcapng embeds."""

    linktype: int
    snaplen: int
    packets: list[tuple[int, bytes, int]] = field(default_factory=list)
    secrets: bytes = b""


def pcapng_bytes(
    linktype: int, snaplen: int, packets: Iterable[tuple[int, bytes, int]], key_log: bytes
) -> Iterator[bytes]:
    """The blocks of a pcapng file: header, interface, secrets (when any), packets."""
    yield section_header()
    yield interface_description(linktype, snaplen)
    if key_log:
        yield decryption_secrets(key_log)
    for ts_ns, data, original in packets:
        yield enhanced_packet(ts_ns, data, original)


def iter_pcap(raw: bytes) -> tuple[int, int, Iterator[tuple[int, bytes, int]]]:
    """(link type, snap length, packets) of a classic pcap file's bytes, either byte order,
    microsecond or nanosecond timestamps."""
    if len(raw) < PCAP_HEADER.size:
        raise SpecError("pcap", "shorter than a pcap header")
    for endian in "<>":
        magic = struct.unpack_from(endian + "I", raw)[0]
        if magic in (PCAP_MAGIC_US, PCAP_MAGIC_NS):
            break
    else:
        raise SpecError("pcap", f"magic {raw[:4].hex()} is not pcap")
    fields = struct.unpack_from(endian + PCAP_HEADER.format, raw)
    snaplen, linktype = fields[5], fields[6] & 0x0FFFFFFF
    scale = 1 if magic == PCAP_MAGIC_NS else 1000
    record = struct.Struct(endian + PCAP_RECORD.format)

    def packets() -> Iterator[tuple[int, bytes, int]]:
        at = PCAP_HEADER.size
        while at + record.size <= len(raw):
            sec, frac, caplen, original = record.unpack_from(raw, at)
            at += record.size
            yield sec * 1_000_000_000 + frac * scale, raw[at : at + caplen], original
            at += caplen

    return linktype, snaplen, packets()


def parse_pcapng(raw: bytes) -> Capture:
    """The packets and secrets of a little-endian pcapng file with one interface."""
    at, capture = 0, Capture(linktype=-1, snaplen=0)
    tsresol_ns = 1000  # the default resolution: microseconds
    while at + 12 <= len(raw):
        block_type, total = struct.unpack_from("<II", raw, at)
        if total < 12 or at + total > len(raw):
            raise SpecError("pcapng", f"block at byte {at} runs past the end")
        body = raw[at + 8 : at + total - 4]
        if block_type == SHB_TYPE and struct.unpack_from("<I", body)[0] != BYTE_ORDER_MAGIC:
            raise SpecError("pcapng", "big-endian sections are not read")
        if block_type == IDB_TYPE:
            capture.linktype, _, capture.snaplen = struct.unpack_from("<HHI", body)
            tsresol_ns = _tsresol_ns(body[8:])
        elif block_type == DSB_TYPE:
            kind, size = struct.unpack_from("<II", body)
            if kind == SECRETS_TLS_KEY_LOG:
                capture.secrets += body[8 : 8 + size]
        elif block_type == EPB_TYPE:
            _, high, low, caplen, original = struct.unpack_from("<IIIII", body)
            ts_ns = ((high << 32) | low) * tsresol_ns
            capture.packets.append((ts_ns, body[20 : 20 + caplen], original))
        at += total
    if capture.linktype < 0:
        raise SpecError("pcapng", "no interface description block")
    return capture


def _tsresol_ns(options: bytes) -> int:
    """Nanoseconds per timestamp unit from an interface's options (power of ten only)."""
    at = 0
    while at + 4 <= len(options):
        code, size = struct.unpack_from("<HH", options, at)
        if code == OPT_ENDOFOPT:
            break
        if code == OPT_IF_TSRESOL and size >= 1:
            exponent = options[at + 4]
            if exponent & 0x80:
                raise SpecError("pcapng", "binary timestamp resolutions are not read")
            return max(1, 10 ** (9 - exponent)) if exponent <= 9 else 1
        at += 4 + size + (-size % 4)
    return 1000


def is_pcapng(raw: bytes) -> bool:
    return len(raw) >= 4 and struct.unpack_from("<I", raw)[0] == SHB_TYPE


def read_capture(path: Path) -> Capture:
    """A pcap or pcapng file (I/O edge)."""
    raw = Path(path).read_bytes()
    try:
        if is_pcapng(raw):
            return parse_pcapng(raw)
        linktype, snaplen, packets = iter_pcap(raw)
        return Capture(linktype, snaplen, list(packets))
    except SpecError as err:
        raise SpecError(Path(path).name, err.reason) from None


def convert(pcap: Path, target: Path, key_log: bytes) -> int:
    """Write ``target`` (pcapng, ``key_log`` embedded) from the classic pcap ``pcap``;
    returns the packets written. The pcap stays (the caller removes it)."""
    raw = Path(pcap).read_bytes()
    try:
        linktype, snaplen, packets = iter_pcap(raw)
    except SpecError as err:
        raise SpecError(Path(pcap).name, err.reason) from None
    count = 0

    def counted() -> Iterator[tuple[int, bytes, int]]:
        nonlocal count
        for packet in packets:
            count += 1
            yield packet

    tmp = Path(target).with_name(f".{Path(target).name}.tmp")
    with open(tmp, "wb") as f:
        for block in pcapng_bytes(linktype, snaplen, counted(), key_log):
            f.write(block)
    tmp.replace(target)
    return count


CAPTURE_SUFFIXES = (".pcapng", ".pcap")
"""A run's capture of one end: the pcapng with secrets, else (older runs, a link's own
capture) the classic pcap."""


def capture_file(directory: Path, end: str) -> Path | None:
    """``directory/<end>.pcapng`` or ``<end>.pcap``, whichever exists (None: neither)."""
    for suffix in CAPTURE_SUFFIXES:
        path = Path(directory) / f"{end}{suffix}"
        if path.is_file():
            return path
    return None
