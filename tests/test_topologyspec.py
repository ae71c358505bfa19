"""Topology as data: edges per shape, addresses, routes, router routes, source rules."""

from __future__ import annotations

import pytest
from support_inputs import assert_spec_error

from netem.events import Outage
from netem.topologyspec import Topology, parse_topology
from tbcore.errors import SpecError

RELAY = "topology=relay;near_link=rtt=2ms;link=dc-longhaul-clean"
DUAL = "topology=dual;link=rate=20mbit;link_b=rate=10mbit"
DUAL_EXIT = DUAL + ";exit_link=rate=24mbit"


def routes(topo: Topology, node: str) -> dict[str, str]:
    return {r.dst: r.via_edge for r in topo.routes(node)}


def test_a_link_string_is_one_direct_link_with_the_old_addresses() -> None:
    topo = parse_topology("rtt=200ms,rate=333mbit")
    assert topo.kind == "direct" and topo.edge_names == ("link",)
    assert topo.addr("client") == "198.18.1.2" and topo.addr("server") == "198.18.2.2"
    assert topo.device("client", "link") == topo.device("server", "link") == "tb-eth"
    assert routes(topo, "client") == {"198.18.2.0/24": "link"}


def test_relay_chain_routes_and_forwarding() -> None:
    topo = parse_topology(RELAY)
    assert topo.nodes == ("client", "relay", "server")
    assert topo.edge("link").spec.rtt_s == pytest.approx(0.2)
    assert topo.edge("near_link").spec.rtt_s == pytest.approx(0.002)
    assert topo.addr("server") == "198.18.2.2" and topo.addr("client") == "198.18.1.2"
    # everything the client sends leaves over the near hop; the relay forwards
    assert set(routes(topo, "client").values()) == {"near_link"}
    assert routes(topo, "relay") == {"198.18.1.0/24": "near_link", "198.18.2.0/24": "link"}
    assert topo.forwarding("relay") and not topo.forwarding("client")
    assert topo.router_routes("near_link") == {"a": [], "b": ["198.18.6.0/24", "198.18.2.0/24"]}


def test_dual_paths_second_address_and_source_rule() -> None:
    topo = parse_topology(DUAL)
    assert topo.addr("client", "link_b") == "198.18.3.2"
    assert topo.device("client", "link_b") == "tb-linkb"
    assert routes(topo, "client") == {"198.18.2.0/24": "link", "198.18.4.0/24": "link_b"}
    assert routes(topo, "server") == {"198.18.1.0/24": "link", "198.18.3.0/24": "link_b"}
    assert [i.addr for i in topo.source_rules("client")] == ["198.18.3.2"]
    # the link_b router sends what came from the second address on to the server
    assert topo.router_routes("link_b") == {"a": ["198.18.1.0/24"], "b": ["198.18.2.0/24"]}


def test_dual_with_a_shared_exit() -> None:
    topo = parse_topology(DUAL_EXIT)
    assert topo.nodes == ("client", "exit", "server")
    assert topo.edge("exit_link").spec.up.rate_bps == 24e6
    assert topo.device("server", "exit_link") == "tb-eth"
    # the server's replies to either client address cross the exit link
    assert set(routes(topo, "server").values()) == {"exit_link"}
    assert routes(topo, "exit")["198.18.3.0/24"] == "link_b"
    assert routes(topo, "exit")["198.18.1.0/24"] == "link"
    assert topo.router_routes("link_b")["b"] == ["198.18.7.0/24", "198.18.9.0/24", "198.18.2.0/24"]
    assert topo.source_rules("exit") == []


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("topology=relay;link=rtt=10ms", "near_link"),
        ("topology=dual;link=rtt=10ms", "link_b"),
        ("topology=direct;link=rtt=10ms;link_b=rtt=1ms", "link_b"),
        ("topology=relay;near_link=rtt=1ms;link=rtt=10ms;exit_link=rtt=1ms", "exit_link"),
        ("topology=ring;link=rtt=10ms", "topology"),
        ("topology=relay;near_link=rtt=1ms", "link"),
        ("topology=relay;near_link=rtt=2;link=rtt=10ms", "near_link.up.rtt"),
        ("topology=dual;link=rtt=1ms;link_b=rtt=1ms;lnk=rtt=1ms", "lnk"),
        ("topology=dual;link=rtt=1ms;link=rtt=2ms;link_b=rtt=1ms", "link"),
    ],
)
def test_bad_topologies_name_the_field(text: str, field: str) -> None:
    assert_spec_error(lambda: parse_topology(text), field)


def test_round_trip_with_events_and_describe() -> None:
    outage = Outage(at_s=1.0, duration_s=0.5)
    topo = Topology.build(
        "dual", link="rate=20mbit", link_b="rate=10mbit", events={"link_b": [outage]}
    )
    assert topo.edge("link_b").events == (outage,)
    assert Topology.from_dict(topo.to_dict()) == topo
    described = topo.describe()
    assert set(described["nodes"]) == {"client", "server"}
    assert set(described["edges"]) == {"link", "link_b"}
    with pytest.raises(SpecError, match="no such edge"):
        Topology.build("direct", link="rtt=1ms", events={"link_b": [outage]})
