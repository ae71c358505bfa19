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
from tbcore.settings import Settings

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


def _both_sides(ports: dict[str, int], **fields: object) -> RelayConfig:
    """A loopback relay to a server's HTTP/2 and HTTP/3 ports."""
    return RelayConfig(
        bind="127.0.0.1",
        port=0,
        upstream_host="127.0.0.1",
        upstream_port=ports["h2"],
        upstream_h3_port=ports["h3"],
        **fields,  # type: ignore[arg-type]
    )


async def _through_h3_relay(
    ports: dict[str, int], log: Path, requests: int, stack: str = "aioquic"
) -> list:
    config = _both_sides(ports, log_path=log, warmup=1, warmup_bytes=200_000, protocols=("h3",))
    config.settings = config.settings.replace(protocol="h3", quic_stack=stack)
    relay = Relay(config)
    server, (_, port) = await relay.start_h3(0)
    try:
        records = []
        for workload in ("asr", "tts"):
            client = ClientConfig.of(
                protocol="h3",
                host="127.0.0.1",
                port=port,
                workload=workload,
                requests=requests,
                quic_stack=stack,
            )
            records += await run_requests(client)
        return records
    finally:
        server.close()
        relay.close()
        relay.log.close()


def test_h3_requests_through_the_relay_share_one_warm_quic_upstream(tmp_path: Path) -> None:
    with ServerProcess(["--log", str(tmp_path / "server.jsonl")]) as server:
        records = asyncio.run(_through_h3_relay(server.ports, tmp_path / "relay.jsonl", 2))
    assert [r.error for r in records] == [None] * 4
    assert all(r.protocol == "h3" for r in records)
    assert all(r.response_last_byte > r.request_first_byte for r in records)
    relay = read_events(tmp_path / "relay.jsonl")
    names = [e["event"] for e in relay]
    assert names.index("upstream_connected") < names.index("warmup_done") < names.index("ready")
    assert {e.get("protocol") for e in relay if e["event"] == "upstream_connected"} == {"h3"}
    assert names.count("front_connection_open") == 4  # a new QUIC connection per request
    assert names.count("front_response_last_byte") == 4
    server_events = read_events(tmp_path / "server.jsonl")
    assert len([e for e in server_events if e["event"] == "connection_open"]) == 1
    warm = next(e for e in relay if e["event"] == "warmup_done")
    assert warm["cwnd_segments"] > 10 and warm["rtt_s"] > 0


def test_the_native_stack_carries_the_relays_long_haul(tmp_path: Path) -> None:
    """quic_stack = ngtcp2: the client, the long haul (servers.relay_native) and the server
    on the native stack; the relay's near side stays aioquic's."""
    document = tmp_path / "settings.json"
    document.write_text(Settings(protocol="h3", quic_stack="ngtcp2").to_json())
    args = ["--log", str(tmp_path / "server.jsonl"), "--settings", str(document)]
    with ServerProcess(args) as server:
        records = asyncio.run(
            _through_h3_relay(server.ports, tmp_path / "relay.jsonl", 2, stack="ngtcp2")
        )
    assert [r.error for r in records] == [None] * 4 and all(r.sha256_ok for r in records)
    relay = read_events(tmp_path / "relay.jsonl")
    names = [e["event"] for e in relay]
    assert names.index("upstream_connected") < names.index("warmup_done") < names.index("ready")
    server_events = read_events(tmp_path / "server.jsonl")
    assert len([e for e in server_events if e["event"] == "connection_open"]) == 1
    warm = next(e for e in relay if e["event"] == "warmup_done")
    assert warm["cwnd_segments"] > 10 and warm["rtt_s"] > 0


def test_relay_refuses_an_unknown_protocol() -> None:
    with pytest.raises(SpecError) as err:
        RelayConfig(bind="x", port=1, upstream_host="x", upstream_port=1, protocols=("h4",))
    assert err.value.field == "protocols"


async def _after_idle(ports: dict[str, int], idle_s: float) -> list:
    config = _both_sides(ports, warmup=0, protocols=("h2", "h3"))
    relay = Relay(config)
    h2_server, (_, port) = await relay.start()
    h3_server, _ = await relay.start_h3(port)
    try:
        await asyncio.sleep(idle_s)
        records = []
        for protocol in ("h2", "h3"):
            client = ClientConfig.of(
                protocol=protocol, host="127.0.0.1", port=port, workload="tts", requests=1
            )
            records += await run_requests(client)
        return records
    finally:
        h2_server.close()
        h3_server.close()
        relay.close()
        relay.log.close()


def test_the_upstreams_outlive_the_servers_idle_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server closes connections idle for 2 s; PINGs every 0.5 s keep both warm
    upstreams open across 4 s without a request (else the requests would get 502)."""
    monkeypatch.setattr("servers.relay.KEEPALIVE_S", 0.5)
    monkeypatch.setattr("servers.relay_h3.KEEPALIVE_S", 0.5)
    with ServerProcess(["--idle-timeout", "2s"]) as server:
        records = asyncio.run(_after_idle(server.ports, 4.0))
    assert [(r.protocol, r.error) for r in records] == [("h2", None), ("h3", None)]
