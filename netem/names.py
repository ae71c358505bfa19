"""Names and addresses of everything the testbed creates on a host.

Everything is named ``tb-...`` so that ``testbed clean`` can find it, and every address
comes from 198.18.0.0/15, the benchmarking range (RFC 2544 appendix C.2.2, RFC 6815),
so that nothing the testbed sends can reach a real network.
"""

from __future__ import annotations

import re
from pathlib import Path

from tbcore.errors import SpecError

PREFIX = "tb-"
"""Prefix of every namespace, device and process title the testbed creates."""

BENCHMARK_NET = "198.18.0.0/15"
"""RFC 2544 benchmarking range; no address outside it is ever configured."""

LINK_NAME_RE = re.compile(r"[a-z0-9]{1,10}")
"""A link name (matched whole: ``$`` would let a trailing newline through): short enough that
namespace and thread names stay readable."""

ROLES = ("client", "server", "router", "relay", "exit", "rnear", "rlink", "rlinkb", "rexit")
"""Namespaces a link may have: the endpoints, the one-link kernel router, the relay and exit
nodes of multi-link topologies (:mod:`netem.topologyspec`) and, on the kernel backend, one
router per edge (``r`` + the edge's short name)."""

CLIENT_ADDR = "198.18.1.2"
"""The client's address, on both backends."""
SERVER_ADDR = "198.18.2.2"
"""The server's address, on both backends."""
ROUTER_CLIENT_ADDR = "198.18.1.1"
"""The router's address on the client side (kernel backend: the client's gateway)."""
ROUTER_SERVER_ADDR = "198.18.2.1"
"""The router's address on the server side (kernel backend: the server's gateway)."""
PREFIX_LEN = 24
CLIENT_NET = "198.18.1.0/24"
SERVER_NET = "198.18.2.0/24"

DEVICE_IN_NS = "tb-eth"
"""Name of the emulated interface inside the client and server namespaces (veth or TUN)."""

STATE_DIR = Path("/run/testbed")
"""Where a persistent link keeps its state (one JSON file per link) and emulator pid files."""


def check_link_name(name: str) -> str:
    if not isinstance(name, str) or not LINK_NAME_RE.fullmatch(name):
        raise SpecError(
            "name", f"{name!r}: a link name is 1-10 lowercase letters or digits (e.g. demo, t1)"
        )
    return name


def namespace(link: str, role: str) -> str:
    """``tb-demo-client`` and so on."""
    if role not in ROLES:
        raise SpecError("role", f"must be one of {ROLES}, got {role!r}")
    return f"{PREFIX}{check_link_name(link)}-{role}"


def state_file(link: str) -> Path:
    return STATE_DIR / "links" / f"{check_link_name(link)}.json"
