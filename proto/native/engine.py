"""The asyncio edge of ``tb-h3``: one engine process, its control socket, events to handlers.

:class:`Engine` starts the binary (proto.native.build) with one end of a Unix stream socket
pair as its control descriptor, reads its frames (proto.native.wire) and hands each event to
the handler registered for its connection (or to the default handler), and writes commands.
When the edge goes, the engine reads end-of-file and exits: no engine outlives its edge,
even one killed with SIGKILL. :func:`engine_argv` puts the run's settings on its command
line; :func:`refused` names what it cannot apply.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from proto.native import build, wire
from tbcore import ackpolicy, quicstack

MIN_SAMPLE_PERIOD_MS = 10
"""The engine reports ngtcp2's connection state (ngtcp2_conn_get_conn_stat) at most every
10 ms while a request is open: its window and RTT change per ACK, a few per round trip on
the paths here, and a report is a frame to the edge and a row."""
CONTROL_BUFFER_BYTES = 4 << 20
"""Socket buffers of the control pair: a batch of body bytes never waits on them."""
BODY_PIECE_BYTES = 256 << 10
"""A body goes to the engine in pieces of this size, so that it starts sending the first
while the edge still copies the rest."""
STOP_TIMEOUT_S = 5.0
"""After QUIT, how long the engine may take to close its connections."""
H3_REQUEST_CANCELLED = 0x010C
"""RFC 9114 section 8.1."""
H3_NO_ERROR = 0x0100
CLEAN_CLOSE_CODES = (0, H3_NO_ERROR)
"""A CONNECTION_CLOSE with these codes is no error (RFC 9000 section 20.1, RFC 9114 8.1)."""


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1e3))


def engine_argv(
    settings: Any,
    *,
    qlog_dir: Path | None,
    sample_hz: float | None,
    idle_timeout_s: float | None = None,
    handshake_timeout_s: float | None = None,
) -> list[str]:
    """The engine's options for this run's settings (both ends); the timeouts default to
    the run's ``timeout``."""
    argv = [
        f"--cc={quicstack.control_of(settings)}",
        f"--max-udp-payload={settings.max_datagram_size_bytes}",
        f"--idle-timeout-ms={_ms(idle_timeout_s or settings.timeout_s)}",
        f"--handshake-timeout-ms={_ms(handshake_timeout_s or settings.timeout_s)}",
    ]
    if settings.quic_pacing == "off":
        argv.append("--no-pacing")
    if not settings.quic_batching:
        argv.append("--no-gso")
    if settings.quic_max_data_bytes is not None:
        argv += [
            f"--max-data={settings.quic_max_data_bytes}",
            f"--max-stream-data={settings.quic_max_data_bytes}",
        ]
    argv += ack_flags(settings)
    if qlog_dir is not None:
        argv.append(f"--qlog-dir={qlog_dir}")
    if sample_hz:
        period_ms = max(MIN_SAMPLE_PERIOD_MS, round(1e3 / sample_hz))
        argv.append(f"--sample-ms={period_ms}")
    else:
        argv.append("--sample-ms=0")
    return argv


def ack_flags(settings: Any) -> list[str]:
    """The receiver's ACK rule (tbcore.quicstack.NGTCP2_ACK_POLICIES): ngtcp2's ACK
    threshold and the max_ack_delay it advertises and holds ACKs by."""
    policy = ackpolicy.parse_ack_policy("ack_policy", settings.ack_policy)
    if policy.name == "immediate":
        return ["--ack-thresh=1", "--max-ack-delay-us=1000"]
    if policy.name == "every":
        delay_us = max(1, round(policy.max_delay_s * 1e6))
        return [f"--ack-thresh={policy.every_packets}", f"--max-ack-delay-us={delay_us}"]
    if settings.quic_ack_delay_s is not None:
        return [f"--max-ack-delay-us={max(1, round(settings.quic_ack_delay_s * 1e6))}"]
    return []


def in_force(settings: Any) -> dict[str, Any]:
    """What an engine's connections run with, by knob key (tbcore.records.AppliedRecord),
    as :func:`engine_argv` put it on its command line."""
    return {
        "quic_stack": "ngtcp2",
        "cc": quicstack.control_of(settings),
        "quic_cc": quicstack.control_of(settings),
        "max_datagram_size": settings.max_datagram_size_bytes,
        "quic_max_data": settings.quic_max_data_bytes,
        "quic_pacing": "ngtcp2" if settings.quic_pacing != "off" else "off",
        "quic_ack_delay": settings.quic_ack_delay_s,
        "ack_policy": ackpolicy.parse_ack_policy("ack_policy", settings.ack_policy).text,
        "quic_batching": settings.quic_batching,
    }


class _Control(asyncio.Protocol):
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.decoder = wire.Decoder()

    def data_received(self, data: bytes) -> None:
        for event in self.decoder.feed(data):
            self.engine.dispatch(event)

    def connection_lost(self, exc: Exception | None) -> None:
        self.engine.lost(exc)


class Engine:
    """One ``tb-h3`` process (``--server`` or ``--client``) and its control socket."""

    def __init__(self, argv: list[str], *, env: dict[str, str] | None = None) -> None:
        self.argv = argv
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.transport: asyncio.Transport | None = None
        self.handlers: dict[int, Callable[[wire.Event], None]] = {}
        self.default: Callable[[wire.Event], None] = lambda _e: None
        self.ready: asyncio.Future[wire.Ready] | None = None
        self.gone: asyncio.Future[None] | None = None
        self.errors: list[str] = []
        self.stderr_path: Path | None = None

    async def start(self, stderr_path: Path | None = None) -> wire.Ready:
        """Start the engine; returns its READY (the server's bound port)."""
        loop = asyncio.get_running_loop()
        binary = build.ensure_built()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        for sock in (ours, theirs):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CONTROL_BUFFER_BYTES)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, CONTROL_BUFFER_BYTES)
        self.stderr_path = stderr_path
        # without a file of its own, the engine's complaints go where its edge's go (the
        # run's client.stderr / server.stderr)
        stderr: Any = stderr_path.open("wb") if stderr_path is not None else None

        try:
            self.proc = subprocess.Popen(
                [str(binary), *self.argv, f"--control-fd={theirs.fileno()}"],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=self.env,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
            if stderr_path is not None:
                stderr.close()
        self.ready = loop.create_future()
        self.gone = loop.create_future()
        transport, _ = await loop.connect_accepted_socket(lambda: _Control(self), ours)
        self.transport = transport  # type: ignore[assignment]
        try:
            return await asyncio.wait_for(asyncio.shield(self.ready), STOP_TIMEOUT_S * 2)
        except BaseException:
            await self.stop()
            raise

    def dispatch(self, event: wire.Event) -> None:
        if isinstance(event, wire.Ready):
            if self.ready is not None and not self.ready.done():
                self.ready.set_result(event)
            return
        if isinstance(event, wire.Error):
            self.errors.append(event.reason)
        handler = self.handlers.get(event.conn, self.default)
        handler(event)

    def lost(self, exc: Exception | None) -> None:
        reason = self.stderr_tail() or f"tb-h3 exited ({exc or 'end of file'})"
        if self.ready is not None and not self.ready.done():
            self.ready.set_exception(ConnectionError(reason))
        if self.gone is not None and not self.gone.done():
            self.gone.set_result(None)
        gone = wire.Closed(conn=-1, t=0.0, error_code=0, by_peer=False, reason=reason)
        for handler in list(self.handlers.values()):
            handler(gone)
        self.default(gone)

    @property
    def alive(self) -> bool:
        return self.gone is not None and not self.gone.done()

    def send(self, kind: wire.Cmd, conn: int, stream: int = -1, a: int = 0, b: int = 0,
             payload: bytes = b"") -> None:  # fmt: skip
        if self.transport is None or self.transport.is_closing():
            raise ConnectionError("tb-h3 is not running")
        self.transport.write(wire.command(kind, conn, stream, a, b, payload))

    def send_body(self, conn: int, stream: int, body: bytes, fin: bool) -> None:
        """``body`` in :data:`BODY_PIECE_BYTES` pieces, FIN with the last if ``fin``."""
        view = memoryview(body)
        if not view:
            self.send(wire.Cmd.BODY, conn, stream, a=int(fin))
            return
        for start in range(0, len(view), BODY_PIECE_BYTES):
            piece = view[start : start + BODY_PIECE_BYTES]
            last = start + BODY_PIECE_BYTES >= len(view)
            self.send(wire.Cmd.BODY, conn, stream, a=int(fin and last), payload=bytes(piece))

    def stderr_tail(self, limit: int = 300) -> str:
        if self.stderr_path is None or not self.stderr_path.is_file():
            return ""
        text = self.stderr_path.read_text(errors="replace").strip().splitlines()
        return (text[-1] if text else "")[:limit]

    async def stop(self) -> int | None:
        """QUIT, wait for the engine to close its connections, then reap it (killed if it
        does not go). Its exit status."""
        with contextlib.suppress(ConnectionError):
            self.send(wire.Cmd.QUIT, -1)
        proc = self.proc
        if proc is None:
            return None
        loop = asyncio.get_running_loop()
        try:
            code = await asyncio.wait_for(loop.run_in_executor(None, proc.wait), STOP_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            code = await loop.run_in_executor(None, proc.wait)
        if self.transport is not None:
            self.transport.close()
        return code
