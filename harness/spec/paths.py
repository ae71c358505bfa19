"""The path of a level: its link knobs become a :class:`netem.topologyspec.Topology` (every
edge's :class:`~netem.linkspec.LinkSpec`) once, when the experiment is read, and the settings
that only some shapes apply are checked against the shape.

After this stage the harness passes the Topology and its LinkSpecs, never a link string
(tests/test_layers.py guards it).
"""

from __future__ import annotations

from netem.linkspec import DirectionSpec, LinkSpec
from netem.topologyspec import Topology
from tbcore import kinds
from tbcore.errors import SpecError
from tbcore.settings import Settings

EDGE_KNOBS = ("link", "near_link", "link_b", "exit_link")
"""The knobs that name an edge of the path (a preset or link string each)."""


def topology_of(settings: Settings, where: str) -> Topology:
    """The path ``settings`` describe, every edge parsed (SpecError naming ``where.key``)."""
    shape = kinds.topology(settings.topology)
    edges = {key: getattr(settings, key) for key in EDGE_KNOBS}
    for key, value in edges.items():
        if value is None or key in shape.edges or key in shape.optional_edges:
            continue
        raise SpecError(
            f"{where}.{key}",
            f"topology {shape.name!r} has no {key} edge (its edges: "
            f"{', '.join((*shape.edges, *shape.optional_edges))})",
        )
    for key in shape.edges:
        if edges[key] is None:
            raise SpecError(f"{where}.{key}", f"topology {shape.name!r} needs it")
    try:
        return Topology.build(shape.name, **{k: v for k, v in edges.items() if v is not None})
    except SpecError as err:
        field = err.field if err.field.partition(".")[0] in EDGE_KNOBS else f"link.{err.field}"
        raise SpecError(f"{where}.{field}", err.reason) from None


def check_path(settings: Settings, topology: Topology, where: str) -> None:
    """Refuse what the shape cannot run and a workload it does not carry (a setting only
    some shapes apply is its knob's scope: tbcore.settings.Scope, checked by the caller)."""
    shape = kinds.topology(topology.kind)
    try:
        shape.check(settings)
    except SpecError as err:
        raise SpecError(f"{where}.{err.field}", err.reason) from None
    carried = shape.workloads
    bound_elsewhere = {w for t in kinds.TOPOLOGIES.values() if t.workloads for w in t.workloads}
    if carried is not None and settings.workload not in carried:
        raise SpecError(
            f"{where}.workload",
            f"topology {shape.name!r} carries {', '.join(carried)}, not {settings.workload!r}",
        )
    if carried is None and settings.workload in bound_elsewhere:
        raise SpecError(
            f"{where}.workload", f"{settings.workload!r} needs another topology than {shape.name!r}"
        )


def end_to_end(topology: Topology) -> LinkSpec:
    """The one path a request crosses between client and server, as a single LinkSpec for
    the row's labels and the request bound: on a relay the near hop and the long haul in
    series (delays add, the slower rate and the smaller MTU hold, losses compound); on two
    paths the first (``link``), which every arm starts on, and the shared exit behind it."""
    if topology.kind == "dual":
        if "exit_link" not in topology.edge_names:
            return topology.link_spec
        near, far = topology.link_spec, topology.edge("exit_link").spec
    elif topology.kind == "relay":
        near, far = topology.edge("near_link").spec, topology.edge("link").spec
    else:
        return topology.link_spec
    return LinkSpec(
        up=_in_series(near.up, far.up),
        down=_in_series(near.down, far.down),
        mtu_bytes=min(near.mtu_bytes, far.mtu_bytes),
    )


def _in_series(a: DirectionSpec, b: DirectionSpec) -> DirectionSpec:
    rates = [r for r in (a.rate_bps, b.rate_bps) if r is not None]
    return DirectionSpec(
        delay_s=a.delay_s + b.delay_s,
        loss=1.0 - (1.0 - a.mean_loss) * (1.0 - b.mean_loss),
        rate_bps=min(rates) if rates else None,
        seed=b.seed,
    )
