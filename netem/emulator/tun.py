"""The TUN edge: attach to a persistent TUN device inside a namespace, read and write packets.

The topology creates the devices (persistent, ``IFF_TUN | IFF_NO_PI``); the emulator only
attaches to them: it enters the namespace with :func:`netem.nsexec.in_netns`, opens
``/dev/net/tun`` and binds the file to the device with ``TUNSETIFF``. The file keeps the
namespace it was opened in. Each ``read()`` returns one IP packet, each ``write()`` injects
one, which the receiving host's stack processes inside the ``write()`` call (so the
emulator's system time includes the receiver's network stack).
"""

from __future__ import annotations

import ctypes
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
IFF_VNET_HDR = 0x4000
"""linux/if_tun.h: each read and write starts with a struct virtio_net_hdr (10 bytes)."""
IFF_PERSIST = 0x0800
TUNSETOFFLOAD = 0x400454D0
"""linux/if_tun.h: _IOW('T', 208, unsigned int): the offloads this reader can take."""
TUN_F_CSUM = 0x01
TUN_F_TSO4 = 0x02
TUN_F_TSO6 = 0x04
TUN_F_TSO_ECN = 0x08
"""linux/if_tun.h: partial checksums, and TCP super-packets (IPv4, IPv6, with ECN)."""
TCP_OFFLOADS = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN
TSO_FEATURES = (
    "tx-tcp-segmentation",
    "tx-tcp6-segmentation",
    "tx-tcp-ecn-segmentation",
    "tx-tcp-mangleid-segmentation",
    "tx-tcp-accecn-segmentation",
)
"""The device features ETHTOOL_STSO switches (the kernel's NETIF_F_ALL_TSO)."""
SIOCETHTOOL = 0x8946
ETHTOOL_STSO = 0x0000001F
"""linux/ethtool.h: set TCP segmentation offload (every TSO feature) on or off."""
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


def open_tun(device: str, netns: str | None = None, *, vnet_hdr: bool = False) -> int:
    """Attach to TUN ``device`` (in namespace ``netns``) and return a non-blocking fd.

    ``vnet_hdr``: every read and write carries a virtio_net_hdr, and the device takes TCP
    super-packets from its stack (TSO, partial checksums), which the reader must cut into
    segments itself (the C path does, ``csrc/gso.c``); without it, TSO is switched off
    again (the topology's default: wire-sized packets only).
    """
    if not device or len(device.encode()) >= IFNAMSIZ:
        raise SpecError("device", f"{device!r} is not a device name (1-15 bytes)")
    flags = IFF_TUN | IFF_NO_PI | (IFF_VNET_HDR if vnet_hdr else 0)
    ifreq = struct.pack(f"{IFNAMSIZ}sH", device.encode(), flags).ljust(IFREQ_SIZE, b"\0")

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
        (got_flags,) = struct.unpack_from("H", got, IFNAMSIZ)
        if not got_flags & IFF_PERSIST:
            os.close(fd)
            raise SpecError("device", f"{device!r}{where} is not a persistent TUN device")
        try:
            fcntl.ioctl(fd, TUNSETOFFLOAD, TCP_OFFLOADS if vnet_hdr else 0)
            set_segmentation_offload(device, vnet_hdr)
        except OSError as err:
            os.close(fd)
            raise SpecError(
                "device", f"cannot set the offloads of {device!r}{where}: {err.strerror}"
            ) from None
        return fd

    if netns is None:
        return _open()
    with in_netns(netns):
        return _open()


def set_segmentation_offload(device: str, on: bool) -> None:
    """TSO on or off on ``device`` of this thread's namespace (``ethtool -K DEV tso on``).

    The topology switches it off; TUNSETOFFLOAD alone cannot bring it back, as the kernel
    keeps only the features the device's user wants (``wanted_features``)."""
    value = ctypes.create_string_buffer(struct.pack("II", ETHTOOL_STSO, int(on)))
    ifreq = struct.pack(f"{IFNAMSIZ}sP", device.encode(), ctypes.addressof(value))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        fcntl.ioctl(sock, SIOCETHTOOL, ifreq.ljust(IFREQ_SIZE, b"\0"))


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
