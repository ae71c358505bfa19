"""Several streams on one connection against our server (loopback): the send policy orders
them (FIFO vs RFC 9218 urgency) on both protocols, a streamed response is cancelled and the
server says when it learned and stopped, and a tiled upload gets its result in parts."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.api import run_requests
from clients.config import ClientConfig
from servers.events import read_events
from servers.process import ServerProcess

pytestmark = pytest.mark.timeout(180)


def _config(server: ServerProcess, protocol: str, **kw: object) -> ClientConfig:
    return ClientConfig.of(protocol=protocol, port=server.ports[protocol], timeout_s=60.0, **kw)


@pytest.mark.parametrize("protocol", ["h2", "h3"])
@pytest.mark.parametrize("policy", ["fifo", "rfc9218"])
async def test_send_policy_orders_the_streams(protocol: str, policy: str, tmp_path: Path) -> None:
    # audio and image ready at once: the policy alone decides which finishes first
    args = ["--send-policy", policy, "--processing-audio", "0ms", "--log", str(tmp_path / "s")]
    with ServerProcess(args) as server:
        records = await run_requests(
            _config(server, protocol, workload="multi", streams="result,tts")
        )
    image, audio = records
    assert image.ok and audio.ok, (image.error, audio.error)
    assert (image.stream_workload, audio.stream_workload) == ("result", "tts")
    assert audio.priority == "u=0" and image.priority == "u=4"
    assert image.response_body_first_byte is not None
    if policy == "fifo":  # arrival order: the image was asked first
        assert audio.response_last_byte > image.response_last_byte
    else:  # RFC 9218: urgency 0 before urgency 4
        assert audio.response_last_byte < image.response_last_byte


@pytest.mark.parametrize("protocol", ["h2", "h3"])
async def test_priority_update_frame_reaches_the_server(protocol: str, tmp_path: Path) -> None:
    log = tmp_path / "server.jsonl"
    with ServerProcess(["--send-policy", "rfc9218", "--log", str(log)]) as server:
        records = await run_requests(
            _config(server, protocol, workload="multi", streams="tts", priority_signal="update")
        )
    assert records[0].ok
    updates = [e for e in read_events(log) if e["event"] == "priority_update"]
    if protocol == "h3":
        assert [(u["urgency"], u["incremental"]) for u in updates] == [(0, False)]
    else:  # the HTTP/2 client signals with the header only
        assert updates == []


@pytest.mark.parametrize("protocol", ["h2", "h3"])
async def test_cancel_stops_the_server(protocol: str, tmp_path: Path) -> None:
    log = tmp_path / "server.jsonl"
    with ServerProcess(["--log", str(log)]) as server:
        records = await run_requests(
            _config(server, protocol, workload="stream", chunks=40, cancel_after_chunks=5)
        )
    (record,) = records
    assert record.ok, record.error
    assert record.bytes_at_cancel == 5 * 960 and len(record.chunk_times) == 5
    events = read_events(log)
    learned = next(e for e in events if e["event"] == "stream_cancelled")
    stopped = next(e for e in events if e["event"] == "chunk_production_stopped")
    assert learned["how"] == ("reset" if protocol == "h2" else "stop_sending")
    assert learned["t"] >= record.cancelled_at
    # loopback: the server learns within a few chunk periods and never produces them all
    assert 5 <= stopped["next_index"] < 40
    sent = [e for e in events if e["event"] == "chunk_sent"]
    assert len(sent) < 40


@pytest.mark.parametrize("protocol", ["h2", "h3"])
async def test_tiles_come_back_while_the_upload_goes_on(protocol: str, tmp_path: Path) -> None:
    log = tmp_path / "server.jsonl"
    with ServerProcess(["--log", str(log)]) as server:
        records = await run_requests(_config(server, protocol, workload="retouch-tiles3"))
    (record,) = records
    assert record.ok, record.error
    events = read_events(log)
    tiles = [e["t"] for e in events if e["event"] == "tile_sent"]
    upload_end = next(e["t"] for e in events if e["event"] == "request_last_byte")
    assert len(tiles) == 3
    first = next(e["t"] for e in events if e["event"] == "processing_start" and e["tile"] == 0)
    assert first < upload_end  # tile 0 was processed while the upload went on
    sizes = [e["bytes"] for e in events if e["event"] == "tile_sent"]
    assert sizes == [1_666_666, 1_666_667, 1_666_667]


@pytest.mark.parametrize("protocol", ["h2", "h3"])
async def test_the_chapters_tiles_come_back_as_1_2_and_2_mb(protocol: str, tmp_path: Path) -> None:
    log = tmp_path / "server.jsonl"
    with ServerProcess(["--log", str(log)]) as server:
        config = _config(server, protocol, workload="retouch-tiles3-chapter")
        (record,) = await run_requests(config)
    assert record.ok, record.error  # the whole 5 MB result, its SHA-256 checked
    sizes = [e["bytes"] for e in read_events(log) if e["event"] == "tile_sent"]
    assert sizes == [1_000_000, 2_000_000, 2_000_000]
