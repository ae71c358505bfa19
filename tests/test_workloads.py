"""The fixed workloads: exact sizes, determinism, checksums computed from the bytes, cache."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tbcore import workloads
from tbcore.errors import SpecError


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(workloads.CACHE_ENV, str(tmp_path / "wl"))
    workloads.workload_bytes.cache_clear()
    workloads.workload_sha256.cache_clear()
    yield tmp_path / "wl"
    workloads.workload_bytes.cache_clear()
    workloads.workload_sha256.cache_clear()


@pytest.mark.parametrize(
    ("name", "size"),
    [("audio", 354_640), ("image", 30_000_000), ("retouched", 5_000_000)],
)
def test_sizes_are_exact(cache: Path, name: str, size: int) -> None:
    path = workloads.workload_path(name)
    assert path.parent == cache
    assert path.stat().st_size == size
    assert len(workloads.workload_bytes(name)) == size


def test_audio_is_whole_16bit_samples() -> None:
    assert workloads.AUDIO_SIZE_BYTES % 2 == 0
    assert workloads.AUDIO_SIZE_BYTES // 2 == 177_320


def test_sha256_is_computed_from_the_file(cache: Path) -> None:
    path = workloads.workload_path("audio")
    assert workloads.workload_sha256("audio") == hashlib.sha256(path.read_bytes()).hexdigest()


def test_generation_is_deterministic(cache: Path) -> None:
    assert workloads.generate_bytes("audio") == workloads.generate_bytes("audio")
    assert workloads.generate_bytes("audio") != workloads.generate_bytes("retouched")[:354_640]


def test_corrupted_cache_is_regenerated_not_served(cache: Path) -> None:
    path = workloads.workload_path("audio")
    good = path.read_bytes()
    path.write_bytes(b"\0" * len(good))  # same size, wrong bytes
    workloads.workload_bytes.cache_clear()
    assert workloads.workload_bytes("audio") == good
    assert path.read_bytes() == good


def test_cache_dir_defaults_to_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(workloads.CACHE_ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert workloads.cache_dir() == tmp_path / ".cache" / "testbed" / "workloads"


def test_unknown_workload_is_one_line_error() -> None:
    with pytest.raises(SpecError, match=r"^workload: unknown workload 'video'"):
        workloads.workload_path("video")


def test_stream_chunks() -> None:
    assert workloads.STREAM_CHUNK_BYTES == 960
    first, second = workloads.stream_chunk(0), workloads.stream_chunk(1)
    assert len(first) == len(second) == 960
    assert first != second
    expected = hashlib.sha256(first + second).hexdigest()
    assert workloads.stream_sha256(2) == expected
    with pytest.raises(SpecError):
        workloads.stream_chunk(-1)


def test_stream_chunks_follow_the_sample_rate() -> None:
    from tbcore.errors import SpecError

    assert workloads.stream_chunk_bytes(24_000) == 960 == workloads.STREAM_CHUNK_BYTES
    assert workloads.stream_chunk_bytes(16_000) == 640
    assert len(workloads.stream_chunk(2, 640)) == 640
    assert workloads.stream_sha256(3, 640) != workloads.stream_sha256(3)
    with pytest.raises(SpecError, match="sample_rate"):
        workloads.stream_chunk_bytes(22_050)
