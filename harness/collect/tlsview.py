"""TLS 1.3 records of one direction of a TCP connection, decrypted with a key log.

What HTTP/2 over TLS needs to say when each stream's bytes reached the receiver's TCP:
the capture gives TCP sequence numbers and times; the records (their 5-byte headers are in
the clear) map the byte stream to ciphertext; AEAD ciphers (AES-GCM, ChaCha20-Poly1305)
encrypt byte for byte, so plaintext byte ``j`` of a record sits at ciphertext byte
``header + j`` and has that byte's arrival time. Keys come from the NSS key log that every
run writes (``SERVER_HANDSHAKE_TRAFFIC_SECRET``, ``SERVER_TRAFFIC_SECRET_0`` and the
client-side equivalents), derived as in RFC 8446 section 7.

Pure functions over bytes; the pcap reading lives in :mod:`harness.collect.streamview`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

from tbcore.errors import SpecError

RECORD_HEADER_BYTES = 5
"""RFC 8446 section 5.1: type (1), legacy version (2), length (2)."""
AEAD_TAG_BYTES = 16
"""RFC 8446 section 5.2: every TLS 1.3 AEAD has a 16-byte tag."""
CONTENT_HANDSHAKE = 0x16
CONTENT_APPLICATION_DATA = 0x17
CONTENT_CHANGE_CIPHER_SPEC = 0x14
HANDSHAKE_CLIENT_HELLO = 1
HANDSHAKE_SERVER_HELLO = 2

CIPHER_SUITES: dict[int, tuple[str, int, type[hashes.HashAlgorithm]]] = {
    0x1301: ("aes", 16, hashes.SHA256),
    0x1302: ("aes", 32, hashes.SHA384),
    0x1303: ("chacha", 32, hashes.SHA256),
}
"""RFC 8446 appendix B.4: suite -> (AEAD, key length, hash)."""
IV_BYTES = 12


def parse_keylog(text: str) -> dict[str, dict[str, bytes]]:
    """NSS key log -> ``{client_random_hex: {label: secret}}``."""
    secrets: dict[str, dict[str, bytes]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 3 or line.startswith("#"):
            continue
        label, random_hex, secret_hex = parts
        try:
            secrets.setdefault(random_hex.lower(), {})[label] = bytes.fromhex(secret_hex)
        except ValueError:
            continue
    return secrets


def hkdf_expand_label(secret: bytes, label: str, length: int, algorithm: type) -> bytes:
    """RFC 8446 section 7.1: HKDF-Expand-Label(secret, label, "", length)."""
    full = b"tls13 " + label.encode()
    info = struct.pack("!HB", length, len(full)) + full + b"\x00"
    return HKDFExpand(algorithm=algorithm(), length=length, info=info).derive(secret)


@dataclass
class TrafficKey:
    """One direction's record protection (RFC 8446 section 5.3): key, IV, record counter."""

    aead: AESGCM | ChaCha20Poly1305
    iv: bytes
    sequence: int = 0

    @classmethod
    def from_secret(cls, secret: bytes, suite: int) -> TrafficKey:
        if suite not in CIPHER_SUITES:
            raise SpecError("cipher_suite", f"0x{suite:04x} is not a TLS 1.3 suite")
        kind, key_len, algorithm = CIPHER_SUITES[suite]
        key = hkdf_expand_label(secret, "key", key_len, algorithm)
        iv = hkdf_expand_label(secret, "iv", IV_BYTES, algorithm)
        aead = AESGCM(key) if kind == "aes" else ChaCha20Poly1305(key)
        return cls(aead=aead, iv=iv)

    def open(self, header: bytes, ciphertext: bytes) -> bytes | None:
        """Decrypt one record; None (counter unchanged) when it does not authenticate."""
        nonce = bytes(
            a ^ b for a, b in zip(self.iv, self.sequence.to_bytes(IV_BYTES, "big"), strict=True)
        )
        try:
            plain = self.aead.decrypt(nonce, ciphertext, header)
        except InvalidTag:
            return None
        self.sequence += 1
        return plain


@dataclass(frozen=True)
class Record:
    """One TLS record in a direction's byte stream."""

    offset: int
    """Stream offset of the record header (bytes from the first byte of the direction)."""
    content_type: int
    """Outer type (0x17 for every protected record)."""
    length: int
    """Record body length (ciphertext with tag, or plaintext for unprotected records)."""

    @property
    def body_offset(self) -> int:
        return self.offset + RECORD_HEADER_BYTES

    @property
    def end(self) -> int:
        return self.body_offset + self.length


def split_records(stream: bytes) -> list[Record]:
    """The complete records at the start of a byte stream (stops at a partial one)."""
    records = []
    offset = 0
    while offset + RECORD_HEADER_BYTES <= len(stream):
        content_type, _version, length = struct.unpack_from("!BHH", stream, offset)
        if offset + RECORD_HEADER_BYTES + length > len(stream):
            break
        records.append(Record(offset, content_type, length))
        offset += RECORD_HEADER_BYTES + length
    return records


def hello_random_and_suite(stream: bytes, record: Record) -> tuple[bytes, int | None]:
    """(random, cipher suite or None) of a ClientHello or ServerHello record."""
    body = stream[record.body_offset : record.end]
    if len(body) < 4 + 2 + 32 or body[0] not in (HANDSHAKE_CLIENT_HELLO, HANDSHAKE_SERVER_HELLO):
        raise SpecError("tls", "first record is not a ClientHello or ServerHello")
    random = body[6:38]
    if body[0] == HANDSHAKE_CLIENT_HELLO:
        return random, None
    session_id_len = body[38]
    at = 39 + session_id_len
    return random, struct.unpack_from("!H", body, at)[0]


@dataclass(frozen=True)
class PlainPiece:
    """Application bytes of one record: plaintext ``[plain_offset, +size)`` of the
    direction lies at stream bytes ``[stream_offset, +size)``."""

    plain_offset: int
    stream_offset: int
    size: int


def decrypt_direction(
    stream: bytes, suite: int, handshake_secret: bytes | None, traffic_secret: bytes
) -> tuple[bytes, list[PlainPiece]]:
    """The application plaintext of one direction and where each piece of it sits in the
    byte stream. Protected records are tried with the handshake key first (when given),
    then with the application key from the first one that the handshake key refuses."""
    app_key = TrafficKey.from_secret(traffic_secret, suite)
    hs_key = TrafficKey.from_secret(handshake_secret, suite) if handshake_secret else None
    plain = bytearray()
    pieces: list[PlainPiece] = []
    for record in split_records(stream):
        if record.content_type != CONTENT_APPLICATION_DATA:
            continue
        header = stream[record.offset : record.body_offset]
        body = stream[record.body_offset : record.end]
        opened = hs_key.open(header, body) if hs_key is not None else None
        if opened is not None:
            continue  # handshake messages under the handshake key
        hs_key = None
        opened = app_key.open(header, body)
        if opened is None:
            raise SpecError("keylog", f"record at stream offset {record.offset} does not decrypt")
        inner = opened.rstrip(b"\x00")
        if not inner or inner[-1] != CONTENT_APPLICATION_DATA:
            continue  # post-handshake messages (NewSessionTicket, KeyUpdate) or alerts
        data = inner[:-1]
        pieces.append(PlainPiece(len(plain), record.body_offset, len(data)))
        plain += data
    return bytes(plain), pieces


def plain_to_stream(pieces: list[PlainPiece], plain_offset: int) -> int:
    """Stream offset of an application plaintext byte."""
    low, high = 0, len(pieces)
    while low < high:
        mid = (low + high) // 2
        if pieces[mid].plain_offset + pieces[mid].size <= plain_offset:
            low = mid + 1
        else:
            high = mid
    if low == len(pieces) or pieces[low].plain_offset > plain_offset:
        raise SpecError("plain_offset", f"{plain_offset} is not application plaintext")
    piece = pieces[low]
    return piece.stream_offset + plain_offset - piece.plain_offset
