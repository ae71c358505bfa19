"""The asyncio edge of the FEC protocol: a UDP socket with kernel receive timestamps and GSO
sends, and a driver that runs one :class:`~proto.fec.session.FecEndpoint` on it.

Receive times are the kernel's (SO_TIMESTAMPNS, CLOCK_REALTIME, moved onto CLOCK_MONOTONIC
by the offset between the two clocks read at each wake-up): the probe's dispersion and the
per-transfer arrival rate must not see the event loop's batching. Runs of equal-size
datagrams leave with one ``sendmsg`` as UDP GSO segments (as the QUIC edge does).
"""

from __future__ import annotations

import asyncio
import collections
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

from proto.fec.session import Event, FecEndpoint
from proto.quic.edge import UDP_GSO_MAX_BYTES, UDP_GSO_MAX_SEGMENTS, UDP_SEGMENT, make_udp_socket
from proto.watchers import Callback, Condition, Watchers

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
"""<asm-generic/socket.h>: receive timestamps as struct timespec."""
_TIMESPEC = struct.Struct("=qq")
RECV_BUFFER_BYTES = 2048
"""Larger than any valid datagram (1472): an oversized one still arrives whole, is counted."""
MAX_READS_PER_WAKE = 512


def make_fec_socket(host: str, port: int, buffer_bytes: int) -> socket.socket:
    sock = make_udp_socket(host, port, buffer_bytes)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        pass  # no kernel timestamps: arrival times are taken at read
    return sock


class DatagramIO:
    """Reads every datagram with its arrival time; sends lists of datagrams to one address."""

    def __init__(
        self,
        sock: socket.socket,
        on_datagram: Callable[[bytes, float, Any], None],
        loop: asyncio.AbstractEventLoop,
        on_batch_end: Callable[[], None] | None = None,
    ) -> None:
        self.sock = sock
        self.loop = loop
        self.on_datagram = on_datagram
        self.on_batch_end = on_batch_end
        """Called once after each batch of reads (drivers send and re-arm once per batch)."""
        self._pending: collections.deque[tuple[bytes, Any]] = collections.deque()
        self._gso = True
        self.closed = False
        loop.add_reader(sock.fileno(), self._readable)

    def _readable(self) -> None:
        offset = time.time() - time.monotonic()
        ancillary = socket.CMSG_SPACE(_TIMESPEC.size)
        try:
            self._read_batch(offset, ancillary)
        finally:
            if self.on_batch_end is not None:
                self.on_batch_end()

    def _read_batch(self, offset: float, ancillary: int) -> None:
        for _ in range(MAX_READS_PER_WAKE):
            try:
                data, anc, _flags, addr = self.sock.recvmsg(RECV_BUFFER_BYTES, ancillary)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # ICMP errors (port unreachable) surface here: nothing to read
            arrival = None
            for level, kind, value in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    seconds, nanos = _TIMESPEC.unpack_from(value)
                    arrival = seconds + nanos * 1e-9 - offset
            if arrival is None:
                arrival = time.monotonic()
            self.on_datagram(data, arrival, addr)

    def send(self, datagrams: list[bytes], addr: Any) -> None:
        if self.closed or not datagrams:
            return
        if self._pending:
            self._pending.extend((d, addr) for d in datagrams)
            return
        index = 0
        count = len(datagrams)
        while index < count:
            size = len(datagrams[index])
            stop = index + 1
            total = size
            while (
                self._gso
                and stop < count
                and stop - index < UDP_GSO_MAX_SEGMENTS
                and len(datagrams[stop]) == size
                and total + size <= UDP_GSO_MAX_BYTES
            ):
                total += size
                stop += 1
            try:
                if stop - index == 1:
                    self.sock.sendto(datagrams[index], addr)
                else:
                    self.sock.sendmsg(
                        [b"".join(datagrams[index:stop])],
                        [(socket.SOL_UDP, UDP_SEGMENT, struct.pack("=H", size))],
                        0,
                        addr,
                    )
            except BlockingIOError:
                self._pending.extend((d, addr) for d in datagrams[index:])
                self.loop.add_writer(self.sock.fileno(), self._writable)
                return
            except OSError:
                if stop - index > 1 and self._gso:
                    self._gso = False  # no GSO here: one datagram per call from now on
                    continue
                # unreachable peer and the like: UDP gives no guarantee, drop
            index = stop

    def _writable(self) -> None:
        while self._pending:
            data, addr = self._pending[0]
            try:
                self.sock.sendto(data, addr)
            except BlockingIOError:
                return
            except OSError:
                pass
            self._pending.popleft()
        self.loop.remove_writer(self.sock.fileno())

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.loop.remove_reader(self.sock.fileno())
        if self._pending:
            self.loop.remove_writer(self.sock.fileno())
        self.sock.close()


class EndpointDriver:
    """Runs one endpoint: feeds it datagrams and timers, sends what it has, hands its events
    to ``on_event``. ``watch(condition, callback)`` calls back after the first transmit at
    which the condition holds (e.g. a transfer's first round has left)."""

    def __init__(
        self,
        endpoint: FecEndpoint,
        io: DatagramIO,
        addr: Any,
        on_event: Callable[[Event], None],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.endpoint = endpoint
        self.io = io
        self.addr = addr
        self.on_event = on_event
        self.loop = loop
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._watchers = Watchers()
        self.closed = False

    def receive(self, data: bytes, arrival: float, addr: Any, service: bool = True) -> bool:
        """Feed one datagram; ``service=False`` leaves sending to a later :meth:`service`
        (once per batch of reads)."""
        if self.closed:
            return False
        accepted = self.endpoint.receive_datagram(data, arrival)
        if accepted:
            self.addr = addr  # authenticated: the peer is (now) there
        if service:
            self.service()
        return accepted

    def watch(self, condition: Condition, callback: Callback) -> None:
        self._watchers.add(condition, callback)

    def service(self) -> None:
        """Deliver events, send what may leave now, and re-arm the timer."""
        if self.closed:
            return
        endpoint = self.endpoint
        while (event := endpoint.next_event()) is not None:
            self.on_event(event)
        if self.addr is not None:
            now = time.monotonic()
            self.io.send(endpoint.datagrams_to_send(now), self.addr)
            if endpoint.prepare():  # repair symbols of one block, after the send
                self.loop.call_soon(self.service)
            if self._watchers:
                self._watchers.fire(now)
        self._arm()

    def _arm(self) -> None:
        at = self.endpoint.get_timer()
        if at == self._timer_at and self._timer is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = at
        if at is not None:
            delay = max(0.0, at - time.monotonic())
            self._timer = self.loop.call_at(self.loop.time() + delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._timer_at = None
        if self.closed:
            return
        self.endpoint.handle_timer(time.monotonic())
        self.service()

    def close(self) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
