"""The HTTP/3 stream scanner: frames read as they arrive, lengths capped by type, the
PRIORITY_UPDATEs of the control stream, and legal streams that must not close anything."""

from __future__ import annotations

import pytest
from aioquic.buffer import encode_uint_var

from servers.h3scan import (
    H3_DATA,
    H3_EXCESSIVE_LOAD,
    H3_HEADERS,
    H3_SETTINGS,
    MAX_FRAME_BYTES,
    MAX_UNKNOWN_FRAME_BYTES,
    H3StreamScanner,
    read_varint,
)

CONTROL_UNI = 2
REQUEST = 0
PRIORITY_UPDATE = 0xF0700


def varint(value: int) -> bytes:
    """RFC 9000 section 16, as aioquic encodes it."""
    return encode_uint_var(value)


def frame(frame_type: int, payload: bytes) -> bytes:
    return varint(frame_type) + varint(len(payload)) + payload


def test_varints_of_every_size() -> None:
    for value in (0, 63, 64, 16383, 16384, 2**30 - 1, 2**30, 2**62 - 1):
        assert read_varint(varint(value), 0) == (value, len(varint(value)))
    assert read_varint(varint(2**30)[:3], 0) is None


def test_priority_updates_are_read_byte_by_byte() -> None:
    scanner = H3StreamScanner()
    data = varint(0) + frame(H3_SETTINGS, b"\x01\x00") + frame(PRIORITY_UPDATE, varint(4) + b"u=1")
    updates = []
    for i in range(len(data)):
        result = scanner.feed(CONTROL_UNI, data[i : i + 1], False)
        assert result.verdict is None
        updates += result.priority_updates
    assert updates == [(4, b"u=1")]


def test_an_empty_or_split_uni_stream_is_legal() -> None:
    scanner = H3StreamScanner()
    assert scanner.feed(6, b"", True).verdict is None  # FIN before the stream type
    type_bytes = varint(0x21 * 0x1F + 0x21)  # a reserved stream type of two bytes
    assert scanner.feed(10, type_bytes[:1], False).verdict is None
    assert scanner.feed(10, type_bytes[1:] + bytes(100_000), False).verdict is None
    assert scanner.streams_held == 1  # skipped, not read


@pytest.mark.parametrize(
    ("stream", "frame_type", "bound"),
    [
        (CONTROL_UNI, 0x21, MAX_UNKNOWN_FRAME_BYTES),
        (CONTROL_UNI, PRIORITY_UPDATE, MAX_FRAME_BYTES[PRIORITY_UPDATE]),
        (REQUEST, H3_HEADERS, MAX_FRAME_BYTES[H3_HEADERS]),
    ],
)
def test_a_frame_longer_than_its_type_allows_is_refused_at_its_head(
    stream: int, frame_type: int, bound: int
) -> None:
    scanner = H3StreamScanner()
    prefix = varint(0) if stream == CONTROL_UNI else b""
    head = prefix + varint(frame_type) + varint(bound + 1)
    result = scanner.feed(stream, head, False)
    assert result.verdict is not None and result.verdict.error_code == H3_EXCESSIVE_LOAD
    ok = H3StreamScanner().feed(stream, prefix + varint(frame_type) + varint(bound), False)
    assert ok.verdict is None


def test_data_is_streamed_whatever_its_length_and_a_stream_is_forgotten_at_its_end() -> None:
    scanner = H3StreamScanner()
    head = frame(H3_HEADERS, bytes(100)) + varint(H3_DATA) + varint(8 * 2**20)
    assert scanner.feed(REQUEST, head, False).verdict is None
    for _ in range(8):
        assert scanner.feed(REQUEST, bytes(2**20), False).verdict is None
    assert scanner.feed(REQUEST, b"", True).verdict is None
    assert scanner.streams_held == 0
