"""A paced UDP sender and a stamping sink, for a capacity trace's replay
(:mod:`harness.bench.peers`, the ``trace`` case).

``python -m harness.bench.udpblast --to ADDR --port P --rate-bps R --duration-s D`` sends
full-size datagrams (1,472 bytes of payload: 1,500-byte IP packets) at ``R`` IP bits per
second for ``D`` seconds, topping up each millisecond to what the rate allows so far (a send
the socket refuses is dropped at the sender, as a saturating source would). It runs inside
the emulator's client side, as whatever user the emulator runs its commands as.

:class:`Sink` receives them in a thread, in a namespace of the testbed, and keeps the
kernel's receive stamp of each (``SO_TIMESTAMPNS``): the arrival times the fit is made on.

The standard library only (with :mod:`netem.probe` and :mod:`netem.nsexec`): the sender also
runs under a plain system Python as an unprivileged user (harness.bench.peerlink).
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import time

from netem.nsexec import in_netns
from netem.probe import SO_TIMESTAMPNS, kernel_time_ns
from tbcore.errors import SpecError

IP_PACKET_BYTES = 1500
"""A full-size IP packet: one Mahimahi delivery opportunity (1,504 bytes with the TUN's
4-byte header) and one opportunity of the testbed's capacity traces (netem.trace)."""
UDP_PAYLOAD_BYTES = IP_PACKET_BYTES - 28
"""1,472: IPv4 (20) + UDP (8) headers make it a 1,500-byte packet."""
TICK_S = 1e-3
"""The sender tops up its quota every millisecond (a trace's grain)."""
SINK_RCVBUF_BYTES = 8 * 2**20


def send(to: str, port: int, rate_bps: float, duration_s: float) -> int:
    """Send at ``rate_bps`` (IP bits) for ``duration_s``; returns the datagrams sent."""
    if not rate_bps > 0:
        raise SpecError("rate_bps", f"must be > 0, got {rate_bps!r}")
    if not duration_s > 0:
        raise SpecError("duration_s", f"must be > 0, got {duration_s!r}")
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect((to, port))
    sock.setblocking(False)
    payload = bytes(UDP_PAYLOAD_BYTES)
    per_s = rate_bps / (IP_PACKET_BYTES * 8)
    start = time.monotonic()
    sent = 0
    try:
        while (now := time.monotonic()) < start + duration_s:
            due = int((now - start) * per_s) + 1
            while sent < due:
                try:
                    sock.send(payload)
                except OSError:  # BlockingIOError among them
                    pass  # refused by the sender's own queue: dropped there
                sent += 1
            time.sleep(TICK_S)
    finally:
        sock.close()
    return sent


class Sink:
    """Receives datagrams at ``addr:port`` in ``netns`` in a thread; :attr:`arrivals_s` are the
    kernel's receive times (CLOCK_REALTIME, seconds) of the full-size ones."""

    def __init__(self, addr: str, port: int, netns: str | None) -> None:
        with in_netns(netns):
            self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SINK_RCVBUF_BYTES)
        self._sock.bind((addr, port))
        self._sock.settimeout(0.1)
        self._stop = threading.Event()
        self.arrivals_s: list[float] = []
        self._thread = threading.Thread(target=self._run, name="tb-udpsink", daemon=True)

    def __enter__(self) -> Sink:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()

    def _run(self) -> None:
        space = socket.CMSG_SPACE(16)
        while not self._stop.is_set():
            try:
                data, ancdata, _, _ = self._sock.recvmsg(65535, space)
            except TimeoutError:
                continue
            except OSError:
                return
            stamp = kernel_time_ns(ancdata)
            if len(data) == UDP_PAYLOAD_BYTES and stamp is not None:
                self.arrivals_s.append(stamp / 1e9)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.bench.udpblast")
    parser.add_argument("--to", required=True, help="the sink's address")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--rate-bps", type=float, required=True, help="IP bits per second")
    parser.add_argument("--duration-s", type=float, required=True)
    args = parser.parse_args(argv)
    try:
        sent = send(args.to, args.port, args.rate_bps, args.duration_s)
    except (SpecError, OSError) as err:
        print(f"udpblast: error: {err}", file=sys.stderr)
        return 2
    print(sent)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
