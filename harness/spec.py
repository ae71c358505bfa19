"""Experiment files (``experiments/*.toml``) -> a validated, typed :class:`ExperimentSpec`.

One file is one single-factor experiment::

    name = "initcwnd"
    question = "How much of a new connection's request does a larger initial window save?"
    repetitions = 10
    order = "alternate"          # or "shuffle" (seeded, within each block)
    counterbalance = true        # A B, then B A in the next block
    seed = 1
    warmup_runs = 1              # whole blocks run first and flagged warm-up

    [fixed]                      # every setting that does not change
    link = "rtt=200ms,rate=333mbit"
    protocol = "h2"
    connection = "new"
    workload = "asr"

    [factor]                     # exactly one factor
    name = "initcwnd"
    settings = ["initcwnd"]      # the only settings a level may set
    levels = [ { name = "iw10", initcwnd = 10 }, { name = "iw40", initcwnd = 40 } ]

    [quick]                      # what ``--quick`` changes (only these keys)
    repetitions = 2
    warmup_runs = 0
    levels = ["iw10", "iw40"]

A level's ``link`` is a list of overriding link keys applied on top of the fixed link
(``"down.loss=14%"``). A level may also name a ``baseline``: the level it is compared
against (default: the first level), so that one file can hold pairs such as h2-new vs
h2-reused next to h3-new vs h3-reused. Anything else is refused with one line naming the
key: unknown keys, a second factor, a level setting a key outside its factor, two levels
that do not differ, impossible values.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from netem.linkspec import PRESETS, LinkSpec, parse_link
from tbcore.errors import SpecError
from tbcore.units import (
    parse_duration_s,
    parse_rate_bps,
    parse_size_bytes,
)

PROTOCOLS = ("h2", "h3")
CONNECTIONS = ("new", "reused", "0rtt")
WORKLOADS = ("asr", "tts", "retouch", "stream", "result", "multi", "retouch-tiles3")
STREAM_WORKLOADS = ("tts", "stream", "result")
"""What ``multi`` puts on one connection: the audio (whole or streamed), the image result."""
SEND_POLICIES = ("none", "rr", "fifo", "rfc9218")
"""servers.priority: none of the server's own, round robin, arrival order, RFC 9218."""
PRIORITY_SIGNALS = ("header", "update", "none")
CAPTURE_MODES = ("headers", "full", "off")
"""``capture``: the first 128 bytes of each packet, whole packets (decryptable with the
run's key log), or none (true and false mean headers and off)."""
TCP_CCS = ("reno", "cubic", "bbr")
QUIC_CCS = ("reno", "cubic")
ORDERS = ("alternate", "shuffle")

MAX_REPETITIONS = 10_000
"""A sanity cap: more runs than this in one file is a typo, not an experiment."""

MAX_INITCWND_SEGMENTS = 1024
"""Upper end of ``ip route ... initcwnd`` values that make sense (the kernel takes 32 bits)."""

QUIC_MIN_DATAGRAM_BYTES = 1200
"""RFC 9000 section 14: a QUIC endpoint must be able to send 1200-byte datagrams."""

IPV4_UDP_HEADER_BYTES = 28
"""IPv4 (20) + UDP (8) headers: the largest datagram payload is MTU minus this."""

LEVEL_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-_.")


# --- settings: every knob a run can turn ---------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """Everything one run needs besides its level name. Units in the names."""

    link: str = "dc-longhaul-clean"
    """The emulated path: a preset name or link string (netem.linkspec)."""
    protocol: str = "h2"
    """``h2`` (TLS 1.3 over TCP) or ``h3`` (QUIC)."""
    connection: str = "new"
    """``new`` connection per request, one ``reused`` connection, or QUIC ``0rtt``."""
    workload: str = "asr"
    """``asr`` (354,640 B up), ``tts`` (354,640 B down), ``retouch`` (30 MB up, 5 MB down),
    ``stream`` (20 ms chunks)."""
    requests: int = 1
    """Measured requests per run (one client process)."""
    warmup_requests: int = 0
    """Requests made first in the same client process and flagged warm-up (reused arm)."""
    resume: bool = False
    """TLS session resumption on a new TCP connection (needs a warm-up request)."""
    cc: str = "cubic"
    """TCP congestion control of both ends."""
    quic_cc: str = "reno"
    """QUIC congestion control of both ends (aioquic: reno or cubic)."""
    slow_start_after_idle: bool = True
    """net.ipv4.tcp_slow_start_after_idle in both namespaces."""
    initcwnd: int | None = None
    """Initial congestion window in segments (route metric), None for the kernel's 10."""
    initrwnd: int | None = None
    """Initial receive window in segments (route metric), None for the kernel's default."""
    window_clamp_bytes: int | None = None
    """TCP_WINDOW_CLAMP on both ends (a fixed window), None for autotuning."""
    sndbuf_bytes: int | None = None
    rcvbuf_bytes: int | None = None
    max_pacing_rate_bps: float | None = None
    """SO_MAX_PACING_RATE on the server; see ``pace_at_path_rate``."""
    pace_at_path_rate: bool = False
    """Set the server's pacing rate to the rate of the path's down direction."""
    notsent_lowat_bytes: int | None = None
    quickack: bool = False
    """TCP_QUICKACK on the receivers: an ACK for every segment instead of delayed ACKs."""
    max_datagram_size_bytes: int | None = None
    """QUIC max_datagram_size, None for aioquic's 1200."""
    quic_pacing: str = "cwnd"
    """QUIC sender pacing on both ends: ``cwnd`` (aioquic's pacer, cwnd/srtt), ``off``
    (cwnd-limited bursts, as Linux reno/cubic without fq) or a rate such as ``333mbit``."""
    quic_max_data_bytes: int | None = None
    """A fixed QUIC flow-control window, None for aioquic's self-growing windows."""
    h2_window_bytes: int | None = None
    """HTTP/2 flow-control window, None for the server's large default."""
    processing_audio_s: float = 0.030
    processing_image_s: float = 0.300
    timeout_s: float = 60.0
    """Client timeout for the whole run."""
    mss_bytes: int = 1448
    """Segment payload the bound assumes (1500 MTU - 40 IP/TCP - 12 timestamp option)."""
    capture: str = "headers"
    """client.pcap and server.pcap of the link: ``headers`` (ACK timestamps), ``full``
    (whole packets: per-stream arrival of HTTP/2, tshark with the key log) or ``off``."""
    chunks: int = 50
    """Chunks of the ``stream`` workload (alone or in ``multi``)."""
    streams: tuple[str, ...] = ()
    """``multi``: the workloads sent at once on one connection, in request order."""
    send_policy: str = "none"
    """Server send order of a connection's streams: none, rr, fifo or rfc9218."""
    priority_signal: str = "header"
    """How the client signals RFC 9218 priorities: header, update (+ PRIORITY_UPDATE), none."""
    cancel_after_chunks: int | None = None
    """Cancel a streamed response after this many chunks (RST_STREAM / STOP_SENDING)."""
    player_buffer_s: float | None = None
    """Play a streamed response on the client's real-clock player with this buffer."""
    qlog: bool = True
    """Write QUIC qlog (ACK frames) for h3 runs."""
    sysctls: Mapping[str, str] = field(default_factory=dict)
    """Extra sysctls for both namespaces, e.g. ``{"net.ipv4.tcp_sack" = "1"}``."""

    @property
    def link_spec(self) -> LinkSpec:
        return _resolve(self.link)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["sysctls"] = dict(self.sysctls)
        return data


def _resolve(text: str) -> LinkSpec:
    head, _, rest = text.partition(",")
    if head.strip() in PRESETS:
        return parse_link(merge_link(PRESETS[head.strip()], rest))
    return parse_link(text)


def _link_items(text: str) -> list[tuple[str, str]]:
    head, _, rest = text.partition(",")
    if head.strip() in PRESETS:
        text = merge_link(PRESETS[head.strip()], rest)
    items = []
    for part in text.split(","):
        if part.strip():
            key, _, value = part.partition("=")
            items.append((key.strip().lower(), value.strip()))
    return items


def merge_link(base: str, overrides: str) -> str:
    """``base`` with the keys of ``overrides`` replacing its own.

    An unprefixed key replaces the same key of both directions (``loss`` drops ``down.loss``),
    ``rtt`` replaces every ``delay`` and the other way round.
    """
    over = _link_items(overrides) if overrides.strip() else []
    over_keys = {k for k, _ in over}
    over_names = {k.rpartition(".")[2] for k, _ in over}
    kept = []
    for key, value in _link_items(base) if base.strip() else []:
        name = key.rpartition(".")[2]
        prefixed = "." in key
        if key in over_keys:
            continue
        if prefixed and name in over_keys:
            continue  # unprefixed override covers both directions
        if not prefixed and name in over_names and name not in ("rtt", "mtu"):
            # a per-direction override of an unprefixed base key: keep the base for the
            # other direction by splitting it
            for direction in ("up", "down"):
                if f"{direction}.{name}" not in over_keys:
                    kept.append((f"{direction}.{name}", value))
            continue
        if name == "rtt" and over_names & {"delay"}:
            for direction in ("up", "down"):
                if f"{direction}.delay" not in over_keys and "delay" not in over_keys:
                    kept.append((f"{direction}.delay", _half(value)))
            continue
        if name == "delay" and "rtt" in over_keys:
            continue
        kept.append((key, value))
    return ",".join(f"{k}={v}" for k, v in [*kept, *over])


def _half(rtt: str) -> str:
    return f"{parse_duration_s('rtt', rtt) / 2.0 * 1e3:g}ms"


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise SpecError(name, f"must be true or false, got {value!r}")
    return value


def _choice(options: tuple[str, ...]) -> Callable[[str, Any], str]:
    def parse(name: str, value: Any) -> str:
        if value not in options:
            raise SpecError(name, f"must be one of {', '.join(options)}, got {value!r}")
        return value

    return parse


def _int_range(low: int, high: int) -> Callable[[str, Any], int]:
    def parse(name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(name, f"must be a whole number, got {value!r}")
        if not low <= value <= high:
            raise SpecError(name, f"must lie in [{low}, {high}], got {value}")
        return value

    return parse


def _optional(parse: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
    def wrapped(name: str, value: Any) -> Any:
        if value in ("none", "auto", "off"):
            return None
        return parse(name, value)

    return wrapped


def _size(minimum: int) -> Callable[[str, Any], int]:
    def parse(name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise SpecError(name, f"must be a size such as 64kb or 65536, got {value!r}")
        size = parse_size_bytes(name, value)
        if size < minimum:
            raise SpecError(name, f"must be at least {minimum} bytes, got {size}")
        return size

    return parse


def _rate(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, str):
        raise SpecError(name, f"must be a rate such as '333mbit', got {value!r}")
    return parse_rate_bps(name, value)


def _capture(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "headers" if value else "off"
    if value not in CAPTURE_MODES:
        raise SpecError(name, f"must be true, false or one of {', '.join(CAPTURE_MODES)}")
    return value


def _streams(name: str, value: Any) -> tuple[str, ...]:
    """``"result,tts"``: workloads in request order (a string: a list would be a factor)."""
    if not isinstance(value, str) or not value.strip():
        raise SpecError(
            name, f"must be workloads in request order such as 'result,tts', not {value!r}"
        )
    items = tuple(item.strip() for item in value.split(","))
    for item in items:
        if item not in STREAM_WORKLOADS:
            raise SpecError(name, f"{item!r} is not one of {', '.join(STREAM_WORKLOADS)}")
    return items


def _quic_pacing(name: str, value: Any) -> str:
    if value in ("cwnd", "off"):
        return value
    _rate(name, value)
    return value


def _duration(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, str):
        raise SpecError(name, f"must be a duration such as '30ms', got {value!r}")
    return parse_duration_s(name, value)


def _positive_duration(name: str, value: Any) -> float:
    seconds = _duration(name, value)
    if seconds <= 0:
        raise SpecError(name, "must be > 0")
    return seconds


def _link(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise SpecError(name, f"must be a link string or preset, got {value!r}")
    try:
        _resolve(value)
    except SpecError as err:
        raise SpecError(f"{name}.{err.field}", err.reason) from None
    return value


def _sysctls(name: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise SpecError(name, "must be a table of sysctl = value")
    out = {}
    for key, val in value.items():
        if not key.startswith("net.") or "/" in key or ".." in key:
            raise SpecError(f"{name}.{key}", "only net.* sysctls of the namespaces may be set")
        if isinstance(val, bool) or not isinstance(val, (int, str)):
            raise SpecError(f"{name}.{key}", f"must be a number or string, got {val!r}")
        out[key] = str(val)
    return out


SETTING_PARSERS: dict[str, tuple[str, Callable[[str, Any], Any]]] = {
    # file key: (Settings field, parser)
    "link": ("link", _link),
    "protocol": ("protocol", _choice(PROTOCOLS)),
    "connection": ("connection", _choice(CONNECTIONS)),
    "workload": ("workload", _choice(WORKLOADS)),
    "requests": ("requests", _int_range(1, 10_000)),
    "warmup_requests": ("warmup_requests", _int_range(0, 10_000)),
    "resume": ("resume", _bool),
    "cc": ("cc", _choice(TCP_CCS)),
    "quic_cc": ("quic_cc", _choice(QUIC_CCS)),
    "slow_start_after_idle": ("slow_start_after_idle", _bool),
    "initcwnd": ("initcwnd", _optional(_int_range(1, MAX_INITCWND_SEGMENTS))),
    "initrwnd": ("initrwnd", _optional(_int_range(1, MAX_INITCWND_SEGMENTS))),
    "window_clamp": ("window_clamp_bytes", _optional(_size(1024))),
    "sndbuf": ("sndbuf_bytes", _optional(_size(4096))),
    "rcvbuf": ("rcvbuf_bytes", _optional(_size(4096))),
    "max_pacing_rate": ("max_pacing_rate_bps", _optional(_rate)),
    "pace_at_path_rate": ("pace_at_path_rate", _bool),
    "notsent_lowat": ("notsent_lowat_bytes", _optional(_size(1))),
    "quickack": ("quickack", _bool),
    "max_datagram_size": ("max_datagram_size_bytes", _optional(_size(QUIC_MIN_DATAGRAM_BYTES))),
    "quic_max_data": ("quic_max_data_bytes", _optional(_size(1024))),
    "quic_pacing": ("quic_pacing", _quic_pacing),
    "h2_window": ("h2_window_bytes", _optional(_size(65535))),
    "processing_audio": ("processing_audio_s", _duration),
    "processing_image": ("processing_image_s", _duration),
    "timeout": ("timeout_s", _positive_duration),
    "mss": ("mss_bytes", _int_range(536, 65495)),
    "capture": ("capture", _capture),
    "chunks": ("chunks", _int_range(1, 30_000)),
    "streams": ("streams", _streams),
    "send_policy": ("send_policy", _choice(SEND_POLICIES)),
    "priority_signal": ("priority_signal", _choice(PRIORITY_SIGNALS)),
    "cancel_after": ("cancel_after_chunks", _optional(_int_range(1, 29_999))),
    "player_buffer": ("player_buffer_s", _optional(_duration)),
    "qlog": ("qlog", _bool),
    "sysctls": ("sysctls", _sysctls),
}
"""The keys of ``[fixed]`` and of a level, with their parsers."""


def parse_settings(
    table: Mapping[str, Any], where: str, base: Settings | None = None
) -> tuple[Settings, set[str]]:
    """Apply ``table``'s keys to ``base``; returns the settings and the keys given."""
    base = base or Settings()
    changes: dict[str, Any] = {}
    for key, value in table.items():
        if key not in SETTING_PARSERS:
            raise SpecError(f"{where}.{key}", "unknown setting")
        attr, parse = SETTING_PARSERS[key]
        if isinstance(value, list) and key != "sysctls":
            raise SpecError(
                f"{where}.{key}",
                "a list of values varies this setting: make it the [factor] (one per file)",
            )
        changes[attr] = parse(f"{where}.{key}", value)
    return replace(base, **changes), set(table)


def check_consistent(settings: Settings, where: str) -> None:
    """Combinations that cannot be run, named by the key that makes them impossible."""
    spec = settings.link_spec
    if settings.connection == "0rtt" and settings.protocol != "h3":
        raise SpecError(f"{where}.connection", "0rtt needs protocol h3 (TLS over TCP has none)")
    if settings.connection == "0rtt" and settings.warmup_requests < 1:
        raise SpecError(
            f"{where}.warmup_requests", "0rtt needs >= 1 warm-up request for a session ticket"
        )
    if settings.resume and settings.warmup_requests < 1:
        raise SpecError(f"{where}.warmup_requests", "resume needs >= 1 warm-up request")
    if settings.pace_at_path_rate and settings.max_pacing_rate_bps is not None:
        raise SpecError(f"{where}.pace_at_path_rate", "give max_pacing_rate or this, not both")
    if settings.pace_at_path_rate and spec.down.rate_bps is None:
        raise SpecError(f"{where}.pace_at_path_rate", "the link has no down rate to pace at")
    if settings.max_datagram_size_bytes is not None:
        largest = spec.mtu_bytes - IPV4_UDP_HEADER_BYTES
        if settings.max_datagram_size_bytes > largest:
            raise SpecError(
                f"{where}.max_datagram_size",
                f"{settings.max_datagram_size_bytes} exceeds the path MTU allows ({largest})",
            )
    if settings.workload == "multi" and not settings.streams:
        raise SpecError(f"{where}.streams", "workload multi needs streams = [...]")
    if settings.workload != "multi" and settings.streams:
        raise SpecError(f"{where}.streams", "only workload multi takes streams")
    if settings.cancel_after_chunks is not None and settings.cancel_after_chunks >= settings.chunks:
        raise SpecError(f"{where}.cancel_after", f"must be below chunks ({settings.chunks})")
    if settings.mss_bytes > spec.mtu_bytes - 40:
        raise SpecError(f"{where}.mss", f"exceeds MTU {spec.mtu_bytes} - 40 header bytes")


# --- the experiment --------------------------------------------------------------------------


@dataclass(frozen=True)
class Level:
    """One arm of the factor: its name, what it sets, and the full settings of its runs."""

    name: str
    overrides: Mapping[str, Any]
    """The keys this level set in the file, as written."""
    settings: Settings
    baseline: str
    """The level this one is compared against (itself for the first level)."""


@dataclass(frozen=True)
class Quick:
    repetitions: int = 2
    warmup_runs: int = 0
    levels: tuple[str, ...] | None = None
    requests: int | None = None
    fixed: Mapping[str, Any] = field(default_factory=dict)
    """Fixed settings the short form changes (never the factor's own settings), e.g. a
    smaller workload or a shorter path so that the quick campaign stays short."""


@dataclass(frozen=True)
class ExperimentSpec:
    name: str
    question: str
    factor: str
    factor_settings: tuple[str, ...]
    levels: tuple[Level, ...]
    fixed: Settings
    repetitions: int = 10
    order: str = "alternate"
    counterbalance: bool = True
    seed: int = 1
    warmup_runs: int = 0
    quick: Quick = field(default_factory=Quick)
    source: str = ""
    """The file as given (kept verbatim in the manifest)."""
    path: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The parsed TOML document (for the quick form's re-parse)."""

    def level(self, name: str) -> Level:
        for level in self.levels:
            if level.name == name:
                return level
        raise SpecError("level", f"{name!r} is not a level of {self.name}")

    @property
    def level_names(self) -> tuple[str, ...]:
        return tuple(level.name for level in self.levels)

    def quick_form(self) -> ExperimentSpec:
        """The short form ``--quick`` runs: fewer repetitions, maybe fewer levels/requests,
        maybe other fixed settings."""
        if self.quick.fixed:
            data = {k: v for k, v in self.raw.items() if k != "quick"}
            data["fixed"] = {**data.get("fixed", {}), **self.quick.fixed}
            data["quick"] = {k: v for k, v in self.raw.get("quick", {}).items() if k != "fixed"}
            base = parse_experiment(data, source=self.source, path=self.path)
            return base.quick_form()
        levels = self.levels
        if self.quick.levels is not None:
            levels = tuple(self.level(name) for name in self.quick.levels)
        if self.quick.requests is not None:
            levels = tuple(
                replace(lv, settings=replace(lv.settings, requests=self.quick.requests))
                for lv in levels
            )
        names = {lv.name for lv in levels}
        levels = tuple(
            lv if lv.baseline in names else replace(lv, baseline=levels[0].name) for lv in levels
        )
        return replace(
            self,
            levels=levels,
            repetitions=self.quick.repetitions,
            warmup_runs=self.quick.warmup_runs,
        )

    def with_repetitions(self, repetitions: int) -> ExperimentSpec:
        _int_range(1, MAX_REPETITIONS)("repetitions", repetitions)
        return replace(self, repetitions=repetitions)

    def resolved(self) -> dict[str, Any]:
        """Everything as the runs will see it (for the manifest)."""
        return {
            "name": self.name,
            "question": self.question,
            "factor": self.factor,
            "factor_settings": list(self.factor_settings),
            "repetitions": self.repetitions,
            "order": self.order,
            "counterbalance": self.counterbalance,
            "seed": self.seed,
            "warmup_runs": self.warmup_runs,
            "fixed": self.fixed.to_dict(),
            "levels": [
                {
                    "name": lv.name,
                    "baseline": lv.baseline,
                    "overrides": dict(lv.overrides),
                    "settings": lv.settings.to_dict(),
                    "link_resolved": str(lv.settings.link_spec),
                }
                for lv in self.levels
            ],
        }


TOP_KEYS = {
    "name",
    "question",
    "repetitions",
    "order",
    "counterbalance",
    "seed",
    "warmup_runs",
    "fixed",
    "factor",
    "quick",
}
FACTOR_KEYS = {"name", "settings", "levels"}
QUICK_KEYS = {"repetitions", "warmup_runs", "levels", "requests", "fixed"}


def parse_experiment(data: Mapping[str, Any], source: str = "", path: str = "") -> ExperimentSpec:
    """Validate a parsed TOML document. Raises :class:`SpecError` naming the first bad key."""
    for key in data:
        if key not in TOP_KEYS:
            if key in ("factors", "factor2") or (key.startswith("factor") and key != "factor"):
                raise SpecError(key, "one factor per experiment: split the file")
            raise SpecError(key, f"unknown key (known: {', '.join(sorted(TOP_KEYS))})")
    name = data.get("name")
    if not isinstance(name, str) or not name or not set(name) <= LEVEL_NAME_CHARS:
        raise SpecError("name", f"must be a short lowercase name, got {name!r}")
    question = data.get("question")
    if not isinstance(question, str) or not question.strip():
        raise SpecError("question", "every experiment states the question it answers")
    repetitions = _int_range(1, MAX_REPETITIONS)("repetitions", data.get("repetitions", 10))
    order = _choice(ORDERS)("order", data.get("order", "alternate"))
    counterbalance = _bool("counterbalance", data.get("counterbalance", True))
    seed = _int_range(0, 2**63 - 1)("seed", data.get("seed", 1))
    warmup_runs = _int_range(0, 100)("warmup_runs", data.get("warmup_runs", 0))

    fixed_table = data.get("fixed", {})
    if not isinstance(fixed_table, dict):
        raise SpecError("fixed", "must be a table of settings")
    fixed, _ = parse_settings(fixed_table, "fixed")

    factor = data.get("factor")
    if isinstance(factor, list):
        raise SpecError("factor", "one factor per experiment ([[factor]] gives several)")
    if not isinstance(factor, dict):
        raise SpecError("factor", "missing: an experiment varies exactly one factor")
    for key in factor:
        if key not in FACTOR_KEYS:
            raise SpecError(f"factor.{key}", f"unknown key (known: {', '.join(FACTOR_KEYS)})")
    factor_name = factor.get("name")
    if not isinstance(factor_name, str) or not factor_name:
        raise SpecError("factor.name", "must name the factor")
    own = factor.get("settings", [factor_name])
    if (
        not isinstance(own, list)
        or not own
        or not all(isinstance(s, str) for s in own)
        or len(set(own)) != len(own)
    ):
        raise SpecError("factor.settings", "must be a non-empty list of distinct setting names")
    for key in own:
        if key not in SETTING_PARSERS:
            raise SpecError(f"factor.settings.{key}", "unknown setting")
    raw_levels = factor.get("levels")
    if not isinstance(raw_levels, list) or len(raw_levels) < 2:
        raise SpecError("factor.levels", "needs at least two levels to compare")
    levels: list[Level] = []
    seen_settings: dict[str, str] = {}
    for index, raw in enumerate(raw_levels):
        where = f"factor.levels[{index}]"
        if not isinstance(raw, dict):
            raise SpecError(where, "must be a table with a name and the factor's settings")
        level_name = raw.get("name")
        if (
            not isinstance(level_name, str)
            or not level_name
            or not set(level_name) <= LEVEL_NAME_CHARS
        ):
            raise SpecError(f"{where}.name", f"must be a short lowercase name, got {level_name!r}")
        if level_name in {lv.name for lv in levels}:
            raise SpecError(f"{where}.name", f"{level_name!r} given twice")
        where = f"factor.levels.{level_name}"
        table = {k: v for k, v in raw.items() if k not in ("name", "baseline")}
        for key in table:
            if key not in SETTING_PARSERS:
                raise SpecError(f"{where}.{key}", "unknown setting")
            if key not in own:
                raise SpecError(
                    f"{where}.{key}",
                    f"not a setting of factor {factor_name!r} ({', '.join(own)}): "
                    "a level may change only its factor, so this would vary two things",
                )
        if "link" in table:
            if not isinstance(table["link"], str):
                raise SpecError(f"{where}.link", "must be a string of overriding link keys")
            merged = merge_link(fixed.link, table["link"])
            settings, _ = parse_settings({**table, "link": merged}, where, fixed)
        else:
            settings, _ = parse_settings(table, where, fixed)
        check_consistent(settings, where)
        key = repr(sorted(settings.to_dict().items()))
        if key in seen_settings:
            raise SpecError(
                f"{where}", f"runs exactly like level {seen_settings[key]!r}: nothing varies"
            )
        seen_settings[key] = level_name
        baseline = raw.get("baseline", levels[0].name if levels else level_name)
        if not isinstance(baseline, str) or (
            baseline != level_name and baseline not in {lv.name for lv in levels}
        ):
            raise SpecError(f"{where}.baseline", f"{baseline!r} is not an earlier level")
        levels.append(Level(level_name, dict(table), settings, baseline))

    quick_table = data.get("quick", {})
    if not isinstance(quick_table, dict):
        raise SpecError("quick", "must be a table")
    for key in quick_table:
        if key not in QUICK_KEYS:
            raise SpecError(f"quick.{key}", f"unknown key (known: {', '.join(sorted(QUICK_KEYS))})")
    quick_levels = quick_table.get("levels")
    if quick_levels is not None:
        names = [lv.name for lv in levels]
        if not isinstance(quick_levels, list) or len(quick_levels) < 2:
            raise SpecError("quick.levels", "must list at least two level names")
        for lv in quick_levels:
            if lv not in names:
                raise SpecError("quick.levels", f"{lv!r} is not a level")
        quick_levels = tuple(quick_levels)
    quick_requests = quick_table.get("requests")
    if quick_requests is not None:
        quick_requests = _int_range(1, 10_000)("quick.requests", quick_requests)
    quick_fixed = quick_table.get("fixed", {})
    if not isinstance(quick_fixed, dict):
        raise SpecError("quick.fixed", "must be a table of settings")
    for key in quick_fixed:
        if key in own:
            raise SpecError(
                f"quick.fixed.{key}", f"is a setting of factor {factor_name!r}: levels set it"
            )
    quick_settings, _ = parse_settings(quick_fixed, "quick.fixed", fixed)
    check_consistent(quick_settings, "quick.fixed")
    quick = Quick(
        repetitions=_int_range(1, MAX_REPETITIONS)(
            "quick.repetitions", quick_table.get("repetitions", min(2, repetitions))
        ),
        warmup_runs=_int_range(0, 100)("quick.warmup_runs", quick_table.get("warmup_runs", 0)),
        levels=quick_levels,
        requests=quick_requests,
        fixed=dict(quick_fixed),
    )
    return ExperimentSpec(
        name=name,
        question=question.strip(),
        factor=factor_name,
        factor_settings=tuple(own),
        levels=tuple(levels),
        fixed=fixed,
        repetitions=repetitions,
        order=order,
        counterbalance=counterbalance,
        seed=seed,
        warmup_runs=warmup_runs,
        quick=quick,
        source=source,
        path=path,
        raw=dict(data),
    )


def loads(text: str, path: str = "") -> ExperimentSpec:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise SpecError(path or "experiment", f"not valid TOML: {err}") from None
    return parse_experiment(data, source=text, path=path)


def load(path: str | Path) -> ExperimentSpec:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise SpecError("experiment", f"{path}: {err.strerror}") from None
    return loads(text, str(path))
