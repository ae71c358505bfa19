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
from dataclasses import dataclass, replace
from typing import Any

from tbcore import agent, fecmath, quicstack, workloads
from tbcore.ackpolicy import TCP_DELACK_MIN_S
from tbcore.errors import SpecError
from tbcore.failures import parse_failures
from tbcore.registry import Registry
from tbcore.routes import HttpRoute

INITIAL_WINDOW_PACKETS = 10
"""RFC 6928 (TCP, Linux's TCP_INIT_CWND, what a route without ``initcwnd`` gets) and RFC 9002
section 7.2 (QUIC: 10 datagrams up to 1472 bytes; aioquic's K_INITIAL_WINDOW)."""


TCP_CONGESTION_CONTROLS = ("reno", "cubic", "bbr")
"""What ``TCP_CONGESTION`` accepts on these kernels (docs/machine.md)."""
QUIC_CONGESTION_CONTROLS = tuple(
    dict.fromkeys((*quicstack.AIOQUIC_CONGESTION_CONTROLS, *quicstack.NGTCP2_CONGESTION_CONTROLS))
)
"""What the QUIC stacks have, all told: aioquic's (reno, cubic, the testbed's bbr) and
ngtcp2's (its bbr2 too); each level's stack takes its own (quicstack.controls_of)."""


@dataclass(frozen=True)
class ProtocolKind:
    """One application protocol over one transport."""

    name: str
    transport: str
    """``tcp`` or ``udp``: how the harness reads ACKs (pcap of TCP, qlog of QUIC)."""
    cc_of: Callable[[Any], str | None]
    """Its congestion control from the settings (``cc``; QUIC's ``quic_cc`` when given)."""
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
    traits: tuple[str, ...] = ()
    """What it is beyond its name, for the knobs' scopes (tbcore.settings.Scope): ``tcp``
    (kernel TCP sockets, route metrics, TCP sysctls), ``quic`` (aioquic), ``http`` (HTTP
    request streams with RFC 9218 priorities), ``sessions`` (TLS session resumption)."""
    connections: tuple[str, ...] = ("new", "reused")
    """The ``connection`` modes it runs (tbcore.settings.CONNECTION_MODES)."""
    connection_note: str = ""
    """Why the other modes are refused (the one-line reason)."""
    path_rate_attr: str | None = None
    """A settings field capping its sender's rate that each end fills with the configured rate
    of the direction it sends on when the file leaves it None (fec_rate); such a protocol
    needs a rate on both directions of the path."""
    bound: str = "request"
    """The model of its run's bound (harness.collect.row.BOUNDS): ``request`` (docs/models.md
    sections 1-8: set-up, slow start, window) or ``fec`` (section 10: the symbols sent)."""
    chunk_overhead_bytes: int = 0
    """Wire bytes besides the payload per streamed chunk (the playback prediction)."""
    setup_of: Callable[[Any], str] | None = None
    """The name the bounds' set-up (harness.bounds.SETUP_RTTS) knows a run of it by, from
    the settings; None: its own name."""
    upload_mode: Callable[[Any], str] | None = None
    """How it carries one upload over two paths (the dual topology), from the settings: an
    arm of ``multipath`` or :data:`MIGRATE`; None: it cannot."""
    initial_window: Callable[[Any], int] = lambda s: INITIAL_WINDOW_PACKETS
    """Its initial congestion window in full packets for the bound, from the settings."""
    controls: Callable[[Any], tuple[str, ...]] = lambda s: ()
    """The congestion controls its stack has (empty: it takes none; ``cc`` is refused
    when it names another)."""
    stack_of: Callable[[Any], str | None] = lambda s: None
    """The implementation that carries it, from the settings (``quic_stack`` for h3); None:
    it has one only (runs.csv's ``quic_stack`` column stays empty)."""
    ack_refusal: Callable[[Any], str | None] = lambda policy: None
    """Why its receivers cannot give an ``ack_policy`` (a tbcore.ackpolicy.AckPolicy), in one
    line; None: they can."""


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
    parts: int = 1
    """Independently processed parts of its upload (the tile pipeline, docs/models.md section 2)."""
    protocols: tuple[str, ...] = ()
    """The protocols its client runs it over, by name or trait (empty: every one)."""
    route: HttpRoute | None = None
    """The HTTP request that carries it (tbcore.routes): the client's request, the server's
    answer and processing, ngtcp2's file; None for a workload whose client builds its
    requests itself (multi: its streams', agent: rounds, upload: parts over two paths)."""
    stacks: tuple[str, ...] = ("aioquic", "ngtcp2")
    """The QUIC stacks that carry it over HTTP/3 (tbcore.quicstack): the testbed's aioquic
    endpoints and its native ones on ngtcp2 carry every workload but the two-path upload."""
    static_file: bool = False
    """Its answer is a fixed file: Debian's ngtcp2 example server (gtlsserver, the
    interoperability peer: servers/ngtcp2.py) can serve it too."""
    label: str | None = None
    """What it is on a connection shared with others (``audio``, ``image``): its RFC 9218
    priority and its group in streams.csv."""
    traits: tuple[str, ...] = ()
    """What it is beyond its name, for the knobs' scopes (tbcore.settings.Scope):
    ``request`` (request records: requests, warm-ups, connections), ``chunks`` (a streamed
    response of chunks), ``streams`` (several requests at once on one connection),
    ``audio_processing`` / ``image_processing`` (the server's sleep per request),
    ``overhead`` (an upload whose segments the overhead table counts)."""
    shares_host: Callable[[Any], bool] = lambda s: False
    """Whether a run of it, with these settings, may measure beside another such run on one
    host (harness.run.lock's shared mode, ``testbed campaign --lanes``): true only where the
    run's processes are idle most of its time, so that a neighbour's CPU can reach its
    critical path only briefly. Every such run is still judged for the disturbance it met
    (harness.validity): a neighbour's processes are foreign to it."""


AGENT_SHARE_IDLE_S = 0.3
"""An agent whose rounds each sleep at least 0.3 s (the device's time, the chapter's 0.3 s, and
the model's, 0.08-2.9 s) shares the host: between those sleeps a round moves at most its
0.8 MB screenshot (§12.1.3), on a phone's link of 3.5-80 Mbit/s, so its processes are idle
most of the run and a neighbour's work meets its critical path only briefly."""


@dataclass(frozen=True)
class TopologyKind:
    """One shape of the path (netem.topologyspec), as the spec stage checks it: its edges,
    the workloads it carries, what it cannot run (the knobs only some shapes apply name them
    in their tbcore.settings.Scope). Its run-stage behaviour (the relay's
    process, the client's addresses) is registered in harness.run.topologies."""

    name: str
    edges: tuple[str, ...]
    """The link knobs it needs (``link`` first) ..."""
    optional_edges: tuple[str, ...] = ()
    """... and those it may have."""
    workloads: tuple[str, ...] | None = None
    """The workloads it carries (None: every one that is not bound to another topology)."""
    carries_any: Callable[[Any], bool] = lambda s: False
    """Settings under which it carries any workload besides :attr:`workloads` (two paths
    under Multipath TCP: a transparent TCP, so any HTTP/2 request rides it)."""
    check: Callable[[Any], None] = lambda s: None
    """Combinations of settings the shape cannot run (SpecError naming the key)."""
    columns: tuple[str, ...] = ()
    """The runs.csv column groups its runs fill (tbcore.runrow ``group``)."""
    traits: tuple[str, ...] = ()
    """What it is beyond its name, for the knobs' scopes (tbcore.settings.Scope)."""
    ends: Any = None
    """Each edge's two nodes (netem.topologyspec): a mapping from edge name to (a, b), or
    None for the one ``link`` from client to server ..."""
    ends_with_optional: Any = None
    """... and the same when an optional edge is present (None: as :attr:`ends`)."""
    series: tuple[tuple[str, str], ...] = ()
    """The edges a request crosses one after the other, as (near, far) pairs tried in order
    (the first whose edges the path has): the end-to-end path is them in series; none, the
    ``link`` edge alone."""
    label_setting: str | None = None
    """The setting that says which way a run took through the shape (a row's label)."""
    relayed: Callable[[Any], bool] = lambda s: False
    """Whether a run under these settings goes through a relay (its bound: the relay's)."""


PROTOCOLS: Registry[ProtocolKind] = Registry("protocol")
WORKLOADS: Registry[WorkloadKind] = Registry("workload")
TOPOLOGIES: Registry[TopologyKind] = Registry("topology")
register_protocol = PROTOCOLS.register
register_workload = WORKLOADS.register
register_topology = TOPOLOGIES.register
protocol = PROTOCOLS.lookup


def setup_name(settings: Any) -> str:
    """The protocol the bounds' set-up counts a run of ``settings`` as (``h2c``: h2 without
    TLS)."""
    kind = protocol(settings.protocol)
    return kind.setup_of(settings) if kind.setup_of is not None else kind.name


workload = WORKLOADS.lookup
topology = TOPOLOGIES.lookup


def traits_of(kind: ProtocolKind | WorkloadKind | TopologyKind) -> frozenset[str]:
    """A kind's name and its traits: what a knob's scope may name (a workload the request
    bound covers, ``bounded``, also carries ``bounded``)."""
    bounded = ("bounded",) if getattr(kind, "bounded", False) else ()
    return frozenset((kind.name, *kind.traits, *bounded))


MIGRATE = "migrate"
"""The upload over two paths of a protocol that migrates its one connection from the first
path to the second when the first fails (QUIC, RFC 9000 section 9)."""

H2_CHUNK_OVERHEAD_BYTES = 9 + 22 + 52
"""Per 960-byte chunk on the wire over HTTP/2: DATA frame header (RFC 9113 4.1), a TLS 1.3
record (5 header + 1 type + 16 tag) and IPv4 + TCP with timestamps (20 + 32)."""
H3_CHUNK_OVERHEAD_BYTES = 3 + 28 + 1 + 8 + 8 + 16
"""Per chunk over HTTP/3: DATA frame header (type + 2-byte length), IPv4 + UDP (28), a
short header (1 + 8-byte connection ID), STREAM frame header (about 8) and the AEAD tag."""


def _tcp_ack_refusal(policy: Any) -> str | None:
    """What Linux lets a TCP socket ask for: one ACK per segment (the quickack route metric
    and TCP_QUICKACK), or its delayed ACKs (at least every second full segment: every:2)
    with their longest wait capped (TCP_BPF_DELACK_MAX, proto/delack.py)."""
    if policy.name in ("default", "immediate"):
        return None
    if policy.name == "every" and policy.every_packets == 2:
        if policy.max_delay_s < TCP_DELACK_MIN_S:
            return f"Linux's delayed-ACK ceiling is at least {TCP_DELACK_MIN_S * 1e3:g} ms"
        return None
    return (
        "Linux TCP acknowledges by its own delayed-ACK rule (at least every second full "
        "segment); a socket can ask for one ACK per segment (immediate) or cap the delay "
        "(every:2,max:T), not another count, ack-frequency or tack"
    )


register_protocol(
    ProtocolKind(
        name="h2",
        transport="tcp",
        cc_of=lambda s: s.cc,
        controls=lambda s: TCP_CONGESTION_CONTROLS,
        mss=lambda s: s.mss_bytes,
        # TCP's clamp and HTTP/2's flow-control window
        window_caps=lambda s: [s.window_clamp_bytes, s.h2_window_bytes],
        initial_window=lambda s: s.initcwnd or INITIAL_WINDOW_PACKETS,  # the route metric
        # Linux TCP paces with bbr (its pacing_gain) or when SO_MAX_PACING_RATE is set
        paces=lambda s: s.cc == "bbr" or s.pace_at_path_rate or s.max_pacing_rate_bps is not None,
        listeners=lambda port: ["--h2-port", str(port), "--h3-port", str(port), "--no-h3"],
        traits=("tcp", "http", "sessions"),
        connection_note="Python's ssl has no TLS 1.3 early data (use resume for h2)",
        chunk_overhead_bytes=H2_CHUNK_OVERHEAD_BYTES,
        upload_mode=lambda s: s.multipath,
        ack_refusal=_tcp_ack_refusal,
        # without TLS (tls = false, RFC 9113 section 3.3) only TCP's handshake precedes it
        setup_of=lambda s: "h2" if s.tls else "h2c",
    )
)
register_protocol(
    ProtocolKind(
        name="h3",
        transport="udp",
        cc_of=lambda s: quicstack.control_of(s),
        controls=lambda s: quicstack.controls_of(s),
        stack_of=lambda s: s.quic_stack,
        mss=lambda s: s.max_datagram_size_bytes,
        window_caps=lambda s: [s.quic_max_data_bytes],
        # both stacks pace unless told off (aioquic: cwnd / srtt; ngtcp2: its own pacer)
        paces=lambda s: quicstack.paces(s),
        listeners=lambda port: ["--h2-port", str(port), "--h3-port", str(port), "--no-h2"],
        qlog=True,
        traits=("quic", "http", "sessions"),
        connections=("new", "reused", "0rtt"),
        columns=("h3",),
        chunk_overhead_bytes=H3_CHUNK_OVERHEAD_BYTES,
        upload_mode=lambda s: MIGRATE,
    )
)

register_protocol(
    ProtocolKind(
        name="fec",
        transport="udp",
        cc_of=lambda s: s.fec_redundancy,  # no congestion control: the redundancy is its choice
        mss=lambda s: fecmath.FEC_SYMBOL_BYTES,
        window_caps=lambda s: [],
        # paced at min(cap, measured rate) by a token bucket (proto/fec/session.py)
        paces=lambda s: True,
        listeners=lambda port: ["--no-h2", "--no-h3", "--fec-port", str(port)],
        columns=("fec",),
        connection_note="fec has new and reused sessions",
        path_rate_attr="fec_rate_bps",
        bound="fec",
        # datagrams over UDP as HTTP/3's (its symbol headers are not modelled)
        chunk_overhead_bytes=H3_CHUNK_OVERHEAD_BYTES,
    )
)

_AUDIO = workloads.AUDIO_SIZE_BYTES
_REQUEST = ("request",)
_AUDIO_REQUEST = ("request", "audio_processing")
_IMAGE_UPLOAD = ("request", "image_processing", "overhead")
_RETOUCH = HttpRoute(
    "POST", "/retouch", upload="image", download="retouched", processing="processing_image"
)
register_workload(
    WorkloadKind(
        "asr",
        lambda s: _AUDIO,
        lambda s: 0,
        lambda s: s.processing_audio_s,
        route=HttpRoute(
            "POST",
            "/asr",
            answer="transcript",
            upload="audio",
            processing="processing_audio",
            echo_in_body=True,
        ),
        static_file=True,
        traits=_AUDIO_REQUEST,
    )
)
register_workload(
    WorkloadKind(
        "tts",
        lambda s: 0,
        lambda s: _AUDIO,
        lambda s: s.processing_audio_s,
        route=HttpRoute(
            "GET", "/tts", download="audio", processing="processing_audio", also_accepts=("POST",)
        ),
        static_file=True,
        label="audio",
        traits=_AUDIO_REQUEST,
    )
)
register_workload(
    WorkloadKind(
        "retouch",
        lambda s: workloads.IMAGE_SIZE_BYTES,
        lambda s: workloads.RETOUCHED_SIZE_BYTES,
        lambda s: s.processing_image_s,
        route=_RETOUCH,
        static_file=True,
        label="image",
        traits=_IMAGE_UPLOAD,
    )
)
register_workload(
    WorkloadKind(
        "retouch-lossless",  # §12.1.1's F4: the image losslessly encoded, decoded at the server
        lambda s: workloads.get_workload("photo-deflate").size_bytes,
        lambda s: workloads.RETOUCHED_SIZE_BYTES,
        lambda s: s.processing_image_s,
        route=HttpRoute(
            "POST",
            "/retouch-lossless",
            upload="photo-deflate",
            download="retouched",
            processing="processing_image",
            decode=True,
        ),
        label="image",
        traits=("request", "image_processing"),
    )
)
register_workload(
    WorkloadKind(
        "stream",
        lambda s: 0,
        lambda s: s.chunks * workloads.stream_chunk_bytes(s.sample_rate_hz),
        lambda s: 0.0,
        bounded=False,
        route=HttpRoute("GET", "/stream", answer="stream"),
        label="audio",
        traits=("request", "chunks"),
    )
)
register_workload(
    WorkloadKind(
        "image",
        lambda s: 0,
        lambda s: workloads.IMAGE_SIZE_BYTES,
        lambda s: 0.0,
        route=HttpRoute("GET", "/image", download="image"),  # the bench's 30 MB down
        static_file=True,
        traits=_REQUEST,
    )
)
register_workload(
    WorkloadKind(
        "result",
        lambda s: 0,
        lambda s: workloads.RETOUCHED_SIZE_BYTES,
        lambda s: 0.0,
        route=HttpRoute("GET", "/result", download="retouched"),  # the 5 MB image result
        static_file=True,
        label="image",
        traits=_REQUEST,
    )
)
register_workload(
    WorkloadKind(
        "multi",
        lambda s: 0,
        lambda s: sum(WORKLOADS[name].down_bytes(s) for name in s.stream_list),
        lambda s: 0.0,
        bounded=False,  # streams share the path: per-stream times in streams.csv
        # what its streams apply: the stream's chunks, the audio's processing
        traits=("request", "streams", "chunks", "audio_processing"),
    )
)
for _name, _results in (
    ("retouch-tiles3", ()),  # equal thirds of the result
    ("retouch-tiles3-chapter", (1, 2, 2)),  # the chapter's §12.1.1: 1, 2 and 2 MB of the 5 MB
):
    register_workload(
        WorkloadKind(
            _name,
            lambda s: workloads.IMAGE_SIZE_BYTES,
            lambda s: workloads.RETOUCHED_SIZE_BYTES,
            lambda s: s.processing_image_s,
            bounded=False,  # its bound is the tile pipeline (docs/models.md section 2)
            parts=3,
            route=replace(_RETOUCH, tiles=3, tile_results=_results),
            traits=_IMAGE_UPLOAD,
        )
    )
for _name, _path, _payload in (
    ("features-upload", "/features", "features"),  # §12.2.2: the encoder's output sent
    ("screenshot-upload", "/screen", "screenshot"),  # §12.2.2: the screenshot sent instead
    ("text-prefix", "/text", "prefix-full"),  # §12.5.2: the text agent resending its prefix
    ("text-kept", "/text-kept", "prefix-kept"),  # §12.5.2: the server keeps the state
):
    register_workload(
        WorkloadKind(
            _name,
            lambda s, p=_payload: workloads.get_workload(p).size_bytes,
            lambda s: 0,
            lambda s: 0.0,
            route=HttpRoute("POST", _path, answer="digest", upload=_payload),
            label=_payload,
            traits=_REQUEST,
        )
    )
register_workload(
    WorkloadKind(
        "migrate",  # §12.2.3: a session's state over the link, then its restore
        lambda s: workloads.STATE_SIZE_BYTES,
        lambda s: 0,
        lambda s: s.processing_restore_s,
        route=HttpRoute(
            "POST", "/migrate", answer="digest", upload="state", processing="processing_restore"
        ),
        label="state",
        traits=("request", "restore_processing"),
    )
)
register_workload(
    WorkloadKind(
        "sink",
        lambda s: workloads.IMAGE_SIZE_BYTES,
        lambda s: 0,
        lambda s: 0.0,
        route=HttpRoute("POST", "/sink", answer="digest", upload="image"),  # the bench's 30 MB up
        static_file=True,
        traits=_REQUEST,
    )
)


def _agent_events(s: Any) -> dict[int, list[str]]:
    """The agent's link events: a blackout after a round (a break is the client's and the
    server's, not the link's), an uplink rate change after one."""
    events: dict[int, list[str]] = {}
    if s.outage_after_round is not None and s.outage_mode == "blackout":
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
        route=HttpRoute("POST", "/agent", answer="agent"),
        columns=("agent",),
        protocols=("http",),  # its client resumes over TLS sessions or tickets: not fec
        link_events=lambda s: _agent_events(s),
        shares_host=lambda s: s.agent_model_s + s.agent_local_s >= AGENT_SHARE_IDLE_S,
        # every round (and as many again, redone; each task's rounds 1 / p times when the
        # model judges attempts) at most its local work, model time and the patience of
        # one request
        run_limit_s=lambda s: (
            2
            * (
                agent.expected_rounds(s.agent_rounds, s.agent_tasks, s.task_success)
                + s.warmup_requests
            )
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
        bounded=False,  # its bound is the two-path model (docs/models.md section 12)
        records="transfer",
        route=HttpRoute("POST", "/chunk", answer="chunk"),  # one part per path
        stacks=("aioquic",),  # two paths: aioquic's multipath client only
        link_events=lambda s: _failover(s),
    )
)


def ngtcp2_routes() -> dict[str, HttpRoute]:
    """The workloads Debian's ngtcp2 file server (gtlsserver, the interoperability peer)
    serves, with their routes (WorkloadKind.static_file)."""
    return {
        name: kind.route
        for name, kind in WORKLOADS.items()
        if kind.static_file and kind.route is not None
    }


def ngtcp2_route(settings: Any) -> HttpRoute:
    """The route of the level's workload on ngtcp2 (refused in one line when it has none)."""
    routes = ngtcp2_routes()
    route = routes.get(settings.workload)
    if route is None:
        raise SpecError(
            "workload",
            f"ngtcp2 (a static file server) carries {', '.join(routes)}, not {settings.workload}",
        )
    return route


def by_path() -> dict[str, HttpRoute]:
    """Every request path a server answers, with its route (the first workload registered
    with a path gives it: a tiled retouch shares the whole one's path)."""
    out: dict[str, HttpRoute] = {}
    for kind in WORKLOADS.values():
        if kind.route is not None:
            out.setdefault(kind.route.path, kind.route)
    return out


register_topology(TopologyKind("direct", edges=("link",)))
register_topology(
    TopologyKind(
        "relay",
        edges=("link", "near_link"),
        ends={"near_link": ("client", "relay"), "link": ("relay", "server")},
        columns=("relay", "topology"),
        series=(("near_link", "link"),),
        label_setting="route",
        relayed=lambda s: s.route == "relay",
    )
)


def _check_dual(s: Any) -> None:
    """Two paths carry one upload: HTTP/2 in four arms, HTTP/3 only as a migration."""
    carries = protocol(s.protocol).upload_mode
    if carries is None:
        able = [p.name for p in PROTOCOLS.values() if p.upload_mode is not None]
        raise SpecError("protocol", f"two paths carry {' or '.join(able)}, not {s.protocol!r}")
    mode = carries(s)
    if mode == MIGRATE and s.outage_at_s is None:
        raise SpecError(
            "protocol",
            f"{s.protocol} on two paths: multipath = single with outage_at (a migration)",
        )
    if s.outage_at_s is not None and mode not in (*MULTIPATH_FAILOVER, MIGRATE):
        raise SpecError(
            "outage_at",
            f"a failover needs multipath {' or '.join(MULTIPATH_FAILOVER)} (or h3 migrating), "
            f"not {s.multipath!r}",
        )
    chances = s.path_failures
    if chances is not None and mode != "duplicate":
        raise SpecError(
            "path_failures",
            f"the failure of duplication (§12.4.3): multipath = duplicate over h2, not {mode!r}",
        )
    if chances and s.exit_link is None and "exit_link" in parse_failures("", chances):
        raise SpecError("path_failures", "exit_link can fail only where exit_link is set")


MULTIPATH_FAILOVER = ("mptcp", "duplicate")
"""The h2 arms that survive the loss of one path (single and split stop with it)."""


def _dual_carries_any(s: Any) -> bool:
    """One TCP connection the kernel spreads over both paths (mptcp), or the first path alone
    (single), carries whatever HTTP/2 carries; split and duplicate are the upload client's."""
    return s.multipath in ("mptcp", "single") and "tcp" in protocol(s.protocol).traits


register_topology(
    TopologyKind(
        "dual",
        edges=("link", "link_b"),
        optional_edges=("exit_link",),
        ends={"link": ("client", "server"), "link_b": ("client", "server")},
        ends_with_optional={
            "link": ("client", "exit"),
            "link_b": ("client", "exit"),
            "exit_link": ("exit", "server"),
        },
        workloads=("upload",),
        carries_any=_dual_carries_any,
        check=_check_dual,
        columns=("dual", "topology"),
        series=(("link", "exit_link"),),
        label_setting="multipath",
    )
)
