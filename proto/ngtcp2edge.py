"""The I/O both ngtcp2 edges share: a connection's qlog file anchored on the clock, the
namespace's UDP buffers, the binaries' environment. The parsing is proto.qlogseq's and
proto.ngtcp2's; the processes are servers/ngtcp2.py's and clients/ngtcp2.py's.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from proto import qlogseq
from proto.sockopts import set_udp_buffers

UDP_BUFFER_SYSCTLS = ("net.core.rmem_default", "net.core.wmem_default")
"""What a socket that sets no SO_RCVBUF/SO_SNDBUF gets (per network namespace on these
kernels): gtlsclient and gtlsserver set none, aioquic's sockets set 8 MiB (proto.sockopts),
and the 208 KB default overflows at this testbed's rates (docs/machine.md)."""


def anchor_qlog(path: Path, start_s: float) -> qlogseq.QlogSeq:
    """Write the connection's start (CLOCK_MONOTONIC ``start_s``, when its file was created)
    into the qlog file as its ``reference_time`` (proto.qlogseq) and return it parsed."""
    return qlogseq.parse_qlog_seq(anchor_qlog_file(path, start_s), path.name)


def anchor_qlog_file(path: Path, start_s: float) -> str:
    """:func:`anchor_qlog` without parsing the events (the native stack's edges: the file
    is read later, by the run's collection); the anchored text."""
    offset = time.time() - time.monotonic()
    text = path.read_text(encoding="utf-8", errors="replace")
    anchored = qlogseq.with_reference_time(text, qlogseq.reference_time_ms(start_s, offset))
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(anchored, encoding="utf-8")
    os.replace(tmp, path)
    return anchored


def keylog_env(keylog: Path | None) -> dict[str, str]:
    """The binaries' environment: GnuTLS writes the TLS secrets to ``SSLKEYLOGFILE`` (NSS
    key log format, appended), as the aioquic stacks write theirs."""
    env = dict(os.environ)
    env.pop("SSLKEYLOGFILE", None)
    if keylog is not None:
        env["SSLKEYLOGFILE"] = str(keylog)
    return env


def udp_buffer_bytes_of_aioquic(size_bytes: int) -> int:
    """The SO_RCVBUF an aioquic socket of this testbed ends up with when it asks for
    ``size_bytes`` (the kernel doubles it, caps it at rmem_max unless forced as root)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        set_udp_buffers(sock, size_bytes)
        return int(sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))


def _own_namespace() -> bool:
    """This process runs in a network namespace of its own (not the host's: a ``testbed
    serve`` or ``client`` on the host must not change the host's defaults)."""
    try:
        return os.stat("/proc/self/ns/net").st_ino != os.stat("/proc/1/ns/net").st_ino
    except OSError:
        return False


@contextlib.contextmanager
def namespace_udp_buffers(size_bytes: int) -> Iterator[bool]:
    """Inside a namespace of its own and as root: the namespace's default UDP buffers as
    aioquic's sockets have them, put back on exit. Yields whether they were set."""
    paths = [Path("/proc/sys", *name.split(".")) for name in UDP_BUFFER_SYSCTLS]
    before: list[tuple[Path, str]] = []
    if _own_namespace():
        target = str(udp_buffer_bytes_of_aioquic(size_bytes))
        for path in paths:
            try:
                old = path.read_text().strip()
                path.write_text(target)
            except OSError:
                break
            before.append((path, old))
    try:
        yield len(before) == len(paths)
    finally:
        for path, old in before:
            with contextlib.suppress(OSError):
                path.write_text(old)


def stderr_tail(path: Path, limit: int = 300) -> str:
    """The last non-empty line of a binary's stderr file, one line, cut."""
    try:
        lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return (lines[-1] if lines else "")[:limit]
