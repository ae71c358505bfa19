"""What each workload sends and how its response is checked, without I/O."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

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
    "image": _Route("GET", "/image", download="image"),  # bench: 30 MB down
    "sink": _Route("POST", "/sink", upload="image"),  # bench: 30 MB up
}
"""The request of each fixed workload (``stream`` is built from its chunk count)."""
REQUEST_WORKLOADS = frozenset({*WORKLOAD_ROUTES, "stream"})
"""Workloads of one fixed request (:func:`request_spec`); others build theirs per request."""


def request_spec(workload: str, chunks: int = 50) -> RequestSpec:
    """The request of a workload: asr, tts, retouch, stream, or the bench's image and sink."""
    if workload == "stream":
        return RequestSpec(
            "stream",
            "GET",
            f"/stream?chunks={chunks}",
            expect_down_sha256=workloads.stream_sha256(chunks),
            expect_down_bytes=chunks * workloads.STREAM_CHUNK_BYTES,
            stream_chunks=chunks,
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

    @property
    def body(self) -> bytes:
        return bytes(self._kept)

    def verdict(self) -> tuple[bool, str | None]:
        """(sha256_ok, error): error is None only when the status is 200 and all checks pass."""
        spec = self.spec
        if self.status is None:
            return False, "no response headers"
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
