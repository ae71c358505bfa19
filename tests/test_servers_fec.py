"""The FEC server and client on loopback: workloads checked end to end, and garbage,
forgeries and replays dropped and counted without harming the session."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.api import run_requests
from clients.config import ClientConfig
from proto.fec import message as fecmessage
from proto.fec import wire
from proto.fec.wire import ALPN_FEC
from servers.events import read_events
from servers.process import ServerProcess
from tbcore.errors import SpecError

RATE = "1gbit"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    args = ["--no-h2", "--no-h3", "--fec-port", "0", "--fec-rate", RATE]
    with ServerProcess([*args, "--log", str(tmp_path / "server.jsonl")]) as proc:
        proc.log = tmp_path / "server.jsonl"  # type: ignore[attr-defined]
        yield proc


def config(port: int, **kw: object) -> ClientConfig:
    base: dict[str, object] = {
        "protocol": "fec",
        "port": port,
        "fec_rate_bps": 1e9,
        "timeout_s": 20.0,
    }
    base.update(kw)
    return ClientConfig.of(**base)


@pytest.mark.parametrize("workload", ["asr", "tts", "stream"])
async def test_every_workload_verified(server: ServerProcess, workload: str) -> None:
    records = await run_requests(
        config(
            server.ports["fec"],
            workload=workload,
            requests=2,
            warmup_requests=1,
            connection="reused",
            chunks=5,
        )
    )
    assert len(records) == 3
    for record in records:
        assert record.ok, record.error
        fec = record.fec
        assert fec.request["source_symbols"] >= 1 and fec.response is not None
    assert all(r.conn_index == 0 for r in records)
    new = await run_requests(config(server.ports["fec"], workload="tts", connection="new"))
    assert new[0].ok and new[0].handshake_done is not None


def test_client_refuses_to_start_without_a_rate() -> None:
    with pytest.raises(SpecError, match="fec-rate"):
        ClientConfig.of(protocol="fec", port=1)


async def _open_session(port: int) -> tuple[asyncio.StreamWriter, dict]:
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    tls.check_hostname = False
    tls.verify_mode = ssl.CERT_NONE
    tls.set_alpn_protocols([ALPN_FEC])
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
    hello = json.loads(await reader.readline())
    return writer, hello


async def test_garbage_forgeries_and_replays_are_dropped_and_counted(
    server: ServerProcess,
) -> None:
    port = server.ports["fec"]
    writer, hello = await _open_session(port)
    session = bytes.fromhex(hello["session"])
    key = wire.derive_keys(bytes.fromhex(hello["secret"]))[0]  # client to server
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    target = ("127.0.0.1", hello["udp_port"])
    message = fecmessage.pack_request("GET", "/tts", b"")
    header = wire.DataHeader(1, len(message), 0, 0, 1, 0.0)
    # a valid symbol 0 of a one-symbol transfer would decode; use a transfer that needs 2
    big = wire.DataHeader(5, 2 * wire.SYMBOL_BYTES, 0, 0, 2, 0.0)
    symbol = bytes(4) + bytes(wire.SYMBOL_BYTES)
    valid = wire.pack_data(key, session, 10, big, symbol)
    sends = [
        os.urandom(1200),  # random bytes: unknown session (or too short)
        b"\x01",
        wire.pack_data(key, os.urandom(8), 11, header, symbol),  # forged session id
        wire.pack_data(os.urandom(32), session, 12, header, symbol),  # wrong key
        valid,
        valid,  # replay
        wire.pack_data(key, session, 13, big, symbol),  # same symbol, new number
        valid + bytes(200),  # oversized
        wire.pack_data(
            key, session, 14, wire.DataHeader(5, 2 * wire.SYMBOL_BYTES, 9, 0, 2, 0), symbol
        ),
    ]
    for datagram in sends:
        udp.sendto(datagram, target)
    udp.close()
    await asyncio.sleep(0.3)
    # the service goes on: a real client on another session is served
    records = await run_requests(config(port, workload="tts"))
    assert records[0].ok, records[0].error
    writer.close()
    await asyncio.sleep(0.3)
    events = read_events(server.log)  # type: ignore[attr-defined]
    ours = next(e["conn"] for e in events if e["event"] == "connection_open")
    closed = [e for e in events if e["event"] == "connection_closed" and e["conn"] == ours]
    dropped = closed[0]["fec"]["dropped"]
    assert dropped == {"bad_tag": 1, "replay": 1, "duplicate": 1, "oversized": 1, "out_of_range": 1}
    garbage = [e for e in events if e["event"] == "error" and "dropped datagram" in e["reason"]]
    assert len(garbage) == 3  # random, one byte, forged session id


# --- across the emulated path -------------------------------------------------------------

LINK = "fct1"


@pytest.mark.root
@pytest.mark.slow
def test_tts_across_a_lossy_emulated_link_needs_no_repair_round(tmp_path: Path) -> None:
    """200 ms, 14 % loss, 333 Mbit/s: every response decodes from its first round, with
    repair near the binomial requirement at the loss the session measured."""
    import sys

    from netem import clean, nsexec
    from netem.link import Link
    from tbcore import fecmath

    clean.clean(LINK)
    records_path = tmp_path / "records.jsonl"
    enter = (
        "import os, sys; from netem import nsexec; nsexec.enter(sys.argv.pop(1)); "
        "os.execv(sys.executable, [sys.executable, '-m', 'harness.cli', *sys.argv[1:]])"
    )
    try:
        with Link.up(LINK, "rtt=200ms,loss=14%,rate=333mbit", backend="userspace") as link:
            args = ["--no-h2", "--no-h3", "--fec-port", "0", "--fec-rate", "333mbit"]
            command = [sys.executable, "-c", enter, link.server_ns]
            with ServerProcess(args, bind=link.server_addr, command=command) as proc:
                argv = [
                    sys.executable,
                    "-m",
                    "harness.cli",
                    "client",
                    "--protocol",
                    "fec",
                    "--host",
                    link.server_addr,
                    "--port",
                    str(proc.ports["fec"]),
                    "--workload",
                    "tts",
                    "--requests",
                    "6",
                    "--warmup-requests",
                    "2",
                    "--connection",
                    "reused",
                    "--fec-rate",
                    "333mbit",
                    "--records",
                    str(records_path),
                    "--quiet",
                    "--timeout",
                    "20s",
                ]
                done = nsexec.run(link.client_ns, argv, capture_output=True, text=True, timeout=120)
                assert done.returncode == 0, done.stderr[-500:]
    finally:
        assert not clean.clean(LINK).remaining
    records = [json.loads(line) for line in records_path.read_text().splitlines()]
    for record in records:
        assert record["error"] is None and record["sha256_ok"]
        response = record["fec"]["response"]
        k, r = response["source_symbols"], response["repair_symbols"]
        assert response["extra_rounds"] == 0 or record["warmup"]
        estimate = response["loss_estimate"]
        if not record["warmup"]:
            assert 0.10 < estimate < 0.18
            assert abs(r - fecmath.repair_symbols(k, estimate, 0.999)) <= 3
            # one way down plus 30 ms processing and the serialisation, at least
            assert record["response_last_byte"] - record["request_first_byte"] > 0.23
