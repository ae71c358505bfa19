"""proto.native.engine: the run's settings on tb-h3's command line, and one engine's life
(its READY, a body in pieces, its stop)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from proto.native import engine, wire
from proto.tls import ensure_certificate
from tbcore.settings import Settings

NATIVE = {"protocol": "h3", "quic_stack": "ngtcp2", "workload": "tts"}


def test_the_settings_become_flags() -> None:
    argv = engine.engine_argv(Settings(**NATIVE, cc="bbr2", max_datagram_size_bytes=1452,
                                       timeout_s=30.0), qlog_dir=None, sample_hz=None)  # fmt: skip
    assert "--cc=bbr2" in argv and "--max-udp-payload=1452" in argv
    assert "--idle-timeout-ms=30000" in argv and "--sample-ms=0" in argv
    assert "--no-pacing" not in argv and "--no-gso" not in argv
    changed = engine.engine_argv(
        Settings(**NATIVE, quic_pacing="off", quic_batching=False, quic_max_data_bytes=1 << 20),
        qlog_dir=Path("/q"),
        sample_hz=100.0,
        idle_timeout_s=5.0,
    )
    assert {"--no-pacing", "--no-gso", "--qlog-dir=/q", "--sample-ms=10"} <= set(changed)
    assert "--max-data=1048576" in changed and "--idle-timeout-ms=5000" in changed


def test_an_engine_starts_takes_a_body_in_pieces_and_stops(tmp_path: Path) -> None:
    async def main() -> tuple[int, int | None, list[bytes]]:
        eng = engine.Engine(["--client", "--host=127.0.0.1", "--port=9"])
        ready = await eng.start(stderr_path=tmp_path / "err")
        sent: list[bytes] = []
        real_write = eng.transport.write
        eng.transport.write = lambda data: (sent.append(data), real_write(data))  # type: ignore
        eng.send_body(0, 0, b"x" * (engine.BODY_PIECE_BYTES * 2 + 1), fin=True)
        code = await eng.stop()
        return ready.port, code, sent

    port, code, sent = asyncio.run(main())
    assert port == 0 and code == 0
    bodies = [wire.HEADER.unpack_from(f) for f in sent if f[4] == wire.Cmd.BODY]
    assert [b[0] for b in bodies] == [engine.BODY_PIECE_BYTES, engine.BODY_PIECE_BYTES, 1]
    assert [b[5] for b in bodies] == [0, 0, 1]  # FIN with the last piece only


def test_an_engine_that_cannot_start_says_why(tmp_path: Path) -> None:
    paths = ensure_certificate(tmp_path)

    async def main() -> str:
        eng = engine.Engine(["--server", "--bind=203.0.113.300", f"--key={paths.key}",
                             f"--cert={paths.cert}"])  # fmt: skip
        try:
            await eng.start(stderr_path=tmp_path / "err")
        except ConnectionError as err:
            return str(err)
        return "started"

    assert "--bind 203.0.113.300: not an IP address" in asyncio.run(main())


def test_refused_0rtt_requests_are_made_again_in_1rtt(tmp_path: Path) -> None:
    """A ticket from a server that has since restarted (a new ticket key): the next server
    cannot resume it, refuses the 0-RTT data, and the client's request is made again in
    1-RTT under its tag, and answered."""
    paths = ensure_certificate(tmp_path)

    def server_of(port: int) -> engine.Engine:
        server = engine.Engine(["--server", "--bind=127.0.0.1", f"--port={port}",
                                f"--key={paths.key}", f"--cert={paths.cert}"])  # fmt: skip

        def answer(event: wire.Event) -> None:
            if isinstance(event, wire.Headers):
                head = wire.encode_headers([(":status", "200")])
                server.send(wire.Cmd.RESPOND, event.conn, event.stream, b=1, payload=head)
                server.send_body(event.conn, event.stream, b"ok", fin=True)

        server.default = answer
        return server

    async def main() -> list[wire.Event]:
        first = server_of(0)
        ready = await first.start(stderr_path=tmp_path / "server.err")
        client = engine.Engine(["--client", "--host=127.0.0.1", f"--port={ready.port}"])
        seen: asyncio.Queue[wire.Event] = asyncio.Queue()
        client.default = seen.put_nowait
        await client.start(stderr_path=tmp_path / "client.err")

        async def until(kind: type, conn: int) -> list[wire.Event]:
            got: list[wire.Event] = []
            while True:
                event = await asyncio.wait_for(seen.get(), 10.0)
                got.append(event)
                if isinstance(event, kind) and event.conn == conn:
                    return got

        client.send(wire.Cmd.CONNECT, 0)
        ticket = [e for e in await until(wire.Ticket, 0) if isinstance(e, wire.Ticket)][-1]
        client.send(wire.Cmd.CLOSE, 0)
        await until(wire.Closed, 0)
        await first.stop()
        second = server_of(ready.port)
        await second.start(stderr_path=tmp_path / "server2.err")
        client.send(wire.Cmd.CONNECT, 1, a=1, payload=ticket.blob)
        head = [(":method", "GET"), (":scheme", "https"), (":authority", "x"), (":path", "/")]
        client.send(wire.Cmd.REQUEST, 1, a=7, b=0, payload=wire.encode_headers(head))
        events = await until(wire.End, 1)
        await client.stop()
        await second.stop()
        return events

    events = asyncio.run(main())
    opened = [e for e in events if isinstance(e, wire.StreamOpened) and e.conn == 1]
    assert [e.tag for e in opened] == [7, 7]  # once as 0-RTT, once more in 1-RTT
    [shake] = [e for e in events if isinstance(e, wire.Handshake) and e.conn == 1]
    assert not shake.resumed and not shake.early_data_accepted
    answers = [e for e in events if isinstance(e, wire.Headers) and e.conn == 1]
    assert answers and answers[-1].headers[0] == (":status", "200")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("cc", "bbr2"),
        ("max_datagram_size_bytes", 1452),
        ("quic_max_data_bytes", 1 << 20),
        ("quic_pacing", "off"),
        ("quic_ack_delay_s", 0.005),
        ("ack_policy", "immediate"),
        ("quic_batching", False),
    ],
)
def test_each_knob_the_engine_takes_changes_its_flags_and_what_it_records(
    key: str, value: object
) -> None:
    base = Settings(**NATIVE)
    flipped = Settings(**NATIVE, **{key: value})
    assert engine.engine_argv(base, qlog_dir=None, sample_hz=None) != engine.engine_argv(
        flipped, qlog_dir=None, sample_hz=None
    )
    assert engine.in_force(base) != engine.in_force(flipped)
