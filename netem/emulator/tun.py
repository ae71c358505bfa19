"""The TUN edge: attach to a persistent TUN device inside a namespace, read and write packets.

The topology creates the devices (persistent, ``IFF_TUN | IFF_NO_PI``); the emulator only
attaches to them: it enters the namespace with :func:`netem.nsexec.in_netns`, opens
``/dev/net/tun`` and binds the file to the device with ``TUNSETIFF``. The file keeps the
namespace it was opened in. Each ``read()`` returns one IP packet, each ``write()`` injects
one, which the receiving host's stack processes inside the ``write()`` call (so the
emulator's system time includes the receiver's network stack).
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import time

from netem.nsexec import in_netns
from tbcore.errors import SpecError

TUN_PATH = "/dev/net/tun"
TUNSETIFF = 0x400454CA
"""linux/if_tun.h: _IOW('T', 202, int)."""
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
IFF_PERSIST = 0x0800
TUNGETIFF = 0x800454D2
"""linux/if_tun.h: _IOR('T', 210, unsigned int): the attached device's name and flags."""
"""No 4-byte packet-information header: reads and writes are bare IP packets."""
IFNAMSIZ = 16
IFREQ_SIZE = 40
"""sizeof(struct ifreq) on x86-64."""
MAX_PACKET_BYTES = 65535
"""Largest IP packet a read can return."""
READ_BATCH = 64
"""Packets read per wake-up at most, so one busy direction cannot starve the other."""
SIOCGIFFLAGS = 0x8913
"""linux/sockios.h: get an interface's flags."""
IFF_RUNNING = 0x40
"""linux/if.h: the device is operationally up (carrier and the kernel's link watch done)."""
RUNNING_TIMEOUT_S = 5.0
"""The kernel's link watch applies a carrier change within a second (it rate-limits to one
run per second); beyond this something else is wrong."""
RUNNING_SETTLE_S = 0.01
"""Extra wait after IFF_RUNNING: the link watch sets the operational state just before it
re-activates the device's queue discipline, in the same run."""


def open_tun(device: str, netns: str | None = None) -> int:
    """Attach to TUN ``device`` (in namespace ``netns``) and return a non-blocking fd."""
    if not device or len(device.encode()) >= IFNAMSIZ:
        raise SpecError("device", f"{device!r} is not a device name (1-15 bytes)")
    ifreq = struct.pack(f"{IFNAMSIZ}sH", device.encode(), IFF_TUN | IFF_NO_PI).ljust(
        IFREQ_SIZE, b"\0"
    )

    where = f" in {netns}" if netns else ""

    def _open() -> int:
        # TUNSETIFF would create a new, non-persistent device under a name that does not
        # exist: check first, so that a missing topology fails instead of half-working.
        try:
            socket.if_nametoindex(device)
        except OSError:
            raise SpecError("device", f"no device {device!r}{where} (is the link up?)") from None
        fd = os.open(TUN_PATH, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            fcntl.ioctl(fd, TUNSETIFF, ifreq)
            got = fcntl.ioctl(fd, TUNGETIFF, bytes(IFREQ_SIZE))
        except OSError as err:
            os.close(fd)
            raise SpecError(
                "device", f"cannot attach to TUN {device!r}{where}: {err.strerror}"
            ) from None
        (flags,) = struct.unpack_from("H", got, IFNAMSIZ)
        if not flags & IFF_PERSIST:
            os.close(fd)
            raise SpecError("device", f"{device!r}{where} is not a persistent TUN device")
        return fd

    if netns is None:
        return _open()
    with in_netns(netns):
        return _open()


def read_batch(fd: int, limit: int = READ_BATCH) -> list[bytes]:
    """Up to ``limit`` packets that are waiting on ``fd`` (none if nothing is)."""
    out: list[bytes] = []
    read = os.read
    try:
        for _ in range(limit):
            out.append(read(fd, MAX_PACKET_BYTES))
    except BlockingIOError:
        pass
    return out


def wait_running(device: str, netns: str | None, timeout_s: float = RUNNING_TIMEOUT_S) -> float:
    """Wait until ``device`` is operationally up; returns how long that took (seconds).

    A TUN device has no carrier while no file is attached to it, and the kernel parks its
    queue discipline on ``noop``, which drops every packet. Attaching restores the carrier,
    but the kernel applies that later, from its link-watch work (up to a second after the
    previous change): packets sent in between are silently lost. Ready means running.
    """

    def _socket() -> socket.socket:
        return socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    if netns is None:
        sock = _socket()
    else:
        with in_netns(netns):
            sock = _socket()
    ifreq = struct.pack(f"{IFNAMSIZ}sH", device.encode(), 0).ljust(IFREQ_SIZE, b"\0")
    start = time.monotonic()
    try:
        while True:
            (flags,) = struct.unpack_from("H", fcntl.ioctl(sock, SIOCGIFFLAGS, ifreq), IFNAMSIZ)
            if flags & IFF_RUNNING:
                time.sleep(RUNNING_SETTLE_S)
                return time.monotonic() - start
            if time.monotonic() - start > timeout_s:
                where = f" in {netns}" if netns else ""
                raise SpecError(
                    "device", f"{device!r}{where} not running after {timeout_s:g} s (is it up?)"
                )
            time.sleep(0.001)
    finally:
        sock.close()
