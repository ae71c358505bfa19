"""The HTTP request a workload is carried by: method, path, the fixed payloads up and down,
the kind of answer the server gives and the processing it waits. One per workload, on its
registration (tbcore.kinds.WorkloadKind.route): the client builds its request from it
(clients.workload), the server routes by it (servers.app), and ngtcp2's file server serves
the same path as a file (tbcore.quicstack, servers.ngtcp2). Plain data: no I/O, no import of
the settings."""

from __future__ import annotations

from dataclasses import dataclass

ANSWERS = ("payload", "transcript", "digest", "stream", "agent", "chunk")
"""What a server can answer: a fixed payload (after checking the upload, if any); ASR's
JSON transcript; an upload's digest (the bench's sink); streamed chunks; an agent's action;
one part of an upload over two paths."""


@dataclass(frozen=True)
class HttpRoute:
    method: str
    """The method the client sends."""
    path: str
    """The request path (also the file name under ngtcp2's document root)."""
    answer: str = "payload"
    """One of :data:`ANSWERS`: how the server answers the path."""
    upload: str | None = None
    """The fixed workload (tbcore.workloads) sent as the body; the server checks its bytes
    and SHA-256 and never trusts it."""
    download: str | None = None
    """The fixed workload expected back (bytes and SHA-256), if any."""
    processing: str | None = None
    """The knob whose time the server waits before answering (``processing_audio``...)."""
    echo_in_body: bool = False
    """The answer is JSON that carries the upload's checksum (ASR's transcript)."""
    also_accepts: tuple[str, ...] = ()
    """Other methods the server takes on the path."""
    tiles: int = 0
    """The upload in this many independently processed tiles (``?tiles=N``; 0: whole)."""
    tile_results: tuple[int, ...] = ()
    """The result's parts in proportion to these weights, one a tile (``&result=1,2,2``; the
    chapter's 1, 2 and 2 MB of §12.1.1); empty: equal parts."""
    decode: bool = False
    """The upload is an image losslessly encoded (tbcore.codec): the server decodes it as it
    arrives and checks the pixels before its processing (the chapter's F4)."""

    def __post_init__(self) -> None:
        if self.answer not in ANSWERS:
            raise ValueError(f"route {self.path}: answer {self.answer!r} is not one of {ANSWERS}")
        if self.tile_results and len(self.tile_results) != self.tiles:
            raise ValueError(f"route {self.path}: {len(self.tile_results)} result weights for "
                             f"{self.tiles} tiles")  # fmt: skip

    @property
    def query(self) -> str:
        """The query a tiled request carries (empty: none)."""
        if not self.tiles:
            return ""
        weights = ",".join(str(w) for w in self.tile_results)
        return f"tiles={self.tiles}" + (f"&result={weights}" if weights else "")

    @property
    def methods(self) -> frozenset[str]:
        return frozenset((self.method, *self.also_accepts))

    @property
    def file_name(self) -> str:
        """The file that holds the answer in a static server's document root."""
        return self.path.lstrip("/")
