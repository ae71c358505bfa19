"""The fixed, deterministic, checksummed workloads (docs/design.md "Workloads").

Every byte is a pure function of the workload's name: SHAKE-256 (FIPS 202) of a fixed label,
so the files are the same on every machine and Python version without being committed. They
are generated at first use into a cache directory (``$TESTBED_CACHE`` or
``~/.cache/testbed/workloads``), written atomically, and their SHA-256 is computed from the
bytes, never typed in.

- ``audio``: 354,640 bytes of 16-bit little-endian mono PCM (ASR upload, TTS download).
- ``image``: 30,000,000 bytes (retouch upload).
- ``retouched``: 5,000,000 bytes (retouch response).
- stream chunks: chunk ``i`` of ``GET /stream`` is 960 bytes (20 ms of 24 kHz mono 16-bit).
- ``photo-deflate``: the one workload made otherwise: a 30 MB photograph-like image,
  losslessly encoded (tbcore.codec, about 14.5 MB); its size is what the encoder gives.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tbcore.errors import SpecError

AUDIO_SIZE_BYTES = 354_640
"""The seed's ASR upload: 177,320 samples of 16-bit mono PCM."""
IMAGE_SIZE_BYTES = 30_000_000
RETOUCHED_SIZE_BYTES = 5_000_000
FEATURES_SIZE_BYTES = 400 * 4 * 2560 * 2
"""8,192,000 bytes: Qwen3-VL-4B's visual features of one screenshot, 400 tokens of 4 x 2,560
BF16 values (the chapter's §12.2.2)."""
SCREENSHOT_UPLOAD_BYTES = 800_000
"""The chapter's 0.8 MB screenshot, sent as it is (§12.1.3, §12.2.2)."""
STATE_SIZE_BYTES = 64 * 1024 * 1024
"""67,108,864 bytes: the session state migrated to another site (64 MiB, the chapter's
§12.2.3)."""
PREFIX_FULL_BYTES = 66_207
"""The text agent's whole prefix sent every round (the chapter's §12.5.2)."""
PREFIX_KEPT_BYTES = 10_193
"""The text agent's round when the server keeps its state: only what is new (§12.5.2)."""
STREAM_SAMPLE_RATE_HZ = 24_000
STREAM_CHUNK_DURATION_S = 0.020
STREAM_BYTES_PER_SAMPLE = 2
STREAM_CHUNK_BYTES = int(STREAM_SAMPLE_RATE_HZ * STREAM_CHUNK_DURATION_S) * STREAM_BYTES_PER_SAMPLE
"""960 bytes: 20 ms of 24 kHz mono 16-bit PCM."""
STREAM_SAMPLE_RATES_HZ = (16_000, 24_000)
"""The stream's sample rates (knob ``sample_rate``): the chapter's 16 kHz (F8, 640-byte
chunks, 256 kbit/s) and 24 kHz (F6, 960-byte chunks, 384 kbit/s; the default)."""
STREAM_CHUNK_PROCESSING_S = 0.012
"""Server "processing" per streamed chunk (docs/design.md)."""

CACHE_ENV = "TESTBED_CACHE"
_LABEL_PREFIX = b"transport-testbed workload v1:"


@dataclass(frozen=True)
class Workload:
    """One fixed payload: its name, exact size and generating label (or its maker)."""

    name: str
    fixed_size_bytes: int | None
    """None: the size is what :attr:`make` gives."""
    description: str
    make: Callable[[], bytes] | None = None
    """Makes the bytes (deterministic) instead of SHAKE-256 of the label."""

    @property
    def label(self) -> bytes:
        return _LABEL_PREFIX + self.name.encode()

    @property
    def size_bytes(self) -> int:
        if self.fixed_size_bytes is not None:
            return self.fixed_size_bytes
        return len(workload_bytes(self.name))


def _photo_deflate() -> bytes:
    from tbcore import codec

    return codec.encode(codec.photo_pixels())


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("audio", AUDIO_SIZE_BYTES, "16-bit mono PCM, ASR upload / TTS download"),
        Workload("image", IMAGE_SIZE_BYTES, "image upload of POST /retouch"),
        Workload("retouched", RETOUCHED_SIZE_BYTES, "response of POST /retouch"),
        Workload("features", FEATURES_SIZE_BYTES, "visual features, upload of POST /features"),
        Workload("screenshot", SCREENSHOT_UPLOAD_BYTES, "the screenshot, upload of POST /screen"),
        Workload("state", STATE_SIZE_BYTES, "a session's state, upload of POST /migrate"),
        Workload("prefix-full", PREFIX_FULL_BYTES, "the text agent's prefix, POST /text"),
        Workload("prefix-kept", PREFIX_KEPT_BYTES, "its new part alone, POST /text-kept"),
        Workload(
            "photo-deflate",
            None,
            "the 30 MB image losslessly encoded (tbcore.codec), POST /retouch-lossless",
            _photo_deflate,
        ),
    )
}


def cache_dir() -> Path:
    """Where generated workloads live: ``$TESTBED_CACHE`` or ``~/.cache/testbed/workloads``."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    return Path.home() / ".cache" / "testbed" / "workloads"


def get_workload(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise SpecError(
            "workload", f"unknown workload {name!r} (known: {', '.join(WORKLOADS)})"
        ) from None


def generate_bytes(name: str) -> bytes:
    """The workload's bytes, computed (not read): SHAKE-256 of its label, cut to size, or
    what its maker gives."""
    workload = get_workload(name)
    if workload.make is not None:
        return workload.make()
    return hashlib.shake_256(workload.label).digest(workload.size_bytes)


def workload_path(name: str) -> Path:
    """Path of the workload file, generating it atomically on first use."""
    workload = get_workload(name)
    path = cache_dir() / f"{workload.name}.bin"
    expected = workload.fixed_size_bytes
    if path.exists() and (expected is None or path.stat().st_size == expected):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    data = generate_bytes(name)
    fd, tmp = tempfile.mkstemp(prefix=f".{workload.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


@cache
def workload_bytes(name: str) -> bytes:
    """The workload's bytes, read from the cache file and checked against a fresh generation
    once per process (a corrupted cache file is regenerated, never served)."""
    workload = get_workload(name)
    path = workload_path(name)
    data = path.read_bytes()
    expected = generate_bytes(name)
    if data != expected:
        path.unlink(missing_ok=True)
        workload_path(name)
        data = expected
    if workload.fixed_size_bytes is not None and len(data) != workload.fixed_size_bytes:
        raise SpecError(
            "workload", f"{name}: generated {len(data)} bytes, not {workload.fixed_size_bytes}"
        )
    return data


@cache
def workload_sha256(name: str) -> str:
    """Hex SHA-256 of the workload, computed from its bytes."""
    return hashlib.sha256(workload_bytes(name)).hexdigest()


def stream_chunk_bytes(sample_rate_hz: int = STREAM_SAMPLE_RATE_HZ) -> int:
    """Bytes of one 20 ms chunk of mono 16-bit PCM at ``sample_rate_hz`` (960 at 24 kHz)."""
    if sample_rate_hz not in STREAM_SAMPLE_RATES_HZ:
        raise SpecError("sample_rate", f"{sample_rate_hz} is not one of {STREAM_SAMPLE_RATES_HZ}")
    return int(sample_rate_hz * STREAM_CHUNK_DURATION_S) * STREAM_BYTES_PER_SAMPLE


def stream_chunk(index: int, size_bytes: int = STREAM_CHUNK_BYTES) -> bytes:
    """Chunk ``index`` (0-based) of ``GET /stream``: ``size_bytes`` of 16-bit PCM (960)."""
    if index < 0:
        raise SpecError("chunk", f"index must be >= 0, got {index}")
    return hashlib.shake_256(_LABEL_PREFIX + b"stream:%d" % index).digest(size_bytes)


def stream_sha256(chunks: int, size_bytes: int = STREAM_CHUNK_BYTES) -> str:
    """SHA-256 of the concatenation of chunks ``0 .. chunks-1``: a whole stream's checksum."""
    digest = hashlib.sha256()
    for index in range(chunks):
        digest.update(stream_chunk(index, size_bytes))
    return digest.hexdigest()
