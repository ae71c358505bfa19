"""Debian's gtlsserver (ngtcp2 0.12.1's example server) as the interoperability peer of the
testbed's native HTTP/3 client (tests/test_servers_ngtcp2.py): it serves the fixed workloads
as files; its qlog becomes server events. Until issue 39 it was the ngtcp2 arm itself;
``quic_stack = "ngtcp2"`` now runs the testbed's own endpoints (servers/h3native.py).

The edge (:func:`run`): a document root whose files are the fixed workloads
(tbcore.kinds.ngtcp2_routes(): ``tts`` is the audio, ``result`` the 5 MB image result...,
the POST routes' short answer), the testbed's certificate (proto.tls), gtlsserver on the
address and UDP port the harness gives, ``listening h3 udp ADDR:PORT`` once its socket is
bound (read from this namespace's /proc/net/udp), then serving until SIGTERM or SIGINT.
Every connection's qlog file is stamped on CLOCK_MONOTONIC when gtlsserver creates it (the
connection's start: proto.filewatch); on the way out gtlsserver is stopped with SIGINT (it
then closes its qlog files), each file gets its reference time written in
(proto.ngtcp2edge.anchor_qlog) and its events go to the server log.

The core (:func:`connection_events`, sans-I/O): from the server's qlog of one connection,
``connection_open`` (its start), ``request_first_byte`` / ``request_last_byte`` (the
request stream's offset 0 received; all of it received), ``response_first_byte`` /
``response_last_byte`` (the first packet carrying the response stream; the first that
reached its final size), ``connection_closed`` (the last event). No processing events:
gtlsserver answers from a file (a level that asks for processing is refused,
tbcore.quicstack). Times: the middle of the logged millisecond.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

from proto import ngtcp2, ngtcp2edge, qlogseq
from proto.filewatch import CreationWatch
from proto.tls import ensure_certificate
from servers.config import ServerConfig
from servers.events import EventLog
from tbcore import kinds, quicstack, workloads
from tbcore.errors import SpecError

LISTEN_TIMEOUT_S = 10.0
"""How long gtlsserver may take to bind its socket."""
LISTEN_POLL_S = 0.005
STOP_TIMEOUT_S = 5.0
"""After SIGINT, how long gtlsserver may take to close its connections and files."""
WAKE_S = 0.5
"""The serving loop's longest sleep (it wakes at once for a signal or a new qlog file)."""
UDP_LISTEN_STATE = "07"
"""/proc/net/udp ``st`` of a bound UDP socket (TCP_CLOSE: UDP sockets are never
'listening')."""


def docroot_files() -> dict[str, Path | bytes]:
    """The document root's files: a workload's cache file, or the short answer's bytes."""
    out: dict[str, Path | bytes] = {}
    for route in kinds.ngtcp2_routes().values():
        if route.download is None:
            out[route.file_name] = quicstack.NGTCP2_ACK_BODY
        else:
            workloads.workload_bytes(route.download)  # checked against a fresh generation
            out[route.file_name] = workloads.workload_path(route.download)
    return out


def make_docroot(directory: Path) -> Path:
    """Fill ``directory`` with :func:`docroot_files` (links to the workloads' files)."""
    for name, content in docroot_files().items():
        target = directory / name
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.symlink_to(content)
    return directory


def server_argv(config: ServerConfig, port: int, docroot: Path, qlog_dir: Path) -> list[str]:
    """gtlsserver for this config (proto.ngtcp2.common_flags for the settings)."""
    paths = ensure_certificate(config.cert_dir)
    argv = [ngtcp2.SERVER_BINARY, *ngtcp2.common_flags(config.settings, str(qlog_dir))]
    argv += [
        f"--htdocs={docroot}",
        f"--timeout={ngtcp2.duration_flag(config.idle_timeout_s)}",
        f"--handshake-timeout={ngtcp2.duration_flag(config.handshake_timeout_s)}",
    ]
    if config.quic_retry == "always":
        argv.append("--validate-addr")  # a Retry before every connection
    return [*argv, config.bind, str(port), str(paths.key), str(paths.cert)]


def check_config(config: ServerConfig) -> None:
    """What gtlsserver cannot be asked (one line each)."""
    if config.h2_port is not None or config.fec_port is not None:
        raise SpecError("no-h2", "ngtcp2 serves HTTP/3 only: give --no-h2 and no --fec-port")
    if config.h3_port is None:
        raise SpecError("h3-port", "ngtcp2 serves HTTP/3: it needs an h3 port")


def bound_udp_ports(table: str) -> set[int]:
    """The local ports of the bound sockets of a /proc/net/udp text."""
    ports = set()
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[3] == UDP_LISTEN_STATE:
            ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


# --- server events from one connection's qlog ------------------------------------------------


def connection_events(events: list[dict[str, Any]], start_s: float) -> list[tuple[float, str]]:
    """(time, event name) of one connection, from the server's qlog (module docstring)."""
    received = ngtcp2.received_flow(events, ngtcp2.REQUEST_STREAM_ID)
    sent = ngtcp2.sent_flow(events, ngtcp2.REQUEST_STREAM_ID)
    out = [(start_s, "connection_open")]
    for name, ms in (
        ("request_first_byte", received.first_ms),
        ("request_last_byte", received.complete_ms),
        ("response_first_byte", sent.first_ms),
        ("response_last_byte", sent.complete_ms),
    ):
        if ms is not None:
            out.append((qlogseq.event_time_s(start_s, ms), name))
    if events:
        out.append((qlogseq.event_time_s(start_s, float(events[-1]["time"])), "connection_closed"))
    return out


def log_connections(log: EventLog, qlog_dir: Path, created: dict[str, float]) -> None:
    """Anchor every connection's qlog and write its events, connections in order of start."""
    files = sorted((t, n) for n, t in created.items() if n.endswith(qlogseq.SEQ_SUFFIX))
    for conn, (start_s, name) in enumerate(files):
        path = qlog_dir / name
        if not path.is_file():
            continue
        seq = ngtcp2edge.anchor_qlog(path, start_s)
        for t, event in connection_events(seq.events, start_s):
            stream = None if event.startswith("connection") else ngtcp2.REQUEST_STREAM_ID
            extra = {"alpn": "h3"} if event == "connection_open" else {}
            log.emit(event, proto="h3", conn=conn, stream=stream, now=t, **extra)


# --- the edge ------------------------------------------------------------------------------


def _free_udp_port(bind: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((bind, 0))
        return int(sock.getsockname()[1])


def _wait_bound(proc: subprocess.Popen, port: int) -> None:
    deadline = time.monotonic() + LISTEN_TIMEOUT_S
    while port not in bound_udp_ports(Path("/proc/self/net/udp").read_text()):
        if proc.poll() is not None:
            raise RuntimeError(f"gtlsserver exited ({proc.returncode}) before binding {port}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"gtlsserver did not bind UDP {port} in {LISTEN_TIMEOUT_S:g} s")
        time.sleep(LISTEN_POLL_S)


class StopSignals:
    """SIGTERM and SIGINT, noted while installed and waking a select() on :meth:`fileno`
    (signal.set_wakeup_fd), so that the serving loop never sleeps through a stop."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._read_fd, self._write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._old_fd = signal.set_wakeup_fd(self._write_fd)
        self._old = {sig: signal.signal(sig, self._note) for sig in (signal.SIGTERM, signal.SIGINT)}

    def _note(self, signum: int, _frame: Any) -> None:
        self.received.append(signum)

    def fileno(self) -> int:
        return self._read_fd

    def clear(self) -> None:
        """Empty the wake-up pipe (one byte per signal)."""
        with contextlib.suppress(BlockingIOError):
            while os.read(self._read_fd, 64):
                pass

    def close(self) -> None:
        signal.set_wakeup_fd(self._old_fd)
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        for fd in (self._read_fd, self._write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


def serve_until_stopped(proc: subprocess.Popen, watch: CreationWatch, stop: StopSignals) -> int:
    """Stamp qlog files as they appear until a stop signal (0) or gtlsserver's own exit
    (1: it died under the run)."""
    while not stop.received:
        if proc.poll() is not None:
            return 1
        ready, _, _ = select.select([watch, stop], [], [], WAKE_S)
        if watch in ready:
            watch.drain()
        if stop in ready:
            stop.clear()
    return 0


def run(config: ServerConfig, out: TextIO = sys.stdout) -> int:
    """``testbed serve`` on ngtcp2 (module docstring); its exit status."""
    check_config(config)
    port = config.h3_port or _free_udp_port(config.bind)
    log = EventLog(config.log_path)
    settings = config.settings
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tb-ngtcp2-server-")))
        docroot = tmp / "htdocs"
        docroot.mkdir()
        make_docroot(docroot)
        qlog_dir = config.qlog_dir or (tmp / "qlog")
        qlog_dir.mkdir(parents=True, exist_ok=True)
        if not set(ngtcp2edge.UDP_BUFFER_SYSCTLS) & set(settings.sysctls):
            stack.enter_context(ngtcp2edge.namespace_udp_buffers(config.udp_buffer_bytes))
        stop = StopSignals()
        stack.callback(stop.close)
        watch = stack.enter_context(CreationWatch(qlog_dir))
        stderr = stack.enter_context((tmp / "gtlsserver.stderr").open("wb"))
        proc = subprocess.Popen(
            server_argv(config, port, docroot, qlog_dir),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=ngtcp2edge.keylog_env(config.keylog_path),
        )
        try:
            _wait_bound(proc, port)
            log.emit("listening", proto="h3", addr=f"{config.bind}:{port}")
            print(f"listening h3 udp {config.bind}:{port}", file=out, flush=True)
            status = serve_until_stopped(proc, watch, stop)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            watch.drain()
            log_connections(log, qlog_dir, watch.created)
            log.close()
        if status:
            tail = ngtcp2edge.stderr_tail(tmp / "gtlsserver.stderr")
            print(f"gtlsserver exited {proc.returncode}: {tail}", file=sys.stderr)
    return status
