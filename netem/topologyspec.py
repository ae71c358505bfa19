"""Topology as data: nodes, edges (a LinkSpec each), addresses and routes. Sans-I/O.

Three shapes (``topology = "direct" | "relay" | "dual"``)::

    direct   client ==link== server
    relay    client ==near_link== relay ==link== server
    dual     client ==link== server, client ==link_b== server            (two paths)
    dual     client ==link== exit, client ==link_b== exit, exit ==exit_link== server

Every edge has a :class:`netem.linkspec.LinkSpec`; its ``up`` direction runs from the end
nearer the client (``a``) to the end nearer the server (``b``). Every end of an edge is an
interface with its own /24 of 198.18.0.0/15 (:data:`SUBNETS`), so an address names a node
*and* a path: the client is 198.18.1.2 on its first path and 198.18.3.2 on ``link_b``; the
server is 198.18.2.2 whatever the shape (the same addresses as the one-link testbed).
On the kernel backend a router namespace sits on each edge with ``.1`` on both sides.

Routes (:meth:`Topology.routes`): a node reaches an interface ``(M, e)`` over the first edge
of the path from it to the far end of ``e`` (the end that is not ``M``), the path never using
``link_b`` except as its last edge: the second path carries only what is addressed to or
from it. A node with an interface on ``link_b`` also has a source rule (:meth:`source_rules`):
packets *from* its ``link_b`` address leave over ``link_b`` (MPTCP subflows, QUIC migration
and per-path sockets bind that address).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from netem.events import LinkEvent
from netem.linkspec import LinkSpec, resolve_link
from tbcore import kinds
from tbcore.errors import SpecError
from tbcore.settings import TOPOLOGIES as _SETTINGS_TOPOLOGIES

TOPOLOGIES = _SETTINGS_TOPOLOGIES
"""The shapes (defined once, with the settings knob: tbcore.settings.TOPOLOGIES)."""
EDGE_NAMES = ("near_link", "link", "link_b", "exit_link")
NODE_NAMES = ("client", "relay", "exit", "server")

NET_PREFIX = "198.18"
SUBNETS: dict[tuple[str, str], int] = {
    ("client", "near_link"): 1,
    ("client", "link"): 1,
    ("server", "link"): 2,
    ("server", "exit_link"): 2,
    ("client", "link_b"): 3,
    ("server", "link_b"): 4,
    ("relay", "near_link"): 5,
    ("relay", "link"): 6,
    ("exit", "link"): 7,
    ("exit", "link_b"): 8,
    ("exit", "exit_link"): 9,
}
"""Third octet of each interface's /24: the node is ``.2``, an edge's router ``.1``."""

EDGE_SHORT = {"near_link": "near", "link": "link", "link_b": "linkb", "exit_link": "exit"}
"""Short edge names for devices, namespaces and files (a device name has at most 15 bytes)."""

PRIMARY_DEVICE = "tb-eth"
"""The client's first interface and the server's last are called as on the one-link path."""

SOURCE_RULE_TABLE = 100
"""Routing table of the ``link_b`` source rule (any table but main 254 and local 255)."""
SOURCE_RULE_PRIORITY = 100
"""Priority of that rule: before main (32766)."""


@dataclass(frozen=True)
class Edge:
    """One emulated link between two nodes; ``up`` runs from ``a`` to ``b``."""

    name: str
    a: str
    b: str
    spec: LinkSpec
    events: tuple[LinkEvent, ...] = ()
    """Scheduled events of this edge, from link up on."""

    @property
    def short(self) -> str:
        return EDGE_SHORT[self.name]

    def other(self, node: str) -> str:
        return self.b if node == self.a else self.a


@dataclass(frozen=True)
class Interface:
    """One end of an edge: a device with an address in a node."""

    node: str
    edge: str
    device: str
    subnet: int

    @property
    def addr(self) -> str:
        return f"{NET_PREFIX}.{self.subnet}.2"

    @property
    def router_addr(self) -> str:
        """The address of the edge's router on this side (kernel backend)."""
        return f"{NET_PREFIX}.{self.subnet}.1"

    @property
    def net(self) -> str:
        return f"{NET_PREFIX}.{self.subnet}.0/24"


@dataclass(frozen=True)
class Route:
    """A route of one node: ``dst`` over ``device`` (through ``via_edge``)."""

    node: str
    dst: str
    device: str
    via_edge: str


@dataclass(frozen=True)
class Topology:
    """A shape and the LinkSpec of each of its edges."""

    kind: str
    edges: tuple[Edge, ...]

    def __post_init__(self) -> None:
        if self.kind not in TOPOLOGIES:
            raise SpecError("topology", f"{self.kind!r}: must be one of {', '.join(TOPOLOGIES)}")
        names = [e.name for e in self.edges]
        if len(set(names)) != len(names):
            raise SpecError("topology", "an edge is given twice")

    # --- construction -------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        kind: str,
        *,
        link: LinkSpec | str,
        near_link: LinkSpec | str | None = None,
        link_b: LinkSpec | str | None = None,
        exit_link: LinkSpec | str | None = None,
        events: dict[str, list[LinkEvent]] | None = None,
    ) -> Topology:
        """Check which edges ``kind`` needs and allows, and build it."""
        given = {"link": link, "near_link": near_link, "link_b": link_b, "exit_link": exit_link}
        if kind not in TOPOLOGIES:
            raise SpecError("topology", f"{kind!r}: must be one of {', '.join(TOPOLOGIES)}")
        shape = kinds.topology(kind)
        for name, value in given.items():
            if value is None and name in shape.edges:
                raise SpecError(name, f"topology {kind!r} needs it")
            if value is not None and name not in (*shape.edges, *shape.optional_edges):
                raise SpecError(name, f"topology {kind!r} has no such edge")
        specs = {n: _to_spec(n, v) for n, v in given.items() if v is not None}
        events = events or {}
        for name in events:
            if name not in specs:
                raise SpecError(f"events.{name}", "no such edge in this topology")
        ends = _ends(shape, any(n in specs for n in shape.optional_edges))
        edges = tuple(
            Edge(n, *ends[n], specs[n], tuple(events.get(n, ()))) for n in EDGE_NAMES if n in specs
        )
        return cls(kind, edges)

    # --- the graph ----------------------------------------------------------------------

    @property
    def nodes(self) -> tuple[str, ...]:
        seen = {e.a for e in self.edges} | {e.b for e in self.edges}
        return tuple(n for n in NODE_NAMES if n in seen)

    def edge(self, name: str) -> Edge:
        for e in self.edges:
            if e.name == name:
                return e
        raise SpecError("edge", f"{name!r}: this {self.kind} topology has {self.edge_names}")

    @property
    def edge_names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.edges)

    @property
    def one_link(self) -> bool:
        """The path is one link from client to server (what a plain ``link`` string makes)."""
        return self.edge_names == ("link",)

    @property
    def link_spec(self) -> LinkSpec:
        """The ``link`` edge's spec: the long haul, or the first path."""
        return self.edge("link").spec

    def interfaces(self, node: str | None = None) -> list[Interface]:
        out = []
        for e in self.edges:
            for n in (e.a, e.b):
                if node is None or n == node:
                    out.append(Interface(n, e.name, self.device(n, e.name), SUBNETS[(n, e.name)]))
        return out

    def interface(self, node: str, edge: str) -> Interface:
        for i in self.interfaces(node):
            if i.edge == edge:
                return i
        raise SpecError("interface", f"{node} has no interface on {edge}")

    def device(self, node: str, edge: str) -> str:
        """``tb-eth`` for the client's first and the server's last interface, else per edge."""
        ends = _ends(kinds.topology(self.kind), with_optional=False)
        first = next(name for name, (a, _b) in ends.items() if a == "client")
        last = "exit_link" if "exit_link" in self.edge_names else "link"
        if (node, edge) in (("client", first), ("server", last)):
            return PRIMARY_DEVICE
        return f"tb-{EDGE_SHORT[edge]}"

    def addr(self, node: str, edge: str | None = None) -> str:
        """A node's address on ``edge`` (default: its first interface)."""
        interfaces = self.interfaces(node)
        if not interfaces:
            raise SpecError("node", f"{node!r}: this {self.kind} topology has {self.nodes}")
        if edge is None:
            return interfaces[0].addr
        return self.interface(node, edge).addr

    def _path(self, start: str, goal: str) -> list[Edge]:
        """Edges from ``start`` to ``goal`` never using link_b (a tree): breadth first."""
        tree = [e for e in self.edges if e.name != "link_b"]
        frontier: list[tuple[str, list[Edge]]] = [(start, [])]
        seen = {start}
        while frontier:
            node, path = frontier.pop(0)
            if node == goal:
                return path
            for e in tree:
                if node in (e.a, e.b) and e.other(node) not in seen:
                    seen.add(e.other(node))
                    frontier.append((e.other(node), [*path, e]))
        raise SpecError("topology", f"no path from {start} to {goal}")

    def next_edge(self, node: str, target: Interface) -> str | None:
        """The edge ``node`` sends packets for ``target`` over (None: it is local)."""
        if target.node == node:
            return None
        far = self.edge(target.edge).other(target.node)
        if far == node:
            return target.edge
        return self._path(node, far)[0].name

    def routes(self, node: str) -> list[Route]:
        """Every route of ``node``: one per /24 of another node's interface."""
        out = []
        for target in self.interfaces():
            via = self.next_edge(node, target)
            if via is None or target.node == node:
                continue
            out.append(Route(node, target.net, self.device(node, via), via))
        return out

    def router_routes(self, edge: str) -> dict[str, list[str]]:
        """Kernel backend: the /24s the edge's router sends toward ``a`` and toward ``b``: each
        toward the end nearer the node that owns it (a packet on ``link_b`` for the server
        came from the client's second address and goes on toward the server)."""
        e = self.edge(edge)
        out: dict[str, list[str]] = {"a": [], "b": []}
        for target in self.interfaces():
            if target.edge == edge:
                continue  # connected
            near_a = len(self._path(e.a, target.node))
            near_b = len(self._path(e.b, target.node))
            out["a" if near_a <= near_b else "b"].append(target.net)
        return out

    def source_rules(self, node: str) -> list[Interface]:
        """Interfaces of ``node`` whose source address routes over their own edge (link_b)."""
        if node not in ("client", "server"):
            return []
        return [i for i in self.interfaces(node) if i.edge == "link_b"]

    def forwarding(self, node: str) -> bool:
        """Whether ``node`` forwards packets (a relay or exit node does, for direct traffic)."""
        return node in ("relay", "exit")

    # --- records ------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "edges": [
                {
                    "name": e.name,
                    "a": e.a,
                    "b": e.b,
                    "spec": e.spec.to_dict(),
                    "spec_text": str(e.spec),
                    "events": [ev.to_dict() for ev in e.events],
                }
                for e in self.edges
            ],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Topology:
        try:
            edges = tuple(
                Edge(
                    d["name"],
                    d["a"],
                    d["b"],
                    LinkSpec.from_dict(d["spec"]),
                    tuple(LinkEvent.from_dict(ev) for ev in d.get("events", [])),
                )
                for d in data["edges"]
            )
            return cls(str(data["kind"]), edges)
        except (KeyError, TypeError) as err:
            raise SpecError("topology", f"not a topology record: {err}") from None

    def describe(self) -> dict[str, Any]:
        """Nodes (interfaces, routes) and edges, for ``link show --json``."""
        return {
            "kind": self.kind,
            "nodes": {
                n: {
                    "interfaces": [
                        {"edge": i.edge, "device": i.device, "addr": i.addr, "net": i.net}
                        for i in self.interfaces(n)
                    ],
                    "routes": [
                        {"dst": r.dst, "device": r.device, "via_edge": r.via_edge}
                        for r in self.routes(n)
                    ],
                    "source_rules": [i.addr for i in self.source_rules(n)],
                    "forwarding": self.forwarding(n),
                }
                for n in self.nodes
            },
            "edges": {
                e.name: {"a": e.a, "b": e.b, "spec": str(e.spec), "rtt_s": e.spec.rtt_s}
                for e in self.edges
            },
        }


def _to_spec(name: str, value: LinkSpec | str) -> LinkSpec:
    if isinstance(value, LinkSpec):
        return value
    if isinstance(value, str):
        try:
            return resolve_link(value)
        except SpecError as err:
            raise SpecError(f"{name}.{err.field}", err.reason) from None
    raise SpecError(name, f"expected a link string or a LinkSpec, got {type(value).__name__}")


def _ends(shape: kinds.TopologyKind, with_optional: bool) -> dict[str, tuple[str, str]]:
    """Each edge's two nodes in a shape (tbcore.kinds.TopologyKind.ends)."""
    if with_optional and shape.ends_with_optional is not None:
        return dict(shape.ends_with_optional)
    return dict(shape.ends) if shape.ends is not None else {"link": ("client", "server")}


TOPOLOGY_KEYS = ("topology", *EDGE_NAMES)


def parse_topology(text: str) -> Topology:
    """The ``link up`` form: ``topology=relay;near_link=rtt=2ms;link=dc-longhaul-clean``.

    Parts are separated by ``;`` (a link string uses ``,``); a string without ``topology=``
    is one direct link (the one-link form).
    """
    if not isinstance(text, str):
        raise SpecError("topology", f"expected a string, got {type(text).__name__}")
    if "topology=" not in text:
        return Topology.build("direct", link=text)
    values: dict[str, str] = {}
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in TOPOLOGY_KEYS:
            raise SpecError(key or "topology", f"{part!r}: expected one of {TOPOLOGY_KEYS}=...")
        if key in values:
            raise SpecError(key, "given twice")
        values[key] = value.strip()
    kind = values.pop("topology")
    if "link" not in values:
        raise SpecError("link", f"topology {kind!r} needs it")
    return Topology.build(kind, **values)  # type: ignore[arg-type]
