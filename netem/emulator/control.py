"""The emulator's control socket: JSON lines over a Unix stream socket, and its client.

A request is one JSON object on one line, ``{"cmd": NAME, ...arguments}``; the answer is
one line, ``{"ok": true, "result": {...}}`` or ``{"ok": false, "error": "field: reason"}``.
The commands are listed in :mod:`netem.emulator.__main__`. :class:`EmulatorClient` wraps
them in methods; it is synchronous (each call is one short exchange) so that a test, the
link backend or a benchmark can use it from any context.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from netem.events import LinkEvent, ScheduledEvent
from netem.linkspec import LinkSpec
from netem.stats import LinkStats
from tbcore.errors import SpecError

MAX_LINE_BYTES = 16 * 2**20
"""Longest request or answer line (a stats answer with two histograms is about 20 KB)."""

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def decode_request(line: bytes) -> dict[str, Any]:
    try:
        request = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SpecError("request", f"not JSON: {err}") from None
    if not isinstance(request, dict) or not isinstance(request.get("cmd"), str):
        raise SpecError("request", 'must be a JSON object with a string "cmd"')
    return request


async def answer(handler: Handler, line: bytes) -> dict[str, Any]:
    """Run one request line through ``handler``; bad input becomes an error answer."""
    try:
        return {"ok": True, "result": await handler(decode_request(line))}
    except SpecError as err:
        return {"ok": False, "error": str(err)}
    except OSError as err:
        return {"ok": False, "error": f"os: {err}"}
    except (ValueError, TypeError, KeyError) as err:  # a well-formed line with bad values
        return {"ok": False, "error": f"request: {type(err).__name__}: {err}"}
    except Exception as err:  # the emulator's own fault: answered, and the link keeps running
        return {"ok": False, "error": f"internal: {type(err).__name__}: {err}"}


async def serve_stream(
    handler: Handler, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Answer request lines on one connection until it closes."""
    try:
        while True:
            try:
                line = await reader.readline()
            except (ValueError, asyncio.LimitOverrunError):
                writer.write(encode({"ok": False, "error": "request: line too long"}))
                break
            if not line:
                break
            writer.write(encode(await answer(handler, line)))
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def start_server(handler: Handler, path: Path) -> asyncio.AbstractServer:
    """Listen on Unix socket ``path`` (a stale file there is replaced), mode 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    server = await asyncio.start_unix_server(
        lambda r, w: serve_stream(handler, r, w), path=str(path), limit=MAX_LINE_BYTES
    )
    os.chmod(path, 0o600)
    return server


class ControlError(RuntimeError):
    """The emulator answered a request with an error, or did not answer."""


class EmulatorClient:
    """Talks to a running emulator over its control socket."""

    def __init__(self, path: str | Path, timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self.timeout_s = timeout_s

    def request(self, cmd: str, **arguments: Any) -> dict[str, Any]:
        """One exchange; raises :class:`ControlError` when the emulator answers an error."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(self.timeout_s)
            try:
                sock.connect(str(self.path))
                sock.sendall(encode({"cmd": cmd, **arguments}))
                with sock.makefile("rb") as f:
                    line = f.readline(MAX_LINE_BYTES)
            except OSError as err:
                raise ControlError(f"emulator at {self.path}: {err}") from None
        if not line:
            raise ControlError(f"emulator at {self.path}: closed without an answer to {cmd}")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise ControlError(f"emulator: {reply.get('error')}")
        return reply["result"]

    def ping(self) -> bool:
        try:
            self.request("ping")
        except ControlError:
            return False
        return True

    def wait_ready(self, timeout_s: float = 10.0) -> None:
        """Block until the emulator answers ``ping``; :class:`ControlError` after the timeout."""
        deadline = time.monotonic() + timeout_s
        while not self.ping():
            if time.monotonic() > deadline:
                raise ControlError(f"emulator at {self.path}: not ready after {timeout_s} s")
            time.sleep(0.02)

    def stats(self) -> LinkStats:
        """Cumulative counters of both directions and the emulator's CPU (subtract two)."""
        return LinkStats.from_dict(self.request("stats"))

    def set_spec(self, spec: LinkSpec) -> dict[str, Any]:
        """Change the link between runs; loss and jitter generators restart from the seeds,
        traces from their offsets. Returns :meth:`trace`'s answer for the new spec."""
        return self.request("set_spec", spec=spec.to_dict()).get("trace") or {}

    def trace(self) -> dict[str, Any]:
        """Per direction (``up``, ``down``), its traces and their clock, or None without a
        trace: ``origin_s`` (CLOCK_MONOTONIC when they were at ``offset_s``), ``offset_s``,
        ``rate_trace``/``delay_trace`` (path, sha256, kind), ``delay_interp``."""
        return self.request("trace")["trace"]

    def capture_start(self, directory: str | Path, snaplen: int = 128) -> dict[str, Any]:
        """Start recording ``client.pcap`` and ``server.pcap`` into ``directory``."""
        return self.request("capture_start", dir=str(directory), snaplen=snaplen)

    def capture_stop(self) -> dict[str, Any]:
        """Write the pcap files; returns their paths, record counts and the clock offset."""
        return self.request("capture_stop")

    def packet_log_start(self, directory: str | Path) -> dict[str, Any]:
        """Start logging every packet; ``packets-up.csv``/``packets-down.csv`` at stop."""
        return self.request("packet_log_start", dir=str(directory))

    def packet_log_stop(self) -> dict[str, Any]:
        return self.request("packet_log_stop")

    def event(self, event: LinkEvent, base_s: float | None = None) -> ScheduledEvent:
        """Schedule an outage or a rate change ``event.at_s`` after ``base_s`` (default now)."""
        arguments: dict[str, Any] = {"event": event.to_dict()}
        if base_s is not None:
            arguments["base_s"] = base_s
        return ScheduledEvent.from_dict(self.request("event", **arguments))

    def end_events(self) -> int:
        """End every event still running now (cancel those not begun); returns how many."""
        return int(self.request("end_events")["ended"])

    def events(self) -> list[ScheduledEvent]:
        """Every event given so far, with what each outage dropped."""
        return [ScheduledEvent.from_dict(e) for e in self.request("events")["events"]]

    def shutdown(self) -> None:
        """Ask the emulator to exit cleanly (files flushed, pid and socket removed)."""
        self.request("shutdown")
