"""tbcore.codec: the lossless image codec of the chapter's F4 (PNG's Sub filter and DEFLATE)."""

from __future__ import annotations

import hashlib

import pytest

from tbcore import codec


def test_the_photo_halves_and_comes_back_byte_for_byte() -> None:
    pixels = codec.photo_pixels()
    assert len(pixels) == codec.PHOTO_BYTES == 30_000_000
    encoded = codec.encode(pixels)
    assert 1.9 < len(pixels) / len(encoded) < 2.2  # "halves the input" (§12.1.1)
    assert codec.decode(encoded) == pixels
    assert codec.photo_sha256() == hashlib.sha256(pixels).hexdigest()


def test_the_decoder_takes_the_bytes_in_any_pieces() -> None:
    encoded = codec.encode(codec.photo_pixels())
    decoder = codec.Decoder()
    for start in range(0, len(encoded), 777_777):
        decoder.feed(encoded[start : start + 777_777])
    assert decoder.finish() == codec.photo_pixels()


def test_what_is_not_an_encoded_image_is_refused() -> None:
    encoded = codec.encode(codec.photo_pixels())
    with pytest.raises(ValueError, match="ended early"):
        codec.decode(encoded[: len(encoded) // 2])
    with pytest.raises(ValueError, match="inflate"):
        codec.decode(b"\x00" * 1000)
    import zlib

    with pytest.raises(ValueError, match="more than"):
        codec.decode(zlib.compress(bytes(codec.PHOTO_BYTES + 10), 1))
    with pytest.raises(ValueError, match="30000000 bytes"):
        codec.decode(zlib.compress(bytes(1000), 1))
    with pytest.raises(ValueError, match="30000000 bytes"):
        codec.encode(b"short")
