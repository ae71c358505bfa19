"""Every knob a run can turn, defined once: name, type, unit, default, validation, which end
applies it and how.

The experiment files (``[fixed]`` and a level's keys), the ``testbed serve``/``client``
flags, the JSON document the harness hands to both stacks, the bound and the report all read
:data:`KNOBS`. :class:`Settings` is generated from it, so adding a knob is one
:func:`knob` call here plus the code that uses ``settings.<attr>``.

A knob has two forms of its value: the *written* form (TOML or a flag: ``"64kb"``,
``"333mbit"``, ``"30ms"``, ``"none"``) that :meth:`Knob.parse` turns into the *typed* form
(bytes, bit/s, seconds, None), and the typed form that :class:`Settings` holds, checks on
construction (:meth:`Knob.check`) and writes to the JSON document.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import asdict, dataclass, field, fields, make_dataclass, replace
from typing import Any, ClassVar

from tbcore import ackpolicy, cross, failures, fecmath, kinds, quicstack, units
from tbcore.errors import SpecError, require_schema
from tbcore.paths import read_regular_text

SETTINGS_SCHEMA = "testbed.settings"
SETTINGS_SCHEMA_VERSION = 1
"""Version of the settings document; bump it when a knob is renamed or changes meaning."""

ENDS = ("server", "client", "both", "link", "harness")
"""Who applies a knob: a stack (server, client or both, through the settings document), the
harness on the namespaces and routes (link), or the harness alone (bound, capture)."""

NONE_WORDS = ("none", "auto", "off")
"""How a file or flag says "leave the kernel or library default" for an optional knob."""

TCP_CONGESTION_CONTROLS = kinds.TCP_CONGESTION_CONTROLS
QUIC_CONGESTION_CONTROLS = kinds.QUIC_CONGESTION_CONTROLS
CONGESTION_CONTROLS = tuple(dict.fromkeys((*TCP_CONGESTION_CONTROLS, *QUIC_CONGESTION_CONTROLS)))
"""What ``cc`` may name; each protocol's stack takes its own (tbcore.kinds ``controls``)."""
QUIC_PACING_MODES = ("cwnd", "off")
"""``quic_pacing`` words; anything else is a rate."""
CONNECTION_MODES = ("new", "reused", "0rtt")
TOPOLOGIES = kinds.TOPOLOGIES
"""The shapes by name (tbcore.kinds.register_topology; netem.topologyspec builds them)."""
SCREENSHOT_MODES = ("raw", "webp", "jpeg")
SCREENS = ("desktop", "photo")
"""tbcore.agent.SCREENS: what the agent's screen shows."""
"""tbcore.agent.SCREENSHOT_MODES: raw RGB or a Pillow codec."""
RECOVERY_MODES = ("committed", "restart")
OUTAGE_MODES = ("break", "blackout")
"""How an agent task's outage interrupts it (knob ``outage_mode``)."""
ROUTES = ("relay", "direct")
"""A relay topology's routes: through the relay's proxy, or IP-routed past it."""
MULTIPATH_MODES = ("single", "mptcp", "split", "duplicate")
"""The arms of an upload over two paths (clients.multipath)."""

QUIC_MIN_DATAGRAM_BYTES = 1200
"""RFC 9000 section 14: a QUIC endpoint must be able to send 1200-byte datagrams."""
QUIC_MAX_DATAGRAM_BYTES = 65_527
"""Largest UDP payload (RFC 9000 max_udp_payload_size upper bound is 65527)."""
H2_MIN_WINDOW_BYTES = 65_535
"""HTTP/2's initial flow-control window; a smaller one would stall the peer (RFC 9113 6.9.2)."""
H2_MAX_WINDOW_BYTES = 2**31 - 1
"""The largest HTTP/2 flow-control window (RFC 9113 section 6.9.1)."""
H2_DEFAULT_WINDOW_BYTES = 16 * 2**20
"""HTTP/2 stream and connection windows large enough not to be the limit (16 MiB)."""
MAX_SETTINGS_BYTES = 1 << 20
"""A settings document above 1 MiB is refused unread (one is a few kB)."""
MAX_INITCWND_SEGMENTS = 1024
"""Upper end of ``ip route ... initcwnd`` values that make sense (the kernel takes 32 bits)."""
DEFAULT_INITCWND_SEGMENTS = 10
"""Linux's TCP_INIT_CWND (RFC 6928), what a route without the metric gets."""
TCP_DEFAULT_MSS_BYTES = 1448
"""1500 MTU - 40 IP/TCP header bytes - 12 bytes of timestamp option."""
TCP_MIN_MSS_BYTES = 536
"""RFC 9293 section 3.7.1: the default send MSS every host accepts."""
TCP_MAX_MSS_BYTES = 65_495
"""The loopback MTU (65536) less 40 header bytes: no path has a larger segment."""
SOCKOPT_MAX_BYTES = 2**31 - 1
"""setsockopt() takes a C int: the ceiling of SO_SNDBUF, SO_RCVBUF, TCP_WINDOW_CLAMP and
TCP_NOTSENT_LOWAT (a larger value was a TypeError in the server, every run invalid)."""
SYSCTL_NAME = re.compile(r"net(\.[A-Za-z0-9_-]+)+", re.ASCII)
"""A namespaced sysctl as /proc/sys spells it, dots between words (no spaces): checked when
the experiment is read, before a result directory or a link exists."""
SYSCTL_LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029\x7f"
"""What ``str.splitlines`` breaks at (and DEL): none belongs in a sysctl value."""
AIOQUIC_MAX_ACK_DELAY_S = 0.025
"""The max_ack_delay aioquic advertises (25 ms, its transport parameters): a receiver must
not delay an ACK longer than it (RFC 9000 section 13.2.1), so a longer ACK delay is refused."""
MAX_REQUESTS = 10_000
MAX_STREAM_CHUNKS = 30_000
STREAM_WORKLOADS = ("tts", "stream", "result")
"""What ``multi`` puts on one connection: the audio (whole or streamed), the image result."""
SEND_POLICIES = ("none", "rr", "fifo", "rfc9218")
"""proto.priority: none of the server's own, round robin, arrival order, RFC 9218."""
PRIORITY_SIGNALS = ("header", "update", "none")
"""How the client signals RFC 9218 priorities: the ``priority`` header (section 5), the
header and a PRIORITY_UPDATE frame (section 7; HTTP/3), or not at all."""
TRACE_STARTS = ("fixed", "spread")
"""``trace_start``: every run at the link's trace_offset, or spread over one period."""
CAPTURE_MODES = ("auto", "headers", "full", "off")
"""``capture``: whole packets where the run's bytes are small, else headers
(harness.run.capture), the first 128 bytes of each packet, whole packets, or none; true and
false mean headers and off. Every capture is pcapng with the run's TLS secrets inside."""


# --- how a written value becomes a typed one -------------------------------------------------


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise SpecError(name, f"must be true or false, got {value!r}")
    return value


def _whole(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise SpecError(name, f"must be a whole number, got {value!r}")
    return units.parse_whole(name, value)


def _size(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise SpecError(name, f"must be a size such as 64kb or 65536, got {value!r}")
    return units.parse_size_bytes(name, value)


def _rate(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, str):
        raise SpecError(name, f"must be a rate such as '333mbit', got {value!r}")
    return units.parse_rate_bps(name, value)


def _duration(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, str):
        raise SpecError(name, f"must be a duration such as '30ms', got {value!r}")
    return units.parse_duration_s(name, value)


def _nonblank(name: str, value: Any, problem: str) -> str:
    """``value`` when it is a string with more than white space in it; else ``problem``."""
    if not isinstance(value, str) or not value.strip():
        raise SpecError(name, problem)
    return value


def _text(name: str, value: Any) -> str:
    return _nonblank(name, value, f"must be a non-empty string, got {value!r}")


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise SpecError(name, f"must be a number, got {value!r}")
    return units.parse_number(name, value)


def _probability(name: str, value: Any) -> float:
    return units.parse_probability(name, value)


def _redundancy(name: str, value: Any) -> str:
    fecmath.parse_redundancy(name, value)
    return value


def _ack_policy(name: str, value: Any) -> str:
    return ackpolicy.parse_ack_policy(name, value).text


def _pacing(name: str, value: Any) -> str | float:
    if value in QUIC_PACING_MODES:
        return value
    return _rate(name, value)


def _streams(name: str, value: Any) -> str:
    """``"result,tts"``: workloads in request order (a string: a list would be a factor)."""
    return _nonblank(name, value, f"must be workloads in order like 'result,tts', not {value!r}")


def _capture(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "headers" if value else "off"
    return _text(name, value)


def sysctl_value(name: str, value: Any) -> str:
    """A sysctl value as written: a whole number, or one line of text (words separated by
    spaces or tabs, as ``tcp_rmem``'s three numbers). A line break or another control
    character is refused: /proc/sys takes the first line and drops the rest unsaid."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise SpecError(name, f"must be a number or string, got {value!r}")
    text = str(value)
    if any(ch in SYSCTL_LINE_BREAKS or (ord(ch) < 0x20 and ch != "\t") for ch in text):
        raise SpecError(name, f"{text!r} is not one line")
    if not text.strip():
        raise SpecError(name, "is empty")
    return text


def _cross(name: str, value: Any) -> str:
    """``tcp:N:cc`` or ``udp:RATE`` (tbcore.cross), kept as written once checked."""
    cross.parse_cross(name, value, TCP_CONGESTION_CONTROLS)
    return str(value).strip().lower()


def _failures(name: str, value: Any) -> str:
    """``edge=P,...`` (tbcore.failures), written back in its edges' order once checked."""
    parsed = failures.parse_failures(name, value)
    return ",".join(f"{edge}={units.format_percent(p)}" for edge, p in parsed.items())


def _table(name: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise SpecError(name, "must be a table of sysctl = value")
    out = {}
    for key, val in value.items():
        if not isinstance(key, str) or not SYSCTL_NAME.fullmatch(key):
            raise SpecError(f"{name}.{key}", "only net.* sysctls of the namespaces may be set")
        out[key] = sysctl_value(f"{name}.{key}", val)
    return out


KINDS: dict[str, tuple[Callable[[str, Any], Any], tuple[type, ...]]] = {
    # kind: (written form -> typed, the typed form's Python types)
    "bool": (_bool, (bool,)),
    "int": (_whole, (int,)),
    "size": (_size, (int,)),
    "rate": (_rate, (int, float)),
    "duration": (_duration, (int, float)),
    "choice": (_text, (str,)),
    "text": (_text, (str,)),
    "pacing": (_pacing, (str, int, float)),
    "number": (_number, (int, float)),
    "probability": (_probability, (int, float)),
    "redundancy": (_redundancy, (str,)),
    "ack_policy": (_ack_policy, (str,)),
    "table": (_table, (dict,)),
    "streams": (_streams, (str,)),
    "capture": (_capture, (str,)),
    "cross": (_cross, (str,)),
    "failures": (_failures, (str,)),
}
"""The kinds of knob value: how each is written and what it is once typed."""


@dataclass(frozen=True)
class Scope:
    """Where a knob takes effect: on each axis the kinds of tbcore.kinds that apply it, named
    by a kind's name or by one of its traits (any of them will do); an empty axis: every
    kind. The spec stage refuses a knob a level sets where it has no effect, and a fixed one
    no level applies; a run records under ``ignored_settings`` the fixed ones it does not
    apply (:meth:`Settings.ignored`)."""

    protocols: tuple[str, ...] = ()
    workloads: tuple[str, ...] = ()
    topologies: tuple[str, ...] = ()
    needs: str | None = None
    """Another knob (key) that must be away from its default for this one to act (an
    outage's length acts only with the round it follows)."""

    def axes(self) -> tuple[tuple[str, tuple[str, ...], Mapping[str, Any]], ...]:
        """(settings field, the traits it must have, the registry of its kinds) per axis."""
        return (
            ("protocol", self.protocols, kinds.PROTOCOLS),
            ("workload", self.workloads, kinds.WORKLOADS),
            ("topology", self.topologies, kinds.TOPOLOGIES),
        )

    def kinds_of(self, axis: str) -> list[str]:
        """The registered kinds of ``axis`` (protocol, workload, topology) that apply it."""
        for name, wanted, registry in self.axes():
            if name == axis:
                return [k for k, kind in registry.items() if _covers(wanted, kind)]
        raise ValueError(f"no axis {axis!r}")

    def refusal(self, settings: Any) -> str | None:
        """Why the knob has no effect on a run of ``settings``; None when it takes effect."""
        for name, wanted, registry in self.axes():
            value = getattr(settings, name)
            kind = registry.get(value)
            if kind is None or _covers(wanted, kind):
                continue
            able = ", ".join(self.kinds_of(name))
            return f"takes effect on {name} {able} only, not {value!r}"
        if self.needs is not None:
            other = KNOBS[self.needs]
            if getattr(settings, other.attr) == other.default:
                return f"takes effect only with {self.needs} set (not {other.default!r})"
        return None


def _covers(wanted: tuple[str, ...], kind: Any) -> bool:
    return not wanted or not kinds.traits_of(kind).isdisjoint(wanted)


EVERYWHERE = Scope()
"""A knob every protocol, workload and topology applies."""


@dataclass(frozen=True)
class Knob:
    """One setting of a run."""

    key: str
    """The name in experiment files and flags (``--key-with-dashes``)."""
    attr: str
    """The :class:`Settings` field, with its unit (``window_clamp_bytes``)."""
    kind: str
    """One of :data:`KINDS`."""
    default: Any
    unit: str
    """``bytes``, ``bit/s``, ``s``, ``segments``, ``count`` or empty."""
    applies: str
    """One of :data:`ENDS`."""
    how: str
    """What applying it does (socket option, route metric, library setting...)."""
    doc: str = ""
    choices: Collection[str] = ()
    """The allowed words of a ``choice``; a registry (tbcore.kinds) stays live: a name
    registered later is accepted."""
    low: float | None = None
    high: float | None = None
    optional: bool = False
    """None is a value: the kernel's or library's default."""
    scope: Scope = EVERYWHERE
    """The protocols, workloads and topologies it takes effect on."""

    def parse(self, name: str, value: Any) -> Any:
        """The written form (TOML value or flag text) -> the typed form, checked."""
        if self.optional and value in NONE_WORDS:
            return None
        if self.kind == "bool" and isinstance(value, str) and value in ("true", "false"):
            value = value == "true"
        typed = KINDS[self.kind][0](name, value)
        self.check(name, typed)
        return typed

    def check(self, name: str, value: Any) -> None:
        """A typed value: its type, its range, its choices (SpecError naming ``name``)."""
        if value is None:
            if not self.optional:
                raise SpecError(name, "must be given (it has no 'none' form)")
            return
        types = KINDS[self.kind][1]
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            raise SpecError(name, f"must be {self.kind}, got {value!r}")
        if self.choices and value not in self.choices:
            raise SpecError(name, f"must be one of {', '.join(self.choices)}, got {value!r}")
        if self.kind == "streams" and value:
            for item in value.split(","):
                if item not in STREAM_WORKLOADS:
                    raise SpecError(name, f"{item!r} is not one of {', '.join(STREAM_WORKLOADS)}")
        if self.kind == "redundancy":
            fecmath.parse_redundancy(name, value)
            return
        if self.kind == "cross":
            cross.parse_cross(name, value, TCP_CONGESTION_CONTROLS)
            return
        if self.kind == "failures":
            failures.parse_failures(name, value)
            return
        if self.kind == "pacing" and isinstance(value, str):
            if value not in QUIC_PACING_MODES:
                raise SpecError(name, f"{value!r}: use cwnd, off or a rate")
            return
        if isinstance(value, float) and not math.isfinite(value):
            raise SpecError(name, f"{value!r} is not a finite number")
        # written so that a NaN that got this far fails them too
        if self.low is not None and not self.low <= value:
            raise SpecError(name, f"must be at least {self.low:g} {self.unit}".rstrip())
        if self.high is not None and not value <= self.high:
            raise SpecError(name, f"must be at most {self.high:g} {self.unit}".rstrip())

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")


KNOBS: dict[str, Knob] = {}
"""Every knob by its key, in definition order."""


def knob(key: str, attr: str | None = None, **spec: Any) -> Knob:
    """Define a knob (once). ``attr`` defaults to ``key``."""
    if key in KNOBS:
        raise ValueError(f"knob {key!r} defined twice")
    made = Knob(key=key, attr=attr or key, **spec)
    if made.kind not in KINDS or made.applies not in ENDS:
        raise ValueError(f"knob {key!r}: unknown kind {made.kind!r} or end {made.applies!r}")
    made.check(key, made.default)
    KNOBS[key] = made
    return made


TASK_ROUND_KNOBS = ("outage_after_round", "rate_change_after_round", "agent_deadline")
"""The agent's knobs that count one task's rounds or time it whole: not with several tasks
or attempts redone (agent_tasks, task_success)."""


def _check_tasks(s: Any) -> None:
    """Several tasks, or attempts the model judges, leave no single task for a knob of
    :data:`TASK_ROUND_KNOBS` to act on: refused, naming it."""
    if not s.several_tasks:
        return
    for key in TASK_ROUND_KNOBS:
        if getattr(s, KNOBS[key].attr) is not None:
            raise SpecError(
                key, "acts on one task's rounds: not with agent_tasks above 1 or task_success"
            )


def by_attr() -> dict[str, Knob]:
    return {k.attr: k for k in KNOBS.values()}


# --- the knobs -------------------------------------------------------------------------------

# what runs
knob("link", kind="text", default="dc-longhaul-clean", unit="", applies="link",
     how="the emulated path of both directions", doc="A preset name or link string "
     "(netem.linkspec), a level's value overriding keys of the fixed one.",
     scope=EVERYWHERE)  # fmt: skip
knob("protocol", kind="choice", default="h2", unit="", applies="client",
     how="which stack serves and requests", choices=kinds.PROTOCOLS,
     doc="h2 (TLS 1.3 over TCP), h3 (QUIC), or another of tbcore.kinds.PROTOCOLS.",
     scope=EVERYWHERE)  # fmt: skip
knob("connection", kind="choice", default="new", unit="", applies="client",
     how="connection per request", choices=CONNECTION_MODES,
     doc="new connection per request, one reused connection, or QUIC 0rtt.",
     scope=Scope(workloads=("request", "agent")))  # fmt: skip
knob("workload", kind="choice", default="asr", unit="", applies="client",
     how="the request the client makes and the server answers",
     choices=kinds.WORKLOADS,
     doc="One of tbcore.kinds.WORKLOADS (image and sink: the 30 MB bench transfers).",
     scope=EVERYWHERE)  # fmt: skip
knob("chunks", kind="int", default=50, unit="count", applies="client",
     how="chunks the stream workload asks for", low=1, high=MAX_STREAM_CHUNKS,
     doc="Chunks of the stream workload (20 ms of audio each).",
     scope=Scope(workloads=("chunks",)))  # fmt: skip
knob("sample_rate", "sample_rate_hz", kind="int", default=24_000, unit="Hz",
     applies="client", how="stream: the audio's sample rate; each 20 ms chunk is 2 bytes a "
     "sample (24 kHz: 960 bytes, 384 kbit/s; 16 kHz: 640 bytes, 256 kbit/s, the chapter's F8)",
     low=16_000, high=24_000,
     scope=Scope(protocols=("http",), workloads=("stream",)))  # fmt: skip
knob("late_chunk", kind="int", default=None, unit="count", applies="client",
     how="stream: the server sends this chunk (from 1) late_chunk_delay after it is produced, "
     "and nothing after it sooner (the chapter's §12.1.2: chunk 3 45 ms late)", low=1,
     high=MAX_STREAM_CHUNKS, optional=True,
     scope=Scope(protocols=("http",), workloads=("stream",)))  # fmt: skip
knob("late_chunk_delay", "late_chunk_delay_s", kind="duration", default=0.045, unit="s",
     applies="client", how="stream: how late late_chunk leaves the server", low=0, high=10.0,
     scope=Scope(protocols=("http",), workloads=("stream",), needs="late_chunk"))  # fmt: skip
knob("streams", kind="streams", default="", unit="", applies="client",
     how="multi: the requests sent at once on one connection, in this order",
     doc="STREAM_WORKLOADS, comma-separated: 'result,tts'.",
     scope=Scope(workloads=("streams",)))  # fmt: skip
knob("priority_signal", kind="choice", default="header", unit="", applies="client",
     how="RFC 9218 priority of each stream: header, header + PRIORITY_UPDATE, or none",
     choices=PRIORITY_SIGNALS,
     scope=Scope(protocols=("http",), workloads=("streams",)))  # fmt: skip
knob("cancel_after", "cancel_after_chunks", kind="int", default=None, unit="count",
     applies="client", how="stream: RST_STREAM / STOP_SENDING after this many chunks read",
     low=1, high=MAX_STREAM_CHUNKS - 1, optional=True,
     scope=Scope(protocols=("http",), workloads=("chunks",)))  # fmt: skip
knob("player_buffer", "player_buffer_s", kind="duration", default=None, unit="s",
     applies="client", how="stream: a real-clock player with this initial buffer plays it",
     low=0, high=10, optional=True,
     scope=Scope(protocols=("http",), workloads=("chunks",)))  # fmt: skip
knob("send_policy", kind="choice", default="none", unit="", applies="server",
     how="which response stream of a connection sends next (proto.priority)",
     choices=SEND_POLICIES,
     doc="none (aioquic's round robin, HTTP/2 writes freely), rr, fifo or rfc9218.",
     scope=Scope(protocols=("http",), workloads=("streams",)))  # fmt: skip
knob("requests", kind="int", default=1, unit="count", applies="client",
     how="measured requests of one client process", low=1, high=MAX_REQUESTS,
     scope=Scope(workloads=("request",)))  # fmt: skip
knob("warmup_requests", kind="int", default=0, unit="count", applies="client",
     how="requests made first and flagged warm-up", low=0, high=MAX_REQUESTS,
     doc="Made first in the same client process (reused: on the same connection).",
     scope=Scope(workloads=("request", "agent")))  # fmt: skip
knob("tls", kind="bool", default=True, unit="", applies="both",
     how="false: HTTP/2 in cleartext over TCP with prior knowledge (RFC 9113 section 3.3), "
     "no TLS handshake: the seed's plain-TCP request (the chapter's §12.3.1)",
     scope=Scope(protocols=("h2",), workloads=("request", "agent"),
                 topologies=("direct",)))  # fmt: skip
knob("resume", kind="bool", default=False, unit="", applies="client",
     how="TLS session resumption on a new TCP connection (needs a warm-up request)",
     scope=Scope(protocols=("sessions",), workloads=("request", "agent")))  # fmt: skip
# topologies beyond one link (netem.topologyspec, issue 14)
knob("topology", kind="choice", default="direct", unit="", applies="link",
     how="the shape: nodes and edges, a LinkSpec per edge", choices=TOPOLOGIES,
     doc="direct (client - link - server), relay (client - near_link - relay - link - "
     "server) or dual (two paths, link and link_b, optionally behind exit_link).",
     scope=EVERYWHERE)  # fmt: skip
knob("near_link", kind="text", default=None, unit="", applies="link", optional=True,
     how="relay: the client's hop to the relay (a preset or link string)",
     scope=Scope(topologies=("relay",)))  # fmt: skip
knob("link_b", kind="text", default=None, unit="", applies="link", optional=True,
     how="dual: the second path (a preset or link string)",
     scope=Scope(topologies=("dual",)))  # fmt: skip
knob("exit_link", kind="text", default=None, unit="", applies="link", optional=True,
     how="dual: a shared exit both paths cross (a preset or link string)",
     scope=Scope(topologies=("dual",)))  # fmt: skip
knob("route", kind="choice", default="relay", unit="", applies="harness",
     how="relay: the client's requests go to the relay (a reverse proxy with a warm long "
     "haul) or straight to the server across the same edges", choices=ROUTES,
     scope=Scope(topologies=("relay",)))  # fmt: skip
knob("outage_at", "outage_at_s", kind="duration", default=None, unit="s", applies="harness",
     how="dual: the link edge goes down this long after the upload starts, for the rest of "
     "the run (a failover to link_b)", low=0, high=3600, optional=True,
     scope=Scope(topologies=("dual",)))  # fmt: skip
knob("path_failures", kind="failures", default=None, unit="", applies="harness",
     optional=True, how="dual: edges down for a whole run, each with its probability, drawn "
     "per run from its seed (link=10%,link_b=5%,exit_link=2%; 100% forces one down)",
     scope=Scope(topologies=("dual",)),
     doc="tbcore.failures; the chapter's §12.4.3 failure of duplication (F51).")  # fmt: skip
knob("size", "size_bytes", kind="size", default=None, unit="bytes", applies="client",
     how="upload: the bytes of the upload (None: the 30 MB image)", low=1,
     high=30_000_000, optional=True, scope=Scope(workloads=("upload",)))  # fmt: skip
knob("chunk_size", "chunk_bytes", kind="size", default=None, unit="bytes", applies="client",
     how="upload, multipath duplicate: the numbered chunks each path carries a copy of "
     "(None: 1 MB; the chapter's §12.4.3 duplicates 640-byte audio chunks)", low=1,
     high=30_000_000, optional=True,
     scope=Scope(workloads=("upload",), needs="multipath"))  # fmt: skip
knob("multipath", kind="choice", default="single", unit="", applies="both",
     how="how an upload uses two paths", choices=MULTIPATH_MODES,
     doc="single (the first path), mptcp (IPPROTO_MPTCP at both ends; the kernel's "
     "subflows), split (one connection per path, bytes in proportion to measured rates) "
     "or duplicate (every chunk on both; the receiver keeps the first copy).",
     scope=Scope(protocols=("tcp",), topologies=("dual",)))  # fmt: skip
# congestion control and the namespaces
knob("cc", kind="choice", default="cubic", unit="", applies="both",
     how="the congestion control of the level's transport: TCP_CONGESTION on every TCP "
     "socket (the kernel's), aioquic's registered control for QUIC",
     choices=CONGESTION_CONTROLS, scope=Scope(protocols=("tcp", "quic")),
     doc="One name for both stacks: 'bbr' is the kernel's BBR v1 for h2 and the same "
     "algorithm (proto/quic/bbr.py) for h3; a control the level's stack lacks is "
     "refused.")  # fmt: skip
knob("quic_cc", kind="choice", default=None, unit="", applies="both",
     how="an explicit override of cc for QUIC (aioquic congestion_control_algorithm)",
     choices=QUIC_CONGESTION_CONTROLS, scope=Scope(protocols=("quic",)), optional=True,
     doc="None: cc.")  # fmt: skip
knob("slow_start_after_idle", kind="bool", default=True, unit="", applies="link",
     how="net.ipv4.tcp_slow_start_after_idle in both namespaces",
     scope=Scope(protocols=("tcp",)))  # fmt: skip
knob("initcwnd", kind="int", default=None, unit="segments", applies="link",
     how="route metric initcwnd in both namespaces", low=1, high=MAX_INITCWND_SEGMENTS,
     optional=True, doc="None: the kernel's 10 (RFC 6928).",
     scope=Scope(protocols=("tcp",)))  # fmt: skip
knob("initrwnd", kind="int", default=None, unit="segments", applies="link",
     how="route metric initrwnd in both namespaces", low=1, high=MAX_INITCWND_SEGMENTS,
     optional=True, scope=Scope(protocols=("tcp",)))  # fmt: skip
knob("route_quickack", kind="bool", default=False, unit="", applies="link",
     how="route metric quickack in both namespaces: every segment acknowledged at once",
     doc="An ACK per segment, which TCP_QUICKACK (quickack) alone does not hold: Linux "
     "falls back to delayed ACKs between reads.", scope=Scope(protocols=("tcp",)))  # fmt: skip
knob("sysctls", kind="table", default={}, unit="", applies="link",
     how="extra net.* sysctls in both namespaces",
     doc='e.g. {"net.ipv4.tcp_sack" = "1"}', scope=EVERYWHERE)  # fmt: skip
# sockets (both ends alike)
knob("window_clamp", "window_clamp_bytes", kind="size", default=None, unit="bytes",
     applies="both", how="TCP_WINDOW_CLAMP, set again after every read", low=1024,
     high=SOCKOPT_MAX_BYTES, optional=True,
     doc="A fixed TCP window; None for autotuning. Linux replaces a clamp as data arrives "
     "(proto/sockopts.py hold_window_clamp), so each end sets it again after every read.",
     scope=Scope(protocols=("tcp",)))  # fmt: skip
knob("sndbuf", "sndbuf_bytes", kind="size", default=None, unit="bytes", applies="both",
     how="SO_SNDBUF", low=4096, high=SOCKOPT_MAX_BYTES, optional=True,
     scope=Scope(protocols=("tcp",)))  # fmt: skip
knob("rcvbuf", "rcvbuf_bytes", kind="size", default=None, unit="bytes", applies="both",
     how="SO_RCVBUF", low=4096, high=SOCKOPT_MAX_BYTES, optional=True,
     scope=Scope(protocols=("tcp",)))  # fmt: skip
knob("max_pacing_rate", "max_pacing_rate_bps", kind="rate", default=None, unit="bit/s",
     applies="both", how="SO_MAX_PACING_RATE (bytes/s to the kernel); caps QUIC's pacer too",
     low=1, optional=True, scope=Scope(protocols=("tcp", "quic")))  # fmt: skip
knob("pace_at_path_rate", kind="bool", default=False, unit="", applies="harness",
     how="each end's max_pacing_rate set to the rate of the direction it sends on",
     scope=Scope(protocols=("tcp", "quic")))  # fmt: skip
knob("notsent_lowat", "notsent_lowat_bytes", kind="size", default=None, unit="bytes",
     applies="both", how="TCP_NOTSENT_LOWAT", low=1, high=SOCKOPT_MAX_BYTES,
     optional=True, scope=Scope(protocols=("tcp",)))  # fmt: skip
knob("quickack", kind="bool", default=False, unit="", applies="both",
     how="TCP_QUICKACK after each read: an ACK per segment instead of delayed ACKs",
     scope=Scope(protocols=("tcp",)))  # fmt: skip
# QUIC and HTTP/2
knob("max_datagram_size", "max_datagram_size_bytes", kind="size",
     default=QUIC_MIN_DATAGRAM_BYTES, unit="bytes", applies="both",
     how="aioquic max_datagram_size", low=QUIC_MIN_DATAGRAM_BYTES,
     high=QUIC_MAX_DATAGRAM_BYTES, scope=Scope(protocols=("quic",)))  # fmt: skip
knob("quic_pacing", kind="pacing", default="cwnd", unit="bit/s", applies="both",
     how="the QUIC sender's pacer", low=1,
     doc="cwnd (the control's own pacing: aioquic's pacer at cwnd/srtt for reno and cubic, "
     "bbr's pacing_gain x bw for bbr), off (cwnd-limited bursts, as Linux reno/cubic "
     "without fq) or a rate such as 333mbit.", scope=Scope(protocols=("quic",)))  # fmt: skip
knob("quic_ack_delay", "quic_ack_delay_s", kind="duration", default=None, unit="s",
     applies="both", how="aioquic receiver's ACK delay (its _ack_delay)", low=0,
     high=AIOQUIC_MAX_ACK_DELAY_S, optional=True,
     doc="How long a receiver waits after an ack-eliciting packet before an ACK of its "
     "own: aioquic's only ACK-frequency knob, at most its max_ack_delay. None: 1 ms.",
     scope=Scope(protocols=("quic",)))  # fmt: skip
knob("ack_policy", kind="ack_policy", default="default", unit="", applies="both",
     how="the receiver's ACK policy (tbcore.ackpolicy)",
     doc="When a receiver acknowledges: default (the stack's own rule), immediate (one ACK "
     "per ack-eliciting packet; TCP: the quickack route metric and TCP_QUICKACK after each "
     "read), every:N,max:T (after N such packets or T after the first, whichever first; a "
     "packet out of order at once; over TCP N = 2, Linux's own rule, with T its delayed-ACK "
     "ceiling through a BPF program: proto/delack.py), ack-frequency or tack (QUIC only).",
     scope=Scope(protocols=("quic", "tcp")))  # fmt: skip
knob("quic_batching", kind="bool", default=True, unit="", applies="both",
     how="QUIC: runs of datagrams as UDP GSO segments, one transmit per batch read",
     doc="false: aioquic's one sendto and one transmit per datagram (bench stacks).",
     scope=Scope(protocols=("quic",)))  # fmt: skip
knob("quic_max_data", "quic_max_data_bytes", kind="size", default=None, unit="bytes",
     applies="both", how="aioquic max_data and max_stream_data, fixed", low=1024,
     optional=True, doc="None: aioquic's self-growing windows.",
     scope=Scope(protocols=("quic",)))  # fmt: skip
knob("h2_window", "h2_window_bytes", kind="size", default=H2_DEFAULT_WINDOW_BYTES,
     unit="bytes", applies="both", how="HTTP/2 stream and connection flow-control windows",
     low=H2_MIN_WINDOW_BYTES, high=H2_MAX_WINDOW_BYTES, scope=Scope(protocols=("h2",)))  # fmt: skip
# the FEC protocol (servers/fec*.py; ignored by h2 and h3)
knob("fec_rate", "fec_rate_bps", kind="rate", default=None, unit="bit/s", applies="both",
     how="FEC: the cap on the sender's rate; the harness sets each end's to the configured "
     "rate of the direction it sends on", low=1, optional=True,
     doc="The stacks refuse to start fec without it.", scope=Scope(protocols=("fec",)))  # fmt: skip
knob("fec_redundancy", kind="redundancy", default="adaptive", unit="", applies="both",
     how="FEC: repair symbols from the receiver's loss estimate, or a fixed percentage",
     doc="'adaptive' (binomial at fec_target; Markov when the loss comes in bursts) or "
     "'25.7%'.", scope=Scope(protocols=("fec",)))  # fmt: skip
knob("fec_target", kind="number", default=0.999, unit="", applies="both",
     how="FEC: the adaptive redundancy's success probability per transfer (docs/models.md s10)",
     low=0.5, high=0.999999, scope=Scope(protocols=("fec",)))  # fmt: skip

# the server's work, the client's patience
knob("processing_audio", "processing_audio_s", kind="duration", default=0.030, unit="s",
     applies="server", how="asyncio.sleep per audio request (asr, tts)", low=0,
     scope=Scope(workloads=("audio_processing",)))  # fmt: skip
knob("processing_image", "processing_image_s", kind="duration", default=0.300, unit="s",
     applies="server", how="asyncio.sleep per image request (retouch)", low=0,
     scope=Scope(workloads=("image_processing",)))  # fmt: skip
knob("processing_restore", "processing_restore_s", kind="duration", default=1.0, unit="s",
     applies="server", how="asyncio.sleep after a migrated state arrives (its restore, the "
     "chapter's 1 s of §12.2.3)", low=0,
     scope=Scope(workloads=("restore_processing",)))  # fmt: skip
knob("timeout", "timeout_s", kind="duration", default=60.0, unit="s", applies="client",
     how="limit on each connect and each request", low=1e-3, scope=EVERYWHERE)  # fmt: skip
# the agent workload (issue 13; the chapter's §12.1.3, §12.3.1, §12.5)
knob("agent_rounds", kind="int", default=30, unit="count", applies="client",
     how="rounds of the agent task (one screenshot up, one action back each)", low=1,
     high=MAX_REQUESTS, scope=Scope(workloads=("agent",)))  # fmt: skip
knob("agent_tasks", kind="int", default=1, unit="count", applies="client",
     how="tasks of agent_rounds rounds each, one after the other in the run", low=1,
     high=MAX_REQUESTS, scope=Scope(workloads=("agent",)))  # fmt: skip
knob("task_success", kind="probability", default=None, unit="", applies="server",
     how="the model judges each task attempt at its last round: done with this probability "
     "(80% or 0.8), else failed and the task is done again whole", low=1e-3, high=1.0,
     optional=True, doc="Independent attempts, the chapter's E = C / p (§12.5.2); the "
     "verdict is drawn from the attempt's operation id (tbcore.agent.task_outcome).",
     scope=Scope(workloads=("agent",)))  # fmt: skip
knob("agent_local", "agent_local_s", kind="duration", default=0.3, unit="s",
     applies="client", how="client work per round: capture (Pillow render) then the rest "
     "of the duration waited", low=0, scope=Scope(workloads=("agent",)))  # fmt: skip
knob("agent_model", "agent_model_s", kind="duration", default=2.0, unit="s",
     applies="server", how="asyncio.sleep per executed round (the model's decision)",
     low=0, scope=Scope(workloads=("agent",)))  # fmt: skip
knob("screenshot", kind="choice", default="raw", unit="", applies="client",
     how="raw RGB (798,720 bytes) or a Pillow codec", choices=SCREENSHOT_MODES,
     scope=Scope(workloads=("agent",)))  # fmt: skip
knob("screen", kind="choice", default="desktop", unit="", applies="client",
     how="what the agent's screen shows: a desktop, or an image viewer of fine detail "
     "(compresses as the chapter's 0.2 MB)", choices=SCREENS,
     scope=Scope(workloads=("agent",)))  # fmt: skip
knob("screenshot_quality", kind="int", default=80, unit="", applies="client",
     how="the codec's quality (Pillow quality=)", low=1, high=100,
     scope=Scope(workloads=("agent",), needs="screenshot"))  # fmt: skip
knob("recovery", kind="choice", default="committed", unit="", applies="client",
     how="after a lost round: resume after the last acknowledged one, or redo all",
     choices=RECOVERY_MODES, scope=Scope(workloads=("agent",)))  # fmt: skip
knob("outage_after_round", kind="int", default=None, unit="count", applies="harness",
     how="the task is interrupted once this many rounds are acknowledged (outage_mode)",
     low=1, optional=True, scope=Scope(workloads=("agent",)))  # fmt: skip
knob("outage", "outage_s", kind="duration", default=1.0, unit="s", applies="harness",
     how="break: the client's wait from the reset to its reconnection; blackout: how long "
     "the link drops everything", low=1e-3,
     scope=Scope(workloads=("agent",), needs="outage_after_round"))  # fmt: skip
knob("outage_mode", kind="choice", default="break", unit="", applies="client",
     how="break: the next round is executed, its reply lost and the connection reset at "
     "both ends, the client reconnecting after outage (the chapter's §12.5.2); blackout: "
     "the link drops everything for outage and the transport may ride through it",
     choices=OUTAGE_MODES,
     scope=Scope(workloads=("agent",), needs="outage_after_round"))  # fmt: skip
knob("rate_change_after_round", kind="int", default=None, unit="count", applies="harness",
     how="the uplink changes rate once this many rounds are acknowledged", low=1,
     optional=True, doc="The chapter's ten rounds at 6 Mbit/s, then ten at 10.",
     scope=Scope(workloads=("agent",), needs="rate_change"))  # fmt: skip
knob("rate_change", "rate_change_bps", kind="rate", default=None, unit="bit/s",
     applies="harness", how="the uplink's rate after rate_change_after_round", low=1,
     optional=True, scope=Scope(workloads=("agent",), needs="rate_change_after_round"))  # fmt: skip
knob("round_timeout", "round_timeout_s", kind="duration", default=None, unit="s",
     applies="client", how="agent: a round without its action this long after its first "
     "byte is lost (outage detection); None: settings.timeout", low=1e-3,
     optional=True, scope=Scope(workloads=("agent",)))  # fmt: skip
knob("agent_deadline", "agent_deadline_s", kind="duration", default=None, unit="s",
     applies="harness", how="agent: the task's deadline (deadline_met in the row)", low=1e-3,
     optional=True, scope=Scope(workloads=("agent",)))  # fmt: skip
knob("site_power", "site_power_w", kind="int", default=None, unit="W", applies="harness",
     how="agent: the model site's stated power (site_energy_j = power x busy time)", low=0,
     optional=True, scope=Scope(workloads=("agent",)))  # fmt: skip
# the harness alone
knob("mss", "mss_bytes", kind="int", default=TCP_DEFAULT_MSS_BYTES, unit="bytes",
     applies="harness", how="the segment payload TCP's request and agent bounds assume",
     low=TCP_MIN_MSS_BYTES, high=TCP_MAX_MSS_BYTES,
     scope=Scope(protocols=("tcp",), workloads=("bounded",)))  # fmt: skip
knob("capture", kind="capture", default="auto", unit="", applies="harness",
     how="client.pcapng and server.pcapng of the link (TLS secrets inside): auto (whole "
     "packets up to 32 MiB of run bytes, headers above), headers (ACK timestamps), full "
     "(whole packets: per-stream arrival, decrypted HTTP/2 and HTTP/3) or off",
     choices=CAPTURE_MODES, scope=EVERYWHERE)  # fmt: skip
knob("qlog", kind="bool", default=True, unit="", applies="harness",
     how="QUIC qlog (ACK frames) of both ends for h3 runs",
     scope=Scope(protocols=("quic",)))  # fmt: skip
# links that vary: where a run starts in its traces, competing traffic (issue 28)
knob("trace_start", kind="choice", default="fixed", unit="", applies="harness",
     how="where each run's traces start: at the link's trace_offset (fixed), or repetition "
     "r of R at trace_offset + r/R of the longest trace's period (spread)",
     choices=TRACE_STARTS, scope=EVERYWHERE,
     doc="spread samples the trace's start evenly over one period, so that a level's runs "
     "give the distribution over where a task can begin (harness.spec.traces).")  # fmt: skip
knob("cross", kind="cross", default=None, unit="", applies="harness", optional=True,
     how="competing traffic across the bottleneck, started cross_lead before the client: "
     "tcp:N:cc (N bulk iperf3 TCP flows) or udp:RATE (one constant-rate iperf3 stream)",
     scope=EVERYWHERE,
     doc="In the direction the request's data goes; harness.run.cross.")  # fmt: skip
knob("cross_lead", "cross_lead_s", kind="duration", default=3.0, unit="s", applies="harness",
     how="how long the competing flows run before the measured client starts", low=0.1,
     high=600, scope=Scope(needs="cross"),
     doc="Long enough for their windows to settle (docs/models.md section 15).")  # fmt: skip
knob("quic_stack", kind="choice", default=quicstack.DEFAULT_QUIC_STACK, unit="",
     applies="both", how="which HTTP/3 implementation serves and requests (protocol h3 only)",
     choices=quicstack.QUIC_STACKS, scope=Scope(protocols=("quic",)),
     doc="aioquic (the testbed's Python stack) or ngtcp2 (the testbed's native stack: "
     "proto/native/tbh3.c on ngtcp2 0.12 and nghttp3 0.8, C; what it cannot apply: "
     "tbcore.quicstack).")  # fmt: skip


# --- the settings of one run -----------------------------------------------------------------


class _SettingsBase:
    """Methods of :class:`Settings` (its fields come from :data:`KNOBS`)."""

    KNOBS: ClassVar[dict[str, Knob]] = KNOBS

    def __post_init__(self) -> None:
        for item in KNOBS.values():
            item.check(item.key, getattr(self, item.attr))
        s: Any = self
        kind = kinds.protocol(s.protocol)
        controls, control = kind.controls(s), kind.cc_of(s)
        if controls and control not in controls:
            key = "quic_cc" if s.quic_cc else "cc"
            raise SpecError(
                key,
                f"{s.protocol}'s stack has no {control!r} (its controls: {', '.join(controls)})",
            )
        if s.connection not in kind.connections:
            able = [p.name for p in kinds.PROTOCOLS.values() if s.connection in p.connections]
            raise SpecError(
                "connection", f"{s.connection} needs {' or '.join(able)}: {kind.connection_note}"
            )
        work = kinds.workload(s.workload)
        if work.protocols and kinds.traits_of(kind).isdisjoint(work.protocols):
            able = [
                p.name
                for p in kinds.PROTOCOLS.values()
                if not kinds.traits_of(p).isdisjoint(work.protocols)
            ]
            raise SpecError(
                "protocol", f"workload {s.workload} runs over {', '.join(able)}, not {s.protocol!r}"
            )
        takes_streams = "streams" in kinds.traits_of(work)
        if takes_streams and not s.streams:
            raise SpecError("streams", f"workload {s.workload} needs streams, e.g. 'result,tts'")
        if s.cancel_after_chunks is not None and s.cancel_after_chunks >= s.chunks:
            raise SpecError("cancel_after", f"must be below chunks ({s.chunks})")
        _check_tasks(s)
        quicstack.check(s, has_stacks=kind.stack_of(s) is not None, carried=work.stacks)
        why = kind.ack_refusal(ackpolicy.parse_ack_policy("ack_policy", s.ack_policy))
        if why is not None:
            raise SpecError("ack_policy", f"{s.ack_policy} over {s.protocol}: {why}")

    @property
    def quic_control(self) -> str:
        """QUIC's congestion control: ``quic_cc`` when given, else ``cc`` (one name for both
        stacks)."""
        return self.quic_cc or self.cc  # type: ignore[attr-defined,no-any-return]

    @property
    def several_tasks(self) -> bool:
        """Agent: the run is tasks after tasks (``agent_tasks``) or attempts the model judges
        (``task_success``), not one task (tbcore.agent.RoundPlan.per_task)."""
        s: Any = self
        return bool(s.agent_tasks > 1 or s.task_success is not None)

    @property
    def acks_each_segment(self) -> bool:
        """TCP: one ACK per segment asked of Linux at both ends (``ack_policy = "immediate"``
        over TCP): the quickack route metric and TCP_QUICKACK after each read."""
        s: Any = self
        return s.ack_policy == "immediate" and kinds.protocol(s.protocol).transport == "tcp"

    @property
    def tcp_delack_max_s(self) -> float | None:
        """TCP's delayed-ACK ceiling (``every:2,max:T`` over TCP: proto.delack), else None."""
        s: Any = self
        if kinds.protocol(s.protocol).transport != "tcp":
            return None
        policy = ackpolicy.parse_ack_policy("ack_policy", s.ack_policy)
        return policy.max_delay_s if policy.name == "every" else None

    @property
    def quickack_route(self) -> bool:
        """The quickack route metric in both namespaces: ``route_quickack`` or the policy."""
        s: Any = self
        return bool(s.route_quickack) or self.acks_each_segment

    @property
    def quickack_socket(self) -> bool:
        """TCP_QUICKACK set again after each read: ``quickack`` or the policy."""
        s: Any = self
        return bool(s.quickack) or self.acks_each_segment

    @property
    def stream_list(self) -> tuple[str, ...]:
        """``streams`` as a tuple (empty when not multi)."""
        return tuple(s for s in self.streams.split(",") if s)  # type: ignore[attr-defined]

    def to_dict(self) -> dict[str, Any]:
        """Typed values by attribute (JSON-ready)."""
        data = asdict(self)  # type: ignore[call-overload]
        data["sysctls"] = dict(data["sysctls"])
        return data

    def replace(self, **changes: Any) -> Settings:
        return replace(self, **changes)  # type: ignore[type-var]

    @classmethod
    def from_table(
        cls, table: Mapping[str, Any], where: str, base: Settings | None = None
    ) -> Settings:
        """Written values by key (a TOML table) applied to ``base``."""
        changes: dict[str, Any] = {}
        for key, value in table.items():
            if key not in KNOBS:
                raise SpecError(f"{where}.{key}", "unknown setting")
            if isinstance(value, list):
                raise SpecError(
                    f"{where}.{key}",
                    "a list of values varies this setting: make it the [factor] (one per file)",
                )
            changes[KNOBS[key].attr] = KNOBS[key].parse(f"{where}.{key}", value)
        base = base if base is not None else cls()  # type: ignore[assignment]
        try:
            return replace(base, **changes)  # type: ignore[type-var]
        except SpecError as err:
            raise SpecError(f"{where}.{err.field}", err.reason) from None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "settings") -> Settings:
        """Typed values by attribute; every field must be there and no other."""
        known = by_attr()
        for name in data:
            if name not in known:
                raise SpecError(f"{where}.{name}", "unknown setting")
        missing = [a for a in known if a not in data]
        if missing:
            raise SpecError(f"{where}.{missing[0]}", "missing")
        try:
            return cls(**{a: (dict(v) if isinstance(v, Mapping) else v) for a, v in data.items()})
        except SpecError as err:
            raise SpecError(f"{where}.{err.field}", err.reason) from None

    @classmethod
    def from_stored(cls, data: Mapping[str, Any], where: str = "settings") -> Settings:
        """A run's stored settings (run.json): as :meth:`from_dict`, but a setting added
        since the run was made takes its default, which is what the testbed did before the
        setting existed (a run directory stays readable, ``testbed report --recollect``)."""
        return cls.from_dict({**Settings().to_dict(), **data}, where)

    # the document both stacks take

    def document(self) -> dict[str, Any]:
        return {
            "schema": SETTINGS_SCHEMA,
            "schema_version": SETTINGS_SCHEMA_VERSION,
            "settings": self.to_dict(),
        }

    def to_json(self) -> str:
        return json.dumps(self.document(), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_document(cls, doc: Any, where: str = "settings") -> Settings:
        if not isinstance(doc, dict) or doc.get("schema") != SETTINGS_SCHEMA:
            raise SpecError(where, f"not a {SETTINGS_SCHEMA} document")
        require_schema(doc, "schema_version", SETTINGS_SCHEMA_VERSION, f"{where}.schema_version")
        extra = set(doc) - {"schema", "schema_version", "settings"}
        if extra:
            raise SpecError(f"{where}.{sorted(extra)[0]}", "unknown key")
        if not isinstance(doc.get("settings"), dict):
            raise SpecError(f"{where}.settings", "must be an object")
        return cls.from_dict(doc["settings"], where)

    @classmethod
    def load(cls, source: str) -> Settings:
        """A settings document given as JSON text or as the path of a JSON file."""
        text = source
        if not source.lstrip().startswith("{"):
            text = read_regular_text(source, "settings", MAX_SETTINGS_BYTES)
        elif len(source) > MAX_SETTINGS_BYTES:
            raise SpecError("settings", f"above {MAX_SETTINGS_BYTES:,} bytes")
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as err:
            raise SpecError("settings", f"not JSON: {err}") from None
        except RecursionError:
            raise SpecError("settings", "JSON nested too deep") from None
        if not isinstance(doc, dict):
            raise SpecError("settings", f"a JSON {type(doc).__name__}, not an object")
        return cls.from_document(doc)

    def for_end(self, path_rate_bps: float | None) -> Settings:
        """What one end applies: ``pace_at_path_rate`` resolved to that end's sending rate;
        for fec, the configured rate of that end's direction as the cap (unless given)."""
        current: Any = self
        attr = kinds.protocol(current.protocol).path_rate_attr
        if attr is not None and getattr(current, attr) is None and path_rate_bps:
            current = replace(current, **{attr: path_rate_bps})
        if not current.pace_at_path_rate:
            return current  # type: ignore[no-any-return]
        return replace(current, max_pacing_rate_bps=path_rate_bps, pace_at_path_rate=False)  # type: ignore[no-any-return]

    def ignored(self) -> list[str]:
        """The knobs (keys) set away from their default that this run's protocol, workload or
        topology does not apply (their :class:`Scope`): fixed settings meant for the
        experiment's other levels, since the spec stage refuses every other such knob."""
        return [
            item.key
            for item in KNOBS.values()
            if getattr(self, item.attr) != item.default and item.scope.refusal(self) is not None
        ]


def _field_of(item: Knob) -> tuple[str, Any, Any]:
    types = KINDS[item.kind][1]
    annotation: Any = types[0] if len(types) == 1 else types
    if item.optional:
        annotation = f"{annotation} | None"
    if isinstance(item.default, dict):
        return (item.attr, annotation, field(default_factory=lambda d=item.default: dict(d)))
    return (item.attr, annotation, field(default=item.default))


Settings: Any = make_dataclass(
    "Settings",
    [_field_of(item) for item in KNOBS.values()],
    bases=(_SettingsBase,),
    frozen=True,
)
Settings.__module__ = __name__
Settings.__doc__ = "Everything one run needs besides its level name: one field per knob."


def settings_fields() -> tuple[str, ...]:
    return tuple(f.name for f in fields(Settings))


class HasSettings:
    """Base of a process's config (server, client) that carries the run's settings in a
    ``settings`` field beside its own (addresses, files)."""

    @classmethod
    def of(cls, **values: Any) -> Any:
        """A config from flat values: knob attributes (``protocol``, ``cc``...) go to its
        settings, the rest to the config itself."""
        settings, rest = split_fields(values)
        return cls(settings=settings, **rest)

    def check_settings(self) -> None:
        if not isinstance(getattr(self, "settings", None), Settings):
            raise SpecError("settings", "must be a tbcore.settings.Settings")


def split_fields(values: Mapping[str, Any]) -> tuple[Settings, dict[str, Any]]:
    """``values`` by attribute -> (the Settings of the knob attributes, the rest): what a
    process config's ``of(**values)`` constructor routes."""
    names = set(settings_fields())
    settings = Settings(**{k: v for k, v in values.items() if k in names})
    return settings, {k: v for k, v in values.items() if k not in names}


# --- flags of the standalone stacks ----------------------------------------------------------


def add_flags(parser: Any, end: str) -> None:
    """``--settings JSON|FILE`` and one flag per knob applied by ``end`` (server, client)."""
    parser.add_argument(
        "--settings",
        default=None,
        help="the settings document (JSON text or file); the flags below override it",
    )
    for item in KNOBS.values():
        if item.applies not in (end, "both"):
            continue
        dest = f"knob_{item.attr}"
        if item.kind == "bool":
            flag = item.flag if not item.default else f"--no-{item.key.replace('_', '-')}"
            parser.add_argument(flag, dest=dest, action="store_const", const=not item.default,
                                default=None, help=item.how)  # fmt: skip
        else:
            parser.add_argument(item.flag, dest=dest, default=None,
                                help=f"{item.how} ({item.unit or item.kind})")  # fmt: skip


def settings_from_flags(args: Any, scoped: bool = False) -> Settings:
    """The settings of :func:`add_flags`' flags: the document, then each flag given. With
    ``scoped`` (a process that runs one protocol and workload: the client) a flag whose knob
    the resulting protocol, workload or topology does not apply is refused."""
    base = Settings.load(args.settings) if args.settings else Settings()
    changes = {}
    given = []
    for item in KNOBS.values():
        value = getattr(args, f"knob_{item.attr}", None)
        if value is not None:
            changes[item.attr] = value if item.kind == "bool" else item.parse(item.flag[2:], value)
            given.append(item)
    try:
        settings = replace(base, **changes)
    except SpecError as err:
        raise SpecError(err.field.replace("_", "-"), err.reason) from None
    for item in given if scoped else ():
        reason = item.scope.refusal(settings)
        if reason is not None and getattr(settings, item.attr) is not None:
            raise SpecError(item.flag[2:], reason)
    return settings
