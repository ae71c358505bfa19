"""Each attack of ``testbed abuse`` against a real ``testbed serve`` on loopback, small and
short, and what the server's guards answer (its event log), and a normal request after."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aioquic.buffer import Buffer
from aioquic.quic.packet import QuicPacketType, pull_quic_header

from harness.abuse import attacks, protocol
from harness.bench.abuse import probe
from servers.guard import H2Limits
from servers.process import ServerProcess

pytestmark = pytest.mark.timeout(120)


def _events(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


@pytest.fixture
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[ServerProcess, Path]]:
    log = tmp_path / "events.jsonl"
    extra = getattr(request, "param", [])
    with ServerProcess(["--processing-audio", "0ms", "--log", str(log), *extra]) as proc:
        yield proc, log


def _target(proc: ServerProcess) -> attacks.Target:
    return attacks.Target("127.0.0.1", proc.ports["h2"], proc.ports["h3"])


def test_a_forged_initial_parses_as_an_initial() -> None:
    packet = attacks.forged_initial()
    assert len(packet) == attacks.QUIC_INITIAL_BYTES
    header = pull_quic_header(Buffer(data=packet), host_cid_length=8)
    assert header.packet_type == QuicPacketType.INITIAL and header.token == b""


def test_attacks_refuse_targets_off_loopback() -> None:
    attacks.check_loopback("127.0.0.1")
    with pytest.raises(ValueError):
        attacks.check_loopback("198.51.100.1")


def test_rapid_reset_gets_goaway_enhance_your_calm(server: tuple[ServerProcess, Path]) -> None:
    proc, log = server
    outcome = attacks.rapid_reset(_target(proc), duration_s=3.0, streams=5_000)
    # the GOAWAY itself can be lost to the abort that follows it when the attacker reads late
    # (a loaded host): the server's own abuse event below is what must be there
    assert "GOAWAY" in outcome, outcome
    abuse = [e for e in _events(log) if e["event"] == "abuse"]
    assert abuse and "CVE-2023-44487" in abuse[0]["reason"]
    requests = sum(e["event"] == "request_first_byte" for e in _events(log))
    assert requests <= 2 * 201  # one connection's allowance, not 5,000
    assert asyncio.run(probe("h2", proc.ports["h2"])) is not None  # 127.0.0.1 is still served


def test_sending_after_a_reset_is_cut_off(server: tuple[ServerProcess, Path]) -> None:
    proc, log = server
    outcome = attacks.send_after_reset(_target(proc), duration_s=10.0, max_bytes=200_000_000)
    assert "server closed" in outcome, outcome
    sent_mb = float(outcome.split(" MB")[0])
    assert sent_mb < 40  # window (16 MiB) + grace (1 MiB) + what was in flight
    assert any("closed stream" in (e.get("reason") or "") for e in _events(log))


@pytest.mark.parametrize("server", [["--head-timeout", "1s"]], indirect=True)
def test_slowloris_connections_are_closed_at_the_head_deadline(
    server: tuple[ServerProcess, Path],
) -> None:
    proc, log = server
    outcome = attacks.slowloris(_target(proc), duration_s=4.0, connections=5, byte_interval_s=0.2)
    assert outcome.startswith("0 of 5"), outcome
    assert sum(e["event"] == "abuse" for e in _events(log)) == 5


@pytest.mark.parametrize("server", [["--max-connections-per-source", "10"]], indirect=True)
def test_idle_connections_beyond_the_source_cap_are_refused(
    server: tuple[ServerProcess, Path],
) -> None:
    proc, _ = server
    outcome = attacks.idle_flood(_target(proc), duration_s=2.0, connections=50)
    held = int(outcome.split(", ")[1].split(" still open")[0])
    assert held <= 10, outcome
    assert asyncio.run(probe("h2", proc.ports["h2"])) is not None


def test_an_initial_flood_keeps_nothing_and_h3_still_serves(
    server: tuple[ServerProcess, Path],
) -> None:
    proc, log = server
    attacks.initial_flood(_target(proc), duration_s=1.0, burst=2_000, rate_per_s=1_000)
    assert asyncio.run(probe("h3", proc.ports["h3"])) is not None
    opened = sum(e["event"] == "connection_open" for e in _events(log))
    assert opened == 1  # only the probe's: no forged Initial became a connection


@pytest.mark.parametrize("server", [["--quic-retry", "always"]], indirect=True)
def test_a_client_passes_address_validation_with_retry(
    server: tuple[ServerProcess, Path],
) -> None:
    proc, _ = server
    assert asyncio.run(probe("h3", proc.ports["h3"])) is not None


@pytest.mark.parametrize("server", [["--head-timeout", "1s"]], indirect=True)
def test_a_slow_data_frame_is_not_a_slow_head(server: tuple[ServerProcess, Path]) -> None:
    """The head deadline is for heads: a large DATA frame on a slow path may take longer."""
    import time

    import hpack

    proc, log = server
    sock = attacks._tls(_target(proc))
    body = b"x" * 20_000
    headers = [(":method", "POST"), (":path", "/sink"), (":scheme", "https"),
               (":authority", "x"), ("content-length", str(len(body)))]  # fmt: skip
    block = hpack.Encoder().encode(headers)
    data = attacks._frame(attacks.H2_DATA, attacks.H2_FLAG_END_STREAM, 1, body[:16_000])
    try:
        sock.sendall(attacks.H2_PREFACE + attacks._frame(attacks.H2_SETTINGS, 0, 0))
        sock.sendall(attacks._frame(attacks.H2_HEADERS, attacks.H2_FLAG_END_HEADERS, 1, block))
        sock.sendall(data[:5_000])
        time.sleep(2.0)  # twice the head deadline, mid-frame
        assert attacks._drain(sock) is not None  # still open
    finally:
        sock.close()
    assert not any(e["event"] == "abuse" for e in _events(log))


@pytest.mark.parametrize(
    ("kind", "advisory"),
    [
        ("settings", "CVE-2019-9515"),
        ("ping", "CVE-2019-9512"),
        ("empty-data", "CVE-2019-9518"),
        ("priority", "CVE-2019-9513"),
        ("window-update", "WINDOW_UPDATE"),
        ("reset", "CVE-2019-9514"),
    ],
)
def test_a_control_frame_flood_ends_in_goaway_and_the_server_still_serves(
    server: tuple[ServerProcess, Path], kind: str, advisory: str
) -> None:
    proc, log = server
    outcome = attacks.control_flood(_target(proc), duration_s=2.0, kind=kind, frames=1_000_000)
    abuse = [e for e in _events(log) if e["event"] == "abuse"]
    assert abuse and advisory in abuse[0]["reason"], (outcome, abuse)
    # the source is refused for a while after: one connection condemned, not one per retry
    assert len(abuse) == 1, abuse
    assert "1 GOAWAY" in outcome, outcome  # it reads the GOAWAY behind the replies
    assert asyncio.run(probe("h2", proc.ports["h2"])) is not None
    assert asyncio.run(probe("h3", proc.ports["h3"])) is not None


def _closed(conn: Any, stream_id: int) -> bool:
    """The h2 connection's stream is closed (or gone) on our side."""
    stream = conn.streams.get(stream_id)
    return stream is None or stream.closed


def test_a_client_that_credits_every_data_frame_is_not_a_flood(
    server: tuple[ServerProcess, Path],
) -> None:
    """30 MB down in 16 KiB frames, a stream and a connection WINDOW_UPDATE for each: 3,662
    updates, beyond the budget for updates that credit nothing."""
    import h2.events

    proc, log = server
    sock = attacks._tls(_target(proc))
    conn = attacks._h2_client()
    conn.send_headers(
        1, [(":method", "GET"), (":path", "/image"), (":scheme", "https"), (":authority", "x")],
        end_stream=True,
    )  # fmt: skip
    received = frames = 0
    ended = False
    try:
        sock.sendall(conn.data_to_send())
        while not ended:
            chunk = sock.recv(1 << 20)
            assert chunk, "the server closed the connection"
            for event in conn.receive_data(chunk):
                if isinstance(event, h2.events.DataReceived):
                    received += len(event.data)
                    frames += 1
                    conn.increment_flow_control_window(event.flow_controlled_length)
                    # the chunk may also hold the frame that ends the stream (an empty DATA
                    # with END_STREAM), already processed: no stream to credit then
                    if event.stream_ended is None and not _closed(conn, 1):
                        conn.increment_flow_control_window(event.flow_controlled_length, 1)
                ended = ended or isinstance(event, h2.events.StreamEnded)
            sock.sendall(conn.data_to_send())
    finally:
        sock.close()
    assert received == 30_000_000 and frames > H2Limits().max_window_updates
    assert not any(e["event"] == "abuse" for e in _events(log))


# --- issue 40: protocol-level abuse (harness.abuse.protocol) ---------------------------------


def test_a_huge_header_block_is_refused_before_it_is_decoded(
    server: tuple[ServerProcess, Path],
) -> None:
    proc, log = server
    outcome = protocol.header_block(_target(proc), 4.0, block_bytes=4 * 2**20, connections=2)
    assert "GOAWAY" in outcome, outcome
    abuse = [e for e in _events(log) if e["event"] == "abuse"]
    assert abuse and "header block" in abuse[0]["reason"]
    assert asyncio.run(probe("h2", proc.ports["h2"])) is not None


def test_a_data_frame_above_the_frame_size_is_refused_at_its_header(
    server: tuple[ServerProcess, Path],
) -> None:
    proc, log = server
    outcome = protocol.trickled_data(_target(proc), 3.0, connections=2, interval_s=1.0)
    assert "0 connections still open" in outcome, outcome
    errors = [e.get("reason") or "" for e in _events(log) if e["event"] == "error"]
    assert any("SETTINGS_MAX_FRAME_SIZE" in r for r in errors)


@pytest.mark.parametrize("where", ["control", "request"])
def test_an_h3_frame_longer_than_its_type_allows_closes_with_excessive_load(
    server: tuple[ServerProcess, Path], where: str
) -> None:
    proc, _log = server
    outcome = protocol.h3_big_frame(_target(proc), 4.0, frame_bytes=4_000_000, where=where)
    assert "code 0x107" in outcome, outcome
    assert asyncio.run(probe("h3", proc.ports["h3"])) is not None


def test_quic_abuse_and_legal_oddities(server: tuple[ServerProcess, Path]) -> None:
    proc, _log = server
    target = _target(proc)
    assert "code 0xa" in protocol.ack_ranges(target, 2.0, ranges=100, rate_per_s=100)
    assert protocol.empty_uni_stream(target, 1.0) == "connection kept"
    assert "stale: full handshake" in protocol.stale_ticket(target, 5.0)
    assert "still open" in protocol.flow_gap(target, 2.0, streams=3)
    assert asyncio.run(probe("h3", proc.ports["h3"])) is not None


@pytest.mark.parametrize("kind", ["unknown", "priority-update"])
def test_unknown_and_priority_update_floods_end_in_goaway(
    server: tuple[ServerProcess, Path], kind: str
) -> None:
    proc, log = server
    outcome = attacks.control_flood(_target(proc), duration_s=3.0, kind=kind, frames=20_000)
    assert "1 GOAWAY" in outcome or any(e["event"] == "abuse" for e in _events(log)), outcome
