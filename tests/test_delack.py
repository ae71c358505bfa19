"""proto.delack: TCP's delayed-ACK ceiling through a sock_ops program, for the testbed's
connections only, gone when closed."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from netem import names
from netem.link import Link
from netem.linkspec import parse_link
from netem.nsexec import in_netns
from proto import delack
from tbcore.errors import SpecError

pytestmark = pytest.mark.timeout(120)

LINK_NAME = "dk38"
"""This module's link (tests/conftest.py link_name)."""


def test_the_program_checks_the_event_and_the_address_before_it_sets_the_ceiling() -> None:
    code = delack.program(10_000)
    assert len(code) == 18 * 8
    ops = [code[i] for i in range(0, len(code), 8)]
    assert ops[-1] == 0x95 and ops[15] == 0x85  # exit; the helper call before it
    imms = [struct.unpack_from("<i", code, i + 4)[0] for i in range(0, len(code), 8)]
    assert imms[8] == 10_000 and imms[11] == delack.TCP_BPF_DELACK_MAX
    assert imms[7] == delack.TESTBED_PREFIX[0]  # 198.18/15 only


@pytest.mark.parametrize(("ceiling_s", "hz"), [(0.001, 1000), (0.5, 1000), (0.005, 250)])
def test_a_ceiling_linux_does_not_take_is_refused_in_one_line(ceiling_s: float, hz: int) -> None:
    with pytest.raises(SpecError) as err:
        delack.DelackMax(ceiling_s, hz=hz)
    assert err.value.field == "ack_policy" and "\n" not in str(err.value)


def test_linux_rounds_a_ceiling_up_to_whole_jiffies() -> None:
    assert delack.effective_ceiling_s(0.010, 250) == pytest.approx(0.012)
    assert delack.effective_ceiling_s(0.010, 1000) == pytest.approx(0.010)
    assert delack.kernel_hz() in (100, 250, 300, 1000)


def test_no_ceiling_attaches_nothing() -> None:
    with delack.delack_max(None) as nothing:
        assert nothing is None


REPLY_AFTER_S = 0.030
"""The server answers each request this long after it came: within Linux's delayed-ACK
timer, so the connection is interactive ("pingpong") and the request's ACK waits for the
answer to ride on, unless a ceiling sends it first."""


def _ack_waits(link: Link, requests: int) -> list[float]:
    """Per 100-byte request of the client, how long until its ACK left nothing
    unacknowledged (TCP_INFO's tcpi_unacked, polled), the server answering each one after
    :data:`REPLY_AFTER_S`."""
    with in_netns(link.server_ns):
        server = socket.create_server((names.SERVER_ADDR, 5301))
    threading.Thread(target=_answer, args=(server, requests), daemon=True).start()
    with in_netns(link.client_ns):
        client = socket.create_connection((names.SERVER_ADDR, 5301))
    waits = []
    try:
        for _ in range(requests):
            client.send(b"q" * 100)
            sent = time.monotonic()
            while _unacked(client) and time.monotonic() - sent < 1.0:
                time.sleep(0.0002)
            waits.append(time.monotonic() - sent)
            client.recv(100)
    finally:
        client.close()
        server.close()
    return waits[5:]  # once the exchange is interactive


def _answer(server: socket.socket, requests: int) -> None:
    conn, _ = server.accept()
    with conn:
        for _ in range(requests):
            if not conn.recv(100):
                return
            time.sleep(REPLY_AFTER_S)
            conn.send(b"a" * 100)


def _unacked(sock: socket.socket) -> int:
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    return struct.unpack_from("<I", info, 24)[0]  # tcpi_unacked (linux/tcp.h)


@pytest.fixture
def plain_link(link_name: str) -> Iterator[Link]:
    with Link.up(link_name, parse_link("rtt=0ms"), backend="userspace") as link:
        yield link


@pytest.mark.root
def test_the_ceiling_shortens_a_delayed_ack_and_goes_with_the_block(plain_link: Link) -> None:
    """An interactive request's ACK waits to ride on the answer (30 ms); under a 10 ms
    ceiling the delayed ACK leaves after the ceiling as Linux rounds it (12 ms at HZ 250:
    14.5 ms median measured, the timer firing on a jiffy); after the block, it waits for the
    answer again (30.5 ms)."""
    with delack.DelackMax(0.010) as ceiling:
        capped = sorted(_ack_waits(plain_link, 25))
    free = sorted(_ack_waits(plain_link, 25))
    # the delayed-ACK timer fires on a jiffy: up to one late, and one more for the host
    assert capped[len(capped) // 2] < ceiling.effective_s + 2 / delack.kernel_hz(), capped
    assert free[len(free) // 2] > 0.025, free
