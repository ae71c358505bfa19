"""The control socket: JSON lines, errors as one line, and the synchronous client."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from netem.emulator.control import ControlError, EmulatorClient, start_server
from netem.linkspec import parse_link
from tbcore.errors import SpecError

pytestmark = pytest.mark.timeout(30)


class Recorder:
    """A handler that keeps what it was asked and answers like the emulator would."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(request)
        if request["cmd"] == "stats":
            return {"backend": "userspace", "time_s": 1.5, "up": {"packets_in": 3}}
        if request["cmd"] == "set_spec":
            from netem.linkspec import LinkSpec

            LinkSpec.from_dict(request["spec"])
            return {}
        if request["cmd"] == "boom":
            raise SpecError("cmd", "boom refused")
        return {"echo": request}


async def test_client_methods_round_trip(tmp_path: Path) -> None:
    handler = Recorder()
    path = tmp_path / "ctl.sock"
    server = await start_server(handler, path)
    client = EmulatorClient(path, timeout_s=5)
    try:
        assert await asyncio.to_thread(client.ping)
        stats = await asyncio.to_thread(client.stats)
        assert stats.backend == "userspace" and stats.up.packets_in == 3
        spec = parse_link("rtt=50ms,loss=1%")
        await asyncio.to_thread(client.set_spec, spec)
        await asyncio.to_thread(client.capture_start, tmp_path, 96)
        await asyncio.to_thread(client.packet_log_start, tmp_path)
        with pytest.raises(ControlError, match="boom refused"):
            await asyncio.to_thread(client.request, "boom")
    finally:
        server.close()
        await server.wait_closed()
    cmds = [r["cmd"] for r in handler.requests]
    assert cmds == ["ping", "stats", "set_spec", "capture_start", "packet_log_start", "boom"]
    assert handler.requests[2]["spec"] == spec.to_dict()
    assert handler.requests[3] == {"cmd": "capture_start", "dir": str(tmp_path), "snaplen": 96}
    assert oct(path.stat().st_mode & 0o777) == "0o600"


async def test_bad_lines_get_one_line_errors(tmp_path: Path) -> None:
    path = tmp_path / "ctl.sock"
    server = await start_server(Recorder(), path)
    try:
        reader, writer = await asyncio.open_unix_connection(str(path))
        for line, field in (
            (b"not json\n", "request"),
            (b'{"x": 1}\n', "request"),
            (b"[1]\n", "request"),
        ):
            writer.write(line)
            reply = json.loads(await reader.readline())
            assert reply["ok"] is False and reply["error"].startswith(f"{field}: ")
        writer.write(b'{"cmd": "set_spec", "spec": {"up": {"delay_s": -1}}}\n')
        reply = json.loads(await reader.readline())
        assert reply == {"ok": False, "error": "up.delay_s: must be finite and >= 0, got -1"}
        writer.close()
    finally:
        server.close()
        await server.wait_closed()


def test_client_reports_a_missing_emulator(tmp_path: Path) -> None:
    client = EmulatorClient(tmp_path / "nothing.sock", timeout_s=1)
    assert client.ping() is False
    with pytest.raises(ControlError, match="not ready"):
        client.wait_ready(timeout_s=0.1)
    with pytest.raises(ControlError, match=r"nothing\.sock"):
        client.stats()


def test_client_reports_a_silent_close(tmp_path: Path) -> None:
    path = tmp_path / "mute.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    import threading

    def accept_and_close() -> None:
        conn, _ = listener.accept()
        conn.recv(1000)
        conn.close()

    thread = threading.Thread(target=accept_and_close)
    thread.start()
    with pytest.raises(ControlError, match="closed without an answer"):
        EmulatorClient(path, timeout_s=2).request("stats")
    thread.join()
    listener.close()


async def test_bad_values_in_a_good_line_are_answered(tmp_path: Path) -> None:
    async def strict(request: dict[str, Any]) -> dict[str, Any]:
        return {"n": int(request["n"])}

    path = tmp_path / "ctl.sock"
    server = await start_server(strict, path)
    try:
        client = EmulatorClient(path, timeout_s=5)
        assert (await asyncio.to_thread(client.request, "x", n="7")) == {"n": 7}
        with pytest.raises(ControlError, match="request: ValueError"):
            await asyncio.to_thread(client.request, "x", n="seven")
        with pytest.raises(ControlError, match="request: KeyError"):
            await asyncio.to_thread(client.request, "x")
        # a fault of the handler itself is answered too, and the socket still serves
        with pytest.raises(ControlError, match="internal: OverflowError"):
            await asyncio.to_thread(client.request, "x", n=float("inf"))
        assert (await asyncio.to_thread(client.request, "x", n=3)) == {"n": 3}
    finally:
        server.close()
        await server.wait_closed()
