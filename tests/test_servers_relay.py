"""The relay on loopback: a request through it reaches the server over the one warm
upstream connection, the response comes back intact, and the events say so."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from clients.api import run_requests
from clients.config import ClientConfig
from servers.events import read_events
from servers.process import ServerProcess
from servers.relay import Relay, RelayConfig, serve_relay
from tbcore.errors import SpecError

pytestmark = pytest.mark.timeout(120)


async def _through_relay(server_port: int, log: Path, requests: int) -> list:
    config = RelayConfig(
        bind="127.0.0.1",
        port=0,
        upstream_host="127.0.0.1",
        upstream_port=server_port,
        log_path=log,
        warmup=1,
        warmup_bytes=200_000,
    )
    relay = Relay(config)
    server, (_, port) = await relay.start()
    try:
        client = ClientConfig.of(
            protocol="h2", host="127.0.0.1", port=port, workload="asr", requests=requests
        )
        records = await run_requests(client)
        tts = await run_requests(
            ClientConfig.of(protocol="h2", host="127.0.0.1", port=port, workload="tts", requests=1)
        )
        return records + tts
    finally:
        server.close()
        assert relay.upstream is not None and relay.upstream.transport is not None
        relay.upstream.transport.close()
        relay.log.close()


def test_requests_through_the_relay_share_one_warm_upstream(tmp_path: Path) -> None:
    with ServerProcess(["--no-h3", "--log", str(tmp_path / "server.jsonl")]) as server:
        records = asyncio.run(_through_relay(server.ports["h2"], tmp_path / "relay.jsonl", 3))
    assert [r.error for r in records] == [None] * 4
    assert all(
        r.response_last_byte and r.response_last_byte > r.request_first_byte for r in records
    )
    relay = read_events(tmp_path / "relay.jsonl")
    names = [e["event"] for e in relay]
    assert names.index("upstream_connected") < names.index("warmup_done") < names.index("ready")
    assert names.count("front_connection_open") == 4  # a new client connection each time
    assert names.count("upstream_connected") == 1  # but one upstream connection
    assert names.count("front_response_last_byte") == 4
    server_events = read_events(tmp_path / "server.jsonl")
    opened = [e for e in server_events if e["event"] == "connection_open"]
    assert len(opened) == 1
    # one clock: the relay had each request's head before the server did
    sent = [e["t"] for e in relay if e["event"] == "front_request_first_byte"]
    first = [e["t"] for e in server_events if e["event"] == "request_first_byte"]
    assert len(first) == 2 + 4  # warm-up /sink and /tts, then the four forwarded
    assert all(a <= b for a, b in zip(sent, first[2:], strict=True))


def test_relay_refuses_a_bad_port() -> None:
    with pytest.raises(SpecError) as err:
        RelayConfig(bind="127.0.0.1", port=70000, upstream_host="x", upstream_port=1)
    assert err.value.field == "port"


def test_relay_without_upstream_fails_to_start(tmp_path: Path) -> None:
    config = RelayConfig(
        bind="127.0.0.1", port=0, upstream_host="127.0.0.1", upstream_port=1, warmup=0
    )
    with pytest.raises(OSError):
        asyncio.run(serve_relay(config, stop=asyncio.Event()))
