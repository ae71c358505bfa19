"""Packet capture at both ends of a link with tcpdump, inside the endpoint namespaces.

Used by the kernel backend (the userspace emulator writes its own pcap files from the
packets it moves). Each end gets ``tcpdump -i tb-eth -s 128 --time-stamp-precision nano``
started through :func:`netem.nsexec.popen`; the block runs only after both report that they
listen, and on exit each gets SIGINT (so it flushes and closes its file) and is killed if it
does not stop in time.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from netem import nsexec
from netem.readiness import wait_for_marker
from tbcore.errors import SpecError
from tbcore.processes import stop_process

DEFAULT_SNAPLEN_BYTES = 128
"""Enough for IPv4 + TCP with all options (20 + 60) or QUIC's header; keeps files small."""
FULL_SNAPLEN_BYTES = 65535
"""Whole packets: payloads that a key log can decrypt (TLS records, QUIC packets)."""
CAPTURE_MODES: dict[str, int] = {"headers": DEFAULT_SNAPLEN_BYTES, "full": FULL_SNAPLEN_BYTES}
"""``capture = "headers"`` (the cheap default) or ``"full"``: the snap length of each."""


def snaplen_of(mode: str) -> int:
    """The snap length of a capture mode; SpecError naming ``capture`` otherwise."""
    try:
        return CAPTURE_MODES[mode]
    except KeyError:
        raise SpecError("capture", f"{mode!r} is not one of {', '.join(CAPTURE_MODES)}") from None


START_TIMEOUT_S = 20.0
"""How long tcpdump may take to start listening (a slow VM guest takes seconds)."""

STOP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class CapturePoint:
    """One interface to capture on (``ns`` None: the caller's own namespace), with an
    optional pcap filter expression (tcpdump's last argument)."""

    ns: str | None
    device: str
    path: Path
    filter: str | None = None


def _wait_listening(proc: subprocess.Popen, deadline: float) -> None:
    assert proc.stderr is not None
    result = wait_for_marker(proc.stderr.fileno(), b"listening on", deadline)
    if result.ready:
        return
    proc.kill()
    proc.wait()
    raise RuntimeError(f"tcpdump did not start: {result.seen.decode(errors='replace').strip()!r}")


def _stop(proc: subprocess.Popen) -> None:
    stop_process(proc, STOP_TIMEOUT_S, signal.SIGINT)  # tcpdump flushes its file on SIGINT
    if proc.stderr is not None:
        proc.stderr.close()


@contextmanager
def tcpdump(
    points: Sequence[CapturePoint], *, snaplen_bytes: int = DEFAULT_SNAPLEN_BYTES
) -> Iterator[None]:
    """Capture on every point while the block runs; files are complete when it exits."""
    binary = shutil.which("tcpdump")
    if binary is None:
        raise SpecError("capture", "tcpdump is not installed (apt-get install tcpdump)")
    if not 1 <= snaplen_bytes <= 65535:
        raise SpecError("snaplen", f"must lie in [1, 65535], got {snaplen_bytes!r}")
    procs: list[subprocess.Popen] = []
    try:
        for point in points:
            point.path.parent.mkdir(parents=True, exist_ok=True)
            argv = [
                binary,
                "-i",
                point.device,
                "-n",
                "-s",
                str(snaplen_bytes),
                "--time-stamp-precision",
                "nano",
                "-Z",
                "root",  # do not drop privileges: the file is written where the caller says
                # every packet to the file as it comes: without it, TPACKET_V3 hands packets
                # over per block (or per 1 s timeout), and those of the last block were lost
                # at SIGINT (seen in the VM guest)
                "--immediate-mode",
                "-U",
                "-w",
                str(point.path),
                *([point.filter] if point.filter else []),
            ]
            procs.append(
                nsexec.popen(
                    point.ns,
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        for proc in procs:
            _wait_listening(proc, deadline)
        yield
    finally:
        for proc in procs:
            _stop(proc)
