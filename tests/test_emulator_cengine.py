"""The C packet path carrying real traffic through a link (root: namespaces, TUN devices).

One TCP upload of a few megabytes through ``rtt=20ms,rate=50mbit`` with 2 % loss upstream,
on each packet path: the C path with offloads (the sender hands the TUN TCP super-packets,
which the C path cuts before the loss draw; the receiver gets runs of segments released
together as one super-packet, GRO) and with them but without GRO, the C path without
offloads, and the Python reference.
Every byte must arrive intact; the loss model must have met every wire-sized segment (drops
counted, the capture holding no packet above the MTU); the packet log, the capture and the
counters must agree; the C thread's counters must show the super-packets it cut.
"""

from __future__ import annotations

import csv
import hashlib
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from netem.emulator.control import EmulatorClient
from netem.emulator.options import EmulatorOptions
from netem.emulator.pcap import read_pcap
from netem.link import Link
from netem.nsexec import in_netns

pytestmark = [pytest.mark.root, pytest.mark.timeout(180)]

UPLOAD_BYTES = 4 * 2**20
PORT = 5290
MTU_BYTES = 1500
SETTLE_S = 0.3
"""Past the path's 20 ms round trip and its queue, so nothing is in flight."""


LINK_NAME = "cm29"
"""The link these tests bring up (the ``link_name`` fixture, tests/conftest.py)."""


def upload(link: Link, data: bytes) -> bytes:
    """Send ``data`` from the client to the server over TCP; what the server received."""
    with in_netns(link.server_ns):
        listener = socket.create_server((link.server_addr, PORT))
    received = bytearray()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            while chunk := conn.recv(1 << 16):
                received.extend(chunk)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with in_netns(link.client_ns):
            sock = socket.create_connection((link.server_addr, PORT), timeout=60)
        with sock:
            sock.sendall(data)
    finally:
        thread.join(timeout=90)
        listener.close()
    return bytes(received)


@pytest.mark.parametrize(
    "options",
    [
        EmulatorOptions(path="c", offload=True, gro=True),
        EmulatorOptions(path="c", offload=True),
        EmulatorOptions(path="c", offload=False),
        EmulatorOptions(path="python"),
    ],
    ids=["c-offload-gro", "c-offload", "c", "python"],
)
def test_a_tcp_upload_through_a_lossy_link(
    link_name: str, options: EmulatorOptions, tmp_path: Path
):
    data = os.urandom(UPLOAD_BYTES)
    spec = "rtt=20ms,rate=50mbit,up.loss=2%"
    with Link.up(link_name, spec, backend="userspace", emulator=options) as link:
        control = EmulatorClient(link._state.control_path)
        with link.capture(tmp_path):
            before = link.stats()
            got = upload(link, data)
            time.sleep(SETTLE_S)  # the last ACKs and FINs across, so both windows agree
            delta = link.stats() - before
        answer = control.request("path")
        shown = link.show()["emulator_path"]  # what a result's environment record keeps
    assert shown == {k: v for k, v in answer.items() if k != "counters"}
    assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
    assert answer["path"] == options.path
    up, down = delta.up, delta.down
    assert up.dropped_loss > 0 and up.write_errors == 0 and down.write_errors == 0
    assert up.packets_in == up.packets_out + up.dropped_loss + up.dropped_queue
    # every packet the link saw was wire-sized: the super-packets were cut before the link
    for end in ("client", "server"):
        _, packets = read_pcap(tmp_path / f"{end}.pcap")
        assert packets and max(len(p) for _, p in packets) <= 128  # the headers snaplen
    with open(tmp_path / "packets-up.csv") as f:
        rows = list(csv.DictReader(f))
    assert max(int(r["size_bytes"]) for r in rows) <= MTU_BYTES
    departed = sum(r["event"] == "departed" for r in rows)
    lost = sum(r["event"] == "dropped_loss" for r in rows)
    assert (departed, lost) == (up.packets_out, up.dropped_loss)
    if options.path == "c":
        counters = answer["counters"]
        # a write carries one segment, or (GRO) a run of them as one super-packet
        delivered = counters["writes"] - counters["gro_packets"] + counters["gro_segments"]
        assert delivered >= up.packets_out + down.packets_out
        # with offloads the sender's stack hands over super-packets, which the path cuts
        assert (counters["super_packets"] > 0) == bool(options.offload)
        # and (GRO, asked for) hands the receiver runs of segments as one
        gro = bool(options.gro)
        assert (counters["gro_packets"] > 0) == gro and answer["gro"] == gro
