"""Per-experiment TCP and UDP socket knobs, by their Linux names (values from linux headers).

Applied to a listening socket before ``listen()`` (accepted sockets inherit the receive
buffer, window clamp and congestion control: window scaling is fixed at SYN time) and again
to each accepted or connecting socket.
"""

from __future__ import annotations

import socket
from typing import Any

from tbcore.errors import SpecError

# <linux/tcp.h>
TCP_WINDOW_CLAMP = 10
"""Bound the advertised receive window (bytes)."""
TCP_INFO = 11
TCP_QUICKACK = 12
"""Send ACKs at once; the kernel clears it again, so it is re-armed after each read."""
TCP_CONGESTION = 13
TCP_NOTSENT_LOWAT = 25
# <asm-generic/socket.h>
SO_MAX_PACING_RATE = 47
"""Cap on the socket's pacing rate, in bytes per second (u32 here: at most ~34 Gbit/s)."""
SO_MAX_PACING_RATE_MAX = 2**32 - 1
BITS_PER_BYTE = 8


IPPROTO_MPTCP = 262
"""linux/in.h (Python 3.11's socket module does not name it)."""


def tcp_socket(family: int, mptcp: bool = False) -> socket.socket:
    """A stream socket: TCP, or Multipath TCP (RFC 8684) with ``mptcp`` (the ``mptcp`` arm
    of ``multipath``: the kernel's path manager, set by the topology, opens the subflows).
    A kernel without MPTCP gives a one-line SpecError."""
    if not mptcp:
        return socket.socket(family, socket.SOCK_STREAM)
    try:
        return socket.socket(family, socket.SOCK_STREAM, IPPROTO_MPTCP)
    except OSError as err:
        raise SpecError("multipath", f"IPPROTO_MPTCP refused: {err.strerror}") from None


def _set(sock: Any, level: int, option: int, value: int | bytes, field: str) -> None:
    try:
        sock.setsockopt(level, option, value)
    except OSError as err:
        raise SpecError(field, f"setsockopt refused {value!r}: {err.strerror}") from None


def apply_tcp_options(sock: Any, options: Any, *, listening: bool = False) -> None:
    """Set every TCP knob of ``options`` (a :class:`tbcore.settings.Settings`) that is not
    None on ``sock`` (a socket or uvloop's pseudo-socket); TCP_NODELAY always."""
    if options.sndbuf_bytes is not None:
        _set(sock, socket.SOL_SOCKET, socket.SO_SNDBUF, options.sndbuf_bytes, "sndbuf")
    if options.rcvbuf_bytes is not None:
        _set(sock, socket.SOL_SOCKET, socket.SO_RCVBUF, options.rcvbuf_bytes, "rcvbuf")
    if options.cc is not None:
        _set(sock, socket.IPPROTO_TCP, TCP_CONGESTION, options.cc.encode(), "cc")
    if options.window_clamp_bytes is not None:
        _set(sock, socket.IPPROTO_TCP, TCP_WINDOW_CLAMP, options.window_clamp_bytes, "window-clamp")
    if listening:
        return
    _set(sock, socket.IPPROTO_TCP, socket.TCP_NODELAY, 1, "nodelay")
    if options.max_pacing_rate_bps is not None:
        rate_bytes = min(int(options.max_pacing_rate_bps / BITS_PER_BYTE), SO_MAX_PACING_RATE_MAX)
        _set(sock, socket.SOL_SOCKET, SO_MAX_PACING_RATE, rate_bytes, "max-pacing-rate")
    if options.notsent_lowat_bytes is not None:
        _set(
            sock,
            socket.IPPROTO_TCP,
            TCP_NOTSENT_LOWAT,
            options.notsent_lowat_bytes,
            "notsent-lowat",
        )
    if options.quickack:
        rearm_quickack(sock)


def hold_window_clamp(sock: Any, clamp_bytes: int | None) -> None:
    """Set TCP_WINDOW_CLAMP again after a read: Linux overwrites a socket's clamp with the
    window its receive buffer allows (tcp_win_from_space) when it re-measures the segments'
    truesize ratio on arriving data, and autotuning then grows it. Measured on this host's
    Linux 6.18, 100 ms and 100 Mbit/s, 5 MB down with a 64 KB clamp (window bound 5.2 Mbit/s):
    set before connect, 4.21 s (9.5 Mbit/s, clamp read back 479,370); set after connect,
    1.29 s (as unclamped, 8,014,865); set again after every read, 7.91 s (5.1 Mbit/s, 65,536).
    A no-op in the kernel when the clamp is unchanged."""
    if clamp_bytes is None or sock is None:
        return
    try:
        sock.setsockopt(socket.IPPROTO_TCP, TCP_WINDOW_CLAMP, clamp_bytes)
    except OSError:
        pass  # the socket is closing; the first set (apply_tcp_options) reported refusals


def rearm_quickack(sock: Any) -> None:
    """TCP_QUICKACK is not sticky: call after every read to keep ACKs immediate."""
    try:
        sock.setsockopt(socket.IPPROTO_TCP, TCP_QUICKACK, 1)
    except OSError:
        pass


def get_congestion_control(sock: Any) -> str:
    raw = sock.getsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, 16)
    return raw.split(b"\0", 1)[0].decode()


def set_udp_buffers(sock: socket.socket, size_bytes: int) -> None:
    """Raise SO_RCVBUF/SO_SNDBUF of a UDP socket (SO_*BUFFORCE first: root may pass rmem_max)."""
    for force, plain in ((33, socket.SO_RCVBUF), (32, socket.SO_SNDBUF)):
        # SO_RCVBUFFORCE = 33, SO_SNDBUFFORCE = 32 (asm-generic/socket.h)
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, size_bytes)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, plain, size_bytes)


SO_PROTOCOL = 38
"""<asm-generic/socket.h>: the socket's protocol (IPPROTO_TCP, or IPPROTO_MPTCP)."""


def read_tcp_options(sock: Any) -> dict[str, Any]:
    """The TCP knobs in force on ``sock``, read back with getsockopt, by knob key (what an
    applied record shows: the kernel's value, doubled buffers and all); None where the socket
    does not answer (an MPTCP socket refuses some TCP options with EOPNOTSUPP). TCP_QUICKACK
    is not here: it reads 1 on any fresh connection (it reports !pingpong), so only the
    re-arming policy says whether it is kept on."""

    def read(level: int, option: int, size: int = 0) -> Any:
        try:
            return sock.getsockopt(level, option, size) if size else sock.getsockopt(level, option)
        except OSError:
            return None

    pacing = read(socket.SOL_SOCKET, SO_MAX_PACING_RATE, 8)
    is_mptcp = read(socket.SOL_SOCKET, SO_PROTOCOL) == IPPROTO_MPTCP
    try:
        cc: str | None = get_congestion_control(sock)
    except OSError:
        cc = None
    return {
        "cc": cc,
        "window_clamp": read(socket.IPPROTO_TCP, TCP_WINDOW_CLAMP),
        "sndbuf": read(socket.SOL_SOCKET, socket.SO_SNDBUF),
        "rcvbuf": read(socket.SOL_SOCKET, socket.SO_RCVBUF),
        "max_pacing_rate": None if pacing is None else int.from_bytes(pacing, "little"),
        "notsent_lowat": read(socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT),
        "multipath": "mptcp" if is_mptcp else "tcp",
    }
