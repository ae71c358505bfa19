"""A run's captures: how much of each packet to keep, and the files a person opens.

``capture = "auto"`` (the default) keeps whole packets when the run's application bytes are
at most :data:`FULL_CAPTURE_MAX_BYTES` and the first 128 bytes of each packet (headers: the
ACK analysis needs nothing more) above it: the voice requests (354,640 bytes each), the
streamed audio, the agent's rounds (0.8 MB each, 32 of them fit) are whole; the image round
trip (35 MB a request) and the 30 MB two-path upload keep headers. ``full`` and ``headers``
are what they say whatever the bytes, ``off`` captures nothing.

After the client has exited each end's pcap becomes ``client.pcapng`` / ``server.pcapng``
with the run's key log embedded as a Decryption Secrets Block (netem.pcapng), so that
``tshark -r client.pcapng -Y http2`` (or ``-Y http3``) decrypts with no option given; the
classic pcap is removed (the collection reads either). run.json's ``capture`` says which
mode ran, why, and what was written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.store.files import KEY_LOG_FILE
from netem import pcapng
from netem.capture import snaplen_of
from tbcore import agent, kinds
from tbcore.plain import AsDict
from tbcore.settings import Settings

FULL_CAPTURE_MAX_BYTES = 32 * 2**20
"""The most application bytes (both directions, every request or round of the run,
warm-ups and an outage's redone rounds included) whose packets ``auto`` keeps whole. The
reason is disk: whole packets are kept at both ends of the link, so a run costs about twice
its bytes; at 32 MiB that is 64 MiB a run and a few GB for a full agent campaign, while a
header capture of the 35 MB image costs about 4 MB. The ACK, window and overhead analyses
need headers only; whole packets are for a person decrypting a run (and the HTTP/2 stream
view, which files that need it ask for with ``capture = "full"``)."""
ENDS = ("client", "server")


@dataclass(frozen=True)
class CapturePlan(AsDict):
    """What a run captures, decided before it starts."""

    requested: str
    """The ``capture`` setting: auto, headers, full or off."""
    mode: str
    """What the link captures: headers, full or off."""
    snaplen_bytes: int
    run_bytes: int
    """The run's application bytes as planned (both directions, every exchange)."""
    reason: str


def exchanges(settings: Settings) -> int:
    """Requests (or agent rounds) the client makes, warm-ups and redone rounds included."""
    if kinds.workload(settings.workload).records == "agent_round":
        redone = 0 if settings.outage_after_round is None else settings.outage_after_round + 1
        rounds = agent.expected_rounds(
            settings.agent_rounds, settings.agent_tasks, settings.task_success
        )
        return math.ceil(rounds) + settings.warmup_requests + redone
    return settings.requests + settings.warmup_requests


def run_bytes(settings: Settings) -> int:
    """The run's application bytes as planned (both directions, every exchange)."""
    workload = kinds.workload(settings.workload)
    return (workload.up_bytes(settings) + workload.down_bytes(settings)) * exchanges(settings)


def capture_plan(settings: Settings) -> CapturePlan:
    requested = settings.capture
    planned = run_bytes(settings)
    if requested == "off":
        return CapturePlan(requested, "off", 0, planned, "capture = off")
    if requested != "auto":
        reason = f"capture = {requested}"
        return CapturePlan(requested, requested, snaplen_of(requested), planned, reason)
    limit_mib = FULL_CAPTURE_MAX_BYTES / 2**20
    if planned <= FULL_CAPTURE_MAX_BYTES:
        mode, reason = "full", f"auto: {planned:,} bytes planned, at most {limit_mib:g} MiB"
    else:
        mode, reason = "headers", f"auto: {planned:,} bytes planned, above {limit_mib:g} MiB"
    return CapturePlan(requested, mode, snaplen_of(mode), planned, reason)


def finish(run_dir: Path) -> dict[str, Any]:
    """Every end's pcap in ``run_dir`` as pcapng with the run's key log embedded (the pcap
    removed); returns what was written, for run.json."""
    keys = Path(run_dir) / KEY_LOG_FILE
    secrets = pcapng.key_log_lines(keys.read_text(errors="replace")) if keys.is_file() else b""
    written: dict[str, Any] = {"secret_lines": secrets.count(b"\n"), "files": {}}
    for end in ENDS:
        pcap = Path(run_dir) / f"{end}.pcap"
        if not pcap.is_file():
            continue
        target = pcap.with_suffix(".pcapng")
        packets = pcapng.convert(pcap, target, secrets)
        pcap.unlink()
        written["files"][target.name] = packets
    return written
