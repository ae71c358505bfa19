"""Socket knobs applied to real sockets and read back from the kernel."""

from __future__ import annotations

import asyncio
import socket
import threading
from types import SimpleNamespace

import pytest

from proto.sockopts import (
    TCP_NOTSENT_LOWAT,
    TCP_WINDOW_CLAMP,
    apply_tcp_options,
    get_congestion_control,
    hold_window_clamp,
    set_udp_buffers,
)
from tbcore.errors import SpecError
from tbcore.settings import Settings


def available_ccs() -> set[str]:
    with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as handle:
        return set(handle.read().split())


@pytest.mark.parametrize("cc", ["reno", "cubic", "bbr"])
def test_congestion_control_is_set(cc: str) -> None:
    if cc not in available_ccs():
        pytest.skip(f"{cc} not available in this kernel")
    with socket.socket() as sock:
        apply_tcp_options(sock, Settings(cc=cc))
        assert get_congestion_control(sock) == cc


def test_clamp_lowat_buffers_read_back() -> None:
    with socket.socket() as sock:
        apply_tcp_options(
            sock,
            Settings(window_clamp_bytes=64_000, notsent_lowat_bytes=16_384, rcvbuf_bytes=100_000),
        )
        assert sock.getsockopt(socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT) == 16_384
        # the kernel doubles SO_RCVBUF for bookkeeping (socket(7))
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == 200_000
        assert sock.getsockopt(socket.IPPROTO_TCP, TCP_WINDOW_CLAMP) >= 32_000


def test_unknown_congestion_control_is_one_line_error() -> None:
    with socket.socket() as sock, pytest.raises(SpecError, match=r"^cc: setsockopt refused"):
        # Settings refuses the name itself; the kernel's refusal is what is tested here
        unchecked = SimpleNamespace(**{**Settings().to_dict(), "cc": "nosuchcc"})
        apply_tcp_options(sock, unchecked)


def test_udp_buffers_raised_past_default() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        default = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        set_udp_buffers(sock, 8 * 1024 * 1024)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) > default


CLAMP_BYTES = 65_536


def _clamps_while_reading(hold: bool, size_bytes: int = 4_000_000) -> list[int]:
    """A loopback download at Ethernet's MSS with a 64 KB clamp set before connect: the
    clamp the kernel has after each read (held again after each read or not)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def serve() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.sendall(b"x" * size_bytes)

        sender = threading.Thread(target=serve)
        sender.start()
        with socket.socket() as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1448)
            apply_tcp_options(sock, Settings(window_clamp_bytes=CLAMP_BYTES))
            sock.connect(listener.getsockname())
            got, clamps = 0, []
            while got < size_bytes:
                data = sock.recv(1 << 16)
                assert data
                got += len(data)
                if hold:
                    hold_window_clamp(sock, CLAMP_BYTES)
                clamps.append(sock.getsockopt(socket.IPPROTO_TCP, TCP_WINDOW_CLAMP))
        sender.join(10)
    return clamps


def test_a_held_window_clamp_stays_through_a_transfer() -> None:
    """Linux replaces a clamp with what the receive buffer allows once data arrives (6.18
    does, the window then grows with autotuning); held after every read, it stays."""
    loose = _clamps_while_reading(hold=False)
    held = _clamps_while_reading(hold=True)
    print(f"\nunheld clamp after reads: {min(loose)}..{max(loose)}; held: {set(held)}")
    assert set(held) == {CLAMP_BYTES}


def test_the_h2_client_holds_its_clamp_at_connect_and_every_read() -> None:
    from clients.h2client import H2ClientProtocol

    class Transport:
        def __init__(self, sock: object) -> None:
            self.sock = sock

        def set_write_buffer_limits(self, high: int) -> None:
            pass

        def get_extra_info(self, name: str) -> object:
            return self.sock if name == "socket" else None

        def write(self, data: bytes) -> None:
            pass

        def is_closing(self) -> bool:
            return False

    class Sock:
        def __init__(self) -> None:
            self.sets: list[tuple[int, int, object]] = []

        def setsockopt(self, level: int, option: int, value: object) -> None:
            self.sets.append((level, option, value))

    async def run(clamp: int | None) -> list[tuple[int, int, object]]:
        sock = Sock()
        protocol = H2ClientProtocol(65_535, False, clamp)
        protocol.connection_made(Transport(sock))  # type: ignore[arg-type]
        protocol.data_received(b"")
        return sock.sets

    clamp_set = (socket.IPPROTO_TCP, TCP_WINDOW_CLAMP, CLAMP_BYTES)
    assert asyncio.run(run(CLAMP_BYTES)).count(clamp_set) == 2
    assert asyncio.run(run(None)) == []
