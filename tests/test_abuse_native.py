"""The QUIC and HTTP/3 attacks of ``testbed abuse`` against the native HTTP/3 server
(``quic_stack = "ngtcp2"``: tb-h3 with servers/guard.py's limits in C), on loopback, and a
normal request after each (tests/test_abuse_attacks.py holds the same against aioquic's)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.abuse import attacks, protocol
from harness.bench.abuse import probe
from servers.process import ServerProcess
from tbcore.settings import Settings

pytestmark = pytest.mark.timeout(120)


def _events(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


@pytest.fixture
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[ServerProcess, Path]]:
    log = tmp_path / "events.jsonl"
    document = tmp_path / "settings.json"
    document.write_text(Settings(protocol="h3", quic_stack="ngtcp2").to_json())
    extra = getattr(request, "param", [])
    args = ["--settings", str(document), "--processing-audio", "0ms", "--log", str(log), *extra]
    with ServerProcess(args) as proc:
        yield proc, log


def _target(proc: ServerProcess) -> attacks.Target:
    return attacks.Target("127.0.0.1", proc.ports["h2"], proc.ports["h3"])


def _probe(proc: ServerProcess) -> object:
    return asyncio.run(probe("h3", proc.ports["h3"]))


def test_an_initial_flood_keeps_nothing_and_h3_still_serves(
    server: tuple[ServerProcess, Path],
) -> None:
    proc, log = server
    attacks.initial_flood(_target(proc), duration_s=1.0, burst=2_000, rate_per_s=1_000)
    assert _probe(proc) is not None
    events = _events(log)
    assert sum(e["event"] == "connection_open" for e in events) == 1  # the probe's only
    # no forged Initial reached the edge as a connection; the flood's first lines only
    assert not any(e["event"] == "connection_closed" and e.get("error_code") for e in events)
    dropped = [e for e in events if (e.get("reason") or "").startswith("dropped datagram")]
    assert len(dropped) <= 100


@pytest.mark.parametrize("server", [["--quic-retry", "always"]], indirect=True)
def test_a_client_passes_address_validation_with_retry(
    server: tuple[ServerProcess, Path],
) -> None:
    assert _probe(server[0]) is not None


@pytest.mark.parametrize("server", [["--max-connections-per-source", "2"]], indirect=True)
def test_connections_beyond_the_source_cap_are_refused(
    server: tuple[ServerProcess, Path],
) -> None:
    proc, log = server

    async def three() -> list[object]:
        from clients import h3native
        from clients.config import ClientConfig

        config = ClientConfig(port=proc.ports["h3"], settings=Settings(
            protocol="h3", quic_stack="ngtcp2", workload="tts", timeout_s=2.0))  # fmt: skip
        stack = h3native.NativeStack(config)
        results: list[object] = []
        try:
            for _ in range(3):
                try:
                    results.append(await stack.connect(None, early=False))
                except (ConnectionError, TimeoutError) as err:
                    results.append(err)
        finally:
            await stack.stop()
        return results

    results = asyncio.run(three())
    assert [isinstance(r, Exception) for r in results] == [False, False, True]
    assert any("connection cap reached (2 from one source)" in (e.get("reason") or "")
               for e in _events(log))  # fmt: skip


@pytest.mark.parametrize("where", ["request", "control"])
def test_an_h3_frame_longer_than_allowed_closes_the_connection(
    server: tuple[ServerProcess, Path], where: str
) -> None:
    proc, _log = server
    outcome = protocol.h3_big_frame(_target(proc), 4.0, frame_bytes=4_000_000, where=where)
    assert "code 0x107" in outcome, outcome  # H3_EXCESSIVE_LOAD before its payload
    assert _probe(proc) is not None


def test_quic_abuse_and_legal_oddities(server: tuple[ServerProcess, Path]) -> None:
    proc, _log = server
    target = _target(proc)
    outcome = protocol.ack_ranges(target, 2.0, ranges=100, rate_per_s=100)
    assert "code" in outcome, outcome  # an ACK of packets never sent ends the connection
    assert protocol.empty_uni_stream(target, 1.0) == "connection kept"
    # GnuTLS's tickets resume more than once; what a ticket may carry once is 0-RTT data
    # (test_0rtt_data_is_accepted_once_per_ticket)
    assert protocol.stale_ticket(target, 5.0) == "fresh: resumed; stale: resumed"
    assert "still open" in protocol.flow_gap(target, 2.0, streams=3)
    assert _probe(proc) is not None


def test_a_ticket_resumes_with_0rtt_again_under_a_new_hello(
    server: tuple[ServerProcess, Path],
) -> None:
    """GnuTLS's anti-replay is ClientHello recording (RFC 8446 section 8.2: a hello seen
    before has its early data refused), not single-use tickets (section 8.1, aioquic's): a
    ticket offered again under a new hello resumes with its 0-RTT data taken, and the
    request is answered (the agent's operations are idempotent by op id for this reason)."""
    proc, _log = server

    async def twice() -> list[tuple[bool | None, bool]]:
        from clients import h3native
        from clients.config import ClientConfig
        from clients.workload import exchange_specs
        from tbcore.records import RequestRecord

        settings = Settings(protocol="h3", quic_stack="ngtcp2", workload="tts")
        stack = h3native.NativeStack(ClientConfig(port=proc.ports["h3"], settings=settings))
        try:
            first = await stack.connect(None, early=False)
            ticket = await first.wait_ticket(2.0)
            await first.close()
            assert ticket is not None
            outcomes = []
            for index in range(2):
                conn = await stack.connect(ticket, early=True)
                record = RequestRecord(request_id=index, protocol="h3", connection="0rtt",
                                       workload="tts", warmup=False)  # fmt: skip
                collector = await conn.request(exchange_specs(settings)[0], record, 10.0)
                ok = collector.verdict()[0] and record.response_last_byte is not None
                outcomes.append((conn.protocol.early_data_accepted, ok))
                await conn.close()
        finally:
            await stack.stop()
        return outcomes

    assert asyncio.run(twice()) == [(True, True), (True, True)]
