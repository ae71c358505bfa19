"""Request handling shared by the HTTP/2 and HTTP/3 servers, without I/O.

An :class:`Exchange` is one request. The protocol edge feeds it the request head, body
bytes and the end of the body, and gets back a :class:`ResponsePlan`: status, headers, how
long to "process" (the edge sleeps), and the body (bytes, or a count of streamed chunks).
Routes:

- ``POST /asr``: upload the audio; JSON transcript with the SHA-256 and length received.
- ``GET /tts`` (or ``POST /tts`` with a short text): the audio (354,640 bytes).
- ``POST /retouch``: upload the image; the retouched image (5,000,000 bytes) back, with the
  upload's SHA-256 and length in ``x-upload-sha256`` / ``x-upload-length``.
  ``POST /retouch?tiles=N``: the image as N equal tiles, each processed as soon as it has
  arrived (``processing_image_s / N`` each, one after the other) and its share of the result
  sent at once: the response starts while the upload goes on (docs/models.md section 2).
- ``POST /agent?op=ID&round=N``: an agent round's screenshot; after ``agent_model_s`` the
  action as JSON (a known op id: the stored action, executed once; :mod:`tbcore.agent`);
  with ``&break=1`` the round is executed and the connection reset instead of the reply
  (the client's own connection: the agent's outage, knob ``outage_mode``); with ``&last=1``
  (a task attempt's last round) and ``task_success`` set, the action carries the model's
  verdict on the attempt, ``"task": "done"`` or ``"failed"`` (tbcore.agent.task_outcome).
- ``GET /stream?chunks=N``: N chunks of 960 bytes, one every 20 ms, each after 12 ms.
- ``GET /result``: the 5,000,000-byte image result (``retouched``) with no processing (it is
  ready), for several streams on one connection beside the audio.
- ``GET /image`` and ``POST /sink``: 30 MB down, any body up (JSON with its SHA-256 and
  length back), no processing: the transfers of ``testbed bench stacks``.
- ``POST /chunk?upload=U&id=K&of=N``: one chunk of an upload sent over two paths; the first
  copy of each id is kept (:mod:`servers.chunks`); JSON ``first``, ``complete``, ``have``,
  ``of``, ``complete_t`` back.

Unknown paths get 404, wrong methods 405 (with ``allow``), a declared or running body size
over the limit 413 at once (the edge then stops reading the stream), a body shorter than its
``content-length`` 400 and an ``upload_truncated`` event.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from proto.http import RequestHead
from servers import chunks
from tbcore import agent, codec, kinds, workloads
from tbcore.routes import HttpRoute
from tbcore.settings import KNOBS

DEFAULT_STREAM_CHUNKS = 50
MAX_STREAM_CHUNKS = 30_000
MAX_LATE_CHUNK_S = 10.0
"""The longest a streamed chunk may be held (tbcore.settings late_chunk_delay's range)."""
"""10 minutes of 20 ms chunks."""
MAX_TTS_TEXT_BYTES = 4096
MAX_TILES = 100


def parse_tile_results(text: str, tiles: int) -> tuple[int, ...] | None:
    """``"1,2,2"`` for ``tiles`` tiles: one whole number in 1..MAX_TILES a tile (None: not)."""
    parts = text.split(",")
    if len(parts) != tiles or not all(p.isdigit() and 1 <= int(p) <= MAX_TILES for p in parts):
        return None
    return tuple(int(p) for p in parts)


def part_bounds(size: int, tiles: int, weights: tuple[int, ...], index: int) -> tuple[int, int]:
    """``(start, end)`` of part ``index`` of ``size`` bytes cut into ``tiles`` parts in
    proportion to ``weights`` (empty: equal parts); the parts cover every byte once."""
    weights = weights or (1,) * tiles
    total = sum(weights)
    before = sum(weights[:index])
    return size * before // total, size * (before + weights[index]) // total


ROUTES: dict[str, HttpRoute] = kinds.by_path()
"""Every path the server answers, from the workloads' registrations (tbcore.kinds): the
methods it takes, the upload it checks (never trusted), the answer and its processing."""
CONTENT_TYPES = {"audio": "audio/L16;rate=16000;channels=1"}
"""A fixed payload's media type (the others: application/octet-stream)."""


@dataclass
class ResponsePlan:
    """What the edge sends: headers, then after ``processing_s`` the body or the chunks."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""
    processing_s: float = 0.0
    processing_knob: str | None = None
    """The setting (tbcore.settings key) ``processing_s`` comes from, if any."""
    applied: dict[str, Any] = field(default_factory=dict)
    """Other settings the answer put in force (key: value), recorded with the response."""
    stream_chunks: int = 0
    """When > 0, ``body`` is empty and the edge streams that many chunks (see workloads)."""
    stream_chunk_bytes: int = workloads.STREAM_CHUNK_BYTES
    """Bytes of each streamed chunk (20 ms at the request's ``rate``: 960 at 24 kHz)."""
    chunk_interval_s: float = workloads.STREAM_CHUNK_DURATION_S
    chunk_processing_s: float = workloads.STREAM_CHUNK_PROCESSING_S
    tiles: int = 0
    """When > 0, ``body`` is sent in that many parts, part ``i`` after upload tile ``i`` has
    arrived and been processed for ``processing_s / tiles`` (one processor, in order)."""
    tile_results: tuple[int, ...] = ()
    """The parts' sizes in proportion to these weights (empty: equal parts)."""

    def part_bounds(self, index: int) -> tuple[int, int]:
        """``(start, end)`` of the body's part ``index`` of a tiled response."""
        return part_bounds(len(self.body), self.tiles, self.tile_results, index)

    stop_reading: bool = False
    """True when the request body must not be read further (413, 404... with a body pending)."""
    late_chunk_index: int | None = None
    """A streamed chunk sent ``late_chunk_s`` after it is produced, the later ones not before
    it (``?late=N&late_ms=D``: the chapter's §12.1.2 late chunk)."""
    late_chunk_s: float = 0.0
    reset: bool = False
    """After ``processing_s`` the edge resets the connection instead of answering (an agent
    round marked ``break=1``: the reply lost, the connection reset, the chapter's §12.5.2)."""
    error: str | None = None
    """One-line reason for an error status, also logged."""

    @property
    def body_length(self) -> int:
        return (
            self.stream_chunks * self.stream_chunk_bytes if self.stream_chunks else len(self.body)
        )


def _error(status: int, reason: str, extra: list[tuple[str, str]] | None = None) -> ResponsePlan:
    body = (json.dumps({"error": reason}) + "\n").encode()
    headers = [
        ("content-type", "application/json"),
        ("content-length", str(len(body))),
        *(extra or []),
    ]
    return ResponsePlan(status=status, headers=headers, body=body, stop_reading=True, error=reason)


@dataclass
class AppConfig:
    processing_audio_s: float = KNOBS["processing_audio"].default
    processing_image_s: float = KNOBS["processing_image"].default
    max_body_bytes: int = 72_000_000
    agent_model_s: float = KNOBS["agent_model"].default
    task_success: float | None = KNOBS["task_success"].default
    processing_restore_s: float = KNOBS["processing_restore"].default


AGENT_OPS = agent.OpStore()
"""The agent's executed operations in this server process: an op id executes once."""


@dataclass
class Exchange:
    """One request's state machine: head -> body* -> end (or truncated)."""

    head: RequestHead
    config: AppConfig
    received_bytes: int = 0
    early: ResponsePlan | None = None
    """A response decided before the body ended (404/405/413/400); the body is not read."""
    finished: bool = False
    _digest: hashlib._Hash = field(default_factory=hashlib.sha256)
    _text: bytearray = field(default_factory=bytearray)
    tiles: int = 0
    """``/retouch?tiles=N``: how many tiles the upload is cut into (0: whole)."""
    tiles_ready: int = 0
    """Tiles whose bytes have all arrived."""
    tile_results: tuple[int, ...] = ()
    """``&result=1,2,2``: the result's parts in proportion (empty: equal parts)."""
    decoder: codec.Decoder | None = None
    """A route whose upload is an encoded image (HttpRoute.decode): inflates it as it comes."""
    decode_s: float | None = None
    """How long decoding the last of it took once the body had ended."""

    def __post_init__(self) -> None:
        self.route = urlsplit(self.head.path).path
        self.spec = ROUTES.get(self.route)
        if self.spec is None:
            self.early = _error(404, f"no route {self.route}")
            return
        if self.spec.decode:
            self.decoder = codec.Decoder()
        if self.spec.answer == "payload" and self.spec.upload is not None:  # may come in tiles
            raw = parse_qs(urlsplit(self.head.path).query).get("tiles", ["0"])[-1]
            if not raw.isdigit() or int(raw) > MAX_TILES:
                self.early = _error(400, f"tiles: {raw!r} is not a whole number in 0..{MAX_TILES}")
                return
            self.tiles = int(raw) if int(raw) > 1 else 0
            weights = parse_qs(urlsplit(self.head.path).query).get("result")
            if weights is not None:
                self.tile_results = parse_tile_results(weights[-1], self.tiles)
                if self.tile_results is None:
                    self.early = _error(400, f"result: {weights[-1][:40]!r} is not {self.tiles} "
                                        f"whole numbers in 1..{MAX_TILES}, comma-separated, "
                                        "one a tile")  # fmt: skip
                    return
        allowed = self.spec.methods
        if self.head.method not in allowed:
            self.early = _error(
                405,
                f"{self.head.method} not allowed on {self.route}",
                [("allow", ", ".join(sorted(allowed)))],
            )
        elif (
            self.head.content_length is not None
            and self.head.content_length > self.config.max_body_bytes
        ):
            self.early = _error(
                413,
                f"content-length {self.head.content_length} > limit {self.config.max_body_bytes}",
            )

    def tile_bytes(self, index: int) -> int:
        """End offset of tile ``index`` in the upload (equal tiles, the last takes the rest)."""
        size = workloads.get_workload(self._spec.upload or "").size_bytes
        return size if index == self.tiles - 1 else size * (index + 1) // self.tiles

    def new_tiles(self) -> list[int]:
        """Tiles completed by the bytes fed so far and not reported before."""
        done = []
        while self.tiles_ready < self.tiles and self.received_bytes >= self.tile_bytes(
            self.tiles_ready
        ):
            done.append(self.tiles_ready)
            self.tiles_ready += 1
        return done

    def tiled_plan(self) -> ResponsePlan:
        """The response of a tiled upload, started at its first body byte: the parts of the
        result follow the tiles (the upload's checksum is checked when it ends)."""
        plan = self._payload_plan()
        plan.tiles = self.tiles
        plan.tile_results = self.tile_results
        return plan

    def feed(self, data: bytes) -> ResponsePlan | None:
        """Take body bytes; returns a 413 plan when the body runs over the limit."""
        if self.early is not None or self.finished:
            return None
        self.received_bytes += len(data)
        if self.received_bytes > self.config.max_body_bytes:
            self.early = _error(
                413, f"body over limit {self.config.max_body_bytes} (no content-length)"
            )
            return self.early
        self._digest.update(data)
        if self.decoder is not None:
            self.decoder.feed(data)
        if self._takes_text and len(self._text) < MAX_TTS_TEXT_BYTES:
            self._text += data[: MAX_TTS_TEXT_BYTES - len(self._text)]
        return None

    @property
    def truncated(self) -> bool:
        """The body ended (or the stream died) short of its declared length (a refused body,
        404/405/413, is not "truncated": the server stopped reading it)."""
        return (
            self.early is None
            and self.head.content_length is not None
            and self.received_bytes < self.head.content_length
        )

    @property
    def upload_sha256(self) -> str:
        return self._digest.hexdigest()

    def finish(self) -> ResponsePlan:
        """The request body is complete: decide the response."""
        self.finished = True
        if self.early is not None:
            return self.early
        if self.truncated:
            return _error(
                400,
                f"truncated upload: {self.received_bytes} of {self.head.content_length} bytes",
            )
        if self.head.content_length is not None and self.received_bytes > self.head.content_length:
            return _error(
                400, f"body {self.received_bytes} bytes > content-length {self.head.content_length}"
            )
        return ANSWERS[self._spec.answer](self)

    @property
    def _spec(self) -> HttpRoute:
        """The route of a request that got past the early checks (404 has none)."""
        assert self.spec is not None, "an answer is only given on a known route"
        return self.spec

    @property
    def _takes_text(self) -> bool:
        """A POST of a text on a route whose answer is a payload made from it (TTS)."""
        return (
            self.spec is not None
            and self.spec.answer == "payload"
            and self.spec.upload is None
            and self.head.method == "POST"
        )

    def _processing_s(self) -> float:
        knob = self._spec.processing
        return 0.0 if knob is None else float(getattr(self.config, f"{knob}_s"))

    def _payload_plan(self, extra: list[tuple[str, str]] | None = None) -> ResponsePlan:
        """The route's fixed payload after its processing."""
        name = self._spec.download or ""
        content_type = CONTENT_TYPES.get(name, "application/octet-stream")
        plan = _workload_plan(name, content_type, self._processing_s(), extra)
        plan.processing_knob = self._spec.processing
        return plan

    def _upload_check(self) -> tuple[bool, str]:
        expected = self._spec.upload or ""
        ok = self.received_bytes == workloads.get_workload(
            expected
        ).size_bytes and self.upload_sha256 == workloads.workload_sha256(expected)
        if self.decoder is not None:
            ok = self._decoded_ok() and ok
        return ok, expected

    def _decoded_ok(self) -> bool:
        """Decode the rest of an encoded image (timed: :attr:`decode_s`) and check its
        pixels."""
        assert self.decoder is not None
        start = time.monotonic()
        try:
            pixels = self.decoder.finish()
        except ValueError:
            return False
        finally:
            self.decode_s = time.monotonic() - start
        return hashlib.sha256(pixels).hexdigest() == codec.photo_sha256()

    def _upload_headers(self) -> list[tuple[str, str]]:
        extra = [] if self.decode_s is None else [("x-decode-s", f"{self.decode_s:.6f}")]
        return [
            ("x-upload-sha256", self.upload_sha256),
            ("x-upload-length", str(self.received_bytes)),
            *extra,
        ]

    def _answer_transcript(self) -> ResponsePlan:
        ok, expected = self._upload_check()
        transcript = {
            "transcript": "the quick brown fox jumps over the lazy dog" if ok else "",
            "upload_sha256": self.upload_sha256,
            "upload_length": self.received_bytes,
            "upload_ok": ok,
        }
        body = (json.dumps(transcript) + "\n").encode()
        headers = [
            ("content-type", "application/json"),
            ("content-length", str(len(body))),
            *self._upload_headers(),
        ]
        return ResponsePlan(
            status=200 if ok else 422,
            headers=headers,
            body=body,
            processing_s=self._processing_s(),
            processing_knob=self._spec.processing,
            error=None if ok else f"upload does not match workload {expected}",
        )

    def _answer_payload(self) -> ResponsePlan:
        """The route's payload; after an upload, only if the upload is the one expected."""
        if self._spec.upload is None:
            return self._payload_plan()
        ok, expected = self._upload_check()
        if self.tiles:
            # the response went out tile by tile; a bad upload is logged, not answered
            plan = self.tiled_plan()
            if not ok:
                plan.error = f"upload does not match workload {expected}"
            return plan
        if not ok:
            plan = _error(422, f"upload does not match workload {expected}", self._upload_headers())
            plan.stop_reading = False
            return plan
        return self._payload_plan(self._upload_headers())

    def _answer_digest(self) -> ResponsePlan:
        """The upload's SHA-256 and length, after the route's processing (a restore)."""
        answer = {"upload_sha256": self.upload_sha256, "upload_length": self.received_bytes}
        plan = _json_plan(200, answer, self._upload_headers())
        plan.processing_s = self._processing_s()
        plan.processing_knob = self._spec.processing
        return plan

    def _answer_chunk(self) -> ResponsePlan:
        query = parse_qs(urlsplit(self.head.path).query)
        values = {k: query.get(k, [""])[-1] for k in ("upload", "id", "of")}
        if not values["upload"] or not values["id"].isdigit() or not values["of"].isdigit():
            plan = _error(400, "chunk: needs upload=U&id=K&of=N (whole numbers)")
            plan.stop_reading = False
            return plan
        try:
            verdict = chunks.ASSEMBLER.add(
                values["upload"],
                int(values["id"]),
                int(values["of"]),
                self.received_bytes,
                time.monotonic(),
            )
        except ValueError as err:
            plan = _error(400, f"chunk: {err}")
            plan.stop_reading = False
            return plan
        answer = {
            "first": verdict.first,
            "complete": verdict.complete,
            "have": verdict.have,
            "of": verdict.of,
            "complete_t": verdict.complete_s,
        }
        return _json_plan(200, answer, self._upload_headers())

    def _answer_agent(self) -> ResponsePlan:
        """One agent round: the screenshot up, the model's action back (after the decision
        time); a known op id (a retry, a 0-RTT replay) gets its stored result, not a second
        execution."""
        query = parse_qs(urlsplit(self.head.path).query)
        op = query.get("op", [""])[-1]
        raw_round = query.get("round", [""])[-1]
        if not op or len(op) > 200 or not raw_round.isdigit():
            plan = _error(400, "agent: needs op=ID&round=N")
            plan.stop_reading = False
            return plan
        judged = query.get("last", [""])[-1] == "1" and self.config.task_success is not None
        body, wait_s, executed = AGENT_OPS.execute(
            op,
            int(raw_round),
            self.upload_sha256,
            self.config.agent_model_s,
            time.monotonic(),
            task_success=self.config.task_success if judged else None,
        )
        headers = [
            ("content-type", "application/json"),
            ("content-length", str(len(body))),
            ("x-agent-executed", "1" if executed else "0"),
            *self._upload_headers(),
        ]
        return ResponsePlan(
            status=200,
            headers=headers,
            body=body,
            processing_s=wait_s,
            processing_knob="agent_model" if executed else None,
            applied={"task_success": self.config.task_success} if judged and executed else {},
            reset=query.get("break", [""])[-1] == "1",
        )

    def _answer_stream(self) -> ResponsePlan:
        query = parse_qs(urlsplit(self.head.path).query)
        raw = query.get("chunks", [str(DEFAULT_STREAM_CHUNKS)])[-1]
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_STREAM_CHUNKS:
            plan = _error(400, f"chunks: {raw!r} is not a whole number in 1..{MAX_STREAM_CHUNKS}")
            plan.stop_reading = False
            return plan
        chunks = int(raw)
        rate = query.get("rate", [str(workloads.STREAM_SAMPLE_RATE_HZ)])[-1]
        if not rate.isdigit() or int(rate) not in workloads.STREAM_SAMPLE_RATES_HZ:
            known = ", ".join(map(str, workloads.STREAM_SAMPLE_RATES_HZ))
            plan = _error(400, f"rate: {rate!r} is not one of {known} (Hz)")
            plan.stop_reading = False
            return plan
        size = workloads.stream_chunk_bytes(int(rate))
        late = query.get("late", [""])[-1]
        late_ms = query.get("late_ms", ["0"])[-1]
        try:
            late_s = float(late_ms) / 1e3
        except ValueError:
            late_s = math.nan
        if late and (not late.isdigit() or not 1 <= int(late) <= chunks):
            plan = _error(400, f"late: {late!r} is not a chunk number in 1..{chunks}")
            plan.stop_reading = False
            return plan
        if not 0 <= late_s <= MAX_LATE_CHUNK_S:
            plan = _error(400, f"late_ms: {late_ms!r} is not in 0..{MAX_LATE_CHUNK_S * 1e3:g}")
            plan.stop_reading = False
            return plan
        headers = [
            ("content-type", f"audio/L16;rate={int(rate)};channels=1"),
            ("content-length", str(chunks * size)),
            ("x-sha256", workloads.stream_sha256(chunks, size)),
        ]
        return ResponsePlan(
            status=200,
            headers=headers,
            stream_chunks=chunks,
            stream_chunk_bytes=size,
            late_chunk_index=int(late) - 1 if late else None,
            late_chunk_s=late_s if late else 0.0,
        )


ANSWERS: dict[str, Callable[[Exchange], ResponsePlan]] = {
    "payload": Exchange._answer_payload,
    "transcript": Exchange._answer_transcript,
    "digest": Exchange._answer_digest,
    "stream": Exchange._answer_stream,
    "agent": Exchange._answer_agent,
    "chunk": Exchange._answer_chunk,
}
"""How the server gives each kind of answer a route names (tbcore.routes.ANSWERS)."""


def _workload_plan(
    name: str,
    content_type: str,
    processing_s: float = 0.0,
    extra: list[tuple[str, str]] | None = None,
) -> ResponsePlan:
    """200 with a fixed workload as the body, its length and SHA-256 in the headers."""
    body = workloads.workload_bytes(name)
    headers = [
        ("content-type", content_type),
        ("content-length", str(len(body))),
        ("x-sha256", workloads.workload_sha256(name)),
        *(extra or []),
    ]
    return ResponsePlan(status=200, headers=headers, body=body, processing_s=processing_s)


def _json_plan(
    status: int, answer: dict[str, object], extra: list[tuple[str, str]]
) -> ResponsePlan:
    body = (json.dumps(answer) + "\n").encode()
    headers = [("content-type", "application/json"), ("content-length", str(len(body))), *extra]
    return ResponsePlan(status=status, headers=headers, body=body)


def response_head(plan: ResponsePlan, proto: str) -> list[tuple[str, str]]:
    """``:status`` first, then the plan's headers and a server tag."""
    return [(":status", str(plan.status)), ("server", f"testbed-{proto}"), *plan.headers]
