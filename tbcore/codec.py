"""The lossless image codec of the chapter's F4 (§12.1.1: "lossless compression halves the
input", 0.15 s of encode and decode): PNG's own method without its container. Each row's
bytes minus the byte one pixel to its left (PNG filter type 1, "Sub", RFC 2083 §6.3), then
DEFLATE (RFC 1951) at zlib's fastest level; the decoder inflates as the bytes arrive (a
server decodes while the upload goes on) and adds the filter back when the last one is in.

The image it carries is the chapter's 30 MB upload as pixels a codec can halve
(:func:`photo_pixels`): a smooth photograph-like field, its colours interpolated from a
coarse random grid, with one bit of sensor noise a pixel; both deterministic (SHAKE-256 of
fixed labels), so every process makes the same bytes. Plain functions, no I/O."""

from __future__ import annotations

import hashlib
import zlib
from functools import cache
from typing import Any

PHOTO_WIDTH = 5000
PHOTO_HEIGHT = 2000
PHOTO_CHANNELS = 3
PHOTO_BYTES = PHOTO_WIDTH * PHOTO_HEIGHT * PHOTO_CHANNELS
"""30,000,000 bytes: the chapter's 30 MB image (§12.1.1), 8-bit RGB."""
PHOTO_GRID_PX = 40
"""The colour grid's spacing: a new colour every 40 pixels, interpolated between."""
PHOTO_NOISE_MASK = 0x01
"""One bit of noise a byte: what keeps the image from compressing far below half (measured:
2.06:1 at :data:`DEFLATE_LEVEL`; two bits give 1.8:1)."""
DEFLATE_LEVEL = 1
"""zlib's fastest level: the codec's time is the chapter's point, not its last percent."""


@cache
def photo_pixels() -> bytes:
    """The 30 MB image, row-major RGB."""
    import numpy as np
    from PIL import Image

    rows, cols = PHOTO_HEIGHT // PHOTO_GRID_PX, PHOTO_WIDTH // PHOTO_GRID_PX
    grid = _shake(b"transport-testbed photo grid", rows * cols * PHOTO_CHANNELS)
    small = Image.fromarray(grid.reshape(rows, cols, PHOTO_CHANNELS), "RGB")
    base = np.asarray(small.resize((PHOTO_WIDTH, PHOTO_HEIGHT), Image.BILINEAR))
    noise = _shake(b"transport-testbed photo noise", PHOTO_BYTES).reshape(base.shape)
    pixels = (base & (0xFF ^ PHOTO_NOISE_MASK)) | (noise & PHOTO_NOISE_MASK)
    return pixels.tobytes()


@cache
def photo_sha256() -> str:
    return hashlib.sha256(photo_pixels()).hexdigest()


def _shake(label: bytes, size: int) -> Any:
    import numpy as np  # here: a server that never decodes an image carries no numpy

    return np.frombuffer(hashlib.shake_256(label).digest(size), dtype=np.uint8)


def _rows(data: bytes) -> Any:
    import numpy as np

    if len(data) != PHOTO_BYTES:
        raise ValueError(f"an image of {PHOTO_BYTES} bytes, not {len(data)}")
    return np.frombuffer(data, dtype=np.uint8).reshape(PHOTO_HEIGHT, PHOTO_WIDTH, PHOTO_CHANNELS)


def encode(pixels: bytes) -> bytes:
    """The Sub filter (mod 256), then DEFLATE."""
    image = _rows(pixels)
    filtered = image.copy()
    filtered[:, 1:, :] = image[:, 1:, :] - image[:, :-1, :]
    return zlib.compress(filtered.tobytes(), DEFLATE_LEVEL)


class Decoder:
    """Inflates an encoded image as its bytes arrive; :meth:`finish` undoes the filter."""

    def __init__(self) -> None:
        self._inflate = zlib.decompressobj()
        self._out = bytearray()
        self.error: str | None = None

    def feed(self, data: bytes) -> None:
        """More encoded bytes (an error is kept, not raised: the upload goes on)."""
        if self.error is not None:
            return
        try:
            self._out += self._inflate.decompress(data, PHOTO_BYTES + 1 - len(self._out))
        except zlib.error as err:
            self.error = f"inflate: {err}"
            return
        if len(self._out) > PHOTO_BYTES or self._inflate.unconsumed_tail:
            self.error = f"inflates to more than {PHOTO_BYTES} bytes"

    def finish(self) -> bytes:
        """The pixels; ValueError when the bytes were not an encoded image."""
        if self.error is None:
            try:
                self._out += self._inflate.flush()
            except zlib.error as err:
                self.error = f"inflate: {err}"
        if self.error is None and not self._inflate.eof:
            self.error = "the DEFLATE stream ended early"
        if self.error is not None:
            raise ValueError(self.error)
        import numpy as np

        filtered = _rows(bytes(self._out))
        return np.cumsum(filtered, axis=1, dtype=np.uint8).tobytes()


def decode(data: bytes) -> bytes:
    """An encoded image's pixels at once."""
    decoder = Decoder()
    decoder.feed(data)
    return decoder.finish()
