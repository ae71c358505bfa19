"""Socket knobs applied to real sockets and read back from the kernel."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest

from proto.sockopts import (
    TCP_NOTSENT_LOWAT,
    TCP_WINDOW_CLAMP,
    apply_tcp_options,
    get_congestion_control,
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
