"""What each workload sends and how its response is checked, without I/O."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from tbcore import kinds, workloads
from tbcore.routes import HttpRoute

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
    stream_chunk_bytes: int = workloads.STREAM_CHUNK_BYTES
    """stream workload: bytes of each 20 ms chunk (960 at 24 kHz, 640 at 16 kHz)."""
    late_chunk: int | None = None
    """stream workload: the chunk (from 1) the server sends ``late_chunk_s`` late."""
    late_chunk_s: float = 0.0
    shared: bool = False
    """One of several requests sent at once on one connection (workload multi): its record
    names its stream (``stream_workload``, ``stream_index``)."""
    echo_in_body: bool = False
    """The server may report the upload's checksum in a JSON answer instead of headers
    (ASR's transcript carries ``upload_sha256`` and ``upload_length``)."""

    @property
    def sample_rate_hz(self) -> int:
        """The stream's sample rate: its chunk's samples over the chunk's 20 ms."""
        samples = self.stream_chunk_bytes // workloads.STREAM_BYTES_PER_SAMPLE
        return round(samples / workloads.STREAM_CHUNK_DURATION_S)

    def headers(self, authority: str, scheme: str = "https") -> list[tuple[str, str]]:
        head = [
            (":method", self.method),
            (":scheme", scheme),
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
        label = kinds.workload(name).label
        if signal_priority and label is not None:
            spec = replace(spec, priority=PRIORITY_SIGNALS[label])
        specs.append(replace(spec, shared=True))
    return specs


SpecBuilder = Callable[[str, int, "int | None", "float | None"], RequestSpec]
"""(workload, chunks, cancel_after_chunks, player_buffer_s) -> the workload's request."""


def _routed(
    workload: str, chunks: int, cancel_after_chunks: int | None, player_buffer_s: float | None
) -> RequestSpec:
    """A fixed request from its route (tbcore.routes.HttpRoute): its body, what must come
    back."""
    del chunks, cancel_after_chunks, player_buffer_s
    route = _route(workload)
    up, down = route.upload, route.download
    return RequestSpec(
        workload,
        route.method,
        route.path,
        body=workloads.workload_bytes(up) if up else b"",
        expect_down_sha256=workloads.workload_sha256(down) if down else None,
        expect_down_bytes=workloads.get_workload(down).size_bytes if down else None,
        expect_upload_sha256=workloads.workload_sha256(up) if up else None,
        echo_in_body=route.echo_in_body,
    )


def _stream(
    workload: str, chunks: int, cancel_after_chunks: int | None, player_buffer_s: float | None
) -> RequestSpec:
    """``chunks`` 20 ms chunks of audio, maybe cancelled or played as they arrive."""
    route = _route(workload)
    return RequestSpec(
        workload,
        route.method,
        f"{route.path}?chunks={chunks}",
        expect_down_sha256=workloads.stream_sha256(chunks),
        expect_down_bytes=chunks * workloads.STREAM_CHUNK_BYTES,
        stream_chunks=chunks,
        cancel_after_chunks=cancel_after_chunks,
        player_buffer_s=player_buffer_s,
    )


def _tiled(
    workload: str, chunks: int, cancel_after_chunks: int | None, player_buffer_s: float | None
) -> RequestSpec:
    """The upload in its route's tiles, each processed on its own."""
    spec = _routed(workload, chunks, cancel_after_chunks, player_buffer_s)
    # the response starts before the upload ends, so its head cannot echo the upload's
    # checksum: the server checks it at the end and logs an error if it differs
    return replace(spec, path=f"{spec.path}?{_route(workload).query}", expect_upload_sha256=None)


def _route(workload: str) -> HttpRoute:
    route = kinds.workload(workload).route
    if route is None:
        raise ValueError(f"workload {workload!r} has no request of its own")
    return route


ONE_REQUEST_ANSWERS = frozenset({"payload", "transcript", "digest", "stream"})
"""The answers of a workload of one fixed request (the others' clients build theirs)."""
REQUEST_WORKLOADS = frozenset(
    name
    for name, kind in kinds.WORKLOADS.items()
    if kind.route is not None and kind.route.answer in ONE_REQUEST_ANSWERS
)
"""Workloads of one fixed request (:func:`request_spec`); others build theirs per request."""


def _builder(workload: str) -> SpecBuilder:
    route = _route(workload)
    if route.answer == "stream":
        return _stream
    return _tiled if route.tiles else _routed


def request_spec(
    workload: str,
    chunks: int = 50,
    cancel_after_chunks: int | None = None,
    player_buffer_s: float | None = None,
) -> RequestSpec:
    """The request of a workload: asr, tts, retouch, stream, or the bench's image and sink."""
    if workload not in REQUEST_WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}")
    return _builder(workload)(workload, chunks, cancel_after_chunks, player_buffer_s)


def _one_request(settings: Any) -> list[RequestSpec]:
    spec = request_spec(
        settings.workload,
        settings.chunks,
        settings.cancel_after_chunks,
        settings.player_buffer_s,
    )
    if spec.stream_chunks and settings.sample_rate_hz != workloads.STREAM_SAMPLE_RATE_HZ:
        size = workloads.stream_chunk_bytes(settings.sample_rate_hz)
        spec = replace(
            spec,
            path=f"{spec.path}&rate={settings.sample_rate_hz}",
            expect_down_sha256=workloads.stream_sha256(spec.stream_chunks, size),
            expect_down_bytes=spec.stream_chunks * size,
            stream_chunk_bytes=size,
        )
    if spec.stream_chunks and settings.late_chunk is not None:  # servers.app holds it
        late_ms = round(settings.late_chunk_delay_s * 1e3, 3)
        spec = replace(
            spec,
            path=f"{spec.path}&late={settings.late_chunk}&late_ms={late_ms:g}",
            late_chunk=settings.late_chunk,
            late_chunk_s=settings.late_chunk_delay_s,
        )
    return [spec]


def _streams(settings: Any) -> list[RequestSpec]:
    return multi_specs(
        settings.stream_list,
        settings.chunks,
        signal_priority=settings.priority_signal != "none",
        cancel_after_chunks=settings.cancel_after_chunks,
        player_buffer_s=settings.player_buffer_s,
    )


EXCHANGES: dict[str, Callable[[Any], list[RequestSpec]]] = {
    **{name: _one_request for name in REQUEST_WORKLOADS},
    "multi": _streams,
}
"""The requests of one exchange of a workload, from the run's settings, by name."""


def exchange_specs(settings: Any) -> list[RequestSpec]:
    """The requests the client sends at once per exchange. A workload without an entry builds
    its own requests per exchange (agent: one per round), so it starts from a placeholder."""
    build = EXCHANGES.get(settings.workload)
    if build is None:
        return [RequestSpec(settings.workload, "GET", "/")]
    return build(settings)


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
            data = data[: max(0, limit * self.spec.stream_chunk_bytes - self.down_bytes)]
        if self.body_first_byte_at is None:
            self.body_first_byte_at = now
        before = self.down_bytes
        self.down_bytes += len(data)
        self._digest.update(data)
        if len(self._kept) < KEEP_BODY_MAX_BYTES:
            self._kept += data[: KEEP_BODY_MAX_BYTES - len(self._kept)]
        self.last_byte_at = now
        if self.spec.stream_chunks:
            size = self.spec.stream_chunk_bytes
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
            size = self.spec.stream_chunk_bytes
            whole = self.bytes_at_cancel // size
            ok = self._digest.hexdigest() == workloads.stream_sha256(whole, size) if whole else True
            ok = ok and self.bytes_at_cancel % size == 0
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
            if echoed is None and spec.echo_in_body:
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
