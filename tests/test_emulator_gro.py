"""GRO on delivery through a real kernel's TUN (root): UDP datagrams that one wake-up of the
C path releases together go up as one super-packet (VIRTIO_NET_HDR_GSO_UDP_L4). A TUN takes
those from Linux 6.2 on; on an older kernel (CI's QEMU guest runs Debian's 6.1, which is why
.ci/vm/stage.py runs this file there too) the first one is refused, the path stops merging
UDP, and every datagram still arrives. TCP runs are tested with the lossy upload of
tests/test_emulator_cengine.py."""

from __future__ import annotations

import platform
import socket
import struct
import time

import pytest

from netem.emulator.control import EmulatorClient
from netem.emulator.options import EmulatorOptions
from netem.link import Link
from netem.nsexec import in_netns

pytestmark = [pytest.mark.root, pytest.mark.timeout(300)]

PORT = 5291
SO_RCVBUFFORCE = 33
"""asm-generic/socket.h (Python's socket module does not name it)."""
GRO_TCP, GRO_UDP = 1, 2
"""netem/emulator/csrc/cpath.h: the kinds of run the path merges (``gro_kinds``)."""


LINK_NAME = "cm30"
"""The link these tests bring up (the ``link_name`` fixture, tests/conftest.py)."""


SOL_UDP = 17
UDP_GRO = 104
"""linux/udp.h: a socket that takes GRO super-packets (one buffer, its segment size in a
control message) instead of the datagrams one by one."""
DATAGRAM_BYTES = 1200
DATAGRAMS = 400
BURST = 20
BURST_GAP_S = 0.002


def udp_burst(link: Link, gro_socket: bool) -> list[tuple[bytes, int | None]]:
    """``DATAGRAMS`` numbered datagrams sent at once from the client; what the server's
    socket read: each buffer with its UDP_GRO segment size (None: a datagram alone)."""
    with in_netns(link.server_ns):
        receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with in_netns(link.client_ns):
        sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with receiver, sender:
        receiver.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)  # past rmem_max
        receiver.bind((link.server_addr, PORT))
        receiver.settimeout(1.0)
        if gro_socket:
            receiver.setsockopt(SOL_UDP, UDP_GRO, 1)
        for i in range(DATAGRAMS):
            sender.sendto(i.to_bytes(4, "big") * (DATAGRAM_BYTES // 4), (link.server_addr, PORT))
            if i % BURST == BURST - 1:  # the sender's TUN queue (500) is never the limit,
                time.sleep(BURST_GAP_S)  # not even in a slow VM guest
        out = []
        while True:
            try:
                data, ancillary, _, _ = receiver.recvmsg(1 << 16, socket.CMSG_SPACE(4))
            except TimeoutError:
                return out
            sizes = [struct.unpack("=i", c[2][:4])[0] for c in ancillary if c[1] == UDP_GRO]
            out.append((data, sizes[0] if sizes else None))


@pytest.mark.parametrize("gro_socket", [False, True], ids=["plain-socket", "udp-gro-socket"])
def test_udp_datagrams_released_together_go_up_as_one(link_name: str, gro_socket: bool) -> None:
    """The datagrams one wake-up releases reach the stack as one UDP super-packet: a plain
    socket still reads them one by one, intact and in order; a socket that asked for UDP_GRO
    reads runs of them with their segment size, as behind a NIC."""
    # 400 x 1,228 bytes at 100 Mbit/s: 98 µs apart, three or four per 300 µs wake-up
    spec = "rtt=20ms,rate=100mbit,queue=1000p"
    with Link.up(
        link_name, spec, backend="userspace", emulator=EmulatorOptions(path="c", gro=True)
    ) as link:
        got = udp_burst(link, gro_socket)
        counters = EmulatorClient(link._state.control_path).request("path")["counters"]
    print(f"\nkernel {platform.release()}: {counters}")
    datagrams = [
        buffer[i : i + DATAGRAM_BYTES]
        for buffer, size in got
        for i in range(0, len(buffer), size or len(buffer))
    ]
    assert [d[:4] for d in datagrams] == [i.to_bytes(4, "big") for i in range(DATAGRAMS)]
    assert all(d == d[:4] * (DATAGRAM_BYTES // 4) for d in datagrams)
    if counters["gro_refused"]:  # a TUN without UDP GSO (Linux before 6.2): TCP alone, then
        assert counters["gro_refused"] == 1 and counters["gro_kinds"] == GRO_TCP
        assert {size for _, size in got} == {None}
        return
    assert counters["gro_kinds"] == GRO_TCP | GRO_UDP
    assert counters["gro_packets"] > 0 and counters["gro_segments"] > counters["gro_packets"]
    if gro_socket:
        assert {size for _, size in got} - {None} == {DATAGRAM_BYTES}
    else:
        assert len(got) == DATAGRAMS and {size for _, size in got} == {None}
