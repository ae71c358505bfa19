"""The TUN edge: attach to a persistent device inside a namespace, read and write packets."""

from __future__ import annotations

import os
import select
import socket
from collections.abc import Iterator

import pytest

from netem import names, topology
from netem.emulator.tun import open_tun, read_batch, wait_running
from netem.nsexec import in_netns
from tbcore.errors import SpecError

pytestmark = [pytest.mark.root, pytest.mark.timeout(60)]

LINK = "em7"


@pytest.fixture
def tun_path() -> Iterator[dict[str, topology.Endpoint]]:
    topology.remove_path(LINK)
    try:
        topology.build_tun_path(LINK, mtu_bytes=1500)
        yield topology.endpoints(LINK, "userspace")
    finally:
        topology.remove_path(LINK)


def test_read_what_the_namespace_sends_and_inject_what_it_receives(tun_path) -> None:  # type: ignore[no-untyped-def]
    client = tun_path["client"]
    fd = open_tun(names.DEVICE_IN_NS, client.ns)
    try:
        # a packet sent before the kernel sees the carrier is dropped silently
        wait_running(names.DEVICE_IN_NS, client.ns)
        with in_netns(client.ns):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind((client.addr, 4000))
        sock.sendto(b"out", (names.SERVER_ADDR, 5000))
        assert select.select([fd], [], [], 2.0)[0] == [fd]
        packets = read_batch(fd)
        assert len(packets) == 1
        out = packets[0]
        assert out[0] >> 4 == 4 and out[9] == 17  # IPv4, UDP
        assert socket.inet_ntoa(out[12:16]) == client.addr
        assert out.endswith(b"out")
        # swap addresses and ports, and inject it: the client's socket receives it
        ihl = (out[0] & 0x0F) * 4
        reply = bytearray(out)
        reply[12:16], reply[16:20] = out[16:20], out[12:16]
        reply[ihl : ihl + 2], reply[ihl + 2 : ihl + 4] = out[ihl + 2 : ihl + 4], out[ihl : ihl + 2]
        reply[ihl + 6 : ihl + 8] = b"\0\0"  # no UDP checksum (IPv4 allows it)
        os.write(fd, bytes(reply))
        sock.settimeout(2.0)
        data, peer = sock.recvfrom(100)
        assert data == b"out" and peer == (names.SERVER_ADDR, 5000)
        assert read_batch(fd) == []
        sock.close()
    finally:
        os.close(fd)


def test_missing_device_or_namespace_is_one_line(tun_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SpecError, match="device: no device 'tb-nope' in tb-em7-client"):
        open_tun("tb-nope", tun_path["client"].ns)
    with pytest.raises(SpecError, match="namespace"):
        open_tun(names.DEVICE_IN_NS, "tb-em7-nowhere")
    with pytest.raises(SpecError, match="device"):
        open_tun("x" * 16, None)


def test_running_only_once_attached(tun_path) -> None:  # type: ignore[no-untyped-def]
    """A TUN device without a reader has no carrier and drops what is sent to it."""
    ns = tun_path["server"].ns
    with pytest.raises(SpecError, match=r"not running after 0\.2 s"):
        wait_running(names.DEVICE_IN_NS, ns, timeout_s=0.2)
    fd = open_tun(names.DEVICE_IN_NS, ns)
    try:
        assert 0 <= wait_running(names.DEVICE_IN_NS, ns) < 5.0
    finally:
        os.close(fd)
