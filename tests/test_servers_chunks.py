"""Chunk ids de-duplicated at the receiver (the duplicate arm of two paths)."""

from __future__ import annotations

import pytest

from servers.chunks import ChunkAssembler


def test_first_copy_wins_and_completion_time_is_the_last_missing_chunk() -> None:
    chunks = ChunkAssembler()
    assert chunks.add("u", 0, 3, 100, now=1.0).first
    assert not chunks.add("u", 0, 3, 100, now=1.5).first  # the other path's copy
    assert not chunks.add("u", 1, 3, 100, now=2.0).complete
    done = chunks.add("u", 2, 3, 100, now=3.0)
    assert done.complete and done.complete_s == 3.0 and done.have == 3
    late = chunks.add("u", 2, 3, 100, now=4.0)
    assert not late.first and late.complete_s == 3.0
    upload = chunks.uploads["u"]
    assert (upload.bytes_first, upload.bytes_duplicate, upload.duplicates) == (300, 200, 2)


@pytest.mark.parametrize(("chunk_id", "of"), [(3, 3), (-1, 3), (0, 0)])
def test_bad_ids_are_refused(chunk_id: int, of: int) -> None:
    with pytest.raises(ValueError):
        ChunkAssembler().add("u", chunk_id, of, 1, now=0.0)


def test_an_upload_keeps_its_chunk_count() -> None:
    chunks = ChunkAssembler()
    chunks.add("u", 0, 3, 1, now=0.0)
    with pytest.raises(ValueError, match="differs"):
        chunks.add("u", 1, 4, 1, now=0.0)
