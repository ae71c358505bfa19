"""How the userspace emulator moves packets: its options as one validated value.

The link (:meth:`netem.link.Link.up`) carries them to the emulator's command line
(:func:`netem.backends.userspace.emulator_argv`); ``python -m netem.emulator`` checks them
again on entry (:func:`netem.emulator.__main__.check_path_options`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from tbcore.errors import SpecError

PATHS = ("c", "python")
"""``c``: the C packet path (:mod:`netem.emulator.cengine`); ``python``: the reference core
in asyncio pumps (:mod:`netem.emulator.engine`)."""
DEFAULT_PATH = "c"
DEFAULT_COALESCE_S = 300e-6
"""On dense traffic (a departure less than :data:`netem.emulator.engine.DENSE_GAP_S` after
the previous release) the C path's one timer fires at most once per 300 µs after the
thread's last wake-up, for both directions, and each wake-up releases everything due by
then, as a NIC moderates its interrupts: each packet at most that late. On these VMs a
wake-up of the packet thread costs about 20 µs of CPU (the context switches) against a few
µs for a packet's own read and write, so the wake-ups set the CPU: measured at 200 ms and
333 Mbit/s with kernel TCP (docs/measurements.md, "The packet path in C"; 3 alternating rounds, load
average 4-8 from other sessions), a grid of 100 µs took 0.38-0.43 of a core (lateness p99
130-140 µs), 200 µs 0.30-0.33 (210-220 µs), 300 µs 0.24-0.26 (280-290 µs), the Python path
0.81-0.84 (150-180 µs up, 260-360 µs on the ACK direction). A packet alone before that
point is released on time, or by a wake-up the thread makes anyway before the point; sparse
traffic (the RTT probe, requests) is never coalesced. The wake-ups that reads would add
(the receiver's ACKs, about 5,000 a second at 333 Mbit/s) go with the kernel's arrival
stamps (:data:`STAMPS_DOC`)."""
GRO_DOC = """Receive offload on delivery (C path with offloads, ``--gro on``; off by default,
so that the receivers' ACKs stay those every earlier result was measured with).

A Linux receiver on a real link does not see the wire's segments one by one: the NIC raises
one interrupt for several packets and GRO (net/ipv4/tcp_offload.c, udp_offload.c) merges the
in-order packets of one flow into one super-packet before the stack sees it; TCP then sends
one ACK per super-packet, not one per two segments. The C path does the same with the
packets one wake-up releases together (the coalescing grid is the interrupt moderation):
for TCP the same flow, back-to-back sequence numbers, the same ACK number, window, options
and IP fields, every segment but the last of the first's size, PSH only last, no
SYN/FIN/RST/URG; for UDP the same flow and size (a socket without ``UDP_GRO`` still reads
the datagrams one by one); at most 64 KB, one ``writev`` with a GSO vnet header. The loss
draw, the queue, the clock, the packet log and the capture see the wire's packets only.
``--gro off`` delivers every packet on its own (a receiver without GRO, or a NIC
interrupting per packet)."""
STAMPS_DOC = """Arrival times from the kernel (C path, ``--stamps on``, the default).

The TUN device toward the emulator runs a small eBPF program on every packet it queues
(``TUNSETFILTEREBPF``) that writes the kernel's clock (CLOCK_MONOTONIC, the emulator's own)
into a ring the emulator maps (csrc/stamp.c), so a packet's arrival is the time it entered
the device, not the time the packet thread woke up and read it. With those times, a
direction whose packets cannot be due before the thread's next wake-up (that wake-up at
most 1 ms away, the direction's delay less its jitter at least 2 ms, no air medium) is
read at the wake-ups only: its packets' queueing and departures are computed at their
arrival times, so nothing of their path changes, and the thread is not woken once more per
packet (at 333 Mbit/s the receiver's ACKs did so about 5,000 times a second). Where the
kernel refuses the program (no CAP_BPF, a seccomp filter, a kernel before 5.12), the link
says why (``testbed link show``, the manifest's ``environment.link.emulator_path``) and every
packet is read, and timed, as it comes (``--stamps off`` does the same on purpose)."""
MAX_COALESCE_S = 1e-3
"""A millisecond of batching is the most the link's timing allows: the lateness targets are
0.3 ms median and 1 ms p99 of RTT error (harness/bench/link.py)."""


@dataclass(frozen=True)
class EmulatorOptions:
    """The emulator's packet path and its knobs; None: the emulator's default."""

    path: str | None = None
    """``c`` or ``python`` (:data:`PATHS`)."""
    offload: bool | None = None
    """C path: take TCP super-packets (TSO) and cut them before the loss draw."""
    coalesce_s: float | None = None
    """C path: at most one timer wake-up per direction per this much on dense traffic."""
    gro: bool | None = None
    """C path with offloads: the segments of one TCP flow that one wake-up releases together
    reach the receiving stack as one super-packet, as a NIC's GRO hands them up
    (:data:`GRO_DOC`)."""
    stamps: bool | None = None
    """C path: arrival times from the kernel, and reads deferred to wake-ups where that
    changes nothing (:data:`STAMPS_DOC`)."""

    def __post_init__(self) -> None:
        if self.path is not None and self.path not in PATHS:
            raise SpecError("emulator.path", f"{self.path!r}: must be one of {', '.join(PATHS)}")
        for name in ("offload", "gro", "stamps"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise SpecError(f"emulator.{name}", f"must be true or false, got {value!r}")
        if self.gro and self.offload is False:
            raise SpecError("emulator.gro", "super-packets need the offloads (offload true)")
        if self.coalesce_s is not None:
            value = self.coalesce_s
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or not 0 <= value <= MAX_COALESCE_S
            ):
                raise SpecError("emulator.coalesce_s", f"must lie in [0, 1 ms], got {value!r}")
        if self.path == "python":
            for name in ("offload", "coalesce_s", "gro", "stamps"):
                if getattr(self, name) is not None:
                    raise SpecError(f"emulator.{name}", "only the C path takes it (path c)")

    @property
    def empty(self) -> bool:
        return self == EmulatorOptions()

    def argv(self) -> list[str]:
        """The emulator's command-line options for these settings."""
        out: list[str] = []
        if self.path is not None:
            out += ["--path", self.path]
        if self.offload is not None:
            out += ["--offload", "on" if self.offload else "off"]
        if self.coalesce_s is not None:
            out += ["--coalesce-us", f"{self.coalesce_s * 1e6:g}"]
        if self.gro is not None:
            out += ["--gro", "on" if self.gro else "off"]
        if self.stamps is not None:
            out += ["--stamps", "on" if self.stamps else "off"]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: object) -> EmulatorOptions:
        if not isinstance(data, dict):
            raise SpecError("emulator", f"must be a mapping, got {type(data).__name__}")
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise SpecError(f"emulator.{sorted(unknown)[0]}", "unknown emulator option")
        return cls(**data)
