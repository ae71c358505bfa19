"""Chunk ids de-duplicated at the receiver: the ``duplicate`` arm of two paths (issue 14).

A client that sends the same upload over two paths cuts it into ``of`` chunks and sends each
as ``POST /chunk?upload=U&id=K&of=N`` on both. The receiver keeps the first copy of every
chunk id of an upload and drops later ones; the upload is complete when every id from 0 to
N-1 has arrived once: the first complete copy wins, whichever path each chunk came over.

Sans-I/O: :class:`ChunkAssembler` takes ``now`` with every chunk. The server process holds
one (:data:`ASSEMBLER`); what it answers per chunk tells the client whether that copy was the
first and whether the upload is complete, and when.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_CHUNKS = 100_000
MAX_UPLOADS = 1024
"""Uploads remembered at once; the oldest are forgotten beyond it (a long-running server)."""


@dataclass
class Upload:
    of: int
    seen: set[int] = field(default_factory=set)
    duplicates: int = 0
    bytes_first: int = 0
    bytes_duplicate: int = 0
    complete_s: float | None = None
    """When the last missing chunk arrived (the caller's clock)."""


@dataclass(frozen=True)
class ChunkVerdict:
    first: bool
    """This copy is the first of its id (kept)."""
    complete: bool
    have: int
    of: int
    complete_s: float | None


class ChunkAssembler:
    """The first copy of every chunk id per upload, and when each upload completed."""

    def __init__(self) -> None:
        self.uploads: dict[str, Upload] = {}

    def add(self, upload: str, chunk_id: int, of: int, size_bytes: int, now: float) -> ChunkVerdict:
        if not 1 <= of <= MAX_CHUNKS:
            raise ValueError(f"of: {of} is not in 1..{MAX_CHUNKS}")
        if not 0 <= chunk_id < of:
            raise ValueError(f"id: {chunk_id} is not in 0..{of - 1}")
        state = self.uploads.get(upload)
        if state is None:
            if len(self.uploads) >= MAX_UPLOADS:
                self.uploads.pop(next(iter(self.uploads)))
            state = self.uploads[upload] = Upload(of)
        if state.of != of:
            raise ValueError(f"of: {of} differs from the upload's {state.of}")
        first = chunk_id not in state.seen
        if first:
            state.seen.add(chunk_id)
            state.bytes_first += size_bytes
            if len(state.seen) == of and state.complete_s is None:
                state.complete_s = now
        else:
            state.duplicates += 1
            state.bytes_duplicate += size_bytes
        return ChunkVerdict(
            first=first,
            complete=state.complete_s is not None,
            have=len(state.seen),
            of=of,
            complete_s=state.complete_s,
        )


ASSEMBLER = ChunkAssembler()
"""The server process's assembler (shared by its h2 and h3 connections)."""
