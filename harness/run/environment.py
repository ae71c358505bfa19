"""Environment capture: what a result needs to say how it was made (tool and library
versions, kernel, sysctls and qdiscs of the namespaces, the link as built)."""

from __future__ import annotations

import os
import platform
from importlib import metadata
from typing import Any

from netem import topology

VERSIONED_PACKAGES = (
    "aioquic",
    "h2",
    "cryptography",
    "pyroute2",
    "scapy",
    "pandas",
    "numpy",
    "matplotlib",
    "uvloop",
    "pyarrow",
    "rich",
)
"""The libraries whose versions every manifest records."""

TCP_SYSCTLS = (
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_slow_start_after_idle",
    "net.ipv4.tcp_no_metrics_save",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.core.rmem_max",
    "net.core.wmem_max",
    "net.ipv4.tcp_sack",
    "net.ipv4.tcp_timestamps",
    "net.ipv4.tcp_ecn",
)
"""The sysctls of the namespaces that shape TCP (recorded, as Flent does)."""

ROLES = ("client", "server")


HOST_ENV = "TESTBED_HOST"
"""The name a host's runs record in runs.csv's ``host`` (default: the host name): two workers
on one machine (tests, harness.cluster) give each its own."""


def host_label() -> str:
    """This host's name for the ``host`` column: :data:`HOST_ENV`, else the host name."""
    return os.environ.get(HOST_ENV, "").strip() or platform.node() or "unknown"


def versions() -> dict[str, str]:
    out = {"testbed": _version("transport-testbed"), "python": platform.python_version()}
    for package in VERSIONED_PACKAGES:
        out[package] = _version(package)
    return out


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def environment(link: Any, backend: str) -> dict[str, Any]:
    """The host, and the namespaces' sysctls and qdiscs of a link that is up (``backend``:
    the path's, harness.run.backends; a real path's qdiscs are the other host's business)."""
    info: dict[str, Any] = {
        "kernel": platform.release(),
        "machine": platform.machine(),
        "hostname": platform.node(),
        "cpus": os.cpu_count(),
        "backend": backend,
        "link_name": link.name,
    }
    try:
        info["sysctls"] = _sysctls(link)
    except Exception as err:  # recorded, never fatal: the run itself does not need it
        info["sysctls_error"] = str(err)
    if backend != "real":
        try:
            info["qdiscs"] = _qdiscs(link)
        except Exception as err:
            info["qdiscs_error"] = str(err)
    try:
        info["link"] = link.show()
    except Exception as err:  # recorded, never fatal, as the sysctls and qdiscs above
        info["link_error"] = str(err)
    return info


def _sysctls(link: Any) -> dict[str, Any]:
    """Each end's TCP sysctls, as the link reads them (a remote path asks the other host)."""
    return {role: link.sysctls(role, list(TCP_SYSCTLS)) for role in ROLES}


def _qdiscs(link: Any) -> dict[str, Any]:
    qdiscs: dict[str, Any] = {}
    for role in ROLES:
        with topology.ipr(link.ns(role)) as ip:
            qdiscs[role] = [
                {
                    "ifindex": q["index"],
                    "kind": q.get_attr("TCA_KIND"),
                    "handle": q["handle"],
                    "parent": q["parent"],
                }
                for q in ip.get_qdiscs()
            ]
    return qdiscs
