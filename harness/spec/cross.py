"""Where competing traffic (the ``cross`` setting, tbcore.cross) can run, checked when the
experiment is read (sans-I/O).

The flows share the bottleneck of a direct link (one edge: which one a relay's or two
paths' competitor would load is not a question of the request any more), in the direction
the request's data goes (its larger body: up for asr, down for tts), and are measured from
the run's capture (so ``capture`` must not be off). Refused too: a data direction without
a bottleneck (no rate and no capacity trace: nothing to share), a workload whose records are
not requests (the agent's rounds, the two-path upload), and ``cross_lead`` without ``cross``.
"""

from __future__ import annotations

from netem.linkspec import DirectionSpec
from netem.topologyspec import Topology
from tbcore import cross, kinds
from tbcore.errors import SpecError
from tbcore.settings import KNOBS, TCP_CONGESTION_CONTROLS, Settings


def cross_of(settings: Settings) -> cross.CrossTraffic | None:
    """The run's competing traffic, or None."""
    if settings.cross is None:
        return None
    return cross.parse_cross("cross", settings.cross, TCP_CONGESTION_CONTROLS)


def data_direction(settings: Settings) -> str:
    """``up`` when the request's body is the larger part (asr, retouch), else ``down``."""
    workload = kinds.workload(settings.workload)
    return "up" if workload.up_bytes(settings) >= workload.down_bytes(settings) else "down"


def check_cross(settings: Settings, path: Topology, where: str) -> None:
    """Refuse ``cross`` where it cannot apply, and ``cross_lead`` without it (one line)."""
    if settings.cross is None:
        if settings.cross_lead_s != KNOBS["cross_lead"].default:
            raise SpecError(f"{where}.cross_lead", "has no effect without cross")
        return
    name = f"{where}.cross"
    if not path.one_link:
        raise SpecError(
            name, f"competing flows share a direct link's bottleneck, not a {path.kind} path's"
        )
    if kinds.workload(settings.workload).records != "request":
        raise SpecError(
            name, f"runs beside request workloads, not {settings.workload!r} (its own records)"
        )
    if settings.capture == "off":
        raise SpecError(name, "is measured from the run's capture: capture must not be off")
    direction = data_direction(settings)
    spec: DirectionSpec = getattr(path.link_spec, direction)
    if spec.rate_bps is None and spec.rate_trace is None:
        raise SpecError(
            name,
            f"the {direction} direction (where the request's data goes) has no rate: "
            "without a bottleneck there is nothing to share",
        )
