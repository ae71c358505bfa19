"""Namespaces, devices, addresses, routes and offloads, built for real (root)."""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from netem import names, sysctl, topology
from netem.clean import clean
from netem.nsexec import in_netns
from tbcore.errors import SpecError

pytestmark = pytest.mark.timeout(60)

BENCHMARK = ipaddress.ip_network(names.BENCHMARK_NET)


def _built_path(link: str, build: Callable[..., None]) -> Iterator[str]:
    """A path built under ``link`` by ``build`` (1500-byte MTU), cleaned before and after."""
    clean(link)
    build(link, mtu_bytes=1500)
    yield link
    clean(link)


@pytest.fixture
def tun_path() -> Iterator[str]:
    yield from _built_path("tp20", topology.build_tun_path)


@pytest.fixture
def router_path() -> Iterator[str]:
    yield from _built_path("tp21", topology.build_router_path)


def _udp_echo_once(client_ns: str, server_ns: str, server_addr: str) -> bytes:
    with in_netns(server_ns):
        srv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        srv.bind((server_addr, 9911))
    with in_netns(client_ns):
        cli = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    srv.settimeout(5)
    cli.settimeout(5)

    def echo() -> None:
        data, peer = srv.recvfrom(2048)
        srv.sendto(data.upper(), peer)

    thread = threading.Thread(target=echo)
    thread.start()
    try:
        cli.sendto(b"ping", (server_addr, 9911))
        data, _ = cli.recvfrom(2048)
    finally:
        thread.join()
        srv.close()
        cli.close()
    return data


def _assert_isolated(ns: str) -> None:
    for dev, cidr in topology.addresses(ns):
        iface = ipaddress.ip_interface(cidr)
        if dev == "lo":
            assert iface.ip.is_loopback
        else:
            assert iface.version == 4 and iface.network.subnet_of(BENCHMARK), (dev, cidr)
    for route in topology.routes(ns):
        assert route["dst"] != "default", route
        assert ipaddress.ip_network(route["dst"]).subnet_of(BENCHMARK), route


def device_info(ns: str, dev: str) -> dict[str, Any]:
    """Kind, MTU and queue length of one device, as the kernel reports them."""
    with topology.ipr(ns) as ip:
        link = ip.get_links(ip.link_lookup(ifname=dev)[0])[0]
    info = link.get_attr("IFLA_LINKINFO")
    return {
        "kind": None if info is None else info.get_attr("IFLA_INFO_KIND"),
        "mtu_bytes": link.get_attr("IFLA_MTU"),
        "txqlen": link.get_attr("IFLA_TXQLEN"),
    }


@pytest.mark.root
def test_tun_path_shape(tun_path: str) -> None:
    link = tun_path
    eps = topology.endpoints(link, "userspace")
    for ep in eps.values():
        assert topology.namespace_exists(ep.ns)
        info = device_info(ep.ns, "tb-eth")
        assert info["kind"] == "tun"
        assert info["mtu_bytes"] == 1500
        assert info["txqlen"] == topology.TUN_TXQUEUELEN_PACKETS
        assert (ep.device, f"{ep.addr}/24") in topology.addresses(ep.ns)
        peer = [r for r in topology.routes(ep.ns) if r["dst"] == ep.peer_net]
        assert peer and peer[0]["dev"] == "tb-eth" and peer[0]["gateway"] is None
        assert not any(topology.offloads(ep.ns, "tb-eth").values())
        assert sysctl.read(ep.ns, "net.ipv6.conf.all.disable_ipv6") == "1"
        _assert_isolated(ep.ns)
    assert not topology.namespace_exists(names.namespace(link, "router"))


@pytest.mark.root
def test_router_path_shape_and_forwarding(router_path: str) -> None:
    link = router_path
    router = names.namespace(link, "router")
    eps = topology.endpoints(link, "netem")
    assert sysctl.read(router, "net.ipv4.ip_forward") == "1"
    for role, ep in eps.items():
        assert device_info(ep.ns, "tb-eth")["kind"] == "veth"
        peer = [r for r in topology.routes(ep.ns) if r["dst"] == ep.peer_net]
        assert peer and peer[0]["gateway"] == ep.gateway
        assert not any(topology.offloads(ep.ns, "tb-eth").values())
        assert not any(topology.offloads(router, topology.ROUTER_DEVICES[role]).values())
        _assert_isolated(ep.ns)
    _assert_isolated(router)
    # static neighbours: no ARP crosses the emulated path (it would be delayed and lost)
    for role, ep in eps.items():
        router_dev = topology.ROUTER_DEVICES[role]
        entries = {n["dst"]: n for n in topology.neighbours(ep.ns)}
        assert entries[ep.gateway]["state"] == topology.NUD_PERMANENT
        assert entries[ep.gateway]["lladdr"] == topology.mac_address(router, router_dev)
        entries = {n["dst"]: n for n in topology.neighbours(router)}
        assert entries[ep.addr]["state"] == topology.NUD_PERMANENT
        assert entries[ep.addr]["lladdr"] == topology.mac_address(ep.ns, "tb-eth")
    # a datagram crosses the router both ways
    assert _udp_echo_once(eps["client"].ns, eps["server"].ns, names.SERVER_ADDR) == b"PING"


@pytest.mark.root
def test_route_metrics_set_and_reset(router_path: str) -> None:
    ep = topology.endpoints(router_path, "netem")["client"]
    topology.set_route(
        ep.ns, ep.peer_net, dev=ep.device, gateway=ep.gateway, initcwnd=40, initrwnd=60
    )
    route = next(r for r in topology.routes(ep.ns) if r["dst"] == ep.peer_net)
    assert route["metrics"] == {"initcwnd": 40, "initrwnd": 60}
    assert route["gateway"] == ep.gateway
    topology.set_route(ep.ns, ep.peer_net, dev=ep.device, gateway=ep.gateway, quickack=True)
    route = next(r for r in topology.routes(ep.ns) if r["dst"] == ep.peer_net)
    assert route["metrics"] == {"quickack": 1}
    topology.set_route(ep.ns, ep.peer_net, dev=ep.device, gateway=ep.gateway)
    route = next(r for r in topology.routes(ep.ns) if r["dst"] == ep.peer_net)
    assert route["metrics"] == {}


@pytest.mark.root
def test_route_metric_refused_when_bad(router_path: str) -> None:
    ep = topology.endpoints(router_path, "netem")["client"]
    with pytest.raises(SpecError) as err:
        topology.set_route(ep.ns, ep.peer_net, dev=ep.device, gateway=ep.gateway, initcwnd=0)
    assert err.value.field == "initcwnd"


@pytest.mark.root
def test_refuses_addresses_outside_benchmark_range(tun_path: str) -> None:
    ns = names.namespace(tun_path, "client")
    with pytest.raises(SpecError) as err:
        topology.add_address(ns, "tb-eth", "10.0.0.1")
    assert err.value.field == "address"
    with pytest.raises(SpecError):
        topology.set_route(ns, "0.0.0.0/0", dev="tb-eth")


@pytest.mark.root
def test_create_namespace_refuses_existing_and_foreign_names(tun_path: str) -> None:
    with pytest.raises(SpecError):
        topology.create_namespace(names.namespace(tun_path, "client"))
    with pytest.raises(SpecError):
        topology.create_namespace("not-ours")


@pytest.mark.root
def test_remove_path_removes_all(tun_path: str) -> None:
    removed = topology.remove_path(tun_path)
    assert sorted(removed) == sorted(
        topology.endpoints(tun_path, "userspace")[r].ns for r in ("client", "server")
    )
    assert topology.remove_path(tun_path) == []


@pytest.mark.root
def test_ipr_never_creates_a_namespace() -> None:
    with pytest.raises(SpecError), topology.ipr("tb-tp29-client"):
        pass
    assert not topology.namespace_exists("tb-tp29-client")


def test_endpoints_addresses() -> None:
    eps = topology.endpoints("demo", "netem")
    assert eps["client"].addr == "198.18.1.2" and eps["client"].gateway == "198.18.1.1"
    assert eps["server"].peer_net == "198.18.1.0/24" and eps["server"].gateway == "198.18.2.1"
    assert topology.endpoints("demo", "userspace")["client"].gateway is None


@pytest.mark.parametrize("bad", ["", "Demo", "a-b", "abcdefghijk", "ra1\n", "ra1 ", 7])
def test_link_names_are_matched_whole(bad: object) -> None:
    with pytest.raises(SpecError) as err:
        names.check_link_name(bad)  # type: ignore[arg-type]
    assert err.value.field == "name"
    assert names.check_link_name("ra1") == "ra1"
