"""``testbed doctor``: what this host can do, one line each, and the backend ``auto`` picks.

Each capability is probed by doing it, in a throwaway ``tb-probe<pid>`` namespace that is
removed at once: create a namespace, a veth pair and a TUN device inside it, add a netem
qdisc (the kernel's answer decides the backend).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from netem import backends, names, topology
from netem.backends.kernel import probe_netem
from netem.nsexec import in_netns

CONGESTION_CONTROL_PATH = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
ALLOWED_CONGESTION_CONTROL_PATH = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")


@dataclass(frozen=True)
class Check:
    """One capability."""

    name: str
    ok: bool
    detail: str


def _probe_in_namespace() -> list[Check]:
    ns = f"{names.PREFIX}probe{os.getpid()}d"
    checks: list[Check] = []
    try:
        try:
            topology.create_namespace(ns)
        except OSError as err:
            return [Check("namespaces", False, f"cannot create one: {err}")]
        checks.append(Check("namespaces", True, "network namespaces can be created"))
        try:
            with topology.ipr(ns) as ip:
                ip.link("add", ifname="tb-probe0", kind="veth", peer={"ifname": "tb-probe1"})
            checks.append(Check("veth", True, "veth pairs can be created"))
        except Exception as err:  # the kernel's answer, whatever it is, is the result
            checks.append(Check("veth", False, f"veth refused: {err}"))
        try:
            with in_netns(ns):
                fd = os.open(topology.TUN_DEVICE_PATH, os.O_RDWR | os.O_CLOEXEC)
                try:
                    ifr = struct.pack(
                        "16sH22x", b"tb-probe2", topology.IFF_TUN | topology.IFF_NO_PI
                    )
                    fcntl.ioctl(fd, topology.TUNSETIFF, ifr)
                finally:
                    os.close(fd)
            checks.append(Check("tun", True, f"{topology.TUN_DEVICE_PATH} gives TUN devices"))
        except OSError as err:
            checks.append(Check("tun", False, f"TUN refused: {err}"))
    finally:
        topology.delete_namespace(ns)
    return checks


def run_checks() -> list[Check]:
    """Every check, in the order ``testbed doctor`` prints them."""
    root = os.geteuid() == 0
    checks = [Check("root", root, "running as root" if root else f"uid {os.geteuid()}: need root")]
    if root:
        checks += _probe_in_namespace()
    netem_ok, netem_detail = probe_netem()
    checks.append(Check("netem", netem_ok, netem_detail))
    try:
        available = CONGESTION_CONTROL_PATH.read_text().split()
        allowed = ALLOWED_CONGESTION_CONTROL_PATH.read_text().split()
        detail = " ".join(available)
        if set(allowed) != set(available):
            # a namespace's default (net.ipv4.tcp_congestion_control) must be an allowed one;
            # a socket of a privileged process may pick any available one (TCP_CONGESTION)
            detail += f" (as a namespace default: {' '.join(allowed)})"
        checks.append(Check("congestion_control", bool(available), detail))
    except OSError as err:
        checks.append(Check("congestion_control", False, str(err)))
    tcpdump = shutil.which("tcpdump")
    checks.append(
        Check("tcpdump", tcpdump is not None, tcpdump or "not installed (apt-get install tcpdump)")
    )
    return checks


def report() -> dict[str, Any]:
    """The checks and the chosen backend, as ``testbed doctor --json`` prints them."""
    checks = run_checks()
    by_name = {c.name: c for c in checks}
    usable = by_name["root"].ok and all(
        by_name[n].ok for n in ("namespaces", "veth", "tun") if n in by_name
    )
    backend = backends.choose("auto") if by_name["root"].ok else None
    return {
        "checks": [asdict(c) for c in checks],
        "backend": backend,
        "usable": usable,
        "forced_by": backends.BACKEND_ENV if os.environ.get(backends.BACKEND_ENV) else None,
    }


def format_report(data: dict[str, Any]) -> str:
    lines = []
    width = max(len(c["name"]) for c in data["checks"])
    for c in data["checks"]:
        lines.append(f"{c['name']:<{width}}  {'yes' if c['ok'] else 'no ':<3}  {c['detail']}")
    backend = data["backend"] or "none (needs root)"
    why = f" (forced by {data['forced_by']})" if data.get("forced_by") else ""
    lines.append(f"{'backend':<{width}}  {backend}{why}")
    return "\n".join(lines)
