"""Namespaces, devices, addresses, routes and offloads of an emulated path, via pyroute2.

Two shapes, one per backend (names from :mod:`netem.names`)::

    kernel (netem), tb-N-client / tb-N-router / tb-N-server:
      client tb-eth 198.18.1.2 <-veth-> router tb-to-client 198.18.1.1
      router tb-to-server 198.18.2.1 <-veth-> server tb-eth 198.18.2.2
      client: route 198.18.2.0/24 via 198.18.1.1; server: 198.18.1.0/24 via 198.18.2.1

    userspace, tb-N-client / tb-N-server:
      client tb-eth (TUN) 198.18.1.2/24, route 198.18.2.0/24 dev tb-eth
      server tb-eth (TUN) 198.18.2.2/24, route 198.18.1.0/24 dev tb-eth
      the emulator process moves packets between the two TUN devices

No namespace has a default route or an address outside 198.18.0.0/15; IPv6 is disabled in
every namespace (no fe80:: addresses, no solicitations). Veth ends are created directly in
their namespaces (IFLA_NET_NS_FD on both ends), so a crash never leaves a device in the
host's namespace. Everything here is I/O; the backends decide what to build.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyroute2 import MPTCP, IPRoute, netns
from pyroute2.ethtool.ioctl import IoctlEthtool

from netem import names, sysctl
from netem.nsexec import NETNS_RUN_DIR, in_netns
from netem.topologyspec import SOURCE_RULE_PRIORITY, SOURCE_RULE_TABLE, Topology
from tbcore.errors import SpecError

ROUTER_DEVICES = {"client": "tb-to-client", "server": "tb-to-server"}
"""Names of the router's interfaces (kernel backend), by the side they face."""

TUN_DEVICE_PATH = "/dev/net/tun"
TUNSETIFF = 0x400454CA
TUNSETPERSIST = 0x400454CB
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
"""From linux/if_tun.h: a layer-3 device, no 4-byte packet-information header."""

TUN_TXQUEUELEN_PACKETS = 10000
"""Length of the TUN device's queue toward the emulator. The kernel drops (tx_dropped) when
it is full, before the emulator sees the packet, so it is much longer than a burst the
emulator could leave unread (the default, 500, is 1.8 ms at 333 Mbit/s)."""

MERGING_OFFLOADS = (
    "tx-generic-segmentation",
    "tx-tcp-segmentation",
    "tx-tcp6-segmentation",
    "tx-tcp-ecn-segmentation",
    "tx-tcp-accecn-segmentation",
    "tx-tcp-mangleid-segmentation",
    "tx-udp-segmentation",
    "tx-gso-list",
    "tx-gso-partial",
    "rx-gro",
    "rx-gro-list",
    "rx-gro-hw",
    "rx-udp-gro-forwarding",
    "rx-lro",
)
"""Features that merge or split packets (GSO/TSO/GRO/LRO): off on emulated interfaces, so
that loss, queueing and timestamps apply to wire-sized packets."""

RT_TABLE_MAIN = 254


@dataclass(frozen=True)
class Endpoint:
    """One end of the path as a program sees it."""

    role: str
    """``client`` or ``server``."""
    ns: str
    device: str
    addr: str
    peer_net: str
    """The other end's /24: the one route out of this namespace."""
    gateway: str | None
    """Next hop toward ``peer_net`` (the router), or None for a TUN (point-to-point)."""


_ENDS = (
    ("client", names.CLIENT_ADDR, names.SERVER_NET, names.ROUTER_CLIENT_ADDR),
    ("server", names.SERVER_ADDR, names.CLIENT_NET, names.ROUTER_SERVER_ADDR),
)
"""Per role: its address, the peer's /24 and the router's address on its side."""


def endpoints(link: str, backend: str) -> dict[str, Endpoint]:
    """The client and server ends of link ``link`` on ``backend`` (``netem``/``userspace``)."""
    routed = backend == "netem"
    return {
        role: Endpoint(
            role,
            names.namespace(link, role),
            names.DEVICE_IN_NS,
            addr,
            peer_net,
            router_addr if routed else None,
        )
        for role, addr, peer_net, router_addr in _ENDS
    }


# --- namespaces ---------------------------------------------------------------------------


def list_namespaces(prefix: str = names.PREFIX) -> list[str]:
    """Named namespaces (``/run/netns``) starting with ``prefix``, sorted."""
    try:
        entries = os.listdir(NETNS_RUN_DIR)
    except FileNotFoundError:
        return []
    return sorted(e for e in entries if e.startswith(prefix))


def namespace_exists(ns: str) -> bool:
    return (NETNS_RUN_DIR / ns).exists()


def create_namespace(ns: str) -> None:
    """Create namespace ``ns`` (refused if it exists), bring ``lo`` up, switch IPv6 off."""
    if not ns.startswith(names.PREFIX):
        raise SpecError("namespace", f"{ns!r}: the testbed creates only tb- namespaces")
    if namespace_exists(ns):
        raise SpecError("namespace", f"{ns} already exists (run: testbed clean --name ...)")
    netns.create(ns)
    for name, value in sysctl.ISOLATION_SYSCTLS.items():
        sysctl.write(ns, name, value)
    with ipr(ns) as ip:
        ip.link("set", index=ip.link_lookup(ifname="lo")[0], state="up")


def delete_namespace(ns: str) -> bool:
    """Remove namespace ``ns``; False if it was not there. Devices inside go with it once no
    process holds the namespace (kill those first: see :mod:`netem.clean`)."""
    if not namespace_exists(ns):
        return False
    try:
        netns.remove(ns)
    except FileNotFoundError:
        return False
    return True


@contextmanager
def ipr(ns: str | None = None) -> Iterator[IPRoute]:
    """An RTNL socket in namespace ``ns`` (None: the host's). Never creates the namespace."""
    if ns is not None and not namespace_exists(ns):
        raise SpecError("namespace", f"{ns!r} does not exist (is the link up?)")
    ip = IPRoute() if ns is None else IPRoute(netns=ns, flags=0)
    try:
        yield ip
    finally:
        ip.close()


def _index(ip: IPRoute, device: str) -> int:
    found = ip.link_lookup(ifname=device)
    if not found:
        raise SpecError("device", f"{device!r} not found")
    return found[0]


# --- devices ------------------------------------------------------------------------------


def create_veth(a_ns: str, a_dev: str, b_ns: str, b_dev: str, *, mtu_bytes: int) -> None:
    """A veth pair with one end in each namespace, both up, offloads off."""
    with ipr() as ip:
        ip.link(
            "add",
            ifname=a_dev,
            kind="veth",
            net_ns_fd=a_ns,
            peer={"ifname": b_dev, "net_ns_fd": b_ns},
        )
    for ns, dev in ((a_ns, a_dev), (b_ns, b_dev)):
        with ipr(ns) as ip:
            ip.link("set", index=_index(ip, dev), mtu=mtu_bytes)
        disable_offloads(ns, dev)
        with ipr(ns) as ip:
            ip.link("set", index=_index(ip, dev), state="up")


def create_tun(ns: str, dev: str, *, mtu_bytes: int) -> None:
    """A persistent layer-3 TUN device (IFF_TUN | IFF_NO_PI) in ``ns``, up, offloads off.

    Persistent: it outlives this call, and the emulator attaches to it by name with the same
    flags. It goes away with its namespace.
    """
    with in_netns(ns):
        fd = os.open(TUN_DEVICE_PATH, os.O_RDWR | os.O_CLOEXEC)
        try:
            ifr = struct.pack("16sH22x", dev.encode(), IFF_TUN | IFF_NO_PI)
            fcntl.ioctl(fd, TUNSETIFF, ifr)
            fcntl.ioctl(fd, TUNSETPERSIST, 1)
        finally:
            os.close(fd)
    with ipr(ns) as ip:
        ip.link("set", index=_index(ip, dev), mtu=mtu_bytes, txqlen=TUN_TXQUEUELEN_PACKETS)
    disable_offloads(ns, dev)
    with ipr(ns) as ip:
        ip.link("set", index=_index(ip, dev), state="up")


def devices(ns: str) -> list[str]:
    with ipr(ns) as ip:
        return [link.get_attr("IFLA_IFNAME") for link in ip.get_links()]


# --- offloads -----------------------------------------------------------------------------


def offloads(ns: str, dev: str) -> dict[str, bool]:
    """The merging offloads (:data:`MERGING_OFFLOADS`) the device has, and whether each is on."""
    with in_netns(ns):
        eth = IoctlEthtool(dev)
    try:
        features = eth.get_features()
        return {n: features.is_active(n) for n in MERGING_OFFLOADS if n in features}
    finally:
        eth.close()


def disable_offloads(ns: str, dev: str) -> dict[str, bool]:
    """Switch every changeable merging offload off; returns what is still on (fixed ones)."""
    with in_netns(ns):
        eth = IoctlEthtool(dev)  # its socket, hence its ioctls, belong to ``ns``
    try:
        features = eth.get_features()
        for name in MERGING_OFFLOADS:
            if name in features and features.is_available(name) and features.is_active(name):
                features[name] = False
        eth.set_features(features)
        after = eth.get_features()
        return {n: True for n in MERGING_OFFLOADS if n in after and after.is_active(n)}
    finally:
        eth.close()


# --- addresses and routes -----------------------------------------------------------------


def _check_benchmark(field: str, address: str) -> None:
    net = ipaddress.ip_network(address, strict=False)
    if not net.subnet_of(ipaddress.ip_network(names.BENCHMARK_NET)):
        raise SpecError(field, f"{address} is outside {names.BENCHMARK_NET}")


def add_address(ns: str, dev: str, address: str, prefixlen: int = names.PREFIX_LEN) -> None:
    _check_benchmark("address", f"{address}/{prefixlen}")
    with ipr(ns) as ip:
        ip.addr("add", index=_index(ip, dev), address=address, prefixlen=prefixlen)


def addresses(ns: str) -> list[tuple[str, str]]:
    """(device, address/prefix) of every IPv4 and IPv6 address in ``ns``."""
    out = []
    with ipr(ns) as ip:
        by_index = {link["index"]: link.get_attr("IFLA_IFNAME") for link in ip.get_links()}
        for msg in ip.get_addr():
            out.append(
                (
                    by_index.get(msg["index"], "?"),
                    f"{msg.get_attr('IFA_ADDRESS')}/{msg['prefixlen']}",
                )
            )
    return out


ROUTE_METRICS = {
    "initcwnd": "RTAX_INITCWND",
    "initrwnd": "RTAX_INITRWND",
    "quickack": "RTAX_QUICKACK",
}
"""Route metrics the testbed sets (ip-route(8) ``initcwnd``/``initrwnd``, RFC 6928, and
``quickack``: 1 turns delayed ACKs off for every TCP connection on the route)."""


def set_route(
    ns: str,
    dst: str,
    *,
    dev: str,
    gateway: str | None = None,
    initcwnd: int | None = None,
    initrwnd: int | None = None,
    quickack: bool | None = None,
) -> None:
    """Add or replace the route to ``dst`` (a /24 of 198.18.0.0/15), with route metrics."""
    _check_benchmark("route", dst)
    if gateway is not None:
        _check_benchmark("gateway", gateway)
    metrics: dict[str, int] = {}
    for key, value in (("initcwnd", initcwnd), ("initrwnd", initrwnd)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
            raise SpecError(key, f"must be a whole number of segments in [1, 65535], got {value!r}")
        metrics[key] = value
    if quickack is not None:
        if not isinstance(quickack, bool):
            raise SpecError("quickack", f"must be true or false, got {quickack!r}")
        metrics["quickack"] = int(quickack)
    kwargs: dict[str, Any] = {"dst": dst, "table": RT_TABLE_MAIN}
    with ipr(ns) as ip:
        kwargs["oif"] = _index(ip, dev)
        if gateway is not None:
            kwargs["gateway"] = gateway
        if metrics:
            kwargs["metrics"] = metrics
        ip.route("replace", **kwargs)


def routes(ns: str) -> list[dict[str, Any]]:
    """IPv4 routes of the main table: dst (CIDR or ``default``), gateway, dev, metrics."""
    out = []
    with ipr(ns) as ip:
        by_index = {link["index"]: link.get_attr("IFLA_IFNAME") for link in ip.get_links()}
        for msg in ip.get_routes(family=2, table=RT_TABLE_MAIN):
            dst = msg.get_attr("RTA_DST")
            metrics = msg.get_attr("RTA_METRICS")
            values = {}
            if metrics is not None:
                for key, nla_name in ROUTE_METRICS.items():
                    value = metrics.get_attr(nla_name)
                    if value is not None:
                        values[key] = value
            out.append(
                {
                    "dst": "default" if dst is None else f"{dst}/{msg['dst_len']}",
                    "gateway": msg.get_attr("RTA_GATEWAY"),
                    "dev": by_index.get(msg.get_attr("RTA_OIF"), "?"),
                    "metrics": values,
                }
            )
    return out


NUD_PERMANENT = 0x80
"""linux/neighbour.h: a static neighbour entry, never resolved or re-validated by ARP."""


def mac_address(ns: str, dev: str) -> str:
    with ipr(ns) as ip:
        return ip.get_links(_index(ip, dev))[0].get_attr("IFLA_ADDRESS")


def set_permanent_neighbour(ns: str, dev: str, address: str, lladdr: str) -> None:
    """A static ARP entry: ``address`` is at ``lladdr`` on ``dev``."""
    _check_benchmark("neighbour", address)
    with ipr(ns) as ip:
        ip.neigh(
            "replace", dst=address, lladdr=lladdr, ifindex=_index(ip, dev), state=NUD_PERMANENT
        )


def neighbours(ns: str) -> list[dict[str, Any]]:
    """IPv4 neighbour entries of ``ns``: address, MAC, device, state (NUD_* bits)."""
    out = []
    with ipr(ns) as ip:
        by_index = {link["index"]: link.get_attr("IFLA_IFNAME") for link in ip.get_links()}
        for msg in ip.get_neighbours(family=2):
            out.append(
                {
                    "dst": msg.get_attr("NDA_DST"),
                    "lladdr": msg.get_attr("NDA_LLADDR"),
                    "dev": by_index.get(msg["ifindex"], "?"),
                    "state": msg["state"],
                }
            )
    return out


# --- the two shapes -----------------------------------------------------------------------


def build_router_path(link: str, *, mtu_bytes: int) -> None:
    """Namespaces, veths, addresses, routes and forwarding of the kernel backend's path."""
    eps = endpoints(link, "netem")
    router = names.namespace(link, "router")
    for ns in (eps["client"].ns, router, eps["server"].ns):
        create_namespace(ns)
    sysctl.write(router, "net.ipv4.ip_forward", "1")
    router_addr = {"client": names.ROUTER_CLIENT_ADDR, "server": names.ROUTER_SERVER_ADDR}
    for role, ep in eps.items():
        create_veth(ep.ns, ep.device, router, ROUTER_DEVICES[role], mtu_bytes=mtu_bytes)
        add_address(ep.ns, ep.device, ep.addr)
        add_address(router, ROUTER_DEVICES[role], router_addr[role])
        set_route(ep.ns, ep.peer_net, dev=ep.device, gateway=ep.gateway)
        # No ARP on the emulated path: its requests and replies would cross the netem qdiscs
        # (the first packet of a run waited two extra one-way delays, measured in the VM)
        # and be lost with the configured loss mid-experiment. Permanent entries both ways.
        set_permanent_neighbour(
            ep.ns, ep.device, router_addr[role], mac_address(router, ROUTER_DEVICES[role])
        )
        set_permanent_neighbour(
            router, ROUTER_DEVICES[role], ep.addr, mac_address(ep.ns, ep.device)
        )


def build_tun_path(link: str, *, mtu_bytes: int) -> None:
    """Namespaces and persistent TUN devices of the userspace backend (no emulator yet)."""
    for ep in endpoints(link, "userspace").values():
        create_namespace(ep.ns)
        create_tun(ep.ns, ep.device, mtu_bytes=mtu_bytes)
        add_address(ep.ns, ep.device, ep.addr)
        set_route(ep.ns, ep.peer_net, dev=ep.device)


# --- multi-link topologies (netem.topologyspec) ------------------------------------------

MULTIHOMED_SYSCTLS = {
    "net.ipv4.conf.all.rp_filter": "0",
    "net.ipv4.conf.default.rp_filter": "0",
}
"""A node with two paths receives on one device what its routes would send on the other
(MPTCP subflows, replies over the second path): reverse-path filtering would drop them."""


def node_namespace(link: str, node: str) -> str:
    return names.namespace(link, node)


def edge_router_namespace(link: str, short: str) -> str:
    """Kernel backend: the router namespace of one edge (``tb-NAME-rlink``...)."""
    return names.namespace(link, f"r{short}")


def _prepare_node(ns: str, *, forwarding: bool) -> None:
    create_namespace(ns)
    for key, value in MULTIHOMED_SYSCTLS.items():
        sysctl.write(ns, key, value)
    if forwarding:
        sysctl.write(ns, "net.ipv4.ip_forward", "1")


def add_source_rule(
    ns: str, src: str, *, dev: str, gateway: str | None = None, dst: str = names.BENCHMARK_NET
) -> None:
    """Packets from ``src`` use their own table: ``dst`` over ``dev`` (policy routing)."""
    _check_benchmark("rule", src)
    with ipr(ns) as ip:
        kwargs: dict[str, Any] = {"dst": dst, "table": SOURCE_RULE_TABLE, "oif": _index(ip, dev)}
        if gateway is not None:
            kwargs["gateway"] = gateway
        ip.route("replace", **kwargs)
        ip.rule("add", table=SOURCE_RULE_TABLE, priority=SOURCE_RULE_PRIORITY, src=src, src_len=32)


def rules(ns: str) -> list[dict[str, Any]]:
    """IPv4 policy rules other than the kernel's three defaults: src, table, priority."""
    out = []
    with ipr(ns) as ip:
        for msg in ip.get_rules(family=2):
            table = msg.get_attr("FRA_TABLE") or msg["table"]
            if table in (253, 254, 255):
                continue
            out.append(
                {
                    "src": msg.get_attr("FRA_SRC"),
                    "table": table,
                    "priority": msg.get_attr("FRA_PRIORITY"),
                }
            )
    return out


MPTCP_FLAG_SUBFLOW = 0x2
"""linux/mptcp.h MPTCP_PM_ADDR_FLAG_SUBFLOW: the in-kernel path manager opens a subflow from
this endpoint's address to the peer of every MPTCP connection."""
MPTCP_SUBFLOWS = 2
"""Limits of the in-kernel path manager: extra subflows per connection, and ADD_ADDRs taken
(two paths: one extra subflow is enough; 2 leaves room for a re-established one)."""


def configure_mptcp(ns: str, subflow_endpoints: list[tuple[str, str]]) -> dict[str, Any]:
    """Set the path manager's limits in ``ns`` and add a ``subflow`` endpoint for each
    (address, device); returns what the kernel then reports (``ip mptcp`` via pyroute2)."""

    with in_netns(ns):
        mptcp = MPTCP()
    try:
        mptcp.limits("set", subflows=MPTCP_SUBFLOWS, add_addr_accepted=MPTCP_SUBFLOWS)
        for addr, dev in subflow_endpoints:
            _check_benchmark("mptcp endpoint", addr)
            with ipr(ns) as ip:
                _index(ip, dev)  # the device must exist; the source rule routes over it
            # pyroute2 encodes IF_IDX as a string ('hex' NLA): the subflow's source address
            # already picks the device through the link_b source rule, so it is left out
            mptcp.endpoint("add", addr=addr, flags=MPTCP_FLAG_SUBFLOW)
        return mptcp_state_of(mptcp)
    finally:
        mptcp.close()


def mptcp_state_of(mptcp: Any) -> dict[str, Any]:
    limits = mptcp.limits("show")
    endpoints = mptcp.endpoint("show")
    out: dict[str, Any] = {"limits": {}, "endpoints": []}
    for msg in limits:
        out["limits"] = {
            "subflows": msg.get_attr("MPTCP_PM_ATTR_SUBFLOWS"),
            "add_addr_accepted": msg.get_attr("MPTCP_PM_ATTR_RCV_ADD_ADDRS"),
        }
    for msg in endpoints:
        addr = msg.get_attr("MPTCP_PM_ATTR_ADDR")
        out["endpoints"].append(
            {
                "addr": addr.get_attr("MPTCP_PM_ADDR_ATTR_ADDR4"),
                "id": addr.get_attr("MPTCP_PM_ADDR_ATTR_ID"),
                "flags": addr.get_attr("MPTCP_PM_ADDR_ATTR_FLAGS"),
            }
        )
    return out


def configure_topology_mptcp(link: str, topo: Topology) -> None:
    """Two paths: the client's second address is a subflow endpoint; both ends' limits (a
    path without a second address for the client has nothing to configure)."""
    if not topo.source_rules("client"):
        return
    for node in ("client", "server"):
        endpoints = (
            [(i.addr, i.device) for i in topo.source_rules(node)] if node == "client" else []
        )
        configure_mptcp(node_namespace(link, node), endpoints)


def build_topology_tun(link: str, topo: Topology, *, mtu_bytes: int) -> None:
    """Userspace backend: a namespace per node, a TUN device per interface, routes and source
    rules; one emulator per edge then joins the two TUNs of its ends."""
    for node in topo.nodes:
        _prepare_node(node_namespace(link, node), forwarding=topo.forwarding(node))
    for iface in topo.interfaces():
        ns = node_namespace(link, iface.node)
        create_tun(ns, iface.device, mtu_bytes=mtu_bytes)
        add_address(ns, iface.device, iface.addr)
    for node in topo.nodes:
        ns = node_namespace(link, node)
        for route in topo.routes(node):
            set_route(ns, route.dst, dev=route.device)
        for iface in topo.source_rules(node):
            add_source_rule(ns, iface.addr, dev=iface.device)
    configure_topology_mptcp(link, topo)


def build_topology_routers(link: str, topo: Topology, *, mtu_bytes: int) -> dict[str, str]:
    """Kernel backend: a namespace per node and a router namespace per edge (its netem
    qdiscs go on ``tb-to-client``/``tb-to-server`` as on the one-link path). Returns the
    router namespace of each edge."""
    for node in topo.nodes:
        _prepare_node(node_namespace(link, node), forwarding=topo.forwarding(node))
    routers = {}
    for edge in topo.edges:
        router = edge_router_namespace(link, edge.short)
        _prepare_node(router, forwarding=True)
        routers[edge.name] = router
        sides = {"a": edge.a, "b": edge.b}
        devices = {"a": ROUTER_DEVICES["client"], "b": ROUTER_DEVICES["server"]}
        for side, node in sides.items():
            iface = topo.interface(node, edge.name)
            ns = node_namespace(link, node)
            create_veth(ns, iface.device, router, devices[side], mtu_bytes=mtu_bytes)
            add_address(ns, iface.device, iface.addr)
            add_address(router, devices[side], iface.router_addr)
            set_permanent_neighbour(
                ns, iface.device, iface.router_addr, mac_address(router, devices[side])
            )
            set_permanent_neighbour(
                router, devices[side], iface.addr, mac_address(ns, iface.device)
            )
        for side, nets in topo.router_routes(edge.name).items():
            gateway = topo.interface(sides[side], edge.name).addr
            for net in nets:
                set_route(router, net, dev=devices[side], gateway=gateway)
    for node in topo.nodes:
        ns = node_namespace(link, node)
        for route in topo.routes(node):
            gateway = topo.interface(node, route.via_edge).router_addr
            set_route(ns, route.dst, dev=route.device, gateway=gateway)
        for iface in topo.source_rules(node):
            add_source_rule(ns, iface.addr, dev=iface.device, gateway=iface.router_addr)
    configure_topology_mptcp(link, topo)
    return routers


def link_namespaces(link: str) -> list[str]:
    """Every namespace link ``link`` may have, whatever its backend."""
    return [names.namespace(link, role) for role in names.ROLES]


def remove_path(link: str) -> list[str]:
    """Delete the namespaces of ``link``; returns those that existed."""
    return [ns for ns in link_namespaces(link) if delete_namespace(ns)]
