"""The request docs/models.md works through, for the tests of harness.bounds and its CLI."""

from __future__ import annotations

from typing import Any

from harness.bounds import AUDIO_BYTES, RequestBound, request_time

VOICE_REQUEST: dict[str, Any] = dict(
    rtt_s=0.2,
    up_bps=333e6,
    down_bps=333e6,
    upload_bytes=AUDIO_BYTES,
    download_bytes=0,
    protocol="h2",
    connection="reused",
    processing_s=0.030,
)
"""The voice request: the audio clip up an h2 connection at 333 Mbit/s over a 200 ms
round trip, 30 ms of processing, nothing down; its bound is docs/models.md's 0.2385 s."""


def voice_request(**overrides: Any) -> RequestBound:
    """The bound of :data:`VOICE_REQUEST` with ``overrides`` in place of its inputs."""
    return request_time(**{**VOICE_REQUEST, **overrides})
