"""The multipath arms on loopback (both 'paths' are 127.0.0.1: the mechanics, not the rates;
the two-path runs on a dual topology are experiments/multipath.toml)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from clients.multipath import MultipathConfig, run_multipath
from servers.process import ServerProcess
from tbcore.errors import SpecError

pytestmark = pytest.mark.timeout(120)
SIZE = 3_000_000


def _run(mode: str, port: int) -> object:
    config = MultipathConfig(
        mode=mode,
        host="127.0.0.1",
        port=port,
        sources=("127.0.0.1", "127.0.0.1"),
        size_bytes=SIZE,
        chunk_bytes=250_000,
        probe_bytes=500_000,
    )
    starts: list[float] = []
    result = asyncio.run(run_multipath(config, starts.append))
    assert starts == [result.start_s]
    return result


def test_split_duplicate_single_move_the_payload(tmp_path: Path) -> None:
    with ServerProcess(["--no-h3", "--log", str(tmp_path / "server.jsonl")]) as server:
        port = server.ports["h2"]
        single = _run("single", port)
        split = _run("split", port)
        duplicate = _run("duplicate", port)
    assert single.error is None and single.bytes_sent == SIZE
    assert split.error is None and split.bytes_sent == SIZE
    assert split.fractions is not None and sum(split.fractions) == pytest.approx(1.0)
    assert [p.bytes_sent for p in split.paths] == [
        round(SIZE * split.fractions[0]),
        SIZE - round(SIZE * split.fractions[0]),
    ]
    assert duplicate.error is None and duplicate.bytes_sent == 2 * SIZE  # twice the bytes
    kept = sum(p.chunks_first for p in duplicate.paths)
    assert kept == SIZE // 250_000  # every chunk id kept once, whichever path won it
    assert sum(p.chunks_duplicate for p in duplicate.paths) == kept
    assert duplicate.total_s is not None and duplicate.total_s > 0


def test_bad_config_names_the_field() -> None:
    with pytest.raises(SpecError) as err:
        MultipathConfig(mode="triple", host="h", port=1, sources=("a", "b"))
    assert err.value.field == "multipath"
    with pytest.raises(SpecError) as err:
        MultipathConfig(mode="split", host="h", port=1, sources=("a", "b"), size_bytes=0)
    assert err.value.field == "size_bytes"


def test_duplicate_goes_on_over_the_path_that_opens_and_fails_without_one(tmp_path: Path) -> None:
    """A path whose connection cannot open (here: a source address this host does not have)
    is a lost copy: the upload goes on over the other; with neither, nothing is delivered
    and the result says why (tbcore.failures: an outcome of a trial)."""
    dead = "198.18.255.254"
    with ServerProcess(["--no-h3", "--log", str(tmp_path / "server.jsonl")]) as server:
        port = server.ports["h2"]

        def duplicate(sources: tuple[str, str]) -> object:
            config = MultipathConfig(mode="duplicate", host="127.0.0.1", port=port,
                                     sources=sources, size_bytes=5120, chunk_bytes=640)  # fmt: skip
            return asyncio.run(run_multipath(config))

        one = duplicate((dead, "127.0.0.1"))
        none = duplicate((dead, dead))
    assert one.error is None and one.total_s is not None
    assert one.paths[0].error.startswith("not opened") and one.paths[0].bytes_sent == 0
    assert one.paths[1].bytes_sent == 5120 and one.paths[1].chunks_first == 8
    assert none.end_s is None and none.error.startswith("no path opened")
