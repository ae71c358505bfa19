"""What a cluster's host is (its fingerprint for the manifest) and whether it can run the
testbed at all (root, a TUN device, the same testbed version as the client).

A worker runs :func:`check_host` once, before any block is submitted (the client calls it
through ``Client.run`` on every worker); a host with a problem is named in one line and
gets no block, as ``testbed remote check`` refuses a server host (harness.run.remote.channel).
"""

from __future__ import annotations

import concurrent.futures
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import __version__
from harness.run.environment import host_label
from tbcore.plain import AsDict

TUN_DEVICE = Path("/dev/net/tun")
"""The emulator's packet path (netem.emulator): Linux's tuntap.txt, 'the /dev/net/tun
device'."""

CPUINFO = Path("/proc/cpuinfo")

OWN_CHECKS = ("root:", "tun_device:")
"""netem.doctor's lines that :func:`problems_of` says in its own words."""


@dataclass(frozen=True)
class HostFingerprint(AsDict):
    """A host as the manifest records it: what could make its runs differ from another's."""

    host: str
    """Its runs' ``host`` column (harness.run.environment.host_label)."""
    kernel: str
    cpu_model: str
    cores: int
    testbed_version: str
    backend: str | None
    """The link backend the host would use (netem.doctor), None when it has none."""
    problems: list[str] = field(default_factory=list)
    """Why the host cannot run the testbed (empty: it can), one line each."""


def cpu_model(cpuinfo: str) -> str:
    """The ``model name`` of /proc/cpuinfo's first processor ("unknown" without one)."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "model name":
            return value.strip()
    return "unknown"


def problems_of(
    *, uid: int, has_tun: bool, version: str, expected_version: str, missing: list[str]
) -> list[str]:
    """Why a host cannot run the testbed, one line each (empty: it can)."""
    out = []
    if uid != 0:
        out.append(f"runs as uid {uid}; the testbed needs root (namespaces, TUN)")
    if not has_tun:
        out.append(f"no {TUN_DEVICE} (modprobe tun; a container needs --device {TUN_DEVICE})")
    if version != expected_version:
        out.append(
            f"testbed {version} there, {expected_version} on the client: install the same "
            "version there (harness/install.sh)"
        )
    out.extend(missing)
    return out


def check_host(expected_version: str, backend: str = "auto") -> dict[str, Any]:
    """This host's fingerprint and problems (run on a worker by ``Client.run``)."""
    from netem import doctor

    try:  # in a thread of its own: Client.run calls this inside the worker's event loop
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            report = pool.submit(doctor.report, backend).result()
        missing, resolved = doctor.missing(report), report.get("backend")
    except Exception as err:  # a host whose probe fails cannot run the testbed either
        missing, resolved = [f"netem doctor failed: {type(err).__name__}: {err}"], None
    try:
        model = cpu_model(CPUINFO.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        model = "unknown"
    problems = problems_of(
        uid=os.geteuid(),
        has_tun=TUN_DEVICE.exists(),
        version=__version__,
        expected_version=expected_version,
        missing=[m for m in missing if not m.startswith(OWN_CHECKS)],
    )
    return HostFingerprint(
        host=host_label(),
        kernel=platform.release(),
        cpu_model=model,
        cores=os.cpu_count() or 0,
        testbed_version=__version__,
        backend=resolved,
        problems=problems,
    ).to_dict()
