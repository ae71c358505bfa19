"""Protocols and workloads by name: what the harness needs to know of each (the bound's
inputs, the row's labels), registered once, looked up by ``settings.protocol`` and
``settings.workload`` instead of ``if`` ladders.

A new protocol or workload is one :func:`register_protocol` / :func:`register_workload`
call (here or in the module that implements it, imported by the harness); the settings
knobs ``protocol`` and ``workload`` accept every registered name. The stacks keep their
own registries of implementations (clients.api, servers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tbcore import agent, fecmath, quicstack, workloads
from tbcore.errors import SpecError


@dataclass(frozen=True)
class ProtocolKind:
    """One application protocol over one transport."""

    name: str
    transport: str
    """``tcp`` or ``udp``: how the harness reads ACKs (pcap of TCP, qlog of QUIC)."""
    cc_attr: str
    """The settings field naming its congestion control (``cc`` or ``quic_cc``)."""
    mss: Callable[[Any], int]
    """The payload of one full-sized packet for the bound, from the settings."""
    window_caps: Callable[[Any], list[int | None]]
    """Caps on the bytes in flight from the settings (None: no cap)."""
    paces: Callable[[Any], bool]
    """Whether the sender spreads a window over time instead of sending it at line rate."""
    listeners: Callable[[int], list[str]] = lambda port: []
    """``testbed serve``'s flags that make it listen for this protocol alone on ``port``."""
    qlog: bool = False
    """Whether its ends write qlog (the harness reads QUIC's ACKs from it)."""
    columns: tuple[str, ...] = ()
    """The runs.csv column groups its runs fill (tbcore.runrow ``group``)."""


@dataclass(frozen=True)
class WorkloadKind:
    """One request kind, as the harness and the bound see it."""

    name: str
    up_bytes: Callable[[Any], int]
    """Request body bytes, from the settings."""
    down_bytes: Callable[[Any], int]
    """Response body bytes the bound counts (ASR's short transcript: 0)."""
    processing_s: Callable[[Any], float]
    """Server processing per request, from the settings."""
    bounded: bool = True
    """False when the request bound does not apply (the stream's bound is the pipeline)."""
    records: str = "request"
    """The records its client writes, which the harness turns into the row
    (harness.collect.rowparts):
    ``request`` (RequestRecord, one per request) or ``agent_round`` (AgentRound)."""
    run_limit_s: Callable[[Any], float] = lambda s: s.timeout_s
    """How long one client process may take before the harness kills it (plus a margin)."""
    link_events: Callable[[Any], dict[int, list[str]]] = lambda s: {}
    """Link events to give when the client reports progress N (``progress N`` on its
    stdout): {N: [netem.events string, ...]}, from the settings."""
    columns: tuple[str, ...] = ()
    """The runs.csv column groups its runs fill (tbcore.runrow ``group``)."""


@dataclass(frozen=True)
class TopologyKind:
    """One shape of the path (netem.topologyspec), as the spec stage checks it: the settings
    only it applies and the workloads it carries. Its run-stage behaviour (the relay's
    process, the client's addresses) is registered in harness.run.topologies."""

    name: str
    edges: tuple[str, ...]
    """The link knobs it needs (``link`` first) ..."""
    optional_edges: tuple[str, ...] = ()
    """... and those it may have."""
    settings: tuple[str, ...] = ()
    """Knobs (keys) that take effect on this topology only: refused elsewhere when set."""
    workloads: tuple[str, ...] | None = None
    """The workloads it carries (None: every one that is not bound to another topology)."""
    check: Callable[[Any], None] = lambda s: None
    """Combinations of settings the shape cannot run (SpecError naming the key)."""
    columns: tuple[str, ...] = ()
    """The runs.csv column groups its runs fill (tbcore.runrow ``group``)."""


PROTOCOLS: dict[str, ProtocolKind] = {}
WORKLOADS: dict[str, WorkloadKind] = {}
TOPOLOGIES: dict[str, TopologyKind] = {}


def register_protocol(kind: ProtocolKind) -> ProtocolKind:
    if kind.name in PROTOCOLS:
        raise ValueError(f"protocol {kind.name!r} registered twice")
    PROTOCOLS[kind.name] = kind
    return kind


def register_workload(kind: WorkloadKind) -> WorkloadKind:
    if kind.name in WORKLOADS:
        raise ValueError(f"workload {kind.name!r} registered twice")
    WORKLOADS[kind.name] = kind
    return kind


def register_topology(kind: TopologyKind) -> TopologyKind:
    if kind.name in TOPOLOGIES:
        raise ValueError(f"topology {kind.name!r} registered twice")
    TOPOLOGIES[kind.name] = kind
    return kind


def topology(name: str) -> TopologyKind:
    try:
        return TOPOLOGIES[name]
    except KeyError:
        raise SpecError("topology", f"{name!r} is not one of {', '.join(TOPOLOGIES)}") from None


def protocol(name: str) -> ProtocolKind:
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise SpecError("protocol", f"{name!r} is not one of {', '.join(PROTOCOLS)}") from None


def workload(name: str) -> WorkloadKind:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise SpecError("workload", f"{name!r} is not one of {', '.join(WORKLOADS)}") from None


register_protocol(
    ProtocolKind(
        name="h2",
        transport="tcp",
        cc_attr="cc",
        mss=lambda s: s.mss_bytes,
        # TCP's clamp and HTTP/2's flow-control window
        window_caps=lambda s: [s.window_clamp_bytes, s.h2_window_bytes],
        # Linux TCP paces with bbr (its pacing_gain) or when SO_MAX_PACING_RATE is set
        paces=lambda s: s.cc == "bbr" or s.pace_at_path_rate or s.max_pacing_rate_bps is not None,
        listeners=lambda port: ["--h2-port", str(port), "--h3-port", str(port), "--no-h3"],
    )
)
register_protocol(
    ProtocolKind(
        name="h3",
        transport="udp",
        cc_attr="quic_cc",
        mss=lambda s: s.max_datagram_size_bytes,
        window_caps=lambda s: [s.quic_max_data_bytes],
        # aioquic paces unless told off (rate = cwnd / srtt); ngtcp2's binaries never
        paces=lambda s: quicstack.paces(s),
        listeners=lambda port: ["--h2-port", str(port), "--h3-port", str(port), "--no-h2"],
        qlog=True,
    )
)

register_protocol(
    ProtocolKind(
        name="fec",
        transport="udp",
        cc_attr="fec_redundancy",  # no congestion control: the redundancy is its choice
        mss=lambda s: fecmath.FEC_SYMBOL_BYTES,
        window_caps=lambda s: [],
        # paced at min(cap, measured rate) by a token bucket (proto/fec/session.py)
        paces=lambda s: True,
        listeners=lambda port: ["--no-h2", "--no-h3", "--fec-port", str(port)],
        columns=("fec",),
    )
)

_AUDIO = workloads.AUDIO_SIZE_BYTES
register_workload(
    WorkloadKind("asr", lambda s: _AUDIO, lambda s: 0, lambda s: s.processing_audio_s)
)
register_workload(
    WorkloadKind("tts", lambda s: 0, lambda s: _AUDIO, lambda s: s.processing_audio_s)
)
register_workload(
    WorkloadKind(
        "retouch",
        lambda s: workloads.IMAGE_SIZE_BYTES,
        lambda s: workloads.RETOUCHED_SIZE_BYTES,
        lambda s: s.processing_image_s,
    )
)
register_workload(
    WorkloadKind(
        "stream",
        lambda s: 0,
        lambda s: s.chunks * workloads.STREAM_CHUNK_BYTES,
        lambda s: 0.0,
        bounded=False,
    )
)
register_workload(
    WorkloadKind("image", lambda s: 0, lambda s: workloads.IMAGE_SIZE_BYTES, lambda s: 0.0)
)
register_workload(
    WorkloadKind("result", lambda s: 0, lambda s: workloads.RETOUCHED_SIZE_BYTES, lambda s: 0.0)
)
_STREAM_DOWN: dict[str, Callable[[Any], int]] = {
    "tts": lambda s: _AUDIO,
    "stream": lambda s: s.chunks * workloads.STREAM_CHUNK_BYTES,
    "result": lambda s: workloads.RETOUCHED_SIZE_BYTES,
}
register_workload(
    WorkloadKind(
        "multi",
        lambda s: 0,
        lambda s: sum(_STREAM_DOWN[name](s) for name in s.stream_list),
        lambda s: 0.0,
        bounded=False,  # streams share the path: per-stream times in streams.csv
    )
)
register_workload(
    WorkloadKind(
        "retouch-tiles3",
        lambda s: workloads.IMAGE_SIZE_BYTES,
        lambda s: workloads.RETOUCHED_SIZE_BYTES,
        lambda s: s.processing_image_s,
        bounded=False,  # its bound is the tile pipeline (MODELS.md section 2)
    )
)
register_workload(
    WorkloadKind("sink", lambda s: workloads.IMAGE_SIZE_BYTES, lambda s: 0, lambda s: 0.0)
)


def _agent_events(s: Any) -> dict[int, list[str]]:
    """The agent's link events: an outage after a round, an uplink rate change after one."""
    events: dict[int, list[str]] = {}
    if s.outage_after_round is not None:
        events.setdefault(s.outage_after_round, []).append(f"outage:for={s.outage_s:g}s")
    if s.rate_change_after_round is not None and s.rate_change_bps is not None:
        events.setdefault(s.rate_change_after_round, []).append(
            f"rate:rate={s.rate_change_bps:g}bit,dir=up"
        )
    return events


register_workload(
    WorkloadKind(
        "agent",
        # one round's screenshot as sent raw; a compressed run's bytes come from its records
        lambda s: agent.RAW_SCREEN_BYTES,
        lambda s: 0,
        lambda s: s.agent_model_s,
        records="agent_round",
        columns=("agent",),
        link_events=lambda s: _agent_events(s),
        # every round (and as many again, redone) at most its local work, model time and
        # the patience of one request
        run_limit_s=lambda s: (
            2
            * (s.agent_rounds + s.warmup_requests)
            * (s.agent_local_s + s.agent_model_s + (s.round_timeout_s or s.timeout_s))
        ),
    )
)


OUTAGE_UNTIL_TOLD_S = 3600.0
"""A failover's outage lasts until the run ends it (its link events end with the run)."""


def _failover(s: Any) -> dict[int, list[str]]:
    """``outage_at``: the ``link`` edge goes down that long after the upload starts (the
    client reports ``progress 0`` then), until the run ends."""
    if s.outage_at_s is None:
        return {}
    return {0: [f"outage:at={s.outage_at_s:g}s,for={OUTAGE_UNTIL_TOLD_S:g}s"]}


register_workload(
    WorkloadKind(
        "upload",
        # one upload over the two paths of a dual topology (clients.multipath)
        lambda s: s.size_bytes or workloads.IMAGE_SIZE_BYTES,
        lambda s: 0,
        lambda s: 0.0,
        bounded=False,  # its bound is the two-path model (MODELS.md section 12)
        records="transfer",
        link_events=lambda s: _failover(s),
    )
)

register_topology(TopologyKind("direct", edges=("link",)))
register_topology(
    TopologyKind(
        "relay", edges=("link", "near_link"), settings=("route",), columns=("relay", "topology")
    )
)


def _check_dual(s: Any) -> None:
    """Two paths carry one upload: HTTP/2 in four arms, HTTP/3 only as a migration."""
    if s.protocol not in ("h2", "h3"):
        raise SpecError("protocol", f"two paths carry h2 (or h3 migrating), not {s.protocol!r}")
    if s.protocol == "h3" and (s.multipath != "single" or s.outage_at_s is None):
        raise SpecError(
            "protocol", "h3 on two paths: multipath = single with outage_at (a migration)"
        )
    if s.outage_at_s is not None and s.protocol == "h2" and s.multipath not in MULTIPATH_FAILOVER:
        raise SpecError(
            "outage_at",
            f"a failover needs multipath {' or '.join(MULTIPATH_FAILOVER)} (or h3 migrating), "
            f"not {s.multipath!r}",
        )


MULTIPATH_FAILOVER = ("mptcp", "duplicate")
"""The h2 arms that survive the loss of one path (single and split stop with it)."""

register_topology(
    TopologyKind(
        "dual",
        edges=("link", "link_b"),
        optional_edges=("exit_link",),
        settings=("multipath", "outage_at"),
        workloads=("upload",),
        check=_check_dual,
        columns=("dual", "topology"),
    )
)
