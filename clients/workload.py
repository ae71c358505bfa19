"""What each workload sends and how its response is checked, without I/O."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from tbcore import workloads

KEEP_BODY_MAX_BYTES = 64 * 1024
"""Small response bodies (the ASR transcript) are kept for checking; large ones only hashed."""


@dataclass(frozen=True)
class RequestSpec:
    workload: str
    method: str
    path: str
    body: bytes = b""
    expect_down_sha256: str | None = None
    expect_down_bytes: int | None = None
    expect_upload_sha256: str | None = None
    stream_chunks: int = 0
    declared_length: int | None = None
    """content-length to announce instead of the body's (to test servers with lying peers)."""
    priority: str | None = None
    """RFC 9218 Priority field value sent as the ``priority`` header (None: no header)."""
    cancel_after_chunks: int | None = None
    """stream workload: cancel the response once this many chunks have been read."""
    player_buffer_s: float | None = None
    """stream workload: play the chunks with a real-clock player (this initial buffer)."""

    def headers(self, authority: str) -> list[tuple[str, str]]:
        head = [
            (":method", self.method),
            (":scheme", "https"),
            (":authority", authority),
            (":path", self.path),
            ("user-agent", "testbed-client"),
        ]
        if self.method == "POST":
            length = len(self.body) if self.declared_length is None else self.declared_length
            head.append(("content-length", str(length)))
        if self.priority is not None:
            head.append(("priority", self.priority))
        return head


@dataclass(frozen=True)
class _Route:
    method: str
    path: str
    upload: str | None = None
    """Fixed workload sent as the body (its SHA-256 must come back), if any."""
    download: str | None = None
    """Fixed workload expected as the response body (bytes and SHA-256), if any."""


WORKLOAD_ROUTES: dict[str, _Route] = {
    "asr": _Route("POST", "/asr", upload="audio"),
    "tts": _Route("GET", "/tts", download="audio"),
    "retouch": _Route("POST", "/retouch", upload="image", download="retouched"),
    "result": _Route("GET", "/result", download="retouched"),  # the 5 MB image result
    "image": _Route("GET", "/image", download="image"),  # bench: 30 MB down
    "sink": _Route("POST", "/sink", upload="image"),  # bench: 30 MB up
}
"""The request of each fixed workload (``stream`` is built from its chunk count)."""
REQUEST_WORKLOADS = frozenset({*WORKLOAD_ROUTES, "stream"})
"""Workloads of one fixed request (:func:`request_spec`); others build theirs per request."""


STREAM_LABELS = {"tts": "audio", "stream": "audio", "result": "image", "retouch": "image"}
"""What each workload is when it shares a connection: the audio or the image."""
PRIORITY_SIGNALS: dict[str, str] = {"audio": "u=0", "image": "u=4"}
"""RFC 9218 urgency the client asks for: audio most urgent (0), the image result below the
default (3), both non-incremental."""


def multi_specs(
    workloads_in_order: tuple[str, ...],
    chunks: int = 50,
    signal_priority: bool = True,
    cancel_after_chunks: int | None = None,
    player_buffer_s: float | None = None,
) -> list[RequestSpec]:
    """The requests of several streams on one connection, in the order they are sent."""
    specs = []
    for name in workloads_in_order:
        streamed = name == "stream"
        spec = request_spec(
            name,
            chunks,
            cancel_after_chunks if streamed else None,
            player_buffer_s if streamed else None,
        )
        label = STREAM_LABELS.get(name)
        if signal_priority and label is not None:
            spec = replace(spec, priority=PRIORITY_SIGNALS[label])
        specs.append(spec)
    return specs


def request_spec(
    workload: str,
    chunks: int = 50,
    cancel_after_chunks: int | None = None,
    player_buffer_s: float | None = None,
) -> RequestSpec:
    """The request of a workload: asr, tts, retouch, stream, or the bench's image and sink."""
    if workload.startswith("retouch-tiles"):
        spec = request_spec("retouch")
        tiles = workload.removeprefix("retouch-tiles")
        # the response starts before the upload ends, so its head cannot echo the upload's
        # checksum: the server checks it at the end and logs an error if it differs
        return replace(
            spec, workload=workload, path=f"/retouch?tiles={tiles}", expect_upload_sha256=None
        )
    if workload == "stream":
        return RequestSpec(
            "stream",
            "GET",
            f"/stream?chunks={chunks}",
            expect_down_sha256=workloads.stream_sha256(chunks),
            expect_down_bytes=chunks * workloads.STREAM_CHUNK_BYTES,
            stream_chunks=chunks,
            cancel_after_chunks=cancel_after_chunks,
            player_buffer_s=player_buffer_s,
        )
    route = WORKLOAD_ROUTES.get(workload)
    if route is None:
        raise ValueError(f"unknown workload {workload!r}")
    up, down = route.upload, route.download
    return RequestSpec(
        workload,
        route.method,
        route.path,
        body=workloads.workload_bytes(up) if up else b"",
        expect_down_sha256=workloads.workload_sha256(down) if down else None,
        expect_down_bytes=workloads.get_workload(down).size_bytes if down else None,
        expect_upload_sha256=workloads.workload_sha256(up) if up else None,
    )


@dataclass
class ResponseCollector:
    """Feeds on response headers and body bytes; says whether every checksum matched."""

    spec: RequestSpec
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    down_bytes: int = 0
    first_byte_at: float | None = None
    last_byte_at: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    body_first_byte_at: float | None = None
    """The first body byte handed to the application."""
    on_chunk: Callable[[int, float], None] | None = None
    """Called as each whole chunk is handed over (index, time): the player's input."""
    on_cancel: Callable[[float], None] | None = None
    """Called once when ``spec.cancel_after_chunks`` chunks have been read."""
    cancelled_at: float | None = None
    bytes_at_cancel: int = 0
    _digest: hashlib._Hash = field(default_factory=hashlib.sha256)
    _kept: bytearray = field(default_factory=bytearray)

    def on_headers(
        self, headers: list[tuple[bytes, bytes]] | list[tuple[str, str]], now: float
    ) -> None:
        for raw_name, raw_value in headers:
            name = raw_name.decode() if isinstance(raw_name, bytes) else raw_name
            value = raw_value.decode() if isinstance(raw_value, bytes) else raw_value
            if name == ":status":
                if self.status is not None and self.status >= 200:
                    continue  # trailers never carry :status; ignore duplicates
                self.status = int(value)
            else:
                self.headers[name.lower()] = value
        if self.first_byte_at is None:
            self.first_byte_at = now

    def on_data(self, data: bytes, now: float) -> None:
        if not data:
            return
        if self.cancelled_at is not None:
            return  # bytes after the cancel are not the application's any more
        limit = self.spec.cancel_after_chunks
        if limit is not None:
            data = data[: max(0, limit * workloads.STREAM_CHUNK_BYTES - self.down_bytes)]
        if self.body_first_byte_at is None:
            self.body_first_byte_at = now
        before = self.down_bytes
        self.down_bytes += len(data)
        self._digest.update(data)
        if len(self._kept) < KEEP_BODY_MAX_BYTES:
            self._kept += data[: KEEP_BODY_MAX_BYTES - len(self._kept)]
        self.last_byte_at = now
        if self.spec.stream_chunks:
            size = workloads.STREAM_CHUNK_BYTES
            for _ in range(self.down_bytes // size - before // size):
                self.chunk_times.append(now)
                if self.on_chunk is not None:
                    self.on_chunk(len(self.chunk_times) - 1, now)
            if limit is not None and len(self.chunk_times) >= limit:
                self.cancel(now)

    def cancel(self, now: float) -> None:
        """Stop taking the body: the edge resets the stream (``on_cancel``)."""
        if self.cancelled_at is not None:
            return
        self.cancelled_at = now
        self.bytes_at_cancel = self.down_bytes
        if self.on_cancel is not None:
            self.on_cancel(now)

    @property
    def body(self) -> bytes:
        return bytes(self._kept)

    def verdict(self) -> tuple[bool, str | None]:
        """(sha256_ok, error): error is None only when the status is 200 and all checks pass."""
        spec = self.spec
        if self.status is None:
            return False, "no response headers"
        if self.cancelled_at is not None:
            # a cancelled stream: the chunks read before the cancel must be the stream's
            whole = self.bytes_at_cancel // workloads.STREAM_CHUNK_BYTES
            ok = self._digest.hexdigest() == workloads.stream_sha256(whole) if whole else True
            ok = ok and self.bytes_at_cancel % workloads.STREAM_CHUNK_BYTES == 0
            return ok, None if ok else "cancelled stream: chunks read do not match"
        problems: list[str] = []
        if spec.expect_down_sha256 is not None:
            if spec.expect_down_bytes is not None and self.down_bytes != spec.expect_down_bytes:
                problems.append(f"received {self.down_bytes} of {spec.expect_down_bytes} bytes")
            elif self._digest.hexdigest() != spec.expect_down_sha256:
                problems.append("response SHA-256 mismatch")
        if spec.expect_upload_sha256 is not None:
            echoed = self.headers.get("x-upload-sha256")
            echoed_length = self.headers.get("x-upload-length")
            if echoed is None and spec.workload == "asr":
                try:
                    answer = json.loads(self.body)
                    echoed = answer.get("upload_sha256")
                    echoed_length = str(answer.get("upload_length"))
                except (ValueError, AttributeError):
                    echoed = None
            if echoed != spec.expect_upload_sha256 or echoed_length != str(len(spec.body)):
                problems.append(
                    f"server received upload sha256={echoed} length={echoed_length}, "
                    f"sent {len(spec.body)} bytes"
                )
        sha_ok = not problems
        if self.status != 200:
            problems.insert(0, f"HTTP status {self.status}")
        return sha_ok, "; ".join(problems) or None
