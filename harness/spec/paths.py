"""The path of a level: its link knobs become a :class:`netem.topologyspec.Topology` (every
edge's :class:`~netem.linkspec.LinkSpec`) once, when the experiment is read, and the settings
that only some shapes apply are checked against the shape.

After this stage the harness passes the Topology and its LinkSpecs, never a link string
(tests/test_layers.py guards it).
"""

from __future__ import annotations

from dataclasses import replace

from netem.linkspec import DirectionSpec, LinkSpec
from netem.topologyspec import Topology
from tbcore import kinds
from tbcore.errors import SpecError
from tbcore.settings import Settings

EDGE_KNOBS = ("link", "near_link", "link_b", "exit_link")
"""The knobs that name an edge of the path (a preset or link string each)."""


def topology_of(settings: Settings, where: str) -> Topology:
    """The path ``settings`` describe, every edge of its shape parsed (SpecError naming
    ``where.key``). An edge the shape does not have is not part of the path: set by the level
    itself it is refused by its knob's scope (a relay's ``near_link`` on a direct level), set
    in ``[fixed]`` for other levels it is this level's ignored setting (Settings.ignored), and
    refused only when no level has it (harness.spec.experiment.refuse_unapplied)."""
    shape = kinds.topology(settings.topology)
    own = (*shape.edges, *shape.optional_edges)
    edges = {key: getattr(settings, key) for key in EDGE_KNOBS if key in own}
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
    if carried is not None and settings.workload not in carried and not shape.carries_any(settings):
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
    pairs = kinds.topology(topology.kind).series
    present = [pair for pair in pairs if set(pair) <= set(topology.edge_names)]
    if not present:
        return topology.link_spec
    near, far = (topology.edge(name).spec for name in present[0])
    return LinkSpec(
        up=_in_series(near.up, far.up),
        down=_in_series(near.down, far.down),
        mtu_bytes=min(near.mtu_bytes, far.mtu_bytes),
    )


def request_path(topology: Topology, multipath: str) -> LinkSpec:
    """The path a request's bound crosses: :func:`end_to_end`, except that one Multipath TCP
    connection over two paths has both paths' rates (docs/models.md §12: the split's bound,
    at the first path's round trip), behind the shared exit where there is one."""
    path = end_to_end(topology)
    if multipath != "mptcp" or "link_b" not in topology.edge_names:
        return path
    second = topology.edge("link_b").spec
    exit_ = topology.edge("exit_link").spec if "exit_link" in topology.edge_names else None

    def both(name: str) -> float | None:
        rates = [getattr(path, name).rate_bps, getattr(second, name).rate_bps]
        if None in rates:
            return None
        total = float(sum(rates))  # type: ignore[arg-type]
        cap = getattr(exit_, name).rate_bps if exit_ is not None else None
        return total if cap is None else min(total, cap)

    return LinkSpec(
        up=replace(path.up, rate_bps=both("up")),
        down=replace(path.down, rate_bps=both("down")),
        mtu_bytes=path.mtu_bytes,
    )


def _in_series(a: DirectionSpec, b: DirectionSpec) -> DirectionSpec:
    rates = [r for r in (a.rate_bps, b.rate_bps) if r is not None]
    return DirectionSpec(
        delay_s=a.delay_s + b.delay_s,
        loss=1.0 - (1.0 - a.mean_loss) * (1.0 - b.mean_loss),
        rate_bps=min(rates) if rates else None,
        seed=b.seed,
    )
